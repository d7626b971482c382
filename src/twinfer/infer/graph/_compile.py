"""Compile a graph and a schedule into one jitted time step, and scan it over a dataset.

Identical subsystems (same functions, shapes and ports) are stacked and vmapped; interfaces are index
arrays into a flat vector of interface variables (gather) and a flat vector of message slots
(scatter-add, the aggregation A = sum). There is no Python loop over subsystems inside a time step.

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

Message rules (:class:`~twinfer.infer.graph.Interface` ``rule``). Write the force on receiver i from
sender j as F = h(s_j, s_i) with s the interface variables, P_j, P_i their posterior covariances.

* ``"paper"`` (S30-S46): F is read once, at both means, and held over [t_n, t_{n+1}); a probabilistic
  message adds ``V_n = Var[h]`` under N(s_j, P_j) x N(s_i, P_i) (unscented, S33) to the receiver's process
  noise as ``G max(0, V_n - V_{n-1}) G^T``, G = d x_{n+1} / d m (S40-S46). The receiver's own uncertainty
  re-enters it as noise, and the increment ratchets when V rises and falls with the state (any
  nonlinear law): on chains with Duffing cuts it diverges (issue #20).
* ``"split"``: the receiver evaluates h itself. At an integrator stage at t_n + tau dt, for each of its
  sigma points chi,

      F(chi, tau) = h( s_j(t_n) + tau (s^_j(t_{n+1}) - s_j(t_n)),  chi_port(tau) ),

  where s^_j(t_{n+1}) is the sender's mean stepped once with its messages held (a predictor). The
  receiver's share of h is thus propagated by its own filter, exactly for any law as far as its
  sigma points carry it, and its correlation with the receiver's state is kept; the sender's path is
  linear in time, so the exchange is second order (a 1 ms step of a Duffing chain: 2e-4 of the motion
  against 7e-2 held). A probabilistic message makes the sender's error a *consider* state of the
  receiver (Schmidt 1966; Brown & Hwang, sec. 9.4): the receiver carries z ~ N(0, I) (one per sender
  interface variable) after its state and reads the sender at

      s_j(tau) = s_j(t_n) + tau (s^_j(t_{n+1}) - s_j(t_n)) + L_j z,      L_j L_j^T = P_j (port block),

  so its sigma points spread over the sender's uncertainty as well as its own, at every stage and in
  the outputs that read the force. z is never estimated (the gain's rows for it are zero): after each
  update its mean is reset to 0 and its covariance to I, and only its cross-covariance P_xz with the
  receiver's state is kept (:func:`_schmidt`); L_j is the sender's factor at the current step, so
  z's persistence models an error that is correlated in time, as the sender's is. This is what the
  error needs: a sender's error drifts slowly, and white noise of the same variance injected each step
  (the rule ``Q_i += G Var[h(s_j, mean_i)] G^T`` tried first) integrates to a far smaller position
  error, so positions under-covered badly (coverage 0.63 on the Duffing chain of
  issue #20, against 0.78 with consider states; 0.69 -> 0.92 with linear cuts). The
  errors of neighbouring subsystems co-drift, though (correlation 0.95-0.99 of the port positions
  across each cut of the Duffing chain of issue #20): each filter's estimate is built from the
  other's messages. Read as independent of its own, the sender's port pins the receiver's absolute
  position with information the receiver itself sent; positions then under-cover (0.51-0.82 per mass
  on that chain, 0.81 over all states) while velocities and relative motions are covered.
  Both ends hold an estimate of that correlation. The receiver's is the kept P_xz of its consider
  states. The sender's is its own consider states' cross-covariance with its port,
  ``X = Cov(e_j, w_i)``, where ``w_i = L_i^+ e_i`` is the receiver's whitened port error (the consider
  states by which the sender reads the receiver, :meth:`_Engine.cross`). Rule ``"shared"`` (an
  option, not the default: see the rotors below) therefore reads the sender at

      s_j(tau) = s_j(t_n) + tau (s^_j(t_{n+1}) - s_j(t_n)) + SHARE X L_i^+ d_i(tau) + R_j z,
      R_j R_j^T = P_j - X X^T,

  with ``d_i(tau)`` its own sigma point's port less its mean path (start and predicted end, linear in
  tau), so that its own deviation carries the correlated part of the sender's error and ``z`` the
  rest. Only states enter X: an unknown parameter held at either port is estimated by its holder from
  its own data and is read as independent (regressing a held connection's c3 on the receiver's
  deviation moved its estimate from 30 to 81-95 on the six-mass chain of the tests).
  ``SHARE = 1/2`` weights the sender's estimate of the shared part as much as the receiver's own
  (which ``z``'s kept cross-covariance already carries). This weight is measured, not derived. On the
  issue #20 chain (four 2-mass subsystems, accelerometers on half the masses, 10 s at 1 kHz), state
  95 % coverage (and state RMSE) of probabilistic Jacobi:

      sender's error read as                   Duffing cuts       Van der Pol        linear cuts
      independent ("split", L_j z)             0.81 (1.14e-3)     0.91 (8.80e-4)     0.91 (8.88e-4)
      SHARE = 0 (R_j z only)                                      0.85               0.85
      SHARE = 0.3                              0.82               0.92
      SHARE = 0.4                              0.87
      SHARE = 0.5 ("shared")                   0.93 (9.69e-4)     0.95 (9.05e-4)     0.95
      SHARE = 0.6                              0.95
      SHARE = 0.7                              0.80 (1.57e-3)     0.95, one v 0.72
      SHARE = 1                                diverged (t = 2.2 s)
      central UKF, same discretisation         1.00 (6.47e-4)

  Over the measurement noise's seed (the same chain and force; the table is seed 2), Duffing cuts:

      noise seed         2                5                7                11               13
      "split"            0.81 (1.14e-3)   0.83 (1.07e-3)   0.70 (1.44e-3)   0.72 (1.33e-3)   0.85 (1.11e-3)
      "shared"           0.93 (9.69e-4)   0.89 (9.03e-4)   0.80 (1.28e-3)   0.79 (1.03e-3)   0.85 (1.14e-3)
      central UKF        1.00 (6.47e-4)   0.99 (6.33e-4)   1.00 (6.67e-4)   1.00 (6.27e-4)   1.00 (6.35e-4)

  so "shared" adds 0 to 0.12 (0.07 on average) and mostly cuts the RMSE, but does not put every
  record in [0.90, 0.99]; its k6 interval misses the truth at seeds 7 and 13 (16,780-16,930 and
  16,820-16,970 against 17,000), "split"'s at seed 7, the central filter's never. Two inner Jacobi
  iterations (0.32 and 0.31 at seed 2) and the "ab2" schedule (0.47) cover far less. Position errors
  fell by a third to a half on the Duffing chain.

  Above about 0.6 the exchange, a feedback loop between neighbours, loses stability, as it does when
  the sender's variance is inflated (covariance-intersection style: ``sqrt(2) L_j`` diverged on that
  chain) or when the residual keeps the variance a consistent split would (``P_j - SHARE^2 X X^T``
  diverged at 1/2).

  Elsewhere, at SHARE = 1/2: the six-mass chain with a held cut connection's k3, c3, k5 unknown, 0.97
  -> 0.96 (every truth inside its interval); three grounded rotors coupled by K sin(theta_j -
  theta_i), a tachometer on rotors 1 and 3, 0.85 -> 0.73 (0.76 at SHARE = 1/4), the angles' errors
  up by a third with the same spread. There the neighbours' errors do not co-drift (each rotor is
  held to ground) and the shared part only adds the sender's guess of a correlation to the
  receiver's own. On ``twinfer run chain-scaling`` (R 1000x the sensor variance, [REPO]) with
  probabilistic messages, "split" against "shared": n = 4, 1.00 and 1.00; n = 16, 1.00 and 0.95 (k
  NRMSE 0.19 and 0.64); n = 64, 1.00 and a DivergenceError at S35, t = 3.7 s. Whether to read a
  neighbour's error as shared is therefore a choice about the structure, left to the user, and not
  safe on long chains; ``"split"`` stays the default.

  How far a block-by-block posterior can go: on that chain with the noise really in the data (the
  force at mass 8 recorded with 2 % load-cell noise, that noise in Q, no random walk), the exact
  central EKF step followed by keeping only each subsystem's own block of the covariance (the
  assumed-density projection of Boyen & Koller, UAI 1998, the best such a posterior could hold at
  each step) covered 0.08-0.16 of the states over two noise seeds and both cut laws, against 0.91-0.97
  for the central filter; "split" messages covered 0.41-0.79 and deterministic ones 0.19-0.30. The
  correlation between subsystems is what calibration needs here, and it is what
  :func:`twinfer.infer.graph.banded_estimate` keeps (0.89-0.97 on the same records; the acceptance test
  in ``tests/test_graph_from_model.py``).

  Without a consider reverse edge (X = 0) and for a linear law, the receiver's moments are those of
  the joint Gaussian with the sender's port independent of z's past effect on it: exact for one
  step, as S33 without the receiver's own term. A Gauss-Seidel sweep with these rules under-covered
  more (0.44 with "split"), since its predicted path assumes the senders' simultaneous step.

"""

