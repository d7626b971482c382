"""A network from normalised time to the full oscillator state, with its time derivative.

``z(t) = scale * MLP(features(t_hat))`` with ``t_hat = (t - t0) / span`` in [0, 1] (specs/pinn.md 2.2,
Eq 13). With a known initial state (the simulations start at rest, specs D17) the output can be anchored,
``z(t) = z0 + N(t) - N(t0)``, a hard initial condition beyond the paper. The optional features are
deterministic sines and cosines of ``t_hat`` (a Fourier embedding), added beyond the paper to overcome the
spectral bias of a plain MLP on long windows; with ``n_fourier = 0`` the input is ``t_hat`` alone, as in the
paper. The time derivative comes from forward-mode autodiff and the chain rule
``dz/dt = (1 / span) dz/dt_hat`` (specs 2.2).

References:
    Haywood-Alexander et al., "Response estimation and system identification of dynamical systems via
    physics-informed neural networks", arXiv:2410.01340, Eq 13 and section 3.1.

"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

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
    initial_state: tuple[float, ...] | None = eqx.field(static=True)

    def __init__(
        self,
        key: PRNGKeyArray,
        n_state: int,
        t0: float,
        span: float,
        *,
        width: int = 128,
        depth: int = 4,
        activation: str = "tanh",
        out_scale: Float[ArrayLike, " n_state"] | Sequence[float] = 1.0,
        n_fourier: int = 0,
        max_cycles: float = 0.0,
        initial_state: Float[ArrayLike, " n_state"] | Sequence[float] | None = None,
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
        if initial_state is not None:
            z0 = np.asarray(initial_state, dtype=np.float64)
            if z0.shape != (n_state,) or not np.all(np.isfinite(z0)):
                raise ValueError(
                    f"StateNetwork initial_state: expected {n_state} finite values; received {z0.tolist()}."
                )
            self.initial_state = tuple(z0.tolist())
        else:
            self.initial_state = None
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

    def _raw(self, t: Float[Array, ""]) -> Float[Array, " n_state"]:
        t_hat = (jnp.asarray(t, dtype=jnp.float64) - self.t0) / self.span
        return jnp.asarray(self.out_scale) * self.mlp(self.features(t_hat))

    def _offset(self) -> Float[Array, " n_state"] | float:
        """``z0 - raw(t0)``: with an initial state the output is anchored, ``z(t0) = z0`` exactly."""
        if self.initial_state is None:
            return 0.0
        return jnp.asarray(self.initial_state) - self._raw(jnp.asarray(self.t0))

    def __call__(self, t: Float[Array, ""]) -> Float[Array, " n_state"]:
        """State ``z(t)`` at one time ``t`` [s]."""
        return self._raw(t) + self._offset()

    def state_and_rate(self, t: Float[Array, ""]) -> tuple[Float[Array, " n"], Float[Array, " n"]]:
        """``(z(t), dz/dt(t))`` by one forward-mode derivative (specs 2.2, chain rule)."""
        t = jnp.asarray(t, dtype=jnp.float64)
        z, dz = jax.jvp(self._raw, (t,), (jnp.ones_like(t),))
        return z + self._offset(), dz

    def _hidden(self, t: Float[Array, ""]) -> Float[Array, " p"]:
        """Last hidden layer at time ``t`` [s], with a trailing 1 for the output bias."""
        x = self.features((jnp.asarray(t, dtype=jnp.float64) - self.t0) / self.span)
        for layer in self.mlp.layers[:-1]:
            x = self.mlp.activation(layer(x))  # pyright: ignore[reportCallIssue]
        return jnp.concatenate([x, jnp.ones(1)])

    def last_layer(self) -> Float[Array, "n_state p"]:
        """The output layer as one matrix ``W`` (weights, then bias; output scale included).

        With :meth:`basis`, ``z(t) = H(t) W^T + offset`` and ``dz/dt = dH/dt W^T`` exactly: the network is
        linear in its last layer, which the second stage of the Bayesian scheme samples (errors in
        variables: the states' uncertainty enters the posterior).
        """
        lin = self.mlp.layers[-1]
        bias = jnp.zeros(lin.out_features) if lin.bias is None else lin.bias  # pyright: ignore
        w = jnp.concatenate([lin.weight, jnp.reshape(bias, (-1, 1))], axis=1)
        return jnp.asarray(self.out_scale)[:, None] * w

    def basis(self, ts: Float[Array, " T"]) -> tuple[Array, Array, Array]:
        """``(H, dH/dt, offset)`` at many times: the last hidden layer (with a 1 column) and its rate.

        ``H @ last_layer().T + offset`` is the network's state and ``dH @ last_layer().T`` its rate; with
        an initial state the anchor is written on the basis, ``H(t) - H(t0)`` and ``offset = z0``.
        """
        t = jnp.asarray(ts, dtype=jnp.float64)
        h, dh = jax.vmap(lambda tt: jax.jvp(self._hidden, (tt,), (jnp.ones_like(tt),)))(t)
        n_state = len(self.out_scale)
        if self.initial_state is None:
            return h, dh, jnp.zeros(n_state)
        return h - self._hidden(jnp.asarray(self.t0)), dh, jnp.asarray(self.initial_state)

    def to_estimate(
        self,
        times: Float[ArrayLike, " T"],
        state_names: Sequence[str],
        parameters: Mapping[str, Float[ArrayLike, "..."]] | None = None,
    ) -> Any:
        """The network's states at ``times`` as an :class:`~twinfer.infer.Estimate` (a point estimate).

        A trained PINN carries no uncertainty: the states' standard deviations are NaN (not zero, which
        would claim certainty). For a posterior, sample the output layer and use
        :func:`twinfer.infer.pinn.layer_estimate`. ``parameters`` by name are appended as constant
        columns: a learned value (sd NaN) or samples of a posterior (their mean and sd).

        Raises:
            ValueError: when ``state_names`` does not name every output.

        """
        from twinfer.infer._estimate import Estimate

        if len(state_names) != len(self.out_scale):
            raise ValueError(
                f"StateNetwork.to_estimate state_names: expected {len(self.out_scale)} names; received "
                f"{len(state_names)}."
            )
        t = np.asarray(times, dtype=np.float64)
        z = np.asarray(self.batch(jnp.asarray(t))[0])
        values = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in (parameters or {}).items()}
        mean = [v.mean() for v in values.values()]
        sd = [v.std(ddof=1) if v.size > 1 else np.nan for v in values.values()]
        means = np.concatenate([z, np.tile(np.asarray(mean, float), (t.size, 1))], axis=1)
        stds = np.concatenate([np.full(z.shape, np.nan), np.tile(np.asarray(sd, float), (t.size, 1))], axis=1)
        return Estimate(t, means, stds, None, (*state_names, *values), tuple(values))

    def batch(self, ts: Float[Array, " T"]) -> tuple[Float[Array, "T n_state"], Float[Array, "T n_state"]]:
        """States and rates at many times (the anchor offset is computed once)."""
        t = jnp.asarray(ts, dtype=jnp.float64)
        z, dz = jax.vmap(lambda tt: jax.jvp(self._raw, (tt,), (jnp.ones_like(tt),)))(t)
        return z + self._offset(), dz
