"""Graph.from_model on a user's chain: segments wired to the data, interfaces carrying the cut connections.

Public API only: a chain of three two-mass subsystems (not a paper case), data from
twinfer.sim.simulate_dataset, the graph from Graph.from_model, run by twinfer.infer.graph._run.run.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.signal import butter, lfilter

from twinfer.infer import Estimate
from twinfer.infer.filters import FilterConsistencyWarning, run_filter
from twinfer.infer.graph import Graph, Subsystem, chain_graph, model_graph
from twinfer.infer.graph._banded import banded_estimate
from twinfer.infer.graph._chain import auto_partition
from twinfer.infer.graph._run import estimate, run
from twinfer.models import AbstractModel, Chain, Connection
from twinfer.sim import rk4_step, simulate_dataset
from twinfer.timing import timed

PARTITION = [(1, 2), (3, 4), (5, 6)]
ORDER = [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]  # [S1 x1 x2 v1 v2 | S2 ... | S3 ...] -> x1..x6, v1..v6


def _chain(**kw):
    return Chain(
        [100.0, 80.0, 120.0, 90.0, 150.0, 60.0],
        [2e4, 1.8e4, 2.2e4, 2e4, 1.5e4, 1.7e4],
        [30.0] * 6,
        forced_dofs=[6],
        outputs=("a1", "a3", "a4", "a6"),
        **kw,
    )


def _force(n, seed=0):
    b, a = butter(4, 0.05)
    return lfilter(b, a, np.random.default_rng(seed).normal(size=(n + 1, 1)) * 800.0, axis=0)


def _stack(res, field):
    parts = [getattr(res[s], field)[:, :4] for s in ("S1", "S2", "S3")]
    return np.concatenate(parts, axis=1)[:, ORDER]


def test_split_messages_follow_the_chain_to_second_order_where_held_ones_drift():
    """No measurements, almost no uncertainty, Duffing and Van der Pol cut connections, 1 ms steps:
    with the "split" rule (each segment evaluates the cut connection at its own integrator stages, the
    neighbour's interface read between its mean and its predicted mean) the segments follow the exact
    trajectory of the whole chain to 0.1 % of its motion; the paper's rule (the force at both means, held
    over the step) drifts by more than 10x that. Columns -1 feed zero force to the unforced masses."""
    chain = _chain(cubic_stiffness=[0, 0, 1e10, 0, 1e10, 0], vdp_damping=[0, 0, 5.0, 0, 0, 0])
    dt, n = 1e-3, 1000
    data = simulate_dataset(chain, _force(n), dt, 0.0, jax.random.key(0))
    silent = np.full_like(data.observations, np.nan)
    scale = np.abs(data.truth_states).max(axis=0)
    error = {}
    for rule in ("split", "paper"):
        graph = Graph.from_model(
            chain, PARTITION, dt=dt, messages="deterministic", rule=rule, state_sd=1e-9, process_sd=0.0
        )
        means = _stack(run(graph, us=data.inputs[:-1], ys=silent[1:]), "means")
        error[rule] = np.max(np.abs(means - data.truth_states) / scale)
    assert error["split"] < 1e-3, error
    assert error["paper"] > 10 * error["split"], error


def test_probabilistic_segments_estimate_states_and_a_stiffness_like_the_central_filter():
    """Accelerometers on four of six masses, 5 % noise: probabilistic Jacobi covers the states (95 %
    coverage in [0.90, 0.995]), keeps the unknown k6 inside its 95 % interval and its state RMSE within
    2x of the central UKF on the same RK4 discretisation. Both return one Estimate in the chain's order."""
    chain = _chain()
    dt, n = 1e-3, 3000
    clean = simulate_dataset(chain, _force(n), dt, 0.0, jax.random.key(1))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0))
    data = simulate_dataset(chain, _force(n), dt, sd, jax.random.key(2))
    options = dict(noise_sd=sd, state_sd=1e-3, process_sd=1e-5, unknown={"k6": (2.2e4, 5e3, 0.0)})
    dist = estimate(Graph.from_model(chain, PARTITION, dt=dt, **options), data)
    central = run_filter(chain, data, integrator="rk4", **options)
    assert dist.state_names == central.state_names == (*chain.state_names, "k6")
    assert dist.parameters == central.parameters == ("k6",) and dist.covs is None
    np.testing.assert_array_equal(dist.times, data.times)
    states = slice(0, 12)
    error = np.asarray(dist.means)[:, states] - data.truth_states
    coverage = np.mean(np.abs(error) <= 1.96 * np.asarray(dist.stds)[:, states])
    assert 0.90 <= coverage <= 0.995, coverage
    low, high = dist.interval("k6")
    assert low <= 1.7e4 <= high, (low, high)
    rmse = lambda e: np.sqrt(np.mean(np.asarray(e) ** 2))  # noqa: E731
    central_error = np.asarray(central.means)[:, states] - data.truth_states
    assert rmse(error) <= 2.0 * rmse(central_error), (rmse(error), rmse(central_error))


