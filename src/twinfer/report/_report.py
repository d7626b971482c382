"""The human-readable ``report.md`` of a run: every metric beside the paper's value where there is one."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """How close a metric must come to its paper value to count as reproduced, and why.

    ``kind``:

    * ``"factor"``: within a factor ``amount`` either way (``paper / amount <= ours <= paper * amount``);
    * ``"at_most"``: ``ours <= paper * amount`` (an error or a cost: beating the paper passes);
    * ``"at_least"``: ``ours >= paper * amount`` (a speed-up, an accuracy);
    * ``"abs"``: ``|ours - paper| <= amount`` (a coverage, an exponent, a value near zero).

    ``reason`` says why this tolerance and not a tighter one (what differs from the paper's run).
    """

    kind: str
    amount: float
    reason: str

    def __post_init__(self) -> None:
        if self.kind not in ("factor", "at_most", "at_least", "abs"):
            raise ValueError(
                f"Tolerance kind: expected 'factor', 'at_most', 'at_least' or 'abs'; received {self.kind!r}."
            )
        if not (math.isfinite(self.amount) and self.amount > 0) or (
            self.kind == "factor" and self.amount < 1
        ):
            raise ValueError(
                f"Tolerance amount: expected a finite value > 0 (>= 1 for a factor); received {self.amount}."
            )
        if not self.reason.strip():
            raise ValueError("Tolerance reason: expected the reason for this tolerance; received none.")

    def passes(self, ours: float, paper: float) -> bool:
        """Whether ``ours`` reproduces ``paper`` under this tolerance (never for a non-finite value)."""
        if not math.isfinite(ours):
            return False
        slack = 1e-12  # a bound written in decimal is met by the value printed at it (1 - 0.98 > 0.02)
        if self.kind == "abs":
            return abs(ours - paper) <= self.amount * (1 + slack)
        if self.kind == "at_most":
            return ours <= paper * self.amount + abs(paper) * slack
        if self.kind == "at_least":
            return ours >= paper * self.amount - abs(paper) * slack
        if paper == 0 or (ours > 0) != (paper > 0):
            return ours == paper
        ratio = ours / paper
        return (1 - slack) / self.amount <= ratio <= self.amount * (1 + slack)

    def describe(self) -> str:
        """Short form for tables: ``x2``, ``<= 1.5x``, ``>= 0.5x``, ``+- 0.01``."""
        return {
            "factor": f"x{self.amount:g}",
            "at_most": f"<= {self.amount:g}x",
            "at_least": f">= {self.amount:g}x",
            "abs": f"+- {self.amount:g}",
        }[self.kind]


def within(factor: float, reason: str) -> Tolerance:
    """Within a factor either way."""
    return Tolerance("factor", factor, reason)


def at_most(factor: float, reason: str) -> Tolerance:
    """At most ``factor`` times the paper's value (errors, costs)."""
    return Tolerance("at_most", factor, reason)


def at_least(factor: float, reason: str) -> Tolerance:
    """At least ``factor`` times the paper's value (speed-ups, accuracies)."""
    return Tolerance("at_least", factor, reason)


def near(amount: float, reason: str) -> Tolerance:
    """Within ``amount`` of the paper's value, absolutely."""
    return Tolerance("abs", amount, reason)


@dataclass(frozen=True)
class PaperValue:
    """A number a paper reports for a metric, where it says so, and the tolerance to reproduce it.

    Without a ``tolerance`` the value is reported beside ours but not checked (``twinfer reproduce``
    lists it as "reported").
    """

    value: float
    source: str
    tolerance: Tolerance | None = None


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return f"{value} (invalid)"  # never rendered as if it were a result
    magnitude = abs(value)
    if magnitude != 0 and (magnitude >= 1e4 or magnitude < 1e-2):
        return f"{value:.3e}"
    return f"{value:.4g}"


def verdict(ours: float, ref: PaperValue | None) -> str:
    """``pass (x2)`` / ``FAIL (x2)`` under the paper value's tolerance, ``-`` without one."""
    if ref is None or ref.tolerance is None:
        return "-"
    status = "pass" if ref.tolerance.passes(ours, ref.value) else "FAIL"
    return f"{status} ({ref.tolerance.describe()})"


QUICK_LINE = "Quick size: a smoke test; paper comparisons below are not expected to hold at this size."
"""The first line of a ``--quick`` run's report."""


def render_report(
    case: str,
    description: str,
    metrics: Mapping[str, float],
    paper: Mapping[str, PaperValue],
    config_toml: str,
    notes: Sequence[str] = (),
    figures: Sequence[str] = (),
    *,
    quick: bool = False,
) -> str:
    """Markdown report: metrics table (ours | paper | ratio | verdict | source), notes, figures, config.

    A table with no paper value in any row (a user's own estimate) has only the metric and our value.
    ``quick``: the run used the ``--quick`` sizes, said in the report's first line (:data:`QUICK_LINE`).
    """
    lines = [f"# {case}", ""]
    if quick:
        lines += [f"**{QUICK_LINE}**", ""]
    lines += [description, "", "## Metrics", ""]
    with_paper = any(name in paper for name in metrics)
    if with_paper:
        lines += [
            "| metric | twinfer | paper | twinfer / paper | reproduced | paper source |",
            "|---|---|---|---|---|---|",
        ]
    else:
        lines += ["| metric | twinfer |", "|---|---|"]
    for name in sorted(metrics):
        ours = metrics[name]
        ref = paper.get(name)
        if not with_paper:
            lines.append(f"| `{name}` | {_fmt(ours)} |")
            continue
        ratio = "-"
        if ref is not None and ref.value != 0 and math.isfinite(ours):
            ratio = f"{ours / ref.value:.3g}"
        lines.append(
            f"| `{name}` | {_fmt(ours)} | {_fmt(ref.value if ref else None)} | {ratio} | "
            f"{verdict(ours, ref)} | {ref.source if ref else ''} |"
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
