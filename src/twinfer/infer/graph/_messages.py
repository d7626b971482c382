"""Local message passing: the graph's subsystems, stacked by kind, exchange interface messages each step.

Schedules (specs/compositional-inference.md section 1.1): in every inner iteration each subsystem steps
from its posterior at t_n with messages built from the current iterate of its neighbours:

* ``jacobi`` (Alg. 1, S3-S4): all subsystems at once; iteration 1 uses the posteriors at t_n, iteration
  k > 1 the iteration k-1 estimates at t_{n+1} (K -> many converges to the coupling fixed point);
* ``gauss_seidel`` (Alg. 2, S5-S7): colour classes of the interaction graph in turn, each using the
  freshest iterate of its neighbours;
* ``ab2``: the [REPO] reading of Alg. 3 (S8-S10): the *sender's* interface states extrapolated,
  1.5 s^n - 0.5 s^{n-1}, before a Jacobi step, while each receiver evaluates the law with its own
  current state (the authors' script 04 extrapolates only the neighbour's x, v); plain Jacobi on the
  first step.

Message rules (:class:`~twinfer.infer.graph.Interface` ``rule``): ``"paper"`` (S30-S46: the law at both
means, held over the step, its unscented variance's positive increment injected as process noise),
``"split"`` (the receiver evaluates the law at its own sigma points and integrator stages; a
probabilistic sender's error is a consider state of the receiver) and ``"shared"`` (``"split"``, with the
part of the sender's error correlated with the receiver's read through the receiver's own deviation,
weighted by :data:`SHARE`). Their derivation and the measurements behind each choice are in
``docs/design-messages.md``.

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource for coupled engineered systems",
    section 1, Alg. 1-3, SI (S3)-(S10), (S30)-(S46).
    S. F. Schmidt (1966); Brown & Hwang, 4th ed., sec. 9.4 (consider states).

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._local import (
    _local_step,
    _predict_mean,
    _psd_part,
    _psd_root,
    _psd_root_pinv,
    law_moments,
)
from twinfer.infer.graph._numbers import Compiled, Numbers, _EdgeGroup, _Group, _Template, numbers_of
from twinfer.infer.graph._parts import Interface, LinearOutput, Subsystem
from twinfer.infer.graph._results import _diverged_message

SCHEDULES = ("jacobi", "gauss_seidel", "ab2")

SHARE = 0.5
"""The weight of the sender's estimate of the cross-covariance in a consider message (rule ``"shared"``).

