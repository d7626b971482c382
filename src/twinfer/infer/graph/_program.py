"""The graph engines behind the :class:`~twinfer.infer.Program` contract: one step per measurement row.

Each engine already advances a carry by one time step (the message-passing engine's ``step``, the field
engine's ``step``, the banded filter's step); a :class:`GraphProgram` holds that step with its numbers,
turns a frame into the engine's input row (:func:`~twinfer.infer._program.input_pair`, the record's time
convention) and reads the estimate row out in the graph's global state order, the columns of the
:class:`~twinfer.infer.Estimate` the engine's whole-record run returns (:meth:`GraphProgram.run`).

References:
    compositional-inference paper, Alg. 1-3 (message passing); ``docs/design-banded.md``.

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from twinfer.data import Dataset
from twinfer.infer._estimate import Estimate
from twinfer.infer._program import Frame, Program, Row, input_pair
from twinfer.infer.graph._banded import BandedSetup, banded_result, banded_setup
from twinfer.infer.graph._field import FieldEngine
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._messages import Schedule
from twinfer.infer.graph._numbers import Compiled
from twinfer.infer.graph._results import _merged
from twinfer.infer.graph._run import compile as compile_engine
from twinfer.infer.graph._run import compiled_for, estimate_with, with_numbers


class Held:
    """A host object kept whole inside a Program's static fields (compared and hashed by identity)."""

    def __init__(self, value: Any) -> None:
        self.value = value


class GraphState(NamedTuple):
    """A graph engine's carry after k frames, the last frame's input, k, and the running sums."""

    carry: Any
    u: Any
    k: Any
    loglik: Any
    nis: Any


