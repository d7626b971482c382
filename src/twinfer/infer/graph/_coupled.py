"""Models coupled through their inputs and outputs: an FMU and native models as subsystems of one graph.

:class:`Coupled` joins named models (a :class:`~twinfer.models.FMU`, a :class:`~twinfer.models.Chain`,
any :class:`~twinfer.models.AbstractModel`) by linear links: an input of one part is a weighted sum of
outputs or states of the parts (the model-combination paper's connection equations, eq. 11, with
``upsilon = W gamma``; a coupling spring between two masses is four links per side). The result is one
model (states, inputs, outputs and parameters named ``"<part>.<name>"``) that declares its interface
coupling (:attr:`Coupled.connections`: which states of the other parts each part's equations read), so
:meth:`twinfer.infer.graph.Graph.from_model` cuts it along :attr:`Coupled.partition` into one subsystem per
part, each with its own estimator (``"none"`` makes a part a deterministic node), exchanging the linked
states as messages (:func:`coupled_graph`). An FMU part runs through its callbacks inside its subsystem's
filter; its Jacobians (the structure check of :func:`~twinfer.infer.graph.model_graph`, an EKF) come from
its ``custom_jvp``.

A link's source may not feed through from an input that links drive (an algebraic loop, which a
subsystem cannot resolve from messages): the sources are evaluated with the linked inputs at zero, and
:class:`Coupled` checks at three random points that they do not depend on them
(:class:`CoupledLoopError`).

References:
    Thummerer & Mikelsons, model-combination paper, eqs. (9)-(11) (systems closed by linear connection
    equations). Ghorbani & Hackl, "Subsystem structure as an inferential resource", section 1, SI
    (S1)-(S4) (subsystems, messages as interface variables). Modelica Association, Functional Mock-up
    Interface 2.0.4 (2022), section 3 (a Model Exchange FMU's inputs, outputs and states).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Unpack

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferValueError
from twinfer.infer.filters._augment import Augmented
from twinfer.infer.graph._chain import GraphKeywords, _values
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._model import _Group, model_graph
from twinfer.models import AbstractModel, Connection, CoSimulationFMU
from twinfer.models._base import Input, Output, Params, State
from twinfer.sim import GraphNode


class CoupledError(TwinferValueError):
    """A :class:`Coupled` model given parts or links it cannot join (names, sizes, shapes)."""


class CoupledLoopError(CoupledError):
    """A link's source depends on an input that links drive: an algebraic loop between parts."""


class Link(NamedTuple):
    """``target += gain * source``: an input of a part driven by an output or a state of a part.

    Attributes:
        target: ``"<part>.<input name>"``.
        source: ``"<part>.<output name>"`` (read through the part's :meth:`output`) or
            ``"<part>.<state name>"`` (read from the state; outputs are looked up first).
        gain: the weight, a known number.

    """

    target: str
    source: str
    gain: float = 1.0


class _Source(NamedTuple):
    part: int
    index: int
    is_output: bool


def _split(name: str, parts: Sequence[str], where: str) -> tuple[int, str]:
    part, dot, local = name.partition(".")
    if not dot or part not in parts:
        raise CoupledError(
            f"Coupled {where}: expected '<part>.<name>' with a part in {tuple(parts)}; received {name!r}."
        )
    return list(parts).index(part), local


