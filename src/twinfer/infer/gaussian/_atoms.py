"""Square-root Gaussian atoms on ``(mean, chol)``: predict, condition, update, the masked likelihood.

Every Kalman-family computation in twinfer reduces to these: the KF, EKF and UKF drivers
(:mod:`twinfer.infer.filters`), every node of a compositional graph, the grid's clusters and the
probabilistic ODE filter (:mod:`twinfer.infer.pn`). Covariances never leave square-root form: sums of
covariances are formed by :func:`~twinfer.infer.gaussian.tria` of stacked factors, and conditioning is
the first reflections of a QR of the joint factor.

One masking rule, in :func:`condition`: a component that is not observed gets a zero row in the joint
factor and a unit innovation variance of its own, so its innovation is zero, it adds nothing to the
likelihood and shapes stay static (no recompilation when the observed set changes). Measurement noise
may be correlated: the noise factor of the observed components is that of the marginal of ``R`` on them.

References:
    Särkkä & Svensson, Bayesian Filtering and Smoothing (2nd ed.), Ch. 6 and 9 (square-root forms);
    Krämer & Hennig (2020), "Stable implementation of probabilistic ODE solvers", Sec. 3 (zero-noise
    square-root updates); compositional-inference paper, Alg. 4-5 and (S12) (the covariance-form
    equations these reproduce).

"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from twinfer.infer.gaussian._linalg import (
    HOUSEHOLDER_MAX,
    UNROLL_MAX,
    by_batching,
    cholesky,
    solve_lower,
    tria,
    tria_rows,
)

_LOG_2PI = math.log(2.0 * math.pi)


class UpdateInfo(NamedTuple):
    """Per-update diagnostics: log-likelihood increment, masked innovation, factor of its covariance.

    ``nis`` is the normalised innovation squared ``v^T S^{-1} v`` over the observed components.
    """

    loglik: Any
    innovation: Any
    chol_S: Any
    nis: Any

    @property
    def standardised(self) -> Any:
        """Each component's innovation over its own sd, ``v_i / sqrt(S_ii)`` (0 where unobserved).

        N(0, 1) per sensor, and white over time, under a model that fits: a live twin's per-sensor
        consistency test reads it (unobserved rows of ``L_S`` are a unit row, their innovation 0).
        """
        return self.innovation / jnp.sqrt(jnp.sum(self.chol_S * self.chol_S, axis=1))


def masked_loglik(
    z: Float[Array, " m"], chol_S: Float[Array, "m m"], mask: Bool[Array, " m"]
) -> Float[Array, ""]:
    """``log N(v; 0, S)`` over the observed components, from the whitened innovation ``z = L_S^{-1} v``.

    Unobserved components have ``z = 0`` and a unit diagonal in ``chol_S`` (the masking rule of
    :func:`condition`), so they add nothing.
    """
    n_obs = jnp.sum(mask.astype(z.dtype))
    return -0.5 * (z @ z) - jnp.sum(jnp.log(jnp.diag(chol_S))) - 0.5 * n_obs * _LOG_2PI


def predict(
    mean: Float[Array, " n"],
    chol_P: Float[Array, "n n"],
    A: Float[Array, "k n"],
    b: Float[Array, " k"],
    chol_Q: Float[Array, "k q"],
) -> tuple[Float[Array, " k"], Float[Array, "k k"]]:
    """``x' = A x + b + w``, ``w ~ N(0, Q)``: mean ``A m + b`` and factor ``tria([A L_P, L_Q])`` (S12)."""
    return A @ mean + b, tria(jnp.concatenate([A @ chol_P, chol_Q], axis=1))


def noise_factor(
    chol_R: Float[Array, "m r"] | Float[Array, " m"] | None, mask: Bool[Array, " m"], *, square: bool = True
) -> Float[Array, "m k"]:
    """Factor of ``M R M + (I - M)``: the marginal noise on the observed components, unit elsewhere.

    The masking rule of every update: the rows of ``L_R`` of unobserved components are zeroed (exact,
    also for correlated sensors: ``(M L_R)(M L_R)^T = M R M``) and each of them gets a unit column of
    its own. ``square=False`` returns those ``r + m`` columns; ``square=True`` refactors them into an
    (m, m) factor (:func:`cholesky`, written out for a few sensors). A vector ``chol_R`` holds the
    standard deviations of independent sensors (a diagonal ``R``): the factor is then diagonal and
    nothing is refactored. ``chol_R = None`` is noise-free (an exact pseudo-observation).
    """
    m = mask.astype(jnp.result_type(float))
    unobserved = jnp.diag(1.0 - m)
    if chol_R is None:
        return unobserved
    if chol_R.ndim == 1:
        return jnp.diag(jnp.abs(chol_R) * m + (1.0 - m))
    rows = chol_R * m[:, None]
    if not square:
        return jnp.concatenate([rows, unobserved], axis=1)
    if chol_R.shape == (1, 1):
        return jnp.abs(rows) + unobserved
    return cholesky(rows @ rows.T + unobserved)


