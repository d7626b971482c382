"""Adaptive likelihood tempering: an SMC sampler over the full data, from the prior to the posterior.

The targets are ``pi_lambda(z) ∝ p(z) L(z)^lambda`` with ``0 = lambda_0 < lambda_1 < ... < lambda_S = 1``
and ``L`` the likelihood of all the data (the same per-particle :class:`IncrementalLikelihood` as IBIS,
summed over every observation by the filter pass of IBIS's rejuvenation). Stage ``s``:

1. reweight by the incremental weights ``w_n = L(z_n)^(lambda_s - lambda_{s-1})``, the next ``lambda_s``
   found by bisection so that the conditional ESS (Zhou, Johansen & Aston 2016, Eq. 3.16)
   ``N (sum_n W_n w_n)^2 / sum_n W_n w_n^2`` equals ``ess_target * N`` (or ``lambda_s = 1`` if it stays
   above);
2. systematic resampling;
3. ``n_moves`` Metropolis-Hastings moves that leave ``pi_lambda_s`` invariant, each with a full-data
   filter pass per particle: independent proposals from the weighted Gaussian fit of the reweighted cloud
   (as IBIS's move, with the proposal-density ratio) and/or Gaussian random walks with that covariance
   scaled by ``2.38^2 / d`` (Roberts, Gelman & Gilks 1997).

Unlike IBIS, every target sees the whole data set with a flattened likelihood, so a mode favoured by the
first observations but not by all of them does not capture the cloud: the early ``pi_lambda`` are
wide and hold every mode the prior reaches, and reweighting by the full likelihood moves the mass to the
global one (Del Moral, Doucet & Jasra 2006, Sec. 3.3.2; Jasra et al. 2011).

Randomness at stage ``s`` comes from ``fold_in(key, s)`` and the bisection is deterministic, so a run
checkpointed after any stage and resumed gives the same particles as an uninterrupted one.

References:
    Del Moral, Doucet & Jasra (2006), "Sequential Monte Carlo samplers", JRSS B 68(3), Sec. 3.3.2.
    Jasra, Stephens, Doucet & Tsagaris (2011), "Inference for Lévy-driven stochastic volatility models
    via adaptive sequential Monte Carlo", Scand. J. Stat. 38(1).
    Zhou, Johansen & Aston (2016), "Toward automatic model comparison", JCGS 25(3) (conditional ESS).
    Chopin & Papaspiliopoulos (2020), "An Introduction to Sequential Monte Carlo", Ch. 17 (tempering).

"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from twinfer._config import ensure
from twinfer.checkpoint import Checkpoint
from twinfer.infer.filters._particle import check_particles, systematic_resample
from twinfer.infer.smc._ibis import (
    IBISResult,
    IncrementalLikelihood,
    Progress,
    _history_loglik,
    _mvn_logpdf,
    _weighted_gaussian,
    ess,
    particles_result,
    sampler_checkpoint,
    uniform_log_weights,
)
from twinfer.infer.smc._prior import TransformedNormalPrior

Kernel = Literal["independent", "random_walk", "both"]


class TemperingState(NamedTuple):
    """Particles ``z``, full-data log-likelihoods, log-weights, current ``lambda``, stages done."""

    z: Float[Array, "N p"]
    loglik: Float[Array, " N"]
    log_w: Float[Array, " N"]
    lam: Float[Array, ""]
    stage: Int[Array, ""]


def conditional_ess(log_w: Float[np.ndarray, " N"], loglik: Float[np.ndarray, " N"], delta: float) -> float:
    """``N (sum W w)^2 / sum W w^2`` with ``W`` the normalised weights and ``w = exp(delta * loglik)``.

    Equals the ESS of the incremental weights when the current weights are equal; particles with a
    non-finite log-likelihood get zero incremental weight.
    """
    n = log_w.size
    log_W = log_w - _logsumexp_np(log_w)
    inc = np.where(np.isfinite(loglik), delta * loglik, -np.inf)
    a = _logsumexp_np(log_W + inc)
    b = _logsumexp_np(log_W + 2 * inc)
    return float(n * np.exp(2 * a - b))


def _logsumexp_np(a: np.ndarray) -> float:
    """``log sum exp(a)`` in NumPy (``-inf`` for all ``-inf``)."""
    m = np.max(a)
    if not np.isfinite(m):
        return float(m)
    return float(m + np.log(np.sum(np.exp(a - m))))


def next_lambda(
    log_w: Float[np.ndarray, " N"],
    loglik: Float[np.ndarray, " N"],
    lam: float,
    target: float,
    iters: int = 100,
) -> float:
    """The next temperature by bisection on the conditional ESS (deterministic).

    ``1`` if the conditional ESS of the step to 1 is ``>= target * N``, else the ``lambda' in (lam, 1)``
    where it equals ``target * N``.
    """
    n = log_w.size
    if conditional_ess(log_w, loglik, 1.0 - lam) >= target * n:
        return 1.0
    lo, hi = 0.0, 1.0 - lam
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if conditional_ess(log_w, loglik, mid) >= target * n:
            lo = mid
        else:
            hi = mid
    return lam + lo if lo > 0 else lam + hi


def _finite_full_loglik(lik, prior, z: Any) -> Any:
    """Each particle's log-likelihood of all the data (non-finite values as ``-inf``)."""
    ll = _history_loglik(lik, prior, z, lik.n_steps)[1]
    return jnp.where(jnp.isfinite(ll), ll, -jnp.inf)


