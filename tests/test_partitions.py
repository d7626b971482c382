"""Issue #51 item 4, every partition works: subsystems without sensors, unknowns at cuts, reused programs.

Public API only, on systems that are not paper cases: a three-mass chain with its middle mass unmeasured,
and a user's own shear building (:class:`_Storeys`, not a :class:`~twinfer.models.Chain`) given to
``Graph.from_model`` with a storey stiffness at a cut and a subsystem that measures nothing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.signal import butter, lfilter
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.infer.filters import augment, run_filter
from twinfer.infer.graph import Graph
from twinfer.infer.graph._banded import banded_estimate
from twinfer.infer.graph._run import compile as compile_engine
from twinfer.infer.graph._run import compiled_for, estimate, run
from twinfer.models import AbstractModel, Chain, Connection
from twinfer.sim import rk4_step, simulate_dataset


class _Storeys(AbstractModel):
    """A user's own shear building: floors on storey springs and dampers (storey i joins floor i - 1, the
    ground for i = 1, to floor i), a force on floor ``forced``, absolute accelerometers on ``measured``."""

    params: dict
    forced: int
    measured: tuple[int, ...]

    def __init__(self, k, m, c, forced=2, measured=(1, 3)):
        self.params = {"m": jnp.asarray(m, float), "k": jnp.asarray(k, float), "c": jnp.asarray(c, float)}
        self.forced, self.measured = forced, tuple(measured)

    def vector_field(self, t, x, u, p):
        n = x.shape[0] // 2
        pos, vel = x[:n], x[n:]
        storey = p["k"] * jnp.diff(pos, prepend=0.0) + p["c"] * jnp.diff(vel, prepend=0.0)
        net = jnp.append(storey[1:], 0.0) - storey
        return jnp.concatenate([vel, net.at[self.forced - 1].add(u[0]) / p["m"]])

    def output(self, t, x, u, p):
        n = x.shape[0] // 2
        return self.vector_field(t, x, u, p)[n:][np.asarray(self.measured) - 1]

    state_names = property(lambda self: ("x1", "x2", "x3", "v1", "v2", "v3"))
    input_names = property(lambda self: ("f2",))
    output_names = property(lambda self: tuple(f"a{i}" for i in self.measured))
    connections = property(
        lambda self: (Connection(("x1", "v1"), ("x2", "v2")), Connection(("x2", "v2"), ("x3", "v3")))
    )


MASSES = [100.0, 80.0, 60.0]


def _building(k=(2e4, 1.8e4, 1.6e4), forced=2):
    return _Storeys(list(k), MASSES, [30.0] * 3, forced=forced)


FLOORS = [("x1", "v1"), ("x2", "v2"), ("x3", "v3")]


def _force(n, seed, scale):
    b, a = butter(4, 0.05)
    return lfilter(b, a, np.random.default_rng(seed).normal(size=(n + 1, 1)), axis=0) * scale


@pytest.mark.parametrize("estimator", ["ukf", "ekf"])
def test_item4_a_subsystem_without_sensors_predicts_from_its_messages(estimator):
    """A chain partition that leaves the middle mass without a sensor (it crashed the UKF in tria_rows and
    the EKF with an IndexError): that subsystem's filtered estimate is its prediction from its messages
    (no update: means and covariances equal to the predicted ones, log-likelihood increments 0), while
    the measured subsystems update (non-zero increments), and every estimate is finite."""
    chain = Chain([100.0, 80.0, 60.0], [2e4, 1.8e4, 1.6e4], 30.0, forced_dofs=[3], outputs=("a1", "a3"))
    dt, n = 1e-3, 200
    data = simulate_dataset(chain, _force(n, 0, 800.0), dt, 0.05, jax.random.key(0))
    graph = Graph.from_model(
        chain, [(1,), (2,), (3,)], dt=dt, estimator=estimator, noise_sd=0.05, state_sd=1e-3, process_sd=1e-5
    )
    assert [s.outputs for s in graph.flatten()[0]] == [(0,), (), (1,)]
    res = run(graph, data)
    silent = res["S2"]
    np.testing.assert_array_equal(np.asarray(silent.step_logliks), 0.0)
    assert float(silent.loglik) == 0.0
    np.testing.assert_array_equal(np.asarray(silent.means)[1:], np.asarray(silent.pred_means))
    np.testing.assert_allclose(np.asarray(silent.covs)[1:], np.asarray(silent.pred_covs), rtol=1e-12, atol=0)
    for name in ("S1", "S3"):
        assert np.all(np.asarray(res[name].step_logliks) != 0.0), name
    for r in res.values():
        assert np.isfinite(np.asarray(r.means)).all() and np.isfinite(np.asarray(r.covs)).all()


@pytest.mark.parametrize("estimator", ["ukf", "ekf", "kf"])
def test_item4_a_central_filter_of_a_model_without_outputs_predicts(estimator):
    """run_filter on a model with no outputs (it crashed in the same update): the estimate is the
    prediction alone: the truth's own trajectory from the known initial state to the RK4's error
    (1e-6 of the motion), a log-likelihood of 0, and the variances of P' = A P A^T + Q with A the RK4
    step's Jacobian, propagated here in NumPy."""
    chain = Chain([100.0, 80.0], [2e4, 1.8e4], 30.0, forced_dofs=[2], outputs=())
    dt, n = 1e-3, 300
    data = simulate_dataset(chain, _force(n, 1, 800.0), dt, 0.0, jax.random.key(1))
    est = run_filter(chain, data, estimator=estimator, integrator="rk4", state_sd=1e-6, process_sd=1e-7)
    assert est.loglik == 0.0
    scale = np.abs(data.truth_states).max(axis=0)
    assert np.max(np.abs(np.asarray(est.means) - data.truth_states) / scale) < 1e-6
    field = lambda x: chain.vector_field(0.0, x, jnp.zeros(1), chain.params)  # noqa: E731
    A = np.asarray(jax.jacfwd(lambda x: rk4_step(lambda t, z: field(z), 0.0, x, dt))(jnp.zeros(4)))
    P, variances = np.eye(4) * 1e-12, [np.full(4, 1e-12)]
    for _ in range(n):
        P = A @ P @ A.T + np.eye(4) * 1e-14
        variances.append(np.diag(P))
    np.testing.assert_allclose(np.asarray(est.stds), np.sqrt(variances), rtol=1e-9)


