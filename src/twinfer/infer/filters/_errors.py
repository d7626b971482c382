"""Named failures of the estimators: divergence (an error) and an inconsistent filter (a warning).

DESIGN.md, Conventions: a diverging filter gets an error naming what diverged and where; nothing turns
into NaN without a message.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import gammainccinv, gammaincinv

from twinfer.errors import TwinferRuntimeError, TwinferWarning

NIS_WARN = 10.0
"""Mean normalised innovation squared above which :func:`twinfer.infer.filters.run_filter` warns.

A consistent filter gives a mean NIS of 1 per observed component (Bar-Shalom, Li & Kirubarajan,
Estimation with Applications to Tracking and Navigation, Sec. 5.4.2); 10 means the innovations are on
average more than three predicted standard deviations away: the model or the noise levels are wrong.
"""

NIS_LOW = 0.1
"""Mean NIS below which :func:`twinfer.infer.filters.run_filter` warns, given at least :data:`NIS_MIN_COUNT`
observed values: the filter predicts innovations far larger than those measured, so its variances are
far too large (an unstable discretisation whose uncertainty explodes while the data pin the state, or a
noise level far too high). For a consistent filter with 10 observations, a mean below 0.1 has a
probability of about 2e-4 (chi-square with 10 degrees of freedom below 1).
"""

NIS_MIN_COUNT = 10
"""Observed values needed before a low mean NIS is reported (fewer scatter too much)."""

NIS_ALPHA = 1e-4
"""Two-sided false-alarm rate of the chi-square test on the NIS (:func:`nis_band`).

For a consistent linear-Gaussian filter the innovations are independent and each normalised one is
standard normal, so the NIS summed over the ``n`` observed values is chi-square with ``n`` degrees of
freedom (Bar-Shalom, Li & Kirubarajan, Estimation with Applications to Tracking and Navigation, 2001,
Sec. 5.4.2). Its mean per value then lies in :func:`nis_band` but for a fraction 1e-4 of
records: over 6,000 values, in [0.93, 1.07], where the fixed thresholds :data:`NIS_LOW` and
:data:`NIS_WARN` see nothing between 0.1 and 10.
"""

NIS_FACTOR = 1.25
"""How far from 1 a mean NIS must also be (above ``NIS_FACTOR`` or below ``1 / NIS_FACTOR``) before the
chi-square test's verdict is reported: over thousands of values the test alone flags a NIS of 0.93,
whose bands are 4 % too wide, which no one should act on. 1.25 still flags #51's cases: a NIS of 0.74
(a stiffness biased by 5 sd under bands that looked wide) and 2.2 (a building's record read one sample
off, coverage 0.57).
"""

NIS_DIVERGED = 1e8
"""A step whose normalised innovation squared exceeds this (an innovation of 1e4 predicted standard
deviations) has diverged, though finite: the state ran away while its covariance stayed small, or a
measurement is wildly wrong. Judged from the step's log-likelihood, ``-(NIS + log det 2 pi S) / 2``:
below ``-NIS_DIVERGED / 2`` (issue #20: a distributed estimate whose means reached 1e13 raised nothing
while the check saw only non-finite values and lost positive semi-definiteness).
"""

PSD_RTOL = 1e-8
"""A covariance whose smallest eigenvalue is below ``-PSD_RTOL`` times its largest has lost PSD."""


class DivergenceError(TwinferRuntimeError, ValueError):
    """An estimator's state became non-finite or a covariance stopped being positive semi-definite.

    A run-time failure (:class:`~twinfer.errors.TwinferRuntimeError`) that is also a ``ValueError``, as it
    was before the common base: the likely cause is the input (data, noise levels or a step that do not
    fit the model), and callers that catch ``ValueError`` keep catching it.
    """


class FilterConsistencyWarning(TwinferWarning):
    """The filter's innovations are larger or smaller than its own predicted innovation covariance allows."""


