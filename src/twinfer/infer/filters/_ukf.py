"""Unscented Kalman filter in square-root form over one time scan (Alg. 6, S13-S15).

The paper code's UKF does not redraw sigma points for the measurement: ``y`` is read at the propagated
points, so the joint Gaussian of the predicted state and the measurement comes from one set of points.
In square-root form that joint is one factor, rows ``[y; x]``, of the weighted point deviations plus
the noise factors, and the update is the core's :func:`~twinfer.infer.gaussian.condition` on it: no
covariance is ever formed or refactorised (except for a negative central weight, see
:func:`~twinfer.infer.gaussian.deviation_factor`). With ``redraw`` the points are drawn again from the
predicted Gaussian (as filterpy's ``UnscentedKalmanFilter`` does), which equals :func:`gaussian_filter`
with the unscented linearisation (statistical linear regression).

:func:`ukf_step` and :func:`ukf_scan` take Cholesky factors (``chol_*``), as every square-root function
does; :func:`run_ukf`, the checked entry point for users, takes covariances on purpose (a user states
``P0``, ``Q`` and ``R`` as matrices) and factorises them once at the boundary.

References:
    compositional-inference paper, Alg. 6 and S13-S15; Van der Merwe & Wan (2001), "The square-root
    unscented Kalman filter for state and parameter estimation".

"""

from __future__ import annotations

from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from twinfer._config import ensure
from twinfer.data._checks import first_bad
from twinfer.infer.filters._errors import DivergenceError
from twinfer.infer.filters._gaussian_filter import (
    GaussianFilterOutput,
    GaussianStep,
    Innovation,
    Measurement,
    Transition,
    scan_steps,
)
from twinfer.infer.gaussian import (
    HOUSEHOLDER_MAX,
    UnscentedWeights,
    condition,
    condition_moments,
    deviation_factor,
    noise_factor,
    psd_factor,
    tria,
    update_scalar,
)


