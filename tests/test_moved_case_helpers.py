"""The case helpers moved into the library (issue #53, thin cases): metrics of alarms, trajectories and
scaling, and the PINN paper's chains, each against a hand computation."""

import math

import numpy as np
import pytest

from twinfer.errors import TwinferValueError
from twinfer.metrics import alarm_detection, dof_errors, first_alarm, scaling_slopes, weighted_mae
from twinfer.models import PINN_NOMINAL, pinn_chain, value_error_factors

RAISED = [
    {"t": 1.0, "alarm": "drift", "name": "k2"},
    {"t": 5.0, "alarm": "innovation", "name": "a4"},
    {"t": 7.5, "alarm": "drift", "name": "k3"},
    {"t": 9.0, "alarm": "drift", "name": "k3"},
]


@pytest.mark.timeout(60)
def test_first_alarm_is_the_earliest_of_its_kind_and_name_after_the_time():
    assert first_alarm(RAISED, "drift", "k3", 0.0) == 7.5
    assert first_alarm(RAISED, "drift", "k3", 8.0) == 9.0
    assert first_alarm(RAISED, "innovation", "k3", 0.0) is None


@pytest.mark.timeout(60)
def test_alarm_detection_counts_false_alarms_and_the_delay_and_a_miss_costs_the_window():
    hit = alarm_detection(RAISED, "drift", "k3", 6.0, 30.0)
    assert hit == {"onset_s": 6.0, "false_alarms": 2.0, "detected": 1.0, "delay_s": 1.5}
    miss = alarm_detection(RAISED, "innovation", "a2", 6.0, 30.0)
    assert miss["detected"] == 0.0 and miss["delay_s"] == 30.0


@pytest.mark.timeout(60)
def test_weighted_mae_sums_each_channels_mean_absolute_error_times_its_weight():
    pred = np.array([[1.0, 2.0], [3.0, 5.0]])
    truth = np.array([[0.0, 2.0], [1.0, 1.0]])
    # channel 0: |1| and |2| -> 1.5; channel 1: 0 and 4 -> 2.0
    assert weighted_mae(pred, truth, (0.5, 0.1)) == pytest.approx(0.5 * 1.5 + 0.1 * 2.0, rel=1e-15)


@pytest.mark.timeout(60)
def test_dof_errors_splits_displacements_from_velocities():
    ref = np.zeros((4, 4))  # two DOFs: x1, x2, v1, v2
    est = np.zeros((4, 4))
    est[:, 0] = [3.0, -3.0, 3.0, -3.0]  # x1 off by 3 at every step
    est[:, 3] = 2.0  # v2 off by 2
    out = dof_errors("jacobi", est, ref)
    assert out["jacobi.disp_rmse_dof1"] == 3.0 and out["jacobi.disp_rmse_dof2"] == 0.0
    assert out["jacobi.vel_rmse_dof2"] == 2.0 and out["jacobi.vel_rmse_dof1"] == 0.0
    assert out["jacobi.disp_median_abs_dof1"] == 3.0
    assert out["jacobi.disp_max_norm"] == 3.0
    assert out["jacobi.disp_rmse"] == pytest.approx(math.sqrt(9.0 / 2.0), rel=1e-15)


@pytest.mark.timeout(60)
def test_scaling_slopes_recover_the_growth_exponents_and_skip_what_did_not_run():
    sizes = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    times = {
        "distributed": 1e-3 * sizes,
        "banded": np.full(sizes.shape, np.nan),
        "central": np.where(sizes <= 8, 1e-4 * sizes**3, np.nan),
    }
    out = scaling_slopes(sizes, times, 8, tail=("distributed", "banded"))
    assert out["slope.distributed_run_s"] == pytest.approx(1.0, abs=1e-12)
    assert out["slope.central_run_s"] == pytest.approx(3.0, abs=1e-12)
    assert out["slope.from8.distributed_run_s"] == pytest.approx(1.0, abs=1e-12)
    assert set(out) == {"slope.distributed_run_s", "slope.central_run_s", "slope.from8.distributed_run_s"}


@pytest.mark.timeout(60)
def test_value_error_factors_follow_the_repository_recipe_per_dof():
    factors = value_error_factors(5, lambda i: 43810 + i)
    again = value_error_factors(5, lambda i: 43810 + i)
    np.testing.assert_array_equal(factors, again)
    deviation = np.abs(factors - 1.0)
    assert np.all((deviation >= 0.05) & (deviation <= 0.10))
    state = np.random.RandomState(43812)  # DOF 3 by hand
    r, sign = state.uniform(0.05, 0.10), [-1.0, 1.0][state.randint(0, 2)]
    assert factors[2] == 1.0 + sign * r


@pytest.mark.timeout(60)
def test_pinn_chain_perturbs_every_coefficient_and_names_a_wrong_nonlinearity():
    factors = np.array([1.1, 0.9])
    chain = pinn_chain(2, "duffing", [1], factors)
    np.testing.assert_allclose(chain.params["k"], PINN_NOMINAL["k"] * factors, rtol=1e-15)
    np.testing.assert_allclose(chain.params["c"], PINN_NOMINAL["c"] * factors, rtol=1e-15)
    np.testing.assert_allclose(chain.params["kappa"], PINN_NOMINAL["kappa"] * factors, rtol=1e-15)
    with pytest.raises(TwinferValueError, match="nonlinearity: expected 'duffing', 'vdp' or 'linear'"):
        pinn_chain(2, "cubic", [1])
