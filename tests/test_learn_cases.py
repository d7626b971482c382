"""The ``bouncing-ball`` case end to end at --quick size."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.experiments.common_interface import WEIGHTS

runner = CliRunner()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_run_bouncing_ball_quick(tmp_path):
    """Claim: `twinfer run bouncing-ball --quick` trains P, reports every metric and the W figure;
    the physics-only baseline on the test scenario equals the specs 3.7 sanity value 0.5079.

    Run as a user runs it, in a fresh process with XLA's default flags rather than the suite's quick
    compile options (conftest.py): in test scenario 5 the physics-only ball reaches the right wall
    exactly at the save time t = 0.70 (s_x = 0.9 = 1 - r), so rounding decides whether that sample is
    the bounce's left or right limit. With XLA's defaults it is the left limit and the loss is 0.5079,
    as in the spec; XLA's backend at optimisation level 0 takes the right limit (0.5100).
    """
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(TWINFER_CACHE_DIR="off", JAX_ENABLE_X64="1", MPLBACKEND="Agg")
    command = [sys.executable, "-c", "from twinfer.cli import main; main()", "run", "bouncing-ball"]
    command += ["--quick", "--out", str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=360)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert abs(metrics["fpm.test_loss"] - 0.5079) < 1e-3
    assert abs(metrics["fpm.train_loss_s3"] - 0.2783) < 1e-3
    for key in [f"P.train_loss_s{i}" for i in range(1, 5)] + ["P.test_loss", "timing.train_s.P"]:
        assert key in metrics
    assert (run_dir / "figures" / "matrices_P.png").is_file()
    assert "P learned connections" in (run_dir / "report.md").read_text()


@pytest.mark.slow
def test_run_common_interface_quick(tmp_path):
    """Claim: `twinfer run common-interface --quick` trains the neural ODE and the RNN with events (the
    event-free variants are the same code without the event model) with the one loop and reports each
    model's loss, final horizon and training time."""
    result = runner.invoke(app, ["run", "common-interface", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (run_dir,) = list(tmp_path.iterdir())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    # Training must lower the full-horizon loss (the acceptance metric) from the untrained model's, the
    # same metric at the initial parameters. Seeds 0-3 at quick size (one RK4 step per sample), trained/
    # untrained: neural ODE 0.52-0.67 (5 Adam steps), RNN 0.67-0.88 (30 steps), as with two RK4 steps; a
    # loop that does not step, or steps uphill, gives >= 1.
    for name, bound in (("neural_ode_events", 0.8), ("rnn_events", 0.93)):
        assert metrics[f"{name}.loss"] < bound * metrics[f"{name}.loss_untrained"], name
        assert f"timing.train_s.{name}" in metrics
    # ... and the RNN, trained on the whole trajectory, beats predicting the data's mean (0.78): 0.50-0.65
    # over seeds 0-3
    with np.load(run_dir / "arrays.npz") as arrays:
        truth = arrays["truth"]
    mean_predictor = float(np.sum(np.asarray(WEIGHTS) * np.mean(np.abs(truth - truth.mean(axis=0)), axis=0)))
    assert metrics["rnn_events.loss"] < 0.9 * mean_predictor
    assert metrics["rnn_events.final_horizon"] == 131
    assert (run_dir / "figures" / "trajectories.png").is_file()
