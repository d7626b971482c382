"""Case ``turbine``: the Pelton turbine-generator as five different subsystems with five kinds of estimator.

The compositional-inference paper's heterogeneous case (SI S93-S143, Tables S5-S8, Figs S10-S12): a
19-state hydro unit cut into its physical modules, each with the estimator its physics suggests, all
exchanging interface messages (Table S6) by Jacobi (messages frozen at the previous posterior means):

* M1 governor, PID with saturation (``none``: propagated, not filtered);
* M2 hydraulics, a NARX surrogate trained on data the library simulates itself (``learned``; the measured
  flow q is passed on, the head h is the NARX's one-step prediction);
* M3 rotational dynamics, an EKF with the two scaled torque coefficients e_x, e_y;
* M4 generator bearing, a KF (the lateral dynamics are linear inside the clearance);
* M5 runner lateral-torsional dynamics, a UKF (gamma = 1) with the scaled seal stiffness K_seal.

The truth is the monolithic 19-state model (:class:`twinfer.models.PeltonTurbine`) integrated by RK4 at a
quarter of the estimators' step; the central reference is a UKF on the same monolithic model with the
three coefficients appended (22 states), stepped like the subsystems (Heun).

Quantities a module sends that are not its states (M3's speed rate and the two torques, M4's
accelerations, Table S6) are computed by the module's own physics at its filtered state and carried as
derived states after its estimated ones (zero process noise): their covariance is the linearised image
of the state's, and the receiver reads them as it reads any interface variable.

The measurements and decisions behind the defaults are in ``docs/design-cases.md``, section ``turbine``.

References:
    Ghorbani & Hackl, SI section 3.6, eq. (S93)-(S143), Tables S5-S8; specs/compositional-inference.md
    2.5, 3.6 and 7 items 14-19.

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
from twinfer.experiments._case import Case, Progress, register
from twinfer.experiments._checkpointing import CheckpointSettings, case_checkpoint
from twinfer.infer import Distributed, estimate
from twinfer.infer.filters import FilterConsistencyWarning
from twinfer.infer.graph import Graph
from twinfer.infer.graph._run import estimate as graph_estimate
from twinfer.infer.graph._turbine import (
    TURBINE_COEFFICIENTS,
    TURBINE_DEFAULTS,
    TURBINE_ESTIMATED,
    TURBINE_OUTPUTS,
    TurbineSettings,
    prior_draw,
    turbine_central,
    turbine_graph,
)
from twinfer.infer.graph._turbine import shaft_covariances as library_shaft_covariances
from twinfer.infer.graph._turbine_scores import pool_scores, score_turbine, with_initial_states
from twinfer.learn import NARX, NarxConfig, fit_narx, hydraulics_scenarios
from twinfer.metrics import rmse
from twinfer.models import PeltonParams, PeltonTurbine
from twinfer.report import PaperValue, RunArtifacts, at_most, near
from twinfer.report.figures.turbine import turbine_figures
from twinfer.sim import measured_inputs, simulate_dataset

OUTPUTS = TURBINE_OUTPUTS
"""The six sensors (Table S8): speed, flow, generator and runner lateral displacements."""
COEFFICIENTS = TURBINE_COEFFICIENTS
"""The three scaled coefficients the filters estimate (truth 1.0, started at 0.7)."""
ESTIMATED = TURBINE_ESTIMATED
"""The states a filter estimates (M3, M4, M5); M1's are propagated and M2's h is the NARX's."""


