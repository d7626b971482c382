"""Compositional graph engine: equivalences with plain filters, convergence, tracing, errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.infer.filters import gaussian_filter, run_ukf
from twinfer.infer.gaussian import UnscentedWeights, linear
from twinfer.infer.graph import Graph, Port, Schedule, Subsystem
from twinfer.infer.graph._parts import two_way
from twinfer.infer.graph._run import compile, run
from twinfer.models import Chain, spring_damper_law
from twinfer.sim import discretise, graph_node

DT = 1e-3
PORT_A = {"a": Port(state=(0, 2), slots=(0,))}
PORT_B = {"b": Port(state=(1, 3), slots=(1,))}


@functools.cache
def node(method):
    """One two-mass segment structure (accelerations measured); the numbers are each subsystem's params."""
    return graph_node(Chain(1.0, 0.0, 0.0, n_dof=2), DT, method)


def segment(name, cols, grounded=True, method="euler", estimator="kf", x0=None):
    """Masses 2i+1, 2i+2 of a uniform chain (m 500, k 5e4, c 300): the grounded first one or a later one."""
    first = 1 if grounded else 3
    chain = Chain([500.0] * 4, [5e4] * 4, [300.0] * 4)
    ports = {"left": Port(state=(0, 2), slots=(0,)), "right": Port(state=(1, 3), slots=(1,))}
    return Subsystem(
        name=name,
        transition=node(method).transition,
        output=node(method).output,
        params=chain.segment(first, first + 1).params,
        x0=jnp.zeros(4) if x0 is None else jnp.asarray(x0),
        P0=1e-4 * jnp.eye(4),
        Q=1e-10 * jnp.eye(4),
        R=1e-2 * jnp.eye(2),
        inputs=cols,
        outputs=cols,
        ports=ports,
        n_msg=2,
        estimator=estimator,
    )


def chain_graph(n_seg=2, estimator="kf", method="euler", kind="deterministic", name="chain"):
    subs = [
        segment(f"S{i + 1}", (2 * i, 2 * i + 1), grounded=i == 0, estimator=estimator, method=method)
        for i in range(n_seg)
    ]
    edges = []
    for i in range(n_seg - 1):
        edges += two_way(
            f"S{i + 1}",
            "right",
            f"S{i + 2}",
            "left",
            spring_damper_law,
            jnp.array([5e4, 300.0]),
            (kind, kind),
        )
    return Graph(name, subs, edges)


def records(n_dof, steps=300, seed=0):
    key1, key2 = jax.random.split(jax.random.key(seed))
    us = 400.0 * jax.random.normal(key1, (steps, n_dof))
    chain = Chain([500.0] * n_dof, [5e4] * n_dof, [300.0] * n_dof)
    step = discretise(chain, DT, "euler")

    def one(x, u):
        x = step.transition(0.0, x, u, chain.params)
        return x, chain.acceleration(x, u, chain.params)

    _, ys = jax.lax.scan(one, jnp.zeros(2 * n_dof), us)
    ys = ys + 1e-3 * jax.random.normal(key2, (steps, n_dof))
    return chain, us, ys


def to_chain_order(x, n_seg):
    """[x1,x2,v1,v2, x3,x4,v3,v4, ...] -> [x1..xn, v1..vn]."""
    parts = x.reshape(x.shape[:-1] + (n_seg, 4))
    q = parts[..., :2].reshape(x.shape[:-1] + (-1,))
    v = parts[..., 2:].reshape(x.shape[:-1] + (-1,))
    return np.concatenate([q, v], axis=-1)


