"""Scores of the turbine graphs' estimates against a simulated truth: the standalone unit and the grid.

:func:`score_turbine` gives the standalone Pelton unit's lateral RMSE, coefficient NRMSEs and coverage per
state (section 3.6, [REPO] windows); :func:`pool_scores` pools the coverage of several records of it;
:func:`with_initial_states` reruns a record on the first record's graph (one compiled program).
:func:`score_turbine_grid` gives Table S11 per generator of the IEEE 9-bus hierarchy (section 3.7), with
:func:`speed_dip` (peak n, steady x_n) and :func:`rotor_angles`.

References:
    Ghorbani & Hackl, SI section 3.6, eq. (S93)-(S143), Tables S5-S8 and Figs S10-S12; section 3.7,
    eq. (S144)-(S150), Tables S9-S12 and Fig. S14; specs/compositional-inference.md 3.6-3.7.

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.data import Dataset
from twinfer.errors import TwinferValueError
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._parts import Subsystem
from twinfer.infer.graph._turbine import GRID_GENERATOR, GRID_RUNNER, TURBINE_COEFFICIENTS, TURBINE_ESTIMATED
from twinfer.metrics import coverage_by_name, moving_average, nrmse_constant, rmse
from twinfer.models import TurbineGrid
from twinfer.models.turbine_grid import UNIT_STATE_NAMES, torque_balance

TURBINE_LATERAL = ("x_G", "y_G", "x_R", "y_R")
"""The four lateral displacements the standalone unit's lateral RMSE pools."""
GRID_ESTIMATED = GRID_GENERATOR + GRID_RUNNER
"""The states the grid units' KFs estimate (M4, M5); everything else is propagated."""


def score_turbine(
    label: str,
    est: Any,
    data: Dataset,
    lateral_window: float,
    parameter_window: float,
    metrics: dict[str, float],
) -> None:
    """Lateral RMSE (last ``lateral_window`` s and whole record), coefficient NRMSEs, coverage per state.

    Writes ``{label}.*`` into ``metrics``: the record's log-likelihood, the lateral RMSE pooled over
    :data:`TURBINE_LATERAL` over the last ``lateral_window`` seconds and over the whole record, each
    lateral state's, the NRMSE of each coefficient against its truth 1.0 over ``t <= parameter_window``
    with its final value, sd and whether its final 95 % interval holds 1, and the 95 % coverage of every
    state the truth has (with its minimum and maximum, over all and over the filters' estimated states,
    :data:`~twinfer.infer.graph._turbine.TURBINE_ESTIMATED`: ``coverage95.estimated_min``/``_max``).

    Args:
        label: the metrics' prefix (the estimator).
        est: the estimate (``means``, ``stds``, ``state_names``, ``loglik``, ``interval``).
        data: the record, with its truth.
        lateral_window: the lateral RMSE's window at the record's end [s] ([REPO] 0.7).
        parameter_window: the coefficients' NRMSE window from the start [s] ([REPO] 80).
        metrics: where the scores go.

    References:
        Ghorbani & Hackl, SI section 3.6 and Fig. S12 (lateral RMSE, trajectory NRMSE); specs 3.6 [REPO].

    """
    t = np.asarray(data.times)
    truth = np.asarray(data.truth_states)
    truth_names = tuple(data.state_names)
    means, stds = np.asarray(est.means), np.asarray(est.stds)
    names = tuple(est.state_names)
    tail = t >= t[-1] - lateral_window + 1e-12
    lat, lat_true = (
        np.stack([v[:, n.index(s)] for s in TURBINE_LATERAL], axis=1)
        for v, n in ((means, names), (truth, truth_names))
    )
    metrics[f"{label}.loglik"] = float(est.loglik)  # of the record: compares noise settings (docs/tuning.md)
    metrics[f"{label}.lateral_rmse"] = float(rmse(lat[tail], lat_true[tail]))  # pooled over the four
    metrics[f"{label}.lateral_rmse_all"] = float(rmse(lat[1:], lat_true[1:]))
    for s in TURBINE_LATERAL:
        j, k = names.index(s), truth_names.index(s)
        metrics[f"{label}.rmse_{s}"] = float(rmse(means[tail, j], truth[tail, k]))
    early = t <= parameter_window
    for c in TURBINE_COEFFICIENTS:
        j = names.index(c)
        metrics[f"{label}.nrmse_{c}"] = float(nrmse_constant(means[early, j], 1.0))
        metrics[f"{label}.{c}"] = float(means[-1, j])
        metrics[f"{label}.{c}.sd"] = float(stds[-1, j])
        lo, hi = est.interval(c, 0.95)
        metrics[f"{label}.{c}.in95"] = float(lo <= 1.0 <= hi)
    cov = coverage_by_name(means[1:], stds[1:], names, truth[1:], truth_names)
    metrics.update({f"{label}.coverage95.{s}": c for s, c in cov.items()})
    metrics[f"{label}.coverage95.min"] = float(min(cov.values()))
    metrics[f"{label}.coverage95.max"] = float(max(cov.values()))
    estimated = [cov[s] for s in TURBINE_ESTIMATED if s in cov]
    metrics[f"{label}.coverage95.estimated_min"] = float(min(estimated))
    metrics[f"{label}.coverage95.estimated_max"] = float(max(estimated))


