"""Graphs from models: a partition of a library model into subsystems joined by its own interfaces.

:func:`chain_graph` cuts a :class:`~twinfer.models.Chain` into contiguous segments (each a
:meth:`~twinfer.models.Chain.segment`, discretised by :func:`twinfer.sim.graph_node`), joined at every cut
connection by an interface in both directions carrying that connection's force
(:func:`twinfer.models.chain.connection_law`: linear, Duffing and Van der Pol terms). The user states
noise levels as standard deviations per global state and output, unknown parameters by their global
names (``"k4"``), and gets one subsystem per segment with its data columns wired.

References:
    Ghorbani & Hackl, section 3.1, SI (S20)-(S26) (the chain's segments, forces as messages).

"""

from __future__ import annotations

import collections
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer.filters import UnscentedWeights, augment
from twinfer.infer.filters._api import _unknown as _checked_unknown
from twinfer.infer.graph._parts import (
    MESSAGE_KINDS,
    MESSAGE_RULES,
    Interface,
    Port,
    Subsystem,
    structure_cached,
    two_way,
)
from twinfer.models import AbstractModel, Chain, Connection
from twinfer.models._params import locate
from twinfer.models.chain import EstimatedConnectionLaw, connection_law
from twinfer.sim import Dynamics, GraphNode, graph_node


def auto_partition(chain: Chain, size: int = 2) -> list[tuple[int, ...]]:
    """Contiguous subsystems of ``size`` masses, each with at least one of the chain's sensors.

    The chain is cut every ``size`` masses (a last segment shorter than ``size`` joins the one before);
    a segment without a measured mass (no output names one of its DOFs) joins its right neighbour, the
    last one its left: a subsystem that measures nothing would only follow its neighbours' means.

    Raises:
        ValueError: for ``size`` < 1 or a chain without outputs.

    """
    if int(size) != size or size < 1:
        raise ValueError(f"auto_partition size: expected an integer >= 1; received {size}.")
    measured = {int(o[1:]) for o in chain.outputs}
    if not measured:
        raise ValueError("auto_partition: expected a chain with outputs; received none.")
    n, size = chain.n_dof, int(size)
    cuts = list(range(1, n + 1, size))
    if len(cuts) > 1 and n - cuts[-1] + 1 < size:
        cuts.pop()
    segments = [tuple(range(a, b)) for a, b in zip(cuts, [*cuts[1:], n + 1], strict=True)]
    merged: list[tuple[int, ...]] = []
    pending: tuple[int, ...] = ()
    for seg in segments:
        seg = pending + seg
        pending = () if measured & set(seg) else seg
        if not pending:
            merged.append(seg)
    if pending:
        merged[-1] = merged[-1] + pending
    return merged