from __future__ import annotations

import collections
import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.data._checks import first_bad
from twinfer.infer._estimate import Estimate, merge_estimates
from twinfer.infer.filters import STATIC_STEPS, DivergenceError, gaussian_filter, ukf_step
from twinfer.infer.filters._errors import (
    NIS_ALPHA,
    NIS_DIVERGED,
    NIS_FACTOR,
    NIS_LOW,
    NIS_WARN,
    FilterConsistencyWarning,
    first_not_psd,
    first_runaway,
    inconsistency,
    nis_band,
)
from twinfer.infer.gaussian import UnscentedWeights, cholesky, linear, predict, psd_factor, taylor, tria
from twinfer.infer.graph._field import FieldEngine, _columns, compile_field, run_field
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._parts import Interface, LinearOutput, Subsystem, structure_cached
from twinfer.sim import Dynamics, integrator_step, substep_loop
from twinfer.timing import BenchResult

SCHEDULES = ("jacobi", "gauss_seidel", "ab2")
_UT = UnscentedWeights.merwe(1.0, 2.0, 0.0)

EARLY_STEPS = 10
"""A divergence before this step is blamed on the prior first (:func:`_check_divergence`)."""

SHARE = 0.5
"""The weight of the sender's estimate of the cross-covariance in a consider message (module docstring)."""


class Schedule(eqx.Module):
    """Message-passing schedule and the number ``inner`` of iterations K per time step."""

    kind: str = eqx.field(static=True, default="jacobi")
    inner: int = eqx.field(static=True, default=1)

    def __check_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"Schedule kind: expected one of {SCHEDULES}; received {self.kind!r}.")
        if self.inner < 1:
            raise ValueError(f"Schedule inner: expected >= 1 inner iterations; received {self.inner}.")


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


class Numbers(eqx.Module):
    """Everything numeric a compiled graph runs on (may change between calls without retracing)."""

    groups: tuple[dict[str, Any], ...]
    gammas: tuple[Any, ...]
    probabilistic: tuple[Any, ...]  # (E_g,) 1.0 where the edge's message is probabilistic


class GraphResult(NamedTuple):
    """One subsystem's estimates.

    ``means``/``covs`` over t_0..t_T (row 0 the prior), one-step predictive ``pred_means``/``pred_covs``
    over t_1..t_T, the log-likelihood of its measurements and its terms per step ``step_logliks``
    over t_1..t_T, and its normalised innovation squared per step ``step_nis`` over t_1..t_T
    (``v^T S^-1 v`` over the outputs observed at that step; 0 for an estimator without an update).
    """

    means: Any
    covs: Any
    pred_means: Any
    pred_covs: Any
    loglik: Any
    step_logliks: Any = None
    step_nis: Any = None


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


@dataclasses.dataclass(frozen=True)
class Compiled:
    """A graph compiled for a schedule: ``step`` (jitted, pure) and ``scan`` over a whole record."""

    names: tuple[str, ...]
    engine: _Engine | FieldEngine
    numbers: Any  # Numbers, or FieldNumbers for a graph coupled by a field
    step: Callable[..., Any]
    scan: Callable[..., Any]

    @property
    def groups(self) -> tuple[Any, ...]:
        return self.engine.groups

    @property
    def edge_groups(self) -> tuple[_EdgeGroup, ...]:
        return self.engine.edge_groups if isinstance(self.engine, _Engine) else ()


def compile(  # noqa: A001
    graph: Graph, schedule: Schedule | str = "jacobi", *, mesh: jax.sharding.Mesh | None = None
) -> Compiled:
    """Build the stacked arrays and index maps of ``graph`` and jit one time step for ``schedule``.

    Args:
        graph: the graph (nested graphs are flattened).
        schedule: a :class:`Schedule` or the name of one with K = 1.
        mesh: a one-axis device mesh for a graph coupled by a :class:`Field`: each group's member axis
            is padded with inert members to a multiple of its size and split over its devices
            (``jax.sharding``). On several hosts, build it from ``jax.devices()`` after
            :func:`twinfer.sharding.init_distributed`.

    Returns:
        :class:`Compiled` with ``numbers`` (the graph's arrays), ``step(numbers, carry, (u, y, mask))``
        and ``scan(numbers, us, ys, masks, check=False)``, both jitted; numbers can be swapped without
        retracing. ``check=True`` makes the scan raise inside ``jit`` when a subsystem diverges.

    Raises:
        ValueError: naming the schedule option when it is unknown.

    """
    if isinstance(schedule, str):
        schedule = Schedule(kind=schedule)
    if mesh is not None and len(mesh.axis_names) != 1:
        raise ValueError(f"compile mesh: expected a mesh with one axis; received axes {mesh.axis_names}.")
    if graph.fields:
        return compile_field(graph, schedule, mesh)
    if mesh is not None:
        raise ValueError("compile mesh: only a graph coupled by a field shards its members; received a mesh.")
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


