"""Benchmark ``graph``: compile and run time of a 4-DOF chain's four estimators on the graph engine.

The setting of case ``chain4`` (specs/compositional-inference.md section 3.1; its masses, springs,
dampers, forcing and sensors, written here), built from the library alone: ``central`` (the UKF on the
monolithic model, its own compiled scan) and the distributed ``deterministic``, ``probabilistic`` and
``learned`` Jacobi filters on :meth:`Graph.from_model <twinfer.infer.graph.Graph.from_model>`'s two
segments, which share one compiled scan and differ only in numbers. Each is timed with
:func:`time_jitted`: the first call (trace + compile + run) apart from the median of repeated runs; a
variant that reuses the shared compilation shows a compile time close to its run time.

Benchmark ``chain4-process``: wall time of whole ``twinfer run chain4`` processes, cold and warm.

Benchmark ``chain6``: the paper's T9 on a 6-DOF chain, a distributed UKF pass against graph-diffusion
propagation of its interface defects.

Benchmark ``turbine``: the Pelton unit's five heterogeneous modules against the central UKF
(:func:`~twinfer.infer.graph._turbine.turbine_graph`).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.bench._harness import Progress, register, time_python
from twinfer.data import Dataset, load_elcentro
from twinfer.infer import Distributed, estimate
from twinfer.infer.filters import FilterConsistencyWarning
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.infer.graph._diffusion import diffuse
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._run import compile as compile_engine
from twinfer.infer.graph._run import with_numbers
from twinfer.infer.graph._turbine import TURBINE_DEFAULTS, TURBINE_OUTPUTS, turbine_central, turbine_graph
from twinfer.learn import NARX
from twinfer.models import Chain, PeltonParams, PeltonTurbine
from twinfer.models.chain import spring_damper_force
from twinfer.sim import simulate_dataset
from twinfer.timing import BenchResult, time_jitted, timed

_CHAIN4 = {"mass": 500.0, "stiffness": 5e4, "damping": 300.0, "force_sd": 400.0, "noise_sd": 1e-3, "dt": 1e-3}
"""Case ``chain4``'s chain (eq. S20-S21, [REPO] settings): every DOF forced and measured."""


def _chain4_graph(kind: str, dt: float) -> Graph:
    """The chain4 setting's two segments (masses 1-2 and 3-4, k4 unknown) with ``kind`` messages."""
    c = _CHAIN4
    chain = Chain([c["mass"]] * 4, [c["stiffness"]] * 4, [c["damping"]] * 4, outputs=("a1", "a2", "a3", "a4"))
    return Graph.from_model(
        chain,
        [(1, 2), (3, 4)],
        dt=dt,
        messages=kind,
        rule="paper",
        unknown={"k4": (3e4, 5e4, 1e-9)},
        state_sd=1e-2,
        process_sd=1e-9,
        noise_sd=0.1,
        weights=UnscentedWeights.paper_code(0.0),
        name="chain4",
    )


@register("graph", "a 4-DOF chain's four estimators on the graph engine: compile and run time of each")
def bench_graph(quick: bool, progress: Progress) -> dict[str, float]:
    """Compile and median run time of central, deterministic, probabilistic and learned estimators."""
    c = _CHAIN4
    steps = int(round((2.0 if quick else 10.0) / c["dt"]))  # case chain4's --quick and full horizons
    repeats = 3 if quick else 5
    progress(f"simulate the 4-DOF chain ({steps} steps)")
    key_force, key_noise = jax.random.split(jax.random.key(123))
    forces = c["force_sd"] * np.asarray(jax.random.normal(key_force, (steps + 1, 4)))
    chain = Chain([c["mass"]] * 4, [c["stiffness"]] * 4, [c["damping"]] * 4, outputs=("a1", "a2", "a3", "a4"))
    data = simulate_dataset(chain, forces, c["dt"], c["noise_sd"], key_noise, alignment="held")
    us = np.asarray(forces[:-1])
    ys = np.asarray(data.observations[1:])
    masks = np.isfinite(ys)
    deterministic = _chain4_graph("deterministic", c["dt"])
    central = Graph("central", [deterministic.monolithic("central")], state_order=deterministic.state_order)
    comp_c = compile_engine(central)
    comp = compile_engine(deterministic)
    runs = {
        "central": (comp_c, comp_c.numbers),
        "deterministic": (comp, comp.numbers),
        "probabilistic": (comp, with_numbers(comp, _chain4_graph("probabilistic", c["dt"]))),
        "learned": (comp, with_numbers(comp, _chain4_graph("learned", c["dt"]))),
    }
    out: dict[str, float] = {"graph.steps": float(steps)}
    for name, (compiled, numbers) in runs.items():
        progress(f"{name}: compile + {repeats} runs")
        res = time_jitted(compiled.scan, numbers, us, ys, masks, repeats=repeats)
        out[f"graph.{name}.compile_s"] = res.compile_s
        out[f"graph.{name}.run_s"] = res.median_s
    out["graph.all.run_s"] = sum(out[f"graph.{n}.run_s"] for n in runs)
    out["graph.all.compile_s"] = out["graph.central.compile_s"] + out["graph.deterministic.compile_s"]
    return out


