"""Second-order Kuramoto network: the swing-equation surrogate of a power grid.

With unit inertia (specs/compositional-inference.md section 3.5, S73-S77)::

    dtheta_i/dt = omega_i
    domega_i/dt = -d_i omega_i + Omega_i + sum_j K_ij sin(theta_j - theta_i)

The coupling is held as padded neighbour lists (``index`` (N, D), ``weight`` (N, D), padding pointing at
the bus itself with weight 0), so one step costs O(N D) and not the O(N^2) of a dense ``K`` (the authors'
code loops over all N columns). All phases and frequencies are measured; the phase output is wrapped to
(-pi, pi].

The swing equation is written once, in :func:`swing_equation`: with
``sin(theta_j - theta_i) = sin(theta_j) cos(theta_i) - cos(theta_j) sin(theta_i)`` the coupling of bus i
needs only ``A_i = sum_j K_ij sin(theta_j)`` and ``B_i = sum_j K_ij cos(theta_j)``, and every caller
supplies those two sums its own way: :class:`KuramotoNetwork` from its neighbour lists
(:func:`coupling_sums`), a cluster of a partitioned grid from a dense block of its in-cluster couplings
plus the out-of-cluster sums it received as messages (:func:`cluster_swing`, S89). Sines and cosines
come from :func:`sincos`.

References:
    compositional-inference paper, SI (S71)-(S77); Dörfler & Bullo, Synchronization in complex
    oscillator networks and smart grids, PNAS 110 (2013).

"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models._base import AbstractModel, Input, Output, Params, State
from twinfer.models._sincos import sincos

__all__ = [
    "KuramotoNetwork",
    "cluster_swing",
    "coupling_sum",
    "coupling_sums",
    "sincos",
    "swing_equation",
    "wrap_angle",
]


def wrap_angle(a: Any) -> Any:
    """Angle wrapped to [-pi, pi) by ``(a + pi) mod 2 pi - pi`` (the authors' convention)."""
    return jnp.mod(a + jnp.pi, 2.0 * jnp.pi) - jnp.pi


def draw_grid_parameters(n: int, key: jax.Array) -> tuple[np.ndarray, np.ndarray]:
    """Damping d_i ~ U(0.10, 0.30) to 2 d.p. and Omega_i uniform over the 21 values -1.0..1.0.

    The random network parameters of the compositional-inference paper's grid study (Table S4).
    """
    k_d, k_w = jax.random.split(key)
    d = np.round(np.asarray(jax.random.uniform(k_d, (n,), minval=0.1, maxval=0.3)), 2)
    grid = np.round(np.linspace(-1.0, 1.0, 21), 10)
    omega = grid[np.asarray(jax.random.randint(k_w, (n,), 0, 21))]
    return d, omega


def swing_equation(
    sin_theta: Any,
    cos_theta: Any,
    omega: Any,
    natural_frequency: Any,
    damping: Any,
    sin_sum: Any,
    cos_sum: Any,
) -> tuple[Any, Any]:
    """``(dtheta/dt, domega/dt)`` of the swing equation with unit inertia (S73-S74), element-wise per bus.

        dtheta_i/dt = omega_i,
        domega_i/dt = -d_i omega_i + Omega_i + cos(theta_i) A_i - sin(theta_i) B_i,

    where ``cos(theta_i) A_i - sin(theta_i) B_i = sum_j K_ij sin(theta_j - theta_i)`` by the angle
    difference identity, ``A_i = sum_j K_ij sin(theta_j)``, ``B_i = sum_j K_ij cos(theta_j)``.

    Args:
        sin_theta: ``sin(theta_i)``.
        cos_theta: ``cos(theta_i)``.
        omega: frequencies ``omega_i``.
        natural_frequency: ``Omega_i``.
        damping: ``d_i``.
        sin_sum: ``A_i``.
        cos_sum: ``B_i``.

    Returns:
        ``(omega, domega/dt)``.

    References:
        compositional-inference paper, SI (S73)-(S74), (S89).

    """
    return omega, -damping * omega + natural_frequency + _coupling(sin_theta, cos_theta, sin_sum, cos_sum)


def _coupling(sin_theta: Any, cos_theta: Any, sin_sum: Any, cos_sum: Any) -> Any:
    """``sum_j K_ij sin(theta_j - theta_i) = cos(theta_i) A_i - sin(theta_i) B_i`` (S74)."""
    return cos_theta * sin_sum - sin_theta * cos_sum


def coupling_sums(sin_theta: Any, cos_theta: Any, index: Any, weight: Any) -> tuple[Any, Any]:
    """``(A_i, B_i) = (sum_j K_ij sin theta_j, sum_j K_ij cos theta_j)`` from padded neighbour lists."""
    return jnp.sum(weight * sin_theta[index], axis=1), jnp.sum(weight * cos_theta[index], axis=1)


def coupling_sum(theta: Any, index: Any, weight: Any) -> Any:
    """``sum_j K_ij sin(theta_j - theta_i)`` for every bus from padded neighbour lists (S74)."""
    sin_t, cos_t = sincos(theta)
    return _coupling(sin_t, cos_t, *coupling_sums(sin_t, cos_t, index, weight))


def cluster_swing(
    theta: Any, omega: Any, natural_frequency: Any, damping: Any, external_sums: Any, internal: Any
) -> tuple[Any, Any]:
    """Swing equation of one cluster's S slots (S89): in-cluster neighbours from the state, others given.

    The in-cluster sums come from the dense block ``internal`` (S, S) of ``K`` and the slots' own phases;
    the out-of-cluster neighbours enter only through their two sums ``external_sums`` (S, 2) (``A``
    then ``B``, see :func:`swing_equation`), computed once per exchange by whoever holds their phases.
    An evaluation then takes 2S sines and cosines however many neighbours a bus has.

    Args:
        theta: the slots' phases (S,).
        omega: their frequencies (S,).
        natural_frequency: their ``Omega`` (S,).
        damping: their ``d`` (S,).
        external_sums: out-of-cluster ``(A, B)`` per slot (S, 2).
        internal: in-cluster coupling ``K_ab`` between slots (S, S), zero on the diagonal.

    Returns:
        ``(dtheta/dt, domega/dt)``, each (S,).

    References:
        compositional-inference paper, SI (S89).

    """
    sin_t, cos_t = sincos(theta)
    sin_sum = internal @ sin_t + external_sums[:, 0]
    cos_sum = internal @ cos_t + external_sums[:, 1]
    return swing_equation(sin_t, cos_t, omega, natural_frequency, damping, sin_sum, cos_sum)


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
        sin_t, cos_t = sincos(theta)
        sin_sum, cos_sum = coupling_sums(sin_t, cos_t, self.index, self.weight)
        dtheta, domega = swing_equation(sin_t, cos_t, omega, params["Omega"], params["d"], sin_sum, cos_sum)
        return jnp.concatenate([dtheta, domega])

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
