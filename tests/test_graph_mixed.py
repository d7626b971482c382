"""Heterogeneous graphs: none / learned / KF / EKF / UKF nodes together, and a learned node's memory."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.infer.filters import FilterConsistencyWarning
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.infer.graph import Graph, Interface, Port, Subsystem
from twinfer.infer.graph._run import estimate, run


def _identity(s_send, s_recv, gamma):
    return s_send


def _source() -> Subsystem:
    """A deterministic driver x' = 0.9 x + u (estimator none, no noise): exact messages."""
    return Subsystem(
        "driver",
        lambda x, u, m, p: 0.9 * x + u[:1],
        np.zeros((0, 1)),
        {},
        jnp.asarray([1.0]),
        np.zeros((1, 1)),
        np.zeros((1, 1)),
        np.zeros((0, 0)),
        (0,),
        (),
        {"out": Port((0,))},
        0,
        estimator="none",
        state_names=("d",),
    )


def _learned() -> Subsystem:
    """A memoryless learned predictor y' = 2 m + 0.5 u (no error: Q = 0)."""
    return Subsystem(
        "learned",
        lambda x, u, m, p: 2.0 * m[:1] + 0.5 * u[:1],
        np.zeros((0, 1)),
        {},
        jnp.asarray([0.0]),
        np.zeros((1, 1)),
        np.zeros((1, 1)),
        np.zeros((0, 0)),
        (0,),
        (),
        {"out": Port((0,)), "in": Port((), (0,))},
        1,
        estimator="learned",
        state_names=("l",),
    )


def _oscillator(name: str, estimator: str, column: int, a: float) -> Subsystem:
    """A damped oscillator driven by the message, measuring its position (linear-Gaussian).

    The UKF node has no process noise: the paper's UKF (Alg. 6) does not redraw its sigma points after
    adding Q, so with Q it is not the Kalman filter even on a linear model; without Q it is.
    """
    A = np.asarray([[1.0, 0.01], [-0.01 * a, 0.995]])
    B = np.asarray([0.0, 0.01])
    extra = {"weights": UnscentedWeights.merwe(1.0, 2.0, 1.0)} if estimator == "ukf" else {}
    return Subsystem(
        name,
        lambda x, u, m, p, A=A, B=B: jnp.asarray(A) @ x + jnp.asarray(B) * m[0],
        np.asarray([[1.0, 0.0]]),
        {},
        jnp.asarray([0.1, 0.0]),
        np.diag([0.04, 0.01]),
        np.diag([1e-6, 1e-5]) * (estimator != "ukf"),
        np.asarray([[1e-4]]),
        (0,),
        (column,),
        {"in": Port((), (0,))},
        1,
        estimator=estimator,
        state_names=(f"{name}.x", f"{name}.v"),
        **extra,
    )


