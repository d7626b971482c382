"""cuthbert's side of ``twinfer bench peers``: its KF, EKF and UKF on the problems of ``_peer_worker``.

Loaded by path by :func:`_peer_worker.build` in the peers' environment (``.venv-peers``), where twinfer is
not installed: this module imports only JAX, cuthbert and cuthbertlib. Every filter is cuthbert's
square-root (generalised Cholesky) form and runs sequentially (``lax.scan``), never as an associative
scan. The time convention is twinfer's, which is also cuthbert's: from ``N(m0, chol_P0 chol_P0^T)``,
step k predicts ``x_{k+1} = f(x_k) + w`` and then updates with ``ys[k] = h(x_{k+1}) + v``. Each filter
returns the T filtered means (cuthbert's initial element, the prior, dropped) and the total
log-likelihood.

- ``kf``: cuthbert's exact square-root Kalman filter, :func:`cuthbert.gaussian.kalman.build_filter` run
  by :func:`cuthbert.filter` (``parallel=False``: a sequential scan of its associative operator).
  ``F`` and ``H`` are the Jacobians of the linear ``f`` and ``h`` (``jax.jacfwd`` at zero, once), the
  offsets are zero.
- ``ekf``: cuthbert's linearised-moments filter, :func:`cuthbert.gaussian.moments.build_filter` with
  ``associative=False`` run by :func:`cuthbert.filter`. The conditional mean ``f`` is linearised by its
  Jacobian (:func:`cuthbertlib.linearize.linearize_moments`) at the previous filtered mean and ``h`` at
  the predicted mean, with the constant factors ``chol_Q`` and ``chol_R``: the standard EKF, with the
  predicted mean ``F m + (f(m) - F m)`` and the predicted measurement ``H m + (h(m) - H m)``.
  (:mod:`cuthbert.gaussian.taylor` is not used: it linearises log densities by their Hessians and
  recovers the noise factors by an inverse square root, which is an EKF only up to that rounding.)
- ``ukf``: cuthbert has no sigma-point filter, so it is built from cuthbertlib's atoms in a ``lax.scan``:
  Merwe's unscented sigma points (:func:`cuthbertlib.quadrature.unscented.weights` with alpha 1, beta 2
  and kappa 0 given, whose weights are Merwe's; cuthbertlib's default kappa is 3 + n), statistical linear
  regression of ``f`` at the filtered moments and of ``h`` at the predicted moments (sigma points
  redrawn) by :func:`cuthbertlib.quadrature.conditional_moments` in its covariance mode, and the
  square-root :func:`cuthbertlib.kalman.predict` / :func:`cuthbertlib.kalman.filter_update` with the
  Cholesky factors of ``Omega + Q`` and ``Omega + R`` (``Omega`` the regression's residual covariance).

  The covariance mode factors ``chol_P chol_P^T`` again for its sigma points (the same points up to
  rounding: a lower-triangular factor is unique up to column signs, and the points come in +- pairs).

  Two cuthbertlib conventions are worked around. Its Cholesky mode forms the residual factor by rank-one
  Cholesky downdates of the points' factor by the columns of ``A chol_P``; the dynamics' residual is near
  zero and numerically singular for a nearly linear step, and the downdate is then off by about 2e-10
  (1e-9 of the points' covariance) against a process noise variance of 1e-6: the filtered means then
  differ from twinfer's by up to 1e-4 of their size (``ukf_n40``). Its covariance mode subtracts the full
  matrices instead (rounding 1e-17), and the noise is added before the one Cholesky factorisation, where
  the sum is well conditioned. And it weights the conditional covariance (``cov_fn``) by the covariance
  weights, which sum to 1 + (1 - alpha^2 + beta) = 3 for Merwe's, not 1: noise passed through ``cov_fn``
  would be tripled, so the regression is noise-free and ``chol_Q`` / ``chol_R`` are added after it.
"""

# cuthbert is installed only in .venv-peers, not in the .venv that `make typecheck` runs pyright with.
# pyright: reportMissingImports=false

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cuthbert
import jax
import jax.numpy as jnp
from cuthbert.gaussian import kalman, moments
from cuthbertlib.kalman import filter_update, predict
from cuthbertlib.quadrature import conditional_moments, unscented

MERWE = (1.0, 2.0, 0.0)
"""alpha, beta, kappa of the UKF's sigma points (as ``_peer_worker.MERWE``)."""

