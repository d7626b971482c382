import numpy as np
import pytest
import scipy.sparse as sp

from twinfer.data._grid import GRID_CASES, branch_coupling, load_grid, pandapower_case
from twinfer.experiments.grid import GridConfig, partition_for
from twinfer.infer.graph._partition import bond_for_step, partition_greedy
from twinfer.models.kuramoto import KuramotoNetwork, coupling_sum, wrap_angle

# MATPOWER/PYPOWER case9 branch table (1-based from, to, r, x, b), the data the paper used.
CASE9_BRANCHES = [
    (1, 4, 0.0, 0.0576, 0.0),
    (4, 5, 0.017, 0.092, 0.158),
    (5, 6, 0.039, 0.17, 0.358),
    (3, 6, 0.0, 0.0586, 0.0),
    (6, 7, 0.0119, 0.1008, 0.209),
    (7, 8, 0.0085, 0.072, 0.149),
    (8, 2, 0.0, 0.0625, 0.0),
    (8, 9, 0.032, 0.161, 0.306),
    (9, 4, 0.01, 0.085, 0.176),
]


def _dense_ybus_offdiag_abs(n, rows):
    """Textbook nodal admittance (MATPOWER manual 3.2), built entry by entry: |Y_ij|, i != j."""
    y = np.zeros((n, n), complex)
    for f, t, r, x, b, ratio, shift in rows:
        ys = 1.0 / complex(r, x)
        tap = (ratio or 1.0) * np.exp(1j * np.deg2rad(shift))
        y[f, f] += (ys + 0.5j * b) / abs(tap) ** 2
        y[t, t] += ys + 0.5j * b
        y[f, t] += -ys / np.conj(tap)
        y[t, f] += -ys / tap
    k = np.abs(y)
    np.fill_diagonal(k, 0.0)
    return k


def _branch_table(rows):
    table = np.zeros((len(rows), 13))
    for i, (f, t, r, x, b, ratio, shift) in enumerate(rows):
        table[i, [0, 1, 2, 3, 4, 8, 9, 10]] = [f, t, r, x, b, ratio, shift, 1.0]
    return table


def test_case9_coupling_equals_pypower_case_data():
    """pandapower's bundled case9 gives the |Y_ij| of the PYPOWER case9 table the paper used."""
    rows = [(f - 1, t - 1, r, x, b, 0.0, 0.0) for f, t, r, x, b in CASE9_BRANCHES]
    net = load_grid("ieee9")
    np.testing.assert_allclose(net.coupling.toarray(), _dense_ybus_offdiag_abs(9, rows), rtol=1e-9)
    assert net.gen_buses.tolist() == [0, 1, 2]


# MATPOWER/PYPOWER case14 branch table (1-based from, to, r, x, b, tap ratio): three transformers.
CASE14_BRANCHES = [
    (1, 2, 0.01938, 0.05917, 0.0528, 0.0),
    (1, 5, 0.05403, 0.22304, 0.0492, 0.0),
    (2, 3, 0.04699, 0.19797, 0.0438, 0.0),
    (2, 4, 0.05811, 0.17632, 0.034, 0.0),
    (2, 5, 0.05695, 0.17388, 0.0346, 0.0),
    (3, 4, 0.06701, 0.17103, 0.0128, 0.0),
    (4, 5, 0.01335, 0.04211, 0.0, 0.0),
    (4, 7, 0.0, 0.20912, 0.0, 0.978),
    (4, 9, 0.0, 0.55618, 0.0, 0.969),
    (5, 6, 0.0, 0.25202, 0.0, 0.932),
    (6, 11, 0.09498, 0.1989, 0.0, 0.0),
    (6, 12, 0.12291, 0.25581, 0.0, 0.0),
    (6, 13, 0.06615, 0.13027, 0.0, 0.0),
    (7, 8, 0.0, 0.17615, 0.0, 0.0),
    (7, 9, 0.0, 0.11001, 0.0, 0.0),
    (9, 10, 0.03181, 0.0845, 0.0, 0.0),
    (9, 14, 0.12711, 0.27038, 0.0, 0.0),
    (10, 11, 0.08205, 0.19207, 0.0, 0.0),
    (12, 13, 0.22092, 0.19988, 0.0, 0.0),
    (13, 14, 0.17093, 0.34802, 0.0, 0.0),
]