def chain_graph(
    chain: Chain,
    partition: Sequence[Sequence[int]] | str,
    *,
    dt: float,
    integrator: str = "rk4",
    substeps: int = 1,
    estimator: str | Sequence[str] = "ukf",
    messages: str | Sequence[str] = "probabilistic",
    rule: str = "split",
    unknown: Mapping[str, tuple[float, float, float]] | None = None,
    x0: Any = 0.0,
    state_sd: Any = 1.0,
    process_sd: Any = 1e-6,
    noise_sd: Any = 1.0,
    input_sd: Any = 0.0,
    weights: UnscentedWeights | None = None,
    name: str = "chain",
) -> Any:
    """The graph of ``chain`` cut into the segments of ``partition``.

    Args:
        chain: the chain (its parameters are the known values; its forced DOFs and outputs are the data's
            input and output columns, in the chain's order).
        partition: every DOF of each subsystem, contiguous and in order, covering 1..n once
            (``[(1, 2, 3), (4, 5, 6)]``; a group lists its DOFs, it is not a range), or ``"auto"``
            (:func:`auto_partition`: two masses each, every subsystem measured).
        dt: step length of the data.
        integrator: a :func:`twinfer.sim.discretise` method.
        substeps: integrator steps per data step.
        estimator: one for every subsystem or one per subsystem (``"ukf"``, ``"ekf"``, ``"kf"``,
            ``"none"``).
        messages: one kind for every cut connection or one per cut (``"deterministic"``,
            ``"probabilistic"``, ``"learned"``), used in both directions.
        rule: where the laws are evaluated and which variance probabilistic messages inject
            (:class:`~twinfer.infer.graph.Interface`): ``"split"`` (default: each receiver evaluates
            the connection at its own sigma points and integrator stages, a probabilistic sender's
            error a consider state of the receiver; bounded for Duffing and Van der Pol connections),
            ``"shared"`` (``"split"`` with the part of a sender's error correlated with the receiver's
            read through the receiver's own deviation: calibrated positions along a chain) or
            ``"paper"`` (the law at the
            means, both sides' variance by the incremental rule S46, for reproduction).
        unknown: ``{global name: (initial value, prior sd > 0, random-walk sd per step >= 0)}`` of the
            chain's parameters to estimate (``"k4"``, ``"m2"``, ``"kappa3"``); each joins the state of the
            subsystem that holds it. A cut connection's parameter (connection d joins masses d - 1 and d)
            joins the state of one of the two subsystems it joins, and its port: the one that measures
            its end mass (d - 1 or d) when only one does, else the one starting at mass d. Both directions
            of the interface read it from there (:class:`twinfer.models.chain.EstimatedConnectionLaw`), the
            other side through the message (with its uncertainty, for probabilistic messages). Each
            initial value is checked as :func:`~twinfer.infer.filters.run_filter` checks it: the chain
            must take it (``chain.with_params``; a negative mass is refused).
        x0: prior mean of the chain's state ``[x1..xn, v1..vn]`` (a scalar or 2n values).
        state_sd: prior standard deviation of each state (scalar or 2n values), > 0.
        process_sd: process-noise standard deviation per step of each state (scalar or 2n), >= 0.
        noise_sd: measurement-noise standard deviation of each output (scalar or one per output), > 0.
        input_sd: standard deviation of each input's error (scalar or one per forced DOF), >= 0: a
            measured force's noise, or an unmeasured force's. A force error w held over a step moves a
            mass m by ``g = [dt^2 / (2 m), dt / m] w`` (position, velocity; the leading order in dt), so
            each forced DOF's process noise gains ``input_sd^2 g g^T``, correlated as the force makes
            it, on top of ``process_sd``. With the data of
            ``twinfer.sim.simulate_dataset(..., input_noise_sd=input_sd)`` and ``process_sd = 0`` the
            filters' Q is the one the data hold (a central filter is then calibrated: tests). An
            error in the force on a mass whose acceleration is measured also enters that measurement
            (the accelerometer reads the held force), correlated with this Q, which the filters do not
            model: give such a force no input_sd, or add ``(input_sd / m)^2`` to its sensor's variance
            (which then over-covers, the correlation left out).
        weights: UKF sigma-point weights (default Merwe alpha=1, beta=2, kappa=0).
        name: the graph's name.

    Returns:
        A :class:`~twinfer.infer.graph.Graph` with subsystems ``S1..Sp`` (states ``[x, v]`` of their
        DOFs, then their unknowns, named as in the chain) and interfaces ``Si.right <-> S(i+1).left``;
        :func:`~twinfer.infer.graph.estimate` returns its estimates in the chain's state order.

    Raises:
        ValueError: naming the argument, the expected and the received value.

    """
    from twinfer.infer.graph._graph import Graph

    n = chain.n_dof
    if isinstance(partition, str):
        if partition != "auto":
            raise ValueError(f"chain_graph partition: expected DOF groups or 'auto'; received {partition!r}.")
        partition = auto_partition(chain)
    segments = [tuple(int(d) for d in part) for part in partition]
    flat = [d for seg in segments for d in seg]
    if (
        flat != list(range(1, n + 1))
        or any(list(seg) != list(range(seg[0], seg[-1] + 1)) for seg in segments if seg)
        or any(not seg for seg in segments)
    ):
        raise ValueError(
            f"chain_graph partition: expected contiguous DOF groups in order covering 1..{n} once; "
            f"received {[list(s) for s in segments]}."
        )
    p = len(segments)
    if rule not in MESSAGE_RULES:
        raise ValueError(f"chain_graph rule: expected one of {MESSAGE_RULES}; received {rule!r}.")
    estimators = _per("estimator", estimator, p, "subsystem")
    kinds = _per("messages", messages, p - 1, "cut connection")
    for kind in kinds:
        if kind not in MESSAGE_KINDS:
            raise ValueError(f"chain_graph messages: expected one of {MESSAGE_KINDS}; received {kind!r}.")
    mean0 = _values("x0", x0, 2 * n, "any")
    sd0 = _values("state_sd", state_sd, 2 * n, "> 0")
    sdq = _values("process_sd", process_sd, 2 * n, ">= 0")
    sdr = _values("noise_sd", noise_sd, len(chain.outputs), "> 0")
    sdu = _values("input_sd", input_sd, len(chain.forced_dofs), ">= 0")
    unknown = dict(unknown or {})
    local, at_cut = _local_unknowns(chain, segments, unknown)
    _checked_unknown("chain_graph", chain, unknown)  # as run_filter: finite, float64, a value the chain takes
    if at_cut and rule not in ("split", "shared"):
        raise ValueError(
            f"chain_graph unknown {[g for held in at_cut.values() for _, g in held]}: a cut connection's "
            f"parameters are estimated only with rule='split' or 'shared' (the receiver evaluates the law at "
            f"its sigma points); received rule={rule!r}, which evaluates it at the means, outside the "
            "filters."
        )
    measured = {int(o[1:]) for o in chain.outputs}
    # the cut at the start of segment s is held by the side that measures its end mass (the right on a tie)
    holder = {
        s: s - 1 if segments[s][0] - 1 in measured and segments[s][0] not in measured else s for s in at_cut
    }
    weights = UnscentedWeights.merwe() if weights is None else weights
    forced = {d: i for i, d in enumerate(chain.forced_dofs)}
    out_col = {o: i for i, o in enumerate(chain.outputs)}
    params = chain.params
    subs = []
    for s, seg in enumerate(segments):
        first, last = seg[0], seg[-1]
        m = len(seg)
        part = chain.segment(first, last)
        names = tuple(local[s])
        # the unknowns of the cut connections this segment holds, after its own: left cut, then right
        held_left = [g for _, g in at_cut.get(s, [])] if holder.get(s) == s else []
        held_right = [g for _, g in at_cut.get(s + 1, [])] if holder.get(s + 1) == s else []
        held = held_left + held_right
        flags = ("kappa" in params, "mu" in params)
        node = _segment_node(m, part.outputs, *flags, names, integrator, dt, substeps, len(held), part.base)
        n_g = part.n_ground  # the ground's inputs (ag; xg, vg) come first, then one force slot per DOF
        in_cols = tuple(range(n_g)) + tuple(chain.n_ground + forced[d] if d in forced else -1 for d in seg)
        states = [d - 1 for d in seg] + [n + d - 1 for d in seg]
        values = [unknown[g] for g in (*local[s].values(), *held)]
        ports = {}
        base = 2 * m + len(names)
        if first > 1:
            ports["left"] = Port(state=(0, m, *range(base, base + len(held_left))), slots=(n_g,))
        if last < n:
            extra = range(base + len(held_left), base + len(held))
            ports["right"] = Port(state=(m - 1, 2 * m - 1, *extra), slots=(n_g + m - 1,))
        subs.append(
            Subsystem(
                name=f"S{s + 1}",
                transition=node.transition,
                output=node.output,
                params=part.params,
                x0=np.concatenate([mean0[states], [v[0] for v in values]]),
                P0=np.diag(np.concatenate([sd0[states], [v[1] for v in values]]) ** 2),
                Q=np.diag(np.concatenate([sdq[states], [v[2] for v in values]]) ** 2)
                + _input_noise(seg, forced, sdu, np.asarray(params["m"]), dt, len(values)),
                R=np.diag(np.asarray([sdr[out_col[_global_output(o, first)]] for o in part.outputs]) ** 2)
                if part.outputs
                else np.zeros((0, 0)),
                inputs=in_cols,
                outputs=tuple(out_col[_global_output(o, first)] for o in part.outputs),
                ports=ports,
                n_msg=n_g + m,
                estimator=estimators[s],
                weights=weights,
                dynamics=node.dynamics,
                state_names=tuple(f"x{d}" for d in seg)
                + tuple(f"v{d}" for d in seg)
                + tuple(local[s].values())
                + tuple(held),
                parameters=tuple(local[s].values()) + tuple(held),
            )
        )
    edges = []
    for s in range(p - 1):
        cut = segments[s + 1][0]  # connection `cut` joins masses cut - 1 and cut
        gamma = np.asarray(
            [float(np.asarray(params[g])[cut - 1]) if g in params else 0.0 for g in ("k", "c", "kappa", "mu")]
        )
        a, b = f"S{s + 1}", f"S{s + 2}"
        groups = tuple(group for group, _ in at_cut.get(s + 1, []))
        if groups:  # one side holds the unknowns: both directions read them from its port
            by_b = holder[s + 1] == s + 1
            a_to_b = EstimatedConnectionLaw(groups, "recv" if by_b else "send")
            b_to_a = EstimatedConnectionLaw(groups, "send" if by_b else "recv")
            edges += [
                Interface(a, "right", b, "left", a_to_b, gamma, kinds[s], rule),
                Interface(b, "left", a, "right", b_to_a, gamma, kinds[s], rule),
            ]
        else:
            edges += two_way(a, "right", b, "left", connection_law, gamma, (kinds[s],) * 2, rule)
    order = tuple(chain.state_names) + tuple(unknown)  # the dataset's names: Graph.check_dataset
    return Graph(
        name, subs, edges, state_order=order, output_names=chain.output_names, input_names=chain.input_names
    )


