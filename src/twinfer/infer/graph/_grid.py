"""The power-grid study's estimators: a network's partition and one estimator on its clusters, per bus.

The six estimators of the compositional-inference paper's Fig. S9 (:data:`GRID_ESTIMATORS`) are the
UKF and the static baselines WLS / WNLS, each on the generator-seeded partition of a network
(:func:`partition_for`) or on the whole network as one cluster. :class:`GridEstimator` compiles one of
them once on a :func:`~twinfer.infer.graph.kuramoto_graph` and maps its clusters' slots back to buses.

References:
    Ghorbani & Hackl, SI (S79)-(S92), Tables S2-S4, Fig. S9 (specs/compositional-inference.md 3.5).

"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np

from twinfer import sharding
from twinfer.infer.graph._field import check_field_run
from twinfer.infer.graph._kuramoto import ClusterGraph, bus_values, kuramoto_graph
from twinfer.infer.graph._numbers import Compiled
from twinfer.infer.graph._partition import Partition, bond_for_step, partition_greedy
from twinfer.infer.graph._run import compile as compile_engine
from twinfer.models import KuramotoNetwork

GridMethod = Literal["ukf", "wls", "wnls"]
GRID_ESTIMATORS: dict[str, tuple[GridMethod, bool]] = {  # metric prefix -> (method, on the whole network)
    "central": ("ukf", True),
    "distributed": ("ukf", False),
    "central_wls": ("wls", True),
    "wls": ("wls", False),
    "central_wnls": ("wnls", True),
    "wnls": ("wnls", False),
}
"""The six estimators of Fig. S9 by metric prefix (the UKF's are ``central``/``distributed``, the
distributed baselines ``wls``/``wnls``, the central ones ``central_wls``/``central_wnls``)."""
GRID_LABELS = {
    "central": "central UKF",
    "distributed": "distributed UKF",
    "central_wls": "central WLS",
    "wls": "distributed WLS",
    "central_wnls": "central WNLS",
    "wnls": "distributed WNLS",
}
"""A reader's name of each of :data:`GRID_ESTIMATORS`."""


@dataclass(frozen=True)
class GridSettings:
    """The grid study's settings (Table S4; the distributed Q_Omega from the authors' code).

    ``q_*`` are process-noise variances (as the paper's table gives them; :meth:`process_sd` their
    standard deviations), ``noise_sd`` the measurement noise's standard deviation, ``bond`` the limit of
    :func:`partition_for`, ``ukf_gamma`` the paper-code UKF's gamma (c = L + gamma).
    """

    dt: float = 0.01
    noise_sd: float = 0.02
    s_max: int = 5
    bond: float = 1.0
    q_theta: float = 1e-4
    q_omega: float = 1e-4
    q_Omega_central: float = 1e-4
    q_Omega_distributed: float = 1e-6
    ukf_gamma: float = 1.0

    def process_sd(self, central: bool) -> tuple[float, float, float]:
        """Process-noise standard deviations of (theta, omega, Omega), the central or distributed Omega's."""
        q_big_omega = self.q_Omega_central if central else self.q_Omega_distributed
        return math.sqrt(self.q_theta), math.sqrt(self.q_omega), math.sqrt(q_big_omega)


GRID_DEFAULTS = GridSettings()
"""Table S4's values: the defaults of the grid case, its benchmark and a grid spec."""


def partition_for(
    net: Any, s_max: int, dt: float, bond: float = 1.0, measured: np.ndarray | None = None
) -> Partition:
    """The generator-seeded partition (S85-S87) of ``net`` with at most ``s_max`` buses a cluster.

    Buses joined by edges too stiff for an exchange every ``dt`` stay together: ``bond`` is the limit
    on ``dt sqrt(2K)`` of :func:`~twinfer.infer.graph._partition.bond_for_step` (0: the paper's partition).
    With ``measured`` (the buses with a PMU, from 0), every other bus stays with its stiffest neighbour:
    a bus without a PMU is seen only through its own cluster's measurements (a cut line's phase is a
    message), so one cut off from every measured neighbour keeps its prior's swing for good.
    """
    limit = bond_for_step(dt, bond) if bond > 0 else None
    base = partition_greedy(net.coupling, net.gen_buses, s_max, bond=limit)
    if measured is not None:
        index, weight = (np.asarray(a) for a in net.neighbours)
        seen = np.zeros(net.n_bus, bool)
        seen[np.asarray(measured, dtype=int)] = True
        coupled = weight > 0
        # a bus without a PMU, and one whose neighbours all lack one, with its stiffest neighbour
        blind = ~(seen[index] & coupled).any(axis=1)
        lone = np.flatnonzero(~seen | blind)
        joined = np.stack([lone, index[lone, np.argmax(weight[lone], axis=1)]], axis=1)
        labels = np.asarray(base.labels)
        if np.any(labels[joined[:, 0]] != labels[joined[:, 1]]):  # else the partition keeps them already
            return partition_greedy(net.coupling, net.gen_buses, s_max, bond=limit, joined=joined)
    return base


