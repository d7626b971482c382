"""Estimation specs: a user's own system, data and estimator in one TOML file (``twinfer estimate``).

A spec names a library model and its known parameters, where the data come from (a CSV file with a
column mapping, or a simulation of the model itself, which also gives the truth), the unknown
parameters with their priors, and the estimator: central (one filter or smoother on the whole model) or
distributed (the model cut into subsystems by :meth:`twinfer.infer.graph.Graph.from_model`). Example::

    name = "frame"

    [model]                       # a twinfer.models.Chain
    kind = "chain"
    mass = [500.0, 500.0, 500.0, 500.0]
    stiffness = 5e4               # one value for every connection, or one per connection
    damping = 300.0
    forced_dofs = [4]
    outputs = ["a1", "a3"]

    [data]                        # or [simulate]
    file = "frame.csv"            # relative to the spec
    time = "t"
    inputs = ["f4"]               # one column per forced DOF, in the model's order
    outputs = ["acc1", "acc3"]    # one column per model output, in the model's order

    [estimator]
    kind = "distributed"          # or "central"
    partition = [[1, 2], [3, 4]]
    noise_sd = 0.05
    state_sd = 1e-3

    [unknown]
    k4 = [2.5e4, 5e3, 0.0]        # initial value, prior sd, random-walk sd per step

:func:`load_spec` validates a spec (every error names its key, what it expects and what it received);
:func:`run_spec` runs it and returns the :class:`~twinfer.infer.Estimate`, the dataset and the run's
metrics, arrays and figures for :func:`twinfer.report.write_run`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pydantic

__all__ = ["Spec", "SpecError", "load_spec", "run_spec"]


class SpecError(ValueError):
    """A spec that cannot be read or does not validate; the message names each offending key."""


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


Values = float | list[float]


class ChainModel(_Strict):
    """A :class:`twinfer.models.Chain` (masses [kg], stiffnesses [N/m], dampings [N s/m])."""

    kind: Literal["chain"]
    mass: Values
    stiffness: Values
    damping: Values
    cubic_stiffness: Values | None = None
    vdp_damping: Values | None = None
    forced_dofs: list[int] | None = None
    outputs: list[str] = pydantic.Field(min_length=1)


class GridModel(_Strict):
    """A power grid as a Kuramoto network (the ``grid`` case).

    ``network``: a network pandapower ships, by name, or a pandapower JSON / MATPOWER ``.m`` file
    (relative to the spec); ``s_max`` the largest cluster; ``damping`` the damping d of every bus (one
    value or one per bus), needed with measured ``[data]`` (a simulation draws it, Table S4).
    """

    kind: Literal["grid"]
    network: str
    s_max: int = pydantic.Field(default=5, ge=1, le=10)
    damping: Values | None = None


class CsvData(_Strict):
    """Measured data in a file: the columns that hold time, the inputs and the outputs.

    CSV, Parquet or netCDF, chosen by the file's suffix (:func:`twinfer.data.from_table`).
    """

    file: Path
    time: str
    inputs: list[str] = []
    outputs: list[str] = []
    states: list[str] | None = None


class Simulation(_Strict):
    """Data simulated from the model itself, so the truth is known.

    A band-limited force on each forced DOF (white noise of ``force_sd`` through a 4th-order Butterworth
    low-pass at ``force_band`` of the Nyquist frequency), measured with noise of ``noise_sd`` per output.
    """

    duration: float = pydantic.Field(gt=0)
    dt: float = pydantic.Field(gt=0)
    noise_sd: Values
    force_sd: float = pydantic.Field(default=1.0, ge=0)
    force_band: float = pydantic.Field(default=0.05, gt=0, lt=1)
    seed: int = 0


class Estimator(_Strict):
    """The estimator and its noise levels: standard deviations, as in ``run_filter``."""

    kind: Literal["central", "distributed"] = "central"
    estimator: Literal["ukf", "ekf", "kf"] = "ukf"
    integrator: Literal["rk4", "euler", "exact"] = "rk4"
    smoother: bool = False
    partition: list[list[int]] | Literal["auto"] | None = None
    messages: Literal["probabilistic", "deterministic"] = "probabilistic"
    rule: Literal["split", "shared", "paper"] = "split"
    noise_sd: Values | None = None
    state_sd: Values = 1e-3
    process_sd: Values = 1e-6
    x0: Values = 0.0

    @pydantic.model_validator(mode="after")
    def _partition_for_distributed(self) -> Estimator:
        if self.kind == "central" and self.partition:
            raise ValueError("a partition is only for kind = 'distributed'")
        if self.kind == "distributed" and self.smoother:
            raise ValueError("smoother = true is only for kind = 'central'")
        return self


class Spec(_Strict):
    """A validated spec (see the module docstring)."""

    name: str = pydantic.Field(default="estimate", pattern=r"^[A-Za-z0-9_.-]+$")
    model: ChainModel | GridModel = pydantic.Field(discriminator="kind")
    data: CsvData | None = None
    simulate: Simulation | None = None
    estimator: Estimator = Estimator()
    unknown: dict[str, tuple[float, float, float]] = {}

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> Spec:
        if (self.data is None) == (self.simulate is None):
            raise ValueError("give exactly one of [data] and [simulate]")
        if isinstance(self.model, GridModel):
            if (self.data is not None) != (self.model.damping is not None):
                raise ValueError(
                    "model.damping: expected with measured [data] (the buses' damping d) and only then "
                    f"(a [simulate] section draws it); received damping={self.model.damping}"
                )
            if self.data is not None and (self.data.inputs or self.data.outputs or self.data.states):
                raise ValueError(
                    "data: a grid's columns are found by name (theta<bus>, omega<bus>, buses from 1); "
                    "expected no inputs, outputs or states lists"
                )
            if self.unknown or self.estimator.partition:
                raise ValueError(
                    "a grid takes no [unknown] and no partition (its clusters are found by s_max)"
                )
        elif self.estimator.kind == "distributed" and not self.estimator.partition:
            raise ValueError(
                "estimator.partition: a distributed estimator of a chain needs a partition, e.g. "
                '[[1, 2], [3, 4]] or "auto" (two masses each, every subsystem measured); received none'
            )
        if self.data is not None and self.estimator.noise_sd is None:
            raise ValueError("estimator.noise_sd: the measurement noise sd is needed with measured [data]")
        return self


def load_spec(path: str | Path) -> tuple[Spec, Path]:
    """Read and validate a spec file; returns the spec and the folder relative paths start from.

    Raises:
        SpecError: the file cannot be read or is not TOML, or a value does not validate (each key named
            with what it expects and what it received).

    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise SpecError(f"spec {path}: could not read the file ({exc}).") from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"spec {path}: expected TOML text (UTF-8); received bytes that are not ({exc.reason})."
        ) from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"spec {path}: could not read a TOML table ({exc}).") from None
    try:
        return Spec.model_validate(values), path.resolve().parent
    except pydantic.ValidationError as exc:
        lines = []
        for item in exc.errors():
            key = ".".join(str(p) for p in item["loc"]) or "(spec)"
            if item["type"] == "extra_forbidden":
                lines.append(f"unknown key {key!r}")
            elif item["type"] == "union_tag_invalid":  # the model kind
                ctx = item.get("ctx", {})
                lines.append(
                    f"'{key}.kind': expected one of {ctx.get('expected_tags')}; received {ctx.get('tag')!r}"
                )
            else:
                lines.append(f"{key!r}: {item['msg']}; received {item.get('input')!r}")
        raise SpecError(f"spec {path}:\n  " + "\n  ".join(lines)) from None


