"""Rauch-Tung-Striebel smoothing of a filter pass (Särkkä, Bayesian Filtering and Smoothing, Alg. 9.3)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from twinfer.infer.filters._gaussian_filter import GaussianFilterOutput
from twinfer.infer.gaussian import cho_solve


class SmootherOutput(NamedTuple):
    """Smoothed means (T+1, n) and covariances (T+1, n, n) over t_0..t_T (row 0 is the initial time)."""

    means: Float[Array, "T+1 n"]
    covs: Float[Array, "T+1 n n"]


def rts_smooth(
    filtered: GaussianFilterOutput, x0: Float[ArrayLike, " n"], cov0: Float[ArrayLike, "n n"]
) -> SmootherOutput:
    """Backward pass over a UKF (or KF) output: the smoothed marginals given all measurements.

    With the filter's cross-covariance C_k = cov(x_k, x_{k+1}) and predicted covariance P^-_{k+1},
    G_k = C_k (P^-_{k+1})^{-1}, m^s_k = m_k + G_k (m^s_{k+1} - m^-_{k+1}) and
    P^s_k = P_k + G_k (P^s_{k+1} - P^-_{k+1}) G_k^T. On linear-Gaussian models this is exact; for the UKF
    it is the unscented RTS smoother (the sigma-point cross-covariance replaces F P).

    Args:
        filtered: output of any Gaussian filter (:func:`gaussian_filter`, :func:`ukf_scan`,
            :func:`run_ukf`): ``means``, ``covs``, ``pred_means``, ``pred_chols`` and ``cross_covs``.
        x0: the filter's initial mean (time t_0).
        cov0: the filter's initial covariance (not its factor: the smoother works on covariances; from a
            factor, ``chol_P0 @ chol_P0.T``).

    Returns:
        :class:`SmootherOutput` over t_0..t_T.

    """
    means = jnp.concatenate([jnp.asarray(x0)[None], filtered.means])
    covs = jnp.concatenate([jnp.asarray(cov0)[None], filtered.covs])

    def back(carry, inp):
        m_next, p_next = carry
        m, p, m_pred, chol_pred, cross = inp
        p_pred = chol_pred @ chol_pred.T
        gain = cho_solve(chol_pred, cross.T).T
        m_s = m + gain @ (m_next - m_pred)
        p_s = p + gain @ (p_next - p_pred) @ gain.T
        p_s = 0.5 * (p_s + p_s.T)
        return (m_s, p_s), (m_s, p_s)

    inputs = (means[:-1], covs[:-1], filtered.pred_means, filtered.pred_chols, filtered.cross_covs)
    _, (ms, ps) = jax.lax.scan(back, (means[-1], covs[-1]), inputs, reverse=True)
    return SmootherOutput(means=jnp.concatenate([ms, means[-1:]]), covs=jnp.concatenate([ps, covs[-1:]]))
