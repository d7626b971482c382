"""Trajectory container and input checks shared by the simulators."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class Trajectory(NamedTuple):
    """Simulated times, states and outputs (row k belongs to ``ts[k]``)."""

    ts: Any
    states: Any
    outputs: Any


def check_array(name: str, value: Any, shape: tuple[int, ...], hint: str = "") -> Any:
    """A finite float64 array of the expected shape, or a ValueError naming ``name``.

    Traced values (under ``jit`` or ``vmap``) have only their shape checked; the caller is then itself
    inside a transformation that validated its concrete inputs.
    """
    if _is_traced(value):
        if value.shape != shape:
            raise ValueError(f"{name}: expected shape {shape}{hint}; received {value.shape}.")
        return value
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}{hint}; received {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0].tolist()
        raise ValueError(f"{name}: expected finite values; non-finite entry at index {bad}.")
    return arr


def _is_traced(value: Any) -> bool:
    """True for abstract values inside ``jit``/``vmap`` (no concrete data to check)."""
    from jax.core import Tracer  # pyright: ignore[reportAttributeAccessIssue]

    return isinstance(value, Tracer)
