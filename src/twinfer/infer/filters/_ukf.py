"""Unscented Kalman filter over one time scan (Alg. 6, S13-S15 of the compositional-inference paper)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.data._checks import first_bad
from twinfer.infer.filters import _small
from twinfer.infer.filters._errors import DivergenceError, first_not_psd


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

    def weights(self, n: int) -> tuple[Any, Any, float]:
        """``(w_mean, w_cov, c)`` for 2n+1 points with spread sqrt(c)."""
        lam = self.alpha**2 * (n + self.kappa) - n
        c = n + lam
        if c <= 0:
            raise ValueError(f"UnscentedWeights: n + lambda = {c} must be > 0 (n={n}, kappa={self.kappa}).")
        wm = jnp.full(2 * n + 1, 0.5 / c).at[0].set(lam / c)
        wc = wm.at[0].add(1.0 - self.alpha**2 + self.beta)
        return wm, wc, c

    def sigma_points(self, mean: Any, cov: Any) -> tuple[Any, Any, Any]:
        n = mean.shape[0]
        wm, wc, c = self.weights(n)
        chol = _small.cholesky(c * 0.5 * (cov + cov.T))
        pts = jnp.concatenate([mean[None], mean[None] + chol.T, mean[None] - chol.T])
        return pts, wm, wc


_DIVERGED = (
    "filter diverged: a covariance stopped being positive-definite or the state became non-finite "
    "(first_bad_step in the output names the step; run_ukf reports it)."
)


class FilterOutput(NamedTuple):
    """Filtered and one-step predictive moments over t_1..t_T, the log-likelihood, the first bad step.

    ``cross_covs[k]`` is cov(x_k, x_{k+1} | y_1..y_k), the input of the RTS smoother.
    """

    means: Any
    covs: Any
    pred_means: Any
    pred_covs: Any
    cross_covs: Any
    loglik: Any
    first_bad_step: Any
    nis: Any = None
    """Mean normalised innovation squared per observed component (1 for a consistent filter)."""


def _masked_gaussian_loglik(innov: Any, chol_s: Any, mask: Any) -> Any:
    """Log N(innov; 0, S) over the observed components only.

    ``chol_s`` is the Cholesky factor of S with masked rows and columns replaced by the identity and
    ``innov`` is zero there, so masked components add nothing (static shapes, no recompilation).
    """
    z = _small.solve_lower(chol_s, innov)
    n_obs = jnp.sum(mask.astype(innov.dtype))
    return -0.5 * (z @ z) - jnp.sum(jnp.log(jnp.diag(chol_s))) - 0.5 * n_obs * jnp.log(2 * jnp.pi)


class UkfStep(NamedTuple):
    """One UKF step's result: the posterior, the log-likelihood increment, and the smoother's inputs.

    ``nis`` is the normalised innovation squared ``v^T S^{-1} v`` over the observed components.
    """

    mean: Any
    cov: Any
    loglik: Any
    ok: Any
    pred_mean: Any
    pred_cov: Any
    cross_cov: Any
    nis: Any = None


def ukf_step(
    f: Callable[[Any, Any], Any],
    h: Callable[[Any, Any], Any] | Any,
    mean: Any,
    cov: Any,
    q: Any,
    r: Any,
    u: Any,
    y: Any,
    mask: Any,
    *,
    weights: UnscentedWeights,
    redraw: bool = False,
    innovation: Callable[[Any, Any], Any] | None = None,
) -> UkfStep:
    """One predict-update step of the UKF (Alg. 6, S13-S15); pure, so it vmaps over subsystems.

    Args:
        f: transition ``(x, u) -> x_next``.
        h: measurement ``(x, u) -> y``, or a matrix H (m, n) for a linear one: ``P_xy = P H^T`` and
            ``S = H P H^T + R`` in closed form, the moments the sigma points give exactly for a linear map
            (P the points' covariance, with Q only when ``redraw``), without the (n + m)^2 joint product.
        mean: filtered mean at the previous step (n,).
        cov: its covariance (n, n).
        q: process-noise covariance (n, n).
        r: measurement-noise covariance (m, m).
        u: input of this step.
        y: measurement (m,); entries with ``mask`` False are ignored (their value is never read).
        mask: boolean (m,).
        weights: sigma-point weights.
        redraw: redraw sigma points from the predicted Gaussian for the measurement.
        innovation: ``(y, y_pred) -> residual``, default ``y - y_pred``; angles pass a wrapped difference
            so that a measured phase near -pi and a prediction near pi differ by a small angle.

    Returns:
        :class:`UkfStep`; ``ok`` is False when the posterior is non-finite or not positive-definite.

    """
    pts, wm, wc = weights.sigma_points(mean, cov)
    xp = jax.vmap(lambda p: f(p, u))(pts)
    _check_shape("f", "f(x, u)", jnp.shape(xp)[1:], mean.shape, "the state")
    x_pred = wm @ xp
    dx = xp - x_pred
    cross = ((pts - mean).T * wc) @ dx
    if not callable(h):
        h_mat = jnp.asarray(h)
        p_points = (dx.T * wc) @ dx
        p_pred = p_points + q
        p_xy = (p_pred if redraw else p_points) @ h_mat.T  # as the (redrawn or propagated) points give
        return _update(x_pred, p_pred, h_mat @ x_pred, p_xy, h_mat @ p_xy, r, y, mask, cross, innovation)
    if redraw:
        p_pred = (dx.T * wc) @ dx + q
        pts_y, _, _ = weights.sigma_points(x_pred, p_pred)
        dx = pts_y - x_pred
    else:
        pts_y = xp
    yp: Any = jax.vmap(lambda p: h(p, u))(pts_y)
    _check_shape("h", "h(x, u)", jnp.shape(yp)[1:], jnp.shape(y), "one value per measured output")
    y_pred = wm @ yp
    dy = yp - y_pred
    # One weighted product gives cov(x), cov(x, y) and cov(y) together (one batched dot under vmap).
    dz = jnp.concatenate([dx, dy], axis=1)
    joint = (dz.T * wc) @ dz
    n_x = dx.shape[1]
    if not redraw:
        p_pred = joint[:n_x, :n_x] + q
    p_xy, p_yy = joint[:n_x, n_x:], joint[n_x:, n_x:]
    return _update(x_pred, p_pred, y_pred, p_xy, p_yy, r, y, mask, cross, innovation)


def _check_shape(name: str, call: str, got: tuple[int, ...], want: tuple[int, ...], what: str) -> None:
    """Trace-time check (static shapes) that ``f`` / ``h`` return what the filter needs."""
    if tuple(got) != tuple(want):
        raise ValueError(
            f"UKF {name}: expected {call} to return shape {tuple(want)} ({what}); received {tuple(got)}."
        )


def _update(x_pred, p_pred, y_pred, p_xy, p_yy, r, y, mask, cross, innovation) -> UkfStep:
    """The measurement update from the predicted moments (S15), masked components ignored."""
    m = mask.astype(x_pred.dtype)
    p_xy = p_xy * m[None, :]
    s_eff = (p_yy + r) * jnp.outer(m, m) + jnp.diag(1.0 - m)
    chol_s = _small.cholesky(s_eff)
    gain = _small.cho_solve(chol_s, p_xy.T).T
    y = jnp.where(mask, y, y_pred)
    innov = (y - y_pred if innovation is None else innovation(y, y_pred)) * m
    new_mean = x_pred + gain @ innov
    new_cov = p_pred - gain @ p_xy.T  # = P - K S K^T, since K S = P_xy
    new_cov = 0.5 * (new_cov + new_cov.T)
    ll = _masked_gaussian_loglik(innov, chol_s, mask)
    z = _small.solve_lower(chol_s, innov)
    ok = jnp.all(jnp.isfinite(new_mean)) & jnp.all(jnp.diag(new_cov) > 0) & jnp.isfinite(ll)
    return UkfStep(new_mean, new_cov, ll, ok, x_pred, p_pred, cross, z @ z)


def ukf_scan(
    f: Callable[[Any, Any], Any],
    h: Callable[[Any, Any], Any],
    x0: Any,
    cov0: Any,
    q: Any,
    r: Any,
    us: Any,
    ys: Any,
    masks: Any = None,
    *,
    weights: UnscentedWeights | None = None,
    redraw: bool = False,
    innovation: Callable[[Any, Any], Any] | None = None,
    check: bool = False,
) -> FilterOutput:
    """Run the UKF over T steps (pure, jit- and vmap-able): :func:`ukf_step` scanned over time.

    Step k predicts x_{k+1} from x_k with ``f(x, u_k)`` and updates with ``ys[k] ~ h(x_{k+1}, u_k)``.
    Without ``redraw`` the measurement sigma points are the propagated ones (Alg. 6, filterpy); with it
    they are redrawn from the predicted Gaussian (equals the KF on linear models).

    Args:
        f: transition ``(x, u) -> x_next``.
        h: measurement ``(x, u) -> y``.
        x0: initial mean (n,).
        cov0: initial covariance (n, n).
        q: process-noise covariance (n, n).
        r: measurement-noise covariance (m, m).
        us: inputs (T, n_u).
        ys: measurements (T, m); entries with ``masks`` False are ignored.
        masks: boolean (T, m), default: observed where ``ys`` is finite (NaN marks a missing value).
        weights: sigma-point weights (default ``UnscentedWeights.merwe()``).
        redraw: redraw sigma points for the measurement.
        innovation: residual function (see :func:`ukf_step`).
        check: raise inside ``jit`` (``eqx.error_if``) if any step diverged; :func:`run_ukf` instead
            raises outside with the step's index and time.

    Returns:
        :class:`FilterOutput`.

    """
    weights = UnscentedWeights.merwe() if weights is None else weights
    masks = jnp.isfinite(ys) if masks is None else masks
    ys_clean = jnp.where(masks, ys, 0.0)

    def step(carry, inp):
        mean, cov, loglik, bad, k, nis = carry
        u, y, mask = inp
        out = ukf_step(
            f, h, mean, cov, q, r, u, y, mask, weights=weights, redraw=redraw, innovation=innovation
        )
        bad = jnp.where((bad < 0) & ~out.ok, k, bad)
        carry = (out.mean, out.cov, loglik + out.loglik, bad, k + 1, nis + out.nis)
        return carry, (out.mean, out.cov, out.pred_mean, out.pred_cov, out.cross_cov)

    zero = jnp.zeros((), x0.dtype)
    init = (x0, cov0, zero, jnp.array(-1), jnp.array(0), zero)
    (_, _, loglik, bad, _, nis), (means, covs, pm, pc, cc) = jax.lax.scan(step, init, (us, ys_clean, masks))
    if check:
        loglik = eqx.error_if(loglik, bad >= 0, _DIVERGED)
    n_obs = jnp.sum(masks)
    nis = jnp.where(n_obs > 0, nis / jnp.maximum(n_obs, 1), 0.0)
    return FilterOutput(means, covs, pm, pc, cc, loglik, bad, nis)


_JITTED_SCAN = eqx.filter_jit(ukf_scan)


def run_ukf(
    f: Callable[[Any, Any], Any],
    h: Callable[[Any, Any], Any],
    x0: Any,
    cov0: Any,
    q: Any,
    r: Any,
    us: Any,
    ys: Any,
    masks: Any = None,
    *,
    weights: UnscentedWeights | None = None,
    redraw: bool = False,
    innovation: Callable[[Any, Any], Any] | None = None,
    times: Any = None,
) -> FilterOutput:
    """:func:`ukf_scan` with boundary checks, jitted, raising if the filter diverges.

    Missing values: with ``masks=None`` a NaN in ``ys`` marks a missing measurement (masked, as in
    :class:`twinfer.data.Dataset`); with ``masks`` given, observed entries must be finite. An infinite
    measurement is always an error: it is a sensor fault, not a missing value.

    Raises:
        ValueError: on wrong shapes (also of what ``f`` and ``h`` return), non-finite inputs, infinite
            measurements or float32 arrays, naming the argument, the expected and the received value.
        DivergenceError: (a ``ValueError``) when a covariance stops being positive semi-definite or the
            state becomes non-finite, naming the first such step (and its time when ``times`` (T,) is
            given).

    """
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
    out = _JITTED_SCAN(
        f, h, x0, cov0, q, r, us, ys, masks, weights=weights, redraw=redraw, innovation=innovation
    )
    bad = int(out.first_bad_step)
    lost_psd = first_not_psd(out.covs if bad < 0 else out.covs[:bad])
    if lost_psd >= 0:
        bad = lost_psd
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