def test_a_cut_connections_unknowns_are_estimated_through_the_interface():
    """k3 and c3 of the connection cut between masses 2 and 3, k5 of the one cut between 4 and 5: each held
    by the subsystem that measures its end mass (S2 for both: a3 and a4), read from that side's port by
    both directions of the interface. Each truth lies inside its 95 % interval, the states cover, and
    the paper's rule (the law at the means, outside the filters) is refused with a named error."""
    chain = _chain()
    dt, n = 1e-3, 3000
    clean = simulate_dataset(chain, _force(n), dt, 0.0, jax.random.key(1))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0))
    data = simulate_dataset(chain, _force(n), dt, sd, jax.random.key(2))
    unknown = {"k3": (1.5e4, 5e3, 0.0), "c3": (20.0, 20.0, 0.0), "k5": (2e4, 5e3, 0.0)}
    options = dict(noise_sd=sd, state_sd=1e-3, process_sd=1e-5, unknown=unknown)
    graph = Graph.from_model(chain, PARTITION, dt=dt, **options)
    holders = {s.name: s.parameters for s in graph.flatten()[0]}
    assert holders == {"S1": (), "S2": ("k3", "c3", "k5"), "S3": ()}, holders
    dist = estimate(graph, data)
    for name, truth in (("k3", 2.2e4), ("c3", 30.0), ("k5", 1.5e4)):
        low, high = dist.interval(name)
        assert low <= truth <= high, (name, low, high)
    error = np.asarray(dist.means)[:, :12] - data.truth_states
    coverage = np.mean(np.abs(error) <= 1.96 * np.asarray(dist.stds)[:, :12])
    assert 0.90 <= coverage <= 0.99, coverage
    with pytest.raises(ValueError, match="rule='split'"):
        Graph.from_model(chain, PARTITION, dt=dt, rule="paper", **options)
    from twinfer.models.chain import EstimatedConnectionLaw

    with pytest.raises(ValueError, match=r"expected holder 'send' or 'recv' .* received holder 'left'"):
        EstimatedConnectionLaw(("k",), "left")


def test_auto_partition_cuts_every_two_masses_and_gives_each_subsystem_a_sensor():
    chain = lambda n, outputs: Chain([1.0] * n, [1.0] * n, 0.0, outputs=outputs)  # noqa: E731
    assert auto_partition(chain(8, ("a1", "a3", "a6", "a8"))) == [(1, 2), (3, 4), (5, 6), (7, 8)]
    assert auto_partition(chain(7, ("a1", "x7"))) == [(1, 2), (3, 4, 5, 6, 7)]  # (3, 4) measures nothing
    assert auto_partition(chain(5, ("a5",)), size=2) == [(1, 2, 3, 4, 5)]
    assert auto_partition(chain(6, ("a1", "a6")), size=3) == [(1, 2, 3), (4, 5, 6)]
    graph = Graph.from_model(_chain(), "auto", dt=1e-3)
    assert [s.name for s in graph.flatten()[0]] == ["S1", "S2", "S3"]
    with pytest.raises(ValueError, match=r"partition: expected DOF groups or 'auto'; received 'even'"):
        Graph.from_model(_chain(), "even", dt=1e-3)


def test_from_model_errors_name_the_problem():
    chain = _chain()
    with pytest.raises(ValueError, match=r"partition: expected contiguous DOF groups"):
        Graph.from_model(chain, [(1, 3), (2, 4, 5, 6)], dt=1e-3)
    with pytest.raises(ValueError, match=r"unknown 'k3': expected \(initial value, prior sd > 0"):
        Graph.from_model(chain, PARTITION, dt=1e-3, unknown={"k3": (1.0, 0.0, 0.0)})
    with pytest.raises(ValueError, match=r"unknown: expected parameter names of the chain"):
        Graph.from_model(chain, PARTITION, dt=1e-3, unknown={"q7": (1.0, 1.0, 0.0)})
    with pytest.raises(ValueError, match=r"messages: expected one value or 2"):
        Graph.from_model(chain, PARTITION, dt=1e-3, messages=["deterministic"])
    with pytest.raises(TypeError, match=r"expected a Chain, a KuramotoNetwork or a model that declares"):
        Graph.from_model(object(), PARTITION, dt=1e-3)


