"""Atomic file writes shared by every layer: a crash never leaves a half-written file.

The payload goes to a temporary file in the target folder, is flushed to disk, and is renamed over the
target (``os.replace`` is atomic on one filesystem).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def write_bytes(path: str | Path, payload: bytes) -> Path:
    """Write ``payload`` to ``path`` atomically; the old file, if any, survives a failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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
