"""Shared pieces of the PN-SMC cases (boucwen, silverbox, emps): run the sampler and score it.

The particles' test simulations are :func:`twinfer.sim.particle_simulator` (and its feedback variant).

References:
    Longbottom, Champneys & Rogers, Sec. 3-4 and Table 2 (specs/pn-smc.md 2, 4, 5).

"""

from __future__ import annotations

import time
from typing import Any, Literal

import jax
import numpy as np
import pydantic

from twinfer.experiments._case import Progress
from twinfer.experiments._checkpointing import CheckpointSettings, case_checkpoint
from twinfer.infer.pn import PNFilter
from twinfer.infer.smc import (
    IBISResult,
    IncrementalLikelihood,
    TransformedNormalPrior,
    equal_weight_draw,
    ibis,
    tempering,
    weighted_moments,
)
from twinfer.models import AbstractModel


class SMCSettings(CheckpointSettings):
    """Sampler settings shared by the PN-SMC cases (``sampler``: the paper's IBIS or adaptive tempering)."""

    n_particles: int = pydantic.Field(500, ge=8, description="SMC particles.")
    sampler: Literal["ibis", "tempering"] = pydantic.Field(
        "ibis", description="ibis: the paper's Algorithm 1; tempering: adaptive likelihood tempering."
    )
    tempering_moves: int = pydantic.Field(2, ge=1, description="Tempering: MH moves per stage.")
    tempering_ess: float = pydantic.Field(
        0.5, gt=0, lt=1, description="Tempering: conditional ESS of each reweighting, fraction of N."
    )
    tempering_kernel: Literal["independent", "random_walk", "both"] = pydantic.Field(
        "both", description="Tempering: MH kernel (both: alternate independent and random walk)."
    )
    checkpoint_every: int = pydantic.Field(1024, ge=1, description="IBIS: observations between checkpoints.")


def run_smc(
    case: str,
    config: SMCSettings,
    lik: IncrementalLikelihood,
    prior: TransformedNormalPrior,
    progress: Progress,
    name: str = "smc",
) -> tuple[IBISResult, float]:
    """Run the case's sampler, checkpointed to ``checkpoint_dir/<name>.ckpt`` if the config names a folder.

    The checkpoint's fingerprint is the case, its config, the version and (added by the sampler) the
    likelihood's data and the prior; it resumes only with ``resume``. Returns the result and wall time.
    """
    start = time.perf_counter()
    ckpt = case_checkpoint(case, config, name)
    key = jax.random.key(config.seed)
    if config.sampler == "tempering":
        res = tempering(
            key,
            lik,
            prior,
            config.n_particles,
            ess_target=config.tempering_ess,
            n_moves=config.tempering_moves,
            kernel=config.tempering_kernel,
            checkpoint=ckpt,
            progress=progress,
        )
    else:
        res = ibis(
            key,
            lik,
            prior,
            config.n_particles,
            checkpoint=ckpt,
            checkpoint_every=config.checkpoint_every,
            progress=progress,
        )
    return res, time.perf_counter() - start


def sample_posterior(
    case: str,
    config: SMCSettings,
    lik: IncrementalLikelihood,
    prior: TransformedNormalPrior,
    progress: Progress,
    names: tuple[str, ...],
    test_particles: int,
) -> tuple[IBISResult, dict[str, float], np.ndarray]:
    """:func:`run_smc`, its metrics (sampler time, particles, :func:`posterior_metrics`) and test particles.

    Returns the result, the metrics and ``test_particles`` equal-weight draws
    (:func:`equal_weight_particles`).
    """
    res, smc_s = run_smc(case, config, lik, prior, progress)
    metrics: dict[str, float] = {"timing.smc_s": smc_s, "smc.n_particles": float(config.n_particles)}
    metrics.update(posterior_metrics(res, names))
    return res, metrics, equal_weight_particles(res, test_particles, config.seed)


def sampler_note(config: SMCSettings, res: IBISResult, n_obs: int, what: str) -> str:
    """One line of the report notes naming the sampler and its run."""
    if res.lambdas is not None:
        return (
            f"Adaptive tempering with {config.n_particles} particles over all {n_obs} {what} "
            f"({len(res.lambdas)} stages, {config.tempering_moves} {config.tempering_kernel} MH moves per "
            f"stage, conditional ESS target {config.tempering_ess} N)"
        )
    return (
        f"IBIS with {config.n_particles} particles over {n_obs} {what} "
        f"({len(res.resample_times)} resample-and-move events)"
    )


def rmse_per_particle(sims: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``sqrt(mean_k (y_k - yhat_k(theta_n))^2)`` for each particle (specs 5)."""
    return np.sqrt(np.mean((sims - truth[None, :]) ** 2, axis=1))


def posterior_metrics(res: IBISResult, names: tuple[str, ...]) -> dict[str, float]:
    """Posterior mean and sd of each parameter (final weights), resampling count, mean acceptance."""
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


def rmse_metrics(prefix: str, rmse: np.ndarray) -> dict[str, float]:
    """``{prefix}rmse_min/max/mean`` over particles (unweighted; specs 6.25)."""
    return {
        f"{prefix}rmse_min": float(np.min(rmse)),
        f"{prefix}rmse_max": float(np.max(rmse)),
        f"{prefix}rmse_mean": float(np.mean(rmse)),
    }


def ibis_arrays(res: IBISResult, prior: TransformedNormalPrior) -> dict[str, Any]:
    """Arrays saved in the run folder (posterior, prior, diagnostics) for figures and the netCDF.

    IBIS diagnostics per observation go to ``smc_*``, tempering's per stage to ``tempering_*`` (the
    figures of :func:`twinfer.report.figures.smc.smc_figures`).
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


def make_pn(
    model: AbstractModel, q: int, method: str, measure: Any = None, shared_diffusion: bool = False
) -> PNFilter:
    """The PN filter of a case."""
    return PNFilter(model, q=q, method=method, measure=measure, shared_diffusion=shared_diffusion)


def equal_weight_particles(res: IBISResult, n: int, seed: int) -> np.ndarray:
    """``n`` particles (0: all) drawn by the final weights, so each scored particle has equal weight."""
    return equal_weight_draw(res.theta, res.log_w, n, seed + 3)
