"""Error and calibration metrics: RMSE, MSE, MAE, NRMSE, coverage, Gaussian NLL, fitness, CRPS.

Every function accepts array-likes (NumPy or JAX arrays, lists), computes in float64 NumPy and
returns a Python ``float`` (or a NumPy array for per-variable results). Inputs must have identical
shapes (no broadcasting) and be finite; anything else raises ``ValueError`` naming the argument,
what was expected and what was received, rather than returning NaN.

References:
    specs/compositional-inference.md, section 5 (RMSE, NRMSE, coverage, predictive NLL).
    specs/pinn.md, section 6 (fitness, eq. 25 and the published RMSE/range version).

"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from twinfer.errors import TwinferValueError

_LOG_2PI = math.log(2.0 * math.pi)


# -- validation ----------------------------------------------------------------------------------
def _array(value: Any, name: str, fn: str) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64)
    bad = ~np.isfinite(array)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0]) if array.ndim else ()
        raise ValueError(f"{fn}: expected finite {name}; received {array[index]} at index {index}.")
    return array


def _same_shape(fn: str, **arrays: np.ndarray) -> None:
    (first, a), *rest = arrays.items()
    for name, b in rest:
        if a.shape != b.shape:
            raise ValueError(
                f"{fn}: expected {first} and {name} to have the same shape; "
                f"received {first} {a.shape} and {name} {b.shape}."
            )


def _positive(std: np.ndarray, fn: str) -> None:
    if (std <= 0).any():
        index = tuple(int(i) for i in np.argwhere(std <= 0)[0])
        raise ValueError(f"{fn}: expected std > 0; received {std[index]} at index {index}.")


def _out(value: np.ndarray) -> float | np.ndarray:
    return float(value) if np.ndim(value) == 0 else np.asarray(value)


def _range(truth: np.ndarray, axis: int) -> np.ndarray:
    spread = np.max(truth, axis=axis) - np.min(truth, axis=axis)
    return np.where(spread == 0, 1.0, spread)  # [REPO] rule: a zero range becomes 1.0


# -- point-error metrics -------------------------------------------------------------------------
def _wrap(d: np.ndarray, period: float | None, fn: str) -> np.ndarray:
    """``d`` wrapped to ``[-period/2, period/2)`` (``(d + p/2) mod p - p/2``); unchanged without a period."""
    if period is None:
        return d
    if not (math.isfinite(period) and period > 0):
        raise ValueError(f"{fn}: expected period > 0 (e.g. 2 pi for angles) or None; received {period}.")
    return np.mod(d + 0.5 * period, period) - 0.5 * period


def _errors(estimate: Any, truth: Any, period: float | None, fn: str) -> tuple[np.ndarray, np.ndarray]:
    """``estimate - truth`` (wrapped to ``[-period/2, period/2)`` for angles) and the truth, checked."""
    e, t = _array(estimate, "estimate", fn), _array(truth, "truth", fn)
    _same_shape(fn, estimate=e, truth=t)
    return _wrap(e - t, period, fn), t


def rmse(
    estimate: Any, truth: Any, axis: int | tuple[int, ...] | None = None, *, period: float | None = None
) -> float | np.ndarray:
    """Root-mean-square error ``sqrt(mean((estimate - truth)**2))``.

    Args:
        estimate: estimated values, any shape.
        truth: true values, the same shape.
        axis: axes to average over; None (default) pools all variables and steps before the
            square root (the "aggregated RMSE").
        period: for angles, the error is wrapped to ``[-period/2, period/2)`` first (``2 pi``: a phase
            estimated at ``pi - 0.01`` for a truth at ``-pi + 0.01`` is 0.02 off, not ``2 pi - 0.02``).

    Returns:
        A float when ``axis`` is None, else an array over the remaining axes.

    References:
        specs/compositional-inference.md, section 5 "RMSE".

    """
    err, _ = _errors(estimate, truth, period, "rmse")
    return _out(np.sqrt(np.mean(err**2, axis=axis)))


def mse(
    estimate: Any, truth: Any, axis: int | tuple[int, ...] | None = None, *, period: float | None = None
) -> float | np.ndarray:
    """Mean squared error ``mean((estimate - truth)**2)`` (the square of :func:`rmse`).

    Args:
        estimate: estimated values, any shape.
        truth: true values, the same shape.
        axis: axes the squared errors are averaged over; None (default) pools everything.
        period: for angles, the error is wrapped to ``[-period/2, period/2)`` first (see :func:`rmse`).

    Returns:
        A float when ``axis`` is None, else an array over the remaining axes.

    References:
        Ghorbani & Hackl, SI Fig. S11 (NARX test MSE); specs/compositional-inference.md, Table T17-T18.

    """
    err, _ = _errors(estimate, truth, period, "mse")
    return _out(np.mean(err**2, axis=axis))


def mae(
    estimate: Any, truth: Any, axis: int | tuple[int, ...] | None = None, *, period: float | None = None
) -> float | np.ndarray:
    """Mean absolute error ``mean(|estimate - truth|)``.

    Args:
        estimate: estimated values, any shape.
        truth: true values, the same shape.
        axis: axes the absolute errors are averaged over; None (default) pools everything.
        period: for angles, the error is wrapped to ``[-period/2, period/2)`` first (see :func:`rmse`).

    Returns:
        A float when ``axis`` is None, else an array over the remaining axes.

    References:
        Ghorbani & Hackl, SI Fig. S11 (NARX test MAE); specs/compositional-inference.md, Table T17-T18.

    """
    err, _ = _errors(estimate, truth, period, "mae")
    return _out(np.mean(np.abs(err), axis=axis))


def nrmse(
    estimate: Any, truth: Any, *, per_variable: bool = False, period: float | None = None
) -> float | np.ndarray:
    """Mean over variables of ``RMSE_j / (max_t truth_j - min_t truth_j)``.

    Time is axis 0; every other index is a variable. A variable whose true signal is constant over
    the window gets the denominator 1.0 (the [REPO] rule).

    Args:
        estimate: ``(T,)`` or ``(T, n)`` estimated trajectories.
        truth: true trajectories, the same shape, over the same window.
        per_variable: return the per-variable NRMSEs instead of their mean.
        period: wrap the errors of angles (see :func:`rmse`); the range is the true signal's own.

    Returns:
        The mean NRMSE (float), or an array of per-variable NRMSEs.

    References:
        specs/compositional-inference.md, section 5 "NRMSE" ("Mean NRMSE").

    """
    err, t = _errors(estimate, truth, period, "nrmse")
    if err.ndim == 0 or err.shape[0] == 0:
        raise ValueError(f"nrmse: expected at least one time step on axis 0; received shape {err.shape}.")
    values = np.sqrt(np.mean(err**2, axis=0)) / _range(t, 0)
    return _out(values) if per_variable else float(np.mean(values))


def nrmse_pooled(estimate: Any, truth: Any, *, period: float | None = None) -> float:
    """``RMSE / (max truth - min truth)``, both over every entry: one error and one range for a population.

    The root-mean-square error pools every time step and variable, and the range is the true signal's
    over all of them, as Table S3 of the compositional-inference paper scores a network's phases and
    frequencies (fitted to the table of the ``grid`` case). With ``period`` the errors are
    wrapped differences and the range is that of the truth wrapped to ``[-period/2, period/2)``, the
    phase the authors' code stores. A constant truth gets the denominator 1.0 (the [REPO] rule).

    Args:
        estimate: estimated trajectories, any shape.
        truth: true trajectories, the same shape.
        period: wrap angles (e.g. ``2 pi``), or ``None``.

    References:
        specs/compositional-inference.md, section 5 "NRMSE" and section 7 item 10.

    """
    err, t = _errors(estimate, truth, period, "nrmse_pooled")
    if err.size == 0:
        raise ValueError(f"nrmse_pooled: expected at least one value; received shape {err.shape}.")
    shown = _wrap(t, period, "nrmse_pooled")
    return float(np.sqrt(np.mean(err**2)) / _range(shown.reshape(-1), 0))


def nrmse_population(estimate_trajectory: Any, true_values: Any) -> float:
    """Mean over parameters of ``RMSE_j / (max_j v_j - min_j v_j)``: constants scored on their spread.

    For a population of constant parameters (the natural frequencies of a grid's buses, Table S3), each
    trajectory's RMSE about its true value is divided by the range of the true values over the
    population, not by the value itself (many are 0). A population of equal values gets the
    denominator 1.0 (the [REPO] rule).

    Args:
        estimate_trajectory: ``(T, p)`` estimates of ``p`` parameters over time.
        true_values: ``(p,)`` true values.

    References:
        specs/compositional-inference.md, section 3.5 (grid metrics) and section 5 "NRMSE".

    """
    fn = "nrmse_population"
    e, v = _array(estimate_trajectory, "estimate_trajectory", fn), _array(true_values, "true_values", fn)
    if e.ndim != 2 or v.shape != e.shape[1:]:
        raise ValueError(
            f"{fn}: expected estimate_trajectory (T, p) and true_values (p,); received {e.shape} and "
            f"{v.shape}."
        )
    spread = float(np.max(v) - np.min(v)) if v.size else 0.0
    return float(np.mean(np.sqrt(np.mean((e - v[None, :]) ** 2, axis=0)))) / (spread or 1.0)


def nrmse_constant(estimate_trajectory: Any, true_value: Any) -> float | np.ndarray:
    """``RMSE(estimate_trajectory - true_value) / |true_value|`` for a constant parameter.

    The RMSE runs over axis 0 (time) of the trajectory, so it includes the initial bias and the
    transient of the reported window. A true value of 0 gets the denominator 1.0 (the [REPO] rule).

    Args:
        estimate_trajectory: ``(T,)`` estimates of one parameter, or ``(T, p)`` for ``p`` parameters.
        true_value: a scalar, or ``(p,)`` true values.

    Returns:
        A float for one parameter, an array of ``p`` values otherwise.

    References:
        specs/compositional-inference.md, section 5 "NRMSE" and "Trajectory NRMSE for parameters".

    """
    fn = "nrmse_constant"
    e, v = _array(estimate_trajectory, "estimate_trajectory", fn), _array(true_value, "true_value", fn)
    if e.ndim == 0 or e.shape[1:] != v.shape:
        raise ValueError(
            f"{fn}: expected true_value of shape estimate_trajectory.shape[1:]; received "
            f"estimate_trajectory {e.shape} and true_value {v.shape}."
        )
    denominator = np.where(v == 0, 1.0, np.abs(v))
    return _out(np.sqrt(np.mean((e - v) ** 2, axis=0)) / denominator)


def fitness(
    estimate: Any, truth: Any, axis: int = 0, kind: Literal["range", "eq25"] = "range"
) -> float | np.ndarray:
    """Per-channel fitness in percent.

    * ``kind="range"`` (the formula behind the published tables):
      ``(1 - RMSE_j / (max_t x_j - min_t x_j)) * 100``.
    * ``kind="eq25"`` (the printed eq. 25): ``(1 - ||x_j - x~_j|| / ||x_j - mean(x_j)||) * 100``.

    Args:
        estimate: predictions ``x~``.
        truth: the clean true signal ``x``, the same shape.
        axis: the time axis; every other index is a channel.
        kind: ``"range"`` or ``"eq25"``.

    Returns:
        A float for a single channel, else an array of per-channel fitness values.

    Raises:
        ValueError: for an unknown ``kind`` or a constant true channel (fitness undefined).

    References:
        specs/pinn.md, section 6 (eq. 25 and the RMSE/range version used for Tab. 2 and Tab. 5).

    """
    if kind not in ("range", "eq25"):
        raise ValueError(f"fitness: expected kind 'range' or 'eq25'; received {kind!r}.")
    err, t = _errors(estimate, truth, None, "fitness")
    if kind == "range":
        error = np.sqrt(np.mean(err**2, axis=axis))
        scale = np.max(t, axis=axis) - np.min(t, axis=axis)
    else:
        error = np.sqrt(np.sum(err**2, axis=axis))
        scale = np.sqrt(np.sum((t - np.mean(t, axis=axis, keepdims=True)) ** 2, axis=axis))
    if (scale == 0).any():
        where = tuple(int(i) for i in np.argwhere(np.atleast_1d(scale == 0))[0])
        raise ValueError(
            f"fitness: expected a non-constant true signal in every channel; received a constant "
            f"channel at index {where} (exclude it, e.g. an unforced DOF's zero force)."
        )
    return _out((1.0 - error / scale) * 100.0)


def fitness_by_dof(
    estimate: Mapping[str, Any], truth: Mapping[str, Any], observed: Sequence[int], prefix: str = "fitness"
) -> dict[str, float]:
    """Per-quantity fitness of a chain's response, averaged over DOF groups (the PINN paper's tables).

    For each quantity ``q`` in ``("u", "udot", "uddot")`` (arrays (T, n) in ``estimate`` and ``truth``),
    the per-DOF :func:`fitness` averaged over all, the observed and the unobserved DOFs, and at the first
    and the last DOF.

    Args:
        estimate: the estimated ``u``, ``udot``, ``uddot`` (T, n) each.
        truth: the true ones, the same shapes.
        observed: the observed DOFs, 1-based.
        prefix: the keys' first part.

    Returns:
        ``{prefix}.all_u``, ``.obs_udot``, ``.unobs_uddot`` (only with unobserved DOFs), ``.first_u``,
        ``.last_u``, ... in percent.

    References:
        specs/pinn.md, section 6 (Tables 2 and 5).

    """
    out: dict[str, float] = {}
    n_dof = np.shape(truth["u"])[1]
    obs = [d - 1 for d in observed]
    unobs = [i for i in range(n_dof) if i not in obs]
    for q in ("u", "udot", "uddot"):
        per_dof = np.asarray(fitness(estimate[q], truth[q]))
        out[f"{prefix}.all_{q}"] = float(per_dof.mean())
        out[f"{prefix}.obs_{q}"] = float(per_dof[obs].mean())
        if unobs:
            out[f"{prefix}.unobs_{q}"] = float(per_dof[unobs].mean())
        out[f"{prefix}.first_{q}"] = float(per_dof[0])
        out[f"{prefix}.last_{q}"] = float(per_dof[-1])
    return out


# -- calibration metrics -------------------------------------------------------------------------
def band_z(level: float) -> float:
    """The half-width in standard deviations of a Gaussian's central ``level`` band.

    ``Phi^{-1}((1 + level) / 2)``: 1.959964 at 0.95.

    Raises:
        ValueError: for a level outside (0, 1).

    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"band_z: expected level in (0, 1); received {level}.")
    return NormalDist().inv_cdf((1.0 + level) / 2.0)


