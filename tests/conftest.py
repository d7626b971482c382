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
# --durations=0 summed per module: call, setup and teardown, both workers busy). `make pytest` hands whole
# modules to its two workers (--dist loadfile) in the order of the collection (--no-loadscope-reorder);
# these go first, longest first, and the rest after them by their number of tests (xdist's own order), so
# the run does not end on one worker still in a long module while the other waits. Only the order depends
# on this table: a stale entry costs balance, never a result. Every module of 10 s or more is listed
# (2026-12-07, 1099 tests, 787 s): a module of few tests but long ones (tests/reliability/test_checkpoints.py,
# 58 s in 16 tests; tests/test_fmu_hybrid.py, 14 s in one) was otherwise handed out late by its count, and
# stale entries (test_partitions 125 s, now 33 s; test_live_damage 47 s, now 10 s) sent short modules
# first. A replay of that run's per-test seconds through xdist's scheduling (a worker takes the next module
# when two of its tests are left) gives the two workers' ends 1.5 s apart on average with every test's
# seconds varied by +-25 %, against 4.7 s with the former table.
_LONG_MODULES = {
    "tests/test_banded.py": 115,
    "tests/test_docs.py": 75,
    "tests/test_graph_cases.py": 69,
    "tests/test_graph_from_model.py": 67,
    "tests/reliability/test_checkpoints.py": 58,
    "tests/live/test_live_cli.py": 52,
    "tests/test_learn_cases.py": 46,
    "tests/test_pinn_cases.py": 44,
    "tests/test_events.py": 43,
    "tests/test_turbine_grid_case.py": 42,
    "tests/test_smc.py": 40,
    "tests/test_spec.py": 38,
    "tests/test_partitions.py": 37,
    "tests/test_program.py": 37,
    "tests/test_grid_estimators.py": 37,
    "tests/test_fmu_graph.py": 30,
    "tests/test_turbine_case.py": 30,
    "tests/test_ukf.py": 29,
    "tests/reliability/test_no_lu_deadlock.py": 28,
    "tests/test_learn.py": 27,
    "tests/test_pn_models_cases.py": 27,
    "tests/test_sim.py": 27,
    "tests/test_pn.py": 26,
    "tests/test_models_turbine_grid.py": 25,
    "tests/test_pinn.py": 23,
    "tests/test_multihost.py": 22,
    "tests/test_grid.py": 22,
    "tests/test_gaussian_core.py": 21,
    "tests/test_live_grid.py": 21,
    "tests/test_configure.py": 20,
    "tests/test_base_excitation.py": 19,
    "tests/test_fmu_events.py": 19,
    "tests/test_distributed_default.py": 18,
    "tests/test_graph.py": 18,
    "tests/test_noise_auto.py": 15,
    "tests/test_graph_checks.py": 14,
    "tests/test_fmu_hybrid.py": 14,
    "tests/test_fmu.py": 13,
    "tests/test_spec_fmu.py": 13,
    "tests/test_time_convention.py": 12,
    "tests/reliability/test_step_property.py": 12,
    "tests/live/test_live_spec.py": 11,
    "tests/test_fmu3.py": 11,
    "tests/reliability/test_cli_round2.py": 10,
}


def pytest_collection_modifyitems(config, items):
    """Long modules first (see ``_LONG_MODULES``), each module's tests kept together and in order."""
    counts = collections.Counter(item.nodeid.split("::")[0] for item in items)
    rank = {
        module: (0, -_LONG_MODULES[module], module) if module in _LONG_MODULES else (1, -n, module)
        for module, n in counts.items()
    }
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: a module's order is kept
