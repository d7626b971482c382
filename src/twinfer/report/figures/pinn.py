"""Figures of the PINN studies: recovered responses, parameter convergence, a posterior's pair plot.

Drawn from a run's arrays and the few numbers a figure needs (the DOFs to show, a title), so the sparse
sensing (Figs 4-8), joint estimation (Figs 9-12) and Bayesian (Figs 13-14) cases re-render from a run
folder.

References:
    Haywood-Alexander et al., arXiv:2410.01340, Figs 4-14 (specs/pinn.md 4.2-4.4).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def response_figures(arrays: Mapping[str, Any]) -> dict[str, Any]:
    """Recovered displacements at observed and unobserved DOFs, their error over time and DOF, the loss.

    Args:
        arrays: ``times``; ``truth_u`` and ``pinn_u`` (T, n); ``observed`` (1-based DOFs);
            ``history_epoch`` and ``history_loss``; optionally ``ukf_u`` (T, n), drawn beside the PINN.

    Returns:
        ``{"states", "error_contour", "loss"}``: the first and last observed DOFs and the last two DOFs
        (Fig 4), ``|u_PINN - u|`` over time and DOF (Fig 6), the training loss: matplotlib figures.

    """
    import matplotlib.pyplot as plt

    t = np.asarray(arrays["times"])
    truth, pinn = np.asarray(arrays["truth_u"]), np.asarray(arrays["pinn_u"])
    n = truth.shape[1]
    observed = [int(d) for d in np.asarray(arrays["observed"])]
    dofs = sorted({observed[0], observed[-1], n - 1 if n - 1 not in observed else n, n})
    fig, axes = plt.subplots(len(dofs), 1, figsize=(9, 2.0 * len(dofs)), sharex=True)
    for ax, d in zip(np.atleast_1d(axes), dofs, strict=True):
        ax.plot(t, truth[:, d - 1], "k", lw=0.8, label="truth")
        ax.plot(t, pinn[:, d - 1], "C1--", lw=0.8, label="PINN")
        if "ukf_u" in arrays:
            ax.plot(t, np.asarray(arrays["ukf_u"])[:, d - 1], "C2:", lw=0.8, label="UKF+RTS")
        ax.set_ylabel(f"u{d}{'' if d in observed else '*'} [m]")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend(loc="upper right", ncol=3, fontsize=7, frameon=False)
    np.atleast_1d(axes)[-1].set_xlabel("time [s]  (* unobserved)")
    fig_err, ax = plt.subplots(figsize=(9, 3.5))
    mesh = ax.pcolormesh(t, np.arange(1, n + 1), np.abs(pinn - truth).T, shading="auto", cmap="viridis")
    ax.axhline(max(observed) + 0.5, color="r", ls="--")
    ax.set_xlabel("time [s]")
    ax.set_ylabel("DOF")
    fig_err.colorbar(mesh, ax=ax, label="|u_PINN - u| [m]")
    fig_loss, ax = plt.subplots(figsize=(6, 3.5))
    ax.semilogy(np.asarray(arrays["history_epoch"]), np.asarray(arrays["history_loss"]))
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (chunk mean)")
    ax.grid(alpha=0.3)
    return {"states": fig, "error_contour": fig_err, "loss": fig_loss}


def parameter_figures(arrays: Mapping[str, Any], unobserved: Sequence[int]) -> dict[str, Any]:
    """Learned parameters over training relative to their truth, and the states at unobserved DOFs.

    Args:
        arrays: ``history_epoch``; ``param_history`` (epochs, p), ``param_true`` (p), ``param_names``;
            ``times``, ``truth_u`` and ``pinn_u`` (T, n).
        unobserved: the 1-based DOFs drawn in the second figure.

    Returns:
        ``{"parameters", "states_unobserved"}``: matplotlib figures (Figs 9-12).

    """
    import matplotlib.pyplot as plt

    epochs = np.asarray(arrays["history_epoch"])
    hist, true = np.asarray(arrays["param_history"]), np.asarray(arrays["param_true"])
    fig_p, ax = plt.subplots(figsize=(7, 3.5))
    for i, name in enumerate(np.asarray(arrays["param_names"])):
        ax.plot(epochs, hist[:, i] / true[i], label=str(name))
    ax.axhline(1.0, color="k", ls="--", lw=0.8)
    ax.set_xlabel("epoch")
    ax.set_ylabel("estimate / truth")
    ax.legend(frameon=False, fontsize=8)
    ax.grid(alpha=0.3)
    t = np.asarray(arrays["times"])
    truth, pinn = np.asarray(arrays["truth_u"]), np.asarray(arrays["pinn_u"])
    fig_s, axes = plt.subplots(len(unobserved), 1, figsize=(9, 4), sharex=True)
    for ax, d in zip(axes, unobserved, strict=True):
        ax.plot(t, truth[:, d - 1], "k", lw=0.8, label="truth")
        ax.plot(t, pinn[:, d - 1], "C1--", lw=0.8, label="PINN")
        ax.set_ylabel(f"u{d}* [m]")
        ax.grid(alpha=0.3)
    axes[0].legend(frameon=False, fontsize=7)
    axes[-1].set_xlabel("time [s]")
    return {"parameters": fig_p, "states_unobserved": fig_s}


def pairs_figure(samples: np.ndarray, names: Sequence[str], truth: np.ndarray, title: str) -> Any:
    """A posterior's pair plot: marginals with the truth, pairwise scatter, correlation coefficients.

    Args:
        samples: draws (..., q) with q >= len(names); the first ``len(names)`` columns are drawn.
        names: the parameters' names (p).
        truth: their true values (p), dashed on the marginals.
        title: the figure's title.

    Returns:
        The matplotlib figure: histograms on the diagonal, at most about 2000 thinned draws below it and
        the correlation coefficients above it.

    """
    import matplotlib.pyplot as plt

    flat = np.asarray(samples).reshape(-1, np.shape(samples)[-1])[:, : len(names)]
    corr = np.corrcoef(flat.T)
    p = len(names)
    fig, axes = plt.subplots(p, p, figsize=(2 * p, 2 * p))
    thin = flat[:: max(1, flat.shape[0] // 2000)]
    for i in range(p):
        for j in range(p):
            ax = axes[i, j]
            ax.tick_params(labelsize=5)
            if i == j:
                ax.hist(flat[:, i], bins=40, color="C0", alpha=0.8)
                ax.axvline(truth[i], color="k", ls="--", lw=0.8)
            elif i > j:
                ax.plot(thin[:, j], thin[:, i], ".", ms=1, alpha=0.3)
            else:
                ax.text(0.5, 0.5, f"{corr[i, j]:.2f}", ha="center", va="center", transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
            if i == p - 1:
                ax.set_xlabel(names[j], fontsize=7)
            if j == 0:
                ax.set_ylabel(names[i], fontsize=7)
    fig.suptitle(title)
    return fig
