from typing import Any, Literal

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from twinfer.data import GRID_CASES
from twinfer.experiments import get_case, no_progress, resolve_config
from twinfer.experiments.grid import GridName
from twinfer.infer.graph import Field, Graph, Partition, Port, Subsystem, kuramoto_graph
from twinfer.infer.graph._kuramoto import bus_values, stable_substeps, substep_groups
from twinfer.infer.graph._partition import partition_greedy
from twinfer.infer.graph._run import compile as compile_engine
from twinfer.infer.graph._run import run_field
from twinfer.models import KuramotoNetwork
from twinfer.models.kuramoto import sincos
from twinfer.sim import discretise, heun_node


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


def test_grid_case_names_cover_the_bundled_networks():
    assert set(GridName.__args__) == set(GRID_CASES)


_MATPOWER3 = """function mpc = case3
% three buses numbered 11..13; the third branch has a 1.05 tap shifted 3 degrees
mpc.baseMVA = 100;
mpc.bus = [
    11  3  0   0  0  0  1  1  0  345  1  1.1  0.9;
    12  2  0   0  0  0  1  1  0  345  1  1.1  0.9;
    13  1  90  30 0  0  1  1  0  345  1  1.1  0.9;
];
mpc.gen = [
    12  163  0  300  -300  1  100  1  300  10;
    11  0    0  300  -300  1  100  1  250  10;
];
mpc.branch = [
    11  12  0      0.0576  0      250  250  250  0     0  1  -360  360;
    12  13  0.017  0.092   0.158  250  250  250  0     0  1  -360  360;
    11  13  0.039  0.17    0.358  150  150  150  1.05  3  1  -360  360;
];
"""


def test_a_users_network_loads_from_pandapower_json_matpower_or_a_pandapower_name(tmp_path):
    """Any network: a pandapower JSON file equals the bundled case it was written from; a MATPOWER file
    gives |Y_ij| of its branches (series admittance, tap and shift) with its own bus numbers; any
    pandapower network function loads by name; anything else is a named error in the case's config."""
    import pandapower
    import pandapower.networks as pandapower_networks

    from twinfer.data import load_grid

    path = tmp_path / "net9.json"
    net9: Any = pandapower_networks.case9()  # typed by pandapower as a union with dict
    pandapower.to_json(net9, str(path))
    mine, bundled = load_grid(str(path)), load_grid("ieee9")
    np.testing.assert_allclose(mine.coupling.toarray(), bundled.coupling.toarray(), rtol=1e-12)
    np.testing.assert_array_equal(mine.gen_buses, bundled.gen_buses)
    m_file = tmp_path / "case3.m"
    m_file.write_text(_MATPOWER3)
    net = load_grid(str(m_file))
    k = net.coupling.toarray()
    assert net.bus_ids.tolist() == [11, 12, 13] and net.gen_buses.tolist() == [1, 0]
    np.testing.assert_allclose(k[0, 1], 1 / 0.0576, rtol=1e-12)
    np.testing.assert_allclose(k[1, 2], abs(1 / complex(0.017, 0.092)), rtol=1e-12)
    np.testing.assert_allclose(k[0, 2], abs(1 / complex(0.039, 0.17)) / 1.05, rtol=1e-12)
    assert load_grid("case5").n_bus == 5
    case = get_case("grid")
    assert resolve_config(case, sets={"case": str(m_file)}).model_dump()["case"] == str(m_file)
    with pytest.raises(ValueError, match=r"grid case: expected a twinfer name .* received 'case99999'"):
        resolve_config(case, sets={"case": "case99999"})
    with pytest.raises(ValueError, match=r"no such file"):
        resolve_config(case, sets={"case": str(tmp_path / "missing.json")})
    m_file.write_text(_MATPOWER3.replace("mpc.gen", "mpc.generators"))
    with pytest.raises(ValueError, match=r"expected a table mpc.gen = \[ ... \]; found none"):
        load_grid(str(m_file))


