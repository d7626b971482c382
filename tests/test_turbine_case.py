"""The heterogeneous turbine case end to end at --quick size (five kinds of estimator in one graph)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from twinfer.cli import app


@pytest.mark.slow
def test_turbine_quick_runs_five_estimators_in_one_graph(tmp_path):
    """Governor (none), NARX (learned), EKF, KF and UKF on 3 s of the Pelton unit (central off at quick size).

    The lateral displacements are measured with 5 um noise: the graph must track them well below it;
    three seconds do not identify the coefficients, but their 95 % intervals must hold the truth; every
    filtered state must be finite and its interval hold the truth most of the time.
    """
    result = CliRunner().invoke(app, ["run", "turbine", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    m = json.loads((folder / "metrics.json").read_text())
    assert all(np.isfinite(v) for v in m.values())
    assert "central.run_s" not in m
    assert m["distributed.lateral_rmse"] < 5e-6
    assert all(m[f"distributed.{c}.in95"] == 1.0 for c in ("e_x", "e_y", "K_seal"))
    assert m["distributed.coverage95.estimated_min"] >= 0.8
    assert m["distributed.run_s"] > 0
    assert m["narx.test.rmse"] > 0 and m["narx.online_rmse"] < 0.05
    # quick: repeats = 2, so one calibration record after the first, its truth drawn with the filters'
    # Q in it: the pooled values are that record's alone
    assert m["distributed.pooled.records"] == 1.0
    for s in ("alpha", "x_R", "phi1"):
        assert m[f"distributed.pooled.coverage95_spread.{s}"] == 0.0
    assert m["distributed.pooled.coverage95.estimated_min"] >= 0.8
    for name in ("states", "parameters", "narx"):
        assert (folder / "figures" / f"{name}.png").is_file()


def test_shaft_noise_keeps_the_speed_relation_and_the_start_is_a_prior_draw():
    """'shaft' Q and P0 give n - omega / omega_rated zero variance (S111); 'table' is Table S8's diagonal.

    The filters' start differs from the truth's only in the 13 estimated states, by a draw that keeps the
    speed relation, is the same for the same seed, and is the truth itself with ``initial = "truth"``.
    """
    from twinfer.experiments.turbine import ESTIMATED, TurbineConfig, initial_state, shaft_covariances
    from twinfer.models import PeltonParams, PeltonTurbine

    params = PeltonParams()
    config = TurbineConfig()
    q, p0 = shaft_covariances(config, params)
    c = np.asarray([1.0, -1.0 / params.omega_rated, 0.0])
    assert abs(c @ q @ c) < 1e-12 * q[1, 1] and abs(c @ p0 @ c) < 1e-12 * p0[1, 1]
    assert q[1, 1] == config.q_rotational[1] and p0[1, 1] == config.p0_rotational[1]
    assert p0[2, 2] == config.p0_rotational[2] and np.all(np.linalg.eigvalsh(q) > -1e-12 * q[1, 1])
    q_t, p0_t = shaft_covariances(config.model_copy(update={"rotational_noise": "table"}), params)
    np.testing.assert_array_equal(q_t, np.diag(config.q_rotational[:3]))
    np.testing.assert_array_equal(p0_t, np.diag(config.p0_rotational[:3]))

    model = PeltonTurbine(params)
    names = tuple(model.state_names)
    truth = np.asarray(model.initial_state())
    x0 = initial_state(config, params)
    moved = {names[i] for i in np.flatnonzero(x0 != truth)}
    assert moved == set(ESTIMATED)
    n, omega = x0[names.index("n")], x0[names.index("omega")]
    dn = n - truth[names.index("n")]
    assert abs(dn - (omega - params.omega_rated) / params.omega_rated) < 1e-6 * abs(dn)
    np.testing.assert_array_equal(x0, initial_state(config, params))
    assert not np.array_equal(x0, initial_state(config.model_copy(update={"seed": 1}), params))
    at_truth = initial_state(config.model_copy(update={"initial": "truth"}), params)
    np.testing.assert_array_equal(at_truth, truth)
    again = initial_state(config, params, repeat=1)  # a calibration repeat: another draw, same states moved
    assert not np.array_equal(again, x0) and {names[i] for i in np.flatnonzero(again != truth)} == set(
        ESTIMATED
    )


def test_the_calibration_records_truth_carries_the_filters_q_on_the_estimated_states():
    """truth_process_cov is the central filter's Q on the 13 estimated states and zero elsewhere; a record
    simulated with it differs from the noise-free truth, one without it equals it."""
    from twinfer.experiments.turbine import ESTIMATED, TurbineConfig, central, simulate, truth_process_cov
    from twinfer.models import PeltonParams, PeltonTurbine

    params = PeltonParams()
    config = TurbineConfig(t_end=0.02)
    q = truth_process_cov(config, params)
    names = tuple(PeltonTurbine(params).state_names)
    idx = [names.index(n) for n in ESTIMATED]
    q_filter = np.asarray(central(config, params).nodes[0].Q)[:19, :19]
    np.testing.assert_array_equal(q[np.ix_(idx, idx)], q_filter[np.ix_(idx, idx)])
    other = [i for i in range(19) if i not in idx]
    assert not np.any(q[other]) and not np.any(q[:, other])
    noisy, quiet, again = (
        simulate(config, params, 1, q),
        simulate(config, params, 1),
        simulate(config, params, 1),
    )
    np.testing.assert_array_equal(quiet.truth_states, again.truth_states)
    step = np.asarray(noisy.truth_states)[1] - np.asarray(quiet.truth_states)[1]
    assert np.all(step[idx] != 0.0) and np.allclose(step[other], 0.0, atol=1e-12)
