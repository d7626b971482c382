"""Datasets: times, inputs, observations with a missing-value mask, and optional truth."""

from twinfer.data._dataset import Dataset
from twinfer.data._grid import GRID_CASES, GridNetwork, branch_coupling, load_grid
from twinfer.data._io import from_csv
from twinfer.data._partition import Partition, partition_greedy

<<<<<<< HEAD
__all__ = [
    "GRID_CASES",
    "Dataset",
    "GridNetwork",
    "Partition",
    "branch_coupling",
    "from_csv",
    "load_grid",
    "partition_greedy",
]
=======
__all__ = ["Dataset", "from_csv"]
from twinfer.data._benchmarks import load_emps, load_silverbox, verified_path  # noqa: E402

__all__ += ["load_emps", "load_silverbox", "verified_path"]
>>>>>>> pnsmc
