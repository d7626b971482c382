"""Case ``emps``: PN-SMC identification of the EMPS positioning axis from measured force and position.

The measurements and decisions behind the defaults are in ``docs/design-cases.md``, section ``emps``.

References:
    Longbottom, Champneys & Rogers, Sec. 4.3, Eq. (28), Table 2; Janot, Gautier & Brunot (2019).

"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np
import pydantic

from twinfer.data import load_emps
from twinfer.experiments import _pnsmc
from twinfer.experiments._case import Case, Progress, register
from twinfer.infer.pn import PNFilter, PNLikelihood
from twinfer.infer.smc import (
    OutputErrorLikelihood,
    TransformedNormalPrior,
    history_loglik,
    posterior_arrays,
    posterior_metrics,
)
from twinfer.learn._emps_references import emps_references
from twinfer.metrics import rmse_per_particle, rmse_summary
from twinfer.models import EMPS
from twinfer.report import PaperValue, RunArtifacts, at_most
from twinfer.report.figures.bands import particle_band_arrays, particle_band_figure
from twinfer.report.figures.smc import smc_figures
from twinfer.sim import fine_input, open_loop_simulator, simulate_closed_loop

NAMES = ("M", "Fv", "Fc", "offset")
FS = 1000.0
IDIM_PARAMS: dict[str, float] = {"M": 95.1089, "Fv": 203.5034, "Fc": 20.3935, "offset": -3.1648}
"""Inverse-dynamics least-squares estimates of the benchmark's own scripts (specs/pn-smc.md 3.3)."""
PAPER_TEST_RMSE_MEAN = 5.2018e-4
"""The paper's mean test RMSE over particles [m] (Table 2, EMPS)."""


class EMPSConfig(_pnsmc.SMCSettings):
    """Configuration of ``emps``."""

    n_obs: int = pydantic.Field(24576, ge=16, le=24841, description="Training samples (from the start).")
    n_particles: int = pydantic.Field(256, ge=8, description="SMC particles.")
    sampler: Literal["ibis", "tempering"] = pydantic.Field(
        "tempering", description="tempering (default here, see the module docstring) or the paper's ibis."
    )
    q: int = pydantic.Field(2, ge=1, le=4, description="IWP order.")
    method: Literal["ek0", "ek1"] = pydantic.Field("ek0", description="PN linearisation.")
    noise_sd: float = pydantic.Field(2e-5, gt=0, description="Position measurement-noise sd [m].")
    prior_sd_log: float = pydantic.Field(0.5, gt=0, description="Prior sd of log M, log Fv, log Fc.")
    offset_sd: float = pydantic.Field(3.0, gt=0, description="Prior sd of the offset [N].")
    test_samples: int = pydantic.Field(24841, ge=16, le=24841, description="Test samples scored.")
    substeps: int = pydantic.Field(4, ge=1, description="RK4 steps per sample in the test simulation.")
    test_particles: int = pydantic.Field(0, ge=0, description="Particles simulated on the test set (0: all).")
    pn_substeps: int = pydantic.Field(1, ge=1, description="PN filter steps per sample period.")
    input_hold: Literal["linear", "zoh"] = pydantic.Field(
        "zoh", description="Input between samples (zoh: the controller's DAC output)."
    )
    shared_diffusion: bool = pydantic.Field(True, description="One PN diffusion for both ODE dimensions.")
    checkpoint_every: int = pydantic.Field(2048, ge=1, description="IBIS: observations between checkpoints.")
    prediction_horizons: list[int] = pydantic.Field(
        default_factory=lambda: [100, 1000],
        description="Samples between the measured positions the prediction.h* protocols see (each >= 2).",
    )

    output_error: bool = pydantic.Field(
        True,
        description="Also sample the posterior under the output-error likelihood (open-loop simulation, "
        "noise sd estimated): the criterion the open-loop test scores (output_error.*).",
    )
    oe_noise_median: float = pydantic.Field(
        1e-3, gt=0, description="Output error: prior median of the noise sd [m] (log-normal)."
    )
    oe_noise_sd_log: float = pydantic.Field(1.5, gt=0, description="Output error: prior sd of log sigma.")

    @pydantic.field_validator("prediction_horizons")
    @classmethod
    def _horizons(cls, value: list[int]) -> list[int]:
        if any(h < 2 for h in value):
            raise ValueError(f"expected horizons of at least 2 samples; received {value}")
        return value


