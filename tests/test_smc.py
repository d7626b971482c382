"""IBIS and tempering samplers: grid-posterior agreement, resampling, acceptance, checkpoint/resume, and a
bimodal likelihood whose early data favour the wrong mode (IBIS trapped, tempering not)."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.checkpoint import Checkpoint
from twinfer.infer.pn import PNFilter, PNLikelihood
from twinfer.infer.smc import (
    TransformedNormalPrior,
    conditional_ess,
    ess,
    history_loglik,
    ibis,
    next_lambda,
    tempering,
)
from twinfer.models import Chain

N_OBS, H, K_TRUE, NOISE = 80, 0.04, 5.0, 0.02


def make_problem():
    """Linear oscillator x'' = -k x, x(0) = 0.5, noisy positions; k unknown with a log-normal prior."""
    model = Chain([1.0], [K_TRUE], [0.0], outputs=["x1"])
    ts = H * np.arange(N_OBS)
    ys = 0.5 * np.cos(np.sqrt(K_TRUE) * ts) + NOISE * np.random.default_rng(1).normal(size=N_OBS)
    lik = PNLikelihood(
        pn=PNFilter(model, q=2),
        base_params=model.params,
        names=("k1",),
        x0=jnp.array([0.5, 0.0]),
        state_sd=jnp.zeros(2),
        h=H,
        us=jnp.zeros((N_OBS, 1)),
        ys=jnp.asarray(ys)[:, None],
        y_mask=jnp.ones((N_OBS, 1), bool),
        chol_R=NOISE * jnp.eye(1),
    )
    prior = TransformedNormalPrior.from_spec({"k1": ("lognormal", 4.0, 0.3)})
    return lik, prior


@pytest.fixture(scope="module")
def problem():
    return make_problem()


def _grid_posterior(lik, prior):
    """Posterior mean and sd of k on a fine grid in log space, with the same PN likelihood."""
    zs = jnp.linspace(np.log(3.0), np.log(8.0), 1501)

    def total(z):
        theta = prior.to_natural(z[None])

        def body(k, val):
            carry, ll = lik.step(val[0], theta, k)
            return carry, val[1] + ll

        return jax.lax.fori_loop(0, lik.n_steps, body, (lik.init(theta), 0.0))[1]

    ll = np.asarray(jax.jit(jax.vmap(total))(zs))
    logp = ll + np.asarray(prior.log_density(zs[:, None]))
    w = np.exp(logp - logp.max())
    w /= w.sum()
    k = np.exp(np.asarray(zs))
    mean = np.sum(w * k)
    return mean, np.sqrt(np.sum(w * (k - mean) ** 2))


def test_ibis_matches_grid_posterior(problem):
    """Posterior mean and sd of k from IBIS (PN likelihood) are within 5% of a grid posterior; resampling
    triggers and the corrected independent-MH moves accept (acceptance > 0)."""
    lik, prior = problem
    grid_mean, grid_sd = _grid_posterior(lik, prior)
    res = ibis(jax.random.key(0), lik, prior, 1000, n_moves=2)
    w = np.exp(res.log_w - res.log_w.max())
    w /= w.sum()
    k = res.theta[:, 0]
    mean = np.sum(w * k)
    sd = np.sqrt(np.sum(w * (k - mean) ** 2))
    assert abs(mean - grid_mean) < 0.05 * grid_sd + 1e-3 * grid_mean
    assert abs(sd / grid_sd - 1) < 0.05, (sd, grid_sd)
    assert len(res.resample_times) >= 2
    assert np.all(res.acceptance > 0)
    assert res.ess.shape == (N_OBS,) and np.all(res.ess > 0)


def test_resume_gives_identical_particles(problem, tmp_path):
    """A run interrupted at observation 37 and resumed from its checkpoint ends with the same particles,
    weights, ESS record and resampling times as an uninterrupted run with the same seed."""
    lik, prior = problem
    full = ibis(
        jax.random.key(3), lik, prior, 200, checkpoint=Checkpoint(tmp_path / "a"), checkpoint_every=10
    )
    ckpt = Checkpoint(tmp_path / "b.ckpt", {"run": "test"})
    part = ibis(jax.random.key(3), lik, prior, 200, checkpoint=ckpt, checkpoint_every=10, stop_at=37)
    assert part.ess[40:].sum() == 0
    resume = Checkpoint(ckpt.path, {"run": "test"}, resume=True)
    resumed = ibis(jax.random.key(3), lik, prior, 200, checkpoint=resume, checkpoint_every=10)
    np.testing.assert_array_equal(resumed.z, full.z)
    np.testing.assert_array_equal(resumed.log_w, full.log_w)
    np.testing.assert_array_equal(resumed.ess, full.ess)
    np.testing.assert_array_equal(resumed.resample_times, full.resample_times)
    # each particle's recorded cumulative log-likelihood is that of a fresh filter pass over all data
    fresh = history_loglik(lik, prior, full.theta, N_OBS)
    np.testing.assert_allclose(fresh, full.loglik, rtol=1e-8)
    assert np.ptp(fresh) > 0


def test_ess_and_input_errors(problem):
    np.testing.assert_allclose(float(ess(jnp.zeros(10))), 10.0)
    np.testing.assert_allclose(float(ess(jnp.array([0.0, -jnp.inf, -jnp.inf]))), 1.0)
    lik, prior = problem
    with pytest.raises(ValueError, match="n_particles"):
        ibis(jax.random.key(0), lik, prior, 1)
    with pytest.raises(ValueError, match="ess_threshold"):
        ibis(jax.random.key(0), lik, prior, 10, ess_threshold=1.5)
    with pytest.raises(ValueError, match="lognormal"):
        TransformedNormalPrior.from_spec({"k1": ("gamma", 1.0, 1.0)})


def _weighted_moments(res):
    w = np.exp(res.log_w - res.log_w.max())
    w /= w.sum()
    k = res.theta[:, 0]
    mean = np.sum(w * k)
    return mean, np.sqrt(np.sum(w * (k - mean) ** 2))


def test_tempering_matches_grid_posterior(problem):
    """Adaptive tempering (full-data likelihood, both MH kernels) gives the grid posterior's mean and sd of
    k within 5%; the temperatures increase to 1 and every stage's moves accept."""
    lik, prior = problem
    grid_mean, grid_sd = _grid_posterior(lik, prior)
    res = tempering(jax.random.key(0), lik, prior, 1000, n_moves=3)
    mean, sd = _weighted_moments(res)
    assert abs(mean - grid_mean) < 0.05 * grid_sd + 1e-3 * grid_mean
    assert abs(sd / grid_sd - 1) < 0.05, (sd, grid_sd)
    assert res.lambdas is not None and res.lambdas[-1] == 1.0 and np.all(np.diff(res.lambdas) > 0)
    assert len(res.lambdas) >= 3 and np.all(res.acceptance > 0)
    # every adaptive (non-final) stage hits the conditional-ESS target of 0.5 N
    np.testing.assert_allclose(res.ess[:-1], 500.0, rtol=1e-6)
    np.testing.assert_allclose(history_loglik(lik, prior, res.theta, N_OBS), res.loglik, rtol=1e-8)


