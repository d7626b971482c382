"""Reading and writing Datasets: ``.npz`` files (atomic) and CSV tables."""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import zipfile
import zlib
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from twinfer._atomic import write_npz
from twinfer.data import _checks
from twinfer.data._checks import open_regular, regular_file, too_large
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
    """Read a Dataset written by :func:`save_npz` (re-validated on construction).

    Raises:
        ValueError: for a file that is not a regular file, not an archive :func:`save_npz` wrote, damaged,
            or whose entries hold more than :data:`~twinfer.data._checks.MAX_WHOLE_FILE_BYTES` uncompressed.

    """
    with open_regular(path, "Dataset.load") as handle:
        try:
            return _load_npz(handle, Path(path))
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise ValueError(
                f"Dataset.load: expected an .npz file written by Dataset.save; {path} is damaged ({error})."
            ) from None


def _load_npz(handle: BinaryIO, path: Path) -> Dataset:
    with zipfile.ZipFile(handle) as archive:
        size = sum(info.file_size for info in archive.infolist())
    if size > _checks.MAX_WHOLE_FILE_BYTES:
        raise ValueError(f"Dataset.load: {too_large(path, size)} (its entries uncompressed).")
    handle.seek(0)
    with np.load(handle, allow_pickle=False) as archive:
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
    _time_apart("from_csv", path, time, ins, outs, sts)
    wanted = {time: False, **dict.fromkeys(ins[1], False), **dict.fromkeys(sts[1], False)}
    wanted.update({c: True for c in outs[1] if c not in wanted})
    table = read_csv_columns(path, wanted, delimiter)
    uses = Counter([time, *ins[1], *outs[1], *sts[1]])

    def column(name: str, may_miss: bool) -> np.ndarray:
        uses[name] -= 1  # a column's last use lets it go: the Dataset holds its own copy
        return table.pop(name) if not uses[name] else table[name]

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
    _time_apart("from_table", path, time, ins, outs, sts)
    if suffix in (".parquet", ".pq"):
        import pandas as pd

        frame = pd.read_parquet(regular_file(path, "from_table"))
        names = [str(c) for c in frame.columns]
        get = lambda name: frame[name].to_numpy()  # noqa: E731
    elif suffix in (".nc", ".nc4", ".cdf"):
        import xarray as xr

        with xr.open_dataset(regular_file(path, "from_table"), engine="h5netcdf") as table:
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
        with open_regular(path, "table_columns", whole=False) as handle:
            return _csv_header(handle, path, ",")
    if suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return [str(n) for n in pq.read_schema(regular_file(path, "table_columns")).names]
    if suffix in (".nc", ".nc4", ".cdf"):
        import xarray as xr

        with xr.open_dataset(regular_file(path, "table_columns"), engine="h5netcdf") as table:
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


def _time_apart(
    where: str,
    path: Path,
    time: str,
    inputs: tuple[list[str], list[str]],
    outputs: tuple[list[str], list[str]],
    states: tuple[list[str], list[str]],
) -> None:
    """Raise where the time column is also named as an input, output or state column."""
    for key, (_, columns) in (("inputs", inputs), ("outputs", outputs), ("states", states)):
        if time in columns:
            raise ValueError(
                f"{where} {key}: expected columns other than the time column {time!r} of {path}; received "
                f"{columns}. The time is not a channel: name the measured columns only."
            )


CSV_CHUNK_BYTES = 8 * 2**20
"""Bytes of a CSV file read at a time (whole lines): the reader holds one chunk and the columns asked for."""

_FIELD_LIMIT = csv.field_size_limit()
_BOM = b"\xef\xbb\xbf"
_NA_TOKENS = sorted({"", *(f(t) for t in ("nan", "na") for f in (str.lower, str.upper, str.title))})
_FAST_BYTES = np.zeros(256, bool)
_FAST_BYTES[list(b"0123456789.+-eEinfINFaAtyTY \t\r\n")] = True
"""Bytes a chunk may hold to be parsed by Arrow's CSV reader: numbers, inf/nan/na, blanks. Letters that spell
``true``/``false``, ``_`` (``1_000``, which ``float`` reads as 1000), quotes and non-ASCII bytes send the
chunk to the line parser."""