def _chain(spec: Spec) -> Any:
    from twinfer.models import Chain

    m = spec.model
    assert isinstance(m, ChainModel)
    try:
        return Chain(
            m.mass,
            m.stiffness,
            m.damping,
            cubic_stiffness=m.cubic_stiffness,
            vdp_damping=m.vdp_damping,
            forced_dofs=m.forced_dofs,
            outputs=m.outputs,
        )
    except ValueError as exc:
        raise SpecError(f"spec model: {exc}") from None


def _dataset(spec: Spec, chain: Any, base: Path) -> Any:
    from twinfer.data import from_table

    if spec.data is not None:
        d = spec.data
        n_in = len(chain.forced_dofs)
        if len(d.inputs) != n_in or len(d.outputs) != len(chain.outputs):
            raise SpecError(
                f"spec data: expected {n_in} input columns (one per forced DOF {list(chain.forced_dofs)}) "
                f"and {len(chain.outputs)} output columns (for {list(chain.outputs)}); received inputs "
                f"{d.inputs} and outputs {d.outputs}."
            )
        file = d.file if d.file.is_absolute() else base / d.file
        try:
            return from_table(file, d.time, d.inputs or None, d.outputs, states=d.states)
        except (OSError, ValueError) as exc:
            raise SpecError(f"spec data.file {file}: {exc}") from None
    import jax
    from scipy.signal import butter, lfilter

    from twinfer.sim import simulate_dataset

    s = spec.simulate
    assert s is not None
    n = int(round(s.duration / s.dt))
    rng = np.random.default_rng(s.seed)
    coeffs = butter(4, s.force_band)
    assert coeffs is not None
    b, a = coeffs[0], coeffs[1]
    forces = lfilter(b, a, rng.normal(size=(n + 1, len(chain.forced_dofs))) * s.force_sd, axis=0)
    return simulate_dataset(chain, forces, s.dt, s.noise_sd, jax.random.key(s.seed))


