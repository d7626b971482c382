"""Several processes: two ``twinfer run grid`` processes on localhost join JAX's distributed runtime
(gloo CPU collectives), split the cluster axis over the devices of both, and give the one-process run's
arrays and metrics to 1e-10; only process 0 writes a run folder. Plus the named errors of the options.

The commands are those of the README's "Several processes or machines" section.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

import twinfer
from _xla import QUICK_XLA_FLAGS
from twinfer.report import read_run
from twinfer.report._run import read_arrays
from twinfer.sharding import check_distributed, device_mesh, init_distributed

# --quick (ieee14, 60 steps) with the sharded estimate only: the distributed UKF, no central or WLS.
GRID = ["run", "grid", "--quick", "--set", "central=no", "--set", "wls=false", "--set", "wnls=false"]
TWINFER = [sys.executable, "-c", "from twinfer.cli import main; main()"]  # the `twinfer` command
WAIT_S = 300  # for the two joined processes; the three runs took 45-55 s on 2 busy cores


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(devices: int) -> dict[str, str]:
    """A child's environment: ``devices`` CPU devices, the suite's quick compile options (a child's CPU
    time 8 s instead of 12 s, most of it compiling), float64, no disk
    cache, this twinfer first."""
    src = str(Path(twinfer.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    env = {k: v for k, v in os.environ.items() if "_proxy" not in k.lower()}  # proxies can stall the join
    return env | {
        "XLA_FLAGS": " ".join([f"--xla_force_host_platform_device_count={devices}", *QUICK_XLA_FLAGS]),
        "JAX_ENABLE_X64": "1",
        "TWINFER_CACHE_DIR": "off",
        "MPLBACKEND": "Agg",
        "PYTHONPATH": path,
    }


def _commands(coordinator: str, out: Callable[[str], str]) -> dict[str, list[str]]:
    """The arguments after ``twinfer`` of the one-process run and of processes 0 and 1."""
    joined = ["--set", "devices=0", "--coordinator", coordinator, "--num-processes", "2"]
    return {
        "single": [*GRID, "--set", "devices=1", "--out", out("single")],
        "p0": [*GRID, *joined, "--process-id", "0", "--out", out("p0")],
        "p1": [*GRID, *joined, "--process-id", "1", "--out", out("p1")],
    }


def _wait(procs: list[subprocess.Popen], deadline: float) -> None:
    """Until all exit, one fails (its partner would wait for it) or the deadline passes."""
    while any(p.poll() is None for p in procs) and not any(p.poll() for p in procs):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"still running after {WAIT_S} s: {[p.args for p in procs if p.poll() is None]}"
            )
        time.sleep(0.2)


def _only_run_folder(out: Path) -> Path:
    folders = sorted(out.glob("grid-*"))
    assert len(folders) == 1, folders
    return folders[0]


@pytest.mark.slow
@pytest.mark.timeout(WAIT_S + 120)
def test_two_processes_split_the_clusters_and_equal_one_process(tmp_path):
    """Claim: the grid case's distributed UKF, its cluster axis split over one device in each of two joined
    processes (``devices=0``), gives the one-process, one-device run's arrays and metrics to 1e-10."""
    from twinfer.cli import app

    commands = _commands(f"127.0.0.1:{_free_port()}", lambda name: str(tmp_path / name))
    # the one-process run in this process (one device and the suite's compile options, as a child's
    # _env(1)): a cold start of JAX fewer; then the two joined processes, side by side
    single = CliRunner().invoke(app, commands.pop("single"))
    assert single.exit_code == 0, single.output
    procs: dict[str, subprocess.Popen] = {}
    logs = {name: (tmp_path / f"{name}.log").open("w") for name in commands}
    start = time.monotonic()
    try:
        for name in commands:
            procs[name] = subprocess.Popen(
                [*TWINFER, *commands[name]], env=_env(1), stdout=logs[name], stderr=subprocess.STDOUT
            )
        _wait(list(procs.values()), start + WAIT_S)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs.values():
            log.close()
    output = {name: (tmp_path / f"{name}.log").read_text() for name in commands}
    failed = [f"{n} exited {p.returncode}:\n{output[n][-2000:]}" for n, p in procs.items() if p.returncode]
    assert not failed, "\n".join(failed)

    assert "process 1 of 2: grid done" in output["p1"] and "process 0 writes the run folder" in output["p1"]
    assert not (tmp_path / "p1").exists() or not any((tmp_path / "p1").iterdir())  # process 1 wrote nothing
    two, one = _only_run_folder(tmp_path / "p0"), _only_run_folder(tmp_path / "single")
    _, config2, metrics2, meta2 = read_run(two)
    _, config1, metrics1, _ = read_run(one)
    assert config2 == config1 | {"devices": 0}
    assert any("split over 2 devices of 2 process(es)" in note for note in meta2["notes"]), meta2["notes"]

    arrays2, arrays1 = read_arrays(two), read_arrays(one)
    assert sorted(arrays2) == sorted(arrays1) and "distributed_mean" in arrays1
    worst = {}
    for key, ref in arrays1.items():
        scale = max(float(np.max(np.abs(ref))), 1e-300)
        worst[key] = float(np.max(np.abs(np.asarray(arrays2[key], float) - ref))) / scale
    timings = ("run_s", "compile_s", "parallel_s")
    assert sorted(metrics2) == sorted(metrics1)
    for key, ref in metrics1.items():
        if not key.endswith(timings) and not key.startswith(("timing.", "speedup")):
            worst[key] = abs(metrics2[key] - ref) / max(abs(ref), 1e-300)
    print(f"max relative difference, 2 processes vs 1: {max(worst.values()):.3g}")
    assert max(worst.values()) <= 1e-10, {k: v for k, v in worst.items() if v > 1e-10}