def test_mixed_graph_equals_the_monolithic_kalman_filter_when_every_node_is_linear_gaussian():
    """none -> learned -> {KF, EKF, UKF}: the senders are exact, so Jacobi loses nothing.

    The monolithic KF on the stacked state (block-diagonal P0, Q, R, the laws inside one transition) is
    the exact filter of the whole system; the distributed graph must match it to rounding.
    """
    nodes = [
        _source(),
        _learned(),
        _oscillator("kf", "kf", 0, 4.0),
        _oscillator("ekf", "ekf", 1, 9.0),
        _oscillator("ukf", "ukf", 2, 16.0),
    ]
    edges = [
        Interface("driver", "out", "learned", "in", _identity, {}),
        Interface("learned", "out", "kf", "in", _identity, {}),
        Interface("driver", "out", "ekf", "in", _identity, {}),
        Interface("learned", "out", "ukf", "in", _identity, {}),
    ]
    graph = Graph("mixed", nodes, edges)
    rng = np.random.default_rng(3)
    steps = 200
    us = np.sin(0.05 * np.arange(steps))[:, None]
    ys = rng.normal(0.0, 0.3, (steps, 3))  # not the model's data: both filters flag it (NIS ~ 3e3)
    with pytest.warns(FilterConsistencyWarning, match="NIS"):
        dist = estimate(graph, us=us, ys=ys)
    mono = dataclasses.replace(graph.monolithic("central"), estimator="kf")
    with pytest.warns(FilterConsistencyWarning, match="NIS"):
        cent = estimate(Graph("central", [mono]), us=us, ys=ys)
    assert dist.nis is not None and cent.nis is not None and dist.nis > 100
    np.testing.assert_allclose(dist.nis, cent.nis, rtol=1e-9)  # the same innovations, summed per node
    for name in dist.state_names:
        j, k = dist.state_names.index(name), cent.state_names.index(name)
        np.testing.assert_allclose(dist.means[:, j], cent.means[:, k], rtol=1e-9, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(dist.stds[:, j], cent.stds[:, k], rtol=1e-7, atol=1e-12, err_msg=name)
    # the driver and the learned node are exact; the filtered nodes moved away from their priors
    d = dist.means[:, dist.state_names.index("d")]
    np.testing.assert_allclose(d[1:], 0.9 * d[:-1] + us[:, 0], rtol=1e-12)
    assert np.all(dist.stds[1:, dist.state_names.index("kf.x")] < 0.2)


def _window_node(size: int, sd: float) -> Subsystem:
    """A learned node predicting the mean of its last ``size`` received messages (a memory of them)."""

    def transition(x, u, m, p):
        memory = jnp.concatenate([x[2:], m[:1]])
        return jnp.concatenate([jnp.mean(memory)[None], memory])

    return Subsystem(
        "window",
        transition,
        np.zeros((0, 1 + size)),
        {},
        jnp.zeros(1 + size),
        np.asarray([[sd**2]]),
        np.asarray([[sd**2]]),
        np.zeros((0, 0)),
        (),
        (),
        {"out": Port((0,)), "in": Port((), (0,))},
        1,
        estimator="learned",
        state_names=("mean", *(f"~m{i}" for i in range(size))),
        memory=size,
    )


def test_learned_node_memory_is_carried_not_output_and_its_spread_is_its_error():
    walker = Subsystem(
        "walker",
        lambda x, u, m, p: x,
        np.eye(1),
        {},
        jnp.zeros(1),
        np.eye(1),
        np.asarray([[0.09]]),
        np.asarray([[0.01]]),
        (),
        (0,),
        {"out": Port((0,))},
        0,
        estimator="kf",
        state_names=("s",),
    )
    graph = Graph(
        "g", [walker, _window_node(3, 0.1)], [Interface("walker", "out", "window", "in", _identity, {})]
    )
    rng = np.random.default_rng(0)
    steps = 60
    ys = (np.cumsum(rng.normal(0, 0.3, steps + 1)) + rng.normal(0, 0.1, steps + 1))[1:, None]
    res = run(graph, us=np.zeros((steps, 0)), ys=ys)
    s, w = res["walker"].means[:, 0], res["window"]
    assert w.means.shape == (steps + 1, 1) and w.covs.shape == (steps + 1, 1, 1)  # no memory in the output
    # step k reads the walker's posterior at t_k: the window at t_{k+1} averages t_{k-2}, t_{k-1}, t_k
    np.testing.assert_allclose(
        w.means[5:, 0], [np.mean(s[k - 3 : k]) for k in range(5, steps + 1)], rtol=1e-12
    )
    np.testing.assert_allclose(w.covs[1:, 0, 0], 0.01, rtol=1e-12)  # P = Q every step
    est = estimate(graph, us=np.zeros((steps, 0)), ys=ys)
    assert est.state_names == ("s", "mean")


def test_memory_is_refused_outside_learned_nodes_and_in_a_monolithic_model():
    node = _window_node(2, 0.1)
    with pytest.raises(ValueError, match="memory: expected 0, or 0..2 trailing states of a 'learned'"):
        dataclasses.replace(node, estimator="ukf")
    with pytest.raises(ValueError, match="P0: expected shape"):
        dataclasses.replace(node, P0=np.eye(3))
    with pytest.raises(ValueError, match=r"port 'out': state indices must lie in 0..0"):
        dataclasses.replace(node, ports={"out": Port((1,)), "in": Port((), (0,))})
    with pytest.raises(ValueError, match="learned predictor's memory"):
        Graph("g", [node]).monolithic()


@pytest.mark.parametrize("rule", ["split", "shared"])
def test_a_receiver_port_without_states_takes_probabilistic_split_and_shared_messages(rule):
    """Two oscillators that read each other's position through a port holding no states of their own
    (``Port((), slots)``), as the turbine's do: rule "shared" has no receiver deviation to read the
    sender's error through there, so it is "split" on such an edge (it once failed to reshape the empty
    port), and both give finite estimates whose spread includes the sender's error."""
    nodes = [
        dataclasses.replace(_oscillator(name, "ukf", col, a), ports={"out": Port((0,)), "in": Port((), (0,))})
        for name, col, a in (("a", 0, 4.0), ("b", 1, 9.0))
    ]
    edges = [
        Interface("a", "out", "b", "in", _identity, {}, "probabilistic", rule),
        Interface("b", "out", "a", "in", _identity, {}, "probabilistic", rule),
    ]
    rng = np.random.default_rng(5)
    steps = 200
    us, ys = np.zeros((steps, 1)), 0.01 * rng.normal(size=(steps, 2))
    est = estimate(Graph("pair", nodes, edges), us=us, ys=ys)
    held = estimate(
        Graph("pair", nodes, [dataclasses.replace(e, kind="deterministic") for e in edges]), us=us, ys=ys
    )
    assert np.all(np.isfinite(est.means)) and np.all(np.isfinite(est.stds))
    j = est.state_names.index("a.v")
    wider, same = est.stds[1:, j], held.stds[1:, j]
    assert np.all(wider >= same * (1 - 1e-9)) and np.any(wider > same)
