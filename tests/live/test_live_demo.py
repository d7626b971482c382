"""``twinfer live --demo``: a simulated chain streamed into a file being written, a stiffness loss found."""

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from twinfer.cli import app

runner = CliRunner()
TWINFER = str(Path(sys.executable).with_name("twinfer"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["live"], "missing SPEC, --source, --out"),
        (["live", "--demo", "spec.toml"], "live --demo: expected no SPEC"),
        (["live", "--demo", "--speed", "0"], "live --speed: expected a number > 0"),
    ],
)
def test_live_without_a_stream_or_with_a_demo_and_a_spec_is_refused(args, words):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert words in " ".join(result.output.split())


@pytest.mark.timeout(60)
def test_a_demo_folder_that_holds_files_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("a user's file")
    result = runner.invoke(app, ["live", "--demo", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "expected a new or empty folder" in " ".join(result.output.split())
    assert (tmp_path / "keep.txt").read_text() == "a user's file"


@pytest.mark.acceptance
@pytest.mark.timeout(600)
def test_the_demo_finds_the_stiffness_loss_and_draws_it(tmp_path):
    """The whole demo as a user runs it (a new process): the loss named by a drift alarm, no other alarm."""
    out = tmp_path / "demo"
    done = subprocess.run(
        [TWINFER, "live", "--demo", "--out", str(out), "--speed", "20"],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the drift alarm named" in text and "; 1 alarms;" in text
    assert (out / "demo.png").stat().st_size > 10_000 and (out / "twin" / "twin.snapshot").exists()
