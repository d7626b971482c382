"""Case ``live-grid`` (issue #54): a grid twin streamed PMU frames alarms a line outage near the line.

The outage simulation is checked against an independent Heun step written here (state continuity at
the outage, the intact network before it, the network without the line after it, the coupling removed
both ways); the quick run streams a short healthy record and one outage on IEEE 118 through
:class:`twinfer.live.Twin` and checks the acceptance's shape: no alarm before the outage, an alarm after
it naming a cluster near the line, and complete metrics and figures.
"""

import jax
import numpy as np
import pytest

from twinfer.bench._grid_twin import pmu_buses
from twinfer.data import load_grid
from twinfer.errors import TwinferValueError
from twinfer.experiments import get_case, resolve_config
from twinfer.experiments.live_grid import coupled_lines
from twinfer.models import KuramotoNetwork, draw_grid_parameters
from twinfer.report._run import check_metrics
from twinfer.sim import simulate_grid, simulate_grid_outage, without_line


def _heun(x, index, weight, d, big_omega, h):
    """One Heun step of the swing equation (S79), dense and independent of the library's model."""
    n = len(d)

    def field(x):
        theta, omega = x[:n], x[n:]
        force = np.sum(weight * np.sin(theta[index] - theta[:, None]), axis=1)
        return np.concatenate([omega, -d * omega + big_omega + force])

    k1 = field(x)
    return x + 0.5 * h * (k1 + field(x + h * k1))


@pytest.mark.timeout(300)
def test_the_outage_removes_the_line_both_ways_and_continues_from_the_state_reached():
    net = load_grid("ieee14")
    index, weight = net.neighbours
    d, big_omega = draw_grid_parameters(net.n_bus, jax.random.key(0))
    model = KuramotoNetwork(index, weight, d, big_omega)
    i, j = (int(b) for b in coupled_lines(model)[3])
    cut = np.asarray(without_line(model, (i, j)).weight)
    assert cut[i][index[i] == j].sum() == 0 and cut[j][index[j] == i].sum() == 0
    assert weight[i][index[i] == j].sum() > 0 and weight[j][index[j] == i].sum() > 0
    changed = cut != weight
    assert changed.sum() == 2  # only K_ij and K_ji
    with pytest.raises(TwinferValueError, match="coupled buses"):
        without_line(model, (i, i))

    dt, steps, onset, key = 0.01, 40, 25, jax.random.key(1)
    record = simulate_grid_outage(model, dt, steps, 1, 0.01, key, (onset, (i, j)))
    intact = simulate_grid(model, dt, onset, 1, 0.01, key)
    states = record["states"]
    assert states.shape == (steps + 1, 2 * net.n_bus) and record["observations"].shape == (steps, 28)
    np.testing.assert_array_equal(states[: onset + 1], intact["states"])  # the same draws up to the outage
    np.testing.assert_array_equal(record["init"], intact["init"])
    for k in (onset - 1, onset, steps - 1):  # before: the intact network; from the outage on: the cut one
        w = weight if k < onset else cut
        np.testing.assert_allclose(states[k + 1], _heun(states[k], index, w, d, big_omega, dt), atol=1e-12)
    step_intact = _heun(states[onset], index, weight, d, big_omega, dt)
    assert np.abs(states[onset + 1] - step_intact).max() > 1e-6  # the line's loss changes the motion
    # the measurements after the outage are the new states', wrapped, with noise of the stated size
    y = record["observations"][onset:, 14:]
    assert np.std(y - states[onset + 1 :, 14:]) == pytest.approx(0.01, rel=0.3)
    with pytest.raises(TwinferValueError, match="onset step in 1..39"):
        simulate_grid_outage(model, dt, steps, 1, 0.01, key, (steps, (i, j)))


def test_the_pmu_placement_takes_every_kth_bus_and_the_generators():
    net = load_grid("ieee30")
    buses = pmu_buses(net, 3, True)
    assert set(range(0, 30, 3)) <= set(buses) and set(int(g) for g in net.gen_buses) <= set(buses)
    assert list(buses) == sorted(set(buses))
    np.testing.assert_array_equal(pmu_buses(net, 1, False), np.arange(30))


@pytest.mark.timeout(900)
def test_the_quick_run_alarms_the_outage_near_the_line_and_not_before():
    case = get_case("live-grid")
    config = resolve_config(case, quick=True)
    stages: list[str] = []
    result = case.run(config, lambda stage, done, total: stages.append(stage))
    metrics = check_metrics(result.metrics)
    assert stages[-1] == "done" and any("line" in s for s in stages)
    for name in case.paper:
        assert name in metrics
    assert metrics["outage1.false_alarms"] == 0.0
    assert metrics["outage1.detected"] == 1.0
    assert 0 <= metrics["outage1.delay_s"] <= 1.0
    assert metrics["outage1.first_named_near"] == 1.0
    assert metrics["outage.max_delay_s"] == metrics["outage1.delay_s"]
    onset, alarm, i, j = result.arrays["events"]
    assert (i, j) == (metrics["outage1.line_i"], metrics["outage1.line_j"])
    assert alarm - onset == pytest.approx(metrics["outage1.delay_s"])
    assert set(case.figures(result.arrays, config)) == {"innovations"}
