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

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, Unpack

import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferValueError
from twinfer.infer.filters import augment
from twinfer.infer.filters._api import _unknown as _checked_unknown
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.infer.graph._cache import SEGMENT_NODES
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._parts import MESSAGE_KINDS, MESSAGE_RULES, Interface, Port, Subsystem, two_way
from twinfer.models import Chain
from twinfer.models._params import locate
from twinfer.models.chain import EstimatedConnectionLaw, connection_law
from twinfer.sim import Dynamics, GraphNode, graph_node


class GraphKeywords(TypedDict, total=False):
    """The keywords :func:`chain_graph` and :func:`model_graph` share (``Graph.from_model`` passes them on).

    Defaults and checks: :class:`GraphOptions`.

    Attributes:
        integrator: a :func:`twinfer.sim.discretise` method (``"rk4"``).
        substeps: integrator steps per data step (1).
        estimator: one for every subsystem or one per subsystem (``"ukf"``, ``"ekf"``, ``"kf"``,
            ``"none"``; default ``"ukf"``).
        messages: one kind for every interface or one per interface (``"deterministic"``,
            ``"probabilistic"``, ``"learned"``; default ``"probabilistic"``).
        rule: where the laws are evaluated and which variance probabilistic messages inject
            (:class:`~twinfer.infer.graph.Interface`): ``"split"`` (default: each receiver evaluates
            the connection at its own sigma points and integrator stages, a probabilistic sender's
            error a consider state of the receiver; bounded for Duffing and Van der Pol connections),
            ``"shared"`` (``"split"`` with the part of a sender's error correlated with the receiver's
            read through the receiver's own deviation: calibrated positions along a chain) or
            ``"paper"`` (the law at the means, both sides' variance by the incremental rule S46, for
            reproduction).
        unknown: ``{global name: (initial value, prior sd > 0, random-walk sd per step >= 0)}`` of the
            model's parameters to estimate; each initial value is checked as
            :func:`~twinfer.infer.filters.run_filter` checks it (the model must take it).
        x0: prior mean per model state (a scalar or one value per state; 0).
        state_sd: prior standard deviation per model state (scalar or one per state), > 0 (1).
        process_sd: process-noise standard deviation per step per model state (scalar or one per state),
            >= 0 (1e-6).
        noise_sd: measurement-noise standard deviation per output (scalar or one per output), > 0 (1).
        weights: UKF sigma-point weights (default Merwe alpha=1, beta=2, kappa=0).

    """

    integrator: str
    substeps: int
    estimator: str | Sequence[str]
    messages: str | Sequence[str]
    rule: str
    unknown: Mapping[str, tuple[float, float, float]] | None
    x0: Any
    state_sd: Any
    process_sd: Any
    noise_sd: Any
    weights: UnscentedWeights | None


