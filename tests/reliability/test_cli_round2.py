"""Issue #52, second round, for the CLI, specs, run folders: literal printed paths, Ctrl-C in `twinfer
estimate`, bounded spec and config reading, a run refused above the available memory, names that fit
the file system, damaged arrays, no leftovers of a killed run, BOMs and negative seeds."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from twinfer._atomic import write_npz
from twinfer.experiments import ConfigError, get_case, resolve_config
from twinfer.report import RunArtifacts, new_run_dir, write_run
from twinfer.report._run import RunFolderError, read_arrays
from twinfer.spec import SpecError, load_spec

LITERAL = "a:x:b[red]c:smile:d"
"""A folder name that rich would draw as emoji and markup if it were printed as markup."""

SPEC = """
name = "tiny"

[model]
kind = "chain"
mass = [100.0, 80.0]
stiffness = [2e4, 1.8e4]
damping = 30.0
forced_dofs = [2]
outputs = ["a1", "a2"]

[estimator]
kind = "central"
estimator = "kf"
integrator = "exact"
"""
SIMULATE = "\n[simulate]\nduration = 0.2\ndt = 1e-2\nnoise_sd = 0.05\nforce_sd = 200.0\n"


def _spec(folder: Path, body: str = SPEC + SIMULATE, name: str = "tiny.toml") -> Path:
    path = folder / name
    path.write_text(body)
    return path


# -- item 1: printed paths and commands are literal ----------------------------------------------------
def test_printed_resume_command_and_run_folder_with_emoji_codes_and_markup_are_literal(
    tiny_case, cli, tmp_path
):
    """An --out folder named with `:x:`, `:smile:` and `[red]`: the interrupted run prints the exact
    command (shlex) that continues it, running that printed command resumes the same checkpoint, and the
    printed run folder exists."""
    out = tmp_path / LITERAL
    tiny_case.stop_at, tiny_case.fail_compute = 10, KeyboardInterrupt()
    stopped = cli("run", "tiny-smc", "--out", out)
    assert stopped.exit_code == 130, stopped.output
    line = next(x for x in stopped.output.splitlines() if x.startswith("interrupted."))
    command = line.split("Continue with: ", 1)[1]
    assert command == shlex.join(["twinfer", "run", "tiny-smc", "--out", str(out), "--resume"])
    (ckpt,) = out.glob(".checkpoints/*/smc.ckpt")
    assert f"Saved in {ckpt.parent}:" in line
    tiny_case.stop_at, tiny_case.fail_compute = None, None
    resumed = cli(*shlex.split(command)[1:])
    assert resumed.exit_code == 0, resumed.output
    assert not ckpt.exists()  # resumed from it, then removed with the complete run folder
    printed = next(x for x in resumed.output.splitlines() if x.startswith("run folder: "))
    folder = Path(printed.removeprefix("run folder: ").rsplit(" (", 1)[0])
    assert folder.parent == out and (folder / "metrics.json").is_file()


def test_printed_estimate_folder_with_emoji_codes_and_markup_is_literal(cli, tmp_path):
    out = tmp_path / LITERAL
    result = cli("estimate", _spec(tmp_path), "--out", out)
    assert result.exit_code == 0, result.output
    printed = next(x for x in result.output.splitlines() if x.startswith("run folder: "))
    folder = Path(printed.removeprefix("run folder: ").rsplit(" (", 1)[0])
    assert folder.parent == out and (folder / "estimate.nc").is_file()


# -- item 2: a Ctrl-C swallowed inside a finaliser still stops `twinfer estimate` -------------------------
class _Finaliser:
    """Sends SIGINT from inside ``__del__``, as when a Ctrl-C lands in JAX's garbage-collector callback:
    Python prints the KeyboardInterrupt as "Exception ignored" and goes on."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_sigint_swallowed_inside_a_finaliser_still_stops_estimate(cli, tmp_path, monkeypatch):
    import twinfer.spec

    swallowed: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: swallowed.append(info.exc_type))
    real = twinfer.spec.run_spec

    def run_spec(*args, **kwargs):
        result = real(*args, **kwargs)
        finaliser = _Finaliser()
        del finaliser  # the interrupt is raised and swallowed here
        return result

    monkeypatch.setattr(twinfer.spec, "run_spec", run_spec)
    previous = signal.getsignal(signal.SIGINT)
    result = cli("estimate", _spec(tmp_path), "--out", tmp_path / "runs")
    assert swallowed == [KeyboardInterrupt]  # the interrupt really was lost by Python
    assert result.exit_code == 130, result.output
    assert "interrupted" in result.output and "nothing was written" in result.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert signal.getsignal(signal.SIGINT) is previous  # the command puts the handler back


# -- item 4: spec and config files are regular, small files; a run beyond memory is refused ---------------
CEILING = 3 * 2**30
"""Address-space limit of the child processes (bytes)."""


