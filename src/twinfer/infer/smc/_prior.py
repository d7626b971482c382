"""Priors that are Gaussian in a declared sampling space (identity or log per parameter).

The IBIS sampler works in the sampling space ``z``: the prior density, the independent MH proposal
and the acceptance ratio all live there (specs/pn-smc.md 2.6). A log-space parameter with
``z ~ N(loc, scale^2)`` has a log-normal prior on the natural scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray


class TransformedNormalPrior(eqx.Module):
    """Independent normal priors in sampling space; ``theta = exp(z)`` where ``log`` else ``z``.

    Attributes:
        names: parameter names (model parameter names, e.g. ``k1``).
        loc: prior means in sampling space ``(p,)``.
        scale: prior standard deviations in sampling space ``(p,)``.
        log: per parameter, whether it is sampled in log space.

    """

    names: tuple[str, ...] = eqx.field(static=True)
    loc: Float[Array, " p"]
    scale: Float[Array, " p"]
    log: tuple[bool, ...] = eqx.field(static=True)

    def __check_init__(self) -> None:
        p = len(self.names)
        if np.shape(self.loc) != (p,) or np.shape(self.scale) != (p,) or len(self.log) != p:
            raise ValueError(
                f"TransformedNormalPrior: expected loc, scale and log of length {p} (one per name); "
                f"received shapes {np.shape(self.loc)}, {np.shape(self.scale)}, {len(self.log)}."
            )
        if not np.all(np.asarray(self.scale) > 0):
            raise ValueError(
                f"TransformedNormalPrior scale: expected positive values; received {self.scale}."
            )

    @classmethod
    def from_spec(cls, spec: Mapping[str, tuple[str, float, float]]) -> TransformedNormalPrior:
        """Build from ``{name: ("normal", mean, sd)}`` or ``{name: ("lognormal", median, sd_of_log)}``."""
        names, loc, scale, log = [], [], [], []
        for name, (kind, a, b) in spec.items():
            if kind not in ("normal", "lognormal"):
                raise ValueError(f"prior {name!r}: expected kind 'normal' or 'lognormal'; received {kind!r}.")
            if kind == "lognormal" and a <= 0:
                raise ValueError(f"prior {name!r}: a log-normal median must be > 0; received {a}.")
            names.append(name)
            loc.append(np.log(a) if kind == "lognormal" else a)
            scale.append(b)
            log.append(kind == "lognormal")
        return cls(tuple(names), jnp.asarray(loc, jnp.float64), jnp.asarray(scale, jnp.float64), tuple(log))

    @property
    def dim(self) -> int:
        return len(self.names)

    def to_natural(self, z: Float[ArrayLike, "... p"]) -> Float[Array, "... p"]:
        """Natural-scale parameters from sampling-space values (last axis = parameters)."""
        return jnp.where(jnp.asarray(self.log), jnp.exp(z), z)

    def to_sampling(self, theta: Float[ArrayLike, "... p"]) -> Float[Array, "... p"]:
        """Sampling-space values from natural-scale parameters."""
        return jnp.where(jnp.asarray(self.log), jnp.log(jnp.where(jnp.asarray(self.log), theta, 1.0)), theta)

    def log_density(self, z: Float[Array, "... p"]) -> Float[Array, "..."]:
        """Log prior density in sampling space (sum over the last axis)."""
        r = (z - self.loc) / self.scale
        return jnp.sum(-0.5 * r**2 - jnp.log(self.scale) - 0.5 * jnp.log(2 * jnp.pi), axis=-1)

    def sample(self, key: PRNGKeyArray, n: int) -> Float[Array, "n p"]:
        """``(n, p)`` draws in sampling space."""
        return self.loc + self.scale * jax.random.normal(key, (n, self.dim))

    def natural_dict(
        self, theta: Float[Array, " p"] | Float[np.ndarray, " p"] | Sequence[Any]
    ) -> dict[str, Any]:
        """``{name: value}`` of one natural-scale parameter vector."""
        return {name: theta[i] for i, name in enumerate(self.names)}
