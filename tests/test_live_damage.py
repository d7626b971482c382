"""Case ``live-damage`` (issue #54): a live twin of an 8-mass chain names a stiffness loss and a stuck sensor.

The quick run streams a short healthy record, a 10 % loss of one random spring and a stuck accelerometer
through :class:`twinfer.live.Twin`; the claim checked is the acceptance's shape: the loss is alarmed by a
drift alarm naming the damaged spring and no other, the stuck sensor by an innovation alarm naming it
first, and the run's metrics and figures are complete.
"""

import numpy as np
import pytest

from twinfer.experiments import get_case, resolve_config
from twinfer.experiments.live_damage import scenarios
from twinfer.report._run import check_metrics


@pytest.mark.timeout(120)
def test_the_scenarios_change_one_spring_and_freeze_one_sensor_from_their_onsets():
    case = get_case("live-damage")
    config = resolve_config(case, sets={"healthy": 2.0, "onset_spread": 0.5, "after": 1.0, "stuck_after": 1.0,
                                        "stuck_spread": 0.5, "stuck_window": 0.5})  # fmt: skip
    loss, stuck = scenarios(config, 3)
    k = int(round(loss.onset / config.dt))
    assert loss.culprit in {f"k{i}" for i in range(1, 9)} and 2.0 <= loss.onset <= 2.5
    assert loss.observations.shape == (k + 1001, 4) and np.isfinite(loss.observations).all()
    assert loss.truth[k] == pytest.approx((1 - config.loss) * loss.truth[k - 1], rel=1e-12)
    j = ("a2", "a4", "a6", "a8").index(stuck.culprit)
    s = int(round(stuck.onset / config.dt))
    held = stuck.observations[s:, j]
    assert np.all(held == stuck.observations[s - 1, j])  # the sensor holds its last reading
    others = np.delete(stuck.observations[s:], j, axis=1)
    assert np.all(np.std(others, axis=0) > 0)  # the others keep measuring
    # the healthy part of the loss record is the chain sampled with noise: never constant, finite
    assert np.all(np.std(loss.observations[:k], axis=0) > 10 * config.noise_sd)


@pytest.mark.timeout(900)
def test_the_quick_run_names_the_damaged_spring_and_the_stuck_sensor():
    case = get_case("live-damage")
    config = resolve_config(case, quick=True)
    events: list[tuple[str, float]] = []
    result = case.run(config, lambda stage, done, total: events.append((stage, done)))
    metrics = check_metrics(result.metrics)  # flat, finite
    seed = config.seed
    assert events[-1][0] == "done" and any("stiffness loss" in stage for stage, _ in events)
    for name in case.paper:
        assert name in metrics
    assert metrics[f"seed{seed}.loss.detected"] == 1.0
    assert 0 < metrics[f"seed{seed}.loss.delay_s"] <= config.after
    assert metrics[f"seed{seed}.loss.wrong_parameters"] == 0.0
    assert metrics[f"seed{seed}.stuck.detected"] == 1.0
    assert 0 < metrics[f"seed{seed}.stuck.delay_s"] < 2.0
    assert metrics[f"seed{seed}.stuck.wrong_names"] == 0.0
    assert metrics["loss.max_delay_s"] == metrics[f"seed{seed}.loss.delay_s"]
    onset, alarm, spring = result.arrays["loss_events"]
    assert alarm - onset == pytest.approx(metrics[f"seed{seed}.loss.delay_s"])
    assert spring == metrics[f"seed{seed}.loss.spring"]
    t, mean = result.arrays["loss_t"], result.arrays["loss_mean"]
    truth = result.arrays["loss_truth"]
    before, after = t < onset, t > alarm
    # the track follows the loss: before it near the truth, after the alarm below the healthy value
    assert np.median(np.abs(mean[before][-100:] / truth[before][-100:] - 1)) < 0.03
    assert np.median(mean[after]) < np.median(mean[before][-100:])
    figures = case.figures(result.arrays, config)
    assert set(figures) == {"drift_track", "innovations"}
