"""Case ``turbine-grid``: three Pelton turbines as nested graphs inside the IEEE 9-bus network.

The compositional-inference paper's hierarchical case (section 3.7, main Fig. 4c; SI S144-S150, Tables
S9-S12, Figs S13-S17). The truth is the 63-state monolithic model :meth:`TurbineGrid.ieee9
<twinfer.models.TurbineGrid.ieee9>` (three 19-state turbines at buses 1-3, first-order Kuramoto angles
at buses 4-9, +20 MW at bus 9 from 5 s to 30 s) integrated by RK4 at a fraction of the estimators' step
and measured per generator (x_G, y_G, x_R, y_R, q, omega; Table S12's noise).

The estimation graph has two levels:

* the outer graph: six first-order Kuramoto bus nodes (4..9, Heun, propagated: estimator ``none``; the
  time input switches the load step) and three nested graphs, one per generator;
* each generator's graph (:class:`~twinfer.infer.graph.Graph` with ``exports``): M1 governor, M2
  physical hydraulics, M3 rotation with the rotor angle ``delta = phi1 - omega_rated t`` (all three
  propagated, ``none``), M4 generator and M5 runner lateral/torsion as Kalman filters on their
  linearisation (``kf``; K_seal known). M4 and M5 read the *measured* omega and q (dataset inputs), as
  the authors' code does; the KFs update with (x_G, y_G) and (x_R, y_R).

Quantities a module sends that are not its states (M3's dn/dt and turbine torque, M4's accelerations)
are derived states after its own, as in the standalone ``turbine`` case. The grid torque reaches M3 as
the sum over the generator's lines of the per-edge law ``-(S_base/omega_rated) K_ij sin(delta_j -
delta_i)`` (S147-S148) and each bus receives ``K_bj sin(delta_j - delta_b)`` per line (S146); M5's
torsion (the authors' "grid" form) needs T_e too and receives the same per-edge laws on its own port,
which reads a copy of the rotor angle M5 keeps from M3's message (a law reads only its two ends' ports,
and M5 holds no angle of its own).

The measurements and decisions behind the defaults are in ``docs/design-cases.md``, section ``turbine-grid``.

References:
    Ghorbani & Hackl, SI section 3.7, eq. (S144)-(S150), Tables S9-S12, Figs S13-S17;
    specs/compositional-inference.md 3.7 and 7 item 20.

"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import jax
import numpy as np
import pydantic

from twinfer import timing
from twinfer.data import Dataset
from twinfer.experiments._case import Case, CaseConfig, Progress, register
from twinfer.infer.filters import FilterConsistencyWarning
from twinfer.infer.graph import Graph, Schedule
from twinfer.infer.graph._run import estimate as graph_estimate
from twinfer.infer.graph._turbine import TurbineGridSettings, turbine_grid_graph
from twinfer.infer.graph._turbine_scores import (
    GRID_ESTIMATED,
    EstimateRows,
    GridWindows,
    operating_point_tables,
    score_turbine_grid,
    standalone_rmse,
    truth_speed_dips,
)
from twinfer.infer.graph._variants import central_graph
from twinfer.models import TurbineGrid
from twinfer.models.turbine_grid import UNIT_STATE_NAMES, LoadStep
from twinfer.report import PaperValue, RunArtifacts, at_most, near, within
from twinfer.report.figures.turbine import turbine_grid_figures
from twinfer.sim import measured_inputs, simulate_dataset, simulate_standalone_units

S_BASE_MVA = 100.0
"""Table S12: the per-unit base of case9."""
ESTIMATED = GRID_ESTIMATED
"""The states the KFs estimate (M4, M5); everything else is propagated."""
SERIES = ("n", "x_n", "q", "h", "omega", "delta", "x_G", "y_G", "x_R", "vx_R", "vy_R", "alpha", "beta")
"""Per-generator series kept in the run's arrays."""
TABLE_S9_DEG = (0.00, 10.12, 5.34, -2.21, -3.79, 2.49, 1.09, 4.27, -4.09)
"""Table S9's operating-point angles [deg] (printed to 0.01 deg)."""
TABLE_S10_MNM = (1.7061, 4.1508, 2.1645)
"""Table S10's initial torques M_t = T_e [MN m] per generator."""
TABLE_S10_RESIDUAL = (2.33e-16, 9.31e-16, 4.66e-16)


