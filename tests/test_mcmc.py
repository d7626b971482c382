"""NUTS with window adaptation and ArviZ diagnostics against a closed-form Gaussian target."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.infer.mcmc import nuts, summarise, to_inference_data, write_netcdf

MEAN = np.array([1.0, -2.0, 0.5])
COV = np.array([[1.0, 0.8, 0.0], [0.8, 1.0, 0.0], [0.0, 0.0, 0.01]])


def _logdensity(x):
    prec = jnp.linalg.inv(jnp.asarray(COV))
    d = x - jnp.asarray(MEAN)
    return -0.5 * d @ prec @ d


def test_nuts_recovers_gaussian_moments_and_diagnostics(tmp_path):
    """4 chains on a correlated, badly scaled Gaussian: means within 4 Monte-Carlo SEs, covariance within
    10 %, R-hat <= 1.01 and a bulk ESS that is a sizeable fraction of the draws; same key, same draws."""
    init = jnp.zeros((4, 3)) + jnp.arange(4.0)[:, None]
    res = nuts(jax.random.key(0), _logdensity, init, num_warmup=400, num_samples=1000, chunk=500)
    assert res.samples.shape == (4, 1000, 3) and res.divergences == 0
    names = ["a", "b", "c"]
    idata = to_inference_data(res.samples, names, {"sampler": "nuts"})
    summary = summarise(idata, names)
    draws = res.samples.reshape(-1, 3)
    for i, name in enumerate(names):
        mc_se = np.sqrt(COV[i, i] / summary[name]["ess"])
        assert abs(summary[name]["mean"] - MEAN[i]) < 4 * mc_se
        assert summary[name]["rhat"] <= 1.01
        assert summary[name]["ess"] > 400
    np.testing.assert_allclose(np.cov(draws.T), COV, rtol=0.1, atol=0.02)
    assert 0.75 < float(np.mean(res.acceptance)) < 0.99
    assert 1.0 <= res.steps_mean <= 1023 and res.sample_cpu_s > 0
    again = nuts(jax.random.key(0), _logdensity, init, num_warmup=400, num_samples=1000, chunk=500)
    np.testing.assert_array_equal(again.samples, res.samples)
    payload = write_netcdf(idata, tmp_path / "posterior.nc")
    assert payload[:3] in (b"CDF", b"\x89HD")


def test_nuts_errors():
    with pytest.raises(ValueError, match=r"initial: expected shape \(chains, dim\)"):
        nuts(jax.random.key(0), _logdensity, jnp.zeros(3))
    with pytest.raises(ValueError, match="log-density is not finite at chain"):
        nuts(jax.random.key(0), lambda x: jnp.log(x[0]) + 0 * _logdensity(x), -jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"samples: expected shape \(chains, draws, 2\)"):
        to_inference_data(np.zeros((2, 10, 3)), ["a", "b"])


def test_laplace_whitening_finds_the_mode_and_covariance():
    """On a Gaussian the Newton mode is the mean and factor @ factor.T the covariance; on a non-concave
    target it refuses."""
    from twinfer.infer.mcmc import laplace_whitening

    wh = laplace_whitening(_logdensity, jnp.array([5.0, 5.0, 5.0]))
    np.testing.assert_allclose(wh.mode, MEAN, atol=1e-10)
    np.testing.assert_allclose(wh.factor @ wh.factor.T, COV, atol=1e-10)
    # a non-Gaussian target: log-density of log-normal-like shape in one coordinate, mode in closed form
    wh = laplace_whitening(lambda x: -jnp.exp(x[0]) + 2.0 * x[0] - 0.5 * x[1] ** 2, jnp.array([3.0, 1.0]))
    np.testing.assert_allclose(wh.mode, [np.log(2.0), 0.0], atol=1e-10)
    np.testing.assert_allclose(np.diag(wh.factor @ wh.factor.T), [0.5, 1.0], rtol=1e-8)
    with pytest.raises(ValueError, match="expected a negative definite Hessian"):
        laplace_whitening(lambda x: jnp.sum(x**2) - 0.1 * jnp.sum(x**4), jnp.array([0.0, 0.0]))
    with pytest.raises(ValueError, match="not finite at the starting point"):
        laplace_whitening(lambda x: jnp.log(x[0]), jnp.array([-1.0]))


def test_nuts_result_to_estimate_is_the_pooled_draws_posterior():
    """The one-row Estimate of a NUTS run: every chain's draws pooled, their mean, sd and covariance
    (numpy's, ddof 1) as parameter columns at time 0; ``transform`` maps the draws first (log-parameters
    to parameters: the moments of exp(draws), not exp of the moments)."""
    from twinfer.infer.mcmc import NutsResult

    rng = np.random.default_rng(0)
    samples = rng.multivariate_normal(MEAN[:2], COV[:2, :2], size=(3, 400))
    res = NutsResult(samples, np.ones(3), np.full(3, 0.9), 0, 0.0, 0.0)
    pooled = samples.reshape(-1, 2)
    est = res.to_estimate(["k", "c"])
    assert est.state_names == est.parameters == ("k", "c") and est.times.tolist() == [0.0]
    np.testing.assert_allclose(est.means[0], pooled.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(est.covs[0], np.cov(pooled.T), rtol=1e-12)
    np.testing.assert_allclose(est.stds[0], pooled.std(axis=0, ddof=1), rtol=1e-12)
    low, high = est.interval("k")
    assert low < est.means[0, 0] < high and np.isnan(est.loglik)
    physical = res.to_estimate(["k", "c"], transform=np.exp)
    np.testing.assert_allclose(physical.means[0], np.exp(pooled).mean(axis=0), rtol=1e-13)
    assert res.to_estimate().state_names == ("theta[0]", "theta[1]")
    with pytest.raises(ValueError, match=r"NutsResult.to_estimate names: expected 2 names; received 1"):
        res.to_estimate(["k"])
    with pytest.raises(ValueError, match=r"transform: expected \(1200, p\) values"):
        res.to_estimate(transform=lambda d: d[:10])
