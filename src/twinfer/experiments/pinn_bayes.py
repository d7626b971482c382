"""Case ``pinn-bayes``: Bayesian parameter estimation through a frozen PINN and NUTS (paper section 4.3).

A 2-DOF Duffing or Van der Pol chain, forced at every DOF, is measured (u, v and force, SNR 20, 5 noisy
repeats). Stage 1 trains a PINN on the noisy states with the physics loss against the noisy force and
**learns** c, k and kappa/mu with it: the analyst never supplies the true parameters or the clean force
(the fairness fix of specs D13; the repository trains stage 1 with the true values). Stage 2 freezes the
network's hidden layers and samples its output layer with c, k, kappa/mu and sigma_f by NUTS (4 chains,
window adaptation, Laplace-whitened coordinates) under the repository's Gamma priors, on samples stage 1
never fitted (specs D14): the states' uncertainty enters the posterior (errors in variables), which the
paper's frozen states (``stage2 = "frozen"``) leave out. R-hat and ESS come from ArviZ and the posterior
is saved as ``posterior.nc``.

References:
    Haywood-Alexander et al., arXiv:2410.01340, section 4.3, Eq 20-24, Table 6, Figs 13-14.

"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import jax
import numpy as np
import pydantic

from twinfer.errors import TwinferRuntimeError, TwinferValueError
from twinfer.experiments._case import Progress
from twinfer.experiments._checkpointing import case_checkpoint
from twinfer.experiments._pinn_data import (
    PinnTrainConfig,
    register_pinn_case,
    train_settings,
)
from twinfer.infer.mcmc import summarise, to_inference_data, write_netcdf
from twinfer.infer.pinn import (
    LayerData,
    LossWeights,
    PositiveParameters,
    StateNetwork,
    fit_pinn,
    repeat_noise_sd,
    state_losses,
    two_stage_posterior,
)
from twinfer.infer.pinn._posterior_scores import two_stage_scores
from twinfer.infer.pinn._record_problems import force_points, repeats_problem
from twinfer.models import get_param, pinn_chain
from twinfer.report import PaperValue, RunArtifacts, near, within
from twinfer.report.figures.pinn import pairs_figure
from twinfer.sim import add_noise_numpy_legacy, forced_response

PRIORS = {"c": (2.0, 0.75), "k": (2.0, 0.5), "kappa": (3.0, 0.5), "mu": (3.0, 0.5)}  # specs 3.2 (REPO)
SIGMA_PRIOR = (3.0, 0.5)
INITIAL = {"c": 2.0, "k": 10.0, "kappa": 75.0, "mu": 1.0}


class PinnBayesConfig(PinnTrainConfig):
    """Configuration of ``pinn-bayes``."""

    seed: int = pydantic.Field(43810, ge=0, description="Seed of the network and the sampler.")
    system: Literal["duffing", "vdp"] = pydantic.Field("duffing", description="Nonlinearity (Table 6).")
    horizon: float = pydantic.Field(120.0, gt=0, description="Window [s] (repo stage 1: 120; paper: 240).")
    n_samples: int = pydantic.Field(4096, ge=16, description="Samples on the window.")
    snr_db: float = pydantic.Field(20.0, description="Measurement SNR [dB].")
    repeats: int = pydantic.Field(5, ge=2, description="Noisy repeats of the one simulation (>= 2).")
    obs_stride: int = pydantic.Field(4, ge=1, description="Stage-1 and stage-2 points: every n-th sample.")
    max_cycles: float = pydantic.Field(120.0, gt=0, description="Highest feature frequency, cycles/window.")
    n_fourier: int = pydantic.Field(128, ge=0, description="Fourier input features.")
    anchor_rest: bool = pydantic.Field(False, description="Unused here: the states are observed.")
    num_warmup: int = pydantic.Field(1000, ge=1, description="NUTS adaptation steps per chain.")
    num_draws: int = pydantic.Field(2000, ge=1, description="NUTS draws per chain after warm-up.")
    chains: int = pydantic.Field(4, ge=2, description="NUTS chains (>= 2 for R-hat, specs D16).")
    epochs: int = pydantic.Field(1000, ge=1, description="Stage-1 Adam epochs before L-BFGS.")
    lbfgs_steps: int = pydantic.Field(3000, ge=0, description="Stage-1 L-BFGS steps after Adam.")
    lambda_cc: float = pydantic.Field(1.0, ge=0, description="Weight of the continuity NLL term.")
    param_solve: Literal["gradient", "projection"] = pydantic.Field(
        "projection", description="Stage-1 parameters in the L-BFGS phase: by gradient or solved exactly."
    )
    lambda_ode: float = pydantic.Field(1.0, ge=0, description="Weight of the force-balance NLL term.")
    collocation: Literal["midstep", "sample"] = pydantic.Field(
        "midstep",
        description="Physics (stage 1) and force likelihood (stage 2) at mid-step times t_i + dt/2 with the "
        "held force sample f_i (exact for the zero-order-hold forcing of specs 1.5), or at the samples t_i.",
    )
    nuts_points: Literal["heldout", "stage1"] = pydantic.Field(
        "heldout",
        description="Stage-2 force points: half a stride from the stage-1 points (force samples stage 1 "
        "never fitted), or the stage-1 points themselves (the repository reuses them).",
    )
    stage2: Literal["layer", "frozen"] = pydantic.Field(
        "layer",
        description="Stage 2: 'layer' samples the network's output layer with the parameters (the states' "
        "uncertainty enters the posterior: errors in variables, with u, v and continuity at the stage-2 "
        "points), 'frozen' conditions on the stage-1 states (the paper's scheme).",
    )
    nuts_force: Literal["mean", "repeats"] = pydantic.Field(
        "mean",
        description="Stage-2 likelihood: the mean of the repeats with sigma_f free to absorb the "
        "frozen-state misfit, or every repeat with sigma_f the per-repeat noise (pinned by their scatter).",
    )


def _names(system: str) -> list[str]:
    nl = "kappa" if system == "duffing" else "mu"
    return [f"{g}{i}" for g in ("c", "k", nl) for i in (1, 2)]


def simulate(config: PinnBayesConfig) -> dict[str, np.ndarray]:
    """Clean RK4 truth and R noisy repeats of u, v and f with the repository's seeds (specs 3.2)."""
    chain = pinn_chain(2, config.system, [1, 2])
    ts, force, states = forced_response(chain, config.horizon, config.n_samples)
    snr = config.snr_db
    u_rep = [add_noise_numpy_legacy(states[:, :2], snr, 42 + j) for j in range(config.repeats)]
    v_rep = [add_noise_numpy_legacy(states[:, 2:], snr, 8 + j) for j in range(config.repeats)]
    f_rep = [add_noise_numpy_legacy(force, snr, 16 + j) for j in range(config.repeats)]
    return {
        "times": ts,
        "states": states,
        "force": force,
        "z_noisy": np.stack([np.concatenate([u, v], axis=1) for u, v in zip(u_rep, v_rep, strict=True)]),
        "f_noisy": np.stack(f_rep),
    }


