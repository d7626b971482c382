"""Case ``chain6``: the 6-DOF chain under El Centro, three UKFs with eight unknowns, diffusion envelopes.

Six 500 kg masses (an unknown added mass m* = 100 kg on mass 3), ground springs on masses 1, 2, 4 and 5,
and the El Centro ground acceleration (x 3, resampled to the filters' step, x 500 N) as a force on mass 4:
SI eq. (S51)-(S59) with the authors' script 02 values (the paper gives none), built as a
:class:`~twinfer.models.SpringNetwork` and cut into V1 = masses (1, 2), V3 = (3, 4), V2 = (5, 6) by
:meth:`~twinfer.infer.graph.Graph.from_model`. Accelerometers on masses 2 (V1), 3 and 4 (V3) and 5 (V2).
Each subsystem's UKF estimates its states and unknowns, (k3, c3) in V1, (m*, k6, c6, k*) in V3, (k9, c9)
in V2, all started at 0.7 x the truth; the messages are deterministic (Jacobi). The monolithic UKF of the
same graph is the central reference.

Graph diffusion (S60-S70): the defects of removing k* (``-k* (x3 - x4)`` on mass 3) or m* (``-m* a3``),
computed by :meth:`~twinfer.models.SpringNetwork.parameter_forces` at the distributed estimate with the
terminal parameters, spread over the subsystem graph (weights: the RMS interface forces) by the 1-hop rule and
the heat kernel (:func:`twinfer.infer.graph._diffusion.diffuse`), give envelopes ``x1 +- s_V1 sigma_x1`` and
``x6 +- s_V2 sigma_x6`` around the distributed estimate, without a filter run. Their cost against the UKF pass
is the paper's T9.

The measurements and decisions behind the defaults are in ``docs/design-cases.md``, section ``chain6``.

References:
    Ghorbani & Hackl, SI section 3.4, eq. (S51)-(S70), Figs S5-S7 and the S7 text (T9);
    specs/compositional-inference.md 2.6, 3.4 and 7 item 21.

"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import jax
import numpy as np
import pydantic

from twinfer import timing
from twinfer.experiments._case import Case, CaseConfig, Progress, register
from twinfer.infer import Distributed, estimate
from twinfer.infer.filters import FilterConsistencyWarning
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.infer.graph import Graph
from twinfer.infer.graph._chain_results import (
    defect_shares,
    diffusion_weights,
    envelope_scores,
    score_parameters,
)
from twinfer.infer.graph._variants import central_graph
from twinfer.metrics import band_z
from twinfer.models import SpringNetwork
from twinfer.report import PaperValue, RunArtifacts, at_least, at_most, near, within
from twinfer.report.figures.chains import envelopes_figure, parameter_bands_figure
from twinfer.sim import simulate_dataset

MASSES = ("m1", "m2", ("m3", "mstar"), "m4", "m5", "m6")
"""Mass 3 carries the unknown added mass m* (S53)."""
LINKS = (
    (1, 0, "k1", "c1"),
    (2, 0, "k2", "c2"),
    (1, 2, "k3", "c3"),
    (2, 3, "k4", "c4"),  # interface e13 (V1 - V3)
    (3, 4, ("k5", "kstar"), "c5"),  # [REPO]: k5 in parallel with k*
    (4, 0, "k6", "c6"),
    (4, 5, "k7", "c7"),  # interface e23 (V3 - V2)
    (5, 0, "k8", "c8"),
    (5, 6, "k9", "c9"),
)
"""The links of S51-S59 as ``(i, j, stiffness, damping)``; ``j = 0`` is the ground."""
VALUES: dict[str, float] = {
    **{f"m{i}": 500.0 for i in range(1, 7)},
    "mstar": 100.0,
    **dict(
        zip(
            [f"k{i}" for i in range(1, 10)],
            [5e4, 4e4, 4.5e4, 3e4, 2.5e4, 5.5e4, 3e4, 4.5e4, 4e4],
            strict=True,
        )
    ),
    "kstar": 4e4,
    **dict(
        zip([f"c{i}" for i in range(1, 10)], [300.0, 350, 320, 400, 480, 700, 350, 460, 480], strict=True)
    ),
}
"""The authors' script 02 values (specs 3.4)."""
UNKNOWN = ("k3", "c3", "mstar", "k6", "c6", "kstar", "k9", "c9")
"""The eight unknowns in the paper's order: (k3, c3) in V1, (m*, k6, c6, k*) in V3, (k9, c9) in V2."""
DEFECTS = ("kstar", "mstar")
"""The removed terms whose defects on mass 3 diffuse (S60-S61): the spring k* and the added mass m*."""
PARTITION = (("x1", "x2", "v1", "v2"), ("x3", "x4", "v3", "v4"), ("x5", "x6", "v5", "v6"))
LABELS = ("V1", "V3", "V2")
"""The paper's names of the subsystems S1, S2, S3 of the partition."""
OUTPUTS = ("a2", "a3", "a4", "a5")
REPO_FINAL = dict(zip(UNKNOWN, [44959.0, 334.1, 99.96, 56313.0, 746.0, 40092.0, 40333.0, 489.9], strict=True))
"""[REPO run] terminal estimates (specs 3.4)."""