class Coupled(AbstractModel):
    """Named models joined by linear input links, as one model cut into one subsystem per part.

    States, inputs, outputs and parameters are the parts' own, named ``"<part>.<name>"`` in the parts'
    order; the inputs are those no link drives (the record's inputs). Each part's vector field and outputs
    are evaluated at its inputs plus the links' sums (module docstring).

    Args:
        parts: ``{name: model}`` in order (a name without ``"."``).
        links: the :class:`Link` s (or ``(target, source, gain)`` tuples).

    Raises:
        CoupledError: fewer than two parts, a part name with a dot, a part that is not a model or has
            events (not coupled yet), an unknown part, input or source name, a gain that is not finite.
        CoupledLoopError: a source that feeds through from a linked input.

    References:
        Thummerer & Mikelsons, model-combination paper, eq. (11).

    """

    parts: tuple[AbstractModel, ...]
    params: Params
    names: tuple[str, ...] = eqx.field(static=True)
    links: tuple[Link, ...] = eqx.field(static=True)
    sources: tuple[_Source, ...] = eqx.field(static=True)
    targets: tuple[tuple[int, int], ...] = eqx.field(static=True)
    free: tuple[tuple[int, int], ...] = eqx.field(static=True)

    def __init__(self, parts: Mapping[str, AbstractModel], links: Sequence[Link | tuple[str, str, float]]):
        names = tuple(parts)
        if len(names) < 2 or any("." in n or not n for n in names):
            raise CoupledError(
                f"Coupled parts: expected two or more models named without '.'; received {names}."
            )
        models = tuple(parts.values())
        bad = [n for n, m in parts.items() if not isinstance(m, AbstractModel)]
        if bad:
            raise CoupledError(f"Coupled parts: expected twinfer models; received non-models for {bad}.")
        events = [n for n, m in parts.items() if m.n_events]
        if events:
            raise CoupledError(
                f"Coupled parts: expected models without events (a part's events are not coupled yet); "
                f"received {events} with event indicators."
            )
        self.parts, self.names = models, names
        self.links = tuple(Link(*link) for link in links)
        sources, targets = [], []
        for link in self.links:
            if not np.isfinite(link.gain):
                raise CoupledError(
                    f"Coupled link {link.target!r} <- {link.source!r} gain: expected a finite "
                    f"number; received {link.gain!r}."
                )
            i, local = _split(link.target, names, f"link target {link.target!r}")
            if local not in models[i].input_names:
                raise CoupledError(
                    f"Coupled link target {link.target!r}: expected an input of {names[i]!r} "
                    f"{models[i].input_names}; received {local!r}."
                )
            targets.append((i, models[i].input_names.index(local)))
            j, local = _split(link.source, names, f"link source {link.source!r}")
            model = models[j]
            if local in model.output_names:
                sources.append(_Source(j, model.output_names.index(local), True))
            elif local in model.state_names:
                sources.append(_Source(j, model.state_names.index(local), False))
            else:
                raise CoupledError(
                    f"Coupled link source {link.source!r}: expected an output {model.output_names} or a "
                    f"state {model.state_names} of {names[j]!r}; received {local!r}."
                )
        self.sources, self.targets = tuple(sources), tuple(targets)
        linked = set(targets)
        self.free = tuple(
            (i, k) for i, m in enumerate(models) for k in range(m.n_input) if (i, k) not in linked
        )
        self.params = {f"{n}.{g}": v for n, m in zip(names, models, strict=True) for g, v in m.params.items()}
        self._check_loops()

    # -- names -------------------------------------------------------------------------------------
    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(f"{n}.{s}" for n, m in zip(self.names, self.parts, strict=True) for s in m.state_names)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f"{self.names[i]}.{self.parts[i].input_names[k]}" for i, k in self.free)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f"{n}.{o}" for n, m in zip(self.names, self.parts, strict=True) for o in m.output_names)

    @property
    def partition(self) -> tuple[tuple[str, ...], ...]:
        """The parts' states, one group per part: the partition for ``Graph.from_model``."""
        return tuple(
            tuple(f"{n}.{s}" for s in m.state_names) for n, m in zip(self.names, self.parts, strict=True)
        )

    # -- evaluation --------------------------------------------------------------------------------
    def _offsets(self) -> list[int]:
        return [0, *np.cumsum([m.n_state for m in self.parts]).tolist()]

    def _own(self, i: int, params: Params) -> Params:
        prefix = f"{self.names[i]}."
        return {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}

    def _inputs(self, t: Any, x: State, u: Input, params: Params) -> list[Any]:
        """Each part's input: the record's free inputs and the links' sums (sources at linked inputs 0)."""
        off = self._offsets()
        xs = [x[off[i] : off[i + 1]] for i in range(len(self.parts))]
        base = [jnp.zeros(m.n_input, dtype=x.dtype) for m in self.parts]
        for col, (i, k) in enumerate(self.free):
            base[i] = base[i].at[k].set(u[col])
        outputs: dict[int, Any] = {}
        driven = [list(b) for b in base]
        for link, source, (i, k) in zip(self.links, self.sources, self.targets, strict=True):
            j = source.part
            if source.is_output:
                if j not in outputs:
                    outputs[j] = self.parts[j].output(t, xs[j], base[j], self._own(j, params))
                value = outputs[j][source.index]
            else:
                value = xs[j][source.index]
            driven[i][k] = driven[i][k] + link.gain * value
        return [jnp.stack(d) if d else jnp.zeros((0,), dtype=x.dtype) for d in driven]

    def _each(self, x: State) -> list[Any]:
        off = self._offsets()
        return [x[off[i] : off[i + 1]] for i in range(len(self.parts))]

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        """The parts' vector fields at their linked inputs, concatenated in the parts' order."""
        us = self._inputs(t, x, u, params)
        return jnp.concatenate(
            [
                m.vector_field(t, xi, ui, self._own(i, params))
                for i, (m, xi, ui) in enumerate(zip(self.parts, self._each(x), us, strict=True))
            ]
        )

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        """The parts' outputs at their linked inputs, concatenated in the parts' order."""
        us = self._inputs(t, x, u, params)
        return jnp.concatenate(
            [
                m.output(t, xi, ui, self._own(i, params))
                for i, (m, xi, ui) in enumerate(zip(self.parts, self._each(x), us, strict=True))
            ]
        )

    # -- structure ---------------------------------------------------------------------------------
    def _check_loops(self) -> None:
        """Every output source independent of the linked inputs of its part, at three random points."""
        linked = {(i, k) for i, k in self.targets}
        rng = np.random.default_rng(0)
        for link, source in zip(self.links, self.sources, strict=True):
            j = source.part
            cols = [k for (i, k) in linked if i == j]
            if not source.is_output or not cols:
                continue
            model, params = self.parts[j], self.parts[j].params
            jac = jax.jit(jax.jacfwd(lambda x, u, m=model, p=params: m.output(0.0, x, u, p), argnums=1))
            for _ in range(3):
                x, u = rng.normal(size=model.n_state), rng.normal(size=model.n_input)
                row = np.asarray(jac(jnp.asarray(x), jnp.asarray(u)))[source.index, cols]
                if np.any(row != 0):
                    raise CoupledLoopError(
                        f"Coupled link source {link.source!r}: expected an output that does not depend on "
                        f"the inputs links drive {[model.input_names[k] for k in cols]}; received one that "
                        "does (an algebraic loop between parts); link a state, or an output without "
                        "feed-through."
                    )

    @property
    def connections(self) -> tuple[Connection, ...]:
        """Each link's target part reads the source's states; each part's own connections, prefixed.

        For a link from part ``j`` into part ``i``: the states of ``j`` that the source reads (its
        output's Jacobian at three random points; a state source itself) joined to the states of ``i``
        whose equations the driven input enters (``i``'s vector-field Jacobian in that input).
        """
        rng = np.random.default_rng(1)
        out: list[Connection] = []
        for name, model in zip(self.names, self.parts, strict=True):
            out += [
                Connection(tuple(f"{name}.{s}" for s in c.a), tuple(f"{name}.{s}" for s in c.b))
                for c in model.connections
            ]
        for source, (i, k) in zip(self.sources, self.targets, strict=True):
            j = source.part
            if i == j:
                continue
            src, dst = self.parts[j], self.parts[i]
            if source.is_output:
                jac = jax.jit(jax.jacfwd(lambda x, m=src: m.output(0.0, x, jnp.zeros(m.n_input), m.params)))
                rows = [
                    np.asarray(jac(jnp.asarray(rng.normal(size=src.n_state))))[source.index] for _ in range(3)
                ]
                read = np.flatnonzero(np.any(np.stack(rows) != 0, axis=0)).tolist()
            else:
                read = [source.index]
            if isinstance(dst, CoSimulationFMU):  # a step's outputs may depend on every input held over it
                driven = list(range(dst.n_output))
            else:
                jac_u = jax.jit(
                    jax.jacfwd(lambda u, m=dst: m.vector_field(0.0, jnp.zeros(m.n_state), u, m.params))
                )
                cols = [np.asarray(jac_u(jnp.asarray(rng.normal(size=dst.n_input))))[:, k] for _ in range(3)]
                driven = np.flatnonzero(np.any(np.stack(cols) != 0, axis=0)).tolist()
            if read and driven:
                out.append(
                    Connection(
                        tuple(f"{self.names[i]}.{dst.state_names[r]}" for r in driven),
                        tuple(f"{self.names[j]}.{src.state_names[r]}" for r in read),
                    )
                )
        return tuple(out)