def _step(data: Any) -> float:
    dts = np.diff(np.asarray(data.times))
    if dts.size == 0 or not np.allclose(dts, dts[0], rtol=1e-6, atol=0.0):
        raise SpecError("spec data: expected equally spaced times (one step length dt).")
    return float(dts[0])


def run_spec(spec: Spec, base: str | Path = ".") -> tuple[Any, Any, Any, Any]:
    """Run a spec: ``(estimate, dataset, artifacts, figures)``.

    ``artifacts`` (:class:`twinfer.report.RunArtifacts`) holds the metrics: the log-likelihood, the NIS
    of a central filter, each unknown's final mean, sd and 95 % interval, and, where the truth is known
    (a simulation, or truth columns in the data), the state RMSE and 95 % coverage and each unknown's
    error and whether its interval holds the truth. ``figures`` is a function making the figures.

    Raises:
        SpecError: for a spec that does not fit its model or data, naming the key.
        ValueError: from the estimator, naming the argument (e.g. an unknown parameter name).

    """
    from twinfer import metrics
    from twinfer.infer.filters import run_filter, smooth
    from twinfer.infer.graph import Graph, estimate
    from twinfer.report import RunArtifacts

    if isinstance(spec.model, GridModel):
        if spec.data is not None:
            return _run_grid_data(spec, spec.model, Path(base))
        return _run_grid(spec, spec.model, Path(base))
    chain = _chain(spec)
    data = _dataset(spec, chain, Path(base))
    dt = _step(data)
    e = spec.estimator
    noise_sd = e.noise_sd if e.noise_sd is not None else spec.simulate.noise_sd  # type: ignore[union-attr]
    options: dict[str, Any] = dict(
        noise_sd=noise_sd, state_sd=e.state_sd, process_sd=e.process_sd, x0=e.x0, unknown=spec.unknown or None
    )
    if e.kind == "central":
        fn = smooth if e.smoother else run_filter
        est = fn(chain, data, estimator=e.estimator, integrator=e.integrator, **options)
    else:
        graph = Graph.from_model(
            chain,
            e.partition,
            dt=dt,
            integrator=e.integrator,
            estimator=e.estimator,
            messages=e.messages,
            rule=e.rule,
            **options,
        )
        est = estimate(graph, data)
    out: dict[str, float] = {"loglik": float(est.loglik)}
    if est.nis is not None:
        out["nis"] = float(est.nis)
    truth_params = dict(data.truth_params or {}) if spec.simulate is not None else {}
    for name in est.parameters:
        mean, sd = (float(np.asarray(v)[-1]) for v in est.series(name))
        low, high = est.interval(name)
        out |= {
            f"param.{name}": mean,
            f"param.{name}_sd": sd,
            f"param.{name}_low": low,
            f"param.{name}_high": high,
        }
        if name in truth_params:
            true = float(truth_params[name])
            out[f"param.{name}_err_pct"] = 100.0 * abs(mean - true) / abs(true)
            out[f"param.{name}_covered"] = float(low <= true <= high)
    arrays: dict[str, Any] = {
        "times": np.asarray(est.times),
        "means": np.asarray(est.means),
        "stds": np.asarray(est.stds),
    }
    n = chain.n_state
    truth = None if data.truth_states is None else np.asarray(data.truth_states)
    if truth is not None:
        mean, sd = np.asarray(est.means)[:, :n], np.asarray(est.stds)[:, :n]
        out["state.rmse"] = float(metrics.rmse(mean, truth))
        out["state.coverage95"] = float(metrics.coverage(mean, sd, truth, 0.95))
        arrays["truth_states"] = truth
    artifacts = RunArtifacts(
        out, arrays, notes=(f"{e.kind} {e.estimator}, {len(data.times) - 1} steps of {dt:g} s",)
    )
    return est, data, artifacts, lambda: _figures(est, truth, n)