class TurbineGridConfig(CaseConfig):
    """Configuration of ``turbine-grid``; defaults are Table S12 with the spec's [REPO] details."""

    t_end: pydantic.PositiveFloat = pydantic.Field(60.0, description="Record length T [s] (Table S12: 60).")
    dt: pydantic.PositiveFloat = pydantic.Field(1e-3, description="Outer step [s] (Table S12: 1e-3).")
    substeps: int = pydantic.Field(
        2, ge=1, le=64, description="Heun substeps per step in every subsystem (n_sub, Table S12: 2)."
    )
    inner: int = pydantic.Field(2, ge=1, le=50, description="Jacobi iterations K per step (Table S12: 2).")
    truth_substeps: int = pydantic.Field(4, ge=1, le=64, description="RK4 truth steps per outer step.")
    load_mw: float = pydantic.Field(20.0, description="Extra demand at bus 9 [MW] (Table S12: +20).")
    t_on: pydantic.NonNegativeFloat = pydantic.Field(5.0, description="Load step on [s] (Table S12: 5).")
    t_off: pydantic.PositiveFloat = pydantic.Field(30.0, description="Load step off [s] (Table S12: 30).")
    lateral_noise_sd: pydantic.PositiveFloat = pydantic.Field(
        2e-6, description="x_G, y_G, x_R, y_R sensor sd [m] (Table S12)."
    )
    q_noise_sd: pydantic.PositiveFloat = pydantic.Field(
        2e-4, description="Flow sensor sd [p.u.] (Table S12)."
    )
    omega_noise_sd: pydantic.PositiveFloat = pydantic.Field(
        2e-4, description="Speed sensor sd [rad/s] (Table S12)."
    )
    q_gen: pydantic.NonNegativeFloat = pydantic.Field(1e-11, description="KF Q_gen (Table S12).")
    q_run: pydantic.NonNegativeFloat = pydantic.Field(2e-12, description="KF Q_run (Table S12).")
    q_tor: pydantic.NonNegativeFloat = pydantic.Field(1e-8, description="KF Q_tor (Table S12).")
    r_run_factor: pydantic.PositiveFloat = pydantic.Field(
        100.0, description="R_run = this x lateral_noise_sd^2 (Table S12: 100)."
    )
    p0_gen: pydantic.NonNegativeFloat = pydantic.Field(1e-7, description="KF P0_gen (Table S12).")
    p0_run: pydantic.NonNegativeFloat = pydantic.Field(1e-7, description="KF P0_run (Table S12).")
    p0_tor: pydantic.NonNegativeFloat = pydantic.Field(1e-5, description="KF P0_tor (Table S12).")
    alpha_window: int = pydantic.Field(
        500, ge=1, le=1_000_000, description="Samples of the centred moving average giving alpha_dc."
    )
    beta_window: int = pydantic.Field(
        200, ge=1, le=1_000_000, description="Samples of the moving average smoothing beta."
    )
    steady_window: pydantic.PositiveFloat = pydantic.Field(
        1.0, description="Steady x_n: mean over this many seconds before the step ends (or the record)."
    )
    messages: Literal["deterministic", "probabilistic"] = pydantic.Field(
        "deterministic", description="Kind of the M4 <-> M5 messages (the paper: deterministic means)."
    )
    rule: Literal["paper", "split"] = pydantic.Field(
        "paper", description="Where M4 and M5 evaluate each other's messages (Interface rule)."
    )
    exchange: Literal["held", "path"] = pydantic.Field(
        "path",
        description="What M4 and M5 read of each other over a step: path (the neighbour's lateral "
        "displacement continued from the time it holds by its velocity; deterministic messages only) or "
        "held (the paper's: held over the step, under-covering at Table S12's step).",
    )
    central: bool = pydantic.Field(True, description="Also run the monolithic KF of the same graph.")
    central_t_end: pydantic.PositiveFloat = pydantic.Field(
        10.0,
        description="The central KF runs on the first this many seconds (its factors are kept for every "
        "step: 78 x 78 per step and copy).",
    )
    timing_repeats: int = pydantic.Field(
        1,
        ge=0,
        le=1000,
        description="Timed repeats after the first (0, --quick: none; run_s is then the one run's seconds, "
        "compile included).",
    )
    doubled_time_truth: bool = pydantic.Field(
        True,
        description="Also simulate the truth with the turbines at twice the grid's time, as the authors' "
        "code runs them (decision 20), and report its peak n and steady x_n beside Table S11's.",
    )

    @pydantic.model_validator(mode="after")
    def _window(self) -> TurbineGridConfig:
        if self.t_on > self.t_off:
            raise ValueError(f"expected t_on <= t_off; received t_on = {self.t_on}, t_off = {self.t_off}")
        grid_settings(self)  # exchange 'path' needs deterministic messages with the paper rule
        return self