class Chain6Config(CaseConfig):
    """Configuration of ``chain6``; defaults are the authors' script 02 (specs 3.4)."""

    t_end: pydantic.PositiveFloat = pydantic.Field(50.0, description="Record length [s] (<= 50).")
    dt: pydantic.PositiveFloat = pydantic.Field(2e-3, description="Step of data and filters [s].")
    excitation_scale: pydantic.PositiveFloat = pydantic.Field(
        3.0, description="Factor on the El Centro acceleration."
    )
    force_scale: pydantic.PositiveFloat = pydantic.Field(
        500.0, description="Force per unit of scaled acceleration [N/(m/s^2)] (on mass 4)."
    )
    noise_sd: pydantic.PositiveFloat = pydantic.Field(1e-3, description="Accelerometer noise sd [m/s^2].")
    r_var: pydantic.PositiveFloat = pydantic.Field(1e-3, description="The V1 and V2 filters' R ([REPO]).")
    r_var_v3: pydantic.PositiveFloat = pydantic.Field(1e-2, description="The V3 filter's R ([REPO]).")
    q_var: pydantic.NonNegativeFloat = pydantic.Field(
        3e-9, description="Q per kinematic state, V1 and V2 ([REPO]: 1e-11, overconfident)."
    )
    q_var_v3: pydantic.NonNegativeFloat = pydantic.Field(
        3e-9, description="Q per kinematic state, V3 ([REPO]: 1e-12, overconfident)."
    )
    q_param_var: pydantic.NonNegativeFloat = pydantic.Field(
        1e-11, description="Random-walk variance per step of the V1 and V2 unknowns ([REPO])."
    )
    q_param_var_v3: pydantic.NonNegativeFloat = pydantic.Field(
        1e-12, description="Random-walk variance per step of the V3 unknowns ([REPO])."
    )
    stiffness_prior_var: pydantic.PositiveFloat = pydantic.Field(
        1e8, description="P0 of k3, k6, k*, k9 ([REPO])."
    )
    damping_prior_var: pydantic.PositiveFloat = pydantic.Field(
        1e5, description="P0 of c3, c6, c9 ([REPO]: 1e5 for c3 and c9, 1e3 for c6)."
    )
    mass_prior_var: pydantic.PositiveFloat = pydantic.Field(1e4, description="P0 of m* ([REPO]).")
    state_var: pydantic.PositiveFloat = pydantic.Field(1e-4, description="P0 per state ([REPO]).")
    initial_factor: pydantic.PositiveFloat = pydantic.Field(
        0.7, description="Every unknown starts at this factor times its truth."
    )
    messages: Literal["deterministic", "probabilistic"] = pydantic.Field(
        "deterministic", description="Message kind at both interfaces (the paper: deterministic)."
    )
    rule: Literal["paper", "split"] = pydantic.Field(
        "paper", description="Where the connection is evaluated: the paper's (held) or split."
    )
    central: bool = pydantic.Field(True, description="Also run the monolithic (central) UKF.")
    alpha: pydantic.PositiveFloat = pydantic.Field(0.6, description="1-hop leak (S17-S18).")
    beta: pydantic.PositiveFloat = pydantic.Field(0.9, description="Heat-kernel diffusion time (S19).")
    timing_repeats: int = pydantic.Field(
        1, ge=1, le=1000, description="Timed repeats of the UKF passes after the first (medians)."
    )

    @pydantic.field_validator("t_end")
    @classmethod
    def _record(cls, value: float) -> float:
        if value > 50.0:
            raise ValueError(f"expected at most 50 s (the El Centro record's length); received {value}")
        return value


