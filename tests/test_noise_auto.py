"""Issue #51 item 5: noise levels from the data, and a two-sided consistency check.

``process_sd="auto"`` / ``noise_sd="auto"`` maximise the record's log-likelihood over one multiplier of
each level (:mod:`twinfer.infer.filters._tune`); the chosen values, the log-likelihood around them and the
time taken come back as ``est.tuning``. The NIS check of the central filter is a two-sided chi-square
test: it warns when the innovations are too small as well as too large.
"""

import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from twinfer.infer.filters import FilterConsistencyWarning, run_filter, smooth, tuning_of
from twinfer.infer.filters._errors import NIS_ALPHA, inconsistency, nis_band
from twinfer.infer.filters._tune import NOISE_BOUNDS, PLATEAU, PROCESS_BOUNDS
from twinfer.models import Chain
from twinfer.sim import bandlimited_noise, simulate_dataset
from twinfer.spec import SpecError, load_spec, run_spec


def _chain6(n: int, seed: int = 0, truth: str = "exact"):
    """The 6-mass chain of #51: Duffing springs at connections 3 and 5, a force on mass 6 recorded by a
    load cell with 2 % noise, accelerometers on masses 2, 4, 6 with 5 % noise (of each one's rms).

    ``truth``: ``"exact"`` (an adaptive solve: the figures in docs/tuning.md) or ``"rk4"`` at 10 substeps
    per sample (a tenth of the filter's step; quicker to compile, for the test)."""
    chain = Chain(
        mass=[100.0, 80.0, 120.0, 90.0, 110.0, 95.0],
        stiffness=[2e4, 1.8e4, 2.2e4, 2e4, 1.9e4, 2.1e4],
        damping=30.0,
        cubic_stiffness=[0.0, 0.0, 2e10, 0.0, 2e10, 0.0],
        forced_dofs=[6],
        outputs=["a2", "a4", "a6"],
    )
    dt = 1e-3
    force = bandlimited_noise(jax.random.key(1 + seed), np.arange(n + 1) * dt, 0.5, 20.0, 100.0)
    key, substeps = jax.random.key(seed), 1 if truth == "exact" else 10
    kind: Any = truth
    clean = simulate_dataset(chain, force[:, None], dt, 0.0, key, truth=kind, substeps=substeps)
    noise = 0.05 * np.sqrt(np.mean(np.asarray(clean.observations) ** 2, axis=0))
    data = simulate_dataset(
        chain, force[:, None], dt, noise, key, truth=kind, substeps=substeps, input_noise_sd=2.0
    )
    return chain, data, noise


def _chain2(n: int = 1500, noise: float = 0.05):
    """A linear 2-mass chain (KF), a force on mass 2, accelerometers on both."""
    chain = Chain(
        mass=[50.0, 40.0], stiffness=[1e4, 8e3], damping=20.0, forced_dofs=[2], outputs=["a1", "a2"]
    )
    dt = 2e-3
    force = bandlimited_noise(jax.random.key(3), np.arange(n + 1) * dt, 0.5, 20.0, 50.0)
    data = simulate_dataset(chain, force[:, None], dt=dt, noise_sd=noise, key=jax.random.key(4))
    return chain, data


def test_item5_process_sd_auto_on_the_6_mass_chain_is_within_2_of_the_best_decade():
    """The #51 acceptance at a shorter record: from the getting-started settings (process_sd 1e-5),
    ``process_sd="auto"`` chooses a level whose log-likelihood is within 2 of the best of a 1-decade grid
    of run_filter calls, and the unknown stiffness's 95 % interval holds the truth."""
    chain, data, noise = _chain6(400, truth="rk4")
    options = dict(noise_sd=noise, state_sd=1e-3, unknown={"k4": (2.5e4, 5e3, 0.0)})
    est = run_filter(chain, data, process_sd="auto", **options)
    tuning = tuning_of(est)
    assert tuning is not None and tuning.noise_sd is None and tuning.process_sd is not None
    low, high = PROCESS_BOUNDS
    assert low * 1e-3 <= tuning.process_sd[0] <= high * 1e-3  # state_sd times the multiplier
    assert np.all(tuning.process_sd == tuning.process_sd[0])  # the shape of a scalar state_sd
    assert est.loglik == pytest.approx(tuning.loglik, abs=1e-6)  # the estimate ran at the chosen level
    grid = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FilterConsistencyWarning)  # the grid's poor levels
        for decade in range(-13, -2):  # keyed by the exponent: numpy's 10.0 ** -5.0 need not be 1e-05
            grid[decade] = run_filter(chain, data, process_sd=10.0**decade, **options).loglik
    best = max(grid.values())
    assert est.loglik >= best - 2.0, (tuning, grid)
    assert est.loglik >= grid[-5]  # no worse than the getting-started level
    k_low, k_high = est.interval("k4")
    assert k_low <= data.truth_params["k4"] <= k_high
    # the profile: the chosen point is within PLATEAU of the best seen, and the profile's points are real
    mults, lls = tuning.profile["process_sd"]
    assert np.all(lls <= tuning.loglik + PLATEAU + 1e-6) and len(mults) == len(lls) >= 3
    assert tuning.seconds > 0 and tuning.evaluations >= 11
    assert "process_sd" in str(tuning) and "filter runs" in str(tuning)


