"""Datasets: times, inputs, observations with a missing-value mask, and optional truth."""

from twinfer.data._dataset import Dataset
from twinfer.data._io import from_csv

__all__ = ["Dataset", "from_csv"]