def build_network() -> SpringNetwork:
    """The 6-DOF chain of S51-S59 with the script 02 values, forced at mass 4, accelerometers 2-5."""
    return SpringNetwork(MASSES, LINKS, VALUES, forced_dofs=[4], outputs=OUTPUTS)


def forcing(config: Chain6Config) -> np.ndarray:
    """The force on mass 4 per step: El Centro x scale, resampled to 50 s / dt samples, x 500 ([REPO])."""
    from scipy.signal import resample

    from twinfer.data import load_elcentro

    n_total = int(round(50.0 / config.dt))
    accel = config.excitation_scale * np.asarray(resample(load_elcentro()["a"], n_total))
    return config.force_scale * accel


def simulate(config: Chain6Config, model: SpringNetwork) -> Any:
    """The record: the network simulated exactly under :func:`forcing` for ``t_end``, measured with noise."""
    steps = int(round(config.t_end / config.dt))
    inputs = np.concatenate([forcing(config)[:steps], [0.0]])[:, None]
    key = jax.random.key(config.seed + 123)
    return simulate_dataset(model, inputs, config.dt, config.noise_sd, key, alignment="held")  # the paper's


def build_graph(config: Chain6Config, model: SpringNetwork) -> Graph:
    """Three UKFs (V1, V3, V2) on the network's own equations, with the [REPO] P0, Q and R."""
    q_sd = np.sqrt([config.q_var] * 4 + [config.q_var_v3] * 4 + [config.q_var] * 4)
    order = [s for part in PARTITION for s in part]
    process = np.asarray([q_sd[order.index(s)] for s in model.state_names])
    held_by_v3 = {"mstar", "k6", "c6", "kstar"}
    prior = {"k": config.stiffness_prior_var, "c": config.damping_prior_var, "m": config.mass_prior_var}
    unknown = {
        name: (
            config.initial_factor * VALUES[name],
            float(np.sqrt(prior[name[0]])),
            float(np.sqrt(config.q_param_var_v3 if name in held_by_v3 else config.q_param_var)),
        )
        for name in UNKNOWN
    }
    r_sd = np.sqrt([config.r_var, config.r_var_v3, config.r_var_v3, config.r_var])
    return Graph.from_model(
        model,
        [list(p) for p in PARTITION],
        dt=config.dt,
        messages=config.messages,
        rule=config.rule,
        unknown=unknown,
        state_sd=float(np.sqrt(config.state_var)),
        process_sd=process,
        noise_sd=r_sd,
        weights=UnscentedWeights.paper_code(0.0),
        name="chain6",
    )


def propagation(
    model: SpringNetwork,
    states: np.ndarray,
    inputs: np.ndarray,
    final: Mapping[str, float],
    method: Literal["one_hop", "heat"],
    config: Chain6Config,
) -> dict[str, Any]:
    """Interface weights, the two defects and their shares at every subsystem (S60-S70), from estimates.

    Everything the paper's timing includes (the graph and the defects) is computed here
    (:func:`~twinfer.infer.graph._chain_results.defect_shares`): the interface forces e13, e23 at the
    estimated states give the weights, the removed terms of k* and m* on mass 3 the defects.
    """
    links = ((2, 3), (4, 5))
    return defect_shares(
        model, states, inputs, UNKNOWN, final, links, DEFECTS, 3, LABELS, method, config.alpha, config.beta
    )


