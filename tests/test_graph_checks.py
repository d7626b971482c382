"""The distributed estimator's checks: unknowns' initial values as the central filter checks them, and
the central filter's consistency statistic (NIS) and FilterConsistencyWarning for graph estimates.

Public API only: a four-mass linear chain cut into two subsystems, data from
twinfer.sim.simulate_dataset, the graph from Graph.from_model, run by twinfer.infer.graph.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from scipy.signal import butter, lfilter
from scipy.stats import chi2

from twinfer.infer.filters import FilterConsistencyWarning, run_filter
from twinfer.infer.graph import Graph, Subsystem, model_graph
from twinfer.infer.graph._run import estimate, run
from twinfer.models import Chain
from twinfer.sim import simulate_dataset
from twinfer.timing import timed

PARTITION = [(1, 2), (3, 4)]
STIFFNESS = [2e4, 1.8e4, 2.2e4, 2.2e4]
DT, STEPS = 1e-3, 400


def _chain(stiffness=STIFFNESS):
    return Chain(
        [100.0, 80.0, 120.0, 90.0], stiffness, [30.0] * 4, forced_dofs=[4], outputs=("a1", "a2", "a3", "a4")
    )


def _force(n):
    ba = butter(4, 0.05)
    assert ba is not None
    b, a = ba[0], ba[1]
    return np.asarray(lfilter(b, a, np.random.default_rng(0).normal(size=(n + 1, 1)) * 800.0, axis=0))


@pytest.fixture(scope="module")
def record():
    """Accelerometers at 5 % of their RMS; the initial state drawn from the filters' prior (sd 1e-3)."""
    chain = _chain()
    clean = simulate_dataset(chain, _force(STEPS), DT, 0.0, jax.random.key(1))
    sd = 0.05 * np.sqrt(np.mean(clean.observations**2, axis=0))
    x0 = 1e-3 * np.random.default_rng(2).normal(size=8)
    data = simulate_dataset(chain, _force(STEPS), DT, sd, jax.random.key(2), x0=x0)
    # the filters' model is the simulation's: no process noise in the data, next to none in the filters
    return data, dict(noise_sd=sd, state_sd=1e-3, process_sd=1e-8)


def test_an_impossible_initial_value_of_an_unknown_is_refused_as_run_filter_refuses_it():
    """A negative initial mass was accepted by the distributed estimator, which then returned m4 = -276
    without an error; run_filter refused it. Graph.from_model (chain_graph) and model_graph now check
    each unknown's initial value through the model's own parameter validation (the filters' helper)."""
    chain = _chain()
    neg = {"m4": (-100.0, 20.0, 0.0)}
    with pytest.raises(ValueError, match=r"filter unknown\['m4'\]: initial value -100.0 refused: Chain mass"):
        run_filter(chain, simulate_dataset(chain, _force(3), DT, 0.1, jax.random.key(0)), unknown=neg)
    with pytest.raises(
        ValueError, match=r"chain_graph unknown\['m4'\]: initial value -100.0 refused: Chain mass: expected"
    ):
        Graph.from_model(chain, PARTITION, dt=DT, unknown=neg)
    groups = [("x1", "x2", "v1", "v2"), ("x3", "x4", "v3", "v4")]
    with pytest.raises(ValueError, match=r"model_graph unknown\['m4'\]: initial value -100.0 refused: Chain"):
        model_graph(chain, groups, dt=DT, unknown=neg)
    with pytest.raises(ValueError, match=r"chain_graph unknown\['k2'\]: expected a finite initial value"):
        Graph.from_model(chain, PARTITION, dt=DT, unknown={"k2": (float("nan"), 5e3, 0.0)})
    graph = Graph.from_model(chain, PARTITION, dt=DT, unknown={"m4": (100.0, 20.0, 0.0)})  # possible: kept
    assert graph.flatten()[0][1].parameters == ("m4",)


def test_a_consistent_graph_has_the_chi_square_nis_and_does_not_warn(record):
    """Data from the filters' own model: each step's NIS summed over the subsystems is chi-square with the
    number of measured outputs (4), and the steps' innovations are independent, so the T-step sum is
    chi-square with 4 T degrees of freedom; its mean per step falls in that law's central 99.9 %. The
    Estimate's nis is the central filter's statistic: that sum over the observed values (about 1)."""
    data, options = record
    graph = Graph.from_model(_chain(), PARTITION, dt=DT, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FilterConsistencyWarning)
        est = estimate(graph, data)
    per_step = np.sum([np.asarray(r.step_nis) for r in run(graph, data).values()], axis=0)
    assert per_step.shape == (STEPS,) and np.all(per_step >= 0)
    n_y = 4
    low, high = chi2.ppf([0.0005, 0.9995], n_y * STEPS) / STEPS
    assert low <= per_step.mean() <= high, (per_step.mean(), low, high)
    assert est.nis == pytest.approx(per_step.sum() / (n_y * STEPS), rel=1e-12)
    timed_est, _ = timed(estimate, graph, data)  # the benchmarks' path keeps the same statistic
    assert timed_est.nis == pytest.approx(est.nis, rel=1e-12)


