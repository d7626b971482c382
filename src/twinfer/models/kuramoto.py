"""Second-order Kuramoto network: the swing-equation surrogate of a power grid.

With unit inertia (specs/compositional-inference.md section 3.5, S73-S77)::

    dtheta_i/dt = omega_i
    domega_i/dt = -d_i omega_i + Omega_i + sum_j K_ij sin(theta_j - theta_i)

The coupling is held as padded neighbour lists (``index`` (N, D), ``weight`` (N, D), padding pointing at
the bus itself with weight 0), so one step costs O(N D) and not the O(N^2) of a dense ``K`` (the authors'
code loops over all N columns). All phases and frequencies are measured; the phase output is wrapped to
(-pi, pi].

References:
    compositional-inference paper, SI (S71)-(S77); Dörfler & Bullo, Synchronization in complex
    oscillator networks and smart grids, PNAS 110 (2013).

"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from twinfer.models._base import AbstractModel, Input, Output, Params, State


def wrap_angle(a: Any) -> Any:
    """Angle wrapped to [-pi, pi) by ``(a + pi) mod 2 pi - pi`` (the authors' convention)."""
    return jnp.mod(a + jnp.pi, 2.0 * jnp.pi) - jnp.pi


def coupling_sum(theta: Any, index: Any, weight: Any) -> Any:
    """``sum_j K_ij sin(theta_j - theta_i)`` for every bus from padded neighbour lists (S74)."""
    return jnp.sum(weight * jnp.sin(theta[index] - theta[:, None]), axis=1)


class KuramotoNetwork(AbstractModel):
    """N coupled second-order phase oscillators; state ``[theta (N), omega (N)]``.

    Args:
        index: neighbour indices (N, D), padding pointing at the bus itself.
        weight: coupling strengths ``K_ij`` (N, D), zero on padding.
        damping: ``d_i`` (N,).
        natural_frequency: ``Omega_i`` (N,), the parameters a grid study estimates.

    Parameters are ``params = {"d": ..., "Omega": ...}`` (scalar names ``d1``, ``Omega7``, ...).

    """

    index: Any
    weight: Any
    params: Params

    def __init__(self, index: Any, weight: Any, damping: Any, natural_frequency: Any):
        index = np.asarray(index)
        weight = np.asarray(weight, dtype=float)
        n = index.shape[0]
        if index.ndim != 2 or weight.shape != index.shape:
            raise ValueError(
                f"KuramotoNetwork index/weight: expected equal (N, D) shapes; received {index.shape} "
                f"and {weight.shape}."
            )
        if index.size and (index.min() < 0 or index.max() >= n):
            raise ValueError(f"KuramotoNetwork index: expected bus numbers in 0..{n - 1}.")
        if not np.all(np.isfinite(weight)) or np.any(weight < 0):
            raise ValueError("KuramotoNetwork weight: expected finite non-negative coupling strengths.")
        for name, value in (("damping", damping), ("natural_frequency", natural_frequency)):
            if np.shape(value) != (n,):
                raise ValueError(
                    f"KuramotoNetwork {name}: expected shape ({n},); received {np.shape(value)}."
                )
        self.index = jnp.asarray(index)
        self.weight = jnp.asarray(weight)
        self.params = {"d": jnp.asarray(damping, float), "Omega": jnp.asarray(natural_frequency, float)}

    @property
    def n_bus(self) -> int:
        return int(self.index.shape[0])

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        n = self.n_bus
        theta, omega = x[:n], x[n:]
        domega = -params["d"] * omega + params["Omega"] + coupling_sum(theta, self.index, self.weight)
        return jnp.concatenate([omega, domega])

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        n = self.n_bus
        return jnp.concatenate([wrap_angle(x[:n]), x[n:]])

    @property
    def state_names(self) -> tuple[str, ...]:
        n = self.n_bus
        return tuple(f"theta{i + 1}" for i in range(n)) + tuple(f"omega{i + 1}" for i in range(n))

    @property
    def input_names(self) -> tuple[str, ...]:
        return ()

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.state_names