def _input_noise(
    seg: tuple[int, ...], forced: Mapping[int, int], sd: np.ndarray, mass: np.ndarray, dt: float, n_extra: int
) -> np.ndarray:
    """The process noise of a segment's ``[x, v, extra]`` from its forced DOFs' input errors.

    A force error ``w ~ N(0, sd^2)`` held over ``[t, t + dt)`` adds ``dt^2 / (2 m) w`` to the position and
    ``dt / m w`` to the velocity of its mass (to leading order in dt; the springs act at the next order).
    """
    m = len(seg)
    q = np.zeros((2 * m + n_extra, 2 * m + n_extra))
    for i, d in enumerate(seg):
        col = forced.get(d, -1)
        if col < 0 or sd[col] == 0.0:
            continue
        g = np.asarray([dt**2 / (2.0 * mass[d - 1]), dt / mass[d - 1]])
        idx = np.asarray([i, m + i])
        q[np.ix_(idx, idx)] += sd[col] ** 2 * np.outer(g, g)
    return q


def _global_output(local: str, first: int) -> str:
    return f"{local[0]}{int(local[1:]) + first - 1}"


@functools.cache
def _segment_node(
    n_dof: int,
    outputs: tuple[str, ...],
    duffing: bool,
    van_der_pol: bool,
    unknown: tuple[str, ...],
    integrator: str,
    dt: float,
    substeps: int,
    n_held: int = 0,
    base: str | None = None,
) -> GraphNode:
    """The transition and output of a segment's structure, every DOF forced (messages add to inputs).

    ``n_held`` constant states after the segment's own (a cut connection's unknowns, which only its
    interface reads). Cached, so segments of one structure share their functions and batch together in
    ``compile``.
    """
    template = Chain(
        1.0,
        0.0,
        0.0,
        cubic_stiffness=0.0 if duffing else None,
        vdp_damping=0.0 if van_der_pol else None,
        outputs=outputs,
        n_dof=n_dof,
        base=base,
    )
    node = graph_node(augment(template, list(unknown)) if unknown else template, dt, integrator, substeps)
    if not n_held:
        return node
    own = lambda x: x[: x.shape[0] - n_held]  # noqa: E731
    keep = lambda x, new: jnp.concatenate([new, x[x.shape[0] - n_held :]])  # noqa: E731
    dyn = node.dynamics
    return GraphNode(
        lambda x, u, m, p: keep(x, node.transition(own(x), u, m, p)),
        lambda x, u, m, p: node.output(own(x), u, m, p),
        None
        if dyn is None
        else Dynamics(
            lambda x, u, m, p: jnp.concatenate(
                [dyn.vector_field(own(x), u, m, p), jnp.zeros(n_held, x.dtype)]
            ),
            dyn.dt,
            dyn.substeps,
            dyn.method,
        ),
    )


