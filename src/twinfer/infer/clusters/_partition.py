"""Generator-seeded greedy clustering of a coupled network into subsystems of at most ``s_max`` nodes.

specs/compositional-inference.md section 3.5 (S85-S87), with the authors' code's details ([REPO]):

1. one seed cluster per generator bus, in generator order;
2. sweeps over the clusters until none grows; each cluster below ``s_max`` adds at most one node per
   sweep: the unassigned node v maximising, lexicographically, the internal coupling
   ``w_int(c, v) = sum_{u in C} K_vu`` (> 0 required) and the ratio
   ``rho(c, v) = w_int / (sum_{u not in C} K_vu + eps)``;
3. every node still unassigned, in index order, joins the feasible cluster (size < ``s_max``, no
   ``w_int > 0`` required) that is best by the same criterion, or opens a singleton if all are full
   (a singleton may receive later nodes).

Ties go to the first candidate in index order (step 2) and the first cluster in cluster order (step 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class Partition:
    """Clusters of a network: ``labels[i]`` is the cluster of node i; ``clusters[c]`` its nodes."""

    labels: np.ndarray
    clusters: tuple[np.ndarray, ...]

    @property
    def n_clusters(self) -> int:
        return len(self.clusters)

    @property
    def mean_size(self) -> float:
        return float(np.mean([len(c) for c in self.clusters]))

    @property
    def max_size(self) -> int:
        return max(len(c) for c in self.clusters)


def partition_greedy(
    coupling: sp.csr_matrix, seeds: np.ndarray, s_max: int = 5, eps: float = 1e-12
) -> Partition:
    """Generator-seeded greedy partition (S85-S87).

    Args:
        coupling: symmetric non-negative coupling matrix ``K`` (N, N), zero diagonal.
        seeds: seed nodes (generator buses), unique, in order.
        s_max: largest cluster size.
        eps: regulariser of the ratio criterion.

    Returns:
        :class:`Partition`.

    Raises:
        ValueError: naming the argument, for a non-square coupling, seeds out of range or repeated, or
            ``s_max`` < 1.

    """
    k = sp.csr_matrix(coupling)
    shape: tuple[int, int] = k.get_shape()  # type: ignore[assignment]
    n = int(shape[0])
    if shape != (n, n):
        raise ValueError(f"partition coupling: expected a square matrix; received shape {shape}.")
    if s_max < 1:
        raise ValueError(f"partition s_max: expected >= 1; received {s_max}.")
    seeds = np.asarray(seeds, dtype=int)
    if seeds.size and (seeds.min() < 0 or seeds.max() >= n):
        raise ValueError(f"partition seeds: expected nodes in 0..{n - 1}; received {seeds.tolist()}.")
    if len(np.unique(seeds)) != len(seeds):
        raise ValueError("partition seeds: expected unique nodes; received repeated ones.")
    degree = np.asarray(k.sum(axis=1)).ravel()
    labels = np.full(n, -1)
    clusters: list[list[int]] = []
    for s in seeds:
        labels[s] = len(clusters)
        clusters.append([int(s)])

    def best(w: np.ndarray, nodes: np.ndarray) -> int:
        rho = w / (degree[nodes] - w + eps)
        return int(np.lexsort((-rho, -w))[0])  # w descending, then rho; ties keep index order

    grown = True
    while grown:
        grown = False
        for c in range(len(clusters)):
            if len(clusters[c]) >= s_max:
                continue
            rows = [slice(k.indptr[u], k.indptr[u + 1]) for u in clusters[c]]
            nbrs = np.concatenate([k.indices[r] for r in rows])
            weights = np.concatenate([k.data[r] for r in rows])  # K symmetric: K_uv = K_vu
            free = (labels[nbrs] < 0) & (weights > 0)
            if not np.any(free):
                continue
            cand, inverse = np.unique(nbrs[free], return_inverse=True)
            w = np.bincount(inverse, weights=weights[free], minlength=cand.size)
            v = int(cand[best(w, cand)])
            labels[v] = c
            clusters[c].append(v)
            grown = True

    for v in np.flatnonzero(labels < 0):
        sizes = np.array([len(c) for c in clusters])
        feasible = np.flatnonzero(sizes < s_max)
        if feasible.size == 0:
            labels[v] = len(clusters)
            clusters.append([int(v)])
            continue
        lo, hi = k.indptr[v], k.indptr[v + 1]
        nbr_labels, nbr_weights = labels[k.indices[lo:hi]], k.data[lo:hi]
        assigned = nbr_labels >= 0
        w_all = np.bincount(nbr_labels[assigned], weights=nbr_weights[assigned], minlength=len(clusters))
        w = w_all[feasible]
        rho = w / (degree[v] - w + eps)
        c = int(feasible[np.lexsort((-rho, -w))[0]])
        labels[v] = c
        clusters[c].append(int(v))

    return Partition(labels=labels, clusters=tuple(np.array(sorted(c)) for c in clusters))