def pn_likelihood(
    config: EMPSConfig, data: Mapping[str, np.ndarray], n: int, observed: np.ndarray | None = None
) -> PNLikelihood:
    """The PN filter of Eq. 28 over the first ``n`` samples of ``data`` (force in, position out).

    ``observed`` marks the samples whose measured position the filter assimilates (default: every one;
    the training likelihood); the filter starts at rest at the first measured position.
    """
    model = EMPS(**IDIM_PARAMS)
    mask = np.ones(n, bool) if observed is None else np.asarray(observed, bool)
    return PNLikelihood(
        pn=PNFilter(model, q=config.q, method=config.method, shared_diffusion=config.shared_diffusion),
        base_params=model.params,
        names=NAMES,
        x0=jnp.array([data["q"][0], 0.0]),
        state_sd=jnp.array([config.noise_sd, 1e-3]),
        h=1.0 / FS,
        us=jnp.asarray(data["force"][:n])[:, None],
        ys=jnp.asarray(data["q"][:n])[:, None],
        y_mask=jnp.asarray(mask)[:, None],
        chol_R=config.noise_sd * jnp.eye(1),
        substeps=config.pn_substeps,
        input_hold=config.input_hold,
    )


def training_likelihood(
    config: EMPSConfig, train: Mapping[str, np.ndarray]
) -> tuple[PNLikelihood, TransformedNormalPrior]:
    """The PN likelihood of the first ``n_obs`` training positions, and the prior (module docstring)."""
    spec = {n: ("lognormal", IDIM_PARAMS[n], config.prior_sd_log) for n in ("M", "Fv", "Fc")}
    spec["offset"] = ("normal", IDIM_PARAMS["offset"], config.offset_sd)
    return pn_likelihood(config, train, config.n_obs), TransformedNormalPrior.from_spec(spec)


def output_error_likelihood(
    config: EMPSConfig, train: Mapping[str, np.ndarray]
) -> tuple[OutputErrorLikelihood, TransformedNormalPrior]:
    """The output-error likelihood of the first ``n_obs`` training positions, and its prior.

    Open-loop RK4 simulation (``substeps`` per sample, the test protocol's) from the first measured
    position at rest, driven by the measured force with ``input_hold``; white Gaussian errors of an
    unknown sd ``sigma`` (log-normal prior), appended to the four parameters of Eq. 28 (same priors as
    :func:`training_likelihood`).
    """
    model = EMPS(**IDIM_PARAMS)
    n = config.n_obs
    lik = OutputErrorLikelihood(
        model=model,
        base_params=model.params,
        names=NAMES,
        x0=jnp.array([train["q"][0], 0.0]),
        us=jnp.asarray(fine_input(train["force"][:n], config.substeps, config.input_hold)),
        ys=jnp.asarray(train["q"][:n])[:, None],
        dt=1.0 / FS / config.substeps,
        substeps=config.substeps,
    )
    spec = {n_: ("lognormal", IDIM_PARAMS[n_], config.prior_sd_log) for n_ in ("M", "Fv", "Fc")}
    spec["offset"] = ("normal", IDIM_PARAMS["offset"], config.offset_sd)
    spec["sigma"] = ("lognormal", config.oe_noise_median, config.oe_noise_sd_log)
    return lik, TransformedNormalPrior.from_spec(spec)


