"""Padded cluster batches: one vmapped local estimator step for every cluster of a large network."""

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

__all__ = [
    "ClusterLayout",
    "GridFilterOutput",
    "cluster_layout",
    "external_force_variance",
    "external_sums",
    "heun_transition",
    "pad_layout",
    "predicted_external_sums",
    "run_clusters",
    "stable_substeps",
    "substep_groups",
]