def coverage(mean: Any, std: Any, truth: Any, level: float | None = None, *, z: float | None = None) -> float:
    """Fraction of entries with ``|mean - truth| <= z * std``.

    ``z = Phi^{-1}((1 + level) / 2)``: 1.959964 for ``level=0.95`` (the default). Pass ``z``
    directly instead of ``level`` for a fixed multiplier; the papers' "68 %" band is ``z=1.0``.

    Args:
        mean: posterior means, any shape.
        std: posterior marginal standard deviations (> 0), the same shape.
        truth: true values, the same shape.
        level: nominal coverage in (0, 1); default 0.95.
        z: the band half-width in standard deviations (> 0); excludes ``level``.

    Returns:
        The empirical coverage, pooled over all entries.

    References:
        specs/compositional-inference.md, section 5 "Empirical coverage".

    """
    fn = "coverage"
    if level is not None and z is not None:
        raise ValueError(f"{fn}: expected level or z, not both; received level={level}, z={z}.")
    if z is None:
        level = 0.95 if level is None else float(level)
        if not 0.0 < level < 1.0:
            raise ValueError(f"{fn}: expected level in (0, 1); received {level}.")
        z = band_z(level)
    elif not (math.isfinite(z) and z > 0):
        raise ValueError(f"{fn}: expected z > 0; received {z}.")
    m, s, t = _array(mean, "mean", fn), _array(std, "std", fn), _array(truth, "truth", fn)
    _same_shape(fn, mean=m, std=s, truth=t)
    _positive(s, fn)
    return float(np.mean(np.abs(m - t) <= z * s))