def read_csv_columns(path: Path, columns: Mapping[str, bool], delimiter: str = ",") -> dict[str, np.ndarray]:
    """The float64 columns ``{name: may_miss}`` of a CSV file with a header row, read in a stream.

    Every non-blank line must have the header's number of cells; a cell is a number (``float``'s syntax
    without ``_``), or, where ``may_miss``, a missing value (empty, ``nan``, ``NA``, ``null``...: NaN). A
    UTF-8 byte-order mark is skipped; quoting is CSV's (strict: an unterminated quote is an error). Lines
    are read in chunks of :data:`CSV_CHUNK_BYTES`; a chunk of plain numbers is parsed by Arrow's CSV reader
    (correctly rounded: the values ``float`` gives), anything else, and every chunk the fast path has a
    doubt about, by :mod:`csv` line by line, which names the line of an error.

    Raises:
        OSError: for a file that cannot be opened.
        ValueError: naming the file, line and column of a short or long row, a cell that is not a number,
            a missing cell where none may be, an infinite value, a field over 131,072 characters or an
            unterminated quote; for a file that is not a regular file (a FIFO, ``/dev/zero``).

    """
    with open_regular(path, "from_csv", whole=False) as raw:
        header = _csv_header(raw, path, delimiter)
        missing = [c for c in columns if c not in header]
        if missing:
            raise ValueError(f"from_csv: expected columns {missing} in {path}; received header {header}.")
        twice = [c for c in columns if header.count(c) > 1]
        if twice:
            raise ValueError(
                f"from_csv: expected each column named once in the header of {path}; received {twice} "
                f"more than once in {header}."
            )
        reader = _CsvColumns(path, header, columns, delimiter)
        start, line, pending = raw.tell(), 2, b""
        while True:
            data = raw.read(CSV_CHUNK_BYTES)
            pending += data
            cut = pending.rfind(b"\n") + 1 if data else len(pending)
            if not cut and not data:
                break
            if not cut:
                if len(pending) > CSV_CHUNK_BYTES:
                    raise ValueError(
                        f"from_csv: expected lines shorter than {CSV_CHUNK_BYTES:,} bytes in {path}; line "
                        f"{line} is longer."
                    )
                continue
            chunk, pending = pending[:cut], pending[cut:]
            if b'"' in chunk or chunk.count(b"\r") != chunk.count(b"\r\n"):  # quoting may span lines
                raw.seek(start)
                reader.slow(io.TextIOWrapper(raw, encoding="utf-8", newline=""), line)
                break
            if not reader.fast(chunk):
                reader.slow(io.StringIO(_decoded(chunk, path, line), newline=""), line)
            start += len(chunk)
            line += chunk.count(b"\n")
    return reader.arrays()


def _csv_header(raw: BinaryIO, path: Path, delimiter: str) -> list[str]:
    """The header row's cell names (stripped), a byte-order mark skipped; ``raw`` left at line 2."""
    first = raw.readline(_FIELD_LIMIT)
    if first.startswith(_BOM):
        first = first[len(_BOM) :]
    else:
        raw.seek(0)
        raw.readline(_FIELD_LIMIT)
    if first and not first.endswith(b"\n") and raw.read(1):
        raise ValueError(
            f"from_csv: expected a header row (line 1) shorter than {_FIELD_LIMIT:,} bytes in {path}."
        )
    try:
        rows = list(csv.reader([_decoded(first, path, 1).rstrip("\r\n")], delimiter=delimiter, strict=True))
    except csv.Error as error:
        raise ValueError(f"from_csv: expected a header row in line 1 of {path}; {error}.") from None
    return [h.strip() for h in rows[0]] if rows else []


def _decoded(chunk: bytes, path: Path, line: int) -> str:
    """``chunk`` (from ``line``) as UTF-8 text, or a ValueError naming the line of the first bad byte."""
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError as error:
        at = line + chunk.count(b"\n", 0, error.start)
        raise ValueError(
            f"from_csv: expected UTF-8 text in {path}; line {at} holds the byte {chunk[error.start]:#04x} "
            "(save the file as UTF-8)."
        ) from None


