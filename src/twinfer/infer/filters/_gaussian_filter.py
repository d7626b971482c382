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
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from twinfer._config import ensure
from twinfer.infer.gaussian import (
    Linearisation,
    cholesky,
    condition_moments,
    noise_factor,
    predict,
    predict_condition,
    reads_factor,
    taylor,
    tria,
    update,
)

_DIVERGED = (
    "filter diverged: a covariance stopped being positive-definite or the state became non-finite "
    "(first_bad_step in the output names the step; run_ukf reports it)."
)

Transition = Callable[[Any, Any], Any]
"""``(x, u) -> x_next``: a discrete-time transition (the noise-free part)."""

Measurement = Callable[[Any, Any], Any]
"""``(x, u) -> y``: a measurement function."""

Kernel = Literal["qr", "gram"]
"""How a Gaussian filter step does its algebra. ``"qr"`` (the default) keeps every covariance as a factor and
adds and conditions them by QR of stacked factors (:func:`~twinfer.infer.gaussian.tria`); robust to
singular covariances. ``"gram"`` forms the covariances by products and factors them by Cholesky: for a
24-state EKF about 1.5 times faster on the CPU (``twinfer bench live``), at the price of a squared condition
number and positive-definite covariances (every sensor noisy, every state spread or driven)."""

Innovation = Callable[[Any, Any], Any]
"""``(y, y_pred) -> residual``; a wrapped difference for angles."""


def _gram(chols: Float[Array, "... n n"]) -> Float[Array, "... n n"]:
    return jnp.einsum("...ij,...kj->...ik", chols, chols)


class GaussianStep(NamedTuple):
    """One predict-update step of a Gaussian filter: the posterior, its likelihood, the smoother's inputs.

    ``chol``/``pred_chol`` are lower-triangular factors; ``cross_cov`` = cov(x_k, x_{k+1} | y_1..y_k);
    ``nis`` is the normalised innovation squared ``v^T S^{-1} v`` over the observed components, ``innov``
    each output's innovation over its own sd; ``ok`` is False when the posterior is non-finite.
    """

    mean: Float[Array, " n"]
    chol: Float[Array, "n n"]
    loglik: Float[Array, ""]
    ok: Bool[Array, ""]
    pred_mean: Float[Array, " n"]
    pred_chol: Float[Array, "n n"]
    cross_cov: Float[Array, "n n"]
    nis: Float[Array, ""] | None = None
    innov: Float[Array, " m"] | None = None
    """Each output's innovation over its own sd, 0 where unobserved (:attr:`UpdateInfo.standardised`)."""
    factor: Float[Array, "n n"] | None = None
    """A square factor of the posterior covariance to carry to the next step, when it is not ``chol``
    (not triangular: :func:`~twinfer.infer.gaussian.predict_condition` under ``vmap``); None: ``chol``."""

    @property
    def cov(self) -> Float[Array, "n n"]:
        return self.chol @ self.chol.T

    @property
    def pred_cov(self) -> Float[Array, "n n"]:
        return self.pred_chol @ self.pred_chol.T


class GaussianFilterOutput(NamedTuple):
    """Filtered means/factors over t_1..t_T, predicted means/factors, the log-likelihood, first bad step.

    Every Gaussian filter of twinfer (KF, EKF, both UKFs) returns this. ``chols`` are lower-triangular
    factors of the covariances; ``covs`` and ``pred_covs`` form the covariances from them.
    ``cross_covs[k]`` = cov(x_k, x_{k+1} | y_1..y_k), the input of the RTS smoother.
    """

    means: Float[Array, "T n"]
    chols: Float[Array, "T n n"]
    pred_means: Float[Array, "T n"] | None
    """None from a scan that kept the filtered moments only (``CentralProgram.scan(smoother_inputs=False)``),
    as are ``pred_chols`` and ``cross_covs``."""
    pred_chols: Float[Array, "T n n"] | None
    cross_covs: Float[Array, "T n n"] | None
    loglik: Float[Array, ""]
    first_bad_step: Int[Array, ""]
    nis: Float[Array, ""] | None = None
    """Mean normalised innovation squared per observed component (1 for a consistent filter)."""

    @property
    def covs(self) -> Float[Array, "T n n"]:
        """Filtered covariances ``chols @ chols^T``."""
        return _gram(self.chols)

    @property
    def pred_covs(self) -> Float[Array, "T n n"]:
        """One-step predictive covariances.

        Raises:
            ValueError: a scan that kept the filtered moments only (``pred_chols`` None).

        """
        if self.pred_chols is None:
            raise ValueError(
                "GaussianFilterOutput.pred_covs: expected the predicted factors; received a scan of the "
                "filtered moments only (CentralProgram.scan(data, smoother_inputs=True) keeps them)."
            )
        return _gram(self.pred_chols)


