"""Bouc-Wen and EMPS models, and the PN-SMC cases end to end at --quick size."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.models import EMPS, BoucWen


def test_boucwen_vector_field_matches_equations():
    """Eq. (26) with nu = 1 at a hand-picked state, and finite derivatives at z = 0 (Taylor init)."""
    model = BoucWen()
    x, u = jnp.array([1e-3, 0.02, -3.0]), jnp.array([5.0])
    dx = np.asarray(model.vector_field(0.0, x, u, model.params))
    acc = (5.0 - 10.0 * 0.02 - 5e4 * 1e-3 + 3.0) / 2.0
    dz = 5e4 * 0.02 - 1e3 * (0.8 * 0.02 * 3.0 * -1.0 + -1.1 * 0.02 * 3.0)
    np.testing.assert_allclose(dx, [0.02, acc, dz], rtol=1e-12)
    import jax

    jac = jax.jacfwd(lambda s: model.vector_field(0.0, s, u, model.params))(jnp.zeros(3))
    assert np.all(np.isfinite(np.asarray(jac)))
    with pytest.raises(ValueError, match="unknown parameters"):
        BoucWen(mass=2.0)


def test_emps_vector_field_matches_equations():
    model = EMPS()
    dx = np.asarray(model.vector_field(0.0, jnp.array([0.1, -0.2]), jnp.array([30.0]), model.params))
    p = {k: float(v) for k, v in model.params.items()}
    expected = (30.0 - p["Fv"] * -0.2 - p["Fc"] * -1.0 - p["offset"]) / p["M"]
    np.testing.assert_allclose(dx, [-0.2, expected], rtol=1e-12)
    with pytest.raises(ValueError, match="positive mass"):
        EMPS(M=-1.0)


@pytest.mark.slow
def test_boucwen_quick_end_to_end(tmp_path):
    """`twinfer run boucwen --quick` writes metrics, the posterior netCDF and its summary."""
    result = CliRunner().invoke(app, ["run", "boucwen", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (run_dir,) = list(tmp_path.iterdir())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("sinesweep.test.rmse_mean", "multisine.test.rmse_mean", "smc.resample_count", "timing.run_s"):
        assert np.isfinite(metrics[key])
    assert metrics["posterior.m.sd"] > 0
    assert (run_dir / "posterior.nc").is_file() and (run_dir / "posterior_summary.md").is_file()
    assert (run_dir / "figures" / "prior_vs_posterior.png").is_file()
