"""Benchmark harness: compile and run timed separately, repeated, medians reported, ``bench.json`` written.

Benchmarks register themselves in :data:`REGISTRY` by name; ``twinfer bench NAME`` runs one.
"""

import importlib

from twinfer.bench._harness import REGISTRY, register, time_python, write_bench_json
from twinfer.timing import BenchResult, time_jitted

BENCHMARK_MODULES: tuple[str, ...] = ("filters", "grid", "pn", "graph", "combine", "live", "fmu", "peers")
"""Modules under ``twinfer.bench`` whose import registers benchmarks."""


def load_benchmarks() -> None:
    """Import every benchmark module so that :data:`REGISTRY` is complete."""
    for module in BENCHMARK_MODULES:
        importlib.import_module(f"twinfer.bench.{module}")


__all__ = [
    "BENCHMARK_MODULES",
    "REGISTRY",
    "BenchResult",
    "load_benchmarks",
    "register",
    "time_jitted",
    "time_python",
    "write_bench_json",
]
