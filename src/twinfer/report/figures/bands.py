"""Estimates with their uncertainty bands: a mean and ``mean +- z sd`` per state, or a particle band.

The figures several case studies share: each run's estimate of one quantity with its band (the runs'
arrays hold ``<label>.names`` / ``<label>.means`` / ``<label>.stds``), states with a 2-sd band against the
truth, and a test output with the 5-95 % band of the posterior particles' simulations (the arrays of
:func:`particle_band_arrays`), optionally with the error panel below it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def mean_band(
    ax: Any,
    t: np.ndarray,
    mean: np.ndarray,
    half: np.ndarray,
    color: str,
    *,
    label: str | None = None,
    band_label: str | None = None,
    lw: float = 0.8,
    ls: str = "-",
    alpha: float = 0.2,
) -> None:
    """A mean line and the band ``mean +- half`` below it, in one colour.

    Args:
        ax: the matplotlib axes.
        t: times (T,).
        mean: the estimate (T,).
        half: the band's half-width (T,): ``z * sd`` for a Gaussian band of ``z`` sds.
        color: matplotlib colour of both.
        label: legend label of the line.
        band_label: legend label of the band (none by default).
        lw: line width.
        ls: line style.
        alpha: the band's opacity.

    """
    ax.plot(t, mean, color=color, lw=lw, ls=ls, label=label)
    ax.fill_between(t, mean - half, mean + half, color=color, alpha=alpha, label=band_label)


def plot_estimates(ax: Any, arrays: Mapping[str, Any], labels: Iterable[str], name: str, band: float) -> None:
    """Each run's estimate of ``name`` against ``arrays["t"]``, with its band of ``band`` sds.

    ``arrays`` holds, per label, ``<label>.names``, ``<label>.means`` and ``<label>.stds``; runs are drawn
    in C0, C1, ...
    """
    t = np.asarray(arrays["t"])
    for k, lab in enumerate(labels):
        names = [str(n) for n in np.asarray(arrays[f"{lab}.names"])]
        j = names.index(name)
        m, sd = np.asarray(arrays[f"{lab}.means"])[:, j], np.asarray(arrays[f"{lab}.stds"])[:, j]
        mean_band(ax, t, m, band * sd, f"C{k}", label=lab, lw=1)


def state_bands_figure(
    t: np.ndarray,
    mean: np.ndarray,
    sd: np.ndarray,
    truth: np.ndarray,
    ylabels: Sequence[str],
    title: str = "",
) -> Any:
    """One panel per state: its 2-sd band, the truth and the mean, over ``t``.

    Args:
        t: times (T,).
        mean: the estimated states (T, n).
        sd: their standard deviations (T, n).
        truth: the true states (T, n).
        ylabels: one axis label per state (n).
        title: the top panel's title.

    Returns:
        The matplotlib figure.

    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(ylabels), 1, figsize=(9, 7 * len(ylabels) / 3), sharex=True, squeeze=False)
    for j, (ax, label) in enumerate(zip(axes[:, 0], ylabels, strict=True)):
        ax.fill_between(t, mean[:, j] - 2 * sd[:, j], mean[:, j] + 2 * sd[:, j], alpha=0.35, label="2 sd")
        ax.plot(t, truth[:, j], "k", lw=0.5, label="truth")
        ax.plot(t, mean[:, j], "C1--", lw=0.5, label="posterior mean")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, frameon=False, loc="upper right", ncol=3)
    if title:
        axes[0, 0].set_title(title)
    axes[-1, 0].set_xlabel("time [s]")
    fig.tight_layout()
    return fig


def particle_band_arrays(name: str, truth: np.ndarray, sims: np.ndarray) -> dict[str, np.ndarray]:
    """The figures' arrays of a test: its measured output, and the 5-95 % band and mean of ``sims`` (N, T)."""
    return {
        f"{name}_truth": truth,
        f"{name}_sim_q05": np.quantile(sims, 0.05, axis=0),
        f"{name}_sim_q95": np.quantile(sims, 0.95, axis=0),
        f"{name}_sim_mean": sims.mean(axis=0),
    }


