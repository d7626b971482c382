import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from twinfer.data import GRID_CASES
from twinfer.experiments import get_case, no_progress, resolve_config
from twinfer.experiments.grid import GridName
from twinfer.infer.clusters import (
    Partition,
    cluster_layout,
    external_sums,
    heun_transition,
    partition_greedy,
    stable_substeps,
)
from twinfer.models import KuramotoNetwork
from twinfer.models.kuramoto import cluster_swing
from twinfer.sim import discretise


def _ring_network(n=7, seed=0):
    rng = np.random.default_rng(seed)
    dense = np.zeros((n, n))
    for i in range(n):
        dense[i, (i + 1) % n] = dense[(i + 1) % n, i] = rng.uniform(0.5, 2.0)
    dense[0, 3] = dense[3, 0] = 1.3
    k = sp.csr_matrix(dense)
    width = np.diff(k.indptr).max() + 1  # one column of padding
    index = np.repeat(np.arange(n)[:, None], width, 1)
    weight = np.zeros((n, width))
    for i in range(n):
        lo, hi = k.indptr[i], k.indptr[i + 1]
        index[i, : hi - lo], weight[i, : hi - lo] = k.indices[lo:hi], k.data[lo:hi]
    model = KuramotoNetwork(index, weight, rng.uniform(0.1, 0.3, n), rng.uniform(-1, 1, n))
    return k, model, rng


def test_local_coupling_with_true_external_phases_equals_global_vector_field():
    """Each cluster's swing equation, fed the other clusters' phases, is the global one (S89 vs S74)."""
    k, model, rng = _ring_network()
    n = model.n_bus
    part = partition_greedy(k, np.array([0, 4]), s_max=3)
    layout = cluster_layout(part, np.asarray(model.index), np.asarray(model.weight))
    x = rng.normal(size=2 * n)
    theta, omega = x[:n], x[n:]
    expected = np.asarray(model.vector_field(0.0, x, jnp.zeros(0), model.params))[n:]
    register = np.concatenate([theta, [0.0]])
    ext_all = external_sums(jnp.asarray(register), layout)
    for c in range(part.n_clusters):
        bus = np.asarray(layout.bus[c])
        valid = np.asarray(layout.valid[c])
        th_local = np.concatenate([theta, [0.0]])[bus]
        om_local = np.concatenate([omega, [0.0]])[bus]
        d = np.concatenate([np.asarray(model.params["d"]), [1.0]])[bus]
        big = np.concatenate([np.asarray(model.params["Omega"]), [0.0]])[bus]
        _, domega = cluster_swing(th_local, om_local, big, d, ext_all[c], layout.internal[c])
        np.testing.assert_allclose(np.asarray(domega)[valid], expected[bus[valid]], rtol=1e-12, atol=1e-12)
    assert part.n_clusters >= 2  # the test exercises both local and external neighbours


def test_single_cluster_heun_equals_library_heun_discretisation():
    """One cluster of every bus steps exactly like sim.discretise(model, dt, 'heun'), Omega held."""
    _, model, rng = _ring_network()
    n = model.n_bus
    whole = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
    layout = cluster_layout(whole, np.asarray(model.index), np.asarray(model.weight))
    f = heun_transition(0.01, model.params["d"], layout.internal[0])
    x = rng.normal(size=2 * n)
    aug = jnp.concatenate([jnp.asarray(x), model.params["Omega"]])
    out = np.asarray(f(aug, jnp.zeros((n, 2))))
    ref = np.asarray(
        discretise(model, 0.01, "heun").transition(0.0, jnp.asarray(x), jnp.zeros(0), model.params)
    )
    np.testing.assert_allclose(out[: 2 * n], ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out[2 * n :], np.asarray(model.params["Omega"]))


