"""Centralised and cluster-distributed UKFs for a second-order Kuramoto grid, with Heun sigma points.

Every cluster of at most ``S`` buses carries the augmented local state ``[theta_S, omega_S, Omega_S]``
(3S, S132-S134 of specs/compositional-inference.md 3.5). Clusters of different sizes are padded to ``S``
and stacked, so one ``vmap`` of :func:`twinfer.infer.filters.ukf_step` updates all of them at once:

* a padded slot is an inert oscillator with no coupling and no measurement (its mask is False), so it
  never touches a real bus;
* the coupling of bus a, ``sum_j K_aj sin(theta_j - theta_a)``, reads theta_j from the cluster's own sigma
  point when j is in the cluster and from the global phase register otherwise (S89): the register is
  gathered once per step by index arrays, so a step costs O(N) however the buses are grouped;
* after all clusters update (Jacobi, N_Jacobi = 1) their posterior phases are scattered into the register.

The centralised UKF is the same code with one cluster holding every bus (no register reads). Angles are
kept on the real line (never wrapped inside the filter), so sigma points cannot straddle +-pi and their
weighted mean is the circular mean; only the phase innovation is wrapped, against the wrapped phase
measurement (the decision on specs 7 item 11).

References:
    compositional-inference paper, SI (S73)-(S92), Alg. 6; Table S4 for the hyperparameters.

"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.data._partition import Partition
from twinfer.infer.filters import UnscentedWeights, ukf_step
from twinfer.models.kuramoto import wrap_angle


class ClusterLayout(NamedTuple):
    """Index arrays of a padded cluster batch (C clusters, S slots, D neighbours per bus).

    Attributes:
        bus: global bus of each slot (C, S); padding holds N (an extra register slot).
        valid: slot holds a real bus (C, S).
        nbr_local: slot in the same cluster of each neighbour, -1 if outside (C, S, D).
        nbr_global: global bus of each neighbour (C, S, D); padding and self-loops point at N.
        nbr_weight: ``K_aj`` (C, S, D), zero on padding.

    """

    bus: Any
    valid: Any
    nbr_local: Any
    nbr_global: Any
    nbr_weight: Any


def cluster_layout(partition: Partition, index: np.ndarray, weight: np.ndarray) -> ClusterLayout:
    """Padded index arrays of a partition of a network given by neighbour lists (N, D).

    Args:
        partition: clusters of the buses (every bus in exactly one).
        index: neighbour indices (N, D) (padding may point anywhere where ``weight`` is 0).
        weight: coupling strengths (N, D).

    Returns:
        :class:`ClusterLayout` with S = the largest cluster.

    """
    n, width = index.shape
    size = partition.max_size
    c = partition.n_clusters
    bus = np.full((c, size), n)
    valid = np.zeros((c, size), bool)
    slot_of = np.full(n + 1, -1)
    cluster_of = partition.labels
    for k, members in enumerate(partition.clusters):
        bus[k, : len(members)] = members
        valid[k, : len(members)] = True
        slot_of[members] = np.arange(len(members))
    nbr_global = np.where(weight > 0, index, n)
    nbr_global_ext = np.concatenate([nbr_global, np.full((1, width), n)])[bus]  # (C, S, D)
    nbr_weight = np.concatenate([np.where(weight > 0, weight, 0.0), np.zeros((1, width))])[bus]
    same = np.concatenate([cluster_of, [-1]])[nbr_global_ext] == np.arange(c)[:, None, None]
    nbr_local = np.where(same & (nbr_weight > 0), slot_of[nbr_global_ext], -1)
    return ClusterLayout(
        jnp.asarray(bus),
        jnp.asarray(valid),
        jnp.asarray(nbr_local),
        jnp.asarray(nbr_global_ext),
        jnp.asarray(nbr_weight),
    )


def _local_rhs(theta, omega, big_omega, damping, ext_theta, nbr_local, nbr_weight):
    """Swing equation of one cluster's slots (S89): local neighbours from the state, others frozen."""
    local = theta[jnp.maximum(nbr_local, 0)]
    theta_nb = jnp.where(nbr_local >= 0, local, ext_theta)
    coupling = jnp.sum(nbr_weight * jnp.sin(theta_nb - theta[:, None]), axis=1)
    return omega, -damping * omega + big_omega + coupling


