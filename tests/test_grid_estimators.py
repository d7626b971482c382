import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from twinfer.data import GRID_CASES, Partition, partition_greedy
from twinfer.experiments import get_case, no_progress, resolve_config
from twinfer.experiments.grid import GridName
from twinfer.infer.clusters import cluster_layout, heun_transition, stable_substeps
from twinfer.infer.clusters._kuramoto import _local_rhs
from twinfer.models import KuramotoNetwork
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
    for c in range(part.n_clusters):
        bus = np.asarray(layout.bus[c])
        valid = np.asarray(layout.valid[c])
        th_local = np.concatenate([theta, [0.0]])[bus]
        om_local = np.concatenate([omega, [0.0]])[bus]
        d = np.concatenate([np.asarray(model.params["d"]), [1.0]])[bus]
        big = np.concatenate([np.asarray(model.params["Omega"]), [0.0]])[bus]
        ext = register[np.asarray(layout.nbr_global[c])]
        _, domega = _local_rhs(th_local, om_local, big, d, ext, layout.nbr_local[c], layout.nbr_weight[c])
        np.testing.assert_allclose(np.asarray(domega)[valid], expected[bus[valid]], rtol=1e-12, atol=1e-12)
    assert part.n_clusters >= 2  # the test exercises both local and external neighbours


def test_single_cluster_heun_equals_library_heun_discretisation():
    """One cluster of every bus steps exactly like sim.discretise(model, dt, 'heun'), Omega held."""
    _, model, rng = _ring_network()
    n = model.n_bus
    whole = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
    layout = cluster_layout(whole, np.asarray(model.index), np.asarray(model.weight))
    f = heun_transition(0.01, model.params["d"], layout.nbr_local[0], layout.nbr_weight[0])
    x = rng.normal(size=2 * n)
    aug = jnp.concatenate([jnp.asarray(x), model.params["Omega"]])
    out = np.asarray(f(aug, jnp.zeros(layout.nbr_global[0].shape)))
    ref = np.asarray(
        discretise(model, 0.01, "heun").transition(0.0, jnp.asarray(x), jnp.zeros(0), model.params)
    )
    np.testing.assert_allclose(out[: 2 * n], ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out[2 * n :], np.asarray(model.params["Omega"]))


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
    f = heun_transition(0.02, model.params["d"], layout.nbr_local[0], layout.nbr_weight[0], substeps=2)
    x = jnp.asarray(rng.normal(size=2 * n))
    out = np.asarray(f(jnp.concatenate([x, model.params["Omega"]]), jnp.zeros(layout.nbr_global[0].shape)))
    half = discretise(model, 0.01, "heun")
    ref = half.transition(
        0.0, half.transition(0.0, x, jnp.zeros(0), model.params), jnp.zeros(0), model.params
    )
    np.testing.assert_allclose(out[: 2 * n], np.asarray(ref), rtol=1e-12, atol=1e-14)
    assert stable_substeps(np.array([[2400.0, 0.0]]), 0.01) == 1  # IEEE 300's stiffest bus
    assert stable_substeps(np.array([[26000.0, 300.0]]), 0.01) == 4  # PEGASE 9241's
