"""Test configuration: float64, headless matplotlib, no on-disk XLA cache, hypothesis profile for CI."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TWINFER_CACHE_DIR", "off")  # tests compile for real; `twinfer run` caches on disk

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from hypothesis import settings  # noqa: E402

settings.register_profile("twinfer", deadline=None, max_examples=25, derandomize=True)
settings.load_profile("twinfer")


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
