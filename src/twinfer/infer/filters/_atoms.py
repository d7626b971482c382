"""Square-root Gaussian atoms: predict through, and update with, a linear(ised) map on ``(mean, chol)``.

Every Kalman-family filter in twinfer reduces to these two functions plus a linearisation that supplies
``(A, b, chol_Omega)`` (STYLE.md item 4): the KF passes its matrices, the EKF first-order Taylor terms,
the square-root UKF a statistical linear regression. Covariances never leave Cholesky form: sums of
covariances are formed by QR triangularisation of stacked factors.

References:
    Särkkä & Svensson, Bayesian Filtering and Smoothing (2nd ed.), Ch. 6 and 9 (square-root forms);
    compositional-inference paper, Alg. 4-5 and (S12) (the covariance-form equations these reproduce).

"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular


class UpdateInfo(NamedTuple):
    """Per-update diagnostics: log-likelihood increment, innovation, Cholesky factor of its covariance."""

    loglik: Any
    innovation: Any
    chol_S: Any


def tria(a: Any) -> Any:
    """Lower-triangular ``L`` with ``L L^T = A A^T`` and a non-negative diagonal (QR of ``A^T``)."""
    _, r = jnp.linalg.qr(a.T, mode="reduced")
    lower = r.T
    signs = jnp.where(jnp.diag(lower) < 0, -1.0, 1.0)
    return lower * signs[None, :]


def predict(mean: Any, chol_P: Any, A: Any, b: Any, chol_Q: Any) -> tuple[Any, Any]:
    """``x' = A x + b + w``, ``w ~ N(0, Q)``: mean ``A m + b`` and factor ``tria([A L_P, L_Q])`` (S12)."""
    return A @ mean + b, tria(jnp.concatenate([A @ chol_P, chol_Q], axis=1))


def update(
    mean: Any, chol_P: Any, H: Any, d: Any, chol_R: Any, y: Any, mask: Any
) -> tuple[Any, Any, UpdateInfo]:
    """Condition on ``y = H x + d + v``, ``v ~ N(0, R)``, in square-root form; masked entries ignored.

    One QR of the block matrix [[L_R, H L_P], [0, L_P]] gives the innovation factor ``L_S``, the gain
    ``K = G L_S^{-1}`` and the posterior factor (the square-root form of Alg. 4's update). Components with
    ``mask`` False get zero rows in ``H`` and an independent unit variance in ``R``, so their innovation is
    zero and they add nothing: shapes stay static.
    """
    m_f = mask.astype(mean.dtype)
    n_y, n_x = H.shape
    H_eff = H * m_f[:, None]
    rows = chol_R * m_f[:, None]  # marginal of R on the observed components, exact for correlated R
    chol_R_eff = jnp.linalg.cholesky(rows @ rows.T + jnp.diag(1.0 - m_f))
    innovation = (y - (H @ mean + d)) * m_f
    block = jnp.concatenate(
        [
            jnp.concatenate([chol_R_eff, H_eff @ chol_P], axis=1),
            jnp.concatenate([jnp.zeros((n_x, n_y), mean.dtype), chol_P], axis=1),
        ],
        axis=0,
    )
    big = tria(block)
    chol_S = big[:n_y, :n_y]
    gain_factor = big[n_y:, :n_y]
    chol_post = big[n_y:, n_y:]
    z = solve_triangular(chol_S, innovation, lower=True)
    new_mean = mean + gain_factor @ z
    loglik = -0.5 * (z @ z) - jnp.sum(jnp.log(jnp.diag(chol_S))) - 0.5 * jnp.sum(m_f) * jnp.log(2 * jnp.pi)
    return new_mean, chol_post, UpdateInfo(loglik=loglik, innovation=innovation, chol_S=chol_S)
