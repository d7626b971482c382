"""Datasets: times, inputs, observations with a missing-value mask, and optional truth."""

from twinfer.data._benchmarks import load_elcentro, load_emps, load_silverbox, verified_path
from twinfer.data._dataset import Dataset
from twinfer.data._grid import (
    GRID_CASES,
    GridNetwork,
    branch_coupling,
    check_grid_case,
    load_grid,
    pandapower_networks,
    read_matpower,
)
from twinfer.data._io import from_csv, from_table, table_columns

__all__ = [
    "GRID_CASES",
    "check_grid_case",
    "pandapower_networks",
    "read_matpower",
    "Dataset",
    "GridNetwork",
    "branch_coupling",
    "from_csv",
    "from_table",
    "table_columns",
    "load_elcentro",
    "load_emps",
    "load_grid",
    "load_silverbox",
    "verified_path",
]
