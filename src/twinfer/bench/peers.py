"""Benchmark ``peers``: twinfer's KF, EKF and UKF against dynamax's and cuthbert's on the same problems.

Each library runs in its own process (:mod:`twinfer.bench._peer_worker`): dynamax sets JAX's default
matmul precision for the whole process on import, and no library should inherit another's compiled
programs or thread pools. dynamax and cuthbert are optional benchmark dependencies that twinfer itself
never imports; ``make peers`` builds their environment (``.venv-peers``, pinned in
``requirements-peers.txt``), and ``TWINFER_PEERS_PYTHON`` names another interpreter that has them.

The problems (every library gets the same functions and arrays):

- ``ekf`` and ``ekf_batch``: a free 5-mass Duffing chain (10 states), RK4 at 10 ms, accelerations of
  masses 1, 3 and 5 measured; one system of 2,000 steps, and a ``vmap``-ped batch of 100 systems;
- ``ukf`` (10 states, one system and a batch of 100) and ``ukf_n40`` (a 20-mass chain, 40 states):
  Merwe's sigma points (alpha 1, beta 2, kappa 0), redrawn for each measurement;
- ``kf``: a 20-state linear chain (10 masses, exact discretisation), 10,000 steps, and ``kf_batch``:
  100 systems of 1,000 steps.

twinfer runs its square-root filter (:func:`twinfer.infer.filters.gaussian_filter`) with the default QR
kernel (``twinfer``) and with ``kernel="gram"`` (``twinfer-gram``); its QR UKF is
:func:`twinfer.infer.filters.ukf_scan` with the sigma points redrawn for the measurement, as the peers'
are (before 2026-12-08 it was ``gaussian_filter`` with the unscented linearisation: the same moments,
about 2.4 times slower); dynamax its covariance-form filters
(``lgssm_filter``, ``extended_kalman_filter``, ``unscented_kalman_filter``) keeping the filtered means
only; cuthbert its square-root filters. Every call returns the filtered means and the log-likelihood.

The timed calls are interleaved: each round asks every library in turn (in a rotated order) for one
call of each task, so that the machine's drift falls on all of them; the figures are medians. The
filtered means of every library are compared with twinfer's (``TASK.LIBRARY.mean_gap``: the largest
difference over the largest mean); a run time is worth comparing only where they agree.

``TWINFER_BENCH_BASELINE_SRC`` names the ``src`` folder of another twinfer checkout (the commit before,
say): it then runs as the library ``baseline`` in the same sitting, with the QR kernel.
``TWINFER_PEERS`` (``dynamax,cuthbert`` by default) names the peers to run.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from twinfer.bench import _peer_worker as worker
from twinfer.bench._harness import Progress, register

WORKER = Path(worker.__file__)
REPLY_TIMEOUT_S = 900.0
"""A worker that answers nothing for this long is stopped (a deadlocked thread pool) and reported."""

PEERS = ("dynamax", "cuthbert")


def _records(f: Any, h: Any, x0: Any, n_steps: int, q_sd: float, r_sd: float, k_w: Any, k_v: Any) -> Any:
    """Noisy measurements (systems, steps, m) of ``x' = f(x) + w``, ``y = h(x') + v`` from each row of ``x0``.

    Process noise ``q_sd`` in every state, measurement noise ``r_sd`` in every output.
    """
    n_systems, n = x0.shape

    def record(x, kw, kv):
        def body(x, w):
            x = f(x) + q_sd * w
            return x, h(x)

        _, ys = jax.lax.scan(body, x, jax.random.normal(kw, (n_steps, n)))
        return ys + r_sd * jax.random.normal(kv, ys.shape)

    return jax.vmap(record)(x0, jax.random.split(k_w, n_systems), jax.random.split(k_v, n_systems))


def _chain_case(prefix: str, n_dof: int, n_steps: int, n_systems: int, key: Any) -> dict[str, Any]:
    """A free Duffing chain: the problem's entries and its simulated measurements (``n_systems`` records)."""
    kind = "ekf" if prefix.startswith("ekf") else "ukf"
    entries: dict[str, Any] = {
        "kind": kind,
        "batch": n_systems > 1,
        "n_dof": n_dof,
        "dt": 0.01,
        "k": 100.0,
        "c": 0.5,
        "kappa": 500.0,
        "sensed": np.arange(0, n_dof, 2),
    }
    f, h = worker.chain_functions({f"{prefix}.{k}": np.asarray(v) for k, v in entries.items()}, prefix)
    n, m = 2 * n_dof, len(entries["sensed"])
    q_sd, r_sd = 1e-3, 0.05
    k_x, k_w, k_v = jax.random.split(key, 3)
    x0 = jnp.concatenate([0.1 * jax.random.normal(k_x, (n_systems, n_dof)), jnp.zeros((n_systems, n_dof))], 1)

    ys = _records(f, h, x0, n_steps, q_sd, r_sd, k_w, k_v)
    entries.update(
        m0=np.zeros(n),
        chol_P0=0.1 * np.eye(n),
        chol_Q=q_sd * np.eye(n),
        chol_R=r_sd * np.eye(m),
        ys=np.asarray(ys),
    )
    return entries


