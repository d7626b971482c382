"""The field engine: many subsystems coupled through sparse sums of their neighbours' interface variables.

A :class:`~twinfer.infer.graph.Field` is the interface kind of a network whose subsystems interact
through a separable law, ``F_a = sum_j w_aj law(s_j, s_a)`` with
``law(s_j, s_a) = readout(s_a) . features(s_j)`` (the Kuramoto coupling
``K_aj sin(theta_j - theta_a) = cos(theta_a) K_aj sin(theta_j) - sin(theta_a) K_aj cos(theta_j)``).
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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferRuntimeError
from twinfer.infer.filters import DivergenceError, ukf_step
from twinfer.infer.filters._wls import STATIC_STEPS
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._numbers import (
    Compiled,
    FieldNumbers,
    _columns,
    _FieldGroup,
    _FieldTemplate,
    field_numbers,
)
from twinfer.infer.graph._parts import Field, LinearOutput
from twinfer.sim import heun_step

MAX_SUBSTEPS = 64
"""Most Heun sub-steps per step a field graph's subsystem may need; above, :func:`compile` refuses it.

Sub-steps come from the data (a network's coupling strengths,
:func:`twinfer.infer.graph._kuramoto.stable_substeps`), and each one costs a neighbour exchange per stage and
a pass of every sigma point through the vector field: 64 is 16 times PEGASE 9241's 4 at dt = 0.01. A count in
the thousands (a MATPOWER branch with r = x = 1e-12 asks for 16,818) means two buses joined by a near-zero
impedance, electrically one bus: merged, or given a smaller step, they need none of it.
"""


def _field_of(graph: Graph) -> Field:
    fields = graph.fields
    if len(fields) != 1:
        raise ValueError(f"Graph {graph.name!r}: expected at most one field; received {len(fields)}.")
    return fields[0]


def compile_field(graph: Graph, schedule: Any, mesh: jax.sharding.Mesh | None) -> Compiled:
    """The :func:`twinfer.infer.graph._run.compile` of a graph coupled by one :class:`Field`.

    Raises:
        ValueError: for a subsystem that needs more than :data:`MAX_SUBSTEPS` Heun sub-steps per step,
            before anything is traced, naming its stiffest coupling, the stiffness and the step.

    """
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
    numbers = field_numbers(subs, field, engine.groups, index)
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
    def edge_groups(self) -> tuple[()]:
        """None: a field graph's members are coupled by its field alone, through no interfaces."""
        return ()

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
                if end is None:  # a coarser group than the finest implies the exchange above ran
                    raise TwinferRuntimeError("internal: a sub-stepped group without the fine prediction.")
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
        outs, innov = [], jnp.zeros(y.shape, y.dtype)
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
            # each member's standardised innovations, at their columns of the record (padding dropped)
            innov = innov.at[jnp.where(seen, cols, y.shape[0])].set(outs[-1][4], mode="drop")
        new_means = [self._shard(o[0]) for o in outs]
        new_chols = [self._shard(o[1]) for o in outs]
        variances = [o[2] for o in outs]
        carry = (
            new_means,
            new_chols,
            self._register(self._port(new_means)),
            self._variable_variance(variances),
        )
        return carry, ([o[0] for o in outs], [jnp.sqrt(v) for v in variances], [o[3] for o in outs], innov)

    def scan(self, num: FieldNumbers, us: Any, ys: Any, masks: Any, us_meas: Any = None) -> Any:
        """Scan :meth:`step` over T steps (``us_meas``: as :meth:`Compiled.scan`).

        Returns:
            ``(means, stds, ok)``: per group, (T, C, n) over t_1..t_T and (T, C) True where the member's
            posterior is finite and its factor valid, inert members dropped. :func:`check_field_run`
            turns a False into a named error.

        """
        ys = jnp.where(masks, ys, 0.0)
        arrs = self._padded(num)
        pairs = jnp.concatenate([us, us if us_meas is None else jnp.asarray(us_meas, us.dtype)], axis=-1)

        def body(c: Any, i: Any) -> Any:
            c, (mu, sd, ok, _) = self._step(arrs, num, c, i)  # the innovations: a live twin's (Row.innov)
            return c, (mu, sd, ok)

        _, (means, stds, oks) = jax.lax.scan(body, self._init(arrs), (pairs, ys, masks))
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


def _vector_field(g: _FieldGroup) -> Callable[..., Any]:
    if g.template.dynamics is None:  # compile_field refuses predicted messages without dynamics
        raise ValueError("predicted field messages need every member built with twinfer.sim.heun_node.")
    return g.template.dynamics.vector_field


def _field_local_step(tmpl: _FieldTemplate, u_all, params, inputs, chol_r, mean, chol, m, q, y, mask):
    """One member's predict/update with its staged message ``m``: (mean, factor, variances, ok, innov).

    ``innov``: each local output's innovation over its predicted sd (0 unobserved, and for the static
    estimators, which predict none).

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
        return out.mean, chol, jnp.diagonal(out.cov), out.ok, jnp.zeros(y.shape, mean.dtype)
    chol_q = jnp.diag(jnp.sqrt(q)) if tmpl.diag_q else q
    gram = tmpl.kernel == "gram" and tmpl.weights.centre_weight(mean.shape[0]) >= 0
    out = ukf_step(
        f, h, mean, chol, chol_q, chol_r, u, y, mask,
        weights=tmpl.weights, innovation=tmpl.innovation, kernel="gram" if gram else "qr",
    )  # fmt: skip
    innov = jnp.zeros(y.shape, mean.dtype) if out.innov is None else out.innov
    return out.mean, out.chol, jnp.sum(out.chol**2, axis=1), out.ok, innov