def coverage_by_name(
    mean: Any, std: Any, names: Sequence[str], truth: Any, truth_names: Sequence[str], level: float = 0.95
) -> dict[str, float]:
    """Per-column :func:`coverage` of an estimate whose columns are named, against a named truth.

    A column is scored when the truth has its name and its sd is positive at every row (a column the
    estimator holds fixed, zero sd, has no band to score).

    Args:
        mean: the estimate's means (T, n).
        std: their standard deviations (T, n).
        names: the estimate's column names (n).
        truth: the true values (T, m).
        truth_names: the truth's column names (m).
        level: nominal coverage in (0, 1).

    Returns:
        ``{name: coverage}`` in the estimate's column order.

    References:
        specs/compositional-inference.md, section 5 "Empirical coverage".

    """
    m, s, t = np.asarray(mean), np.asarray(std), np.asarray(truth)
    out: dict[str, float] = {}
    for j, name in enumerate(names):
        if name in truth_names and np.all(s[:, j] > 0):
            out[name] = coverage(m[:, j], s[:, j], t[:, list(truth_names).index(name)], level)
    return out


def gaussian_nll_diag(mean: Any, std: Any, truth: Any) -> float:
    """Time-averaged Gaussian NLL with diagonal covariance ``diag(std**2)``.

    ``NLL_k = 0.5 * sum_i [((x_i - mu_i) / std_i)**2 + 2 log std_i + log 2 pi]``, the last axis
    being the state dimension ``d``, averaged over all leading axes (time).

    Args:
        mean: ``(..., d)`` predictive means.
        std: ``(..., d)`` predictive standard deviations (> 0).
        truth: ``(..., d)`` true states.

    Returns:
        The average NLL per step.

    References:
        specs/compositional-inference.md, section 5 "Predictive NLL (time-averaged)".

    """
    fn = "gaussian_nll_diag"
    m, s, t = _array(mean, "mean", fn), _array(std, "std", fn), _array(truth, "truth", fn)
    _same_shape(fn, mean=m, std=s, truth=t)
    _positive(s, fn)
    per_entry = ((t - m) / s) ** 2 + 2.0 * np.log(s) + _LOG_2PI
    return float(np.mean(0.5 * np.sum(np.atleast_1d(per_entry), axis=-1)))


