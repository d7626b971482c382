"""Covariance-form unscented Kalman filter: the test oracle of the square-root UKF.

Written as the paper states it (Alg. 6, S13-S15: sigma points from a Cholesky factor of the
covariance, predicted moments by weighted sums, gain ``K = P_xy S^-1``, ``P - K S K^T``), with plain
dense linear algebra and no code shared with ``twinfer.infer.gaussian``. twinfer itself runs only the
square-root form; this keeps the covariance equations as an independent reference.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def weights(n: int, alpha: float, beta: float, kappa: float) -> tuple[Any, Any, float]:
    lam = alpha**2 * (n + kappa) - n
    c = n + lam
    wm = jnp.full(2 * n + 1, 0.5 / c).at[0].set(lam / c)
    return wm, wm.at[0].add(1.0 - alpha**2 + beta), c


def ukf_cov_scan(f, h, x0, P0, Q, R, us, ys, masks, *, alpha=1.0, beta=2.0, kappa=0.0, redraw=False):
    """Means, covariances and log-likelihood of the covariance-form UKF over a record (masked y)."""
    n = x0.shape[0]
    wm, wc, c = weights(n, alpha, beta, kappa)

    def points(m, P):
        L = jnp.linalg.cholesky(c * 0.5 * (P + P.T))
        return jnp.concatenate([m[None], m[None] + L.T, m[None] - L.T])

    def step(carry, inp):
        m, P, ll = carry
        u, y, mask = inp
        xp = jax.vmap(lambda p: f(p, u))(points(m, P))
        x_pred = wm @ xp
        dx = xp - x_pred
        P_pred = (dx.T * wc) @ dx + Q
        pts_y = points(x_pred, P_pred) if redraw else xp
        dxy = pts_y - x_pred
        yp = jax.vmap(lambda p: h(p, u))(pts_y)
        y_pred = wm @ yp
        dy = yp - y_pred
        mk = mask.astype(m.dtype)
        S = ((dy.T * wc) @ dy + R) * jnp.outer(mk, mk) + jnp.diag(1.0 - mk)
        P_xy = ((dxy.T * wc) @ dy) * mk[None, :]
        K = jnp.linalg.solve(S, P_xy.T).T
        v = jnp.where(mask, y - y_pred, 0.0)
        m_new = x_pred + K @ v
        P_new = P_pred - K @ S @ K.T
        sign, logdet = jnp.linalg.slogdet(S)
        ll_k = -0.5 * v @ jnp.linalg.solve(S, v) - 0.5 * logdet - 0.5 * jnp.sum(mk) * jnp.log(2 * jnp.pi)
        return (m_new, 0.5 * (P_new + P_new.T), ll + ll_k), (m_new, P_new)

    (_, _, ll), (ms, Ps) = jax.lax.scan(step, (x0, P0, jnp.zeros(())), (us, ys, masks))
    return ms, Ps, ll
