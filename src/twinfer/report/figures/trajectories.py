"""Predicted trajectories against the ground truth, and the training losses behind them.

Figures of the model-combination studies (the bouncing ball's hybrid topologies, the common-interface
comparison of learned models): the x and y positions of the truth and of each model's prediction, per
scenario, drawn from a run's arrays.

References:
    Thummerer & Mikelsons, model-combination paper, sec. 5 and Fig. 17 (specs/model-combination.md
    3.1-3.8).

"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

POSITIONS = ((0, "s_x [m]"), (2, "s_y [m]"))
"""(state index, axis label) of the positions drawn: a 2-D ball's state is (s_x, v_x, s_y, v_y)."""


def _predictions(
    ax: Any, t: np.ndarray, predictions: Sequence[tuple[str, np.ndarray | None]], idx: int, lw: float
) -> None:
    """Each model's prediction of state ``idx`` in C0, C1, ... (one left out keeps its colour)."""
    for j, (name, pred) in enumerate(predictions):
        if pred is not None:
            ax.plot(t, pred[:, idx], f"C{j}", lw=lw, label=name)


def trajectories_figure(
    t: np.ndarray,
    truth: np.ndarray,
    predictions: Sequence[tuple[str, np.ndarray | None]],
    losses: Sequence[tuple[str, np.ndarray | None]],
) -> Any:
    """Positions of the truth and each model, and each model's training-loss curve (Fig. 17).

    Args:
        t: times (T,).
        truth: the true states (T, 4).
        predictions: (model name, predicted states (T, 4) or None where it did not run), in colour order.
        losses: (model name, loss per training step or None), in the same order.

    Returns:
        The matplotlib figure.

    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (idx, label) in zip(axes, POSITIONS, strict=False):
        ax.plot(t, truth[:, idx], "k", lw=1.6, label="ground truth")
        _predictions(ax, t, predictions, idx, 1.0)
        ax.set_xlabel("time [s]")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for j, (name, loss) in enumerate(losses):
        if loss is not None:
            axes[2].semilogy(loss, f"C{j}", lw=0.8, label=name)
    axes[2].set_xlabel("Adam step")
    axes[2].set_ylabel("training loss (current horizon)")
    axes[2].grid(alpha=0.3)
    axes[0].legend(fontsize=7, frameon=False)
    axes[2].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def scenario_trajectories_figure(
    t: np.ndarray,
    truth: np.ndarray,
    physics: np.ndarray,
    predictions: Sequence[tuple[str, np.ndarray | None]],
    test: int,
) -> Any:
    """Positions per scenario: the truth, the physics model and each model's prediction.

    Args:
        t: times (T,).
        truth: the true states (S, T, 4) of S scenarios.
        physics: the physics model's states (S, T, 4).
        predictions: (model name, predicted states (S, T, 4) or None where it did not run), in colour order.
        test: the index of the held-out test scenario (so labelled).

    Returns:
        The matplotlib figure.

    """
    import matplotlib.pyplot as plt

    n = truth.shape[0]
    fig, axes = plt.subplots(n, 2, figsize=(11, 13 * n / 5), sharex=True, squeeze=False)
    for s in range(n):
        for col, (idx, label) in enumerate(POSITIONS):
            ax = axes[s, col]
            ax.plot(t, truth[s, :, idx], "k", lw=1.4, label="ground truth")
            ax.plot(t, physics[s, :, idx], "k--", lw=1.0, label="physics model")
            _predictions(ax, t, [(name, None if p is None else p[s]) for name, p in predictions], idx, 0.9)
            ax.set_ylabel(f"{label} (s{s + 1}{', test' if s == test else ''})", fontsize=8)
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, ncol=4, frameon=False)
    axes[-1, 0].set_xlabel("time [s]")
    axes[-1, 1].set_xlabel("time [s]")
    return fig
