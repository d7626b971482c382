"""Centralised and cluster-distributed UKFs for a second-order Kuramoto grid, with Heun sigma points.

Every cluster of at most ``S`` buses carries the augmented local state ``[theta_S, omega_S, Omega_S]``
(3S, S132-S134 of specs/compositional-inference.md 3.5). Clusters of different sizes are padded to ``S``
and stacked, so one ``vmap`` of :func:`twinfer.infer.filters.ukf_step` updates all of them at once:

* a padded slot is an inert oscillator with no coupling and no measurement (its mask is False), so it
  never touches a real bus;
* the coupling of bus a, ``sum_j K_aj sin(theta_j - theta_a)``, splits into the in-cluster part, read
  from the sigma point through a dense S x S block of K, and the external part (S89), which by
  ``sin(theta_j - theta_a) = sin(theta_j) cos(theta_a) - cos(theta_j) sin(theta_a)`` needs only the two
  sums ``sum_j K_aj sin(theta_j)`` and ``sum_j K_aj cos(theta_j)`` over the external neighbours. Those
  summed from the global phase register over a list of the external edges once per step (or once per
  Heun stage for probabilistic messages), not once per sigma point, so a step costs O(N + edges)
  however the buses are grouped;
* clusters are grouped by the Heun sub-steps their own stiffest bus needs (:func:`substep_groups`); each
  group is one vmapped batch, so a few stiff lines do not make every cluster sub-step;
* after all clusters update (Jacobi, N_Jacobi = 1) their posterior phases are scattered into the register.

The centralised UKF is the same code with one cluster holding every bus (no register reads). Angles are
kept on the real line (never wrapped inside the filter), so sigma points cannot straddle +-pi and their
weighted mean is the circular mean; only the phase innovation is wrapped, against the wrapped phase
measurement (the decision on specs 7 item 11).

References:
    compositional-inference paper, SI (S73)-(S92), Alg. 6; Table S4 for the hyperparameters.

"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer.clusters._partition import Partition
from twinfer.infer.filters import UnscentedWeights, ukf_step, wls_step
from twinfer.models.kuramoto import cluster_swing, sincos, wrap_angle
from twinfer.sim import heun_step


class ClusterLayout(NamedTuple):
    """Index arrays of a padded cluster batch (C clusters, S slots).

    A bus's coupling is split into its neighbours inside the cluster, held as a dense S x S block (a
    small matrix product is far cheaper than a gather on the CPU, and S <= S_max is small; the
    centralised single cluster has S = N, where the product costs no more than the UKF's own N^3), and
    those outside, listed as edges ``(neighbour bus -> slot)`` sorted by slot, whose phases come from the
    register. An edge list costs O(edges) per exchange where neighbour lists padded to the largest degree
    (41 on PEGASE 9241, against 2.3 external edges per bus) would cost O(N x max degree).

    Attributes:
        bus: global bus of each slot (C, S); padding holds N (the register's spare slot).
        valid: slot holds a real bus (C, S).
        internal: in-cluster coupling ``K_ab`` between slots (C, S, S); 0 on padding and the diagonal.
        ext_src: global bus of each external edge (E,).
        ext_slot: flat slot ``c * S + a`` the edge couples into (E,), ascending.
        ext_weight: its ``K_aj`` (E,).

    """

    bus: Any
    valid: Any
    internal: Any
    ext_src: Any
    ext_slot: Any
    ext_weight: Any


def cluster_layout(
    partition: Partition, index: np.ndarray, weight: np.ndarray, size: int | None = None
) -> ClusterLayout:
    """Padded index arrays of a partition (or of a group of its clusters) of a network.

    Args:
        partition: clusters of the buses; ``labels`` must cover every bus (it decides which neighbours
            are in-cluster), ``clusters`` may be a subset (one substep group).
        index: neighbour indices (N, D) (padding may point anywhere where ``weight`` is 0).
        weight: coupling strengths (N, D).
        size: slots per cluster S, at least the largest cluster (default: the largest). The padded
            slots are inert, but the paper-code sigma-point weights depend on the state dimension 3S, so
            groups of one partition use one S to give the same estimates however they are grouped.

    Returns:
        :class:`ClusterLayout`.

    """
    n = index.shape[0]
    size = partition.max_size if size is None else size
    if size < partition.max_size:
        raise ValueError(
            f"cluster_layout: size must be >= the largest cluster {partition.max_size}; received {size}"
        )
    c = partition.n_clusters
    bus = np.full((c, size), n)
    valid = np.zeros((c, size), bool)
    internal = np.zeros((c, size, size))
    src: list[int] = []
    slot: list[int] = []
    ext_w: list[float] = []
    for k, members in enumerate(partition.clusters):
        bus[k, : len(members)] = members
        valid[k, : len(members)] = True
        slot_of = {int(b): a for a, b in enumerate(members)}
        for a, b in enumerate(members):
            for j, w in zip(index[b], weight[b], strict=True):
                if w <= 0 or j == b:
                    continue
                if partition.labels[j] == partition.labels[b]:
                    internal[k, a, slot_of[int(j)]] += w
                else:
                    src.append(int(j))
                    slot.append(k * size + a)
                    ext_w.append(float(w))
    return ClusterLayout(
        jnp.asarray(bus),
        jnp.asarray(valid),
        jnp.asarray(internal),
        jnp.asarray(np.array(src, dtype=int)),
        jnp.asarray(np.array(slot, dtype=int)),
        jnp.asarray(np.array(ext_w, dtype=float)),
    )


def pad_layout(layout: ClusterLayout, multiple: int, n_bus: int) -> ClusterLayout:
    """Append inert clusters (no real bus, no edge) until the cluster count is a multiple of ``multiple``.

    Used to split the cluster axis evenly over devices; an inert cluster reads and writes only the
    register's spare slot N, so the real clusters' results do not change.
    """
    c, s = layout.bus.shape
    extra = -c % multiple
    if extra == 0:
        return layout
    return layout._replace(
        bus=jnp.concatenate([layout.bus, jnp.full((extra, s), n_bus)]),
        valid=jnp.concatenate([layout.valid, jnp.zeros((extra, s), bool)]),
        internal=jnp.concatenate([layout.internal, jnp.zeros((extra, s, s))]),
    )


def substep_groups(
    partition: Partition, weight: np.ndarray, dt: float, limit: float = 0.5
) -> list[tuple[Partition, int]]:
    """Clusters grouped by the Heun sub-steps their own stiffest bus needs, ``[(group, substeps), ...]``.

    A cluster needs the fewest ``k`` with ``dt / k * sqrt(max_a sum_j K_aj) <= limit`` over its buses (the
    criterion of :func:`stable_substeps`, applied locally); ``k`` is rounded up to a divisor of the
    network's largest, so every group's stage times are stage times of the finest group and probabilistic
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


def external_sums(register: Any, layout: ClusterLayout) -> Any:
    """``(sum_j K_aj sin theta_j, sum_j K_aj cos theta_j)`` over out-of-cluster neighbours, (C, S, 2).

    With these two numbers per bus, the frozen external coupling of S89 is
    ``sum_j K_aj sin(theta_j - theta_a) = cos(theta_a) A_a - sin(theta_a) B_a`` for any local phase
    ``theta_a``: the external phases are read and their sines taken once per exchange, not once per
    sigma point and Heun stage.

    Args:
        register: phase of every bus, (N + 1,) (the spare last slot is never read by an edge).
        layout: the cluster layout.

    """
    c, s = layout.bus.shape
    sin_r, cos_r = sincos(register)
    terms = layout.ext_weight[:, None] * jnp.stack([sin_r, cos_r], axis=-1)[layout.ext_src]
    sums = jax.ops.segment_sum(terms, layout.ext_slot, num_segments=c * s, indices_are_sorted=True)
    return sums.reshape(c, s, 2)


def heun_transition(dt: float, damping, internal, substeps: int = 1):
    """``(x, ext_sums) -> x_next``: Heun steps of the augmented local state (S79-S80); Omega constant.

    ``ext_sums`` are the :func:`external_sums` of the out-of-cluster phases: (S, 2) held over the whole
    step (S89), or (substeps, 2, S, 2), one set per Heun stage (see :func:`predicted_external_sums`).
    ``substeps`` Heun steps of ``dt / substeps`` make one step of ``dt``, for networks whose strongest
    coupling makes one Heun step of ``dt`` unstable (see :func:`stable_substeps`). Each is
    :func:`twinfer.sim.heun_step` of :func:`twinfer.models.kuramoto.cluster_swing`, its predictor and
    corrector stage reading their own external sums.
    """
    h = dt / substeps

    def f(x, ext_sums):
        s = x.shape[0] // 3
        theta, omega, big_omega = x[:s], x[s : 2 * s], x[2 * s :]
        staged = ext_sums.ndim == 4

        def rhs(ext):
            return lambda t, y: cluster_swing(y[0], y[1], big_omega, damping, ext, internal)

        y = (theta, omega)
        for k in range(substeps):
            e1, e2 = (ext_sums[k, 0], ext_sums[k, 1]) if staged else (ext_sums, ext_sums)
            y = heun_step((rhs(e1), rhs(e2)), 0.0, y, h)
        return jnp.concatenate([y[0], y[1], big_omega])

    return f


def _positions(layouts: Sequence[ClusterLayout], n: int) -> Any:
    """(N + 1,) position of every bus in the concatenated flat slots of all groups; N -> the extra zero."""
    pos = jnp.zeros(n + 1, int)
    offset = 0
    for lay in layouts:
        c, s = lay.bus.shape
        flat = jnp.where(lay.valid, lay.bus, n)
        pos = pos.at[flat].set(offset + jnp.arange(c * s).reshape(c, s))
        offset += c * s
    return pos.at[n].set(offset)


def _register(values: Sequence[Any], pos: Any) -> Any:
    """Per-group slot values [(C_g, S_g)] -> (N + 1,) per global bus (a gather), the spare slot zero."""
    flat = [v.reshape(-1) for v in values]
    return jnp.concatenate([*flat, jnp.zeros(1, flat[0].dtype)])[pos]


def predicted_external_sums(
    means: Any, damping: Any, layouts: Any, n: int, dt: float, substeps: int | Sequence[int]
) -> Any:
    """External sums at every Heun stage of the step when all buses follow the network's mean prediction.

    The held register of S89 freezes the neighbours' phases over the step, an error of order
    ``omega_j dt`` in each coupling term: on stiff networks (PEGASE/RTE, lines of |Y| ~ 1e4 oscillating
    faster than the 100 Hz sampling) it dominates the filters' error. Here every cluster's posterior mean
    is advanced through the step at the finest group's sub-step, its out-of-cluster neighbours read at
    each stage from the others' predicted phases (a Jacobi exchange per stage, O(N + edges) per stage).
    A group with as many sub-steps as the finest gets each stage's sums exactly (its mean then steps as
    the network's own Heun step); a group with fewer reads the fine prediction at its stage times (the
    start of each of its sub-steps, and the end for its corrector stage).

    Args:
        means: posterior means (C, 3S) ``[theta, omega, Omega]`` per cluster, or one per group.
        damping: ``d`` per slot (C, S), or one per group.
        layouts: the cluster layout, or one per group.
        n: number of buses.
        dt: time step.
        substeps: Heun sub-steps per step, or one per group; each must divide the largest.

    Returns:
        (C, substeps, 2, S, 2), or a tuple of them per group.

    """
    single = isinstance(layouts, ClusterLayout)
    if single:
        means, damping, layouts = (means,), (damping,), (layouts,)
    steps_of: list[int] = [substeps] if isinstance(substeps, int) else list(substeps)
    finest = max(steps_of)
    if any(finest % k for k in steps_of):
        raise ValueError(
            f"predicted_external_sums: every substeps must divide the largest; received {steps_of}"
        )
    pos = _positions(layouts, n)
    sizes = [lay.bus.shape[1] for lay in layouts]
    theta = [m[:, :s] for m, s in zip(means, sizes, strict=True)]
    omega = [m[:, s : 2 * s] for m, s in zip(means, sizes, strict=True)]
    big = [m[:, 2 * s :] for m, s in zip(means, sizes, strict=True)]
    h = dt / finest
    rhs = jax.vmap(cluster_swing)
    sums = lambda th: [external_sums(_register(th, pos), lay) for lay in layouts]

    def stage(_, y):
        """Derivative of every group's (theta, omega) with this stage's exchange, and that exchange."""
        th = [g[0] for g in y]
        ext = sums(th)
        d = [
            rhs(g[0], g[1], b, dm, e, lay.internal)
            for g, b, dm, e, lay in zip(y, big, damping, ext, layouts, strict=True)
        ]
        return d, ext

    y = [(t, o) for t, o in zip(theta, omega, strict=True)]
    first, second = [], []
    for _ in range(finest):
        y, (e1, e2) = heun_step(stage, 0.0, y, h, has_aux=True)
        first.append(e1)
        second.append(e2)
    theta = [g[0] for g in y]
    end = sums(theta) if min(steps_of) < finest else None
    out = []
    for g, k in enumerate(steps_of):
        ratio = finest // k
        stages = []
        for j in range(k):
            start = first[j * ratio][g]
            if ratio == 1:
                corrector = second[j][g]
            else:
                corrector = first[(j + 1) * ratio][g] if j + 1 < k else end[g]  # type: ignore[index]
            stages.append(jnp.stack([start, corrector], axis=1))
        out.append(jnp.stack(stages, axis=1))
    return out[0] if single else tuple(out)


def external_force_variance(register: Any, variance: Any, theta: Any, layout: ClusterLayout) -> Any:
    """Variance of each slot's external coupling force from its neighbours' phase uncertainty, (C, S).

    ``var F_a = sum_j K_aj^2 cos^2(theta_j - theta_a) var(theta_j)`` (first order, neighbours independent):
    the probabilistic interface message of the compositional-inference paper (section 2.2, S44-S46)
    for the Kuramoto coupling. Injected as process noise ``dt^2 var F_a`` on the slot's frequency.

    Args:
        register: phase of every bus (N + 1,).
        variance: its variance (N + 1,).
        theta: the slots' own phases (C, S).
        layout: the cluster layout.

    """
    c, s = layout.bus.shape
    _, cos = sincos(register[layout.ext_src] - theta.reshape(-1)[layout.ext_slot])
    terms = (layout.ext_weight * cos) ** 2 * variance[layout.ext_src]
    return jax.ops.segment_sum(terms, layout.ext_slot, num_segments=c * s, indices_are_sorted=True).reshape(
        c, s
    )


def stable_substeps(weight: np.ndarray, dt: float, limit: float = 0.5) -> int:
    """Fewest Heun sub-steps with ``h sqrt(max_i sum_j K_ij) <= limit``.

    Linearised, a bus oscillates at about ``sqrt(sum_j K_ij)`` rad/s; Heun on an undamped oscillator grows
    unless ``h omega`` is small. Every IEEE case of the paper needs 1 at dt = 0.01 (IEEE 300: 0.49);
    PEGASE 9241 has buses near 160 rad/s and needs 4.
    """
    stiffest = float(np.sqrt(np.max(np.sum(weight, axis=1), initial=0.0)))
    return max(1, int(np.ceil(dt * stiffest / limit)))


def _measure(x, u):
    s = x.shape[0] // 3
    return x[: 2 * s]


def _wrapped_innovation(y, y_pred):
    s = y.shape[0] // 2
    return jnp.concatenate([wrap_angle(y[:s] - y_pred[:s]), y[s:] - y_pred[s:]])


class GridFilterOutput(NamedTuple):
    """Filtered means (T, N, 3) of ``[theta, omega, Omega]`` per bus and their standard deviations."""

    means: Any
    stds: Any


def run_clusters(
    layout: ClusterLayout | Sequence[ClusterLayout],
    damping: Any,
    ys: Any,
    x0: Any,
    var0: tuple[float, float, float],
    q: tuple[float, float, float],
    r: float,
    dt: float,
    gamma: float = 1.0,
    substeps: int | Sequence[int] = 1,
    *,
    method: Literal["ukf", "wls"] = "ukf",
    messages: Literal["held", "probabilistic"] = "probabilistic",
    mesh: jax.sharding.Mesh | None = None,
) -> GridFilterOutput:
    """Jacobi-distributed UKF (or WLS) over padded cluster batches; one cluster of all buses is central.

    Args:
        layout: :func:`cluster_layout` of the partition, or one per sub-step group
            (:func:`substep_groups`); together the groups hold every bus once.
        damping: ``d_i`` (N,), known.
        ys: measurements (T, 2N): wrapped phases then frequencies of every bus.
        x0: initial estimate (N, 3) of ``[theta, omega, Omega]`` per bus.
        var0: initial variances of (theta, omega, Omega) (unused by WLS, which carries no covariance).
        q: process-noise variances of (theta, omega, Omega) per step (WLS: the prediction's weight).
        r: measurement-noise variance.
        dt: time step.
        gamma: paper-code sigma-point parameter (c = L + gamma, specs 7 item 1).
        substeps: Heun sub-steps per step (:func:`stable_substeps`), or one per group.
        method: ``"ukf"`` (S82-S84, S88-S92) or ``"wls"``, the static baseline of
            :func:`twinfer.infer.filters.wls_step` with the same predictor, register and clusters.
        messages: ``"held"``: out-of-cluster phases are the previous posterior means, held over the step
            (the paper's Jacobi, S89). ``"probabilistic"``: they follow the network's mean prediction
            through the step (:func:`predicted_external_sums`) and their uncertainty enters each slot's
            frequency process noise (:func:`external_force_variance`).
        mesh: a one-axis device mesh; each group's cluster axis is padded to a multiple of its size with
            inert clusters and split over its devices (``jax.sharding``), the phase register replicated.
            On several hosts, build the mesh from ``jax.devices()`` after ``jax.distributed.initialize``.

    Returns:
        :class:`GridFilterOutput` over buses in global order.

    """
    n = damping.shape[0]
    layouts = [layout] if isinstance(layout, ClusterLayout) else list(layout)
    steps_of = [substeps] * len(layouts) if isinstance(substeps, int) else list(substeps)
    if len(steps_of) != len(layouts):
        raise ValueError(
            f"run_clusters: substeps must be one int or one per layout ({len(layouts)}); received {substeps}"
        )
    if method not in ("ukf", "wls"):
        raise ValueError(f"run_clusters: method must be 'ukf' or 'wls'; received {method!r}")
    if messages not in ("held", "probabilistic"):
        raise ValueError(f"run_clusters: messages must be 'held' or 'probabilistic'; received {messages!r}")
    if mesh is not None:
        if len(mesh.axis_names) != 1:
            raise ValueError(f"run_clusters: mesh must have one axis; received axes {mesh.axis_names}")
        layouts = [pad_layout(lay, mesh.size, n) for lay in layouts]
    weights = UnscentedWeights.paper_code(gamma)
    pos = _positions(layouts, n)
    damp_ext = jnp.concatenate([damping, jnp.ones(1)])
    x0_ext = jnp.concatenate([jnp.asarray(x0), jnp.zeros((1, 3))])
    var_theta0 = var0[0] + dt**2 / 3.0 * var0[1]
    register0 = jnp.stack(
        [
            jnp.concatenate([jnp.asarray(x0)[:, 0], jnp.zeros(1)]),
            jnp.concatenate([jnp.full(n, var_theta0), jnp.zeros(1)]),
        ]
    )

    if mesh is None:
        shard = lambda a: a
    else:
        spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(mesh.axis_names[0]))
        shard = lambda a: jax.lax.with_sharding_constraint(a, spec)

    def local_step(mean, chol, ext, q_d, y, mask, damp, internal, *, k):
        """One cluster's step: (mean, lower factor, variances, ok)."""
        f = heun_transition(dt, damp, internal, k)
        s = mean.shape[0] // 3
        if method == "wls":
            out = wls_step(
                f,
                _measure,
                mean,
                jnp.diag(q_d),
                r * jnp.eye(2 * s),
                ext,
                y,
                mask,
                innovation=_wrapped_innovation,
            )
            return out.mean, chol, jnp.diagonal(out.cov), out.ok
        select = jnp.eye(2 * s, 3 * s)  # phases and frequencies measured: linear, the exact Kalman update
        out = ukf_step(
            f, select, mean, chol, jnp.diag(jnp.sqrt(q_d)), jnp.full(2 * s, math.sqrt(r)), ext, y, mask,
            weights=weights, innovation=_wrapped_innovation,
        )  # fmt: skip
        return out.mean, out.chol, jnp.sum(out.chol**2, axis=1), out.ok

    groups: list[_Group] = []
    mean0, chol0 = [], []
    for lay, k in zip(layouts, steps_of, strict=True):
        c, s = lay.bus.shape
        q_diag = jnp.repeat(jnp.asarray(q, float), s)
        damp = jnp.where(lay.valid, damp_ext[lay.bus], 1.0)
        mask = jnp.concatenate([lay.valid, lay.valid], axis=1)
        groups.append(_Group(lay, k, damp, q_diag, tuple(map(shard, (mask, damp, lay.internal)))))
        mean0.append(shard(jnp.transpose(x0_ext[lay.bus], (0, 2, 1)).reshape(c, 3 * s)))
        chol0.append(
            shard(
                jnp.broadcast_to(
                    jnp.diag(jnp.sqrt(jnp.repeat(jnp.asarray(var0, float), s))), (c, 3 * s, 3 * s)
                )
            )
        )
    batched = {k: jax.vmap(functools.partial(local_step, k=k)) for k in set(steps_of)}
    sizes = [g.lay.bus.shape[1] for g in groups]

    def step(carry, y):
        means, chols, register = carry
        if messages == "held":
            # Jacobi: the previous step's phases of out-of-cluster neighbours, summed once per step.
            exts = [external_sums(register[0], g.lay) for g in groups]
            q_cs = [jnp.broadcast_to(g.q_diag, m.shape) for g, m in zip(groups, means, strict=True)]
        else:
            exts = predicted_external_sums(
                means, [g.damp for g in groups], [g.lay for g in groups], n, dt, steps_of
            )
            q_cs = []
            for g, m, s in zip(groups, means, sizes, strict=True):
                var_f = external_force_variance(register[0], register[1], m[:, :s], g.lay)
                zero = jnp.zeros_like(var_f)
                q_cs.append(g.q_diag + jnp.concatenate([zero, dt**2 * var_f, zero], axis=1))
        y_ext = jnp.concatenate([y.reshape(2, n), jnp.zeros((2, 1))], axis=1)
        outs = []
        for g, m, p, e, q_c in zip(groups, means, chols, exts, q_cs, strict=True):
            y_local = jnp.concatenate([y_ext[0][g.lay.bus], y_ext[1][g.lay.bus]], axis=1)
            outs.append(batched[g.k](shard(m), shard(p), shard(e), shard(q_c), shard(y_local), *g.static))
        variances = [o[2] for o in outs]
        theta_var = [v[:, :s] + dt**2 / 3.0 * v[:, s : 2 * s] for v, s in zip(variances, sizes, strict=True)]
        register = jnp.stack(
            [
                _register([o[0][:, :s] for o, s in zip(outs, sizes, strict=True)], pos),
                _register(theta_var, pos),
            ]
        )
        ok = jnp.all(jnp.stack([jnp.all(o[3]) for o in outs]))
        carry = ([shard(o[0]) for o in outs], [shard(o[1]) for o in outs], register)
        return carry, ([o[0] for o in outs], [jnp.sqrt(v) for v in variances], ok)

    _, (means, stds, ok) = jax.lax.scan(step, (mean0, chol0, register0), ys)
    mean_out = jnp.zeros((ys.shape[0], n + 1, 3))
    std_out = jnp.zeros((ys.shape[0], n + 1, 3))
    for g, m, sd in zip(groups, means, stds, strict=True):
        mean_out = _to_global(mean_out, m, g.lay)
        std_out = _to_global(std_out, sd, g.lay)
    mean_out = eqx.error_if(
        mean_out[:, :n],
        ~jnp.all(ok),
        f"grid {method.upper()} diverged: a cluster's covariance stopped being positive-definite or its "
        "state became non-finite. Check q, r and the initial variances.",
    )
    return GridFilterOutput(mean_out, std_out[:, :n])


class _Group(NamedTuple):
    """One sub-step group inside :func:`run_clusters`."""

    lay: ClusterLayout
    k: int
    damp: Any
    q_diag: Any
    static: tuple[Any, ...]


def _to_global(out: Any, values: Any, layout: ClusterLayout) -> Any:
    """Write (T, C, 3S) local blocks of one group into ``out`` (T, N + 1, 3) per global bus."""
    t, c, width = values.shape
    s = width // 3
    n = out.shape[1] - 1
    per_slot = jnp.transpose(values.reshape(t, c, 3, s), (0, 1, 3, 2))  # (T, C, S, 3)
    return out.at[:, jnp.where(layout.valid, layout.bus, n)].set(per_slot)