def condition(
    mean: Float[Array, " n"],
    chol_joint: Float[Array, "mn c"],
    innovation: Float[Array, " m"],
    mask: Bool[Array, " m"],
    *,
    triangular: bool = True,
) -> tuple[Float[Array, " n"], Float[Array, "n n"], UpdateInfo]:
    """Condition a Gaussian on the observed part of a jointly Gaussian measurement, in square-root form.

    ``chol_joint`` is a factor, rows ``[y; x]``, of the joint covariance of the measurement ``y`` (m rows,
    noise included) and the state ``x`` (n rows) with any number of columns; ``innovation`` is ``y``
    minus its predicted mean. The first ``m`` reflections of a QR of ``chol_joint`` (:func:`tria_rows`, or a
    full QR above :data:`~twinfer.infer.gaussian.HOUSEHOLDER_MAX` rows) give the innovation factor
    ``L_S``, the gain factor ``G`` (gain ``K = G L_S^{-1}``) and a factor of the posterior covariance.

    The caller applies the masking rule to ``chol_joint``: rows of unobserved components zero except a unit
    entry of their own (:func:`update` and :func:`noise_factor` do this); here their innovation is
    zeroed. ``triangular=False`` returns the square, non-triangular posterior factor the first
    reflections leave (enough when the next step triangularises anyway); it needs ``chol_joint`` with
    ``m + n`` columns. With no measurement rows (``m = 0``: a subsystem without sensors) the result is
    the prediction itself, its factor ``chol_joint``'s, and a log-likelihood increment of 0.

    Returns:
        Posterior mean, posterior factor, :class:`UpdateInfo`.

    """
    n_y, n_x = innovation.shape[0], mean.shape[0]
    if n_y == 0:  # nothing measured (a subsystem without sensors): the prediction, log-likelihood 0
        zero = jnp.zeros((), mean.dtype)
        square = not triangular and chol_joint.shape[1] == n_x
        info = UpdateInfo(zero, innovation, jnp.zeros((0, 0), mean.dtype), zero)
        return mean, chol_joint if square else tria(chol_joint), info
    innovation = innovation * mask.astype(innovation.dtype)
    if chol_joint.shape[0] > HOUSEHOLDER_MAX:
        big = tria(chol_joint)  # lower-triangular (m + n) square: its lower-right block is triangular
        chol_s, gain, chol_post = big[:n_y, :n_y], big[n_y:, :n_y], big[n_y:, n_y:]
    elif chol_joint.shape[0] <= UNROLL_MAX:  # a few rows: reflections, batched or not
        chol_s, gain, chol_post = _blocks_by_rows(chol_joint, n_y, triangular)
    else:
        chol_s, gain, chol_post = _joint_blocks(n_y, triangular)(chol_joint)
    new_mean, info = _read_off(mean, chol_s, gain, innovation, mask)
    return new_mean, chol_post, info


def _blocks_by_rows(a: Any, n_y: int, triangular: bool) -> tuple[Any, Any, Any]:
    """``(L_S, G, posterior factor)`` from the first ``n_y`` reflections (:func:`tria_rows`)."""
    n_x = a.shape[0] - n_y
    big = tria_rows(a, n_y)
    post = tria(big[n_y:, n_y:]) if triangular else big[n_y:, n_y : n_y + n_x]
    return big[:n_y, :n_y], big[n_y:, :n_y], post


def _blocks_by_tria(a: Any, n_y: int) -> tuple[Any, Any, Any]:
    """``(L_S, G, posterior factor)`` from one whole :func:`tria` (the library QR on one matrix)."""
    big = tria(a)
    return big[:n_y, :n_y], big[n_y:, :n_y], big[n_y:, n_y:]


