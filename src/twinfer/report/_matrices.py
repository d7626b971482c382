"""Interpretation of learned connection matrices: grey-scale images and a summary of the weighty entries.

Each block is shown as |W| / n with n = max(max|W|, 1) in grey scale (1 = white, 0 = black), its title
carrying the block name and the contrast factor, rows and columns labelled by the signals they connect
("W_ij connects to i from j").

References:
    Thummerer & Mikelsons, model-combination paper, sec. 5.3 and Figs. 8, 11-16; specs 2.5 (the authors'
    ``plotMatrix!``).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def matrix_figure(
    blocks: Mapping[str, Any],
    labels: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    title: str = "",
) -> Any:
    """One grey-scale panel per block.

    Args:
        blocks: block name -> matrix.
        labels: block name -> (row labels, column labels).
        title: figure title.

    Returns:
        A matplotlib figure.

    """
    import matplotlib.pyplot as plt

    names = list(blocks)
    cols = min(3, max(1, len(names)))
    rows = int(np.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    for ax, name in zip(axes.ravel(), names, strict=False):
        w = np.abs(np.asarray(blocks[name], dtype=float))
        scale = max(float(w.max()) if w.size else 0.0, 1.0)
        ax.imshow(w / scale, cmap="gray", vmin=0.0, vmax=1.0)
        row_labels, col_labels = labels[name]
        ax.set_xticks(range(w.shape[1]), list(col_labels), rotation=90, fontsize=7)
        ax.set_yticks(range(w.shape[0]), list(row_labels), fontsize=7)
        ax.set_title(f"{name} x {1.0 / scale:.3g}", fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def weight_summary(
    blocks: Mapping[str, Any],
    labels: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    threshold: float = 0.1,
) -> list[str]:
    """Lines naming each connection ``row <- column`` with |W| >= threshold * max(max|W|, 1) of its block."""
    lines = []
    for name, w in blocks.items():
        w = np.asarray(w, dtype=float)
        scale = max(float(np.abs(w).max()) if w.size else 0.0, 1.0)
        rows, cols = labels[name]
        strong = [
            f"{rows[i]} <- {cols[j]} ({w[i, j]:+.3g})"
            for i in range(w.shape[0])
            for j in range(w.shape[1])
            if abs(w[i, j]) >= threshold * scale
        ]
        lines.append(f"{name}: " + (", ".join(strong) if strong else "no connection carries weight"))
    return lines
