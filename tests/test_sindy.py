"""SINDy interface law: STLSQ recovers a known sparse law; reconstruction; law/reaction consistency."""

import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.learn import fit_interface_law, highpass, library_law, library_reaction, reconstruct_relative


def test_stlsq_recovers_sparse_law_and_prunes_absent_terms():
    rng = np.random.default_rng(0)
    dx = 2e-3 * rng.standard_normal(4000)
    dv = 2e-2 * rng.standard_normal(4000)
    xi_true = np.array([5e4, 300.0, -2e8, 0.0, 0.0, 0.0])
    force = xi_true[0] * dx + xi_true[1] * dv + xi_true[2] * dx**3 + 1e-3 * rng.standard_normal(4000)
    fit = fit_interface_law(dx, dv, force, threshold=0.01)
    np.testing.assert_allclose(fit.xi[:3], xi_true[:3], rtol=1e-3)
    assert np.all(fit.xi[3:] == 0.0)
    assert fit.r2 > 0.999


def test_reconstruction_equals_the_filtered_truth_whatever_the_initial_velocity():
    dt = 1e-3
    t = dt * np.arange(20000)
    w = 2 * np.pi * 1.5
    x = 1e-3 * np.sin(w * t) + 2e-4 * np.cos(2.3 * w * t)  # v(0) = 1e-3 w: the raw integral drifts
    v = 1e-3 * w * np.cos(w * t) - 2e-4 * 2.3 * w * np.sin(2.3 * w * t)
    acc = -1e-3 * w**2 * np.sin(w * t) - 2e-4 * (2.3 * w) ** 2 * np.cos(2.3 * w * t)
    dx, dv = reconstruct_relative(acc, dt)
    # the drift (a line in x, a constant in v) is annihilated exactly; what remains is the trapezoid error
    np.testing.assert_allclose(dx, highpass(x, dt), atol=1e-7)
    np.testing.assert_allclose(dv, highpass(v, dt), atol=1e-6)
    # and the zero-phase filter passes the 1.5 Hz and 3.45 Hz content untouched away from the ends
    inner = slice(5000, -5000)
    np.testing.assert_allclose(dx[inner], x[inner], atol=2e-5)


def test_consistent_filtering_recovers_the_weak_damping_of_a_band_limited_law():
    # a lightly damped resonance plus slow content that the high-pass removes from the regressors
    rng = np.random.default_rng(1)
    dt, n = 1e-3, 20000
    t = dt * np.arange(n)
    amp, freq, phase = rng.uniform(0, 1, (3, 12)) * np.array([[2e-3], [3.0], [6.0]])
    x = np.sin(2 * np.pi * freq[:, None] * t + phase[:, None]).T @ amp
    x = x + 1e-3 * np.sin(2 * np.pi * 0.05 * t)
    v = np.gradient(x, dt)
    force = 5e4 * x + 300.0 * v
    acc = np.gradient(v, dt)
    dx, dv = reconstruct_relative(acc, dt)
    raw = fit_interface_law(dx, dv, force)
    fit = fit_interface_law(dx, dv, highpass(force, dt))
    np.testing.assert_allclose(fit.xi[:2], [5e4, 300.0], rtol=0.005)
    assert np.all(fit.xi[2:] == 0.0)
    assert abs(raw.xi[1] - 300.0) > 3 * abs(fit.xi[1] - 300.0)  # the unfiltered target biases c


def test_reaction_is_the_opposite_force():
    xi = jnp.array([5e4, 300.0, -2e8, 7e3, 1e4, 2.0])
    a, b = jnp.array([1e-3, 2e-2]), jnp.array([-5e-4, 1e-2])
    np.testing.assert_allclose(library_reaction(b, a, xi), -library_law(a, b, xi), rtol=1e-14)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="fit_interface_law: expected equal 1-D shapes"):
        fit_interface_law(np.zeros(10), np.zeros(11), np.zeros(10))
    with pytest.raises(ValueError, match="highpass cutoff_hz"):
        reconstruct_relative(np.zeros(100), 1e-3, cutoff_hz=600.0)
