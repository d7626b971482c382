"""Checkpoints of every long-running family (IBIS, tempering, PINN training, hybrid `learn.train`):
an interrupted run resumed with `resume` / `--resume` ends exactly where an uninterrupted run ends, and a
checkpoint of another config or data set, at float32, with counters beyond the end, or corrupted is
refused by a CheckpointError that names the file. A real `twinfer run` (PN-SMC, boucwen) is interrupted
by SIGINT and SIGKILL at a seeded random moment after its first checkpoint, and writes nothing outside
`--out`."""

from __future__ import annotations

import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import twinfer
from test_learn import _Decay  # the dx/dt = -k x model of the training tests
from twinfer.checkpoint import Checkpoint, CheckpointError, inspect, run_fingerprint
from twinfer.infer.pinn import StateNetwork
from twinfer.infer.pinn import TrainSettings as PinnSettings
from twinfer.infer.pinn import train as pinn_train
from twinfer.infer.smc import ibis, tempering
from twinfer.learn import TrainSettings, trajectory_loss
from twinfer.learn import train as learn_train

RNG = random.Random(20261124)  # the seeded "random" interruption points
N_OBS = 40


def _rewrite(path: Path, kind: str, leaf=None, meta=None) -> None:
    """Re-save a checkpoint with changed leaves / metadata and a valid content hash and fingerprint:
    what a checkpoint written by another build or another run would look like."""
    header = inspect(path)
    ckpt = Checkpoint(path, header["fingerprint"])
    snap = ckpt.load(kind)
    leaves = [leaf(a) if leaf else a for a in snap.leaves]
    ckpt.save(kind, leaves, meta(dict(snap.meta)) if meta else snap.meta, snap.arrays)


def _to_float32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype == np.float64 else a


# -- IBIS and tempering -------------------------------------------------------------------------------
def _ibis(gauss, ckpt=None, stop_at=None, offset=0.0, n_obs=N_OBS):
    data, prior = gauss
    return ibis(jax.random.key(1), data(n_obs, offset), prior, 64, checkpoint=ckpt, checkpoint_every=4,
                stop_at=stop_at)  # fmt: skip


FP = {"case": "tiny", "config": "a"}


@pytest.fixture
def interrupted_ibis(gauss, tmp_path):
    """An IBIS checkpoint of a run stopped after 12 of 40 observations."""
    path = tmp_path / "smc.ckpt"
    _ibis(gauss, Checkpoint(path, FP), stop_at=12)
    return path


@pytest.mark.timeout(120)
def test_ibis_interrupted_and_resumed_equals_uninterrupted(gauss, tmp_path):
    full = _ibis(gauss)
    stop = RNG.randrange(5, N_OBS)
    path = tmp_path / "smc.ckpt"
    _ibis(gauss, Checkpoint(path, FP), stop_at=stop)
    assert inspect(path)["meta"]["t"] == stop
    resumed = _ibis(gauss, Checkpoint(path, FP, resume=True))
    for name in ("z", "log_w", "loglik", "ess", "resample_times", "acceptance"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(full, name), err_msg=name)


@pytest.mark.timeout(120)
def test_tempering_interrupted_and_resumed_equals_uninterrupted(gauss, tmp_path):
    data, prior = gauss
    lik = data(N_OBS)
    full = tempering(jax.random.key(2), lik, prior, 64, n_moves=1)
    assert full.lambdas is not None and len(full.lambdas) >= 2
    path = tmp_path / "tempering.ckpt"
    tempering(jax.random.key(2), lik, prior, 64, n_moves=1, checkpoint=Checkpoint(path, FP), stop_at=1)
    resumed = tempering(
        jax.random.key(2), lik, prior, 64, n_moves=1, checkpoint=Checkpoint(path, FP, resume=True)
    )
    for name in ("z", "loglik", "lambdas", "ess", "acceptance"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(full, name), err_msg=name)
    _rewrite(path, "tempering", meta=lambda m: {**m, "lambdas": m["lambdas"][:-1]})
    with pytest.raises(CheckpointError, match="per-stage records") as err:
        tempering(jax.random.key(2), lik, prior, 64, n_moves=1, checkpoint=Checkpoint(path, FP, resume=True))
    assert str(path) in str(err.value)


def test_checkpoint_of_other_config_is_refused_by_name(gauss, interrupted_ibis):
    with pytest.raises(CheckpointError, match="fingerprint differs in config") as err:
        _ibis(gauss, Checkpoint(interrupted_ibis, {**FP, "config": "b"}, resume=True))
    assert str(interrupted_ibis) in str(err.value) and "start fresh" in str(err.value)


