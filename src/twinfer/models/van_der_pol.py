"""The Van der Pol oscillator, as the Modelica Association's Reference FMU ``VanDerPol`` writes it.

    x0' = x1,
    x1' = mu (1 - x0^2) x1 - x0,

state ``[x0, x1]``, no input, outputs both states. The JAX twin of ``VanDerPol.fmu`` (its
``sources/model.c``): the oracle of the FMU tests and the baseline of ``twinfer bench fmu``.

References:
    van der Pol (1926), "On relaxation-oscillations"; Modelica Association, Reference FMUs
    (``VanDerPol``).

"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from twinfer.models._base import AbstractModel, Params


class VanDerPol(AbstractModel):
    """Van der Pol with damping parameter ``mu`` (the Reference FMU's default is 1)."""

    params: Params

    def __init__(self, mu: float = 1.0) -> None:
        self.params = {"mu": jnp.asarray(mu, dtype=jnp.float64)}

    def vector_field(self, t: Any, x: Any, u: Any, params: Params) -> Any:
        return jnp.stack([x[1], params["mu"] * ((1.0 - x[0] * x[0]) * x[1]) - x[0]])

    def output(self, t: Any, x: Any, u: Any, params: Params) -> Any:
        return x

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("x0", "x1")

    @property
    def input_names(self) -> tuple[str, ...]:
        return ()

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("x0", "x1")