def test_case14_coupling_equals_pypower_case_data_with_transformers():
    """pandapower's transformer model of case14, converted back, keeps PYPOWER's tap-ratio admittances."""
    rows = [(f - 1, t - 1, r, x, b, ratio, 0.0) for f, t, r, x, b, ratio in CASE14_BRANCHES]
    net = load_grid("ieee14")
    np.testing.assert_allclose(net.coupling.toarray(), _dense_ybus_offdiag_abs(14, rows), rtol=1e-12)
    assert net.gen_buses.tolist() == [0, 1, 2, 5, 7]


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in GRID_CASES if c.startswith("ieee")])
def test_ieee_coupling_equals_pypower_makeybus(case):
    """Every IEEE case: |Y_ij| equals the off-diagonal of PYPOWER's makeYbus on the same branch table."""
    from pandapower.pypower.idx_brch import branch_cols
    from pandapower.pypower.makeYbus import makeYbus

    _, ppc = pandapower_case(case)
    branch = np.real(ppc["branch"])  # makeYbus reads pandapower's extra (zero) asymmetry columns
    branch = np.hstack([branch, np.zeros((len(branch), branch_cols - branch.shape[1]))])
    ybus = makeYbus(ppc["baseMVA"], np.real(ppc["bus"]), branch)[0].toarray()
    reference = np.abs(ybus)
    np.fill_diagonal(reference, 0.0)
    coupling = branch_coupling(len(ppc["bus"]), ppc["branch"]).toarray()  # as load_grid builds it
    np.testing.assert_allclose(coupling, reference, rtol=1e-12, atol=1e-12 * reference.max())


def test_branch_coupling_with_taps_shifts_parallel_and_outages():
    """Taps, phase shifts and parallel branches follow the nodal formulation; outaged branches vanish."""
    rows = [
        (0, 1, 0.01, 0.1, 0.02, 0.0, 0.0),
        (1, 2, 0.0, 0.2, 0.0, 0.95, 5.0),
        (1, 2, 0.02, 0.3, 0.0, 0.0, 0.0),
    ]
    table = _branch_table(rows + [(0, 2, 0.1, 0.1, 0.0, 0.0, 0.0)])
    table[-1, 10] = 0.0  # out of service
    np.testing.assert_allclose(
        branch_coupling(3, table).toarray(), _dense_ybus_offdiag_abs(3, rows), rtol=1e-12
    )
    with pytest.raises(ValueError, match="bus numbers must lie in 0..1"):
        branch_coupling(2, table)


@pytest.mark.slow
def test_partition_counts_equal_table_s2():
    """Cluster counts and mean sizes of Table S2 (case300 needs S_max = 3; S_max = 5 gives 69)."""
    expected = {
        "ieee9": (5, 3, 3.0),
        "ieee14": (5, 5, 2.8),
        "ieee30": (5, 6, 5.0),
        "ieee39": (5, 10, 3.9),
        "ieee57": (5, 12, 4.75),
        "ieee118": (5, 54, 2.185),
        "ieee300": (3, 100, 3.0),
    }
    for case, (s_max, count, mean) in expected.items():
        net = load_grid(case)
        part = partition_greedy(net.coupling, net.gen_buses, s_max)
        assert part.n_clusters == count, case
        assert part.mean_size == pytest.approx(mean, abs=5e-3), case
        assert part.max_size <= s_max
        assert sorted(np.concatenate(part.clusters).tolist()) == list(range(net.n_bus))
    net = load_grid("ieee300")
    assert partition_greedy(net.coupling, net.gen_buses, 5).n_clusters == 69


def test_partition_greedy_hand_example_and_errors():
    """One node per cluster per sweep, clusters in seed order; full clusters force a singleton."""
    k = sp.csr_matrix(np.diag([1.0, 3.0, 2.0, 1.0], 1) + np.diag([1.0, 3.0, 2.0, 1.0], -1))  # path 0-1-2-3-4
    two = partition_greedy(k, [0, 4], s_max=2)
    assert [c.tolist() for c in two.clusters] == [[0, 1], [3, 4], [2]]
    three = partition_greedy(k, [0, 4], s_max=3)
    assert [c.tolist() for c in three.clusters] == [[0, 1, 2], [3, 4]]
    assert three.labels.tolist() == [0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="s_max: expected >= 1; received 0"):
        partition_greedy(k, [0], s_max=0)
    with pytest.raises(ValueError, match="seeds: expected nodes in 0..4"):
        partition_greedy(k, [7])
    with pytest.raises(ValueError, match="unique"):
        partition_greedy(k, [1, 1])
    with pytest.raises(ValueError, match="bond: expected a positive coupling or None; received 0"):
        partition_greedy(k, [0], bond=0.0)
    with pytest.raises(ValueError, match="grid case: expected a twinfer name \\('ieee9', 'ieee14'"):
        load_grid("ieee10")
    assert "pegase9241" in GRID_CASES