def _cholesky(cov: np.ndarray, k: int, jitter: bool) -> np.ndarray:
    """Cholesky factor of one covariance; with ``jitter``, add 1e-12 I, 1e-11 I, ... (12 tries)."""
    eye = np.eye(cov.shape[-1])
    tries = [0.0] + ([1e-12 * 10.0**i for i in range(12)] if jitter else [])
    for amount in tries:
        try:
            return np.linalg.cholesky(cov + amount * eye)
        except np.linalg.LinAlgError:
            continue
    how = "even with jitter up to 1e-1" if jitter else "(pass jitter=True for the jittered fallback)"
    raise ValueError(
        f"gaussian_nll: expected positive-definite covariances; received a non-PD covariance at "
        f"time index {k} {how}; eigenvalues {np.linalg.eigvalsh(cov)}."
    )


def gaussian_nll(
    mean: Any, cov_or_chol: Any, truth: Any, *, chol: bool = False, jitter: bool = False
) -> float:
    """Time-averaged Gaussian NLL ``mean_k NLL_k`` of the truth under ``N(mu_k, Sigma_k)``.

    ``NLL_k = 0.5 [(x - mu)^T Sigma^{-1} (x - mu) + log det Sigma + d log 2 pi]``.

    Args:
        mean: ``(T, d)`` means (or ``(d,)`` for one step).
        cov_or_chol: ``(T, d, d)`` covariances, or their lower Cholesky factors if ``chol``.
        truth: ``(T, d)`` true states.
        chol: ``cov_or_chol`` holds lower-triangular factors with positive diagonals.
        jitter: if a covariance is not positive definite, retry its Cholesky factorisation with
            ``1e-12 I``, multiplying by 10 up to 12 tries (the [REPO] rule). A covariance that
            factorises as given is never jittered.

    Returns:
        The average NLL per step.

    Raises:
        ValueError: for mismatched shapes, an asymmetric covariance, or a covariance that is not
            positive definite (naming the time index).

    References:
        specs/compositional-inference.md, section 5 "Predictive NLL (time-averaged)".

    """
    fn = "gaussian_nll"
    m, c, t = _array(mean, "mean", fn), _array(cov_or_chol, "cov_or_chol", fn), _array(truth, "truth", fn)
    _same_shape(fn, mean=m, truth=t)
    if m.ndim == 0 or c.shape != (*m.shape, m.shape[-1]):
        raise ValueError(
            f"{fn}: expected cov_or_chol of shape mean.shape + (d,) with mean (T, d) or (d,); "
            f"received mean {m.shape} and cov_or_chol {c.shape}."
        )
    d = m.shape[-1]
    r, c = (t - m).reshape(-1, d), c.reshape(-1, d, d)
    if chol:
        diag = np.diagonal(c, axis1=-2, axis2=-1)
        if (np.triu(c, 1) != 0).any() or (diag <= 0).any():
            k = int(np.argmax((np.triu(c, 1) != 0).any(axis=(1, 2)) | (diag <= 0).any(axis=1)))
            raise ValueError(
                f"{fn}: expected lower-triangular Cholesky factors with positive diagonals "
                f"(chol=True); received {c[k].tolist()} at time index {k}."
            )
        factors = c
    else:
        asym = np.abs(c - np.swapaxes(c, -1, -2)).max(axis=(1, 2))
        scale = np.abs(c).max(axis=(1, 2))
        if (asym > 1e-8 * scale).any():
            k = int(np.argmax(asym > 1e-8 * scale))
            raise ValueError(
                f"{fn}: expected symmetric covariances; received max |S - S^T| = {asym[k]:.3g} "
                f"at time index {k} (did you pass a Cholesky factor? use chol=True)."
            )
        c = 0.5 * (c + np.swapaxes(c, -1, -2))
        try:
            factors = np.linalg.cholesky(c)
        except np.linalg.LinAlgError:
            factors = np.stack([_cholesky(c[k], k, jitter) for k in range(c.shape[0])])
    whitened = np.linalg.solve(factors, r[..., None])[..., 0]
    log_det = 2.0 * np.sum(np.log(np.diagonal(factors, axis1=-2, axis2=-1)), axis=-1)
    return float(np.mean(0.5 * (np.sum(whitened**2, axis=-1) + log_det + d * _LOG_2PI)))


