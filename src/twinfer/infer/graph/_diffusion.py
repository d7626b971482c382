"""Graph diffusion of a local defect over the subsystem graph: sensitivity envelopes without a filter run.

A defect at one subsystem (a removed stiffness, a mass left out: ``delta f(t)``, magnitude
``q = |delta f|``) spreads to its neighbours through the interfaces. With the subsystem graph's weighted
adjacency ``W`` (interface weights normalised by their sum, [REPO]: each interface's RMS force) and its
combinatorial Laplacian ``L = D - W``, two propagators give each subsystem's share ``s_i(t)`` of it:

* **1-hop** (S17-S18): ``s_source = q / (1 + alpha)``, ``s_j = eta_j alpha q / (1 + alpha)`` for each
  neighbour ``j`` of the source with ``eta_j = w_sj / sum_k w_sk``, zero elsewhere;
* **heat kernel** (S19): ``s = exp(-beta L)[:, source] q`` (the source column of ``H(beta)``).

Both conserve the defect (the shares sum to ``q``: ``L`` has zero column sums, and the 1-hop shares are
``q / (1 + alpha)`` plus ``alpha q / (1 + alpha)`` split by the affinities). A subsystem's envelope is its
baseline estimate plus and minus ``s_i`` times a state's standard deviation (S60-S70).

References:
    Ghorbani & Hackl, SI section 2.6, eqs. (S17)-(S19), and section 3.4 (S60-S70);
    specs/compositional-inference.md 2.6 and 3.4.

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from scipy.linalg import expm


def subsystem_laplacian(
    names: Sequence[str], weights: Mapping[tuple[str, str], float]
) -> tuple[np.ndarray, np.ndarray]:
    """The weighted adjacency ``W`` (normalised by the sum of the weights) and Laplacian ``L = D - W``.

    Args:
        names: the subsystems, in the order of the rows.
        weights: ``{(a, b): w >= 0}`` per interface (undirected; a pair given twice is an error).

    Raises:
        ValueError: for an unknown name, a self-loop, a repeated pair, or weights that are negative,
            non-finite or all zero.

    """
    index = {n: i for i, n in enumerate(names)}
    if len(index) != len(names):
        raise ValueError(f"subsystem_laplacian names: expected unique names; received {list(names)}.")
    n = len(names)
    w = np.zeros((n, n))
    for (a, b), value in weights.items():
        bad = [x for x in (a, b) if x not in index]
        if bad:
            raise ValueError(
                f"subsystem_laplacian weights: unknown subsystems {bad}; expected among {list(names)}."
            )
        if a == b:
            raise ValueError(
                f"subsystem_laplacian weights: expected pairs of two subsystems; received ({a!r}, {b!r})."
            )
        i, j = index[a], index[b]
        if w[i, j]:
            raise ValueError(f"subsystem_laplacian weights: the pair ({a!r}, {b!r}) is given twice.")
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(
                f"subsystem_laplacian weights[({a!r}, {b!r})]: expected a finite value >= 0; "
                f"received {value}."
            )
        w[i, j] = w[j, i] = float(value)
    total = w.sum() / 2.0
    if not total > 0:
        raise ValueError("subsystem_laplacian weights: expected at least one positive weight; received none.")
    w = w / total
    return w, np.diag(w.sum(axis=1)) - w


def diffuse(
    names: Sequence[str],
    weights: Mapping[tuple[str, str], float],
    source: str,
    defect: Any,
    method: Literal["one_hop", "heat"] = "one_hop",
    *,
    alpha: float = 0.6,
    beta: float = 0.9,
) -> dict[str, np.ndarray]:
    """Each subsystem's share of a defect at ``source``: ``{name: s (T,)}`` (or scalars for a scalar).

    Args:
        names: the subsystems.
        weights: the interfaces' weights (:func:`subsystem_laplacian`).
        source: the subsystem where the defect acts.
        defect: ``delta f`` over time (T,) or one value; its magnitude ``|delta f|`` is spread.
        method: ``"one_hop"`` (S17-S18) or ``"heat"`` (S19).
        alpha: the 1-hop leak to the neighbours, > 0 (the paper's 0.6).
        beta: the heat kernel's diffusion time, > 0 (the paper's 0.9).

    Raises:
        ValueError: for an unknown source or method, non-finite defect values, or alpha/beta <= 0.

    """
    if source not in names:
        raise ValueError(f"diffuse source: expected one of {list(names)}; received {source!r}.")
    if method not in ("one_hop", "heat"):
        raise ValueError(f"diffuse method: expected 'one_hop' or 'heat'; received {method!r}.")
    for label, value in (("alpha", alpha), ("beta", beta)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"diffuse {label}: expected a finite value > 0; received {value}.")
    q = np.abs(np.asarray(defect, dtype=np.float64))
    if not np.all(np.isfinite(q)):
        raise ValueError("diffuse defect: expected finite values; received a non-finite one.")
    w, lap = subsystem_laplacian(names, weights)
    k = list(names).index(source)
    if method == "heat":
        share = expm(-beta * lap)[:, k]
    else:
        row = w[k]
        share = alpha * row / row.sum() / (1.0 + alpha) if row.sum() > 0 else np.zeros(len(names))
        share[k] = 1.0 / (1.0 + alpha) if row.sum() > 0 else 1.0
    return {n: share[i] * q for i, n in enumerate(names)}
