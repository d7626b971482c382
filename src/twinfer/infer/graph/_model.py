"""Graphs from any model that declares its interface coupling: groups of its states as subsystems.

:func:`model_graph` cuts a model into groups of its states; each group steps the model's own vector
field with the states it reads from other groups (declared by the model's
:attr:`~twinfer.models.AbstractModel.connections`) as messages, with the integrator of ``sim``. The
declaration is checked at draws from the prior: the Jacobians of the vector field and the outputs must
vanish on every state of another group that a group does not read.

References:
    Ghorbani & Hackl, section 1, SI (S1)-(S4) (subsystems, messages as interface variables).

"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer.filters import augment
from twinfer.infer.filters._api import _unknown as _checked_unknown
from twinfer.infer.graph._cache import GROUP_NODES, JACOBIANS
from twinfer.infer.graph._chain import GraphKeywords, GraphOptions, _values
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._parts import Interface, Port, Subsystem
from twinfer.models import AbstractModel, Connection
from twinfer.sim import Dynamics, GraphNode, discretise

NodeFactory = Callable[[AbstractModel, tuple[int, ...], tuple[int, ...], tuple[int, ...]], GraphNode]
"""Builds a group's :class:`~twinfer.sim.GraphNode` from the model, its own, read and output indices."""


def _read_sender(s_send: Any, s_recv: Any, gamma: Any) -> Any:
    """The law of a declared connection: the message is the sender's interface states themselves.

    The receiver evaluates its own equations with them (rule ``"split"``: at its sigma points and
    integrator stages, a probabilistic sender's error a consider state), so the coupling terms are the
    model's own, however nonlinear.
    """
    return s_send