@functools.lru_cache(maxsize=256)
def _joint_blocks(n_y: int, triangular: bool) -> Any:
    """The blocks of a small joint factor: one library QR on one matrix, ``n_y`` reflections in a batch.

    Under ``vmap`` the first ``n_y`` written-out reflections fuse across the batch (:func:`tria_rows`);
    on one matrix a whole library QR is faster (:func:`~twinfer.infer.gaussian._linalg.by_batching`).
    """
    return by_batching(
        functools.partial(_blocks_by_tria, n_y=n_y),
        functools.partial(_blocks_by_rows, n_y=n_y, triangular=triangular),
    )


def predict_condition(
    mean: Float[Array, " n"],
    chol_P: Float[Array, "n n"],
    A: Float[Array, "n n"],
    b: Float[Array, " n"],
    chol_N: Float[Array, "n q"],
    H: Float[Array, "m n"],
    d: Float[Array, " m"],
    chol_R: Float[Array, "m r"] | Float[Array, " m"] | None,
    y: Float[Array, " m"],
    mask: Bool[Array, " m"],
) -> tuple[Float[Array, " n"], Float[Array, "n n"], Float[Array, "n n"], Float[Array, "n n"], UpdateInfo]:
    """:func:`predict` then :func:`update`, for a measurement map ``H`` known before the prediction.

    ``x' = A x + b + w`` with ``w ~ N(0, N N^T)``, then ``y = H x' + d + v`` with ``v ~ N(0, R)`` where
    ``mask`` holds (the masking rule of :func:`condition`). Because ``H`` is known before the predicted
    factor (a Kalman filter's, or an EKF's Jacobian at the predicted mean), the joint factor of
    ``(y, x')`` can be written from the prior's: ``[[H A L_P, H N, L_R], [A L_P, N, 0]]``, a factor of
    ``[[H P' H^T + R, H P'], [P' H^T, P']]`` with ``P' = A P A^T + N N^T``. On one system this is
    triangularised by a single library QR instead of one for the prediction and one for the update
    (and the noise's own factorisation): the 10-state EKF 1.2-1.4 times and the 20-state Kalman filter
    1.1-1.25 times faster on the CPU (``twinfer bench peers``, two sittings, against the two QRs of
    :func:`predict` and :func:`update`). Under ``vmap`` over systems whose covariances differ,
    the prediction is triangularised by reflections and the update keeps the square factor its first
    ``m`` reflections leave (:func:`tria_rows`), which fuses across the batch better than the wide joint
    factor (:func:`~twinfer.infer.gaussian._linalg.by_batching` chooses when the function is batched).

    Returns:
        Posterior mean, a square factor of the posterior covariance to carry to the next step (lower-
        triangular on one system, not under ``vmap``), its lower-triangular form, the lower-triangular
        factor of the predicted covariance (on one system from the joint factor's blocks,
        ``tria([G, L_post])``, an ``n``-row QR; the last two are for the record and the smoother, and XLA
        drops them where they are not read), :class:`UpdateInfo`.

    """
    if y.shape[0] == 0:  # nothing measured: the prediction
        m_pred, c_pred = predict(mean, chol_P, A, b, chol_N)
        zero = jnp.zeros((), mean.dtype)
        return m_pred, c_pred, c_pred, c_pred, UpdateInfo(zero, y, jnp.zeros((0, 0), mean.dtype), zero)
    m_pred = A @ mean + b
    spread = A @ chol_P
    h_m = H * mask.astype(mean.dtype)[:, None]
    noise = noise_factor(chol_R, mask, square=False)
    chol_s, gain, carry, chol_post, chol_pred = _predict_condition_blocks(spread, chol_N, h_m, noise)
    innovation = jnp.where(mask, y - (H @ m_pred + d), 0.0)
    new_mean, info = _read_off(m_pred, chol_s, gain, innovation, mask)
    return new_mean, carry, chol_post, chol_pred, info


def _predict_condition_one(spread: Any, chol_N: Any, h_m: Any, noise: Any) -> tuple[Any, ...]:
    """``(L_S, G, posterior factor, the same, predicted factor)`` from one QR of the joint factor.

    The predicted covariance is ``G G^T + L_post L_post^T`` (the joint factor's state rows), so its factor
    is a QR of those ``n`` rows, narrower than the prediction's own ``[A L_P, N]``.
    """
    n_y, n_x = h_m.shape
    top = jnp.concatenate([h_m @ spread, h_m @ chol_N, noise], axis=1)
    bottom = jnp.concatenate([spread, chol_N, jnp.zeros((n_x, noise.shape[1]), spread.dtype)], axis=1)
    big = tria(jnp.concatenate([top, bottom], axis=0))
    gain, post = big[n_y:, :n_y], big[n_y:, n_y:]
    return big[:n_y, :n_y], gain, post, post, tria(big[n_y:])


