"""Issue #52, section 2: no code runs from outside twinfer.

A ``twinfer.py`` in the working folder is never imported by the processes twinfer starts (``twinfer
reproduce``, ``twinfer bench chain4-process``); a pickle planted in the compiled-programs cache is never
unpickled (entries carry an HMAC under a private per-user key); a cache folder others can write to is
not used.
"""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from twinfer import programs
from twinfer.programs import ProgramCacheWarning, load_or_compile, program_key


def _plant_module(folder: Path) -> Path:
    """A ``twinfer.py`` in ``folder`` that leaves a marker file when it is imported."""
    marker = folder / "planted-module-ran"
    (folder / "twinfer.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    return marker


def _child_env() -> dict[str, str]:
    return {**os.environ, "TWINFER_CACHE_DIR": "off"}


def _commands_of(monkeypatch, call) -> list[list[str]]:
    """The argv of every ``subprocess.run`` that ``call()`` makes (none of them is started)."""
    started: list[list[str]] = []

    def run(cmd, *args, **kwargs):
        started.append([str(c) for c in cmd])
        return subprocess.CompletedProcess(cmd, 1, b"", b"")

    monkeypatch.setattr(subprocess, "run", run)
    try:
        call()
    except (RuntimeError, SystemExit):
        pass
    monkeypatch.undo()
    return started


def test_reproduce_child_does_not_import_a_twinfer_py_from_the_working_folder(
    tiny_case, cli, tmp_path, monkeypatch
):
    """`twinfer reproduce`'s child command, run as built in a working folder holding a planted
    ``twinfer.py``: the real twinfer answers (the case is unknown to the child) and the planted module
    never runs."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    marker = _plant_module(cwd)
    (cmd,) = _commands_of(
        monkeypatch, lambda: cli("reproduce", "tiny-smc", "--quick", "--out", tmp_path / "r")
    )
    assert cmd[-4:] == ["tiny-smc", "--quick", "--out", str(tmp_path / "r" / "runs")]
    done = subprocess.run(cmd, cwd=cwd, env=_child_env(), capture_output=True, text=True, timeout=120)
    assert not marker.exists()
    assert done.returncode == 2 and "Unknown case 'tiny-smc'" in done.stderr, done.stderr[-2000:]


def test_bench_chain4_process_child_does_not_import_a_twinfer_py_from_the_working_folder(
    tmp_path, monkeypatch
):
    """The children of `twinfer bench chain4-process`, started in a working folder holding a planted
    ``twinfer.py`` (with ``--help`` in place of their run arguments, so nothing is computed)."""
    from twinfer.bench.graph import bench_chain4_process

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    marker = _plant_module(cwd)
    cmds = _commands_of(monkeypatch, lambda: bench_chain4_process(True, lambda message: None))
    assert cmds and all(c[c.index("run") :][:2] == ["run", "chain4"] for c in cmds)
    child = cmds[0][: cmds[0].index("run")] + ["--help"]
    done = subprocess.run(child, cwd=cwd, env=_child_env(), capture_output=True, text=True, timeout=120)
    assert not marker.exists()
    assert done.returncode == 0 and "Usage:" in done.stdout, done.stderr[-2000:]


def _program(a):
    return jnp.linalg.eigh(a @ a.T + jnp.eye(a.shape[0]))[0]


class _Planted:
    """Unpickling it writes a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "ran"))


def test_a_pickle_planted_in_the_programs_cache_never_runs(tmp_path):
    """A pickle written under the exact name a kept program has: the lookup does not unpickle it, removes
    it, and compiles the program anew (then keeps an authenticated entry that loads)."""
    folder = tmp_path / "programs"
    folder.mkdir(mode=0o700)
    a = jnp.arange(9.0).reshape(3, 3) / 7.0
    marker = tmp_path / "planted-pickle-ran"
    entry = folder / f"{program_key('planted', (a,))}.jaxexe"
    entry.write_bytes(pickle.dumps(_Planted(str(marker))))
    jitted = jax.jit(_program)
    compiled, loaded = load_or_compile(jitted, a, key="planted", folder=folder)
    assert not marker.exists()
    assert not loaded
    assert entry.is_file() and not entry.read_bytes().startswith(pickle.dumps(_Planted(str(marker)))[:8])
    again, loaded = load_or_compile(jitted, a, key="planted", folder=folder)
    assert loaded and not marker.exists()
    key = folder / programs.KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    # a planted entry that carries a made-up MAC in front of the pickle is refused all the same
    entry.write_bytes(b"\0" * 32 + pickle.dumps(_Planted(str(marker))))
    assert not load_or_compile(jitted, a, key="planted", folder=folder)[1]
    assert not marker.exists()


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_programs_cache_folder_others_can_write_to_is_refused(tmp_path, mode):
    """A folder group or others can write to is neither read nor written (a warning names it and the fix),
    even holding an entry that would load: the program is compiled anew."""
    folder = tmp_path / "programs"
    folder.mkdir(mode=0o700)
    a = jnp.arange(4.0).reshape(2, 2)
    jitted = jax.jit(_program)
    assert not load_or_compile(jitted, a, key="shared", folder=folder)[1]
    assert load_or_compile(jitted, a, key="shared", folder=folder)[1]  # a private folder is used
    folder.chmod(mode)
    before = sorted(p.name for p in folder.iterdir())
    with pytest.warns(ProgramCacheWarning, match=r"others can write to.*chmod go-w"):
        compiled, loaded = load_or_compile(jitted, a, key="shared", folder=folder)
    assert not loaded
    with pytest.warns(ProgramCacheWarning):
        assert not load_or_compile(jitted, a[:1, :1], key="shared", folder=folder)[1]
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written there either
