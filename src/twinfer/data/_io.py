"""Reading and writing Datasets: ``.npz`` files (atomic) and CSV tables."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twinfer._atomic import write_npz
from twinfer.data._dataset import Dataset

_FORMAT = "twinfer.Dataset/1"
_MISSING = frozenset({"", "nan", "na", "n/a", "null", "none"})


def save_npz(dataset: Dataset, path: str | Path) -> Path:
    """Write ``dataset`` to ``path`` (exactly that name) as a compressed ``.npz``, atomically.

    Arrays are stored as entries; names, truth parameters and metadata as one JSON string entry
    ``header``, so the file loads with ``allow_pickle=False``. The file is written to a temporary
    name in the same folder and renamed over ``path``, so a crash never leaves a half-written file.
    """
    path = Path(path)
    header = {
        "format": _FORMAT,
        "input_names": list(dataset.input_names),
        "output_names": list(dataset.output_names),
        "state_names": list(dataset.state_names),
        "truth_params": dataset.truth_params,
        "metadata": dataset.metadata,
    }
    arrays: dict[str, Any] = {
        "times": dataset.times,
        "observations": dataset.observations,
        "mask": dataset.mask,
        "header": np.array(json.dumps(header, allow_nan=False)),
    }
    if dataset.inputs is not None:
        arrays["inputs"] = dataset.inputs
    if dataset.truth_states is not None:
        arrays["truth_states"] = dataset.truth_states
    write_npz(path, arrays)
    return path


def load_npz(path: str | Path) -> Dataset:
    """Read a Dataset written by :func:`save_npz` (re-validated on construction)."""
    with np.load(Path(path), allow_pickle=False) as archive:
        if "header" not in archive.files:
            raise ValueError(
                f"Dataset.load: expected a file written by Dataset.save (with a 'header' entry); "
                f"received entries {sorted(archive.files)} in {path}."
            )
        header = json.loads(str(archive["header"][()]))
        if header.get("format") != _FORMAT:
            raise ValueError(
                f"Dataset.load: expected format {_FORMAT!r}; received {header.get('format')!r} in {path}."
            )
        arrays = {k: archive[k] for k in archive.files if k != "header"}
    return Dataset(
        arrays["times"],
        arrays["observations"],
        mask=arrays["mask"],
        inputs=arrays.get("inputs"),
        truth_states=arrays.get("truth_states"),
        truth_params=header["truth_params"],
        input_names=header["input_names"],
        output_names=header["output_names"],
        state_names=header["state_names"] or None,
        metadata=header["metadata"],
    )


def from_csv(
    path: str | Path,
    time: str,
    inputs: Columns | None = None,
    outputs: Columns = (),
    *,
    states: Columns | None = None,
    delimiter: str = ",",
    metadata: Mapping[str, Any] | None = None,
) -> Dataset:
    """A Dataset from a CSV table with a header row.

    Args:
        path: the CSV file.
        time: name of the time column.
        inputs: names of input columns (None or empty: no inputs), or ``{channel: column}`` to name
            the channels after the model's (``{"u1": "shaker_N"}``).
        outputs: names of observed output columns, or ``{channel: column}`` (``{"a1": "acc1"}``: the
            model's output names, which the filters check); empty cells (or ``nan``, ``NA``, ``null``)
            become masked-out observations.
        states: optional names of true-state columns (simulated data), or ``{state: column}``.
        delimiter: the field separator.
        metadata: extra metadata; ``source`` (the path) is added.

    Returns:
        A validated Dataset whose channels are named by the column names, or by the mapping's keys.

    Raises:
        ValueError: for an unknown column, a cell that is not a number, or a missing cell in the
            time, input or state columns (only outputs may be missing), naming the line and column.

    """
    path = Path(path)
    ins = _channels(inputs, "inputs", "from_csv")
    outs = _channels(outputs, "outputs", "from_csv")
    sts = _channels(states, "states", "from_csv")
    if not outs[1]:
        raise ValueError("from_csv: expected at least one output column; received outputs=[].")
    with path.open(newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        header = [h.strip() for h in next(reader, [])]
        rows = list(reader)
    wanted = [time, *ins[1], *outs[1], *sts[1]]
    unknown = [c for c in wanted if c not in header]
    if unknown:
        raise ValueError(f"from_csv: expected columns {unknown} in {path}; received header {header}.")
    numbered = [(i + 2, r) for i, r in enumerate(rows) if any(cell.strip() for cell in r)]

    def column(name: str, may_miss: bool) -> np.ndarray:
        j = header.index(name)
        values = np.empty(len(numbered))
        for i, (line, row) in enumerate(numbered):
            cell = row[j].strip() if j < len(row) else ""
            if cell.lower() in _MISSING:
                if not may_miss:
                    raise ValueError(
                        f"from_csv: expected a number in column {name!r}, line {line} of {path}; "
                        f"received a missing cell {cell!r} (only output columns may have gaps)."
                    )
                values[i] = np.nan
                continue
            try:
                values[i] = float(cell)
            except ValueError:
                raise ValueError(
                    f"from_csv: expected a number in column {name!r}, line {line} of {path}; "
                    f"received {cell!r}."
                ) from None
            if np.isinf(values[i]):
                raise ValueError(
                    f"from_csv: expected a finite number in column {name!r}, line {line} of {path}; "
                    f"received {cell!r}."
                )
        return values

    return _assemble(column, path, time, ins, outs, sts, metadata)


def from_table(
    path: str | Path,
    time: str,
    inputs: Columns | None = None,
    outputs: Columns = (),
    *,
    states: Columns | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Dataset:
    """A Dataset from a table file chosen by its suffix: CSV (:func:`from_csv`), Parquet or netCDF.

    Parquet (``.parquet``, ``.pq``): one column per channel. netCDF (``.nc``, ``.nc4``, ``.cdf``): one
    one-dimensional variable (or coordinate) per channel, all of one length. Missing output values are
    NaN (masked out); time, inputs and states must be complete.

    Args:
        path: the file.
        time: name of the time column.
        inputs: names of input columns (None or empty: no inputs), or ``{channel: column}``.
        outputs: names of observed output columns, or ``{channel: column}`` (as :func:`from_csv`).
        states: optional names of true-state columns (simulated data), or ``{state: column}``.
        metadata: extra metadata; ``source`` (the path) is added.

    Raises:
        ValueError: for an unknown suffix or column, a column that is not numeric or not 1-D, or a
            missing value in the time, input or state columns, naming the file and column.

    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".txt"):
        return from_csv(path, time, inputs, outputs, states=states, metadata=metadata)
    ins = _channels(inputs, "inputs", "from_table")
    outs = _channels(outputs, "outputs", "from_table")
    sts = _channels(states, "states", "from_table")
    if not outs[1]:
        raise ValueError("from_table: expected at least one output column; received outputs=[].")
    wanted = [time, *ins[1], *outs[1], *sts[1]]
    if suffix in (".parquet", ".pq"):
        import pandas as pd

        frame = pd.read_parquet(path)
        names = [str(c) for c in frame.columns]
        get = lambda name: frame[name].to_numpy()  # noqa: E731
    elif suffix in (".nc", ".nc4", ".cdf"):
        import xarray as xr

        with xr.open_dataset(path, engine="h5netcdf") as table:
            names = [str(v) for v in (*table.coords, *table.data_vars)]
            arrays = {n: np.asarray(table[n].values) for n in wanted if n in names}
        get = arrays.__getitem__
    else:
        raise ValueError(
            f"from_table: expected a .csv, .parquet/.pq or .nc/.nc4/.cdf file; received {path.name!r}."
        )
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise ValueError(f"from_table: expected columns {unknown} in {path}; received columns {names}.")

    def column(name: str, may_miss: bool) -> np.ndarray:
        raw = np.asarray(get(name))
        if raw.ndim != 1 or raw.dtype.kind not in "fiu":
            raise ValueError(
                f"from_table: expected column {name!r} of {path} to be one-dimensional and numeric; "
                f"received shape {raw.shape}, dtype {raw.dtype}."
            )
        values = raw.astype(np.float64)
        if np.isinf(values).any():
            row = int(np.argmax(np.isinf(values)))
            raise ValueError(
                f"from_table: expected a finite number in column {name!r}, row {row} of {path}; received "
                f"{values[row]}."
            )
        if not may_miss and np.isnan(values).any():
            row = int(np.argmax(np.isnan(values)))
            raise ValueError(
                f"from_table: expected a number in column {name!r}, row {row} of {path}; received a missing "
                "value (only output columns may have gaps)."
            )
        return values

    return _assemble(column, path, time, ins, outs, sts, metadata)


