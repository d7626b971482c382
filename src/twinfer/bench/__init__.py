"""Benchmark harness: compile and run timed separately, repeated, medians reported, ``bench.json`` written.

Benchmarks register themselves in :data:`REGISTRY` by name; ``twinfer bench NAME`` runs one.
"""

from twinfer.bench._harness import REGISTRY, BenchResult, register, time_jitted, write_bench_json

__all__ = ["REGISTRY", "BenchResult", "register", "time_jitted", "write_bench_json"]
