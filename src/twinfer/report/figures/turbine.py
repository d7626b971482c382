"""Figures of the hydro-turbine studies: a Pelton unit's estimators, and turbines inside a grid.

Drawn from a run's arrays and the few numbers a figure needs (the coefficients' names, a window length),
so the standalone unit (Figs S10-S12) and the turbines in the IEEE 9-bus network (Fig. S14 and two zooms)
re-render from a run folder.

References:
    Ghorbani & Hackl, SI Figs S10-S12 and S14 (specs/compositional-inference.md 3.6-3.7).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from twinfer.metrics import band_z
from twinfer.report.figures.bands import mean_band, plot_estimates

UNIT_SHOWN = ("omega", "h", "x_n", "x_G", "x_R", "alpha")
"""The unit's states drawn by :func:`turbine_figures`."""
_TAIL = ("x_G", "x_R", "alpha")
"""The fast states, drawn over the record's tail only."""


def _names(arrays: Mapping[str, Any], key: str) -> list[str]:
    return [str(n) for n in np.asarray(arrays[key])]


def turbine_figures(
    arrays: Mapping[str, Any], coefficients: Sequence[str], tail_window: float
) -> dict[str, Any]:
    """A Pelton unit's states with 95 % bands against the truth, its coefficients, its NARX's fit.

    Args:
        arrays: ``t``, ``truth`` (T, n) with ``truth.names``; per estimator label (``distributed``,
            optionally ``central``) ``<label>.means``, ``<label>.stds``, ``<label>.names``; the NARX's
            ``narx.train_loss`` and ``narx.val_loss`` per epoch (the distributed estimate holds ``h``).
        coefficients: the estimated scaled coefficients (truth 1.0), one panel each.
        tail_window: the fast states (x_G, x_R, alpha) are drawn over the last ``max(5, tail_window)`` s.

    Returns:
        ``{"states", "parameters", "narx"}``: matplotlib figures.

    """
    import matplotlib.pyplot as plt

    t = np.asarray(arrays["t"])
    z = band_z(0.95)  # the 95 % band's half-width in sds
    truth = np.asarray(arrays["truth"])
    truth_names = _names(arrays, "truth.names")
    labels = [lab for lab in ("distributed", "central") if f"{lab}.means" in arrays]
    out: dict[str, Any] = {}
    tail = t >= t[-1] - max(5.0, tail_window)
    fig, axes = plt.subplots(len(UNIT_SHOWN), 1, figsize=(10, 2.2 * len(UNIT_SHOWN)), sharex=False)
    for ax, s in zip(axes, UNIT_SHOWN, strict=True):
        window = tail if s in _TAIL else slice(None)
        ax.plot(t[window], truth[window, truth_names.index(s)], "k", lw=1, label="truth")
        for lab, color in zip(labels, ("C0", "C1"), strict=False):
            names = _names(arrays, f"{lab}.names")
            if s not in names:
                continue
            j = names.index(s)
            m, sd = (np.asarray(arrays[f"{lab}.{k}"])[window, j] for k in ("means", "stds"))
            mean_band(ax, t[window], m, z * sd, color, label=lab, alpha=0.25)
        ax.set_ylabel(s)
    axes[0].legend(fontsize=8, loc="upper right")
    axes[-1].set_xlabel("t [s]")
    fig.tight_layout()
    out["states"] = fig
    fig, axes = plt.subplots(1, len(coefficients), figsize=(14, 3.5), sharex=True)
    for ax, c in zip(axes, coefficients, strict=True):
        plot_estimates(ax, arrays, labels, c, z)
        ax.axhline(1.0, color="k", ls="--", lw=1, label="truth")
        ax.set_ylim(0.0, 2.0)
        ax.set_title(c)
        ax.set_xlabel("t [s]")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    out["parameters"] = fig
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
    axes[0].semilogy(np.asarray(arrays["narx.train_loss"]), label="train")
    axes[0].semilogy(np.asarray(arrays["narx.val_loss"]), label="validation")
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("MSE (normalised)")
    axes[0].legend(fontsize=8)
    j = _names(arrays, "distributed.names").index("h")
    axes[1].plot(t, truth[:, truth_names.index("h")], "k", lw=1, label="h (truth)")
    axes[1].plot(t, np.asarray(arrays["distributed.means"])[:, j], "C0", lw=0.8, label="NARX online")
    axes[1].set_xlabel("t [s]")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    out["narx"] = fig
    return out