def model_graph(
    model: AbstractModel,
    partition: Sequence[Sequence[str | int]],
    *,
    dt: float,
    connections: Sequence[Connection] | None = None,
    name: str = "model",
    nodes: Mapping[int, NodeFactory] | None = None,
    **options: Unpack[GraphKeywords],
) -> Graph:
    """The graph of any model that declares its interface coupling, cut into the groups of ``partition``.

    Subsystem ``i`` holds the states of group ``i`` (and the unknown parameters its equations read). Its
    message vector is the states of other groups that its equations and outputs read, which the model's
    :attr:`~twinfer.models.AbstractModel.connections` (or ``connections``) declare: the subsystem steps
    the model's own vector field on a state in which its own states and the messages are filled in (the
    states it does not read at zero, where the declared coupling says they do not matter), with the
    integrator of ``sim``. A connection's law is the sender's states (:func:`_read_sender`), so with the
    default rule ``"split"`` each receiver evaluates the model's coupling terms itself at its sigma points
    and integrator stages, with a probabilistic sender's error as a consider state (the derivation is in
    ``docs/design-messages.md``). On a :class:`~twinfer.models.Chain` this is the same estimator as
    :func:`chain_graph` with rule ``"split"``.

    Each output goes to a subsystem whose own states it reads (:func:`_placed`: the one holding the state
    it is the rate of, else the first). The declaration is checked: at three draws from the prior
    (``x0``, ``state_sd``), the Jacobians of the vector field and the outputs must vanish on every state
    of another group that a subsystem does not read. A subsystem may measure nothing: it then predicts
    from its messages (no update, a log-likelihood increment of 0).

    Graphs of one model structure (the model's class, static fields and parameter shapes, the partition,
    the outputs' placement, ``integrator``, ``dt``, ``substeps``) share their subsystems' functions, so
    :func:`~twinfer.infer.graph._run.run` compiles their program once; each graph runs on its own numbers
    (its ``params``, noise levels and priors). The model's functions must read its numbers from their
    ``params`` argument (the :class:`~twinfer.models.AbstractModel` contract), not from ``self``.

    Args:
        model: the continuous-time model; its inputs are given to every subsystem.
        partition: groups of state names (or indices into ``model.state_names``) covering every state
            once; at least two groups.
        dt: step length of the data.
        connections: the interface coupling (default ``model.connections``).
        name: the graph's name.
        nodes: ``{group index: factory(model, own, reads, outputs) -> GraphNode}`` for groups that step
            otherwise than by the model's vector field (a co-simulation FMU's ``fmi2DoStep``:
            :class:`~twinfer.infer.graph.Coupled`); ``model`` is the (augmented) model, ``own``, ``reads``
            and ``outputs`` its state and output indices of the group's own states, its messages and its
            outputs.
        **options: the keywords of :class:`~twinfer.infer.graph._chain.GraphKeywords`. Here the
            ``integrator`` may not be ``"exact"`` (a group is nonlinear in its messages in general);
            ``messages`` gives one kind for every directed interface or one per interface in creation
            order (for each pair of groups in order, the lower's to the higher's, then back); each
            ``unknown`` joins the state of the subsystem whose equations read it. One read by several (a
            storey stiffness at a cut) is estimated as :func:`chain_graph` estimates a cut connection's:
            one reader holds it (the one whose outputs measure it best, :func:`_holder`) and sends it
            with its port to the others, which read it as a message (with its uncertainty, for
            probabilistic messages).

    Returns:
        A :class:`~twinfer.infer.graph.Graph` with subsystems ``S1..Sp`` in partition order, ports named
        after the neighbour, and the model's state order (then the unknowns) for
        :func:`~twinfer.infer.graph._run.estimate`.

    Raises:
        ValueError: for a partition that does not cover the states once, a connection naming unknown
            states or two groups' worth of states on one side, coupling the declaration leaves out, an
            output no subsystem can evaluate, an unknown that no equation reads or whose initial value
            the model refuses, naming them.

    References:
        Ghorbani & Hackl, section 1, SI (S1)-(S4) (subsystems, messages as interface variables).

    """
    names = tuple(model.state_names)
    n = len(names)
    groups = [[names[g] if isinstance(g, int | np.integer) else str(g) for g in part] for part in partition]
    flat = [g for part in groups for g in part]
    if sorted(flat) != sorted(names) or len(flat) != n or len(groups) < 2 or any(not g for g in groups):
        raise ValueError(
            f"model_graph partition: expected two or more non-empty groups covering the states {names} once; "
            f"received {groups}."
        )
    owner = {s: i for i, part in enumerate(groups) for s in part}
    p = len(groups)
    o = GraphOptions.of("model_graph", options)
    integrator, substeps, rule = o.integrator, o.substeps, o.rule
    conns = tuple(model.connections if connections is None else connections)
    reads: list[dict[int, list[str]]] = [{} for _ in groups]  # reads[i][j]: j's states i reads
    for c in conns:
        sides = []
        for side in (c.a, c.b):
            bad = [s for s in side if s not in owner]
            held = {owner[s] for s in side if s in owner}
            if bad or len(held) != 1:
                what = f"unknown states {bad}" if bad else f"states of groups {sorted(held)} on one side"
                raise ValueError(
                    f"model_graph connection {tuple(c.a)} <-> {tuple(c.b)}: expected each side to name "
                    f"states of one group; received {what}."
                )
            sides.append(held.pop())
        (ga, gb), (sa, sb) = sides, (c.a, c.b)
        if ga != gb:
            for i, j, side in ((ga, gb, sb), (gb, ga, sa)):
                got = reads[i].setdefault(j, [])
                got += [s for s in side if s not in got]
    unknown = dict(o.unknown or {})
    for key, value in unknown.items():
        if len(value) != 3 or not value[1] > 0 or not value[2] >= 0:
            raise ValueError(
                f"model_graph unknown {key!r}: expected (initial value, prior sd > 0, random-walk sd >= 0); "
                f"received {value!r}."
            )
    _checked_unknown("model_graph", model, unknown)  # as run_filter: finite, float64, a value the model takes
    full = augment(model, list(unknown)) if unknown else model
    n_full = n + len(unknown)
    mean0 = np.concatenate([_values("x0", o.x0, n, "any", "model_graph"), [v[0] for v in unknown.values()]])
    sd0 = np.concatenate(
        [_values("state_sd", o.state_sd, n, "> 0", "model_graph"), [v[1] for v in unknown.values()]]
    )
    sdq = np.concatenate(
        [_values("process_sd", o.process_sd, n, ">= 0", "model_graph"), [v[2] for v in unknown.values()]]
    )
    sdr = _values("noise_sd", o.noise_sd, full.n_output, "> 0", "model_graph")
    u0 = np.zeros(full.n_input)

    # the dependence structure at three draws from the prior: which states each equation and output reads
    draws = mean0 + sd0 * np.random.default_rng(0).normal(size=(3, n_full))
    structure = lambda: _model_structure(full)  # noqa: E731  (the cache key: graphs of one structure share)
    jac_f, jac_h = JACOBIANS.get(structure, lambda: _jacobians(full))
    dep_f = np.zeros((n_full, n_full), bool)
    dep_h = np.zeros((full.n_output, n_full), bool)
    for x in draws:
        jf = np.asarray(jac_f(jnp.asarray(x), jnp.asarray(u0), full.params))
        jh = np.asarray(jac_h(jnp.asarray(x), jnp.asarray(u0), full.params))
        if not (np.isfinite(jf).all() and np.isfinite(jh).all()):
            raise ValueError(
                "model_graph: the model's vector field or outputs gave non-finite derivatives at a draw from "
                "the prior (x0, state_sd); give a prior inside the model's domain."
            )
        dep_f |= jf != 0
        dep_h |= jh != 0
    group_of = np.asarray([owner[s] for s in names])
    placed = _placed(
        dep_h[:, :n],
        dep_f[:n, :n],
        group_of,
        [{names.index(s) for q in reads[i].values() for s in q} for i in range(p)],
    )
    held_by = dict(owner)
    for k, key in enumerate(unknown):
        readers = sorted(
            {int(group_of[r]) for r in np.flatnonzero(dep_f[:n, n + k])}
            | {int(placed[o]) for o in np.flatnonzero(dep_h[:, n + k]) if placed[o] >= 0}
        )
        if not readers:
            raise ValueError(
                f"model_graph unknown {key!r}: expected a parameter that the model's equations or outputs "
                "read; read by none at three draws from the prior (x0, state_sd)."
            )
        held_by[key] = holder = _holder(
            readers, placed, group_of, dep_f[:n, n + k], dep_h[:, :n], dep_h[:, n + k]
        )
        for i in readers:  # the others read it from the holder, as a message (a cut connection's unknown)
            if i != holder:
                reads[i].setdefault(holder, []).append(key)
    full_names = names + tuple(unknown)
    own = [[full_names.index(s) for s in full_names if held_by[s] == i] for i in range(p)]
    read_idx = [[full_names.index(s) for j in sorted(reads[i]) for s in reads[i][j]] for i in range(p)]
    for i in range(p):
        allowed = set(own[i]) | set(read_idx[i])
        extra = sorted({full_names[c] for r in own[i] for c in np.flatnonzero(dep_f[r]) if c not in allowed})
        if extra:
            raise ValueError(
                f"model_graph: the equations of group S{i + 1} read {extra}, which no connection declares; "
                f"declare them (a Connection between the states of S{i + 1} and theirs)."
            )
    out_of: list[list[int]] = [[] for _ in range(p)]
    for k in range(full.n_output):
        cols = set(np.flatnonzero(dep_h[k]))
        fits = [i for i in range(p) if cols & set(own[i]) and cols <= set(own[i]) | set(read_idx[i])]
        if not fits:
            raise ValueError(
                f"model_graph output {full.output_names[k]!r}: it reads "
                f"{sorted(full_names[c] for c in cols)}, which no group holds with the states it reads by "
                "declared connections."
            )
        out_of[int(placed[k]) if placed[k] in fits else fits[0]].append(k)
    pairs = [(i, j) for i in range(p) for j in range(i + 1, p) if j in reads[i] or i in reads[j]]
    kinds = o.message_kinds("model_graph", 2 * len(pairs), "directed interface")
    estimators = o.estimators("model_graph", p)
    weights = o.sigma_weights()
    subs = []
    for i in range(p):
        shape = (tuple(own[i]), tuple(read_idx[i]), tuple(out_of[i]), integrator, float(dt), int(substeps))
        if nodes and i in nodes:
            node = nodes[i](full, tuple(own[i]), tuple(read_idx[i]), tuple(out_of[i]))
        else:
            node = GROUP_NODES.get(
                lambda shape=shape: (structure(), shape),
                lambda shape=shape: _group_node(full, *shape),
            )
        ports = {}
        for j in sorted({*reads[i], *(q for q in range(p) if i in reads[q])}):
            base = sum(len(reads[i][q]) for q in sorted(reads[i]) if q < j)
            mine = [own[i].index(full_names.index(s)) for s in reads[j].get(i, [])]
            ports[f"S{j + 1}"] = Port(
                state=tuple(mine), slots=tuple(range(base, base + len(reads[i].get(j, []))))
            )
        idx = own[i]
        local_names = tuple(full_names[r] for r in idx)
        subs.append(
            Subsystem(
                name=f"S{i + 1}",
                transition=node.transition,
                output=node.output,
                params=full.params,
                x0=mean0[idx],
                P0=np.diag(sd0[idx] ** 2),
                Q=np.diag(sdq[idx] ** 2),
                R=np.diag(sdr[out_of[i]] ** 2) if out_of[i] else np.zeros((0, 0)),
                inputs=tuple(range(full.n_input)),
                outputs=tuple(out_of[i]),
                ports=ports,
                n_msg=len(read_idx[i]),
                estimator=estimators[i],
                weights=weights,
                dynamics=node.dynamics,
                state_names=local_names,
                parameters=tuple(s for s in local_names if s in unknown),
            )
        )
    edges = []
    for e, (i, j) in enumerate(pairs):
        gamma = np.zeros(1)
        a, b = f"S{i + 1}", f"S{j + 1}"
        if reads[j].get(i):  # a direction carries what its receiver reads (an unknown's may go one way)
            edges.append(Interface(a, b, b, a, _read_sender, gamma, kinds[2 * e], rule))
        if reads[i].get(j):
            edges.append(Interface(b, a, a, b, _read_sender, gamma, kinds[2 * e + 1], rule))
    return Graph(  # with the dataset's names: Graph.check_dataset
        name,
        subs,
        edges,
        state_order=full_names,
        output_names=model.output_names,
        input_names=model.input_names,
    )