def pool_scores(
    label: str, runs: Sequence[Mapping[str, float]], estimated: Sequence[str], metrics: dict[str, float]
) -> None:
    """Coverage pooled over records scored by :func:`score_turbine`: ``{label}.pooled.*``.

    Per state of ``estimated`` scored in every record, ``pooled.coverage95.s`` is the mean over the
    records and ``pooled.coverage95_spread.s`` the range of their values (with the pooled minimum and
    maximum over these states); per coefficient, ``pooled.<c>.in95`` is the fraction of records whose
    final 95 % interval holds 1; ``pooled.records`` counts them. One record's time fraction inside the
    band estimates a coverage probability poorly where the error is a slow mode (the torsion rings for
    tens of seconds), so the pooled value is the estimate of each state's coverage probability.
    """
    pooled = []
    for state in estimated:
        key = f"{label}.coverage95.{state}"
        values = [m[key] for m in runs if key in m]
        if len(values) == len(runs):
            metrics[f"{label}.pooled.coverage95.{state}"] = float(np.mean(values))
            metrics[f"{label}.pooled.coverage95_spread.{state}"] = float(np.ptp(values))
            pooled.append(float(np.mean(values)))
    metrics[f"{label}.pooled.coverage95.estimated_min"] = float(min(pooled))
    metrics[f"{label}.pooled.coverage95.estimated_max"] = float(max(pooled))
    for c in TURBINE_COEFFICIENTS:
        metrics[f"{label}.pooled.{c}.in95"] = float(np.mean([m[f"{label}.{c}.in95"] for m in runs]))
    metrics[f"{label}.pooled.records"] = float(len(runs))


def with_initial_states(record: Graph, first: Graph) -> Graph:
    """``first`` with ``record``'s initial states: the program compiled for ``first`` runs it.

    A record's graph differs from the first record's only in its subsystems' ``x0``, but its transitions
    are new closures, which :func:`twinfer.infer.graph._run.compiled_for` would take for a new structure and
    compile anew (a minute at full size per estimator).
    """
    nodes = [n for n in record.nodes if isinstance(n, Subsystem)]
    if len(nodes) != len(record.nodes) or len(first.nodes) != len(nodes):
        raise TwinferValueError(
            f"turbine records: expected graphs of subsystems only, of one size; received {len(record.nodes)} "
            f"nodes ({len(nodes)} subsystems) and a first graph of {len(first.nodes)}"
        )
    return eqx.tree_at(lambda g: [n.x0 for n in g.nodes], first, [n.x0 for n in nodes])


class GridWindows(NamedTuple):
    """Where Table S11's grid scores are read: the load step, the step and the smoothing windows.

    ``t_on``/``t_off`` bound the load step [s], ``dt`` is the record's step [s], ``steady_window`` the
    seconds before the step ends over which steady x_n is averaged, ``alpha_window`` and
    ``beta_window`` the samples of the centred moving averages giving alpha_dc and the smoothed beta.
    """

    t_on: float
    t_off: float
    dt: float
    steady_window: float
    alpha_window: int
    beta_window: int


class EstimateRows(NamedTuple):
    """The rows of an estimate that :func:`score_turbine_grid` reads (a window of a longer estimate)."""

    means: np.ndarray
    stds: np.ndarray
    state_names: tuple[str, ...]


def rotor_angles(names: Sequence[str], values: np.ndarray, n_bus: int) -> np.ndarray:
    """The bus angles ``delta_1..delta_n`` (T, n_bus) of ``values`` (T, state) with columns ``names``."""
    names = list(names)
    return np.stack([values[:, names.index(f"delta_{b + 1}")] for b in range(n_bus)], axis=1)


