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
  are gathered from the global phase register once per step by index arrays, not once per sigma point,
  so a step costs O(N) however the buses are grouped;
* after all clusters update (Jacobi, N_Jacobi = 1) their posterior phases are scattered into the register.

The centralised UKF is the same code with one cluster holding every bus (no register reads). Angles are
kept on the real line (never wrapped inside the filter), so sigma points cannot straddle +-pi and their
weighted mean is the circular mean; only the phase innovation is wrapped, against the wrapped phase
measurement (the decision on specs 7 item 11).

References:
    compositional-inference paper, SI (S73)-(S92), Alg. 6; Table S4 for the hyperparameters.

"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.data._partition import Partition
from twinfer.infer.filters import UnscentedWeights, ukf_step, wls_step
from twinfer.models.kuramoto import wrap_angle


class ClusterLayout(NamedTuple):
    """Index arrays of a padded cluster batch (C clusters, S slots).

    A bus's coupling is split into its neighbours inside the cluster, held as a dense S x S block (a
    small matrix product is far cheaper than a gather on the CPU, and S <= S_max is small; the
    centralised single cluster has S = N, where the product costs no more than the UKF's own N^3), and
    those outside (``De`` per slot), whose phases come from the register.

    Attributes:
        bus: global bus of each slot (C, S); padding holds N (the register's spare slot).
        valid: slot holds a real bus (C, S).
        internal: in-cluster coupling ``K_ab`` between slots (C, S, S); 0 on padding and the diagonal.
        ext_global: global bus of each out-of-cluster neighbour (C, S, De); N on padding.
        ext_weight: its ``K_aj`` (C, S, De); 0 on padding.

    """

    bus: Any
    valid: Any
    internal: Any
    ext_global: Any
    ext_weight: Any


def _pack(rows: list[list[tuple[int, float]]], fill: int) -> tuple[np.ndarray, np.ndarray]:
    width = max(1, max((len(r) for r in rows), default=0))
    index = np.full((len(rows), width), fill)
    weight = np.zeros((len(rows), width))
    for i, row in enumerate(rows):
        for k, (j, w) in enumerate(row):
            index[i, k], weight[i, k] = j, w
    return index, weight


def cluster_layout(partition: Partition, index: np.ndarray, weight: np.ndarray) -> ClusterLayout:
    """Padded index arrays of a partition of a network given by neighbour lists (N, D).

    Args:
        partition: clusters of the buses (every bus in exactly one).
        index: neighbour indices (N, D) (padding may point anywhere where ``weight`` is 0).
        weight: coupling strengths (N, D).

    Returns:
        :class:`ClusterLayout` with S = the largest cluster.

    """
    n = index.shape[0]
    size = partition.max_size
    c = partition.n_clusters
    bus = np.full((c, size), n)
    valid = np.zeros((c, size), bool)
    slot_of = np.full(n, -1)
    for k, members in enumerate(partition.clusters):
        bus[k, : len(members)] = members
        valid[k, : len(members)] = True
        slot_of[members] = np.arange(len(members))
    internal = np.zeros((c, size, size))
    external: list[list[tuple[int, float]]] = []
    for flat, (b, ok) in enumerate(zip(bus.ravel(), valid.ravel(), strict=True)):
        outside = []
        if ok:
            k, a = divmod(flat, size)
            for j, w in zip(index[b], weight[b], strict=True):
                if w <= 0 or j == b:
                    continue
                if partition.labels[j] == partition.labels[b]:
                    internal[k, a, slot_of[j]] += w
                else:
                    outside.append((int(j), float(w)))
        external.append(outside)
    ext_global, ext_weight = _pack(external, n)
    shape = lambda a: jnp.asarray(a.reshape(c, size, -1))
    return ClusterLayout(
        jnp.asarray(bus),
        jnp.asarray(valid),
        jnp.asarray(internal),
        shape(ext_global),
        shape(ext_weight),
    )


def pad_layout(layout: ClusterLayout, multiple: int, n_bus: int) -> ClusterLayout:
    """Append inert clusters (no real bus) until the cluster count is a multiple of ``multiple``.

    Used to split the cluster axis evenly over devices; an inert cluster reads and writes only the
    register's spare slot N, so the real clusters' results do not change.
    """
    c, s = layout.bus.shape
    extra = -c % multiple
    if extra == 0:
        return layout
    d_ext = layout.ext_global.shape[2]
    pad = ClusterLayout(
        jnp.full((extra, s), n_bus),
        jnp.zeros((extra, s), bool),
        jnp.zeros((extra, s, s)),
        jnp.full((extra, s, d_ext), n_bus),
        jnp.zeros((extra, s, d_ext)),
    )
    return ClusterLayout(*(jnp.concatenate([a, b]) for a, b in zip(layout, pad, strict=True)))