class TurbineConfig(CheckpointSettings):
    """Configuration of ``turbine``; defaults are the authors' standalone run (specs 3.6 [REPO])."""

    t_end: pydantic.PositiveFloat = pydantic.Field(130.0, description="Record length [s] ([REPO] 130).")
    dt: pydantic.PositiveFloat = pydantic.Field(
        TURBINE_DEFAULTS.dt, description="Estimators' step [s] ([REPO] 0.002)."
    )
    truth_substeps: int = pydantic.Field(4, ge=1, le=64, description="RK4 truth steps per estimator step.")
    omega_noise_sd: pydantic.PositiveFloat = pydantic.Field(
        TURBINE_DEFAULTS.omega_noise_sd, description="Speed sensor sd [rad/s]."
    )
    q_noise_sd: pydantic.PositiveFloat = pydantic.Field(
        TURBINE_DEFAULTS.q_noise_sd, description="Flow sensor sd [p.u.]."
    )
    lateral_noise_sd: pydantic.PositiveFloat = pydantic.Field(
        TURBINE_DEFAULTS.lateral_noise_sd, description="Displacement sensor sd [m]."
    )
    initial_factor: pydantic.PositiveFloat = pydantic.Field(
        TURBINE_DEFAULTS.initial_factor,
        description="Every scaled coefficient starts at this value (truth 1.0).",
    )
    rotational_head: bool = pydantic.Field(
        TURBINE_DEFAULTS.rotational_head,
        description="The EKF's torque includes e_h h ([REPO]: omitted, a model-form error).",
    )
    q_rotational: tuple[float, float, float, float, float] = pydantic.Field(
        TURBINE_DEFAULTS.q_rotational, description="M3 EKF Q: n, omega, phi1, e_x, e_y (Table S8)."
    )
    p0_rotational: tuple[float, float, float, float, float] = pydantic.Field(
        TURBINE_DEFAULTS.p0_rotational, description="M3 EKF P0 (Table S8)."
    )
    q_generator: tuple[float, float, float, float] = pydantic.Field(
        TURBINE_DEFAULTS.q_generator, description="M4 KF Q: x, y, vx, vy (Table S8)."
    )
    p0_generator: tuple[float, float, float, float] = pydantic.Field(
        TURBINE_DEFAULTS.p0_generator, description="M4 KF P0 (Table S8)."
    )
    q_runner: tuple[float, float, float, float, float, float, float] = pydantic.Field(
        TURBINE_DEFAULTS.q_runner,
        description="M5 UKF Q: x, y, vx, vy, alpha, beta, K_seal (Table S8).",
    )
    p0_runner: tuple[float, float, float, float, float, float, float] = pydantic.Field(
        TURBINE_DEFAULTS.p0_runner, description="M5 UKF P0 (Table S8)."
    )
    rotational_noise: Literal["shaft", "table"] = pydantic.Field(
        TURBINE_DEFAULTS.rotational_noise,
        description="How Q and P0 enter n, omega, phi1 (M3 and the central UKF): 'shaft' as one torque "
        "disturbance on the shaft, which keeps n = (omega - omega_rated) / omega_rated as the physics does "
        "(S111); 'table' as Table S8's three independent random walks ([REPO]), which let n drift where no "
        "sensor sees.",
    )
    initial: Literal["draw", "truth"] = pydantic.Field(
        "draw",
        description="Where the filters start the 13 states they estimate: 'draw' from their prior N(truth, "
        "P0) (one draw, shared by the distributed and central filters), so that P0 is honest where the "
        "data say little (phi1); 'truth' at the truth's initial state ([REPO]).",
    )
    q_scale: pydantic.PositiveFloat = pydantic.Field(
        TURBINE_DEFAULTS.q_scale,
        description="Factor on every Q of Table S8 (M3, M4, M5 and the central UKF's; [REPO] 1).",
    )
    r_floor: pydantic.NonNegativeFloat = pydantic.Field(
        TURBINE_DEFAULTS.r_floor,
        description="Added to each sensor variance in R ([REPO] 1e-10, four times the lateral sensors' "
        "2.5e-11 m^2, which widens every lateral band).",
    )
    q_governor: pydantic.NonNegativeFloat = pydantic.Field(
        TURBINE_DEFAULTS.q_governor, description="M1 process noise per state (propagated, not filtered)."
    )
    narx_lags: int = pydantic.Field(
        TURBINE_DEFAULTS.narx_lags, ge=2, le=2000, description="NARX window length L (S106)."
    )
    narx_spacing: int = pydantic.Field(
        TURBINE_DEFAULTS.narx_spacing,
        ge=1,
        le=100,
        description="Estimator steps between NARX samples (5 x 0.002 s = 0.01 s).",
    )
    narx_hidden: int = pydantic.Field(128, ge=1, le=4096, description="NARX hidden width (S106).")
    narx_epochs: int = pydantic.Field(650, ge=1, le=100_000, description="NARX maximum epochs (S106).")
    narx_patience: int = pydantic.Field(137, ge=1, le=100_000, description="Early-stopping patience.")
    narx_learning_rate: pydantic.PositiveFloat = pydantic.Field(1e-4, description="AdamW step (S106).")
    narx_batch: int = pydantic.Field(64, ge=1, le=1_000_000, description="Minibatch size (S106).")
    narx_stride: int = pydantic.Field(4, ge=1, le=10_000, description="NARX samples between windows.")
    scenarios: int = pydantic.Field(120, ge=3, le=10_000, description="Simulated training scenarios.")
    scenario_length: pydantic.PositiveFloat = pydantic.Field(30.0, description="Each scenario [s].")
    integrator: Literal["heun", "rk4"] = pydantic.Field(
        TURBINE_DEFAULTS.integrator,
        description="The estimators' integrator ([REPO] heun: at 0.002 s its phase error on the 37 Hz "
        "blade forcing is 2 %, far above the seal stiffness's effect).",
    )
    schedule: Literal["jacobi", "ab2", "gauss_seidel"] = pydantic.Field(
        "ab2",
        description="Message schedule ([REPO] jacobi: the neighbours' lateral states held over the step "
        "lag by half a step, an interface force error 40x the seal force; ab2 reads them at mid-step).",
    )
    messages: Literal["deterministic", "probabilistic"] = pydantic.Field(
        TURBINE_DEFAULTS.messages, description="Message kind on every edge ([REPO]: deterministic means)."
    )
    rule: Literal["paper", "split"] = pydantic.Field(
        TURBINE_DEFAULTS.rule,
        description="Where a receiver evaluates its messages: held means (paper) or split (sender's error "
        "a consider state); the NARX node always takes held means.",
    )
    central: bool = pydantic.Field(True, description="Also run the central UKF on the monolithic model.")
    timing_repeats: int = pydantic.Field(1, ge=1, le=1000, description="Timed repeats after the first.")
    repeats: int = pydantic.Field(
        5,
        ge=1,
        le=100,
        description="Records scored for calibration: the sensor noise and the filters' initial draw "
        "redrawn, the NARX kept; coverage pooled over them (pooled.*).",
    )
    calibration_truth: Literal["process_noise", "same"] = pydantic.Field(
        "process_noise",
        description="The truth of the calibration records after the first: 'process_noise' draws each "
        "anew with the filters' own Q on the 13 estimated states at every estimator step (the model the "
        "filters assume, so their bands can be checked; pooled.* over these records only); 'same' keeps "
        "the first record's noise-free truth (pooled.* over every record).",
    )
    lateral_window: pydantic.PositiveFloat = pydantic.Field(
        0.7, description="Lateral RMSE over the last this many seconds ([REPO] 0.7)."
    )
    parameter_window: pydantic.PositiveFloat = pydantic.Field(
        80.0, description="Coefficient NRMSE over t <= this ([REPO] 80 s)."
    )