class _Held(AbstractModel):
    """A co-simulation FMU between communication points: its outputs held (zero vector field).

    The view :func:`coupled_graph` gives :func:`~twinfer.infer.graph.model_graph` for the structure (who
    reads what) and for the other parts, which read the FMU's outputs held over the step, as co-simulation
    exchanges them; the FMU's own group steps by ``fmi2DoStep`` (:func:`_cosim_node`).
    """

    fmu: CoSimulationFMU
    params: Params

    def __init__(self, fmu: CoSimulationFMU):
        self.fmu, self.params = fmu, fmu.params

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        return jnp.zeros_like(jnp.asarray(x, dtype=jnp.float64))

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        return self.fmu.output(t, x, u, params)

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.fmu.state_names

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.fmu.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.fmu.output_names


def _cosim_node(model: Coupled, part: int, fmu: CoSimulationFMU, dt: float) -> Any:
    """The factory of a co-simulation part's node: one ``fmi2DoStep`` a step, its inputs from the messages.

    The FMU's inputs are the links' sums (:meth:`Coupled._inputs`) at the whole state in which the
    group's own states and its messages (the linked sources' states, at the step's start: held over the
    step) are filled in.
    """

    def factory(
        full: AbstractModel, own: tuple[int, ...], reads: tuple[int, ...], outputs: tuple[int, ...]
    ) -> GraphNode:
        block = _Group(full, own, reads)
        out_i = np.asarray(outputs, int)

        def coupled_state(x: Any, u: Any, m: Any, params: Params) -> tuple[Any, Params]:
            whole = block.whole(x, jnp.concatenate([u, m]))
            return full.split(whole, params) if isinstance(full, Augmented) else (whole, params)

        def transition(x: Any, u: Any, m: Any, params: Params) -> Any:
            base_x, p = coupled_state(x, u, m, params)
            u_fmu = model._inputs(0.0, base_x, u, p)[part]
            return fmu.communicate(x, u_fmu, model._own(part, p), dt)

        def output(x: Any, u: Any, m: Any, params: Params) -> Any:
            return full.output(0.0, block.whole(x, jnp.concatenate([u, m])), u, params)[out_i]

        return GraphNode(transition, output, None)

    return factory


