"""Grid clusters: a network's greedy partition, and the partitioned network as a compositional graph.

The estimation itself is the graph engine's (:mod:`twinfer.infer.graph`, a :class:`~twinfer.infer.graph.Field`
coupling the clusters); what is specific to power networks lives here: the partition, the clusters'
sub-step groups and the graph built from a :class:`~twinfer.models.KuramotoNetwork`.
"""

from twinfer.infer.clusters._graph import (
    ClusterGraph,
    bus_values,
    kuramoto_graph,
    stable_substeps,
    substep_groups,
    wrapped_innovation,
)
from twinfer.infer.clusters._partition import Partition, bond_for_step, partition_greedy

__all__ = [
    "ClusterGraph",
    "Partition",
    "bond_for_step",
    "bus_values",
    "kuramoto_graph",
    "partition_greedy",
    "stable_substeps",
    "substep_groups",
    "wrapped_innovation",
]