class _CsvColumns:
    """The columns of one CSV file being read: chunks parsed fast or line by line, appended in order."""

    def __init__(self, path: Path, header: list[str], columns: Mapping[str, bool], delimiter: str):
        self.path, self.header, self.delimiter = path, header, delimiter
        self.columns = dict(columns)
        self.index = {name: header.index(name) for name in columns}
        self.parts: dict[str, list[np.ndarray]] = {name: [] for name in columns}

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for name in list(self.parts):
            parts = self.parts.pop(name)  # each column's pieces freed as it is joined
            out[name] = np.concatenate(parts) if parts else np.empty(0)
        return out

    def fast(self, chunk: bytes) -> bool:
        """Parse ``chunk`` (whole lines) with Arrow's CSV reader; False where the line parser must judge.

        False for a byte outside the plain-number set, a line with another number of cells than the
        header (or only blanks and delimiters), a cell Arrow cannot read, and a missing or infinite
        value where the line parser would refuse it: nothing the line parser refuses passes here.
        """
        import pyarrow as pa  # CSV files only: not imported with twinfer.data
        import pyarrow.csv as pa_csv

        separator = self.delimiter.encode()
        if len(separator) != 1 or _FAST_BYTES[separator[0]]:
            return False
        allowed, blanks = _FAST_BYTES.copy(), np.zeros(256, bool)
        allowed[separator[0]] = blanks[[separator[0], *b" \t\r\n"]] = True
        data = np.frombuffer(chunk if chunk.endswith(b"\n") else chunk + b"\n", np.uint8)
        if not allowed[data].all():
            return False
        ends = np.flatnonzero(data == 10)
        starts = np.concatenate([[0], ends[:-1] + 1])
        if (ends - starts).max(initial=0) > _FIELD_LIMIT:
            return False
        cells = np.add.reduceat(data == separator[0], starts, dtype=np.int64) + 1
        blank = np.add.reduceat(~blanks[data], starts, dtype=np.int64) == 0
        if np.any(blank & (ends - starts > (data[np.maximum(ends - 1, 0)] == 13))):
            return False  # a line of blanks or delimiters: skipped by the line parser, not by Arrow
        if np.any(cells[~blank] != len(self.header)):
            return False
        names = list(self.columns)
        used = sorted({str(self.index[n]) for n in names})
        try:
            table = pa_csv.read_csv(
                io.BytesIO(chunk),
                read_options=pa_csv.ReadOptions(column_names=[str(j) for j in range(len(self.header))]),
                parse_options=pa_csv.ParseOptions(delimiter=self.delimiter, quote_char=False),
                convert_options=pa_csv.ConvertOptions(
                    column_types=dict.fromkeys(used, pa.float64()),
                    include_columns=used,
                    null_values=_NA_TOKENS,
                    strings_can_be_null=False,
                ),
                memory_pool=pa.system_memory_pool(),  # mimalloc's default reserves 1 GB of address space
            )
        except (pa.ArrowInvalid, ValueError):
            return False
        if table.num_rows != int(np.count_nonzero(~blank)):
            return False
        values = {n: table[str(self.index[n])].to_numpy(zero_copy_only=False) for n in names}
        for name, column in values.items():
            if np.isinf(column).any() or (not self.columns[name] and np.isnan(column).any()):
                return False
        for name, column in values.items():
            self.parts[name].append(column)
        return True

    def slow(self, text: Any, first: int) -> None:
        """Parse the lines of ``text`` (line ``first`` of the file onwards) with :mod:`csv`, strictly."""
        reader = csv.reader(text, delimiter=self.delimiter, strict=True)
        width, names = len(self.header), list(self.columns)
        rows: dict[str, array] = {name: array("d") for name in names}
        end = first - 1
        while True:
            line = end + 1
            try:
                row = next(reader, None)
            except csv.Error as error:
                end = first - 1 + reader.line_num
                raise ValueError(self._broken(str(error), line, end)) from None
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"from_csv: expected UTF-8 text in {self.path}; line {first + reader.line_num} holds "
                    f"the byte {error.object[error.start]:#04x} (save the file as UTF-8)."
                ) from None
            if row is None:
                break
            end = first - 1 + reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != width:
                raise ValueError(self._width(row, line))
            for name in names:
                rows[name].append(self._number(row[self.index[name]], name, line))
        for name in names:
            self.parts[name].append(np.frombuffer(rows[name], np.float64) if rows[name] else np.empty(0))

    def _broken(self, why: str, line: int, end: int) -> str:
        span = f"lines {line} to {end}" if end > line else f"line {line}"
        if "field limit" in why:
            why = (
                f'a field longer than {_FIELD_LIMIT:,} characters ({span}); an unterminated quote (") '
                "makes the rest of the file one field"
            )
        elif "end of data" in why:
            why = f'a quote (") opened in line {line} and never closed'
        return f"from_csv: expected CSV cells in line {line} of {self.path}; received {why}."

    def _width(self, row: list[str], line: int) -> str:
        width = len(self.header)
        if len(row) < width:
            gone = ", ".join(repr(h) for h in self.header[len(row) :])
            what = f"{len(row)}: no cell for column {len(row) + 1} ({gone} missing)"
        else:
            what = f"{len(row)}: column {width + 1} holds {row[width]!r} beyond the header"
        return (
            f"from_csv: expected {width} cells in line {line} of {self.path} (one per header column "
            f"{self.header}); received {what}. Mark a missing value with an empty cell between delimiters."
        )

    def _number(self, raw: str, name: str, line: int) -> float:
        """One cell as a float, NaN for a missing output value; a ValueError naming line and column."""
        cell = raw.strip()
        at = f"column {name!r}, line {line} of {self.path}"
        if cell.lower() in _MISSING:
            if not self.columns[name]:
                raise ValueError(
                    f"from_csv: expected a number in {at}; received a missing cell {cell!r} (only output "
                    "columns may have gaps)."
                )
            return np.nan
        try:
            if "_" in cell:  # float() reads "1_000" as 1000: a digit separator no CSV writer emits
                raise ValueError(cell)
            value = float(cell)
            if math.isnan(value) and not self.columns[name]:  # "-nan": float() reads it, quietly
                raise ValueError(cell)
        except ValueError:
            hint = " (no '_' between digits)" if "_" in cell else ""
            raise ValueError(f"from_csv: expected a number in {at}; received {cell!r}{hint}.") from None
        if math.isinf(value):
            raise ValueError(f"from_csv: expected a finite number in {at}; received {cell!r}.")
        return value