_full_loglik = eqx.filter_jit(_finite_full_loglik)


@eqx.filter_jit
def _resample(key: Any, z: Any, loglik: Any, log_w: Any, jitter: float) -> tuple[Any, Any, Any, Any]:
    """Weighted Gaussian fit of the reweighted cloud (PN-SMC paper, Eq. 23), then systematic resampling.

    Returns the resampled ``z`` and ``loglik``, and the fit's mean and Cholesky factor.
    """
    mean, chol = _weighted_gaussian(z, log_w, jitter)
    idx = systematic_resample(key, log_w)
    return z[idx], loglik[idx], mean, chol


@eqx.filter_jit
def _mh_move(
    lik, prior, z: Any, loglik: Any, lam: Any, key: Any, mean: Any, chol: Any, kind: str
) -> tuple[Any, Any, Any]:
    """One MH move per particle leaving ``p(z) L(z)^lam`` invariant; returns ``z``, ``loglik``, rate."""
    k_prop, k_acc = jax.random.split(key)
    eps = jax.random.normal(k_prop, z.shape)
    if kind == "independent":
        z_new = mean + eps @ chol.T
        log_q = _mvn_logpdf(z, mean, chol) - _mvn_logpdf(z_new, mean, chol)
    else:
        z_new = z + (2.38 / np.sqrt(z.shape[1])) * eps @ chol.T
        log_q = jnp.zeros(z.shape[0])
    ll_new = _finite_full_loglik(lik, prior, z_new)
    log_alpha = prior.log_density(z_new) + lam * ll_new - prior.log_density(z) - lam * loglik + log_q
    accept = jnp.log(jax.random.uniform(k_acc, (z.shape[0],))) < log_alpha
    z = jnp.where(accept[:, None], z_new, z)
    return z, jnp.where(accept, ll_new, loglik), jnp.mean(accept)