compile_graph = compile
"""Alias of :func:`compile` that does not shadow the builtin: ``from twinfer.infer.graph import
compile_graph``."""


def numbers_of(
    subs: list[Subsystem], edges: list[Interface], groups: list[_Group], edge_groups: list[_EdgeGroup]
) -> Numbers:
    """Stack the numeric fields of the members of each group and edge group."""

    def stack(items: list[Any]) -> Any:
        return jax.tree_util.tree_map(lambda *xs: _stack_leaves(xs), *items)

    gs = []
    for g in groups:
        ms = [subs[i] for i in g.members]
        gs.append(
            {
                "params": stack([s.params for s in ms]),
                "x0": stack([s.x0 for s in ms]),
                "P0": stack([s.P0 for s in ms]),
                "Q": stack([s.Q for s in ms]),
                "R": stack([s.R for s in ms]),
                **{f"chol_{k}": _factors(stack([getattr(s, k) for s in ms])) for k in ("P0", "Q", "R")},
                "inputs": np.asarray([s.inputs for s in ms], dtype=int).reshape(len(ms), -1),
                "outputs": np.asarray([s.outputs for s in ms], dtype=int).reshape(len(ms), -1),
            }
        )
    gammas = tuple(stack([edges[k].gamma for k in eg.members]) for eg in edge_groups)
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


def with_numbers(compiled: Compiled, graph: Graph) -> Numbers:
    """The numbers of another graph with the same structure as the compiled one (no recompilation)."""
    subs, edges = graph.flatten()
    if tuple(s.name for s in subs) != compiled.names:
        raise ValueError(
            f"with_numbers: expected subsystems {compiled.names}; received {tuple(s.name for s in subs)}."
        )
    return numbers_of(subs, edges, list(compiled.groups), list(compiled.edge_groups))


def _psd_part(a: Any) -> Any:
    """Positive part of a symmetric matrix (max(0, .) for scalars): the incremental rule S46."""
    if a.shape[-1] == 1:
        return jnp.maximum(a, 0.0)
    w, v = jnp.linalg.eigh(0.5 * (a + a.T))
    return (v * jnp.maximum(w, 0.0)) @ v.T


def _psd_root(a: Any) -> Any:
    """A square factor ``F F^T = a`` of a positive semi-definite matrix (sqrt for scalars)."""
    if a.shape[-1] == 1:
        return jnp.sqrt(jnp.maximum(a, 0.0))
    w, v = jnp.linalg.eigh(0.5 * (a + a.T))
    return v * jnp.sqrt(jnp.maximum(w, 0.0))[None, :]


def _psd_root_pinv(a: Any) -> Any:
    """The pseudo-inverse of :func:`_psd_root`'s factor: ``F^+`` with ``F^+ F`` the projector on its range."""
    if a.shape[-1] == 1:
        return jnp.where(a > 0, 1.0 / jnp.sqrt(jnp.where(a > 0, a, 1.0)), 0.0)
    w, v = jnp.linalg.eigh(0.5 * (a + a.T))
    keep = w > 1e-12 * jnp.max(jnp.abs(w))
    inv = jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, w, 1.0)), 0.0)
    return (v * inv[None, :]).T


def _linear_output(matrix: np.ndarray) -> Callable[..., Any]:
    """``(x, u, m, params) -> H x``: a subsystem's output given as a matrix."""
    return lambda x, u, m, params: jnp.asarray(matrix) @ x


def _local_step(
    tmpl: _Template,
    arr: dict[str, Any],
    x: Any,
    chol: Any,
    u_all: Any,
    y_all: Any,
    mask_all: Any,
    m: Any,
    cm: Any,
    laws: tuple[tuple[Callable[..., Any], int, bool], ...] = (),
    split: tuple[Any, ...] = (),
    n_z: int = 0,
):
    """One predict/update of one subsystem with message mean ``m`` and message covariance ``cm``.

    The probabilistic messages enter as extra process noise ``G cm G^T`` (G = d x_next / d m, S40-S44),
    appended to the factor of Q as ``G F`` with ``F F^T = cm``. ``split`` edges (rule ``"split"``, one
    table per law in ``laws``: senders' interface means, gammas, the port's local state indices and
    slots, validity, the sender's port factor) add ``law(s_j, x[port])`` to ``m`` at every sigma point
    and integrator stage. The last ``n_z`` entries of ``x`` are the consider states of probabilistic
    split edges, which read the sender at ``s_j + L_j z``: after the
    update their mean is reset to 0 and their covariance to I, keeping their cross-covariance with the
    state (:func:`_schmidt`).
    Returns filtered and predicted means and lower factors, the log-likelihood increment and the
    normalised innovation squared of the update (:func:`_estimator_step`).
    """
    half = u_all.shape[0] // 2  # the step's input pair: held over the step, read with y (step_inputs)
    u, u_meas = _columns(u_all[:half], arr["inputs"]), _columns(u_all[half:], arr["inputs"])
    seen = arr["outputs"] >= 0  # -1: an output never measured (not the data's last column)
    safe = jnp.where(seen, arr["outputs"], 0)
    y, mask = y_all[safe], seen & mask_all[safe]
    params = arr["params"]

    fm, hm = _split_model(tmpl, params, m, laws, split, n_z)
    f = lambda xx, uu: fm(xx, uu, m)  # noqa: E731
    h = lambda xx, uu: hm(xx, u_meas, m)  # noqa: E731  (the measurement's own input)
    chol_q, chol_r = arr["chol_Q"], arr["chol_R"]
    if n_z:  # no process noise on the consider states
        chol_q = jnp.concatenate([chol_q, jnp.zeros((n_z, chol_q.shape[1]), chol_q.dtype)], axis=0)
    n_est = x.shape[0] - tmpl.memory
    if tmpl.n_msg:
        gain = jax.jacfwd(lambda mm: fm(x, u, mm)[:n_est])(m)  # d x_next / d m (S40-S44)
        chol_q = jnp.concatenate([chol_q, gain @ _psd_root(cm)], axis=1)
    if tmpl.estimator == "learned":  # the prediction; its own error Q (and injected message noise)
        mean = f(x, u)
        chol_p = tria(chol_q)
        zero = jnp.zeros((), x.dtype)
        return mean, chol_p, mean, chol_p, zero, zero
    res = _estimator_step(tmpl, f, h, x, chol, chol_q, chol_r, u, y, mask)
    if not n_z:
        return res
    return (*_schmidt(res[0], res[1], n_z, tmpl.estimator == "ukf"), *res[2:])