def run(config: Chain6Config, progress: Progress) -> RunArtifacts:
    """Simulate, estimate distributed and central, propagate the defects, score and time everything."""
    from twinfer.bench import time_python

    start = time.perf_counter()
    model = build_network()
    progress("El Centro forcing and the truth", 0, 1)
    data = simulate(config, model)
    steps = data.n_steps - 1  # intervals
    force = np.asarray(data.inputs)[:-1, 0]
    graph = build_graph(config, model)
    runs = {"distributed": graph}
    if config.central:
        runs["central"] = central_graph(graph)
    truth = np.asarray(data.truth_states)
    metrics: dict[str, float] = {}
    arrays: dict[str, Any] = {"t": np.asarray(data.times), "truth": truth, "force": force}
    estimates = {}
    for i, (label, g) in enumerate(runs.items()):
        progress(f"{label} UKF ({steps} steps)", i, len(runs))
        with warnings.catch_warnings():  # the case scores the calibration itself (coverage below)
            warnings.simplefilter("ignore", FilterConsistencyWarning)
            est, seconds = timing.timed(estimate, g, data, Distributed(), repeats=config.timing_repeats)
        estimates[label] = est
        means, stds = np.asarray(est.means), np.asarray(est.stds)
        arrays[f"{label}.means"], arrays[f"{label}.stds"] = means, stds
        metrics[f"{label}.run_s"] = seconds.median_s
        metrics[f"{label}.compile_s"] = seconds.compile_only_s
        score_parameters(label, est, truth, {p: VALUES[p] for p in UNKNOWN}, ("x1", "x6", "v6"), metrics)
    progress("diffusion envelopes", len(runs), len(runs) + 1)
    dist = estimates["distributed"]
    means, stds = arrays["distributed.means"], arrays["distributed.stds"]
    final = {p: float(means[-1, dist.state_names.index(p)]) for p in UNKNOWN}
    states_hat = means[:, :12]
    u_rows = np.asarray(data.inputs)
    results = {}
    for method in ("one_hop", "heat"):
        results[method] = propagation(model, states_hat, u_rows, final, method, config)  # compiles once
        timed = time_python(
            lambda m=method: propagation(model, states_hat, u_rows, final, m, config), repeats=21
        )
        metrics[f"diffusion.{method}.s"] = timed.median_s
        metrics[f"diffusion.{method}.speedup"] = metrics["distributed.run_s"] / timed.median_s
    metrics.update(diffusion_weights(results["heat"], LABELS, "kstar"))
    envelopes, half_widths = envelope_scores(results, dist, truth, {"x1": "V1", "x6": "V2"})
    metrics.update(envelopes)
    arrays.update(half_widths)
    metrics["timing.run_s"] = time.perf_counter() - start
    progress("chain6", 1, 1)
    notes = [
        f"{config.t_end:g} s of El Centro (x {config.excitation_scale:g}, resampled to {config.dt:g} s, "
        f"x {config.force_scale:g} N) on mass 4; accelerometers {', '.join(OUTPUTS)} with noise sd "
        f"{config.noise_sd:g} (the filters' R: {config.r_var:g}, V3 {config.r_var_v3:g}); the truth "
        "simulated exactly (matrix exponential; the authors': semi-implicit Euler).",
        f"Three UKFs (V1, V3, V2), {config.messages} messages, rule '{config.rule}', Jacobi, the paper's "
        f"weights (gamma 0), RK4; every unknown from {config.initial_factor:g} x its truth. The central "
        "UKF is the monolithic model of the same graph (20 states).",
        "Run times are the compiled scans' medians without compilation; the diffusion times include the "
        "preparation (interface weights and defects along the record), as the paper's T9. The paper's "
        "UKF was a Python loop (17.48 s), so its ratios are larger for the same propagation cost.",
        "Terminal parameters beside the authors' own run ([REPO run], specs 3.4); the paper prints none.",
    ]
    for label in runs:
        arrays[f"{label}.names"] = np.asarray(estimates[label].state_names)
    return RunArtifacts(metrics=metrics, arrays=arrays, notes=notes)


