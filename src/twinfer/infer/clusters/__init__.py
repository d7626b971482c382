"""Grid clusters: a network's greedy partition, and padded cluster batches stepped by one vmapped filter."""

from twinfer.infer.clusters._kuramoto import (
    ClusterLayout,
    GridFilterOutput,
    cluster_layout,
    external_force_variance,
    external_sums,
    heun_transition,
    pad_layout,
    predicted_external_sums,
    run_clusters,
    stable_substeps,
    substep_groups,
)
from twinfer.infer.clusters._partition import Partition, partition_greedy

__all__ = [
    "ClusterLayout",
    "GridFilterOutput",
    "Partition",
    "cluster_layout",
    "external_force_variance",
    "external_sums",
    "heun_transition",
    "pad_layout",
    "partition_greedy",
    "predicted_external_sums",
    "run_clusters",
    "stable_substeps",
    "substep_groups",
]