@pytest.mark.slow
def test_grid_quick_run_distributed_matches_central():
    """ieee9, short horizon: the six estimators (central/distributed UKF, WLS, WNLS) run, metrics are
    finite, the distributed UKF close to the central one, WNLS no worse than WLS, Table S2's columns."""
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
    for prefix in ("central", "distributed", "wls", "wnls", "central_wls", "central_wnls"):
        for key in ("rmse_theta", "rmse_omega", "nrmse_theta", "run_s", "compile_s"):
            assert np.isfinite(m[f"{prefix}.{key}"]), (prefix, key)
    for key in ("speedup_distributed_vs_central", "speedup_wls_distributed_vs_central",
                "speedup_wnls_distributed_vs_central", "distributed.parallel_s"):  # fmt: skip
        assert np.isfinite(m[key]) and m[key] > 0, key
    np.testing.assert_allclose(m["distributed.parallel_s"], m["distributed.run_s"] / 3, rtol=1e-12)
    # h is linear (phases, frequencies), so WNLS's first step is WLS's and its minimiser: equal to rounding
    # (measured: 0.0318537 both, distributed; 0.0319711 both, central).
    for wls, wnls in (("wls", "wnls"), ("central_wls", "central_wnls")):
        assert m[f"{wnls}.rmse_theta"] <= m[f"{wls}.rmse_theta"] * (1 + 1e-6)
    # Fig. S9(b,c): the six estimators' state RMSEs are of the same order (measured 0.009 to 0.033)
    six = ("central", "distributed", "wls", "wnls", "central_wls", "central_wnls")
    states = [m[f"{p}.rmse_{q}"] for p in six for q in ("theta", "omega")]
    assert max(states) / min(states) < 10


def test_wls_step_equals_the_normal_equations_of_the_two_term_objective():
    """x minimises ||y - H x||_R^-1 + ||x - F m||_Q^-1 for a linear model; cov is the inverse precision."""
    from twinfer.infer.filters._wls import wls_step

    rng = np.random.default_rng(3)
    n, m = 4, 3
    f_mat, h_mat = rng.normal(size=(n, n)), rng.normal(size=(m, n))
    a, b = rng.normal(size=(n, n)), rng.normal(size=(m, m))
    q, r = a @ a.T + n * np.eye(n), b @ b.T + m * np.eye(m)
    mean, y = rng.normal(size=n), rng.normal(size=m)
    out = wls_step(
        lambda x, u: jnp.asarray(f_mat) @ x, lambda x, u: jnp.asarray(h_mat) @ x,
        jnp.asarray(mean), jnp.asarray(q), jnp.asarray(r), jnp.zeros(0), jnp.asarray(y), jnp.ones(m, bool),
    )  # fmt: skip
    precision = np.linalg.inv(q) + h_mat.T @ np.linalg.solve(r, h_mat)
    rhs = np.linalg.solve(q, f_mat @ mean) + h_mat.T @ np.linalg.solve(r, y)
    np.testing.assert_allclose(np.asarray(out.mean), np.linalg.solve(precision, rhs), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(out.cov), np.linalg.inv(precision), rtol=1e-10)
    masked = wls_step(
        lambda x, u: jnp.asarray(f_mat) @ x, lambda x, u: jnp.asarray(h_mat) @ x,
        jnp.asarray(mean), jnp.asarray(q), jnp.asarray(r), jnp.zeros(0), jnp.full(m, jnp.nan),
        jnp.zeros(m, bool),
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(masked.mean), f_mat @ mean, rtol=1e-12)  # no data: prediction


def _two_term_problem(seed, n=4, m=6):
    rng = np.random.default_rng(seed)
    f_mat, h_mat = 0.5 * rng.normal(size=(n, n)), rng.normal(size=(m, n))
    a, b = rng.normal(size=(n, n)), rng.normal(size=(m, m))
    q, r = 0.1 * (a @ a.T + n * np.eye(n)), 0.01 * (b @ b.T + m * np.eye(m))
    return f_mat, h_mat, jnp.asarray(q), jnp.asarray(r), jnp.asarray(rng.normal(size=n)), rng


