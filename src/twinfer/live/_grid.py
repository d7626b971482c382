"""A grid's live twin: the field engine's program of a Kuramoto network, its clusters as alarm groups.

What a grid spec's ``twinfer live`` runs (``spec.live_setup``), the ``live-grid`` case and ``twinfer
bench live``: the network's generator-seeded partition with every bus without a PMU kept with its
stiffest neighbour (:func:`~twinfer.infer.graph._grid.partition_for`), each cluster's UKF on the field
engine with Table S4's settings (:data:`~twinfer.infer.graph._grid.GRID_DEFAULTS`) and padded to its
own size class, the buses' damping known and their natural frequencies unknown around 0; channels
``theta<b>`` / ``omega<b>`` (buses from 1) of the buses with a PMU, and one group of the innovation alarm
per cluster holding a PMU, named ``S<c> (buses ...)``.

With PMUs on a subset of buses, :func:`pmu_buses` (``cover=True``) places them so that no line joins two
unmeasured buses; :func:`grid_twin` warns (:class:`PlacementWarning`) of a placement that leaves such
lines, whose two buses' exchanged phase variances drive each other without bound.

References:
    Ghorbani & Hackl, SI (S79)-(S92), Table S4 (specs/compositional-inference.md 3.5); issue #54 (a
    grid twin); docs/live.md, "A grid twin".

"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

import twinfer
from twinfer.errors import TwinferValueError, TwinferWarning
from twinfer.infer import Distributed, Program
from twinfer.infer.graph import Partition
from twinfer.infer.graph._grid import GRID_DEFAULTS, grid_graph, partition_for, whole_network
from twinfer.models import KuramotoNetwork


class PlacementWarning(TwinferWarning):
    """A grid twin's PMUs leave lines with no measured end: the twin may diverge (:func:`pmu_buses`)."""


@dataclass(frozen=True)
class GridTwin:
    """A grid twin's program, its partition, the measured channels and the clusters' alarm groups.

    ``groups`` maps ``S<c> (buses ...)`` to the cluster's measured channels (clusters without a PMU
    have none and no group); ``cluster_of`` gives each bus's (from 0) cluster index.
    """

    program: Program
    partition: Partition
    channels: tuple[str, ...]
    groups: dict[str, list[str]]

    @property
    def cluster_of(self) -> np.ndarray:
        return np.asarray(self.partition.labels)


def cluster_name(partition: Partition, c: int) -> str:
    """The alarm group's name of cluster ``c`` (from 0): ``S<c+1> (buses b ...)``, buses from 1."""
    return f"S{c + 1} (buses {' '.join(str(b + 1) for b in partition.clusters[c])})"


def lines_of(index: Any, weight: Any) -> np.ndarray:
    """A network's lines (L, 2) from its neighbour lists: the coupled bus pairs ``a < b``, ``K_ab > 0``."""
    index, weight = np.asarray(index), np.asarray(weight)
    rows = np.repeat(np.arange(index.shape[0]), index.shape[1])
    pairs = np.stack([rows, index.ravel()], axis=1)[(weight.ravel() > 0) & (index.ravel() > rows)]
    return np.unique(pairs, axis=0)


def pmu_buses(net: Any, every: int, generators: bool, cover: bool = False) -> np.ndarray:
    """The buses with a PMU (from 0): every ``every``-th, the generators if asked, and a cover of the lines.

    ``every`` counts from bus 0 (0: none); ``cover`` adds one end of every line whose two ends have none.
    The generator buses seed the partition's clusters (S85-S87): with them each seeded cluster is measured.
    ``cover`` leaves every bus without a PMU among measured neighbours only: the twin sees it through
    them (its cluster keeps it with its stiffest one, :func:`~twinfer.infer.graph._grid.partition_for`),
    and no line joins two unmeasured buses, whose swings the clusters' exchanged phase variances would
    drive against each other without bound (docs/live.md, "A grid twin"). The ends are added greedily,
    the bus with the most such lines first (ties: the lower bus), so the cover stays small: on
    ``case1888rte`` the generator buses and the cover are 917 of 1,888 buses.
    """
    n = net.n_bus
    chosen = np.zeros(n, bool)
    if every > 0:
        chosen[::every] = True
    if generators:
        chosen[np.asarray(net.gen_buses, dtype=np.int64)] = True
    if cover:
        adjacency: list[set[int]] = [set() for _ in range(n)]
        for a, b in lines_of(*net.neighbours).tolist():
            adjacency[a].add(b)
            adjacency[b].add(a)
        open_lines = np.array(
            [0 if chosen[a] else sum(not chosen[b] for b in adjacency[a]) for a in range(n)]
        )
        while open_lines.max(initial=0) > 0:
            a = int(np.argmax(open_lines))
            chosen[a], open_lines[a] = True, 0
            for b in adjacency[a]:
                if not chosen[b]:
                    open_lines[b] -= 1
    return np.flatnonzero(chosen).astype(np.int64)


