"""twinfer.timing: the first call (trace, compile, run) apart from the runs after it, of a whole call or
of the compiled kernels it marks."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import pytest

from twinfer.timing import BenchResult, kernel, time_jitted, timed


def test_timed_times_a_plain_function_as_time_jitted_does():
    """A call without a marked kernel is timed whole: one first call, then ``repeats`` more, the last
    call's result returned."""
    calls = []

    def fn(x, *, scale):
        calls.append(x)
        return jnp.asarray(x) * scale

    value, seconds = timed(fn, 2.0, scale=3.0, repeats=3)
    assert float(value) == 6.0 and seconds.value is value
    assert len(calls) == 4 and len(seconds.run_s) == 3 and seconds.compile_s >= 0.0
    direct = time_jitted(jax.jit(lambda x: x + 1.0), jnp.ones(3), repeats=2)
    assert len(direct.run_s) == 2 and float(direct.value[0]) == 2.0


def test_timed_times_only_the_marked_kernels_and_runs_the_caller_once():
    """Inside ``timed`` a kernel's first call is the compile time and its ``repeats`` later calls the run
    samples; the host-side work around it (here a 50 ms sleep) is in neither, and the caller runs once.
    Two kernels in one call add up; outside ``timed`` a kernel is a plain call."""
    scan = jax.jit(lambda x: jnp.cumsum(x))
    outer = []

    def estimator(x):
        outer.append(1)
        time.sleep(0.05)  # checks of the record, assembling the estimate
        return kernel(scan, x) + kernel(scan, x, **{})

    x = jnp.arange(5.0)
    value, seconds = timed(estimator, x, repeats=2)
    assert len(outer) == 1 and len(seconds.run_s) == 2
    assert max(seconds.run_s) < 0.05  # the sleep is host work, not the kernels'
    assert seconds.value is value
    assert jnp.array_equal(value, 2 * jnp.cumsum(x))
    assert jnp.array_equal(kernel(scan, x), jnp.cumsum(x))  # outside timed: a plain call


def test_no_repeats_time_the_first_call_only_and_compile_only_is_never_negative():
    """``repeats=0``: the function runs once, that call's seconds (compile included) are ``median_s``
    (``compile_only_s`` 0); with repeats, ``compile_only_s`` is the first call less the median,
    and 0 where a run took longer than the first call (a shared machine)."""
    calls = []
    value, seconds = timed(lambda: calls.append(1) or 2.0, repeats=0)
    assert value == 2.0 and calls == [1] and seconds.run_s == []
    assert seconds.median_s == seconds.compile_s >= 0.0 and seconds.compile_only_s == 0.0
    scan = jax.jit(lambda x: jnp.cumsum(x))
    value, seconds = timed(lambda x: kernel(scan, x), jnp.arange(3.0), repeats=0)
    assert seconds.run_s == [] and seconds.median_s == seconds.compile_s
    assert BenchResult(compile_s=1.0, run_s=[0.25, 0.5, 2.0]).compile_only_s == 0.5
    assert BenchResult(compile_s=1.0, run_s=[3.0]).compile_only_s == 0.0


def test_timed_refuses_a_negative_repeat_count_and_leaves_no_clock_behind():
    with pytest.raises(ValueError, match=r"repeats: expected an integer >= 0; received -1"):
        timed(lambda: 1.0, repeats=-1)
    with pytest.raises(ValueError, match=r"repeats: expected an integer >= 0; received -1"):
        time_jitted(lambda: 1.0, repeats=-1)

    def fails():
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        timed(fails)
    counted = []
    kernel(lambda: counted.append(1))  # no clock left by the failed call: one plain call
    assert counted == [1]