# -- the truth -------------------------------------------------------------------------------------


def grid_model(config: TurbineGridConfig, unit_time_scale: float = 1.0) -> TurbineGrid:
    """:meth:`TurbineGrid.ieee9` with the configured load step at bus 9 (``unit_time_scale``: the model's)."""
    step = LoadStep(bus=8, load=config.load_mw / S_BASE_MVA, t_on=config.t_on, t_off=config.t_off)
    model = TurbineGrid.ieee9(disturbance=step, unit_time_scale=unit_time_scale)
    if model.S_base != S_BASE_MVA * 1e6:  # the case's own base, read from its table
        raise ValueError(
            f"turbine-grid: expected case9's base of {S_BASE_MVA} MVA; received {model.S_base} W."
        )
    return model


def simulate(config: TurbineGridConfig, model: TurbineGrid) -> Dataset:
    """The record: the 63-state truth (RK4 at dt / truth_substeps) measured with Table S12's noise.

    Inputs (row k, held over [t_k, t_{k+1})): the time and, per generator, the measured omega and q at
    t_k, which M4 and M5 read in place of M3's and M2's estimates.
    """
    steps = int(round(config.t_end / config.dt))
    per_unit = [config.lateral_noise_sd] * 4 + [config.q_noise_sd, config.omega_noise_sd]
    data = simulate_dataset(
        model,
        None,
        config.dt,
        np.asarray(per_unit * model.n_gen),
        jax.random.key(config.seed + 13),
        x0=model.initial_state(),
        n_steps=steps,
        truth="rk4",
        substeps=config.truth_substeps,
    )
    measured = [(f"{s}_{b + 1}", f"{s}_measured_{b + 1}") for b in model.gen_buses for s in ("omega", "q")]
    return measured_inputs(
        data,
        [out for out, _ in measured],
        [name for _, name in measured],
        {
            "case": "turbine-grid",
            "truth": f"rk4 x {config.truth_substeps}",
            "seed": config.seed,
            "alignment": "held",  # the paper code's reading: y_k+1 with the step's inputs
        },
    )


# -- the graph ---------------------------------------------------------------------------------------


def grid_settings(config: TurbineGridConfig) -> TurbineGridSettings:
    """The estimators' settings of ``config`` (:class:`~twinfer.infer.graph._turbine.TurbineGridSettings`)."""
    fields = dataclasses.fields(TurbineGridSettings)
    return TurbineGridSettings(**{f.name: getattr(config, f.name) for f in fields})


def build_graph(config: TurbineGridConfig, model: TurbineGrid) -> Graph:
    """Six bus nodes and three generator graphs (:func:`~twinfer.infer.graph._turbine.turbine_grid_graph`)."""
    return turbine_grid_graph(model, grid_settings(config))


# -- references and scores ---------------------------------------------------------------------------


def _dip_note(metrics: Mapping[str, float], n_gen: int) -> list[str]:
    """The report's line on the speed dips at the physics' and at the authors' doubled turbine time."""
    keys = [f"{k}.truth.peak_n.gen{i + 1}" for k in ("doubled_time", "distributed") for i in range(n_gen)]
    if not all(k in metrics for k in keys):
        return []
    doubled, physics = (", ".join(f"{metrics[k]:.2e}" for k in part) for part in (keys[:n_gen], keys[n_gen:]))
    return [
        f"Peak n of the truth, Gen 1-{n_gen}: {physics} p.u.; with the turbines at twice the grid's time "
        f"(the authors' code, decision 20): {doubled} (Table S11: ~ -3e-4, -2e-4, -2e-4)."
    ]