def turbine_grid_figures(arrays: Mapping[str, Any]) -> dict[str, Any]:
    """Fig. S14-like n, x_n and T_e per generator (estimate, truth, standalone), and two zooms.

    Args:
        arrays: ``t``; ``series.names`` (``<state>_<bus>``), ``truth`` and ``distributed.means`` /
            ``distributed.stds`` over those series; ``standalone`` (U, T, 2+) with n and x_n first;
            ``truth.T_e`` and ``distributed.T_e`` (T, U) [N m].

    Returns:
        ``{"fig_s14"}``, plus ``"zoom_step_on"`` (4-6 s) and ``"zoom_step_off"`` (29-31 s) with the 95 %
        bands of n, vx_R, alpha and beta where the record reaches them: matplotlib figures.

    """
    import matplotlib.pyplot as plt

    t = np.asarray(arrays["t"])
    names = _names(arrays, "series.names")
    truth, est = np.asarray(arrays["truth"]), np.asarray(arrays["distributed.means"])
    sd = np.asarray(arrays["distributed.stds"])
    ref = np.asarray(arrays["standalone"])
    te_true, te_est = np.asarray(arrays["truth.T_e"]), np.asarray(arrays["distributed.T_e"])
    buses = sorted({int(n.rsplit("_", 1)[1]) for n in names if n.startswith("n_")})
    out: dict[str, Any] = {}
    fig, axes = plt.subplots(3, len(buses), figsize=(4.5 * len(buses), 8), sharex=True, squeeze=False)
    for c, b in enumerate(buses):
        for r, s in enumerate(("n", "x_n")):
            j = names.index(f"{s}_{b}")
            ax = axes[r, c]
            ax.plot(t, truth[:, j], "k", lw=1.2, label="truth")
            ax.plot(t, est[:, j], "C0--", lw=1, label="embedded estimate")
            ax.plot(t, ref[c, :, r], "C2:", lw=1, label="standalone")
            ax.set_ylabel(f"{s} (bus {b})")
        ax = axes[2, c]
        ax.plot(t, te_true[:, c] / 1e6, "k", lw=1.2, label="truth")
        ax.plot(t, te_est[:, c] / 1e6, "C0--", lw=1, label="estimate")
        ax.set_ylabel(f"T_e [MN m] (bus {b})")
        ax.set_xlabel("t [s]")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    out["fig_s14"] = fig
    for label, (lo, hi) in (("zoom_step_on", (4.0, 6.0)), ("zoom_step_off", (29.0, 31.0))):
        window = (t >= lo) & (t <= hi)
        if window.sum() < 2:
            continue
        shown = ("n", "vx_R", "alpha", "beta")
        fig, axes = plt.subplots(
            len(shown), len(buses), figsize=(4.5 * len(buses), 9), sharex=True, squeeze=False
        )
        for c, b in enumerate(buses):
            for r, s in enumerate(shown):
                j = names.index(f"{s}_{b}")
                ax = axes[r, c]
                ax.plot(t[window], truth[window, j], "k", lw=1, label="truth")
                band = band_z(0.95) * sd[window, j]
                mean_band(ax, t[window], est[window, j], band, "C0", label="estimate", alpha=0.25)
                ax.set_ylabel(f"{s} (bus {b})")
            axes[-1, c].set_xlabel("t [s]")
        axes[0, 0].legend(fontsize=8)
        fig.tight_layout()
        out[label] = fig
    return out