def ukf_step(
    f: Transition,
    h: Measurement | Float[ArrayLike, "m n"],
    mean: Float[Array, " n"],
    chol_P: Float[Array, "n n"],
    chol_Q: Float[Array, "n q"],
    chol_R: Float[Array, "m r"] | Float[Array, " m"],
    u: Float[ArrayLike, " n_u"],
    y: Float[Array, " m"],
    mask: Bool[Array, " m"],
    *,
    weights: UnscentedWeights,
    redraw: bool = False,
    innovation: Innovation | None = None,
    kernel: Literal["qr", "gram"] = "qr",
) -> GaussianStep:
    """One predict-update step of the square-root UKF (Alg. 6, S13-S15); pure, so it vmaps over subsystems.

    Args:
        f: transition ``(x, u) -> x_next``.
        h: measurement ``(x, u) -> y``, or a matrix H (m, n) for a linear one (the sigma points' ``y``
            is then ``H`` times theirs, without evaluating a function per point).
        mean: filtered mean at the previous step (n,).
        chol_P: lower Cholesky factor of its covariance (n, n) (the sigma points are the
            covariance-form UKF's).
        chol_Q: factor of the process noise (n, q).
        chol_R: factor of the measurement noise (m, r), or the standard deviations (m,) of independent
            sensors. With a matrix ``h``, independent sensors and a small filter (state plus sensors up to
            ``HOUSEHOLDER_MAX``) the update runs as one exact scalar (Potter) update per sensor on the
            sigma points' factor, which under ``vmap`` over many small filters fuses into a few loops
            (the grid's clusters); a large filter takes the joint update (one QR).
        u: input of this step.
        y: measurement (m,); entries with ``mask`` False are ignored (their value is never read).
        mask: boolean (m,).
        weights: sigma-point weights.
        redraw: redraw sigma points from the predicted Gaussian for the measurement (statistical
            linear regression); default: read ``h`` at the propagated points (Alg. 6).
        innovation: ``(y, y_pred) -> residual``, default ``y - y_pred``; angles pass a wrapped difference
            so that a measured phase near -pi and a prediction near pi differ by a small angle.
        kernel: ``"qr"`` (default) triangularises the joint factor; ``"gram"`` forms the joint covariance
            by matrix products (for a matrix ``h``, its y rows as ``H`` times the points' covariance) and
            conditions with :func:`~twinfer.infer.gaussian.condition_moments`: the same posterior to
            rounding, several times faster for many small filters or one large one, for a joint
            covariance that is positive-definite (``Q`` and ``R`` positive-definite suffice). Needs a
            non-negative central weight and no ``redraw``.

    Returns:
        ``GaussianStep``, the step record every Gaussian filter scans; ``ok`` is False when the posterior
        is non-finite.

    """
    n = mean.shape[0]
    centre = weights.centre_weight(n)
    pts, wm, wc = weights.sigma_points(mean, chol_P)
    xp = jax.vmap(lambda p: f(p, u))(pts)
    _check_shape("f", "f(x, u)", jnp.shape(xp)[1:], mean.shape, "the state")
    x_pred = wm @ xp
    dx = xp - x_pred
    cross = ((pts - mean).T * wc) @ dx
    pred_chol = tria(deviation_factor(dx, wc, centre, chol_Q))
    if kernel == "gram":
        if centre < 0 or redraw:
            raise ValueError(
                f"ukf_step kernel='gram': expected a non-negative central weight and redraw=False; received "
                f"central weight {centre:g}, redraw={redraw}."
            )
        return _gram_update(h, x_pred, pred_chol, cross, deviation_factor(dx, wc, centre), xp, wm, wc, centre,
                            chol_Q, chol_R, u, y, mask, innovation)  # fmt: skip
    if kernel != "qr":
        raise ValueError(f"ukf_step kernel: expected 'qr' or 'gram'; received {kernel!r}.")
    small = n + jnp.shape(y)[0] <= HOUSEHOLDER_MAX  # many small filters: per-sensor updates fuse
    if small and not callable(h) and jnp.ndim(chol_R) == 1 and centre >= 0:
        post = _sequential_linear(
            jnp.asarray(h),
            x_pred,
            deviation_factor(dx, wc, centre),
            chol_Q,
            chol_R,
            y,
            mask,
            redraw,
            innovation,
        )
        return GaussianStep(post[0], post[1], post[2], post[3], x_pred, pred_chol, cross, post[4], post[5])
    if redraw:
        pts_y, _, _ = weights.sigma_points(x_pred, pred_chol)
        dx_y, q_cols = pts_y - x_pred, None
    else:
        pts_y, dx_y, q_cols = xp, dx, chol_Q
    if callable(h):
        yp: Any = jax.vmap(lambda p: h(p, u))(pts_y)
        _check_shape("h", "h(x, u)", jnp.shape(yp)[1:], jnp.shape(y), "one value per measured output")
    else:
        yp = pts_y @ jnp.asarray(h).T
    y_pred = wm @ yp
    m_f = mask.astype(mean.dtype)
    dy = (yp - y_pred) * m_f[None, :]
    n_y = y.shape[0]
    # Joint factor, rows [y; x]: point deviations, then Q on x (not on y: no redraw), R on y, and a unit
    # variance for every unobserved component (the core's masking rule).
    noise = jnp.zeros((n_y + n, 0), mean.dtype)
    if q_cols is not None:
        noise = jnp.concatenate([jnp.zeros((n_y, q_cols.shape[1]), mean.dtype), q_cols], axis=0)
    r_cols = noise_factor(chol_R, mask, square=False)
    noise = jnp.concatenate([noise, jnp.concatenate([r_cols, jnp.zeros((n, r_cols.shape[1]))], axis=0)], 1)
    joint = deviation_factor(jnp.concatenate([dy, dx_y], axis=1), wc, centre, noise)
    y = jnp.where(mask, y, y_pred)
    innov = y - y_pred if innovation is None else innovation(y, y_pred)
    new_mean, new_chol, info = condition(x_pred, joint, innov, mask)
    ok = jnp.all(jnp.isfinite(new_mean)) & jnp.all(jnp.isfinite(new_chol)) & jnp.isfinite(info.loglik)
    return GaussianStep(
        new_mean, new_chol, info.loglik, ok, x_pred, pred_chol, cross, info.nis, info.standardised
    )


