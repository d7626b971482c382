"""The maths moved out of the case modules (issue #53 item 4), against independent direct computations."""

import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.infer.smc import equal_weight_draw, normalised_weights, weighted_moments, weighted_quantiles
from twinfer.learn import duffing_equation_error_fit, gain_fit, output_error_fit
from twinfer.sim import rk4_step, simulate_batch


def test_weighted_moments_and_quantiles_equal_the_textbook_sums():
    """Weighted mean and sd are sum w x and sqrt(sum w (x - m)^2); equal weights give the plain ones."""
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(200, 3))
    log_w = rng.normal(size=200)
    w = np.exp(log_w) / np.exp(log_w).sum()
    mean, sd = weighted_moments(theta, log_w)
    np.testing.assert_allclose(mean, w @ theta, rtol=1e-12)
    np.testing.assert_allclose(sd, np.sqrt(w @ (theta - w @ theta) ** 2), rtol=1e-12)
    lo, hi = weighted_quantiles(theta, np.zeros(200), (0.0, 1.0))
    np.testing.assert_array_equal(lo, theta.min(axis=0))
    np.testing.assert_array_equal(hi, theta.max(axis=0))
    draw = equal_weight_draw(theta, np.where(np.arange(200) == 7, 0.0, -np.inf), 5, 1)
    np.testing.assert_array_equal(draw, np.repeat(theta[7:8], 5, axis=0))
    with pytest.raises(ValueError, match="log-weights"):
        normalised_weights(np.full(3, -np.inf))


def test_least_squares_fits_recover_the_generating_parameters():
    """Noise-free data of a model in the fitted class are fitted exactly by both criteria."""
    t = np.linspace(0.0, 1.0, 50)

    def simulate(theta: np.ndarray) -> np.ndarray:
        return theta[:, :1] * np.exp(-theta[:, 1:2] * t[None])

    rmse, fit = output_error_fit(
        simulate, simulate(np.array([[2.0, 3.0]]))[0], np.array([1.0, 1.0]), [True, True]
    )
    assert rmse < 1e-8
    np.testing.assert_allclose(fit, [2.0, 3.0], rtol=1e-6)
    h = 1e-3
    t_y = np.arange(400) * h
    y = np.sin(7.0 * t_y) + 0.5 * np.sin(19.0 * t_y) + 0.3
    v = (y[2:] - y[:-2]) / (2 * h)
    a = (y[2:] - 2 * y[1:-1] + y[:-2]) / h**2
    u = np.zeros_like(y)
    u[1:-1] = 2.0 * a + 0.5 * v + 3.0 * y[1:-1] + 4.0 * y[1:-1] ** 3
    np.testing.assert_allclose(duffing_equation_error_fit(u, y, h), [2.0, 0.5, 3.0, 4.0], rtol=1e-8)
    assert gain_fit(np.array([1.0, 2.0]), np.array([3.0, 6.0])) == pytest.approx(3.0)


def _decay(p, t, x, u):
    return -p * x + u


def test_simulate_batch_equals_a_python_loop_of_rk4_steps():
    """Each system of the batch equals its own loop of RK4 substeps under its held inputs."""
    params = jnp.asarray([0.5, 2.0])
    x0 = jnp.asarray([[1.0], [2.0]])
    inputs = jnp.asarray(np.random.default_rng(1).normal(size=(2, 6, 1)))
    states = np.asarray(simulate_batch(_decay, rk4_step, params, x0, inputs, 0.1, 3))
    for i in range(2):
        x = x0[i]
        for k in range(6):
            for j in range(3):
                f = lambda t, xx, p=params[i], u=inputs[i, k]: _decay(p, t, xx, u)  # noqa: E731
                x = rk4_step(f, k * 0.1 + j * 0.1 / 3, x, 0.1 / 3)
            np.testing.assert_allclose(states[i, k + 1], np.asarray(x), rtol=1e-13)
    assert states.shape == (2, 7, 1)
