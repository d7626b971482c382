"""Estimators."""

from twinfer.infer import filters, gaussian

__all__ = ["filters", "gaussian"]
from twinfer.infer import pn, smc  # noqa: E402

__all__ += ["pn", "smc"]
