"""Benchmark ``live``: a live twin of an 8-mass chain at 1 kHz keeping pace with its stream (issue #54).

The chain of the ``live-damage`` case (1 kg masses, springs around 1e4 N/m, accelerometers on masses 2,
4, 6 and 8, every spring's stiffness unknown: 24 filter states), its EKF compiled once
(``twinfer.compile``) and run by :class:`twinfer.live.Twin` on a simulated record:

- **backlog**: the record pushed in chunks of :data:`twinfer.live.CHUNK` frames, as a twin catching up
  meets it; the real-time factor is simulated seconds per wall second; the EKF runs the Gram kernel
  (``Central(kernel="gram")``), and ``backlog_qr`` the default QR kernel on the same record;
- **frame by frame**: one frame per :meth:`~twinfer.live.Twin.push`, as a stream at its own pace
  delivers it; the latency of each call (frame in, estimate row out) gives p50 and p99, and their sum
  the sustained real-time factor;
- **where the time goes**: the one-step program called directly (dispatch and arithmetic, no twin), the
  arithmetic alone (a step's share of the whole-record scan), and a cProfile of the frame-by-frame path
  (the clock, the alarms, the result's copy to the host);
- **start-up**: a fresh process (``python -c``) that sets the compilation cache as ``twinfer`` does
  (``twinfer.cli``'s cache setting, ``TWINFER_CACHE_DIR``), compiles the program and pushes frames until
  the first estimate: seconds from the process's start, with an empty and with the warm cache.

- **grids**: the ``live-grid`` case's twin (:func:`~twinfer.live.grid_twin`: the field
  engine's clusters, a PMU on every bus as in the case, the innovation alarm with one group per
  cluster) of pandapower's ``case1888rte`` and PEGASE 9241 at 100 frames/s, a simulated record
  pushed as a backlog in chunks of :data:`twinfer.live.CHUNK` frames, as the chain's.

Targets (issue #54): for the chain real-time factor >= 20 and p99 <= 5 ms, for the 1,888-bus grid
real-time factor >= 2 (PEGASE 9241: reported); the figures are what this machine gives.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

import twinfer
from twinfer.bench._harness import Progress, register
from twinfer.data import Dataset, load_grid
from twinfer.data._frames import record_frames
from twinfer.infer import Program
from twinfer.infer._program import Frame
from twinfer.infer.graph._kuramoto import stable_substeps
from twinfer.live import CHUNK, InnovationAlarm, Twin, grid_twin, pmu_buses
from twinfer.models import Chain, KuramotoNetwork, draw_grid_parameters
from twinfer.sim import simulate_dataset, simulate_grid

DT = 1e-3
STIFFNESS = (1.2e4, 1.1e4, 1.0e4, 1.0e4, 0.9e4, 0.9e4, 0.8e4, 0.8e4)
SENSORS = ("a2", "a4", "a6", "a8")
FORCE_SD, NOISE_SD = 0.1, 0.01


def program(kernel: str = "gram") -> Program:
    """The 8-mass chain's EKF with every stiffness unknown (prior sd 5 %, walk 2e-5 per step).

    ``kernel="gram"`` (:class:`twinfer.Central`): covariances by products and Cholesky factors, what a
    twin of a well-posed model at 1 kHz runs; the bench also times ``"qr"``, the default.
    """
    n = len(STIFFNESS)
    chain = Chain([1.0] * n, list(STIFFNESS), 0.3, forced_dofs=(), outputs=SENSORS)
    return twinfer.compile(
        chain,
        twinfer.Central(filter="ekf", kernel=kernel),  # type: ignore[arg-type]
        dt=DT,
        noise_sd=float(np.hypot(NOISE_SD, FORCE_SD)),
        state_sd=[1e-3] * n + [0.05] * n,
        process_sd=[FORCE_SD * DT**2 / 2] * n + [FORCE_SD * DT] * n,
        unknown={f"k{i + 1}": (k, 0.05 * k, 2e-5 * k) for i, k in enumerate(STIFFNESS)},
    )


def frames(seconds: float, seed: int = 0) -> list[tuple[float, dict[str, float]]]:
    """The chain under ambient forcing on every mass, its accelerometers sampled at 1 kHz, as frames."""
    n = len(STIFFNESS)
    steps = int(round(seconds / DT))
    forced = Chain([1.0] * n, list(STIFFNESS), 0.3, outputs=SENSORS)
    forces = np.random.default_rng(seed).normal(0.0, FORCE_SD, size=(steps + 1, n))
    data = simulate_dataset(forced, forces, DT, NOISE_SD, jax.random.key(seed), truth="exact")
    obs = np.asarray(data.observations).tolist()
    return [(k * DT, dict(zip(SENSORS, row, strict=True))) for k, row in enumerate(obs)]


GRID_DT, GRID_NOISE_SD, GRID_PMU_EVERY = 0.01, 0.01, 1  # a PMU on every bus, as the live-grid case
GRIDS = {"grid1888": ("case1888rte", 10.0), "pegase9241": ("pegase9241", 3.0)}
"""Benchmark prefix -> (network, seconds of record streamed) at 100 frames/s."""


def grid_rate(network: str, seconds: float, progress: Progress) -> dict[str, float]:
    """A grid twin's backlog rate on ``network``: real-time factor, per-frame time, compile seconds.

    Table S4's draws (seed 0) simulated by the paper's Heun scheme (:func:`~twinfer.sim.simulate_grid`),
    the PMUs' frames pushed to a fresh twin :data:`~twinfer.live.CHUNK` at a time after a warm-up twin
    has compiled both programs (a chunk and a single step).
    """
    net = load_grid(network)
    n = net.n_bus
    damping, big_omega = draw_grid_parameters(n, jax.random.key(0))
    model = KuramotoNetwork(*net.neighbours, damping, big_omega)
    steps = int(round(seconds / GRID_DT))
    progress(f"{network}: simulating {seconds:g} s of {n} buses")
    substeps = stable_substeps(np.asarray(model.weight), GRID_DT)
    record = simulate_grid(model, GRID_DT, steps, substeps, GRID_NOISE_SD, jax.random.key(1))
    pmus = pmu_buses(net, GRID_PMU_EVERY, True)
    obs = record["observations"][:, np.concatenate([pmus, n + pmus])]
    twin_spec = grid_twin(
        net, damping, pmus, dt=GRID_DT, noise_sd=GRID_NOISE_SD, first_frame=obs[0], substeps=substeps
    )
    y = np.concatenate([obs[:1], obs])  # step 0 (the prior's) carries no applied measurement
    stream = [f for block in record_frames(y, twin_spec.channels, GRID_DT, CHUNK) for f in block]
    alarms = (InnovationAlarm(groups=twin_spec.groups),)
    progress(f"{network}: compiling the twin ({twin_spec.partition.n_clusters} clusters)")
    warm = Twin(twin_spec.program, dt=GRID_DT, alarms=alarms)
    start = time.perf_counter()
    warm.push(stream[: CHUNK + 1])
    warm.push(stream[CHUNK + 1 : CHUNK + 2])
    compile_s = time.perf_counter() - start
    progress(f"{network}: backlog of {len(stream)} frames in chunks of {CHUNK}")
    twin = Twin(twin_spec.program, dt=GRID_DT, alarms=alarms)
    start = time.perf_counter()
    for i in range(0, len(stream), CHUNK):
        twin.push(stream[i : i + CHUNK])
    backlog_s = time.perf_counter() - start
    return {
        "realtime_factor": (len(stream) - 1) * GRID_DT / backlog_s,
        "ms_per_frame": 1e3 * backlog_s / (len(stream) - 1),
        "compile_s": compile_s,
        "buses": float(n),
        "pmus": float(len(pmus)),
        "clusters": float(twin_spec.partition.n_clusters),
        "seconds": seconds,
    }


STARTUP = """
import json, sys, time
start = float(sys.argv[1])
from twinfer.cli._app import _use_compilation_cache
_use_compilation_cache()
import twinfer
twinfer.configure()
from twinfer.bench.live import frames, program
from twinfer.live import Twin
stream = frames(0.05)
twin = Twin(program(), dt=1e-3)
i, rows = 0, []
while not len(rows):
    rows, _ = twin.push(stream[i : i + 1])
    i += 1