def test_monolithic_of_a_graph_from_a_model_is_the_whole_models_filter():
    """Graph.from_model(...).monolithic() integrates the coupled chain with the subsystems' own RK4, laws
    evaluated at every stage: on a linear chain its UKF equals run_filter's on the Chain (same
    discretisation, states permuted) to rounding."""
    chain = _chain()
    dt, n = 1e-3, 400
    clean = simulate_dataset(chain, _force(n), dt, 0.0, jax.random.key(3))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0))
    data = simulate_dataset(chain, _force(n), dt, sd, jax.random.key(4))
    options = dict(noise_sd=sd, state_sd=1e-3, process_sd=1e-5)
    graph = Graph.from_model(chain, PARTITION, dt=dt, integrator="rk4", **options)
    central = run(Graph("central", [graph.monolithic("central")]), data)["central"]
    with warnings.catch_warnings():  # the two filters' equality is the point; their NIS is 0.71 (Q > truth's)
        warnings.simplefilter("ignore", FilterConsistencyWarning)
        whole = run_filter(chain, data, integrator="rk4", **options)
    np.testing.assert_allclose(central.means[:, ORDER], np.asarray(whole.means), rtol=1e-7, atol=1e-10)


def test_the_central_model_of_a_long_chain_is_traced_once_per_kind_of_subsystem():
    """monolithic() evaluates identical subsystems (and interfaces with the same law) in one vmap: the
    traced transition of a chain of 32 two-mass subsystems with Duffing cuts has as many operations as
    one of 8, and its step equals an RK4 step of the whole Chain model (the same physics)."""

    def traced(n):
        dofs = 2 * n
        chain = Chain([100.0] * dofs, [2e4] * dofs, [30.0] * dofs, cubic_stiffness=[0.0, 1e9] * n,
                      forced_dofs=[dofs], outputs=("a1", f"a{dofs}"))  # fmt: skip
        graph = Graph.from_model(chain, [(2 * s + 1, 2 * s + 2) for s in range(n)], dt=1e-3, noise_sd=0.1)
        mono = graph.monolithic()
        x = 1e-3 * jnp.sin(jnp.arange(2 * dofs, dtype=float))
        u = jnp.where(jnp.asarray(mono.inputs) < 0, 0.0, 250.0)  # the force on the last mass; -1: none
        step = lambda z: mono.transition(z, u, jnp.zeros(0), mono.params)  # noqa: E731
        order = [mono.state_names.index(name) for name in chain.state_names]
        return len(jax.make_jaxpr(step)(x).eqns), step, x, order, chain

    eight = traced(8)[0]
    thirty_two, step, x, order, chain = traced(32)
    assert thirty_two == eight, (eight, thirty_two)
    # both steps compiled as one program each (op by op, they dispatched and compiled ~200 small ones)
    stepped, start = np.asarray(jax.jit(step)(x))[order], jnp.asarray(np.asarray(x)[order])
    field = lambda t, z: chain.vector_field(t, z, jnp.asarray([250.0]), chain.params)  # noqa: E731
    np.testing.assert_allclose(
        stepped, np.asarray(jax.jit(lambda z: rk4_step(field, 0.0, z, 1e-3))(start)), rtol=1e-10
    )


