"""Named access to the scalar entries of a parameter dictionary.

A model's ``params`` is a flat dict from a group name to a scalar or 1-D array. Scalar names are the group
name for scalars (``"sigma"``) and the group name with a 1-based index for vectors (``"k4"`` is
``params["k"][3]``). Groups whose names end in a digit are not allowed, so names are unambiguous.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

_NAME = re.compile(r"^(?P<group>.*?[^0-9])(?P<index>[0-9]+)?$")


def _group_sizes(params: Mapping[str, Any]) -> dict[str, int | None]:
    sizes: dict[str, int | None] = {}
    for group, value in params.items():
        if group and group[-1].isdigit():
            raise ValueError(
                f"Parameter group {group!r} ends in a digit; expected a name like 'k' or 'kappa' so that "
                f"'{group}1' is unambiguous."
            )
        shape = np.shape(value)
        if len(shape) > 1:
            raise ValueError(
                f"Parameter group {group!r} must be a scalar or a 1-D array; received shape {shape}."
            )
        sizes[group] = None if len(shape) == 0 else int(shape[0])
    return sizes


def param_names(params: Mapping[str, Any]) -> tuple[str, ...]:
    """All scalar parameter names, group by group in dict order."""
    names: list[str] = []
    for group, size in _group_sizes(params).items():
        names.extend([group] if size is None else [f"{group}{i + 1}" for i in range(size)])
    return tuple(names)


def locate(params: Mapping[str, Any], name: str) -> tuple[str, int | None]:
    """``(group, index)`` of a scalar parameter name; index is None for a scalar group.

    Raises:
        KeyError: naming the parameter and the allowed names.

    """
    sizes = _group_sizes(params)
    if name in sizes and sizes[name] is None:
        return name, None
    match = _NAME.match(name)
    if match and match["index"] is not None and match["group"] in sizes:
        size = sizes[match["group"]]
        index = int(match["index"]) - 1
        if size is not None and 0 <= index < size:
            return match["group"], index
    raise KeyError(f"Unknown parameter {name!r}; expected one of {', '.join(param_names(params))}.")


def get_param(params: Mapping[str, Any], name: str) -> Any:
    """The value of one scalar parameter by name."""
    group, index = locate(params, name)
    value = params[group]
    return value if index is None else value[index]


def set_param_vector(params: Mapping[str, Any], names: Sequence[str], values: Any) -> dict[str, Any]:
    """A new parameter dict with the named scalars taken from the vector ``values`` (one per name).

    :func:`set_params` of ``{names[i]: values[i]}``, with one update per group instead of one per name: a
    group whose every entry is named, in order, is a slice of ``values``; otherwise one gather and one
    scatter. Inside a transition that is differentiated and scanned (an augmented EKF's, a PN
    likelihood's) this keeps the program small; the values are the same.
    """
    values = jnp.asarray(values)
    if values.shape != (len(names),):
        raise ValueError(
            f"set_param_vector values: expected shape ({len(names)},), one per name; received {values.shape}."
        )
    sizes = _group_sizes(params)
    groups: dict[str, list[tuple[int, int | None]]] = {}
    for i, name in enumerate(names):
        group, index = locate(params, name)
        groups.setdefault(group, []).append((i, index))
    out = dict(params)
    for group, pairs in groups.items():
        positions = [i for i, _ in pairs]
        if pairs[0][1] is None:  # a scalar group (named once: locate would not repeat it)
            out[group] = values[positions[-1]].astype(jnp.result_type(float))
            continue
        indices = [j for _, j in pairs]
        run = positions == list(range(positions[0], positions[0] + len(positions)))
        picked = (
            values[positions[0] : positions[0] + len(positions)] if run else values[np.asarray(positions)]
        )
        if indices == list(range(sizes[group] or 0)):
            out[group] = picked.astype(jnp.result_type(out[group], picked))
        else:
            out[group] = jnp.asarray(out[group]).at[np.asarray(indices)].set(picked)
    return out


def set_params(params: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """A new parameter dict with the named scalars replaced (works on traced values)."""
    out = dict(params)
    for name, new in updates.items():
        group, index = locate(params, name)
        if index is None:
            out[group] = jnp.asarray(new, dtype=jnp.result_type(float))
        else:
            out[group] = jnp.asarray(out[group]).at[index].set(new)
    return out