# -- data ----------------------------------------------------------------------------------------


def simulate(
    config: TurbineConfig, params: PeltonParams, repeat: int = 0, process_cov: Any = None
) -> Dataset:
    """The record: the 19-state truth (RK4 at dt / substeps) measured by the six sensors with noise.

    The inputs are the time ``t`` and the measured flow at ``t_k`` (M2 passes it on and the NARX reads
    it), row k, in the estimators' convention (:func:`twinfer.sim.simulate_dataset`). ``repeat`` > 0
    draws another sensor noise (key ``seed + 7 + 1000 repeat``); with ``process_cov`` (19, 19) the truth
    also carries that process noise at every estimator step (:func:`truth_process_cov`), drawn from the
    same key.
    """
    model = PeltonTurbine(params)
    steps = int(round(config.t_end / config.dt))
    sd = [config.omega_noise_sd, config.q_noise_sd] + [config.lateral_noise_sd] * 4
    data = simulate_dataset(
        model,
        None,
        config.dt,
        np.asarray(sd),
        jax.random.key(config.seed + 7 + 1000 * repeat),
        x0=model.initial_state(),
        n_steps=steps,
        truth="rk4",
        substeps=config.truth_substeps,
        process_cov=process_cov,
    )
    return measured_inputs(
        data,
        ["q"],
        ["q_measured"],
        {
            "case": "turbine",
            "truth": f"rk4 x {config.truth_substeps}",
            "seed": config.seed,
            "alignment": "held",  # the paper code's reading: y_k+1 with the step's inputs
        },
    )


