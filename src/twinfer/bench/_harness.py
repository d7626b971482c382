"""Timing helpers shared by every benchmark.

A benchmark is a function ``(quick: bool, progress) -> dict[str, float]`` registered under a name. The
figures it returns are flat dotted names (``ukf.system_steps_per_s``) and land in ``bench.json`` beside
the machine description. Compile time is measured apart from run time (the first call of a jitted
function), and run time is the median over repeats, after ``block_until_ready``.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from twinfer.timing import BenchResult

Progress = Callable[[str], None]
Benchmark = Callable[[bool, Progress], dict[str, float]]
REGISTRY: dict[str, tuple[str, Benchmark]] = {}


def register(name: str, description: str) -> Callable[[Benchmark], Benchmark]:
    """Decorator adding a benchmark to :data:`REGISTRY`."""

    def wrap(fn: Benchmark) -> Benchmark:
        REGISTRY[name] = (description, fn)
        return fn

    return wrap


def time_python(fn: Callable[[], Any], repeats: int = 3) -> BenchResult:
    """Time a plain Python callable (a reference implementation): no compile phase."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return BenchResult(compile_s=0.0, run_s=samples)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": len(jax.devices()),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "pinned": len(os.sched_getaffinity(0)) < (os.cpu_count() or 1),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "platform": platform.platform(),
    }


def write_bench_json(path: Path, name: str, figures: dict[str, float]) -> Path:
    """Write (atomically) ``bench.json`` with the benchmark's figures and the machine description."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine(), "figures": figures}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path
