"""Run folders are complete or absent: written atomically, metrics and arrays before figures, a figure
failure is a warning, a failed or interrupted run keeps its checkpoint and leaves no half folder, and a
fresh run never destroys an interrupted run's checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from twinfer.report import RunArtifacts, new_run_dir, write_run


def _runs(out):
    return sorted(p for p in out.iterdir() if p.name.startswith("tiny-smc"))


def _checkpoints(out):
    return sorted((out / ".checkpoints").glob("*/*.ckpt"))


def test_figure_failure_keeps_metrics_arrays_and_report_with_a_warning(tiny_case, cli, tmp_path):
    """Figures that raise: exit 0, a warning line, and a complete run folder without figures; the
    checkpoint is removed only because the folder is complete."""
    tiny_case.fail_figures = RuntimeError("matplotlib ran out of colours")
    result = cli("run", "tiny-smc", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "matplotlib ran out of colours" in result.output
    (run_dir,) = _runs(tmp_path)
    for name in ("config.toml", "metrics.json", "arrays.npz", "meta.json", "report.md"):
        assert (run_dir / name).is_file(), name
    assert "posterior.mu.mean" in json.loads((run_dir / "metrics.json").read_text())
    assert "matplotlib ran out of colours" in (run_dir / "report.md").read_text()
    assert json.loads((run_dir / "meta.json").read_text())["warnings"]
    assert not (tmp_path / ".checkpoints").exists()  # finished: nothing left to resume


def test_failure_in_the_computation_leaves_no_half_folder_and_keeps_the_checkpoint(tiny_case, cli, tmp_path):
    """The case raises after its sampler checkpointed: exit 1, no run folder (not even a temporary one),
    the checkpoint kept; `--resume` then finishes from it and removes it."""
    tiny_case.fail_compute = MemoryError("out of memory while scoring")
    failed = cli("run", "tiny-smc", "--out", tmp_path)
    assert failed.exit_code == 1
    assert not _runs(tmp_path) and not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    (ckpt,) = _checkpoints(tmp_path)
    assert str(ckpt.parent) in failed.output
    tiny_case.fail_compute = None
    resumed = cli("run", "tiny-smc", "--out", tmp_path, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert len(_runs(tmp_path)) == 1 and not ckpt.exists()


def test_interrupt_while_writing_the_run_folder_keeps_the_checkpoint(tiny_case, cli, tmp_path):
    """Ctrl-C during the figures (after the computation): exit 130, no run folder, checkpoint kept,
    and the message gives the command that resumes."""
    tiny_case.fail_figures = KeyboardInterrupt()
    result = cli("run", "tiny-smc", "--out", tmp_path)
    assert result.exit_code == 130
    assert not _runs(tmp_path) and not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    (ckpt,) = _checkpoints(tmp_path)
    assert f"twinfer run tiny-smc --out {tmp_path} --resume" in result.output
    assert "smc.ckpt (IBIS, 40 observations assimilated)" in result.output


def test_fresh_run_does_not_destroy_an_interrupted_runs_checkpoint(tiny_case, cli, tmp_path):
    """Interrupted at observation 10, then the same command without --resume: the old checkpoint is left
    byte for byte (with a note saying so); `--resume` afterwards still continues it, and gives the
    numbers of the uninterrupted run."""
    tiny_case.stop_at, tiny_case.fail_compute = 10, KeyboardInterrupt()
    assert cli("run", "tiny-smc", "--out", tmp_path).exit_code == 130
    (ckpt,) = _checkpoints(tmp_path)
    before = ckpt.read_bytes()
    tiny_case.stop_at, tiny_case.fail_compute = None, None
    fresh = cli("run", "tiny-smc", "--out", tmp_path)
    assert fresh.exit_code == 0, fresh.output
    assert "pass --resume to continue it" in fresh.output
    assert ckpt.read_bytes() == before
    resumed = cli("run", "tiny-smc", "--out", tmp_path, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert not ckpt.exists()
    first, second = _runs(tmp_path)
    with np.load(first / "arrays.npz") as a, np.load(second / "arrays.npz") as b:
        np.testing.assert_array_equal(a["theta"], b["theta"])
        np.testing.assert_array_equal(a["log_w"], b["log_w"])
    nothing = cli("run", "tiny-smc", "--out", tmp_path, "--resume")
    assert nothing.exit_code == 2 and "no checkpoint of an interrupted" in nothing.output


def test_write_run_is_all_or_nothing(tmp_path, monkeypatch):
    """A full disk while writing arrays: the exception propagates and neither the run folder nor its
    temporary folder is left; a successful write has metrics, arrays and the report."""
    from twinfer.report import _run

    artifacts = RunArtifacts(metrics={"a.b": 1.0}, arrays={"x": np.arange(3.0)})

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_run, "write_npz", full_disk)
    run_dir = new_run_dir(tmp_path, "case")
    with pytest.raises(OSError, match="No space left"):
        write_run(run_dir, "case", "d", {"seed": 0}, artifacts, {}, {})
    assert not any(tmp_path.iterdir())
    monkeypatch.undo()
    done = write_run(new_run_dir(tmp_path, "case"), "case", "d", {"seed": 0}, artifacts, {}, {})
    expected = ["arrays.npz", "config.toml", "meta.json", "metrics.json", "report.md"]
    assert sorted(p.name for p in done.iterdir()) == expected
    assert [p.name for p in tmp_path.iterdir()] == [done.name]
