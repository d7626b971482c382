"""NUTS with Stan-style window adaptation (blackjax), several chains, in chunks with progress.

Each chain adapts its own step size and diagonal mass matrix with ``blackjax.window_adaptation``; the chains
are vmapped. Sampling then runs ``chunk`` draws at a time inside one ``jax.lax.scan`` so the caller's
progress callback advances between chunks. The target is any log-density on an unconstrained vector.

References:
    Hoffman & Gelman, "The No-U-Turn Sampler", JMLR 15 (2014); blackjax ``window_adaptation``;
    Haywood-Alexander et al., arXiv:2410.01340, section 4.3 (NUTS for the structural parameters).

"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from twinfer._config import ensure
from twinfer.infer._estimate import Estimate

Progress = Callable[[str, float, float], None]
LogDensity = Callable[[Float[Array, " dim"]], Float[Array, ""]]
"""A log target on an unconstrained vector."""


class NutsResult(NamedTuple):
    """Draws and sampler statistics.

    Attributes:
        samples: (chains, draws, dim) positions after warm-up.
        step_size: (chains,) adapted step sizes.
        acceptance: (chains,) mean acceptance rate of the draws.
        divergences: total divergent transitions after warm-up.
        warmup_s: wall-clock seconds of adaptation (compilation included).
        sample_s: wall-clock seconds of sampling after warm-up (compilation excluded).
        sample_cpu_s: CPU seconds of this process over the same span (wall time inflates on a shared
            machine; CPU time does not).
        steps_mean: mean number of leapfrog steps per draw (the cost of one draw in gradients).

    """

    samples: Float[np.ndarray, "chains draws dim"]
    step_size: Float[np.ndarray, " chains"]
    acceptance: Float[np.ndarray, " chains"]
    divergences: int
    warmup_s: float
    sample_s: float
    sample_cpu_s: float = float("nan")
    steps_mean: float = float("nan")

    def to_estimate(
        self,
        names: Sequence[str] | None = None,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> Estimate:
        """The posterior of the sampled vector as a one-row :class:`~twinfer.infer.Estimate`.

        The draws of every chain are pooled; each column is a parameter with the draws' mean, standard
        deviation and covariance (``np.cov``, ddof 1) at time 0 (a static posterior, as
        :meth:`twinfer.infer.smc.IBISResult.to_estimate` gives). ``transform`` maps the draws from the
        sampler's unconstrained space to the parameters' own, draw by draw (``(S, dim) -> (S, p)``, e.g.
        ``np.exp`` for log-parameters), before the moments are taken, so the moments are those of the
        parameters themselves. ``interval`` is then the Gaussian interval of those two moments; the
        draws' own quantiles are in ``samples``. ``loglik`` is NaN (NUTS evaluates the target only).

        Args:
            names: a name per column (default ``"theta[i]"``).
            transform: the map of the draws (default none: the sampled coordinates).

        Raises:
            ValueError: when ``names`` does not name every column, when ``transform`` does not return
                one row per draw, or when there are fewer than two draws.

        """
        draws = np.asarray(self.samples, np.float64).reshape(-1, np.shape(self.samples)[-1])
        if draws.shape[0] < 2:
            raise ValueError(
                f"NutsResult.to_estimate samples: expected at least 2 draws; received {draws.shape[0]}."
            )
        if transform is not None:
            mapped = np.asarray(transform(draws), np.float64)
            if mapped.ndim != 2 or mapped.shape[0] != draws.shape[0]:
                raise ValueError(
                    f"NutsResult.to_estimate transform: expected ({draws.shape[0]}, p) values (one row per "
                    f"draw); received shape {mapped.shape}."
                )
            draws = mapped
        dim = draws.shape[1]
        labels = tuple(f"theta[{i}]" for i in range(dim)) if names is None else tuple(names)
        if len(labels) != dim:
            raise ValueError(f"NutsResult.to_estimate names: expected {dim} names; received {len(labels)}.")
        cov = np.atleast_2d(np.cov(draws, rowvar=False))
        return Estimate(
            np.zeros(1),
            draws.mean(axis=0)[None],
            np.sqrt(np.diag(cov))[None],
            cov[None],
            labels,
            parameters=labels,
        )


@partial(jax.jit, static_argnums=(0, 1, 2))
def _adapt(
    logdensity: Callable, num_warmup: int, target: float, keys: Any, positions: Any
) -> tuple[Any, Any]:
    warmup = blackjax.window_adaptation(blackjax.nuts, logdensity, target_acceptance_rate=target)

    def one(k: Any, p: Any) -> tuple[Any, Any]:
        (state, params), _ = warmup.run(k, p, num_steps=num_warmup)  # pyright: ignore[reportCallIssue]
        return state, params

    return jax.vmap(one)(keys, positions)


@partial(jax.jit, static_argnums=(0, 1))
def _sample_chunk(logdensity: Callable, chunk: int, keys: Any, states: Any, params: Any) -> tuple[Any, Any]:
    def chain(k: Any, state: Any, p: Any) -> tuple[Any, Any]:
        kernel = blackjax.nuts(logdensity, **p)

        def step(s: Any, kk: Any) -> tuple[Any, Any]:
            s, info = kernel.step(kk, s)
            return s, (s.position, info.acceptance_rate, info.is_divergent, info.num_integration_steps)  # pyright: ignore

        return jax.lax.scan(step, state, jax.random.split(k, chunk))

    return jax.vmap(chain)(keys, states, params)


def nuts(
    key: PRNGKeyArray,
    logdensity: LogDensity,
    initial: Float[ArrayLike, "chains dim"],
    *,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    target_acceptance: float = 0.9,
    chunk: int = 250,
    progress: Progress | None = None,
) -> NutsResult:
    """Run NUTS chains from ``initial`` (chains, dim) after window adaptation.

    Args:
        key: PRNG key.
        logdensity: log target on an unconstrained vector (dim,).
        initial: (chains, dim) starting points; the number of rows is the number of chains.
        num_warmup: adaptation steps per chain.
        num_samples: retained draws per chain.
        target_acceptance: dual-averaging target (the repository uses 0.9).
        chunk: draws per jitted scan between progress reports.
        progress: ``progress(stage, done, total)`` callback.

    Returns:
        :class:`NutsResult`.

    Raises:
        ValueError: for bad sizes or a non-finite log-density at a starting point.

    """
    ensure("nuts", initial=initial)
    init = jnp.asarray(initial, dtype=jnp.float64)
    if init.ndim != 2 or init.shape[0] < 1:
        raise ValueError(f"nuts initial: expected shape (chains, dim); received {init.shape}.")
    for name, value in (("num_warmup", num_warmup), ("num_samples", num_samples), ("chunk", chunk)):
        if int(value) < 1:
            raise ValueError(f"nuts {name}: expected an integer >= 1; received {value!r}.")
    if not 0.0 < target_acceptance < 1.0:
        raise ValueError(f"nuts target_acceptance: expected a value in (0, 1); received {target_acceptance}.")
    start_lp = np.asarray(jax.vmap(logdensity)(init))
    if not np.all(np.isfinite(start_lp)):
        raise ValueError(
            "nuts initial: the log-density is not finite at chain(s) "
            f"{np.flatnonzero(~np.isfinite(start_lp)).tolist()}; start inside the support."
        )
    n_chains = init.shape[0]
    chunk = min(int(chunk), int(num_samples))
    key_warm, key_sample = jax.random.split(key)
    report = progress or (lambda *_: None)
    report("NUTS warm-up", 0, 1)
    t0 = time.perf_counter()
    states, params = _adapt(
        logdensity, num_warmup, target_acceptance, jax.random.split(key_warm, n_chains), init
    )
    jax.block_until_ready(states)
    warmup_s = time.perf_counter() - t0
    report("NUTS warm-up", 1, 1)
    keys0 = jax.random.split(key_sample, n_chains)
    # compile before timing, so sample_s measures sampling only
    compiled = _sample_chunk.lower(logdensity, chunk, keys0, states, params).compile()
    draws, accept, diverg, steps = [], [], [], []
    t1, c1 = time.perf_counter(), time.process_time()
    done = 0
    while done < num_samples:
        key_sample, sub = jax.random.split(key_sample)
        states, (pos, acc, div, n_steps) = compiled(jax.random.split(sub, n_chains), states, params)
        draws.append(np.asarray(pos))
        accept.append(np.asarray(acc))
        diverg.append(np.asarray(div))
        steps.append(np.asarray(n_steps))
        done += chunk
        report("NUTS sampling", min(done, num_samples), num_samples)
    sample_s, sample_cpu_s = time.perf_counter() - t1, time.process_time() - c1
    samples = np.concatenate(draws, axis=1)[:, :num_samples]
    acceptance = np.concatenate(accept, axis=1)[:, :num_samples]
    divergent = np.concatenate(diverg, axis=1)[:, :num_samples]
    return NutsResult(
        samples=samples,
        step_size=np.asarray(params["step_size"]),
        acceptance=acceptance.mean(axis=1),
        divergences=int(divergent.sum()),
        warmup_s=warmup_s,
        sample_s=sample_s,
        sample_cpu_s=sample_cpu_s,
        steps_mean=float(np.concatenate(steps, axis=1)[:, :num_samples].mean()),
    )