def _gram_update(
    h, x_pred, pred_chol, cross, dev, xp, wm, wc, centre, chol_Q, chol_R, u, y, mask, innovation
):
    """The no-redraw update from the joint covariance ``[[S_yy, S_yx], [S_xy, S_xx]]`` (``kernel="gram"``).

    ``dev`` is the propagated points' weighted deviation factor (n, p): their covariance ``P_d = dev
    dev^T``; ``S_xx = P_d + Q``. A matrix ``h`` gives ``S_yx = H P_d`` and ``S_yy = H P_d H^T + R``
    without evaluating ``h`` per point; a function, the deviations of its values at the points. The
    masking rule is :func:`~twinfer.infer.gaussian.noise_factor`'s (observed rows only, unit variance on
    the others).
    """
    m_f = mask.astype(x_pred.dtype)
    p_d = dev @ dev.T
    if callable(h):
        yp: Any = jax.vmap(lambda p: h(p, u))(xp)
        _check_shape("h", "h(x, u)", jnp.shape(yp)[1:], jnp.shape(y), "one value per measured output")
        y_pred = wm @ yp
        dev_y = deviation_factor((yp - y_pred) * m_f[None, :], wc, centre)
        s_yx, s_yy = dev_y @ dev.T, dev_y @ dev_y.T
    else:
        H = jnp.asarray(h) * m_f[:, None]
        y_pred = jnp.asarray(h) @ x_pred
        s_yx = H @ p_d
        s_yy = s_yx @ H.T
    noise = noise_factor(chol_R, mask, square=False)
    s_yy = s_yy + noise @ noise.T
    s_xx = p_d + chol_Q @ chol_Q.T
    y = jnp.where(mask, y, y_pred)
    innov = y - y_pred if innovation is None else innovation(y, y_pred)
    new_mean, new_chol, info = condition_moments(x_pred, s_yy, s_yx.T, s_xx, innov, mask)
    ok = jnp.all(jnp.isfinite(new_mean)) & jnp.all(jnp.isfinite(new_chol)) & jnp.isfinite(info.loglik)
    return GaussianStep(
        new_mean, new_chol, info.loglik, ok, x_pred, pred_chol, cross, info.nis, info.standardised
    )


def _sequential_linear(H, x_pred, points, chol_Q, std_R, y, mask, redraw, innovation) -> tuple[Any, ...]:
    """Update with ``y = H x + v``, independent sensors: one scalar update per row (exact, sequential).

    Without ``redraw`` the measurement sees the propagated points (factor ``points``) and ``Q`` is added
    after the update; with it, the predicted Gaussian ``[points, L_Q]``. The innovation of row i is the
    first one, ``innovation(y, H x_pred)``, corrected linearly for the updates before it.
    """
    factor = jnp.concatenate([points, chol_Q], axis=1) if redraw else points
    y_pred = H @ x_pred
    y = jnp.where(mask, y, y_pred)
    innov = (y - y_pred if innovation is None else innovation(y, y_pred)) * mask.astype(x_pred.dtype)
    sd = jnp.sqrt(jnp.sum((H @ factor) ** 2, axis=1) + std_R**2)  # each output's predicted sd
    standardised = jnp.where(mask & (sd > 0), innov / jnp.where(sd > 0, sd, 1.0), 0.0)
    x, loglik, nis = x_pred, jnp.zeros((), x_pred.dtype), jnp.zeros((), x_pred.dtype)
    for i in range(H.shape[0]):
        v = innov[i] - H[i] @ (x - x_pred)
        x, factor, ll, z2 = update_scalar(x, factor, H[i], v, std_R[i], mask[i], with_nis=True)
        loglik, nis = loglik + ll, nis + z2
    chol = tria(factor if redraw else jnp.concatenate([factor, chol_Q], axis=1))
    ok = jnp.all(jnp.isfinite(x)) & jnp.all(jnp.isfinite(chol)) & jnp.isfinite(loglik)
    return x, chol, loglik, ok, nis, standardised


def _check_shape(name: str, call: str, got: tuple[int, ...], want: tuple[int, ...], what: str) -> None:
    """Trace-time check (static shapes) that ``f`` / ``h`` return what the filter needs."""
    if tuple(got) != tuple(want):
        raise ValueError(
            f"UKF {name}: expected {call} to return shape {tuple(want)} ({what}); received {tuple(got)}."
        )