def _estimator_step(tmpl: _Template, f, h, x, chol, chol_q, chol_r, u, y, mask) -> tuple[Any, ...]:
    """The subsystem's estimator on ``f``, ``h``: filtered and predicted means and factors, loglik, NIS.

    The NIS is the update's own ``v^T S^-1 v`` over the observed outputs (the filters compute it with
    the log-likelihood); 0 for the estimators without a predicted innovation covariance (``"none"``,
    the static ``"wls"``/``"wnls"``), which :data:`NIS_ESTIMATORS` leaves out of the consistency check.
    """
    zero = jnp.zeros((), x.dtype)
    if tmpl.estimator == "none":
        jac = jax.jacfwd(lambda xx: f(xx, u))(x)
        mean, chol_p = predict(x, chol, jac, f(x, u) - jac @ x, chol_q)
        return mean, chol_p, mean, chol_p, zero, zero
    if tmpl.estimator == "ukf":
        out = ukf_step(
            f, h, x, chol, chol_q, chol_r, u, y, mask, weights=tmpl.weights, innovation=tmpl.innovation
        )
        return out.mean, out.chol, out.pred_mean, out.pred_chol, out.loglik, _nis_of(out.nis, zero)
    if tmpl.estimator in STATIC_STEPS:  # the static baselines: no covariance carried, P kept
        step = STATIC_STEPS[tmpl.estimator]
        w = step(f, h, x, chol_q @ chol_q.T, chol_r @ chol_r.T, u, y, mask, innovation=tmpl.innovation)
        jac = jax.jacfwd(lambda xx: f(xx, u))(x)
        mean_p, chol_p = predict(x, chol, jac, f(x, u) - jac @ x, chol_q)
        return w.mean, cholesky(w.cov), mean_p, chol_p, zero, zero
    lin = linear if tmpl.estimator == "kf" else taylor
    out = gaussian_filter(f, h, x, chol, chol_q, chol_r, u[None], y[None], mask[None], linearisation=lin)
    # the scan's NIS is its mean over the observed values; one step's sum is that times their count
    nis = _nis_of(out.nis, zero) * jnp.sum(mask.astype(x.dtype))
    return out.means[0], out.chols[0], out.pred_means[0], out.pred_chols[0], out.loglik, nis


def _nis_of(nis: Any, zero: Any) -> Any:
    """A step's NIS (``None`` from an atom that does not compute it reads as 0)."""
    return zero if nis is None else jnp.asarray(nis, zero.dtype)


def _schmidt(mean: Any, chol: Any, n_z: int, triangular: bool) -> tuple[Any, Any]:
    """The Schmidt (consider) posterior from the optimal one: the last ``n_z`` states keep their prior.

    The consider states z ~ N(0, I) are never estimated: the gain's rows for them are zero, so the
    state's mean and covariance and its cross-covariance with z are the optimal update's, and z keeps
    mean 0 and covariance I. With the lower factor ``[[L_x, 0], [C, L_z]]`` of the optimal posterior
    (``P_zx = C L_x^T``) that is the factor ``[[L_x, 0], [C, F]]`` with ``F F^T = I - C C^T``, positive
    semi-definite because the Schmidt covariance is (Schmidt 1966; Brown & Hwang, *Introduction to
    Random Signals and Applied Kalman Filtering*, 4th ed., sec. 9.4).
    """
    n = mean.shape[0] - n_z
    low = chol if triangular else tria(chol)
    c = low[n:, :n]
    rest = _psd_root(jnp.eye(n_z, dtype=low.dtype) - c @ c.T)
    return mean.at[n:].set(0.0), low.at[n:, n:].set(rest)


def _split_model(
    tmpl: _Template,
    params: Any,
    m: Any,
    laws: tuple[tuple[Callable[..., Any], int, bool], ...],
    split: tuple[Any, ...],
    n_z: int = 0,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``fm(x, u, mm)`` and ``hm(x, u, mm)``: the subsystem with the ``"split"`` edges' laws inside.

    A split edge's sender enters through its interface means at the step's start ``a0`` and predicted at
    its end ``a1``, read at the fraction ``tau`` of the step as ``a0 + tau (a1 - a0)``; the law is
    evaluated with the receiver's own state at each integrator stage (``tau`` the stage's time) when the
    subsystem carries its :class:`~twinfer.sim.Dynamics`, else once at the start and held; the output
    reads it at ``tau = 1``. A probabilistic split edge's sender is read at ``a + L_s z`` with ``L_s``
    the factor of the sender's port covariance and ``z`` its consider states, the last ``n_z`` entries
    of ``xx`` (carried unchanged by ``fm``).
    """

    def own(xx: Any, zz: Any, tau: Any) -> Any:
        out = jnp.zeros_like(m)
        for (law, z0, shared), (a0, a1, gamma, ridx, slots, valid, chol_s, reg, r0, r1) in zip(
            laws, split, strict=True
        ):
            a = a0 + tau * (a1 - a0)
            if shared:  # the part of the sender's error correlated with the receiver's (rule "shared")
                own_dev = xx[ridx] - (r0 + tau * (r1 - r0))  # (J, p_r) this sigma point off the mean path
                a = a + jnp.einsum("jpq,jq->jp", reg, own_dev)
            if z0 >= 0:  # the sender's error (the rest of it with rule "shared")
                a = a + jnp.einsum("jpq,jq->jp", chol_s, zz[z0 : z0 + a.size].reshape(a.shape))
            vals = jax.vmap(lambda aa, g, ri, law=law: jnp.atleast_1d(law(aa, xx[ri], g)))(a, gamma, ridx)
            out = out.at[slots].add(vals * valid[:, None])
        return out

    dyn = tmpl.dynamics
    if not laws:
        return (
            lambda xx, uu, mm: tmpl.transition(xx, uu, mm, params),
            lambda xx, uu, mm: tmpl.output(xx, uu, mm, params),
        )

    def parts(xx: Any) -> tuple[Any, Any]:
        n = xx.shape[0] - n_z
        return xx[:n], xx[n:]

    def fm(xx: Any, uu: Any, mm: Any) -> Any:
        x, zz = parts(xx)
        if dyn is None:  # the law at the state the step starts from, held over the step
            x = tmpl.transition(x, uu, mm + own(x, zz, 0.0), params)
        else:  # the law at every stage of the subsystem's own integrator
            d = dyn
            rhs = lambda t, w: d.vector_field(w, uu, mm + own(w, zz, t / d.dt), params)  # noqa: E731
            step, h = integrator_step(d.method), d.dt / d.substeps
            x = substep_loop(lambda j, w, step=step, rhs=rhs, h=h: step(rhs, j * h, w, h), x, d.substeps)
        return jnp.concatenate([x, zz]) if n_z else x

    def hm(xx: Any, uu: Any, mm: Any) -> Any:
        x, zz = parts(xx)
        return tmpl.output(x, uu, mm + own(x, zz, 1.0), params)

    return fm, hm


def _predict_mean(
    tmpl: _Template, arr: dict[str, Any], x: Any, u_all: Any, m: Any, laws: Any, split: Any, n_z: int
):
    """The mean stepped once with the messages held (split senders held at their start): ``a1``'s source."""
    fm, _ = _split_model(tmpl, arr["params"], m, laws, split, n_z)
    return fm(x, _columns(u_all, arr["inputs"]), m)