def crps_gaussian(mean: Any, std: Any, truth: Any) -> float:
    """Mean closed-form CRPS of ``N(mean, std**2)`` at ``truth``.

    ``CRPS = std * [w (2 Phi(w) - 1) + 2 phi(w) - 1/sqrt(pi)]`` with ``w = (truth - mean) / std``
    (Gneiting and Raftery 2007, eq. 21), averaged over all entries. Lower is better; same units
    as the data.

    Args:
        mean: predictive means, any shape.
        std: predictive standard deviations (> 0), the same shape.
        truth: observed values, the same shape.

    Returns:
        The mean CRPS.

    References:
        T. Gneiting and A. E. Raftery, "Strictly proper scoring rules, prediction, and
        estimation", JASA 102 (2007), eq. 21.

    """
    fn = "crps_gaussian"
    m, s, t = _array(mean, "mean", fn), _array(std, "std", fn), _array(truth, "truth", fn)
    _same_shape(fn, mean=m, std=s, truth=t)
    _positive(s, fn)
    from scipy.special import ndtr

    w = (t - m) / s
    pdf = np.exp(-0.5 * w**2) / math.sqrt(2.0 * math.pi)
    return float(np.mean(s * (w * (2.0 * ndtr(w) - 1.0) + 2.0 * pdf - 1.0 / math.sqrt(math.pi))))