def train_stage1(
    config: PinnBayesConfig, data: Mapping[str, np.ndarray], progress: Progress
) -> tuple[Any, PositiveParameters, Any]:
    """Stage 1: the PINN on the mean of the noisy repeats with c, k, kappa/mu learned (specs D13 fix).

    The problem is :func:`~twinfer.infer.pinn._record_problems.repeats_problem`'s (Eq 23, fixed scales).

    Returns:
        ``(network, parameters, TrainResult)``.

    """
    names = _names(config.system)
    model = pinn_chain(2, config.system, [1, 2])
    weights = LossWeights(config.lambda_obs, config.lambda_cc, config.lambda_ode)
    problem, out_scale = repeats_problem(
        model, data["times"], data["z_noisy"], data["f_noisy"], config.obs_stride,
        config.collocation == "midstep", weights,
    )  # fmt: skip
    theta = PositiveParameters({n: INITIAL[n.rstrip("12")] for n in names})
    net = StateNetwork(
        jax.random.key(config.seed), 4, 0.0, config.horizon, width=config.width, depth=config.depth,
        activation=config.activation, out_scale=out_scale, n_fourier=config.n_fourier,
        max_cycles=config.max_cycles,
    )  # fmt: skip
    after = ("nuts_points", "nuts_force", "stage2")
    ckpt = case_checkpoint("pinn-bayes", config, "stage1", data=data, exclude=after)
    fit = fit_pinn(
        net, theta, state_losses, problem, train_settings(config), project=config.param_solve == "projection",
        progress=progress, checkpoint=ckpt, stage="stage 1: PINN with learned parameters",
    )  # fmt: skip
    if fit.theta is None:  # fit_pinn returns the parameters it trains
        raise TwinferRuntimeError("internal: stage 1 returned no fitted parameters.")
    return fit.net, fit.theta, fit.result