def spare_buses(net: Any, partition: Partition, pmus: Sequence[int] | np.ndarray) -> np.ndarray:
    """Measured buses (from 0) whose PMU a twin on ``partition`` can spare.

    Spare: every neighbour measured and in the bus's cluster, no two spare buses adjacent, no generator
    bus. A bus without a PMU is seen through its neighbours' measurements. Inside its cluster's filter
    they are joint states, so the information runs both ways; a neighbour in another cluster only
    exchanges means and variances (the field's messages), and its measurements of the bus's pull never
    reach the bus's own filter: with a PMU on one end of every line (``pmu_buses(..., cover=True)``)
    the measured neighbours across a cut raise false alarms (docs/live.md, "A grid twin"). Buses are
    taken greedily in bus order; each taken bus keeps its neighbours' PMUs.
    """
    n = net.n_bus
    labels = np.asarray(partition.labels)
    measured = np.zeros(n, bool)
    measured[np.asarray(pmus, dtype=np.int64)] = True
    generator = np.zeros(n, bool)
    generator[np.asarray(net.gen_buses, dtype=np.int64)] = True
    index, weight = (np.asarray(a) for a in net.neighbours)
    coupled = weight > 0
    inside = np.all(~coupled | ((labels[index] == labels[:, None]) & measured[index]), axis=1)
    spared = np.zeros(n, bool)
    for b in np.flatnonzero(measured & inside & ~generator & coupled.any(axis=1)):
        spared[b] = not spared[index[b][coupled[b]]].any()  # a spared neighbour keeps this bus's PMU
    return np.flatnonzero(spared).astype(np.int64)


def first_frame_state(
    net: Any, partition: Partition, pmus: Sequence[int] | np.ndarray, frame: np.ndarray
) -> np.ndarray:
    """A prior mean (N, 3) from the PMUs' first frame (2m,), phases then frequencies in ``pmus`` order.

    A bus without a PMU takes the circular mean of its measured neighbours' phases weighted by their
    coupling, and their frequencies' weighted mean (a stiff line keeps its two buses together); one
    without a measured neighbour its cluster's; the natural frequencies start at 0.
    """
    pmus = np.asarray(pmus, dtype=np.int64)
    m, n = pmus.size, net.n_bus
    labels = np.asarray(partition.labels)
    k = len(partition.clusters)
    count = np.bincount(labels[pmus], minlength=k).astype(np.float64)
    phasor = np.zeros(k, complex)
    np.add.at(phasor, labels[pmus], np.exp(1j * frame[:m]))
    omega = np.bincount(labels[pmus], weights=frame[m:], minlength=k) / np.maximum(count, 1.0)
    x0 = np.zeros((n, 3))
    x0[:, 0], x0[:, 1] = np.angle(phasor)[labels], omega[labels]
    theta, freq, seen = np.zeros(n), np.zeros(n), np.zeros(n, bool)
    theta[pmus], freq[pmus], seen[pmus] = frame[:m], frame[m:], True
    index, weight = (np.asarray(a) for a in net.neighbours)
    w = np.where(seen[index], weight, 0.0)
    total = w.sum(axis=1)
    near = ~seen & (total > 0)
    x0[near, 0] = np.angle(np.sum(w * np.exp(1j * theta[index]), axis=1))[near]
    x0[near, 1] = (np.sum(w * freq[index], axis=1) / np.where(total > 0, total, 1.0))[near]
    x0[pmus, 0], x0[pmus, 1] = frame[:m], frame[m:]
    return x0