def _linear_case(prefix: str, n_dof: int, n_steps: int, n_systems: int, key: Any) -> dict[str, Any]:
    """A linear chain (unit masses, springs 100, dampers 0.5), exactly discretised at 10 ms."""
    dt, k, c = 0.01, 100.0, 0.5
    stiff = k * (2 * np.eye(n_dof) - np.eye(n_dof, k=1) - np.eye(n_dof, k=-1))
    stiff[-1, -1] = k
    damp = stiff * (c / k)
    A = np.block([[np.zeros((n_dof, n_dof)), np.eye(n_dof)], [-stiff, -damp]])
    F = scipy.linalg.expm(A * dt)
    sensed = np.arange(0, n_dof, 2)
    H = A[n_dof + sensed]
    n, m = 2 * n_dof, len(sensed)
    q_sd, r_sd = 1e-3, 0.05
    k_x, k_w, k_v = jax.random.split(key, 3)
    Fj, Hj = jnp.asarray(F), jnp.asarray(H)
    x0 = 0.1 * jax.random.normal(k_x, (n_systems, n))

    ys = _records(lambda x: Fj @ x, lambda x: Hj @ x, x0, n_steps, q_sd, r_sd, k_w, k_v)
    return {
        "kind": "kf",
        "batch": n_systems > 1,
        "F": F,
        "H": H,
        "m0": np.zeros(n),
        "chol_P0": 0.1 * np.eye(n),
        "chol_Q": q_sd * np.eye(n),
        "chol_R": r_sd * np.eye(m),
        "ys": np.asarray(ys),
    }