def _series_names(model: TurbineGrid) -> list[str]:
    return [f"{s}_{b + 1}" for b in model.gen_buses for s in SERIES] + [
        f"delta_{b + 1}" for b in model.other_buses
    ]


def run(config: TurbineGridConfig, progress: Progress) -> RunArtifacts:
    """Simulate, estimate (nested graphs, Jacobi K = inner; the monolithic KF), score and time both."""
    start = time.perf_counter()
    model = grid_model(config)
    windows = GridWindows(
        config.t_on, config.t_off, config.dt, config.steady_window, config.alpha_window, config.beta_window
    )
    metrics = operating_point_tables(model)
    progress("the 63-state truth", 0, 1)
    data = simulate(config, model)
    truth = np.asarray(data.truth_states)
    metrics["timing.truth_s"] = time.perf_counter() - start
    ref, t_e_truth = simulate_standalone_units(
        model, truth, config.dt, config.substeps
    )  # the [REPO] reference
    metrics["timing.standalone_s"] = time.perf_counter() - start - metrics["timing.truth_s"]
    metrics["truth.vs_standalone_rmse"] = standalone_rmse(model, truth, data.state_names, ref)
    if config.doubled_time_truth:  # decision 20: where Table S11's speed dips come from
        quirk = simulate(config, grid_model(config, unit_time_scale=2.0))
        metrics.update(truth_speed_dips(windows, model, quirk, "doubled_time.truth."))
    graph = build_graph(config, model)
    schedule = Schedule("jacobi", inner=config.inner)
    series = _series_names(model)
    truth_names = list(data.state_names)
    arrays: dict[str, Any] = {
        "t": np.asarray(data.times),
        "series.names": np.asarray(series),
        "truth": truth[:, [truth_names.index(s) for s in series]],
        "truth.T_e": t_e_truth,
        "standalone": ref[:, :, [list(UNIT_STATE_NAMES).index(s) for s in ("n", "x_n", "q")]],
    }
    runs: list[tuple[str, Graph, Dataset, Any]] = [("distributed", graph, data, schedule)]
    if config.central:
        n_central = min(int(round(config.central_t_end / config.dt)), data.n_steps - 1)
        head = data.window(t_end=float(np.asarray(data.times)[n_central]))  # the first n_central steps
        runs.append(("central", central_graph(graph, "kf"), head, "jacobi"))
    for k, (label, g, record, sched) in enumerate(runs):
        n_steps = record.n_steps - 1
        progress(f"{label} estimation ({n_steps} steps)", k, len(runs))
        with warnings.catch_warnings():  # the case scores the calibration itself
            warnings.simplefilter("ignore", FilterConsistencyWarning)
            est, seconds = timing.timed(graph_estimate, g, record, sched, repeats=config.timing_repeats)
        metrics[f"{label}.run_s"] = seconds.median_s  # timing_repeats = 0 (--quick): the one run, compile in
        if config.timing_repeats:
            metrics[f"{label}.compile_s"] = seconds.compile_only_s
        metrics[f"{label}.step_us"] = 1e6 * seconds.median_s / n_steps
        metrics[f"{label}.steps"] = float(n_steps)
        metrics[f"{label}.loglik"] = float(est.loglik)
        if est.nis is not None:
            metrics[f"{label}.nis"] = float(est.nis)
        t_e = score_turbine_grid(label, est, record, model, windows, ref, metrics)
        names = list(est.state_names)
        cols = [names.index(s) for s in series]
        arrays[f"{label}.means"] = np.asarray(est.means)[:, cols]
        arrays[f"{label}.stds"] = np.asarray(est.stds)[:, cols]
        arrays[f"{label}.T_e"] = t_e
        if label == "distributed":
            kept = est
        elif record.n_steps < data.n_steps:  # the distributed estimate scored on the central's window
            rows = record.n_steps
            head = EstimateRows(np.asarray(kept.means)[:rows], np.asarray(kept.stds)[:rows], kept.state_names)
            score_turbine_grid("distributed_window", head, record, model, windows, ref, metrics)
    if config.central:
        metrics["central_over_distributed.step_us"] = (
            metrics["central.step_us"] / metrics["distributed.step_us"]
        )
    metrics["timing.run_s"] = time.perf_counter() - start
    progress("turbine-grid", 1, 1)
    notes = [
        f"{config.t_end:g} s at dt = {config.dt:g} s; truth RK4 x {config.truth_substeps}; estimators Heun x "
        f"{config.substeps} per step; Jacobi with K = {config.inner} iterations; +{config.load_mw:g} MW at "
        f"bus 9 over [{config.t_on:g}, {config.t_off:g}) s.",
        "Decision 20: textbook Jacobi (each iteration steps every subsystem from its posterior at t_n with "
        "the previous iterate's messages, one KF update per step). The authors' re-integration quirk (the "
        "turbine advancing 2 dt per step, the KF update repeated per iteration and substep) is not "
        "replicated; Table S11 and the 1.02e-3 aggregate are compared, not expected to match.",
        *_dip_note(metrics, model.n_gen),
        "M1-M3 and the buses are propagated (estimator none, zero P0 and Q); M4 and M5 are KFs on their "
        "linearisation with Table S12's Q (scaled by dt), P0 and R; M4/M5 read the measured omega and q.",
        "M5 receives T_e as the per-line laws on its own grid port, which reads a copy of the rotor angle "
        "M5 keeps from M3's message (one iteration old).",
        "Standalone reference ([REPO]): each turbine alone (the 19-state unit, Heun at the estimators' "
        "substep), T_e from the coupled truth's angles averaged over each step's two ends; the aggregate "
        "RMSE pools (n, x_n, q) of the 3 generators over every sample, embedded estimate against it.",
        f"Table S11 over the whole record: v_xR, v_yR raw; alpha_dc a centred {config.alpha_window}-sample "
        f"moving average (edge-padded), beta a centred {config.beta_window}-sample one, on both sides.",
        "Peak n: the largest |n| while the step is on; steady x_n: mean over the last "
        f"{config.steady_window:g} s before the step ends; DC T_e: mean before the step.",
        f"M4 <-> M5 messages: {config.messages} ({config.rule} rule), exchange {config.exchange!r}. "
        + (
            "Each KF continues the other's lateral displacement over the step from the time it holds, by "
            "its velocity (and, into M5, the generator's acceleration); the paper's exchange holds it, an "
            "error first order in dt at the rotation frequency that Table S12's Q does not cover: the KF "
            "states then under-cover (the module docstring; --set exchange=held)."
            if config.exchange == "path"
            else "The paper's exchange: what M4 and M5 read of each other (x_R, y_R enter M4 through K12 = "
            "-1.2e9 N/m) is held over each step, an error first order in dt at the rotation frequency that "
            "Table S12's Q (1e-11 dt) does not cover, so the KF states under-cover, distributed and central "
            "alike (the module docstring; the default exchange 'path' continues it instead)."
        ),
    ]
    if not config.timing_repeats:
        notes.append("timing_repeats = 0: each estimate ran once; its run_s and step_us include the compile.")
    if config.central:
        notes.append(
            "The central KF is graph.monolithic() of the same graph (78 states, one KF on its "
            "linearisation). Its blocks read time through their input, so the engine cannot integrate them "
            "coupled (a subsystem's Dynamics has no time argument, and the derived states M3 and M4 send are "
            "computed in the transitions, not by a vector field): each block steps with the laws at the "
            "step's start, held - the explicit (K = 1) exchange, where the distributed K = 2 ends on laws at "
            "the step's end. It runs on the first "
            f"{metrics['central.steps'] * config.dt:g} s only (the engine keeps every step's filtered and "
            "predicted factors, 2 x 78 x 78 floats per step); 'distributed_window.*' scores the distributed "
            "estimate on that window."
        )
    return RunArtifacts(metrics=metrics, arrays=arrays, notes=notes)


