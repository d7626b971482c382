"""Estimators."""

from twinfer.infer import filters

__all__ = ["filters"]
from twinfer.infer import pn, smc  # noqa: E402

__all__ += ["pn", "smc"]