@register("chain4-process", "whole `twinfer run chain4` processes: cold (empty compilation cache), warm")
def bench_chain4_process(quick: bool, progress: Progress) -> dict[str, float]:
    """Median wall seconds of a whole ``twinfer run chain4`` process (quick: ``--quick``), cold and warm.

    Each repeat gets a fresh, empty compilation cache (``TWINFER_CACHE_DIR``): its first run is cold
    (imports, tracing, every compilation), the second warm (the compiled programs read from that
    cache), as a user's first and later runs. The processes inherit this one's cores (``--cores``); they
    never import modules from the working folder (:func:`twinfer.programs.twinfer_command`).
    """
    import os
    import statistics
    import subprocess
    import tempfile
    import time

    from twinfer.programs import twinfer_command

    repeats = 1 if quick else 3
    cmd = twinfer_command("run", "chain4")
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    for i in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
            env["TWINFER_CACHE_DIR"] = os.path.join(tmp, "xla")
            for kind in ("cold", "warm"):
                progress(f"chain4 process {i + 1}/{repeats}, {kind}")
                start = time.perf_counter()
                done = subprocess.run(
                    [*cmd, *(["--quick"] if quick else []), "--out", tmp], env=env, capture_output=True
                )
                times[kind].append(time.perf_counter() - start)
                if done.returncode:
                    raise RuntimeError(f"twinfer run chain4 failed: {done.stderr.decode()[-2000:]}")
    out = {f"chain4_process.{kind}_s": statistics.median(v) for kind, v in times.items()}
    return out | {"chain4_process.repeats": float(repeats)}


_CHAIN6 = {"mass": 100.0, "stiffness": 5e4, "damping": 300.0, "dt": 2e-3, "noise_sd": 1e-3}
"""A 6-DOF chain (case ``chain6``'s step and sensors), forced at mass 4 by the El Centro record."""
_LABELS = ("V1", "V3", "V2")  # subsystems: masses 1-2, 3-4 (the forced one), 5-6


def _propagation(means: np.ndarray, method: str) -> dict[str, np.ndarray]:
    """Interface weights (RMS cut forces) and each subsystem's share of V3's defects (S60-S70, S17-S19).

    The two cut forces (masses 2-3 and 4-5) at the estimated states give the weights; V3's own springs
    at the estimates (the stiffness term of mass 3 and of mass 4) are the defects it spreads.
    """
    c = _CHAIN6
    x, v = means[:, :6], means[:, 6:12]
    cuts = np.stack(
        [
            spring_damper_force(c["stiffness"], c["damping"], x[:, i + 1] - x[:, i], v[:, i + 1] - v[:, i])
            for i in (1, 3)
        ],
        axis=1,
    )
    weights = {("V1", "V3"): float(np.sqrt(np.mean(cuts[:, 0] ** 2)))}
    weights[("V3", "V2")] = float(np.sqrt(np.mean(cuts[:, 1] ** 2)))
    defects = c["stiffness"] * (x[:, 2:4] - x[:, 1:3])
    out: dict[str, np.ndarray] = {}
    for i in range(2):
        out |= {f"{n}.{i}": s for n, s in diffuse(_LABELS, weights, "V3", defects[:, i], method).items()}  # type: ignore[arg-type]
    return out