def test_wnls_on_a_linear_measurement_equals_the_wls_step():
    """Claim: with h linear, J is quadratic and one Gauss-Newton step from the prediction is its exact
    minimiser, so WNLS (damped, iterated) and WLS (one undamped step) agree to rounding, covariance too;
    the damping's 1e-8 relative error of the first step is removed by the second, then WNLS stops.
    Diagonal covariances given as variances, and a linear h given as its matrix, give the same steps."""
    import jax

    from twinfer.infer.filters._wls import wls_step, wnls_step

    f_mat, h_mat, q, r, mean, rng = _two_term_problem(5)
    y, mask = jnp.asarray(rng.normal(size=6)), jnp.ones(6, bool).at[2].set(False)
    f = lambda x, u: jnp.asarray(f_mat) @ x  # noqa: E731
    h = lambda x, u: jnp.asarray(h_mat) @ x  # noqa: E731
    args = (f, h, mean, q, r, jnp.zeros(0), y, mask)
    wls, wnls = (jax.jit(step, static_argnums=(0, 1))(*args) for step in (wls_step, wnls_step))
    np.testing.assert_allclose(np.asarray(wnls.mean), np.asarray(wls.mean), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(wnls.cov), np.asarray(wls.cov), rtol=1e-10, atol=1e-14)
    assert bool(wnls.ok) and int(wnls.iterations) == 2
    q_var, r_var = jnp.diag(q), jnp.diag(r)  # diagonal covariances given as variances: the same step
    wls_jit = jax.jit(wls_step, static_argnums=(0, 1))
    full = wls_jit(f, h, mean, jnp.diag(q_var), jnp.diag(r_var), jnp.zeros(0), y, mask)
    by_var = wls_jit(f, h, mean, q_var, r_var, jnp.zeros(0), y, mask)
    np.testing.assert_allclose(np.asarray(by_var.mean), np.asarray(full.mean), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(by_var.cov), np.asarray(full.cov), rtol=1e-12, atol=1e-16)
    matrix = jax.jit(wnls_step, static_argnums=(0,))(f, jnp.asarray(h_mat), *args[2:])  # h as its matrix
    np.testing.assert_allclose(np.asarray(matrix.mean), np.asarray(wnls.mean), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(matrix.cov), np.asarray(wnls.cov), rtol=1e-12, atol=1e-16)
    with pytest.raises(ValueError, match=r"StaticStep r: expected a covariance \(n, n\) or its"):
        wls_jit(f, h, mean, q, r[:, :2], jnp.zeros(0), y, mask)


def test_wnls_minimises_the_two_term_objective_where_one_wls_step_does_not():
    """Claim: on a nonlinear h (sines of linear maps, the grid's kind), WNLS's estimate satisfies the
    normal equations (the gradient of J, written out in numpy with h's Jacobian by hand, ~ 0) and has a
    smaller J than WLS's one step from the prediction; its covariance is (Q^-1 + H^T R^-1 H)^-1 with H at
    the solution."""
    import jax

    from twinfer.infer.filters._wls import StaticStep, wls_step, wnls_step

    f_mat, h_mat, q, r, mean, rng = _two_term_problem(11)
    q_np, r_np = np.asarray(q), np.asarray(r)
    x_bar = f_mat @ np.asarray(mean)
    y = np.sin(3.0 * h_mat @ (x_bar + rng.normal(scale=0.3, size=4))) + 0.05 * rng.normal(size=6)

    def objective_and_gradient(x):  # J and grad J, eqs. of the _wls module docstring
        ry, rx = y - np.sin(3.0 * h_mat @ x), x - x_bar
        jac = 3.0 * np.cos(3.0 * h_mat @ x)[:, None] * h_mat
        value = ry @ np.linalg.solve(r_np, ry) + rx @ np.linalg.solve(q_np, rx)
        return value, -2 * jac.T @ np.linalg.solve(r_np, ry) + 2 * np.linalg.solve(q_np, rx), jac

    f = lambda x, u: jnp.asarray(f_mat) @ x  # noqa: E731
    h = lambda x, u: jnp.sin(3.0 * jnp.asarray(h_mat) @ x)  # noqa: E731
    args = (f, h, mean, q, r, jnp.zeros(0), jnp.asarray(y), jnp.ones(6, bool))
    wls, wnls = (jax.jit(step, static_argnums=(0, 1))(*args) for step in (wls_step, wnls_step))
    assert 2 < int(wnls.iterations) <= 5
    j_wnls, grad, jac = objective_and_gradient(np.asarray(wnls.mean))
    j_bar, grad_bar, _ = objective_and_gradient(x_bar)
    assert j_wnls < objective_and_gradient(np.asarray(wls.mean))[0] < j_bar
    assert np.max(np.abs(grad)) <= 1e-6 * np.max(np.abs(grad_bar)), (grad, int(wnls.iterations))
    precision = np.linalg.inv(q_np) + jac.T @ np.linalg.solve(r_np, jac)
    np.testing.assert_allclose(np.asarray(wnls.cov), np.linalg.inv(precision), rtol=1e-9)
    with pytest.raises(ValueError, match=r"StaticStep max_iter: expected at least 1 .* received 0"):
        StaticStep(iterate=True, max_iter=0)


