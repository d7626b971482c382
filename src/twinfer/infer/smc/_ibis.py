"""IBIS: sequential Monte Carlo over static parameters, one observation at a time (Chopin 2002).

The clean version of the PN-SMC paper's Algorithm 1 (specs/pn-smc.md 2.5): particles ``z_n`` in the
prior's sampling space, each with its own filter (any per-particle incremental log-likelihood, e.g. the
PN ODE filter or a Kalman filter), vectorised with ``vmap``. At step ``t`` every particle assimilates
``y_t``: ``log w_n += l_t(theta_n)`` (Eq. 21). When ``ESS < ess_threshold * N`` (Eq. 22) the particles
are resampled systematically and moved by independent Metropolis-Hastings from ``N(E, V)``, the
weighted Gaussian fit (Eq. 23-24), each proposal re-running its filter over ``y_1..y_t``; acceptance
uses the full-history likelihood and the proposal ratio (specs 6.7, the correction of Eq. 25):

    alpha = min(1, p(z~) L_t(z~) q(z) / (p(z) L_t(z) q(z~))).

Randomness at a rejuvenation at time ``t`` comes from ``fold_in(key, t)``, so a run checkpointed and
resumed gives the same particles as an uninterrupted one.

References:
    Chopin (2002), "A sequential particle filter method for static models", Biometrika 89(3).
    Longbottom, Champneys & Rogers, Eq. (20)-(25) and Algorithm 1.

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from twinfer._config import ensure
from twinfer.checkpoint import Checkpoint, array_digest, as_checkpoint, digest
from twinfer.infer.filters._particle import check_particles, systematic_resample
from twinfer.infer.smc._moments import normalised_weights
from twinfer.infer.smc._prior import TransformedNormalPrior

Progress = Callable[[str, float, float], None]


class IncrementalLikelihood(Protocol):
    """Per-particle filter interface: ``init(theta) -> carry``; ``step(carry, theta, k) -> (carry, l_k)``.

    ``theta`` is the natural-scale parameter vector, ``k`` the (traced) index of the observation
    assimilated, ``l_k = log p(y_k | y_{<k}, theta)``. Implementations are pytrees (``eqx.Module``)
    holding their data.
    """

    @property
    def n_steps(self) -> int: ...

    def init(self, theta: Float[Array, " p"]) -> Any: ...

    def step(
        self, carry: Any, theta: Float[Array, " p"], k: Int[Array, ""]
    ) -> tuple[Any, Float[Array, ""]]: ...


class IBISState(NamedTuple):
    """Particles ``z`` (sampling space), filter carries, log-weights, cumulative log-likelihoods, time."""

    z: Float[Array, "N p"]
    carry: Any
    log_w: Float[Array, " N"]
    loglik: Float[Array, " N"]
    t: Int[Array, ""]


class IBISResult(NamedTuple):
    """Final particles and the run's diagnostics.

    From :func:`ibis`: ``ess`` after every observation, ``resample_times`` the observation counts at the
    resample-and-move events, ``acceptance`` per event, ``lambdas`` None. From
    :func:`~twinfer.infer.smc.tempering`: ``ess``, ``acceptance`` and ``lambdas`` per stage,
    ``resample_times`` the stage numbers.
    """

    z: Float[np.ndarray, "N p"]
    theta: Float[np.ndarray, "N p"]
    log_w: Float[np.ndarray, " N"]
    loglik: Float[np.ndarray, " N"]
    ess: Float[np.ndarray, " S"]
    resample_times: Int[np.ndarray, " R"]
    acceptance: Float[np.ndarray, " R"]
    lambdas: Float[np.ndarray, " S"] | None = None

    def to_estimate(self, names: Any = None) -> Any:
        """The weighted posterior of the parameters as a one-row :class:`twinfer.infer.Estimate`.

        Means, standard deviations and covariance of ``theta`` under the normalised weights, at time 0
        (a static posterior); every column is a parameter, named by ``names`` (default ``"theta[i]"``);
        ``loglik`` is the weighted mean of the particles' log-likelihoods. ``interval`` is then the
        Gaussian interval of the posterior's first two moments; quantiles of the particles themselves
        are ``theta`` with weights ``exp(log_w)``.

        Raises:
            ValueError: when ``names`` does not name every parameter.

        """
        from twinfer.infer._estimate import Estimate

        theta = np.asarray(self.theta, np.float64)
        w = normalised_weights(self.log_w)
        labels = tuple(f"theta[{i}]" for i in range(theta.shape[1])) if names is None else tuple(names)
        if len(labels) != theta.shape[1]:
            raise ValueError(
                f"IBISResult.to_estimate names: expected {theta.shape[1]} names; received {len(labels)}."
            )
        mean = w @ theta
        dev = theta - mean
        cov = (dev.T * w) @ dev
        return Estimate(
            np.zeros(1),
            mean[None],
            np.sqrt(np.diag(cov))[None],
            cov[None],
            labels,
            parameters=labels,
            loglik=float(w @ np.asarray(self.loglik, np.float64)),
        )


def ess(log_w: Float[Array, " N"]) -> Float[Array, ""]:
    """``(sum w)^2 / sum w^2`` (Eq. 22), from log-weights."""
    w = jnp.exp(log_w - logsumexp(log_w))
    return 1.0 / jnp.sum(w**2)


def uniform_log_weights(n: int) -> Float[Array, " N"]:
    """Equal log-weights ``-log N`` (the prior draws, and every cloud just resampled)."""
    return jnp.full(n, -jnp.log(n))


def sampler_checkpoint(
    checkpoint: Checkpoint | None,
    where: str,
    key: PRNGKeyArray,
    likelihood: IncrementalLikelihood,
    prior: TransformedNormalPrior,
    settings: dict[str, Any],
) -> Checkpoint | None:
    """``checkpoint`` fingerprinted with the sampler's ``settings`` and ``key`` and the problem's arrays.

    A resumed run must match all of them (the caller's parts are already in ``checkpoint``); None: no
    checkpoint.
    """
    ckpt = as_checkpoint(checkpoint, where)
    if ckpt is None:
        return None
    fingerprint = {**settings, "key": np.asarray(jax.random.key_data(key)).tolist()}
    return ckpt.extended(sampler=digest(fingerprint), problem=array_digest(likelihood, prior))


def particles_result(prior: TransformedNormalPrior, state: Any, **diagnostics: Any) -> IBISResult:
    """:class:`IBISResult` of the final cloud ``state`` (``z``, ``log_w``, ``loglik``) and the diagnostics."""
    return IBISResult(
        z=np.asarray(state.z),
        theta=np.asarray(prior.to_natural(state.z)),
        log_w=np.asarray(state.log_w),
        loglik=np.asarray(state.loglik),
        **diagnostics,
    )


def _vstep(
    lik: IncrementalLikelihood, prior: TransformedNormalPrior, carry: Any, z: Any, k: Any
) -> tuple[Any, Any]:
    theta = prior.to_natural(z)
    return jax.vmap(lambda c, th: lik.step(c, th, k))(carry, theta)


def _init_carry(lik: IncrementalLikelihood, prior: TransformedNormalPrior, z: Any) -> Any:
    return jax.vmap(lik.init)(prior.to_natural(z))


@eqx.filter_jit
def _advance(
    lik, prior, state: IBISState, t_stop: Any, threshold: Any, ess_buf: Any
) -> tuple[IBISState, Any]:
    """Assimilate observations until ``t_stop`` or until the ESS falls below ``threshold``."""

    def cond(val):
        st, _ = val
        return (st.t < t_stop) & (ess(st.log_w) >= threshold)

    def body(val):
        st, buf = val
        carry, inc = _vstep(lik, prior, st.carry, st.z, st.t)
        # a particle whose filter diverges gets zero weight; all of them diverging is an error
        inc = jnp.where(jnp.isfinite(inc), inc, -jnp.inf)
        inc = eqx.error_if(
            inc,
            jnp.all(inc == -jnp.inf),
            "IBIS: every particle's log-likelihood increment is non-finite (all filters diverged).",
        )
        log_w = st.log_w + inc
        buf = buf.at[st.t].set(ess(log_w))
        return IBISState(st.z, carry, log_w, st.loglik + inc, st.t + 1), buf

    return jax.lax.while_loop(cond, body, (state, ess_buf))


def _history_loglik(lik, prior, z: Any, t: Any) -> tuple[Any, Any]:
    """Run each particle's filter over ``y_0..y_{t-1}``: final carries and summed log-likelihoods."""

    def body(k, val):
        carry, ll = val
        carry, inc = _vstep(lik, prior, carry, z, k)
        return carry, ll + inc

    return jax.lax.fori_loop(0, t, body, (_init_carry(lik, prior, z), jnp.zeros(z.shape[0])))


def history_loglik(
    likelihood: IncrementalLikelihood, prior: TransformedNormalPrior, theta: Float[ArrayLike, "N p"], t: int
) -> Float[np.ndarray, " N"]:
    """``log p(y_0..y_{t-1} | theta)`` for each row of ``theta`` (natural scale, ``(N, p)``).

    The filter pass of the rejuvenation move, e.g. to compare the likelihood of the final particles with
    that of reference parameter values (a sampler stuck in a local mode shows as a reference value with
    a higher likelihood than every particle).
    """
    z = prior.to_sampling(jnp.asarray(theta, jnp.float64))
    run = eqx.filter_jit(lambda lik, pr, zz: _history_loglik(lik, pr, zz, t)[1])
    return np.asarray(run(likelihood, prior, z))


def _weighted_gaussian(z: Any, log_w: Any, jitter: float) -> tuple[Any, Any]:
    """Weighted mean and Cholesky factor of the weighted covariance (Eq. 23)."""
    w = jnp.exp(log_w - logsumexp(log_w))
    mean = w @ z
    dz = z - mean
    cov = (dz * w[:, None]).T @ dz
    cov = cov + jitter * jnp.diag(jnp.diag(cov) + 1e-12)
    return mean, jnp.linalg.cholesky(cov)


def _mvn_logpdf(z: Any, mean: Any, chol: Any) -> Any:
    r = jax.scipy.linalg.solve_triangular(chol, (z - mean).T, lower=True)
    return (
        -0.5 * jnp.sum(r**2, axis=0)
        - jnp.sum(jnp.log(jnp.diag(chol)))
        - 0.5 * z.shape[-1] * jnp.log(2 * jnp.pi)
    )


@eqx.filter_jit
def _rejuvenate(lik, prior, state: IBISState, key: Any, n_moves: int, jitter: float) -> tuple[IBISState, Any]:
    """Systematic resampling, then ``n_moves`` independent MH moves from the weighted Gaussian fit."""
    n = state.z.shape[0]
    mean, chol = _weighted_gaussian(state.z, state.log_w, jitter)
    key_res, key_moves = jax.random.split(key)
    idx = systematic_resample(key_res, state.log_w)
    z, loglik = state.z[idx], state.loglik[idx]
    carry = jax.tree_util.tree_map(lambda a: a[idx], state.carry)
    accepted = jnp.zeros(())
    for key_m in jax.random.split(key_moves, n_moves):
        k_prop, k_acc = jax.random.split(key_m)
        z_new = mean + jax.random.normal(k_prop, z.shape) @ chol.T  # eq. (24)
        carry_new, ll_new = _history_loglik(lik, prior, z_new, state.t)
        ll_new = jnp.where(jnp.isfinite(ll_new), ll_new, -jnp.inf)
        log_alpha = (
            prior.log_density(z_new)
            + ll_new
            + _mvn_logpdf(z, mean, chol)
            - prior.log_density(z)
            - loglik
            - _mvn_logpdf(z_new, mean, chol)
        )
        accept = jnp.log(jax.random.uniform(k_acc, (n,))) < log_alpha
        z = jnp.where(accept[:, None], z_new, z)
        loglik = jnp.where(accept, ll_new, loglik)
        carry = jax.tree_util.tree_map(lambda a, b, acc=accept: _select(acc, b, a), carry, carry_new)
        accepted = accepted + jnp.mean(accept)
    return IBISState(z, carry, uniform_log_weights(n), loglik, state.t), accepted / n_moves


def _select(mask: Any, new: Any, old: Any) -> Any:
    return jnp.where(mask.reshape((-1,) + (1,) * (old.ndim - 1)), new, old)


def ibis(
    key: PRNGKeyArray,
    likelihood: IncrementalLikelihood,
    prior: TransformedNormalPrior,
    n_particles: int,
    *,
    ess_threshold: float = 0.5,
    n_moves: int = 1,
    jitter: float = 1e-9,
    checkpoint: Checkpoint | None = None,
    checkpoint_every: int = 500,
    stop_at: int | None = None,
    progress: Progress | None = None,
) -> IBISResult:
    """Run IBIS over all ``likelihood.n_steps`` observations.

    Args:
        key: PRNG key (initial draws and every rejuvenation, by time index).
        likelihood: per-particle incremental log-likelihood (:class:`IncrementalLikelihood`).
        prior: prior in sampling space.
        n_particles: number of particles N.
        ess_threshold: resample and move when ESS < ess_threshold * N (specs 6.6: 0.5).
        n_moves: independent MH moves per rejuvenation (specs 6.9: 1 as in the paper).
        jitter: relative diagonal jitter of the proposal covariance.
        checkpoint: where to save the sampler state every ``checkpoint_every`` observations
            (:class:`~twinfer.checkpoint.Checkpoint`; None: no checkpoint). With ``resume`` set and the
            file present, the run continues from it, after checking its fingerprint (the caller's parts
            plus this sampler's settings, key and the likelihood's and prior's arrays), leaf shapes and
            dtypes and progress counters.
        checkpoint_every: observations between checkpoints.
        stop_at: stop after this many observations (to emulate an interruption; the checkpoint is
            written there).
        progress: ``progress(stage, completed, total)`` callback.

    Returns:
        :class:`IBISResult` with the final particles, ESS after every step, the times of the
        resampling events and the acceptance rate of each rejuvenation.

    Raises:
        twinfer.checkpoint.CheckpointError: a checkpoint of another run, corrupt, of other shapes or
            dtypes, with counters beyond the data, or present while ``resume`` is off.

    References:
        Chopin (2002); Longbottom et al., Eq. (20)-(25), Algorithm 1 (corrected per specs 2.5, 6.7).

    """
    ensure("ibis", likelihood=likelihood, prior=prior)
    check_particles("ibis", n_particles, ess_threshold)
    if n_moves < 1 or checkpoint_every < 1:
        raise ValueError(
            f"ibis n_moves, checkpoint_every: expected >= 1; received {n_moves}, {checkpoint_every}."
        )
    total = int(likelihood.n_steps)
    key_init, key_move = jax.random.split(key)
    z0 = prior.sample(key_init, n_particles)
    state = IBISState(
        z=z0,
        carry=_init_carry(likelihood, prior, z0),
        log_w=uniform_log_weights(n_particles),
        loglik=jnp.zeros(n_particles),
        t=jnp.zeros((), jnp.int32),
    )
    ess_buf = jnp.zeros(total)
    resample_times: list[int] = []
    acceptance: list[float] = []
    settings = {
        "n_particles": n_particles,
        "ess_threshold": ess_threshold,
        "n_moves": n_moves,
        "jitter": jitter,
    }
    ckpt = sampler_checkpoint(checkpoint, "ibis", key, likelihood, prior, settings)
    if ckpt is not None and ckpt.begin():
        state, ess_buf, resample_times, acceptance = _restore(ckpt, state, ess_buf, total)
    threshold = ess_threshold * n_particles
    end = total if stop_at is None else min(int(stop_at), total)
    while int(state.t) < end:
        t_now = int(state.t)
        t_stop = min(end, (t_now // checkpoint_every + 1) * checkpoint_every)
        state, ess_buf = _advance(
            likelihood, prior, state, jnp.asarray(t_stop, jnp.int32), threshold, ess_buf
        )
        t_now = int(state.t)
        if float(ess(state.log_w)) < threshold:
            state, rate = _rejuvenate(
                likelihood, prior, state, jax.random.fold_in(key_move, t_now), n_moves, jitter
            )
            resample_times.append(t_now)
            acceptance.append(float(rate))
        if ckpt is not None and (t_now % checkpoint_every == 0 or t_now == end):
            records = {"t": t_now, "resample_times": resample_times, "acceptance": acceptance}
            ckpt.save("ibis", state, records, {"ess": ess_buf})
        if progress is not None:
            progress("IBIS over observations", t_now, total)
    return particles_result(
        prior,
        state,
        ess=np.asarray(ess_buf),
        resample_times=np.asarray(resample_times, dtype=np.int64),
        acceptance=np.asarray(acceptance, dtype=np.float64),
    )


def _restore(ckpt: Checkpoint, template: IBISState, ess_buf: Any, total: int) -> tuple[Any, Any, list, list]:
    """The state, ESS buffer and rejuvenation records of a verified IBIS checkpoint.

    Refuses a checkpoint whose observation count lies outside ``0..total``, disagrees with its state,
    or whose records do not fit it (a finished run of longer data is not a finished posterior here).
    """
    snap = ckpt.load("ibis")
    state = snap.state(template)
    ess_saved = snap.array("ess", ess_buf)
    t = int(state.t)
    times, rates = snap.meta.get("resample_times"), snap.meta.get("acceptance")
    if not (0 <= t <= total) or snap.meta.get("t") != t:
        raise snap.refuse(f"it records {t} observations assimilated; this run's data have {total}.")
    if not isinstance(times, list) or not isinstance(rates, list) or len(times) != len(rates):
        raise snap.refuse("its rejuvenation records are missing or inconsistent.")
    if any(not isinstance(r, int) or not 0 < r <= t for r in times):
        raise snap.refuse(f"its rejuvenation times {times} do not lie in 1..{t}.")
    return state, ess_saved, times, rates