def test_readme_shows_the_commands_this_test_runs():
    """The README's multi-process section shows these commands, HOST:PORT and `--out runs` aside."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    shown = re.sub(r"\\\n\s*", "", readme)  # join the shell's continued lines
    for args in _commands("HOST:PORT", lambda name: "runs").values():
        assert f"twinfer {shlex.join(args)}\n" in shown, shlex.join(args)


def _joining(coordinator: str = "127.0.0.1:1234", count: str = "2", pid: str = "0") -> list[str]:
    return ["--coordinator", coordinator, "--num-processes", count, "--process-id", pid]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--coordinator", "127.0.0.1:1234"], "--num-processes, --process-id"),
        (["--num-processes", "2", "--process-id", "0"], "--coordinator"),
        (_joining(coordinator="127.0.0.1"), "--coordinator"),
        (_joining(coordinator="127.0.0.1:99999"), "--coordinator"),
        (_joining(count="0"), "--num-processes"),
        (_joining(pid="2"), "--process-id"),
        ([*_joining(), "--resume"], "--resume"),
    ],
)
def test_bad_process_options_exit_2_naming_the_option(args, named, tmp_path):
    """All three options or none, a HOST:PORT, 0 <= id < count, no --resume: exit 2, nothing joined."""
    from twinfer.cli import app

    result = CliRunner().invoke(app, ["run", "grid", "--quick", "--out", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert f"error: {named}" in result.output and "Traceback" not in result.output
    assert not any(tmp_path.iterdir())


def test_device_mesh_names_the_field_and_spans_the_devices():
    count = len(jax.devices())
    assert device_mesh(1, "clusters") is None
    mesh = device_mesh(0, "clusters")
    assert (mesh is None) == (count == 1) and (mesh is None or mesh.axis_names == ("clusters",))
    with pytest.raises(ValueError, match=rf"grid: devices: expected at most the {count} visible"):
        device_mesh(count + 1, "clusters", "grid: devices")
    with pytest.raises(ValueError, match="TrainSettings devices: expected 0"):
        device_mesh(-1, "devices", "TrainSettings devices")


def test_init_distributed_refuses_bad_arguments_and_a_started_jax():
    check_distributed("[::1]:1234", 2, 1)
    check_distributed("node-0.cluster:80", 1, 0)
    with pytest.raises(ValueError, match="process_id: expected 0 .. 1"):
        init_distributed("127.0.0.1:1234", 2, 5)
    jax.devices()  # JAX has started in this process: too late to join
    with pytest.raises(RuntimeError, match="before any JAX computation"):
        init_distributed("127.0.0.1:1234", 1, 0)


def test_an_unreachable_coordinator_is_a_named_error():
    """Process 1 with no process 0 to join: a RuntimeError naming the address, not JAX's abort."""
    port = _free_port()  # nothing listens there
    script = (
        "from twinfer.sharding import init_distributed\n"
        "try:\n"
        f"    init_distributed('127.0.0.1:{port}', 2, 1, timeout_s=1)\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=_env(1), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"could not reach the coordinator at 127.0.0.1:{port} within 1 s" in proc.stdout, proc.stdout