Measured, not derived: ``docs/design-messages.md`` has the table it was chosen from.
"""


class Schedule(eqx.Module):
    """Message-passing schedule and the number ``inner`` of iterations K per time step."""

    kind: str = eqx.field(static=True, default="jacobi")
    inner: int = eqx.field(static=True, default=1)

    def __check_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"Schedule kind: expected one of {SCHEDULES}; received {self.kind!r}.")
        if self.inner < 1:
            raise ValueError(f"Schedule inner: expected >= 1 inner iterations; received {self.inner}.")


class _SplitIn(NamedTuple):
    """The ``"split"`` edges of one edge group into the members of one group, padded to J per member."""

    edge_group: int
    law: Callable[[Any, Any, Any], Any]
    edge: np.ndarray  # (G, J) positions in the edge group's members (0 where padded)
    recv: np.ndarray  # (G, J, p_r) the receiver's local state indices of its port
    slots: np.ndarray  # (G, J, m) the receiver's local message slots
    valid: np.ndarray  # (G, J) 1.0 for a real edge, 0.0 for padding
    z_start: int = -1  # probabilistic: first index of the edges' consider states after the state, else -1


class _Reverse(NamedTuple):
    """Where a consider edge's sender keeps its cross-covariance with the receiver's error.

    For the edges ``pos`` (positions in a probabilistic split edge group) whose senders are the
    ``member``s of group ``group``: the sender's port state indices ``rows`` (E, p_s) and the state
    indices ``cols`` (E, p_r) of the consider states by which the sender reads the *receiver* (the
    reverse edge's), so that ``P[rows, cols]`` is the sender's covariance of its port error with the
    receiver's whitened error.
    """

    group: int
    pos: np.ndarray  # (E,)
    member: np.ndarray  # (E,)
    rows: np.ndarray  # (E, p_s)
    cols: np.ndarray  # (E, p_r)
    keep: np.ndarray  # (E, p_s, p_r) 1.0 between two states, 0.0 where either is an unknown parameter


def _group_key(s: Subsystem) -> tuple[Any, ...]:
    ports = tuple((k, p.state, p.slots) for k, p in sorted(s.ports.items()))
    shapes = tuple(jnp.shape(leaf) for leaf in jax.tree_util.tree_leaves(s.params))
    return (
        s.transition,
        s.output,
        s.innovation,
        s.estimator,
        s.weights,
        s.n_state,
        len(s.inputs),
        len(s.outputs),
        s.n_msg,
        ports,
        shapes,
        s.dynamics,
        s.memory,
    )


def _port_layout(s: Subsystem) -> dict[str, tuple[int, int]]:
    out, start = {}, 0
    for name, port in sorted(s.ports.items()):
        out[name] = (start, start + len(port.state))
        start += len(port.state)
    return out


def compile_messages(graph: Graph, schedule: Schedule) -> Compiled:
    """Build the stacked arrays and index maps of ``graph`` (interfaces only) and jit its time step.

    :func:`twinfer.infer.graph._run.compile` for a graph without a field: identical subsystems (same
    functions, shapes and ports) are stacked and vmapped; interfaces are index arrays into a flat vector
    of interface variables (gather) and a flat vector of message slots (scatter-add, the aggregation
    A = sum). There is no Python loop over subsystems inside a time step.

    Raises:
        ValueError: for a split interface into a learned subsystem with memory, naming it.

    """
    subs, edges = graph.flatten()
    names = tuple(s.name for s in subs)
    index = {n: i for i, n in enumerate(names)}
    keyed: dict[tuple[Any, ...], list[int]] = {}
    for i, s in enumerate(subs):
        keyed.setdefault(_group_key(s), []).append(i)
    groups, port_base, slot_base = [], {}, {}
    n_ports = n_slots = 0
    port_owner: list[tuple[int, int]] = []  # (member position, local index) of every interface variable
    slot_owner: list[tuple[int, int]] = []  # the same for every message slot
    for members in keyed.values():
        tmpl = subs[members[0]]
        pidx = np.asarray([i for _, p in sorted(tmpl.ports.items()) for i in p.state], dtype=int)
        output = (
            _linear_output(tmpl.output.matrix()) if isinstance(tmpl.output, LinearOutput) else tmpl.output
        )
        spec = _Template(
            tmpl.transition,
            output,
            tmpl.estimator,
            tmpl.weights,
            tmpl.n_msg,
            tmpl.innovation,
            tmpl.dynamics,
            tmpl.memory,
        )
        groups.append(_Group(spec, tuple(members), pidx))
        for i in members:
            position = len(port_base)
            port_base[i], slot_base[i] = n_ports, n_slots
            n_ports += pidx.size
            n_slots += tmpl.n_msg
            port_owner += [(position, j) for j in range(pidx.size)]
            slot_owner += [(position, j) for j in range(tmpl.n_msg)]
    colour_of = graph.colours()
    colours = tuple(np.asarray([colour_of[names[i]] for i in g.members]) for g in groups)
    ekeyed: dict[tuple[Any, ...], list[int]] = {}
    for k, e in enumerate(edges):
        si, ri = index[e.sender], index[e.receiver]
        key = (e.law, len(subs[si].ports[e.sender_port].state), len(subs[ri].ports[e.receiver_port].state))
        split = e.rule in ("split", "shared")
        consider = split and e.kind == "probabilistic"
        key += (len(subs[ri].ports[e.receiver_port].slots), split, consider, consider and e.rule == "shared")
        ekeyed.setdefault(key, []).append(k)
    edge_groups = []
    for key, members in ekeyed.items():
        send, recv, target = [], [], []
        for k in members:
            e = edges[k]
            si, ri = index[e.sender], index[e.receiver]
            a, b = _port_layout(subs[si])[e.sender_port]
            send.append(port_base[si] + np.arange(a, b))
            a, b = _port_layout(subs[ri])[e.receiver_port]
            recv.append(port_base[ri] + np.arange(a, b))
            target.append(slot_base[ri] + np.asarray(subs[ri].ports[e.receiver_port].slots, dtype=int))
        edge_groups.append(
            _EdgeGroup(key[0], tuple(members), np.stack(send), np.stack(recv), np.stack(target), *key[-3:])
        )
    split_in = _split_tables(subs, edges, groups, edge_groups, index)
    for e in edges:
        if e.rule in ("split", "shared") and subs[index[e.receiver]].memory:
            raise ValueError(
                f"Interface {e.sender}.{e.sender_port} -> {e.receiver}.{e.receiver_port} rule: a learned "
                "subsystem with memory evaluates no law at sigma points; expected rule 'paper'; "
                f"received {e.rule!r}."
            )
    numbers = numbers_of(subs, edges, groups, edge_groups)
    engine = _Engine(
        tuple(groups),
        tuple(edge_groups),
        schedule,
        n_ports,
        n_slots,
        colours,
        max(colour_of.values()) + 1,
        names,
        np.asarray(port_owner, dtype=int).reshape(-1, 2),
        np.asarray(slot_owner, dtype=int).reshape(-1, 2),
        split_in,
        _reverse_tables(subs, edges, groups, edge_groups, split_in, index),
    )
    scan = jax.jit(engine.scan, static_argnames=("check",))
    return Compiled(names, engine, numbers, jax.jit(engine.step), scan)


def _split_tables(
    subs: list[Subsystem],
    edges: list[Interface],
    groups: list[_Group],
    edge_groups: list[_EdgeGroup],
    index: dict[str, int],
) -> tuple[tuple[_SplitIn, ...], ...]:
    """Per group, one padded table of incoming ``"split"`` edges for each split edge group."""
    where = {i: (gi, j) for gi, g in enumerate(groups) for j, i in enumerate(g.members)}
    out: list[list[_SplitIn]] = [[] for _ in groups]
    z_used = [0] * len(groups)  # consider states laid out so far, per group
    for egi, eg in enumerate(edge_groups):
        if not eg.split:
            continue
        per: dict[int, list[list[tuple[int, Interface]]]] = {}
        for pos, k in enumerate(eg.members):
            gi, j = where[index[edges[k].receiver]]
            per.setdefault(gi, [[] for _ in groups[gi].members])[j].append((pos, edges[k]))
        for gi, lists in per.items():
            width = max(len(lst) for lst in lists)
            recv_port = lists[0][0][1] if lists[0] else next(lst[0][1] for lst in lists if lst)
            p_r = len(subs[index[recv_port.receiver]].ports[recv_port.receiver_port].state)
            n_m = eg.target.shape[1]
            edge = np.zeros((len(lists), width), dtype=int)
            recv = np.zeros((len(lists), width, p_r), dtype=int)
            slots = np.zeros((len(lists), width, n_m), dtype=int)
            valid = np.zeros((len(lists), width))
            for j, lst in enumerate(lists):
                for w, (pos, e) in enumerate(lst):
                    port = subs[index[e.receiver]].ports[e.receiver_port]
                    edge[j, w], recv[j, w], slots[j, w], valid[j, w] = pos, port.state, port.slots, 1.0
            z_start = -1
            if eg.consider:
                z_start, z_used[gi] = z_used[gi], z_used[gi] + width * eg.send.shape[1]
            out[gi].append(_SplitIn(egi, eg.law, edge, recv, slots, valid, z_start))
    return tuple(tuple(t) for t in out)


def _reverse_tables(
    subs: list[Subsystem],
    edges: list[Interface],
    groups: list[_Group],
    edge_groups: list[_EdgeGroup],
    split_in: tuple[tuple[_SplitIn, ...], ...],
    index: dict[str, int],
) -> tuple[tuple[_Reverse, ...], ...]:
    """Per edge group, the :class:`_Reverse` gathers of its consider edges that have a consider reverse edge.

    The reverse of ``S.a -> R.b`` is ``R.b -> S.a``; when it is a probabilistic split edge too, the
    sender S carries consider states for R's port error, and its covariance with them is what
    :meth:`_Engine.cross` reads.
    """
    where = {i: (gi, j) for gi, g in enumerate(groups) for j, i in enumerate(g.members)}
    place: dict[int, tuple[int, int]] = {}  # edge k -> (edge group, position)
    for egi, eg in enumerate(edge_groups):
        for pos, k in enumerate(eg.members):
            place[k] = (egi, pos)
    ends = {(e.sender, e.sender_port, e.receiver, e.receiver_port): k for k, e in enumerate(edges)}
    out: list[tuple[_Reverse, ...]] = []
    for eg in edge_groups:
        found: dict[int, list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]] = {}
        for pos, k in enumerate(eg.members) if eg.shared else ():
            e = edges[k]
            back = ends.get((e.receiver, e.receiver_port, e.sender, e.sender_port))
            if back is None or not edge_groups[place[back][0]].consider:
                continue
            b_egi, b_pos = place[back]
            s_idx = index[e.sender]
            gs, js = where[s_idx]
            table = next(t for t in split_in[gs] if t.edge_group == b_egi)
            w = int(np.flatnonzero((table.edge[js] == b_pos) & (table.valid[js] > 0))[0])
            p_r = edge_groups[b_egi].send.shape[1]
            n_s = int(np.shape(subs[s_idx].x0)[-1])
            cols = n_s + table.z_start + w * p_r + np.arange(p_r)
            rows = np.asarray(subs[s_idx].ports[e.sender_port].state, dtype=int)
            keep = np.outer(
                _is_state(subs[s_idx], e.sender_port), _is_state(subs[index[e.receiver]], e.receiver_port)
            )
            found.setdefault(gs, []).append((pos, js, rows, cols, keep))
        out.append(
            tuple(
                _Reverse(
                    gs,
                    np.asarray([f[0] for f in fs]),
                    np.asarray([f[1] for f in fs]),
                    np.stack([f[2] for f in fs]),
                    np.stack([f[3] for f in fs]),
                    np.stack([f[4] for f in fs]),
                )
                for gs, fs in found.items()
            )
        )
    return tuple(out)


def _is_state(sub: Subsystem, port: str) -> np.ndarray:
    """1.0 for each variable of ``sub``'s port that is a state, 0.0 for an unknown parameter."""
    held = {sub.names.index(p) for p in sub.parameters}
    return np.asarray([0.0 if i in held else 1.0 for i in sub.ports[port].state])


def _linear_output(matrix: np.ndarray) -> Callable[..., Any]:
    """``(x, u, m, params) -> H x``: a subsystem's output given as a matrix."""
    return lambda x, u, m, params: jnp.asarray(matrix) @ x


@dataclasses.dataclass(frozen=True)
class _Engine:
    groups: tuple[_Group, ...]
    edge_groups: tuple[_EdgeGroup, ...]
    schedule: Schedule
    n_ports: int
    n_slots: int
    colours: tuple[np.ndarray, ...]
    n_colours: int
    names: tuple[str, ...] = ()  # subsystem names in compile order (for error messages)
    port_owner: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 2), int))
    slot_owner: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 2), int))
    split_in: tuple[tuple[_SplitIn, ...], ...] = ()  # per group: its incoming "split" edges
    reverse: tuple[tuple[_Reverse, ...], ...] = ()  # per edge group: its senders' cross-covariances

    @property
    def _p_max(self) -> int:
        return max([1] + [g.port_idx.size for g in self.groups])

    @property
    def _m_max(self) -> int:
        return max([1] + [g.template.n_msg for g in self.groups])

    def n_z(self, gi: int) -> int:
        """The number of consider states group ``gi`` carries after its state (probabilistic split edges)."""
        tables = self.split_in[gi] if self.split_in else ()
        return sum(
            t.edge.shape[1] * self.edge_groups[t.edge_group].send.shape[1] for t in tables if t.z_start >= 0
        )

    def ports(self, means: tuple[Any, ...], chols: tuple[Any, ...]) -> tuple[Any, Any]:
        """Flat interface variables (n_ports,) and each member's port covariance (M, p_max, p_max).

        The covariance is block-diagonal over subsystems, so only the blocks are kept (padded to the
        largest port): memory O(M p^2), not O(n_ports^2), whatever the size of the graph.
        """
        vals, blocks = [], []
        p_max = self._p_max
        for g, mu, L in zip(self.groups, means, chols, strict=True):
            p = g.port_idx.size
            vals.append(mu[:, g.port_idx].reshape(-1))
            rows = L[:, g.port_idx, :]
            block = jnp.einsum("gik,gjk->gij", rows, rows)
            blocks.append(jnp.pad(block, ((0, 0), (0, p_max - p), (0, p_max - p))))
        flat = jnp.concatenate(vals) if vals else jnp.zeros(0)
        return flat, jnp.concatenate(blocks)

    def _port_cov(self, blocks: Any, idx: np.ndarray) -> Any:
        """Covariances (E, p, p) of the interface variables ``idx`` (E, p), each row one member's."""
        if idx.shape[1] == 0:  # a port that reads no state (a receiver that only takes messages)
            return jnp.zeros((idx.shape[0], 0, 0))
        owner, local = self.port_owner[idx[:, 0], 0], self.port_owner[idx, 1]
        return blocks[owner[:, None, None], local[:, :, None], local[:, None, :]]

    def messages(self, num: Numbers, s: Any, s_cov: Any, var_prev: tuple[Any, ...], s_own: Any = None):
        """Summed message means (n_slots,), per-receiver injected covariances, new edge variances.

        The injected covariances ``cm`` are one (m_max, m_max) block per subsystem (M of them), added to
        the process noise. Senders' interface variables come from ``s``, receivers' from ``s_own``
        (default ``s``). A ``"split"`` edge adds nothing here: its receiver evaluates the law itself, and
        a probabilistic one carries its sender's uncertainty as consider states.
        """
        s_own = s if s_own is None else s_own
        m = jnp.zeros(self.n_slots)
        cm = jnp.zeros((len(self.names), self._m_max, self._m_max))
        new_var = []
        for eg, gamma, prob, vprev in zip(
            self.edge_groups, num.gammas, num.probabilistic, var_prev, strict=True
        ):
            if eg.split:  # the receiver evaluates the law (and carries a consider state if probabilistic)
                new_var.append(jnp.zeros_like(vprev))
                continue
            s_send, s_recv = s[eg.send], s_own[eg.recv]
            ps = eg.send.shape[1]
            mean = jax.vmap(lambda a, b, g, law=eg.law: jnp.atleast_1d(law(a, b, g)))(s_send, s_recv, gamma)
            m = m.at[eg.target].add(mean)

            def law_var(a, b, g, ca, cb, law=eg.law, ps=ps):
                joint = jax.scipy.linalg.block_diag(ca, cb)  # the ports independent (S33)
                return law_moments(law, g, jnp.concatenate([a, b]), joint, ps)[1]

            ca, cb = self._port_cov(s_cov, eg.send), self._port_cov(s_cov, eg.recv)
            var = jax.vmap(law_var)(s_send, s_recv, gamma, ca, cb)
            var = jnp.where((prob > 0)[:, None, None], jnp.nan_to_num(var), 0.0)
            used = jax.vmap(_psd_part)(var - vprev)  # the paper's rule: the positive increment (S46)
            owner, local = self.slot_owner[eg.target[:, 0], 0], self.slot_owner[eg.target, 1]
            cm = cm.at[owner[:, None, None], local[:, :, None], local[:, None, :]].add(used)
            new_var.append(var)
        return m, cm, tuple(new_var)

    def sweep(self, num, start, iterate, msg_src, var_prev, u, y, mask, active, own_src=None):
        """Every group steps from ``start`` with messages from ``msg_src``; ``active`` selects members.

        ``own_src`` (default ``msg_src``) supplies the receivers' own interface variables.
        """
        s, s_cov = self.ports(*msg_src)
        s_own = None if own_src is None else self.ports(*own_src)[0]
        m, cm, new_var = self.messages(num, s, s_cov, var_prev, s_own)
        s_end = self._predicted_ports(num, msg_src[0], s, m, u) if any(self.split_in) else s
        cross = self.cross(msg_src[1]) if any(eg.shared for eg in self.edge_groups) else None
        outs = []
        base = position = 0
        for gi, (g, arr) in enumerate(zip(self.groups, num.groups, strict=True)):
            G, nm = len(g.members), g.template.n_msg
            sl = base + np.arange(G)[:, None] * nm + np.arange(nm)[None, :]
            cm_g = cm[position : position + G, :nm, :nm]
            base += G * nm
            position += G
            laws, split = self._split_args(num, gi, s, s_end, s_cov, cross)
            n_z = self.n_z(gi)

            def fn(a, x, P, mm, cc, sp, tmpl=g.template, laws=laws, n_z=n_z):
                return _local_step(tmpl, a, x, P, u, y, mask, mm, cc, laws, sp, n_z)

            arr_v = {k: v for k, v in arr.items() if k not in ("x0", "P0", "chol_P0", "Q", "R")}
            args = (arr_v, start[0][gi], start[1][gi], m[sl], cm_g, split)
            if G == 1:  # a lone member runs unbatched: vmap over one adds ~30 % to the compile time
                lone = fn(*jax.tree_util.tree_map(lambda a: a[0], args))
                res = jax.tree_util.tree_map(lambda r: r[None], lone)
            else:
                res = jax.vmap(fn)(*args)
            if active is not None:
                keep = jnp.asarray(self.colours[gi] == active)
                prev = tuple(it[gi] for it in iterate)
                res = tuple(
                    jnp.where(keep.reshape((-1,) + (1,) * (r.ndim - 1)), r, p)
                    for r, p in zip(res, prev, strict=True)
                )
            outs.append(res)
        return tuple(tuple(o[j] for o in outs) for j in range(6)), new_var

    def cross(self, chols: tuple[Any, ...]) -> tuple[Any, ...]:
        """Per edge group, each consider edge's ``X = Cov(e_send, w_recv)`` (E, p_s, p_r), else ``None``.

        ``w_recv`` is the receiver's whitened port error as its sender models it (the consider states of
        the reverse edge, ``e_recv = L_recv w_recv``); zero where there is no consider reverse edge.
        """
        out = []
        for eg, revs in zip(self.edge_groups, self.reverse or ((),) * len(self.edge_groups), strict=True):
            if not eg.shared:
                out.append(None)
                continue
            x = jnp.zeros((len(eg.members), eg.send.shape[1], eg.recv.shape[1]))
            for r in revs:
                low = chols[r.group][r.member]  # (E, n, n)
                rows = jnp.take_along_axis(low, r.rows[:, :, None], axis=1)
                cols = jnp.take_along_axis(low, r.cols[:, :, None], axis=1)
                x = x.at[r.pos].set(jnp.einsum("eik,ejk->eij", rows, cols) * r.keep)
            out.append(x)
        return tuple(out)

    def _split_args(
        self, num: Numbers, gi: int, s0: Any, s1: Any, s_cov: Any = None, cross: Any = None
    ) -> tuple[tuple[tuple[Callable[..., Any], int, bool], ...], tuple[Any, ...]]:
        """Laws and per-member arrays of group ``gi``'s incoming split edges.

        Per edge: the sender's port mean at the start ``s0`` and predicted end ``s1`` of the step, the
        gamma, the receiver's port indices and slots, validity, the receiver's own port mean at the start
        and end, and for a probabilistic edge (zero for a deterministic edge or padding, and without
        ``s_cov``) the lower factor of the sender's port covariance; with rule ``"shared"`` (``cross``
        given) the regression ``B`` of the sender's port error on the receiver's and the factor of what
        is left of the sender's covariance, ``P_s - X X^T`` (:meth:`cross`), instead.
        """
        tables = self.split_in[gi] if self.split_in else ()
        args = []
        for t in tables:
            send = self.edge_groups[t.edge_group].send[t.edge]  # (G, J, p)
            recv = self.edge_groups[t.edge_group].recv[t.edge]  # (G, J, p_r)
            gamma = jax.tree_util.tree_map(lambda a, t=t: a[t.edge], num.gammas[t.edge_group])
            chol_s = jnp.zeros(send.shape + send.shape[-1:])
            reg = jnp.zeros(send.shape + recv.shape[-1:])
            if t.z_start >= 0 and s_cov is not None:
                cov = self._port_cov(s_cov, send.reshape(-1, send.shape[-1]))
                on = jnp.asarray(num.probabilistic[t.edge_group][t.edge] * t.valid).reshape(-1, 1, 1)
                if cross is not None and cross[t.edge_group] is not None and recv.shape[-1]:
                    # (a receiver port without states, which only takes the message, shares nothing)
                    x = cross[t.edge_group][t.edge.reshape(-1)] * on
                    own = self._port_cov(s_cov, recv.reshape(-1, recv.shape[-1]))
                    pinv = jax.vmap(_psd_root_pinv)(own)
                    reg = (SHARE * jnp.einsum("eij,ejk->eik", x, pinv)).reshape(reg.shape)
                    cov = cov - jnp.einsum("eij,ekj->eik", x, x)
                low = jax.vmap(_psd_root)(cov)  # a port may hold derived (singular) variables
                chol_s = (low * jnp.sqrt(on)).reshape(chol_s.shape)
            args.append(
                (s0[send], s1[send], gamma, t.recv, t.slots, t.valid, chol_s, reg, s0[recv], s1[recv])
            )
        laws = tuple((t.law, t.z_start, self.edge_groups[t.edge_group].shared) for t in tables)
        return laws, tuple(args)

    def _predicted_ports(self, num: Numbers, means: tuple[Any, ...], s: Any, m: Any, u: Any) -> Any:
        """Every member's mean stepped once (messages held, split senders at ``s``): interface values."""
        preds = []
        base = 0
        for gi, (g, arr) in enumerate(zip(self.groups, num.groups, strict=True)):
            G, nm = len(g.members), g.template.n_msg
            sl = base + np.arange(G)[:, None] * nm + np.arange(nm)[None, :]
            base += G * nm
            laws, split = self._split_args(num, gi, s, s)
            arr_v = {k: arr[k] for k in ("params", "inputs")}
            nz = self.n_z(gi)
            fn = lambda a, x, mm, sp, tmpl=g.template, laws=laws, nz=nz: _predict_mean(  # noqa: E731
                tmpl, a, x, u, mm, laws, sp, nz
            )
            preds.append(jax.vmap(fn)(arr_v, means[gi], m[sl], split)[:, g.port_idx].reshape(-1))
        return jnp.concatenate(preds)

    def step(self, num: Numbers, carry: Any, inp: Any):
        """One time step: K inner iterations of the schedule; returns the new carry and the estimates."""
        means, chols, var_prev, prev_ports, first = carry
        u, y, mask = inp
        start = (means, chols)
        zero_ll = tuple(jnp.zeros(len(g.members)) for g in self.groups)
        iterate = (means, chols, means, chols, zero_ll, zero_ll)  # the last: NIS
        kind = self.schedule.kind
        src = (means, chols)
        if kind == "ab2":
            idx = [g.port_idx for g in self.groups]
            extrap = tuple(
                mu.at[:, ix].set(jnp.where(first, mu[:, ix], 1.5 * mu[:, ix] - 0.5 * pp))
                for mu, ix, pp in zip(means, idx, prev_ports, strict=True)
            )
            src = (extrap, chols)

        def one(it, src_, own=None):
            if kind == "gauss_seidel":
                new_var = var_prev
                for c in range(self.n_colours):
                    it, new_var = self.sweep(num, start, it, (it[0], it[1]), var_prev, u, y, mask, c)
                return it, new_var
            return self.sweep(num, start, it, src_, var_prev, u, y, mask, None, own)

        it, new_var = one(iterate, src, (means, chols) if kind == "ab2" else None)
        if self.schedule.inner > 1:
            it, new_var = jax.lax.fori_loop(
                1, self.schedule.inner, lambda _, c: one(c[0], (c[0][0], c[0][1])), (it, new_var)
            )
        new_ports = tuple(mu[:, g.port_idx] for mu, g in zip(means, self.groups, strict=True))
        new_carry = (it[0], it[1], new_var, new_ports, jnp.zeros((), bool))
        return new_carry, it

    def init(self, num: Numbers) -> Any:
        """The carry at t_0; consider states (:meth:`n_z`) start at mean 0, covariance I, uncorrelated."""
        means, chols = [], []
        for gi, a in enumerate(num.groups):
            n_z, x0, c0 = self.n_z(gi), jnp.asarray(a["x0"]), jnp.asarray(a["chol_P0"])
            if n_z:
                G, n = x0.shape
                x0 = jnp.concatenate([x0, jnp.zeros((G, n_z), x0.dtype)], axis=1)
                eye = jnp.broadcast_to(jnp.eye(n_z, dtype=c0.dtype), (G, n_z, n_z))
                c0 = jnp.concatenate(
                    [jnp.pad(c0, ((0, 0), (0, 0), (0, n_z))), jnp.pad(eye, ((0, 0), (0, 0), (n, 0)))], axis=1
                )
            means.append(x0)
            chols.append(c0)
        means, chols = tuple(means), tuple(chols)
        var0 = tuple(
            jnp.zeros((len(eg.members), eg.target.shape[1], eg.target.shape[1])) for eg in self.edge_groups
        )
        ports = tuple(mu[:, g.port_idx] for mu, g in zip(means, self.groups, strict=True))
        return (means, chols, var0, ports, jnp.ones((), bool))

    def scan(self, num: Numbers, us: Any, ys: Any, masks: Any, check: bool = False, us_meas: Any = None):
        """Scan :meth:`step` over T steps: step k uses ``us[k]`` and ``ys[k]`` (measured at t_{k+1}).

        ``us[k]`` is held over the step; ``us_meas[k]`` (default ``us[k]``) is the input ``ys[k]`` was
        read with (:meth:`twinfer.data.Dataset.step_inputs`). :meth:`step` takes them as one row
        ``[u_k, u_meas]``.

        Returns, per group stacked over its members, the filtered means and factors, the predicted ones,
        the log-likelihood terms and the normalised innovation squared per step (``(T, G)``, 0 for a
        member without an update). With ``check`` (static) the jitted scan raises
        (``eqx.branched_error_if``) naming the first subsystem, in compile order, whose state became
        non-finite or whose covariance lost its positive diagonal; :func:`~twinfer.infer.graph._run.run`
        checks on the host instead and also names the step.
        """
        ys_clean = jnp.where(masks, ys, 0.0)
        n = [num.groups[gi]["x0"].shape[-1] - g.template.memory for gi, g in enumerate(self.groups)]

        def body(carry: Any, inp: Any) -> Any:  # the outputs keep the states, not the consider states
            carry, (mu, ch, pm, pc, ll, nis) = self.step(num, carry, inp)
            cut_m = lambda xs: tuple(x[..., :k] for x, k in zip(xs, n, strict=True))  # noqa: E731
            cut_c = lambda xs: tuple(x[..., :k, :k] for x, k in zip(xs, n, strict=True))  # noqa: E731
            return carry, (cut_m(mu), cut_c(ch), cut_m(pm), cut_c(pc), ll, nis)

        pairs = jnp.concatenate([us, us if us_meas is None else jnp.asarray(us_meas, us.dtype)], axis=-1)
        _, outs = jax.lax.scan(body, self.init(num), (pairs, ys_clean, masks))
        if check:
            bad = []  # (n_subsystems,) in group order, True where any step diverged
            for mu, chol in zip(outs[0], outs[1], strict=True):
                finite = jnp.isfinite(mu).all(-1) & jnp.isfinite(chol).all((-2, -1))
                bad.append(~finite.all(0))
            flags = jnp.concatenate(bad)
            order = [i for g in self.groups for i in g.members]
            msgs = tuple(_diverged_message(f"subsystem {self.names[i]!r}") for i in order)
            outs = eqx.branched_error_if(outs, flags.any(), jnp.argmax(flags), msgs)
        return outs
