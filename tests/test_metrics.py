"""Tests of twinfer.metrics against hand-computed cases and independent references (scipy)."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import multivariate_normal, norm

from twinfer import metrics as M


# -- RMSE / NRMSE ----------------------------------------------------------------------------------
def test_rmse_hand_computed():
    """Pooled RMSE over [1, 2, 3, 4] errors is sqrt(30 / 4); per-column along axis 0."""
    est = np.array([[1.0, 2.0], [3.0, 4.0]])
    truth = np.zeros((2, 2))
    assert M.rmse(est, truth) == pytest.approx(math.sqrt(30 / 4))
    np.testing.assert_allclose(M.rmse(est, truth, axis=0), [math.sqrt(5), math.sqrt(10)])
    assert isinstance(M.rmse(est, truth), float)
    assert M.rmse(jnp.asarray(est), list(truth.tolist())) == pytest.approx(math.sqrt(7.5))


def test_nrmse_hand_computed_and_zero_range_rule():
    """Column 0: RMSE 1 / range 4; column 1 is constant, so its denominator is 1.0 ([REPO])."""
    truth = np.array([[0.0, 5.0], [4.0, 5.0], [2.0, 5.0]])
    est = truth + np.array([[1.0, 2.0], [-1.0, 2.0], [1.0, 2.0]])
    np.testing.assert_allclose(M.nrmse(est, truth, per_variable=True), [0.25, 2.0])
    assert M.nrmse(est, truth) == pytest.approx(1.125)
    assert M.nrmse(est[:, 0], truth[:, 0]) == pytest.approx(0.25)


def test_nrmse_pooled_one_error_over_one_range():
    """Errors [1, 2, -1, 2, 1, 2] pool to sqrt(15 / 6); the range is over every entry (0 to 5); a constant
    truth divides by 1.0; angles wrap both the errors and the truth whose range is taken."""
    truth = np.array([[0.0, 5.0], [4.0, 5.0], [2.0, 5.0]])
    est = truth + np.array([[1.0, 2.0], [-1.0, 2.0], [1.0, 2.0]])
    assert M.nrmse_pooled(est, truth) == pytest.approx(math.sqrt(15 / 6) / 5.0)
    assert M.nrmse_pooled(est[:, 1], truth[:, 1]) == pytest.approx(2.0)
    # a phase that ran to 20 rad: wrapped it spans [-pi, pi) at most, and 2 pi + 0.1 errs by 0.1
    phase = np.linspace(0.0, 20.0, 201)
    wrapped = np.mod(phase + np.pi, 2 * np.pi) - np.pi
    got = M.nrmse_pooled(phase + 2 * np.pi + 0.1, phase, period=2 * np.pi)
    assert got == pytest.approx(0.1 / (wrapped.max() - wrapped.min()), rel=1e-12)
    with pytest.raises(ValueError, match="nrmse_pooled: expected estimate and truth to have the same shape"):
        M.nrmse_pooled(est, truth[:2])
    with pytest.raises(ValueError, match="nrmse_pooled: expected at least one value"):
        M.nrmse_pooled(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="nrmse_pooled: expected period > 0"):
        M.nrmse_pooled(est, truth, period=-1.0)


def test_nrmse_constant():
    """RMSE of [9, 11] about 10 is 1, divided by |10|; the denominator is 1.0 for a zero true value."""
    assert M.nrmse_constant([9.0, 11.0], 10.0) == pytest.approx(0.1)
    assert M.nrmse_constant([-9.0, -11.0], -10.0) == pytest.approx(0.1)
    assert M.nrmse_constant([1.0, -1.0], 0.0) == pytest.approx(1.0)
    traj = np.array([[9.0, 1.0], [11.0, -1.0]])
    np.testing.assert_allclose(M.nrmse_constant(traj, [10.0, 0.0]), [0.1, 1.0])
    with pytest.raises(ValueError, match=r"nrmse_constant: expected true_value of shape .*\(2, 2\) and"):
        M.nrmse_constant(traj, 10.0)


# -- fitness ---------------------------------------------------------------------------------------
def test_fitness_range_and_eq25_hand_computed():
    """x = [0, 2, 4], x~ = x + [1, -1, 1]: RMSE 1, range 4 -> 75 %; eq. 25: 1 - sqrt(3)/sqrt(8)."""
    truth = np.array([0.0, 2.0, 4.0])
    est = truth + np.array([1.0, -1.0, 1.0])
    assert M.fitness(est, truth) == pytest.approx(75.0)
    assert M.fitness(est, truth, kind="eq25") == pytest.approx((1 - math.sqrt(3 / 8)) * 100)
    both = M.fitness(np.stack([est, truth], 1), np.stack([truth, truth], 1))
    np.testing.assert_allclose(both, [75.0, 100.0])
    np.testing.assert_allclose(
        M.fitness(np.stack([est, truth]), np.stack([truth, truth]), axis=1), [75.0, 100.0]
    )


def test_fitness_errors():
    with pytest.raises(ValueError, match=r"fitness: expected kind 'range' or 'eq25'; received 'eq26'"):
        M.fitness([1.0, 2.0], [1.0, 3.0], kind="eq26")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"fitness: expected a non-constant true signal .* index \(1,\)"):
        M.fitness(np.ones((3, 2)), np.stack([np.arange(3.0), np.zeros(3)], 1))


# -- coverage --------------------------------------------------------------------------------------
def test_coverage_hand_computed_and_z():
    """Errors of 0.5, 1.5, 2.5 sd: z=1 covers 1/3, z=1.959964 covers 2/3, boundary is inclusive."""
    mean = np.array([0.5, 1.5, 2.5])
    std = np.ones(3)
    truth = np.zeros(3)
    assert M.coverage(mean, std, truth, z=1.0) == pytest.approx(1 / 3)
    assert M.coverage(mean, std, truth) == pytest.approx(2 / 3)
    assert M.coverage(mean, std, truth, 0.95) == pytest.approx(2 / 3)
    assert M.coverage([1.0], [1.0], [0.0], z=1.0) == 1.0


def test_coverage_level_maps_to_z():
    """z(0.95) = 1.959964 to 6 digits (the value quoted by the compositional-inference spec)."""
    edge = 1.959964
    assert M.coverage([edge - 1e-6], [1.0], [0.0]) == 1.0
    assert M.coverage([edge + 1e-6], [1.0], [0.0]) == 0.0
    assert M.coverage([norm.ppf(0.9)], [1.0], [0.0], level=0.8) == 1.0


def test_coverage_of_calibrated_data_is_close_to_level():
    """For truth ~ N(mean, std^2) the empirical coverage converges to the level."""
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(20_000, 4))
    std = rng.uniform(0.1, 3.0, size=mean.shape)
    truth = mean + std * rng.normal(size=mean.shape)
    for level in (0.5, 0.68, 0.9, 0.95, 0.99):
        assert M.coverage(mean, std, truth, level) == pytest.approx(level, abs=0.005)
    assert M.coverage(mean, std, truth, z=1.0) == pytest.approx(0.6827, abs=0.005)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(level=1.0), r"coverage: expected level in \(0, 1\); received 1.0"),
        (dict(level=0.0), r"coverage: expected level in \(0, 1\); received 0.0"),
        (dict(z=0.0), r"coverage: expected z > 0; received 0.0"),
        (dict(level=0.9, z=1.0), r"coverage: expected level or z, not both"),
    ],
)
def test_coverage_option_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        M.coverage([0.0], [1.0], [0.0], **kwargs)


# -- shared validation -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: M.rmse(np.zeros(3), np.zeros(4)),
         r"rmse: expected estimate and truth to have the same shape; "
         r"received estimate \(3,\) and truth \(4,\)"),
        (lambda: M.nrmse(np.zeros((3, 2)), np.zeros((3, 1))), r"nrmse: expected estimate and truth"),
        (lambda: M.nrmse(np.zeros(0), np.zeros(0)), r"nrmse: expected at least one time step"),
        (lambda: M.fitness(np.zeros(3), np.zeros(2)), r"fitness: expected estimate and truth"),
        (lambda: M.coverage(np.zeros(3), np.ones(2), np.zeros(3)),
         r"coverage: expected mean and std to have the same shape; received mean \(3,\) and std \(2,\)"),
        (lambda: M.coverage(np.zeros(2), np.array([1.0, 0.0]), np.zeros(2)),
         r"coverage: expected std > 0; received 0.0 at index \(1,\)"),
        (lambda: M.rmse([0.0, np.nan], [0.0, 0.0]),
         r"rmse: expected finite estimate; received nan at index \(1,\)"),
        (lambda: M.gaussian_nll_diag(np.zeros(2), -np.ones(2), np.zeros(2)),
         r"gaussian_nll_diag: expected std > 0; received -1.0"),
        (lambda: M.crps_gaussian(np.zeros(2), np.ones(2), np.zeros(3)),
         r"crps_gaussian: expected mean and truth to have the same shape"),
        (lambda: M.crps_gaussian(np.zeros(2), np.zeros(2), np.zeros(2)), r"crps_gaussian: expected std > 0"),
        (lambda: M.crps_samples(np.zeros((5, 2)), np.zeros(3)),
         r"crps_samples: expected samples of shape \(n,\) \+ truth.shape"),
        (lambda: M.crps_samples(np.zeros((0,)), np.zeros(())), r"crps_samples: expected samples"),
    ],
)  # fmt: skip
def test_validation_errors(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


# -- Gaussian NLL ----------------------------------------------------------------------------------
def random_gaussians(rng, n_steps=50, d=3):
    a = rng.normal(size=(n_steps, d, d))
    cov = a @ np.swapaxes(a, 1, 2) + 0.1 * np.eye(d)
    mean = rng.normal(size=(n_steps, d))
    truth = mean + rng.normal(size=(n_steps, d))
    return mean, cov, truth


def test_gaussian_nll_equals_scipy_logpdf_average():
    """Time-averaged NLL_k equals -mean_k scipy.stats.multivariate_normal.logpdf."""
    mean, cov, truth = random_gaussians(np.random.default_rng(1))
    expected = -np.mean([multivariate_normal.logpdf(truth[k], mean[k], cov[k]) for k in range(50)])
    assert M.gaussian_nll(mean, cov, truth) == pytest.approx(expected, rel=1e-12)
    chol = np.linalg.cholesky(cov)
    assert M.gaussian_nll(mean, chol, truth, chol=True) == pytest.approx(expected, rel=1e-12)
    one = -multivariate_normal.logpdf(truth[0], mean[0], cov[0])
    assert M.gaussian_nll(mean[0], cov[0], truth[0]) == pytest.approx(one, rel=1e-12)


def test_gaussian_nll_hand_computed_1d():
    """N(0, 4) at x = 2: 0.5 (1 + log 4 + log 2 pi)."""
    value = M.gaussian_nll([[0.0]], [[[4.0]]], [[2.0]])
    assert value == pytest.approx(0.5 * (1.0 + math.log(4.0) + math.log(2 * math.pi)))


def test_gaussian_nll_diag_matches_full():
    rng = np.random.default_rng(2)
    mean, truth = rng.normal(size=(30, 4)), rng.normal(size=(30, 4))
    std = rng.uniform(0.5, 2.0, size=(30, 4))
    cov = np.stack([np.diag(s**2) for s in std])
    assert M.gaussian_nll_diag(mean, std, truth) == pytest.approx(M.gaussian_nll(mean, cov, truth), rel=1e-12)
    expected = -np.mean(np.sum(norm.logpdf(truth, mean, std), axis=1))
    assert M.gaussian_nll_diag(mean, std, truth) == pytest.approx(expected, rel=1e-12)


def test_gaussian_nll_not_pd_names_time_index_and_jitter_rescues():
    """A singular PSD covariance fails without jitter (naming index 3) and factorises with it."""
    mean, cov, truth = random_gaussians(np.random.default_rng(3), n_steps=5, d=2)
    cov[3] = np.array([[1.0, 1.0], [1.0, 1.0]])
    truth[3] = mean[3]
    with pytest.raises(ValueError, match=r"non-PD covariance at time index 3 \(pass jitter=True"):
        M.gaussian_nll(mean, cov, truth)
    jittered = M.gaussian_nll(mean, cov, truth, jitter=True)
    assert math.isfinite(jittered)
    cov[3] = -np.eye(2)
    with pytest.raises(ValueError, match=r"time index 3 even with jitter up to 1e-1"):
        M.gaussian_nll(mean, cov, truth, jitter=True)


def test_gaussian_nll_jitter_does_not_change_pd_covariances():
    mean, cov, truth = random_gaussians(np.random.default_rng(4))
    assert M.gaussian_nll(mean, cov, truth, jitter=True) == M.gaussian_nll(mean, cov, truth)


@pytest.mark.parametrize(
    ("cov", "chol", "pattern"),
    [
        (np.zeros((5, 2, 3)), False, r"gaussian_nll: expected cov_or_chol of shape mean.shape \+ \(d,\)"),
        (np.tile([[1.0, 0.5], [0.0, 1.0]], (5, 1, 1)), False,
         r"gaussian_nll: expected symmetric covariances; received .* at time index 0 .*chol=True"),
        (np.tile([[1.0, 0.5], [0.0, 1.0]], (5, 1, 1)), True,
         r"gaussian_nll: expected lower-triangular Cholesky factors .* at time index 0"),
        (np.tile([[1.0, 0.0], [0.0, -1.0]], (5, 1, 1)), True,
         r"gaussian_nll: expected lower-triangular Cholesky factors with positive diagonals"),
    ],
)  # fmt: skip
def test_gaussian_nll_errors(cov, chol, pattern):
    with pytest.raises(ValueError, match=pattern):
        M.gaussian_nll(np.zeros((5, 2)), cov, np.zeros((5, 2)), chol=chol)


# -- CRPS ------------------------------------------------------------------------------------------
def test_crps_gaussian_hand_computed():
    """At the mean of N(0, 1): 2 phi(0) - 1/sqrt(pi) = (sqrt 2 - 1) / sqrt(pi); scales with std."""
    base = (math.sqrt(2.0) - 1.0) / math.sqrt(math.pi)
    assert M.crps_gaussian([0.0], [1.0], [0.0]) == pytest.approx(base)
    assert M.crps_gaussian([1.0], [3.0], [1.0]) == pytest.approx(3 * base)


def test_crps_samples_hand_computed():
    """Samples {0, 2} at y = 0: E|X - y| = 1, E|X - X'| = 1 (pairs 0, 2, 2, 0 over 4) -> 0.5."""
    assert M.crps_samples([0.0, 2.0], 0.0) == pytest.approx(0.5)
    assert M.crps_samples([3.0], 1.0) == pytest.approx(2.0)  # a point forecast: CRPS = MAE


