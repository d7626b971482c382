"""IBIS sampler: grid-posterior agreement, resampling, acceptance, checkpoint/resume."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.infer.pn import PNFilter, PNLikelihood
from twinfer.infer.smc import TransformedNormalPrior, ess, history_loglik, ibis
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
        x0_std=jnp.zeros(2),
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
    full = ibis(jax.random.key(3), lik, prior, 200, checkpoint=tmp_path / "a.npz", checkpoint_every=10)
    ckpt = tmp_path / "b.npz"
    part = ibis(jax.random.key(3), lik, prior, 200, checkpoint=ckpt, checkpoint_every=10, stop_at=37)
    assert part.ess[40:].sum() == 0
    resumed = ibis(jax.random.key(3), lik, prior, 200, checkpoint=ckpt, checkpoint_every=10)
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


@pytest.mark.slow
def test_cli_resume_continues_interrupted_run(tmp_path, monkeypatch):
    """`twinfer run emps` interrupted after 48 observations, then `--resume`, gives the particles of an
    uninterrupted run with the same seed; a fresh run does not pick up the old checkpoint."""
    from typer.testing import CliRunner

    from twinfer.cli import app
    from twinfer.experiments import _pnsmc

    args = ["run", "emps", "--quick", "--out", str(tmp_path)]
    args += ["--set", "n_obs=96", "--set", "n_particles=16", "--set", "checkpoint_every=16"]
    args += ["--set", "test_samples=200", "--set", "test_particles=4"]
    runner = CliRunner()
    real = _pnsmc.ibis

    def interrupted(*a, **kw):
        real(*a, **{**kw, "stop_at": 48})
        raise KeyboardInterrupt

    monkeypatch.setattr(_pnsmc, "ibis", interrupted)
    assert runner.invoke(app, args).exit_code != 0
    ckpts = list((tmp_path / ".checkpoints").glob("emps-*.npz"))
    assert len(ckpts) == 1
    monkeypatch.setattr(_pnsmc, "ibis", real)
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
        np.testing.assert_array_equal(a["smc_resample_times"], b["smc_resample_times"])
