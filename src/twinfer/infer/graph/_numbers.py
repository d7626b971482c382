"""What a compiled graph is stacked by and runs on: its groups, its numbers, and the compiled program.

Subsystems with the same functions, shapes and ports form a group, stacked along a member axis and
vmapped; interfaces with the same law form an edge group. A group's static part (its functions and
index tables) is compiled in; everything numeric (parameters, initial values, noise covariances and
their factors, data columns, interface gammas) is an argument of the compiled program, so graphs that
differ only in numbers share one program (:data:`twinfer.infer.graph._cache.COMPILED`).

References:
    Ghorbani & Hackl, section 1 (subsystems, interfaces), Alg. 1-3 (specs/compositional-inference.md 1.1).

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer.gaussian import UnscentedWeights, psd_factor
from twinfer.infer.graph._parts import Field, Interface, Subsystem
from twinfer.sim import Dynamics


class _Template(NamedTuple):
    """The static part shared by the stacked members of a group."""

    transition: Callable[..., Any]
    output: Callable[..., Any]
    estimator: str
    weights: UnscentedWeights
    n_msg: int
    innovation: Callable[[Any, Any], Any] | None = None
    dynamics: Dynamics | None = None
    memory: int = 0  # trailing mean-only states (Subsystem.memory)


class _Group(NamedTuple):
    template: _Template
    members: tuple[int, ...]
    port_idx: np.ndarray  # (p,) state indices of the concatenated ports


class _EdgeGroup(NamedTuple):
    law: Callable[[Any, Any, Any], Any]
    members: tuple[int, ...]
    send: np.ndarray  # (E, p_s) into the flat interface vector
    recv: np.ndarray  # (E, p_r)
    target: np.ndarray  # (E, m) into the flat message vector
    split: bool = False  # rule "split": the receiver evaluates the law at its own sigma points
    consider: bool = False  # "split" and probabilistic: the sender's error is a consider state
    shared: bool = False  # rule "shared": its correlated part read through the receiver's deviation


class _FieldTemplate(NamedTuple):
    """The static part of a group: the members' functions and the field's indices into their state."""

    transition: Callable[..., Any]
    output: Any  # a function, or a matrix H as a nested tuple
    estimator: str
    weights: UnscentedWeights
    innovation: Callable[[Any, Any], Any] | None
    dynamics: Dynamics | None
    port_idx: np.ndarray  # (S,) state indices of the field variables
    slots: np.ndarray  # (S k,) message slots, variable-major
    rate_idx: np.ndarray | None  # (S,)
    drives_idx: np.ndarray | None  # (S,)
    n_msg: int
    diag_q: bool  # every member's Q diagonal: injected variance adds to it (no extra factor columns)
    diag_r: bool  # every member's R diagonal: independent sensors (per-sensor updates)
    kernel: str  # the UKF's: "gram" when every member's Q and R are positive-definite diagonals


class _FieldGroup(NamedTuple):
    template: _FieldTemplate
    members: tuple[int, ...]  # indices into the compiled names
    n_pad: int  # inert members appended (an even split over devices)
    substeps: int


class Engine(Protocol):
    """What the shared code reads of a compiled graph's engine (message passing or field).

    ``init(numbers) -> carry``, ``step(numbers, carry, (u, y, mask)) -> (carry, estimates)`` and ``scan``
    over a record are each engine's own; its groups say which subsystems it stacked together.
    """

    @property
    def groups(self) -> tuple[Any, ...]: ...

    @property
    def edge_groups(self) -> tuple[_EdgeGroup, ...]: ...

    def init(self, num: Any) -> Any: ...

    def step(self, num: Any, carry: Any, inp: Any) -> Any: ...


@dataclasses.dataclass(frozen=True)
class Compiled:
    """A graph compiled for a schedule: ``step`` (jitted, pure) and ``scan`` over a whole record."""

    names: tuple[str, ...]
    engine: Engine
    numbers: Any  # Numbers, or FieldNumbers for a graph coupled by a field
    step: Callable[..., Any]
    scan: Callable[..., Any]

    @property
    def groups(self) -> tuple[Any, ...]:
        return self.engine.groups

    @property
    def edge_groups(self) -> tuple[_EdgeGroup, ...]:
        return self.engine.edge_groups


class Numbers(eqx.Module):
    """Everything numeric a compiled graph runs on (may change between calls without retracing)."""

    groups: tuple[dict[str, Any], ...]
    gammas: tuple[Any, ...]
    probabilistic: tuple[Any, ...]  # (E_g,) 1.0 where the edge's message is probabilistic


class FieldNumbers(eqx.Module):
    """Everything numeric a compiled field graph runs on.

    Per group, the members' stacked numbers; per receiving group, its incoming edges (flat register index
    of the sender, flat receiving variable, weight), sorted by receiving variable.
    """

    groups: tuple[dict[str, Any], ...]
    edges: tuple[dict[str, Any], ...]


def numbers_of(
    subs: list[Subsystem], edges: list[Interface], groups: Sequence[_Group], edge_groups: Sequence[_EdgeGroup]
) -> Numbers:
    """Stack the numeric fields of the members of each group and edge group."""
    gs = []
    for g in groups:
        arr = _member_arrays([subs[i] for i in g.members])
        gs.append({**arr, **{f"chol_{k}": _factors(arr[k]) for k in ("P0", "Q", "R")}})
    gammas = tuple(_stack([edges[k].gamma for k in eg.members]) for eg in edge_groups)
    prob = tuple(
        np.asarray([1.0 if edges[k].kind == "probabilistic" else 0.0 for k in eg.members])
        for eg in edge_groups
    )
    return Numbers(tuple(gs), gammas, prob)


def _factors(stacked: Any) -> Any:
    """Lower factors of a stack of covariances; NaN for one that is not PSD (named by ``run``'s check)."""
    try:
        return psd_factor(stacked)
    except ValueError:
        return np.stack([_one_factor(m) for m in np.asarray(stacked)])


def _one_factor(m: np.ndarray) -> np.ndarray:
    try:
        return psd_factor(m)
    except ValueError:
        return np.full_like(m, np.nan)


def _stack_leaves(xs: tuple[Any, ...]) -> Any:
    """Stack leaves on the host (no device op to compile), or with jnp when they are traced.

    Integer and boolean leaves (data-column indices) keep their type; everything else becomes float64.
    """
    try:
        host = [np.asarray(x) for x in xs]
    except jax.errors.TracerArrayConversionError:
        return jnp.stack([jnp.asarray(x, jnp.float64) for x in xs])
    dtype = host[0].dtype if host[0].dtype.kind in "iub" else np.float64
    return np.stack([h.astype(dtype) for h in host])


def field_numbers(
    subs: list[Subsystem], field: Field, groups: Sequence[_FieldGroup], index: dict[str, int]
) -> FieldNumbers:
    """Stack each group's numbers and sort the field's edges by receiving group and variable."""
    gs = []
    where: dict[int, tuple[int, int]] = {}  # subsystem -> (group, position)
    offsets, offset = [], 0  # flat register offset of each group (padded)
    for gi, g in enumerate(groups):
        for pos, i in enumerate(g.members):
            where[i] = (gi, pos)
        offsets.append(offset)
        offset += (len(g.members) + g.n_pad) * g.template.port_idx.size
        arr = _member_arrays([subs[i] for i in g.members])
        q, r = arr["Q"], arr["R"]
        arr["chol_P0"] = _factors(arr["P0"])
        if g.template.diag_q:  # the variances, so that an injected variance adds to them
            arr["q_diag"] = np.diagonal(q, axis1=1, axis2=2).copy()
        else:
            arr["chol_Q"] = _factors(q)
        arr["chol_R"] = np.sqrt(np.diagonal(r, axis1=1, axis2=2)) if g.template.diag_r else _factors(r)
        gs.append(arr)
    member = [index[n] for n in field.members]
    unknown = [n for n in field.members if n not in index]
    if unknown:
        raise ValueError(f"Field {field.name!r} members: no such subsystems {unknown}; known: {list(index)}.")
    send_sub = np.asarray(member, dtype=int)[field.sender] if field.n_edges else np.zeros(0, int)
    recv_sub = np.asarray(member, dtype=int)[field.receiver] if field.n_edges else np.zeros(0, int)
    edges = []
    for gi, g in enumerate(groups):
        s_var = g.template.port_idx.size
        pick = np.asarray([where[int(i)][0] == gi for i in recv_sub], dtype=bool)
        src = np.asarray(
            [
                offsets[where[int(i)][0]]
                + where[int(i)][1] * groups[where[int(i)][0]].template.port_idx.size
                + v
                for i, v in zip(send_sub[pick], field.sender_var[pick], strict=True)
            ],
            dtype=int,
        )
        dst = np.asarray(
            [
                where[int(i)][1] * s_var + v
                for i, v in zip(recv_sub[pick], field.receiver_var[pick], strict=True)
            ],
            dtype=int,
        )
        order = np.argsort(dst, kind="stable")
        edges.append({"src": src[order], "dst": dst[order], "weight": field.weight[pick][order]})
    return FieldNumbers(tuple(gs), tuple(edges))


def _stack(items: list[Any]) -> Any:
    """The items' pytrees stacked leaf by leaf along a new leading (member) axis."""
    return jax.tree_util.tree_map(lambda *xs: _stack_leaves(xs), *items)


def _member_arrays(ms: list[Subsystem]) -> dict[str, Any]:
    """The members' stacked ``params``, ``x0``, ``P0``, ``Q``, ``R`` and data columns (-1: none)."""
    return {
        "params": _stack([s.params for s in ms]),
        "x0": _stack([s.x0 for s in ms]),
        "P0": _stack([s.P0 for s in ms]),
        "Q": _stack([s.Q for s in ms]),
        "R": _stack([s.R for s in ms]),
        "inputs": np.asarray([s.inputs for s in ms], dtype=int).reshape(len(ms), -1),
        "outputs": np.asarray([s.outputs for s in ms], dtype=int).reshape(len(ms), -1),
    }


def _columns(values: Any, cols: Any) -> Any:
    """``values[cols]`` with column -1 read as 0 (an input the data does not carry, e.g. an unforced mass)."""
    if values.shape[0] == 0:
        return jnp.zeros(jnp.shape(cols), values.dtype)
    return jnp.where(cols >= 0, values[jnp.maximum(cols, 0)], 0.0)
