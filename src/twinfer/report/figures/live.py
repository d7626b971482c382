"""Figures of a live twin's condition monitoring: a parameter's posterior track and the innovation test.

Drawn from a run's arrays alone (the ``live-damage`` case): the damaged stiffness's posterior mean with
its 95 % band against the truth, the damage onset and the drift alarm; and each sensor's mean squared
standardised innovation over short blocks, with the sensor's fault and the innovation alarm.

References:
    Bar-Shalom, Li & Kirubarajan, Estimation with Applications to Tracking and Navigation (2001),
    Sec. 5.4 (the normalised innovation test behind the second figure).

"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from twinfer.metrics import band_z


def _mark(ax: Any, t: float, label: str, style: str) -> None:
    """A vertical line at ``t`` (nothing where ``t`` is NaN: no such event)."""
    if np.isfinite(t):
        ax.axvline(t, color="0.4" if style == "--" else "k", ls=style, lw=1.0, label=label)


def drift_track_figure(
    t: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    truth: np.ndarray,
    name: str,
    onset: float,
    alarm: float,
) -> Any:
    """The posterior track of one unknown: mean, 95 % band, the truth, the change and the drift alarm.

    Args:
        t: times [s] (T,).
        mean: posterior mean (T,).
        std: posterior sd (T,).
        truth: the true value at each time (T,).
        name: the unknown's name (the y label).
        onset: when the true value changed [s] (NaN: never).
        alarm: when the drift alarm naming it was raised [s] (NaN: never).

    Returns:
        The matplotlib figure.

    """
    import matplotlib.pyplot as plt

    z = band_z(0.95)
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.fill_between(t, mean - z * std, mean + z * std, color="C0", alpha=0.25, lw=0, label="95 % band")
    ax.plot(t, mean, "C0", lw=1.0, label="posterior mean")
    ax.plot(t, truth, "k", lw=1.0, label="truth")
    _mark(ax, onset, "stiffness loss", "--")
    _mark(ax, alarm, "drift alarm", "-")
    ax.set_xlabel("time [s]")
    ax.set_ylabel(f"{name} [N/m]")
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return fig


def innovation_figure(
    t: np.ndarray,
    z2: np.ndarray,
    names: Sequence[str],
    fault: float,
    alarm: float,
    sensor: str,
    ylabel: str = "mean squared standardised innovation",
) -> Any:
    """Each sensor's mean squared standardised innovation over blocks, the fault and the alarm.

    Args:
        t: the blocks' end times [s] (B,).
        z2: mean of the squared standardised innovations per block and sensor (B, m); 1 under a model
            that fits (chi-square over the block's values divided by their number).
        names: the sensors (m).
        fault: when the sensor failed [s].
        alarm: when the innovation alarm naming it was raised [s] (NaN: never).
        sensor: the failed sensor's name.
        ylabel: what ``z2`` is (another block statistic that is 1 under a model that fits).

    Returns:
        The matplotlib figure.

    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for j, name in enumerate(names):
        ax.semilogy(t, z2[:, j], f"C{j}", lw=1.2 if name == sensor else 0.7, label=name)
    ax.axhline(1.0, color="0.5", lw=0.8)
    _mark(ax, fault, f"{sensor} stuck", "--")
    _mark(ax, alarm, "innovation alarm", "-")
    ax.set_xlabel("time [s]")
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper left", ncol=3, fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return fig
