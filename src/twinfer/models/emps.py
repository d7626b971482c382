"""EMPS electro-mechanical positioning system: rigid mass with viscous and Coulomb friction.

    M q'' + Fv q' + Fc sign(q') + offset = tau(t),

state ``[q, v]`` (motor position [m], velocity [m/s]), input the motor force ``tau = gtau * vir`` [N],
output the position ``q``. The plant only: the benchmark's parameter estimates and its digital position
controller belong to the ``emps`` case (:mod:`twinfer.experiments.emps`).

References:
    Longbottom, Champneys & Rogers, Eq. (28); Janot, Gautier & Brunot (2019), EMPS benchmark, Eq. (1).

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
