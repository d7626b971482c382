"""Figures of an :class:`~twinfer.infer.Estimate`: states and unknowns over time with their bands.

:meth:`twinfer.infer.Estimate.plot` and the run folders of ``twinfer estimate`` draw with
:func:`estimate_figures`. A record with more columns than a page can show (a grid of a thousand buses)
gets an evenly spaced selection, and the figure says so and how to choose others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

PANEL_ROWS = 8
"""Rows of panels per figure: more rows go to further figures (``states-2``, ...)."""

MAX_ROWS = 16
"""Rows of state panels (and of parameter panels) drawn when no names are chosen: two figures each."""


def estimate_figures(
    est: Any,
    truth: Mapping[str, Any] | None = None,
    names: Sequence[str] | None = None,
    level: float = 0.95,
    z: float | None = None,
) -> dict[str, Any]:
    """Every state and every unknown of ``est`` with its central ``level`` band, as matplotlib figures.

    Without ``names`` the states are drawn in two columns when their number is even (positions or
    phases left, velocities or frequencies right: the first and second half), up to :data:`PANEL_ROWS`
    rows per figure (``states``, ``states-2``, ...), then the unknowns in one column (``parameters``,
    ...). Beyond :data:`MAX_ROWS` rows of either, evenly spaced rows are drawn and the figure's title
    says how many of how many. With ``names`` exactly those columns are drawn, one per row.

    ``z`` is the band's half-width in standard deviations (default :func:`twinfer.metrics.band_z` of
    ``level``, which labels it). Where ``truth`` holds a state's true values (``{name: (N+1,) array}``),
    its error is drawn inside the band, which is what calibration looks like; a parameter's true value
    (a float) is a line.

    Returns:
        ``{figure name: matplotlib Figure}``.

    """
    from twinfer.metrics import band_z

    z = band_z(level) if z is None else z
    truth = dict(truth or {})
    t = np.asarray(est.times)
    means, stds = np.asarray(est.means), np.asarray(est.stds)
    band = f"{100 * level:g} %"

    def draw(ax: Any, j: int) -> None:
        name = est.state_names[j]
        mean, sd = means[:, j], stds[:, j]
        true = truth.get(name)
        if true is not None and np.ndim(true) == 1:  # a state's error inside its band
            ax.fill_between(t, -z * sd, z * sd, alpha=0.3, label=f"{band} band")
            ax.plot(t, mean - np.asarray(true), lw=0.6, label="estimate - truth")
            ax.set_ylabel(f"{name} error")
            return
        low, high = est._limits(name, z)  # a log-scale unknown's band from its log space (asymmetric)
        ax.fill_between(t, low, high, alpha=0.3, label=band)
        ax.plot(t, mean, lw=0.8, label="estimate")
        if true is not None:
            ax.axhline(float(true), color="k", lw=0.8, ls="--", label="truth")
        ax.set_ylabel(name)

    if names is not None:
        columns = [est.state_names.index(n) for n in names]
        return _panel_figures("estimate", [[j] for j in columns], "", draw, legend=True)
    parameters = [est.state_names.index(p) for p in est.parameters]
    held = set(parameters)
    states = [j for j in range(len(est.state_names)) if j not in held]
    pairs = 2 if len(states) % 2 == 0 and len(states) > 1 else 1
    half = len(states) // pairs
    state_rows = [[states[c * half + r] for c in range(pairs)] for r in range(half)]
    figs = _panel_figures("states", *_thin(state_rows, "states", pairs), draw, legend=True)
    figs |= _panel_figures("parameters", *_thin([[j] for j in parameters], "parameters", 1), draw)
    return figs


def _thin(rows: list[list[int]], what: str, per_row: int) -> tuple[list[list[int]], str]:
    """At most :data:`MAX_ROWS` evenly spaced rows, and a title saying so when some are left out."""
    if len(rows) <= MAX_ROWS:
        return rows, ""
    keep = np.unique(np.linspace(0, len(rows) - 1, MAX_ROWS).round().astype(int))
    shown, total = len(keep) * per_row, len(rows) * per_row
    title = f"{shown} of {total} {what}, evenly spaced; Estimate.plot(names=[...]) draws others"
    return [rows[k] for k in keep], title


def _panel_figures(
    name: str, rows: list[list[int]], title: str, draw: Callable[[Any, int], None], legend: bool = False
) -> dict[str, Any]:
    """Figures ``name``, ``name-2``, ... of at most :data:`PANEL_ROWS` rows, ``draw(ax, j)`` in each panel."""
    import matplotlib.pyplot as plt

    figs: dict[str, Any] = {}
    for start in range(0, len(rows), PANEL_ROWS):
        chunk = rows[start : start + PANEL_ROWS]
        columns = max(len(r) for r in chunk)
        fig, axes = plt.subplots(
            len(chunk), columns, figsize=(4 + 4 * columns, 1.6 * len(chunk) + 0.4), sharex=True, squeeze=False
        )
        for r, row in enumerate(chunk):
            for c, j in enumerate(row):
                draw(axes[r, c], j)
        if legend:
            axes[0, 0].legend(loc="upper right", fontsize=7)
        for ax in axes[-1]:
            ax.set_xlabel("time [s]")
        if title:
            fig.suptitle(title, fontsize=9)
        figs[name if start == 0 else f"{name}-{start // PANEL_ROWS + 1}"] = fig
    return figs