def table_columns(path: str | Path) -> list[str]:
    """The column names of a CSV (header row), Parquet or netCDF (variables and coordinates) file.

    Raises:
        ValueError: for an unknown suffix (as :func:`from_table`).

    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".txt"):
        with path.open(newline="") as handle:
            return [h.strip() for h in next(csv.reader(handle), [])]
    if suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return [str(n) for n in pq.read_schema(path).names]
    if suffix in (".nc", ".nc4", ".cdf"):
        import xarray as xr

        with xr.open_dataset(path, engine="h5netcdf") as table:
            return [str(v) for v in (*table.coords, *table.data_vars)]
    raise ValueError(
        f"table_columns: expected a .csv, .parquet/.pq or .nc/.nc4/.cdf file; received {path.name!r}."
    )


Columns = Sequence[str] | Mapping[str, str]
"""Table columns: their names (which name the channels), or ``{channel name: column name}``."""


def _channels(value: Columns | None, key: str, where: str) -> tuple[list[str], list[str]]:
    """``(channel names, column names)`` of an ``inputs`` / ``outputs`` / ``states`` argument."""
    if value is None:
        return [], []
    if isinstance(value, str):
        raise ValueError(f"{where} {key}: expected a list of column names or a mapping; received {value!r}.")
    if isinstance(value, Mapping):
        bad = [(k, v) for k, v in value.items() if not (isinstance(k, str) and isinstance(v, str))]
        if bad:
            raise ValueError(
                f"{where} {key}: expected {{channel name: column name}} strings; received {bad}."
            )
        return list(value), list(value.values())
    return list(value), list(value)


def _assemble(
    column: Any,
    path: Path,
    time: str,
    inputs: tuple[list[str], list[str]],
    outputs: tuple[list[str], list[str]],
    states: tuple[list[str], list[str]],
    metadata: Mapping[str, Any] | None,
) -> Dataset:
    """The Dataset of a table whose ``column(name, may_miss)`` reads one checked column.

    Each channel argument is ``(names, columns)``. Only outputs may miss values (NaN: masked out; an
    infinite value stays observed, and is refused).
    """
    y = np.stack([column(c, True) for c in outputs[1]], axis=1)
    return Dataset(
        column(time, False),
        y,
        mask=~np.isnan(y),
        inputs=np.stack([column(c, False) for c in inputs[1]], axis=1) if inputs[1] else None,
        truth_states=np.stack([column(c, False) for c in states[1]], axis=1) if states[1] else None,
        input_names=inputs[0],
        output_names=outputs[0],
        state_names=states[0] or None,
        metadata={"source": str(path), **(metadata or {})},
    )