def ukf_scan(
    f: Transition,
    h: Measurement | Float[ArrayLike, "m n"],
    x0: Float[Array, " n"],
    chol_P0: Float[Array, "n n"],
    chol_Q: Float[Array, "n q"],
    chol_R: Float[Array, "m r"] | Float[Array, " m"],
    us: Float[ArrayLike, "T n_u"],
    ys: Float[Array, "T m"],
    masks: Bool[Array, "T m"] | None = None,
    *,
    weights: UnscentedWeights | None = None,
    redraw: bool = False,
    innovation: Innovation | None = None,
    check: bool = False,
    kernel: Literal["qr", "gram"] = "qr",
) -> GaussianFilterOutput:
    """Run the square-root UKF over T steps (pure, jit- and vmap-able): :func:`ukf_step` scanned over time.

    Step k predicts x_{k+1} from x_k with ``f(x, u_k)`` and updates with ``ys[k] ~ h(x_{k+1}, u_k)``.
    Without ``redraw`` the measurement sigma points are the propagated ones (Alg. 6, the paper code);
    with it they are redrawn from the predicted Gaussian (filterpy's UKF; equals the KF on linear
    models).

    Args:
        f: transition ``(x, u) -> x_next``.
        h: measurement ``(x, u) -> y`` or a matrix (see :func:`ukf_step`).
        x0: initial mean (n,).
        chol_P0: lower Cholesky factor of the initial covariance (n, n).
        chol_Q: factor of the process-noise covariance (n, q).
        chol_R: factor of the measurement-noise covariance (m, r), or the standard deviations (m,) of
            independent sensors (see :func:`ukf_step`).
        us: inputs (T, n_u).
        ys: measurements (T, m); entries with ``masks`` False are ignored (one with ``masks`` True is
            read even if NaN: that step diverges and ``first_bad_step`` names it).
        masks: boolean (T, m), default: observed where ``ys`` is finite (NaN marks a missing value).
        weights: sigma-point weights (default ``UnscentedWeights.merwe()``).
        redraw: redraw sigma points for the measurement.
        innovation: residual function (see :func:`ukf_step`).
        check: raise inside ``jit`` (``eqx.error_if``) if any step diverged; :func:`run_ukf` instead
            raises outside with the step's index and time.
        kernel: the update's kernel (see :func:`ukf_step`): ``"gram"`` is faster for many small
            filters (``twinfer bench filters``) where ``Q`` and ``R`` are positive-definite.

    Returns:
        :class:`FilterOutput` (:class:`GaussianFilterOutput`).

    """
    weights = UnscentedWeights.merwe() if weights is None else weights
    masks = jnp.isfinite(ys) if masks is None else masks
    ys_clean = jnp.where(masks, ys, 0.0)

    def step(mean: Float[Array, " n"], chol_P: Float[Array, "n n"], inp: Any) -> GaussianStep:
        u, y, mask = inp
        return ukf_step(
            f,
            h,
            mean,
            chol_P,
            chol_Q,
            chol_R,
            u,
            y,
            mask,
            weights=weights,
            redraw=redraw,
            innovation=innovation,
            kernel=kernel,
        )

    return scan_steps(step, x0, chol_P0, (us, ys_clean, masks), masks, check=check)


_JITTED_SCAN = eqx.filter_jit(ukf_scan)


