"""Figures of the chain studies: simulated records, estimators side by side, parameters and envelopes.

Drawn from a run's arrays and the few numbers a figure needs (state indices, names, true values), so the
4-DOF chain (Fig. 2b-e), the 6-DOF chain (Figs S5-S7), the scaling sweep (Fig. S4) and the schedule
comparison (Fig. S1) re-render from a run folder.

References:
    Ghorbani & Hackl, Fig. 2 and SI Figs S1, S4-S7 (specs/compositional-inference.md 3.1-3.4).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from twinfer.report.figures.bands import mean_band, plot_estimates


def chain_record_figure(
    t: np.ndarray, states: np.ndarray, obs: np.ndarray, obs_names: Sequence[str], title: str
) -> Any:
    """A chain's simulated positions and velocities, and its measured accelerations.

    Args:
        t: times (T,).
        states: the true states (T, 2n), positions ``x1..xn`` then velocities ``v1..vn``.
        obs: the measurements (T, m).
        obs_names: their names (m).
        title: the top panel's title.

    Returns:
        The matplotlib figure.

    """
    import matplotlib.pyplot as plt

    n = states.shape[1] // 2
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for i in range(n):
        axes[0].plot(t, states[:, i], lw=0.8, label=f"x{i + 1}")
        axes[1].plot(t, states[:, n + i], lw=0.8, label=f"v{i + 1}")
    for j, name in enumerate(obs_names):
        axes[2].plot(t, obs[:, j], lw=0.5, label=f"{name} measured")
    axes[0].set_ylabel("displacement [m]")
    axes[1].set_ylabel("velocity [m/s]")
    axes[2].set_ylabel("acceleration [m/s²]")
    axes[2].set_xlabel("time [s]")
    for ax in axes:
        ax.legend(loc="upper right", ncol=4, fontsize=7, frameon=False)
        ax.grid(alpha=0.3)
    axes[0].set_title(title)
    return fig


def estimator_comparison_figures(
    arrays: Mapping[str, Any],
    colors: Mapping[str, str],
    states: Sequence[tuple[int, str]],
    parameter: tuple[int, str, float],
    band: float,
) -> dict[str, Any]:
    """Estimators side by side: states, a parameter and the interface message, each with its band.

    Args:
        arrays: ``times``, ``truth_states``, ``truth_fmsg`` and per estimator ``<name>_mean`` /
            ``<name>_var`` (T, n) and ``<name>_fmsg_mean`` / ``<name>_fmsg_sd`` (T,).
        colors: estimator name -> colour; the first is the central estimator, which the states and the
            message's top panel show alone; the parameter panel shows every estimator that ran.
        states: (index, axis label) of each state panel.
        parameter: (index, name, true value) of the parameter panel.
        band: the bands' half-width in sds.

    Returns:
        ``{"estimators_x3_v3", "estimators_k4", "interface_force"}``: matplotlib figures (Fig. 2b-e).

    """
    import matplotlib.pyplot as plt

    t = np.asarray(arrays["times"])
    truth = np.asarray(arrays["truth_states"])
    central, *distributed = list(colors)
    compared = [central, *distributed[:2]]

    def moments(n: str, idx: int) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(arrays[f"{n}_mean"])[:, idx], np.sqrt(np.asarray(arrays[f"{n}_var"])[:, idx])

    fig_xv, axes = plt.subplots(len(states), 1, figsize=(9, 3 * len(states)), sharex=True)
    for ax, (idx, label) in zip(axes, states, strict=True):
        ax.plot(t, truth[:, idx], "k", lw=0.9, label="truth")
        for n in compared:
            mean, sd = moments(n, idx)
            mean_band(ax, t, mean, band * sd, colors[n], label=n, ls="--", alpha=0.15)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=7, frameon=False, ncol=4)
    axes[0].set_title("chain4 (Fig. 2b-c): distributed against monolithic, 95 % bands")
    axes[-1].set_xlabel("time [s]")
    idx, name, value = parameter
    fig_k, ax = plt.subplots(figsize=(9, 3.5))
    for n in (n for n in colors if f"{n}_mean" in arrays):
        mean, sd = moments(n, idx)
        mean_band(ax, t, mean, band * sd, colors[n], label=n, lw=0.9, alpha=0.12)
    ax.axhline(value, color="k", ls="--", lw=0.8, label=f"true {name}")
    ax.set_ylim(0.0, 2.0 * value)
    ax.set(
        xlabel="time [s]",
        ylabel=f"{name} [N/m]",
        title=f"chain4 (Fig. 2d): {name} of the four estimators, 95 % bands",
    )
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=8, ncol=5)
    fig_f, axes_f = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    panels = ((axes_f[0], (central,), "joint covariance"), (axes_f[1], tuple(distributed[:2]), "S33"))
    for ax, group, how in panels:
        ax.plot(t, np.asarray(arrays["truth_fmsg"]), "k", lw=0.9, label="true F")
        for n in group:
            mean, sd = np.asarray(arrays[f"{n}_fmsg_mean"]), np.asarray(arrays[f"{n}_fmsg_sd"])
            mean_band(ax, t, mean, band * sd, colors[n], label=f"{n} F_msg", ls="--")
        ax.set_ylabel(f"F_msg [N] ({how})")
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=8, ncol=3, loc="upper left")
    axes_f[0].set_title(
        "chain4 (Fig. 2e): interface message, 95 % envelope: central (ports' cross-covariance) and "
        "distributed (ports independent, S33)",
        fontsize=9,
    )
    axes_f[1].set_xlabel("time [s]")
    return {"estimators_x3_v3": fig_xv, "estimators_k4": fig_k, "interface_force": fig_f}


def parameter_bands_figure(
    arrays: Mapping[str, Any],
    labels: Sequence[str],
    truth: Mapping[str, float],
    band: float,
    rows: int,
    figsize: tuple[float, float],
    ylim: tuple[float, float] = (0.3, 1.7),
) -> Any:
    """One panel per parameter: each run's estimate with its band (:func:`plot_estimates`), the truth.

    Args:
        arrays: ``t`` and per run label ``<label>.names`` / ``.means`` / ``.stds``.
        labels: the runs drawn (C0, C1, ...).
        truth: parameter name -> true value, in panel order.
        band: the bands' half-width in sds.
        rows: rows of panels.
        figsize: the figure's size.
        ylim: the y range as fractions of the true value.

    Returns:
        The matplotlib figure.

    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, len(truth) // rows, figsize=figsize, sharex=True, squeeze=False)
    for ax, (p, value) in zip(axes.ravel(), truth.items(), strict=True):
        plot_estimates(ax, arrays, labels, p, band)
        ax.axhline(value, color="k", ls="--", lw=1, label="truth")
        ax.set_title(p)
        ax.set_ylim(ylim[0] * value, ylim[1] * value)
    axes[0, 0].legend(fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("t [s]")
    fig.tight_layout()
    return fig


def envelopes_figure(
    arrays: Mapping[str, Any], label: str, states: Sequence[str], defect: str, band: float
) -> Any:
    """States against the truth with the filter's band and the graph-diffusion envelopes of a defect.

    Args:
        arrays: ``t``, ``truth``, ``<label>.names`` / ``.means`` / ``.stds`` and the half-widths
            ``envelope.<method>.<defect>.<state>`` of the one-hop and heat-kernel propagations.
        label: the run whose estimate is drawn.
        states: the states drawn, one panel each.
        defect: the defect whose envelopes are drawn.
        band: the filter band's half-width in sds.

    Returns:
        The matplotlib figure (Fig. S6-S7).

    """
    import matplotlib.pyplot as plt

    t = np.asarray(arrays["t"])
    truth = np.asarray(arrays["truth"])
    names = [str(n) for n in np.asarray(arrays[f"{label}.names"])]
    fig, axes = plt.subplots(len(states), 1, figsize=(10, 3 * len(states)), sharex=True)
    for ax, s in zip(axes, states, strict=True):
        j = names.index(s)
        m, sd = np.asarray(arrays[f"{label}.means"])[:, j], np.asarray(arrays[f"{label}.stds"])[:, j]
        ax.plot(t, truth[:, j], "k", lw=1, label="truth")
        mean_band(ax, t, m, band * sd, "C0", label=f"{label} UKF", band_label="UKF 95 % band", alpha=0.3)
        for method, color in (("one_hop", "C2"), ("heat", "C3")):
            half = np.asarray(arrays[f"envelope.{method}.{defect}.{s}"])
            ax.fill_between(t, m - half, m + half, color=color, alpha=0.25, label=f"{method} envelope (k*)")
        ax.set_ylabel(f"{s} [m]")
        ax.legend(fontsize=8, loc="upper right")
    axes[-1].set_xlabel("t [s]")
    fig.tight_layout()
    return fig


def scaling_figure(arrays: Mapping[str, Any]) -> dict[str, Any]:
    """Fig. S4: run time and state RMSE against the number of subsystems, log-log.

    ``arrays`` holds ``n`` and, per estimator that ran, ``<key>_s`` and ``<key>_rmse`` (NaN where a size
    was not run) for the keys ``dist``, ``cent`` and ``band``.
    """
    import matplotlib.pyplot as plt

    n = np.asarray(arrays["n"])
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(10, 4))
    lines = (("dist", "distributed", "o"), ("cent", "central", "s"), ("band", "banded", "^"))
    for key, label, marker in lines:
        if f"{key}_s" not in arrays:
            continue
        t, e = np.asarray(arrays[f"{key}_s"]), np.asarray(arrays[f"{key}_rmse"])
        ok = np.isfinite(t)
        ax_t.loglog(n[ok], t[ok], marker=marker, label=label)
        ax_e.loglog(n[ok], e[ok], marker=marker, label=label)
    ax_t.set_xlabel("subsystems n")
    ax_t.set_ylabel("run time [s] (compiled scan)")
    ax_e.set_xlabel("subsystems n")
    ax_e.set_ylabel("state RMSE")
    for ax in (ax_t, ax_e):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return {"scaling": fig}


def schedule_errors_figure(arrays: Mapping[str, Any], schedules: Sequence[str], dofs: int) -> dict[str, Any]:
    """Fig. S1: box plots of each schedule's absolute errors against ``arrays["monolithic"]``, per DOF.

    ``arrays`` holds each schedule's trajectory (T, 2 dofs): positions, then velocities.
    """
    import matplotlib.pyplot as plt

    ref = np.asarray(arrays["monolithic"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, off, label in ((axes[0], 0, "|e_x| [m]"), (axes[1], dofs, "|e_v| [m/s]")):
        data, names = [], []
        for d in range(dofs):
            for kind in schedules:
                data.append(np.abs(np.asarray(arrays[kind])[:, off + d] - ref[:, off + d]))
                names.append(f"{kind[:2]}{d + 1}")
        ax.boxplot(data, whis=1.5, showfliers=False)
        ax.set_xticks(range(1, len(names) + 1), names, rotation=90, fontsize=7)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_title("schedules: errors vs the monolith (ja/ga/ab, DOF)")
    return {"errors": fig}
