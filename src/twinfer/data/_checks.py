"""Validation helpers for :class:`twinfer.data.Dataset`: every failure names field, expected, received."""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from twinfer._atomic import not_regular
from twinfer._atomic import open_regular as atomic_open_regular

MAX_WHOLE_FILE_BYTES = 4 * 2**30
"""Largest data file (4 GiB) that twinfer reads whole into memory: ``.npz`` (its entries uncompressed),
Parquet, netCDF, pandapower JSON and MATPOWER files. A CSV file is read in a stream, holding only the
columns asked for, so it has no such limit. A larger table: write it as CSV, or split the record."""


def did_you_mean(received: Any, allowed: Iterable[str]) -> str:
    """``" (did you mean 'noise_sd'?)"``: the allowed name closest to ``received`` (case aside), or ``""``."""
    if not isinstance(received, str):
        return ""
    lower = {a.lower(): a for a in allowed}
    close = difflib.get_close_matches(received.lower(), list(lower), n=1, cutoff=0.6)
    return f" (did you mean {lower[close[0]]!r}?)" if close else ""


def fail(field: str, expected: str, received: Any) -> ValueError:
    """A ``ValueError`` in the house format: ``Dataset.<field>: expected ...; received ....``."""
    return ValueError(f"Dataset.{field}: expected {expected}; received {received}.")


def float64_array(value: Any, field: str, ndim: int) -> np.ndarray:
    """A read-only float64 copy of ``value`` with ``ndim`` dimensions.

    Integer arrays are converted (exactly, below 2**53). Float16/float32 arrays are refused rather
    than widened: their lost digits cannot be recovered, and DESIGN.md forbids silently computing
    from them as if they were float64. Booleans, complex numbers and objects are refused.
    """
    array = as_array(value, field, "a real float64 array")
    kind = array.dtype.kind
    if kind == "f" and array.dtype != np.float64:
        raise fail(
            field,
            "a float64 array",
            f"dtype {array.dtype}; convert with np.asarray(x, dtype=np.float64) if the loss of "
            "precision is acceptable, or better, produce the data in float64",
        )
    if kind not in "fiu":
        raise fail(field, "a real float64 array", f"dtype {array.dtype}")
    if kind in "iu" and array.size and np.abs(array.astype(np.float64)).max() > 2.0**53:
        raise fail(field, "integers of magnitude <= 2**53 (exact in float64)", f"max {np.abs(array).max()}")
    if array.ndim != ndim:
        hint = " (reshape a single channel with x.reshape(-1, 1))" if ndim == 2 and array.ndim == 1 else ""
        raise fail(field, f"a {ndim}-D array{hint}", f"shape {array.shape}")
    out = np.array(array, dtype=np.float64, copy=True)
    out.flags.writeable = False
    return out


def as_array(value: Any, field: str, expected: str) -> np.ndarray:
    """``np.asarray(value)``, with a ragged nested sequence reported in the house format."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as error:
        raise fail(field, f"{expected} (a rectangular array)", f"{type(value).__name__}: {error}") from None


def first_bad(array: Any, bad: np.ndarray | None = None) -> tuple[tuple[int, ...], Any] | None:
    """Index and value of the first entry of ``array`` flagged by ``bad`` (default: non-finite); None."""
    array = np.asarray(array)
    flags = ~np.isfinite(array) if bad is None else bad
    if not flags.any():
        return None
    index = tuple(int(i) for i in np.argwhere(flags)[0])
    return index, array[index]


def check_finite(array: np.ndarray, field: str, where: np.ndarray | None = None) -> None:
    """Raise naming the first non-finite entry of ``array`` (restricted to ``where`` if given)."""
    bad = ~np.isfinite(array)
    if where is not None:
        bad &= where
    found = first_bad(array, bad)
    if found is not None:
        index, value = found
        if array.ndim == 2:
            row, col = index
            at = f"{field}[{row}, {col}] (row {row}, column {col})"
        else:
            at = f"{field}[{index[0]}]"
        raise fail(
            field,
            "finite values" + (" where observed" if where is not None else ""),
            f"{value} at {at}",
        )


def check_rows(array: np.ndarray, field: str, n_steps: int) -> None:
    """Raise unless ``array`` has one row per time step."""
    if array.shape[0] != n_steps:
        tail = ", ".join(["n"] + [str(s) for s in array.shape[2:]]) if array.ndim > 1 else ""
        expected = f"shape ({n_steps}{', ' + tail if tail else ''}) to match times ({n_steps},)"
        raise fail(field, expected, str(array.shape))


def names(value: Iterable[str] | None, field: str, width: int, prefix: str) -> tuple[str, ...]:
    """Validated channel names: ``width`` unique non-empty strings, default ``prefix1..``."""
    if value is None:
        return tuple(f"{prefix}{i + 1}" for i in range(width))
    if isinstance(value, str):
        raise fail(field, "a sequence of names, not one string", repr(value))
    if not isinstance(value, Iterable):
        raise fail(field, "a sequence of names", repr(value))
    result = tuple(value)
    if len(result) != width:
        raise fail(field, f"{width} names (one per column)", f"{len(result)}: {result}")
    for name in result:
        if not isinstance(name, str) or not name:
            raise fail(field, "non-empty strings", repr(name))
    duplicates = sorted({n for n in result if result.count(n) > 1})
    if duplicates:
        raise fail(field, "unique names", f"duplicates {duplicates}")
    return result


def truth_params(value: Mapping[str, Any] | None) -> dict[str, float]:
    """Validated ``{name: finite float}``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail("truth_params", "a mapping from parameter name to float", type(value).__name__)
    out: dict[str, float] = {}
    for key, raw in value.items():
        if not isinstance(key, str) or not key:
            raise fail("truth_params", "non-empty string keys", repr(key))
        if np.ndim(raw) != 0 or isinstance(raw, bool | str):
            raise fail("truth_params", f"a scalar number for {key!r}", repr(raw))
        number = float(raw)
        if not math.isfinite(number):
            raise fail("truth_params", f"a finite value for {key!r}", number)
        out[key] = number
    return out


