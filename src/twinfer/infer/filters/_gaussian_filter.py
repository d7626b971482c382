"""One square-root Gaussian filter driver; KF, EKF and the square-root UKF differ only in linearisation.

A linearisation maps ``(fn, mean, chol_P)`` to ``(A, b, chol_Omega)`` with ``fn(x) ~ A x + b + e``,
``e ~ N(0, Omega)`` near the Gaussian ``N(mean, P)``:

* ``linear``: the function is affine; its Jacobian is exact and Omega = 0 (the KF, Alg. 4).
* ``taylor``: first-order Taylor expansion at the mean with ``jax.jacfwd`` (the EKF, Alg. 5).
* ``unscented``: statistical linear regression on sigma points (the UKF, S13-S15, with sigma points
  redrawn for the measurement). Needs non-negative covariance weights (e.g. Merwe alpha = 1); for the
  paper-code "no redraw" convention and negative weights use :func:`twinfer.infer.filters.ukf_scan`.

References:
    Särkkä & Svensson, Bayesian Filtering and Smoothing (2nd ed.), Sec. 9.4 (statistical linear
    regression); compositional-inference paper, Alg. 4-6.

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from twinfer.infer.filters._atoms import predict, tria, update
from twinfer.infer.filters._ukf import _DIVERGED, UnscentedWeights

Linearisation = Callable[[Callable[[Any], Any], Any, Any], tuple[Any, Any, Any]]


def linear(fn: Callable[[Any], Any], mean: Any, chol_P: Any) -> tuple[Any, Any, Any]:
    """Exact for affine ``fn``: A = d fn / dx, b = fn(0)-style offset, Omega = 0."""
    A = jax.jacfwd(fn)(mean)
    out = fn(mean)
    return A, out - A @ mean, jnp.zeros((out.shape[0], 1), mean.dtype)


def taylor(fn: Callable[[Any], Any], mean: Any, chol_P: Any) -> tuple[Any, Any, Any]:
    """First-order Taylor expansion at the mean (the EKF); the remainder is ignored (Omega = 0)."""
    return linear(fn, mean, chol_P)


def unscented(weights: UnscentedWeights) -> Linearisation:
    """Statistical linear regression through the unscented transform with the given weights."""

    def linearise(fn: Callable[[Any], Any], mean: Any, chol_P: Any) -> tuple[Any, Any, Any]:
        cov = chol_P @ chol_P.T
        pts, wm, wc = weights.sigma_points(mean, cov)
        vals = jax.vmap(fn)(pts)
        mu = wm @ vals
        dx, dy = pts - mean, vals - mu
        cross = (dx.T * wc) @ dy  # cov(x, fn(x))
        A = jax.scipy.linalg.cho_solve((chol_P, True), cross).T
        resid = dy - dx @ A.T  # residual of the regression at each sigma point
        chol_omega = tria(resid.T * jnp.sqrt(jnp.maximum(wc, 0.0)))
        return A, mu - A @ mean, chol_omega

    return linearise


class GaussianFilterOutput(NamedTuple):
    """Filtered means/factors over t_1..t_T, predicted means/factors, the log-likelihood, first bad step.

    ``cross_covs[k]`` = cov(x_k, x_{k+1}) under the linearisation (P_k A_k^T), for the RTS smoother.
    """

    means: Any
    chols: Any
    pred_means: Any
    pred_chols: Any
    cross_covs: Any
    loglik: Any
    first_bad_step: Any
    nis: Any = None
    """Mean normalised innovation squared per observed component (1 for a consistent filter)."""


def gaussian_filter(
    f: Callable[[Any, Any], Any],
    h: Callable[[Any, Any], Any],
    x0: Any,
    chol_P0: Any,
    chol_Q: Any,
    chol_R: Any,
    us: Any,
    ys: Any,
    masks: Any = None,
    *,
    linearisation: Linearisation = taylor,
    extra_chol_Q: Any = None,
    check: bool = False,
) -> GaussianFilterOutput:
    """Scan the square-root predict/update atoms over time with one linearisation.

    Step k predicts x_{k+1} from x_k with ``f(x, u_k)`` and updates with ``ys[k] ~ h(x_{k+1}, u_k)``.

    Args:
        f: transition ``(x, u) -> x_next``.
        h: measurement ``(x, u) -> y``.
        x0: initial mean.
        chol_P0: Cholesky factor of the initial covariance.
        chol_Q: factor of the process noise.
        chol_R: factor of the measurement noise.
        us: inputs (T, n_u).
        ys: measurements (T, m); NaN or masked entries are ignored.
        masks: boolean (T, m), default: observed where ``ys`` is finite.
        linearisation: :func:`linear` (KF), :func:`taylor` (EKF) or :func:`unscented` (UKF).
        extra_chol_Q: optional (T, n, k) extra process-noise factors injected at each predict (the hook of
            the compositional graph's probabilistic interface messages).
        check: raise inside ``jit`` (``eqx.error_if``) if any step produced a non-finite state.

    Returns:
        :class:`GaussianFilterOutput`.

    """
    masks = jnp.isfinite(ys) if masks is None else jnp.asarray(masks) & jnp.isfinite(ys)
    ys = jnp.where(masks, ys, 0.0)
    n = x0.shape[0]
    extra = jnp.zeros((ys.shape[0], n, 1), x0.dtype) if extra_chol_Q is None else extra_chol_Q

    def step(carry, inp):
        mean, chol, loglik, bad, k, nis = carry
        u, y, mask, chol_extra = inp
        A, b, chol_omega = linearisation(lambda x: f(x, u), mean, chol)
        m_pred, c_pred = predict(mean, chol, A, b, jnp.concatenate([chol_Q, chol_omega, chol_extra], 1))
        H, d, chol_omega_h = linearisation(lambda x: h(x, u), m_pred, c_pred)
        chol_R_k = tria(jnp.concatenate([chol_R, chol_omega_h], axis=1))
        m_new, c_new, info = update(m_pred, c_pred, H, d, chol_R_k, y, mask)
        ok = jnp.all(jnp.isfinite(m_new)) & jnp.all(jnp.isfinite(c_new)) & jnp.isfinite(info.loglik)
        bad = jnp.where((bad < 0) & ~ok, k, bad)
        cross = chol @ (chol.T @ A.T)
        z = solve_triangular(info.chol_S, info.innovation, lower=True)
        carry = (m_new, c_new, loglik + info.loglik, bad, k + 1, nis + z @ z)
        return carry, (m_new, c_new, m_pred, c_pred, cross)

    zero = jnp.zeros((), x0.dtype)
    init = (x0, chol_P0, zero, jnp.array(-1), jnp.array(0), zero)
    (_, _, loglik, bad, _, nis), (ms, cs, pm, pc, cc) = jax.lax.scan(step, init, (us, ys, masks, extra))
    if check:
        loglik = eqx.error_if(loglik, bad >= 0, _DIVERGED)
    n_obs = jnp.sum(masks)
    nis = jnp.where(n_obs > 0, nis / jnp.maximum(n_obs, 1), 0.0)
    return GaussianFilterOutput(ms, cs, pm, pc, cc, loglik, bad, nis)
