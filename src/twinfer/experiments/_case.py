"""Case studies: a frozen validated config, a run function producing artefacts, and figures.

A case is a thin module over library calls (STYLE.md, "monolithic experiment scripts"): it builds a model
and data from its config, calls estimators, and returns metrics and arrays. Figures are made from the
saved arrays alone, so ``twinfer report RUN_DIR`` can re-render them.
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from twinfer.report import PaperValue, RunArtifacts

Progress = Callable[[str, float, float], None]
"""``progress(stage, completed, total)``: the CLI turns it into a progress bar."""


def no_progress(stage: str, completed: float, total: float) -> None:
    """A progress callback that does nothing."""


class CaseConfig(pydantic.BaseModel):
    """Base of every case configuration: frozen, unknown keys forbidden, values validated."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", validate_default=True)

    seed: int = pydantic.Field(0, ge=0, description="Seed of every random draw in the run.")


class ConfigError(ValueError):
    """A configuration that does not validate; the message names each offending key."""


@dataclass(frozen=True)
class Case:
    """One runnable case study."""

    name: str
    description: str
    config_type: type[CaseConfig]
    run: Callable[[Any, Progress], RunArtifacts]
    figures: Callable[[Mapping[str, Any], Any], dict[str, Any]]
    quick: Mapping[str, Any] = field(default_factory=dict)
    paper: Mapping[str, PaperValue] = field(default_factory=dict)
    paper_for: Callable[[Any], Mapping[str, PaperValue]] | None = None
    """Paper values that depend on the configuration (e.g. the grid's Table S2-S3 row of its network)."""

    def paper_values(self, config: Any) -> Mapping[str, PaperValue]:
        """The paper's values to set beside this configuration's metrics."""
        return self.paper if self.paper_for is None else self.paper_for(config)


REGISTRY: dict[str, Case] = {}


def register(case: Case) -> Case:
    """Add a case to :data:`REGISTRY` (names are unique)."""
    if case.name in REGISTRY:
        raise ValueError(f"Case {case.name!r} is registered twice.")
    REGISTRY[case.name] = case
    return case


CASE_MODULES: dict[str, str] = {
    "boucwen": "boucwen",
    "bouncing-ball": "bouncing_ball",
    "chain4": "chain4",
    "common-interface": "common_interface",
    "emps": "emps",
    "grid": "grid",
    "pinn-bayes": "pinn_bayes",
    "pinn-joint": "pinn_joint",
    "pinn-sparse": "pinn_sparse",
    "schedules": "schedules",
    "silverbox": "silverbox",
}
"""Case name -> module of ``twinfer.experiments`` that registers it, imported on first use: a run pays
only for its own case's dependencies (blackjax, pysindy, optax, ... are not all loaded for every case)."""


def get_case(name: str) -> Case:
    """The registered case of that name, its module imported on first use.

    Raises:
        KeyError: the name is not a known case; the message lists the known ones.

    """
    if name not in REGISTRY and name in CASE_MODULES:
        importlib.import_module(f"twinfer.experiments.{CASE_MODULES[name]}")
    if name not in REGISTRY:
        known = sorted(set(REGISTRY) | set(CASE_MODULES))
        raise KeyError(f"Unknown case {name!r}; expected one of: {', '.join(known)}.")
    return REGISTRY[name]


def all_cases() -> dict[str, Case]:
    """Every case, by name (imports every case module)."""
    for name in CASE_MODULES:
        get_case(name)
    return dict(sorted(REGISTRY.items()))


def parse_set(items: Iterable[str]) -> dict[str, Any]:
    """Parse ``key=value`` overrides; values are read as TOML literals, else kept as strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value (for example horizon=2.0).")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key] = value
    return out


def _format_errors(case: Case, error: pydantic.ValidationError) -> str:
    allowed = ", ".join(case.config_type.model_fields)
    lines = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(config)"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown key {key!r}; allowed keys: {allowed}")
        else:
            lines.append(f"{key!r}: {item['msg']}; received {item.get('input')!r}")
    return f"Invalid configuration for case {case.name!r}:\n  " + "\n  ".join(lines)


def resolve_config(
    case: Case,
    config_file: Path | None = None,
    sets: Mapping[str, Any] | None = None,
    seed: int | None = None,
    quick: bool = False,
) -> CaseConfig:
    """Defaults, then ``--quick`` sizes, then the TOML file, then ``--set`` values, then ``--seed``."""
    values: dict[str, Any] = dict(case.quick) if quick else {}
    if config_file is not None:
        try:
            values.update(tomllib.loads(Path(config_file).read_text()))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"--config {config_file}: could not read a TOML table ({exc}).") from exc
    values.update(sets or {})
    if seed is not None:
        values["seed"] = seed
    try:
        return case.config_type.model_validate(values)
    except pydantic.ValidationError as exc:
        raise ConfigError(_format_errors(case, exc)) from None