def test_crps_samples_sorted_formula_equals_pairwise():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(40, 3)), rng.normal(size=3)
    pairwise = np.mean(np.abs(x - y), 0) - 0.5 * np.mean(np.abs(x[:, None] - x[None, :]), (0, 1))
    assert M.crps_samples(x, y) == pytest.approx(np.mean(pairwise), rel=1e-12)


def test_crps_gaussian_and_samples_agree_for_many_samples():
    """The sample CRPS of N(mean, std^2) draws converges to the closed form."""
    rng = np.random.default_rng(6)
    mean, std = np.array([0.0, 1.0, -2.0]), np.array([1.0, 0.5, 2.0])
    truth = np.array([0.3, 2.0, -2.5])
    samples = mean + std * rng.normal(size=(200_000, 3))
    assert M.crps_samples(samples, truth) == pytest.approx(M.crps_gaussian(mean, std, truth), rel=5e-3)


def test_wrapped_errors_score_angles_across_the_cut():
    """With period 2 pi a phase estimated at pi - 0.01 for a truth at -pi + 0.01 is 0.02 off, not 6.26."""
    est, truth = np.array([[np.pi - 0.01], [0.5]]), np.array([[-np.pi + 0.01], [0.5]])
    assert M.rmse(est, truth, period=2 * np.pi) == pytest.approx(np.sqrt(0.02**2 / 2), rel=1e-9)
    assert M.rmse(est, truth) == pytest.approx(np.sqrt((2 * np.pi - 0.02) ** 2 / 2), rel=1e-12)
    spread = 0.5 - (-np.pi + 0.01)  # the true signal's own range normalises
    assert M.nrmse(est, truth, period=2 * np.pi) == pytest.approx(np.sqrt(0.02**2 / 2) / spread, rel=1e-9)
    with pytest.raises(ValueError, match="period > 0"):
        M.rmse(est, truth, period=0.0)