class GraphProgram(Program):
    """A compiled graph estimator (message passing, field or banded) stepped one frame at a time.

    ``numbers`` are the engine's array leaves; ``kind`` says which engine ``engine`` holds; ``index`` maps
    the engine's flat state vector (groups, members, columns) to the estimate's columns.
    """

    numbers: Any
    kind: str = eqx.field(static=True)
    engine: Held = eqx.field(static=True)
    index: tuple[int, ...] = eqx.field(static=True)
    flat: tuple[tuple[int, int, int], ...] = eqx.field(static=True)
    graph: Held = eqx.field(static=True)
    schedule: Schedule | None = eqx.field(static=True)
    x0: Any = None

    def init(self, u0: Any = None) -> GraphState:
        """The engine's carry at t_0 (each subsystem's prior); ``u0`` the input sampled with it."""
        u0 = jnp.zeros(len(self.input_names)) if u0 is None else jnp.asarray(u0, jnp.float64)
        zero = jnp.zeros((), jnp.float64)
        if self.kind == "banded":
            carry: Any = (jnp.asarray(self.x0), self.numbers[1])
        else:
            carry = self.engine.value.init(self.numbers)
        return GraphState(carry, u0, jnp.zeros((), jnp.int32), zero, zero)

    @eqx.filter_jit
    def step(self, state: GraphState, frame: Frame) -> tuple[GraphState, Row]:
        """One measurement row through the engine's step; the row in the graph's global state order."""
        mask = jnp.ones(jnp.shape(frame.y), bool) if frame.mask is None else frame.mask
        y = jnp.where(mask, frame.y, 0.0)
        pair = input_pair(state.u, frame.u, self.input_hold, self.alignment)
        carry, mean, std, loglik, nis, innov = self._engine_step(state.carry, pair, y, mask)
        idx = jnp.asarray(self.index, dtype=jnp.int32)
        mean, std = mean[idx], std[idx]
        ok = jnp.all(jnp.isfinite(mean)) & jnp.all(jnp.isfinite(std))
        new = GraphState(
            carry, jnp.asarray(frame.u, state.u.dtype), state.k + 1, state.loglik + loglik, state.nis + nis
        )
        return new, Row(mean, std, loglik, nis, ok, innov)

    def _engine_step(self, carry: Any, pair: Any, y: Any, mask: Any) -> tuple[Any, ...]:
        """``(carry, flat means, flat sds, loglik increment, nis increment, innovations)`` of one step.

        The innovations (each output's over its predicted sd, :class:`~twinfer.infer.Row`) come from the
        field engine; None from the others.
        """
        if self.kind == "messages":
            carry, (mu, ch, _, _, ll, nis) = self.engine.value.step(self.numbers, carry, (pair, y, mask))
            means = [m[:, :k] for m, (_, _, k) in zip(mu, self.flat, strict=True)]
            sds = [
                jnp.sqrt(jnp.einsum("gij,gij->gi", c[:, :k, :k], c[:, :k, :k]))
                for c, (_, _, k) in zip(ch, self.flat, strict=True)
            ]
            loglik = sum(jnp.sum(x) for x in ll)
            return carry, _concat(means), _concat(sds), loglik, sum(jnp.sum(x) for x in nis), None
        if self.kind == "field":
            carry, (mu, sd, _, innov) = self.engine.value.step(self.numbers, carry, (pair, y, mask))
            means = [m[:g] for m, (_, g, _) in zip(mu, self.flat, strict=True)]
            sds = [s[:g] for s, (_, g, _) in zip(sd, self.flat, strict=True)]
            zero = jnp.zeros((), jnp.float64)
            return carry, _concat(means), _concat(sds), zero, zero, innov
        setup: BandedSetup = self.engine.value
        seen = jnp.asarray(setup.outputs) >= 0
        safe = jnp.where(seen, jnp.asarray(setup.outputs), 0)
        inp = (pair, y[safe], mask[safe] & seen)
        carry, (mean, variance, loglik, maha) = setup.step(self.numbers[0], carry, inp)
        return carry, mean, jnp.sqrt(variance), loglik, maha, None

    def run(self, data: Dataset) -> Estimate:
        """The engine's whole-record run with this program's numbers: what ``twinfer.estimate`` returns."""
        graph: Graph = self.graph.value
        if self.kind == "banded":
            return banded_result(graph, data, self.engine.value, self.numbers, jnp.asarray(self.x0))
        numbers = None if self.kind == "field" else self.numbers  # the field engine runs its own numbers
        return estimate_with(graph, data, self.schedule, compiled=self.engine.value.compiled, numbers=numbers)

    def with_numbers(self, graph: Graph) -> GraphProgram:
        """The same compiled program with the numbers of ``graph``, without a recompile.

        ``graph`` has this program's structure (new parameters, noise levels or priors); message passing.

        Raises:
            ValueError: for another engine, or a graph of another structure.

        """
        if self.kind != "messages":
            raise ValueError(
                f"GraphProgram.with_numbers: expected a message-passing program; this is {self.kind}."
            )
        compiled = self.engine.value.compiled
        if compiled_for(graph, self.schedule or Schedule()) is not compiled:
            raise ValueError(
                f"GraphProgram.with_numbers graph: expected a graph of this program's structure; received "
                f"{graph.name!r}, which compiles to another program."
            )
        return eqx.tree_at(lambda p: p.numbers, self, with_numbers(compiled, graph))


def _concat(parts: list[Any]) -> Any:
    return jnp.concatenate([p.reshape(-1) for p in parts])


class _Engine:
    """A compiled graph's engine (message passing or field): its ``init`` and ``step``, and the program."""

    def __init__(self, compiled: Compiled) -> None:
        self.compiled = compiled
        self.init: Callable[..., Any] = compiled.engine.init
        self.step: Callable[..., Any] = compiled.engine.step


def _group_layout(
    compiled: Compiled, widths: Sequence[int]
) -> tuple[dict[str, tuple[int, int, int]], tuple[tuple[int, int, int], ...]]:
    """Where each subsystem's estimated block sits in a grouped engine's stacked state.

    ``widths[g]``: the estimated columns of one member of group ``g``. Returns ``blocks`` (subsystem name
    -> (group, member, width)) and ``flat`` ((group, members, width) per group, in group order).
    """
    blocks = {
        compiled.names[i]: (gi, j, widths[gi])
        for gi, g in enumerate(compiled.groups)
        for j, i in enumerate(g.members)
    }
    return blocks, tuple((gi, len(g.members), widths[gi]) for gi, g in enumerate(compiled.groups))