def coupled_graph(
    model: Coupled,
    partition: Sequence[Sequence[str | int]] | None = None,
    *,
    dt: float,
    name: str = "coupled",
    **options: Unpack[GraphKeywords],
) -> Graph:
    """The graph of a :class:`Coupled` model, one subsystem per part (``S1``, ``S2``, ... in order).

    What ``Graph.from_model(coupled, dt=...)`` builds: :func:`~twinfer.infer.graph.model_graph` on
    ``partition`` (default :attr:`Coupled.partition`): each part steps its own equations with the linked
    states of the others as messages; ``estimator=("ukf", "none")`` makes the second part a deterministic
    node (no update, propagated from its messages: the compositional paper's deterministic component,
    such as a controller). An unknown ``"<part>.<parameter>"`` joins the part whose equations read it.

    A :class:`~twinfer.models.CoSimulationFMU` part is a deterministic node stepped by ``fmi2DoStep``
    (one communication step of ``dt`` per data step, its inputs held over it, ``integrator`` and
    ``substeps`` being the other parts'); the other parts read its outputs held over the step. Its group
    must be its states alone with estimator ``"none"``; its states start at the FMU's initialised outputs
    and handle 0 (``x0`` a scalar fills the other parts' states; a vector must give those values there).

    Args:
        model: the coupled model.
        partition: groups of state names (default: one per part).
        dt: step length of the data.
        name: the graph's name.
        **options: :func:`~twinfer.infer.graph.model_graph`'s keywords (``x0``, ``state_sd``,
            ``process_sd``, ``noise_sd``, ``unknown``, ``estimator``, ``messages``, ``integrator``, ...).

    Returns:
        The :class:`~twinfer.infer.graph.Graph`.

    Raises:
        CoupledError: a co-simulation part whose states are not one group, whose group's estimator is not
            ``"none"``, an unknown among its parameters, or an ``x0`` that moves its start.

    References:
        Ghorbani & Hackl, section 1, SI (S1)-(S4). Modelica Association, FMI 2.0.4, section 4.

    """
    if not isinstance(model, Coupled):
        raise CoupledError(f"coupled_graph model: expected a Coupled model; received {type(model).__name__}.")
    partition = model.partition if partition is None else partition
    stepped = [(i, m) for i, m in enumerate(model.parts) if isinstance(m, CoSimulationFMU)]
    if not stepped:
        return model_graph(model, partition, dt=dt, name=name, **options)
    names = model.state_names
    groups = [{names[g] if isinstance(g, int | np.integer) else str(g) for g in part} for part in partition]
    nodes, estimators = {}, options.get("estimator", "ukf")
    x0 = _values("x0", options.get("x0", 0.0), len(names), "any", "coupled_graph").copy()
    for i, fmu in stepped:
        mine = set(model.partition[i])
        where = [g for g, group in enumerate(groups) if group == mine]
        if not where:
            raise CoupledError(
                f"coupled_graph partition: expected the co-simulation part {model.names[i]!r}'s states "
                f"{sorted(mine)} as one group of their own; received {[sorted(g) for g in groups]}."
            )
        g = where[0]
        estimator = estimators if isinstance(estimators, str) else list(estimators)[g]
        if estimator != "none":
            raise CoupledError(
                f"coupled_graph estimator of S{g + 1} (the co-simulation part {model.names[i]!r}): expected "
                f"'none' (a deterministic node: its FMU state is opaque); received {estimator!r}."
            )
        own = [k for k in (options.get("unknown") or {}) if k.startswith(f"{model.names[i]}.")]
        if own:
            raise CoupledError(
                f"coupled_graph unknown {own[0]!r}: expected no parameter of the co-simulation part "
                f"{model.names[i]!r} (set at its initialisation, no derivative); received one."
            )
        idx = [names.index(s) for s in model.partition[i]]
        start = np.asarray(fmu.start_state)
        if np.ndim(options.get("x0", 0.0)) == 0:
            x0[idx] = start
        elif not np.allclose(x0[idx], start, rtol=0.0, atol=1e-12):
            raise CoupledError(
                f"coupled_graph x0 of {[names[k] for k in idx]}: expected the co-simulation FMU's "
                f"initialised outputs and handle 0, {start.tolist()} (or a scalar x0); received "
                f"{x0[idx].tolist()}."
            )
        nodes[g] = _cosim_node(model, i, fmu, float(dt))
    parts = {
        n: _Held(m) if isinstance(m, CoSimulationFMU) else m
        for n, m in zip(model.names, model.parts, strict=True)
    }
    held = Coupled(parts, model.links)
    options = {**options, "x0": x0}
    connections = options.pop("connections", None) or model.connections  # the FMU's inputs drive it
    return model_graph(held, partition, dt=dt, name=name, connections=connections, nodes=nodes, **options)  # type: ignore[misc]