def scan_steps(
    step: Callable[[Float[Array, " n"], Float[Array, "n n"], Any], GaussianStep],
    x0: Float[Array, " n"],
    chol_P0: Float[Array, "n n"],
    inputs: Any,
    masks: Bool[Array, "T m"],
    *,
    check: bool = False,
) -> GaussianFilterOutput:
    """The one time loop of the Gaussian filters: ``step(mean, chol_P, inputs[k])`` scanned over time.

    Carries the posterior, sums the log-likelihood and the NIS, records the first step whose posterior
    is non-finite; the NIS is averaged over the observed entries of ``masks``. :func:`gaussian_filter`
    and :func:`~twinfer.infer.filters.ukf_scan` differ only in the ``step`` they pass.
    """

    def body(carry, inp):
        mean, chol, loglik, bad, k, nis = carry
        out = step(mean, chol, inp)
        bad = jnp.where((bad < 0) & ~out.ok, k, bad)
        factor = out.chol if out.factor is None else out.factor
        carry = (out.mean, factor, loglik + out.loglik, bad, k + 1, nis + out.nis)
        return carry, (out.mean, out.chol, out.pred_mean, out.pred_chol, out.cross_cov)

    zero = jnp.zeros((), x0.dtype)
    init = (x0, chol_P0, zero, jnp.array(-1), jnp.array(0), zero)
    (_, _, loglik, bad, _, nis), (ms, cs, pm, pc, cc) = jax.lax.scan(body, init, inputs)
    if check:
        loglik = eqx.error_if(loglik, bad >= 0, _DIVERGED)
    n_obs = jnp.sum(masks)
    nis = jnp.where(n_obs > 0, nis / jnp.maximum(n_obs, 1), 0.0)
    return GaussianFilterOutput(ms, cs, pm, pc, cc, loglik, bad, nis)