def figures(arrays: Mapping[str, Any], config: Chain6Config) -> dict[str, Any]:
    """Fig. S5 (parameters with 95 % bands), S6 (x1, x6 against the truth), S7 (diffusion envelopes)."""
    z = band_z(0.95)  # the 95 % band's half-width in sds
    labels = [lab for lab in ("distributed", "central") if f"{lab}.means" in arrays]
    truth = {p: VALUES[p] for p in UNKNOWN}
    return {
        "parameters": parameter_bands_figure(arrays, labels, truth, z, rows=2, figsize=(14, 6)),
        "envelopes": envelopes_figure(arrays, "distributed", ("x1", "x6"), "kstar", z),
    }


_OTHER_RUN = (
    "another estimate of the same truth (theirs: semi-implicit Euler truth, Q 1e-11, c6's narrow prior): "
    "each within ~7 % of the truth"
)
_SAME_RESPONSE = "computed from another estimate of the same response (RMS interface forces)"
PAPER: dict[str, PaperValue] = {
    **{
        f"distributed.{p}": PaperValue(v, "[REPO run] terminal estimate (specs 3.4)", within(1.1, _OTHER_RUN))
        for p, v in REPO_FINAL.items()
    },
    "distributed.rmse_x6": PaperValue(
        5.46e-4, "[REPO run] full-run RMSE of x6 (specs 3.4)", at_most(2.0, "an error: beating it passes")
    ),
    "distributed.rmse_v6": PaperValue(
        4.02e-3, "[REPO run] full-run RMSE of v6 (specs 3.4)", at_most(2.0, "an error: beating it passes")
    ),
    "distributed.run_s": PaperValue(17.4813, "S7 text / T9: distributed UKF wall time (Python loop)"),
    "diffusion.one_hop.s": PaperValue(1.3264e-3, "S7 text / T9: 1-hop propagation"),
    "diffusion.heat.s": PaperValue(3.2720e-3, "S7 text / T9: heat kernel"),
    "diffusion.one_hop.speedup": PaperValue(
        13180.0,
        "S7 text / T9: ~13,180x faster than the UKF",
        at_least(
            1000.0 / 13180.0,
            "issue #22's acceptance, at least 1000x; the paper's UKF was a Python loop, ours is compiled, "
            "so the same propagation cost gives a smaller ratio",
        ),
    ),
    "diffusion.heat.speedup": PaperValue(
        5343.0,
        "S7 text / T9: ~5,343x faster than the UKF",
        at_least(1000.0 / 5343.0, "issue #22's acceptance, at least 1000x (see the 1-hop speed-up)"),
    ),
    "diffusion.eta13": PaperValue(0.4718, "[REPO run] affinity of e13", near(0.005, _SAME_RESPONSE)),
    "diffusion.eta23": PaperValue(0.5282, "[REPO run] affinity of e23", near(0.005, _SAME_RESPONSE)),
    **{
        f"diffusion.heat_column.{name}": PaperValue(
            value, "[REPO run] H(0.9) column for V3", near(0.003, _SAME_RESPONSE)
        )
        for name, value in (("V1", 0.2361), ("V3", 0.5064), ("V2", 0.2575))
    },
    "sigma_x1": PaperValue(3.31e-5, "[REPO run] terminal V1 sd of x1 (our Q is 300x theirs)"),
    "sigma_x6": PaperValue(5.73e-5, "[REPO run] terminal V2 sd of x6 (our Q is 300x theirs)"),
}


CASE = register(
    Case(
        name="chain6",
        description=(
            "6-DOF chain under El Centro: three UKFs with eight unknown parameters against the central UKF, "
            "and graph-diffusion envelopes (compositional-inference paper, Figs S5-S7)."
        ),
        config_type=Chain6Config,
        run=run,
        figures=figures,
        quick={"t_end": 4.0, "timing_repeats": 1},
        paper=PAPER,
    )
)