def tempering(
    key: PRNGKeyArray,
    likelihood: IncrementalLikelihood,
    prior: TransformedNormalPrior,
    n_particles: int,
    *,
    ess_target: float = 0.5,
    n_moves: int = 2,
    kernel: Kernel = "both",
    jitter: float = 1e-9,
    max_stages: int = 500,
    checkpoint: Checkpoint | None = None,
    stop_at: int | None = None,
    progress: Progress | None = None,
) -> IBISResult:
    """Adaptive-tempering SMC from the prior to ``p(z | y_1..y_T)`` with full-data likelihoods.

    Args:
        key: PRNG key (initial draws, and every stage's resampling and moves by stage index).
        likelihood: per-particle incremental log-likelihood (:class:`IncrementalLikelihood`), summed
            over all ``likelihood.n_steps`` observations.
        prior: prior in sampling space.
        n_particles: number of particles N.
        ess_target: conditional ESS of each reweighting, as a fraction of N (Zhou et al. 2016: 0.5).
        n_moves: MH moves per stage, each one full-data filter pass per particle.
        kernel: ``"independent"`` (weighted Gaussian fit, with the proposal ratio), ``"random_walk"``
            (that covariance times ``2.38^2 / d``) or ``"both"`` (alternating, independent first).
        jitter: relative diagonal jitter of the fitted covariance.
        max_stages: error if ``lambda = 1`` is not reached within this many stages.
        checkpoint: where the state is saved after every stage (:class:`~twinfer.checkpoint.Checkpoint`;
            None: none). With ``resume`` set and the file present, the run continues from it after
            checking its fingerprint (the caller's parts plus these settings, the key and the
            likelihood's and prior's arrays), leaf shapes and dtypes and stage records.
        stop_at: stop after this many stages (to emulate an interruption; the checkpoint is written).
        progress: ``progress(stage, completed, total)`` callback, ``completed = lambda``, ``total = 1``.

    Returns:
        :class:`IBISResult` with the final equally weighted particles and their full-data
        log-likelihoods; per stage: ``ess`` (ESS after the reweighting), ``acceptance`` (mean over
        the moves), ``lambdas`` (the temperatures reached); ``resample_times`` are the stage numbers
        1..S (every stage resamples).

    Raises:
        twinfer.checkpoint.CheckpointError: a checkpoint of another run, corrupt, of other shapes or
            dtypes, with inconsistent stage records, or present while ``resume`` is off.

    References:
        Del Moral, Doucet & Jasra (2006), Sec. 3.3.2; Jasra et al. (2011); Zhou, Johansen & Aston
        (2016); Chopin & Papaspiliopoulos (2020), Ch. 17.

    """
    ensure("tempering", likelihood=likelihood, prior=prior)
    check_particles("tempering", n_particles)
    if not 0.0 < ess_target < 1.0:
        raise ValueError(f"tempering ess_target: expected in (0, 1); received {ess_target}.")
    if n_moves < 1 or max_stages < 1:
        raise ValueError(f"tempering n_moves, max_stages: expected >= 1; received {n_moves}, {max_stages}.")
    if kernel not in ("independent", "random_walk", "both"):
        raise ValueError(
            f"tempering kernel: expected 'independent', 'random_walk' or 'both'; received {kernel!r}."
        )
    kinds = ("independent", "random_walk") if kernel == "both" else (kernel,)
    key_init, key_stage = jax.random.split(key)
    z0 = prior.sample(key_init, n_particles)
    template = TemperingState(
        z=z0,
        loglik=jnp.zeros(n_particles),
        log_w=uniform_log_weights(n_particles),
        lam=jnp.zeros(()),
        stage=jnp.zeros((), jnp.int32),
    )
    records: dict[str, list[float]] = {"lambdas": [], "ess": [], "acceptance": []}
    settings = {"n_particles": n_particles, "ess_target": ess_target, "n_moves": n_moves, "kernel": kernel,
                "jitter": jitter}  # fmt: skip
    ckpt = sampler_checkpoint(checkpoint, "tempering", key, likelihood, prior, settings)
    if ckpt is not None and ckpt.begin():
        state, records = _restore(ckpt, template, max_stages)
    else:
        loglik = _full_loglik(likelihood, prior, z0)
        state = template._replace(loglik=loglik)
        _check_finite(np.asarray(loglik))
    end = max_stages if stop_at is None else min(int(stop_at), max_stages)
    while float(state.lam) < 1.0 and int(state.stage) < end:
        stage = int(state.stage) + 1
        lam_prev = float(state.lam)
        loglik_np = np.asarray(state.loglik)
        lam = next_lambda(np.asarray(state.log_w), loglik_np, lam_prev, ess_target)
        inc = jnp.where(jnp.isfinite(state.loglik), (lam - lam_prev) * state.loglik, -jnp.inf)
        log_w = state.log_w + inc
        k_res, k_moves = jax.random.split(jax.random.fold_in(key_stage, stage))
        z, loglik, mean, chol = _resample(k_res, state.z, state.loglik, log_w, jitter)
        rates = []
        for j, k_m in enumerate(jax.random.split(k_moves, n_moves)):
            z, loglik, rate = _mh_move(
                likelihood, prior, z, loglik, jnp.asarray(lam), k_m, mean, chol, kinds[j % len(kinds)]
            )
            rates.append(float(rate))
        records["lambdas"].append(lam)
        records["ess"].append(float(ess(log_w)))
        records["acceptance"].append(float(np.mean(rates)))
        uniform = uniform_log_weights(n_particles)
        state = TemperingState(z, loglik, uniform, jnp.asarray(lam), jnp.asarray(stage, jnp.int32))
        if ckpt is not None:
            ckpt.save("tempering", state, records)
        if progress is not None:
            progress(f"tempering (stage {stage})", lam, 1.0)
    if float(state.lam) < 1.0 and stop_at is None:
        raise RuntimeError(
            f"tempering: lambda reached only {float(state.lam):.3g} after max_stages = {max_stages} stages; "
            "raise max_stages or lower ess_target."
        )
    return particles_result(
        prior,
        state,
        ess=np.asarray(records["ess"], dtype=np.float64),
        resample_times=np.arange(1, len(records["lambdas"]) + 1, dtype=np.int64),
        acceptance=np.asarray(records["acceptance"], dtype=np.float64),
        lambdas=np.asarray(records["lambdas"], dtype=np.float64),
    )


def _check_finite(loglik: np.ndarray) -> None:
    if not np.any(np.isfinite(loglik)):
        raise FloatingPointError(
            "tempering: every particle's full-data log-likelihood is non-finite (all filters diverged)."
        )


def _restore(ckpt: Checkpoint, template: TemperingState, max_stages: int) -> tuple[TemperingState, dict]:
    """State and per-stage records of a verified tempering checkpoint (counters must agree)."""
    snap = ckpt.load("tempering")
    state = snap.state(template)
    stage, lam = int(state.stage), float(state.lam)
    records = {k: snap.meta.get(k) for k in ("lambdas", "ess", "acceptance")}
    if not 0 <= stage <= max_stages or not 0.0 <= lam <= 1.0:
        raise snap.refuse(f"it records stage {stage} at lambda {lam}; expected 0..{max_stages} and 0..1.")
    lists = {k: v for k, v in records.items() if isinstance(v, list) and len(v) == stage}
    if len(lists) != len(records):
        raise snap.refuse(f"its per-stage records do not have {stage} entries (stage {stage}).")
    lams = lists["lambdas"]
    if stage and (lams[-1] != lam or any(b <= a for a, b in zip(lams, lams[1:], strict=False))):
        raise snap.refuse("its temperatures are not increasing up to the saved lambda.")
    return state, lists
