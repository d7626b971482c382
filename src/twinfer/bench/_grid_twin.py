"""A grid's live twin: the field engine's program of a Kuramoto network, its clusters as alarm groups.

What a grid spec's ``twinfer live`` runs (``spec.live_setup``), built from a loaded network for the
``live-grid`` case and ``twinfer bench live``: the network's generator-seeded partition
(:func:`~twinfer.infer.graph._grid.partition_for`), each cluster's UKF on the field engine with Table
S4's settings (:data:`~twinfer.infer.graph._grid.GRID_DEFAULTS`), the buses' damping known and their
natural frequencies unknown around 0; channels ``theta<b>`` / ``omega<b>`` (buses from 1), and one group
of the innovation alarm per cluster holding a PMU, named ``S<c> (buses ...)``.

References:
    Ghorbani & Hackl, SI (S79)-(S92), Table S4 (specs/compositional-inference.md 3.5); issue #54 (a
    grid twin).

"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

import twinfer
from twinfer.errors import TwinferValueError
from twinfer.infer import Distributed, Program
from twinfer.infer.graph import Partition
from twinfer.infer.graph._grid import GRID_DEFAULTS, grid_graph, partition_for
from twinfer.models import KuramotoNetwork


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


def pmu_buses(net: Any, every: int, generators: bool) -> np.ndarray:
    """The buses with a PMU (from 0): every ``every``-th bus from bus 0, and the generator buses if asked.

    The generator buses seed the partition's clusters (S85-S87): with them each seeded cluster is measured.
    """
    chosen = set(range(0, net.n_bus, every))
    if generators:
        chosen |= {int(b) for b in net.gen_buses}
    return np.array(sorted(chosen), dtype=np.int64)


def first_frame_state(
    partition: Partition, pmus: Sequence[int] | np.ndarray, frame: np.ndarray
) -> np.ndarray:
    """A prior mean (N, 3) from the PMUs' first frame: measured buses their own, the others their cluster's.

    ``frame`` (2m,) holds the PMUs' phases then frequencies (``pmus`` order). A bus without a PMU takes
    the circular mean of its cluster's measured phases and the mean of their frequencies (the partition
    keeps stiffly coupled buses together, so they swing as one); a cluster without a PMU, and every
    natural frequency, start at 0.
    """
    pmus = np.asarray(pmus, dtype=np.int64)
    m = pmus.size
    labels = np.asarray(partition.labels)
    k = len(partition.clusters)
    count = np.bincount(labels[pmus], minlength=k).astype(np.float64)
    phasor = np.zeros(k, complex)
    np.add.at(phasor, labels[pmus], np.exp(1j * frame[:m]))
    omega = np.bincount(labels[pmus], weights=frame[m:], minlength=k) / np.maximum(count, 1.0)
    x0 = np.zeros((labels.size, 3))
    x0[:, 0], x0[:, 1] = np.angle(phasor)[labels], omega[labels]
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

    Returns:
        The :class:`GridTwin`.

    Raises:
        TwinferValueError: ``damping`` of the wrong shape, or ``pmus`` not distinct buses of ``net``.

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
    partition = partition_for(net, s_max, dt, GRID_DEFAULTS.bond)
    network = KuramotoNetwork(index, weight, damping, np.zeros(n))
    graph = grid_graph(
        network,
        partition,
        np.zeros((n, 3)) if first_frame is None else first_frame_state(partition, buses, first_frame),
        dt=dt,
        process_sd=GRID_DEFAULTS.process_sd(central=False),
        noise_sd=float(noise_sd),
        gamma=GRID_DEFAULTS.ukf_gamma,
        messages=messages,
        substeps=substeps,
    ).graph
    graph = dataclasses.replace(graph, output_names=network.output_names, input_names=network.input_names)
    program = twinfer.compile(graph, Distributed(), dt=float(dt))  # the field engine
    measured = set(buses)
    # one group per measured cluster, its channels as the frames name them
    groups = {
        cluster_name(partition, c): [
            f"{q}{b + 1}" for q in ("theta", "omega") for b in members if b in measured
        ]
        for c, members in enumerate(partition.clusters)
        if measured.intersection(int(b) for b in members)
    }
    channels = tuple(f"{q}{b + 1}" for q in ("theta", "omega") for b in buses)
    return GridTwin(program, partition, channels, groups)
