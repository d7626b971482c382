"""Graphs of subsystems and interfaces, hierarchy by flattening, and the monolithic (centralised) model.

References:
    Ghorbani & Hackl, section 1 (directed graph G = (V, E), no global state) and the centralised
    baselines of section 3 (one global augmented state built from the same physics).

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from twinfer.data import Dataset
from twinfer.infer.graph._cache import MONOLITHIC
from twinfer.infer.graph._parts import Field, Interface, LinearOutput, Port, Subsystem
from twinfer.sim import integrator_step, substep_loop


class Graph(eqx.Module):
    """Subsystems (or nested graphs) joined by interfaces.

    A nested graph exposes ports of its members through ``exports`` (``name -> (member, port)``), so an
    outer interface can connect to it as if it were one subsystem; :meth:`flatten` renames members
    ``"<graph>/<member>"`` and rewires those interfaces.

    Attributes:
        name: the graph's name (prefix of its members when nested).
        nodes: subsystems and nested graphs.
        interfaces: directed edges.
        exports: ports of members exposed to an outer graph.
        fields: sparse field couplings (:class:`Field`) of the leaf members (top level only).
        state_order: column names that :func:`~twinfer.infer.graph._run.estimate` puts first, in this order
            (a graph from a model: the model's states, then the unknown parameters).
        output_names: the names of the dataset's output columns the subsystems' ``outputs`` index (a
            graph from a model: the model's ``output_names``); None where unknown (only the column
            count is then checked: :meth:`check_dataset`).
        input_names: the names of the dataset's input columns the subsystems' ``inputs`` index (a graph
            from a model: the model's ``input_names``); None where unknown.

    """

    name: str = eqx.field(static=True)
    nodes: tuple[Subsystem | Graph, ...]
    interfaces: tuple[Interface, ...]
    exports: dict[str, tuple[str, str]] = eqx.field(static=True, default_factory=dict)
    fields: tuple[Field, ...] = ()
    state_order: tuple[str, ...] = eqx.field(static=True, default=())
    output_names: tuple[str, ...] | None = eqx.field(static=True, default=None)
    input_names: tuple[str, ...] | None = eqx.field(static=True, default=None)

    def __init__(
        self,
        name: str,
        nodes: Sequence[Subsystem | Graph],
        interfaces: Sequence[Interface] = (),
        exports: dict[str, tuple[str, str]] | None = None,
        fields: Sequence[Field] = (),
        state_order: Sequence[str] = (),
        output_names: Sequence[str] | None = None,
        input_names: Sequence[str] | None = None,
    ):
        self.name = name
        self.nodes = tuple(nodes)
        self.interfaces = tuple(interfaces)
        self.exports = dict(exports or {})
        self.fields = tuple(fields)
        self.state_order = tuple(state_order)
        self.output_names = _channel_names(name, "output_names", output_names)
        self.input_names = _channel_names(name, "input_names", input_names)
        subs, _ = self.flatten()  # validates
        if any(isinstance(n, Graph) and n.fields for n in self.nodes):
            raise ValueError(
                f"Graph {self.name!r}: a nested graph holds a field; fields live at the top level."
            )
        for f in self.fields:
            _check_field(f, {s.name: s for s in subs})

    def _resolve(self, node: str, port: str, role: str) -> tuple[str, str]:
        names = {n.name: n for n in self.nodes}
        if node not in names:
            raise ValueError(
                f"Graph {self.name!r} interface {role} {node!r}: no such subsystem; known: {sorted(names)}."
            )
        target = names[node]
        if isinstance(target, Graph):
            if port not in target.exports:
                raise ValueError(
                    f"Graph {self.name!r} interface {role} {node!r} port {port!r}: not exported; "
                    f"exports: {sorted(target.exports)}."
                )
            inner, inner_port = target.exports[port]
            sub, sub_port = target._resolve(inner, inner_port, role)
            return f"{node}/{sub}", sub_port
        if port not in target.ports:
            raise ValueError(
                f"Graph {self.name!r} interface {role} {node!r} port {port!r}: no such port; "
                f"ports: {sorted(target.ports)}."
            )
        return node, port

    from_model: ClassVar[Callable[..., Graph]]
    """``Graph.from_model(model, partition, **options)``: :func:`twinfer.infer.graph.from_model`.

    The graph of a library model cut into subsystems along its own interfaces (a
    :class:`~twinfer.models.Chain`, a :class:`~twinfer.models.KuramotoNetwork`, or any model that
    declares its interface coupling). Bound by :mod:`twinfer.infer.graph._builders` when the package is
    imported: the builders build on this class, so this module cannot import them.
    """

    def check_dataset(self, dataset: Any, where: str) -> None:
        """Check a record's columns against the ones the subsystems read, before anything is compiled.

        The subsystems read the dataset's outputs and inputs by position, so a record whose columns are
        named otherwise (``a1, a2, a4`` for a graph of ``a1, a3, a4``) would be read as the wrong sensors
        without a sound. With :attr:`output_names` / :attr:`input_names` (a graph from
        :meth:`from_model`) the names must be those (the inputs may keep the default unnamed ``u1..``, as
        :func:`twinfer.infer.filters.run_filter` accepts); without, the record must hold every column a
        subsystem reads. ``dataset`` None (records given as arrays) is checked by the engines.

        Raises:
            ValueError: ``"<where> dataset outputs"`` / ``"inputs"``, naming the expected and the received
                names (or column counts) and the subsystem that reads a missing column.

        """
        if dataset is None:
            return
        if not isinstance(dataset, Dataset):
            raise TypeError(
                f"{where} dataset: expected a twinfer.data.Dataset; received {type(dataset).__name__}."
            )
        n_u = 0 if dataset.inputs is None else int(dataset.inputs.shape[1])
        expected = self.output_names
        if expected is not None and dataset.output_names != expected:
            rename = dict(zip(expected, dataset.output_names, strict=False))
            raise ValueError(
                f"{where} dataset outputs: expected {expected} (the outputs of the model graph "
                f"{self.name!r} was built from, read by position); received {dataset.output_names}. Name "
                f"a table's columns after them: from_csv(..., outputs={rename})."
            )
        expected = self.input_names
        if expected is not None:
            default = tuple(f"u{i + 1}" for i in range(n_u))
            if n_u != len(expected) or dataset.input_names not in (default, expected):
                raise ValueError(
                    f"{where} dataset inputs: expected {len(expected)} columns {expected} (the inputs of "
                    f"the model graph {self.name!r} was built from, or the default unnamed "
                    f"{tuple(f'u{i + 1}' for i in range(len(expected)))}); received {n_u} columns "
                    f"{dataset.input_names}."
                )
        for s in self.flatten()[0]:
            for field, cols, names in (
                ("outputs", s.outputs, dataset.output_names),
                ("inputs", s.inputs, dataset.input_names),
            ):
                if cols and max(cols) >= len(names):
                    raise ValueError(
                        f"{where} dataset {field}: expected at least {max(cols) + 1} columns (subsystem "
                        f"{s.name!r} reads columns {list(cols)}); received {len(names)}: {names}."
                    )

    def flatten(self) -> tuple[list[Subsystem], list[Interface]]:
        """Leaf subsystems (nested ones renamed ``graph/member``) and all interfaces, validated."""
        subs: list[Subsystem] = []
        edges: list[Interface] = []
        seen: set[str] = set()
        for node in self.nodes:
            if node.name in seen:
                raise ValueError(f"Graph {self.name!r}: duplicate subsystem name {node.name!r}.")
            seen.add(node.name)
            if isinstance(node, Graph):
                inner_subs, inner_edges = node.flatten()
                prefix = f"{node.name}/"
                subs += [dataclasses.replace(s, name=prefix + s.name) for s in inner_subs]
                edges += [
                    dataclasses.replace(e, sender=prefix + e.sender, receiver=prefix + e.receiver)
                    for e in inner_edges
                ]
            else:
                subs.append(node)
        by_name = {s.name: s for s in subs}
        for e in self.interfaces:
            sender, sport = self._resolve(e.sender, e.sender_port, "sender")
            receiver, rport = self._resolve(e.receiver, e.receiver_port, "receiver")
            if not by_name[receiver].ports[rport].slots:
                raise ValueError(
                    f"Graph {self.name!r} interface into {e.receiver!r} port {e.receiver_port!r}: the port "
                    "has no message slots to receive into."
                )
            edges.append(
                dataclasses.replace(
                    e, sender=sender, sender_port=sport, receiver=receiver, receiver_port=rport
                )
            )
        for e in edges:
            _check_law_size(e, by_name)
        return subs, edges

    def colours(self) -> dict[str, int]:
        """Greedy colouring of the undirected interaction graph (Gauss-Seidel classes, Alg. 2)."""
        subs, edges = self.flatten()
        nbrs: dict[str, set[str]] = {s.name: set() for s in subs}
        for e in edges:
            nbrs[e.sender].add(e.receiver)
            nbrs[e.receiver].add(e.sender)
        colour: dict[str, int] = {}
        for s in subs:
            used = {colour[n] for n in nbrs[s.name] if n in colour}
            colour[s.name] = min(c for c in range(len(subs) + 1) if c not in used)
        return colour

    def monolithic(self, name: str | None = None) -> Subsystem:
        """The centralised model: one global state (the subsystem states stacked in order), same physics.

        When every subsystem carries its :class:`twinfer.sim.Dynamics` with one integrator (graphs from
        :func:`twinfer.sim.graph_node`, e.g. :meth:`from_model`), the transition integrates the coupled
        model with that integrator, every interface law evaluated at each stage: the same discretisation
        as the whole model's, so central against distributed compares estimators, not integrators.
        Otherwise each subsystem steps with the interface laws at the step's start, held over it (exact
        messages at t_n, what Jacobi with K = 1 approximates with the previous posterior means). The
        output evaluates the laws at the propagated state. Covariances are block-diagonal assemblies.
        Its functions are built once per structure, so the central models of graphs that differ only in
        numbers share one compiled program.
        """
        subs, edges = self.flatten()
        remembering = [s.name for s in subs if s.memory]
        if remembering:
            raise ValueError(
                f"Graph {self.name!r} monolithic: subsystems {remembering} carry a learned predictor's "
                "memory, which has no covariance to stack into a central state; expected none. Build "
                "the central estimator on the physical model the learned node replaces."
            )
        transition, output = _monolithic_functions(list(subs), list(edges))
        in_cols = sorted({c for s in subs for c in s.inputs})
        params = {"sub": {s.name: s.params for s in subs}, "gamma": [e.gamma for e in edges]}
        named = tuple(n for s in subs for n in (s.state_names or ()))  # used where every leaf is named
        ukf_subs = [s for s in subs if s.estimator == "ukf"]
        return Subsystem(
            name=name or self.name,
            transition=transition,
            output=output,
            params=params,
            x0=_concat([s.x0 for s in subs]),
            P0=_block_diag([s.P0 for s in subs]),
            Q=_block_diag([s.Q for s in subs]),
            R=_block_diag([s.R for s in subs]),
            inputs=tuple(in_cols),
            outputs=tuple(c for s in subs for c in s.outputs),
            ports={},
            n_msg=0,
            estimator=subs[0].estimator,
            weights=ukf_subs[0].weights if ukf_subs else subs[0].weights,
            state_names=named if all(s.state_names for s in subs) else None,
            parameters=tuple(p for s in subs for p in s.parameters),
        )

    def state_slices(self) -> dict[str, tuple[int, int]]:
        """Where each leaf subsystem's state sits in :meth:`monolithic`'s global state."""
        out, start = {}, 0
        for s in self.flatten()[0]:
            out[s.name] = (start, start + s.n_state)
            start += s.n_state
        return out


def _channel_names(graph: str, field: str, value: Sequence[str] | None) -> tuple[str, ...] | None:
    """``value`` as a tuple of names (None stays None), refusing a bare string or non-string names."""
    if value is None:
        return None
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"Graph {graph!r} {field}: expected a sequence of column names; received {value!r}.")
    return tuple(value)


def _shapes(tree: Any) -> tuple[Any, ...]:
    """A pytree's structure and leaf shapes (what stacking it with others needs to agree)."""
    leaves, treedef = jax.tree.flatten(tree)
    return (treedef, tuple(np.shape(leaf) for leaf in leaves))


def _monolithic_functions(subs: list[Subsystem], edges: list[Interface]) -> tuple[Any, Any]:
    """The central transition and output of a flattened graph, built once per structure.

    They depend on the subsystems' functions, shapes, input columns and ports and on the interfaces'
    laws and ends, never on numbers (those are ``params``), so graphs that differ only in numbers get
    the same functions and :func:`~twinfer.infer.graph._run.run` reuses one compiled program for them.
    """
    return MONOLITHIC.get(
        lambda: (
            tuple(
                (s.name, s.n_state, s.n_msg, s.transition, s.output, s.dynamics, tuple(s.inputs),
                 tuple((k, p.state, p.slots) for k, p in sorted(s.ports.items())), _shapes(s.params))
                for s in subs
            ),
            tuple(
                (e.sender, e.sender_port, e.receiver, e.receiver_port, e.law, _shapes(e.gamma))
                for e in edges
            ),
        ),
        lambda: _build_monolithic(subs, edges),
    )  # fmt: skip


def _groups(items: Sequence[Any], key: Any) -> list[np.ndarray]:
    """Indices of the items with equal ``key(item)`` (first appearance order); a None key stands alone."""
    groups: dict[Any, list[int]] = {}
    for i, item in enumerate(items):
        k = key(item)
        groups.setdefault(("alone", i) if k is None else k, []).append(i)
    return [np.asarray(g, dtype=int) for g in groups.values()]


def _stacked(trees: list[Any]) -> Any:
    return jax.tree.map(lambda *leaves: jnp.stack([jnp.asarray(v) for v in leaves]), *trees)


def _build_monolithic(subs: list[Subsystem], edges: list[Interface]) -> tuple[Any, Any]:
    """The central model's functions, vectorised.

    Subsystems with the same functions and shapes are evaluated together by one ``vmap`` (their states,
    inputs, messages and parameters gathered by index arrays), and so are interfaces with the same law,
    so the traced program does not grow with the number of identical subsystems (a chain of 64 two-mass
    subsystems: two groups, one law).
    """
    offsets, msg_offsets, start, m_start = {}, {}, 0, 0
    for s in subs:
        offsets[s.name], msg_offsets[s.name] = start, m_start
        start, m_start = start + s.n_state, m_start + s.n_msg
    n_msg_total = m_start
    in_cols = sorted({c for s in subs for c in s.inputs})
    col_pos = {c: i for i, c in enumerate(in_cols)}
    by_name = {s.name: s for s in subs}
    names = [s.name for s in subs]

    def tables(members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        group = [subs[i] for i in members]
        states = np.asarray([offsets[s.name] + np.arange(s.n_state) for s in group], dtype=int)
        ins = np.asarray([[col_pos[c] for c in s.inputs] for s in group], dtype=int).reshape(len(group), -1)
        msgs = np.asarray([msg_offsets[s.name] + np.arange(s.n_msg) for s in group], dtype=int)
        return states, ins, msgs.reshape(len(group), -1)

    def sub_key(fn: Any) -> Any:
        return lambda s: (fn(s), s.n_state, s.n_msg, len(s.inputs), _shapes(s.params))

    edge_groups = _groups(
        edges,
        lambda e: (
            e.law,
            len(by_name[e.sender].ports[e.sender_port].state),
            len(by_name[e.receiver].ports[e.receiver_port].state),
            len(by_name[e.receiver].ports[e.receiver_port].slots),
            _shapes(e.gamma),
        ),
    )
    edge_tables = []
    for members in edge_groups:
        group = [edges[k] for k in members]
        snd = [
            offsets[e.sender] + np.asarray(by_name[e.sender].ports[e.sender_port].state, int) for e in group
        ]
        rcv = [
            offsets[e.receiver] + np.asarray(by_name[e.receiver].ports[e.receiver_port].state, int)
            for e in group
        ]
        slots = [
            msg_offsets[e.receiver] + np.asarray(by_name[e.receiver].ports[e.receiver_port].slots, int)
            for e in group
        ]
        edge_tables.append((members, group[0].law, np.asarray(snd), np.asarray(rcv), np.asarray(slots)))

    def messages(x: Any, params: Any) -> Any:
        msgs = jnp.zeros(n_msg_total, x.dtype)
        for members, law, snd, rcv, slots in edge_tables:
            gamma = _stacked([params["gamma"][k] for k in members])
            vals = jax.vmap(law)(x[snd], x[rcv], gamma)
            msgs = msgs.at[slots].add(vals.reshape(slots.shape))
        return msgs

    def vectorised(fn_of: Any, n_out: Any) -> Any:
        """``(x, u, params) -> (sum of n_out,)``, every subsystem's ``fn_of(s)(x_s, u_s, m_s, params_s)``.

        In the subsystems' order, with the messages of the interface laws at x.
        """
        groups = _groups(subs, sub_key(fn_of))
        plan = []
        sizes = [n_out(s) for s in subs]
        out_off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        for members in groups:
            states, ins, msgs = tables(members)
            out = np.asarray([out_off[i] + np.arange(sizes[i]) for i in members], dtype=int)
            plan.append((members, fn_of(subs[members[0]]), states, ins, msgs, out.reshape(len(members), -1)))

        def evaluate(x: Any, u: Any, params: Any) -> Any:
            m = messages(x, params)
            result = jnp.zeros(int(out_off[-1]), x.dtype)
            for members, fn, states, ins, msgs, out in plan:
                p = _stacked([params["sub"][names[i]] for i in members])
                vals = jax.vmap(fn)(x[states], u[ins], m[msgs], p)
                result = result.at[out].set(vals.reshape(out.shape))
            return result

        return evaluate

    held_step = vectorised(lambda s: s.transition, lambda s: s.n_state)

    def held(x: Any, u: Any, m: Any, params: Any) -> Any:
        return held_step(x, u, params)

    kinds = {(s.dynamics.method, s.dynamics.dt, s.dynamics.substeps) for s in subs if s.dynamics is not None}
    coupled = len(kinds) == 1 and all(s.dynamics is not None for s in subs)
    coupled = coupled and next(iter(kinds))[0] != "semi-implicit-euler"  # needs a global [q, v] layout
    transition = held
    if coupled:
        method, dt, substeps = next(iter(kinds))
        step = integrator_step(method)
        vector_field = vectorised(lambda s: s.dynamics.vector_field, lambda s: s.n_state)  # type: ignore[union-attr]

        def transition(x: Any, u: Any, m: Any, params: Any) -> Any:  # noqa: F811
            rhs = lambda t, xx: vector_field(xx, u, params)  # noqa: E731
            return substep_loop(lambda _, xx: step(rhs, 0.0, xx, dt / substeps), x, substeps)

    def output_fn(s: Subsystem) -> Any:
        if isinstance(s.output, LinearOutput):
            matrix = jnp.asarray(s.output.matrix())
            return lambda x, u, m, p, matrix=matrix: matrix @ x
        return s.output

    outputs = vectorised(
        output_fn, lambda s: len(s.outputs)
    )  # a linear output's matrix is its own: such subsystems are keyed apart by their function

    def output(x: Any, u: Any, m: Any, params: Any) -> Any:
        return outputs(x, u, params)

    return transition, output


def _concat(parts: list[Any]) -> Any:
    try:
        return np.concatenate([np.asarray(p, dtype=np.float64) for p in parts])
    except jax.errors.TracerArrayConversionError:
        return jnp.concatenate([jnp.asarray(p) for p in parts])


def _block_diag(mats: list[Any]) -> Any:
    """Block-diagonal assembly on the host (no device op to compile), with jnp when traced."""
    try:
        host = [np.atleast_2d(np.asarray(m, dtype=np.float64)) for m in mats]
    except jax.errors.TracerArrayConversionError:
        return jsl.block_diag(*[jnp.asarray(m) for m in mats])
    rows, cols = sum(m.shape[0] for m in host), sum(m.shape[1] for m in host)
    out = np.zeros((rows, cols))
    r = c = 0
    for m in host:
        out[r : r + m.shape[0], c : c + m.shape[1]] = m
        r, c = r + m.shape[0], c + m.shape[1]
    return out


def _check_field(f: Field, by_name: dict[str, Subsystem]) -> None:
    """Members exist and carry the field's ports; variable indices and slot counts fit."""
    where = f"Field {f.name!r}"
    unknown = [m for m in f.members if m not in by_name]
    if unknown:
        raise ValueError(
            f"{where} members: no such subsystems {unknown[:5]}; known: {sorted(by_name)[:5]}..."
        )
    probe = jax.eval_shape(f.features, jax.ShapeDtypeStruct((), jnp.float64))
    k = int(np.prod(probe.shape))
    sizes = []
    for m in f.members:
        s = by_name[m]
        for port in (f.port, f.rate, f.drives):
            if port is not None and port not in s.ports:
                raise ValueError(f"{where}: subsystem {m!r} has no port {port!r}; ports: {sorted(s.ports)}.")
        n_var = len(s.ports[f.port].state)
        if len(s.ports[f.port].slots) != k * n_var:
            raise ValueError(
                f"{where}: port {f.port!r} of {m!r} needs {k} message slots per variable ({k * n_var}); "
                f"received {len(s.ports[f.port].slots)}."
            )
        for port in (f.rate, f.drives):
            if port is not None and len(s.ports[port].state) != n_var:
                raise ValueError(
                    f"{where}: port {port!r} of {m!r} needs one state per field variable ({n_var}); "
                    f"received {len(s.ports[port].state)}."
                )
        sizes.append(n_var)
    sizes_arr = np.asarray(sizes, dtype=int)
    for key, var in (("sender", f.sender_var), ("receiver", f.receiver_var)):
        if var.size:
            limit = sizes_arr[getattr(f, key)]
            bad = np.flatnonzero((var < 0) | (var >= limit))
            if bad.size:
                e = int(bad[0])
                raise ValueError(
                    f"{where} {key}_var: edge {e} reads variable {int(var[e])} of "
                    f"{f.members[int(getattr(f, key)[e])]!r}, which has {int(limit[e])}."
                )


def _check_law_size(e: Interface, by_name: dict[str, Subsystem]) -> None:
    snd, rcv = by_name[e.sender], by_name[e.receiver]
    sp: Port = snd.ports[e.sender_port]
    rp: Port = rcv.ports[e.receiver_port]
    probe = jax.eval_shape(  # traced, not run: no device work to compile while building graphs
        e.law,
        jax.ShapeDtypeStruct((len(sp.state),), jnp.float64),
        jax.ShapeDtypeStruct((len(rp.state),), jnp.float64),
        e.gamma,
    )
    size = int(np.prod(probe.shape))
    if size != len(rp.slots):
        raise ValueError(
            f"Interface {e.sender}.{e.sender_port} -> {e.receiver}.{e.receiver_port}: the law returns "
            f"{size} values but port {e.receiver_port!r} of {e.receiver!r} has {len(rp.slots)} message slots."
        )