def gaussian_filter(
    f: Transition,
    h: Measurement,
    x0: Float[Array, " n"],
    chol_P0: Float[Array, "n n"],
    chol_Q: Float[Array, "n q"],
    chol_R: Float[Array, "m r"],
    us: Float[ArrayLike, "T n_u"],
    ys: Float[Array, "T m"],
    masks: Bool[ArrayLike, "T m"] | None = None,
    *,
    linearisation: Linearisation = taylor,
    extra_chol_Q: Float[Array, "T n k"] | None = None,
    check: bool = False,
    kernel: Kernel = "qr",
) -> GaussianFilterOutput:
    """Scan the square-root predict/update atoms over time with one linearisation.

    Step k predicts x_{k+1} from x_k with ``f(x, u_k)`` and updates with ``ys[k] ~ h(x_{k+1}, u_k)``.
    Every noise argument is a factor (``chol_*``); :func:`~twinfer.infer.filters.run_ukf` and
    :func:`~twinfer.infer.filters.run_filter` are the entry points that take covariances or standard
    deviations.

    Args:
        f: transition ``(x, u) -> x_next``.
        h: measurement ``(x, u) -> y``.
        x0: initial mean (n,).
        chol_P0: lower Cholesky factor of the initial covariance (n, n).
        chol_Q: factor of the process noise (n, q).
        chol_R: factor of the measurement noise (m, r).
        us: inputs (T, n_u).
        ys: measurements (T, m); entries outside ``masks`` are never read (NaN there is fine).
        masks: boolean (T, m): which entries are observed; default: where ``ys`` is finite. Given, it is
            taken as is: an observed entry that is not finite makes its step diverge (``first_bad_step``;
            ``check`` raises). Under ``vmap`` over records sharing their sensors, masks that are not
            batched keep the covariances unbatched: every record's gain is computed once (a linear
            filter's covariances do not depend on the data), as a covariance-form filter without
            missing values does.
        linearisation: :func:`linear` (KF), :func:`taylor` (EKF) or :func:`unscented` (UKF with sigma
            points redrawn for the measurement: statistical linear regression).
        extra_chol_Q: optional (T, n, k) extra process-noise factors injected at each predict (the hook of
            the compositional graph's probabilistic interface messages).
        check: raise inside ``jit`` (``eqx.error_if``) if any step produced a non-finite state.
        kernel: ``"qr"`` or ``"gram"`` (:data:`Kernel`).

    Returns:
        :class:`GaussianFilterOutput`.

    """
    ensure("gaussian_filter", x0=x0, chol_P0=chol_P0, chol_Q=chol_Q, chol_R=chol_R, ys=ys)
    masks = jnp.isfinite(ys) if masks is None else jnp.asarray(masks, bool)
    ys = jnp.where(masks, ys, 0.0)
    extra = extra_chol_Q  # None: no extra noise (no zero column in every step's factorisation)

    def step(mean: Float[Array, " n"], chol_P: Float[Array, "n n"], inp: Any) -> GaussianStep:
        u, y, mask, chol_extra = inp
        return gaussian_step(
            f, h, linearisation, chol_Q, chol_R, mean, chol_P, u, y, mask, chol_extra, kernel=kernel
        )

    return scan_steps(step, x0, chol_P0, (us, ys, masks, extra), masks, check=check)


def gaussian_step(
    f: Transition,
    h: Measurement,
    linearisation: Linearisation,
    chol_Q: Float[Array, "n q"],
    chol_R: Float[Array, "m r"],
    mean: Float[Array, " n"],
    chol_P: Float[Array, "n n"],
    u: Any,
    y: Float[Array, " m"],
    mask: Bool[Array, " m"],
    chol_extra: Float[Array, "n k"] | None = None,
    *,
    kernel: Kernel = "qr",
) -> GaussianStep:
    """One step of :func:`gaussian_filter`.

    Linearise ``f`` at the posterior, predict, linearise ``h`` at the prediction, update with ``y`` where
    ``mask`` holds (``y`` is 0 elsewhere, never read).

    ``chol_extra`` (n, k) is extra process noise of this step (None: none). ``kernel`` (see
    :data:`Kernel`): ``"qr"`` triangularises stacked factors; ``"gram"`` forms the predicted covariance
    and the joint covariance of the update by products and factors them by Cholesky
    (:func:`~twinfer.infer.gaussian.condition_moments`).
    """
    chol_N = chol_Q if chol_extra is None else jnp.concatenate([chol_Q, chol_extra], 1)
    if chol_extra is None:
        chol_extra = jnp.zeros((mean.shape[0], 0), mean.dtype)
    if kernel == "gram":
        return _gram_step(f, h, linearisation, chol_Q, chol_R, mean, chol_P, u, y, mask, chol_extra)
    if kernel != "qr":
        raise ValueError(f"gaussian_step kernel: expected 'qr' or 'gram'; received {kernel!r}.")
    A, b, chol_omega = linearisation(lambda x: f(x, u), mean, chol_P)
    cross = chol_P @ (chol_P.T @ A.T)
    if not reads_factor(linearisation):  # H before the predicted factor, Omega = 0: one factorisation
        m_pred = A @ mean + b
        H, d, _ = linearisation(lambda x: h(x, u), m_pred, chol_P)  # not read (reads_factor)
        pc = predict_condition(mean, chol_P, A, b, chol_N, H, d, chol_R, y, mask)
        m_new, carry, c_new, c_pred, info = pc
        ok = jnp.all(jnp.isfinite(m_new)) & jnp.all(jnp.isfinite(carry)) & jnp.isfinite(info.loglik)
        return GaussianStep(
            m_new, c_new, info.loglik, ok, m_pred, c_pred, cross, info.nis, info.standardised, carry
        )
    m_pred, c_pred = predict(mean, chol_P, A, b, jnp.concatenate([chol_Q, chol_omega, chol_extra], 1))
    H, d, chol_omega_h = linearisation(lambda x: h(x, u), m_pred, c_pred)
    chol_R_k = tria(jnp.concatenate([chol_R, chol_omega_h], axis=1))
    m_new, c_new, info = update(m_pred, c_pred, H, d, chol_R_k, y, mask)
    ok = jnp.all(jnp.isfinite(m_new)) & jnp.all(jnp.isfinite(c_new)) & jnp.isfinite(info.loglik)
    return GaussianStep(m_new, c_new, info.loglik, ok, m_pred, c_pred, cross, info.nis, info.standardised)