def test_nrmse_population_divides_by_the_spread_of_the_true_values():
    """Table S3's Omega NRMSE: each constant's RMSE over time, averaged, over max - min of the truths."""
    truth = np.array([-1.0, 0.0, 1.0])
    est = np.tile(truth, (4, 1)) + np.array([[0.2, 0.0, -0.4]])
    assert M.nrmse_population(est, truth) == pytest.approx((0.2 + 0.0 + 0.4) / 3 / 2.0, rel=1e-12)
    assert M.nrmse_population(np.zeros((3, 2)), np.array([0.5, 0.5])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"nrmse_population: expected estimate_trajectory \(T, p\)"):
        M.nrmse_population(np.zeros(3), truth)


def test_loglog_slope_recovers_a_power_law_and_names_bad_input():
    """values = 3 n^2.5 gives exponent 2.5 exactly; sizes must be distinct and both positive."""
    n = np.array([4.0, 8.0, 16.0, 32.0])
    assert M.loglog_slope(n, 3.0 * n**2.5) == pytest.approx(2.5, abs=1e-12)
    with pytest.raises(ValueError, match="two or more distinct sizes"):
        M.loglog_slope([4.0, 4.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="expected sizes and values > 0"):
        M.loglog_slope([4.0, 8.0], [1.0, 0.0])


def test_moving_average_is_centred_and_edge_padded():
    """Hand-computed 3- and 2-sample windows; a constant and a line (interior) pass unchanged; errors."""
    x = np.array([1.0, 2.0, 4.0, 8.0])
    np.testing.assert_allclose(M.moving_average(x, 3), [4 / 3, 7 / 3, 14 / 3, 20 / 3])
    np.testing.assert_allclose(M.moving_average(x, 2), [1.0, 1.5, 3.0, 6.0])  # [x_{i-1}, x_i]
    np.testing.assert_allclose(M.moving_average(x, 1), x)
    line = np.arange(20.0)
    np.testing.assert_allclose(M.moving_average(line, 5)[2:-2], line[2:-2])
    both = np.stack([np.full(7, 3.0), np.arange(7.0)], axis=1)
    np.testing.assert_allclose(M.moving_average(both, 7, axis=0)[:, 0], 3.0)
    np.testing.assert_allclose(M.moving_average(both.T, 3, axis=1), M.moving_average(both, 3).T)
    for window in (0, 2.0, True):
        with pytest.raises(ValueError, match="window"):
            M.moving_average(x, window)
    with pytest.raises(ValueError, match="finite"):
        M.moving_average([1.0, np.nan], 2)