def test_item5_noise_sd_auto_recovers_the_sensor_noise_with_either_or_both_auto():
    """On a linear chain without model error the maximum-likelihood noise level is the simulated one: with
    ``noise_sd="auto"`` (process given) and with both ``"auto"``, each sensor's chosen sd is within 10 % of
    the truth (0.05), and both report their multipliers inside the stated bounds."""
    chain, data = _chain2()
    est = run_filter(chain, data, estimator="kf", state_sd=1e-3, process_sd=1e-9, noise_sd="auto")
    tuning = tuning_of(est)
    assert tuning is not None and tuning.process_sd is None and tuning.noise_sd is not None
    np.testing.assert_allclose(tuning.noise_sd, 0.05, rtol=0.1)
    assert NOISE_BOUNDS[0] <= tuning.scales["noise_sd"] <= NOISE_BOUNDS[1]
    both = smooth(chain, data, estimator="kf", state_sd=1e-3, process_sd="auto", noise_sd="auto")
    tuned = tuning_of(both)
    assert tuned is not None and tuned.process_sd is not None and tuned.noise_sd is not None
    np.testing.assert_allclose(tuned.noise_sd, 0.05, rtol=0.1)
    assert set(tuned.scales) == {"process_sd", "noise_sd"} and tuned.grid[0].shape[1] == 2
    metrics = tuned.metrics()
    assert metrics["tuning.noise_sd.a1"] == tuned.noise_sd[0] and "tuning.process_sd" in metrics


def test_item5_the_nis_check_warns_when_innovations_are_too_small():
    """Noise levels twice the sensor's: NIS about 0.3, which the fixed threshold (0.1) let pass; the
    chi-square test over 3,000 values warns, naming the NIS, the consistent range and process_sd/noise_sd
    "auto". At the true levels it stays silent. #51's NIS of 0.74 over 6,000 values is outside the band."""
    chain, data = _chain2()
    with pytest.warns(
        FilterConsistencyWarning, match=r"NIS\) averages 0\.[2-4].*consistent filter gives"
    ) as w:
        run_filter(chain, data, estimator="kf", state_sd=1e-3, process_sd=1e-9, noise_sd=0.1)
    message = str(w[0].message)
    assert "noise_sd='auto'" in message and "process_sd='auto'" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", FilterConsistencyWarning)
        est = run_filter(chain, data, estimator="kf", state_sd=1e-3, process_sd=1e-9, noise_sd=0.05)
    low, high = nis_band(2 * 1500)
    assert est.nis is not None and low < est.nis < high
    assert inconsistency(0.74, 6000) is None  # the fixed rule alone: silent
    assert inconsistency(0.74, 6000, alpha=NIS_ALPHA) == "low"
    assert inconsistency(1.3, 6000, alpha=NIS_ALPHA) == "high"
    assert inconsistency(0.74, 5, alpha=NIS_ALPHA) is None  # too few values to judge
    # the band narrows as sqrt(2 / n) (chi-square's mean 1, variance 2 / n per value)
    widths = [np.subtract(*nis_band(n))[()] for n in (1000, 4000)]
    assert widths[0] / widths[1] == pytest.approx(2.0, rel=0.05)


def test_item5_auto_is_refused_where_it_cannot_run(tmp_path: Path):
    """A misspelt "auto" names the field; a spec asking for "auto" with a distributed estimator or with
    input_sd names the key before anything runs."""
    chain, data = _chain2(n=50)
    with pytest.raises(ValueError, match=r"filter process_sd: expected 'auto'.*received 'Auto'"):
        run_filter(chain, data, process_sd="Auto")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match=r"filter noise_sd: expected 'auto'"):
        run_filter(chain, data, noise_sd="automatic")  # pyright: ignore[reportArgumentType]
    base = _CHAIN_SPEC + "[simulate]\nduration = 0.2\ndt = 2e-3\nnoise_sd = 0.05\n"
    bad = {
        'kind = "distributed"\npartition = [[1], [2]]\nprocess_sd = "auto"\n': "estimator.process_sd: 'auto'",
        'input_sd = 1.0\nnoise_sd = "auto"\n': "estimator.noise_sd: 'auto'",
    }
    for body, named in bad.items():
        path = tmp_path / "bad.toml"
        path.write_text(base + "[estimator]\n" + body)
        with pytest.raises(SpecError, match=named):
            load_spec(path)


_CHAIN_SPEC = """
[model]
kind = "chain"
mass = [50.0, 40.0]
stiffness = [1e4, 8e3]
damping = 20.0
forced_dofs = [2]
outputs = ["a1", "a2"]
"""


def test_item5_a_spec_with_auto_levels_reports_them_in_its_metrics(tmp_path: Path):
    """``process_sd = "auto"`` and ``noise_sd = "auto"`` in a spec's central estimator: the run's metrics
    hold tuning.process_sd, tuning.noise_sd.<output> and the time taken; the notes say what was chosen."""
    path = tmp_path / "auto.toml"
    path.write_text(
        _CHAIN_SPEC + "[simulate]\nduration = 2.0\ndt = 2e-3\nnoise_sd = 0.05\n"
        '[estimator]\nestimator = "kf"\nprocess_sd = "auto"\nnoise_sd = "auto"\n'
    )
    spec, base = load_spec(path)
    _, _, artifacts, _ = run_spec(spec, base)
    metrics = artifacts.metrics
    assert metrics["tuning.noise_sd.a1"] == pytest.approx(0.05, rel=0.15)
    assert metrics["tuning.process_sd"] > 0 and metrics["tuning.seconds"] > 0
    assert any("noise levels from the data" in note.lower() for note in artifacts.notes)