class ParameterBoundWarning(TwinferWarning):
    """An estimated parameter's posterior crosses a bound its model declares (a negative stiffness).

    The bounds are the model's :attr:`~twinfer.models.AbstractModel.param_bounds`; the estimate is
    physically impossible, so its prior or the data's information about it needs a look.
    """


def nis_band(n_obs: int, alpha: float = NIS_ALPHA) -> tuple[float, float]:
    """The central ``1 - alpha`` interval of the mean NIS over ``n_obs`` values of a consistent filter.

    ``chi2.ppf(alpha / 2, n) / n`` and ``chi2.isf(alpha / 2, n) / n`` (see :data:`NIS_ALPHA`).
    """
    n = max(int(n_obs), 1)
    # chi2.ppf(p, n) = 2 gammaincinv(n / 2, p), chi2.isf(p, n) = 2 gammainccinv(n / 2, p): scipy.stats'
    # own formulas (bitwise the same), without importing scipy.stats (0.9 s) with twinfer
    return float(2 * gammaincinv(n / 2, alpha / 2) / n), float(2 * gammainccinv(n / 2, alpha / 2) / n)


def inconsistency(nis: float | None, n_obs: int, *, alpha: float | None = None) -> str | None:
    """Which side of the consistency rule a mean NIS falls on: ``"high"``, ``"low"`` or None.

    ``"high"`` above :data:`NIS_WARN`; ``"low"`` below :data:`NIS_LOW` over at least :data:`NIS_MIN_COUNT`
    observed values; None otherwise (or without a NIS). The central filter and the graph estimates warn
    (:class:`FilterConsistencyWarning`) by this one rule. With ``alpha`` (the central filter passes
    :data:`NIS_ALPHA`) also outside :func:`nis_band` over at least :data:`NIS_MIN_COUNT` values (the
    two-sided chi-square test at false-alarm rate ``alpha``) and more than :data:`NIS_FACTOR` from 1.
    """
    if nis is None:
        return None
    if nis > NIS_WARN:
        return "high"
    if n_obs < NIS_MIN_COUNT:
        return None
    if nis < NIS_LOW:
        return "low"
    if alpha is None:
        return None
    low, high = nis_band(n_obs, alpha)
    low, high = min(low, 1.0 / NIS_FACTOR), max(high, NIS_FACTOR)  # significant and large enough to act on
    return "low" if nis < low else "high" if nis > high else None


def first_not_psd(covs: Any) -> int:
    """Index of the first (n, n) matrix of ``covs`` (T, n, n) that is non-finite or not PSD; -1 if none.

    Not PSD: the smallest eigenvalue below ``-PSD_RTOL`` times the largest absolute one (far above the
    rounding of a symmetric eigenvalue solver, ~1e-16 relative).
    """
    c = np.asarray(covs)
    if c.size == 0:
        return -1
    finite = np.isfinite(c).reshape(c.shape[0], -1).all(axis=1)
    bad: np.ndarray = np.logical_not(finite)
    if finite.any():
        eig = np.linalg.eigvalsh(0.5 * (c[finite] + np.swapaxes(c[finite], -1, -2)))
        scale = np.max(np.abs(eig), axis=-1)
        bad[finite] = eig[:, 0] < -PSD_RTOL * scale
    return int(np.argmax(bad)) if bad.any() else -1


def first_runaway(step_logliks: Any) -> int:
    """Index of the first step whose log-likelihood is below ``-NIS_DIVERGED / 2``; -1 if none.

    ``step_logliks`` (T,) are per-step Gaussian log-likelihoods ``-(NIS + log det 2 pi S) / 2``; a NIS of
    :data:`NIS_DIVERGED` outweighs any plausible ``log det`` (1e3 components at 1e20 each add 4.6e4).
    """
    ll = np.asarray(step_logliks)
    bad = ll < -0.5 * NIS_DIVERGED
    return int(np.argmax(bad)) if bad.any() else -1