def test_one_subsystem_graph_equals_plain_ukf():
    chain, us, ys = records(2)
    sub = segment("S1", (0, 1), estimator="ukf", x0=[0.01, 0, 0.01, 0])
    sub_no_msg = Subsystem(
        name="only",
        transition=sub.transition,
        output=sub.output,
        params=sub.params,
        x0=sub.x0,
        P0=sub.P0,
        Q=sub.Q,
        R=sub.R,
        inputs=(0, 1),
        outputs=(0, 1),
        ports={},
        n_msg=2,
        estimator="ukf",
    )
    res = run(Graph("one", [sub_no_msg]), us=us, ys=ys)["only"]
    f = lambda x, u: sub.transition(x, u, jnp.zeros(2), sub.params)  # noqa: E731
    h = lambda x, u: sub.output(x, u, jnp.zeros(2), sub.params)  # noqa: E731
    ref = run_ukf(f, h, sub.x0, sub.P0, sub.Q, sub.R, us, ys, weights=UnscentedWeights.paper_code(0.0))
    np.testing.assert_allclose(res.means[1:], ref.means, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(res.covs[1:], ref.covs, rtol=1e-8, atol=1e-18)
    np.testing.assert_allclose(res.loglik, float(ref.loglik), rtol=1e-10)


def test_monolithic_of_linear_chain_matches_central_kf():
    chain, us, ys = records(4)
    graph = chain_graph(2)
    mono = graph.monolithic("mono")
    res = run(Graph("mono", [mono]), us=us, ys=ys)["mono"]
    step = discretise(chain, DT, "euler")
    perm = np.array([0, 1, 4, 5, 2, 3, 6, 7])  # chain order index of each monolithic state
    P0 = np.asarray(mono.P0)[np.argsort(perm)][:, np.argsort(perm)]
    ref = gaussian_filter(
        lambda x, u: step.transition(0.0, x, u, chain.params),
        lambda x, u: chain.acceleration(x, u, chain.params),
        jnp.zeros(8),
        jnp.linalg.cholesky(jnp.asarray(P0)),
        jnp.sqrt(1e-10) * jnp.eye(8),
        jnp.sqrt(1e-2) * jnp.eye(4),
        us,
        ys,
        linearisation=linear,
    )
    np.testing.assert_allclose(to_chain_order(res.means[1:], 2), np.asarray(ref.means), rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(res.loglik, float(ref.loglik), rtol=1e-8)


def test_jacobi_inner_iterations_converge_to_coupled_solution():
    """Forward problem (no measurements): K -> many Jacobi iterations reach the implicitly coupled step."""
    graph = chain_graph(2, estimator="none")
    _, us, _ = records(4, steps=50)
    ys = jnp.full((50, 4), jnp.nan)
    x0 = [0.01, 0.0, 0.01, 0.0]
    graph = Graph("g", [eqx_replace_x0(graph.nodes[0], x0), graph.nodes[1]], graph.interfaces)
    subs, edges = graph.flatten()

    @jax.jit
    def coupled_step(x, u):
        """Newton solve of x' = [Phi_1(x1, u1, m1(x')), Phi_2(x2, u2, m2(x'))]."""

        def residual(z):
            m1 = jnp.array(
                [
                    0.0,
                    spring_damper_law(z[jnp.array([4, 6])], z[jnp.array([1, 3])], jnp.array([5e4, 300.0]))[0],
                ]
            )
            m2 = jnp.array(
                [
                    spring_damper_law(z[jnp.array([1, 3])], z[jnp.array([4, 6])], jnp.array([5e4, 300.0]))[0],
                    0.0,
                ]
            )
            return z - jnp.concatenate(
                [
                    subs[0].transition(x[:4], u[:2], m1, subs[0].params),
                    subs[1].transition(x[4:], u[2:], m2, subs[1].params),
                ]
            )

        z = x
        for _ in range(5):
            z = z - jnp.linalg.solve(jax.jacfwd(residual)(z), residual(z))
        return z

    x = jnp.concatenate([jnp.asarray(x0), jnp.zeros(4)])
    ref = []
    for k in range(50):
        x = coupled_step(x, us[k])
        ref.append(x)
    ref = np.stack(ref)
    errs = []
    for inner in (1, 3, 30):
        res = run(graph, us=us, ys=ys, schedule=Schedule("jacobi", inner))
        got = np.concatenate([res["S1"].means[1:], res["S2"].means[1:]], axis=1)
        errs.append(np.max(np.abs(got - ref)))
    assert errs[2] < 1e-12 * max(1.0, np.max(np.abs(ref))) + 1e-15
    assert errs[0] > errs[1] > errs[2]


def eqx_replace_x0(sub, x0):
    import equinox as eqx

    return eqx.tree_at(lambda s: s.x0, sub, jnp.asarray(x0))


def test_compiled_step_traces_once_and_stacks_identical_subsystems():
    graph = chain_graph(4, estimator="ukf")
    comp = compile(graph, "jacobi")
    # S2..S4 are identical (ungrounded) apart from their numbers: one stacked group; S1 is grounded but
    # shares functions and shapes, so all four are stacked.
    assert len(comp.groups) == 1 and len(comp.groups[0].members) == 4
    _, us, ys = records(8, steps=20)
    run(graph, us=us, ys=ys, compiled=comp)
    run(graph, us=us[:20] * 2, ys=ys[:20], compiled=comp)
    assert comp.scan._cache_size() == 1


def test_chain_of_chains_equals_flat_chain():
    flat = chain_graph(4, estimator="ukf", kind="probabilistic")
    law, gamma = spring_damper_law, jnp.array([5e4, 300.0])
    left = Graph("L", flat.nodes[:2], flat.interfaces[:2], exports={"out": ("S2", "right")})
    right = Graph("R", flat.nodes[2:], flat.interfaces[4:], exports={"in": ("S3", "left")})
    nested = Graph("top", [left, right], two_way("L", "out", "R", "in", law, gamma, ("probabilistic",) * 2))
    _, us, ys = records(8, steps=30)
    a = run(flat, us=us, ys=ys)
    b = run(nested, us=us, ys=ys)
    for name, nested_name in (("S1", "L/S1"), ("S2", "L/S2"), ("S3", "R/S3"), ("S4", "R/S4")):
        np.testing.assert_allclose(b[nested_name].means, a[name].means, rtol=1e-12, atol=1e-15)


def test_probabilistic_injection_is_incremental_var_of_linear_law():
    """Step 1 injects (dt/m)^2 a^T (P_s1 + P_s2) a into the receiving velocity (S33, S44, S46)."""
    graph = chain_graph(2, estimator="none", kind="probabilistic")
    one = Graph("one", [graph.nodes[1]])
    us = jnp.zeros((1, 4))
    ys = jnp.full((1, 4), jnp.nan)
    with_msg = run(graph, us=us, ys=ys)["S2"].covs[1]
    alone = run(one, us=us, ys=ys)["S2"].covs[1]
    a = np.array([5e4, 300.0])
    expected = (DT / 500.0) ** 2 * a @ (2e-4 * np.eye(2)) @ a
    np.testing.assert_allclose(with_msg[2, 2] - alone[2, 2], expected, rtol=1e-10)


def test_gauss_seidel_uses_fresh_sender_state():
    """Under Gauss-Seidel the second colour sees the first colour's new state (Alg. 2)."""
    graph = chain_graph(2, estimator="none")
    graph = Graph(
        "g", [eqx_replace_x0(graph.nodes[0], [0.01, 0.0, 0.01, 0.0]), graph.nodes[1]], graph.interfaces
    )
    us, ys = jnp.zeros((1, 4)), jnp.full((1, 4), jnp.nan)
    jac = run(graph, us=us, ys=ys, schedule="jacobi")
    gs = run(graph, us=us, ys=ys, schedule="gauss_seidel")
    np.testing.assert_allclose(gs["S1"].means, jac["S1"].means)
    s1 = gs["S1"].means[1]
    m = spring_damper_law(s1[np.array([1, 3])], jnp.zeros(2), jnp.array([5e4, 300.0]))[0]
    expected = graph.nodes[1].transition(
        jnp.zeros(4), jnp.zeros(2), jnp.array([m, 0.0]), graph.nodes[1].params
    )
    np.testing.assert_allclose(gs["S2"].means[1], expected, rtol=1e-12)


def test_ab2_extrapolates_the_senders_interface_state_only():
    """AB2 ([REPO] script 04): Jacobi on step 1, then law(1.5 s_j^n - 0.5 s_j^(n-1), s_i^n) at receiver i."""
    graph = chain_graph(2, estimator="none")
    graph = Graph(
        "g", [eqx_replace_x0(graph.nodes[0], [0.01, 0.0, 0.01, 0.0]), graph.nodes[1]], graph.interfaces
    )
    _, us, _ = records(4, steps=2)
    ys = jnp.full((2, 4), jnp.nan)
    jac = run(graph, us=us, ys=ys, schedule="jacobi")
    ab2 = run(graph, us=us, ys=ys, schedule="ab2")
    np.testing.assert_allclose(ab2["S1"].means[1], jac["S1"].means[1])
    gamma = jnp.array([5e4, 300.0])
    s1, s2 = ab2["S1"].means, ab2["S2"].means
    s1_hat = 1.5 * s1[1, [1, 3]] - 0.5 * s1[0, [1, 3]]
    s2_hat = 1.5 * s2[1, [0, 2]] - 0.5 * s2[0, [0, 2]]
    m1 = jnp.array([0.0, spring_damper_law(s2_hat, s1[1, [1, 3]], gamma)[0]])
    m2 = jnp.array([spring_damper_law(s1_hat, s2[1, [0, 2]], gamma)[0], 0.0])
    nodes = graph.nodes
    np.testing.assert_allclose(
        s1[2], nodes[0].transition(s1[1], us[1, :2], m1, nodes[0].params), rtol=1e-12, atol=1e-14
    )
    np.testing.assert_allclose(
        s2[2], nodes[1].transition(s2[1], us[1, 2:], m2, nodes[1].params), rtol=1e-12, atol=1e-14
    )


def test_errors_name_subsystem_port_and_option():
    g = chain_graph(2)
    with pytest.raises(ValueError, match="'S9': no such subsystem"):
        Graph("bad", g.nodes, two_way("S1", "right", "S9", "left", spring_damper_law, jnp.array([1.0, 1.0])))
    with pytest.raises(ValueError, match="'S2' port 'middle': no such port"):
        Graph(
            "bad", g.nodes, two_way("S1", "right", "S2", "middle", spring_damper_law, jnp.array([1.0, 1.0]))
        )
    bad_law = lambda a, b, gamma: jnp.zeros(3)  # noqa: E731
    with pytest.raises(ValueError, match="law returns 3 values but port 'left' of 'S2' has 1"):
        Graph("bad", g.nodes, two_way("S1", "right", "S2", "left", bad_law, jnp.zeros(1)))
    with pytest.raises(ValueError, match="Schedule kind: expected one of .*received 'newton'"):
        compile(g, "newton")
    with pytest.raises(ValueError, match="Subsystem 'S1' port 'p': state indices"):
        Subsystem(
            "S1",
            g.nodes[0].transition,
            g.nodes[0].output,
            {},
            jnp.zeros(4),
            jnp.eye(4),
            jnp.eye(4),
            jnp.eye(1),
            (0,),
            (0,),
            {"p": Port((7,), (0,))},
            1,
        )
    with pytest.raises(ValueError, match="Subsystem 'S1' Q: expected shape"):
        Subsystem(
            "S1",
            g.nodes[0].transition,
            g.nodes[0].output,
            {},
            jnp.zeros(4),
            jnp.eye(4),
            jnp.eye(3),
            jnp.eye(1),
            (0,),
            (0,),
            {},
            1,
        )


def test_law_moments_of_a_linear_law_are_the_closed_form_with_cross_covariance():
    """law_moments: for F = k (x_s - x_r) + c (v_s - v_r), mean a^T m and variance a^T P a (S33), the
    ports' cross-covariance included; a quadratic law gets the exact Gaussian mean (unscented)."""
    from twinfer.infer.graph._local import law_moments

    rng = np.random.default_rng(0)
    root = rng.normal(size=(4, 4))
    cov = root @ root.T
    mean = rng.normal(size=4)
    gamma = jnp.asarray([5e4, 300.0])
    m, v = law_moments(spring_damper_law, gamma, jnp.asarray(mean), jnp.asarray(cov), 2)
    a = np.array([5e4, 300.0, -5e4, -300.0])
    np.testing.assert_allclose(m, [a @ mean], rtol=1e-12)
    np.testing.assert_allclose(v, [[a @ cov @ a]], rtol=1e-10)
    square = lambda s, r, g: jnp.atleast_1d((s[0] - r[0]) ** 2)  # noqa: E731
    m2, _ = law_moments(square, gamma, jnp.asarray(mean), jnp.asarray(cov), 2)
    d, var_d = mean[0] - mean[2], cov[0, 0] + cov[2, 2] - 2 * cov[0, 2]
    np.testing.assert_allclose(m2, [d**2 + var_d], rtol=1e-10)