def grid_twin(
    net: Any,
    damping: np.ndarray,
    pmus: Sequence[int] | np.ndarray,
    *,
    dt: float,
    noise_sd: float,
    s_max: int = GRID_DEFAULTS.s_max,
    first_frame: np.ndarray | None = None,
    messages: Literal["held", "probabilistic"] = "probabilistic",
    substeps: int | None = None,
    central: bool = False,
    natural_frequency: np.ndarray | None = None,
    process_sd: tuple[float, float, float] | None = None,
) -> GridTwin:
    """The field engine's program of ``net`` with PMUs (phase and frequency) on buses ``pmus`` (from 0).

    Args:
        net: the network (:func:`~twinfer.data.load_grid`).
        damping: each bus's damping ``d_i`` (N,), known to the twin.
        pmus: the buses measured.
        dt: the PMU frames' interval [s].
        noise_sd: the measurement noise's standard deviation.
        s_max: the largest cluster (buses).
        first_frame: the PMUs' first frame (2m,), phases then frequencies in ``pmus``' sorted order: the
            prior mean (:func:`first_frame_state`); None: zeros, as a grid spec's live twin starts.
        messages: out-of-cluster phases ``"held"`` (S89) or ``"probabilistic"``.
        substeps: Heun sub-steps of every cluster per frame; None: each cluster's own stable count.
        central: one UKF on the whole network (Table S4's central Q) instead of the clusters'.
        natural_frequency: the prior mean (N,) of the buses' natural frequencies, e.g. the case's
            scheduled injections (:attr:`~twinfer.data.GridNetwork.injection`); None: zeros (Table S4).
        process_sd: process-noise standard deviations of (theta, omega, Omega) per frame; None: Table
            S4's (:data:`~twinfer.infer.graph._grid.GRID_DEFAULTS`), made for a truth whose every bus
            swings; a calm grid's innovations are then a quarter of their predicted variance.

    Returns:
        The :class:`GridTwin`.

    Raises:
        TwinferValueError: ``damping`` of the wrong shape, or ``pmus`` not distinct buses of ``net``.

    Warns:
        PlacementWarning: a line has no PMU at either end (:func:`pmu_buses` with ``cover`` places them).

    """
    n = net.n_bus
    damping = np.asarray(damping, dtype=np.float64)
    if damping.shape != (n,):
        raise TwinferValueError(f"grid_twin damping: expected shape ({n},); received {damping.shape}.")
    buses = sorted(int(b) for b in pmus)
    if not buses or len(set(buses)) != len(buses) or buses[0] < 0 or buses[-1] >= n:
        raise TwinferValueError(
            f"grid_twin pmus: expected distinct buses in 0..{n - 1}; received {len(buses)} from "
            f"{buses[:1]} to {buses[-1:]}."
        )
    index, weight = net.neighbours
    lines = lines_of(index, weight)
    measured = np.zeros(n, bool)
    measured[buses] = True
    blind = lines[~measured[lines].any(axis=1)]
    if blind.size:
        warnings.warn(
            f"grid_twin pmus: {len(blind)} lines have no PMU at either end (the first: buses "
            f"{blind[0, 0] + 1}-{blind[0, 1] + 1}); the exchanged phase variances of their two buses can "
            "drive each other without bound. pmu_buses(..., cover=True) adds one end of each.",
            PlacementWarning,
            stacklevel=2,
        )
    if central:
        partition = whole_network(n)
    else:
        partition = partition_for(net, s_max, dt, GRID_DEFAULTS.bond, measured=np.asarray(buses))
    prior = np.zeros(n) if natural_frequency is None else np.asarray(natural_frequency, dtype=np.float64)
    if prior.shape != (n,) or not np.all(np.isfinite(prior)):
        raise TwinferValueError(
            f"grid_twin natural_frequency: expected {n} finite values; received shape {prior.shape}."
        )
    network = KuramotoNetwork(index, weight, damping, np.zeros(n))
    x0 = np.zeros((n, 3)) if first_frame is None else first_frame_state(net, partition, buses, first_frame)
    x0[:, 2] = prior
    graph = grid_graph(
        network,
        partition,
        x0,
        dt=dt,
        process_sd=GRID_DEFAULTS.process_sd(central) if process_sd is None else process_sd,
        noise_sd=float(noise_sd),
        gamma=GRID_DEFAULTS.ukf_gamma,
        messages=messages,
        substeps=substeps,
        pad=None if central else s_max,  # the few clusters a bus without a PMU made larger stay apart
    ).graph
    graph = dataclasses.replace(graph, output_names=network.output_names, input_names=network.input_names)
    program = twinfer.compile(graph, Distributed(), dt=float(dt))  # the field engine
    # one group per measured cluster, its channels as the frames name them
    groups = {
        cluster_name(partition, c): [
            f"{q}{b + 1}" for q in ("theta", "omega") for b in members if measured[b]
        ]
        for c, members in enumerate(partition.clusters)
        if measured[members].any()
    }
    channels = tuple(f"{q}{b + 1}" for q in ("theta", "omega") for b in buses)
    return GridTwin(program, partition, channels, groups)
