"""An SMC run summarised: the posterior's moments and the sampler's diagnostics as flat metrics, and arrays.

What a run folder keeps of an :class:`~twinfer.infer.smc.IBISResult` (from :func:`~twinfer.infer.smc.ibis`
or :func:`~twinfer.infer.smc.tempering`): each named parameter's posterior mean and sd under the final
weights (:func:`~twinfer.infer.smc.weighted_moments`), the resampling count, the mean acceptance and the
final ESS as numbers; the particles, the prior and the per-observation (or per-stage) diagnostics as
arrays for the figures and the netCDF; in a simulation study, where the true values sit in the posterior.

References:
    Longbottom, Champneys & Rogers (pn-smc paper), Sec. 3-4, Eq. (22)-(23) and Table 2 (specs/pn-smc.md 2,
    4, 5); Chopin (2002), Biometrika 89(3), eq. (2).

"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from twinfer.infer.smc._ibis import IBISResult
from twinfer.infer.smc._moments import weighted_moments, weighted_quantiles
from twinfer.infer.smc._prior import TransformedNormalPrior


def posterior_metrics(res: IBISResult, names: tuple[str, ...]) -> dict[str, float]:
    """Posterior mean and sd of each parameter (final weights), resampling count, mean acceptance, ESS.

    Args:
        res: the sampler's result.
        names: the first ``len(names)`` columns of ``res.theta``, in order.

    Returns:
        ``posterior.<name>.mean`` / ``.sd``, ``smc.resample_count``, ``smc.mean_acceptance`` (0 without a
        move), ``smc.final_ess`` and, after tempering, ``smc.stages``.

    """
    mean, sd = weighted_moments(np.asarray(res.theta)[:, : len(names)], res.log_w)
    out: dict[str, float] = {}
    for i, name in enumerate(names):
        out[f"posterior.{name}.mean"] = float(mean[i])
        out[f"posterior.{name}.sd"] = float(sd[i])
    out["smc.resample_count"] = float(len(res.resample_times))
    out["smc.mean_acceptance"] = float(np.mean(res.acceptance)) if len(res.acceptance) else 0.0
    out["smc.final_ess"] = float(res.ess[-1])
    if res.lambdas is not None:
        out["smc.stages"] = float(len(res.lambdas))
    return out


def posterior_arrays(res: IBISResult, prior: TransformedNormalPrior) -> dict[str, Any]:
    """Arrays of a run folder (posterior, prior, diagnostics) for figures and the netCDF.

    IBIS diagnostics per observation go to ``smc_*``, tempering's per stage to ``tempering_*`` (the
    figures of :func:`twinfer.report.figures.smc.smc_figures`).

    Args:
        res: the sampler's result.
        prior: the prior it sampled from (names, location, scale, log flags).

    Returns:
        ``posterior_theta``, ``posterior_log_w``, ``posterior_names``, ``prior_loc``, ``prior_scale``,
        ``prior_log`` and the diagnostics.

    """
    out: dict[str, Any] = {
        "posterior_theta": res.theta,
        "posterior_log_w": res.log_w,
        "posterior_names": np.array(list(prior.names)),
        "prior_loc": np.asarray(prior.loc),
        "prior_scale": np.asarray(prior.scale),
        "prior_log": np.asarray(prior.log),
    }
    if res.lambdas is not None:
        out.update(tempering_lambdas=res.lambdas, tempering_ess=res.ess, tempering_acceptance=res.acceptance)
    else:
        out.update(smc_ess=res.ess, smc_resample_times=res.resample_times, smc_acceptance=res.acceptance)
    return out


def truth_coverage(
    theta: np.ndarray,
    log_w: np.ndarray,
    names: tuple[str, ...],
    truths: Sequence[float],
    identified: Sequence[str],
) -> dict[str, float]:
    """Where the true values sit in a weighted posterior, per column of ``theta`` (a simulation study).

    Args:
        theta: (N, p) the particles.
        log_w: (N,) their log-weights.
        names: the ``p`` columns' names.
        truths: the ``p`` true values.
        identified: the names that the data identify (scored together and standardised).

    Returns:
        ``posterior.<name>.truth_in_95`` / ``_99`` (central intervals of the weights,
        :func:`~twinfer.infer.smc.weighted_quantiles`), ``posterior.identified_truth_in_95`` / ``_99``
        (every identified column inside) and ``posterior.<name>.z`` = (mean - truth) / sd for each
        identified column (inf for a zero sd).

    """
    out: dict[str, float] = {}
    for level in (95, 99):
        tail = (1.0 - level / 100.0) / 2.0
        lows, highs = weighted_quantiles(theta, log_w, (tail, 1.0 - tail))
        inside = [bool(lo <= t <= hi) for lo, t, hi in zip(lows, truths, highs, strict=True)]
        for name, ok in zip(names, inside, strict=True):
            out[f"posterior.{name}.truth_in_{level}"] = float(ok)
        scored = [ok for name, ok in zip(names, inside, strict=True) if name in identified]
        out[f"posterior.identified_truth_in_{level}"] = float(all(scored))
    means, sds = weighted_moments(theta, log_w)
    for j, (name, truth) in enumerate(zip(names, truths, strict=True)):
        if name in identified:
            mean, sd = float(means[j]), float(sds[j])
            out[f"posterior.{name}.z"] = (mean - truth) / sd if sd > 0 else float("inf")
    return out
