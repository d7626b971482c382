"""Library pieces the case modules now call (issue #53 item 4), against independent direct computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.data import Dataset
from twinfer.models import Chain, PeltonParams, SpringNetwork, defects_along, generator_acceleration
from twinfer.models.turbine_grid import line_law
from twinfer.models.turbine_parts import generator_prior
from twinfer.sim import accelerations, measured_inputs


def test_accelerations_equal_the_model_row_by_row():
    """``accelerations`` is ``model.acceleration`` at each row, with the model's parameters by default."""
    chain = Chain([1.0, 2.0], [10.0, 20.0], [0.1, 0.2])
    rng = np.random.default_rng(0)
    xs, us = rng.normal(size=(7, 4)), rng.normal(size=(7, 2))
    got = np.asarray(accelerations(chain, xs, us))
    want = np.stack([np.asarray(chain.acceleration(x, u, chain.params)) for x, u in zip(xs, us, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0.0)
    with pytest.raises(ValueError, match="accelerations states, inputs"):
        accelerations(chain, xs, us[:3])


def test_measured_inputs_are_the_time_and_the_named_outputs():
    """Inputs ``[t, y_b, y_a]`` from the record's own observations; the rest of the record unchanged."""
    times = np.arange(5) * 0.1
    obs = np.arange(10.0).reshape(5, 2)
    data = Dataset(times, obs, output_names=("a", "b"), metadata={"alignment": "held", "seed": 1})
    out = measured_inputs(data, ["b", "a"], ["b_meas", "a_meas"], {"case": "x"})
    np.testing.assert_array_equal(np.asarray(out.inputs), np.stack([times, obs[:, 1], obs[:, 0]], axis=1))
    assert out.input_names == ("t", "b_meas", "a_meas")
    np.testing.assert_array_equal(np.asarray(out.observations), obs)
    assert out.metadata == {"alignment": "held", "seed": 1, "case": "x"}
    with pytest.raises(ValueError, match=r"measured_inputs outputs, names: .*\('c',\)"):
        measured_inputs(data, ["c"], ["c_meas"])


def test_defects_along_equal_the_removed_terms_written_out():
    """Two masses, a spring k* in parallel with k2 and an added mass m* on mass 1 (SI S60-S61 by hand)."""
    net = SpringNetwork(
        [("m1", "mstar"), "m2"],
        [(1, 0, "k1", "c1"), (1, 2, ("k2", "kstar"), "c2")],
        {"m1": 2.0, "mstar": 0.5, "m2": 3.0, "k1": 10.0, "k2": 4.0, "kstar": 1.0, "c1": 0.1, "c2": 0.2},
    )
    rng = np.random.default_rng(1)
    xs, us = rng.normal(size=(4, 4)), rng.normal(size=(4, 2))
    forces, defects = defects_along(
        net, jnp.asarray(xs), jnp.asarray(us), ("kstar", "mstar"), jnp.asarray([2.0, 0.25]), ((1, 2),),
        ("kstar", "mstar"), 1,
    )  # fmt: skip
    x1, x2, v1, v2 = xs.T
    np.testing.assert_allclose(
        np.asarray(forces)[:, 0], (4.0 + 2.0) * (x1 - x2) + 0.2 * (v1 - v2), rtol=1e-13
    )
    a1 = (us[:, 0] - 10.0 * x1 - 0.1 * v1 - (6.0 * (x1 - x2) + 0.2 * (v1 - v2))) / 2.25
    np.testing.assert_allclose(np.asarray(defects)[:, 0], -2.0 * (x1 - x2), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(defects)[:, 1], -0.25 * a1, rtol=1e-13)


def test_generator_prior_is_the_linearised_image_by_finite_differences():
    """``J cov0 J^T`` with the accelerations' Jacobian, against central differences (step 1e-6 of scale)."""
    p = PeltonParams()
    gen0 = jnp.asarray([1e-5, -2e-5, 3e-4, 1e-4])
    args = (2e-6, -1e-6, 1.05 * float(p.omega_rated), 0.3)
    cov0 = np.diag([1e-7, 2e-7, 3e-7, 4e-7])
    a0, cov = generator_prior(p, gen0, *args, cov0)

    def acc(c):
        return np.asarray(jnp.stack(generator_acceleration(p, jnp.asarray(c), *args)))

    np.testing.assert_allclose(np.asarray(a0), acc(gen0), rtol=1e-14)
    jac = np.zeros((2, 4))
    for i in range(4):
        e = np.zeros(4)
        e[i] = 1e-6 * max(abs(float(gen0[i])), 1e-6)
        jac[:, i] = (acc(np.asarray(gen0) + e) - acc(np.asarray(gen0) - e)) / (2 * e[i])
    lift = np.vstack([np.eye(4), jac])
    np.testing.assert_allclose(cov, lift @ cov0 @ lift.T, rtol=1e-6, atol=1e-12 * np.abs(cov).max())


def test_line_law_sums_to_the_power_inflow():
    """``sum_j K_ij sin(delta_j - delta_i)`` (S146) from the per-line law."""
    k_row, delta = np.array([1.5, 0.0, 2.5]), np.array([0.1, -0.2, 0.4])
    total = sum(float(line_law(delta[j], 0.05, k_row[j])) for j in range(3))
    assert total == pytest.approx(float(np.sum(k_row * np.sin(delta - 0.05))), rel=1e-14)
    assert jax.numpy.ndim(line_law(jnp.zeros(3), jnp.zeros(3), 1.0)) == 1
