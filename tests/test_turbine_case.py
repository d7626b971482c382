"""The heterogeneous turbine case end to end at --quick size (five kinds of estimator in one graph)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from twinfer.cli import app


@pytest.mark.slow
def test_turbine_quick_runs_five_estimators_and_the_central_ukf(tmp_path):
    """Governor (none), NARX (learned), EKF, KF and UKF on 3 s of the Pelton unit, and the central UKF.

    The lateral displacements are measured with 5 um noise: both estimators must track them well below
    it; the flow coefficient e_y, the best identified, must move from 0.7 towards 1 within 3 s; every
    filtered state and the derived head must be finite and their intervals must hold the truth most of
    the time.
    """
    result = CliRunner().invoke(app, ["run", "turbine", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    m = json.loads((folder / "metrics.json").read_text())
    assert all(np.isfinite(v) for v in m.values())
    for label in ("distributed", "central"):
        assert m[f"{label}.lateral_rmse"] < 5e-6
        assert abs(m[f"{label}.e_y"] - 1.0) < 0.15
        assert m[f"{label}.coverage95.estimated_min"] >= 0.8
        assert m[f"{label}.run_s"] > 0
    assert m["narx.test.rmse"] > 0 and m["narx.online_rmse"] < 0.05
    for name in ("states", "parameters", "narx"):
        assert (folder / "figures" / f"{name}.png").is_file()
