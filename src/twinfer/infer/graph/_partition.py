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
from scipy.sparse.csgraph import connected_components


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
    coupling: sp.csr_matrix,
    seeds: np.ndarray,
    s_max: int = 5,
    eps: float = 1e-12,
    bond: float | None = None,
    joined: np.ndarray | None = None,
) -> Partition:
    """Generator-seeded greedy partition (S85-S87), optionally never cutting the stiffest edges.

    Args:
        coupling: symmetric non-negative coupling matrix ``K`` (N, N), zero diagonal.
        seeds: seed nodes (generator buses), unique, in order.
        s_max: largest cluster size.
        eps: regulariser of the ratio criterion.
        bond: edges with ``K >= bond`` are never cut (None: the paper's partition). The nodes they join
            move as one: the greedy runs on the network with each such group contracted to one node of
            its size, a group joins a cluster only where it fits in ``s_max``, and a group larger than
            ``s_max`` is a cluster of its own. :func:`bond_for_step` gives the coupling a Jacobi exchange
            at a step ``dt`` cannot follow.
        joined: node pairs (P, 2) never cut either, whatever their coupling (a grid twin's unmeasured
            bus and its stiffest neighbour: :func:`~twinfer.infer.graph._grid.partition_for`).

    Returns:
        :class:`Partition`.

    Raises:
        ValueError: naming the argument, for a non-square coupling, seeds out of range or repeated,
            ``s_max`` < 1, or a bond that is not positive.

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
    pairs = np.zeros((0, 2), int) if joined is None else np.asarray(joined, dtype=int).reshape(-1, 2)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ValueError(f"partition joined: expected node pairs in 0..{n - 1}; received {pairs.tolist()}.")
    if bond is None and not pairs.size:
        return _greedy(k, seeds, np.ones(n, dtype=int), s_max, eps)
    if bond is not None and not bond > 0:
        raise ValueError(f"partition bond: expected a positive coupling or None; received {bond}.")
    strong = sp.csr_matrix(k.multiply(k >= bond)) if bond is not None else sp.csr_matrix((n, n))
    strong = strong + sp.csr_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    groups, group = connected_components(strong, directed=False)
    member = sp.csr_matrix((np.ones(n), (np.arange(n), group)), shape=(n, groups))
    contracted = sp.csr_matrix(member.T @ k @ member)
    contracted.setdiag(0.0)
    contracted.eliminate_zeros()
    _, first = np.unique(group[seeds], return_index=True)  # one seed per group, in generator order
    quotient = _greedy(
        contracted, group[seeds][np.sort(first)], np.bincount(group, minlength=groups), s_max, eps
    )
    labels = quotient.labels[group]
    clusters = tuple(np.flatnonzero(labels == c) for c in range(quotient.n_clusters))
    return Partition(labels=labels, clusters=clusters)


def bond_for_step(dt: float, limit: float = 1.0) -> float:
    """The coupling ``K`` above which a cut edge's two-bus mode is too fast for an exchange every ``dt``.

    Two buses joined by ``K`` swing against each other at about ``sqrt(2 K)`` rad/s (a leaf bus on its
    neighbour). Cut, the edge is exchanged once per step: the neighbour's phase is held or predicted over
    ``dt``, an explicit coupling that loses the mode once ``dt sqrt(2 K)`` nears 2 (the Jacobi estimate of
    ``case1888rte`` at dt = 0.01 diverged at seed 0 through edges of K = 2e4, ``dt sqrt(2 K)`` = 2, at
    every sub-step count but one). Returns ``limit^2 / (2 dt^2)``: 5,000 at dt = 0.01, above every edge
    of the paper's IEEE cases.
    """
    if not dt > 0:
        raise ValueError(f"bond_for_step dt: expected a positive step; received {dt}.")
    return limit**2 / (2.0 * dt**2)


def _greedy(k: sp.csr_matrix, seeds: np.ndarray, size: np.ndarray, s_max: int, eps: float) -> Partition:
    """S85-S87 on nodes of the given sizes (all 1: the paper's); a node joins a cluster only where it fits."""
    n = int(k.shape[0])  # type: ignore[index]
    degree = np.asarray(k.sum(axis=1)).ravel()
    labels = np.full(n, -1)
    clusters: list[list[int]] = []
    filled: list[int] = []
    for s in seeds:
        labels[s] = len(clusters)
        clusters.append([int(s)])
        filled.append(int(size[s]))

    def best(w: np.ndarray, nodes: np.ndarray) -> int:
        rho = w / (degree[nodes] - w + eps)
        return int(np.lexsort((-rho, -w))[0])  # w descending, then rho; ties keep index order

    grown = True
    while grown:
        grown = False
        for c in range(len(clusters)):
            if filled[c] >= s_max:
                continue
            rows = [slice(k.indptr[u], k.indptr[u + 1]) for u in clusters[c]]
            nbrs = np.concatenate([k.indices[r] for r in rows])
            weights = np.concatenate([k.data[r] for r in rows])  # K symmetric: K_uv = K_vu
            free = (labels[nbrs] < 0) & (weights > 0) & (filled[c] + size[nbrs] <= s_max)
            if not np.any(free):
                continue
            cand, inverse = np.unique(nbrs[free], return_inverse=True)
            w = np.bincount(inverse, weights=weights[free], minlength=cand.size)
            v = int(cand[best(w, cand)])
            labels[v] = c
            clusters[c].append(v)
            filled[c] += int(size[v])
            grown = True

    for v in np.flatnonzero(labels < 0):
        feasible = np.flatnonzero(np.asarray(filled) + size[v] <= s_max)
        if feasible.size == 0:
            labels[v] = len(clusters)
            clusters.append([int(v)])
            filled.append(int(size[v]))
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
        filled[c] += int(size[v])

    return Partition(labels=labels, clusters=tuple(np.array(sorted(c)) for c in clusters))
