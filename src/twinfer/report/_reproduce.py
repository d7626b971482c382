"""The reproduction table: every case's metrics against the papers' values under written tolerances.

``twinfer reproduce`` runs the cases and calls :func:`check_run` on each run's metrics, then
:func:`write_reproduction` writes ``REPRODUCTION.md`` and ``reproduction.json``: one row per paper
value, with the case, the metric, the paper's and our value, their ratio, the tolerance and its reason,
and the verdict (``pass``, ``FAIL``, ``reported`` for a value the paper gives without a tolerance we can
hold it to, ``missing`` for a paper value the run did not produce).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from twinfer.report._files import write_text
from twinfer.report._report import PaperValue, _fmt


@dataclass(frozen=True)
class Check:
    """One paper value against one run's metric."""

    case: str
    metric: str
    paper: float
    ours: float | None
    tolerance: str
    status: str
    source: str
    reason: str

    @property
    def ratio(self) -> float | None:
        """``ours / paper`` where both are finite and the paper's value is not zero."""
        if self.ours is None or not math.isfinite(self.ours) or self.paper == 0:
            return None
        return self.ours / self.paper


def check_run(case: str, metrics: Mapping[str, float], paper: Mapping[str, PaperValue]) -> list[Check]:
    """Every paper value of a case against the run's metrics, in metric order."""
    rows = []
    for name in sorted(paper):
        ref = paper[name]
        ours = metrics.get(name)
        tol = ref.tolerance
        if ours is None:
            status = "missing"
        elif tol is None:
            status = "reported"
        else:
            status = "pass" if tol.passes(float(ours), ref.value) else "FAIL"
        rows.append(
            Check(
                case=case,
                metric=name,
                paper=ref.value,
                ours=None if ours is None else float(ours),
                tolerance=tol.describe() if tol else "",
                status=status,
                source=ref.source,
                reason=tol.reason if tol else "",
            )
        )
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_reproduction(
    checks: Sequence[Check], runs: Mapping[str, Mapping[str, Any]], header: Mapping[str, Any]
) -> str:
    """Markdown: a summary per case (run time, counts, run folder), then every check with its reason."""
    lines = ["# Reproduction of the papers' tables", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    counts = {s: sum(c.status == s for c in checks) for s in ("pass", "FAIL", "reported", "missing")}
    lines += [
        f"- checks: {counts['pass']} pass, {counts['FAIL']} fail, {counts['reported']} reported without a "
        f"tolerance, {counts['missing']} missing",
        "",
        "## Cases",
        "",
        "| case | size | code | run time | pass | fail | reported | missing | run folder |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case, info in runs.items():
        mine = [c for c in checks if c.case == case]
        n = {s: sum(c.status == s for c in mine) for s in counts}
        seconds = info.get("seconds")
        time_text = f"{seconds:.1f} s" if isinstance(seconds, int | float) else "-"
        status = info.get("status", "done")
        folder = info.get("run_dir") or f"({status})"
        current = header.get("source")
        code = "-" if not current else "this source" if info.get("source") == current else "older source"
        lines.append(
            f"| {case} | {'quick' if info.get('quick') else 'full'} | {code} | {time_text} | {n['pass']} | "
            f"{n['FAIL']} | {n['reported']} | {n['missing']} | {_cell(str(folder))} |"
        )
    lines += [
        "",
        "## Every paper value",
        "",
        "| case | metric | paper | twinfer | twinfer / paper | tolerance | verdict | paper source "
        "| why this tolerance |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        ratio = "-" if c.ratio is None else f"{c.ratio:.3g}"
        lines.append(
            f"| {c.case} | `{c.metric}` | {_fmt(c.paper)} | {_fmt(c.ours)} | {ratio} | "
            f"{c.tolerance or '-'} | {c.status} | {_cell(c.source)} | {_cell(c.reason)} |"
        )
    return "\n".join(lines) + "\n"


def write_reproduction(
    folder: Path, checks: Sequence[Check], runs: Mapping[str, Mapping[str, Any]], header: Mapping[str, Any]
) -> tuple[Path, Path]:
    """Write ``REPRODUCTION.md`` and ``reproduction.json`` (atomically) into ``folder``."""
    table = {
        "header": dict(header),
        "runs": {case: dict(info) for case, info in runs.items()},
        "checks": [asdict(c) | {"ratio": c.ratio} for c in checks],
    }
    md = write_text(folder / "REPRODUCTION.md", render_reproduction(checks, runs, header))
    js = write_text(folder / "reproduction.json", json.dumps(table, indent=2, allow_nan=True) + "\n")
    return md, js