def law_moments(law: Callable[..., Any], gamma: Any, mean: Any, cov: Any, n_send: int) -> tuple[Any, Any]:
    """Mean and covariance of an interface message ``law(s_send, s_recv, gamma)`` under a Gaussian.

    ``mean`` and ``cov`` are those of the concatenated ports ``[s_send, s_recv]`` (the first ``n_send``
    entries the sender's), so a joint posterior's cross-covariance between the two ports is used where
    an estimator keeps it; a distributed one gives the block-diagonal of its subsystems' (the
    probabilistic message's own assumption, S33). Unscented (Merwe alpha 1, beta 2, kappa 0): exact for
    a linear law, where the variance is ``a^T P a`` (S33). Batch over time with ``jax.vmap``.
    """
    fn = lambda zz: jnp.atleast_1d(law(zz[:n_send], zz[n_send:], gamma))  # noqa: E731
    pts, wm, wc = _UT.sigma_points(mean, cholesky(0.5 * (cov + cov.T)))
    vals = jax.vmap(fn)(pts)
    centre = wm @ vals
    d = vals - centre
    return centre, (d.T * wc) @ d


@functools.partial(jax.jit, static_argnames=("law", "n_send"))
def law_moments_series(
    law: Callable[..., Any], gamma: Any, means: Any, covs: Any, n_send: int
) -> tuple[Any, Any]:
    """:func:`law_moments` at every row of ``means`` (T, p) and ``covs`` (T, p, p), compiled once.

    One program per law and shape: run op by op, the batch cost 2 s of dispatch on a cold start.
    """
    return jax.vmap(lambda m, c: law_moments(law, gamma, m, c, n_send))(means, covs)


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
        non-finite or whose covariance lost its positive diagonal; :func:`run` checks on the host
        instead and also names the step.
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


_CACHE: collections.OrderedDict[Any, Compiled] = collections.OrderedDict()
_CACHE_SIZE = 16


def _structure(graph: Graph, schedule: Schedule) -> Any:
    """What a compiled program depends on, not the numbers it runs on.

    Every subsystem's functions, shapes, ports and data-column counts; every interface's law, ends, kind
    and gamma shapes; the schedule.
    """
    subs, edges = graph.flatten()
    return (
        schedule,
        tuple((s.name, _group_key(s)) for s in subs),
        tuple(
            (e.law, e.sender, e.sender_port, e.receiver, e.receiver_port, e.kind, e.rule,
             tuple(jnp.shape(leaf) for leaf in jax.tree_util.tree_leaves(e.gamma)))
            for e in edges
        ),
    )  # fmt: skip


def compiled_for(graph: Graph, schedule: Schedule | str = "jacobi") -> Compiled:
    """The compiled program of ``graph``'s structure: compiled once, then reused (least recently used of 16).

    Graphs that differ only in numbers (parameters, initial values, noise, data columns) share one
    program, so repeated :func:`run` calls on new numbers do not recompile; :func:`run` passes each
    graph's own numbers. A graph coupled by a field is compiled anew (its mesh is part of it).
    """
    if isinstance(schedule, str):
        schedule = Schedule(kind=schedule)
    if graph.fields:
        return compile(graph, schedule)
    chosen = schedule
    return structure_cached(
        _CACHE, _CACHE_SIZE, lambda: _structure(graph, chosen), lambda: compile(graph, chosen)
    )


def run(
    graph: Graph,
    dataset: Any = None,
    schedule: Schedule | str = "jacobi",
    *,
    us: Any = None,
    ys: Any = None,
    compiled: Compiled | None = None,
    numbers: Numbers | None = None,
) -> dict[str, GraphResult]:
    """Run the compiled graph over a record and return each subsystem's estimates by name.

    The record is a :class:`twinfer.data.Dataset` (step k applies ``inputs[k]`` over [t_k, t_{k+1}) and
    updates with ``observations[k+1]``, read with the input its ``alignment`` says:
    :meth:`~twinfer.data.Dataset.step_inputs`) or arrays ``us`` (T, n_u) and ``ys`` (T, n_y), row k
    ``u_k`` and ``y_{k+1} = h(x_{k+1}, u_k)``.
    Missing values: a NaN observation is missing and skipped (the Dataset's masked entries are NaN);
    an infinite one is an error, as is any non-finite input. Without ``compiled``, the program of the
    graph's structure is compiled once and reused (:func:`compiled_for`).

    Raises:
        ValueError: for a dataset whose output or input names are not the graph's
            (:meth:`~twinfer.infer.graph.Graph.check_dataset`, before anything is compiled), when the
            graph references data columns the record does not have, when ``us``/``ys``
            have the wrong shape or dtype (float64 required) or hold an infinite observation or a
            non-finite input, and when a subsystem's x0, P0, Q or R is non-finite or not positive
            semi-definite, naming the field, the expected and the received value.
        DivergenceError: (a ``ValueError``) when a subsystem's state becomes non-finite, its
            covariance stops being positive semi-definite, or an innovation exceeds 1e4 predicted
            standard deviations (a finite runaway, ``NIS_DIVERGED``), naming the subsystem, the first
            such step (and its time with a dataset) and the likely causes.

    """
    graph.check_dataset(dataset, "run")
    compiled, chosen, outs, times, _ = _scan_record(graph, dataset, schedule, us, ys, compiled, numbers)
    result = unpack(compiled, chosen, outs)
    _check_divergence(graph, {k: (r.means, r.covs, r.step_logliks) for k, r in result.items()}, times)
    return result


def _scan_record(
    graph: Graph, dataset: Any, schedule: Schedule | str, us: Any, ys: Any, compiled: Any, numbers: Any
) -> tuple[Compiled, Numbers, Any, Any, np.ndarray]:
    """The checked record through the (cached) compiled scan: ``(compiled, numbers, outs, times, masks)``."""
    if compiled is None:
        compiled = compiled_for(graph, schedule)
        if numbers is None and not isinstance(compiled.engine, FieldEngine):
            numbers = with_numbers(compiled, graph)  # this graph's numbers in the cached program
    if isinstance(compiled.engine, FieldEngine):
        raise ValueError(
            f"run: graph {graph.name!r} is coupled by a field; run it with twinfer.infer.graph.run_field, "
            "which keeps the marginal standard deviations only."
        )
    chosen: Numbers = compiled.numbers if numbers is None else numbers
    us, ys, masks, times, us_meas = _prepare_record(compiled, chosen, dataset, us, ys)
    outs = compiled.scan(chosen, jnp.asarray(us), jnp.asarray(ys), jnp.asarray(masks), us_meas=us_meas)
    return compiled, chosen, outs, times, masks


