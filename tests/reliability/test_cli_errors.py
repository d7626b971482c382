"""`twinfer run` errors: a bad --out is refused before computing; an error inside a run is one line
naming the cause and the fix (exit 1), with the traceback only under --debug; config errors keep exit 2."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from twinfer.checkpoint import CheckpointError


def test_out_pointing_at_a_file_is_refused_before_computing(tiny_case, cli, tmp_path):
    """`--out FILE` (or a folder below a file) exits 2 naming the file, and the case never runs."""
    file = tmp_path / "not-a-folder"
    file.write_text("x")
    for out in (file, file / "runs"):
        result = cli("run", "tiny-smc", "--out", out)
        assert result.exit_code == 2, result.output
        assert str(file) in result.output and "is a file" in result.output
        assert "Traceback" not in result.output
    assert tiny_case.calls == 0
    assert file.read_text() == "x"


def _unwritable(tmp_path: Path) -> Path:
    """A folder this process cannot write to (root ignores permission bits: then a read-only /sys)."""
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        (folder / "probe").write_text("")
    except OSError:
        return folder
    (folder / "probe").unlink()
    candidate = Path("/sys/twinfer-unwritable-out")
    try:
        candidate.mkdir()
    except OSError:
        return candidate
    candidate.rmdir()
    pytest.skip("no folder is unwritable for this user")


def test_unwritable_out_is_refused_before_computing(tiny_case, cli, tmp_path):
    """`--out` (or `checkpoint_dir`) where nothing can be written exits 2 with a named error, and the case
    never runs."""
    out = _unwritable(tmp_path)
    try:
        result = cli("run", "tiny-smc", "--out", out)
        ckpt = cli("run", "tiny-smc", "--set", f"checkpoint_dir={out / 'ck'}", "--out", tmp_path / "runs")
    finally:
        if out.is_relative_to(tmp_path):
            out.chmod(stat.S_IRWXU)
    assert result.exit_code == 2, result.output
    assert str(out) in result.output and "cannot be written" in result.output
    assert ckpt.exit_code == 2 and "checkpoint_dir" in ckpt.output and "cannot be written" in ckpt.output
    assert tiny_case.calls == 0


def test_error_inside_a_run_is_one_line_with_exit_1_and_traceback_only_with_debug(tiny_case, cli, tmp_path):
    """A ValueError raised inside the case run: exit 1, one `error:` line with the message, no traceback;
    `--debug` lets the exception through (full traceback)."""
    tiny_case.fail_compute = ValueError("tiny: the data hold a NaN at sample 3; remove it")
    result = cli("run", "tiny-smc", "--out", tmp_path)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    (error,) = [line for line in lines if line.startswith("error:")]
    assert "ValueError: tiny: the data hold a NaN at sample 3" in error
    assert "twinfer run tiny-smc --out" in error and "--resume" in error  # the checkpoint is kept
    debug = cli("run", "tiny-smc", "--out", tmp_path / "debug", "--debug")
    assert debug.exit_code == 1 and isinstance(debug.exception, ValueError)


def test_config_errors_keep_exit_2(tiny_case, cli, tmp_path):
    result = cli("run", "tiny-smc", "--set", "n_obs=-3", "--out", tmp_path)
    assert result.exit_code == 2 and "'n_obs'" in result.output
    assert not any(tmp_path.iterdir())


def test_corrupt_checkpoint_on_resume_is_refused_by_name_with_exit_1(tiny_case, cli, tmp_path):
    """An explicit checkpoint folder whose file was altered: --resume exits 1 naming the file."""
    folder = tmp_path / "ck"
    tiny_case.stop_at, tiny_case.fail_compute = 10, KeyboardInterrupt()
    first = cli("run", "tiny-smc", "--set", f"checkpoint_dir={folder}", "--out", tmp_path / "runs")
    assert first.exit_code == 130, first.output
    ckpt = folder / "smc.ckpt"
    payload = bytearray(ckpt.read_bytes())
    payload[-20] ^= 0x01
    ckpt.write_bytes(bytes(payload))
    tiny_case.stop_at, tiny_case.fail_compute = None, None
    args = ("run", "tiny-smc", "--set", f"checkpoint_dir={folder}", "--out", tmp_path / "runs")
    result = cli(*args, "--resume")
    assert result.exit_code == 1
    assert f"checkpoint {ckpt}" in result.output and "corrupt" in result.output
    assert "Traceback" not in result.output
    # an explicit checkpoint that exists is never overwritten by a run without --resume
    again = cli("run", "tiny-smc", "--set", f"checkpoint_dir={folder}", "--out", tmp_path / "runs")
    assert again.exit_code == 1 and "--resume" in again.output and str(ckpt) in again.output
    assert ckpt.read_bytes() == bytes(payload)
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("tiny-smc")]


def test_checkpoint_error_is_a_named_exception_class():
    err = CheckpointError(Path("/x/y.ckpt"), "it is corrupt.")
    assert isinstance(err, RuntimeError) and err.path == Path("/x/y.ckpt")
    assert str(err).startswith("checkpoint /x/y.ckpt: it is corrupt.") and "start fresh" in str(err)
    assert os.fspath(err.path) in str(err)