def run(config: PinnBayesConfig, progress: Progress) -> RunArtifacts:
    """Stage 1 (PINN with learned parameters), stage 2 (NUTS on the frozen states), diagnostics."""
    start = time.perf_counter()
    names = _names(config.system)
    model = pinn_chain(2, config.system, [1, 2])
    progress("simulate", 0, 1)
    data = simulate(config)
    progress("simulate", 1, 1)
    net_fit, theta_fit, result = train_stage1(config, data, progress)
    midstep, heldout = config.collocation == "midstep", config.nuts_points == "heldout"
    idx, t_nuts = force_points(data["times"], config.obs_stride, midstep, heldout)
    reps = data["f_noisy"][:, idx]
    force_data = reps.mean(axis=0, keepdims=True) if config.nuts_force == "mean" else reps
    stage1 = np.asarray(theta_fit.values())
    priors = {n: PRIORS[n.rstrip("12")] for n in names}
    layer = None
    if config.stage2 == "layer":
        if config.nuts_force != "mean":
            raise TwinferValueError(
                f"nuts_force: stage2 = 'layer' takes the mean of the repeats ('mean'); received "
                f"{config.nuts_force!r}."
            )
        # u, v measured at the stage-2 samples, force and continuity at their collocation times
        z_scale = repeat_noise_sd(data["z_noisy"][:, idx]) / np.sqrt(config.repeats)
        layer = LayerData(data["times"][idx], data["z_noisy"].mean(axis=0)[idx], z_scale, data["times"])
    state_names = ["u1", "u2", "v1", "v2"]
    post = two_stage_posterior(
        jax.random.key(config.seed), model, net_fit, stage1,
        float(np.mean(repeat_noise_sd(reps))) if config.nuts_force == "repeats" else None,
        names, t_nuts, force_data, priors, SIGMA_PRIOR, stage2=config.stage2, state_names=state_names,
        record_times=data["times"], layer=layer, chains=config.chains, num_warmup=config.num_warmup,
        num_draws=config.num_draws, progress=progress,
    )  # fmt: skip
    samples, fit, est, n_layer, newton_steps = post
    var_names = [*names, "sigma_f"]
    idata = to_inference_data(samples, var_names, {"sampler": "blackjax NUTS, window adaptation"})
    summary = summarise(idata, var_names)
    truths = {n: float(get_param(model.params, n)) for n in names}
    nl = "kappa" if config.system == "duffing" else "mu"
    out = two_stage_scores(summary, samples, fit, stage1, truths, nl, est, data["states"], config.stage2)
    out["posterior.n_force_points"] = float(idx.size)
    out["posterior.n_layer_params"] = float(n_layer)
    rhat_max = out["posterior.rhat_max"]
    out["timing.train_s"] = result.train_s
    out["train.epochs"] = float(result.epochs)
    out["timing.nuts_warmup_s"] = fit.warmup_s
    out["timing.nuts_sample_s"] = fit.sample_s
    out["timing.nuts_sample_cpu_s"] = fit.sample_cpu_s
    out["timing.run_s"] = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        payload = write_netcdf(idata, Path(tmp) / "posterior.nc")
    notes = [
        f"{config.system} 2-DOF, {config.horizon:g} s window (specs D10), SNR {config.snr_db:g} dB, "
        f"{config.repeats} repeats; stage 1 learned {names} jointly with the network from initial guesses "
        f"{INITIAL} against the noisy force (specs D13 fairness fix: no true parameters, no clean force).",
        f"NUTS: {config.chains} chains, {config.num_warmup} warm-up + {config.num_draws} draws each, "
        f"{fit.divergences} divergences, sampling {fit.sample_s:.1f} s (compilation excluded).",
        f"Stage 1 loss: Eq 23 at fixed noise scales, each residual over the noise standard deviation of the "
        f"mean of the repeats estimated from their scatter (data only); {config.epochs} Adam epochs, then "
        f"{config.lbfgs_steps} L-BFGS steps with the parameters solved exactly for the network's states at "
        f"each step (param_solve = '{config.param_solve}', variable projection). Physics at "
        f"collocation = '{config.collocation}': the force is held over each sample step (specs 1.5), so the "
        "mid-step times carry the held sample exactly; at the samples a smooth network sees it half a step "
        "late, which biased the damping by 5-9 %.",
        f"Stage-2 force points (specs D14): {idx.size} points, nuts_points = '{config.nuts_points}' "
        "('heldout': half a stride from the stage-1 points, samples stage 1 never fitted), nuts_force = "
        f"'{config.nuts_force}' ('mean': the mean of the {config.repeats} repeats with sigma_f free).",
    ]
    if config.stage2 == "layer":
        notes.append(
            f"stage2 = 'layer': NUTS samples the network's output layer ({n_layer} weights) with the "
            "parameters, the hidden layers of stage 1 frozen: the posterior has the u, v likelihood at the "
            "stage-2 samples, continuity and force balance at their mid-steps (Eq 22-24 with the states "
            "uncertain: errors in variables). Conditioning on the frozen stage-1 states instead (the paper, "
            "stage2 = 'frozen') leaves their small phase error (a few mrad in the forcing band) out of the "
            "spread and biased c1 by 4.5 % with the truth outside the interval. NUTS runs on whitened "
            f"coordinates (Laplace at the mode, {newton_steps} Newton steps: a dense mass matrix fixed from "
            "the Hessian; the target is unchanged)."
        )
    else:
        notes.append(
            "stage2 = 'frozen': the posterior conditions on the frozen stage-1 states, so their estimation "
            "error is not in its spread (a limit of the paper's two-stage scheme, hidden there by stage-1 "
            "training with the true parameters and clean force); their small phase error biases the damping "
            "by a few percent while the force residuals look white."
        )
    notes += [
        "Posterior saved as posterior.nc (ArviZ InferenceData, netCDF); the states' and parameters' "
        "posterior means and standard deviations on the whole record as estimate.nc (twinfer Estimate; "
        "with stage2 = 'frozen' the states are stage 1's point estimate, their sd NaN).",
    ]
    outside = [n for n in names if out[f"posterior.{n}.in95"] == 0.0]
    if outside:
        notes.insert(0, f"The true value lies outside the 95% credible interval for {outside}.")
    if rhat_max > 1.01:
        notes.insert(0, f"WARNING: R-hat max = {rhat_max:.4f} > 1.01: the chains have not converged; do not "
                     "use this posterior as is.")  # fmt: skip
    arrays = {"samples": samples, "names": np.asarray(var_names), "truth": np.asarray(
        [float(get_param(model.params, n)) for n in names])}  # fmt: skip
    files = {"posterior.nc": payload, "estimate.nc": est.netcdf_bytes()}
    return RunArtifacts(metrics=out, arrays=arrays, notes=notes, files=files)


