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


def update_scalar(
    mean: Any, chol: Any, h: Any, innovation: Any, std_r: Any, mask: Any
) -> tuple[Any, Any, Any]:
    """Square-root update on one scalar ``y = h x + v``, ``v ~ N(0, std_r^2)`` (Potter's form).

    With ``a = L^T h`` and ``s^2 = std_r^2 + a^T a`` the innovation variance, the gain is ``L a / s^2``
    and ``L (I - beta a a^T)`` with ``beta = 1 / (s (s + std_r))`` is a square factor of the updated
    covariance ``L (I - a a^T / s^2) L^T`` (the square of ``I - beta a a^T`` is that middle factor, and
    this ``beta`` has no cancellation, also for ``std_r = 0``, the ODE residual). Element-wise
    arithmetic only: under ``vmap`` over particles and blocks it fuses, unlike a batch of tiny matrix
    products. Equals :func:`update` / :func:`condition_exact` with one row to rounding.

    Args:
        mean: prior mean ``(n,)``.
        chol: a square factor of its covariance ``(n, n)``.
        h: the measurement row ``(n,)``.
        innovation: ``y - h mean - d`` (for the ODE residual: minus the residual).
        std_r: noise standard deviation (0: exact observation).
        mask: whether the component is observed; if not (or if ``s = 0``), nothing changes.

    Returns:
        Posterior mean, a square factor of the posterior covariance, log innovation density (0 if
        unobserved).

    References:
        Potter's square-root measurement update, as in Bierman (1977), "Factorization Methods for
        Discrete Sequential Estimation", Sec. V.3; Särkkä & Svensson (2023), Sec. 6.2 (sequential
        scalar updates).

    """
    std_r = jnp.abs(std_r)
    a = jnp.sum(chol * h[:, None], axis=0)
    la = jnp.sum(chol * a[None, :], axis=1)
    s = jnp.sqrt(std_r**2 + jnp.sum(a**2))
    ok = mask & (s > 0)
    s_safe = jnp.where(ok, s, 1.0)
    z = jnp.where(ok, innovation / s_safe, 0.0)
    beta = jnp.where(ok, 1.0 / (s_safe * (s_safe + std_r)), 0.0)
    loglik = jnp.where(mask, -0.5 * z**2 - jnp.log(s_safe) - 0.5 * jnp.log(2 * jnp.pi), 0.0)
    return mean + la * (z / s_safe), chol - beta * la[:, None] * a[None, :], loglik
