"""Joint state-parameter estimation by state augmentation (specs/compositional-inference.md 2.4).

Chosen named parameters are appended to the state with zero drift (d theta / dt = 0), so any
discretisation keeps them constant and only the filter's process noise moves them: a random walk whose
per-parameter variance is set in the filter's ``Q``. One helper serves every model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from twinfer.models import AbstractModel, Params, get_param, locate, set_params


def _from_base(name: str, doc: str) -> Any:
    """A read-only property that returns the attribute ``name`` of the wrapped ``base`` model."""
    return property(lambda self: getattr(self.base, name), doc=doc)


class Augmented(AbstractModel):
    """``base`` with the parameters named in ``unknown`` moved into the state (after the base state)."""

    base: AbstractModel
    params: Params
    unknown: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, base: AbstractModel, unknown: Sequence[str]):
        unknown = tuple(unknown)
        if not unknown:
            raise ValueError("augment unknown: expected at least one parameter name; received none.")
        for name in unknown:
            locate(base.params, name)  # KeyError naming the allowed names
        if len(set(unknown)) != len(unknown):
            raise ValueError(f"augment unknown: expected distinct names; received {unknown}.")
        self.base = base
        self.params = base.params
        self.unknown = unknown

    def _split(self, z: Any, params: Params) -> tuple[Any, Params]:
        n = self.base.n_state
        theta = z[n:]
        return z[:n], set_params(params, {name: theta[i] for i, name in enumerate(self.unknown)})

    def vector_field(self, t: Any, x: Any, u: Any, params: Params) -> Any:
        base_x, p = self._split(x, params)
        return jnp.concatenate([self.base.vector_field(t, base_x, u, p), jnp.zeros(len(self.unknown))])

    def output(self, t: Any, x: Any, u: Any, params: Params) -> Any:
        base_x, p = self._split(x, params)
        return self.base.output(t, base_x, u, p)

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.base.state_names + self.unknown

    input_names = _from_base("input_names", "The base model's inputs (augmentation adds none).")
    output_names = _from_base("output_names", "The base model's outputs (augmentation adds none).")

    def initial_state(
        self, x0: Float[ArrayLike, " n"], values: dict[str, float] | None = None
    ) -> Float[Array, " n+p"]:
        """Augmented initial state: ``x0`` then each unknown (from ``values`` or the model's params)."""
        values = values or {}
        theta = [values.get(name, get_param(self.params, name)) for name in self.unknown]
        return jnp.concatenate([jnp.asarray(x0, dtype=jnp.float64), jnp.asarray(theta, dtype=jnp.float64)])

    def named_params(
        self, means: Float[Array, "T n+p"], stds: Float[Array, "T n+p"]
    ) -> dict[str, tuple[Float[Array, " T"], Float[Array, " T"]]]:
        """Map augmented-state trajectories (T, n) back to ``{name: (mean (T,), sd (T,))}``."""
        n = self.base.n_state
        return {name: (means[:, n + i], stds[:, n + i]) for i, name in enumerate(self.unknown)}


def augment(model: AbstractModel, unknown: Sequence[str]) -> Augmented:
    """Augment ``model``'s state with the named parameters as random walks.

    Args:
        model: any twinfer model.
        unknown: scalar parameter names (``"k4"``) to estimate.

    Returns:
        An :class:`Augmented` model with state ``[x, theta]``.

    """
    return Augmented(model, unknown)