def test_central_wls_equals_the_distributed_wls_of_a_one_cluster_partition():
    """Claim: the central WLS (one cluster of every bus in bus order, as the grid case builds it) is
    the distributed estimator of a partition that happens to have one cluster (one generator, S_max = N),
    its buses in any slot order, to rounding: the slots and the bus mapping change nothing."""
    k, model, rng = _ring_network(n=5)
    n = model.n_bus
    assert partition_greedy(k, np.array([3]), s_max=n).n_clusters == 1
    one = Partition(labels=np.zeros(n, int), clusters=(rng.permutation(n),))  # its buses in another order
    whole = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
    x0 = np.stack([rng.normal(size=n), rng.normal(size=n), np.zeros(n)], axis=1)
    ys = rng.normal(scale=0.3, size=(4, 2 * n))
    out = []
    for part in (whole, one):  # WNLS takes the same path (STATIC_STEPS); two compilations, ~1 s each
        cg = kuramoto_graph(
            model, part, dt=0.01, x0=x0, state_sd=(0.5, 0.5, 1.0), process_sd=(0.01, 0.01, 0.01),
            noise_sd=0.02,
            estimator="wls", messages="held",
        )  # fmt: skip
        compiled = compile_engine(cg.graph)
        means, sds, _ = compiled.scan(compiled.numbers, jnp.zeros((4, 0)), ys, jnp.ones(ys.shape, bool))
        out.append((bus_values(cg, compiled, means, n), bus_values(cg, compiled, sds, n)))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-10, atol=1e-12)


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


_SHARDED = """
import jax, numpy as np, twinfer; twinfer.configure()
assert len(jax.devices()) == 4, jax.devices()
import sys; sys.path.insert(0, {tests!r})
from test_grid_estimators import _ieee14_problem
from twinfer.experiments.grid import grid_estimator
config, model, part, sim = _ieee14_problem()
one = grid_estimator(config, part, model, sim["init"], 1e-6)(sim["observations"])
four_fn = grid_estimator(config.model_copy(update={{"devices": 4}}), part, model, sim["init"], 1e-6)
raw = four_fn.scan(jax.numpy.asarray(sim["observations"]))
four = four_fn.to_buses(raw)
print("SHARDS", len(raw[0][0].sharding.device_set))
print("DIFF", float(np.max(np.abs(one[0] - four[0]))), float(np.max(np.abs(one[1] - four[1]))))
"""