def crps_samples(samples: Any, truth: Any) -> float:
    """Mean CRPS of the empirical distribution of ``samples`` at ``truth``.

    Energy form ``CRPS = E|X - y| - 0.5 E|X - X'|`` with both expectations over the ``n`` samples
    (``1/n^2`` normalisation, i.e. the exact CRPS of the empirical CDF). ``E|X - X'|`` uses the
    sorted-sample identity ``(2 / n^2) sum_i (2 i - n - 1) x_(i)``, ``O(n log n)``.

    Args:
        samples: ``(n, ...)`` samples on axis 0.
        truth: ``(...)`` observed values (``samples.shape[1:]``).

    Returns:
        The CRPS averaged over all entries of ``truth``.

    References:
        T. Gneiting and A. E. Raftery, JASA 102 (2007), eq. 20.

    """
    fn = "crps_samples"
    x, y = _array(samples, "samples", fn), _array(truth, "truth", fn)
    if x.ndim == 0 or x.shape[0] == 0 or x.shape[1:] != y.shape:
        raise ValueError(
            f"{fn}: expected samples of shape (n,) + truth.shape with n >= 1; received samples "
            f"{x.shape} and truth {y.shape}."
        )
    n = x.shape[0]
    spread_weights = (2.0 * np.arange(1, n + 1) - n - 1).reshape((n,) + (1,) * y.ndim)
    mean_pair_diff = 2.0 / n**2 * np.sum(spread_weights * np.sort(x, axis=0), axis=0)
    return float(np.mean(np.mean(np.abs(x - y), axis=0) - 0.5 * mean_pair_diff))


def loglog_slope(sizes: Any, values: Any) -> float:
    """The least-squares slope of ``log(values)`` against ``log(sizes)``: the exponent p of values ~ n^p.

    Args:
        sizes: (k,) problem sizes, > 0, at least two distinct.
        values: (k,) measured values (run times), > 0.

    Returns:
        The fitted exponent (1 for linear growth, 3 for cubic).

    References:
        specs/compositional-inference.md, section 3.3 (Fig. S4: monolithic ~ n^3, distributed ~ n).

    """
    fn = "loglog_slope"
    n, v = _array(sizes, "sizes", fn), _array(values, "values", fn)
    if n.ndim != 1 or n.shape != v.shape or np.unique(n).size < 2:
        raise ValueError(
            f"{fn}: expected sizes and values of one shape (k,) with two or more distinct sizes; received "
            f"{n.shape} and {v.shape}."
        )
    if np.any(n <= 0) or np.any(v <= 0):
        raise ValueError(f"{fn}: expected sizes and values > 0; received {n.tolist()} and {v.tolist()}.")
    return float(np.polyfit(np.log(n), np.log(v), 1)[0])


