"""One square-root Gaussian filter driver; KF, EKF and the square-root UKF differ only in linearisation.

The step is the core's atoms (:mod:`twinfer.infer.gaussian`): linearise the transition at the posterior,
:func:`~twinfer.infer.gaussian.predict`, linearise the measurement at the prediction (sigma points
redrawn for the UKF), :func:`~twinfer.infer.gaussian.update`. The paper code's UKF, which does not
redraw, is :func:`twinfer.infer.filters.ukf_scan`.

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

from twinfer.infer.gaussian import Linearisation, predict, taylor, tria, update

_DIVERGED = (
    "filter diverged: a covariance stopped being positive-definite or the state became non-finite "
    "(first_bad_step in the output names the step; run_ukf reports it)."
)


def _gram(chols: Any) -> Any:
    return jnp.einsum("...ij,...kj->...ik", chols, chols)


class GaussianFilterOutput(NamedTuple):
    """Filtered means/factors over t_1..t_T, predicted means/factors, the log-likelihood, first bad step.

    Every Gaussian filter of twinfer (KF, EKF, both UKFs) returns this. ``chols`` are lower-triangular
    factors of the covariances; ``covs`` and ``pred_covs`` form the covariances from them.
    ``cross_covs[k]`` = cov(x_k, x_{k+1} | y_1..y_k), the input of the RTS smoother.
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

    @property
    def covs(self) -> Any:
        """Filtered covariances ``chols @ chols^T``."""
        return _gram(self.chols)

    @property
    def pred_covs(self) -> Any:
        """One-step predictive covariances."""
        return _gram(self.pred_chols)


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
        carry = (m_new, c_new, loglik + info.loglik, bad, k + 1, nis + info.nis)
        return carry, (m_new, c_new, m_pred, c_pred, cross)

    zero = jnp.zeros((), x0.dtype)
    init = (x0, chol_P0, zero, jnp.array(-1), jnp.array(0), zero)
    (_, _, loglik, bad, _, nis), (ms, cs, pm, pc, cc) = jax.lax.scan(step, init, (us, ys, masks, extra))
    if check:
        loglik = eqx.error_if(loglik, bad >= 0, _DIVERGED)
    n_obs = jnp.sum(masks)
    nis = jnp.where(n_obs > 0, nis / jnp.maximum(n_obs, 1), 0.0)
    return GaussianFilterOutput(ms, cs, pm, pc, cc, loglik, bad, nis)
