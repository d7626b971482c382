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
    for name in ("states", "parameters", "narx"):
        assert (folder / "figures" / f"{name}.png").is_file()