def test_checkpoint_of_other_data_set_is_refused_by_name(gauss, interrupted_ibis):
    """Same case and config, one data value changed (the sampler hashes its likelihood's arrays)."""
    with pytest.raises(CheckpointError, match="fingerprint differs in problem") as err:
        _ibis(gauss, Checkpoint(interrupted_ibis, FP, resume=True), offset=1e-9)
    assert str(interrupted_ibis) in str(err.value)


def test_checkpoint_of_other_sampler_settings_is_refused_by_name(gauss, interrupted_ibis):
    data, prior = gauss
    with pytest.raises(CheckpointError, match="differs in sampler") as err:
        ibis(
            jax.random.key(99),
            data(N_OBS),
            prior,
            64,
            checkpoint=Checkpoint(interrupted_ibis, FP, resume=True),
        )
    assert str(interrupted_ibis) in str(err.value)


def test_float32_checkpoint_is_refused_by_name(gauss, interrupted_ibis):
    _rewrite(interrupted_ibis, "ibis", leaf=_to_float32)
    with pytest.raises(CheckpointError, match="float32") as err:
        _ibis(gauss, Checkpoint(interrupted_ibis, FP, resume=True))
    assert str(interrupted_ibis) in str(err.value)


def test_checkpoint_beyond_the_end_is_refused_by_name(gauss, interrupted_ibis):
    """A checkpoint claiming more observations than the data hold is not a finished posterior."""
    _rewrite(interrupted_ibis, "ibis", leaf=lambda a: np.asarray(N_OBS + 5, a.dtype) if a.shape == () else a,
             meta=lambda m: {**m, "t": N_OBS + 5})  # fmt: skip
    with pytest.raises(
        CheckpointError, match=f"{N_OBS + 5} observations assimilated; this run's data have 40"
    ):
        _ibis(gauss, Checkpoint(interrupted_ibis, FP, resume=True))