def moving_average(values: Any, window: int, axis: int = 0) -> np.ndarray:
    """Centred moving average over ``window`` samples along ``axis``, the ends padded with the edge values.

    Sample i averages ``values[i - window // 2 : i - window // 2 + window]``, the indices outside the
    record replaced by the first or last sample, so the result has the input's shape and a constant
    signal is returned unchanged. For an even window the centre lies half a sample before i.

    Args:
        values: samples, any shape, finite.
        window: samples averaged, >= 1 (1 returns a copy).
        axis: the time axis.

    Returns:
        The smoothed samples (same shape).

    References:
        specs/compositional-inference.md 3.7 "[REPO]" (Table S11: the DC part of the shaft twist is a
        centred 500-sample moving average with edge padding, the twist rate a 200-sample one).

    """
    fn = "moving_average"
    x = _array(values, "values", fn)
    if isinstance(window, bool) or not isinstance(window, int | np.integer) or window < 1:
        raise ValueError(f"{fn}: expected an integer window >= 1; received {window!r}.")
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{fn}: expected an axis of values (shape {x.shape}); received axis {axis}.")
    x = np.moveaxis(x, axis, 0)
    before = int(window) // 2
    pad = [(before, int(window) - 1 - before)] + [(0, 0)] * (x.ndim - 1)
    padded = np.pad(x, pad, mode="edge")
    csum = np.concatenate([np.zeros((1,) + x.shape[1:]), np.cumsum(padded, axis=0)])
    out = (csum[window:] - csum[:-window]) / window
    return np.moveaxis(out, 0, axis)