def heun_transition(dt: float, damping, nbr_local, nbr_weight, substeps: int = 1):
    """``(x, ext_theta) -> x_next``: Heun steps of the augmented local state (S79-S80); Omega constant.

    ``substeps`` Heun steps of ``dt / substeps`` make one step of ``dt`` (external phases held), for
    networks whose strongest coupling makes one Heun step of ``dt`` unstable (see :func:`stable_substeps`).
    """
    h = dt / substeps

    def f(x, ext_theta):
        s = x.shape[0] // 3
        theta, omega, big_omega = x[:s], x[s : 2 * s], x[2 * s :]
        for _ in range(substeps):
            d1 = _local_rhs(theta, omega, big_omega, damping, ext_theta, nbr_local, nbr_weight)
            th_p, om_p = theta + h * d1[0], omega + h * d1[1]
            d2 = _local_rhs(th_p, om_p, big_omega, damping, ext_theta, nbr_local, nbr_weight)
            theta = theta + 0.5 * h * (d1[0] + d2[0])
            omega = omega + 0.5 * h * (d1[1] + d2[1])
        return jnp.concatenate([theta, omega, big_omega])

    return f


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
) -> GridFilterOutput:
    """Jacobi-distributed UKF over a padded cluster batch; one cluster of all buses is the central UKF.

    Args:
        layout: :func:`cluster_layout` of the partition.
        damping: ``d_i`` (N,), known.
        ys: measurements (T, 2N): wrapped phases then frequencies of every bus.
        x0: initial estimate (N, 3) of ``[theta, omega, Omega]`` per bus.
        var0: initial variances of (theta, omega, Omega).
        q: process-noise variances of (theta, omega, Omega) per step.
        r: measurement-noise variance.
        dt: time step.
        gamma: paper-code sigma-point parameter (c = L + gamma, specs 7 item 1).
        substeps: Heun sub-steps per step (:func:`stable_substeps`).

    Returns:
        :class:`GridFilterOutput` over buses in global order.

    """
    c, s = layout.bus.shape
    n = damping.shape[0]
    weights = UnscentedWeights.paper_code(gamma)
    pad_bus = layout.bus
    valid = layout.valid
    damp_local = jnp.where(valid, jnp.concatenate([damping, jnp.ones(1)])[pad_bus], 1.0)
    block = lambda v: jnp.concatenate([jnp.full(s, v[0]), jnp.full(s, v[1]), jnp.full(s, v[2])])
    q_local = jnp.diag(block(q))
    r_local = r * jnp.eye(2 * s)
    x0_ext = jnp.concatenate([jnp.asarray(x0), jnp.zeros((1, 3))])[pad_bus]  # (C, S, 3)
    mean0 = jnp.transpose(x0_ext, (0, 2, 1)).reshape(c, 3 * s)
    cov0 = jnp.broadcast_to(jnp.diag(block(var0)), (c, 3 * s, 3 * s))
    mask_local = jnp.concatenate([valid, valid], axis=1)
    register0 = jnp.concatenate([jnp.asarray(x0)[:, 0], jnp.zeros(1)])

    def local_step(mean, cov, ext, y, mask, damp, nbr_local, nbr_weight):
        f = heun_transition(dt, damp, nbr_local, nbr_weight, substeps)
        return ukf_step(
            f, _measure, mean, cov, q_local, r_local, ext, y, mask,
            weights=weights, innovation=_wrapped_innovation,
        )  # fmt: skip

    batched = jax.vmap(local_step)

    def step(carry, y):
        means, covs, register = carry
        ext = register[layout.nbr_global]  # (C, S, D): Jacobi, previous step's phases
        y_ext = jnp.concatenate([y.reshape(2, n), jnp.zeros((2, 1))], axis=1)
        y_local = jnp.concatenate([y_ext[0][pad_bus], y_ext[1][pad_bus]], axis=1)
        out = batched(means, covs, ext, y_local, mask_local, damp_local, layout.nbr_local, layout.nbr_weight)
        register = register.at[pad_bus[:, :]].set(jnp.where(valid, out.mean[:, :s], 0.0))
        register = register.at[n].set(0.0)
        stds = jnp.sqrt(jnp.diagonal(out.cov, axis1=1, axis2=2))
        return (out.mean, out.cov, register), (out.mean, stds, out.ok)

    (_, _, _), (means, stds, ok) = jax.lax.scan(step, (mean0, cov0, register0), ys)
    means = eqx.error_if(
        means,
        ~jnp.all(ok),
        "grid UKF diverged: a cluster's covariance stopped being positive-definite or its state became "
        "non-finite. Check q, r and the initial variances.",
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