def test_run_compiles_a_graph_structure_once_and_runs_each_graphs_own_numbers():
    """Two graphs of one structure with other numbers share one compiled program (compiled_for), and
    run gives each its own estimates, equal to a fresh compile of that graph; another structure (a
    different partition) gets its own program; timing.timed of estimate is estimate with the scan timed;
    each subsystem's run is an Estimate of its own columns, whose stds are its covariances' diagonals."""
    from twinfer.infer.graph._run import compile as compile_engine
    from twinfer.infer.graph._run import compiled_for

    dt, n = 1e-3, 300
    stiff, soft = (
        _chain(),
        Chain(
            [100.0, 80.0, 120.0, 90.0, 150.0, 60.0],
            1.5e4,
            20.0,
            forced_dofs=[6],
            outputs=("a1", "a3", "a4", "a6"),
        ),
    )
    data = simulate_dataset(stiff, _force(n), dt, 0.05, jax.random.key(5))
    graphs = [Graph.from_model(c, PARTITION, dt=dt, noise_sd=0.05, state_sd=1e-3) for c in (stiff, soft)]
    assert compiled_for(graphs[0]) is compiled_for(graphs[1])
    assert compiled_for(Graph.from_model(stiff, [(1, 2, 3), (4, 5, 6)], dt=dt)) is not compiled_for(graphs[0])
    first = run(graphs[0], data)  # compiles the shared program with graphs[0]'s numbers
    shared = run(graphs[1], data)  # the same program on graphs[1]'s numbers
    fresh = run(graphs[1], data, compiled=compile_engine(graphs[1]))
    for name in ("S1", "S2", "S3"):
        np.testing.assert_array_equal(shared[name].means, fresh[name].means)
    assert not np.allclose(first["S2"].means, shared["S2"].means)
    # the central model of either graph is one structure too (its numbers are its params and covariances,
    # which run passes as it passes the subsystems' above)
    centrals = [Graph("central", [g.monolithic("central")]) for g in graphs]
    assert compiled_for(centrals[0]) is compiled_for(centrals[1])
    # timed estimate: the same Estimate as estimate (the scan's outputs, marginals from the factors),
    # with the first call (compile and run) apart from the timed runs
    est, seconds = timed(estimate, graphs[0], data, repeats=2)
    plain = estimate(graphs[0], data)
    np.testing.assert_array_equal(est.means, plain.means)
    np.testing.assert_array_equal(est.stds, plain.stds)
    assert len(seconds.run_s) == 2 and seconds.compile_s > 0 and est.state_names == plain.state_names
    assert seconds.value is est
    s2 = first["S2"]
    assert isinstance(s2, Estimate) and s2.state_names == graphs[0].flatten()[0][1].names
    np.testing.assert_array_equal(s2.times, data.times)
    np.testing.assert_allclose(s2.stds**2, np.diagonal(s2.covs, axis1=1, axis2=2), rtol=1e-10)
    assert s2.loglik == pytest.approx(float(np.sum(s2.step_logliks)), rel=1e-12)
    assert s2.pred_means.shape == (n, s2.means.shape[1]) and s2.step_nis.shape == (n,)
    # the row norms of run's square-root factors are the covariances' diagonals
    np.testing.assert_allclose(plain.stds[:, 2], np.sqrt(first["S2"].covs[:, 0, 0]), rtol=1e-12)


class _Rotors(AbstractModel):
    """A user's own model, not a chain: three rotors on torsional springs to ground, joined by shafts
    whose torque K sin(theta_j - theta_i) couples only the angles; a tachometer on rotors 1 and 3 and an
    angular accelerometer on rotor 2 (which reads both shafts)."""

    params: dict

    def __init__(self, c2: float = 0.8):
        self.params = {
            "J": jnp.asarray([2.0, 1.5, 3.0]),
            "kg": jnp.asarray([400.0, 200.0, 300.0]),
            "c": jnp.asarray([1.0, c2, 1.2]),
            "K": jnp.asarray([300.0, 250.0]),
        }

    def vector_field(self, t, x, u, p):
        th, w = x[:3], x[3:]
        shaft = p["K"] * jnp.sin(th[1:] - th[:-1])  # on the left rotor of each shaft; minus on the right
        torque = -p["kg"] * th - p["c"] * w + jnp.pad(shaft, (0, 1)) - jnp.pad(shaft, (1, 0))
        return jnp.concatenate([w, torque.at[2].add(u[0]) / p["J"]])

    def output(self, t, x, u, p):
        return jnp.stack([x[3], self.vector_field(t, x, u, p)[4], x[5]])

    state_names = property(lambda self: ("th1", "th2", "th3", "w1", "w2", "w3"))
    input_names = property(lambda self: ("torque",))
    output_names = property(lambda self: ("w1", "a2", "w3"))
    connections = property(lambda self: (Connection(("th1",), ("th2",)), Connection(("th2",), ("th3",))))