class BimodalLikelihood(eqx.Module):
    """``l_k(theta) = log(p_k N(theta; -2, s^2) + (1 - p_k) N(theta; 2, s^2))``: each observation is a
    two-component mixture; the first ``n_early`` have ``p_k = 0.9`` (favour -2), the rest ``p_k = 0.3``.

    Over all 100 observations the mode at +2 is higher by ``20 log(1/9) + 80 log(7/3) = 23.8`` log units,
    but after 20 the mode at -2 leads by 43.9.
    """

    p: jax.Array
    s: float = 0.5

    @property
    def n_steps(self) -> int:
        return self.p.shape[0]

    def init(self, theta):
        return jnp.zeros(())

    def step(self, carry, theta, k):
        x = theta[0]
        lp = -0.5 * ((x + 2.0) / self.s) ** 2
        lq = -0.5 * ((x - 2.0) / self.s) ** 2
        ll = jnp.logaddexp(jnp.log(self.p[k]) + lp, jnp.log1p(-self.p[k]) + lq)
        return carry, ll - jnp.log(self.s * jnp.sqrt(2 * jnp.pi))


def test_tempering_escapes_the_early_mode_where_ibis_is_trapped():
    """On a bimodal likelihood whose first 20 observations favour the wrong mode, IBIS with one independent
    MH move per rejuvenation collapses onto -2 and stays, while tempering puts the mass at the global mode
    +2 (the exact posterior: mass ~1 - e^-23.8 there)."""
    lik = BimodalLikelihood(jnp.concatenate([jnp.full(20, 0.9), jnp.full(80, 0.3)]))
    prior = TransformedNormalPrior.from_spec({"x": ("normal", 0.0, 2.0)})
    trapped = ibis(jax.random.key(1), lik, prior, 500, n_moves=1)
    assert _weighted_moments(trapped)[0] < -1.5
    res = tempering(jax.random.key(1), lik, prior, 500, n_moves=2)
    mean, sd = _weighted_moments(res)
    # the exact posterior at +2: mean 2 shifted by the prior (variance 0.25/100 vs 4), sd 0.05
    assert abs(mean - 2.0) < 0.02 and abs(sd / 0.05 - 1) < 0.15, (mean, sd)
    assert np.all(history_loglik(lik, prior, res.theta, 100) > history_loglik(lik, prior, trapped.theta, 100))


