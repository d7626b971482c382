"""A Kuramoto network and a partition of its buses as a compositional-inference graph.

Every cluster of at most ``S`` buses is one :class:`twinfer.infer.graph.Subsystem` carrying the
augmented local state ``[theta_S, omega_S, Omega_S]`` (3S, S132-S134 of specs/compositional-inference.md
3.5), stepped by :func:`twinfer.sim.heun_node` of :func:`twinfer.models.kuramoto.cluster_swing`. The
clusters' coupling is one :class:`twinfer.infer.graph.Field`: bus ``a`` needs only the two sums
``sum_j K_aj sin(theta_j)`` and ``sum_j K_aj cos(theta_j)`` over its out-of-cluster neighbours, since
``sin(theta_j - theta_a) = sin(theta_j) cos(theta_a) - cos(theta_j) sin(theta_a)``; in-cluster neighbours
are read from the cluster's own sigma points through a dense S x S block of K.

Clusters are padded to ``S`` slots: a padded slot is an inert oscillator with no coupling and no
measurement (output column -1), so it never touches a real bus; the paper-code sigma-point weights depend
on the state dimension 3S, so every cluster of a partition uses one S and the estimates do not depend on
how clusters are grouped. Clusters are grouped by the Heun sub-steps their own stiffest bus needs
(:func:`substep_groups`), so a few stiff lines do not make every cluster sub-step. The centralised UKF is
the same graph with one cluster holding every bus.

Angles are kept on the real line inside the filter (sigma points cannot straddle +-pi); only the phase
innovation is wrapped, against the wrapped phase measurement (the decision on specs 7 item 11).

References:
    compositional-inference paper, SI (S73)-(S92), Alg. 6; Table S4 for the hyperparameters.

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferValueError
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._numbers import Compiled
from twinfer.infer.graph._partition import Partition
from twinfer.infer.graph._parts import Field, Port, Subsystem
from twinfer.models.kuramoto import KuramotoNetwork, cluster_swing, sincos, wrap_angle
from twinfer.sim import heun_node


class ClusterGraph(NamedTuple):
    """The graph of a partitioned network and, per cluster subsystem, the bus of each slot (-1: padding)."""

    graph: Graph
    buses: dict[str, np.ndarray]


def substep_groups(
    partition: Partition, weight: np.ndarray, dt: float, limit: float = 0.5
) -> list[tuple[Partition, int]]:
    """Clusters grouped by the Heun sub-steps their own stiffest bus needs, ``[(group, substeps), ...]``.

    A cluster needs the fewest ``k`` with ``dt / k * sqrt(max_a sum_j K_aj) <= limit`` over its buses (the
    criterion of :func:`stable_substeps`, applied locally); ``k`` is rounded up to a divisor of the
    network's largest, so every group's stage times are stage times of the finest group and predicted
    messages can be read off one fine prediction. On PEGASE 9241 at dt = 0.01, 979 of 1,849 clusters
    need 1 sub-step, 832 need 2 and 38 need 4, about a third of the work of sub-stepping all 4 times.

    Args:
        partition: the clusters.
        weight: coupling strengths (N, D) of the neighbour lists.
        dt: time step.
        limit: stability bound on ``h omega``.

    Returns:
        Groups in ascending sub-steps; each a :class:`Partition` with the full labels and its clusters.

    """
    row = np.sum(weight, axis=1)
    need = [
        max(1, math.ceil(dt * math.sqrt(max(float(row[m].max()), 0.0)) / limit)) for m in partition.clusters
    ]
    finest = max(need)
    divisors = [d for d in range(1, finest + 1) if finest % d == 0]
    rounded = [min(d for d in divisors if d >= k) for k in need]
    return [
        (
            Partition(
                labels=partition.labels,
                clusters=tuple(m for m, k in zip(partition.clusters, rounded, strict=True) if k == g),
            ),
            g,
        )
        for g in sorted(set(rounded))
    ]


def stable_substeps(weight: np.ndarray, dt: float, limit: float = 0.5) -> int:
    """Fewest Heun sub-steps with ``h sqrt(max_i sum_j K_ij) <= limit``.

    Linearised, a bus oscillates at about ``sqrt(sum_j K_ij)`` rad/s; Heun on an undamped oscillator grows
    unless ``h omega`` is small. Every IEEE case of the paper needs 1 at dt = 0.01 (IEEE 300: 0.49);
    PEGASE 9241 has buses near 160 rad/s and needs 4.
    """
    stiffest = float(np.sqrt(np.max(np.sum(weight, axis=1), initial=0.0)))
    return max(1, int(np.ceil(dt * stiffest / limit)))


def faithful_substeps(weight: np.ndarray, damping: np.ndarray, dt: float, margin: float = 0.1) -> int:
    """Fewest Heun sub-steps whose numerical growth of the fastest swing is ``margin`` of its damping.

    Heun is never stable on an undamped oscillator: per step of ``h`` it multiplies the amplitude of a
    swing at ``omega`` by ``sqrt(1 + (h omega)^4 / 4)``, a growth rate of about ``h^3 omega^4 / 8`` per
    second, against the physical decay ``d / 2`` of a bus with damping ``d``. At
    :func:`stable_substeps`' count (``h omega <= 0.5``) the growth of the stiffest swings exceeds the
    damping: on ``case1888rte`` (5 sub-steps a 0.01 s frame, buses near 140 rad/s, d from 0.1) a leaf
    bus's swing keeps an amplitude of about 50 rad/s for good instead of dying out. This count keeps
    ``h^3 omega^4 / 8 <= margin d_min / 2`` with ``omega^2 = 2 max_i sum_j K_ij`` (the Laplacian's
    largest eigenvalue is at most that): a truth simulated as a grid behaves (55 on ``case1888rte``).
    """
    omega4 = (2.0 * float(np.max(np.sum(weight, axis=1), initial=0.0))) ** 2
    d_min = float(np.min(damping))
    if omega4 == 0.0:
        return 1
    h = (4.0 * margin * d_min / omega4) ** (1.0 / 3.0)
    return max(1, int(np.ceil(dt / h)))


def _cluster_field(x: Any, u: Any, m: Any, params: Any) -> Any:
    """``d/dt [theta, omega, Omega]`` of one cluster (S89), its out-of-cluster sums ``m`` (2S,) given."""
    s = x.shape[0] // 3
    d_theta, d_omega = cluster_swing(
        x[:s], x[s : 2 * s], x[2 * s :], params["damping"], m.reshape(s, 2), params["internal"]
    )
    return jnp.concatenate([d_theta, d_omega, jnp.zeros(s, x.dtype)])


def _features(theta: Any) -> Any:
    return jnp.stack(sincos(theta))


def _law(theta_j: Any, theta_a: Any) -> Any:
    """``sin(theta_j - theta_a)``: the coupling force per unit K on bus a from bus j."""
    return sincos(theta_j - theta_a)[0]


def wrapped_innovation(y: Any, y_pred: Any) -> Any:
    """``y - y_pred`` of ``[phases, frequencies]``, the phase part wrapped to (-pi, pi]."""
    s = y.shape[0] // 2
    return jnp.concatenate([wrap_angle(y[:s] - y_pred[:s]), y[s:] - y_pred[s:]])


def _squared(field: str, sd: Any) -> np.ndarray:
    """The variances of the standard deviations ``sd`` of ``kuramoto_graph``'s ``field``: finite and >= 0."""
    sd = np.asarray(sd, dtype=np.float64)
    if not (np.all(np.isfinite(sd)) and np.all(sd >= 0)):
        raise TwinferValueError(
            f"kuramoto_graph {field}: expected finite standard deviations >= 0; received {sd.tolist()}."
        )
    return sd**2


