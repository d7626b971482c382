"""EMPS electro-mechanical positioning system: rigid mass with viscous and Coulomb friction.

    M q'' + Fv q' + Fc sign(q') + offset = tau(t),

state ``[q, v]`` (motor position [m], velocity [m/s]), input the motor force ``tau = gtau * vir`` [N],
output the position ``q``. The benchmark's digital position controller (Janot et al., Eqs. 6-7) is here
too, as :func:`pd_voltage` and the feedback law :func:`pd_law` of a sampled closed-loop simulation.

References:
    Longbottom, Champneys & Rogers, Eq. (28); Janot, Gautier & Brunot (2019), EMPS benchmark, Eqs. (1),
    (6)-(7) and Sec. 3.5.

"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from twinfer.models._base import AbstractModel, Input, Output, Params, State


class EMPS(AbstractModel):
    """Rigid EMPS axis with viscous and Coulomb friction and a constant force offset (Eq. 28).

    Args:
        M: moving mass [kg], positive.
        Fv: viscous friction coefficient [N s/m].
        Fc: Coulomb friction force [N].
        offset: constant force offset [N].

    """

    params: Params

    def __init__(self, *, M: float, Fv: float, Fc: float, offset: float):
        values = {"M": M, "Fv": Fv, "Fc": Fc, "offset": offset}
        for name, value in values.items():
            if not np.isfinite(value):
                raise ValueError(f"EMPS {name}: expected a finite number; received {value!r}.")
        if M <= 0:
            raise ValueError(f"EMPS M: expected a positive mass; received {M}.")
        self.params = {name: jnp.asarray(value, jnp.float64) for name, value in values.items()}

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("q", "v")

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("tau",)

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("q",)

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        v = x[1]
        force = jnp.sum(u) - params["Fv"] * v - params["Fc"] * jnp.sign(v) - params["offset"]
        return jnp.stack([v, force / params["M"]])

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        return x[:1]


VOLTAGE_LIMIT = 10.0
"""Saturation of the control voltage [V] (``viradm`` of the benchmark's simulation scripts)."""


def pd_voltage(qg: Any, q: Any, q_km2: Any, kp: Any, kv: Any, dt: float) -> Any:
    """Control voltage of the EMPS position loop at sample k (Janot et al., Eq. 6), before saturation.

        nu_k = kp kv (qg_k - q_k) - kv qdot_k,   qdot_k = (q_k - q_{k-2}) / (2 dt),

    the velocity being the backward difference of the position filtered by ``[0.5, 0.5]`` (``filterq1``
    of the benchmark's scripts): ``qf_k = (q_k + q_{k-1}) / 2``, ``qdot_k = (qf_k - qf_{k-1}) / dt``.

    Args:
        qg: reference position(s) ``qg_k`` [m].
        q: measured or simulated position(s) ``q_k`` [m].
        q_km2: the position two samples earlier ``q_{k-2}`` [m].
        kp: position-loop gain [1/s].
        kv: velocity-loop gain [V/(m/s)].
        dt: sampling period [s].

    Returns:
        ``nu_k`` [V] (element-wise over arrays).

    References:
        Janot, Gautier & Brunot (2019), Eq. (6) and Sec. 3.5.

    """
    return kp * kv * (qg - q) - kv * (q - q_km2) / (2.0 * dt)


def pd_law(kp: Any, kv: Any, gtau: Any, dt: float, limit: float = VOLTAGE_LIMIT) -> Any:
    """The EMPS digital controller as a feedback law for a sampled closed-loop simulation.

    State ``(q_{k-1}, q_{k-2})``, signals ``r_k = (qg_k, d_k)`` (reference position and the voltage added
    to the controller output, the pulses of the validation set), output ``q_k``; the force held over
    ``(t_k, t_{k+1}]`` is ``tau_k = gtau * sat(nu_k + d_k)`` with :func:`pd_voltage` and ``sat`` the
    clip at ``+-limit`` V (Janot et al., Eqs. 6-7, Fig. 2).

    Returns:
        ``law(state, r_k, q_k) -> (tau_k (1,), state')`` for :func:`twinfer.sim.simulate_particles_feedback`.

    """

    def law(state: Any, r: Any, q: Any) -> tuple[Any, Any]:
        q_km1, q_km2 = state
        qg, d = r
        nu = jnp.clip(pd_voltage(qg, q, q_km2, kp, kv, dt) + d, -limit, limit)
        return jnp.reshape(gtau * nu, (1,)), (q, q_km1)

    return law