def _predict_condition_many(spread: Any, chol_N: Any, h_m: Any, noise: Any) -> tuple[Any, ...]:
    """``(L_S, G, square posterior factor, its triangular form, predicted factor)``: predict, reflect."""
    n_y, n_x = h_m.shape
    c_pred = tria(jnp.concatenate([spread, chol_N], axis=1))
    joint = jnp.concatenate(
        [
            jnp.concatenate([tria(noise), h_m @ c_pred], axis=1),
            jnp.concatenate([jnp.zeros((n_x, n_y), spread.dtype), c_pred], axis=1),
        ],
        axis=0,
    )
    if n_y + n_x > HOUSEHOLDER_MAX:
        chol_s, gain, post = _blocks_by_tria(joint, n_y)
        return chol_s, gain, post, post, c_pred
    chol_s, gain, square = _blocks_by_rows(joint, n_y, triangular=False)
    return chol_s, gain, square, tria(square), c_pred


_predict_condition_blocks = by_batching(_predict_condition_one, _predict_condition_many)


def condition_moments(
    mean: Float[Array, " n"], s_yy: Float[Array, "m m"], s_xy: Float[Array, "n m"], s_xx: Float[Array, "n n"],
    innovation: Float[Array, " m"], mask: Bool[Array, " m"],
) -> tuple[Float[Array, " n"], Float[Array, "n n"], UpdateInfo]:  # fmt: skip
    """:func:`condition` given the blocks of the joint covariance of ``[y; x]`` instead of a factor.

    The joint Cholesky factor is the lower-triangular factor a QR of any factor of the joint covariance
    gives (unique with a positive diagonal); by blocks it is ``L_S = chol(S_yy)``, the gain factor
    ``G = S_xy L_S^{-T}`` and ``chol(S_xx - G G^T)``, read off as in :func:`condition`. The QR's work
    becomes products and two small Cholesky factorisations, several times faster on the CPU for many
    small filters under ``vmap`` and for a large one whose measurement rows are a matrix times its state
    rows (``ukf_step(kernel="gram")``). The price: the factor's condition number is squared, and the
    joint covariance must be positive-definite; where it is not (a singular ``Q`` meeting a singular
    ``P``) the factor is NaN and the caller's divergence check names it: use :func:`condition` there.
    The caller applies the masking rule (:func:`noise_factor`).
    """
    if innovation.shape[0] == 0:  # nothing measured: the prediction
        zero = jnp.zeros((), mean.dtype)
        return mean, cholesky(0.5 * (s_xx + s_xx.T)), UpdateInfo(zero, innovation, s_yy, zero)
    chol_S = cholesky(0.5 * (s_yy + s_yy.T))
    gain_factor = solve_lower(chol_S, s_xy.T).T
    post = s_xx - gain_factor @ gain_factor.T
    chol_post = cholesky(0.5 * (post + post.T))
    new_mean, info = _read_off(mean, chol_S, gain_factor, innovation * mask.astype(innovation.dtype), mask)
    return new_mean, chol_post, info


def _read_off(mean: Any, chol_S: Any, gain_factor: Any, innovation: Any, mask: Any) -> tuple[Any, UpdateInfo]:
    """Posterior mean and diagnostics from ``L_S`` and the gain factor ``G`` (``K = G L_S^{-1}``)."""
    z = solve_lower(chol_S, innovation)
    info = UpdateInfo(masked_loglik(z, chol_S, mask), innovation, chol_S, z @ z)
    return mean + gain_factor @ z, info


