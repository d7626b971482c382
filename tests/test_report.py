import json
import math

import numpy as np
import pytest

from twinfer.report import (
    PaperValue,
    Tolerance,
    at_least,
    at_most,
    near,
    render_report,
    to_toml,
    within,
    write_json,
    write_npz,
)
from twinfer.report._reproduce import check_run, write_reproduction
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


def test_npz_roundtrip_deflates_what_compresses_and_stores_the_rest(tmp_path):
    """Noise is stored, a mask and a constant are deflated; numpy reads both back exactly, dtypes kept."""
    import zipfile

    noise = np.random.default_rng(0).normal(size=(300, 40))
    arrays = {"x": np.arange(3.0), "noise": noise, "mask": np.ones((500, 8), bool), "zeros": np.zeros(9000)}
    arrays["names"] = np.array(["a1", "a4"])
    write_npz(tmp_path / "a.npz", arrays)
    with np.load(tmp_path / "a.npz", allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(arrays)
        for name, value in arrays.items():
            np.testing.assert_array_equal(npz[name], value)
            assert npz[name].dtype == value.dtype
    kinds = {i.filename: i.compress_type for i in zipfile.ZipFile(tmp_path / "a.npz").infolist()}
    assert kinds["noise.npy"] == zipfile.ZIP_STORED
    assert kinds["mask.npy"] == kinds["zeros.npy"] == zipfile.ZIP_DEFLATED


def test_report_table_has_paper_values():
    text = render_report(
        "chain4",
        "desc",
        {"ukf.k4_nrmse": 0.025},
        {"ukf.k4_nrmse": PaperValue(0.0247, "Table S1")},
        to_toml({"horizon": 10.0, "sensors": "all", "flags": [1, 2]}),
    )
    assert "| `ukf.k4_nrmse` | 0.025 | 0.0247 | 1.01 | - | Table S1 |" in text
    assert 'sensors = "all"' in text and "flags = [1, 2]" in text


def test_tolerances_pass_and_fail_at_their_edges():
    """Each kind against its written bound: factor both ways, one-sided errors and speed-ups, absolute."""
    assert within(2.0, "r").passes(2.0, 1.0) and within(2.0, "r").passes(0.5, 1.0)
    assert not within(2.0, "r").passes(2.01, 1.0) and not within(2.0, "r").passes(-1.0, 1.0)
    assert within(1.05, "r").passes(-42.93, -42.9)  # a negative log-likelihood compares by its ratio
    assert at_most(2.0, "r").passes(1e-9, 1.0) and not at_most(2.0, "r").passes(2.1, 1.0)
    assert at_least(0.5, "r").passes(1e9, 10.0) and not at_least(0.5, "r").passes(4.9, 10.0)
    assert near(0.02, "r").passes(0.98, 1.0) and not near(0.02, "r").passes(0.97, 1.0)
    assert not near(1.0, "r").passes(math.nan, 1.0)
    with pytest.raises(ValueError, match="Tolerance reason"):
        Tolerance("factor", 2.0, " ")
    with pytest.raises(ValueError, match="expected a finite value > 0"):
        within(0.5, "a factor below 1 admits nothing")


def test_reproduction_table_checks_every_paper_value(tmp_path):
    """pass / FAIL under a tolerance, reported without one, missing when the run lacks the metric;
    the markdown and JSON tables list each with its reason and the per-case counts."""
    paper = {
        "a.rmse": PaperValue(1e-3, "Table 1", at_most(2.0, "an error")),
        "a.cov": PaperValue(0.95, "Table 1", near(0.02, "a coverage")),
        "a.k": PaperValue(5e4, "eq. 9"),
        "a.gone": PaperValue(1.0, "Table 2", within(2.0, "same run")),
    }
    checks = check_run("demo", {"a.rmse": 1.5e-3, "a.cov": 0.90, "a.k": 4.9e4}, paper)
    assert [(c.metric, c.status) for c in checks] == [
        ("a.cov", "FAIL"),
        ("a.gone", "missing"),
        ("a.k", "reported"),
        ("a.rmse", "pass"),
    ]
    md, js = write_reproduction(tmp_path, checks, {"demo": {"quick": True, "seconds": 1.5}}, {"twinfer": "x"})
    text = md.read_text()
    assert "| demo | quick | - | 1.5 s | 1 | 1 | 1 | 1 |" in text  # no source digest recorded: "-"
    # with the source digest in the header, each case says whether its run came from that source
    runs = {"demo": {"quick": True, "seconds": 1.5, "source": "abc"}, "old": {"quick": True, "seconds": 2.0}}
    both = write_reproduction(tmp_path, checks, runs, {"twinfer": "x", "source": "abc"})[0].read_text()
    assert (
        "| demo | quick | this source | 1.5 s |" in both and "| old | quick | older source | 2.0 s |" in both
    )
    md, js = write_reproduction(tmp_path, checks, {"demo": {"quick": True, "seconds": 1.5}}, {"twinfer": "x"})
    assert "| demo | `a.rmse` | 1.000e-03 | 1.500e-03 | 1.5 | <= 2x | pass | Table 1 | an error |" in text
    table = json.loads(js.read_text())
    assert {c["status"] for c in table["checks"]} == {"pass", "FAIL", "reported", "missing"}
    assert render_report("demo", "d", {"a.rmse": 3e-3}, paper, "").count("FAIL (<= 2x)") == 1