def _timed_pass(graph: Graph, data: Dataset) -> tuple[Any, BenchResult]:
    """One distributed (Jacobi) pass of ``graph`` over ``data``, its compiled scan timed (three runs).

    The estimate's consistency is not this benchmark's: its filter-consistency warning is not raised.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FilterConsistencyWarning)
        return timed(estimate, graph, data, Distributed(), repeats=3)


@register("chain6", "T9: a 6-DOF chain's distributed UKF pass against 1-hop and heat-kernel propagation")
def bench_chain6(quick: bool, progress: Progress) -> dict[str, float]:
    """The paper's T9 (SI section 3.4): a distributed UKF pass against the two propagations, medians.

    One pass over the El Centro record (mass 4 forced, accelerations of masses 2-5 measured, k3, c3, k5,
    c5 unknown) on :meth:`Graph.from_model <twinfer.infer.graph.Graph.from_model>`'s three segments,
    against the 1-hop and heat-kernel envelopes of the interface defects (weights and defects included,
    :func:`_propagation`). The UKF pass is the compiled scan without its compilation
    (:func:`_timed_pass`); each propagation is timed as a plain call after a first one.
    """
    from scipy.signal import resample

    c = _CHAIN6
    chain = Chain(
        [c["mass"]] * 6,
        [c["stiffness"]] * 6,
        [c["damping"]] * 6,
        forced_dofs=(4,),
        outputs=("a2", "a3", "a4", "a5"),
    )
    steps = int(round((4.0 if quick else 50.0) / c["dt"]))  # case chain6's --quick and full records
    progress(f"simulate the 6-DOF chain ({steps} steps)")
    accel = np.asarray(resample(load_elcentro()["a"], int(round(50.0 / c["dt"]))))
    inputs = np.concatenate([500.0 * accel[:steps], [0.0]])[:, None]
    data = simulate_dataset(chain, inputs, c["dt"], c["noise_sd"], jax.random.key(123), alignment="held")
    unknown = {
        p: (0.8 * v, 0.5 * v, 0.0)
        for p, v in (
            ("k3", c["stiffness"]),
            ("c3", c["damping"]),
            ("k5", c["stiffness"]),
            ("c5", c["damping"]),
        )
    }
    graph = Graph.from_model(
        chain,
        [(1, 2), (3, 4), (5, 6)],
        dt=c["dt"],
        unknown=unknown,
        state_sd=1e-2,
        process_sd=1e-6,
        noise_sd=0.03,
        weights=UnscentedWeights.paper_code(0.0),
        name="chain6",
    )
    progress("distributed UKF: compile + 3 runs")
    est, ukf = _timed_pass(graph, data)
    means = np.asarray(est.means)
    out = {
        "chain6.steps": float(steps),
        "chain6.ukf.run_s": ukf.median_s,
        "chain6.ukf.compile_s": ukf.compile_s,
    }
    for method in ("one_hop", "heat"):
        progress(f"{method} propagation: 51 runs")
        _propagation(means, method)
        res = time_python(lambda m=method: _propagation(means, m), 51)
        out[f"chain6.{method}.run_s"] = res.median_s
        out[f"chain6.{method}.speedup"] = ukf.median_s / res.median_s
    return out


@register(
    "turbine", "the Pelton turbine: five heterogeneous subsystems against the central UKF, one pass each"
)
def bench_turbine(quick: bool, progress: Progress) -> dict[str, float]:
    """Run times of the distributed estimators (none, learned, EKF, KF, UKF) and the central UKF, medians.

    The settings are case ``turbine``'s (:data:`~twinfer.infer.graph._turbine.TURBINE_DEFAULTS`; its
    --quick NARX window and record length when ``quick``). The NARX is untrained (initialised from a key,
    its output scaled to the head's nominal value and a spread of 1e-3): its weights do not change what
    a pass computes, only what it predicts. Each pass is the compiled scan without its compilation
    (:func:`_timed_pass`).
    """
    params = PeltonParams()
    settings = dataclasses.replace(TURBINE_DEFAULTS, narx_lags=20) if quick else TURBINE_DEFAULTS
    dt = settings.dt
    steps = int(round((3.0 if quick else 130.0) / dt))
    model = PeltonTurbine(params)
    x0 = np.asarray(model.initial_state(), dtype=np.float64)
    progress(f"simulate the turbine ({steps} steps)")
    sd = np.asarray([settings.omega_noise_sd, settings.q_noise_sd] + [settings.lateral_noise_sd] * 4)
    sim = simulate_dataset(
        model, None, dt, sd, jax.random.key(7), x0=x0, n_steps=steps, truth="rk4", substeps=4
    )
    times = np.asarray(sim.times)
    observations = np.asarray(sim.observations)
    q_measured = observations[:, TURBINE_OUTPUTS.index("q")]
    data = Dataset(
        times,
        observations,
        inputs=np.stack([times, q_measured], axis=1),
        input_names=("t", "q_measured"),
        output_names=TURBINE_OUTPUTS,
    )
    narx = NARX(
        settings.narx_lags,
        2,
        4,
        hidden=16 if quick else 128,
        dropout=0.0,
        key=jax.random.key(11),
        target_mean=jnp.asarray(params.h0),
        target_std=jnp.asarray(1e-3),
    )
    graphs = {
        "distributed": turbine_graph(params, narx, x0, float(q_measured[0]), 1e-3, settings),
        "central": turbine_central(params, x0, settings),
    }
    out = {"turbine.steps": float(steps)}
    for label, graph in graphs.items():
        progress(f"{label}: compile + 3 runs")
        _, seconds = _timed_pass(graph, data)
        out[f"turbine.{label}.run_s"] = seconds.median_s
        out[f"turbine.{label}.compile_s"] = seconds.compile_s
    out["turbine.central_over_distributed"] = out["turbine.central.run_s"] / out["turbine.distributed.run_s"]
    return out
