"""Timing of jitted functions: the first call (trace, compile, run) apart from the calls after it.

One helper for the benchmarks (:mod:`twinfer.bench`) and the cases that report their run time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax


@dataclass(frozen=True)
class BenchResult:
    """Timings of one function: compile (first call) and the run-time samples after it."""

    compile_s: float
    run_s: list[float] = field(default_factory=list)
    value: Any = None
    """What the last call returned (so a caller that needs the result does not run it again)."""

    @property
    def median_s(self) -> float:
        return statistics.median(self.run_s)


def time_jitted(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> BenchResult:
    """Time ``fn(*args)``: the first call (trace + compile + run) apart from ``repeats`` later calls."""
    if repeats < 1:
        raise ValueError(f"repeats: expected >= 1; received {repeats}.")
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - start
    samples, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - start)
    return BenchResult(compile_s=compile_s, run_s=samples, value=value)