def whole_network(n_bus: int) -> Partition:
    """The partition of ``n_bus`` buses into one cluster: the centralised estimator's."""
    return Partition(labels=np.zeros(n_bus, int), clusters=(np.arange(n_bus),))


@dataclass(frozen=True)
class GridEstimator:
    """One estimator of a Kuramoto network on a partition (one cluster = central), compiled once.

    ``scan(ys)`` is the jitted scan alone (``ys -> per-group (means, stds, ok)``), the part a timing
    takes; ``to_buses(outs)`` checks it for divergence and maps the clusters' slots to ``(T, N, 3)`` per
    bus (theta, omega, Omega); calling the estimator does both.
    """

    cluster_graph: ClusterGraph
    compiled: Compiled
    n_bus: int
    dt: float

    def scan(self, ys: Any) -> Any:
        """The compiled scan over the measurements ``ys`` (T, 2N): no inputs, every sample present."""
        us = jnp.zeros((ys.shape[0], 0))
        return self.compiled.scan(self.compiled.numbers, us, ys, jnp.ones(ys.shape, bool))

    def to_buses(self, outs: Any) -> tuple[np.ndarray, np.ndarray]:
        """Means and standard deviations (T, N, 3) per bus of a :meth:`scan`'s outputs.

        Raises:
            DivergenceError: naming the cluster and the time where a filter diverged first.

        """
        means, stds, ok = sharding.to_numpy(outs)  # whole in every process
        check_field_run(self.compiled, ok, np.arange(len(ok[0]) + 1) * self.dt)
        graph, n = self.cluster_graph, self.n_bus
        return bus_values(graph, self.compiled, means, n), bus_values(graph, self.compiled, stds, n)

    def __call__(self, ys: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.to_buses(self.scan(ys))


def grid_graph(
    model: KuramotoNetwork,
    partition: Partition,
    x0: np.ndarray,
    *,
    dt: float,
    process_sd: tuple[float, float, float],
    noise_sd: float,
    **options: Any,
) -> ClusterGraph:
    """The grid study's graph of ``model`` on ``partition``: Table S4's prior sds (0.5, 0.5, 1.0).

    ``x0`` (N, 3): each bus's prior mean of (theta, omega, Omega); ``options``: the other keywords of
    :func:`~twinfer.infer.graph.kuramoto_graph` (``gamma``, ``substeps``, ``estimator``, ``messages``).
    """
    state_sd = (0.5, 0.5, 1.0)
    return kuramoto_graph(
        model, partition, dt=dt, x0=x0, state_sd=state_sd, process_sd=process_sd, noise_sd=noise_sd, **options
    )


def grid_estimator(
    model: KuramotoNetwork,
    partition: Partition,
    init: np.ndarray,
    *,
    dt: float,
    process_sd: tuple[float, float, float],
    noise_sd: float,
    gamma: float = 1.0,
    substeps: int | None = None,
    method: GridMethod = "ukf",
    messages: Literal["held", "probabilistic"] = "probabilistic",
    devices: int = 1,
) -> GridEstimator:
    """One estimator of ``model`` on ``partition``, its clusters' filters compiled as one step.

    The partitioned network is a compositional graph (:func:`~twinfer.infer.graph.kuramoto_graph`:
    the UKF of S82-S84, S88-S92, or the static baselines WLS / WNLS, all on the same clusters and phase
    register) with the prior standard deviations (0.5, 0.5, 1.0), the variances (0.25, 0.25, 1.0) of
    Table S4.

    Args:
        model: the network.
        partition: its clusters (:func:`whole_network` for the centralised estimator).
        init: the initial estimate (2N,) of phases and frequencies; the natural frequencies start at 0.
        dt: the time step.
        process_sd: process-noise standard deviations of theta, omega and Omega.
        noise_sd: the measurement noise's standard deviation.
        gamma: the paper-code UKF's gamma.
        substeps: Heun sub-steps per step (None: the fewest stable ones per cluster).
        method: ``"ukf"``, ``"wls"`` or ``"wnls"``.
        messages: out-of-cluster phases ``"held"`` (S89) or ``"probabilistic"``.
        devices: devices the cluster axis is split over (0: all visible).

    Returns:
        The :class:`GridEstimator`.

    """
    n = model.n_bus
    x0 = np.stack([init[:n], init[n:], np.zeros(n)], axis=1)
    options = dict(gamma=gamma, substeps=substeps, estimator=method, messages=messages)
    cluster_graph = grid_graph(
        model, partition, x0, dt=dt, process_sd=process_sd, noise_sd=noise_sd, **options
    )
    mesh = sharding.device_mesh(devices, "clusters", "grid: devices")
    return GridEstimator(cluster_graph, compile_engine(cluster_graph.graph, mesh=mesh), n, dt)