def estimate(
    graph: Graph,
    dataset: Any = None,
    schedule: Schedule | str = "jacobi",
    *,
    us: Any = None,
    ys: Any = None,
    times: Any = None,
) -> Estimate:
    """Run ``graph`` over a record (as :func:`run`) and merge the subsystems into one :class:`Estimate`.

    Columns are the subsystems' ``state_names`` (``"<subsystem>[i]"`` where unnamed; padding states,
    named ``"~..."``, are left out), those in the graph's ``state_order`` first (a chain's
    ``x1..xn, v1..vn``, then its unknowns; a power grid's ``theta``, ``omega``, ``Omega`` per bus); the
    means and standard deviations are each subsystem's own (a distributed estimate keeps no
    cross-covariances, so ``covs`` is None; where the subsystems' errors are correlated, as along a
    chain of accelerometers, its bands are too narrow: :func:`banded_estimate` keeps those
    correlations); the log-likelihood is the sum of the subsystems' (NaN for a graph coupled by a
    field, run by :func:`run_field`, which keeps none). Times are the dataset's, or ``times`` (T + 1,)
    with arrays, or the step numbers 0..T.

    ``nis`` is the central filter's consistency statistic over the subsystems that update (``"ukf"``,
    ``"kf"``, ``"ekf"``): each one's normalised innovation squared ``v^T S^-1 v`` per step over its
    observed outputs, summed over the subsystems and the steps and divided by the number of observed
    values they read, so about 1 for consistent local filters (per step, the sum over the subsystems
    is then about chi-square with the number of observed outputs). None for a graph coupled by a field
    or without such a subsystem or observed value.

    Raises:
        ValueError: as :func:`run`, and when two subsystems name the same column or ``times`` has the
            wrong length.

    Warns:
        FilterConsistencyWarning: by the central filter's rule (:func:`twinfer.infer.filters.run_filter`):
            when ``nis`` exceeds ``NIS_WARN`` (10), or, over at least ``NIS_MIN_COUNT`` observed values,
            is below ``NIS_LOW`` (0.1), naming the subsystems whose own average is furthest off.

    """
    graph.check_dataset(dataset, "estimate")
    nis = None
    if graph.fields:
        fields = run_field(graph, dataset, us=us, ys=ys)
        result = {k: (np.asarray(v.means), np.asarray(v.stds), float("nan")) for k, v in fields.items()}
    else:  # the marginals straight from the factors: no (T, n, n) covariance formed, O(T n^2) on the host
        compiled, chosen, outs, times_, masks = _scan_record(graph, dataset, schedule, us, ys, None, None)
        result = _checked_moments(graph, compiled, chosen, outs, times_)
        per = _subsystem_nis(compiled, chosen, outs, masks)
        nis = _total_nis(per)
        loglik = float(sum(r[2] for r in result.values()))
        _warn_inconsistent("graph estimate", nis, per, loglik)
    return dataclasses.replace(_merged(graph, result, dataset, times), nis=nis)


def timed_estimate(
    graph: Graph, dataset: Any, schedule: Schedule | str = "jacobi", *, repeats: int = 1
) -> tuple[Estimate, BenchResult]:
    """:func:`estimate` with the compiled scan timed: its first call apart from ``repeats`` more.

    The first call traces, compiles and runs; the program is then run ``repeats`` times more, and the
    estimate is the last run's. For benchmarks and the cases that report run times (``chain-scaling``).
    The estimate's ``nis`` is :func:`estimate`'s; no :class:`FilterConsistencyWarning` is raised, since
    the cases set their filters' noise levels apart from the data's on purpose (``chain-scaling``'s R
    is 1000x the sensor variance, as in the paper) and score the calibration themselves.

    Raises:
        ValueError: as :func:`estimate`; for a graph coupled by a field (time :func:`run_field`).

    """
    from twinfer.timing import time_jitted

    graph.check_dataset(dataset, "timed_estimate")
    compiled = compiled_for(graph, schedule)
    if isinstance(compiled.engine, FieldEngine):
        raise ValueError(
            f"timed_estimate: graph {graph.name!r} is coupled by a field; time run_field instead."
        )
    chosen = with_numbers(compiled, graph)
    us, ys, masks, times, us_meas = _prepare_record(compiled, chosen, dataset, None, None)
    args = (jnp.asarray(us), jnp.asarray(ys), jnp.asarray(masks), us_meas)
    timed = time_jitted(
        lambda u, y, k, um: compiled.scan(chosen, u, y, k, us_meas=um), *args, repeats=repeats
    )
    result = _checked_moments(graph, compiled, chosen, timed.value, times)
    nis = _total_nis(_subsystem_nis(compiled, chosen, timed.value, masks))
    return dataclasses.replace(_merged(graph, result, dataset, None), nis=nis), timed


def _checked_moments(graph: Graph, compiled: Compiled, chosen: Numbers, outs: Any, times: Any) -> dict:
    moments = unpack_moments(compiled, chosen, outs)
    _check_divergence(graph, moments, times)
    return {k: (m, sd, float(np.sum(ll))) for k, (m, sd, ll) in moments.items()}


NIS_ESTIMATORS = ("ukf", "kf", "ekf")
"""The local estimators whose updates give a normalised innovation squared (a predicted ``S``)."""


def _subsystem_nis(
    compiled: Compiled, numbers: Numbers, outs: Any, masks: Any
) -> dict[str, tuple[float, int]]:
    """Each updating subsystem's summed NIS over the record and the number of observed values it read.

    ``outs`` is ``compiled.scan``'s output on the record whose observation mask is ``masks`` (T, n_y);
    a subsystem counts the entries of its output columns (not -1, never measured) that the mask
    observes, as its update does (:func:`_local_step`). Subsystems with another estimator
    (:data:`NIS_ESTIMATORS`) or no outputs are left out.
    """
    nis = [np.asarray(a) for a in outs[5]]
    masks = np.asarray(masks, dtype=bool)
    out: dict[str, tuple[float, int]] = {}
    for gi, g in enumerate(compiled.groups):
        cols = np.asarray(numbers.groups[gi]["outputs"], dtype=int)
        if g.template.estimator not in NIS_ESTIMATORS or cols.shape[-1] == 0:
            continue
        for j, i in enumerate(g.members):
            seen = cols[j][cols[j] >= 0]  # -1: an output never measured
            out[compiled.names[i]] = (float(np.sum(nis[gi][:, j])), int(masks[:, seen].sum()))
    return out


def _total_nis(per: dict[str, tuple[float, int]]) -> float | None:
    """The mean NIS per observed value over all subsystems (the central filter's ``nis``); None if none."""
    count = sum(c for _, c in per.values())
    return sum(v for v, _ in per.values()) / count if count else None


