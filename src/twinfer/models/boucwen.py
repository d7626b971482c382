"""Bouc-Wen hysteretic oscillator (the nonlinear system-identification benchmark of Noël & Schoukens).

    m x'' + c x' + k x + z = u(t),
    z' = alpha x' - beta (gamma |x'| |z|^(nu-1) z + delta x' |z|^nu),

state ``[x, v, z]``, input the force u [N], outputs the displacement ``x`` [m] and the acceleration
``a`` [m/s^2]. Benchmark values: m = 2 kg, c = 10 N s/m, k = 5e4 N/m, alpha = 5e4 N/m, beta = 1e3 1/m,
gamma = 0.8, delta = -1.1, nu = 1.

References:
    Longbottom, Champneys & Rogers, Eq. (26) (``k y`` read as ``k x``); Noël & Schoukens (2016),
    "Hysteretic benchmark with a dynamic nonlinearity".

"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from twinfer.models._base import AbstractModel, Input, Output, Params, State

BENCHMARK_PARAMS: dict[str, float] = {
    "m": 2.0,
    "c": 10.0,
    "k": 5e4,
    "alpha": 5e4,
    "beta": 1e3,
    "gamma": 0.8,
    "delta": -1.1,
    "nu": 1.0,
}


class BoucWen(AbstractModel):
    """Single-DOF Bouc-Wen oscillator; every coefficient is a named scalar parameter."""

    params: Params

    def __init__(self, **values: float):
        unknown = set(values) - set(BENCHMARK_PARAMS)
        if unknown:
            raise ValueError(
                f"BoucWen: unknown parameters {sorted(unknown)}; expected {sorted(BENCHMARK_PARAMS)}."
            )
        merged = {**BENCHMARK_PARAMS, **values}
        if merged["m"] <= 0:
            raise ValueError(f"BoucWen m: expected a positive mass; received {merged['m']}.")
        self.params = {name: jnp.asarray(value, jnp.float64) for name, value in merged.items()}

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("x", "v", "z")

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("u",)

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("x", "a")

    def acceleration(self, x: State, u: Input, params: Params) -> Any:
        """``(u - c v - k x - z) / m``."""
        return (jnp.sum(u) - params["c"] * x[1] - params["k"] * x[0] - x[2]) / params["m"]

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        v, z = x[1], x[2]
        # |z|^(nu-1) z = sign(z) |z|^nu: the same function, with finite derivatives at z = 0
        z_nu = jnp.abs(z) ** params["nu"]
        dz = params["alpha"] * v - params["beta"] * z_nu * (
            params["gamma"] * jnp.abs(v) * jnp.sign(z) + params["delta"] * v
        )
        return jnp.stack([v, self.acceleration(x, u, params), dz])

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        return jnp.stack([x[0], self.acceleration(x, u, params)])