def figures(arrays: Mapping[str, Any], config: TurbineGridConfig) -> dict[str, Any]:
    """Fig. S14 and the two zooms (:func:`~twinfer.report.figures.turbine.turbine_grid_figures`)."""
    return turbine_grid_figures(arrays)


# -- paper values ----------------------------------------------------------------------------------

_PRINTED = "printed to 0.01 deg; the NR solution agrees with an independent root solve to 1e-10 rad"
PAPER: dict[str, PaperValue] = {
    **{
        f"table_s9.delta_deg.bus{b + 1}": PaperValue(deg, "Table S9: delta* [deg]", near(0.005, _PRINTED))
        for b, deg in enumerate(TABLE_S9_DEG)
    },
    "table_s9.nr_residual": PaperValue(
        1.11e-16, "Table S9 text: NR residual [p.u.]", near(1e-12, "NR stops at tol 1e-12 (spec [REPO])")
    ),
    **{
        f"table_s10.{q}_MNm.gen{i + 1}": PaperValue(
            v, f"Table S10: {q} [MN m]", near(5e-5, "printed to 4 decimals")
        )
        for i, v in enumerate(TABLE_S10_MNM)
        for q in ("M_t", "T_e")
    },
    **{
        f"table_s10.residual_MNm.gen{i + 1}": PaperValue(
            v, "Table S10: |M_t - T_e| [MN m]", near(1e-12, "one unit in the last place of the torques")
        )
        for i, v in enumerate(TABLE_S10_RESIDUAL)
    },
    "distributed.embedded_vs_standalone_rmse": PaperValue(
        1.02e-3,
        "3.7 Results: aggregate RMSE of (n, x_n, q), embedded estimate vs standalone, 3 gens, 0-60 s",
        at_most(1.0, "an error; the paper's value holds the authors' doubled turbine time (decision 20)"),
    ),
}
_S11 = {
    "rmse_vx_R": (7.09e-5, 1.18e-4, 7.95e-5),
    "rmse_vy_R": (6.09e-5, 6.35e-5, 6.02e-5),
    "rmse_alpha_dc": (1.93e-6, 4.47e-6, 4.33e-6),
    "rmse_beta_smooth": (3.85e-4, 8.75e-4, 6.84e-4),
}
_QUIRK = (
    "an error (beating it passes); the paper's run has the authors' Jacobi quirk (decision 20) and its own "
    "truth, so only the order of magnitude is claimed"
)
for _key, _values in _S11.items():
    for _i, _v in enumerate(_values):
        PAPER[f"distributed.{_key}.gen{_i + 1}"] = PaperValue(
            _v, f"Table S11: RMSE {_key[5:]}, Gen {_i + 1}, full 60 s", at_most(3.0, _QUIRK)
        )