@pytest.mark.filterwarnings("ignore::twinfer.infer.graph.MessageFitWarning")  # item 3's check, not this one's
@pytest.mark.filterwarnings("ignore::twinfer.infer.filters.FilterConsistencyWarning")  # NIS 0.39: Q > truth's
def test_item4_a_spec_whose_partition_leaves_a_group_without_outputs_runs(tmp_path):
    """`twinfer estimate` on a chain whose partition leaves the middle mass unmeasured, with message
    passing (the route that crashed after the spec check passed): exit 0 and an estimate whose states
    cover the simulated truth."""
    spec = tmp_path / "unmeasured.toml"
    spec.write_text(
        'name = "unmeasured"\n[model]\nkind = "chain"\nmass = [100.0, 80.0, 60.0]\n'
        'stiffness = [2e4, 1.8e4, 1.6e4]\ndamping = 30.0\nforced_dofs = [3]\noutputs = ["a1", "a3"]\n'
        "[simulate]\nduration = 0.1\ndt = 1e-3\nnoise_sd = 0.05\nforce_sd = 800.0\nseed = 0\n"
        '[estimator]\nkind = "distributed"\nroute = "messages"\npartition = [[1], [2], [3]]\n'
        "noise_sd = 0.05\nstate_sd = 1e-3\nprocess_sd = 1e-5\n"
    )
    result = CliRunner().invoke(app, ["estimate", str(spec), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "state.coverage95" in result.output


def test_item4_an_unknown_read_by_two_groups_of_a_users_model_is_held_at_the_cut():
    """A storey stiffness at a cut (k2 acts on floors 1 and 2, each its own subsystem) is no longer
    refused: the subsystem whose accelerometer reads it (S1: a1) holds it and sends it with its port, S2
    reads it as a message. The graph's central model (its subsystems and messages assembled) steps exactly
    as the whole model augmented with k2 does under RK4, so the unknown enters both groups' physics."""
    model = _building()
    dt = 1e-3
    graph = Graph.from_model(model, FLOORS, dt=dt, unknown={"k2": (1.5e4, 5e3, 0.0)})
    subs = {s.name: s for s in graph.flatten()[0]}
    assert {k: s.parameters for k, s in subs.items()} == {"S1": ("k2",), "S2": (), "S3": ()}
    assert subs["S1"].ports["S2"].state == (0, 1, 2) and subs["S2"].n_msg == 5  # x1, v1, k2; x3, v3
    assert [s.outputs for s in subs.values()] == [(0,), (), (1,)]  # a3, the rate of v3, with S3
    whole = graph.monolithic("central")
    order = [whole.state_names.index(s) for s in (*model.state_names, "k2")]
    z = np.asarray([1e-3, -2e-3, 3e-3, 0.1, 0.05, -0.2, 1.7e4])
    state = np.empty(7)
    state[order] = z
    u = jnp.asarray([250.0])
    stepped = np.asarray(whole.transition(jnp.asarray(state), u, jnp.zeros(0), whole.params))[order]
    full = augment(model, ["k2"])
    field = lambda t, x: full.vector_field(t, x, u, full.params)  # noqa: E731
    np.testing.assert_allclose(stepped, np.asarray(rk4_step(field, 0.0, jnp.asarray(z), dt)), rtol=1e-12)


def test_item4_graphs_of_one_model_structure_share_their_compiled_program():
    """Graph.from_model on a user's model rebuilt with the same settings, or with other parameter values,
    reuses one compiled program (it recompiled each time: 12-13 s), and each graph runs on its own numbers,
    equal to a fresh compile of it; a model of another structure (the force on another floor, the same
    shapes) gets its own program."""
    dt, n = 1e-3, 200
    stiff, soft = _building(), _building(k=[1.5e4] * 3)
    data = simulate_dataset(stiff, _force(n, 2, 3000.0), dt, 0.05, jax.random.key(2))
    options = dict(dt=dt, noise_sd=0.05, state_sd=1e-3, process_sd=1e-5)
    graphs = [Graph.from_model(m, FLOORS, **options) for m in (stiff, _building(), soft)]
    assert compiled_for(graphs[0]) is compiled_for(graphs[1]) is compiled_for(graphs[2])
    other = Graph.from_model(_building(forced=3), FLOORS, **options)
    assert compiled_for(other) is not compiled_for(graphs[0])
    first, shared = run(graphs[0], data), run(graphs[2], data)
    fresh = run(graphs[2], data, compiled=compile_engine(graphs[2]))
    for name in ("S1", "S2", "S3"):
        np.testing.assert_array_equal(shared[name].means, fresh[name].means)
    assert not np.allclose(first["S2"].means, shared["S2"].means)


def _acceptance_record(seed):
    """A record of the building: a band-limited force on floor 2 (unmeasured) read by a load cell with
    50 N noise (the process noise in the data), accelerometers on floors 1 and 3 at 5 % noise."""
    model = _building()
    dt, n, load_cell = 1e-3, 2000, 50.0
    force = _force(n, seed, 3000.0)
    clean = simulate_dataset(model, force, dt, 0.0, jax.random.key(seed))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0))
    data = simulate_dataset(model, force, dt, sd, jax.random.key(100 + seed), input_noise_sd=load_cell)
    q = np.full(6, 1e-9)  # the held force's error on floor 2: dt^2 / (2 m) w on x2, dt / m w on v2
    q[[1, 4]] = load_cell * np.asarray([dt**2 / (2.0 * MASSES[1]), dt / MASSES[1]])
    options = dict(noise_sd=sd, state_sd=1e-3, process_sd=q, unknown={"k2": (1.2e4, 5e3, 0.0)})
    return model, data, options