def train_narx(config: TurbineConfig, progress: Progress) -> Any:
    """The NARX of M2, trained on :func:`~twinfer.learn.hydraulics_scenarios` (checkpointed).

    The checkpoint lives under ``checkpoint_dir``, fingerprinted by the NARX's and the scenarios' settings.
    """
    key = jax.random.key(config.seed + 11)
    scenarios = hydraulics_scenarios(
        key, config.scenarios, config.scenario_length, config.dt, config.truth_substeps, config.q_noise_sd,
        config.narx_spacing,
    )  # fmt: skip
    narx_config = NarxConfig(
        lags=config.narx_lags,
        hidden=config.narx_hidden,
        learning_rate=config.narx_learning_rate,
        batch_size=config.narx_batch,
        max_epochs=config.narx_epochs,
        patience=config.narx_patience,
        stride=config.narx_stride,
        seed=config.seed,
    )
    keep = ("narx_", "scenario", "dt", "truth_substeps", "q_noise_sd", "seed")
    exclude = [k for k in TurbineConfig.model_fields if not k.startswith(keep)]
    ckpt = case_checkpoint(
        "turbine", config, "narx", data=[(d, s, t) for d, s, t in scenarios], exclude=exclude
    )

    return fit_narx(scenarios, narx_config, checkpoint=ckpt, progress=progress)


# -- the five subsystems (twinfer.infer.graph._turbine) ------------------------------------------


def graph_settings(config: TurbineConfig) -> TurbineSettings:
    """The estimators' settings of ``config`` (:class:`~twinfer.infer.graph._turbine.TurbineSettings`)."""
    return TurbineSettings(**{f.name: getattr(config, f.name) for f in dataclasses.fields(TurbineSettings)})


def shaft_covariances(config: TurbineConfig, params: PeltonParams) -> tuple[np.ndarray, np.ndarray]:
    """Q and P0 of the shaft states [n, omega, phi1] (the library's :func:`library_shaft_covariances`)."""
    return library_shaft_covariances(graph_settings(config), params)


def initial_state(config: TurbineConfig, params: PeltonParams, repeat: int = 0) -> np.ndarray:
    """The filters' initial state (19,): the truth's, or (``initial = "draw"``) a draw from their prior.

    :func:`~twinfer.infer.graph._turbine.prior_draw` from the key ``seed + 13`` (``seed + 13 + 1000
    repeat`` for the calibration records after the first).
    """
    x0 = np.asarray(PeltonTurbine(params).initial_state(), dtype=np.float64)
    if config.initial == "truth":
        return x0
    key = jax.random.key(config.seed + 13 + 1000 * repeat)
    return prior_draw(graph_settings(config), params, x0, key)


def build_graph(
    config: TurbineConfig, params: PeltonParams, narx: NARX, data: Dataset, sd_h: float, repeat: int = 0
) -> Graph:
    """The five subsystems and the eight message edges of Table S6, started at :func:`initial_state`.

    :func:`~twinfer.infer.graph._turbine.turbine_graph` with this config's settings, the record's first
    measured flow and the NARX's head error ``sd_h``.
    """
    q_first = float(np.asarray(data.inputs)[0, 1])
    x0 = initial_state(config, params, repeat)
    return turbine_graph(params, narx, x0, q_first, sd_h, graph_settings(config))


def central(config: TurbineConfig, params: PeltonParams, repeat: int = 0) -> Graph:
    """The central UKF on the monolithic model with the three coefficients appended (22 states).

    :func:`~twinfer.infer.graph._turbine.turbine_central` with this config's settings, started at
    :func:`initial_state`.
    """
    return turbine_central(params, initial_state(config, params, repeat), graph_settings(config))


# -- the run -------------------------------------------------------------------------------------