def test_a_users_own_model_with_declared_coupling_is_cut_into_subsystems():
    """Issue #20 item 1: any model that declares its interface coupling. Sine-coupled rotors (angle
    differences of 0.5-0.9 rad RMS, far from linear), one rotor per subsystem, the messages only the
    neighbours' angles; c2 unknown. Probabilistic Jacobi stays within 1.5x of the central UKF's RMSE
    with c2's truth inside its interval, and covers more than deterministic messages do."""
    model = _Rotors()
    dt, n = 1e-3, 3000
    b, a = butter(4, 0.02)
    u = lfilter(b, a, np.random.default_rng(0).normal(size=(n + 1, 1)), axis=0) * 3000.0
    clean = simulate_dataset(model, u, dt, 0.0, jax.random.key(1))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0))
    data = simulate_dataset(model, u, dt, sd, jax.random.key(2))
    options = dict(noise_sd=sd, state_sd=0.1, process_sd=1e-5, unknown={"c2": (0.5, 0.5, 0.0)})
    part = [("th1", "w1"), ("th2", "w2"), ("th3", "w3")]
    graph = Graph.from_model(model, part, dt=dt, **options)
    assert [s.name for s in graph.nodes] == ["S1", "S2", "S3"] and graph.nodes[1].parameters == ("c2",)
    assert graph.nodes[1].outputs == (1,) and graph.nodes[1].n_msg == 2  # a2 reads both neighbours' angles
    whole = graph.monolithic("central")  # the coupled model, its states named as the leaves'
    assert whole.state_names == ("th1", "w1", "th2", "w2", "c2", "th3", "w3") and whole.parameters == ("c2",)
    rmse = lambda e: float(np.sqrt(np.mean(np.asarray(e) ** 2)))  # noqa: E731
    cover = {}
    for kind in ("probabilistic", "deterministic"):
        est = estimate(Graph.from_model(model, part, dt=dt, messages=kind, **options), data)
        error = np.asarray(est.means)[:, :6] - data.truth_states
        cover[kind] = np.mean(np.abs(error) <= 1.96 * np.asarray(est.stds)[:, :6])
        if kind == "probabilistic":
            assert est.state_names == (*model.state_names, "c2")
            low, high = est.interval("c2")
            assert low <= 0.8 <= high, (low, high)
            central = run_filter(model, data, integrator="rk4", **options)
            central_error = np.asarray(central.means)[:, :6] - data.truth_states
            assert rmse(error) <= 1.5 * rmse(central_error), (rmse(error), rmse(central_error))
    assert cover["probabilistic"] >= 0.8 and cover["deterministic"] < cover["probabilistic"] - 0.1, cover