def update(
    mean: Float[Array, " n"],
    chol_P: Float[Array, "n n"],
    H: Float[Array, "m n"],
    d: Float[Array, " m"],
    chol_R: Float[Array, "m r"] | Float[Array, " m"] | None,
    y: Float[Array, " m"],
    mask: Bool[Array, " m"],
    *,
    triangular: bool = True,
) -> tuple[Float[Array, " n"], Float[Array, "n n"], UpdateInfo]:
    """Condition on ``y = H x + d + v``, ``v ~ N(0, R)``, in square-root form; masked entries ignored.

    The joint factor of ``(y, x)`` is ``[[L_R, H L_P], [0, L_P]]`` (the square-root form of Alg. 4's
    update) with the masking rule of :func:`condition`; ``chol_R = None`` conditions on an exact
    (noise-free) observation, e.g. an ODE residual (Krämer & Hennig 2020, Sec. 3).
    """
    m_f = mask.astype(mean.dtype)
    n_x = mean.shape[0]
    n_y = y.shape[0]
    chol_joint = jnp.concatenate(
        [
            jnp.concatenate([noise_factor(chol_R, mask), (H * m_f[:, None]) @ chol_P], axis=1),
            jnp.concatenate([jnp.zeros((n_x, n_y), mean.dtype), chol_P], axis=1),
        ],
        axis=0,
    )
    innovation = jnp.where(mask, y - (H @ mean + d), 0.0)
    return condition(mean, chol_joint, innovation, mask, triangular=triangular)


def condition_exact(
    mean: Float[Array, " n"],
    chol_P: Float[Array, "n n"],
    H: Float[Array, "m n"],
    residual: Float[Array, " m"],
    mask: Bool[Array, " m"],
) -> tuple[Float[Array, " n"], Float[Array, "n n"]]:
    """Condition on ``0 = H x + d`` with zero noise (``residual = H mean + d``); masked rows are ignored.

    :func:`update` with ``chol_R = None`` and ``y - (H m + d) = -residual``; returns the posterior mean
    and a square (not triangular) factor.
    """
    zero = jnp.zeros_like(residual)
    new_mean, new_chol, _ = update(mean, chol_P, H, residual - H @ mean, None, zero, mask, triangular=False)
    return new_mean, new_chol


def update_scalar(
    mean: Float[Array, " n"],
    chol_P: Float[Array, "n n"],
    h: Float[Array, " n"],
    innovation: Float[Array, ""],
    std_r: Float[Array, ""] | float,
    mask: Bool[Array, ""],
    *,
    with_nis: bool = False,
) -> tuple[Any, ...]:
    """Square-root update on one scalar ``y = h x + v``, ``v ~ N(0, std_r^2)`` (Potter's form).

    With ``a = L^T h`` and ``s^2 = std_r^2 + a^T a`` the innovation variance, the gain is ``L a / s^2``
    and ``L (I - beta a a^T)`` with ``beta = 1 / (s (s + std_r))`` is a square factor of the updated
    covariance ``L (I - a a^T / s^2) L^T`` (the square of ``I - beta a a^T`` is that middle factor, and
    this ``beta`` has no cancellation, also for ``std_r = 0``, the ODE residual). Element-wise
    arithmetic only: under ``vmap`` over particles and blocks it fuses, unlike a batch of tiny matrix
    products. Equals :func:`update` with one row to rounding.

    Args:
        mean: prior mean ``(n,)``.
        chol_P: a factor ``L`` of its covariance ``(n, k)``, ``L L^T = P`` (square or wide).
        h: the measurement row ``(n,)``.
        innovation: ``y - h mean - d`` (for the ODE residual: minus the residual).
        std_r: noise standard deviation (0: exact observation).
        mask: whether the component is observed; if not (or if ``s = 0``), nothing changes.
        with_nis: also return ``z^2``.

    Returns:
        Posterior mean, a factor of the posterior covariance (as wide as ``chol_P``: any factor
        ``L L^T = P`` works, square or not), log innovation density (0 if unobserved), and with
        ``with_nis`` the normalised innovation squared ``z^2`` (0 if unobserved).

    References:
        Potter's square-root measurement update, as in Bierman (1977), "Factorization Methods for
        Discrete Sequential Estimation", Sec. V.3; Särkkä & Svensson (2023), Sec. 6.2 (sequential
        scalar updates).

    """
    std_r = jnp.abs(std_r)
    a = jnp.sum(chol_P * h[:, None], axis=0)
    la = jnp.sum(chol_P * a[None, :], axis=1)
    s = jnp.sqrt(std_r**2 + jnp.sum(a**2))
    ok = mask & (s > 0)
    s_safe = jnp.where(ok, s, 1.0)
    z = jnp.where(ok, innovation / s_safe, 0.0)
    beta = jnp.where(ok, 1.0 / (s_safe * (s_safe + std_r)), 0.0)
    loglik = jnp.where(mask, -0.5 * z**2 - jnp.log(s_safe) - 0.5 * _LOG_2PI, 0.0)
    out = (mean + la * (z / s_safe), chol_P - beta * la[:, None] * a[None, :], loglik)
    return (*out, z**2) if with_nis else out