def test_kuramoto_vector_field_matches_dense_formula():
    """The padded-neighbour swing equation equals the dense S73-S74 sum; phases are output wrapped."""
    rng = np.random.default_rng(0)
    n = 6
    dense = np.triu(rng.uniform(0, 2, (n, n)) * (rng.uniform(size=(n, n)) < 0.5), 1)
    dense = dense + dense.T
    net = sp.csr_matrix(dense)
    deg = np.diff(net.indptr).max()
    index = np.repeat(np.arange(n)[:, None], deg, 1)
    weight = np.zeros((n, deg))
    for i in range(n):
        nb = net.indices[net.indptr[i] : net.indptr[i + 1]]
        index[i, : len(nb)], weight[i, : len(nb)] = nb, net.data[net.indptr[i] : net.indptr[i + 1]]
    d, omega_nat = rng.uniform(0.1, 0.3, n), rng.uniform(-1, 1, n)
    model = KuramotoNetwork(index, weight, d, omega_nat)
    x = rng.normal(size=2 * n) * 3.0
    theta, omega = x[:n], x[n:]
    expected = -d * omega + omega_nat + (dense * np.sin(theta[None, :] - theta[:, None])).sum(1)
    out = np.asarray(model.vector_field(0.0, x, np.zeros(0), model.params))
    np.testing.assert_allclose(out, np.concatenate([omega, expected]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        coupling_sum(theta, index, weight), expected + d * omega - omega_nat, atol=1e-12
    )
    y = np.asarray(model.output(0.0, x, np.zeros(0), model.params))
    np.testing.assert_allclose(np.exp(1j * y[:n]), np.exp(1j * theta), atol=1e-12)
    assert np.all(np.abs(y[:n]) <= np.pi)
    assert float(wrap_angle(np.pi)) == pytest.approx(-np.pi)
    assert model.param_names[-1] == f"Omega{n}"
    with pytest.raises(ValueError, match=r"damping: expected shape \(6,\); received \(5,\)"):
        KuramotoNetwork(index, weight, d[:5], omega_nat)


def test_report_sets_each_network_beside_its_own_table_rows():
    from twinfer.experiments.grid import GridConfig, paper_values

    p39 = paper_values(GridConfig.model_validate({"case": "ieee39"}))
    assert p39["partition.clusters"].value == 10 and p39["distributed.coverage95_Omega"].value == 0.921
    assert "partition.clusters" not in paper_values(GridConfig.model_validate({"case": "ieee300"}))  # S_max 5
    assert (
        paper_values(GridConfig.model_validate({"case": "ieee300", "s_max": 3}))["partition.clusters"].value
        == 100
    )
    assert paper_values(GridConfig.model_validate({"case": "pegase9241"})) == {}


def test_a_bond_keeps_stiff_edges_inside_clusters():
    """Edges with K >= bond move as one group: it joins a cluster only where it fits, else stands alone."""
    k = sp.csr_matrix(np.diag([1.0, 3.0, 2.0, 1.0], 1) + np.diag([1.0, 3.0, 2.0, 1.0], -1))  # path 0-1-2-3-4
    assert [c.tolist() for c in partition_greedy(k, [0, 4], s_max=2, bond=3.0).clusters] == [
        [0],
        [3, 4],
        [1, 2],
    ]
    assert [c.tolist() for c in partition_greedy(k, [0, 4], s_max=3, bond=3.0).clusters] == [
        [0, 1, 2],
        [3, 4],
    ]
    whole = partition_greedy(k, [0, 4], s_max=2, bond=1.0)  # one group larger than s_max: one cluster
    assert [c.tolist() for c in whole.clusters] == [[0, 1, 2, 3, 4]] and whole.labels.tolist() == [0] * 5
    assert bond_for_step(0.01) == pytest.approx(5000.0) and bond_for_step(0.01, 2.0) == pytest.approx(20000.0)


def test_joined_pairs_are_never_cut_and_bad_pairs_are_named():
    """A joined pair moves as one group whatever its coupling (a bus without a PMU and its stiffest
    neighbour); a pair outside the network is refused by name."""
    k = sp.csr_matrix(np.diag([1.0, 3.0, 2.0, 1.0], 1) + np.diag([1.0, 3.0, 2.0, 1.0], -1))  # path 0-1-2-3-4
    joined = partition_greedy(k, [0, 4], s_max=2, joined=np.array([[2, 3]]))
    assert joined.labels[2] == joined.labels[3]
    assert partition_greedy(k, [0, 4], s_max=2).labels[2] != partition_greedy(k, [0, 4], s_max=2).labels[3]
    with pytest.raises(
        ValueError, match=r"partition joined: expected node pairs in 0..4; received \[\[2, 9\]\]"
    ):
        partition_greedy(k, [0], joined=np.array([[2, 9]]))


def test_case1888rtes_partition_cuts_no_edge_too_stiff_for_the_step():
    """case1888rte joins buses by K up to 2e4: the paper's partition cuts 58 edges with dt sqrt(2K) > 1 at
    dt = 0.01, and its Jacobi estimate diverged through them at seed 0 (t = 0.58 s). The grid case's
    partition keeps them inside clusters of at most s_max buses, and the run at seed 0 covers (0.989)."""
    net = load_grid("case1888rte")
    coo = sp.triu(net.coupling).tocoo()

    def too_stiff(part):
        cut = part.labels[coo.row] != part.labels[coo.col]
        return int(np.sum(cut & (0.01 * np.sqrt(2.0 * coo.data) > 1.0)))

    assert too_stiff(partition_greedy(net.coupling, net.gen_buses, 5)) == 58
    part = partition_for(net, GridConfig(case="case1888rte").s_max, 0.01)
    assert too_stiff(part) == 0 and part.max_size <= 5 and part.n_clusters == 378
