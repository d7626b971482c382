"""Datasets: times, inputs, observations with a missing-value mask, and optional truth."""

from twinfer.data._dataset import Dataset
from twinfer.data._io import from_csv

__all__ = ["Dataset", "from_csv"]
from twinfer.data._benchmarks import load_emps, load_silverbox, verified_path  # noqa: E402

__all__ += ["load_emps", "load_silverbox", "verified_path"]