def _model_structure(model: AbstractModel) -> Any:
    """What a model's functions compute, apart from the numbers they read from ``params``.

    The model's pytree structure (its class and static fields), the shape and dtype of each leaf of
    ``params`` (passed to every function, so never part of the program), and the value of every other
    leaf (a fixed array a model holds outside ``params`` is compiled in, so a different one is another
    structure). Models of one structure share :func:`_group_node`'s functions, so their graphs share one
    compiled program (:func:`~twinfer.infer.graph._run.compiled_for`). Raises ``TypeError`` for a leaf that
    cannot be keyed (then the graph is built anew, its program compiled for it alone).
    """
    in_params = {id(leaf) for leaf in jax.tree.leaves(model.params)}
    leaves, treedef = jax.tree.flatten(model)
    key: list[Any] = []
    for leaf in leaves:
        if id(leaf) in in_params:
            key.append(("param", np.shape(leaf), np.dtype(getattr(leaf, "dtype", type(leaf))).str))
        elif isinstance(leaf, jax.Array | np.ndarray | np.generic | int | float | complex | bool):
            arr = np.asarray(leaf)
            key.append(("fixed", arr.shape, arr.dtype.str, arr.tobytes()))
        else:
            hash(leaf)
            key.append(("object", leaf))
    return (treedef, tuple(key))