def run(config: TurbineConfig, progress: Progress) -> RunArtifacts:
    """Train the NARX, simulate, estimate distributed and central, score and time both."""
    start = time.perf_counter()
    params = PeltonParams()
    progress("NARX training", 0, 1)
    fit = train_narx(config, progress)
    metrics: dict[str, float] = {f"narx.test.{k}": float(v) for k, v in fit.test.items()}
    metrics["narx.best_epoch"] = float(fit.best_epoch)
    metrics["narx.epochs"] = float(fit.epochs)
    metrics["narx.train_s"] = float(fit.seconds)
    progress("the 19-state truth", 0, 1)
    data = simulate(config, params)
    sd_h = float(fit.test["rmse"])
    graph = build_graph(config, params, fit.model, data, sd_h)
    runs = {"distributed": graph}
    if config.central:
        runs["central"] = central(config, params)
    truth = np.asarray(data.truth_states)
    truth_names = tuple(data.state_names)
    arrays: dict[str, Any] = {
        "t": np.asarray(data.times),
        "truth": truth,
        "truth.names": np.asarray(truth_names),
    }
    arrays["narx.train_loss"] = np.asarray(fit.history["train"])
    arrays["narx.val_loss"] = np.asarray(fit.history["validation"])
    steps = data.n_steps - 1
    for i, (label, g) in enumerate(runs.items()):
        progress(f"{label} estimators ({steps} steps)", i, len(runs))
        schedule = config.schedule if label == "distributed" else "jacobi"
        with warnings.catch_warnings():  # the case scores the calibration itself
            warnings.simplefilter("ignore", FilterConsistencyWarning)
            est, seconds = timing.timed(graph_estimate, g, data, schedule, repeats=config.timing_repeats)
        metrics[f"{label}.run_s"] = seconds.median_s
        metrics[f"{label}.compile_s"] = seconds.compile_only_s
        score_turbine(label, est, data, config.lateral_window, config.parameter_window, metrics)
        arrays[f"{label}.means"], arrays[f"{label}.stds"] = np.asarray(est.means), np.asarray(est.stds)
        arrays[f"{label}.names"] = np.asarray(est.state_names)
        if label == "distributed":
            names = tuple(est.state_names)
            h_hat = np.asarray(est.means)[1:, names.index("h")]
            metrics["narx.online_rmse"] = float(rmse(h_hat, truth[1:, truth_names.index("h")]))
    if config.central:
        metrics["central_over_distributed.run_s"] = metrics["central.run_s"] / metrics["distributed.run_s"]
    pooled_notes = []
    if config.repeats > 1:
        pooled_notes = _pooled(config, params, fit.model, sd_h, runs, metrics, progress)
    metrics["timing.run_s"] = time.perf_counter() - start
    progress("turbine", 1, 1)
    notes = [
        f"{config.t_end:g} s at {config.dt:g} s; truth RK4 x {config.truth_substeps}; sensors omega "
        f"{config.omega_noise_sd:g} rad/s, q {config.q_noise_sd:g} p.u., lateral "
        f"{config.lateral_noise_sd:g} m.",
        f"NARX: {config.scenarios} simulated scenarios of {config.scenario_length:g} s, L = "
        f"{config.narx_lags} samples {config.narx_spacing * config.dt:g} s apart, hidden "
        f"{config.narx_hidden}; "
        f"stopped at epoch {len(fit.history['train'])} (best {fit.best_epoch}); test RMSE "
        f"{fit.test['rmse']:.3g} (physical), the M2 node's sd of h.",
        "M3's torque " + ("includes" if config.rotational_head else "omits ([REPO])") + " the e_h h term.",
        "Lateral RMSE over the last "
        f"{config.lateral_window:g} s and coefficient NRMSE over t <= {config.parameter_window:g} s ([REPO] "
        "windows); coverage95 per state over the whole record.",
        "The central UKF runs on the monolithic physics (hydraulics included, 22 states); the graph's "
        "monolithic form would carry the NARX's memory, which has no covariance.",
        "Calibration against a truth without process noise: "
        + (
            "Table S8's Q drives n and omega as two random walks while the truth keeps n = (omega - "
            "omega_rated) / omega_rated (S111), so n's variance grows in a direction no sensor sees (and "
            "phi1's, which only the unbalance's phase reveals); "
            if config.rotational_noise == "table"
            else "the shaft's Q is one torque disturbance (rotational_noise = 'shaft'), so n, omega and "
            "phi1 stay consistent as in the truth; "
        )
        + f"R adds r_floor = {config.r_floor:g} to the lateral sensors' "
        + f"{config.lateral_noise_sd**2:.3g} m^2; "
        + (
            "the filters start at a draw from their prior (initial = 'draw'). "
            if config.initial == "draw"
            else "the filters start at the truth ([REPO]), so P0 widens the bands where the data say little. "
        )
        + "One record is a poor sample of a slow error: the undamped torsion (alpha, beta) rings for tens "
        "of seconds after the start, and M3's phi1, whose phase only the runner's data reveal (to M5, not "
        "to M3), drifts as slowly; their coverage differs by 0.1-0.2 between records (pooled.* below). "
        "The lateral states over-cover in every record (0.995-0.998, range over records below 0.002).",
        *pooled_notes,
    ]
    return RunArtifacts(metrics=metrics, arrays=arrays, notes=notes)