Run = Callable[[jax.Array], tuple[jax.Array, jax.Array]]
"""``ys -> (filtered means (T, n), log-likelihood)``."""


def cuthbert_filter(p: dict[str, Any]) -> Run:
    """The cuthbert filter of one problem of ``_peer_worker.problem``: ``ys -> (means, loglik)``."""
    kind = p["kind"]
    if kind == "kf":
        return _kalman_filter(p)
    if kind == "ekf":
        return _extended_filter(p)
    if kind == "ukf":
        return _unscented_filter(p)
    raise ValueError(f"peer cuthbert: expected kind 'kf', 'ekf' or 'ukf'; received {kind!r}")


def _run_filter(filter_obj: cuthbert.Filter) -> Run:
    """Run a cuthbert filter object sequentially over ``ys`` (the model inputs are the measurements)."""

    def run(ys: jax.Array) -> tuple[jax.Array, jax.Array]:
        states = cuthbert.filter(filter_obj, ys, filter_obj.init_prepare(), parallel=False)
        return states.mean[1:], states.log_normalizing_constant[-1]

    return run


def _kalman_filter(p: dict[str, Any]) -> Run:
    """The exact square-root Kalman filter (:func:`cuthbert.gaussian.kalman.build_filter`)."""
    m0, chol_Q, chol_R = p["m0"], p["chol_Q"], p["chol_R"]
    n = m0.shape[0]
    F = jax.jacfwd(p["f"])(jnp.zeros(n, m0.dtype))
    H = jax.jacfwd(p["h"])(jnp.zeros(n, m0.dtype))
    c, d = jnp.zeros(n, m0.dtype), jnp.zeros(H.shape[0], m0.dtype)

    def dynamics(y: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        return F, c, chol_Q

    def observation(y: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        return H, d, chol_R, y

    return _run_filter(kalman.build_filter(m0, p["chol_P0"], dynamics, observation))


def _extended_filter(p: dict[str, Any]) -> Run:
    """The EKF: :func:`cuthbert.gaussian.moments.build_filter`, non-associative, Jacobians at the means."""
    f, h, chol_Q, chol_R = p["f"], p["h"], p["chol_Q"], p["chol_R"]

    def dynamics(state: Any, y: jax.Array) -> tuple[Callable, jax.Array]:
        return (lambda x: (f(x), chol_Q)), state.mean  # the previous filtered mean

    def observation(state: Any, y: jax.Array) -> tuple[Callable, jax.Array, jax.Array]:
        return (lambda x: (h(x), chol_R)), state.mean, y  # the predicted mean

    return _run_filter(moments.build_filter(p["m0"], p["chol_P0"], dynamics, observation, associative=False))


def _unscented_filter(p: dict[str, Any]) -> Run:
    """The UKF from cuthbertlib's atoms: unscented SLR, then the square-root predict and update."""
    f, h, m0, chol_P0 = p["f"], p["h"], p["m0"], p["chol_P0"]
    Q, R = p["chol_Q"] @ p["chol_Q"].T, p["chol_R"] @ p["chol_R"].T
    n = m0.shape[0]
    quadrature = unscented.weights(n, *MERWE)

    def regression(
        fn: Callable, noise: jax.Array, m: jax.Array, chol: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``fn(x) + e ~ A x + b + N(0, L L^T)`` by the sigma points of ``N(m, chol chol^T)``."""
        no_noise = jnp.zeros_like(noise)
        A, b, omega = conditional_moments(fn, lambda x: no_noise, m, chol @ chol.T, quadrature)
        return A, b, jnp.linalg.cholesky(omega + noise)

    def step(
        carry: tuple[jax.Array, jax.Array, jax.Array], y: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], jax.Array]:
        m, chol, ell = carry
        F, c, chol_omega_q = regression(f, Q, m, chol)
        m_pred, chol_pred = predict(m, chol, F, c, chol_omega_q)
        H, d, chol_omega_r = regression(h, R, m_pred, chol_pred)  # sigma points redrawn
        (m_new, chol_new), ell_k = filter_update(m_pred, chol_pred, H, d, chol_omega_r, y)
        return (m_new, chol_new, ell + ell_k), m_new

    def run(ys: jax.Array) -> tuple[jax.Array, jax.Array]:
        init = (m0, chol_P0, jnp.zeros((), m0.dtype))
        (_, _, loglik), means = jax.lax.scan(step, init, ys)
        return means, loglik

    return run