def _run_grid(spec: Spec, model: GridModel, base: Path) -> tuple[Any, Any, Any, Any]:
    """A grid spec through the ``grid`` case: its metrics, arrays and figures, and the Estimate.

    The Estimate holds ``theta``, ``omega`` and ``Omega`` per bus (``Omega``, the natural frequency, as a
    parameter).
    """
    from twinfer.experiments import ConfigError, get_case, no_progress, resolve_config
    from twinfer.infer import Estimate

    sim, e = spec.simulate, spec.estimator
    assert sim is not None
    network = model.network
    if network.endswith((".json", ".m")) and not Path(network).is_absolute():
        network = str(base / network)
    if np.ndim(sim.noise_sd) != 0:
        raise SpecError(f"spec simulate.noise_sd: expected one value for a grid; received {sim.noise_sd}.")
    case = get_case("grid")
    values = {
        "case": network,
        "s_max": model.s_max,
        "steps": int(round(sim.duration / sim.dt)),
        "dt": sim.dt,
        "sigma": float(sim.noise_sd),  # type: ignore[arg-type]
        "seed": sim.seed,
        "central": "yes" if e.kind == "central" else "no",
        "messages": "probabilistic" if e.messages == "probabilistic" else "held",
        "wls": False,
        "wnls": False,
    }
    try:
        config = resolve_config(case, sets=values)
    except ConfigError as exc:
        raise SpecError(f"spec model.network / simulate: {exc}") from None
    artifacts = case.run(config, no_progress)
    name = "central" if e.kind == "central" else "distributed"
    mean, std = np.asarray(artifacts.arrays[f"{name}_mean"]), np.asarray(artifacts.arrays[f"{name}_std"])
    steps, buses = mean.shape[:2]
    columns = [f"{q}{b + 1}" for q in ("theta", "omega", "Omega") for b in range(buses)]
    est = Estimate(
        times=sim.dt * np.arange(1, steps + 1),
        means=np.concatenate([mean[:, :, k] for k in range(3)], axis=1),
        stds=np.concatenate([std[:, :, k] for k in range(3)], axis=1),
        covs=None,
        state_names=tuple(columns),
        parameters=tuple(columns[2 * buses :]),
    )
    return est, None, artifacts, lambda: case.figures(artifacts.arrays, config)


