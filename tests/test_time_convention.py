"""#51 item 1: one time convention that matches measured data (y_k = h(x_k, u_k), inputs and outputs
sampled at the same instants), checked on records made the way an acquisition system makes them: a
continuous input, a truth from scipy's adaptive solver (not twinfer's simulator), a CSV file."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from twinfer.data import Dataset, from_csv
from twinfer.infer.filters import FilterConsistencyWarning, run_filter
from twinfer.models import Chain

pytestmark = pytest.mark.timeout(300)

SD = 0.05


def _force(t):
    return 5.0 * np.sin(2 * np.pi * 1.3 * t) + 3.0 * np.sin(2 * np.pi * 4.1 * t + 0.4)


def _acquired(tmp_path, chain: Chain, dt: float = 0.005, n: int = 600):
    """A record as a DAQ writes it: the force a continuous signal, the truth of scipy's DOP853 at
    tolerance 1e-10, force and accelerations read at the same instants, 5 % noise, a CSV file."""
    a_mat, b_mat, c_mat, d_mat = (np.asarray(m) for m in chain.linear_matrices(chain.params))
    t = dt * np.arange(n + 1)
    sol = solve_ivp(
        lambda s, x: a_mat @ x + b_mat[:, 0] * _force(s),
        (0.0, t[-1]),
        np.zeros(chain.n_state),
        t_eval=t,
        method="DOP853",
        rtol=1e-10,
        atol=1e-12,
    )
    states = sol.y.T
    acc = states @ c_mat.T + _force(t)[:, None] @ d_mat.T
    noisy = acc + SD * np.random.default_rng(1).normal(size=acc.shape)
    table = np.column_stack([t, _force(t), noisy])
    lines = ["t,force,acc1,acc3"] + [",".join(repr(float(v)) for v in row) for row in table]
    path = tmp_path / "record.csv"
    path.write_text("\n".join(lines) + "\n")
    return path, states


def _coverage(est, states) -> float:
    z = (
        np.abs(np.asarray(est.means)[1:, : states.shape[1]] - states[1:])
        / np.asarray(est.stds)[1:, : states.shape[1]]
    )
    return float(np.mean(z < 1.96))


def _relabel(data: Dataset, **meta) -> Dataset:
    return Dataset(**{**data.to_dict(), "metadata": {**data.metadata, **meta}})


def test_item1_an_acquired_record_from_csv_is_read_as_sampled_and_covers(tmp_path):
    """The CSV of a forced chain with an accelerometer on the forced mass: read as measured (sampled,
    the force a signal linear between samples) the central UKF covers the states at NIS about 1; the
    same file read in the paper code's alignment (y_k+1 with u_k) misses the state and the NIS says so."""
    chain = Chain(
        [2.0, 1.5, 1.0], [400.0, 300.0, 200.0], [0.8, 0.6, 0.4], forced_dofs=[3], outputs=["a1", "a3"]
    )
    path, states = _acquired(tmp_path, chain)
    data = from_csv(path, time="t", inputs={"f3": "force"}, outputs={"a1": "acc1", "a3": "acc3"})
    assert (data.alignment, data.input_hold) == ("sampled", "linear")
    options = dict(noise_sd=SD, process_sd=1e-6, state_sd=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FilterConsistencyWarning)
        est = run_filter(chain, data, **options)
    assert 0.85 < est.nis < 1.2, est.nis
    assert 0.9 <= _coverage(est, states) <= 0.99, _coverage(est, states)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FilterConsistencyWarning)
        held = run_filter(chain, _relabel(data, alignment="held", input_hold="zoh"), **options)
        zoh = run_filter(chain, _relabel(data, input_hold="zoh"), **options)
    assert held.nis > 10.0 and _coverage(held, states) < 0.2, (held.nis, _coverage(held, states))
    assert zoh.nis > 3.0 and held.loglik < zoh.loglik < est.loglik - 1000.0