def _output_error(
    config: EMPSConfig, train: Mapping[str, np.ndarray], test: Mapping[str, np.ndarray], progress: Progress
) -> tuple[dict[str, float], dict[str, Any], str]:
    """The posterior under the output-error likelihood, scored open loop on the test set.

    Metrics ``output_error.*``: the posterior of (M, Fv, Fc, offset, sigma), each particle's open-loop
    test RMSE, and the fraction of test samples inside the 2-sd predictive band (the particles' mean
    simulation, their spread plus sigma^2 by the law of total variance).
    """
    lik, prior = output_error_likelihood(config, train)
    res, smc_s = _pnsmc.run_smc("emps", config, lik, prior, progress, name="smc_output_error")
    metrics = {"output_error.timing.smc_s": smc_s}
    for key, value in posterior_metrics(res, (*NAMES, "sigma")).items():
        metrics[f"output_error.{key}"] = value
    thetas = _pnsmc.equal_weight_particles(res, config.test_particles, config.seed)
    m = config.test_samples
    model = EMPS(**IDIM_PARAMS)
    sims = simulate_open_loop(model, thetas[:, : len(NAMES)], test, m, config.substeps, config.input_hold)
    truth = np.asarray(test["q"][:m])
    metrics.update(rmse_summary("output_error.test.", rmse_per_particle(sims, truth)))
    spread = np.sqrt(np.var(sims, axis=0) + np.mean(thetas[:, len(NAMES)] ** 2))
    metrics["output_error.test.coverage_2sd"] = float(np.mean(np.abs(truth - sims.mean(0)) <= 2 * spread))
    metrics["output_error.test.median_sd"] = float(np.median(spread))
    arrays = {f"output_error_{k}": v for k, v in particle_band_arrays("pulses", truth, sims).items()}
    note = (
        "output_error.*: the same model's posterior under the output-error likelihood (open-loop "
        "simulation of the training set scored on every sample, noise sd estimated; "
        "twinfer.infer.smc.OutputErrorLikelihood), "
        + _pnsmc.sampler_note(config, res, config.n_obs, "measured samples")
        + f": open-loop test RMSE {metrics['output_error.test.rmse_mean']:.3g} m (the PN posterior "
        "above scores one-step predictions instead); its errors are correlated in time, so its parameter "
        "sds are too narrow, and the predictive band (sigma "
        f"{metrics['output_error.posterior.sigma.mean']:.3g} m) holds "
        f"{metrics['output_error.test.coverage_2sd']:.1%} of the test samples within 2 sd."
    )
    return metrics, arrays, note


def prediction_rmse(
    config: EMPSConfig, thetas: np.ndarray, data: Mapping[str, np.ndarray], m: int, horizon: int
) -> np.ndarray:
    """Position RMSE [m] of each particle's predictions up to ``horizon`` samples ahead of a measurement.

    Each particle's PN filter (:func:`pn_likelihood`) assimilates the measured position at samples 0,
    ``horizon``, ``2 horizon``, ... of the first ``m`` and predicts in between from the measured force;
    the RMSE is over the samples it did not see. A protocol between the open loop (no measurement after
    the first) and the one-step-ahead filter: it shows how much of the open-loop error is drift.
    """
    observed = np.arange(m) % horizon == 0
    lik = pn_likelihood(config, data, m, observed)
    means = lik.filtered_means(jnp.asarray(thetas, jnp.float64))
    err = np.asarray(means)[:, ~observed] - np.asarray(data["q"][:m])[~observed]
    return np.sqrt(np.mean(err**2, axis=1))