@pytest.mark.parametrize("damage", ["truncated", "bit flipped in the arrays", "bit flipped in the header"])
def test_corrupted_checkpoint_is_refused_by_name(gauss, interrupted_ibis, damage):
    payload = bytearray(interrupted_ibis.read_bytes())
    if damage == "truncated":
        payload = payload[: len(payload) // 2]
    else:
        payload[-100 if "arrays" in damage else 60] ^= 0x04
    interrupted_ibis.write_bytes(bytes(payload))
    with pytest.raises(CheckpointError, match="corrupt") as err:
        _ibis(gauss, Checkpoint(interrupted_ibis, FP, resume=True))
    assert str(interrupted_ibis) in str(err.value)


def test_existing_checkpoint_is_neither_resumed_nor_overwritten_without_resume(gauss, interrupted_ibis):
    before = interrupted_ibis.read_bytes()
    with pytest.raises(CheckpointError, match="resume was not asked for") as err:
        _ibis(gauss, Checkpoint(interrupted_ibis, FP))
    assert str(interrupted_ibis) in str(err.value)
    assert interrupted_ibis.read_bytes() == before
    with pytest.raises(TypeError, match="Checkpoint"):
        _ibis(gauss, interrupted_ibis)  # a bare path carries no fingerprint


# -- PINN training ------------------------------------------------------------------------------------
TS = jnp.linspace(0.0, 1.0, 24)


def _pinn_loss(tr):
    fit = jnp.mean((jax.vmap(tr[0])(TS)[:, 0] - jnp.sin(2 * jnp.pi * TS)) ** 2)
    return fit, {"fit": fit}


def _pinn(ckpt=None, progress=None):
    net = StateNetwork(jax.random.key(0), 2, 0.0, 1.0, width=8, depth=1)
    settings = PinnSettings(epochs=30, learning_rate=1e-2, chunk=10, patience=50, lbfgs_steps=20)
    return pinn_train((net,), _pinn_loss, settings, checkpoint=ckpt, progress=progress)


class _Stop(Exception):
    pass


def _stop_at(n):
    def progress(stage, done, total):
        if done == n:
            raise _Stop

    return progress


@pytest.mark.timeout(180)
def test_pinn_training_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    """Interrupted in the Adam phase and in the L-BFGS phase, resumed: same parameters and history; a
    finished run is not trained again; a checkpoint of another config, epoch or precision is refused."""
    full = _pinn()
    assert full.history["loss"][-1] < full.history["loss"][2]  # L-BFGS lowers what Adam left
    leaves_full = jax.tree.leaves(eqx.filter(full.trainable, eqx.is_inexact_array))
    for stop in (RNG.choice([10, 20]), RNG.choice([40])):  # Adam: epochs 1-30; L-BFGS: 31-50
        path = tmp_path / f"pinn-{stop}.ckpt"
        with pytest.raises(_Stop):
            _pinn(Checkpoint(path, FP), progress=_stop_at(stop))
        resumed = _pinn(Checkpoint(path, FP, resume=True))
        assert resumed.resumed_from == stop and resumed.epochs == full.epochs == 50
        leaves = jax.tree.leaves(eqx.filter(resumed.trainable, eqx.is_inexact_array))
        for a, b in zip(leaves_full, leaves, strict=True):
            np.testing.assert_array_equal(a, b)
        assert resumed.history == full.history
    again = _pinn(Checkpoint(path, FP, resume=True))
    assert again.resumed_from == 50 and again.history == full.history  # finished: not trained again
    with pytest.raises(CheckpointError, match="differs in config") as err:
        _pinn(Checkpoint(path, {**FP, "config": "b"}, resume=True))
    assert str(path) in str(err.value)
    _rewrite(path, "pinn-train", meta=lambda m: {**m, "epoch": 10_000})
    with pytest.raises(CheckpointError, match="epoch 10000"):
        _pinn(Checkpoint(path, FP, resume=True))
    _rewrite(path, "pinn-train", leaf=_to_float32, meta=lambda m: {**m, "epoch": 50})
    with pytest.raises(CheckpointError, match="float32"):
        _pinn(Checkpoint(path, FP, resume=True))


# -- hybrid training (learn.train) --------------------------------------------------------------------
GRID = np.round(np.arange(0.0, 1.0 + 1e-9, 0.05), 10)
X0 = np.array([[1.0], [2.0]])


def _learn(ckpt=None, progress=None, rate=2.0):
    data = np.exp(-rate * GRID)[None, :, None] * X0[:, None, :]
    loss = trajectory_loss(_Decay(0.5), GRID, X0, data, (1.0,), fixed_steps=1)
    settings = TrainSettings(steps=8, lr_start=0.05, lr_end=0.01, horizon_start=3, checkpoint_every=2,
                             progress_every=2)  # fmt: skip
    if ckpt is not None:  # what a case does: the data's checksum in the fingerprint
        ckpt = Checkpoint(ckpt.path, run_fingerprint("decay", {"rate": "data"}, data), ckpt.resume)
    return learn_train(loss, {"k": jnp.asarray(0.5)}, ["k"], 2, len(GRID), settings, checkpoint=ckpt,
                       progress=progress)  # fmt: skip


@pytest.mark.timeout(180)
def test_learn_train_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    full = _learn()
    path = tmp_path / "learn.ckpt"
    stop = RNG.choice([2, 4, 6])
    with pytest.raises(_Stop):
        _learn(Checkpoint(path), progress=_stop_at(stop))
    before = float(inspect(path)["meta"]["seconds"])
    assert inspect(path)["meta"]["step"] == stop
    resumed = _learn(Checkpoint(path, resume=True))
    assert float(resumed["params"]["k"]) == float(full["params"]["k"])
    assert 0.0 < before < resumed["seconds"]  # the training time before the interruption is kept
    for name in ("loss", "worst", "horizon"):
        np.testing.assert_array_equal(resumed[name], full[name])
    with pytest.raises(CheckpointError, match="differs in data") as err:
        _learn(Checkpoint(path, resume=True), rate=2.5)
    assert str(path) in str(err.value)
    _rewrite(path, "learn-train", meta=lambda m: {**m, "step": 99})
    with pytest.raises(CheckpointError, match="step 99"):
        _learn(Checkpoint(path, resume=True))


# -- a real `twinfer run`: SIGINT, SIGKILL, resume; nothing written outside --out ----------------------
BOUCWEN = ["run", "boucwen", "--set", "n_obs=128", "--set", "n_particles=8", "--set", "checkpoint_every=16",
           "--set", "test_samples=64", "--set", "test_particles=4", "--quick"]  # fmt: skip


THIRD_PARTY_CACHES = {"matplotlib", "arviz"}
"""Libraries' own per-user caches (matplotlib's font list, ArviZ's once-a-day notice): the tests point the
XDG cache and config folders away from HOME and check that nothing else is written there."""


def _env(home: Path, tmp: Path) -> dict[str, str]:
    own = ("JAX_", "XLA_", "TWINFER_", "XDG_", "MPL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(own)}
    src = str(Path(twinfer.__file__).resolve().parents[1])
    caches = home.parent / "xdg"
    env.update(HOME=str(home), TMPDIR=str(tmp), PYTHONPATH=src, JAX_ENABLE_X64="1", MPLBACKEND="Agg",
               TWINFER_CACHE_DIR="off", XDG_CACHE_HOME=str(caches / "cache"),
               XDG_CONFIG_HOME=str(caches / "config"))  # fmt: skip
    # The XLA compile options of the test session (tests/conftest.py), so that the subprocesses and the
    # in-process `cli` runs they are compared with bit for bit run the same machine code.
    env["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")
    return env


def _start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from twinfer.cli import main; main()", *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _results(out: Path) -> tuple[dict, dict]:
    (run_dir,) = [p for p in out.iterdir() if p.name.startswith("boucwen-")]
    with np.load(run_dir / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    import json

    metrics = json.loads((run_dir / "metrics.json").read_text())
    return arrays, {k: v for k, v in metrics.items() if not k.startswith("timing.")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted `twinfer run` in a subprocess with HOME, TMPDIR and the working folder empty."""
    base = tmp_path_factory.mktemp("reference")
    home, tmp, cwd = base / "home", base / "tmp", base / "cwd"
    for folder in (home, tmp, cwd):
        folder.mkdir()
    proc = _start([*BOUCWEN, "--out", "out"], cwd, _env(home, tmp))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    return base, _results(cwd / "out")


def _same(a: tuple[dict, dict], b: tuple[dict, dict]) -> None:
    assert sorted(a[0]) == sorted(b[0]) and a[1] == b[1]
    for key in a[0]:
        np.testing.assert_array_equal(a[0][key], b[0][key], err_msg=key)


@pytest.mark.timeout(300)
def test_nothing_is_written_outside_out_during_a_run(reference):
    """HOME and TMPDIR stay empty, the user cache and config folders hold only third-party libraries'
    own caches, and the working folder holds only --out, which holds only the run folder (the checkpoint
    folder is removed once the run folder is complete)."""
    base, _ = reference
    leftovers = [p for folder in ("home", "tmp") for p in (base / folder).rglob("*")]
    assert leftovers == []
    for kind in ("cache", "config"):
        folder = base / "xdg" / kind
        assert {p.name for p in folder.iterdir()} <= THIRD_PARTY_CACHES if folder.exists() else True
    assert [p.name for p in (base / "cwd").iterdir()] == ["out"]
    assert [p.name.split("-")[0] for p in (base / "cwd" / "out").iterdir()] == ["boucwen"]


def _interrupt(sig: int, out: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """Start the run, wait for its first checkpoint, wait a seeded random moment, send ``sig``."""
    env = _env(tmp_path / "home", tmp_path / "tmp")
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir()
    proc = _start([*BOUCWEN, "--out", str(out)], tmp_path, env)
    deadline = time.monotonic() + 240
    while not list(out.glob(".checkpoints/*/smc.ckpt")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no checkpoint appeared (exit {proc.returncode}): {proc.communicate()[1][-3000:]}")
        time.sleep(0.05)
    time.sleep(RNG.uniform(0.0, 0.5))
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.timeout(420)
def test_sigint_of_twinfer_run_prints_the_resume_command_exits_130_and_resume_matches(
    reference, tmp_path, cli
):
    out = tmp_path / "out"
    stopped = _interrupt(signal.SIGINT, out, tmp_path)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    line = next(x for x in stopped.stderr.splitlines() if x.startswith("interrupted."))
    assert "smc.ckpt (IBIS, " in line and "observations assimilated)" in line
    command = line.split("Continue with: ", 1)[1]
    assert command == shlex.join(["twinfer", *BOUCWEN, "--out", str(out), "--resume"])
    resumed = cli(*shlex.split(command)[1:])
    assert resumed.exit_code == 0, resumed.output
    _same(_results(out), reference[1])
    assert not (out / ".checkpoints").exists()


@pytest.mark.timeout(420)
def test_sigkill_of_twinfer_run_then_resume_matches_uninterrupted(reference, tmp_path, cli):
    out = tmp_path / "out"
    killed = _interrupt(signal.SIGKILL, out, tmp_path)
    assert killed.returncode == -signal.SIGKILL
    assert not [p for p in out.iterdir() if p.name.startswith("boucwen-")]  # no half run folder
    resumed = cli(*BOUCWEN, "--out", out, "--resume")
    assert resumed.exit_code == 0, resumed.output
    _same(_results(out), reference[1])