for _i, (_peak, _te) in enumerate(((-3e-4, 1.71), (-2e-4, 4.15), (-2e-4, 2.16))):
    _g = f"gen{_i + 1}"
    PAPER[f"distributed.peak_n.{_g}"] = PaperValue(
        _peak,
        f"Table S11 / Fig. S14: peak n, Gen {_i + 1} (one digit)",
        within(2.0, "read to one digit; the authors' doubled turbine time changes the swing (decision 20)"),
    )
    PAPER[f"doubled_time.truth.peak_n.{_g}"] = PaperValue(
        _peak,
        f"Table S11 / Fig. S14: peak n, Gen {_i + 1} (one digit), against the truth with the authors' "
        "doubled turbine time",
        within(2.0, "read to one digit; the protocol of the authors' code (decision 20), not the physics"),
    )
    PAPER[f"distributed.steady_x_n.{_g}"] = PaperValue(
        0.821, f"Table S11: steady x_n after +20 MW, Gen {_i + 1}", near(0.005, "printed as ~0.821")
    )
    PAPER[f"distributed.dc_T_e_MNm.{_g}"] = PaperValue(
        _te, f"Table S11: DC T_e [MN m], Gen {_i + 1}", near(0.005, "printed to 0.01 MN m")
    )


CASE = register(
    Case(
        name="turbine-grid",
        description=(
            "IEEE 9-bus network with three Pelton turbines as nested graphs (governor, hydraulics, rotation "
            "propagated; generator and runner KFs), Jacobi K = 2, against the monolithic KF and a "
            "standalone reference (compositional-inference paper, section 3.7, Tables S9-S12, Fig. S14)."
        ),
        config_type=TurbineGridConfig,
        run=run,
        figures=figures,
        quick={"t_end": 6.0, "substeps": 1, "truth_substeps": 2, "central": False, "timing_repeats": 0},
        paper=PAPER,
    )
)
