"""One-step weighted least squares: the static state-estimation baseline of the grid study.

The estimate at step k is the minimiser of ``||y - h(x)||^2_{R^-1} + ||x - f(x_{k-1})||^2_{Q^-1}``
with ``h`` linearised at the prediction: a Gauss-Newton step from the predicted point whose precision
``Q^-1 + H^T R^-1 H`` is formed afresh every step. The previous step's uncertainty is never carried
forward, which is what makes it "static": a component that ``h`` does not see (the natural frequencies
of the grid case) keeps its predicted value and a spread of ``Q`` alone.

References:
    compositional-inference paper, SI section on the WLS/WNLS baselines (specs/compositional-inference.md
    3.5, "WLS step"); Schweppe & Wildes (1970), Power system static-state estimation.

"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from twinfer.infer.filters._gaussian_filter import Innovation, Measurement, Transition
from twinfer.linalg import spd_inverse


class WlsStep(NamedTuple):
    """One WLS step's estimate, its covariance ``(Q^-1 + H^T R^-1 H)^-1`` and a finiteness flag."""

    mean: Float[Array, " n"]
    cov: Float[Array, "n n"]
    ok: Bool[Array, ""]


def wls_step(
    f: Transition,
    h: Measurement,
    mean: Float[Array, " n"],
    q: Float[Array, "n n"],
    r: Float[Array, "m m"],
    u: Float[ArrayLike, " n_u"],
    y: Float[Array, " m"],
    mask: Bool[Array, " m"],
    *,
    innovation: Innovation | None = None,
) -> WlsStep:
    """Predict with ``f``, then one weighted Gauss-Newton step towards ``y`` (pure; vmaps over subsystems).

    ``x = x_bar + (Q^-1 + H^T R^-1 H)^-1 H^T R^-1 (y - h(x_bar))`` with ``x_bar = f(mean, u)`` and
    ``H = dh/dx`` at ``x_bar`` (exact, by forward-mode differentiation, where the authors' code uses
    central differences).

    Args:
        f: transition ``(x, u) -> x_next``.
        h: measurement ``(x, u) -> y``.
        mean: previous estimate (n,).
        q: process-noise covariance (n, n), the prior weight of the prediction.
        r: measurement-noise covariance (m, m).
        u: input of this step.
        y: measurement (m,); entries with ``mask`` False are ignored.
        mask: boolean (m,).
        innovation: ``(y, y_pred) -> residual`` (a wrapped difference for angles), default ``y - y_pred``.

    Returns:
        :class:`WlsStep`.

    """
    x_bar = f(mean, u)
    y_bar = h(x_bar, u)
    jac = jax.jacfwd(h)(x_bar, u) * mask[:, None].astype(x_bar.dtype)
    y = jnp.where(mask, y, y_bar)
    innov = y - y_bar if innovation is None else innovation(y, y_bar)
    # Whitened by R's Cholesky factor L (A = L^-1 H, b = L^-1 innovation): precision Q^-1 + A^T A and
    # mean step cov A^T b. Cholesky throughout: an LU here deadlocks XLA on 2 cores (twinfer.linalg).
    chol_r = jnp.linalg.cholesky(r)
    white_jac = jax.scipy.linalg.solve_triangular(chol_r, jac, lower=True)
    white_innov = jax.scipy.linalg.solve_triangular(chol_r, innov, lower=True)
    cov = spd_inverse(spd_inverse(q) + white_jac.T @ white_jac)
    new_mean = x_bar + cov @ (white_jac.T @ white_innov)
    ok = jnp.all(jnp.isfinite(new_mean)) & jnp.all(jnp.isfinite(cov))
    return WlsStep(new_mean, cov, ok)
