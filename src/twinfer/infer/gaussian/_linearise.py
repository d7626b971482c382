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


ROUNDING_FLOOR = 16.0
"""How many ``p * eps`` of the spread a negative eigenvalue of a residual covariance may reach and still
count as rounding (:func:`deviation_factor`'s ``spread``; ``p`` the number of sigma points)."""


def deviation_factor(
    dev: Float[Array, "p k"],
    wc: Float[Array, " p"],
    centre_weight: float,
    chol_noise: Float[Array, "k r"] | None = None,
    *,
    spread: Float[Array, ""] | None = None,
) -> Float[Array, "k c"]:
    """A factor ``F`` with ``F F^T = sum_i wc_i dev_i dev_i^T + N N^T`` (points' covariance plus noise).

    ``N`` is ``chol_noise``, a factor of the noise covariance (None: no noise).

    With non-negative weights ``F = [dev^T diag(sqrt(wc)), N]``: no factorisation. A negative central
    weight (Merwe's alpha < 1) makes the points' sum a difference: the matrix is then formed and
    factorised, NaN (a named divergence downstream) where it is not positive-definite, as the
    covariance-form UKF's posterior would be.

    ``spread`` is for deviations that are themselves differences, such as the residuals of a
    statistical linear regression (:func:`unscented`), whose exact covariance may be singular (zero
    for an affine function): the size of the terms they were computed from (``sum_i |wc_i| |dy_i|^2``
    of the regressed values). With a negative central weight the formed matrix is then symmetrised and
    eigen-decomposed, and eigenvalues down to ``-ROUNDING_FLOOR * p * eps * spread`` are rounding
    (each entry is a difference of terms of size ``spread``, weights near ``-1e6`` at alpha = 1e-3)
    and taken as zero; a more negative one is a real loss of positive semi-definiteness and gives NaN
    as above. The factor is then ``V sqrt(max(w, 0))`` (square, not triangular).

    References:
        Higham, "Computing a nearest symmetric positive semidefinite matrix", Linear Algebra Appl. 103
        (1988), Thm. 2.1 (the clipped eigen-decomposition is the nearest PSD matrix in Frobenius norm).

    """
    if centre_weight >= 0:
        cols = dev.T * jnp.sqrt(wc)[None, :]
        return cols if chol_noise is None else jnp.concatenate([cols, chol_noise], axis=1)
    cov = (dev.T * wc) @ dev
    if chol_noise is not None:
        cov = cov + chol_noise @ chol_noise.T
    cov = 0.5 * (cov + cov.T)
    if spread is None:
        return cholesky(cov)
    w, v = jnp.linalg.eigh(cov)
    floor = ROUNDING_FLOOR * dev.shape[0] * jnp.finfo(cov.dtype).eps * spread
    root = v * jnp.sqrt(jnp.maximum(w, 0.0))[None, :]
    return jnp.where(jnp.all(w >= -floor), root, jnp.nan)


def linear(
    fn: Callable[[Any], Any], mean: Float[Array, " n"], chol_P: Float[Array, "n n"]
) -> tuple[Float[Array, "k n"], Float[Array, " k"], Float[Array, "k 1"]]:
    """Exact for affine ``fn``: A = d fn / dx, b = fn(0)-style offset, Omega = 0.

    The value comes out of the same forward pass as the Jacobian, so a function that leaves the
    compiled program (an FMU's step) is called once, not twice.
    """
    A, out = jax.jacfwd(lambda v: (y := fn(v), y), has_aux=True)(mean)
    return A, out - A @ mean, jnp.zeros((out.shape[0], 1), mean.dtype)


def taylor(
    fn: Callable[[Any], Any], mean: Float[Array, " n"], chol_P: Float[Array, "n n"]
) -> tuple[Float[Array, "k n"], Float[Array, " k"], Float[Array, "k 1"]]:
    """First-order Taylor expansion at the mean (the EKF); the remainder is ignored (Omega = 0)."""
    return linear(fn, mean, chol_P)


def reads_factor(linearisation: Linearisation) -> bool:
    """Whether a linearisation reads the covariance factor it is given (not :func:`linear`, :func:`taylor`).

    One that does not (a Jacobian at the mean) gives the measurement map before the predicted factor
    is known, and it has no remainder (``Omega = 0``), so a filter step can predict and condition in
    one factorisation (:func:`~twinfer.infer.gaussian.predict_condition`). Any other linearisation,
    a user's own included, is taken to read it.
    """
    return linearisation not in (linear, taylor)


def unscented(weights: UnscentedWeights) -> Linearisation:
    """Statistical linear regression through the unscented transform with the given weights.

    The regression's residual covariance ``Omega`` is factored by :func:`deviation_factor` with the
    spread of the regressed values, so that at Merwe's textbook alpha = 1e-3 (central weight about
    -1e6) a residual that is zero in exact arithmetic (an affine function) and indefinite by rounding
    alone (eigenvalues ~ -1e-25) is taken as zero rather than turned into a NaN factor (issue #52).
    """

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
        spread = jnp.abs(wc) @ jnp.sum(dy**2, axis=1)  # the size its covariance cancels down from
        chol_omega = tria(deviation_factor(resid, wc, weights.centre_weight(mean.shape[0]), spread=spread))
        return A, mu - A @ mean, chol_omega

    return linearise