def _pooled(
    config: TurbineConfig,
    params: PeltonParams,
    narx: NARX,
    sd_h: float,
    first: Mapping[str, Graph],
    metrics: dict[str, float],
    progress: Progress,
) -> list[str]:
    """Coverage over the calibration records: ``{label}.pooled.*``.

    One record's time fraction inside the band estimates a coverage probability poorly where the error
    is a slow mode: the torsion (alpha, beta) rings for tens of seconds after the start, so the 130 s
    record holds only a few independent samples of it. Each repeat redraws the sensor noise and the
    filters' initial state (:func:`simulate`, :func:`initial_state` with ``repeat``) with the same NARX,
    and is scored as the first (:func:`~twinfer.infer.graph._turbine_scores.score_turbine`). With
    ``calibration_truth = "process_noise"`` (the default) each repeat's truth is drawn anew with the
    filters' own Q in it (:func:`truth_process_cov`) and the pooled values are over the repeats alone: a
    truth without process noise is not a draw from the model a filter with a random-walk Q assumes, and
    its directly measured states over-cover for that reason (the module docstring); with ``"same"`` the
    repeats keep the first record's truth and the pooled values include the first record
    (:func:`~twinfer.infer.graph._turbine_scores.pool_scores`).
    Every record runs on the first record's graphs (``first``) with its own initial states
    (:func:`~twinfer.infer.graph._turbine_scores.with_initial_states`), so all records share one compiled
    program per estimator.
    """
    labels = ["distributed", *(["central"] if config.central else [])]
    noisy = config.calibration_truth == "process_noise"
    scores: dict[str, list[dict[str, float]]] = {label: [] if noisy else [dict(metrics)] for label in labels}
    q_truth = truth_process_cov(config, params) if noisy else None
    warned: list[str] = []
    for r in range(1, config.repeats):
        progress("calibration repeats", r - 1, config.repeats - 1)
        data = simulate(config, params, r, q_truth)
        for label in labels:
            g = with_initial_states(
                build_graph(config, params, narx, data, sd_h, r)
                if label == "distributed"
                else central(config, params, r),
                first[label],
            )
            schedule = config.schedule if label == "distributed" else "jacobi"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", FilterConsistencyWarning)
                est = estimate(g, data, Distributed(schedule=schedule))
            warned += [f"{label} record {r + 1}: {w.message}" for w in caught]
            one: dict[str, float] = {}
            score_turbine(label, est, data, config.lateral_window, config.parameter_window, one)
            scores[label].append(one)
    progress("calibration repeats", config.repeats - 1, config.repeats - 1)
    for label in labels:
        pool_scores(label, scores[label], ESTIMATED, metrics)
    what = (
        f"the {config.repeats - 1} records after the first, each truth drawn anew with the filters' Q on "
        "the 13 estimated states (a truth the filters' model describes; the first record's is the paper's, "
        "without process noise)"
        if noisy
        else f"{config.repeats} records (sensor noise and initial draw redrawn, the same truth)"
    )
    notes = [
        f"pooled.*: coverage over {what}, the NARX kept: one record's time fraction holds only a few "
        "independent samples of the slow torsion's error, so the pooled value is the estimate of each "
        "state's coverage probability; coverage95_spread is the range over the records."
    ]
    return notes + [f"Warning, {w}" for w in warned]


