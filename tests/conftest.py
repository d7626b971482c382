"""Test configuration: float64, headless matplotlib, no on-disk XLA cache, hypothesis profile for CI."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TWINFER_CACHE_DIR", "off")  # tests compile for real; `twinfer run` caches on disk

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from hypothesis import settings  # noqa: E402

settings.register_profile("twinfer", deadline=None, max_examples=25, derandomize=True)
settings.load_profile("twinfer")
