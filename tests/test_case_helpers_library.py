"""Library pieces the turbine and PINN cases call: named coverage, fitness by DOF, collocation, checks."""

import numpy as np
import pytest

from twinfer.errors import TwinferValueError


def test_coverage_by_name_scores_each_named_column_against_its_truth():
    """Per column, the fraction inside mean +- 1.959964 sd (written out here), matched by name; a column
    the truth lacks or whose sd is zero somewhere is not scored."""
    from twinfer.metrics import coverage_by_name

    rng = np.random.default_rng(1)
    truth = rng.normal(size=(200, 3))
    mean = truth[:, [2, 0, 1]] + rng.normal(0.0, 1.0, (200, 3))
    sd = np.ones((200, 3)) * np.asarray([1.0, 0.5, 1.0])
    sd[5, 2] = 0.0  # held fixed at one row: no band to score
    names = ("c", "a", "b")
    got = coverage_by_name(mean, sd, names, truth, ("a", "b", "c"))
    assert list(got) == ["c", "a"]
    for j, k in ((0, 2), (1, 0)):
        inside = np.abs(mean[:, j] - truth[:, k]) <= 1.959963984540054 * sd[:, j]
        assert got[names[j]] == pytest.approx(inside.mean(), abs=1e-15)
    assert 0.9 < got["c"] < 1.0 and got["a"] < 0.8  # sd 1 is the error's; sd 0.5 is too narrow
    assert coverage_by_name(mean, sd, names, truth, ("x",)) == {}


def test_fitness_by_dof_averages_the_per_dof_fitness_over_groups():
    """``(1 - RMSE / range) 100`` per DOF (written out here), averaged over all, observed and unobserved
    DOFs, and read at the first and last; with every DOF observed there is no unobserved key."""
    from twinfer.metrics import fitness_by_dof

    rng = np.random.default_rng(2)
    truth = {q: rng.normal(size=(300, 4)) for q in ("u", "udot", "uddot")}
    est = {q: v + 0.1 * (1 + np.arange(4)) * rng.normal(size=v.shape) for q, v in truth.items()}
    out = fitness_by_dof(est, truth, observed=[1, 3], prefix="f")
    for q in ("u", "udot", "uddot"):
        rms = np.sqrt(np.mean((est[q] - truth[q]) ** 2, axis=0))
        per = (1 - rms / np.ptp(truth[q], axis=0)) * 100
        assert out[f"f.all_{q}"] == pytest.approx(per.mean(), rel=1e-12)
        assert out[f"f.obs_{q}"] == pytest.approx(per[[0, 2]].mean(), rel=1e-12)
        assert out[f"f.unobs_{q}"] == pytest.approx(per[[1, 3]].mean(), rel=1e-12)
        assert (out[f"f.first_{q}"], out[f"f.last_{q}"]) == pytest.approx((per[0], per[-1]), rel=1e-12)
    assert not any(".unobs_" in k for k in fitness_by_dof(est, truth, observed=[1, 2, 3, 4]))


def test_held_force_collocation_takes_samples_or_mid_steps():
    """Every stride-th sample; at mid-steps the last sample, which has no step after it, is dropped."""
    from twinfer.infer.pinn import held_force_collocation

    t = np.linspace(0.0, 1.0, 11)
    idx, tc = held_force_collocation(t, 5, midstep=False)
    np.testing.assert_array_equal(idx, [0, 5, 10])
    np.testing.assert_array_equal(tc, t[[0, 5, 10]])
    idx, tc = held_force_collocation(t, 5)
    np.testing.assert_array_equal(idx, [0, 5])
    np.testing.assert_allclose(tc, [0.05, 0.55], rtol=1e-14)
    with pytest.raises(TwinferValueError, match="stride: expected an integer >= 1; received 0"):
        held_force_collocation(t, 0)


def test_turbine_grid_settings_refuse_a_continued_probabilistic_exchange():
    """exchange 'path' continues the neighbour's mean: a probabilistic message or split rule is named."""
    from twinfer.infer.graph._turbine import TurbineGridSettings

    with pytest.raises(TwinferValueError, match="received 'probabilistic' and 'paper'"):
        TurbineGridSettings(messages="probabilistic")
    assert TurbineGridSettings(messages="probabilistic", exchange="held").exchange == "held"


@pytest.mark.timeout(120)
def test_prior_draw_moves_only_the_estimated_states_by_their_prior():
    """The governor's and hydraulics' states keep x0; the 13 estimated ones move, by the same draw for
    the same key, and the shaft's draw keeps n = (omega - omega_rated) / omega_rated as the truth does."""
    import jax

    from twinfer.infer.graph._turbine import TURBINE_DEFAULTS, TURBINE_ESTIMATED, prior_draw
    from twinfer.models import PeltonParams, PeltonTurbine

    params = PeltonParams()
    model = PeltonTurbine(params)
    names = tuple(model.state_names)
    x0 = np.asarray(model.initial_state(), dtype=np.float64)
    a = prior_draw(TURBINE_DEFAULTS, params, x0, jax.random.key(3))
    b = prior_draw(TURBINE_DEFAULTS, params, x0, jax.random.key(3))
    np.testing.assert_array_equal(a, b)
    moved = {n for n, u, v in zip(names, a, x0, strict=True) if u != v}
    assert moved == set(TURBINE_ESTIMATED)
    n, omega = (a[names.index(s)] - x0[names.index(s)] for s in ("n", "omega"))
    assert n == pytest.approx(omega / params.omega_rated, rel=1e-9)
    with pytest.raises(ValueError, match="expected the unit's 19 states"):
        prior_draw(TURBINE_DEFAULTS, params, x0[:5], jax.random.key(3))


def test_standalone_units_refuse_a_record_of_the_wrong_shape():
    """The record must be (T + 1, n) in the network's state order, with at least one step."""
    from twinfer.models import TurbineGrid
    from twinfer.sim import simulate_standalone_units

    model = TurbineGrid.ieee9()
    x0 = np.asarray(model.initial_state())
    with pytest.raises(TwinferValueError, match=r"T >= 1; received shape \(1, 63\)"):
        simulate_standalone_units(model, x0[None, :], 1e-3, 1)


def test_fit_pinn_and_the_narx_scenarios_refuse_impossible_requests_before_any_work():
    """Solving for parameters needs parameters; a NARX record needs at least one sample per scenario."""
    import jax

    from twinfer.infer.pinn import TrainSettings, fit_pinn
    from twinfer.learn import hydraulics_scenarios

    with pytest.raises(TwinferValueError, match="project: expected parameters theta to solve for"):
        fit_pinn(None, None, None, None, TrainSettings(), project=True)  # type: ignore[arg-type]
    with pytest.raises(TwinferValueError, match="received n = 2, spacing = 5, substeps = 1, length = 0.004"):
        hydraulics_scenarios(jax.random.key(0), 2, 0.004, 2e-3, 1, 0.01, 5)