def _first_prediction(case: dict[str, np.ndarray], prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """The predicted moments of ``x_1`` (dynamax's initial moments: it updates before it predicts)."""
    from twinfer.infer.filters import gaussian_filter
    from twinfer.infer.gaussian import UnscentedWeights, linear, taylor, unscented

    p = worker.problem(case, prefix)
    lin = {"kf": linear, "ekf": taylor, "ukf": unscented(UnscentedWeights.merwe(*worker.MERWE))}[p["kind"]]
    ys = p["ys"][0, :1]
    out = gaussian_filter(
        lambda x, u: p["f"](x),
        lambda x, u: p["h"](x),
        p["m0"],
        p["chol_P0"],
        p["chol_Q"],
        p["chol_R"],
        jnp.zeros((1, 0)),
        ys,
        linearisation=lin,
    )
    return np.asarray(_first(out.pred_means)), np.asarray(_first(out.pred_chols))


def build_case(quick: bool) -> dict[str, np.ndarray]:
    """Every problem of the benchmark, as the flat arrays of the case file the workers read."""
    scale = (lambda n: max(n // 10, 20)) if quick else (lambda n: n)
    batch = 10 if quick else 100
    keys = iter(jax.random.split(jax.random.key(20261207), 8))
    problems = {
        "ekf": _chain_case("ekf", 5, scale(2000), 1, next(keys)),
        "ekf_batch": _chain_case("ekf_batch", 5, scale(2000), batch, next(keys)),
        "ukf": _chain_case("ukf", 5, scale(2000), 1, next(keys)),
        "ukf_batch": _chain_case("ukf_batch", 5, scale(2000), batch, next(keys)),
        "ukf_n40": _chain_case("ukf_n40", 20, scale(2000), 1, next(keys)),
        "kf": _linear_case("kf", 10, scale(10_000), 1, next(keys)),
        "kf_batch": _linear_case("kf_batch", 10, scale(1000), batch, next(keys)),
    }
    case: dict[str, np.ndarray] = {"problems": np.asarray(sorted(problems))}
    for prefix, entries in problems.items():
        case.update({f"{prefix}.{name}": np.asarray(value) for name, value in entries.items()})
    for prefix in problems:
        case[f"{prefix}.first_mean"], case[f"{prefix}.first_chol"] = _first_prediction(case, prefix)
    return case


def peers_python() -> str | None:
    """The interpreter that has dynamax: ``TWINFER_PEERS_PYTHON``, ``.venv-peers``, or this one."""
    named = os.environ.get("TWINFER_PEERS_PYTHON")
    if named:
        return named
    for root in (Path.cwd(), *Path(__file__).resolve().parents):
        candidate = root / ".venv-peers" / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    probe = subprocess.run([sys.executable, "-c", "import dynamax"], capture_output=True, check=False)
    return sys.executable if probe.returncode == 0 else None


def _has(python: str, module: str) -> bool:
    probe = subprocess.run([python, "-I", "-c", f"import {module}"], capture_output=True, check=False)
    return probe.returncode == 0


def _first(stacked: Any) -> Any:
    """The first row of a scan's output that a full scan keeps (``gaussian_filter`` always does)."""
    if stacked is None:
        raise RuntimeError("bench peers: expected the filter's predicted moments; received None")
    return stacked[0]


def _pipe(stream: Any) -> Any:
    """A worker's standard stream, opened as a pipe by :class:`_Worker`."""
    if stream is None:
        raise RuntimeError("bench peers: a worker's standard stream is not a pipe")
    return stream


class _Worker:
    """One library's worker process: started, asked for timings line by line, stopped."""

    def __init__(self, library: str, command: list[str], env: dict[str, str], case: Path, out: Path):
        self.library = library
        self.proc = subprocess.Popen(
            [*command, library, str(case), str(out)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.errors: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_errors, daemon=True).start()

    def _read(self) -> None:
        for line in _pipe(self.proc.stdout):
            self.lines.put(line)
        self.lines.put(None)

    def _read_errors(self) -> None:
        for line in _pipe(self.proc.stderr):
            self.errors.append(line)
            del self.errors[:-40]

    def reply(self) -> dict[str, Any]:
        """The worker's next JSON line; a worker that ended or hung is a named error with its stderr."""
        try:
            line = self.lines.get(timeout=REPLY_TIMEOUT_S)
        except queue.Empty:
            self.stop()
            raise RuntimeError(
                f"bench peers: the {self.library} worker answered nothing for {REPLY_TIMEOUT_S:.0f} s "
                "(stopped)"
            ) from None
        if line is None:
            tail = "".join(self.errors[-20:])
            raise RuntimeError(f"bench peers: the {self.library} worker ended early; its errors:\n{tail}")
        return json.loads(line)

    def ask(self, task: str, repeats: int) -> list[float]:
        stdin = _pipe(self.proc.stdin)
        stdin.write(f"{task} {repeats}\n")
        stdin.flush()
        return self.reply()["seconds"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _workers(case_path: Path, out: Path, progress: Progress) -> tuple[dict[str, _Worker], dict[str, str]]:
    """Start every library's worker; the libraries left out, with why."""
    here = [sys.executable, "-m", "twinfer.bench._peer_worker"]
    skipped: dict[str, str] = {}
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "twinfer": (here, dict(os.environ)),
        "twinfer-gram": (here, dict(os.environ)),
    }
    baseline = os.environ.get("TWINFER_BENCH_BASELINE_SRC")
    if baseline:
        env = dict(os.environ, PYTHONPATH=str(Path(baseline).resolve()))
        commands["baseline"] = ([sys.executable, str(WORKER)], env)
    python = peers_python()
    wanted = os.environ.get("TWINFER_PEERS", ",".join(PEERS)).split(",")
    for library in PEERS:
        if library not in wanted:
            skipped[library] = f"{library} left out by TWINFER_PEERS={','.join(wanted)}"
            continue
        if python is None or not _has(python, library):
            skipped[library] = (
                f"{library} is not installed in {python or 'any interpreter found'} "
                "(make peers builds .venv-peers; TWINFER_PEERS_PYTHON names another)"
            )
            continue
        commands[library] = ([python, "-I", str(WORKER)], dict(os.environ))
    workers = {}
    for library, (command, env) in commands.items():
        env = {k: v for k, v in env.items() if k != "XLA_FLAGS"} if library in PEERS else env
        workers[library] = _Worker(library, command, env, case_path, out)
    for library, w in workers.items():
        ready = w.reply()
        progress(f"{library} compiled: " + ", ".join(f"{k} {v:.1f} s" for k, v in ready["compile_s"].items()))
    return workers, skipped


@register("peers", "KF, EKF and UKF against dynamax and cuthbert (each in its own process, interleaved)")
def bench_peers(quick: bool, progress: Progress) -> dict[str, float]:
    """Median run times of every library on every problem, their ratios to dynamax, the means' agreement."""
    if peers_python() is None:
        raise RuntimeError(
            "bench peers: expected dynamax in an interpreter to compare with; found none. `make peers` "
            "builds .venv-peers with the pinned dynamax and cuthbert (or set TWINFER_PEERS_PYTHON)."
        )
    rounds = 3 if quick else 7
    progress("simulating the problems (Duffing chains of 10 and 40 states, a 20-state linear chain)")
    case = build_case(quick)
    tmp = Path(tempfile.mkdtemp(prefix="twinfer-peers-"))
    try:
        case_path = tmp / "case.npz"
        np.savez(case_path, allow_pickle=False, **case)
        progress("starting one process per library and compiling every problem in each")
        workers, skipped = _workers(case_path, tmp, progress)
        tasks = [str(t) for t in case["problems"]]
        samples: dict[tuple[str, str], list[float]] = {(lib, t): [] for lib in workers for t in tasks}
        libraries = list(workers)
        try:
            for r in range(rounds):
                progress(f"round {r + 1} of {rounds}: every task, every library in turn")
                order = libraries[r % len(libraries) :] + libraries[: r % len(libraries)]
                for task in tasks:
                    for lib in order:
                        samples[(lib, task)] += workers[lib].ask(task, 1)
        finally:
            for w in workers.values():
                w.stop()
        figures: dict[str, float] = {}
        for task in tasks:
            steps = float(case[f"{task}.ys"].shape[1])
            systems = float(case[f"{task}.ys"].shape[0]) if bool(case[f"{task}.batch"]) else 1.0
            reference = np.load(tmp / f"twinfer.{task}.npy")
            scale = float(np.max(np.abs(reference)))
            for lib in libraries:
                median = statistics.median(samples[(lib, task)])
                figures[f"{task}.{lib}.run_s"] = median
                figures[f"{task}.{lib}.us_per_system_step"] = 1e6 * median / (steps * systems)
                if lib != "twinfer":
                    means = np.load(tmp / f"{lib}.{task}.npy")
                    figures[f"{task}.{lib}.mean_gap"] = float(np.max(np.abs(means - reference))) / scale
            for lib in libraries:
                for peer in PEERS:
                    if peer in workers and lib not in PEERS:
                        ratio = figures[f"{task}.{lib}.run_s"] / figures[f"{task}.{peer}.run_s"]
                        figures[f"{task}.{lib}_over_{peer}"] = ratio
            figures[f"config.{task}.steps"] = steps
            figures[f"config.{task}.systems"] = systems
            figures[f"config.{task}.n_state"] = float(case[f"{task}.m0"].shape[0])
        figures["config.rounds"] = float(rounds)
        for library, why in skipped.items():
            progress(f"left out: {why}")
            figures[f"config.{library}_missing"] = 1.0
        return figures
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