print(json.dumps({"first_estimate_s": time.time() - start}))
"""


def startup_s(cache: str) -> float:
    """Seconds from a fresh process's start to its first estimate, compiling through cache ``cache``."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["TWINFER_CACHE_DIR"] = cache
    start = time.time()
    out = subprocess.run(
        [sys.executable, "-c", STARTUP, repr(start)], env=env, capture_output=True, text=True, timeout=600,
        check=True,
    )  # fmt: skip
    return float(json.loads(out.stdout.strip().splitlines()[-1])["first_estimate_s"])


def _profile_shares(stats: pstats.Stats, n: int) -> dict[str, float]:
    """Microseconds per frame in the clock, the alarms and the copy of the results to the host."""
    found = {"clock": 0.0, "alarms": 0.0, "copy_to_host": 0.0, "push": 0.0}
    for (file, _, func), (_, _, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        if file.endswith("_clock.py") and func in ("add", "ready"):
            found["clock"] += cum
        elif file.endswith("_monitor.py") and func == "check":
            found["alarms"] += cum
        elif func == "<built-in method numpy.asarray>":
            found["copy_to_host"] += cum
        elif file.endswith("_twin.py") and func == "push":
            found["push"] += cum
    return {f"profile.{k}_us_per_frame": 1e6 * v / n for k, v in found.items()}


@register("live", "Live twins of an 8-mass chain at 1 kHz and grids at 100 Hz: rate, latency, start-up (#54)")
def bench_live(quick: bool, progress: Progress) -> dict[str, float]:
    """Backlog and frame-by-frame throughput, latency percentiles, a profile, start-up times, grid rates."""
    seconds, single = (3.0, 300) if quick else (30.0, 5000)
    progress(f"simulating {seconds:g} s at 1 kHz")
    stream = frames(seconds)
    prog = program()
    warm = Twin(prog, dt=DT, alarms=())
    start = time.perf_counter()
    warm.push(stream[: CHUNK + 1])
    warm.push(stream[CHUNK + 1 : CHUNK + 2])
    compile_s = time.perf_counter() - start

    progress(f"backlog: {len(stream)} frames in chunks of {CHUNK}")
    twin = Twin(prog, dt=DT)
    start = time.perf_counter()
    for i in range(0, len(stream), CHUNK):
        twin.push(stream[i : i + CHUNK])
    backlog_s = time.perf_counter() - start
    progress("backlog with the default QR kernel")
    qr = program("qr")
    Twin(qr, dt=DT, alarms=()).push(stream[: CHUNK + 1])
    twin = Twin(qr, dt=DT)
    start = time.perf_counter()
    for i in range(0, len(stream), CHUNK):
        twin.push(stream[i : i + CHUNK])
    backlog_qr_s = time.perf_counter() - start

    progress(f"frame by frame: {single} frames")
    twin = Twin(prog, dt=DT)
    twin.push(stream[:2])
    latency = np.empty(single)
    for i in range(single):
        start = time.perf_counter()
        twin.push(stream[2 + i : 3 + i])
        latency[i] = time.perf_counter() - start

    progress("where the time goes: the step alone, the scan, a profile of push")
    state = prog.init()
    one = Frame(np.zeros((CHUNK, 0)), np.zeros((CHUNK, len(SENSORS))), np.ones((CHUNK, len(SENSORS)), bool))
    numbers, advance = twin._numbers, twin._advance
    jax.block_until_ready(advance(numbers, state, one, np.int32(1)))
    calls = []
    for _ in range(min(single, 1000)):
        start = time.perf_counter()
        jax.block_until_ready(advance(numbers, state, one, np.int32(1)))
        calls.append(time.perf_counter() - start)
    obs = np.array([[f[1][s] for s in SENSORS] for f in stream])
    record = Dataset(times=np.arange(len(stream)) * DT, observations=obs, output_names=SENSORS)
    jax.block_until_ready(prog.run(record).means)
    start = time.perf_counter()
    jax.block_until_ready(prog.run(record).means)
    scan_step_s = (time.perf_counter() - start) / (len(stream) - 1)
    profiler = cProfile.Profile()
    profiled = min(single, 2000)
    offset = 3 + single
    profiler.enable()
    for i in range(offset, offset + profiled):
        twin.push(stream[i : i + 1])
    profiler.disable()
    shares = _profile_shares(pstats.Stats(profiler), profiled)

    progress("start-up: a fresh process to its first estimate, empty then warm compilation cache")
    with tempfile.TemporaryDirectory() as cache:
        cold = startup_s(cache)
        hot = startup_s(cache)
    frame_s = float(np.sum(latency)) / single
    grids = {"grid118": ("ieee118", 3.0)} if quick else GRIDS
    rates = {
        f"{prefix}.{key}": value
        for prefix, (network, grid_seconds) in grids.items()
        for key, value in grid_rate(network, grid_seconds, progress).items()
    }
    return {
        "compile_s": compile_s,
        "backlog.realtime_factor": (len(stream) - 1) * DT / backlog_s,
        "backlog.us_per_frame": 1e6 * backlog_s / (len(stream) - 1),
        "backlog_qr.realtime_factor": (len(stream) - 1) * DT / backlog_qr_s,
        "backlog_qr.us_per_frame": 1e6 * backlog_qr_s / (len(stream) - 1),
        "single.realtime_factor": DT / frame_s,
        "single.latency_p50_ms": 1e3 * float(np.percentile(latency, 50)),
        "single.latency_p99_ms": 1e3 * float(np.percentile(latency, 99)),
        "single.us_per_frame": 1e6 * frame_s,
        "step_call.us": 1e6 * float(np.median(calls)),
        "step_arithmetic.us": 1e6 * scan_step_s,
        **shares,
        "startup.empty_cache_s": cold,
        "startup.warm_cache_s": hot,
        "config.seconds": seconds,
        "config.frames_single": float(single),
        "config.n_state": float(len(prog.state_names)),
        "config.cores": float(len(os.sched_getaffinity(0))),
        **rates,
    }
