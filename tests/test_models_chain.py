import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.models import Chain, get_param, set_params, spring_damper_law


def chain4() -> Chain:
    return Chain([500.0] * 4, [5e4] * 4, [300.0] * 4)


def test_chain4_matrices_match_s21():
    """K and C of the 4-DOF chain have the pattern of eq. (S21)."""
    c = Chain([500.0] * 4, [1.0, 2.0, 3.0, 4.0], [300.0] * 4)
    expected = np.array([[3, -2, 0, 0], [-2, 5, -3, 0], [0, -3, 7, -4], [0, 0, -4, 4]], float)
    np.testing.assert_allclose(c.stiffness_matrix(c.params), expected)


def test_linear_matrices_agree_with_vector_field_and_output():
    """The (A, B, C, D) form reproduces vector_field and output for a linear chain."""
    c = Chain([500.0] * 4, [5e4] * 4, [300.0] * 4, forced_dofs=[1, 3], outputs=["a1", "x2", "v4"])
    a, b, cm, d = c.linear_matrices(c.params)
    x = jnp.linspace(-0.1, 0.2, 8)
    u = jnp.array([3.0, -1.0])
    np.testing.assert_allclose(a @ x + b @ u, c.vector_field(0.0, x, u, c.params), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(cm @ x + d @ u, c.output(0.0, x, u, c.params), rtol=1e-12, atol=1e-9)


def test_duffing_and_vdp_forces():
    """Connection forces include kappa r^3 and mu (r^2 - 1) r' (specs/pinn.md 1.1)."""
    c = Chain(10.0, 15.0, 1.0, cubic_stiffness=100.0, vdp_damping=0.75, n_dof=2)
    assert c.linear_matrices(c.params) is None and not c.is_linear
    x = jnp.array([0.1, 0.3, 0.2, -0.1])
    r = np.array([0.1, 0.2])
    dr = np.array([0.2, -0.3])
    f = 15 * r + 1 * dr + 100 * r**3 + 0.75 * (r**2 - 1) * dr
    np.testing.assert_allclose(c.connection_forces(x, c.params), f, rtol=1e-12)
    acc = np.array([-f[0] + f[1], -f[1]]) / 10.0
    np.testing.assert_allclose(c.acceleration(x, jnp.zeros(2), c.params), acc, rtol=1e-12)


def test_param_names_and_access():
    c = chain4()
    assert c.param_names[:5] == ("m1", "m2", "m3", "m4", "k1")
    p = set_params(c.params, {"k4": 3e4})
    assert float(get_param(p, "k4")) == 3e4 and float(get_param(c.params, "k4")) == 5e4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"outputs": ["a5"]}, "outputs: expected names like 'a1'.*received 'a5'"),
        ({"outputs": ["q1"]}, "received 'q1'"),
        ({"forced_dofs": [0]}, "forced_dofs: expected DOFs in 1..4; received 0"),
    ],
)
def test_chain_rejects_bad_configuration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Chain([500.0] * 4, [5e4] * 4, [300.0] * 4, **kwargs)


def test_chain_rejects_bad_values():
    with pytest.raises(ValueError, match="stiffness: expected 4 values"):
        Chain(500.0, [5e4] * 3, 300.0, n_dof=4)
    with pytest.raises(ValueError, match="one length .*; received mass 4, stiffness 5, damping 4"):
        Chain([500.0] * 4, [5e4] * 5, [300.0] * 4)
    with pytest.raises(ValueError, match="mass: expected positive"):
        Chain([500.0, -1.0, 500.0, 500.0], 5e4, 300.0)
    with pytest.raises(KeyError, match="Unknown parameter 'k9'"):
        get_param(chain4().params, "k9")


def test_segments_with_their_cut_forces_as_inputs_are_the_whole_chain():
    """Each segment's equation of motion, forced additionally by the cut connections' forces (eq. S24,
    the law a message carries), is the whole chain's, row by row (S20 split at a cut, S22)."""
    c = Chain([500.0, 400.0, 300.0, 200.0], [5e4, 4e4, 3e4, 2e4], [300.0, 200.0, 100.0, 50.0],
              cubic_stiffness=[1e5, 2e5, 3e5, 4e5], outputs=["a1", "x2", "v3", "a4"])  # fmt: skip
    x = jnp.array([0.01, -0.02, 0.015, 0.03, 0.1, -0.2, 0.3, -0.1])
    u = jnp.array([10.0, -20.0, 5.0, 7.0])
    whole = np.asarray(c.vector_field(0.0, x, u, c.params))
    s1, s2 = c.segment(1, 2), c.segment(3, 4)
    assert s1.outputs == ("a1", "x2") and s2.outputs == ("v1", "a2") and s2.input_names == ("f1", "f2")
    np.testing.assert_array_equal(np.asarray(s2.params["k"]), [0.0, 2e4])  # connection 3 is cut
    np.testing.assert_array_equal(np.asarray(s1.params["k"]), [5e4, 4e4])  # the wall connection stays
    f3 = float(c.connection_forces(x, c.params)[2])  # what connection 3 carries to mass 2 (and -f3 to 3)
    linear = Chain(c.params["m"], c.params["k"], c.params["c"])
    law = spring_damper_law(x[jnp.array([2, 6])], x[jnp.array([1, 5])], jnp.array([3e4, 100.0]))  # 3 -> 2
    assert float(law[0]) == float(linear.connection_forces(x, linear.params)[2])
    x1, x2 = x[jnp.array([0, 1, 4, 5])], x[jnp.array([2, 3, 6, 7])]
    d1 = np.asarray(s1.vector_field(0.0, x1, u[:2] + jnp.array([0.0, f3]), s1.params))
    d2 = np.asarray(s2.vector_field(0.0, x2, u[2:] + jnp.array([-f3, 0.0]), s2.params))
    np.testing.assert_allclose(d1, whole[[0, 1, 4, 5]], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(d2, whole[[2, 3, 6, 7]], rtol=1e-13, atol=1e-15)
    silent = Chain(1.0, 1.0, 1.0, n_dof=2, outputs=())
    assert silent.output(0.0, jnp.zeros(4), jnp.zeros(2), silent.params).shape == (0,)
    mats = silent.linear_matrices(silent.params)
    assert mats is not None and mats[2].shape == (0, 4)
    with pytest.raises(ValueError, match=r"segment: expected 1 <= first <= last <= 4; received first=3"):
        c.segment(3, 2)


def test_set_param_vector_equals_set_params_one_name_at_a_time():
    """Whole groups in order, a part of a group out of order, and a scalar group: as set_params."""
    from twinfer.models import set_param_vector

    params = {"m": jnp.arange(1.0, 5.0), "k": jnp.arange(10.0, 14.0), "sigma": jnp.asarray(0.5)}
    names = ("k1", "k2", "k3", "k4", "m3", "m1", "sigma")
    values = jnp.asarray([20.0, 21.0, 22.0, 23.0, 30.0, 31.0, 0.7])
    fast = set_param_vector(params, names, values)
    slow = set_params(params, {name: values[i] for i, name in enumerate(names)})
    assert fast.keys() == slow.keys()
    for group in fast:
        np.testing.assert_array_equal(np.asarray(fast[group]), np.asarray(slow[group]))
    with pytest.raises(ValueError, match=r"values: expected shape \(2,\), one per name; received \(3,\)"):
        set_param_vector(params, ("k1", "k2"), jnp.zeros(3))
    with pytest.raises(KeyError, match="'q1'"):
        set_param_vector(params, ("q1",), jnp.zeros(1))
