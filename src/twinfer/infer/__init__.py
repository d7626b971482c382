"""Estimators."""

from twinfer.infer import filters, gaussian
from twinfer.infer._estimate import Estimate, merge_estimates

__all__ = ["Estimate", "filters", "gaussian", "merge_estimates"]
from twinfer.infer import pn, smc  # noqa: E402

__all__ += ["pn", "smc"]