@pytest.mark.slow
def test_cluster_axis_sharded_over_four_devices_agrees_with_one_device():
    """The distributed UKF with its clusters split over 4 (host) devices (the member axis padded with
    inert clusters to a multiple of 4) equals the 1-device run."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from _xla import QUICK_XLA_FLAGS

    # four host devices with the suite's quick compile options (XLA's defaults, as the variable was set
    # before, compiled for 2-3 times as long): both runs are the child's, compiled alike
    flags = " ".join(["--xla_force_host_platform_device_count=4", *QUICK_XLA_FLAGS])
    env = dict(os.environ, XLA_FLAGS=flags, JAX_ENABLE_X64="1")
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
    from twinfer.infer.graph._kuramoto import substep_groups

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


Messages = Literal["held", "probabilistic"]


def _tiny_step(model, part, x, dt, substeps=None, messages: Messages = "probabilistic", stds=False):
    """Bus means (N, 3) after one step of the cluster graph with (almost) no uncertainty, no data."""
    n = model.n_bus
    x0 = np.stack([x[:n], x[n:], np.asarray(model.params["Omega"])], axis=1)
    cg = kuramoto_graph(
        model, part, dt=dt, x0=x0, state_sd=(1e-12,) * 3, process_sd=(1e-12,) * 3, noise_sd=1.0,
        substeps=substeps, messages=messages,
    )  # fmt: skip
    compiled = compile_engine(cg.graph)
    means, sds, _ = compiled.scan(
        compiled.numbers, jnp.zeros((1, 0)), jnp.zeros((1, 2 * n)), jnp.zeros((1, 2 * n), bool)
    )
    return bus_values(cg, compiled, sds if stds else means, n)[0]


def _heun(model, x, dt, substeps):
    step = discretise(model, dt / substeps, "heun")
    for _ in range(substeps):
        x = step.transition(0.0, x, jnp.zeros(0), model.params)
    return np.asarray(x)


@pytest.mark.parametrize("substeps", [1, 3])
def test_predicted_messages_make_every_cluster_step_the_networks_own_heun_step(substeps):
    """With predicted field messages (a Jacobi exchange at every Heun stage), each cluster's mean steps
    exactly as sim.discretise(model, 'heun') steps the whole network: nothing is lost for the mean. One
    cluster of every bus (the central filter) is the same check without edges."""
    _, model, rng = _ring_network()
    n = model.n_bus
    x = rng.normal(size=2 * n)
    ref = _heun(model, jnp.asarray(x), 0.05, substeps)
    part = partition_greedy(sp.csr_matrix(np.ones((n, n)) - np.eye(n)), np.array([0, 4]), s_max=3)
    whole = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
    for p in (part, whole):
        out = _tiny_step(model, p, x, 0.05, substeps)
        np.testing.assert_allclose(out[:, 0], ref[:n], rtol=1e-10, atol=1e-11)
        np.testing.assert_allclose(out[:, 1], ref[n:], rtol=1e-10, atol=1e-11)
        np.testing.assert_allclose(out[:, 2], np.asarray(model.params["Omega"]), rtol=1e-12)
    assert part.n_clusters >= 2


def test_held_messages_freeze_the_other_clusters_phases_over_the_step():
    """Held messages (S89): each cluster steps its own buses by Heun with every other bus frozen at t_n,
    checked against the global vector field with the other buses' entries held."""
    _, model, rng = _ring_network()
    n = model.n_bus
    x = rng.normal(size=2 * n)
    part = partition_greedy(sp.csr_matrix(np.ones((n, n)) - np.eye(n)), np.array([0, 4]), s_max=3)
    out = _tiny_step(model, part, x, 0.05, 1, messages="held")
    for members in part.clusters:
        idx = np.concatenate([members, n + members])

        def local(t, y, idx=idx):
            full = jnp.asarray(x).at[idx].set(y)
            return model.vector_field(t, full, jnp.zeros(0), model.params)[idx]

        k1 = local(0.0, x[idx])
        k2 = local(0.05, x[idx] + 0.05 * k1)
        ref = np.asarray(x[idx] + 0.025 * (k1 + k2))
        np.testing.assert_allclose(out[members, 0], ref[: members.size], rtol=1e-10, atol=1e-11)
        np.testing.assert_allclose(out[members, 1], ref[members.size :], rtol=1e-10, atol=1e-11)


