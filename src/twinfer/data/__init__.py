"""Datasets: times, inputs, observations with a missing-value mask, and optional truth."""

from twinfer.data._benchmarks import load_emps, load_silverbox, verified_path
from twinfer.data._dataset import Dataset
from twinfer.data._grid import GRID_CASES, GridNetwork, branch_coupling, load_grid
from twinfer.data._io import from_csv

__all__ = [
    "GRID_CASES",
    "Dataset",
    "GridNetwork",
    "branch_coupling",
    "from_csv",
    "load_emps",
    "load_grid",
    "load_silverbox",
    "verified_path",
]