def _local_unknowns(
    chain: Chain, segments: list[tuple[int, ...]], unknown: Mapping[str, tuple[float, float, float]]
) -> tuple[list[dict[str, str]], dict[int, list[tuple[str, str]]]]:
    """The unknowns each segment holds: its own, and those of the cut connection it starts at.

    Returns per segment ``{local name: global name}``, and per segment starting at a cut
    ``[(parameter group, global name)]`` of that connection's unknowns, in the chain's order.
    """
    out: list[dict[str, str]] = [{} for _ in segments]
    cut: dict[int, list[tuple[str, str]]] = {}
    owner = {d: s for s, seg in enumerate(segments) for d in seg}
    for name, value in unknown.items():
        try:
            group, index = locate(chain.params, name)
        except KeyError:
            raise ValueError(
                "chain_graph unknown: expected parameter names of the chain "
                f"({', '.join(chain.param_names)}); "
                f"received {name!r}."
            ) from None
        if len(value) != 3 or not value[1] > 0 or not value[2] >= 0:
            raise ValueError(
                f"chain_graph unknown {name!r}: expected (initial value, prior sd > 0, random-walk sd >= 0); "
                f"received {value!r}."
            )
        dof = 1 if index is None else index + 1
        s = owner[dof]
        first = segments[s][0]
        if group != "m" and dof == first and first > 1:  # a cut connection's: on the interface
            cut.setdefault(s, []).append((group, name))
            continue
        out[s][f"{group}{dof - first + 1}"] = name
    for held in cut.values():
        held.sort(key=lambda pair: list(chain.param_names).index(pair[1]))
    return out, cut


