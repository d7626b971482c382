"""Field coupling: many subsystems coupled through sparse sums of their neighbours' interface variables.

A :class:`Field` is the interface kind of a network whose subsystems interact through a separable law,
``F_a = sum_j w_aj law(s_j, s_a)`` with ``law(s_j, s_a) = readout(s_a) . features(s_j)`` (the Kuramoto
coupling ``K_aj sin(theta_j - theta_a) = cos(theta_a) K_aj sin(theta_j) - sin(theta_a) K_aj cos(theta_j)``).
The message into variable ``a`` is the k sums ``sum_j w_aj features(s_j)``: one gather of the senders'
interface variables and one segment sum over a sorted edge list per exchange, O(variables + edges)
however the variables are grouped into subsystems, where one :class:`Interface` per edge would evaluate
a law per edge and per sigma point. The receiver's model combines the sums with its own state at every
sigma point (e.g. :func:`twinfer.models.kuramoto.cluster_swing`).

Message variants (chosen per field):

* ``message="held"``: the senders' posterior means at t_n, held over the step (Jacobi, S3; the grid's
  S89);
* ``message="predicted"``: every subsystem's posterior mean is advanced through the step by its own
  :class:`twinfer.sim.Dynamics` (Heun), exchanging the sums at every stage, and each receiver reads the
  sums at its own stages. Holding neighbours fixed costs an error of order ``ds/dt dt`` per coupling term,
  which dominates on stiff networks;
* ``variance="first-order"``: the variance of the coupling force from the senders' uncertainty,
  ``var F_a = sum_j w_aj^2 (d law / d s_j)^2 var(s_j)`` (first order, senders independent; the
  probabilistic message of S44 for a scalar force), enters the receiver's process noise in full every
  step as ``dt^2 var F_a`` on the state the force drives (``drives``). ``var(s_j)`` is the sender's
  posterior variance of ``s_j`` plus ``dt^2 / 3`` that of its rate (``rate``), the mean over the step of
  ``var(s_j + tau ds_j/dt)``. The unscented, incremental rule of S46 is the :class:`Interface` variant.

References:
    Ghorbani & Hackl, section 2.2, SI (S40)-(S46), (S73)-(S92) (the grid's clusters, Alg. 6).

"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer.filters import STATIC_STEPS, DivergenceError, UnscentedWeights, ukf_step
from twinfer.infer.graph._parts import LinearOutput
from twinfer.sim import Dynamics, heun_step

MAX_SUBSTEPS = 64
"""Most Heun sub-steps per step a field graph's subsystem may need; above, :func:`compile` refuses it.

