"""The measurement record of one interface of a simulated chain, as the measured-law fit sees it.

A chain cut into two-mass segments exchanges the force of the spring-damper between them (eq. S24). The
SINDy law of that interface is fitted from measurements only (:func:`twinfer.learn.fit_measured_law`):
:func:`chain_interface_record` takes a simulated record of the 4-DOF chain (forces, measurement noise,
states and accelerations) and returns S1's side of the (k3, c3) interface as an
:class:`~twinfer.learn._measured_law.InterfaceRecord`, with the true interface force kept apart for the
oracle target.

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource for coupled engineered systems",
    SI eq. (S20)-(S24) and (S47)-(S50), section 2.7; specs/compositional-inference.md 3.1.

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from jaxtyping import Float

from twinfer.learn._measured_law import InterfaceRecord
from twinfer.models.chain import spring_damper_force


def chain_interface_record(
    forces: Float[np.ndarray, "N 4"],
    noise: Float[np.ndarray, "N+1 4"],
    states: Float[np.ndarray, "N+1 8"],
    acc: Float[np.ndarray, "N+1 4"],
    segment: Mapping[str, Any],
    stiffness: float,
    damping: float,
    dt: float,
) -> tuple[InterfaceRecord, np.ndarray]:
    """S1's side of the (k3, c3) interface of a 4-DOF chain record, and the true interface force.

    Sample ``j`` holds the acceleration at ``t_{j+1}`` with the force of step ``j`` (the force that
    produced it, [REPO] measurement): the measured a1, a2, a3 (true accelerations plus ``noise``), the
    force on mass 2, and S1's known model (``segment``: the parameters of the segment of masses 1 and 2,
    its mass 2 and its inner spring-damper).

    Args:
        forces: the forces applied at each DOF over each step.
        noise: the accelerometers' noise at t_0..t_N.
        states: the true states ``[x1..x4, v1..v4]`` at t_0..t_N.
        acc: the true accelerations at t_0..t_N.
        segment: S1's parameters (``m``, ``k``, ``c``, per DOF of the segment).
        stiffness: the interface's true stiffness k3.
        damping: the interface's true damping c3.
        dt: the sampling step [s].

    Returns:
        The record, and the true force ``k3 (x2 - x3) + c3 (v2 - v3)`` (eq. S24) at the same samples.

    """
    meas = (acc + noise)[1:]
    record = InterfaceRecord(
        acc_inner=meas[:, 0],
        acc_send=meas[:, 1],
        acc_recv=meas[:, 2],
        force_send=np.asarray(forces[:, 1], dtype=np.float64),
        mass=float(segment["m"][1]),
        stiffness=float(segment["k"][1]),
        damping=float(segment["c"][1]),
        dt=dt,
    )
    true_force = spring_damper_force(
        stiffness, damping, states[1:, 1] - states[1:, 2], states[1:, 5] - states[1:, 6]
    )
    return record, np.asarray(true_force)