def _particle_band(
    ax: Any, arrays: Mapping[str, Any], name: str, fs: float, truth_label: str
) -> tuple[np.ndarray, ...]:
    """Draw test ``name``'s particle band, its output and the particle mean; return (t, y, lo, hi, mean)."""
    y = np.asarray(arrays[f"{name}_truth"])
    t = np.arange(y.size) / fs
    lo, hi, mean = (np.asarray(arrays[f"{name}_sim_{s}"]) for s in ("q05", "q95", "mean"))
    ax.fill_between(t, lo, hi, alpha=0.4, label="particles 5-95%")
    ax.plot(t, y, "k", lw=0.5, label=truth_label)
    ax.plot(t, mean, "C1--", lw=0.5, label="particle mean")
    ax.legend(fontsize=7, frameon=False, loc="upper right")
    return t, y, lo, hi, mean


def particle_band_figure(
    arrays: Mapping[str, Any], name: str, fs: float, ylabel: str, key: str = "test_fit", title: str = ""
) -> dict[str, Any]:
    """Test output with the particle band, and below it the band minus the measured output.

    The lower panel shows the error where the band is too thin to see on the output's scale.

    Args:
        arrays: the run's arrays (:func:`particle_band_arrays` of test ``name``).
        name: the test's name in the arrays.
        fs: sampling rate of the test output [Hz].
        ylabel: the output's axis label.
        key: the figure's name.
        title: the top panel's title.

    Returns:
        ``{key: figure}``, or empty if the arrays hold no such test.

    """
    import matplotlib.pyplot as plt

    if f"{name}_truth" not in arrays:
        return {}
    fig, (ax, ax_err) = plt.subplots(2, 1, figsize=(9, 5), sharex=True, height_ratios=(2, 1))
    t, y, lo, hi, mean = _particle_band(ax, arrays, name, fs, "measured")
    ax.set_ylabel(ylabel)
    ax_err.fill_between(t, lo - y, hi - y, alpha=0.4)
    ax_err.plot(t, mean - y, "C1", lw=0.5)
    ax_err.axhline(0.0, color="k", lw=0.5)
    ax_err.set_ylabel("simulated - measured", fontsize=8)
    ax_err.set_xlabel("time in test window [s]")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return {key: fig}


def particle_bands_figure(
    arrays: Mapping[str, Any], names: Sequence[str], fs: float, ylabels: Sequence[str], truth_label: str
) -> Any:
    """One panel per test in ``names``: output, particle band and mean (a panel stays empty if absent).

    Args:
        arrays: the run's arrays (:func:`particle_band_arrays` of each test).
        names: the tests' names in the arrays.
        fs: sampling rate of the test outputs [Hz].
        ylabels: one axis label per test.
        truth_label: the legend label of the true output.

    Returns:
        The matplotlib figure.

    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(names), 1, figsize=(9, 3 * len(names)), squeeze=False)
    for ax, name, ylabel in zip(axes[:, 0], names, ylabels, strict=True):
        if f"{name}_truth" not in arrays:
            continue
        _particle_band(ax, arrays, name, fs, truth_label)
        ax.set_ylabel(ylabel)
    axes[-1, 0].set_xlabel("time [s]")
    fig.tight_layout()
    return fig


def error_band_figure(
    arrays: Mapping[str, Any], name: str, fs: float, ylabel: str, key: str = "test_band_pn"
) -> dict[str, Any]:
    """A prediction's error (measured minus mean) inside its own 2-sd band, centred on zero.

    Args:
        arrays: the run's arrays: ``<name>_truth``, ``<name>_pn_mean`` and ``<name>_pn_sd`` (T,).
        name: the test's name in the arrays.
        fs: sampling rate [Hz].
        ylabel: the output's axis label.
        key: the figure's name.

    Returns:
        ``{key: figure}``, or empty if the arrays hold no such prediction.

    """
    import matplotlib.pyplot as plt

    if f"{name}_pn_mean" not in arrays:
        return {}
    y = np.asarray(arrays[f"{name}_truth"])
    mean, sd = np.asarray(arrays[f"{name}_pn_mean"]), np.asarray(arrays[f"{name}_pn_sd"])
    t = np.arange(y.size) / fs
    fig, ax = plt.subplots(figsize=(9, 3))
    ax.fill_between(t, -2 * sd, 2 * sd, alpha=0.35, label="posterior +- 2 sd (PN mixture + noise)")
    ax.plot(t, y - mean, "k", lw=0.3, label="measured - posterior mean")
    ax.set_xlabel("time in test window [s]")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    fig.tight_layout()
    return {key: fig}