def test_model_graph_on_a_chain_is_the_chain_graph():
    """The generic builder on a Chain (its declared connections: x, v of each pair of masses) gives the
    estimator chain_graph builds from the chain's segments, to rounding: Duffing cuts, k2 unknown."""
    chain = _chain(cubic_stiffness=[0, 0, 2e8, 0, 1e8, 0])
    dt, n = 1e-3, 400
    data = simulate_dataset(chain, _force(n), dt, 0.05, jax.random.key(2))
    options = dict(dt=dt, noise_sd=0.05, state_sd=1e-3, process_sd=1e-5, unknown={"k2": (1.5e4, 5e3, 0.0)})
    by_chain = estimate(chain_graph(chain, PARTITION, **options), data)
    groups = [[f"{q}{d}" for q in "xv" for d in part] for part in PARTITION]
    by_model = estimate(model_graph(chain, groups, **options), data)
    assert by_model.state_names == by_chain.state_names
    np.testing.assert_allclose(by_model.means, by_chain.means, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(by_model.stds, by_chain.stds, rtol=1e-9)


def test_model_graph_errors_name_the_undeclared_coupling():
    """A declaration that leaves a coupling out, a bad partition and a model that declares nothing are
    named errors (an unknown read by two subsystems is estimated at the cut since #51:
    tests/test_partitions.py)."""
    model = _Rotors()
    part = [("th1", "w1"), ("th2", "w2"), ("th3", "w3")]
    half = [Connection(("th1",), ("th2",))]
    with pytest.raises(
        ValueError, match=r"equations of group S2 read \['th3'\], which no connection declares"
    ):
        model_graph(model, part, dt=1e-3, connections=half)
    with pytest.raises(ValueError, match="partition: expected two or more non-empty groups covering"):
        model_graph(model, [("th1", "w1", "th2", "w2")], dt=1e-3)
    with pytest.raises(ValueError, match=r"connection \('th1',\) <-> \('w9',\): .*unknown states \['w9'\]"):
        model_graph(model, part, dt=1e-3, connections=[Connection(("th1",), ("w9",))])
    with pytest.raises(TypeError, match="declares its interface coupling"):
        Graph.from_model(_NoCoupling(), part, dt=1e-3)


class _NoCoupling(_Rotors):
    connections = property(lambda self: ())


def test_an_unknown_message_rule_is_a_named_error():
    from twinfer.infer.graph import Interface

    with pytest.raises(
        ValueError, match=r"rule: expected one of \('paper', 'split', 'shared'\); received 'exact'"
    ):
        Interface("A", "p", "B", "p", lambda a, b, g: a, 0.0, "probabilistic", "exact")
    with pytest.raises(ValueError, match="chain_graph rule: expected one of"):
        Graph.from_model(_chain(), PARTITION, dt=1e-3, rule="held")


def test_a_misspelt_builder_keyword_is_a_named_error():
    """chain_graph and model_graph share one keyword set (GraphKeywords): a keyword outside it names the
    builder, the keywords it takes and the one received, rather than a bare TypeError from deep inside."""
    from twinfer.infer.graph import model_graph

    with pytest.raises(
        ValueError, match=r"chain_graph: expected keywords among \[.*'state_sd'.*received \['noise'\]"
    ):
        Graph.from_model(_chain(), PARTITION, dt=1e-3, noise=0.1)
    with pytest.raises(ValueError, match=r"model_graph: expected keywords among .* received \['var0'\]"):
        model_graph(_Rotors(), [("th1", "w1"), ("th2", "w2"), ("th3", "w3")], dt=1e-3, var0=1.0)


def _acceptance_system(kind):
    """Issue #20's acceptance chain: four subsystems of two masses (50-200 kg), nonlinear cut connections
    whose nonlinear force is 0.6x the linear one at the RMS motion of the linear chain, a band-limited
    force at mass 8, accelerometers on masses 1, 3, 6, 8 with 5 % noise, 10 s at 1 kHz, truth exact.

    Duffing: kappa r^3 = 0.6 k r. Van der Pol (the model's ``mu (r^2 - 1) dr``, nondimensional in the PINN
    paper): mu r^2 dr = 0.6 c dr, with the cut's viscous damper c + mu so that the net linear damping
    stays c (a bare ``- mu dr`` at millimetre motion would be a large negative damper)."""
    m = [100.0, 80.0, 120.0, 90.0, 150.0, 60.0, 200.0, 50.0]
    k = [2e4, 1.8e4, 2.2e4, 2e4, 1.5e4, 1.7e4, 2.5e4, 1.2e4]
    c, cuts, dt, n = [30.0] * 8, [3, 5, 7], 1e-3, 10000
    u = _force(n)
    outputs = ("a1", "a3", "a6", "a8")
    linear = simulate_dataset(Chain(m, k, c, forced_dofs=[8], outputs=outputs), u, dt, 0.0, jax.random.key(0))
    x = linear.truth_states[:, :8]
    extra, damping = np.zeros(8), list(c)
    for cut in cuts:
        r2 = np.mean((x[:, cut - 1] - x[:, cut - 2]) ** 2)
        extra[cut - 1] = 0.6 * (k if kind == "duffing" else c)[cut - 1] / r2
        if kind == "vdp":
            damping[cut - 1] += extra[cut - 1]
    kw = {"duffing": {"cubic_stiffness": extra.tolist()}, "vdp": {"vdp_damping": extra.tolist()}}.get(
        kind, {}
    )
    chain = Chain(m, k, damping, forced_dofs=[8], outputs=outputs, **kw)
    clean = simulate_dataset(chain, u, dt, 0.0, jax.random.key(1))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0))
    return chain, simulate_dataset(chain, u, dt, sd, jax.random.key(2)), sd