Sub-steps come from the data (a network's coupling strengths, :func:`twinfer.infer.clusters.stable_substeps`),
and each one costs a neighbour exchange per stage and a pass of every sigma point through the vector
field: 64 is 16 times PEGASE 9241's 4 at dt = 0.01. A count in the thousands (a MATPOWER branch with
r = x = 1e-12 asks for 16,818) means two buses joined by a near-zero impedance, electrically one bus:
merged, or given a smaller step, they need none of it.
"""

FieldMessage = Literal["held", "predicted"]
FieldVariance = Literal["none", "first-order"]
FIELD_MESSAGES = ("held", "predicted")
FIELD_VARIANCES = ("none", "first-order")


class Field(eqx.Module):
    """Sparse field coupling of the members of a graph, aggregated by segment sums.

    Edge ``e`` adds ``weight[e] * features(s)`` of variable ``sender_var[e]`` of ``port`` on subsystem
    ``members[sender[e]]`` to the message slots of variable ``receiver_var[e]`` of ``port`` on
    ``members[receiver[e]]``: variable ``a`` of a port owns the slots ``slots[k a : k a + k]`` (k the
    number of features).

    Attributes:
        name: the field's name (errors name it).
        port: port on every member; its ``state`` are the field variables, its ``slots`` k per variable.
        features: ``s -> (k,)`` features of a sender's variable (e.g. ``(sin s, cos s)``).
        law: ``(s_j, s_a) -> scalar`` force per unit weight, ``readout(s_a) . features(s_j)``; its
            derivative in ``s_j`` gives the first-order variance.
        members: names of the subsystems the edges index.
        sender, sender_var, receiver, receiver_var: edge arrays (E,) of member and variable indices.
        weight: edge weights (E,).
        message: ``"held"`` or ``"predicted"`` (module docstring).
        variance: ``"none"`` or ``"first-order"``.
        rate: port whose variables are the rates of ``port``'s (their variance smears the senders' over
            the step), or None.
        drives: port whose variables the force is a rate of (where ``dt^2 var F`` enters the process
            noise); required by ``variance="first-order"``.

    """

    name: str = eqx.field(static=True)
    port: str = eqx.field(static=True)
    features: Callable[[Any], Any] = eqx.field(static=True)
    law: Callable[[Any, Any], Any] = eqx.field(static=True)
    members: tuple[str, ...] = eqx.field(static=True)
    sender: np.ndarray
    sender_var: np.ndarray
    receiver: np.ndarray
    receiver_var: np.ndarray
    weight: np.ndarray
    message: str = eqx.field(static=True, default="held")
    variance: str = eqx.field(static=True, default="none")
    rate: str | None = eqx.field(static=True, default=None)
    drives: str | None = eqx.field(static=True, default=None)

    def __init__(
        self,
        name: str,
        port: str,
        features: Callable[[Any], Any],
        law: Callable[[Any, Any], Any],
        members: Sequence[str],
        sender: Any,
        sender_var: Any,
        receiver: Any,
        receiver_var: Any,
        weight: Any,
        message: FieldMessage = "held",
        variance: FieldVariance = "none",
        rate: str | None = None,
        drives: str | None = None,
    ):
        self.name, self.port, self.features, self.law = name, port, features, law
        self.members = tuple(members)
        arrays = {
            "sender": sender,
            "sender_var": sender_var,
            "receiver": receiver,
            "receiver_var": receiver_var,
        }
        sizes = {k: np.shape(v) for k, v in {**arrays, "weight": weight}.items()}
        if len(set(sizes.values())) != 1 or len(next(iter(sizes.values()))) != 1:
            raise ValueError(f"Field {name!r}: expected edge arrays of one shape (E,); received {sizes}.")
        for key, value in arrays.items():
            arr = np.asarray(value)
            if arr.size and arr.dtype.kind not in "iu":
                raise ValueError(
                    f"Field {name!r} {key}: expected integer indices; received dtype {arr.dtype}."
                )
            setattr(self, key, arr.astype(int))
        self.weight = np.asarray(weight, dtype=np.float64)
        if message not in FIELD_MESSAGES:
            raise ValueError(
                f"Field {name!r} message: expected one of {FIELD_MESSAGES}; received {message!r}."
            )
        if variance not in FIELD_VARIANCES:
            raise ValueError(
                f"Field {name!r} variance: expected one of {FIELD_VARIANCES}; received {variance!r}."
            )
        if variance == "first-order" and drives is None:
            raise ValueError(
                f"Field {name!r} drives: variance='first-order' needs the port the force drives; "
                "received None."
            )
        self.message, self.variance, self.rate, self.drives = message, variance, rate, drives
        n = len(self.members)
        for key in ("sender", "receiver"):
            idx = getattr(self, key)
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise ValueError(
                    f"Field {name!r} {key}: expected member indices in 0..{n - 1}; received "
                    f"{idx.min()}..{idx.max()}."
                )
        if not np.all(np.isfinite(self.weight)):
            raise ValueError(f"Field {name!r} weight: expected finite weights; received a non-finite one.")

    @property
    def n_edges(self) -> int:
        return int(self.sender.size)


# --------------------------------------------------------------------------------------------------------
# The engine: padded groups of staged subsystems, one field, a Jacobi exchange per step (or per stage).


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


class FieldNumbers(eqx.Module):
    """Everything numeric a compiled field graph runs on.

    Per group, the members' stacked numbers; per receiving group, its incoming edges (flat register index
    of the sender, flat receiving variable, weight), sorted by receiving variable.
    """

    groups: tuple[dict[str, Any], ...]
    edges: tuple[dict[str, Any], ...]


class FieldEstimate(NamedTuple):
    """One subsystem's filtered means (T+1, n) over t_0..t_T (row 0 the prior) and standard deviations."""

    means: Any
    stds: Any


def _field_of(graph: Any) -> Field:
    fields = graph.fields
    if len(fields) != 1:
        raise ValueError(f"Graph {graph.name!r}: expected at most one field; received {len(fields)}.")
    return fields[0]


