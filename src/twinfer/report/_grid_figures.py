"""Figures of the power-grid study: bus frequencies with their bands, accuracy bars, the cluster map.

Drawn from a run's arrays (the ``grid`` case's and a grid spec's: ``truth``, ``labels`` and the
``<prefix>_mean`` / ``<prefix>_std`` per bus of each estimator that ran, :data:`GRID_ESTIMATORS`).

References:
    Ghorbani & Hackl, SI Fig. S9(b,c) (specs/compositional-inference.md 3.5).

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from twinfer.data import load_grid
from twinfer.infer.graph._grid import GRID_ESTIMATORS, GRID_LABELS
from twinfer.metrics import band_z, rmse

Z95 = band_z(0.95)


def grid_figures(arrays: Mapping[str, Any], *, case: str, dt: float, s_max: int) -> dict[str, Any]:
    """Frequency at three buses (estimate, 95% band, truth), Fig. S9(b,c)'s bars, the cluster map.

    Args:
        arrays: the run's arrays (``truth`` (T+1, 2N) from t_0, ``labels`` (N,), and the estimators'
            ``<prefix>_mean`` / ``<prefix>_std`` (T, N, 3) at t_1..t_T).
        case: the network (a name :func:`~twinfer.data.load_grid` loads, or its file).
        dt: the time step.
        s_max: the largest cluster of the partition (named in the map's title).

    Returns:
        ``{"frequencies", "estimators", "clusters"}``: matplotlib figures.

    """
    import matplotlib.pyplot as plt

    truth = np.asarray(arrays["truth"])
    n = truth.shape[1] // 2
    t = dt * np.arange(1, truth.shape[0])
    buses = sorted({min(n - 1, b) for b in (n // 7, n // 2, (5 * n) // 6)})
    fig, axes = plt.subplots(len(buses), 1, figsize=(9, 2.4 * len(buses)), sharex=True, squeeze=False)
    for ax, b in zip(axes[:, 0], buses, strict=True):
        ax.plot(t, truth[1:, n + b], "k", lw=1.0, label="truth")
        for name, color in (("distributed", "C1"), ("central", "C0"), ("wls", "C2")):
            if f"{name}_mean" not in arrays:
                continue
            mean = np.asarray(arrays[f"{name}_mean"])[:, b, 1]
            sd = np.asarray(arrays[f"{name}_std"])[:, b, 1]
            ax.fill_between(t, mean - Z95 * sd, mean + Z95 * sd, color=color, alpha=0.2)
            label = "WLS" if name == "wls" else f"{name} UKF"
            ax.plot(t, mean, color=color, lw=0.8, ls="--", label=f"{label} (95% band)")
        ax.set_ylabel(f"omega, bus {b + 1} [rad/s]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False, ncol=3, loc="upper right")
    axes[-1, 0].set_xlabel("time [s]")
    axes[0, 0].set_title(f"grid {case}: bus frequencies")
    figs = {"frequencies": fig, "estimators": _accuracy_bars(arrays)}
    figs["clusters"] = _cluster_map(case, s_max, np.asarray(arrays["labels"]))
    return figs


def _accuracy_bars(arrays: Mapping[str, Any]) -> Any:
    """Fig. S9(b,c): mean over buses of the RMSE of theta (wrapped) and omega for every estimator that ran."""
    import matplotlib.pyplot as plt

    truth = np.asarray(arrays["truth"])
    n = truth.shape[1] // 2
    ran = [p for p in GRID_ESTIMATORS if f"{p}_mean" in arrays]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for k, (ax, name) in enumerate(zip(axes, ("theta [rad]", "omega [rad/s]"), strict=True)):
        period = 2 * np.pi if k == 0 else None
        true = truth[1:, k * n : (k + 1) * n]
        values = [
            float(np.mean(rmse(np.asarray(arrays[f"{p}_mean"])[:, :, k], true, axis=0, period=period)))
            for p in ran
        ]
        ax.bar(range(len(ran)), values, color=[f"C{i}" for i in range(len(ran))])
        ax.set_xticks(range(len(ran)), [GRID_LABELS[p] for p in ran], rotation=35, ha="right", fontsize=7)
        ax.set_title(f"mean RMSE of {name}", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def _cluster_map(case: str, s_max: int, labels: np.ndarray) -> Any:
    """The network drawn with a force-directed layout, buses coloured by cluster.

    Up to 3,000 buses the layout places every bus; above, it places the clusters (the quotient graph:
    clusters joined where any of their buses are) and draws each cluster's buses on a small ring around
    its position, so PEGASE 9241 is laid out in seconds instead of the minutes a bus-level layout takes.
    """
    import matplotlib.pyplot as plt
    import networkx as nx
    from matplotlib.collections import LineCollection

    net = load_grid(case)
    k = net.coupling.tocoo()
    upper = k.row < k.col
    rows, cols = k.row[upper], k.col[upper]
    if net.n_bus <= 3000:
        graph = nx.Graph()
        graph.add_nodes_from(range(net.n_bus))
        graph.add_edges_from(zip(rows.tolist(), cols.tolist(), strict=True))
        pos = nx.spring_layout(graph, seed=0, iterations=50 if net.n_bus > 500 else 200)
        xy = np.array([pos[i] for i in range(net.n_bus)])
    else:
        quotient = nx.Graph()
        quotient.add_nodes_from(range(int(labels.max()) + 1))
        across = labels[rows] != labels[cols]
        quotient.add_edges_from(
            zip(labels[rows][across].tolist(), labels[cols][across].tolist(), strict=True)
        )
        pos = nx.spring_layout(quotient, seed=0, iterations=50)
        centre = np.array([pos[c] for c in range(quotient.number_of_nodes())])
        spread = 0.25 * np.median(np.linalg.norm(np.diff(centre, axis=0), axis=1))
        order = np.argsort(labels, kind="stable")
        counts = np.bincount(labels, minlength=len(centre))
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(net.n_bus)
        rank[order] = (np.arange(net.n_bus) - first[labels[order]]) / counts[labels[order]]
        angle = 2 * np.pi * rank
        xy = centre[labels] + spread * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    fig, ax = plt.subplots(figsize=(7, 7))
    segments = np.stack([xy[rows], xy[cols]], axis=1)
    ax.add_collection(LineCollection(list(segments), colors="0.8", linewidths=0.4, zorder=1))
    ax.scatter(xy[:, 0], xy[:, 1], c=labels % 20, cmap="tab20", s=max(1, 400 // np.sqrt(net.n_bus)), zorder=2)
    gen_size = 30 if net.n_bus <= 3000 else 6
    ax.scatter(
        xy[net.gen_buses, 0], xy[net.gen_buses, 1], facecolors="none", edgecolors="k", s=gen_size, lw=0.5
    )
    ax.set_title(f"{case}: {labels.max() + 1} clusters (S_max = {s_max}); circles: generators")
    ax.set_axis_off()
    return fig