def _run_grid_data(spec: Spec, model: GridModel, base: Path) -> tuple[Any, Any, Any, Any]:
    """A grid from measured phases and frequencies: the Kuramoto network of the file's buses, estimated.

    The data file's columns ``theta<b>`` and ``omega<b>`` (buses numbered from 1 in the network's order;
    a missing column is an unmeasured bus, NaN a missing sample) are the measurements; the natural
    frequencies Omega are unknown (prior 0 +- 1, random walk as the grid case's), the damping the
    spec's. Central: one UKF on the whole network; distributed: the clusters of ``s_max`` buses. The
    noise levels other than the measurement's are the grid case's defaults (Table S4).
    """
    from twinfer.data import Dataset, from_table, load_grid, table_columns
    from twinfer.experiments.grid import GridConfig
    from twinfer.infer.clusters import Partition, kuramoto_graph, partition_greedy
    from twinfer.infer.graph import estimate
    from twinfer.models import KuramotoNetwork
    from twinfer.report import RunArtifacts

    d, e = spec.data, spec.estimator
    assert d is not None and model.damping is not None and e.noise_sd is not None
    network = model.network
    if network.endswith((".json", ".m")) and not Path(network).is_absolute():
        network = str(base / network)
    try:
        net = load_grid(network)
    except (OSError, ValueError) as exc:
        raise SpecError(f"spec model.network: {exc}") from None
    n = net.n_bus
    file = d.file if d.file.is_absolute() else base / d.file
    try:
        present = set(table_columns(file))
    except (OSError, ValueError) as exc:
        raise SpecError(f"spec data.file {file}: {exc}") from None
    names = [f"{q}{b + 1}" for q in ("theta", "omega") for b in range(n)]
    measured = [c for c in names if c in present]
    if not measured:
        raise SpecError(
            f"spec data.file {file}: expected columns theta<bus> / omega<bus> for buses 1..{n}; received "
            f"{sorted(present)[:10]}."
        )
    try:
        table = from_table(file, d.time, None, measured)
    except (OSError, ValueError) as exc:
        raise SpecError(f"spec data.file {file}: {exc}") from None
    y = np.full((len(table.times), 2 * n), np.nan)
    y[:, [names.index(c) for c in measured]] = np.asarray(table.observations)
    data = Dataset(table.times, y, mask=~np.isnan(y), output_names=names, metadata={"source": str(file)})
    dt = _step(data)
    if np.ndim(e.noise_sd) != 0 or np.ndim(model.damping) not in (0, 1):
        raise SpecError("spec estimator.noise_sd: expected one value for a grid.")
    damping = np.broadcast_to(np.asarray(model.damping, dtype=np.float64), (n,))
    index, weight = net.neighbours
    central = e.kind == "central"
    if central:
        partition = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
    else:
        partition = partition_greedy(net.coupling, net.gen_buses, model.s_max)
    default = {k: f.default for k, f in GridConfig.model_fields.items()}  # the grid case's noise levels
    x0 = np.stack([np.nan_to_num(y[0, :n]), np.nan_to_num(y[0, n:]), np.zeros(n)], axis=1)
    cluster_graph = kuramoto_graph(
        KuramotoNetwork(index, weight, damping, np.zeros(n)),
        partition,
        dt=dt,
        x0=x0,
        var0=(0.25, 0.25, 1.0),
        q=(
            default["q_theta"],
            default["q_omega"],
            default["q_Omega_central" if central else "q_Omega_distributed"],
        ),
        r=float(e.noise_sd) ** 2,  # type: ignore[arg-type]
        gamma=default["ukf_gamma"],
        messages="probabilistic" if e.messages == "probabilistic" else "held",
    )
    est = estimate(cluster_graph.graph, data)
    omega_sd = np.asarray(est.stds)[-1, 2 * n :]
    out = {
        "network.buses": float(n),
        "data.measured_channels": float(len(measured)),
        "partition.clusters": float(partition.n_clusters),
        "Omega.final_sd_median": float(np.median(omega_sd)),
    }
    arrays = {"times": np.asarray(est.times), "means": np.asarray(est.means), "stds": np.asarray(est.stds)}
    notes = (
        f"{e.kind} UKF on {n} buses ({partition.n_clusters} clusters), "
        f"{len(data.times) - 1} steps of {dt:g} s",
    )
    return est, data, RunArtifacts(out, arrays, notes=notes), lambda: _figures(est, None, 2 * n)


def _figures(est: Any, truth: Any, n: int) -> dict[str, Any]:
    """States (up to 8) and unknowns with their 95 % bands.

    Where the truth is known, each state's error is drawn inside its band: what calibration looks like.
    """
    import matplotlib.pyplot as plt

    t = np.asarray(est.times)
    shown = list(range(min(n, 8)))
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 1.6 * len(shown)), sharex=True, squeeze=False)
    for ax, j in zip(axes[:, 0], shown, strict=True):
        mean, sd = np.asarray(est.means)[:, j], np.asarray(est.stds)[:, j]
        if truth is None:  # the estimate with its band
            ax.fill_between(t, mean - 1.96 * sd, mean + 1.96 * sd, alpha=0.3, label="95 %")
            ax.plot(t, mean, lw=0.8, label="estimate")
            ax.set_ylabel(est.state_names[j])
        else:  # the error against the truth inside the band: what calibration looks like
            ax.fill_between(t, -1.96 * sd, 1.96 * sd, alpha=0.3, label="95 % band")
            ax.plot(t, mean - truth[:, j], lw=0.6, label="estimate - truth")
            ax.set_ylabel(f"{est.state_names[j]} error")
    axes[0, 0].legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("time [s]")
    figs = {"states": fig}
    if est.parameters:
        params = est.parameters[:8]
        fig, axes = plt.subplots(len(params), 1, figsize=(8, 1.8 * len(params)), squeeze=False)
        for ax, name in zip(axes[:, 0], params, strict=True):
            mean, sd = (np.asarray(v) for v in est.series(name))
            ax.fill_between(t, mean - 1.96 * sd, mean + 1.96 * sd, alpha=0.3)
            ax.plot(t, mean, lw=0.8)
            ax.set_ylabel(name)
        axes[-1, 0].set_xlabel("time [s]")
        figs["parameters"] = fig
    return figs