_SMALL_BLOCK = 16
"""Largest cluster whose in-cluster coupling is summed element-wise rather than by a matrix product."""


def external_sums(register: Any, ext_global: Any, ext_weight: Any) -> Any:
    """``(sum_j K_aj sin theta_j, sum_j K_aj cos theta_j)`` over out-of-cluster neighbours, (..., S, 2).

    With these two numbers per bus, the frozen external coupling of S89 is
    ``sum_j K_aj sin(theta_j - theta_a) = cos(theta_a) A_a - sin(theta_a) B_a`` for any local phase
    ``theta_a``: the external phases are read and their sines taken once per step, not once per sigma
    point and Heun stage.
    """
    sin_r, cos_r = jnp.sin(register), jnp.cos(register)
    a = jnp.sum(ext_weight * sin_r[ext_global], axis=-1)
    b = jnp.sum(ext_weight * cos_r[ext_global], axis=-1)
    return jnp.stack([a, b], axis=-1)


def _local_rhs(theta, omega, big_omega, damping, ext_sums, internal):
    """Swing equation of one cluster's slots (S89): in-cluster neighbours from the state, others frozen.

    ``sum_b K_ab sin(theta_b - theta_a) = cos(theta_a) sum_b K_ab sin(theta_b) - sin(theta_a) sum_b K_ab
    cos(theta_b)``, so an evaluation takes 2S sines and cosines however many neighbours a bus has.
    """
    sin_t, cos_t = jnp.sin(theta), jnp.cos(theta)
    if theta.shape[0] <= _SMALL_BLOCK:  # multiply-and-sum fuses; a tiny dot under vmap runs per matrix
        a = jnp.sum(internal * sin_t, axis=1) + ext_sums[:, 0]
        b = jnp.sum(internal * cos_t, axis=1) + ext_sums[:, 1]
    else:
        a = internal @ sin_t + ext_sums[:, 0]
        b = internal @ cos_t + ext_sums[:, 1]
    coupling = cos_t * a - sin_t * b
    return omega, -damping * omega + big_omega + coupling


def heun_transition(dt: float, damping, internal, substeps: int = 1):
    """``(x, ext_sums) -> x_next``: Heun steps of the augmented local state (S79-S80); Omega constant.

    ``ext_sums`` are the :func:`external_sums` of the out-of-cluster phases: (S, 2) held over the whole
    step (S89), or (substeps, 2, S, 2), one set per Heun stage (see :func:`predicted_external_sums`).
    ``substeps`` Heun steps of ``dt / substeps`` make one step of ``dt``, for networks whose strongest
    coupling makes one Heun step of ``dt`` unstable (see :func:`stable_substeps`).
    """
    h = dt / substeps

    def f(x, ext_sums):
        s = x.shape[0] // 3
        theta, omega, big_omega = x[:s], x[s : 2 * s], x[2 * s :]
        staged = ext_sums.ndim == 4
        for k in range(substeps):
            e1, e2 = (ext_sums[k, 0], ext_sums[k, 1]) if staged else (ext_sums, ext_sums)
            d1 = _local_rhs(theta, omega, big_omega, damping, e1, internal)
            th_p, om_p = theta + h * d1[0], omega + h * d1[1]
            d2 = _local_rhs(th_p, om_p, big_omega, damping, e2, internal)
            theta = theta + 0.5 * h * (d1[0] + d2[0])
            omega = omega + 0.5 * h * (d1[1] + d2[1])
        return jnp.concatenate([theta, omega, big_omega])

    return f


def _scatter(values: Any, layout: ClusterLayout, n: int) -> Any:
    """(C, S) slot values -> (N + 1,) per global bus, the spare slot N zero."""
    out = jnp.zeros(n + 1, values.dtype).at[layout.bus].set(jnp.where(layout.valid, values, 0.0))
    return out.at[n].set(0.0)