def test_mixed_substep_groups_read_the_fine_prediction_at_their_own_stage_times():
    """Clusters that need 2 Heun sub-steps step exactly as the network's Heun step of dt/2; those that
    need 1, fed the fine prediction at t and t + dt, stay within O(dt^2) of it."""
    k, model, rng = _ring_network()
    n = model.n_bus
    weight = np.asarray(model.weight).copy()
    weight[2] *= 250.0 / weight[2].sum()  # bus 2 stiff (0.05 sqrt(250) = 0.79): its cluster needs 2 sub-steps
    stiff = KuramotoNetwork(model.index, weight, model.params["d"], model.params["Omega"])
    part = partition_greedy(k, np.array([0, 4]), s_max=3)
    groups = substep_groups(part, weight, 0.05)
    assert [g for _, g in groups] == [1, 2]
    x = rng.normal(size=2 * n) * 0.3
    out = _tiny_step(stiff, part, x, 0.05)
    ref = _heun(stiff, jnp.asarray(x), 0.05, 2)
    for (sub, _), tol in zip(groups, (2e-3, 1e-10), strict=True):
        buses = np.concatenate(sub.clusters)
        np.testing.assert_allclose(out[buses, 0], ref[buses], rtol=0, atol=tol)
        np.testing.assert_allclose(out[buses, 1], ref[n + buses], rtol=0, atol=tol)


def test_first_order_field_variance_enters_the_driven_rate_as_dt2_var_force():
    """Two one-bus subsystems, the sender's phase uncertain: after one step without data the receiver's
    frequency variance is q + dt^2 K^2 cos^2(theta_j - theta_a) (var theta_j + dt^2/3 var omega_j)
    (the first-order field variance), and with variance='none' just q (plus its own, negligible)."""
    dt, w, q = 0.01, 2.0, 1e-6
    th_j, th_a, v_th, v_om = 0.4, -0.3, 0.02, 0.5

    def vf(x, u, m, params):
        return jnp.stack([x[1], params["k"] * (jnp.cos(x[0]) * m[0] - jnp.sin(x[0]) * m[1]), 0.0 * x[1]])

    node = heun_node(vf, dt)
    ports = {"s": Port((0,), (0, 1)), "rate": Port((1,))}

    def sub(name, x0, p0):
        return Subsystem(
            name=name, transition=node.transition, output=np.zeros((0, 3)), params={"k": jnp.asarray(1.0)},
            x0=np.asarray(x0), P0=np.diag(p0), Q=q * np.eye(3), R=np.zeros((0, 0)), inputs=(), outputs=(),
            ports=ports, n_msg=2, dynamics=node.dynamics,
        )  # fmt: skip

    def law(sj, sa):
        return jnp.sin(sj - sa)

    def features(s):
        return jnp.stack(sincos(s))

    results = {}
    for variance in ("first-order", "none"):
        field = Field(
            "f", "s", features, law, ("j", "a"), np.array([0]), np.array([0]), np.array([1]), np.array([0]),
            np.array([w]), message="predicted", variance=variance, rate="rate", drives="rate",
        )  # fmt: skip
        graph = Graph("two", [sub("j", [th_j, 0.0, 0.0], [v_th, v_om, 1e-30]),
                              sub("a", [th_a, 0.0, 0.0], [1e-30, 1e-30, 1e-30])], fields=[field])  # fmt: skip
        est = run_field(graph, us=np.zeros((1, 0)), ys=np.zeros((1, 0)))
        results[variance] = est["a"].stds[1, 1] ** 2
    expected = q + dt**2 * w**2 * np.cos(th_j - th_a) ** 2 * (v_th + dt**2 / 3 * v_om)
    np.testing.assert_allclose(results["first-order"], expected, rtol=1e-9)
    np.testing.assert_allclose(results["none"], q, rtol=1e-6)