def run_ukf(
    f: Transition,
    h: Measurement | Float[ArrayLike, "m n"],
    x0: Float[Array | np.ndarray, " n"],
    cov0: Float[Array | np.ndarray, "n n"],
    q: Float[Array | np.ndarray, "n n"],
    r: Float[Array | np.ndarray, "m m"],
    us: Float[Array | np.ndarray, "T n_u"],
    ys: Float[Array | np.ndarray, "T m"],
    masks: Bool[Array | np.ndarray, "T m"] | None = None,
    *,
    weights: UnscentedWeights | None = None,
    redraw: bool = False,
    innovation: Innovation | None = None,
    times: Float[Array | np.ndarray, " T"] | None = None,
) -> GaussianFilterOutput:
    """:func:`ukf_scan` with boundary checks, jitted, raising if the filter diverges.

    The user-facing UKF: it takes covariances (``cov0``, ``q``, ``r``), not factors, on purpose, since
    that is how a user states them; they are checked (finite, positive semi-definite, float64) and
    factorised once here (a singular but valid ``q``, a fixed parameter's zero noise, is accepted), and
    everything after runs in square-root form on ``chol_*`` factors (:func:`ukf_scan`).

    Missing values: with ``masks=None`` a NaN in ``ys`` marks a missing measurement (masked, as in
    :class:`twinfer.data.Dataset`); with ``masks`` given, observed entries must be finite. An infinite
    measurement is always an error: it is a sensor fault, not a missing value.

    Args:
        f: transition ``(x, u) -> x_next``.
        h: measurement ``(x, u) -> y``, or a matrix (m, n) for a linear one.
        x0: initial mean (n,).
        cov0: initial covariance (n, n).
        q: process-noise covariance (n, n).
        r: measurement-noise covariance (m, m).
        us: inputs (T, n_u).
        ys: measurements (T, m).
        masks: boolean (T, m), or None (NaN in ``ys`` marks a missing value).
        weights: sigma-point weights (default ``UnscentedWeights.merwe()``).
        redraw: redraw sigma points for the measurement (see :func:`ukf_scan`).
        innovation: residual function (see :func:`ukf_step`).
        times: (T,) times of the steps, named in a divergence error.

    Returns:
        :class:`FilterOutput` (:class:`GaussianFilterOutput`).

    Raises:
        ValueError: on wrong shapes (also of what ``f`` and ``h`` return), non-finite inputs, infinite
            measurements or float32 arrays, naming the argument, the expected and the received value.
        DivergenceError: (a ``ValueError``) when a covariance stops being positive semi-definite or the
            state becomes non-finite, naming the first such step (and its time when ``times`` (T,) is
            given).

    """
    ensure("run_ukf")  # its arrays are checked below, each by name
    arrays = {"x0": x0, "cov0": cov0, "q": q, "r": r, "us": us, "ys": ys}
    for name, value in arrays.items():
        kind = np.asarray(value).dtype if not hasattr(value, "dtype") else np.dtype(value.dtype)
        if kind != np.float64:
            hint = " Enable jax_enable_x64" if kind == np.float32 else ""
            raise ValueError(
                f"run_ukf {name}: expected float64; received {kind}.{hint} (convert with "
                "np.asarray(x, dtype=np.float64) only if the lost digits do not matter)."
            )
    x0, cov0, q, r, us, ys = (jnp.asarray(a) for a in arrays.values())
    if x0.ndim != 1:
        raise ValueError(f"run_ukf x0: expected shape (n,); received {x0.shape}.")
    if ys.ndim != 2:
        raise ValueError(f"run_ukf ys: expected shape (T, m); received {ys.shape}.")
    n, m, steps = x0.shape[0], ys.shape[-1], ys.shape[0]
    n_u = us.shape[-1] if us.ndim == 2 else -1
    expected = {"cov0": (n, n), "q": (n, n), "r": (m, m), "us": (steps, n_u)}
    source = {
        "cov0": f"n = {n} is the length of x0",
        "q": f"n = {n} is the length of x0",
        "r": f"m = {m} is the number of columns of ys",
        "us": f"T = {steps} is the number of rows of ys",
    }
    for name, arr in {"cov0": cov0, "q": q, "r": r, "us": us}.items():
        if arr.shape != expected[name]:
            raise ValueError(
                f"run_ukf {name}: expected shape {expected[name]}; received {arr.shape} ({source[name]})."
            )
    for name, arr in {"x0": x0, "cov0": cov0, "q": q, "r": r, "us": us}.items():
        if not bool(jnp.all(jnp.isfinite(arr))):
            raise ValueError(f"run_ukf {name}: expected finite values; received {_first_bad(arr)}.")
    ys_host = np.asarray(ys)
    if masks is None:
        if np.isinf(ys_host).any():
            raise ValueError(
                f"run_ukf ys: expected finite values or NaN (missing); received {_first_bad(ys_host)}."
            )
        masks = jnp.asarray(~np.isnan(ys_host))
    else:
        mask_host = np.asarray(masks)
        if mask_host.dtype != np.bool_ or mask_host.shape != ys.shape:
            raise ValueError(
                f"run_ukf masks: expected a boolean array of shape {ys.shape}; received dtype "
                f"{mask_host.dtype}, shape {mask_host.shape}."
            )
        if not np.isfinite(ys_host[mask_host]).all():
            where = np.where(mask_host, ys_host, 0.0)
            raise ValueError(
                f"run_ukf ys: expected finite values where masks is True; received {_first_bad(where)}."
            )
        masks = jnp.asarray(mask_host)
    if not callable(h) and jnp.shape(h) != (m, n):
        raise ValueError(f"run_ukf h: expected a matrix of shape ({m}, {n}); received shape {jnp.shape(h)}.")
    chol_P0, chol_Q, chol_R = (
        jnp.asarray(psd_factor(v, f"run_ukf {k}")) for k, v in (("cov0", cov0), ("q", q), ("r", r))
    )
    out = _JITTED_SCAN(
        f,
        h,
        x0,
        chol_P0,
        chol_Q,
        chol_R,
        us,
        ys,
        masks,
        weights=weights,
        redraw=redraw,
        innovation=innovation,
    )
    bad = int(out.first_bad_step)
    if bad >= 0:
        when = f" (t = {float(times[bad]):g})" if times is not None else ""
        raise DivergenceError(
            f"UKF diverged at step {bad}{when}: the covariance is no longer positive-definite or the "
            "state is non-finite. Check the model, Q and R, or the initial covariance."
        )
    return out


def _first_bad(arr: Any) -> str:
    """``"<value> at index (i, j)"`` for the first non-finite entry of ``arr``."""
    index, value = first_bad(arr)  # type: ignore[misc]  # called only where a non-finite entry exists
    return f"{value} at index {index}"
