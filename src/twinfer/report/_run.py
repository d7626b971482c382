"""Run folders: ``runs/<case>-<timestamp>/`` with config, metrics, arrays, figures and the report."""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinfer._atomic import write_bytes
from twinfer.report._files import to_toml, write_figure, write_json, write_npz, write_text
from twinfer.report._report import PaperValue, render_report


def versions() -> dict[str, str]:
    """Versions of the numerical stack, recorded in every run folder."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("twinfer", "jax", "jaxlib", "equinox", "diffrax", "numpy", "scipy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def new_run_dir(root: Path, case: str) -> Path:
    """Create and return a fresh ``root/<case>-<YYYYmmdd-HHMMSS>[-n]`` folder."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        candidate = root / (f"{case}-{stamp}" if n == 0 else f"{case}-{stamp}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise RuntimeError(f"Could not create a new run folder under {root} for {case!r}.")


def check_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Metrics must be a flat mapping of dotted names to finite numbers."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"metrics: expected non-empty string names; received {name!r}.")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(
                f"metrics[{name!r}]: expected a finite number; received {number}. A NaN metric means "
                "the run went wrong; it is never written silently."
            )
        out[name] = number
    return out


@dataclass(frozen=True)
class RunArtifacts:
    """Everything a case run produces, before it is written."""

    metrics: Mapping[str, float]
    arrays: Mapping[str, Any]
    notes: Sequence[str] = ()
    files: Mapping[str, bytes] = field(default_factory=dict)
    """Extra files by name relative to the run folder (for example an ArviZ ``posterior.nc``)."""


def write_run(
    run_dir: Path,
    case: str,
    description: str,
    config: Mapping[str, Any],
    artifacts: RunArtifacts,
    figures: Mapping[str, Any],
    paper: Mapping[str, PaperValue],
) -> Path:
    """Write config.toml, metrics.json, arrays.npz, figures/*.png, meta.json and report.md."""
    metrics = check_metrics(artifacts.metrics)
    config_toml = to_toml(config)
    write_text(run_dir / "config.toml", config_toml)
    write_npz(run_dir / "arrays.npz", artifacts.arrays)
    for name, payload in artifacts.files.items():
        write_bytes(run_dir / name, payload)
    names = []
    for name, fig in figures.items():
        write_figure(run_dir / "figures" / f"{name}.png", fig)
        names.append(f"{name}.png")
    meta = {"case": case, "versions": versions(), "notes": list(artifacts.notes)}
    write_json(run_dir / "meta.json", meta)
    write_json(run_dir / "metrics.json", metrics)
    report = render_report(case, description, metrics, paper, config_toml, artifacts.notes, names)
    write_text(run_dir / "report.md", report)
    return run_dir


def read_run(run_dir: Path) -> tuple[str, dict[str, Any], dict[str, float], dict[str, Any]]:
    """``(case, config, metrics, meta)`` of an existing run folder, with clear errors if incomplete."""
    run_dir = Path(run_dir)
    for required in ("config.toml", "metrics.json", "meta.json"):
        if not (run_dir / required).is_file():
            raise FileNotFoundError(
                f"{run_dir}: expected a twinfer run folder containing {required}; it is missing."
            )
    meta = json.loads((run_dir / "meta.json").read_text())
    config = tomllib.loads((run_dir / "config.toml").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return meta["case"], config, metrics, meta