def metadata_json(value: Mapping[str, Any] | None) -> str:
    """``value`` as canonical JSON text; raises if it is not a JSON-serialisable mapping."""
    if value is None:
        return "{}"
    if not isinstance(value, Mapping):
        raise fail("metadata", "a JSON-serialisable dict", type(value).__name__)
    try:
        text = json.dumps(dict(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise fail("metadata", "a JSON-serialisable dict (str keys; no NaN/inf)", str(error)) from None
    if json.loads(text) != dict(value):
        raise fail(
            "metadata",
            "a dict that survives a JSON round trip (str keys, lists not tuples)",
            repr(dict(value)),
        )
    return text


def open_regular(path: str | Path, where: str, *, whole: bool = True) -> BinaryIO:
    """``path`` opened for binary reading, refused (a ValueError) unless it is a regular file.

    :func:`twinfer._atomic.open_regular` (opened without blocking, checked on the open descriptor after
    links are followed: a FIFO is never waited on, ``/dev/zero`` never read). With ``whole`` (the file
    is read whole into memory), a file larger than :data:`MAX_WHOLE_FILE_BYTES` is refused too.

    Raises:
        OSError: for a file that does not exist or cannot be opened (as :func:`open`).
        ValueError: naming ``where``, the path and what it is.

    """
    try:
        handle = atomic_open_regular(path)
    except ValueError as error:
        raise ValueError(f"{where}: {_refusal(path, str(error))}") from None
    try:
        _check_size(os.fstat(handle.fileno()), Path(path), where, whole)
    except BaseException:
        handle.close()
        raise
    return handle


def regular_file(path: str | Path, where: str, *, whole: bool = True) -> Path:
    """``path`` if it names a regular file (after links), else a ValueError; for readers that open it.

    As :func:`open_regular`, from the file's status alone (a FIFO is not opened).
    """
    info = os.stat(path)
    what = not_regular(path, info)
    if what:
        raise ValueError(f"{where}: {_refusal(path, f'expected a regular file; received {what}')}")
    _check_size(info, Path(path), where, whole)
    return Path(path)


def _refusal(path: str | Path, reason: str) -> str:
    """``reason`` (:func:`twinfer._atomic.open_regular`'s) for a data file, with the path and the remedy."""
    reason = reason.replace(
        "expected a regular file; received ", f"expected a regular data file; received {str(path)!r}, "
    )
    return f"{reason}. Copy the data into a file first."


def _check_size(info: os.stat_result, path: Path, where: str, whole: bool) -> None:
    if whole and info.st_size > MAX_WHOLE_FILE_BYTES:
        raise ValueError(f"{where}: {too_large(path, info.st_size)}")


def too_large(path: Path, size: int) -> str:
    """The refusal of a file of ``size`` bytes above :data:`MAX_WHOLE_FILE_BYTES`, with what to do."""
    return (
        f"expected a file of at most {MAX_WHOLE_FILE_BYTES:,} bytes (MAX_WHOLE_FILE_BYTES: the most twinfer "
        f"reads whole into memory); received {str(path)!r} of {size:,} bytes. Write the table as CSV (read "
        "in a stream, only the columns asked for) or split the record"
    )