def test_a_one_subsystem_graph_has_the_central_filters_nis(record):
    """The graph's nis means what run_filter's means: on the whole chain as one subsystem (the same RK4
    discretisation and UKF) the two agree to rounding."""
    data, options = record
    graph = Graph.from_model(_chain(), PARTITION, dt=DT, **options)
    whole = Graph("central", [graph.monolithic("central")], state_order=graph.state_order)
    central = run_filter(_chain(), data, integrator="rk4", **options)
    assert central.nis is not None
    assert estimate(whole, data).nis == pytest.approx(central.nis, rel=1e-9)


def test_a_wrong_fixed_stiffness_warns_naming_the_subsystem_that_holds_it(record):
    """The grounded spring k1 (inside S1) 10x too stiff: the distributed estimate returned its numbers
    silently (est.nis None); now the central filter's FilterConsistencyWarning names S1, whose own NIS
    is far off, and not S2, which fits its data."""
    data, options = record
    wrong = _chain([10 * STIFFNESS[0], *STIFFNESS[1:]])
    with pytest.warns(FilterConsistencyWarning, match=r"NIS\) averages .* Worst subsystems: 'S1' ") as got:
        est = estimate(Graph.from_model(wrong, PARTITION, dt=DT, **options), data)
    assert est.nis is not None and est.nis > 10.0
    assert "'S2'" not in str(got[0].message)


def test_an_output_never_measured_is_not_the_datas_last_column(record):
    """A subsystem output column -1 ("never measured") is left out of the update: the estimate equals the
    one whose data mask that output everywhere. It used to read the data's last column (a4) instead."""
    import dataclasses

    data, options = record
    graph = Graph.from_model(_chain(), PARTITION, dt=DT, messages="probabilistic", **options)
    first = graph.nodes[0]
    assert isinstance(first, Subsystem) and first.outputs == (0, 1)
    unmeasured = Graph(
        graph.name,
        [dataclasses.replace(first, outputs=(0, -1)), *graph.nodes[1:]],
        graph.interfaces,
        state_order=graph.state_order,
    )
    mask = np.ones_like(data.mask)
    mask[:, 1] = False
    est, ref = estimate(unmeasured, data), estimate(graph, data.with_mask(mask))
    np.testing.assert_allclose(est.means, ref.means, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(est.stds, ref.stds, rtol=1e-12, atol=1e-15)


def test_a_record_at_another_step_or_non_uniform_is_a_named_error():
    """The graph integrates over its dt: a record sampled at another step (or unevenly) would be read at
    the wrong times without a word (NIS 336 for a graph at 2 ms on a 1 ms record): a named error."""
    from twinfer.data import Dataset
    from twinfer.infer.graph._banded import banded_estimate

    chain = Chain([100.0, 80.0, 120.0, 90.0], 2e4, 30.0, forced_dofs=[4], outputs=["a1", "a4"])
    force = np.sin(np.arange(51) * 0.01)[:, None]
    data = simulate_dataset(chain, force, dt=1e-3, noise_sd=0.05, key=jax.random.key(0))
    slow = Graph.from_model(chain, [(1, 2), (3, 4)], dt=2e-3, noise_sd=0.05)
    with pytest.raises(ValueError, match=r"run dataset: expected samples 0.002 s apart .* received 0.001 s"):
        estimate(slow, data)
    with pytest.raises(ValueError, match=r"banded_estimate dataset: expected samples 0.002 s apart"):
        banded_estimate(slow, data)
    times = np.asarray(data.times).copy()
    times[20] += 3e-4
    uneven = Dataset(times, data.observations, inputs=data.inputs, output_names=data.output_names)
    graph = Graph.from_model(chain, [(1, 2), (3, 4)], dt=1e-3, noise_sd=0.05)
    with pytest.raises(ValueError, match=r"must be sampled at that step; Dataset.dt: expected uniform steps"):
        estimate(graph, uneven)
    assert np.isfinite(estimate(graph, data).loglik)


def test_a_divergence_in_the_first_steps_blames_a_prior_wider_than_the_motion():
    """A deck with a cubic bearing at the cut: the default state_sd (1) puts sigma points a metre out,
    where the bearing's force is enormous; the error says so, and state_sd at the motion's size runs."""
    from twinfer.infer.filters import DivergenceError
    from twinfer.sim import bandlimited_noise

    deck = Chain([4000.0, 3500.0, 4200.0, 3800.0], [8e6, 6e6, 2e6, 7e6], 2e3, cubic_stiffness=[0, 0, 1e10, 0],
                 forced_dofs=[4], outputs=["a1", "a4"])  # fmt: skip
    dt = 2e-3
    force = bandlimited_noise(jax.random.key(3), np.arange(301) * dt, 0.2, 15.0, 2e4)[:, None]
    data = simulate_dataset(deck, force, dt, 0.05, jax.random.key(2))
    with pytest.raises(
        DivergenceError, match=r"at step 2 .*first 10 steps, where the prior .* reach 1, .*state_sd"
    ):
        estimate(Graph.from_model(deck, [[1, 2], [3, 4]], dt=dt, noise_sd=0.05), data)
    est = estimate(Graph.from_model(deck, [[1, 2], [3, 4]], dt=dt, noise_sd=0.05, state_sd=1e-3), data)
    assert np.isfinite(est.loglik)