def speed_dip(
    windows: GridWindows, t: np.ndarray, n: np.ndarray, x_n: np.ndarray, key: str, gen: str
) -> dict[str, float]:
    """Table S11's peak n (the largest |n| while the step is on, signed) and steady x_n of one unit.

    Peak n is read while the load step is on; steady x_n is the mean over ``steady_window`` before it ends
    (or before the record's end). The keys are ``{key}peak_n.{gen}`` and ``{key}steady_x_n.{gen}``.

    References:
        Ghorbani & Hackl, SI section 3.7, Table S11 and Fig. S14.

    """
    after = (t >= windows.t_on) & (t < windows.t_off)
    end = min(windows.t_off, t[-1] + windows.dt)
    steady = (t >= end - windows.steady_window) & (t < end)
    out = {}
    if after.any():
        out[f"{key}peak_n.{gen}"] = float(n[after][np.argmax(np.abs(n[after]))])
    if steady.any():
        out[f"{key}steady_x_n.{gen}"] = float(np.mean(x_n[steady]))
    return out


def score_turbine_grid(
    label: str,
    est: Any,
    data: Dataset,
    model: TurbineGrid,
    windows: GridWindows,
    ref: np.ndarray,
    metrics: dict[str, float],
) -> np.ndarray:
    """Table S11 per generator, peak n, steady x_n, DC T_e, coverage of the KF states, (n, x_n, q) RMSEs.

    Over the estimate's rows (the whole record, or a window at its start). Per generator: the RMSE of the
    measured displacements pooled over x and y, of v_xR and v_yR, of alpha_dc and of the smoothed beta
    (centred moving averages, :func:`twinfer.metrics.moving_average`), :func:`speed_dip` of the estimate
    and of the truth, the DC electrical torque before the step, and the 95 % coverage of the KF states
    (:data:`GRID_ESTIMATED`); over all: the aggregate RMSE of (n, x_n, q) against the truth and against
    the standalone reference ``ref`` (U, T, 19), and the RMSE of the bus angles.

    Returns:
        The estimate's electrical torque ``T_e`` (T, U), from its bus angles.

    References:
        Ghorbani & Hackl, SI section 3.7, eq. (S146)-(S148), Table S11; specs 3.7 [REPO].

    """
    rows = np.asarray(est.means).shape[0]
    t = np.asarray(data.times)[:rows]
    truth = np.asarray(data.truth_states)[:rows]
    truth_names = tuple(data.state_names)
    means, stds = np.asarray(est.means), np.asarray(est.stds)
    names = tuple(est.state_names)

    def m(s: str) -> np.ndarray:
        return means[:, names.index(s)]

    def x(s: str) -> np.ndarray:
        return truth[:, truth_names.index(s)]

    t_e = np.asarray(
        jax.vmap(model.electrical_torque_at)(jnp.asarray(rotor_angles(names, means, model.K.shape[0])))
    )
    before = t < windows.t_on
    kf = [f"{s}_{b + 1}" for b in model.gen_buses for s in GRID_ESTIMATED]  # the KFs' states
    cols = [names.index(s) for s in kf]
    covered = coverage_by_name(means[1:, cols], stds[1:, cols], kf, truth[1:], truth_names)
    cov_all, est_nxq, true_nxq, ref_nxq = [], [], [], []
    for i, b in enumerate(model.gen_buses):
        tag, gen = f"_{b + 1}", f"gen{i + 1}"
        for part in ("G", "R"):  # the measured displacements, pooled over x and y
            pair = [f"{c}_{part}{tag}" for c in ("x", "y")]
            est_xy, true_xy = (np.stack([get(s)[1:] for s in pair]) for get in (m, x))
            metrics[f"{label}.rmse_xy_{part}.{gen}"] = float(rmse(est_xy, true_xy))
        metrics[f"{label}.rmse_vx_R.{gen}"] = float(rmse(m(f"vx_R{tag}"), x(f"vx_R{tag}")))
        metrics[f"{label}.rmse_vy_R.{gen}"] = float(rmse(m(f"vy_R{tag}"), x(f"vy_R{tag}")))
        a_est, a_true = (
            moving_average(v, windows.alpha_window) for v in (m(f"alpha{tag}"), x(f"alpha{tag}"))
        )
        metrics[f"{label}.rmse_alpha_dc.{gen}"] = float(rmse(a_est, a_true))
        b_est, b_true = (moving_average(v, windows.beta_window) for v in (m(f"beta{tag}"), x(f"beta{tag}")))
        metrics[f"{label}.rmse_beta_smooth.{gen}"] = float(rmse(b_est, b_true))
        for src, get in (("", m), ("truth.", x)):
            key = f"{label}." if not src else f"{label}.{src}"
            metrics.update(speed_dip(windows, t, get(f"n{tag}"), get(f"x_n{tag}"), key, gen))
        if before.any():
            metrics[f"{label}.dc_T_e_MNm.{gen}"] = float(np.mean(t_e[before, i]) / 1e6)
        gen_cov = [covered[f"{s}{tag}"] for s in GRID_ESTIMATED]
        metrics.update(
            {f"{label}.coverage95.{gen}.{s}": c for s, c in zip(GRID_ESTIMATED, gen_cov, strict=True)}
        )
        cov_all += gen_cov
        metrics[f"{label}.coverage95.{gen}.min"] = float(min(gen_cov))
        metrics[f"{label}.coverage95.{gen}.max"] = float(max(gen_cov))
        unit = list(UNIT_STATE_NAMES)
        for s in ("n", "x_n", "q"):
            est_nxq.append(m(f"{s}{tag}"))
            true_nxq.append(x(f"{s}{tag}"))
            ref_nxq.append(ref[i, :rows, unit.index(s)])
    metrics[f"{label}.coverage95.min"] = float(min(cov_all))
    metrics[f"{label}.coverage95.max"] = float(max(cov_all))
    metrics[f"{label}.rmse_n_xn_q"] = float(rmse(np.stack(est_nxq), np.stack(true_nxq)))
    metrics[f"{label}.embedded_vs_standalone_rmse"] = float(rmse(np.stack(est_nxq), np.stack(ref_nxq)))
    n_bus = model.K.shape[0]
    metrics[f"{label}.rmse_delta"] = float(
        rmse(rotor_angles(names, means, n_bus), rotor_angles(truth_names, truth, n_bus))
    )
    return t_e