def test_tempering_resume_gives_identical_particles(problem, tmp_path):
    """Tempering stopped after 2 stages and resumed from its checkpoint ends with the particles,
    log-likelihoods, temperatures and acceptance rates of an uninterrupted run with the same seed."""
    lik, prior = problem
    full = tempering(jax.random.key(5), lik, prior, 1000, checkpoint=Checkpoint(tmp_path / "a"))
    ckpt = Checkpoint(tmp_path / "b.ckpt")
    part = tempering(jax.random.key(5), lik, prior, 1000, checkpoint=ckpt, stop_at=2)
    assert part.lambdas is not None and len(part.lambdas) == 2 and part.lambdas[-1] < 1.0
    resumed = tempering(jax.random.key(5), lik, prior, 1000, checkpoint=Checkpoint(ckpt.path, resume=True))
    assert full.lambdas is not None and resumed.lambdas is not None and len(full.lambdas) > 2
    np.testing.assert_array_equal(resumed.z, full.z)
    np.testing.assert_array_equal(resumed.loglik, full.loglik)
    np.testing.assert_array_equal(resumed.lambdas, full.lambdas)
    np.testing.assert_array_equal(resumed.acceptance, full.acceptance)


def test_next_lambda_hits_the_conditional_ess_target_and_bad_settings(problem):
    """Bisection: the conditional ESS at the returned temperature is the target; 1 when it stays above."""
    rng = np.random.default_rng(0)
    loglik = -0.5 * rng.normal(size=400) ** 2 * 1e4
    log_w = np.zeros(400)
    lam = next_lambda(log_w, loglik, 0.0, 0.5)
    assert 0.0 < lam < 1.0
    np.testing.assert_allclose(conditional_ess(log_w, loglik, lam), 200.0, rtol=1e-9)
    assert next_lambda(log_w, loglik * 1e-6, 0.0, 0.5) == 1.0
    # equal weights: the conditional ESS is the ESS of the incremental weights
    np.testing.assert_allclose(conditional_ess(log_w, loglik, lam), float(ess(jnp.asarray(lam * loglik))))
    lik, prior = problem
    for kw, field in (
        ({"n_particles": 1}, "n_particles"),
        ({"ess_target": 1.0}, "ess_target"),
        ({"n_moves": 0}, "n_moves"),
        ({"kernel": "hmc"}, "kernel"),
    ):
        with pytest.raises(ValueError, match=field):
            tempering(jax.random.key(0), lik, prior, **{"n_particles": 10, **kw})
    with pytest.raises(RuntimeError, match="max_stages"):
        tempering(jax.random.key(0), lik, prior, 1000, max_stages=1)


@pytest.mark.slow
def test_cli_resume_continues_interrupted_run(tmp_path, monkeypatch):
    """`twinfer run emps` (adaptive tempering, its default sampler) interrupted after 2 stages, then
    `--resume`, gives the particles of an uninterrupted run with the same seed; a fresh run does not pick
    up the old checkpoint."""
    from typer.testing import CliRunner

    from twinfer.cli import app
    from twinfer.experiments import _pnsmc

    args = ["run", "emps", "--quick", "--out", str(tmp_path)]
    args += ["--set", "n_obs=96", "--set", "n_particles=16", "--set", "tempering_moves=1"]
    args += ["--set", "test_samples=200", "--set", "test_particles=4"]
    runner = CliRunner()
    real = _pnsmc.tempering

    def interrupted(*a, **kw):
        real(*a, **{**kw, "stop_at": 2})
        raise KeyboardInterrupt

    monkeypatch.setattr(_pnsmc, "tempering", interrupted)
    assert runner.invoke(app, args).exit_code == 130
    ckpts = list((tmp_path / ".checkpoints").glob("emps-*/smc.ckpt"))
    assert len(ckpts) == 1
    monkeypatch.setattr(_pnsmc, "tempering", real)
    resumed = runner.invoke(app, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert not ckpts[0].exists()  # removed once the run finished
    assert runner.invoke(app, [*args, "--resume"]).exit_code != 0  # nothing left to resume
    full = runner.invoke(app, args)
    assert full.exit_code == 0, full.output
    runs = sorted(p for p in tmp_path.glob("emps-*") if p.is_dir())
    assert len(runs) == 2
    with np.load(runs[0] / "arrays.npz") as a, np.load(runs[1] / "arrays.npz") as b:
        np.testing.assert_array_equal(a["posterior_theta"], b["posterior_theta"])
        assert a["tempering_lambdas"].size > 2
        np.testing.assert_array_equal(a["tempering_lambdas"], b["tempering_lambdas"])
    # the output-error posterior (a second sampler, checkpointed apart) is the same in both runs too
    metrics = [json.loads((run / "metrics.json").read_text()) for run in runs]
    oe = [k for k in metrics[0] if k.startswith("output_error.posterior.")]
    assert len(oe) == 10 and all(metrics[0][k] == metrics[1][k] for k in oe)