def compile_field(graph: Any, schedule: Any, mesh: jax.sharding.Mesh | None) -> Any:
    """The :func:`twinfer.infer.graph.compile` of a graph coupled by one :class:`Field`.

    Raises:
        ValueError: for a subsystem that needs more than :data:`MAX_SUBSTEPS` Heun sub-steps per step,
            before anything is traced, naming its stiffest coupling, the stiffness and the step.

    """
    from twinfer.infer.graph._compile import Compiled

    if schedule.kind != "jacobi" or schedule.inner != 1:
        raise ValueError(
            f"compile schedule: a graph with a field runs Jacobi with one inner iteration; received "
            f"{schedule.kind!r} with inner={schedule.inner}."
        )
    subs, edges = graph.flatten()
    if edges:
        raise ValueError(
            f"Graph {graph.name!r}: a graph with a field cannot also hold interfaces (received "
            f"{len(edges)}); "
            "express the coupling through the field or split the graph."
        )
    field = _field_of(graph)
    names = tuple(s.name for s in subs)
    index = {n: i for i, n in enumerate(names)}
    devices = 1 if mesh is None else mesh.size
    keyed: dict[tuple[Any, ...], list[int]] = {}
    for i, s in enumerate(subs):
        keyed.setdefault(_field_key(s, field), []).append(i)
    groups = []
    for members in keyed.values():
        s = subs[members[0]]
        if s.estimator not in ("ukf", "wls", "wnls"):
            raise ValueError(
                f"Subsystem {s.name!r} estimator: a field graph runs 'ukf', 'wls' or 'wnls'; "
                f"received {s.estimator!r}."
            )
        if field.message == "predicted" and s.dynamics is not None and s.dynamics.method != "heun":
            raise ValueError(
                f"Subsystem {s.name!r} dynamics: predicted field messages are exchanged at Heun stages; "
                f"received integrator {s.dynamics.method!r} (build the subsystem with twinfer.sim.heun_node)."
            )
        if field.message == "predicted" and s.dynamics is None:
            raise ValueError(
                f"Subsystem {s.name!r} dynamics: field {field.name!r} has predicted messages, which step "
                "every member's vector field; build the subsystem with twinfer.sim.heun_node."
            )
        port = s.ports[field.port]

        def idx(name: str | None, s: Any = s) -> np.ndarray | None:
            return None if name is None else np.asarray(s.ports[name].state, dtype=int)

        ms = [subs[i] for i in members]
        tmpl = _FieldTemplate(
            s.transition,
            s.output.matrix() if isinstance(s.output, LinearOutput) else s.output,
            s.estimator,
            s.weights,
            s.innovation,
            s.dynamics,
            np.asarray(port.state, dtype=int),
            np.asarray(port.slots, dtype=int),
            idx(field.rate),
            idx(field.drives),
            s.n_msg,
            all(_is_diagonal(m.Q) for m in ms),
            all(_is_diagonal(m.R) for m in ms),
            "gram" if all(_positive_diagonal(m.Q) and _positive_diagonal(m.R) for m in ms) else "qr",
        )
        steps = 1 if s.dynamics is None else s.dynamics.substeps
        groups.append(_FieldGroup(tmpl, tuple(members), -len(members) % devices, steps))
    dts = {subs[i].dynamics.dt for g in groups for i in g.members if subs[i].dynamics is not None}
    if len(dts) > 1:
        raise ValueError(
            f"Graph {graph.name!r}: expected one step dt for all members; received {sorted(dts)}."
        )
    finest = max(g.substeps for g in groups)
    if finest > MAX_SUBSTEPS:
        _refuse_stiff(subs, field, next(g for g in groups if g.substeps == finest))
    if field.message == "predicted" and any(finest % g.substeps for g in groups):
        raise ValueError(
            f"Field {field.name!r}: predicted messages need every group's substeps to divide the largest; "
            f"received {sorted({g.substeps for g in groups})}."
        )
    dt = dts.pop() if dts else None
    if dt is None and (field.variance == "first-order" or field.rate is not None):
        raise ValueError(
            f"Field {field.name!r}: its variance needs the step dt; build the members with "
            "twinfer.sim.heun_node."
        )
    engine = FieldEngine(tuple(groups), field, names, dt, finest, mesh)
    numbers = field_numbers(subs, field, engine, index)
    replicated = None if mesh is None else jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    scan = jax.jit(engine.scan, out_shardings=replicated)
    return Compiled(names, engine, numbers, jax.jit(engine.step), scan)