def graph_program(
    graph: Graph,
    kind: str,
    *,
    schedule: Schedule | None = None,
    bandwidth: int = 2,
    banded: dict[str, Any] | None = None,
    data: Dataset | None = None,
    input_hold: str = "zoh",
    alignment: str = "sampled",
) -> GraphProgram:
    """The :class:`GraphProgram` of ``graph`` for the engine ``kind``.

    ``kind``: ``"messages"``, ``"field"`` or ``"banded"``; ``data``: a record to take the time convention
    (and, for banded, the window structure) from.
    """
    if data is not None:
        input_hold, alignment = data.input_hold, data.alignment
    taken = (data.input_names, data.output_names) if data is not None else (None, None)
    inputs = graph.input_names if graph.input_names is not None else taken[0]
    outputs = graph.output_names if graph.output_names is not None else taken[1]
    if inputs is None or outputs is None:
        raise ValueError(
            f"compile graph {graph.name!r}: expected a graph with input and output names (Graph.from_model) "
            "or data= to take them from; received neither."
        )
    x0 = None
    if kind == "messages":
        compiled = compiled_for(graph, schedule or Schedule())
        numbers: Any = with_numbers(compiled, graph)
        engine: Any = _Engine(compiled)
        blocks, flat = _group_layout(
            compiled,
            [numbers.groups[gi]["x0"].shape[-1] - g.template.memory for gi, g in enumerate(compiled.groups)],
        )
    elif kind == "field":
        compiled = compile_engine(graph)
        if not isinstance(compiled.engine, FieldEngine):
            raise ValueError(
                f"compile graph {graph.name!r}: expected a graph coupled by a field for the field engine."
            )
        numbers = compiled.numbers
        engine = _Engine(compiled)
        blocks, flat = _group_layout(compiled, [np.shape(group["x0"])[-1] for group in numbers.groups])
    elif kind == "banded":
        if data is None:
            raise ValueError(
                "compile Banded: expected data= (the banded filter finds its window structure on a record)."
            )
        setup = banded_setup(graph, data, bandwidth, **(banded or {}))
        numbers = setup.numbers
        engine = setup
        x0 = setup.x0
        blocks = {s.name: (0, 0, c - a) for s, (a, c) in zip(setup.subs, setup.slices, strict=True)}
        offsets = {s.name: a for s, (a, _) in zip(setup.subs, setup.slices, strict=True)}
        flat = ((0, 1, int(setup.slices[-1][1])),)
    else:
        raise ValueError(f"graph_program kind: expected 'messages', 'field' or 'banded'; received {kind!r}.")
    # the global columns, by name, as the engine's whole-record run merges them
    dummy = {name: (np.zeros((1, k)), np.zeros((1, k)), 0.0) for name, (_, _, k) in blocks.items()}
    merged = _merged(graph, dummy, None, np.zeros(1))
    group_start = np.cumsum([0] + [members * k for _, members, k in flat])
    position: dict[str, int] = {}
    subs, _ = graph.flatten()
    for s in subs:
        gi, j, k = blocks[s.name]
        start = offsets[s.name] if kind == "banded" else int(group_start[gi]) + j * k
        for c, name in enumerate(s.names[: s.n_estimated]):
            if not name.startswith("~"):
                position[name] = start + c
    index = tuple(position[name] for name in merged.state_names)
    return GraphProgram(
        state_names=merged.state_names,
        parameters=merged.parameters,
        input_names=tuple(inputs),
        output_names=tuple(outputs),
        input_hold=input_hold,  # type: ignore[arg-type]
        alignment=alignment,  # type: ignore[arg-type]
        numbers=numbers,
        kind=kind,
        engine=Held(engine),
        index=index,
        flat=flat,
        graph=Held(graph),
        schedule=schedule,
        x0=x0,
    )
