"""SpringNetwork: masses, springs and dampers in any topology, checked against Chain and closed forms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import expm

from twinfer.models import Chain, Link, SpringNetwork
from twinfer.sim import simulate_dataset

M, K, C = [500.0, 400.0, 300.0], [5e4, 4e4, 3e4], [300.0, 200.0, 100.0]


def _values(**extra):
    base = {f"{g}{i + 1}": v[i] for g, v in (("m", M), ("k", K), ("c", C)) for i in range(3)}
    return {**base, **extra}


def test_a_chain_shaped_network_is_the_chain():
    """Wall - 1 - 2 - 3 as links gives Chain's vector field, outputs and state-space matrices exactly."""
    chain = Chain(M, K, C, outputs=("a1", "v2", "x3"))
    links = [Link(1, 0, ("k1",), ("c1",)), (1, 2, "k2", "c2"), (2, 3, "k3", "c3")]
    net = SpringNetwork(["m1", "m2", "m3"], links, _values(), outputs=("a1", "v2", "x3"))
    x = jnp.asarray(np.random.default_rng(0).normal(size=6))
    u = jnp.asarray([10.0, -20.0, 30.0])
    np.testing.assert_array_equal(
        chain.vector_field(0, x, u, chain.params), net.vector_field(0, x, u, net.params)
    )
    np.testing.assert_array_equal(chain.output(0, x, u, chain.params), net.output(0, x, u, net.params))
    for a, b in zip(chain.linear_matrices(chain.params), net.linear_matrices(net.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert net.connections == chain.connections and net.param_names[:3] == ("m1", "m2", "m3")


def test_parallel_springs_ground_links_and_added_mass():
    """Mass 2 carries m2 + mstar; k2 and kstar act in parallel; mass 3 is tied to the ground: the
    accelerations are M^-1 (f - K x - C v) of the hand-assembled matrices, and every parameter's
    removed terms (parameter_forces) are the change in M a when that parameter is set to zero."""
    values = _values(mstar=50.0, kstar=1e4)
    links = [(1, 0, "k1", "c1"), (1, 2, ("k2", "kstar"), "c2"), (3, 0, "k3", "c3"), (2, 3, (), ())]
    net = SpringNetwork(["m1", ("m2", "mstar"), "m3"], links, values, forced_dofs=[2])
    ks = [5e4, 4e4 + 1e4, 3e4]
    stiff = np.array([[ks[0] + ks[1], -ks[1], 0], [-ks[1], ks[1], 0], [0, 0, ks[2]]])
    damp = np.array([[500.0, -200, 0], [-200, 200, 0], [0, 0, 100]])
    mass = np.diag([500.0, 450.0, 300.0])
    x = np.random.default_rng(1).normal(size=6)
    u = np.array([7.0])
    expected = np.linalg.solve(mass, np.array([0, 7.0, 0]) - stiff @ x[:3] - damp @ x[3:])
    np.testing.assert_allclose(
        net.acceleration(jnp.asarray(x), jnp.asarray(u), net.params), expected, rtol=1e-12
    )
    for name in ("kstar", "k1", "c2", "mstar"):
        # M a = f - K x - C v: with the parameter at zero, m0 a0 lacks exactly its terms' force
        removed = net.with_params(**{name: 0.0})
        acc0 = np.asarray(removed.acceleration(jnp.asarray(x), jnp.asarray(u), removed.params))
        m0 = np.asarray(removed.mass_vector(removed.params))
        np.testing.assert_allclose(
            net.parameter_forces(name, jnp.asarray(x), jnp.asarray(u), net.params),
            m0 * (expected - acc0),
            rtol=1e-9,
            atol=1e-9,
        )
    assert net.connections[0].a == ("x1", "v1") and len(net.connections) == 2  # ground links are not cuts


def test_exact_simulation_is_the_matrix_exponential():
    """simulate_dataset on a network (linear) is the zero-order-hold matrix exponential of its A, B."""
    net = SpringNetwork(
        ["m1", "m2"],
        [(1, 0, "k1", "c1"), (1, 2, "k2", "c2")],
        {"m1": 500.0, "m2": 400.0, "k1": 5e4, "k2": 4e4, "c1": 300.0, "c2": 200.0},
        forced_dofs=[2],
        outputs=("x2",),
    )
    dt, u = 1e-3, np.ones((11, 1)) * 100.0
    data = simulate_dataset(net, u, dt, 1e-9, jax.random.key(0))
    a, b, _, _ = (np.asarray(m) for m in net.linear_matrices(net.params))
    big = expm(np.block([[a, b], [np.zeros((1, 5))]]) * dt)
    x = np.zeros(4)
    for _ in range(10):
        x = big[:4, :4] @ x + big[:4, 4:] @ u[0]
    np.testing.assert_allclose(np.asarray(data.truth_states)[-1], x, rtol=1e-9, atol=1e-15)


def test_bad_networks_are_named():
    with pytest.raises(ValueError, match=r"links\[0\]: expected masses i in 1..2"):
        SpringNetwork(["m1", "m2"], [(3, 0, "k1", "c1")], {"m1": 1.0, "m2": 1.0, "k1": 1.0, "c1": 1.0})
    with pytest.raises(ValueError, match=r"missing \['c1'\], unused \['k9'\]"):
        SpringNetwork(["m1"], [(1, 0, "k1", "c1")], {"m1": 1.0, "k1": 1.0, "k9": 2.0})
    with pytest.raises(ValueError, match="run k1..kn without a gap"):
        SpringNetwork(["m"], [(1, 0, "k2", ())], {"m": 1.0, "k2": 1.0})
    with pytest.raises(ValueError, match=r"SpringNetwork c1: expected a stiffness or damping >= 0"):
        SpringNetwork(["m"], [(1, 0, "k", "c1")], {"m": 1.0, "k": 1.0, "c1": -2.0})
    with pytest.raises(ValueError, match=r"mass 1 \(m \+ mstar\): expected > 0"):
        SpringNetwork([("m", "mstar")], [(1, 0, "k", ())], {"m": 1.0, "mstar": -1.0, "k": 1.0})


def test_chain6_config_refuses_a_record_longer_than_el_centro():
    """The El Centro record is 50 s: a longer chain6 run is a named config error, not a short array."""
    import pydantic

    from twinfer.experiments import get_case

    config_type = get_case("chain6").config_type
    with pytest.raises(pydantic.ValidationError, match="expected at most 50 s .*received 60"):
        config_type(t_end=60.0)