def predicted_external_sums(
    means: Any, damping: Any, layout: ClusterLayout, n: int, dt: float, substeps: int
):
    """External sums at every Heun stage of the step when all buses follow the network's mean prediction.

    The held register of S89 freezes the neighbours' phases over the step, an error of order
    ``omega_j dt`` in each coupling term: on stiff networks (PEGASE/RTE, lines of |Y| ~ 1e4 oscillating
    faster than the 100 Hz sampling) it dominates the filters' error. Here every cluster's posterior mean
    is advanced by the same Heun stages, its out-of-cluster neighbours read at each stage from the others'
    predicted phases (a Jacobi exchange per stage, O(N) per stage), and each stage's sums are kept for the
    sigma points of :func:`heun_transition`.

    Args:
        means: posterior means (C, 3S) ``[theta, omega, Omega]`` per cluster.
        damping: ``d`` per slot (C, S).
        layout: the cluster layout.
        n: number of buses.
        dt: time step.
        substeps: Heun sub-steps per step.

    Returns:
        (C, substeps, 2, S, 2).

    """
    s = layout.bus.shape[1]
    theta, omega, big_omega = means[:, :s], means[:, s : 2 * s], means[:, 2 * s :]
    h = dt / substeps
    rhs = jax.vmap(_local_rhs)
    sums = lambda th: external_sums(_scatter(th, layout, n), layout.ext_global, layout.ext_weight)
    stages = []
    for _ in range(substeps):
        e1 = sums(theta)
        d1 = rhs(theta, omega, big_omega, damping, e1, layout.internal)
        th_p, om_p = theta + h * d1[0], omega + h * d1[1]
        e2 = sums(th_p)
        d2 = rhs(th_p, om_p, big_omega, damping, e2, layout.internal)
        theta = theta + 0.5 * h * (d1[0] + d2[0])
        omega = omega + 0.5 * h * (d1[1] + d2[1])
        stages.append(jnp.stack([e1, e2], axis=1))
    return jnp.stack(stages, axis=1)


