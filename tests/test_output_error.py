"""The output-error likelihood: closed-form log-likelihood, alignment with the particle simulator, the
posterior of adaptive tempering against a grid, and named errors for bad data."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from twinfer.infer.smc import OutputErrorLikelihood, TransformedNormalPrior, history_loglik, tempering
from twinfer.models import Chain
from twinfer.sim import fine_input, particle_simulator

N_OBS, H, K_TRUE, NOISE, SUB = 80, 0.04, 5.0, 0.02, 4


def _oscillator(noise_sd=NOISE, **over):
    """x'' = -k x from x(0) = 0.5 at rest: y_k = 0.5 cos(sqrt(k) k H) + noise; k unknown (over: fields)."""
    model = Chain([1.0], [K_TRUE], [0.0], forced_dofs=[1], outputs=["x1"])
    ts = H * np.arange(N_OBS)
    ys = 0.5 * np.cos(np.sqrt(K_TRUE) * ts) + NOISE * np.random.default_rng(1).normal(size=N_OBS)
    fields = dict(
        model=model,
        base_params=model.params,
        names=("k1",),
        x0=jnp.array([0.5, 0.0]),
        us=jnp.zeros((N_OBS * SUB, 1)),
        ys=jnp.asarray(ys)[:, None],
        dt=H / SUB,
        substeps=SUB,
        noise_sd=noise_sd,
    )
    return OutputErrorLikelihood(**{**fields, **over}), ts, ys


def test_loglik_is_the_gaussian_density_of_the_closed_form_simulation():
    """With sigma given or estimated, the summed increments equal sum_k log N(y_k; 0.5 cos(w t_k), s^2)
    to the RK4 error (steps of 0.01 s, w = sqrt(k))."""
    fixed, ts, ys = _oscillator()
    free, _, _ = _oscillator(noise_sd=None)
    prior = TransformedNormalPrior.from_spec(
        {"k1": ("lognormal", 4.0, 0.3), "sigma": ("lognormal", 0.02, 1.0)}
    )
    thetas = np.array([[5.0, 0.02], [4.2, 0.05], [6.5, 0.01]])
    ll_free = history_loglik(free, prior, thetas, N_OBS)
    ll_fixed = history_loglik(
        fixed, TransformedNormalPrior.from_spec({"k1": ("lognormal", 4.0, 0.3)}), thetas[:, :1], N_OBS
    )
    for i, (k, s) in enumerate(thetas):
        exact = 0.5 * np.cos(np.sqrt(k) * ts)
        np.testing.assert_allclose(ll_free[i], norm.logpdf(ys, exact, s).sum(), rtol=1e-6)
        np.testing.assert_allclose(ll_fixed[i], norm.logpdf(ys, exact, NOISE).sum(), rtol=1e-6)
    assert ll_fixed[0] > ll_fixed[1] and ll_fixed[0] > ll_fixed[2]  # the truth scores best


def test_alignment_with_the_particle_simulator_under_a_held_input():
    """A forced, damped chain: the likelihood scores exactly the outputs of particle_simulator for the same
    fine inputs (sample k's input held over (t_k, t_k+1])."""
    model = Chain([2.0, 1.0], [30.0, 10.0], [0.4, 0.2], forced_dofs=[2], outputs=["x2"])
    rng = np.random.default_rng(3)
    n, sub, dt = 120, 3, 0.01
    u = fine_input(np.sin(0.2 * np.arange(n)) + 0.3 * rng.normal(size=n), sub, "zoh")
    x0 = jnp.array([0.01, -0.02, 0.0, 0.1])
    names = ("k1", "c2")
    thetas = np.array([[30.0, 0.2], [25.0, 0.5]])
    sims = particle_simulator(model, model.params, names, x0, u, dt / sub, sub, 0)(thetas)
    ys = sims[0] + 1e-3 * rng.normal(size=n)
    lik = OutputErrorLikelihood(
        model, model.params, names, x0, jnp.asarray(u), jnp.asarray(ys)[:, None], dt / sub, sub
    )
    prior = TransformedNormalPrior.from_spec(
        {"k1": ("lognormal", 30.0, 0.5), "c2": ("lognormal", 0.3, 0.5), "sigma": ("lognormal", 1e-3, 1.0)}
    )
    theta_s = np.column_stack([thetas, [1e-3, 2e-3]])
    ll = history_loglik(lik, prior, theta_s, n)
    ref = [norm.logpdf(ys, sims[i], theta_s[i, 2]).sum() for i in range(2)]
    np.testing.assert_allclose(ll, ref, rtol=1e-10)


def test_tempering_gives_the_grid_posterior_of_k():
    """Adaptive tempering on the output-error likelihood: mean and sd of k within 5 % of a grid posterior."""
    lik, _, _ = _oscillator()
    prior = TransformedNormalPrior.from_spec({"k1": ("lognormal", 4.0, 0.3)})
    zs = np.linspace(np.log(4.5), np.log(5.5), 2001)
    ll = history_loglik(lik, prior, np.exp(zs)[:, None], N_OBS)
    logp = ll + np.asarray(prior.log_density(jnp.asarray(zs)[:, None]))
    w = np.exp(logp - logp.max())
    w /= w.sum()
    k = np.exp(zs)
    grid_mean = np.sum(w * k)
    grid_sd = np.sqrt(np.sum(w * (k - grid_mean) ** 2))
    res = tempering(jax.random.key(0), lik, prior, 500, n_moves=3)
    wt = np.exp(res.log_w - res.log_w.max())
    wt /= wt.sum()
    mean = np.sum(wt * res.theta[:, 0])
    sd = np.sqrt(np.sum(wt * (res.theta[:, 0] - mean) ** 2))
    assert abs(mean - grid_mean) < 0.1 * grid_sd, (mean, grid_mean, grid_sd)
    assert abs(sd / grid_sd - 1) < 0.1, (sd, grid_sd)
    assert abs(grid_mean - K_TRUE) < 3 * grid_sd


def test_named_errors_for_bad_data():
    _, _, ys = _oscillator()
    with pytest.raises(ValueError, match=r"us: expected shape \(320, 1\).*received \(80, 1\)"):
        _oscillator(us=jnp.zeros((N_OBS, 1)))
    with pytest.raises(ValueError, match=r"ys: expected shape \(T, 1\).*received \(80,\)"):
        _oscillator(ys=jnp.asarray(ys))
    bad = np.array(ys)
    bad[7] = np.nan
    with pytest.raises(ValueError, match=r"ys: expected finite values; received a non-finite value at row 7"):
        _oscillator(ys=jnp.asarray(bad)[:, None])
    with pytest.raises(ValueError, match=r"noise_sd: expected a finite number > 0 or None; received -1"):
        _oscillator(noise_sd=-1.0)
    with pytest.raises(ValueError, match=r"outputs: expected indices in \[0, 1\); received \(2,\)"):
        _oscillator(outputs=(2,))
    with pytest.raises(ValueError, match=r"x0: expected shape \(2,\); received \(3,\)"):
        _oscillator(x0=jnp.zeros(3))
    with pytest.raises(ValueError, match=r"substeps: expected an integer >= 1; received 0"):
        _oscillator(substeps=0)