def _jacobians(model: AbstractModel) -> tuple[Any, Any]:
    """Jitted ``(x, u, params) ->`` Jacobians of the vector field and the outputs in the state at t = 0."""
    return (
        jax.jit(jax.jacfwd(lambda x, u, p: model.vector_field(0.0, x, u, p))),
        jax.jit(jax.jacfwd(lambda x, u, p: model.output(0.0, x, u, p))),
    )


def _placed(dep_h: np.ndarray, dep_f: np.ndarray, group_of: np.ndarray, reads: list[set[int]]) -> np.ndarray:
    """The group each output goes to, by the states it reads (-1: none, an error :func:`model_graph` names).

    Among the groups whose own states it reads and that hold or read every state it reads, the one with
    a state whose equation reads exactly those states (an output that is a state's rate, an
    accelerometer, goes with its mass, as in :func:`chain_graph`), else the first. ``dep_h``
    (n_output, n): which states each output reads; ``dep_f`` (n, n): which states each state's equation
    reads; ``group_of`` (n,): each state's group; ``reads``: the states each group reads through its
    connections.
    """
    out = np.full(dep_h.shape[0], -1)
    for k, row in enumerate(dep_h):
        cols = set(np.flatnonzero(row).tolist())
        mine = [set(np.flatnonzero(group_of == i).tolist()) for i in range(len(reads))]
        fits = [i for i in range(len(reads)) if cols & mine[i] and cols <= mine[i] | reads[i]]
        rates = [i for i in fits if row.any() and any((dep_f[r] == row).all() for r in mine[i])]
        out[k] = (rates or fits or [-1])[0]
    return out