def test_item1_simulate_dataset_samples_a_continuous_input_like_an_acquisition_system():
    """simulate_dataset with a callable input: the truth follows the signal between the samples (scipy's
    solve_ivp on the same signal agrees), and the record reads input and output at the same instants."""
    from twinfer.sim import simulate_dataset

    chain = Chain([2.0, 1.5, 1.0], [400.0, 300.0, 200.0], [0.8, 0.6, 0.4], forced_dofs=[3], outputs=["a3"])
    signal = lambda t: jnp.array(
        [5.0 * jnp.sin(2 * jnp.pi * 1.3 * t) + 3.0 * jnp.sin(2 * jnp.pi * 4.1 * t + 0.4)]
    )  # noqa: E731
    data = simulate_dataset(chain, signal, 0.005, 0.0, jax.random.key(0), n_steps=300)
    a_mat, b_mat, c_mat, d_mat = (np.asarray(m) for m in chain.linear_matrices(chain.params))
    t = np.asarray(data.times)
    ref = solve_ivp(
        lambda s, x: a_mat @ x + b_mat[:, 0] * _force(s), (0.0, t[-1]), np.zeros(6), t_eval=t,
        method="DOP853", rtol=1e-11, atol=1e-13,
    ).y.T  # fmt: skip
    # the truth holds the signal's midpoint value over each of 20 fine steps: second order in dt / 20
    np.testing.assert_allclose(data.truth_states, ref, atol=1e-5 * np.abs(ref).max())
    np.testing.assert_allclose(np.asarray(data.inputs)[:, 0], _force(t), rtol=1e-12, atol=1e-12)
    y = data.truth_states @ c_mat.T + np.asarray(data.inputs) @ d_mat.T
    np.testing.assert_allclose(data.observations, y, rtol=1e-10, atol=1e-10)
    assert (data.alignment, data.input_hold) == ("sampled", "linear")


def test_item1_graph_and_banded_estimators_read_the_records_alignment():
    """The distributed engines take their inputs from Dataset.step_inputs: on a sampled record with an
    accelerometer on the forced mass they are consistent, and the record mislabelled "held" is not."""
    from twinfer.infer.graph import Graph
    from twinfer.infer.graph._banded import banded_estimate
    from twinfer.infer.graph._run import estimate
    from twinfer.sim import simulate_dataset

    chain = Chain([1.0] * 4, [300.0] * 4, [0.5] * 4, forced_dofs=[4], outputs=["a2", "a4"])
    force = np.random.default_rng(3).normal(size=(801, 1)) * 10.0
    data = simulate_dataset(chain, force, 0.005, SD, jax.random.key(2))
    graph = Graph.from_model(chain, [[1, 2], [3, 4]], dt=0.005, noise_sd=SD, process_sd=1e-6, state_sd=1e-3)
    wrong = _relabel(data, alignment="held")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FilterConsistencyWarning)
        for run in (banded_estimate, estimate):
            good, bad = run(graph, data), run(graph, wrong)
            assert 0.7 < good.nis < 1.4 and bad.nis > 5.0, (run.__name__, good.nis, bad.nis)


def test_item1_the_alignment_and_input_hold_are_validated_and_kept(tmp_path):
    """Dataset.alignment / input_hold: defaults, named errors, the pre-#51 free text read as held, and
    the step inputs each implies; a save/load round trip keeps both."""
    u = np.arange(4.0)[:, None]
    base = dict(times=np.arange(4.0), observations=np.zeros((4, 1)), inputs=u)
    plain = Dataset(**base)
    assert (plain.alignment, plain.input_hold) == ("sampled", "zoh")
    np.testing.assert_array_equal(plain.step_inputs(), [[0, 1], [1, 2], [2, 3]])
    held = Dataset(**base, metadata={"alignment": "held", "input_hold": "linear"})
    np.testing.assert_array_equal(held.step_inputs(), [[0.5, 0], [1.5, 1], [2.5, 2]])
    legacy = Dataset(
        **base, metadata={"alignment": "row k: u_k held over [t_k, t_k+1); y_k+1 = h(x_k+1, u_k) + noise"}
    )
    assert legacy.alignment == "held"
    with pytest.raises(ValueError, match=r"metadata\['alignment'\].*'simultaneous'"):
        Dataset(**base, metadata={"alignment": "simultaneous"})
    with pytest.raises(ValueError, match=r"metadata\['input_hold'\].*'cubic'"):
        Dataset(**base, metadata={"input_hold": "cubic"})
    back = Dataset.load(held.save(tmp_path / "held.npz"))
    assert (back.alignment, back.input_hold) == ("held", "linear")