def rmse_per_particle(simulations: Any, truth: Any) -> np.ndarray:
    """Each particle's RMSE over time, ``sqrt(mean_k (y_k - yhat_k(theta_n))^2)``.

    The score of a parameter posterior by simulation: every particle's simulated record against the
    measured one. A particle whose simulation diverged scores a non-finite RMSE (kept, not raised, so
    that the spread over particles shows it).

    Args:
        simulations: (n_particles, T) each particle's simulated output.
        truth: (T,) the measured output.

    Returns:
        (n_particles,) the RMSEs.

    References:
        Longbottom, Champneys & Rogers (pn-smc paper), Sec. 4 and Table 2 (specs/pn-smc.md 5).

    """
    sims, y = np.asarray(simulations, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    if sims.ndim != 2 or y.shape != sims.shape[1:]:
        raise TwinferValueError(
            f"rmse_per_particle: expected simulations (n_particles, T) and truth (T,); received "
            f"{sims.shape} and {y.shape}."
        )
    return np.sqrt(np.mean((sims - y[None, :]) ** 2, axis=1))


def rmse_summary(prefix: str, rmse_values: Any) -> dict[str, float]:
    """``{prefix}rmse_min``, ``{prefix}rmse_max`` and ``{prefix}rmse_mean`` over particles (unweighted).

    Args:
        prefix: the metric names' prefix (ending in a dot).
        rmse_values: (n_particles,) RMSEs (:func:`rmse_per_particle`).

    Returns:
        The three metrics.

    References:
        specs/pn-smc.md 6.25 (Table 2 prints the minimum, maximum and mean over the particles).

    """
    r = np.asarray(rmse_values, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise TwinferValueError(
            f"rmse_summary: expected a non-empty (n_particles,) array; received {r.shape}."
        )
    return {
        f"{prefix}rmse_min": float(np.min(r)),
        f"{prefix}rmse_max": float(np.max(r)),
        f"{prefix}rmse_mean": float(np.mean(r)),
    }


def first_alarm(raised: Sequence[Mapping[str, Any]], kind: str, name: str, after: float) -> float | None:
    """The time of the first alarm of ``kind`` naming ``name`` at or after ``after`` (None: there is none).

    ``raised`` holds the alarms a live twin raised, each with its ``t``, ``alarm`` (kind) and ``name``
    (:class:`twinfer.live.Twin`).
    """
    times = [e["t"] for e in raised if e["alarm"] == kind and e["name"] == name and e["t"] >= after]
    return min(times) if times else None


def alarm_detection(
    raised: Sequence[Mapping[str, Any]], kind: str, culprit: str, onset: float, window: float
) -> dict[str, float]:
    """A fault's detection scores from the alarms a twin raised on its stream.

    Args:
        raised: the raised alarms (``t``, ``alarm``, ``name``), as :func:`first_alarm` reads them.
        kind: the alarm that should find the fault (``drift``, ``innovation``).
        culprit: what failed (the name the alarm should carry).
        onset: the fault's time [s].
        window: the time recorded after the onset [s]: a missed fault's delay.

    Returns:
        ``onset_s``, ``false_alarms`` (alarms of any kind before the onset), ``detected`` (1 if an alarm
        of ``kind`` named the culprit after the onset) and ``delay_s`` (from the onset to that alarm).

    References:
        Basseville & Nikiforov, "Detection of Abrupt Changes" (1993), sec. 1.4 (mean time between false
        alarms, detection delay).

    """
    hit = first_alarm(raised, kind, culprit, onset)
    return {
        "onset_s": onset,
        "false_alarms": float(sum(e["t"] < onset for e in raised)),
        "detected": float(hit is not None),
        "delay_s": window if hit is None else hit - onset,
    }


def weighted_mae(prediction: Any, truth: Any, weights: Any) -> float:
    """The weighted sum of the per-channel MAEs, ``sum_j w_j mean_k |yhat_kj - y_kj|`` over a trajectory.

    Args:
        prediction: (T, c) the predicted trajectory.
        truth: (T, c) the true one.
        weights: (c,) one weight per channel.

    Returns:
        The loss.

    References:
        Thummerer et al. (model-combination paper), specs 3.5: 0.5 MAE(s_x, s_y) + 0.1 MAE(v_x, v_y).

    """
    return float(np.sum(np.asarray(weights) * np.mean(np.abs(prediction - truth), axis=0)))


def dof_errors(prefix: str, estimate: Any, reference: Any) -> dict[str, float]:
    """Per-DOF displacement and velocity errors of a chain's trajectory against a reference.

    ``estimate`` and ``reference`` are (T, 2n): the n displacements, then the n velocities. Per DOF ``d``
    (1-based), ``{prefix}.disp_rmse_dof<d>``, ``vel_rmse_dof<d>`` and ``disp_median_abs_dof<d>``; over the
    displacements, ``{prefix}.disp_max_norm`` (the largest Euclidean norm of a step's error) and
    ``disp_rmse``.

    References:
        Ghorbani & Hackl, SI section 3.2 and Fig. S1 (the schedules' displacement errors per DOF).

    """
    err = np.asarray(estimate) - np.asarray(reference)
    n = err.shape[1] // 2
    out: dict[str, float] = {}
    for d in range(n):
        out[f"{prefix}.disp_rmse_dof{d + 1}"] = float(np.sqrt(np.mean(err[:, d] ** 2)))
        out[f"{prefix}.vel_rmse_dof{d + 1}"] = float(np.sqrt(np.mean(err[:, n + d] ** 2)))
        out[f"{prefix}.disp_median_abs_dof{d + 1}"] = float(np.median(np.abs(err[:, d])))
    out[f"{prefix}.disp_max_norm"] = float(np.max(np.linalg.norm(err[:, :n], axis=1)))
    out[f"{prefix}.disp_rmse"] = float(np.sqrt(np.mean(err[:, :n] ** 2)))
    return out


def scaling_slopes(
    sizes: Any, run_s: Mapping[str, Any], from_size: float, tail: Sequence[str] = ()
) -> dict[str, float]:
    """Log-log slopes (:func:`loglog_slope`) of each estimator's run time against the problem size.

    ``slope.<label>_run_s`` over the sizes with a finite time, where there are two or more; for the
    labels in ``tail`` also ``slope.from<from_size>.<label>_run_s`` over those of them at least
    ``from_size`` (where the asymptotic growth shows).

    Args:
        sizes: (k,) the problem sizes.
        run_s: per estimator, (k,) run times (NaN where it did not run).
        from_size: the smallest size of the tail fits.
        tail: the estimators whose tail is fitted too.

    Returns:
        The slopes.

    References:
        specs/compositional-inference.md, section 3.3 (Fig. S4); issue #22 (slope from n = 8).

    """
    n = np.asarray(sizes, dtype=np.float64)
    out: dict[str, float] = {}
    for label, values in run_s.items():
        v = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(v)
        if finite.sum() >= 2:
            out[f"slope.{label}_run_s"] = loglog_slope(n[finite], v[finite])
        late = finite & (n >= from_size)
        if label in tail and late.sum() >= 2:
            out[f"slope.from{from_size:g}.{label}_run_s"] = loglog_slope(n[late], v[late])
    return out