def test_field_graph_errors_name_the_field_and_the_problem():
    """A field whose edge reads a variable its sender lacks, or an unknown member, fails at build time."""
    _, model, _ = _ring_network()
    n = model.n_bus
    part = partition_greedy(sp.csr_matrix(np.ones((n, n)) - np.eye(n)), np.array([0, 4]), s_max=3)
    cg = kuramoto_graph(
        model, part, dt=0.01, x0=np.zeros((n, 3)), state_sd=(1, 1, 1), process_sd=(1, 1, 1), noise_sd=1.0
    )
    with pytest.raises(
        ValueError, match=r"kuramoto_graph process_sd: expected finite standard deviations >= 0"
    ):
        kuramoto_graph(
            model, part, dt=0.01, x0=np.zeros((n, 3)), state_sd=(1, 1, 1), process_sd=(1, -1, 1), noise_sd=1.0
        )
    field = cg.graph.fields[0]
    subs = list(cg.graph.nodes)
    bad = Field(
        "coupling", "theta", field.features, field.law, field.members, field.sender, field.sender_var + 9,
        field.receiver, field.receiver_var, field.weight,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"Field 'coupling' sender_var: edge 0 reads variable"):
        Graph("grid", subs, fields=[bad])
    with pytest.raises(ValueError, match=r"Field 'x' message: expected one of"):
        Field("x", "theta", field.features, field.law, (), [], [], [], [], [], message="exact")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"run_field"):
        from twinfer.infer.graph._run import run

        run(cg.graph, us=np.zeros((2, 0)), ys=np.zeros((2, 2 * n)))


def test_a_diverging_cluster_is_named_with_its_step_and_time():
    """An observation far outside the model (a 1e200 phase) breaks one cluster's update; run_field raises
    DivergenceError naming that cluster and the step, not a NaN estimate."""
    from twinfer.data import Dataset
    from twinfer.infer.filters import DivergenceError

    _, model, rng = _ring_network()
    n = model.n_bus
    part = partition_greedy(sp.csr_matrix(np.ones((n, n)) - np.eye(n)), np.array([0, 4]), s_max=3)
    sd = (0.01, 0.01, 0.01)
    cg = kuramoto_graph(
        model, part, dt=0.01, x0=np.zeros((n, 3)), state_sd=(1, 1, 1), process_sd=sd, noise_sd=0.01
    )
    ys = rng.normal(size=(6, 2 * n)) * 0.01
    ys[3, n + 2] = 1e200  # bus 2's frequency at step 3 (t = 0.04)
    name = next(k for k, b in cg.buses.items() if 2 in b)
    with pytest.raises(DivergenceError, match=rf"subsystem '{name}' at step 3 \(t = 0.04\)"):
        run_field(cg.graph, Dataset(times=np.arange(7) * 0.01, observations=np.vstack([ys[:1], ys])))


def test_estimate_of_a_cluster_graph_is_one_estimate_in_bus_order():
    """graph.estimate on a field-coupled cluster graph: theta, omega, Omega per bus in bus order (padding
    slots left out), Omega as the parameters, the values those of run_field mapped by bus_values."""
    from twinfer.infer.graph._run import estimate

    _, model, rng = _ring_network()
    n = model.n_bus
    part = partition_greedy(sp.csr_matrix(np.ones((n, n)) - np.eye(n)), np.array([0, 4]), s_max=3)
    assert max(len(c) for c in part.clusters) > min(len(c) for c in part.clusters)  # a padded cluster
    x0 = np.stack([np.zeros(n), np.zeros(n), np.asarray(model.params["Omega"])], axis=1)
    cg = kuramoto_graph(
        model, part, dt=0.01, x0=x0, state_sd=(0.3,) * 3, process_sd=(0.01,) * 3, noise_sd=0.1
    )
    ys = rng.normal(scale=0.1, size=(20, 2 * n))
    est = estimate(cg.graph, us=np.zeros((20, 0)), ys=ys)
    names = [f"{q}{b + 1}" for q in ("theta", "omega", "Omega") for b in range(n)]
    assert est.state_names == tuple(names) and est.parameters == tuple(names[2 * n :])
    assert est.means.shape == (21, 3 * n) and np.isnan(est.loglik)
    fields = run_field(cg.graph, us=np.zeros((20, 0)), ys=ys)
    compiled = compile_engine(cg.graph)
    per = [
        np.stack([np.asarray(fields[compiled.names[i]].means) for i in g.members], 1)
        for g in compiled.engine.groups
    ]
    by_bus = bus_values(cg, compiled, per, n)  # (T + 1, N, 3)
    np.testing.assert_allclose(
        est.means, np.concatenate([by_bus[:, :, k] for k in range(3)], axis=1), rtol=1e-12
    )
