"""report.md and meta.json say what a run holds: quick size or full, with or without paper values."""

import json

import pydantic
import pytest
from typer.testing import CliRunner

from twinfer.experiments import _case
from twinfer.report import PaperValue, RunArtifacts, at_most, render_report

QUICK_LINE = "Quick size: a smoke test; paper comparisons below are not expected to hold at this size."


class _SizeConfig(_case.CaseConfig):
    samples: int = pydantic.Field(1000, ge=1)


@pytest.fixture
def sized_case(monkeypatch):
    """A case ``tiny-sized`` whose one metric misses its paper value at the quick size."""

    def run(config: _SizeConfig, progress) -> RunArtifacts:
        return RunArtifacts(metrics={"err": 10.0 / config.samples}, arrays={})

    paper = {"err": PaperValue(0.01, "Table 1", at_most(1.5, "the same estimator"))}
    case = _case.Case(
        "tiny-sized",
        "a metric that improves with size",
        _SizeConfig,
        run,
        lambda a, c: {},
        {"samples": 10},
        paper,
    )
    monkeypatch.setitem(_case.REGISTRY, "tiny-sized", case)
    return case


def _run(tmp_path, *args):
    from twinfer.cli import app

    result = CliRunner().invoke(app, ["run", "tiny-sized", "--out", str(tmp_path), *args])
    assert result.exit_code == 0, result.output
    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    return json.loads((folder / "meta.json").read_text()), (folder / "report.md").read_text()


def test_a_quick_run_says_so_in_meta_json_and_atop_report_md(sized_case, tmp_path):
    meta, report = _run(tmp_path / "quick", "--quick")
    assert meta["quick"] is True and meta["case"] == "tiny-sized"
    assert report.splitlines()[:3] == ["# tiny-sized", "", f"**{QUICK_LINE}**"]
    assert "FAIL (<= 1.5x)" in report  # still graded, under the warning
    meta, report = _run(tmp_path / "full")
    assert meta["quick"] is False and "Quick size" not in report and "pass (<= 1.5x)" in report


def test_a_report_without_paper_values_has_no_paper_columns():
    """A user's own estimate: metric and value only; a case with paper values keeps every column."""
    own = render_report("rig", "d", {"loglik": 12.5, "param.k2": 2.5e4}, {}, "")
    assert "| metric | twinfer |\n|---|---|\n| `loglik` | 12.5 |\n| `param.k2` | 2.500e+04 |" in own
    assert "paper" not in own and "reproduced" not in own
    cased = render_report("c", "d", {"a": 1.0, "b": 2.0}, {"a": PaperValue(1.0, "S1")}, "")
    assert "| metric | twinfer | paper | twinfer / paper | reproduced | paper source |" in cased
    assert "| `b` | 2 | - | - | - |  |" in cased