def figures(arrays: Mapping[str, Any], config: PinnBayesConfig) -> dict[str, Any]:
    """Figs 13-14: the posterior's pair plot (:func:`~twinfer.report.figures.pinn.pairs_figure`)."""
    names = [str(n) for n in np.asarray(arrays["names"])][:-1]  # sigma_f last, not drawn
    title = f"pinn-bayes ({config.system}): posterior, true values dashed"
    return {
        "posterior_pairs": pairs_figure(
            np.asarray(arrays["samples"]), names, np.asarray(arrays["truth"]), title
        )
    }


QUICK = {
    "epochs": 100,
    "chunk": 50,
    "width": 16,
    "n_fourier": 8,
    "n_samples": 512,
    "horizon": 20.0,
    "max_cycles": 20.0,
    "num_warmup": 100,
    "num_draws": 100,
    "lbfgs_steps": 50,
    "compare_ukf": False,
}
# Table 6 (specs 4.4): posterior mean, error of the mean (%) and sd per parameter, per system
_TABLE6 = {
    "duffing": {"c1": (0.984, 1.60, 0.030), "c2": (0.987, 1.30, 0.030), "k1": (15.02, 0.13, 0.065),
                "k2": (15.06, 0.43, 0.053), "kappa1": (99.21, 0.79, 0.65), "kappa2": (99.43, 0.57, 0.70)},
    "vdp": {"c1": (1.05, 5.00, 0.107), "c2": (0.998, 0.20, 0.132), "k1": (14.92, 0.53, 0.059),
            "k2": (14.85, 1.03, 0.062), "mu1": (0.720, 4.0, 0.132), "mu2": (0.788, 5.07, 0.156)},
}  # fmt: skip


def paper_values(config: PinnBayesConfig) -> dict[str, PaperValue]:
    """Table 6's column of this configuration's system (the VdP mu1 error printed 5.00 % is 4.0 %)."""
    source = f"Table 6, 2DOF {'Duffing' if config.system == 'duffing' else 'Van der Pol'}"
    out = {}
    for name, (mean, err, sd) in _TABLE6[config.system].items():
        out[f"posterior.{name}.mean"] = PaperValue(
            mean,
            source,
            near(3.0 * sd, "two posteriors of the same parameter from other noise draws: within 3 of its sd"),
        )
        out[f"posterior.{name}.err_pct"] = PaperValue(err, source)
        out[f"posterior.{name}.sd"] = PaperValue(
            sd, source, within(2.0, "a posterior sd from another noise draw, prior and sampler run")
        )
    return out


CASE = register_pinn_case(
    "pinn-bayes",
    "Bayesian parameters of a 2-DOF chain: frozen PINN + NUTS (PINN paper section 4.3).",
    PinnBayesConfig,
    run,
    figures,
    QUICK,
    paper_values,
)
