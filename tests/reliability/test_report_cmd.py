"""`twinfer report` on broken run folders, run-folder file modes, and config.toml round-trips.

One `twinfer run chain4 --quick` (module fixture) gives a real run folder; each test breaks a copy of
it in one way and expects a one-line error naming the file and the fault, exit status 2, and nothing
rewritten.
"""

import json
import math
import os
import shutil
import stat
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from twinfer._atomic import umask, write_bytes
from twinfer.cli import app
from twinfer.report import PaperValue, render_report, to_toml
from twinfer.report._run import RunFolderError, check_metrics, read_run

runner = CliRunner()


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A chain4 --quick run folder written under umask 022."""
    out = tmp_path_factory.mktemp("runs")
    old = os.umask(0o022)
    try:
        result = runner.invoke(app, ["run", "chain4", "--quick", "--out", str(out)])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    (folder,) = out.iterdir()
    return folder


@pytest.fixture
def folder(run_folder, tmp_path) -> Path:
    copy = tmp_path / run_folder.name
    shutil.copytree(run_folder, copy)
    return copy


def _report_fails(folder: Path, *phrases: str) -> str:
    """`twinfer report` exits 2 with one error naming each phrase, and leaves report.md as it was."""
    before = (folder / "report.md").read_bytes() if (folder / "report.md").exists() else None
    result = runner.invoke(app, ["report", str(folder)])
    text = " ".join(result.output.split())  # rich wraps long lines at the terminal width
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert text.startswith("error:") and text.count("error:") == 1, text
    assert "Traceback" not in result.output
    for phrase in phrases:
        assert phrase in text, (phrase, text)
    after = (folder / "report.md").read_bytes() if (folder / "report.md").exists() else None
    assert after == before
    return text


def _modes(folder: Path) -> dict[str, int]:
    return {
        str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()
    }


def test_run_folder_files_are_readable_by_colleagues(run_folder):
    """Under umask 022 every file is 0644 (mkstemp's 0600 used to hide results from the group)."""
    modes = _modes(run_folder)
    assert {"config.toml", "metrics.json", "meta.json", "arrays.npz", "report.md"} <= set(modes)
    assert any(name.startswith("figures/") for name in modes)
    assert set(modes.values()) == {0o644}, modes


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002, 0o077])
def test_new_files_get_the_mode_the_umask_gives(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert umask() == mask
        path = write_bytes(tmp_path / "sub" / "f.txt", b"x")
        plain = tmp_path / "plain.txt"
        plain.write_bytes(b"x")  # what open() gives a new file under the same umask
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask == stat.S_IMODE(plain.stat().st_mode)
    assert not [p for p in path.parent.iterdir() if p.name != "f.txt"]  # no temporary file left


def test_replacing_a_file_keeps_its_mode(tmp_path):
    """Like open(path, 'w'): a file someone made private (or read-only for the group) stays so."""
    path = tmp_path / "report.md"
    path.write_text("old")
    for mode in (0o600, 0o640, 0o664):
        path.chmod(mode)
        write_bytes(path, b"new")
        assert stat.S_IMODE(path.stat().st_mode) == mode
    assert path.read_bytes() == b"new"


def test_report_rerenders_an_intact_folder(folder):
    (folder / "report.md").unlink()
    result = runner.invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert "Table S1" in (folder / "report.md").read_text()
    assert stat.S_IMODE((folder / "report.md").stat().st_mode) == 0o666 & ~umask()


def test_missing_arrays_npz_is_a_named_error(folder):
    """A folder without arrays.npz used to crash in np.load with a traceback."""
    (folder / "arrays.npz").unlink()
    _report_fails(folder, "arrays.npz", "it is missing")


@pytest.mark.parametrize("payload", [b"not a zip archive", b"PK\x03\x04truncated"])
def test_corrupt_arrays_npz_is_a_named_error(folder, payload):
    (folder / "arrays.npz").write_bytes(payload)
    _report_fails(folder, "arrays.npz: expected an .npz archive of arrays; could not load it")


def test_arrays_the_figures_need_missing_is_a_named_error(folder):
    with np.load(folder / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files if k != "truth_states"}
    np.savez(folder / "arrays.npz", **arrays)
    _report_fails(folder, "arrays.npz: the saved arrays do not fit the figures of case 'chain4'")


@pytest.mark.parametrize(
    ("payload", "phrases"),
    [
        (b"horizon = = 2\n", ("config.toml: could not be parsed",)),
        (b"\xff\xfe\x00\x01", ("config.toml: expected UTF-8 text",)),
        (b"horizon = -1.0\n", ("config.toml:", "'horizon': Input should be greater than 0; received -1.0")),
        (b"horizon = inf\n", ("config.toml:", "'horizon': Input should be a finite number; received inf")),
        (b"horizn = 2.0\n", ("config.toml:", "unknown key 'horizn'")),
        (b"seed = true\n", ("config.toml:", "'seed': Input should be a valid integer; received True")),
    ],
)
def test_bad_config_toml_is_a_named_error(folder, payload, phrases):
    """A config.toml that does not parse, or no longer validates, used to raise a traceback."""
    (folder / "config.toml").write_bytes(payload)
    _report_fails(folder, *phrases)


@pytest.mark.parametrize(
    ("payload", "phrases"),
    [
        ("{not json", ("meta.json: could not be parsed",)),
        ("[1, 2]", ('meta.json: expected a JSON object with the run\'s "case" name',)),
        ('{"versions": {}}', ('meta.json: expected a JSON object with the run\'s "case" name',)),
        ('{"case": "no-such-case"}', ("meta.json: Unknown case 'no-such-case'",)),
        ('{"case": "chain4", "notes": 3}', ('meta.json: expected "notes" to be a list',)),
    ],
)
def test_bad_meta_json_is_a_named_error(folder, payload, phrases):
    (folder / "meta.json").write_text(payload)
    _report_fails(folder, *phrases)


@pytest.mark.parametrize("name", ["config.toml", "metrics.json", "meta.json"])
def test_missing_required_file_is_a_named_error(folder, name):
    (folder / name).unlink()
    _report_fails(folder, name, "it is missing")


def test_nan_metric_is_refused_naming_the_metric(folder):
    """metrics.json must hold finite numbers (the writer refuses NaN): a NaN read back is refused by name
    rather than rendered as if it were a result."""
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics["central.state_rmse"] = float("nan")
    (folder / "metrics.json").write_text(json.dumps(metrics))  # json writes NaN unless told not to
    _report_fails(
        folder, "metrics.json: metrics['central.state_rmse']: expected a finite number; received nan"
    )
    metrics["central.state_rmse"] = "fast"
    (folder / "metrics.json").write_text(json.dumps(metrics))
    _report_fails(folder, "metrics['central.state_rmse']: expected a finite number; received 'fast'")
    (folder / "metrics.json").write_text("[1.0]")
    _report_fails(folder, "metrics.json: expected a JSON object of metric name -> number")


def test_unwritable_figures_folder_is_a_named_error_exit_1(folder):
    """Failing to write (an environment fault, not a broken folder) exits 1 with the OS's reason."""
    shutil.rmtree(folder / "figures")
    (folder / "figures").write_text("a file where the figures folder should be")
    result = runner.invoke(app, ["report", str(folder)])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "could not write the re-rendered report" in text and "Traceback" not in text


def test_missing_folder_is_a_named_error(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path / "absent")])
    assert result.exit_code == 2 and "no such folder" in " ".join(result.output.split())


