"""Reading and writing Datasets: ``.npz`` files (atomic) and CSV tables."""

from __future__ import annotations

import csv
import difflib
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
    input_hold: str = "linear",
    model: Any = None,
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
        input_hold: how the inputs behave between samples (:attr:`Dataset.input_hold`): ``"linear"``
            (default: a measured signal, a force or a ground acceleration, read at the samples) or
            ``"zoh"`` (a digital command held over each interval). A row holds inputs and outputs
            sampled at the same instant (:attr:`Dataset.alignment` ``"sampled"``).
        model: a twinfer model to check the channel names against before the file is read (the filters
            check them too, later): inputs and outputs must be the model's (``model.input_names``,
            ``model.output_names``), states its ``state_names``; the model's channels in another order are
            put in the model's order. A name that is not the model's is an error naming the closest
            model channel and the mapping to pass.

    Returns:
        A validated Dataset whose channels are named by the column names, or by the mapping's keys.

    Raises:
        ValueError: for an unknown column, a cell that is not a number, or a missing cell in the
            time, input or state columns (only outputs may be missing), naming the line and column; for
            a channel name that is not the model's (with ``model``).

    """
    path = Path(path)
    ins, outs, sts = _named_channels("from_csv", model, inputs, outputs, states)
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

    return _assemble(column, path, time, ins, outs, sts, {"input_hold": input_hold, **(metadata or {})})


def from_table(
    path: str | Path,
    time: str,
    inputs: Columns | None = None,
    outputs: Columns = (),
    *,
    states: Columns | None = None,
    metadata: Mapping[str, Any] | None = None,
    input_hold: str = "linear",
    model: Any = None,
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
        input_hold: as :func:`from_csv` (default ``"linear"``: a measured signal).
        model: a twinfer model whose channel names the columns' must be (as :func:`from_csv`).

    Raises:
        ValueError: for an unknown suffix or column, a column that is not numeric or not 1-D, or a
            missing value in the time, input or state columns, naming the file and column.

    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".txt"):
        return from_csv(
            path, time, inputs, outputs, states=states, metadata=metadata, input_hold=input_hold, model=model
        )
    ins, outs, sts = _named_channels("from_table", model, inputs, outputs, states)
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

    return _assemble(column, path, time, ins, outs, sts, {"input_hold": input_hold, **(metadata or {})})


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


def _named_channels(
    where: str, model: Any, inputs: Columns | None, outputs: Columns, states: Columns | None
) -> tuple[tuple[list[str], list[str]], ...]:
    """``(channel names, column names)`` of the inputs, outputs and states, checked against ``model``.

    Without a model, the arguments' own names. With one, inputs and outputs get the same treatment: each
    must name the model's channels (:func:`_as_model`); states only where given.
    """
    channels = (
        _channels(inputs, "inputs", where),
        _channels(outputs, "outputs", where),
        _channels(states, "states", where),
    )
    if model is None:
        return channels
    try:
        expected = (model.input_names, model.output_names, model.state_names)
    except AttributeError:
        raise TypeError(
            f"{where} model: expected a twinfer model (with input_names, output_names and state_names); "
            f"received {type(model).__name__}."
        ) from None
    ins, outs, sts = channels
    return (
        _as_model(where, "inputs", ins, tuple(expected[0])),
        _as_model(where, "outputs", outs, tuple(expected[1])),
        _as_model(where, "states", sts, tuple(expected[2])) if states is not None else sts,
    )


def _as_model(
    where: str, key: str, channels: tuple[list[str], list[str]], expected: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """``channels`` in the model's order where they are the model's ``expected`` names, else a ValueError.

    The error names the channels missing and those that are not the model's (each with the closest model
    name, :func:`difflib.get_close_matches`, case aside), and the ``{model name: column}`` mapping to pass.
    """
    names, columns = channels
    if tuple(names) == expected:
        return channels
    if sorted(names) == sorted(expected) and len(set(names)) == len(names):  # another order
        order = [names.index(name) for name in expected]
        return [names[i] for i in order], [columns[i] for i in order]
    missing = [name for name in expected if name not in names]
    foreign = [name for name in names if name not in expected]
    lower = {name.lower(): name for name in missing}
    hints = []
    for name in foreign:
        close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
        if close:
            hints.append(f"{name!r}: did you mean {lower[close[0]]!r}?")
    if len(names) == len(expected):  # one column per model channel: map them in order
        mapping = dict(zip(expected, columns, strict=True))
        suggestion = f" Name the columns after the model's channels: {where}(..., {key}={mapping})."
    else:
        suggestion = (
            f" Give one column per model channel, as {{model name: column}}: {where}(..., {key}="
            f"{ {name: '<column>' for name in expected} })."
        )
    received = f"{len(names)} {tuple(names)}" if names else "none"
    raise ValueError(
        f"{where} {key}: expected the model's {key} {expected} (one column each, named after them or "
        f"mapped to them); received {received}"
        + (f": {', '.join(map(repr, missing))} missing" if missing and names else "")
        + (f"; {', '.join(map(repr, foreign))} not the model's" if foreign else "")
        + (f" ({'; '.join(hints)})" if hints else "")
        + "."
        + suggestion
    )


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