@pytest.mark.acceptance  # 2 min each: make accept; test_distributed_default covers the default, quick
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["duffing", "vdp"])
def test_issue_20_acceptance_chain(kind):
    """Issue #20's chain with the noise really in the data: the force at mass 8 recorded by a load cell
    with 2 % noise, that noise in Q (``input_sd``, the sensor's datasheet value, not a tuning) and no
    random walk, so that a consistent filter covers about 95 % (a random-walk Q on a truth without process
    noise over-covers any consistent filter: the central UKF's 0.99-1.00 there). Every estimator at
    Graph.from_model's defaults.

    * Coverage of one 10 s record is itself noisy (the states' errors are correlated over seconds): over
      noise seeds 2, 5, 7, 11, 13 the central UKF on the same discretisation covers 0.912 / 0.923 /
      0.969 / 0.956 / 0.968 with Duffing cuts and 0.970 / 0.909 / 0.990 / 0.850 / 0.979 with Van der Pol
      cuts, so the exact filter itself leaves [0.90, 0.99] on one record in ten. Coverage is therefore
      judged pooled over records (central 0.946 and 0.940 over the five; the test runs seeds 2, 5 and
      13, which hold the two lowest central coverages of each kind), and each record against the central
      filter. #51 made this banded set-up (bandwidth 2, unknowns global) the default distributed route.
    * banded_estimate (each subsystem keeping its correlation with two neighbours on either side, the
      unknowns with the whole chain: ``parameters="global"``; kept local, k2's interval in the first
      subsystem came out 8 N/m wide against the central's 19 and missed the truth) covers as it does
      (each record within 0.03, RMSE within 1.25x; pooled in [0.90, 0.99]) and estimates the
      stiffnesses as it does (means within its sd, sds within 30 %); each filter's 95 % intervals hold
      at least eight of the ten truths (two stiffnesses, five records). Measured: Duffing cuts 0.889 /
      0.907 / 0.962 / 0.955 / 0.960, pooled 0.935; Van der Pol 0.966 / 0.897 / 0.990 / 0.858 / 0.979,
      pooled 0.938; truths held 9 and 8 of 10 (central 9 and 10).
    * Probabilistic Jacobi stays finite and covers more than deterministic messages. It covers far less
      than the central filter (0.41-0.79 over five seeds): a subsystem's band leaves out the correlation
      of its errors with its neighbours', which no block-by-block posterior can hold (the exact central
      step followed by keeping only the subsystems' own blocks covers 0.08-0.16: ``_compile.py``'s
      docstring). Issue #20's clause for it is not met; the banded estimator is the calibrated
      distributed route.
    """
    chain, data0, sd = _acceptance_system(kind)
    force = np.asarray(data0.inputs)
    load_cell = np.asarray([0.02 * float(np.sqrt(np.mean(force**2)))])
    options = dict(
        noise_sd=sd,
        state_sd=1e-6,
        process_sd=0.0,
        input_sd=load_cell,
        unknown={"k2": (1.5e4, 5e3, 0.0), "k6": (2.2e4, 5e3, 0.0)},
    )
    parts, truths, states = [(1, 2), (3, 4), (5, 6), (7, 8)], {"k2": 1.8e4, "k6": 1.7e4}, slice(0, 16)
    graph = Graph.from_model(chain, parts, dt=1e-3, **options)
    central_graph = Graph("central", [graph.monolithic("central")], state_order=graph.state_order)
    score, seeds = {}, (2, 5, 13)  # three of the five records measured below (make test's budget, #51)
    for seed in seeds:
        data = simulate_dataset(chain, force, 1e-3, sd, jax.random.key(seed), input_noise_sd=load_cell)
        for label, est in (
            ("central", estimate(central_graph, data)),
            ("banded", banded_estimate(graph, data, parameters="global")),
        ):
            error = np.asarray(est.means)[:, states] - data.truth_states
            coverage = float(np.mean(np.abs(error) <= 1.96 * np.asarray(est.stds)[:, states]))
            unknowns = {
                k: (
                    float(est.means[-1, est.state_names.index(k)]),
                    float(est.stds[-1, est.state_names.index(k)]),
                )
                for k in truths
            }
            score[label, seed] = (coverage, float(np.sqrt(np.mean(error**2))), unknowns)
        print(kind, seed, {k: v for k, v in score.items() if k[1] == seed})
        (c_cov, c_rmse, c_k), (b_cov, b_rmse, b_k) = score["central", seed], score["banded", seed]
        assert abs(b_cov - c_cov) <= 0.03 and b_rmse <= 1.25 * c_rmse, (seed, score)
        for name in truths:
            (cm, cs), (bm, bs) = c_k[name], b_k[name]
            assert abs(bm - cm) <= cs and 0.7 <= bs / cs <= 1.3, (seed, name, c_k, b_k)
    for label in ("central", "banded"):
        # calibrated 95 % intervals hold at least five of six truths 96.7 % of the time
        held = [
            abs(m - truths[k]) <= 1.96 * sd for seed in seeds for k, (m, sd) in score[label, seed][2].items()
        ]
        assert sum(held) >= 5, (label, score)
        pooled = np.mean([score[label, seed][0] for seed in seeds])
        assert 0.90 <= pooled <= 0.99, (label, pooled, score)  # central: the set-up is a calibrated one
    coverage = {}
    for messages in ("probabilistic", "deterministic"):
        with warnings.catch_warnings():  # deterministic messages' NIS is 1.47 here, rightly flagged
            warnings.simplefilter("ignore", FilterConsistencyWarning)
            est = estimate(Graph.from_model(chain, parts, dt=1e-3, messages=messages, **options), data)
        error = np.asarray(est.means)[:, states] - data.truth_states
        assert np.all(np.isfinite(error)), messages
        coverage[messages] = float(np.mean(np.abs(error) <= 1.96 * np.asarray(est.stds)[:, states]))
    print(kind, "messages", coverage)
    banded = score["banded", seeds[-1]][0]  # the same record
    assert coverage["deterministic"] < coverage["probabilistic"] < banded - 0.1, coverage


