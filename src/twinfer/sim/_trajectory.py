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


def any_traced(*trees: Any) -> bool:
    """True when a leaf of the pytrees is traced (inside ``jit``/``vmap``/``grad``: nothing to inspect)."""
    import jax

    return any(_is_traced(leaf) for leaf in jax.tree_util.tree_leaves(trees))


def check_key(name: str, key: Any) -> Any:
    """A JAX PRNG key (a typed ``jax.random.key`` or a legacy ``uint32[2]``), or a TypeError naming ``name``.

    ``0`` or a seed where a key belongs otherwise fails deep inside ``jax.random`` with a message about
    dtypes that names no argument.
    """
    import jax

    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise TypeError(
                f"{name}: expected one PRNG key (shape ()); received a batch of shape {key.shape}."
            )
        return key
    if _is_traced(key) or (
        isinstance(key, np.ndarray | jax.Array) and key.dtype == np.uint32 and key.shape == (2,)
    ):
        return key
    shown = repr(key) if not hasattr(key, "shape") else f"an array of dtype {key.dtype} and shape {key.shape}"
    raise TypeError(
        f"{name}: expected a JAX PRNG key, e.g. jax.random.key(0) (the seed inside it); received {shown}."
    )


def _is_traced(value: Any) -> bool:
    """True for abstract values inside ``jit``/``vmap`` (no concrete data to check)."""
    from jax.core import Tracer  # pyright: ignore[reportAttributeAccessIssue]

    return isinstance(value, Tracer)
