"""Test configuration: float64, headless matplotlib, no on-disk XLA cache, quick XLA compiles, hypothesis."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
# One run's programs, kept for that run only: `make pytest` makes an empty folder (TWINFER_TEST_XLA_CACHE) and
# removes it after, so the suite starts from an empty compilation cache as a fresh clone does, and a program
# compiled again by another worker or a `twinfer` process the tests start (a resumed run, a CLI test of a
# case a module also runs) is read back rather than recompiled: the same executable, the same numbers.
# Without the variable (pytest run by hand), or where a test sets TWINFER_CACHE_DIR=off itself (the
# start-up and cold-compile checks), every program compiles for real.
_RUN_CACHE = os.environ.get("TWINFER_TEST_XLA_CACHE", "")
os.environ.setdefault("TWINFER_CACHE_DIR", _RUN_CACHE or "off")  # `twinfer` processes: the run's folder

# XLA:CPU compile options for the suite's hundreds of one-off programs (inherited by the `twinfer` processes
# the tests start): the legacy elemental emitters and no expensive LLVM passes. On a four-subsystem graph
# scan (tests/test_graph_from_model.py's acceptance chain) XLA compilation took 12 s instead of 21-23 s,
# the 10,000-step run as long and its estimates equal to the last digit; tests/test_graph_from_model.py
# used 23 % less CPU (409 s against 528 s, both run side by side). Tests that need other flags (device
# counts) build their own environment. Users' programs are compiled with XLA's defaults, and so are the
# tests' with TWINFER_TEST_XLA_DEFAULTS=1 (the rounding differs: about 1e-13 relative on a Bouc-Wen run).
# The backend at optimisation level 0 as well (2026-11-28, side by side on this 2-core machine): the
# graph tests (test_graph_from_model.py, test_graph_cases.py) 380 s against 421 s; pinn-sparse and
# pinn-joint quick 45 s against 74 s, IBIS against its grid posterior 11 s against 28 s (their programs
# compile for longer than they run at test size); the turbine's quick run as long.
from _xla import QUICK_XLA_FLAGS  # noqa: E402

if os.environ.get("TWINFER_TEST_XLA_DEFAULTS") != "1":
    _flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = " ".join([_flags, *(f for f in QUICK_XLA_FLAGS if f not in _flags)]).strip()

import jax  # noqa: E402

import twinfer  # noqa: E402

twinfer.configure()  # float64 and the batch-safe CPU lowerings: importing twinfer sets neither
if _RUN_CACHE:
    jax.config.update("jax_compilation_cache_dir", _RUN_CACHE)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

from hypothesis import settings  # noqa: E402

settings.register_profile("twinfer", deadline=None, max_examples=25, derandomize=True)
settings.load_profile("twinfer")


import collections  # noqa: E402
import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module.

    One pytest process compiles thousands of programs; each keeps memory mappings of its machine code,
    and near the end of the suite XLA's compiler crashed (SIGSEGV / SIGABRT inside
    ``backend_compile_and_load``) once the process neared the kernel's limit on mappings
    (vm.max_map_count = 65530 here). Clearing the caches between modules keeps the count bounded;
    modules do not share compiled programs, so nothing is recompiled that would not be anyway.
    """
    yield
    jax.clear_caches()
    gc.collect()


# The modules that hold the suite's longest tests, with their seconds in the last full run (`make pytest`'s
# --durations, both workers busy). `make pytest` hands whole modules to its two workers (--dist loadfile)
# in the order of the collection (--no-loadscope-reorder); these go first, longest first, and the rest
# after them by their number of tests (xdist's own order), so the run does not end on one worker still in a
# long module while the other waits. Only the order depends on this table: a stale entry costs balance,
# never a result. test_banded and test_live_damage less what #53's test-time cut measured off them;
# test_partitions, test_graph_from_model and test_events (not listed before, so handed out late by their
# few tests) scaled from single-module runs on the loaded machine by the ratio of their tests that the full
# run's 20 longest name (0.6: test_partitions 211 s there, test_graph_from_model 206 s, test_events 85 s).
_LONG_MODULES = {
    "tests/test_banded.py": 134,
    "tests/test_partitions.py": 125,
    "tests/test_graph_from_model.py": 120,
    "tests/test_graph_cases.py": 99,
    "tests/test_turbine_grid_case.py": 68,
    "tests/test_learn_cases.py": 68,
    "tests/test_pinn_cases.py": 59,
    "tests/test_turbine_case.py": 53,
    "tests/live/test_live_cli.py": 50,
    "tests/test_events.py": 50,
    "tests/test_live_damage.py": 47,
    "tests/test_spec.py": 45,
    "tests/test_multihost.py": 44,
    "tests/reliability/test_no_lu_deadlock.py": 36,
    "tests/test_docs.py": 31,
    "tests/test_fmu_graph.py": 28,
    "tests/test_program.py": 28,
    "tests/test_distributed_default.py": 20,
    "tests/test_fmu_events.py": 20,
}


def pytest_collection_modifyitems(config, items):
    """Long modules first (see ``_LONG_MODULES``), each module's tests kept together and in order."""
    counts = collections.Counter(item.nodeid.split("::")[0] for item in items)
    rank = {
        module: (0, -_LONG_MODULES[module], module) if module in _LONG_MODULES else (1, -n, module)
        for module, n in counts.items()
    }
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: a module's order is kept