def test_a_measured_forces_noise_in_the_data_and_input_sd_in_q_calibrate_the_filter():
    """simulate_dataset(input_noise_sd=...) drives the truth with the applied forces and records them with
    a load cell's noise: a process noise that is really in the data. chain_graph(input_sd=...) puts that
    noise in Q as sd^2 g g^T, g = [dt^2 / (2 m), dt / m] on the mass's position and velocity. With it the
    whole chain's filter covers 0.90-0.99 of the states over three records; the same records with no Q
    under-cover, so the test can fail. The forces on the measured masses are exact here: an input error
    on a measured mass would also enter its accelerometer, correlated with Q (chain_graph's docstring)."""
    masses, springs = [100.0, 80.0, 120.0], [2e4, 1.8e4, 2.2e4]
    chain = Chain(masses, springs, [30.0] * 3, forced_dofs=[1, 2, 3], outputs=("a1", "a3"))
    dt, n, mass2 = 2e-3, 1000, 80.0
    input_sd = np.asarray([0.0, 40.0, 0.0])
    force = np.concatenate([_force(n, seed) for seed in (1, 2, 3)], axis=1)
    clean = simulate_dataset(chain, force, dt, 0.0, jax.random.key(0))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0))
    noisy = dict(input_noise_sd=input_sd)
    records = [simulate_dataset(chain, force, dt, sd, jax.random.key(k), **noisy) for k in range(3)]
    quiet = simulate_dataset(chain, force, dt, sd, jax.random.key(0))
    np.testing.assert_array_equal(records[0].truth_states, quiet.truth_states)  # the applied forces drive it
    np.testing.assert_array_equal(records[0].observations, quiet.observations)  # the same sensor noise
    error = np.asarray(records[0].inputs) - force
    assert np.all(error[:, [0, 2]] == 0.0) and abs(np.std(error[:, 1]) / 40.0 - 1.0) < 0.05
    assert records[0].metadata["input_noise_sd"] == [0.0, 40.0, 0.0]
    options = dict(noise_sd=sd, state_sd=1e-6, process_sd=0.0)
    graph = Graph.from_model(chain, [(1, 2, 3)], dt=dt, input_sd=input_sd, **options)
    g = np.asarray([dt**2 / (2.0 * mass2), dt / mass2])
    expected = np.zeros((6, 6))
    expected[np.ix_([1, 4], [1, 4])] = 40.0**2 * np.outer(g, g)
    whole = graph.nodes[0]
    assert isinstance(whole, Subsystem)
    np.testing.assert_allclose(whole.Q, expected, rtol=1e-12, atol=0.0)
    unaware = Graph.from_model(chain, [(1, 2, 3)], dt=dt, **options)

    def covered(g: Graph) -> float:
        hits = []
        for data in records:
            res = estimate(g, data)
            err = np.abs(np.asarray(res.means) - data.truth_states)[1:]
            hits.append(np.mean(err <= 1.96 * np.asarray(res.stds)[1:]))
        return float(np.mean(hits))

    calibrated = covered(graph)
    with pytest.warns(FilterConsistencyWarning, match=r"NIS\) averages 1\.\d+"):  # Q missing: NIS 1.6
        blind = covered(unaware)
    print(f"coverage with input_sd {calibrated:.3f}, without {blind:.3f}")
    assert 0.90 <= calibrated <= 0.99, calibrated
    assert blind < 0.75, blind
    with pytest.raises(ValueError, match=r"chain_graph input_sd: expected values >= 0"):
        Graph.from_model(chain, [(1, 2, 3)], dt=dt, input_sd=[0.0, -1.0, 0.0], **options)
    with pytest.raises(ValueError, match=r"input_noise_sd: expected finite values >= 0, one or one per"):
        simulate_dataset(chain, force, dt, sd, jax.random.key(0), input_noise_sd=[1.0, 2.0])