def _warn_inconsistent(
    where: str, nis: float | None, per: dict[str, tuple[float, int]], loglik: float
) -> None:
    """The central filter's :class:`FilterConsistencyWarning` rule on ``nis``, naming the worst subsystems.

    Above ``NIS_WARN`` the subsystems whose own mean NIS exceeds it (at least the largest) are named,
    largest first; below ``NIS_LOW`` (over ``NIS_MIN_COUNT`` observed values or more) those below it
    (at least the smallest), smallest first.
    """
    n_obs = sum(c for _, c in per.values())
    verdict = inconsistency(nis, n_obs, alpha=NIS_ALPHA)
    if verdict is None:
        return
    low, high_bound = nis_band(n_obs)
    low, high_bound = min(low, 1.0 / NIS_FACTOR), max(high_bound, NIS_FACTOR)
    expected = (
        f"a consistent filter gives {low:.3g}..{high_bound:.3g} over {n_obs} values (chi-square, false-alarm "
        f"rate {NIS_ALPHA:g}, and at most {NIS_FACTOR:g}x from 1)"
    )
    means = {k: v / c for k, (v, c) in per.items() if c}
    high = verdict == "high"
    ranked = sorted(means, key=lambda k: -means[k] if high else means[k])
    # beyond the fixed limits, the subsystems beyond them; otherwise those outside the chi-square band
    top = NIS_WARN if nis is not None and nis > NIS_WARN else high_bound
    bottom = NIS_LOW if nis is not None and nis < NIS_LOW else low
    named = [k for k in ranked if (means[k] > top if high else means[k] < bottom)] or ranked[:1]
    worst = ", ".join(f"{k!r} {means[k]:.3g} over {per[k][1]} values" for k in named)
    if high:
        text = (
            f"{where}: the normalised innovation squared (NIS) averages {nis:.3g} per measurement over the "
            f"subsystems' updates; {expected}. Worst subsystems: {worst}. Their models, parameters, noise "
            "levels (noise_sd, process_sd), incoming messages or the record's alignment (which instant "
            "each input column was sampled at: docs/your-data.md) do not fit the data, so the estimates "
            f"and the log-likelihood ({loglik:.4g}) are not trustworthy."
        )
    else:
        text = (
            f"{where}: the normalised innovation squared (NIS) averages {nis:.3g} per measurement; "
            f"{expected}. Lowest subsystems: {worst}. Their variances are larger than the data justify: "
            "noise levels (noise_sd, process_sd) too high, or an unstable discretisation (try a smaller "
            "time step or another integrator)."
        )
    warnings.warn(text, FilterConsistencyWarning, stacklevel=3)


def _merged(graph: Graph, result: dict[str, tuple[Any, Any, float]], dataset: Any, times: Any) -> Estimate:
    """The subsystems' ``(means, stds, loglik)`` as one :class:`Estimate` in the graph's state order."""
    subs, _ = graph.flatten()
    rows = next(iter(result.values()))[0].shape[0]
    if dataset is not None:
        times = np.asarray(dataset.times)
    elif times is None:
        times = np.arange(rows, dtype=np.float64)
    if np.shape(times) != (rows,):
        raise ValueError(
            f"estimate times: expected {rows} values (t_0..t_T); received shape {np.shape(times)}."
        )
    blocks = []
    for s in subs:
        means, stds, _ = result[s.name]
        keep = [j for j, name in enumerate(s.names[: s.n_estimated]) if not name.startswith("~")]
        blocks.append(([s.names[j] for j in keep], means[:, keep], stds[:, keep]))
    merged = merge_estimates(
        blocks,
        times,
        order=[n for n in graph.state_order if any(n in s.names for s in subs)],
        parameters=[p for s in subs for p in s.parameters],
        loglik=float(sum(r[2] for r in result.values())),
    )
    held = {p for s in subs for p in s.parameters}  # the parameters in column order
    return dataclasses.replace(merged, parameters=tuple(n for n in merged.state_names if n in held))


def _prepare_record(
    compiled: Compiled, numbers: Any, dataset: Any, us: Any, ys: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any, Any]:
    """Checked host arrays ``(us, ys with missing values zeroed, masks, times, us_meas)`` of a record.

    ``us_meas``: the inputs the measurements were read with (a dataset's
    :meth:`~twinfer.data.Dataset.step_inputs`), None for arrays (``ys[k]`` read with ``us[k]``).

    Raises:
        ValueError: as :func:`run` for the record and the graph's numbers.

    """
    times, us_meas = None, None
    if dataset is not None:
        pairs = dataset.step_inputs()  # the step's input, and the one y_k+1 was read with
        us, us_meas = np.split(pairs, 2, axis=1)
        ys = np.asarray(dataset.observations)[1:]
        times = np.asarray(dataset.times)
        check_step(
            [g.template.dynamics.dt for g in compiled.groups if g.template.dynamics is not None], dataset
        )
    if us is None or ys is None:
        raise ValueError("run: expected a dataset or both us and ys; received neither.")
    us, ys = _record("us", us), _record("ys", ys)
    if us.shape[0] != ys.shape[0]:
        raise ValueError(
            f"run us, ys: expected the same number of rows T (input k and measurement k+1 per row); "
            f"received us {us.shape}, ys {ys.shape}."
        )
    _check_finite("us", us, allow_nan=False)
    _check_finite("ys", ys, allow_nan=True)
    for gi, g in enumerate(compiled.groups):
        for field, arr, arg in (("inputs", us, "us"), ("outputs", ys, "ys")):
            for i, cols in zip(g.members, np.asarray(numbers.groups[gi][field]), strict=True):
                low = -1  # -1: an output never measured (padding), an input the data does not carry
                if cols.size and (cols.max() >= arr.shape[1] or cols.min() < low):
                    raise ValueError(
                        f"run: subsystem {compiled.names[i]!r} {field}: expected columns in {low}.."
                        f"{arr.shape[1] - 1} (the columns of {arg}, shape {arr.shape}); received "
                        f"{cols.tolist()}."
                    )
    _check_numbers(compiled, numbers)
    masks = ~np.isnan(ys)
    return us, np.where(masks, ys, 0.0), masks, times, us_meas


def check_step(steps: Any, dataset: Any, where: str = "run") -> None:
    """Check that the record is sampled uniformly at the step the graph's subsystems integrate over.

    ``steps``: the subsystems' steps, where they carry one (:class:`twinfer.sim.Dynamics`).

    Raises:
        ValueError: for a non-uniform record or one sampled at another step, naming both.

    """
    steps = sorted({float(s) for s in steps})
    if not steps or not hasattr(type(dataset), "dt"):
        return
    try:
        dt = float(dataset.dt)
    except ValueError as error:
        raise ValueError(
            f"{where} dataset: the graph's subsystems step every {steps[0]:g} s, so the record must be "
            f"sampled at that step; {error}"
        ) from None
    for step in steps:
        if abs(step - dt) > 1e-9 * step:
            raise ValueError(
                f"{where} dataset: expected samples {step:g} s apart (the step the graph's subsystems "
                f"integrate over: Graph.from_model's dt); received {dt:g} s. Build the graph with dt={dt:g}."
            )