def run(config: EMPSConfig, progress: Progress) -> RunArtifacts:
    """Load the measured sets, run PN-SMC on the estimation set, score particles on the pulses set."""
    start = time.perf_counter()
    train, test = load_emps(), load_emps(pulses=True)
    lik, prior = training_likelihood(config, train)
    model = EMPS(**IDIM_PARAMS)
    n = config.n_obs
    res, metrics, thetas = _pnsmc.sample_posterior(
        "emps", config, lik, prior, progress, NAMES, config.test_particles
    )
    progress("test simulation (pulses)", 0, 1)
    test_start = time.perf_counter()
    m = config.test_samples
    sims = simulate_open_loop(model, thetas, test, m, config.substeps, config.input_hold)
    metrics.update(rmse_summary("test.", rmse_per_particle(sims, test["q"][:m])))
    sims_cl = simulate_closed_loop(model, NAMES, thetas, test, m, FS, config.substeps)
    metrics.update(rmse_summary("closedloop.test.", rmse_per_particle(sims_cl, test["q"][:m])))
    references, train_fit, best = emps_references(
        model, {name: IDIM_PARAMS[name] for name in NAMES}, train, test, n, m, FS, config.substeps,
        config.input_hold,
    )  # fmt: skip
    metrics.update(references)
    idim = np.array([[IDIM_PARAMS[name] for name in NAMES]])
    for horizon in config.prediction_horizons:
        errors = prediction_rmse(config, thetas, test, m, horizon)
        metrics.update(rmse_summary(f"prediction.h{horizon}.test.", errors))
    # training-data log-likelihood at the posterior mean, the IDIM estimates and the two output-error
    # fits: a reference value far above the particles' means the sampler sits in a local mode
    post_mean = np.array([[metrics[f"posterior.{name}.mean"] for name in NAMES]])
    ll = history_loglik(lik, prior, np.concatenate([post_mean, idim, train_fit[None], best[None]]), n)
    metrics["diagnostic.train_loglik.posterior_mean"] = float(ll[0])
    metrics["diagnostic.train_loglik.idim"] = float(ll[1])
    metrics["diagnostic.train_loglik.openloop_train_fit"] = float(ll[2])
    metrics["diagnostic.train_loglik.openloop_test_fit"] = float(ll[3])
    metrics["diagnostic.train_loglik.particles_max"] = float(np.max(res.loglik))
    progress("test simulation (pulses)", 1, 1)
    metrics["timing.test_s"] = time.perf_counter() - test_start
    arrays: dict[str, Any] = dict(posterior_arrays(res, prior))
    arrays.update(particle_band_arrays("pulses", test["q"][:m], sims))
    arrays.update(particle_band_arrays("closedloop", test["q"][:m], sims_cl))
    oe_notes = []
    if config.output_error:
        oe_metrics, oe_arrays, oe_note = _output_error(config, train, test, progress)
        metrics.update(oe_metrics)
        arrays.update(oe_arrays)
        oe_notes.append(oe_note)
    metrics["timing.run_s"] = time.perf_counter() - start
    notes = [
        _pnsmc.sampler_note(config, res, n, "measured samples")
        + f", PN filter {config.method.upper()}, q = {config.q}.",
        "test.*: the paper's protocol, open-loop RK4 simulation of DATA_EMPS_PULSES from the measured first "
        "position at rest, driven by the measured force gtau * vir (which already contains the pulses). "
        "The plant is a pure integrator, so the position drifts: no parameter value reaches 1e-3 m this "
        f"way (the IDIM estimates give {metrics['reference.idim.test.rmse']:.3g} m; parameters least-squares "
        f"fitted to this test set itself give {metrics['reference.openloop_best_fit.test.rmse']:.3g} m).",
        "closedloop.test.*: the benchmark's own validation (Janot et al., Sec. 3.5): the model inside the "
        "known digital PD loop (Eq. 6, gains kp, kv, gtau of the data file), driven by the reference qg and "
        "the recorded pulses_N added to the control voltage; no measured output enters the simulation "
        f"(IDIM estimates: {metrics['reference.idim.closedloop.test.rmse']:.3g} m).",
        _separation_note(metrics, config),
        *oe_notes,
    ]
    return RunArtifacts(metrics=metrics, arrays=arrays, notes=notes)


