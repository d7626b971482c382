import json
import math

import numpy as np
import pytest

from twinfer.report import PaperValue, render_report, to_toml, write_json, write_npz
from twinfer.report._run import check_metrics


def test_metrics_must_be_finite():
    with pytest.raises(ValueError, match=r"metrics\['ukf.nll'\]: expected a finite number"):
        check_metrics({"ukf.nll": math.nan})
    assert check_metrics({"a.b": 1}) == {"a.b": 1.0}


def test_write_json_is_atomic_and_refuses_nan(tmp_path):
    target = tmp_path / "metrics.json"
    write_json(target, {"a": 1.0})
    with pytest.raises(ValueError):
        write_json(target, {"a": math.nan})
    assert json.loads(target.read_text()) == {"a": 1.0}  # the old file survives
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temporary left behind


def test_npz_roundtrip(tmp_path):
    write_npz(tmp_path / "a.npz", {"x": np.arange(3.0)})
    with np.load(tmp_path / "a.npz") as npz:
        np.testing.assert_array_equal(npz["x"], np.arange(3.0))


def test_report_table_has_paper_values():
    text = render_report(
        "chain4",
        "desc",
        {"ukf.k4_nrmse": 0.025},
        {"ukf.k4_nrmse": PaperValue(0.0247, "Table S1")},
        to_toml({"horizon": 10.0, "sensors": "all", "flags": [1, 2]}),
    )
    assert "| `ukf.k4_nrmse` | 0.025 | 0.0247 | 1.01 | Table S1 |" in text
    assert 'sensors = "all"' in text and "flags = [1, 2]" in text