def _record(name: str, value: Any) -> np.ndarray:
    """``value`` as a 2-D float64 host array (integers converted exactly; float16/32 refused)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu" or arr.dtype in (np.float16, np.float32):
        raise ValueError(
            f"run {name}: expected a float64 array; received dtype {arr.dtype} (convert with "
            "np.asarray(x, dtype=np.float64) only if the lost digits do not matter)."
        )
    if arr.ndim != 2:
        raise ValueError(f"run {name}: expected a 2-D array (T, columns); received shape {arr.shape}.")
    return arr.astype(np.float64)


def _check_finite(name: str, arr: np.ndarray, *, allow_nan: bool) -> None:
    found = first_bad(arr, np.isinf(arr) if allow_nan else None)
    if found is not None:
        (row, col), value = found
        allowed = "finite values or NaN (missing)" if allow_nan else "finite values"
        raise ValueError(f"run {name}: expected {allowed}; received {value} at row {row}, column {col}.")


def _check_numbers(compiled: Compiled, numbers: Numbers) -> None:
    """Every subsystem's x0 finite, P0, Q and R finite and positive semi-definite (one batch per group)."""
    for gi, g in enumerate(compiled.groups):
        arr = numbers.groups[gi]
        for field in ("x0", "P0", "Q", "R"):
            values = np.asarray(arr[field])
            finite = np.all(np.isfinite(values).reshape(len(g.members), -1), axis=1, keepdims=False)
            finite = np.asarray(finite, dtype=bool)
            j = int(np.argmax(~finite)) if not finite.all() else -1
            if j < 0 and field != "x0":
                j = first_not_psd(values)
            if j < 0:
                continue
            v = values[j]
            where = f"run: subsystem {compiled.names[g.members[j]]!r} {field}"
            if not finite[j]:
                raise ValueError(f"{where}: expected finite values; received {v.tolist()}.")
            eig = float(np.linalg.eigvalsh(0.5 * (v + v.T))[0])
            raise ValueError(
                f"{where}: expected a positive semi-definite covariance; received a matrix with eigenvalue "
                f"{eig:.3g}."
            )


def _diverged_message(who: str, hint: str = "", runaway: bool = False) -> str:
    what = (
        f"an innovation exceeded {NIS_DIVERGED**0.5:.0e} predicted standard deviations (the state ran "
        "away while finite, or a measurement is wildly wrong, or R and Q are far too small for how well "
        "the model fits the data)"
        if runaway
        else "the state became non-finite or the covariance stopped being positive semi-definite"
    )
    return (
        f"graph run diverged: {who}: {what}. Likely causes: process noise Q too small (or P0 too large) "
        "for the model, a step size too large for the transition, or an interface law/gamma whose messages "
        f"grow without bound{hint}."
    )


def _check_divergence(graph: Graph, result: dict[str, tuple[Any, Any, Any]], times: Any) -> None:
    """Raise :class:`DivergenceError` for the subsystem that diverged first (ties: graph order).

    ``result`` maps each subsystem to ``(means, spread, step log-likelihoods)`` over t_0..t_T (the
    log-likelihoods over t_1..t_T), ``spread`` its covariances or standard deviations. Both come from
    square-root factors (Gram products), positive semi-definite by construction, so a diverged step is
    a non-finite one or a finite runaway (:func:`~twinfer.infer.filters._errors.first_runaway`).
    """
    first: list[tuple[int, str, bool]] = []
    for name, (means, spread, step_ll) in result.items():
        m, sp = np.asarray(means)[1:], np.asarray(spread)[1:]
        finite = np.isfinite(m).all(axis=1) & np.isfinite(sp.reshape(sp.shape[0], -1)).all(axis=1)
        bad = -1 if finite.all() else int(np.argmax(~finite))
        ran = -1 if step_ll is None else first_runaway(np.asarray(step_ll)[: None if bad < 0 else bad])
        if ran >= 0:
            first.append((ran, name, True))
        elif bad >= 0:
            first.append((bad, name, False))
    if not first:
        return
    step, name, runaway = min(first)
    _, edges = graph.flatten()
    incoming = [f"{e.kind} from {e.sender!r}" for e in edges if e.receiver == name]
    kinds = f"; its incoming messages: {', '.join(incoming)}" if incoming else ""
    when = f" (t = {float(times[step + 1]):g})" if times is not None else ""
    others = sorted(n for _, n, _ in first if n != name)
    also = f" Also diverged later: {others}." if others else ""
    early = ""
    if step < EARLY_STEPS:  # the prior's spread, before the data could narrow it
        spread0 = np.asarray(result[name][1])[0]
        sd0 = np.sqrt(np.diagonal(spread0)) if spread0.ndim == 2 else spread0
        early = (
            f" It diverged within the first {EARLY_STEPS} steps, where the prior is the usual cause: its "
            f"standard deviations reach {float(np.max(sd0)):.3g}, and sigma points that far out can reach "
            "a nonlinear connection's enormous forces. Give state_sd the size of the motion you expect "
            "(e.g. 1e-3 for millimetres)."
        )
    raise DivergenceError(
        _diverged_message(
            f"subsystem {name!r} at step {step}{when}",
            kinds + "; probabilistic messages add their covariance to Q",
            runaway,
        )
        + early
        + also
    )


def unpack_moments(compiled: Compiled, numbers: Numbers, outs: Any) -> dict[str, tuple[Any, Any, Any]]:
    """Each subsystem's means and standard deviations over t_0..t_T and step log-likelihoods (t_1..t_T).

    The standard deviations are the row norms of the square-root factors: no covariance is formed.
    """
    means, chols, _, _, ll = jax.tree_util.tree_map(np.asarray, outs[:5])  # index on the host
    out: dict[str, tuple[Any, Any, Any]] = {}
    for gi, g in enumerate(compiled.groups):
        x0, P0 = np.asarray(numbers.groups[gi]["x0"]), np.asarray(numbers.groups[gi]["P0"])
        x0 = x0[:, : P0.shape[-1]]  # without a learned node's memory
        sds = np.sqrt(np.einsum("...ij,...ij->...i", chols[gi], chols[gi]))
        for j, i in enumerate(g.members):
            sd0 = np.sqrt(np.maximum(np.diagonal(P0[j]), 0.0))
            out[compiled.names[i]] = (
                np.concatenate([x0[j][None], means[gi][:, j]]),
                np.concatenate([sd0[None], sds[:, j]]),
                ll[gi][:, j],
            )
    return out


def unpack(compiled: Compiled, numbers: Numbers, outs: Any) -> dict[str, GraphResult]:
    """Split the stacked outputs of ``compiled.scan`` into one :class:`GraphResult` per subsystem."""
    means, chols, pm, pchols, ll, nis = jax.tree_util.tree_map(np.asarray, outs)  # index on the host
    gram = lambda c: np.einsum("...ij,...kj->...ik", c, c)  # noqa: E731
    covs, pc = [gram(c) for c in chols], [gram(c) for c in pchols]
    out: dict[str, GraphResult] = {}
    for gi, g in enumerate(compiled.groups):
        x0, P0 = np.asarray(numbers.groups[gi]["x0"]), np.asarray(numbers.groups[gi]["P0"])
        x0 = x0[:, : P0.shape[-1]]  # without a learned node's memory
        for j, i in enumerate(g.members):
            out[compiled.names[i]] = GraphResult(
                np.concatenate([x0[j][None], means[gi][:, j]]),
                np.concatenate([P0[j][None], covs[gi][:, j]]),
                pm[gi][:, j],
                pc[gi][:, j],
                float(np.sum(ll[gi][:, j])),
                ll[gi][:, j],
                nis[gi][:, j],
            )
    return out