@dataclasses.dataclass(frozen=True)
class GraphOptions:
    """:class:`GraphKeywords` resolved: their defaults filled in, the rule and the names checked."""

    integrator: str = "rk4"
    substeps: int = 1
    estimator: str | Sequence[str] = "ukf"
    messages: str | Sequence[str] = "probabilistic"
    rule: str = "split"
    unknown: Mapping[str, tuple[float, float, float]] | None = None
    x0: Any = 0.0
    state_sd: Any = 1.0
    process_sd: Any = 1e-6
    noise_sd: Any = 1.0
    weights: UnscentedWeights | None = None

    @classmethod
    def of(cls, fn: str, keywords: GraphKeywords) -> GraphOptions:
        """The options of the builder ``fn`` from its keywords.

        Raises:
            TwinferValueError: for a keyword that is not one of :class:`GraphKeywords`, or a rule that is
                not one of ``MESSAGE_RULES``.

        """
        names = [f.name for f in dataclasses.fields(cls)]
        unexpected = sorted(set(keywords) - set(names))
        if unexpected:
            raise TwinferValueError(f"{fn}: expected keywords among {names}; received {unexpected}.")
        options = cls(**keywords)
        if options.rule not in MESSAGE_RULES:
            raise TwinferValueError(f"{fn} rule: expected one of {MESSAGE_RULES}; received {options.rule!r}.")
        return options

    def estimators(self, fn: str, count: int) -> list[str]:
        """One estimator for each of ``count`` subsystems."""
        return _per("estimator", self.estimator, count, "subsystem", fn)

    def message_kinds(self, fn: str, count: int, what: str) -> list[str]:
        """One message kind for each of ``count`` interfaces (``what``: what one stands for), checked."""
        kinds = _per("messages", self.messages, count, what, fn)
        for kind in kinds:
            if kind not in MESSAGE_KINDS:
                raise TwinferValueError(f"{fn} messages: expected one of {MESSAGE_KINDS}; received {kind!r}.")
        return kinds

    def sigma_weights(self) -> UnscentedWeights:
        """The UKF weights given, or Merwe's (alpha=1, beta=2, kappa=0)."""
        return UnscentedWeights.merwe() if self.weights is None else self.weights


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
    input_sd: Any = 0.0,
    name: str = "chain",
    **options: Unpack[GraphKeywords],
) -> Graph:
    """The graph of ``chain`` cut into the segments of ``partition``.

    Args:
        chain: the chain (its parameters are the known values; its forced DOFs and outputs are the data's
            input and output columns, in the chain's order).
        partition: every DOF of each subsystem, contiguous and in order, covering 1..n once
            (``[(1, 2, 3), (4, 5, 6)]``; a group lists its DOFs, it is not a range), or ``"auto"``
            (:func:`auto_partition`: two masses each, every subsystem measured).
        dt: step length of the data.
        input_sd: standard deviation of each input's error (scalar or one per forced DOF), >= 0: a
            measured force's noise, or an unmeasured force's. A force error w held over a step moves a
            mass m by ``g = [dt^2 / (2 m), dt / m] w`` (position, velocity; the leading order in dt), so
            each forced DOF's process noise gains ``input_sd^2 g g^T``, correlated as the force makes
            it, on top of ``process_sd``. With the data of
            ``twinfer.sim.simulate_dataset(..., input_noise_sd=input_sd)`` and ``process_sd = 0`` the
            filters' Q is the one the data hold (a central filter is then calibrated: tests). The
            error in a force on a mass whose acceleration is measured also enters that measurement
            (the accelerometer reads the held force) with the same draw that moves the mass: such a
            force's error is carried as states of its subsystem instead (``"~<input>.error"`` and
            ``"~<input>.error_next"``, left out of the estimate), drawn afresh each step and added to the
            force in the transition and the outputs, so the filters hold that correlation exactly.
        name: the graph's name.
        **options: the keywords of :class:`GraphKeywords`. On a chain, ``messages`` gives one kind for
            every cut connection or one per cut, used in both directions; ``x0``, ``state_sd`` and
            ``process_sd`` are per state of ``[x1..xn, v1..vn]`` (a scalar or 2n values); ``unknown``
            names the chain's parameters (``"k4"``, ``"m2"``, ``"kappa3"``), each joining the state of
            the subsystem that holds it. A cut connection's parameter (connection d joins masses d - 1
            and d) joins the state of one of the two subsystems it joins, and its port: the one that
            measures its end mass (d - 1 or d) when only one does, else the one starting at mass d. Both
            directions of the interface read it from there
            (:class:`twinfer.models.chain.EstimatedConnectionLaw`), the other side through the message
            (with its uncertainty, for probabilistic messages); a negative mass is refused.

    Returns:
        A :class:`~twinfer.infer.graph.Graph` with subsystems ``S1..Sp`` (states ``[x, v]`` of their
        DOFs, then their unknowns, named as in the chain) and interfaces ``Si.right <-> S(i+1).left``;
        :func:`~twinfer.infer.graph._run.estimate` returns its estimates in the chain's state order.

    Raises:
        ValueError: naming the argument, the expected and the received value.

    """
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
    o = GraphOptions.of("chain_graph", options)
    rule, integrator, substeps = o.rule, o.integrator, o.substeps
    estimators = o.estimators("chain_graph", p)
    kinds = o.message_kinds("chain_graph", p - 1, "cut connection")
    mean0 = _values("x0", o.x0, 2 * n, "any")
    sd0 = _values("state_sd", o.state_sd, 2 * n, "> 0")
    sdq = _values("process_sd", o.process_sd, 2 * n, ">= 0")
    sdr = _values("noise_sd", o.noise_sd, len(chain.outputs), "> 0")
    sdu = _values("input_sd", input_sd, len(chain.forced_dofs), ">= 0")
    unknown = dict(o.unknown or {})
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
    weights = o.sigma_weights()
    forced = {d: i for i, d in enumerate(chain.forced_dofs)}
    # forces whose error an accelerometer on their mass reads: carried as states (_segment_node)
    read = {int(o[1:]) for o in chain.outputs if o[0] in "aA"}
    carried = {d for d, i in forced.items() if d in read and sdu[i] > 0.0}
    sdq_u = np.where([d in carried for d in chain.forced_dofs], 0.0, sdu)  # the rest enter Q
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
        n_g = part.n_ground  # the ground's inputs (ag; xg, vg) come first, then one force slot per DOF
        errors = tuple(n_g + i for i, d in enumerate(seg) if d in carried)
        shape = (m, part.outputs, *flags, names, integrator, dt, substeps, len(held), part.base, errors)
        node = SEGMENT_NODES.get(lambda shape=shape: shape, lambda shape=shape: _segment_node(*shape))
        err_sd = [float(sdu[forced[d]]) for d in seg if d in carried]
        n_err = len(err_sd)
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
                x0=np.concatenate([mean0[states], [v[0] for v in values], np.zeros(2 * n_err)]),
                P0=np.diag(np.concatenate([sd0[states], [v[1] for v in values], err_sd, err_sd]) ** 2),
                Q=np.diag(np.concatenate([sdq[states], [v[2] for v in values], np.zeros(n_err), err_sd]) ** 2)
                + _input_noise(seg, forced, sdq_u, np.asarray(params["m"]), dt, len(values) + 2 * n_err),
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
                + tuple(held)
                + tuple(
                    f"~{chain.input_names[chain.n_ground + forced[d]]}.error{when}"
                    for when in ("", "_next")
                    for d in seg
                    if d in carried
                ),
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
    errors: tuple[int, ...] = (),
) -> GraphNode:
    """The transition and output of a segment's structure, every DOF forced (messages add to inputs).

    ``n_held`` constant states after the segment's own (a cut connection's unknowns, which only its
    interface reads), then two states per input slot in ``errors``: that force's error over this step,
    added to its input in the transition and the outputs, and its error over the next step, drawn afresh
    (the transition moves it into the first and returns 0, the subsystem's Q holding its variance). An
    accelerometer on the mass reads the same draw that moves the mass over the step, so the measurement
    and process noises are correlated exactly as the data make them (the feed-through of Simon 2006,
    Sec. 7.1, carried as white states). The draw is a step ahead so that a UKF that reads the outputs at
    its propagated sigma points (no redraw, Q added after) still sees its spread. Such a node has no
    :class:`~twinfer.sim.Dynamics` (a vector field cannot redraw a state). Kept by :func:`chain_graph`
    (``SEGMENT_NODES``), so segments of one structure share their functions and batch together in
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
    n_err = len(errors)
    if not n_held and not n_err:
        return node
    slots = jnp.asarray(errors, dtype=jnp.int32)
    tail = n_held + 2 * n_err
    own = lambda x: x[: x.shape[0] - tail]  # noqa: E731
    held = lambda x: x[x.shape[0] - tail : x.shape[0] - 2 * n_err]  # noqa: E731
    now = lambda x: x[x.shape[0] - 2 * n_err : x.shape[0] - n_err]  # noqa: E731
    forced = lambda x, u: u.at[slots].add(now(x)) if n_err else u  # noqa: E731
    dyn = node.dynamics
    return GraphNode(
        lambda x, u, m, p: jnp.concatenate(
            [
                node.transition(own(x), forced(x, u), m, p),
                held(x),
                x[x.shape[0] - n_err :],
                jnp.zeros(n_err, x.dtype),
            ]
        ),
        lambda x, u, m, p: node.output(own(x), forced(x, u), m, p),
        None
        if dyn is None or n_err
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