def _refuse_stiff(subs: list[Any], field: Field, group: _FieldGroup) -> None:
    """Raise for a group needing more than :data:`MAX_SUBSTEPS`, naming its stiffest coupling.

    A coupling's stiffness is the largest entry of a member's vector-field Jacobian at its initial mean
    (messages zero) coupling one field variable into another's rate (the ``drives`` or ``rate`` port;
    without one, into any other state): the couplings inside the subsystem, a grid's branches between
    buses of one cluster. Those from other subsystems are the weights of the field's edges into it. Heun
    needs ``dt / substeps * sqrt(stiffness) <= 0.5``.
    """
    index = {s.name: i for i, s in enumerate(subs)}
    best = (-1.0, "", "")  # (stiffness, from, to)
    for i in group.members:
        s = subs[i]
        assert s.dynamics is not None  # substeps > 1 come with a Dynamics
        n_u, names = len(s.inputs), s.names
        jac = np.abs(
            np.asarray(
                jax.jacfwd(lambda x, s=s, n_u=n_u: s.dynamics.vector_field(
                    x, jnp.zeros(n_u), jnp.zeros(s.n_msg), s.params))(jnp.asarray(s.x0, jnp.float64))
            )
        )  # fmt: skip
        cols = np.asarray(s.ports[field.port].state, dtype=int)
        rated = field.drives or field.rate
        rows = np.asarray(s.ports[rated].state if rated else range(s.n_state), dtype=int)
        block = jac[np.ix_(rows, cols)]
        block[np.arange(cols.size) if rated else cols, np.arange(cols.size)] = 0.0  # a variable on itself
        r, c = np.unravel_index(int(np.argmax(block)), block.shape)
        if block[r, c] > best[0]:
            best = (float(block[r, c]), f"{names[cols[c]]!r} ({s.name})", f"{names[rows[r]]!r} ({s.name})")
    port = {m: subs[index[m]].ports[field.port].state for m in field.members}
    into = [e for e in range(field.n_edges) if index[field.members[field.receiver[e]]] in group.members]
    for e in into:
        if abs(field.weight[e]) > best[0]:
            a, b = field.members[field.sender[e]], field.members[field.receiver[e]]
            na = subs[index[a]].names[port[a][field.sender_var[e]]]
            nb = subs[index[b]].names[port[b][field.receiver_var[e]]]
            best = (float(abs(field.weight[e])), f"{na!r} ({a})", f"{nb!r} ({b})")
    s = subs[group.members[0]]
    dt = s.dynamics.dt if s.dynamics is not None else float("nan")
    stiffness, source, target = best
    shorter = dt * MAX_SUBSTEPS / group.substeps
    raise ValueError(
        f"compile: field {field.name!r}: subsystems {[subs[i].name for i in group.members][:5]} need "
        f"{group.substeps} Heun sub-steps per step of dt = {dt:g} s; expected at most MAX_SUBSTEPS = "
        f"{MAX_SUBSTEPS}. Their stiffest coupling is {source} -> {target}, of stiffness {stiffness:.3g} (a "
        f"frequency of {np.sqrt(stiffness):.3g} rad/s; Heun needs dt / substeps x frequency <= 0.5). A "
        "branch of near-zero impedance (r = x near 0) couples its two buses this stiffly: they are "
        f"electrically one bus, so merge them; or use a step dt <= {shorter:.3g} s."
    )


def _field_key(s: Any, field: Field) -> tuple[Any, ...]:
    out = s.output
    ports = tuple((k, p.state, p.slots) for k, p in sorted(s.ports.items()))
    shapes = tuple(jnp.shape(leaf) for leaf in jax.tree_util.tree_leaves(s.params))
    if field.port not in s.ports:
        raise ValueError(
            f"Field {field.name!r} port: subsystem {s.name!r} has no port {field.port!r}; "
            f"ports: {sorted(s.ports)}."
        )
    return (s.transition, out, s.estimator, s.weights, s.innovation, s.dynamics, s.n_state, len(s.inputs),
            len(s.outputs), s.n_msg, ports, shapes)  # fmt: skip


def _positive_diagonal(m: Any) -> bool:
    """A diagonal matrix with positive entries (positive-definite; a 0 x 0 matrix counts)."""
    a = np.asarray(m)
    return _is_diagonal(a) and bool(np.all(np.diagonal(a) > 0))


def _is_diagonal(m: Any) -> bool:
    a = np.asarray(m)
    return bool(np.all(a == np.diag(np.diagonal(a))))