def _separation_note(metrics: Mapping[str, float], config: EMPSConfig) -> str:
    """What separates the posterior from the open-loop floor, and which protocol the paper's 5.2e-4 needs."""
    fit = {k: metrics[f"reference.openloop_train_fit.{k}"] for k in (*NAMES, "test.rmse")}
    ll = {k: metrics[f"diagnostic.train_loglik.{k}"] for k in ("particles_max", "openloop_train_fit")}
    floor = metrics["reference.openloop_best_fit.test.rmse"]
    best = {k: metrics[f"reference.openloop_best_fit.{k}"] for k in NAMES}
    horizons = ", ".join(
        f"{h} samples {metrics[f'prediction.h{h}.test.rmse_mean']:.3g} m" for h in config.prediction_horizons
    )
    return (
        "Posterior against the open-loop floor: least squares on the open-loop error over the training "
        f"samples (M {fit['M']:.4g}, Fv {fit['Fv']:.4g}, Fc {fit['Fc']:.4g}, offset {fit['offset']:.4g}) "
        f"gives {fit['test.rmse']:.3g} m on the test set, the posterior {metrics['test.rmse_mean']:.3g} m. "
        "The sampler is not stuck: the PN likelihood of the training data is "
        f"{ll['openloop_train_fit']:.6g} at that fit against {ll['particles_max']:.6g} for the best "
        "particle. The PN likelihood scores one-step predictions (position noise sd "
        f"{config.noise_sd:g} m), an equation-error criterion; under Eq. 28's model error its maximum is "
        "not the output-error fit's. The two records are fitted by different parameters (training / test "
        "set: "
        + ", ".join(f"{k} {fit[k]:.4g} / {best[k]:.4g}" for k in NAMES)
        + "), so nothing identified from the training record alone reaches the test set's floor (the module "
        "docstring: richer friction laws and shifted inputs do not close it). "
        + (
            "No parameter value of Eq. 28 beats the test-set fit's open-loop floor "
            f"({floor:.3g} m), so the paper's {PAPER_TEST_RMSE_MEAN:.3g} m needs measured test positions "
            "inside the simulation"
            if floor > PAPER_TEST_RMSE_MEAN
            else f"The test-set fit's open-loop floor on these {config.test_samples} samples is {floor:.3g} m"
        )
        + f": predictions restarted from measured positions every {horizons}; the closed loop "
        f"{metrics['closedloop.test.rmse_mean']:.3g} m."
    )


def simulate_open_loop(
    model: EMPS, thetas: np.ndarray, data: Mapping[str, np.ndarray], m: int, substeps: int, hold: str
) -> np.ndarray:
    """Open-loop simulation of the first ``m`` samples from the measured force (the paper's protocol)."""
    return open_loop_simulator(model, NAMES, data, m, FS, substeps, hold)(thetas)


def figures(arrays: Mapping[str, Any], config: EMPSConfig) -> dict[str, Any]:
    """Prior vs posterior, ESS, and the pulses and closed-loop fits with the particle band."""
    figs = smc_figures(arrays)
    q = "motor position q [m]"
    figs.update(particle_band_figure(arrays, "pulses", FS, q, title="open loop (paper's protocol)"))
    figs.update(
        particle_band_figure(arrays, "closedloop", FS, q, "test_fit_closedloop", "closed loop (benchmark)")
    )
    return figs


_TEST_RMSE = at_most(
    2.0, "an open-loop test error over posterior samples, so beating it passes; the same measured data"
)

CASE = register(
    Case(
        name="emps",
        description=(
            "EMPS (measured): PN-SMC with Coulomb and viscous friction (pn-smc paper, Sec. 4.3, Table 2)."
        ),
        config_type=EMPSConfig,
        run=run,
        figures=figures,
        quick={"n_obs": 1024, "n_particles": 32, "test_samples": 4000, "test_particles": 16},
        paper={
            "test.rmse_min": PaperValue(2.95e-4, "Table 2, EMPS (m)", _TEST_RMSE),
            "test.rmse_max": PaperValue(8.99e-4, "Table 2, EMPS (m)", _TEST_RMSE),
            "test.rmse_mean": PaperValue(PAPER_TEST_RMSE_MEAN, "Table 2, EMPS (m)", _TEST_RMSE),
        },
    )
)
