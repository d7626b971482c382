"""Stage 2 of the PINN paper's two-stage Bayesian estimator: NUTS on the parameters given a trained PINN.

Stage 1 trains a PINN with learned parameters (:func:`twinfer.infer.pinn.train`); stage 2 samples the
physical parameters and the force noise sd ``sigma_f`` with NUTS (:func:`twinfer.infer.mcmc.nuts`)
given the network, in one of two forms:

* ``"frozen"`` (the paper's): the states and their derivatives are the network's, fixed; the force
  residual is affine in the parameters (:func:`force_log_posterior`), sampled in log space from
  ``log [stage 1, sigma0]`` with small jitter;
* ``"layer"``: the network's output layer is sampled with the parameters, its hidden layers frozen
  (:func:`layer_log_posterior`: errors in variables, the states' uncertainty in the posterior), NUTS on
  coordinates whitened by a Laplace approximation at the mode (:func:`twinfer.infer.mcmc.laplace_whitening`),
  the chains started at draws of that approximation.

References:
    Haywood-Alexander et al., arXiv:2410.01340 (2024), section 4.3, Eqs. (22)-(24); Hoffman & Gelman,
    JMLR 15 (2014) (NUTS).

"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from twinfer.infer._estimate import Estimate
from twinfer.infer.mcmc import NutsResult, laplace_whitening, nuts
from twinfer.infer.pinn._bayes import affine_force, force_log_posterior, layer_estimate, layer_log_posterior
from twinfer.infer.pinn._network import StateNetwork
from twinfer.models import Chain


class LayerData(NamedTuple):
    """What ``stage2 = "layer"`` conditions on besides the force: the measured states and the record.

    Attributes:
        t_obs: times of the measured states (M,).
        z_obs: measured ``[u, v]`` there (M, 2 n).
        z_scale: their noise sd per channel (2 n,).
        times: the whole record's times (T,), where the states' posterior is reported.

    """

    t_obs: np.ndarray
    z_obs: np.ndarray
    z_scale: np.ndarray
    times: np.ndarray


class TwoStageResult(NamedTuple):
    """Stage 2's draws and the states' posterior.

    Attributes:
        samples: ``exp`` of the sampled log-parameters and ``log sigma_f`` (chains, draws, p + 1).
        fit: the NUTS run (timings, divergences, step counts).
        estimate: the states' and parameters' posterior on the record (``"frozen"``: the network's point
            estimate of the states, their sd NaN).
        n_layer: output-layer weights sampled (0 for ``"frozen"``).
        newton_steps: Newton steps of the Laplace approximation (0 for ``"frozen"``).

    """

    samples: np.ndarray
    fit: NutsResult
    estimate: Estimate
    n_layer: int
    newton_steps: int


def two_stage_posterior(
    key: Any,
    model: Chain,
    net: StateNetwork,
    stage1: Float[np.ndarray, " p"],
    sigma0: float | None,
    names: Sequence[str],
    t_force: Float[np.ndarray, " K"],
    force: Float[np.ndarray, "R K n"],
    priors: Mapping[str, Any],
    sigma_prior: Any,
    *,
    stage2: Literal["frozen", "layer"],
    state_names: Sequence[str],
    record_times: np.ndarray,
    layer: LayerData | None = None,
    chains: int,
    num_warmup: int,
    num_draws: int,
    progress: Callable[[str, float, float], None] | None = None,
) -> TwoStageResult:
    """Sample the parameters and ``sigma_f`` given the stage-1 network ``net`` (module docstring).

    Args:
        key: PRNG key (split into the chains' start and NUTS).
        model: the chain whose physics the force residual writes.
        net: the trained stage-1 network.
        stage1: stage 1's parameter values (p,), in the order of ``names``.
        sigma0: the starting force noise sd; None: the rms of the force residual at ``stage1`` (the
            mean over the records).
        names: the sampled parameters.
        t_force: times of the force points (K,).
        force: the force there, (R, K, n) (R = 1: one mean record).
        priors: per parameter, its prior (:func:`force_log_posterior`).
        sigma_prior: the prior of ``sigma_f``.
        stage2: ``"frozen"`` or ``"layer"``.
        state_names: names of the network's states (2 n).
        record_times: the record's times (T,), for the ``"frozen"`` estimate.
        layer: the measured states, for ``"layer"`` (with ``force`` the mean record, R = 1).
        chains: NUTS chains.
        num_warmup: warm-up steps per chain.
        num_draws: draws per chain.
        progress: ``progress(stage, done, total)``.

    Raises:
        ValueError: for ``"layer"`` without ``layer`` data or with more than one force record.

    """
    z, dz = eqx.filter_jit(lambda nt, ts: nt.batch(ts))(net, jnp.asarray(t_force))
    if sigma0 is None:
        jac, offset = affine_force(model, z, dz, names)
        resid = np.asarray(force).mean(axis=0).ravel() - offset - jac @ stage1
        sigma0 = float(np.sqrt(np.mean(resid**2)))
    key_init, key_nuts = jax.random.split(key)
    phi0 = np.log(np.concatenate([stage1, [sigma0]]))
    n_layer, newton_steps = 0, 0
    whiten = None
    if stage2 == "layer":
        if layer is None or np.shape(force)[0] != 1:
            raise ValueError(
                "two_stage_posterior stage2: 'layer' expects the measured states (layer) and one mean force "
                f"record; received layer={type(layer).__name__}, {np.shape(force)[0]} force records."
            )
        basis = eqx.filter_jit(lambda nt, ts: nt.basis(ts))
        logdensity, shape = layer_log_posterior(
            model, basis(net, jnp.asarray(layer.t_obs)), layer.z_obs, layer.z_scale,
            basis(net, jnp.asarray(t_force)), force[0], names, priors, sigma_prior,
        )  # fmt: skip
        n_layer = shape[0] * shape[1]
        q0 = np.concatenate([np.asarray(net.last_layer()).ravel(), phi0])
        if progress is not None:
            progress("Laplace preconditioning", 0, 1)
        whiten = laplace_whitening(logdensity, q0)
        if progress is not None:
            progress("Laplace preconditioning", 1, 1)
        newton_steps = whiten.newton_steps
        mode, factor = jnp.asarray(whiten.mode), jnp.asarray(whiten.factor)
        target = jax.jit(lambda xi: logdensity(mode + factor @ xi))
        # chains start at draws of the Laplace approximation (dispersed on the posterior's own scale)
        init = np.asarray(jax.random.normal(key_init, (chains, mode.size)))
    else:
        target = jax.jit(force_log_posterior(model, z, dz, force, names, priors, sigma_prior))
        init = phi0 + 0.01 * np.asarray(jax.random.normal(key_init, (chains, phi0.size)))
    fit = nuts(
        key_nuts, target, init, num_warmup=num_warmup, num_samples=num_draws,
        target_acceptance=0.9, chunk=min(500, num_draws), progress=progress,
    )  # fmt: skip
    positions = fit.samples
    if whiten is not None:
        full = whiten.mode + fit.samples @ whiten.factor.T
        positions = full[..., n_layer:]
    samples = np.exp(positions)
    theta_samples = {n: samples[..., i].ravel() for i, n in enumerate(names)}
    if whiten is not None and layer is not None:  # the states' posterior: the sampled output layers
        layers = full[..., :n_layer].reshape(-1, n_layer)
        basis = eqx.filter_jit(lambda nt, ts: nt.basis(ts))
        est = layer_estimate(basis(net, jnp.asarray(layer.times)), layer.times, layers, list(state_names),
                             theta_samples)  # fmt: skip
    else:  # stage 1's states (a point estimate, sd NaN) with the parameters' posterior
        est = net.to_estimate(record_times, list(state_names), theta_samples)
    return TwoStageResult(samples, fit, est, n_layer, newton_steps)


def repeat_noise_sd(repeats: Float[np.ndarray, "R T c"]) -> Float[np.ndarray, " c"]:
    """Per-channel noise standard deviation from the scatter between repeats ``(R, T, channels)``.

    ``sqrt(sum_{r,t} (x_rt - mean_r x_t)^2 / (T (R - 1)))``: unbiased for the variance of white noise of
    a common scale, and needs nothing but the measurements.

    Raises:
        ValueError: when ``repeats`` is not (R >= 2, T, channels).

    """
    x = np.asarray(repeats, dtype=np.float64)
    if x.ndim != 3 or x.shape[0] < 2:
        raise ValueError(f"repeats: expected shape (R >= 2, T, channels); received {x.shape}.")
    dev = x - x.mean(axis=0)
    return np.sqrt(np.sum(dev**2, axis=(0, 1)) / (x.shape[1] * (x.shape[0] - 1)))