def kuramoto_graph(
    network: KuramotoNetwork,
    partition: Partition,
    *,
    dt: float,
    x0: Any,
    state_sd: tuple[float, float, float],
    process_sd: tuple[float, float, float],
    noise_sd: float,
    gamma: float = 1.0,
    substeps: int | None = None,
    estimator: Literal["ukf", "wls", "wnls"] = "ukf",
    messages: Literal["held", "probabilistic"] = "probabilistic",
    pad: int | None = None,
) -> ClusterGraph:
    """The graph of ``network`` partitioned into clusters, each a subsystem with its own filter.

    Every bus measures its wrapped phase (observation column ``i``) and its frequency (column ``N + i``);
    the natural frequencies are unknown states.

    Args:
        network: the Kuramoto network (neighbour lists and damping; its natural frequencies are not read).
        partition: clusters of the buses (one cluster of all buses: the centralised filter).
        dt: time step.
        x0: initial estimate (N, 3) of ``[theta, omega, Omega]`` per bus.
        state_sd: initial standard deviations of (theta, omega, Omega).
        process_sd: process-noise standard deviations of (theta, omega, Omega) per step (WLS/WNLS: the
            prediction's weight).
        noise_sd: measurement-noise standard deviation (phases and frequencies alike).
        gamma: paper-code sigma-point parameter (c = L + gamma, specs 7 item 1).
        substeps: Heun sub-steps of every cluster, or None: each cluster's own stable count
            (:func:`substep_groups`).
        estimator: ``"ukf"`` (S82-S84, S88-S92), or ``"wls"`` / ``"wnls"``, the paper's static baselines
            (one Gauss-Newton step from the prediction / damped Gauss-Newton to the minimiser).
        messages: ``"held"``: out-of-cluster phases are the previous posterior means, held over the step
            (the paper's Jacobi, S89). ``"probabilistic"``: they follow the network's mean prediction
            through the step and the first-order variance of each bus's external force enters its
            frequency's process noise (a :class:`~twinfer.infer.graph.Field` with
            ``message="predicted"``, ``variance="first-order"``).
        pad: every cluster is padded to ``max(pad, its size)`` slots, so a few clusters larger than
            ``pad`` do not make every cluster's filter as large (each size is its own compiled group,
            with the sigma-point weights of its own dimension); None: all to the largest (the paper's,
            where the estimates do not depend on how clusters are grouped).

    Returns:
        :class:`ClusterGraph`.

    """
    if messages not in ("held", "probabilistic"):
        raise ValueError(
            f"kuramoto_graph messages: expected 'held' or 'probabilistic'; received {messages!r}."
        )
    index, weight = np.asarray(network.index), np.asarray(network.weight)
    damping = np.asarray(network.params["d"], dtype=np.float64)
    n = index.shape[0]
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.shape != (n, 3):
        raise ValueError(f"kuramoto_graph x0: expected shape {(n, 3)}; received {x0.shape}.")
    if substeps is None:
        groups = substep_groups(partition, weight, dt)
    else:
        groups = [(partition, substeps)]
    weights = UnscentedWeights.paper_code(gamma)
    var0, var_q = _squared("state_sd", state_sd), _squared("process_sd", process_sd)
    var_r = _squared("noise_sd", noise_sd)

    def slots(members: np.ndarray) -> int:
        return partition.max_size if pad is None else max(int(pad), members.size)

    place = {}  # bus -> (cluster name, slot)
    ordered: list[tuple[str, np.ndarray, int]] = []
    for g, (part, k) in enumerate(groups):
        for c, members in enumerate(part.clusters):
            name = f"cluster{g}.{c}" if len(groups) > 1 else f"cluster{c}"
            ordered.append((name, np.asarray(members, dtype=int), k))
            for a, b in enumerate(members):
                place[int(b)] = (name, a)
    names = [name for name, _, _ in ordered]
    member_of = {name: i for i, name in enumerate(names)}
    nodes = {k: heun_node(_cluster_field, dt, k) for k in sorted({k for _, _, k in ordered})}
    subs, buses = [], {}
    quantities = ("theta", "omega", "Omega")
    send, send_var, recv, recv_var, w_edge = [], [], [], [], []
    for name, members, k in ordered:
        size = slots(members)
        bus = np.full(size, -1)
        bus[: members.size] = members
        internal = np.zeros((size, size))
        for a, b in enumerate(members):
            for j, w in zip(index[b], weight[b], strict=True):
                if w <= 0 or j == b:
                    continue
                other, slot = place[int(j)]
                if other == name:
                    internal[a, slot] += w
                else:
                    send.append(member_of[other])
                    send_var.append(slot)
                    recv.append(member_of[name])
                    recv_var.append(a)
                    w_edge.append(float(w))
        valid = bus >= 0
        start = np.zeros((size, 3))
        start[valid] = x0[members]
        buses[name] = bus
        labels = [
            f"{q}{b + 1}" if b >= 0 else f"~{name}.{q}[{a}]" for q in quantities for a, b in enumerate(bus)
        ]
        subs.append(
            Subsystem(
                name=name,
                transition=nodes[k].transition,
                output=np.eye(2 * size, 3 * size),
                params={"damping": np.where(valid, damping[np.maximum(bus, 0)], 1.0), "internal": internal},
                x0=start.T.reshape(-1),
                P0=np.diag(np.repeat(var0, size)),
                Q=np.diag(np.repeat(var_q, size)),
                R=var_r * np.eye(2 * size),
                inputs=(),
                outputs=tuple(
                    int(c) for c in np.concatenate([np.where(valid, bus, -1), np.where(valid, n + bus, -1)])
                ),
                ports={
                    "theta": Port(tuple(range(size)), tuple(range(2 * size))),
                    "omega": Port(tuple(range(size, 2 * size))),
                },
                n_msg=2 * size,
                estimator=estimator,
                weights=weights,
                innovation=wrapped_innovation,
                dynamics=nodes[k].dynamics,
                state_names=tuple(labels),
                parameters=tuple(f"Omega{b + 1}" for b in members),
            )
        )
    probabilistic = messages == "probabilistic"
    field = Field(
        "coupling",
        "theta",
        _features,
        _law,
        names,
        np.asarray(send, dtype=int),
        np.asarray(send_var, dtype=int),
        np.asarray(recv, dtype=int),
        np.asarray(recv_var, dtype=int),
        np.asarray(w_edge, dtype=float),
        message="predicted" if probabilistic else "held",
        variance="first-order" if probabilistic else "none",
        rate="omega" if probabilistic else None,
        drives="omega" if probabilistic else None,
    )
    order = tuple(f"{q}{b + 1}" for q in quantities for b in range(n))
    return ClusterGraph(Graph("grid", subs, fields=[field], state_order=order), buses)


def bus_values(
    cluster_graph: ClusterGraph, compiled: Compiled, values: Sequence[Any], n_bus: int
) -> np.ndarray:
    """Per-group (T, C, 3S) outputs of a compiled cluster graph's scan -> (T, N, 3) per bus."""
    values = [np.asarray(v) for v in values]
    t = values[0].shape[0]
    out = np.zeros((t, n_bus + 1, 3))
    for g, v in zip(compiled.groups, values, strict=True):
        s = v.shape[2] // 3
        per_slot = np.transpose(v.reshape(t, v.shape[1], 3, s), (0, 1, 3, 2))  # (T, C, S, 3)
        bus = np.stack([cluster_graph.buses[compiled.names[i]] for i in g.members])  # (C, S)
        out[:, np.where(bus >= 0, bus, n_bus)] = per_slot
    return out[:, :n_bus]
