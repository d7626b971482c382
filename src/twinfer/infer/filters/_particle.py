"""Bootstrap particle filter with systematic resampling and an ESS threshold (Gordon et al. 1993).

Particles are propagated through the transition plus Gaussian process noise, weighted by the Gaussian
measurement density, and resampled systematically when the effective sample size falls below
``ess_threshold * n_particles``. The log marginal likelihood estimate is the sum over steps of the log
mean incremental weight (unbiased in the likelihood, not the log).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from twinfer.infer.filters._gaussian_filter import Measurement, Transition


class ParticleOutput(NamedTuple):
    """Weighted-particle means (T, n), the log-likelihood estimate, ESS (T,) and resampling flags (T,)."""

    means: Float[Array, "T n"]
    loglik: Float[Array, ""]
    ess: Float[Array, " T"]
    resampled: Bool[Array, " T"]


def systematic_resample(key: PRNGKeyArray, log_weights: Float[Array, " N"]) -> Int[Array, " N"]:
    """Indices of a systematic resample: one uniform offset, N evenly spaced points on the weight CDF."""
    n = log_weights.shape[0]
    weights = jnp.exp(log_weights - logsumexp(log_weights))
    positions = (jax.random.uniform(key) + jnp.arange(n)) / n
    return jnp.clip(jnp.searchsorted(jnp.cumsum(weights), positions), 0, n - 1)


def check_particles(where: str, n_particles: int, ess_threshold: float | None = None) -> None:
    """A particle method's settings: ``n_particles >= 2`` and ``ess_threshold`` (where given) in (0, 1].

    Shared by :func:`particle_filter` and the SMC samplers; the ValueError names ``where`` and the field.
    """
    if n_particles < 2:
        raise ValueError(f"{where} n_particles: expected >= 2; received {n_particles}.")
    if ess_threshold is not None and not 0.0 < ess_threshold <= 1.0:
        raise ValueError(f"{where} ess_threshold: expected in (0, 1]; received {ess_threshold}.")


def particle_filter(
    key: PRNGKeyArray,
    f: Transition,
    h: Measurement,
    x0: Float[Array, " n"],
    cov0: Float[Array, "n n"],
    q: Float[Array, "n n"],
    r: Float[Array, "m m"],
    us: Float[ArrayLike, "T n_u"],
    ys: Float[Array, "T m"],
    *,
    n_particles: int = 1000,
    ess_threshold: float = 0.5,
) -> ParticleOutput:
    """Run the bootstrap particle filter (same time alignment as :func:`ukf_scan`).

    Takes covariances, as :func:`run_ukf` does (sampling noise needs their factors, taken here).

    Args:
        key: PRNG key.
        f: transition ``(x, u) -> x_next`` (noise-free part).
        h: measurement ``(x, u) -> y``.
        x0: initial mean; particles start from N(x0, cov0).
        cov0: initial covariance.
        q: process-noise covariance (added after ``f``).
        r: measurement-noise covariance.
        us: inputs (T, n_u).
        ys: measurements (T, m).
        n_particles: number of particles.
        ess_threshold: resample when ESS < threshold * n_particles (1.0 resamples every step).

    Returns:
        :class:`ParticleOutput`.

    """
    check_particles("particle_filter", n_particles, ess_threshold)
    chol_q, chol_r = jnp.linalg.cholesky(q), jnp.linalg.cholesky(r)
    m = ys.shape[-1]
    log_norm = -jnp.sum(jnp.log(jnp.diag(chol_r))) - 0.5 * m * jnp.log(2 * jnp.pi)
    key, k0 = jax.random.split(key)
    particles = x0 + jax.random.normal(k0, (n_particles, x0.shape[0])) @ jnp.linalg.cholesky(cov0).T
    log_w = jnp.full(n_particles, -jnp.log(n_particles))

    def step(carry, inp):
        parts, log_w, key = carry
        u, y = inp
        key, k_res, k_noise = jax.random.split(key, 3)
        ess = 1.0 / jnp.sum(jnp.exp(2 * (log_w - logsumexp(log_w))))
        resample = ess < ess_threshold * n_particles
        idx = systematic_resample(k_res, log_w)
        parts = jnp.where(resample, parts[idx], parts)
        log_w = jnp.where(resample, -jnp.log(n_particles), log_w - logsumexp(log_w))
        noise = jax.random.normal(k_noise, parts.shape) @ chol_q.T
        parts = jax.vmap(lambda p: f(p, u))(parts) + noise
        resid = jax.vmap(lambda p: y - h(p, u))(parts)
        z = jax.scipy.linalg.solve_triangular(chol_r, resid.T, lower=True)
        log_lik = log_norm - 0.5 * jnp.sum(z**2, axis=0)
        increment = logsumexp(log_w + log_lik)
        log_w = log_w + log_lik
        weights = jnp.exp(log_w - logsumexp(log_w))
        return (parts, log_w, key), (weights @ parts, increment, ess, resample)

    _, (means, incs, ess, flags) = jax.lax.scan(step, (particles, log_w, key), (us, ys))
    return ParticleOutput(means=means, loglik=jnp.sum(incs), ess=ess, resampled=flags)