def field_numbers(subs: list[Any], field: Field, engine: FieldEngine, index: dict[str, int]) -> FieldNumbers:
    """Stack each group's numbers and sort the field's edges by receiving group and variable."""
    from twinfer.infer.graph._compile import _factors, _stack_leaves

    def stack(items: list[Any]) -> Any:
        return jax.tree_util.tree_map(lambda *xs: _stack_leaves(xs), *items)

    gs = []
    where: dict[int, tuple[int, int]] = {}  # subsystem -> (group, position)
    offsets, offset = [], 0  # flat register offset of each group (padded)
    for gi, g in enumerate(engine.groups):
        ms = [subs[i] for i in g.members]
        for pos, i in enumerate(g.members):
            where[i] = (gi, pos)
        offsets.append(offset)
        offset += (len(g.members) + g.n_pad) * g.template.port_idx.size
        q, r = stack([s.Q for s in ms]), stack([s.R for s in ms])
        arr = {
            "params": stack([s.params for s in ms]),
            "x0": stack([s.x0 for s in ms]),
            "P0": stack([s.P0 for s in ms]),
            "Q": q,
            "R": r,
            "chol_P0": _factors(stack([s.P0 for s in ms])),
            "inputs": np.asarray([s.inputs for s in ms], dtype=int).reshape(len(ms), -1),
            "outputs": np.asarray([s.outputs for s in ms], dtype=int).reshape(len(ms), -1),
        }
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
    for gi, g in enumerate(engine.groups):
        s_var = g.template.port_idx.size
        pick = np.asarray([where[int(i)][0] == gi for i in recv_sub], dtype=bool)
        src = np.asarray(
            [
                offsets[where[int(i)][0]]
                + where[int(i)][1] * engine.groups[where[int(i)][0]].template.port_idx.size
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


@dataclasses.dataclass(frozen=True)
class FieldEngine:
    """One jitted Jacobi step of a field graph: every group's members step at once (``vmap``)."""

    groups: tuple[_FieldGroup, ...]
    field: Field
    names: tuple[str, ...]
    dt: float | None
    finest: int
    mesh: jax.sharding.Mesh | None = None

    @property
    def _dt(self) -> float:
        if self.dt is None:  # compile_field refuses a field needing dt without one
            raise ValueError(f"Field {self.field.name!r}: no step dt (members built without heun_node).")
        return self.dt

    def _shard(self, a: Any) -> Any:
        if self.mesh is None:
            return a
        spec = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(self.mesh.axis_names[0]))
        return jax.lax.with_sharding_constraint(a, spec)

    def _padded(self, num: FieldNumbers) -> tuple[dict[str, Any], ...]:
        """Each group's numbers with its inert members appended (copies of the first, never measured)."""
        out = []
        for g, arr in zip(self.groups, num.groups, strict=True):
            if g.n_pad == 0:
                out.append(arr)
                continue

            def pad(a: Any, g: _FieldGroup = g) -> Any:
                a = jnp.asarray(a)
                return jnp.concatenate([a, jnp.broadcast_to(a[:1], (g.n_pad,) + a.shape[1:])])

            padded = jax.tree_util.tree_map(pad, arr)
            padded["outputs"] = padded["outputs"].at[len(g.members) :].set(-1)
            out.append(padded)
        return tuple(out)

    def _register(self, values: Sequence[Any]) -> Any:
        """Per-group (C, S) values -> the flat register (sum of C S,) in group order."""
        return jnp.concatenate([v.reshape(-1) for v in values])

    def _port(self, means: Sequence[Any]) -> list[Any]:
        return [m[:, g.template.port_idx] for g, m in zip(self.groups, means, strict=True)]

    def _sums(self, register: Any, edges: dict[str, Any], g: _FieldGroup, n_members: int) -> Any:
        """Each member's message vector (C, n_msg): the segment sums of its incoming edges' features."""
        s = g.template.port_idx.size
        feats = jax.vmap(lambda v: jnp.atleast_1d(self.field.features(v)))(register[edges["src"]])
        k = feats.shape[1]
        sums = jax.ops.segment_sum(
            edges["weight"][:, None] * feats,
            edges["dst"],
            num_segments=n_members * s,
            indices_are_sorted=True,
        )
        m = jnp.zeros((n_members, g.template.n_msg), register.dtype)
        return m.at[:, g.template.slots].set(sums.reshape(n_members, s * k))

    def _predicted(
        self, arrs: Sequence[Any], edges: Sequence[Any], means: Sequence[Any], u: Any
    ) -> list[Any]:
        """Staged messages (C, substeps, 2, n_msg) per group with every member following its mean.

        All groups' means advance together at the finest group's Heun sub-step, the sums exchanged at
        every stage (a Jacobi exchange per stage, O(variables + edges)). A group with as many sub-steps
        as the finest reads each stage's sums exactly; one with fewer reads the fine prediction at its own
        stage times (the start of each of its sub-steps, and the end for its corrector).
        """
        sizes = [m.shape[0] for m in means]
        h = self._dt / self.finest
        us = [_columns(u, a["inputs"]) for a in arrs]
        fields = [_vector_field(g) for g in self.groups]

        def exchange(y: Sequence[Any]) -> list[Any]:
            reg = self._register(self._port(y))
            return [self._sums(reg, e, g, c) for e, g, c in zip(edges, self.groups, sizes, strict=True)]

        def stage(_: Any, y: Sequence[Any]) -> Any:
            ms = exchange(y)
            d = [
                jax.vmap(vf)(yy, uu, mm, a["params"])
                for vf, yy, uu, mm, a in zip(fields, y, us, ms, arrs, strict=True)
            ]
            return d, ms

        def substep(y: list[Any], _: Any) -> tuple[list[Any], tuple[Any, Any]]:
            return heun_step(stage, 0.0, y, h, has_aux=True)

        # a scan, not a Python loop: the count comes from the data (the network's stiffness)
        y, (first, second) = jax.lax.scan(substep, list(means), None, length=self.finest)
        end = exchange(y) if min(g.substeps for g in self.groups) < self.finest else None
        out = []
        for gi, g in enumerate(self.groups):  # first[gi], second[gi]: (finest, C, n_msg)
            ratio = self.finest // g.substeps
            start = first[gi][::ratio]
            if ratio == 1:
                corrector = second[gi]
            else:  # the fine prediction at the end of each of its sub-steps
                assert end is not None
                corrector = jnp.concatenate([first[gi][ratio::ratio], end[gi][None]])
            out.append(jnp.stack([start, corrector], axis=2).transpose(1, 0, 2, 3))
        return out

    def _force_variance(self, register: Any, variance: Any, own: Any, edges: dict[str, Any]) -> Any:
        """First-order variance of each receiving variable's force (C, S) (module docstring)."""
        c, s = own.shape
        slope = jax.vmap(jax.grad(self.field.law, argnums=0))(
            register[edges["src"]], own.reshape(-1)[edges["dst"]]
        )
        terms = (edges["weight"] * slope) ** 2 * variance[edges["src"]]
        return jax.ops.segment_sum(terms, edges["dst"], num_segments=c * s, indices_are_sorted=True).reshape(
            c, s
        )

    def _variable_variance(self, variances: Sequence[Any]) -> Any:
        """The register's variances: each field variable's, plus dt^2/3 that of its rate."""
        out = []
        for g, v in zip(self.groups, variances, strict=True):
            var = v[:, g.template.port_idx]
            if g.template.rate_idx is not None:
                var = var + self._dt**2 / 3.0 * v[:, g.template.rate_idx]
            out.append(var)
        return self._register(out)

    def init(self, num: FieldNumbers) -> Any:
        return self._init(self._padded(num))

    def _init(self, arrs: Sequence[dict[str, Any]]) -> Any:
        means = [self._shard(jnp.asarray(a["x0"])) for a in arrs]
        chols = [self._shard(jnp.asarray(a["chol_P0"])) for a in arrs]
        variances = [jnp.sum(c**2, axis=-1) for c in chols]
        return means, chols, self._register(self._port(means)), self._variable_variance(variances)

    def step(self, num: FieldNumbers, carry: Any, inp: Any) -> Any:
        """One time step: messages, every member's predict/update, the register refreshed."""
        return self._step(self._padded(num), num, carry, inp)

    def _step(self, arrs: Sequence[dict[str, Any]], num: FieldNumbers, carry: Any, inp: Any) -> Any:
        """:meth:`step` on numbers already padded (once per scan, not once per step)."""
        means, chols, reg_val, reg_var = carry
        u, y, mask = inp
        sizes = [m.shape[0] for m in means]
        if self.field.message == "held":
            ms = [
                jnp.broadcast_to(
                    self._sums(reg_val, e, g, c)[:, None, None, :], (c, g.substeps, 2, g.template.n_msg)
                )
                for e, g, c in zip(num.edges, self.groups, sizes, strict=True)
            ]
        else:
            ms = self._predicted(arrs, num.edges, means, u)
        outs = []
        for g, a, e, mean, chol, m in zip(self.groups, arrs, num.edges, means, chols, ms, strict=True):
            tmpl = g.template
            q = jnp.asarray(a["q_diag"] if tmpl.diag_q else a["chol_Q"])
            if self.field.variance == "first-order":
                own = mean[:, tmpl.port_idx]
                extra = self._dt**2 * self._force_variance(reg_val, reg_var, own, e)
                if tmpl.diag_q:
                    q = q.at[:, tmpl.drives_idx].add(extra)
                else:  # appended factor columns sqrt(extra) on the driven states
                    cols = jnp.zeros(q.shape[:2] + (tmpl.drives_idx.size,), q.dtype)
                    cols = cols.at[:, tmpl.drives_idx, jnp.arange(tmpl.drives_idx.size)].set(jnp.sqrt(extra))
                    q = jnp.concatenate([q, cols], axis=2)
            # a diagonal Q stays its variances (C, n); the member's step makes the factor
            cols = a["outputs"]
            seen = cols >= 0
            safe = jnp.where(seen, cols, 0)
            y_l, mask_l = y[safe], seen & mask[safe]
            local = functools.partial(_field_local_step, tmpl)
            args = (a["params"], a["inputs"], a["chol_R"], mean, chol, m, q, y_l, mask_l)
            outs.append(jax.vmap(lambda *xs, local=local, u=u: local(u, *xs))(*map(self._shard, args)))
        new_means = [self._shard(o[0]) for o in outs]
        new_chols = [self._shard(o[1]) for o in outs]
        variances = [o[2] for o in outs]
        carry = (
            new_means,
            new_chols,
            self._register(self._port(new_means)),
            self._variable_variance(variances),
        )
        return carry, ([o[0] for o in outs], [jnp.sqrt(v) for v in variances], [o[3] for o in outs])

    def scan(self, num: FieldNumbers, us: Any, ys: Any, masks: Any, us_meas: Any = None) -> Any:
        """Scan :meth:`step` over T steps (``us_meas``: as :meth:`twinfer.infer.graph.Compiled.scan`).

        Returns:
            ``(means, stds, ok)``: per group, (T, C, n) over t_1..t_T and (T, C) True where the member's
            posterior is finite and its factor valid, inert members dropped. :func:`check_field_run`
            turns a False into a named error.

        """
        ys = jnp.where(masks, ys, 0.0)
        arrs = self._padded(num)
        pairs = jnp.concatenate([us, us if us_meas is None else jnp.asarray(us_meas, us.dtype)], axis=-1)
        _, (means, stds, oks) = jax.lax.scan(
            lambda c, i: self._step(arrs, num, c, i), self._init(arrs), (pairs, ys, masks)
        )
        keep = [len(g.members) for g in self.groups]
        trim = lambda xs: [x[:, :k] for x, k in zip(xs, keep, strict=True)]  # noqa: E731
        return trim(means), trim(stds), trim(oks)


def check_field_run(compiled: Any, ok: Sequence[Any], times: Any = None) -> None:
    """Raise :class:`~twinfer.infer.filters.DivergenceError` for the member that diverged first.

    Args:
        compiled: the compiled field graph.
        ok: per group (T, C) flags from its ``scan``.
        times: the record's times t_0..t_T, to name the time as well as the step.

    Raises:
        DivergenceError: naming the subsystem, the step (and time), the field and the likely causes;
            others that diverged later are listed (a diverged member's messages spread its NaN).

    """
    first: list[tuple[int, int, str]] = []
    order = 0
    for g, flags in zip(compiled.engine.groups, ok, strict=True):
        flags = np.asarray(flags)
        for j, i in enumerate(g.members):
            bad = np.flatnonzero(~flags[:, j])
            if bad.size:
                first.append((int(bad[0]), order + j, compiled.names[i]))
        order += len(g.members)
    if not first:
        return
    step, _, name = min(first)
    when = f" (t = {float(np.asarray(times)[step + 1]):g})" if times is not None else ""
    others = sorted({n for _, _, n in first if n != name})
    also = f" {len(others)} more diverged later, e.g. {others[:3]}." if others else ""
    raise DivergenceError(
        f"field graph run diverged: subsystem {name!r} at step {step}{when}: its state became non-finite or "
        "its covariance stopped being positive-definite. Likely causes: process noise Q or measurement "
        f"noise R too small for the model, a step too large for the coupling (more substeps), or messages "
        f"of field {compiled.engine.field.name!r} that grow without bound.{also}"
    )


def _columns(values: Any, cols: Any) -> Any:
    """``values[cols]`` with column -1 read as 0 (an input the data does not carry, e.g. an unforced mass)."""
    if values.shape[0] == 0:
        return jnp.zeros(jnp.shape(cols), values.dtype)
    return jnp.where(cols >= 0, values[jnp.maximum(cols, 0)], 0.0)


def _vector_field(g: _FieldGroup) -> Callable[..., Any]:
    if g.template.dynamics is None:  # compile_field refuses predicted messages without dynamics
        raise ValueError("predicted field messages need every member built with twinfer.sim.heun_node.")
    return g.template.dynamics.vector_field


def _field_local_step(tmpl: _FieldTemplate, u_all, params, inputs, chol_r, mean, chol, m, q, y, mask):
    """One member's predict/update with its staged message ``m``: (mean, factor, variances, ok).

    ``q`` is the process noise's variances (n,) when the group's Q is diagonal, else a factor (n, k).
    """
    half = u_all.shape[0] // 2  # the step's input pair: held over the step, read with y (step_inputs)
    u, u_meas = _columns(u_all[:half], inputs), _columns(u_all[half:], inputs)
    f = lambda xx, uu: tmpl.transition(xx, uu, m, params)  # noqa: E731
    if callable(tmpl.output):
        h: Any = lambda xx, uu: tmpl.output(xx, u_meas, m, params)  # noqa: E731
    else:
        h = jnp.asarray(tmpl.output)
    if tmpl.estimator in STATIC_STEPS:
        cov_r = chol_r**2 if chol_r.ndim == 1 else chol_r @ chol_r.T  # variances when diagonal
        cov_q = q if tmpl.diag_q else q @ q.T
        step = STATIC_STEPS[tmpl.estimator]
        out = step(f, h, mean, cov_q, cov_r, u, y, mask, innovation=tmpl.innovation)
        return out.mean, chol, jnp.diagonal(out.cov), out.ok
    chol_q = jnp.diag(jnp.sqrt(q)) if tmpl.diag_q else q
    gram = tmpl.kernel == "gram" and tmpl.weights.centre_weight(mean.shape[0]) >= 0
    out = ukf_step(
        f, h, mean, chol, chol_q, chol_r, u, y, mask,
        weights=tmpl.weights, innovation=tmpl.innovation, kernel="gram" if gram else "qr",
    )  # fmt: skip
    return out.mean, out.chol, jnp.sum(out.chol**2, axis=1), out.ok


def run_field(
    graph: Any,
    dataset: Any = None,
    *,
    us: Any = None,
    ys: Any = None,
    compiled: Any = None,
    mesh: jax.sharding.Mesh | None = None,
) -> dict[str, FieldEstimate]:
    """Run a field graph over a record; each subsystem's filtered means and standard deviations by name.

    The record is a :class:`twinfer.data.Dataset` or arrays ``us`` (T, n_u) and ``ys`` (T, n_y), aligned
    as in :func:`twinfer.infer.graph.run` (NaN observations are missing). Only marginal standard
    deviations are kept: a network of thousands of subsystems would not hold every covariance over time.

    Raises:
        ValueError: as :func:`twinfer.infer.graph.run` for the record and the numbers, and for a
            coupling too stiff for :data:`MAX_SUBSTEPS` sub-steps (:func:`compile_field`).
        DivergenceError: (a ``ValueError``) when a subsystem diverges, naming it, the step and time
            (:func:`check_field_run`).

    """
    from twinfer.infer.graph._compile import _prepare_record, compile

    graph.check_dataset(dataset, "run_field")
    compiled = compile(graph, mesh=mesh) if compiled is None else compiled
    us, ys, masks, times, us_meas = _prepare_record(compiled, compiled.numbers, dataset, us, ys)
    means, stds, ok = compiled.scan(
        compiled.numbers, jnp.asarray(us), jnp.asarray(ys), jnp.asarray(masks), us_meas=us_meas
    )
    check_field_run(compiled, jax.tree_util.tree_map(np.asarray, ok), times)
    return field_estimates(compiled, means, stds)


def field_estimates(compiled: Any, means: Any, stds: Any) -> dict[str, FieldEstimate]:
    """Split the per-group outputs of a field graph's ``scan`` by subsystem, the prior prepended."""
    means, stds = jax.tree_util.tree_map(np.asarray, (means, stds))
    out = {}
    for gi, g in enumerate(compiled.engine.groups):
        arr = compiled.numbers.groups[gi]
        x0 = np.asarray(arr["x0"])
        sd0 = np.sqrt(np.diagonal(np.asarray(arr["P0"]), axis1=1, axis2=2))
        for j, i in enumerate(g.members):
            out[compiled.names[i]] = FieldEstimate(
                np.concatenate([x0[j][None], means[gi][:, j]]), np.concatenate([sd0[j][None], stds[gi][:, j]])
            )
    return out
