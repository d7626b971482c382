"""Timing of jitted work: the first call (trace, compile, run) apart from the calls after it.

Two helpers for the benchmarks (:mod:`twinfer.bench`) and the cases that report their run time:
:func:`time_jitted` times one jitted function; :func:`timed` times any call, an estimator's whole run
included, by the compiled kernels it runs. An estimator marks its compiled whole-record scan with
:func:`kernel`; inside :func:`timed` that scan is timed where it runs (its first call apart from
``repeats`` more, the last run's outputs kept), so the seconds reported are the scan's alone, not the
checks of the record before it or the host-side assembly of the estimate after it.
"""

from __future__ import annotations

import contextvars
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
        """The median run; with no runs after the first (``repeats=0``), the first call's seconds."""
        return statistics.median(self.run_s) if self.run_s else self.compile_s

    @property
    def compile_only_s(self) -> float:
        """The first call's seconds less the median run (compilation, tracing), at least 0.

        A run may take longer than the first call on a shared machine; 0 when nothing ran after it.
        """
        return max(self.compile_s - self.median_s, 0.0)


_CLOCK: contextvars.ContextVar[tuple[int, list[BenchResult]] | None] = contextvars.ContextVar(
    "twinfer_timing_clock", default=None
)
"""Inside :func:`timed`: its ``repeats`` and the timings of the kernels run so far."""


def _check_repeats(repeats: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
        raise ValueError(f"repeats: expected an integer >= 0; received {repeats!r}.")


def _first(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()``'s result (computed: ``block_until_ready``) and its seconds."""
    start = time.perf_counter()
    value = jax.block_until_ready(call())
    return value, time.perf_counter() - start


def _again(call: Callable[[], Any], repeats: int, value: Any) -> tuple[Any, list[float]]:
    """``call()`` ``repeats`` times more: the last result (``value`` if none) and each call's seconds."""
    samples = []
    for _ in range(repeats):
        value, seconds = _first(call)
        samples.append(seconds)
    return value, samples


def time_jitted(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> BenchResult:
    """Time ``fn(*args)``: the first call (trace + compile + run) apart from ``repeats`` later calls.

    ``repeats=0`` times the first call only (its seconds are then ``median_s``, compile included).

    Raises:
        ValueError: for ``repeats`` below 0.

    """
    _check_repeats(repeats)
    call = lambda: fn(*args)  # noqa: E731
    first, compile_s = _first(call)
    value, samples = _again(call, repeats, first)
    return BenchResult(compile_s=compile_s, run_s=samples, value=value)


def kernel(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: an estimator's compiled whole-record scan, timed when inside :func:`timed`.

    Outside :func:`timed` a plain call. Inside, the call is timed as :func:`time_jitted` times it (the
    first call, then ``repeats`` more) and the last call's result returned: the same numbers, since a
    compiled scan is deterministic.
    """
    clock = _CLOCK.get()
    if clock is None:
        return fn(*args, **kwargs)
    repeats, kernels = clock
    result = time_jitted(lambda: fn(*args, **kwargs), repeats=repeats)
    kernels.append(result)
    return result.value


def timed(fn: Callable[..., Any], *args: Any, repeats: int = 1, **kwargs: Any) -> tuple[Any, BenchResult]:
    """``fn(*args, **kwargs)`` and its timings: the first call (trace, compile, run) apart from the runs.

    ``fn`` is called once. Where it runs compiled kernels (an estimator's scan over the record, marked
    by :func:`kernel`: ``twinfer.estimate`` with a graph's methods, the banded filter), those are timed:
    ``compile_s`` is their first calls' seconds and each of the ``repeats`` samples in ``run_s`` their
    later calls' (summed over the kernels where ``fn`` runs several), so checking the record and
    assembling the estimate on the host are not counted. Otherwise ``fn`` itself is timed, as
    :func:`time_jitted` times a jitted function (``repeats`` more calls after the first).

    Args:
        fn: what to run, e.g. ``twinfer.estimate``.
        *args: its positional arguments.
        repeats: the timed runs after the first; their median is ``BenchResult.median_s`` (0: the first
            call only, its seconds, compile included, are ``median_s``).
        **kwargs: its keyword arguments.

    Returns:
        ``(result, BenchResult)``: ``fn``'s result (the last run's) and the timings, whose ``value`` is
        that result too.

    Raises:
        ValueError: for ``repeats`` below 0; what ``fn`` raises.

    """
    _check_repeats(repeats)
    kernels: list[BenchResult] = []
    token = _CLOCK.set((repeats, kernels))
    call = lambda: fn(*args, **kwargs)  # noqa: E731
    try:
        first, compile_s = _first(call)
    finally:
        _CLOCK.reset(token)
    if not kernels:
        value, samples = _again(call, repeats, first)
        return value, BenchResult(compile_s=compile_s, run_s=samples, value=value)
    run_s = [sum(k.run_s[i] for k in kernels) for i in range(repeats)]
    return first, BenchResult(compile_s=sum(k.compile_s for k in kernels), run_s=run_s, value=first)