def _gram_step(
    f: Transition,
    h: Measurement,
    linearisation: Linearisation,
    chol_Q: Any,
    chol_R: Any,
    mean: Any,
    chol_P: Any,
    u: Any,
    y: Any,
    mask: Any,
    chol_extra: Any,
) -> GaussianStep:
    """:func:`gaussian_step` with ``kernel="gram"``: the same Gaussian algebra on covariances.

    ``P' = (A L_P)(A L_P)^T + N N^T`` with ``N = [L_Q, L_Omega, L_extra]`` (S12), then the joint
    covariance of the masked measurement and the state, ``S_yy = H_M P' H_M^T + R_M``, ``S_xy = P' H_M^T``
    (the masking rule of :func:`~twinfer.infer.gaussian.noise_factor`), conditioned by
    :func:`~twinfer.infer.gaussian.condition_moments`. Equal to the QR kernel to rounding while every
    covariance is positive-definite; where one is not (a noise-free sensor, a state with neither prior
    spread nor process noise), its Cholesky factor is NaN and the step is flagged not ``ok``.
    ``pred_chol`` is factored only where it is read (the smoother, a sigma-point measurement
    linearisation); XLA drops it otherwise.
    """
    A, b, chol_omega = linearisation(lambda x: f(x, u), mean, chol_P)
    spread = A @ chol_P
    noise = jnp.concatenate([chol_Q, chol_omega, chol_extra], axis=1)
    cov_pred = spread @ spread.T + noise @ noise.T
    cov_pred = 0.5 * (cov_pred + cov_pred.T)
    m_pred = A @ mean + b
    c_pred = cholesky(cov_pred)
    H, d, chol_omega_h = linearisation(lambda x: h(x, u), m_pred, c_pred)
    m_f = mask.astype(mean.dtype)
    h_m = H * m_f[:, None]
    noise_y = noise_factor(jnp.concatenate([chol_R, chol_omega_h], axis=1), mask, square=False)
    s_xy = cov_pred @ h_m.T
    s_yy = h_m @ s_xy + noise_y @ noise_y.T
    innovation = jnp.where(mask, y - (H @ m_pred + d), 0.0)
    m_new, c_new, info = condition_moments(m_pred, s_yy, s_xy, cov_pred, innovation, mask)
    ok = jnp.all(jnp.isfinite(m_new)) & jnp.all(jnp.isfinite(c_new)) & jnp.isfinite(info.loglik)
    cross = chol_P @ (chol_P.T @ A.T)
    return GaussianStep(m_new, c_new, info.loglik, ok, m_pred, c_pred, cross, info.nis, info.standardised)
