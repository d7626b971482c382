"""EMPS electro-mechanical positioning system: rigid mass with viscous and Coulomb friction.

    M q'' + Fv q' + Fc sign(q') + offset = tau(t),

state ``[q, v]`` (motor position [m], velocity [m/s]), input the motor force ``tau = gtau * vir`` [N],
output the position ``q``.

References:
    Longbottom, Champneys & Rogers, Eq. (28); Janot, Gautier & Brunot (2019), EMPS benchmark.

"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from twinfer.models._base import AbstractModel, Input, Output, Params, State

IDIM_PARAMS: dict[str, float] = {"M": 95.1089, "Fv": 203.5034, "Fc": 20.3935, "offset": -3.1648}
"""Inverse-dynamics least-squares estimates of the benchmark's own scripts (specs/pn-smc.md 3.3)."""


class EMPS(AbstractModel):
    """Rigid EMPS axis; parameters ``M``, ``Fv``, ``Fc``, ``offset`` (defaults: the IDIM estimates)."""

    params: Params

    def __init__(self, **values: float):
        unknown = set(values) - set(IDIM_PARAMS)
        if unknown:
            raise ValueError(f"EMPS: unknown parameters {sorted(unknown)}; expected {sorted(IDIM_PARAMS)}.")
        merged = {**IDIM_PARAMS, **values}
        if merged["M"] <= 0:
            raise ValueError(f"EMPS M: expected a positive mass; received {merged['M']}.")
        self.params = {name: jnp.asarray(value, jnp.float64) for name, value in merged.items()}

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
