"""A network from normalised time to the full oscillator state, with its time derivative.

``z(t) = scale * MLP(features(t_hat))`` with ``t_hat = (t - t0) / span`` in [0, 1] (specs/pinn.md 2.2,
Eq 13). The optional features are deterministic sines and cosines of ``t_hat`` (a Fourier embedding), added
beyond the paper to overcome the spectral bias of a plain MLP on long windows; with ``n_fourier = 0`` the
input is ``t_hat`` alone, as in the paper. The time derivative comes from forward-mode autodiff and the
chain rule ``dz/dt = (1 / span) dz/dt_hat`` (specs 2.2).

References:
    Haywood-Alexander et al., "Response estimation and system identification of dynamical systems via
    physics-informed neural networks", arXiv:2410.01340, Eq 13 and section 3.1.

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "tanh": jnp.tanh,
    "silu": jax.nn.silu,
    "elu": jax.nn.elu,
    "sin": jnp.sin,
}


class StateNetwork(eqx.Module):
    """MLP ``t -> z = [u; v]`` (2n outputs) on a normalised time input.

    Attributes:
        mlp: the equinox MLP (the only trainable leaves).
        t0: start of the time window [s].
        span: length of the time window [s].
        out_scale: fixed output scale per state (not trained).
        freqs: frequencies (cycles per window) of the Fourier embedding; empty for the paper's plain input.

    """

    mlp: eqx.nn.MLP
    t0: float = eqx.field(static=True)
    span: float = eqx.field(static=True)
    out_scale: tuple[float, ...] = eqx.field(static=True)
    freqs: tuple[float, ...] = eqx.field(static=True)

    def __init__(
        self,
        key: Any,
        n_state: int,
        t0: float,
        span: float,
        *,
        width: int = 128,
        depth: int = 4,
        activation: str = "tanh",
        out_scale: Any = 1.0,
        n_fourier: int = 0,
        max_cycles: float = 0.0,
    ):
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"StateNetwork activation: expected one of {', '.join(ACTIVATIONS)}; received {activation!r}."
            )
        if not (np.isfinite(span) and span > 0):
            raise ValueError(f"StateNetwork span: expected a finite window length > 0; received {span!r}.")
        if n_fourier < 0 or (n_fourier > 0 and not max_cycles > 0):
            raise ValueError(
                f"StateNetwork n_fourier/max_cycles: expected n_fourier >= 0 and max_cycles > 0 when "
                f"n_fourier > 0; received {n_fourier}, {max_cycles}."
            )
        scale = np.broadcast_to(np.asarray(out_scale, dtype=np.float64), (n_state,))
        self.t0, self.span = float(t0), float(span)
        self.out_scale = tuple(float(s) for s in scale)
        # half-integer spacing avoids imposing periodicity on the window
        self.freqs = tuple(float(f) for f in np.linspace(0.5, max_cycles, n_fourier)) if n_fourier else ()
        self.mlp = eqx.nn.MLP(
            in_size=1 + 2 * len(self.freqs),
            out_size=n_state,
            width_size=width,
            depth=depth,
            activation=ACTIVATIONS[activation],
            key=key,
            dtype=jnp.float64,
        )

    def features(self, t_hat: Float[Array, ""]) -> Float[Array, " n_in"]:
        """Network input from normalised time: ``[t_hat, sin(2 pi f t_hat), cos(2 pi f t_hat)]``."""
        if not self.freqs:
            return t_hat[None]
        phase = 2 * jnp.pi * jnp.asarray(self.freqs) * t_hat
        return jnp.concatenate([t_hat[None], jnp.sin(phase), jnp.cos(phase)])

    def __call__(self, t: Float[Array, ""]) -> Float[Array, " n_state"]:
        """State ``z(t)`` at one time ``t`` [s]."""
        t_hat = (jnp.asarray(t, dtype=jnp.float64) - self.t0) / self.span
        return jnp.asarray(self.out_scale) * self.mlp(self.features(t_hat))

    def state_and_rate(
        self, t: Float[Array, ""]
    ) -> tuple[Float[Array, " n_state"], Float[Array, " n_state"]]:
        """``(z(t), dz/dt(t))`` by one forward-mode derivative (specs 2.2, chain rule)."""
        t = jnp.asarray(t, dtype=jnp.float64)
        return jax.jvp(self, (t,), (jnp.ones_like(t),))

    def batch(self, ts: Float[Array, " T"]) -> tuple[Float[Array, "T n_state"], Float[Array, "T n_state"]]:
        """States and rates at many times."""
        return jax.vmap(self.state_and_rate)(ts)