def _holder(
    readers: list[int],
    placed: np.ndarray,
    group_of: np.ndarray,
    dep_f: np.ndarray,
    dep_h: np.ndarray,
    dep_y: np.ndarray,
) -> int:
    """The group that holds an unknown that ``readers`` read (as :func:`chain_graph` holds a cut's).

    ``placed`` (n_output,): each output's group (:func:`_placed`); ``group_of`` (n,): each state's;
    ``dep_f`` (n,): whether each state's equation reads the unknown; ``dep_h`` (n_output, n): which
    states each output reads; ``dep_y`` (n_output,): which outputs read the unknown. The holder is the
    reader that measures it best: first one with an output that reads the unknown (an accelerometer on
    a mass its spring acts on), then one with an output on a state whose equation reads it, then one
    with any output; on a tie the last (a chain's right side, as :func:`chain_graph`). The other readers
    read it through their messages from the holder, with its uncertainty (probabilistic messages).
    """

    def score(i: int) -> tuple[bool, bool, bool]:
        seen = placed == i
        acting = dep_h[:, (group_of == i) & dep_f].any(axis=1)
        return bool((seen & dep_y).any()), bool((seen & acting).any()), bool(seen.any())

    return max(readers, key=lambda i: (score(i), i))


def _group_node(
    model: AbstractModel,
    own: tuple[int, ...],
    reads: tuple[int, ...],
    outputs: tuple[int, ...],
    integrator: str,
    dt: float,
    substeps: int,
) -> GraphNode:
    """A group's transition and output: the model's functions on its states, the messages filled in."""
    out_i = np.asarray(outputs, int)
    block = _Group(model, own, reads)
    step = discretise(block, dt, integrator, substeps)

    def transition(x: Any, u: Any, m: Any, params: Any) -> Any:
        return step.transition(0.0, x, jnp.concatenate([u, m]), params)

    def output(x: Any, u: Any, m: Any, params: Any) -> Any:
        return model.output(0.0, block.whole(x, jnp.concatenate([u, m])), u, params)[out_i]

    def vector_field(x: Any, u: Any, m: Any, params: Any) -> Any:
        return block.vector_field(0.0, x, jnp.concatenate([u, m]), params)

    dynamics = None if integrator == "exact" else Dynamics(vector_field, float(dt), int(substeps), integrator)
    return GraphNode(transition, output, dynamics)


class _Group(AbstractModel):
    """One group of a model's states as a model: its messages (the states it reads) as extra inputs."""

    base: AbstractModel
    params: Any
    own: tuple[int, ...] = eqx.field(static=True)
    reads: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, base: AbstractModel, own: tuple[int, ...], reads: tuple[int, ...]):
        self.base, self.params, self.own, self.reads = base, base.params, own, reads

    def whole(self, x: Any, v: Any) -> Any:
        """The whole model's state: the group's own ``x``, the read states from the inputs ``v``, else 0."""
        z = jnp.zeros(self.base.n_state, x.dtype).at[np.asarray(self.own, int)].set(x)
        return z.at[np.asarray(self.reads, int)].set(v[self.base.n_input :]) if self.reads else z

    def vector_field(self, t: Any, x: Any, u: Any, params: Any) -> Any:
        dz = self.base.vector_field(t, self.whole(x, u), u[: self.base.n_input], params)
        return dz[np.asarray(self.own, int)]

    def output(self, t: Any, x: Any, u: Any, params: Any) -> Any:
        return self.base.output(t, self.whole(x, u), u[: self.base.n_input], params)

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(self.base.state_names[i] for i in self.own)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self.base.input_names) + tuple(f"msg:{self.base.state_names[i]}" for i in self.reads)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self.base.output_names)