def operating_point_tables(model: TurbineGrid) -> dict[str, float]:
    """Tables S9 and S10 of the grid's operating point: bus angles, NR residual, torques per generator.

    ``table_s9.delta_deg.bus<b>`` (the Newton-Raphson solution of the Kuramoto balance, degrees),
    ``table_s9.nr_residual`` and ``nr_iterations``; per generator ``table_s10.M_t_MNm``, ``T_e_MNm`` and
    ``residual_MNm`` (:func:`twinfer.models.torque_balance`, MN m).

    References:
        Ghorbani & Hackl, SI section 3.7, eq. (S144)-(S146), Tables S9-S10.

    """
    out: dict[str, float] = {}
    op = model.operating_point
    for b, deg in enumerate(np.rad2deg(op.delta)):
        out[f"table_s9.delta_deg.bus{b + 1}"] = float(deg)
    out["table_s9.nr_residual"] = float(op.residual)
    out["table_s9.nr_iterations"] = float(op.iterations)
    balance = torque_balance(model)
    for i in range(model.n_gen):
        out[f"table_s10.M_t_MNm.gen{i + 1}"] = float(balance.M_t[i] / 1e6)
        out[f"table_s10.T_e_MNm.gen{i + 1}"] = float(balance.T_e[i] / 1e6)
        out[f"table_s10.residual_MNm.gen{i + 1}"] = float(balance.residual[i] / 1e6)
    return out


def standalone_rmse(model: TurbineGrid, truth: np.ndarray, names: Sequence[str], ref: np.ndarray) -> float:
    """The aggregate RMSE of (n, x_n, q) of every generator between ``truth`` and the standalone ``ref``.

    ``truth`` (T, state) has the columns ``names``; ``ref`` (U, T, 19) holds each unit simulated alone
    (:func:`twinfer.sim.simulate_standalone_units`), the [REPO] reference of section 3.7's results.
    """
    unit, names = list(UNIT_STATE_NAMES), list(names)
    truth_ref = [
        truth[:, names.index(f"{s}_{b + 1}")] - ref[i, :, unit.index(s)]
        for i, b in enumerate(model.gen_buses)
        for s in ("n", "x_n", "q")
    ]
    return float(np.sqrt(np.mean(np.square(truth_ref))))


def truth_speed_dips(windows: GridWindows, model: TurbineGrid, data: Dataset, key: str) -> dict[str, float]:
    """:func:`speed_dip` of every generator of a record's truth (keys ``{key}peak_n.gen<i>``, ...)."""
    truth, names, t = np.asarray(data.truth_states), list(data.state_names), np.asarray(data.times)
    out: dict[str, float] = {}
    for i, b in enumerate(model.gen_buses):
        n, x_n = (truth[:, names.index(f"{s}_{b + 1}")] for s in ("n", "x_n"))
        out.update(speed_dip(windows, t, n, x_n, key, f"gen{i + 1}"))
    return out
