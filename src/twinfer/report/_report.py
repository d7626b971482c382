"""The human-readable ``report.md`` of a run: every metric beside the paper's value where there is one."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PaperValue:
    """A number a paper reports for a metric, and where it says so."""

    value: float
    source: str


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return f"{value} (invalid)"  # never rendered as if it were a result
    magnitude = abs(value)
    if magnitude != 0 and (magnitude >= 1e4 or magnitude < 1e-2):
        return f"{value:.3e}"
    return f"{value:.4g}"


def render_report(
    case: str,
    description: str,
    metrics: Mapping[str, float],
    paper: Mapping[str, PaperValue],
    config_toml: str,
    notes: Sequence[str] = (),
    figures: Sequence[str] = (),
) -> str:
    """Markdown report: metrics table (ours | paper | ratio | source), notes, figures, config."""
    lines = [f"# {case}", "", description, "", "## Metrics", ""]
    lines += [
        "| metric | twinfer | paper | twinfer / paper | paper source |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(metrics):
        ours = metrics[name]
        ref = paper.get(name)
        ratio = "-"
        if ref is not None and ref.value != 0 and math.isfinite(ours):
            ratio = f"{ours / ref.value:.3g}"
        lines.append(
            f"| `{name}` | {_fmt(ours)} | {_fmt(ref.value if ref else None)} | {ratio} | "
            f"{ref.source if ref else ''} |"
        )
    missing = sorted(set(paper) - set(metrics))
    if missing:
        lines += [
            "",
            "Paper values with no metric in this run: " + ", ".join(f"`{m}`" for m in missing),
        ]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    if figures:
        lines += ["", "## Figures", ""] + [f"![{f}](figures/{f})" for f in figures]
    lines += ["", "## Configuration", "", "```toml", config_toml.rstrip(), "```", ""]
    return "\n".join(lines)
