"""The EMPS benchmark's two simulation protocols for a batch of parameter particles: open and closed loop.

Open loop (the pn-smc paper's test protocol): the plant driven by the measured force, from rest at the
first measured position. Closed loop (the benchmark's own): the plant inside its PD position loop, driven
only by the recorded reference ``qg`` and, on the validation set, the voltage pulses ``pulses_N``.

References:
    Longbottom, Champneys & Rogers (pn-smc paper), Sec. 4.3, Eq. (28); Janot, Gautier & Brunot (2019),
    "Data set and reference models of EMPS", Eq. 6, Sec. 3.5.

"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax.numpy as jnp
import numpy as np

from twinfer.models import EMPS
from twinfer.models.emps import pd_law
from twinfer.sim._particles import fine_input, particle_simulator, simulate_particles_feedback


def open_loop_simulator(
    model: EMPS,
    names: tuple[str, ...],
    data: Mapping[str, np.ndarray],
    m: int,
    fs: float,
    substeps: int,
    hold: str,
) -> Callable[[np.ndarray], np.ndarray]:
    """``thetas (N, p) -> positions (N, m)``: the first ``m`` samples of ``data`` simulated open loop.

    Args:
        model: the EMPS model (its parameters the base the particles' ``names`` replace).
        names: the parameters each particle row holds, in order.
        data: the record: measured force ``force`` and position ``q``.
        m: samples simulated.
        fs: the sampling rate [Hz].
        substeps: RK4 steps per sample.
        hold: how the force is held between samples (:func:`twinfer.sim.fine_input`).

    Returns:
        The particle simulator (:func:`twinfer.sim.particle_simulator`), from rest at ``q[0]``.

    """
    u_fine = fine_input(data["force"][:m], substeps, hold)
    x0 = jnp.array([data["q"][0], 0.0])
    return particle_simulator(model, model.params, names, x0, u_fine, 1.0 / fs / substeps, substeps, 0)


def simulate_closed_loop(
    model: EMPS,
    names: tuple[str, ...],
    thetas: np.ndarray,
    data: Mapping[str, np.ndarray],
    m: int,
    fs: float,
    substeps: int,
) -> np.ndarray:
    """The first ``m`` samples simulated inside the benchmark's PD loop (Janot et al., Eq. 6, Sec. 3.5).

    Driven only by the recorded signals: the reference ``qg`` and, on the validation set, ``pulses_N``
    added to the control voltage (zero on the estimation set); the plant starts at rest at the measured
    first position.

    Args:
        model: the EMPS model.
        names: the parameters each particle row holds.
        thetas: (N, len(names)) the particles.
        data: the record: ``q``, ``qg``, the gains ``kp``, ``kv``, ``gtau`` and optionally ``pulses_N``.
        m: samples simulated.
        fs: the sampling rate [Hz].
        substeps: RK4 steps per sample.

    Returns:
        (N, m) the simulated positions.

    """
    q0 = float(data["q"][0])
    d = data.get("pulses_N", np.zeros_like(data["qg"]))
    law = pd_law(float(data["kp"]), float(data["kv"]), float(data["gtau"]), 1.0 / fs)
    return simulate_particles_feedback(
        model,
        model.params,
        names,
        thetas,
        jnp.array([q0, 0.0]),
        (data["qg"][:m], d[:m]),
        law,
        (jnp.asarray(q0), jnp.asarray(q0)),
        1.0 / fs / substeps,
        substeps,
        0,
    )