def _child(code: str, *args: str, cwd: Path, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``python -c code args`` under a 3 GiB address-space ceiling and a timeout.

    The child sets ``RLIMIT_AS`` itself, first thing: a ``preexec_fn`` would fork this process, which
    JAX's threads make unsafe (and JAX warns about).
    """
    limit = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({CEILING}, {CEILING}))\n"
    env = {**os.environ, "TWINFER_CACHE_DIR": "off"}
    return subprocess.run(
        [sys.executable, "-P", "-c", limit + code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_dev_zero_as_a_spec_or_config_is_a_named_error_under_a_memory_ceiling(tmp_path):
    """`/dev/zero` (and a link to it) as a spec or a --config: a named error within seconds, under a
    3 GiB address-space limit (before: memory grew without bound)."""
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")
    code = textwrap.dedent(
        """
        import sys
        from twinfer.experiments import ConfigError, get_case, resolve_config
        from twinfer.spec import SpecError, load_spec
        for path in sys.argv[1:]:
            try:
                load_spec(path)
            except SpecError as exc:
                print("spec", exc)
            try:
                resolve_config(get_case("chain4"), path)
            except ConfigError as exc:
                print("config", exc)
        """
    )
    start = time.monotonic()
    done = _child(code, "/dev/zero", str(link), cwd=tmp_path)
    assert time.monotonic() - start < 60
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout
    for line, path in zip(lines, ["/dev/zero", "/dev/zero", str(link), str(link)], strict=True):
        assert path in line and "expected a regular file" in line and "character device" in line, line


@pytest.mark.timeout(20)
def test_fifo_and_oversized_spec_or_config_are_named_errors(tmp_path):
    """A FIFO (nobody writing) is refused without blocking; a file over 1 MiB is refused by its size."""
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * 2**20 + "\n")
    with pytest.raises(SpecError, match=r"expected a regular file.*received a FIFO"):
        load_spec(fifo)
    with pytest.raises(ConfigError, match=r"expected a regular file.*received a FIFO"):
        resolve_config(get_case("chain4"), fifo)
    with pytest.raises(SpecError, match=r"expected at most 1 MiB \(1048576 bytes\); received 1048579 bytes"):
        load_spec(big)
    with pytest.raises(ConfigError, match=r"expected at most 1 MiB"):
        resolve_config(get_case("chain4"), big)


def test_estimate_beyond_the_available_memory_is_refused_before_the_run(tmp_path):
    """A measured record whose run would need more than the available memory (lowered here to 8 MiB, as a
    10-million-row record meets a real machine): `twinfer estimate` exits 2 naming the need, what is
    available and what to change, under a 3 GiB address-space ceiling, and writes no run folder."""
    rows = 20_000
    t = np.arange(rows) * 1e-2
    table = np.column_stack([t, np.sin(t), np.cos(t), np.sin(2 * t)])
    np.savetxt(tmp_path / "big.csv", table, delimiter=",", header="t,f2,y1,y2", comments="", fmt="%.6g")
    data = '\n[data]\nfile = "big.csv"\ntime = "t"\ninputs = ["f2"]\noutputs = ["y1", "y2"]\n'
    spec = _spec(tmp_path, SPEC.replace('"kf"', '"kf"\nnoise_sd = 0.05\nsmoother = true') + data)
    code = (
        "import twinfer._resources as r; r.available_memory = lambda: 8 * 2**20\n"
        "from twinfer.cli import main; main()"
    )
    done = _child(code, "estimate", str(spec), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    text = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr[-3000:]
    assert "expected a run that fits in memory" in text and "20000 rows" in text, text
    assert "GiB are available" in text and "fewer rows" in text and "smoother" in text, text
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# -- item 5: names that fit the file system, damaged arrays, no leftovers of a killed run ----------------
def test_spec_name_too_long_for_a_file_name_is_refused_at_load(tmp_path):
    with pytest.raises(SpecError, match=r"name: expected at most \d+ characters.*received 300"):
        load_spec(_spec(tmp_path, f'name = "{"n" * 300}"\n' + SPEC.split("\n", 2)[2] + SIMULATE))


def test_longest_spec_name_still_makes_a_run_folder(tmp_path):
    """The longest name load_spec accepts fits the run folder and its temporary folder."""
    from twinfer.report._run import RUN_NAME_MAX

    spec, _ = load_spec(
        _spec(tmp_path, f'name = "{"n" * RUN_NAME_MAX}"\n' + SPEC.split("\n", 2)[2] + SIMULATE)
    )
    artifacts = RunArtifacts(metrics={"a": 1.0}, arrays={"x": np.arange(3.0)})
    for _ in range(2):  # the second one in the same second gets the suffix -1
        folder = write_run(new_run_dir(tmp_path / "runs", spec.name), spec.name, "d", {}, artifacts, {}, {})
        assert (folder / "metrics.json").is_file()


def _damaged_npz(path: Path) -> None:
    write_npz(path, {"x": np.tile(np.arange(1000.0), 50)})
    with zipfile.ZipFile(path) as archive:
        info = archive.infolist()[0]
    payload = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for k in range(start + 10, start + 60):
        payload[k] ^= 0xA5
    path.write_bytes(bytes(payload))


def test_damaged_deflate_block_in_arrays_npz_is_a_run_folder_error(tmp_path):
    """A damaged deflate stream (zlib.error before) is the named RunFolderError naming the file."""
    _damaged_npz(tmp_path / "arrays.npz")
    with pytest.raises(RunFolderError, match=r"arrays\.npz: expected an \.npz archive of arrays"):
        read_arrays(tmp_path)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _owner(pid: int) -> str:
    return json.dumps({"pid": pid, "host": socket.gethostname(), "start": None})


def test_killed_run_leaves_no_empty_run_folder_and_its_tmp_folder_is_cleaned_next_run(tmp_path):
    """SIGKILL while the run folder is being written: no empty run folder is left, only the hidden
    temporary folder, marked with its owner; the next write removes it (its owner is gone) but never a
    live run's temporary folder or one of another machine."""
    ready = tmp_path / "ready"
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        import numpy as np
        from twinfer.report import RunArtifacts, new_run_dir, write_run

        def figures():
            Path({str(ready)!r}).write_text("")
            time.sleep(120)

        artifacts = RunArtifacts(metrics={{"a": 1.0}}, arrays={{"x": np.arange(3.0)}})
        runs = Path({str(tmp_path / "runs")!r})
        write_run(new_run_dir(runs, "case"), "case", "d", {{}}, artifacts, figures, {{}})
        """
    )
    child = subprocess.Popen([sys.executable, "-P", "-c", code])
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the writer did not reach its figures"
        time.sleep(0.02)
    child.kill()
    child.wait()
    runs = tmp_path / "runs"
    (left,) = runs.iterdir()
    assert left.name.startswith(".case-") and left.name.endswith(".tmp")  # no empty case-<time> folder
    live = runs / ".live.0000.tmp"
    live.mkdir()
    (live / ".owner").write_text(_owner(os.getpid()))
    elsewhere = runs / ".other.0000.tmp"
    elsewhere.mkdir()
    (elsewhere / ".owner").write_text(
        json.dumps({"pid": _dead_pid(), "host": "another-machine", "start": None})
    )
    artifacts = RunArtifacts(metrics={"a": 1.0}, arrays={"x": np.arange(3.0)})
    done = write_run(new_run_dir(runs, "case"), "case", "d", {}, artifacts, {}, {})
    assert sorted(p.name for p in runs.iterdir()) == sorted([done.name, live.name, elsewhere.name])


def test_killed_run_before_its_first_checkpoint_leaves_no_checkpoint_folder_for_ever(
    tiny_case, cli, tmp_path
):
    """A checkpoint folder holding only run.json of a run that is gone (killed before its first checkpoint)
    is removed by the next run; one holding a checkpoint is never removed, whatever its owner."""
    root = tmp_path / ".checkpoints"
    empty, kept = root / "tiny-smc-20200101-000000", root / "tiny-smc-20200101-000001"
    for folder in (empty, kept):
        folder.mkdir(parents=True)
        info = {"case": "tiny-smc", "config": "0" * 64, "owner": json.loads(_owner(_dead_pid()))}
        (folder / "run.json").write_text(json.dumps(info))
    (kept / "smc.ckpt").write_bytes(b"checkpoint")
    result = cli("run", "tiny-smc", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert not empty.exists()
    assert (kept / "smc.ckpt").read_bytes() == b"checkpoint"


def test_killed_while_saving_a_checkpoint_then_resumed_leaves_no_checkpoint_folder(tiny_case, cli, tmp_path):
    """A partial checkpoint write (what a kill while saving leaves beside the checkpoint) does not keep
    the checkpoint folder for ever once the resumed run's folder is complete."""
    tiny_case.stop_at, tiny_case.fail_compute = 10, KeyboardInterrupt()
    assert cli("run", "tiny-smc", "--out", tmp_path).exit_code == 130
    (ckpt,) = tmp_path.glob(".checkpoints/*/smc.ckpt")
    (ckpt.parent / ".smc.ckpt.k1ll3d.tmp").write_bytes(b"half a checkpoint")
    tiny_case.stop_at, tiny_case.fail_compute = None, None
    resumed = cli("run", "tiny-smc", "--out", tmp_path, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert not (tmp_path / ".checkpoints").exists()


# -- item 6: clear messages ---------------------------------------------------------------------------------
def test_spec_with_a_utf8_bom_is_read(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + (SPEC + SIMULATE).encode())
    spec, _ = load_spec(path)
    assert spec.name == "tiny"


def test_config_with_a_utf8_bom_is_read(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbfseed = 3\n")
    assert resolve_config(get_case("chain4"), path).seed == 3


def test_negative_simulate_seed_is_a_named_error(tmp_path):
    with pytest.raises(SpecError, match=r"simulate\.seed: expected a non-negative integer.*received -1"):
        load_spec(_spec(tmp_path, SPEC + SIMULATE + "seed = -1\n"))