def _per(field: str, value: str | Sequence[str], count: int, what: str, fn: str = "chain_graph") -> list[str]:
    if isinstance(value, str):
        return [value] * count
    values = list(value)
    if len(values) != count:
        raise ValueError(f"{fn} {field}: expected one value or {count} (one per {what}); received {values}.")
    return values


def _values(field: str, value: Any, count: int, bound: str, fn: str = "chain_graph") -> np.ndarray:
    arr = (
        np.broadcast_to(np.asarray(value, dtype=np.float64), (count,))
        if np.ndim(value) == 0
        else np.asarray(value, dtype=np.float64)
    )
    if arr.shape != (count,) or not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{fn} {field}: expected one or {count} finite values; received {np.asarray(value).tolist()}."
        )
    if (bound == "> 0" and np.any(arr <= 0)) or (bound == ">= 0" and np.any(arr < 0)):
        raise ValueError(f"{fn} {field}: expected values {bound}; received {arr.tolist()}.")
    return arr


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
    integrator: str = "rk4",
    substeps: int = 1,
    estimator: str | Sequence[str] = "ukf",
    messages: str | Sequence[str] = "probabilistic",
    rule: str = "split",
    unknown: Mapping[str, tuple[float, float, float]] | None = None,
    x0: Any = 0.0,
    state_sd: Any = 1.0,
    process_sd: Any = 1e-6,
    noise_sd: Any = 1.0,
    weights: UnscentedWeights | None = None,
    name: str = "model",
) -> Any:
    """The graph of any model that declares its interface coupling, cut into the groups of ``partition``.

    Subsystem ``i`` holds the states of group ``i`` (and the unknown parameters its equations read). Its
    message vector is the states of other groups that its equations and outputs read, which the model's
    :attr:`~twinfer.models.AbstractModel.connections` (or ``connections``) declare: the subsystem steps
    the model's own vector field on a state in which its own states and the messages are filled in (the
    states it does not read at zero, where the declared coupling says they do not matter), with the
    integrator of ``sim``. A connection's law is the sender's states (:func:`_read_sender`), so with the
    default rule ``"split"`` each receiver evaluates the model's coupling terms itself at its sigma points
    and integrator stages, with a probabilistic sender's error as a consider state (the derivation is in
    :mod:`twinfer.infer.graph._compile`). On a :class:`~twinfer.models.Chain` this is the same estimator as
    :func:`chain_graph` with rule ``"split"``.

    Each output goes to a subsystem whose own states it reads (:func:`_placed`: the one holding the state
    it is the rate of, else the first). The declaration is checked: at three draws from the prior
    (``x0``, ``state_sd``), the Jacobians of the vector field and the outputs must vanish on every state
    of another group that a subsystem does not read. A subsystem may measure nothing: it then predicts
    from its messages (no update, a log-likelihood increment of 0).

    Graphs of one model structure (the model's class, static fields and parameter shapes, the partition,
    the outputs' placement, ``integrator``, ``dt``, ``substeps``) share their subsystems' functions, so
    :func:`~twinfer.infer.graph.run` compiles their program once; each graph runs on its own numbers
    (its ``params``, noise levels and priors). The model's functions must read its numbers from their
    ``params`` argument (the :class:`~twinfer.models.AbstractModel` contract), not from ``self``.

    Args:
        model: the continuous-time model; its inputs are given to every subsystem.
        partition: groups of state names (or indices into ``model.state_names``) covering every state
            once; at least two groups.
        dt: step length of the data.
        connections: the interface coupling (default ``model.connections``).
        integrator: a :func:`twinfer.sim.discretise` method (not ``"exact"``: a group is nonlinear in
            its messages in general).
        substeps: integrator steps per data step.
        estimator: one for every subsystem or one per subsystem, as :func:`chain_graph`.
        messages: one kind for every directed interface or one per interface in creation order (for
            each pair of groups in order, the lower's to the higher's, then back).
        rule: as :func:`chain_graph`; ``"split"`` (default) evaluates the coupling in the receiver.
        weights: UKF sigma-point weights (default Merwe alpha=1, beta=2, kappa=0).
        name: the graph's name.
        unknown: ``{parameter name: (initial value, prior sd > 0, random-walk sd per step >= 0)}``; each
            joins the state of the subsystem whose equations read it. One read by several (a storey
            stiffness at a cut) is estimated as :func:`chain_graph` estimates a cut connection's: one
            reader holds it (the one whose outputs measure it best, :func:`_holder`) and sends it with
            its port to the others, which read it as a message (with its uncertainty, for probabilistic
            messages). Each initial value must be one the model takes (``model.with_params``), as
            :func:`~twinfer.infer.filters.run_filter` checks.
        x0: prior mean per model state (scalar or ``n_state`` values).
        state_sd: prior standard deviation per model state, > 0.
        process_sd: process-noise standard deviation per step per model state, >= 0.
        noise_sd: per output (scalar or ``n_output`` values), > 0.

    Returns:
        A :class:`~twinfer.infer.graph.Graph` with subsystems ``S1..Sp`` in partition order, ports named
        after the neighbour, and the model's state order (then the unknowns) for
        :func:`~twinfer.infer.graph.estimate`.

    Raises:
        ValueError: for a partition that does not cover the states once, a connection naming unknown
            states or two groups' worth of states on one side, coupling the declaration leaves out, an
            output no subsystem can evaluate, an unknown that no equation reads or whose initial value
            the model refuses, naming them.

    References:
        Ghorbani & Hackl, section 1, SI (S1)-(S4) (subsystems, messages as interface variables).

    """
    from twinfer.infer.graph._graph import Graph

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
    if rule not in MESSAGE_RULES:
        raise ValueError(f"model_graph rule: expected one of {MESSAGE_RULES}; received {rule!r}.")
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
    unknown = dict(unknown or {})
    for key, value in unknown.items():
        if len(value) != 3 or not value[1] > 0 or not value[2] >= 0:
            raise ValueError(
                f"model_graph unknown {key!r}: expected (initial value, prior sd > 0, random-walk sd >= 0); "
                f"received {value!r}."
            )
    _checked_unknown("model_graph", model, unknown)  # as run_filter: finite, float64, a value the model takes
    full = augment(model, list(unknown)) if unknown else model
    n_full = n + len(unknown)
    mean0 = np.concatenate([_values("x0", x0, n, "any", "model_graph"), [v[0] for v in unknown.values()]])
    sd0 = np.concatenate(
        [_values("state_sd", state_sd, n, "> 0", "model_graph"), [v[1] for v in unknown.values()]]
    )
    sdq = np.concatenate(
        [_values("process_sd", process_sd, n, ">= 0", "model_graph"), [v[2] for v in unknown.values()]]
    )
    sdr = _values("noise_sd", noise_sd, full.n_output, "> 0", "model_graph")
    u0 = np.zeros(full.n_input)

    # the dependence structure at three draws from the prior: which states each equation and output reads
    draws = mean0 + sd0 * np.random.default_rng(0).normal(size=(3, n_full))
    structure = lambda: _model_structure(full)  # noqa: E731  (the cache key: graphs of one structure share)
    jac_f, jac_h = structure_cached(_JACOBIANS, _CACHE_SIZE, structure, lambda: _jacobians(full))
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
    kinds = _per("messages", messages, 2 * len(pairs), "directed interface", "model_graph")
    for kind in kinds:
        if kind not in MESSAGE_KINDS:
            raise ValueError(f"model_graph messages: expected one of {MESSAGE_KINDS}; received {kind!r}.")
    estimators = _per("estimator", estimator, p, "subsystem", "model_graph")
    weights = UnscentedWeights.merwe() if weights is None else weights
    subs = []
    for i in range(p):
        shape = (tuple(own[i]), tuple(read_idx[i]), tuple(out_of[i]), integrator, float(dt), int(substeps))
        node = structure_cached(
            _NODES,
            4 * _CACHE_SIZE,
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


_CACHE_SIZE = 16
_JACOBIANS: collections.OrderedDict[Any, Any] = collections.OrderedDict()
_NODES: collections.OrderedDict[Any, GraphNode] = collections.OrderedDict()


def _model_structure(model: AbstractModel) -> Any:
    """What a model's functions compute, apart from the numbers they read from ``params``.

    The model's pytree structure (its class and static fields), the shape and dtype of each leaf of
    ``params`` (passed to every function, so never part of the program), and the value of every other
    leaf (a fixed array a model holds outside ``params`` is compiled in, so a different one is another
    structure). Models of one structure share :func:`_group_node`'s functions, so their graphs share one
    compiled program (:func:`~twinfer.infer.graph.compiled_for`). Raises ``TypeError`` for a leaf that
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
    from twinfer.sim import discretise

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
