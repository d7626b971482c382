"""Issue #52: the simulators' and `twinfer estimate`'s side of "no garbage with exit 0"."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.models import Chain
from twinfer.sim import StepSizeError, discretise, exact_matrices, simulate_dataset, simulate_discrete

STIFF = """
name = "stiff"
[model]
kind = "chain"
mass = [100.0, 100.0, 100.0, 100.0]
stiffness = [2e8, 2e8, 2e8, 2e8]
damping = 1e3
forced_dofs = [4]
outputs = ["a1", "a3", "a4"]

[simulate]
duration = 1.0
dt = 1e-2
noise_sd = 1e-3
force_sd = 1e3

[estimator]
kind = "central"
estimator = "ekf"
noise_sd = 1e-3
"""


@pytest.mark.filterwarnings("ignore::twinfer.infer.filters.FilterConsistencyWarning")  # not this test's
def test_twinfer_estimate_on_a_step_too_long_for_rk4_fails_naming_substeps(tmp_path):
    """Before #52: exit 0 with state.rmse 4.9e53. Now exit 1 before anything is written, naming the
    fastest mode and the substeps that fix it; with ``estimator.substeps`` the run completes."""
    spec = tmp_path / "stiff.toml"
    spec.write_text(STIFF)
    result = CliRunner().invoke(app, ["estimate", str(spec), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "StepSizeError" in text and "use substeps=10 or more" in text, text
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    spec.write_text(STIFF.replace('estimator = "ekf"', 'estimator = "ekf"\nsubsteps = 60'))
    result = CliRunner().invoke(app, ["estimate", str(spec), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output


def test_simulate_dataset_key_0_is_a_named_error():
    chain = Chain(mass=[1.0, 1.0], stiffness=[100.0, 100.0], damping=0.1, outputs=("a1",))
    with pytest.raises(
        TypeError, match=r"simulate_dataset key: expected a JAX PRNG key, e.g. jax.random.key\(0\)"
    ):
        simulate_dataset(chain, np.zeros((11, 2)), 1e-2, 0.1, 0)
    with pytest.raises(TypeError, match="received an array of dtype float64"):
        simulate_dataset(chain, np.zeros((11, 2)), 1e-2, 0.1, np.zeros(2))
    simulate_dataset(chain, np.zeros((11, 2)), 1e-2, 0.1, jax.random.PRNGKey(0))  # the legacy key works


def test_an_exact_step_over_many_periods_is_finite_and_matches_the_modal_solution():
    """A 1.6 kHz mode sampled at 10 Hz (||A dt|| = 1e8): JAX's expm stops at 16 squarings and returned
    NaN, so the 'exact' truth failed; with up to 64 it matches the eigen-decomposition's."""
    chain = Chain(mass=[1.0] * 3, stiffness=[1e8] * 3, damping=[200.0] * 3, outputs=("a1",))
    a = np.asarray(chain.linear_matrices(chain.params)[0])
    a_d, _ = exact_matrices(chain, chain.params, 0.1)
    lam, vec = np.linalg.eig(a)
    modal = (vec @ np.diag(np.exp(lam * 0.1)) @ np.linalg.inv(vec)).real
    assert np.all(np.isfinite(np.asarray(a_d)))
    np.testing.assert_allclose(np.asarray(a_d), modal, atol=1e-6 * np.abs(modal).max())


def test_simulate_discrete_refuses_a_step_rk4_cannot_take_and_runs_with_substeps():
    chain = Chain(mass=[1.0, 1.0], stiffness=[1e4, 1e4], damping=0.1, outputs=("a1",))
    with pytest.raises(StepSizeError, match="simulate_discrete integrator: the step dt = 0.05"):
        simulate_discrete(discretise(chain, 0.05, "rk4"), np.ones(4), np.zeros((200, 2)))
    simulate_discrete(discretise(chain, 0.05, "rk4", substeps=20), np.ones(4), np.zeros((200, 2)))
