"""Linearisations: how a function of a Gaussian becomes an affine map plus Gaussian noise.

A linearisation maps ``(fn, mean, chol_P)`` to ``(A, b, chol_Omega)`` with ``fn(x) ~ A x + b + e``,
``e ~ N(0, Omega)`` near the Gaussian ``N(mean, P)``. They are the only difference between the KF, EKF
and UKF, which all run the atoms of :mod:`twinfer.infer.gaussian`:

* :func:`linear`: the function is affine; its Jacobian is exact and Omega = 0 (the KF, Alg. 4).
* :func:`taylor`: first-order Taylor expansion at the mean with ``jax.jacfwd`` (the EKF, Alg. 5).
* :func:`unscented`: statistical linear regression on sigma points (the UKF, S13-S15), with the
  weights of :class:`UnscentedWeights` (Merwe's or the paper code's).

References:
    Särkkä & Svensson, Bayesian Filtering and Smoothing (2nd ed.), Sec. 9.4 (statistical linear
    regression); Van der Merwe (2004), sigma-point weights; compositional-inference paper, Alg. 4-6.

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from twinfer.infer.gaussian._linalg import cholesky, tria

Linearisation = Callable[
    [Callable[[Any], Any], Float[Array, " n"], Float[Array, "n n"]],
    tuple[Float[Array, "k n"], Float[Array, " k"], Float[Array, "k c"]],
]
"""``(fn, mean, chol_P) -> (A, b, chol_Omega)``: the signature of :func:`linear`, :func:`taylor` and
:func:`unscented`'s result."""


class UnscentedWeights(eqx.Module):
    """Sigma-point spread and weights.

    ``merwe(alpha, beta, kappa)``: lambda = alpha^2 (L + kappa) - L, spread sqrt(L + lambda),
    W0m = lambda/(L+lambda), W0c = W0m + 1 - alpha^2 + beta, Wi = 1/(2(L + lambda)) (S13-S15).
    ``paper_code(gamma)``: the authors' convention c = L + gamma, W0 = gamma / c, Wi = 1/(2c), equal
    mean and covariance weights (specs/compositional-inference.md 2.3 [REPO], section 7 item 1).
    """

    alpha: float = eqx.field(static=True)
    beta: float = eqx.field(static=True)
    kappa: float = eqx.field(static=True)

    @classmethod
    def merwe(cls, alpha: float = 1.0, beta: float = 2.0, kappa: float = 0.0) -> UnscentedWeights:
        if not alpha > 0:
            raise ValueError(f"UnscentedWeights alpha: expected > 0; received {alpha}.")
        return cls(alpha=float(alpha), beta=float(beta), kappa=float(kappa))

    @classmethod
    def paper_code(cls, gamma: float = 0.0) -> UnscentedWeights:
        return cls(alpha=1.0, beta=0.0, kappa=float(gamma))

    def weights(self, n: int) -> tuple[Float[Array, " p"], Float[Array, " p"], float]:
        """``(w_mean, w_cov, c)`` for 2n+1 points with spread sqrt(c)."""
        lam = self.alpha**2 * (n + self.kappa) - n
        c = n + lam
        if c <= 0:
            raise ValueError(f"UnscentedWeights: n + lambda = {c} must be > 0 (n={n}, kappa={self.kappa}).")
        wm = jnp.full(2 * n + 1, 0.5 / c).at[0].set(lam / c)
        wc = wm.at[0].add(1.0 - self.alpha**2 + self.beta)
        return wm, wc, c

    def centre_weight(self, n: int) -> float:
        """The covariance weight of the central point (static; see :func:`deviation_factor`)."""
        lam = self.alpha**2 * (n + self.kappa) - n
        return lam / (n + lam) + 1.0 - self.alpha**2 + self.beta

    def sigma_points(
        self, mean: Float[Array, " n"], chol_P: Float[Array, "n n"]
    ) -> tuple[Float[Array, "p n"], Float[Array, " p"], Float[Array, " p"]]:
        """``2n+1`` points ``mean, mean +- sqrt(c) L e_i`` from a factor ``L`` of the covariance.

        With the lower Cholesky factor these are the points of the covariance-form UKF (Alg. 6).
        """
        n = mean.shape[0]
        wm, wc, c = self.weights(n)
        spread = jnp.sqrt(c) * chol_P.T
        pts = jnp.concatenate([mean[None], mean[None] + spread, mean[None] - spread])
        return pts, wm, wc


def deviation_factor(
    dev: Float[Array, "p k"],
    wc: Float[Array, " p"],
    centre_weight: float,
    chol_noise: Float[Array, "k r"] | None = None,
) -> Float[Array, "k c"]:
    """A factor ``F`` with ``F F^T = sum_i wc_i dev_i dev_i^T + N N^T`` (points' covariance plus noise).

    ``N`` is ``chol_noise``, a factor of the noise covariance (None: no noise).

    With non-negative weights ``F = [dev^T diag(sqrt(wc)), N]``: no factorisation. A negative central
    weight (Merwe's alpha < 1) makes the points' sum a difference: the matrix is then formed and
    factorised, NaN (a named divergence downstream) where it is not positive-definite, as the
    covariance-form UKF's posterior would be.
    """
    if centre_weight >= 0:
        cols = dev.T * jnp.sqrt(wc)[None, :]
        return cols if chol_noise is None else jnp.concatenate([cols, chol_noise], axis=1)
    cov = (dev.T * wc) @ dev
    if chol_noise is not None:
        cov = cov + chol_noise @ chol_noise.T
    return cholesky(0.5 * (cov + cov.T))


def linear(
    fn: Callable[[Any], Any], mean: Float[Array, " n"], chol_P: Float[Array, "n n"]
) -> tuple[Float[Array, "k n"], Float[Array, " k"], Float[Array, "k 1"]]:
    """Exact for affine ``fn``: A = d fn / dx, b = fn(0)-style offset, Omega = 0."""
    A = jax.jacfwd(fn)(mean)
    out = fn(mean)
    return A, out - A @ mean, jnp.zeros((out.shape[0], 1), mean.dtype)


def taylor(
    fn: Callable[[Any], Any], mean: Float[Array, " n"], chol_P: Float[Array, "n n"]
) -> tuple[Float[Array, "k n"], Float[Array, " k"], Float[Array, "k 1"]]:
    """First-order Taylor expansion at the mean (the EKF); the remainder is ignored (Omega = 0)."""
    return linear(fn, mean, chol_P)


def unscented(weights: UnscentedWeights) -> Linearisation:
    """Statistical linear regression through the unscented transform with the given weights."""

    def linearise(
        fn: Callable[[Any], Any], mean: Float[Array, " n"], chol_P: Float[Array, "n n"]
    ) -> tuple[Float[Array, "k n"], Float[Array, " k"], Float[Array, "k k"]]:
        pts, wm, wc = weights.sigma_points(mean, chol_P)
        vals = jax.vmap(fn)(pts)
        mu = wm @ vals
        dx, dy = pts - mean, vals - mu
        cross = (dx.T * wc) @ dy  # cov(x, fn(x))
        A = jax.scipy.linalg.cho_solve((chol_P, True), cross).T
        resid = dy - dx @ A.T  # residual of the regression at each sigma point
        chol_omega = tria(deviation_factor(resid, wc, weights.centre_weight(mean.shape[0])))
        return A, mu - A @ mean, chol_omega

    return linearise
