"""Atomic file writes shared by every layer: a crash never leaves a half-written file.

The payload goes to a temporary file in the target folder, is flushed to disk, and is renamed over the
target (``os.replace`` is atomic on one filesystem). The file gets the mode a plain ``open(path, "w")``
would give it: the old file's mode when it replaces one, else ``0o666`` less the process umask (the
temporary file's private ``0o600`` would hide results from colleagues).
"""

from __future__ import annotations

import io
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def umask() -> int:
    """The process umask, read without changing it where Linux reports it (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere the only way to read it is to set it (and put it back at once)
    os.umask(mask)
    return mask


def _file_mode(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~umask()


def write_bytes(path: str | Path, payload: bytes) -> Path:
    """Write ``payload`` to ``path`` atomically; the old file, if any, survives a failure.

    The new file has the old file's permissions, or those the umask gives a new file (``0o666 & ~umask``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _file_mode(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_npz(path: str | Path, arrays: Mapping[str, Any]) -> Path:
    """Write a compressed ``.npz`` (no pickled objects) atomically, to exactly ``path``."""
    buffer = io.BytesIO()
    payload: dict[str, Any] = {k: np.asarray(v) for k, v in arrays.items()}
    np.savez_compressed(buffer, allow_pickle=False, **payload)
    return write_bytes(path, buffer.getvalue())