def test_read_run_raises_run_folder_error(folder):
    case, config, metrics, meta = read_run(folder)
    assert case == "chain4" and config["horizon"] == 2.0 and meta["case"] == "chain4"
    assert all(math.isfinite(v) for v in metrics.values())
    (folder / "metrics.json").write_text('{"x": Infinity}')
    with pytest.raises(RunFolderError, match=r"metrics\['x'\]: expected a finite number; received inf"):
        read_run(folder)


def test_render_report_flags_a_non_finite_metric():
    text = render_report("c", "d", {"a": float("nan"), "b": 1.0}, {"a": PaperValue(1.0, "S1")}, "")
    assert "| `a` | nan (invalid) | 1 | - | - | S1 |" in text


def test_check_metrics_names_a_non_numeric_metric():
    expected = r"metrics\['m'\]: expected a finite number; received \[1\] \(list\)"
    with pytest.raises(ValueError, match=expected):
        check_metrics({"m": [1]})


# ---- config.toml round-trips any config through tomllib ----

SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=4))


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=300)
@given(
    table=st.dictionaries(
        st.text(),
        st.one_of(VALUES, st.dictionaries(st.text(), VALUES, max_size=3)),
        max_size=6,
    )
)
def test_to_toml_round_trips_any_text_through_tomllib(table):
    """Any string (non-BMP characters, quotes, backslashes, control characters) in keys and values, and
    any int64, float or bool, reads back equal: the emoji-in-a-path config.toml used to be unreadable."""
    assert _same(tomllib.loads(to_toml(table)), table)


def test_to_toml_writes_non_bmp_characters_as_utf8():
    text = to_toml({"checkpoint": "runs/\U0001f600/x"})
    assert text == 'checkpoint = "runs/\U0001f600/x"\n'
    assert tomllib.loads(text) == {"checkpoint": "runs/\U0001f600/x"}


def test_to_toml_refuses_a_lone_surrogate_by_name():
    """Undecodable bytes of a file name (surrogateescape) cannot be written to a UTF-8 TOML file."""
    with pytest.raises(ValueError, match=r"lone surrogate U\+DCFF"):
        to_toml({"out": "runs/\udcff"})