def external_force_variance(register: Any, variance: Any, theta: Any, layout: ClusterLayout) -> Any:
    """Variance of each slot's external coupling force from its neighbours' phase uncertainty, (C, S).

    ``var F_a = sum_j K_aj^2 cos^2(theta_j - theta_a) var(theta_j)`` (first order, neighbours independent):
    the probabilistic interface message of the compositional-inference paper (section 2.2, S44-S46)
    for the Kuramoto coupling. Injected as process noise ``dt^2 var F_a`` on the slot's frequency.
    """
    th_j = register[layout.ext_global]
    c = layout.ext_weight * jnp.cos(th_j - theta[..., None])
    return jnp.sum(c**2 * variance[layout.ext_global], axis=-1)


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
    layout: ClusterLayout,
    damping: Any,
    ys: Any,
    x0: Any,
    var0: tuple[float, float, float],
    q: tuple[float, float, float],
    r: float,
    dt: float,
    gamma: float = 1.0,
    substeps: int = 1,
    *,
    method: Literal["ukf", "wls"] = "ukf",
    messages: Literal["held", "probabilistic"] = "probabilistic",
    mesh: jax.sharding.Mesh | None = None,
) -> GridFilterOutput:
    """Jacobi-distributed UKF (or WLS) over a padded cluster batch; one cluster of all buses is central.

    Args:
        layout: :func:`cluster_layout` of the partition.
        damping: ``d_i`` (N,), known.
        ys: measurements (T, 2N): wrapped phases then frequencies of every bus.
        x0: initial estimate (N, 3) of ``[theta, omega, Omega]`` per bus.
        var0: initial variances of (theta, omega, Omega) (unused by WLS, which carries no covariance).
        q: process-noise variances of (theta, omega, Omega) per step (WLS: the prediction's weight).
        r: measurement-noise variance.
        dt: time step.
        gamma: paper-code sigma-point parameter (c = L + gamma, specs 7 item 1).
        substeps: Heun sub-steps per step (:func:`stable_substeps`).
        method: ``"ukf"`` (S82-S84, S88-S92) or ``"wls"``, the static baseline of
            :func:`twinfer.infer.filters.wls_step` with the same predictor, register and clusters.
        messages: ``"held"``: out-of-cluster phases are the previous posterior means, held over the step
            (the paper's Jacobi, S89). ``"probabilistic"``: they follow the network's mean prediction
            through the step (:func:`predicted_external_sums`) and their uncertainty enters each slot's
            frequency process noise (:func:`external_force_variance`).
        mesh: a one-axis device mesh; the cluster axis is padded to a multiple of its size with inert
            clusters and split over its devices (``jax.sharding``), the phase register replicated. On
            several hosts, build the mesh from ``jax.devices()`` after ``jax.distributed.initialize``.

    Returns:
        :class:`GridFilterOutput` over buses in global order.

    """
    n = damping.shape[0]
    if method not in ("ukf", "wls"):
        raise ValueError(f"run_clusters: method must be 'ukf' or 'wls'; received {method!r}")
    if messages not in ("held", "probabilistic"):
        raise ValueError(f"run_clusters: messages must be 'held' or 'probabilistic'; received {messages!r}")
    if mesh is not None:
        if len(mesh.axis_names) != 1:
            raise ValueError(f"run_clusters: mesh must have one axis; received axes {mesh.axis_names}")
        layout = pad_layout(layout, mesh.size, n)
    c, s = layout.bus.shape
    weights = UnscentedWeights.paper_code(gamma)
    pad_bus = layout.bus
    valid = layout.valid
    damp_local = jnp.where(valid, jnp.concatenate([damping, jnp.ones(1)])[pad_bus], 1.0)
    block = lambda v: jnp.concatenate([jnp.full(s, v[0]), jnp.full(s, v[1]), jnp.full(s, v[2])])
    q_diag = block(q)
    r_local = r * jnp.eye(2 * s)
    x0_ext = jnp.concatenate([jnp.asarray(x0), jnp.zeros((1, 3))])[pad_bus]  # (C, S, 3)
    mean0 = jnp.transpose(x0_ext, (0, 2, 1)).reshape(c, 3 * s)
    cov0 = jnp.broadcast_to(jnp.diag(block(var0)), (c, 3 * s, 3 * s))
    mask_local = jnp.concatenate([valid, valid], axis=1)
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

    def local_step(mean, cov, ext, q_d, y, mask, damp, internal):
        f = heun_transition(dt, damp, internal, substeps)
        q_local = jnp.diag(q_d)
        if method == "wls":
            return wls_step(f, _measure, mean, q_local, r_local, ext, y, mask, innovation=_wrapped_innovation)
        return ukf_step(
            f, _measure, mean, cov, q_local, r_local, ext, y, mask,
            weights=weights, innovation=_wrapped_innovation,
        )  # fmt: skip

    batched = jax.vmap(local_step)
    static = tuple(map(shard, (mask_local, damp_local, layout.internal)))

    def step(carry, y):
        means, covs, register = carry
        if messages == "held":
            # Jacobi: the previous step's phases of out-of-cluster neighbours, summed once per step.
            ext = shard(external_sums(register[0], layout.ext_global, layout.ext_weight))  # (C, S, 2)
            q_c = jnp.broadcast_to(q_diag, (c, 3 * s))
        else:
            ext = shard(predicted_external_sums(means, damp_local, layout, n, dt, substeps))
            var_f = external_force_variance(register[0], register[1], means[:, :s], layout)
            q_c = q_diag + jnp.concatenate([jnp.zeros((c, s)), dt**2 * var_f, jnp.zeros((c, s))], axis=1)
        y_ext = jnp.concatenate([y.reshape(2, n), jnp.zeros((2, 1))], axis=1)
        y_local = shard(jnp.concatenate([y_ext[0][pad_bus], y_ext[1][pad_bus]], axis=1))
        out = batched(shard(means), shard(covs), ext, shard(q_c), y_local, *static)
        var = jnp.diagonal(out.cov, axis1=1, axis2=2)
        stds = jnp.sqrt(var)
        register = jnp.stack(
            [
                _scatter(out.mean[:, :s], layout, n),
                _scatter(var[:, :s] + dt**2 / 3.0 * var[:, s : 2 * s], layout, n),
            ]
        )
        return (shard(out.mean), shard(out.cov), register), (out.mean, stds, out.ok)

    (_, _, _), (means, stds, ok) = jax.lax.scan(step, (shard(mean0), shard(cov0), register0), ys)
    means = eqx.error_if(
        means,
        ~jnp.all(ok),
        f"grid {method.upper()} diverged: a cluster's covariance stopped being positive-definite or its "
        "state became non-finite. Check q, r and the initial variances.",
    )
    means = _to_global(means, pad_bus, valid, n, s)
    stds = _to_global(stds, pad_bus, valid, n, s)
    return GridFilterOutput(means, stds)


def _to_global(values: Any, bus: Any, valid: Any, n: int, s: int) -> Any:
    """(T, C, 3S) local blocks -> (T, N, 3) per global bus."""
    t, c, _ = values.shape
    per_slot = jnp.transpose(values.reshape(t, c, 3, s), (0, 1, 3, 2))  # (T, C, S, 3)
    out = jnp.zeros((t, n + 1, 3), values.dtype)
    flat_bus = jnp.where(valid, bus, n)
    out = out.at[:, flat_bus].set(per_slot)
    return out[:, :n]
