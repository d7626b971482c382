"""The q-times integrated Wiener process (IWP) prior: closed-form transition A(h) and noise Q(h).

The stacked state ``X = [X^(1); ...; X^(q+1)]`` is derivative-major (block i holds the (i-1)-th
derivative of all d ODE states), so ``A(h) = A1(h) kron I_d`` and ``Q(h) = Q1(h) kron Gamma``.
``Q1(h)`` spans many orders of magnitude for small ``h`` (about 16 at h = 1/4096, q = 2), so its
Cholesky factor is never taken numerically at ``h``: ``Q1(h) = T(h) Q1(1) T(h)`` with
``T(h) = diag(h^(q-i+1/2))``, hence ``chol Q1(h) = T(h) chol Q1(1)`` exactly (the preconditioning
of Krämer & Hennig 2020).

References:
    Longbottom, Champneys & Rogers, "Probabilistic Numeric SMC Sampling ...", Eq. (13)-(15).
    Krämer & Hennig (2020), "Stable implementation of probabilistic ODE solvers", Sec. 3.

"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float


def _check_q(q: int) -> int:
    if not isinstance(q, int) or q < 1:
        raise ValueError(
            f"IWP order q: expected an integer >= 1 (the ODE residual needs X^(2)); received {q!r}."
        )
    return q


def iwp_transition_1d(
    q: int, h: Float[ArrayLike, ""]
) -> tuple[Float[Array, "q+1 q+1"], Float[Array, "q+1 q+1"]]:
    """``(A1(h), Q1(h))`` of the scalar q-times integrated Wiener process with unit diffusion.

    ``A1_ij = 1[i <= j] h^(j-i) / (j-i)!`` and
    ``Q1_ij = h^(2q+1-i-j) / ((2q+1-i-j) (q-i)! (q-j)!)`` with 0-based ``i, j`` (Eq. 15 with 1-based
    indices shifted by one).

    Args:
        q: number of derivatives in the prior (q >= 1).
        h: step length (scalar, may be traced).

    Returns:
        ``A1`` and ``Q1``, each ``(q+1, q+1)``.

    References:
        Longbottom et al., Eq. (14)-(15).

    """
    q = _check_q(q)
    n = q + 1
    idx = np.arange(n)
    diff = idx[None, :] - idx[:, None]
    fact = np.array([math.factorial(int(max(k, 0))) for k in diff.ravel()], dtype=np.float64).reshape(n, n)
    h = jnp.asarray(h, dtype=jnp.float64)
    powers = jnp.where(diff >= 0, h ** np.maximum(diff, 0), 0.0)
    a1 = powers / fact
    return a1, jnp.asarray(_q1_unit(q)) * jnp.outer(_scale(q, h), _scale(q, h))


def _q1_unit(q: int) -> np.ndarray:
    """``Q1(1)``: ``1 / ((2q+1-i-j) (q-i)! (q-j)!)``."""
    n = q + 1
    out = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            out[i, j] = 1.0 / ((2 * q + 1 - i - j) * math.factorial(q - i) * math.factorial(q - j))
    return out


def _scale(q: int, h: Float[ArrayLike, ""]) -> Float[Array, " q+1"]:
    """``T(h) = diag(h^(q-i+1/2))``, i = 0..q, so that ``Q1(h) = T Q1(1) T``."""
    return jnp.asarray(h, dtype=jnp.float64) ** (q - np.arange(q + 1) + 0.5)


def iwp_chol_q_1d(q: int, h: Float[ArrayLike, ""]) -> Float[Array, "q+1 q+1"]:
    """Lower Cholesky factor of ``Q1(h)``, computed as ``T(h) chol(Q1(1))`` (no ill-conditioned Cholesky)."""
    q = _check_q(q)
    return _scale(q, h)[:, None] * jnp.asarray(np.linalg.cholesky(_q1_unit(q)))


def iwp_transition(
    q: int, d: int, h: Float[ArrayLike, ""], diffusion: Float[ArrayLike, " d"]
) -> tuple[Float[Array, "N N"], Float[Array, "N N"]]:
    """``(A(h), chol Q(h))`` for d ODE states in derivative-major layout.

    Args:
        q: IWP order.
        d: number of ODE states.
        h: step length.
        diffusion: the diagonal of Gamma, shape ``(d,)`` (per-dimension diffusion, Bosch et al. 2021).

    Returns:
        ``A = A1 kron I_d`` and ``chol_Q = chol(Q1) kron diag(sqrt(Gamma))``, each ``(d(q+1), d(q+1))``.

    References:
        Longbottom et al., Eq. (14): ``A(h) = A1(h) kron I_d``, ``Q(h) = Q1(h) kron Gamma``.

    """
    a1, _ = iwp_transition_1d(q, h)
    chol_q1 = iwp_chol_q_1d(q, h)
    return jnp.kron(a1, jnp.eye(d)), jnp.kron(chol_q1, jnp.diag(jnp.sqrt(diffusion)))


def projection(q: int, d: int, derivative: int) -> Float[Array, "d N"]:
    """The ``(d, d(q+1))`` matrix picking the ``derivative``-th derivative block (0: C, 1: C-dot)."""
    q = _check_q(q)
    if not 0 <= derivative <= q:
        raise ValueError(f"projection derivative: expected 0..{q}; received {derivative}.")
    e = np.zeros((1, q + 1))
    e[0, derivative] = 1.0
    return jnp.asarray(np.kron(e, np.eye(d)))
