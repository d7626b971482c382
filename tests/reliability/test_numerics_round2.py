"""Issue #52, second round: the graph estimators' record check, the results API, the unscented
transform at Merwe's textbook setting, and a stiff grid coupling that must not hang.

Each test is named after the #52 item it checks; the error paths stop before anything is compiled.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from filterpy.kalman import MerweScaledSigmaPoints, UnscentedKalmanFilter

from twinfer.data import Dataset, load_grid
from twinfer.infer import Estimate
from twinfer.infer.filters import FilterConsistencyWarning, gaussian_filter, run_filter
from twinfer.infer.gaussian import UnscentedWeights, condition, linear, unscented
from twinfer.infer.graph import Graph, Partition, chain_graph, kuramoto_graph
from twinfer.infer.graph._banded import banded_estimate
from twinfer.infer.graph._kuramoto import substep_groups
from twinfer.infer.graph._run import estimate, run_field
from twinfer.models import Chain, KuramotoNetwork

DT = 1e-2


def _chain() -> Chain:
    return Chain([1.0] * 4, [1e3] * 4, [1.0] * 4, forced_dofs=[4], outputs=("a1", "a3", "a4"))


def _record(output_names: tuple[str, ...], input_names: tuple[str, ...] = ("f4",)) -> Dataset:
    """Six zero samples: the check runs before any program, so the numbers never matter."""
    times = np.arange(6) * DT
    zeros = np.zeros((6, len(output_names)))
    return Dataset(times, zeros, inputs=np.zeros((6, 1)), output_names=output_names, input_names=input_names)


ENGINES = {"estimate": estimate, "banded_estimate": banded_estimate}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_graph_dataset_with_other_output_names_is_a_named_error(engine):
    """A record of ``a1, a2, a4`` for a graph of ``a1, a3, a4``: message passing and the banded filter
    read columns by position, so they ran on the wrong sensor (RMSE 3x, no error) where run_filter
    refuses; now both name the expected and the received outputs, before compiling anything."""
    graph = Graph.from_model(_chain(), [(1, 2), (3, 4)], dt=DT, noise_sd=0.01)
    start = time.perf_counter()
    with pytest.raises(
        ValueError,
        match=rf"{engine} dataset outputs: expected \('a1', 'a3', 'a4'\) .* received \('a1', 'a2', 'a4'\)",
    ):
        ENGINES[engine](graph, _record(("a1", "a2", "a4")))
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("engine", list(ENGINES))
def test_graph_dataset_with_fewer_outputs_is_a_named_error(engine):
    """A record with fewer outputs than the graph reads (banded_estimate raised a raw IndexError) is a
    named error: by name for a graph from a model, and by column count for one built from its parts
    without names, naming the subsystem that reads the missing column."""
    graph = Graph.from_model(_chain(), [(1, 2), (3, 4)], dt=DT, noise_sd=0.01)
    with pytest.raises(ValueError, match=r"dataset outputs: expected \('a1', 'a3', 'a4'\)"):
        ENGINES[engine](graph, _record(("a1", "a3")))
    named = chain_graph(_chain(), [(1, 2), (3, 4)], dt=DT, noise_sd=0.01)
    assert named.output_names == ("a1", "a3", "a4")  # chain_graph passes the model's names on
    unnamed = dataclasses.replace(named, output_names=None, input_names=None)
    with pytest.raises(
        ValueError,
        match=rf"{engine} dataset outputs: expected at least 3 columns \(subsystem 'S2' reads columns "
        r"\[1, 2\]\); received 2",
    ):
        ENGINES[engine](unnamed, _record(("a1", "a3")))


def test_graph_dataset_with_other_input_names_is_a_named_error():
    """The inputs too: a force recorded at mass 3 for a chain forced at mass 4 is refused, naming both
    (the default unnamed ``u1`` is accepted, as run_filter accepts it)."""
    graph = Graph.from_model(_chain(), [(1, 2), (3, 4)], dt=DT, noise_sd=0.01)
    with pytest.raises(ValueError, match=r"banded_estimate dataset inputs: expected 1 columns \('f4',\)"):
        banded_estimate(graph, _record(("a1", "a3", "a4"), ("f3",)))
    graph.check_dataset(_record(("a1", "a3", "a4"), ("u1",)), "estimate")  # the default names pass


def _estimate(sds: np.ndarray | None = None) -> Estimate:
    times = np.linspace(0.0, 1.0, 3)
    means = np.column_stack([np.zeros(3), np.full(3, 2.0e4)])
    sds = np.column_stack([np.full(3, 0.1), np.full(3, 1.0e3)]) if sds is None else sds
    return Estimate(times, means, sds, None, ("x1", "k4"), parameters=("k4",))


def test_summary_truth_with_a_misspelt_key_is_a_named_error_with_did_you_mean():
    """``summary(truth={"K4": ...})`` ignored the key and scored k4 as "not inside"; now the key is
    refused, naming the columns and the closest one."""
    with pytest.raises(ValueError, match=r"Estimate truth: expected keys among the columns .* received 'K4' "
                       r"\(did you mean 'k4'\?\)"):  # fmt: skip
        _estimate().summary(truth={"K4": 2.0e4})


def test_summary_reports_a_parameter_without_truth_as_unknown():
    """A column whose truth is not given is unknown (``inside`` <NA>), not outside its interval; those
    with a truth are still scored."""
    table = _estimate().summary(truth={"x1": np.zeros(3)})
    assert bool(table.loc["x1", "inside"]) and str(table["inside"].dtype) == "boolean"
    assert table.loc["k4", "inside"] is pd.NA and np.isnan(table.loc["k4", "truth"])


@pytest.mark.parametrize("bad", [-1.0, np.nan])
def test_estimate_with_negative_or_nan_sds_is_refused(bad):
    """Negative or NaN standard deviations gave intervals with low > high (or none): refused at
    construction, naming the field, the column, the row and the value."""
    sds = np.column_stack([np.full(3, 0.1), np.full(3, 1.0e3)])
    sds[2, 1] = bad
    expected = rf"Estimate stds: expected standard deviations >= 0 .* received {bad} for 'k4' at row 2"
    with pytest.raises(ValueError, match=expected):
        _estimate(sds)
    sds[2, 1] = np.inf  # an unbounded sd is kept: its interval is the whole line
    assert _estimate(sds).interval("k4") == (-np.inf, np.inf)
    sds[:, 1] = np.nan  # NaN down a whole column: a point estimate without uncertainty (a PINN's)
    assert all(np.isnan(_estimate(sds).interval("k4")))


def _linear_system(seed: int = 3, n: int = 4, m: int = 2, steps: int = 20) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    F = 0.95 * np.linalg.qr(rng.normal(size=(n, n)))[0]
    H = rng.normal(size=(m, n))
    return F, H, rng.normal(size=(steps, m)) * 0.3


def test_merwe_textbook_setting_matches_filterpy_and_the_kalman_filter():
    """Merwe's sigma points at alpha = 1e-3, beta = 2, kappa = 0 (central weight about -1e6): the
    regression's residual covariance, zero in exact arithmetic on a linear model, came out indefinite at
    rounding level (eigenvalues ~ -1e-25) and its Cholesky factor NaN, so gaussian_filter returned NaN
    silently. Now the square-root SLR UKF runs and equals filterpy's UnscentedKalmanFilter with
    MerweScaledSigmaPoints(1e-3, 2, 0) (an independent covariance-form reference) and the Kalman
    filter's closed form, to the 1e-10 that the -1e6 weight leaves of float64's digits in the means."""
    F, H, ys = _linear_system()
    n, m = H.shape[1], H.shape[0]
    Q, R, P0 = 1e-3 * np.eye(n), 1e-2 * np.eye(m), 0.1 * np.eye(n)
    ref = UnscentedKalmanFilter(
        n, m, 1.0, lambda x, u: H @ x, lambda x, dt, u: F @ x, MerweScaledSigmaPoints(n, 1e-3, 2.0, 0.0)
    )
    ref.x, ref.P, ref.Q, ref.R = np.zeros(n), P0.copy(), Q, R
    means, covs, loglik = [], [], 0.0
    for y in ys:
        ref.predict(u=0.0)
        ref.update(y, u=0.0)
        means.append(ref.x.copy())
        covs.append(ref.P.copy())
        loglik += ref.log_likelihood
    args = (
        lambda x, u: jnp.asarray(F) @ x,
        lambda x, u: jnp.asarray(H) @ x,
        jnp.zeros(n),
        jnp.linalg.cholesky(P0),
        jnp.linalg.cholesky(Q),
        jnp.linalg.cholesky(R),
        jnp.zeros((len(ys), 1)),
        jnp.asarray(ys),
    )
    out = gaussian_filter(*args, linearisation=unscented(UnscentedWeights.merwe(1e-3, 2.0, 0.0)))
    kf = gaussian_filter(*args, linearisation=linear)
    for other_means, other_covs, other_ll in ((np.array(means), np.array(covs), loglik),
                                              (kf.means, kf.covs, kf.loglik)):  # fmt: skip
        np.testing.assert_allclose(out.means, other_means, rtol=0, atol=1e-9)
        np.testing.assert_allclose(out.covs, other_covs, rtol=0, atol=1e-12)
        np.testing.assert_allclose(out.loglik, other_ll, rtol=1e-9)


def test_merwe_textbook_setting_runs_the_redrawn_filter_on_a_ten_state_chain():
    """run_filter(linearisation="redrawn") with Merwe (1e-3, 2, 0) on a 10-state chain raised a
    DivergenceError at step 0; it now equals the Kalman filter on the same (linear) chain."""
    chain = Chain([1.0] * 5, [1e2] * 5, [1.0] * 5, forced_dofs=[5], outputs=("a1", "a3", "a5"))
    rng = np.random.default_rng(0)
    data = Dataset(np.arange(8) * DT, rng.normal(size=(8, 3)) * 0.01, inputs=rng.normal(size=(8, 1)),
                   output_names=chain.output_names, input_names=chain.input_names)  # fmt: skip
    options = {"noise_sd": 0.01, "state_sd": 1e-3, "process_sd": 1e-5}
    weights = UnscentedWeights.merwe(1e-3, 2.0, 0.0)
    with warnings.catch_warnings():  # the record is noise: the NIS check may warn
        warnings.simplefilter("ignore", FilterConsistencyWarning)
        ukf = run_filter(chain, data, estimator="ukf", linearisation="redrawn", weights=weights, **options)
        kf = run_filter(chain, data, estimator="kf", **options)
    np.testing.assert_allclose(ukf.means, kf.means, rtol=0, atol=1e-8 * np.max(np.abs(kf.means)))
    np.testing.assert_allclose(ukf.stds, kf.stds, rtol=1e-6)


def test_chain_without_forced_dofs_runs_the_kalman_filter():
    """``Chain(..., forced_dofs=[])`` with the Kalman filter: an empty index array of integer dtype in
    Chain.linear_matrices (it raised "Indexer must have integer or boolean type")."""
    chain = Chain([1.0] * 3, [1e2] * 3, [1.0] * 3, forced_dofs=[], outputs=("x1", "a3"))
    data = Dataset(np.arange(6) * DT, np.zeros((6, 2)), output_names=chain.output_names)
    with warnings.catch_warnings():  # a zero record: the NIS check may warn
        warnings.simplefilter("ignore", FilterConsistencyWarning)
        est = run_filter(chain, data, estimator="kf", noise_sd=0.01, x0=0.01)
    assert chain.n_input == 0 and np.all(np.isfinite(est.means))


_MATPOWER_SHORT = """function mpc = short3
mpc.baseMVA = 100;
mpc.bus = [
    1  3  0  0  0  0  1  1  0  345  1  1.1  0.9;
    2  2  0  0  0  0  1  1  0  345  1  1.1  0.9;
    3  1  0  0  0  0  1  1  0  345  1  1.1  0.9;
];
mpc.gen = [
    1  0  0  300  -300  1  100  1  300  10;
    2  0  0  300  -300  1  100  1  300  10;
];
mpc.branch = [
    1  2  1e-12  1e-12  0  250  250  250  0  0  1  -360  360;
    2  3  0.017  0.092  0  250  250  250  0  0  1  -360  360;
];
"""


def _grid(network: KuramotoNetwork, partition: Partition, steps: int = 2) -> tuple[Graph, np.ndarray]:
    n = network.n_bus
    x0 = np.column_stack([np.linspace(-0.2, 0.2, n), np.zeros(n), np.zeros(n)])
    cg = kuramoto_graph(
        network, partition, dt=DT, x0=x0, state_sd=(0.01,) * 3, process_sd=(0.001,) * 3, noise_sd=0.1
    )
    ys = np.column_stack([np.linspace(-0.2, 0.2, n)] * steps).T @ np.eye(n, 2 * n)
    return cg.graph, ys


def test_near_zero_impedance_branch_is_a_named_error_in_seconds(tmp_path):
    """A MATPOWER branch with r = x = 1e-12 asks for 16,818 Heun sub-steps per step; the sub-step loop
    was unrolled while tracing, and nothing happened for 300 s. Now the count is bounded
    (MAX_SUBSTEPS): a named error naming the subsystems, the stiffest coupling (the two buses' variables),
    its stiffness and the step, suggesting to merge the buses or shorten the step, before tracing."""
    path = tmp_path / "short3.m"
    path.write_text(_MATPOWER_SHORT)
    net = load_grid(str(path))
    index, weight = net.neighbours
    network = KuramotoNetwork(index, weight, np.full(3, 0.2), np.zeros(3))
    partition = Partition(labels=np.array([0, 0, 1]), clusters=(np.array([0, 1]), np.array([2])))
    graph, ys = _grid(network, partition)
    start = time.perf_counter()
    with pytest.raises(
        ValueError,
        match=r"field 'coupling': subsystems \['cluster1.0'\] need 16818 Heun sub-steps per step of "
        r"dt = 0.01 s; expected at most MAX_SUBSTEPS = 64. Their stiffest coupling is 'theta2' "
        r"\(cluster1.0\) -> 'omega1' \(cluster1.0\), of stiffness 6.93e\+11 .* merge them; or use a step "
        r"dt <= 3.81e-05 s",
    ):
        run_field(graph, us=np.zeros((2, 0)), ys=ys)
    assert time.perf_counter() - start < 10.0


# Last-step means and standard deviations of both clusters' states on _stiff_network's record, computed
# by the unrolled sub-step loop the scan replaced (FieldEngine._predicted of commit e7758b4); the scan
# gave the same numbers to the last bit, here and at 16 and 50 sub-steps on a 7-bus ring.
_BEFORE = np.array([
    0.19981743417161663, -9.33101567850625e-20, -0.012646423860474309, 1.5642409478498739e-19,
    5.855494082203312e-06, 7.495200116867088e-20, 0.00999954566696815, 0.010153218936709384,
    0.009953077416180577, 0.009859278481315369, 0.010148823607601987, 0.010148891565092223,
    -0.09964563175553519, -0.10016268036110747, 0.020107261806969756, -0.0070996380825268934,
    -3.6521610458824287e-06, -2.421294951508959e-06, 0.007111951273897217, 0.007111887441102109,
    0.06933544786405874, 0.06933619372334901, 0.010148857581780472, 0.010148857582389972,
])  # fmt: skip


def _stiff_network() -> tuple[KuramotoNetwork, Partition]:
    """Three buses, 1-2 (one cluster) stiff enough for 6 Heun sub-steps at dt = 0.01."""
    index = np.array([[1, 2], [0, 2], [0, 1]])
    weight = np.array([[8.0e4, 0.0], [8.0e4, 1.5], [0.0, 1.5]])
    return (
        KuramotoNetwork(index, weight, np.full(3, 0.2), np.array([0.1, -0.1, 0.05])),
        Partition(labels=np.array([0, 0, 1]), clusters=(np.array([0, 1]), np.array([2]))),
    )


def test_moderately_stiff_branch_runs_as_before():
    """A coupling that needs 6 Heun sub-steps per step (below the bound) runs, its staged messages now
    from a scan over the sub-steps, and gives the numbers of the unrolled loop it replaced."""
    network, partition = _stiff_network()
    assert [k for _, k in substep_groups(partition, np.asarray(network.weight), DT)] == [1, 6]
    graph, ys = _grid(network, partition, steps=3)
    result = run_field(graph, us=np.zeros((3, 0)), ys=ys)
    got = np.concatenate(
        [np.concatenate([np.asarray(r.means)[-1], np.asarray(r.stds)[-1]]) for r in result.values()]
    )
    np.testing.assert_allclose(got, _BEFORE, rtol=1e-10, atol=1e-15)  # the zeros are ~1e-19 of rounding


def test_unmeasured_subsystem_conditions_on_nothing():
    """A subsystem without sensors (#52 section 3: "tria_rows k: expected 1..6 ... received 0"): the
    Gaussian core's condition on zero measurement rows returns the prediction and a log-likelihood of 0
    instead of asking tria_rows for zero reflections. (Fixed with #51's partitions, 458d9eb; no path of
    estimate, banded_estimate or run_filter reaches tria_rows with k = 0 on this tree: a regression test.)"""
    rng = np.random.default_rng(0)
    mean, factor = jnp.asarray(rng.normal(size=6)), jnp.asarray(np.tril(rng.normal(size=(6, 6))))
    new_mean, new_factor, info = condition(mean, factor, jnp.zeros(0), jnp.zeros(0, bool))
    np.testing.assert_array_equal(new_mean, mean)
    np.testing.assert_allclose(new_factor @ new_factor.T, factor @ factor.T, rtol=1e-13)
    assert float(info.loglik) == 0.0
