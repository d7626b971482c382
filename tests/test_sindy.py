"""SINDy interface law: STLSQ recovers a known sparse law; reconstruction; law/reaction consistency."""

import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.learn import fit_interface_law, library_law, library_reaction, reconstruct_relative


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


def test_reconstruction_of_a_sinusoid():
    dt = 1e-3
    t = dt * np.arange(20000)
    w = 2 * np.pi * 1.5
    x = 1e-3 * np.sin(w * t)
    acc = -(w**2) * x
    dx, dv = reconstruct_relative(acc, dt)
    inner = slice(2000, -2000)
    # the cubic detrend leaks about amplitude / cycles (1e-3 / 30) of the signal into the trend
    np.testing.assert_allclose(dx[inner], x[inner], atol=5e-5)
    np.testing.assert_allclose(dv[inner], 1e-3 * w * np.cos(w * t)[inner], atol=5e-5 * w)
    assert np.corrcoef(dx, x)[0, 1] > 0.998


def test_reaction_is_the_opposite_force():
    xi = jnp.array([5e4, 300.0, -2e8, 7e3, 1e4, 2.0])
    a, b = jnp.array([1e-3, 2e-2]), jnp.array([-5e-4, 1e-2])
    np.testing.assert_allclose(library_reaction(b, a, xi), -library_law(a, b, xi), rtol=1e-14)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="fit_interface_law: expected equal 1-D shapes"):
        fit_interface_law(np.zeros(10), np.zeros(11), np.zeros(10))
    with pytest.raises(ValueError, match="reconstruct_relative detrend_degree"):
        reconstruct_relative(np.zeros(100), 1e-3, detrend_degree=20)
