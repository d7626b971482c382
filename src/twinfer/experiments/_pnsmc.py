"""Shared pieces of the PN-SMC cases (boucwen, silverbox, emps): the sampler's settings and its run.

The particles' test simulations are :func:`twinfer.sim.particle_simulator` (and its feedback variant),
their scores :func:`twinfer.metrics.rmse_per_particle` and :func:`twinfer.metrics.rmse_summary`, the
posterior's metrics and arrays :func:`twinfer.infer.smc.posterior_metrics` and
:func:`twinfer.infer.smc.posterior_arrays`.

References:
    Longbottom, Champneys & Rogers, Sec. 3-4 and Table 2 (specs/pn-smc.md 2, 4, 5).

"""

from __future__ import annotations

import time
from typing import Literal

import jax
import numpy as np
import pydantic

from twinfer.experiments._case import Progress
from twinfer.experiments._checkpointing import CheckpointSettings, case_checkpoint
from twinfer.infer.smc import (
    IBISResult,
    IncrementalLikelihood,
    TransformedNormalPrior,
    equal_weight_draw,
    ibis,
    posterior_metrics,
    tempering,
)


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
    """:func:`run_smc`, its metrics (sampler time, particles, the posterior's) and test particles.

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


def equal_weight_particles(res: IBISResult, n: int, seed: int) -> np.ndarray:
    """``n`` particles (0: all) drawn by the final weights, so each scored particle has equal weight."""
    return equal_weight_draw(res.theta, res.log_w, n, seed + 3)
