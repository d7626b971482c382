"""Square-root Gaussian updates of the PN filter: zero-noise (ODE residual) and noisy (data).

Both work on a dense factor of any size: the dense filter passes the whole stacked state, the
block-diagonal one each ``(q+1)``-sized block of one ODE dimension with one scalar row.

References:
    Krämer & Hennig (2020), "Stable implementation of probabilistic ODE solvers", Sec. 3 (square-root
    updates); Golub & Van Loan, Alg. 5.2.1.

"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from twinfer.infer.pn._small import solve_lower, tria_rows


def condition_exact(mean: Any, chol: Any, H: Any, residual: Any, mask: Any) -> tuple[Any, Any]:
    """Condition on ``0 = H x + d`` with zero noise (``residual = H mean + d``); masked rows are ignored.

    The first ``n_z`` reflections of a QR of ``[[0, H L], [0, L]]`` (:func:`tria_rows`) give ``L_S``, the
    gain factor and a square posterior factor, as the
    square-root update of :func:`twinfer.infer.filters.update` with ``L_R = 0``. Unobserved rows (mask
    False) get zero ``H`` and unit ``L_S`` so shapes stay static.
    """
    m = mask.astype(mean.dtype)
    n_z, n_x = H.shape
    H_eff = H * m[:, None]
    block = jnp.concatenate(
        [
            jnp.concatenate([jnp.diag(1.0 - m), H_eff @ chol], axis=1),
            jnp.concatenate([jnp.zeros((n_x, n_z), mean.dtype), chol], axis=1),
        ],
        axis=0,
    )
    big = tria_rows(block, n_z)
    chol_S, gain_factor, chol_post = big[:n_z, :n_z], big[n_z:, :n_z], big[n_z:, n_z:]
    z = solve_lower(chol_S, -residual * m)
    return mean + gain_factor @ z, chol_post


def update(mean: Any, chol: Any, H: Any, d: Any, chol_R: Any, y: Any, mask: Any) -> tuple[Any, Any, Any]:
    """Square-root update on ``y = H x + d + v``, ``v ~ N(0, R)`` (as :func:`twinfer.infer.filters.update`).

    Masked components get zero rows in ``H`` and in the factor of ``R`` and a unit innovation variance;
    masking rows of the factor is exact for independent sensors (diagonal ``R``, as in every case
    here) and, with all components observed, for any ``R``.
    Returns the posterior mean, factor and the log innovation density.
    """
    m = mask.astype(mean.dtype)
    n_y, n_x = H.shape
    chol_R_eff = chol_R * m[:, None] + jnp.diag(1.0 - m)
    innovation = (y - (H @ mean + d)) * m
    block = jnp.concatenate(
        [
            jnp.concatenate([chol_R_eff, (H * m[:, None]) @ chol], axis=1),
            jnp.concatenate([jnp.zeros((n_x, n_y), mean.dtype), chol], axis=1),
        ],
        axis=0,
    )
    big = tria_rows(block, n_y)
    chol_S, gain_factor, chol_post = big[:n_y, :n_y], big[n_y:, :n_y], big[n_y:, n_y:]
    z = solve_lower(chol_S, innovation)
    loglik = -0.5 * (z @ z) - jnp.sum(jnp.log(jnp.diag(chol_S))) - 0.5 * jnp.sum(m) * jnp.log(2 * jnp.pi)
    return mean + gain_factor @ z, chol_post, loglik