def truth_process_cov(config: TurbineConfig, params: PeltonParams) -> np.ndarray:
    """The process noise (19, 19) of a calibration record's truth, per estimator step.

    The central filter's Q on the 13 :data:`ESTIMATED` states (Table S8's diagonal times ``q_scale``,
    the shaft's as one torque disturbance), zero on the governor's and the hydraulics' states.
    """
    names = tuple(PeltonTurbine(params).state_names)
    q = np.asarray(central(config, params).nodes[0].Q)[:19, :19]  # type: ignore[union-attr]
    keep = np.asarray([n in ESTIMATED for n in names])
    return q * np.outer(keep, keep)


def figures(arrays: Mapping[str, Any], config: TurbineConfig) -> dict[str, Any]:
    """States, coefficients and the NARX's fit (:func:`~twinfer.report.figures.turbine.turbine_figures`)."""
    return turbine_figures(arrays, COEFFICIENTS, config.lateral_window)


_ERROR = "an error: beating it passes"
PAPER: dict[str, PaperValue] = {
    "distributed.lateral_rmse": PaperValue(
        9.14e-6, "main text / S12: aggregate RMSE of (x_G, y_G, x_R, y_R), last 0.7 s", at_most(2.0, _ERROR)
    ),
    "distributed.nrmse_K_seal": PaperValue(
        5.25e-1, "main text: trajectory NRMSE of K_seal", at_most(2.0, _ERROR)
    ),
    "distributed.nrmse_e_x": PaperValue(
        1.19, "main text: trajectory NRMSE of e_x (their EKF omits e_h h)", at_most(1.0, "issue #21: beat it")
    ),
    "distributed.nrmse_e_y": PaperValue(8.23e-2, "main text: trajectory NRMSE of e_y", at_most(2.0, _ERROR)),
    "narx.online_rmse": PaperValue(2.42e-3, "S12 text: NARX one-step RMSE online", at_most(2.0, _ERROR)),
    "narx.test.rmse": PaperValue(1.94e-3, "Fig. S11: held-out test RMSE (physical)", at_most(2.0, _ERROR)),
    "narx.test.mse": PaperValue(3.77e-6, "Fig. S11: held-out test MSE (physical)"),
    "narx.test.mae": PaperValue(9.97e-4, "Fig. S11: held-out test MAE (physical)"),
    "narx.test.rmse_normalised": PaperValue(
        0.277362, "Fig. S11: held-out test RMSE (normalised units; depends on the data's spread)"
    ),
    **{
        f"{label}.coverage95.estimated_{end}": PaperValue(
            0.945,
            f"issue #21's band [0.90, 0.99], the first record ({end}imum over the 13 states): reported, the "
            "check is on the pooled records, since this record's truth (the paper's) has no process noise, "
            "which over-covers the measured states of any filter with Q (the module docstring)",
        )
        for label in ("distributed", "central")
        for end in ("min", "max")
    },
    **{
        f"{label}.pooled.coverage95.estimated_{end}": PaperValue(
            0.945,
            f"issue #21: every estimated state's coverage95 in [0.90, 0.99] ({end}imum over the 13 states, "
            "each pooled over the calibration records, whose truth carries the filters' Q)",
            near(0.045, "the band [0.90, 0.99]: under-coverage and over-coverage both fail"),
        )
        for label in ("distributed", "central")
        for end in ("min", "max")
    },
}


CASE = register(
    Case(
        name="turbine",
        description=(
            "Pelton turbine-generator: governor (none), NARX hydraulics (learned), rotational EKF, generator "
            "KF and runner UKF exchanging messages, against a central UKF (compositional-inference paper, "
            "Figs S10-S12, Tables S5-S8)."
        ),
        config_type=TurbineConfig,
        run=run,
        figures=figures,
        quick={
            "t_end": 3.0,
            "central": False,
            "scenarios": 4,
            "scenario_length": 3.0,
            "narx_lags": 20,
            "narx_hidden": 16,
            "narx_epochs": 3,
            "narx_stride": 8,
            "timing_repeats": 1,
            "repeats": 2,
        },
        paper=PAPER,
    )
)
