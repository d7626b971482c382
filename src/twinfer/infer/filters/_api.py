"""High-level entry points: ``filter(model, dataset, ...)`` and ``smooth(...)`` with named results.

A continuous-time model goes through :func:`twinfer.sim.discretise`; unknown parameters are appended to
the state as random walks (:func:`augment`); the scan runs once, jitted; results come back as named state
and parameter trajectories with standard deviations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from twinfer.data import Dataset
from twinfer.infer.filters._augment import augment
from twinfer.infer.filters._gaussian_filter import gaussian_filter, taylor, unscented
from twinfer.infer.filters._smoother import rts_smooth
from twinfer.infer.filters._ukf import FilterOutput, UnscentedWeights, run_ukf
from twinfer.models import AbstractModel
from twinfer.sim import discretise

METHODS = ("ukf", "ukf-sqrt", "ekf")


class EstimateResult(NamedTuple):
    """Estimates over the dataset's times t_0..t_N (row 0 is the prior at t_0).

    Attributes:
        times: (N+1,) times.
        means: (N+1, n) state means (base states, then unknown parameters).
        stds: (N+1, n) marginal standard deviations.
        covs: (N+1, n, n) covariances.
        state_names: names of the columns.
        params: ``{name: (mean (N+1,), sd (N+1,))}`` for each unknown parameter.
        loglik: log-likelihood of the measurements y_1..y_N under the filter.

    """

    times: Any
    means: Any
    stds: Any
    covs: Any
    state_names: tuple[str, ...]
    params: dict[str, tuple[Any, Any]]
    loglik: float


_JIT_GAUSSIAN = eqx.filter_jit(gaussian_filter)


def _vector(name: str, value: Any, n: int) -> Any:
    arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (n,))
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name}: expected {n} finite values >= 0; received {np.asarray(value)}.")
    return jnp.asarray(arr)


def _run(
    model: AbstractModel,
    data: Dataset,
    *,
    x0: Any,
    state_sd: Any,
    process_sd: Any,
    noise_sd: Any,
    unknown: Mapping[str, tuple[float, float, float]] | None,
    method: str,
    discretisation: str,
    weights: UnscentedWeights | None,
    smooth: bool,
) -> EstimateResult:
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}; received {method!r}.")
    unknown = dict(unknown or {})
    aug = augment(model, list(unknown)) if unknown else model
    n_base = model.n_state
    if data.output_names != model.output_names:
        raise ValueError(
            f"dataset outputs: expected {model.output_names} (the model's outputs); "
            f"received {data.output_names}."
        )
    x_init = jnp.asarray(np.broadcast_to(np.asarray(x0, dtype=np.float64), (n_base,)))
    if unknown:
        x_init = jnp.concatenate([x_init, jnp.asarray([v[0] for v in unknown.values()])])
    sd0 = jnp.concatenate(
        [_vector("state_sd", state_sd, n_base), jnp.asarray([v[1] for v in unknown.values()])]
    )
    sdq = jnp.concatenate(
        [_vector("process_sd", process_sd, n_base), jnp.asarray([v[2] for v in unknown.values()])]
    )
    sdr = _vector("noise_sd", noise_sd, model.n_output)
    step = discretise(aug, data.dt, discretisation)
    params = aug.params
    us = data.inputs[:-1] if data.inputs is not None else np.zeros((data.n_steps - 1, 0))
    f = lambda x, u: step.transition(0.0, x, u, params)
    h = lambda x, u: aug.output(0.0, x, u, params)
    ys, masks = jnp.asarray(np.nan_to_num(data.observations[1:])), jnp.asarray(data.mask[1:])
    if method == "ukf":
        out = run_ukf(
            f,
            h,
            x_init,
            jnp.diag(sd0**2),
            jnp.diag(sdq**2),
            jnp.diag(sdr**2),
            jnp.asarray(us),
            ys,
            masks,
            weights=weights,
            times=data.times[1:],
        )
    else:
        lin = taylor if method == "ekf" else unscented(weights or UnscentedWeights.merwe())
        sq = _JIT_GAUSSIAN(
            f,
            h,
            x_init,
            jnp.diag(sd0),
            jnp.diag(sdq),
            jnp.diag(sdr),
            jnp.asarray(us),
            ys,
            masks,
            linearisation=lin,
        )
        if int(sq.first_bad_step) >= 0:
            raise ValueError(
                f"{method} diverged at step {int(sq.first_bad_step)} "
                f"(t = {float(data.times[1 + int(sq.first_bad_step)]):g}): non-finite state or covariance."
            )
        gram = lambda c: jnp.einsum("tij,tkj->tik", c, c)
        out = FilterOutput(
            sq.means,
            gram(sq.chols),
            sq.pred_means,
            gram(sq.pred_chols),
            sq.cross_covs,
            sq.loglik,
            sq.first_bad_step,
        )
    cov0 = jnp.diag(sd0**2)
    if smooth:
        sm = rts_smooth(out, x_init, cov0)
        means, covs = sm.means, sm.covs
    else:
        means = jnp.concatenate([x_init[None], out.means])
        covs = jnp.concatenate([cov0[None], out.covs])
    stds = jnp.sqrt(jnp.diagonal(covs, axis1=1, axis2=2))
    named = {name: (means[:, n_base + i], stds[:, n_base + i]) for i, name in enumerate(unknown)}
    return EstimateResult(
        times=data.times,
        means=means,
        stds=stds,
        covs=covs,
        state_names=aug.state_names,
        params=named,
        loglik=float(out.loglik),
    )


def filter(  # noqa: A001  (the name users look for)
    model: AbstractModel,
    data: Dataset,
    *,
    x0: Any = 0.0,
    state_sd: Any = 1.0,
    process_sd: Any = 1e-6,
    noise_sd: Any = 1.0,
    unknown: Mapping[str, tuple[float, float, float]] | None = None,
    method: Literal["ukf", "ukf-sqrt", "ekf"] = "ukf",
    discretisation: str = "rk4",
    weights: UnscentedWeights | None = None,
) -> EstimateResult:
    """Filter a dataset with a model: states (and unknown parameters) with uncertainty at each time.

    Time alignment: row k of the dataset holds the input u_k applied over [t_k, t_{k+1}) and the
    measurement y_k; step k predicts x_{k+1} with u_k and updates with y_{k+1} = h(x_{k+1}, u_k) (the
    compositional-inference paper's convention). y_0 is not used (the prior describes t_0).

    Args:
        model: a continuous-time twinfer model.
        data: a :class:`twinfer.data.Dataset` with uniform times and the model's outputs (masked entries
            are skipped).
        x0: prior mean of the state (scalar broadcast).
        state_sd: prior standard deviation of each state.
        process_sd: per-step process-noise standard deviation of each state.
        noise_sd: measurement-noise standard deviation of each output.
        unknown: ``{name: (initial value, prior sd, random-walk sd per step)}`` of parameters to estimate.
        method: ``"ukf"`` (sigma points, covariance form), ``"ukf-sqrt"`` (square-root statistical linear
            regression) or ``"ekf"`` (square-root, Taylor).
        discretisation: ``"euler"``, ``"heun"``, ``"rk4"`` or ``"exact"`` (:func:`twinfer.sim.discretise`).
        weights: sigma-point weights (default Merwe alpha=1, beta=2, kappa=0).

    Returns:
        :class:`EstimateResult`.

    """
    return _run(
        model,
        data,
        x0=x0,
        state_sd=state_sd,
        process_sd=process_sd,
        noise_sd=noise_sd,
        unknown=unknown,
        method=method,
        discretisation=discretisation,
        weights=weights,
        smooth=False,
    )


def smooth(
    model: AbstractModel,
    data: Dataset,
    *,
    x0: Any = 0.0,
    state_sd: Any = 1.0,
    process_sd: Any = 1e-6,
    noise_sd: Any = 1.0,
    unknown: Mapping[str, tuple[float, float, float]] | None = None,
    method: Literal["ukf", "ukf-sqrt", "ekf"] = "ukf",
    discretisation: str = "rk4",
    weights: UnscentedWeights | None = None,
) -> EstimateResult:
    """As :func:`filter`, followed by the RTS smoother: each estimate uses every measurement."""
    return _run(
        model,
        data,
        x0=x0,
        state_sd=state_sd,
        process_sd=process_sd,
        noise_sd=noise_sd,
        unknown=unknown,
        method=method,
        discretisation=discretisation,
        weights=weights,
        smooth=True,
    )