def _coverage(est, data):
    error = np.abs(np.asarray(est.means)[1:, :6] - data.truth_states[1:])
    return np.mean(error <= 1.96 * np.asarray(est.stds)[1:, :6])


# Three records per route (43 s): make accept. make test covers each part at test size: the unmeasured
# subsystem (test_item4_a_subsystem_without_sensors_predicts_from_its_messages), the unknown at a cut
# (test_item4_an_unknown_read_by_two_groups_of_a_users_model_is_held_at_the_cut) and the banded default's
# calibration against the central filter (tests/test_distributed_default.py).
@pytest.mark.acceptance
@pytest.mark.parametrize("route", ["banded", "messages"])
def test_item4_acceptance_an_unmeasured_subsystem_and_an_unknown_at_a_cut(route):
    """Issue #51 acceptance: a 3-subsystem partition of a user's building with an unmeasured subsystem
    (S2) and the storey stiffness k2 at the cut between S1 and S2 runs on three records. The default
    distributed route (the banded filter at L = 1) covers as the central filter does (pooled 95 % state
    coverage in [0.90, 0.99] for both) and its k2 equals the central filter's within its own sd on every
    record. Message passing runs too; its k2 is within 2 sd of the central filter's on every record
    (measured: 1.66, 0.42 and 1.05 of its sd) and its pooled coverage (0.895 measured) is printed, not
    asserted (item 3 of the issue: message passing is not the calibrated route)."""
    cover, central_cover = [], []
    for seed in (0, 1, 2):
        model, data, options = _acceptance_record(seed)
        graph = Graph.from_model(model, FLOORS, dt=1e-3, **options)  # one program for the three records
        dist = banded_estimate(graph, data, 1) if route == "banded" else estimate(graph, data)
        central = run_filter(model, data, integrator="rk4", **options)
        k, k_sd = float(dist.means[-1, 6]), float(dist.stds[-1, 6])
        k_central, central_sd = float(central.means[-1, 6]), float(central.stds[-1, 6])
        print(f"{route} seed {seed}: k2 {k:.1f} +- {k_sd:.1f}, central {k_central:.1f} +- {central_sd:.1f}")
        assert dist.state_names[6] == central.state_names[6] == "k2"
        assert abs(k - k_central) <= (1.0 if route == "banded" else 2.0) * k_sd, (k, k_sd, k_central)
        cover.append(_coverage(dist, data))
        central_cover.append(_coverage(central, data))
    pooled, central_pooled = float(np.mean(cover)), float(np.mean(central_cover))
    print(f"{route}: coverage {np.round(cover, 3)} pooled {pooled:.3f}; central {central_pooled:.3f}")
    assert 0.90 <= central_pooled <= 0.99, central_cover
    if route == "banded":
        assert 0.90 <= pooled <= 0.99, cover
