"""Training data of a Pelton unit's hydraulics surrogate: the NARX of the turbine graph's M2 node.

The NARX of S106 predicts the head ``h`` from a window of the needle position ``x_n`` and the measured
flow ``q``, with the unit's static inputs ``[T_e, T_q, y_r, h0]``. It is trained on units the library
simulates itself (:func:`hydraulics_scenarios`): the nominal unit with its command, penstock, nozzle and
head varied, integrated monolithically, the flow measured with the sensor's noise, the record decimated to
the NARX's sampling.

References:
    Ghorbani & Hackl, SI (S93)-(S109) (the hydraulics and the NARX, S106); specs/compositional-inference.md
    3.6.

"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferValueError
from twinfer.models import PeltonParams, PeltonTurbine
from twinfer.models.turbine_parts import pelton_unit_rhs
from twinfer.sim import rk4_step, simulate_batch


def narx_statics(params: PeltonParams) -> np.ndarray:
    """The NARX's static inputs u_stat = [T_e, T_q, y_r, h0] of a unit (S106)."""
    return np.asarray([params.T_e, params.T_q, params.y_r, params.h0])


def scenario_units(key: Any, n: int) -> list[PeltonParams]:
    """Units for the NARX's training: the nominal unit with its command, penstock, nozzle and head varied.

    Each scenario draws the governor command's amplitude (0.04-0.16 p.u.) and frequency (0.05-0.5 Hz),
    T_e and T_q (+-15 %), y_r (0.85-0.95) and h0 (0.95-1.05) uniformly: the static inputs [T_e, T_q,
    y_r, h0] of S106 vary, and the needle and flow cover the operating range.
    """
    base = PeltonParams()
    u = np.asarray(jax.random.uniform(key, (n, 6)))
    return [
        dataclasses.replace(
            base,
            A_s=0.04 + 0.12 * float(row[0]),
            f_s=0.05 + 0.45 * float(row[1]),
            T_e=base.T_e * (0.85 + 0.3 * float(row[2])),
            T_q=base.T_q * (0.85 + 0.3 * float(row[3])),
            y_r=0.85 + 0.1 * float(row[4]),
            h0=0.95 + 0.1 * float(row[5]),
        )
        for row in u
    ]


def hydraulics_scenarios(
    key: Any, n: int, length: float, dt: float, substeps: int, q_noise_sd: float, spacing: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Training scenarios ``(dynamic [x_n, measured q], static, h)`` of M2's NARX at its sampling.

    Each of ``n`` units of :func:`scenario_units` is simulated monolithically over ``length`` seconds (RK4,
    ``substeps`` steps per estimator step ``dt``) from the standalone initial state; the flow is measured
    with the sensor's noise ``q_noise_sd``. The record is decimated to one sample every ``spacing``
    steps, with the target h one estimator step after each sample (:func:`~twinfer.learn.narx_windows`
    pairs the window ending at sample j with target j + 1, so the target series is h at ``spacing (j +
    1) - spacing + 1`` steps), as the turbine graph's M2 node reads it online.

    Returns:
        One ``(dynamic (N, 2), static (4,), target (N,))`` per scenario, for :func:`~twinfer.learn.fit_narx`.

    Raises:
        TwinferValueError: fewer than one scenario, a record shorter than one NARX sample, or a spacing
            or substep count below 1.

    References:
        Ghorbani & Hackl, SI (S106) (the NARX's inputs and window).

    """
    steps = int(round(length / dt))
    if n < 1 or spacing < 1 or substeps < 1 or steps < spacing:
        raise TwinferValueError(
            "hydraulics_scenarios: expected n >= 1, spacing >= 1, substeps >= 1 and length >= spacing dt; "
            f"received n = {n}, spacing = {spacing}, substeps = {substeps}, length = {length} (dt = {dt})."
        )
    k_params, k_noise = jax.random.split(key)
    units = scenario_units(k_params, n)
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.asarray(xs), *units)
    x0 = jax.vmap(lambda p: PeltonTurbine(p).initial_state())(stacked)
    zero = jnp.zeros((len(units), steps, 0))
    states = np.asarray(simulate_batch(pelton_unit_rhs, rk4_step, stacked, x0, zero, dt, substeps))
    names = tuple(PeltonTurbine(units[0]).state_names)
    x_n, h, q = (states[:, :, names.index(s)] for s in ("x_n", "h", "q"))
    q_meas = q + q_noise_sd * np.asarray(jax.random.normal(k_noise, q.shape))
    s = spacing
    out = []
    for i, p in enumerate(units):
        dyn = np.stack([x_n[i], q_meas[i]], axis=1)[s - 1 :: s]  # samples at steps s-1, 2s-1, ...
        target = h[i, 0::s]  # target[j + 1] = h one step after sample j (step s (j + 1))
        m = min(len(dyn), len(target))
        out.append((dyn[:m], narx_statics(p), target[:m]))
    return out