@pytest.mark.parametrize("substeps", [1, 3])
def test_predicted_messages_make_the_clusters_mean_step_the_global_heun_step(substeps):
    """Each cluster stepped with the staged external sums of its neighbours' mean prediction is exactly
    the network's own Heun step: a Jacobi exchange at every stage loses nothing for the mean."""
    from twinfer.infer.clusters import predicted_external_sums

    _, model, rng = _ring_network()
    n = model.n_bus
    part = partition_greedy(sp.csr_matrix(np.ones((n, n)) - np.eye(n)), np.array([0, 4]), s_max=3)
    layout = cluster_layout(part, np.asarray(model.index), np.asarray(model.weight))
    x = rng.normal(size=2 * n)
    glob = lambda v, fill: jnp.concatenate([jnp.asarray(v), jnp.full(1, fill)])[layout.bus]
    theta, omega = glob(x[:n], 0.0), glob(x[n:], 0.0)
    big = glob(model.params["Omega"], 0.0)
    damp = glob(model.params["d"], 1.0)
    means = jnp.concatenate([theta, omega, big], axis=1)
    staged = predicted_external_sums(means, damp, layout, n, 0.05, substeps)
    assert staged.shape == (part.n_clusters, substeps, 2, layout.bus.shape[1], 2)
    step = discretise(model, 0.05 / substeps, "heun")
    ref = jnp.asarray(x)
    for _ in range(substeps):
        ref = step.transition(0.0, ref, jnp.zeros(0), model.params)
    for c in range(part.n_clusters):
        f = heun_transition(0.05, damp[c], layout.internal[c], substeps)
        out = np.asarray(f(means[c], staged[c]))
        s = layout.bus.shape[1]
        valid, bus = np.asarray(layout.valid[c]), np.asarray(layout.bus[c])
        np.testing.assert_allclose(out[:s][valid], np.asarray(ref)[bus[valid]], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(
            out[s : 2 * s][valid], np.asarray(ref)[n + bus[valid]], rtol=1e-12, atol=1e-13
        )


def test_external_force_variance_matches_monte_carlo_to_first_order():
    """var(sum_j K_aj sin(theta_j - theta_a)) for small independent neighbour errors."""
    from twinfer.infer.clusters import external_force_variance

    _, model, rng = _ring_network()
    n = model.n_bus
    part = partition_greedy(sp.csr_matrix(np.ones((n, n)) - np.eye(n)), np.array([0, 4]), s_max=3)
    layout = cluster_layout(part, np.asarray(model.index), np.asarray(model.weight))
    theta = rng.normal(size=n)
    var = rng.uniform(1e-6, 4e-6, n)
    reg, reg_var = np.append(theta, 0.0), np.append(var, 0.0)
    local = reg[np.asarray(layout.bus)]
    v = np.asarray(
        external_force_variance(jnp.asarray(reg), jnp.asarray(reg_var), jnp.asarray(local), layout)
    )
    draws = reg[None] + np.sqrt(reg_var)[None] * rng.normal(size=(40000, n + 1))
    src, slot, w = (np.asarray(a) for a in (layout.ext_src, layout.ext_slot, layout.ext_weight))
    force = np.zeros((draws.shape[0], local.size))
    np.add.at(force, (slice(None), slot), w[None] * np.sin(draws[:, src] - local.reshape(-1)[slot][None]))
    force = force.reshape(draws.shape[0], *local.shape)
    has_ext = np.bincount(slot, minlength=local.size).reshape(local.shape) > 0
    assert has_ext.sum() >= 3
    np.testing.assert_allclose(v[has_ext], force.var(axis=0)[has_ext], rtol=0.05)
    np.testing.assert_array_equal(v[~has_ext], 0.0)


def test_grid_case_names_cover_the_bundled_networks():
    assert set(GridName.__args__) == set(GRID_CASES)


@pytest.mark.slow
def test_grid_quick_run_distributed_matches_central():
    """ieee9, short horizon: both estimators run, metrics are finite, distributed close to central."""
    case = get_case("grid")
    config = resolve_config(case, sets={"case": "ieee9", "steps": 80}, quick=True)
    art = case.run(config, no_progress)
    m = art.metrics
    assert m["partition.clusters"] == 3
    for key in ("nrmse_theta", "nrmse_omega", "nrmse_Omega", "coverage95_Omega"):
        assert np.isfinite(m[f"central.{key}"]) and np.isfinite(m[f"distributed.{key}"])
    state = lambda p: 0.5 * (m[f"{p}.nrmse_theta"] + m[f"{p}.nrmse_omega"])
    assert abs(state("distributed") - state("central")) <= 5e-3
    assert abs(m["distributed.nrmse_Omega"] - m["central.nrmse_Omega"]) <= 5e-2
    assert 0.9 <= m["distributed.coverage95_Omega"] <= 1.0


def test_substeps_are_two_half_heun_steps_and_chosen_from_the_stiffest_bus():
    """Two sub-steps equal two library Heun steps of dt/2; the count follows h sqrt(max row sum) <= 0.5."""
    _, model, rng = _ring_network()
    n = model.n_bus
    whole = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
    layout = cluster_layout(whole, np.asarray(model.index), np.asarray(model.weight))
    f = heun_transition(0.02, model.params["d"], layout.internal[0], substeps=2)
    x = jnp.asarray(rng.normal(size=2 * n))
    out = np.asarray(f(jnp.concatenate([x, model.params["Omega"]]), jnp.zeros((n, 2))))
    half = discretise(model, 0.01, "heun")
    ref = half.transition(
        0.0, half.transition(0.0, x, jnp.zeros(0), model.params), jnp.zeros(0), model.params
    )
    np.testing.assert_allclose(out[: 2 * n], np.asarray(ref), rtol=1e-12, atol=1e-14)
    assert stable_substeps(np.array([[2400.0, 0.0]]), 0.01) == 1  # IEEE 300's stiffest bus
    assert stable_substeps(np.array([[26000.0, 300.0]]), 0.01) == 4  # PEGASE 9241's


def test_wls_step_equals_the_normal_equations_of_the_two_term_objective():
    """x minimises ||y - H x||_R^-1 + ||x - F m||_Q^-1 for a linear model; cov is the inverse precision."""
    from twinfer.infer.filters import wls_step

    rng = np.random.default_rng(3)
    n, m = 4, 3
    f_mat, h_mat = rng.normal(size=(n, n)), rng.normal(size=(m, n))
    a, b = rng.normal(size=(n, n)), rng.normal(size=(m, m))
    q, r = a @ a.T + n * np.eye(n), b @ b.T + m * np.eye(m)
    mean, y = rng.normal(size=n), rng.normal(size=m)
    out = wls_step(
        lambda x, u: jnp.asarray(f_mat) @ x, lambda x, u: jnp.asarray(h_mat) @ x,
        jnp.asarray(mean), jnp.asarray(q), jnp.asarray(r), None, jnp.asarray(y), jnp.ones(m, bool),
    )  # fmt: skip
    precision = np.linalg.inv(q) + h_mat.T @ np.linalg.solve(r, h_mat)
    rhs = np.linalg.solve(q, f_mat @ mean) + h_mat.T @ np.linalg.solve(r, y)
    np.testing.assert_allclose(np.asarray(out.mean), np.linalg.solve(precision, rhs), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(out.cov), np.linalg.inv(precision), rtol=1e-10)
    masked = wls_step(
        lambda x, u: jnp.asarray(f_mat) @ x, lambda x, u: jnp.asarray(h_mat) @ x,
        jnp.asarray(mean), jnp.asarray(q), jnp.asarray(r), None, jnp.full(m, jnp.nan), jnp.zeros(m, bool),
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(masked.mean), f_mat @ mean, rtol=1e-12)  # no data: prediction


def _ieee14_problem(steps=40):
    import jax

    from twinfer.data import load_grid
    from twinfer.experiments.grid import GridConfig, draw_parameters, simulate

    config = GridConfig.model_validate({"case": "ieee14", "steps": steps})
    net = load_grid("ieee14")
    index, weight = net.neighbours
    key_params, key_sim = jax.random.split(jax.random.key(0))
    d, big_omega = draw_parameters(net.n_bus, key_params)
    model = KuramotoNetwork(index, weight, d, big_omega)
    part = partition_greedy(net.coupling, net.gen_buses, 5)
    return config, model, part, simulate(config, model, key_sim)


@pytest.mark.parametrize(("method", "messages"), [("ukf", "held"), ("wls", "held"), ("ukf", "probabilistic")])
def test_inert_padding_clusters_leave_the_estimates_unchanged(method, messages):
    """Padding the cluster axis (as for sharding over devices) changes nothing, to rounding."""
    from twinfer.infer.clusters import pad_layout, run_clusters

    config, model, part, sim = _ieee14_problem()
    n = model.n_bus
    layout = cluster_layout(part, np.asarray(model.index), np.asarray(model.weight))
    x0 = np.stack([sim["init"][:n], sim["init"][n:], np.zeros(n)], axis=1)
    args = (jnp.asarray(model.params["d"]), jnp.asarray(sim["observations"]), jnp.asarray(x0))
    rest = ((0.25, 0.25, 1.0), (1e-4, 1e-4, 1e-6), 4e-4, 0.01)
    plain = run_clusters(layout, *args, *rest, method=method, messages=messages)
    padded = run_clusters(pad_layout(layout, 4, n), *args, *rest, method=method, messages=messages)
    assert pad_layout(layout, 4, n).bus.shape[0] % 4 == 0 != layout.bus.shape[0] % 4
    np.testing.assert_allclose(np.asarray(padded.means), np.asarray(plain.means), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(padded.stds), np.asarray(plain.stds), rtol=0, atol=1e-13)


_SHARDED = """
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
assert len(jax.devices()) == 4, jax.devices()
import sys; sys.path.insert(0, {tests!r})
from test_grid_estimators import _ieee14_problem
from twinfer.experiments.grid import grid_estimator
config, model, part, sim = _ieee14_problem()
one = grid_estimator(config, part, model, sim["init"], 1e-6)(sim["observations"])
four = grid_estimator(config.model_copy(update={{"devices": 4}}), part, model, sim["init"], 1e-6)(
    sim["observations"])
print("SHARDS", len(four.means.sharding.device_set) if hasattr(four.means, "sharding") else 0)
print("DIFF", float(np.max(np.abs(np.asarray(one.means) - np.asarray(four.means)))),
      float(np.max(np.abs(np.asarray(one.stds) - np.asarray(four.stds)))))
"""


@pytest.mark.slow
def test_cluster_axis_sharded_over_four_devices_agrees_with_one_device():
    """The distributed UKF with its clusters split over 4 (host) devices equals the 1-device run."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_ENABLE_X64="1")
    script = _SHARDED.format(tests=str(Path(__file__).parent))
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    diffs = next(line for line in proc.stdout.splitlines() if line.startswith("DIFF")).split()[1:]
    assert max(float(v) for v in diffs) <= 1e-10, proc.stdout


def test_sincos_equals_the_library_sine_and_cosine_to_an_ulp():
    """Over quadrant boundaries, negative and large arguments (unwrapped phases)."""
    from twinfer.models.kuramoto import sincos

    rng = np.random.default_rng(7)
    half_pi = np.pi / 2 * np.arange(-400, 401)
    x = np.concatenate(
        [rng.uniform(-10, 10, 20000), rng.uniform(-1e5, 1e5, 2000), half_pi, half_pi + 1e-9, half_pi - 1e-9]
    )
    s, c = (np.asarray(v) for v in sincos(jnp.asarray(x)))
    tol = 4e-16 * np.maximum(1.0, np.abs(x) / 1e3)  # the reduction's rounding grows with |x|
    assert np.all(np.abs(s - np.sin(x)) <= tol), np.max(np.abs(s - np.sin(x)) / tol)
    assert np.all(np.abs(c - np.cos(x)) <= tol), np.max(np.abs(c - np.cos(x)) / tol)


def test_substep_groups_meet_each_clusters_own_stability_bound_with_divisors_of_the_finest():
    """Each cluster gets the fewest stable sub-steps for its own buses, rounded up to a divisor."""
    from twinfer.infer.clusters import substep_groups

    k, model, _ = _ring_network()
    weight = np.asarray(model.weight)
    row_sums = np.array([100.0, 100.0, 180.0**2, 100.0, 80.0**2, 80.0**2, 130.0**2])  # need 1 1 4 1 2 2 3
    weight = weight / weight.sum(axis=1, keepdims=True) * row_sums[:, None]
    part = partition_greedy(k, np.array([0, 4]), s_max=2)
    groups = substep_groups(part, weight, 0.01)
    finest = stable_substeps(weight, 0.01)
    assert [g for _, g in groups] == sorted({g for _, g in groups}) and groups[-1][1] == finest > 1
    seen = []
    for sub, g in groups:
        assert finest % g == 0 and sub.labels is part.labels
        for members in sub.clusters:
            assert stable_substeps(weight[members], 0.01) <= g  # stable
            seen.extend(members.tolist())
    assert sorted(seen) == list(range(model.n_bus))
    assert [g for _, g in groups] == [1, 2, 4]  # bus 6 needs 3, rounded up to the divisor 4


@pytest.mark.parametrize("messages", ["held", "probabilistic"])
def test_clusters_split_into_groups_with_the_same_substeps_give_the_same_estimates(messages):
    """Groups are bookkeeping: the same clusters in two batches (same sub-steps) change nothing."""
    from twinfer.infer.clusters import run_clusters

    config, model, part, sim = _ieee14_problem(steps=20)
    n = model.n_bus
    index, weight = np.asarray(model.index), np.asarray(model.weight)
    half = part.n_clusters // 2
    split = [Partition(part.labels, part.clusters[:half]), Partition(part.labels, part.clusters[half:])]
    x0 = np.stack([sim["init"][:n], sim["init"][n:], np.zeros(n)], axis=1)
    args = (jnp.asarray(model.params["d"]), jnp.asarray(sim["observations"]), jnp.asarray(x0))
    rest = ((0.25, 0.25, 1.0), (1e-4, 1e-4, 1e-6), 4e-4, 0.01, 1.0)
    one = run_clusters(cluster_layout(part, index, weight), *args, *rest, 2, messages=messages)
    two = run_clusters(
        [cluster_layout(p, index, weight, part.max_size) for p in split],
        *args,
        *rest,
        (2, 2),
        messages=messages,
    )
    np.testing.assert_allclose(np.asarray(two.means), np.asarray(one.means), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(two.stds), np.asarray(one.stds), rtol=0, atol=1e-12)


def test_mixed_substep_groups_read_the_fine_prediction_at_their_own_stage_times():
    """With groups of 2 and 1 sub-steps, the finer group's mean steps exactly as the network's Heun step
    of dt/2; the coarser one, fed the fine prediction at t and t + dt, stays within O(dt^2) of it."""
    from twinfer.infer.clusters import predicted_external_sums

    _, model, rng = _ring_network()
    n = model.n_bus
    part = partition_greedy(sp.csr_matrix(np.ones((n, n)) - np.eye(n)), np.array([0, 4]), s_max=3)
    groups = [Partition(part.labels, part.clusters[:1]), Partition(part.labels, part.clusters[1:])]
    steps = (2, 1)
    layouts = [cluster_layout(g, np.asarray(model.index), np.asarray(model.weight)) for g in groups]
    x = rng.normal(size=2 * n) * 0.3
    dt = 0.05
    means, damps = [], []
    for lay in layouts:
        glob = lambda v, fill, lay=lay: jnp.concatenate([jnp.asarray(v), jnp.full(1, fill)])[lay.bus]
        means.append(
            jnp.concatenate([glob(x[:n], 0.0), glob(x[n:], 0.0), glob(model.params["Omega"], 0.0)], 1)
        )
        damps.append(glob(model.params["d"], 1.0))
    staged = predicted_external_sums(means, damps, layouts, n, dt, steps)
    step = discretise(model, dt / 2, "heun")
    ref = np.asarray(
        step.transition(
            0.0, step.transition(0.0, jnp.asarray(x), jnp.zeros(0), model.params), jnp.zeros(0), model.params
        )
    )
    for lay, m, d, st, k, tol in zip(layouts, means, damps, staged, steps, (1e-12, 2e-3), strict=True):
        assert st.shape == (lay.bus.shape[0], k, 2, lay.bus.shape[1], 2)
        s = lay.bus.shape[1]
        for c in range(lay.bus.shape[0]):
            out = np.asarray(heun_transition(dt, d[c], lay.internal[c], k)(m[c], st[c]))
            valid, bus = np.asarray(lay.valid[c]), np.asarray(lay.bus[c])
            np.testing.assert_allclose(out[:s][valid], ref[bus[valid]], rtol=0, atol=tol)
            np.testing.assert_allclose(out[s : 2 * s][valid], ref[n + bus[valid]], rtol=0, atol=tol)
