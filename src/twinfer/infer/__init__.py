"""Estimators."""

from twinfer.infer import filters

__all__ = ["filters"]
