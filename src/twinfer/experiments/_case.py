"""Case studies: a frozen validated config, a run function producing artefacts, and figures.

A case is a thin module over library calls (STYLE.md, "monolithic experiment scripts"): it builds a model
and data from its config, calls estimators, and returns metrics and arrays. Figures are made from the
saved arrays alone, so ``twinfer report RUN_DIR`` can re-render them.
"""

from __future__ import annotations

import importlib
import tomllib
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pydantic

from twinfer._atomic import read_regular
from twinfer._resources import available_memory
from twinfer.errors import TwinferValueError
from twinfer.report import PaperValue, RunArtifacts

Progress = Callable[[str, float, float], None]
"""``progress(stage, completed, total)``: the CLI turns it into a progress bar."""


def no_progress(stage: str, completed: float, total: float) -> None:
    """A progress callback that does nothing."""


INT64_MAX = 2**63 - 1
"""Largest integer setting: what ``jax.random.key`` and int64 arrays take (seeds included)."""

FLOAT_MAGNITUDE = (1e-100, 1e100)
"""Smallest and largest magnitude of a non-zero float setting: the square and the reciprocal square of
a setting stay inside float64's normal range, so no physical setting over- or underflows (a mass of
1e-300 or a noise level of 1e300 describes no system; both turned into inf or NaN mid-run)."""


def _check_setting(value: Any) -> None:
    """Raise ValueError unless every number in ``value`` is representable and every string is one line."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ValueError(
                f"expected an integer within int64, at most 2**63 - 1 = {INT64_MAX} (the largest "
                "seed jax.random.key takes)"
            )
    elif isinstance(value, float):
        low, high = FLOAT_MAGNITUDE
        if value != 0 and not low <= abs(value) <= high:
            raise ValueError(
                f"expected 0 or a magnitude between {low:g} and {high:g} (a setting whose square "
                "over- or underflows float64 describes no physical system)"
            )
    elif isinstance(value, str):
        bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cs")), None)
        if bad is not None:
            raise ValueError(f"expected one line of text; it contains the control character U+{ord(bad):04X}")
    elif isinstance(value, list | tuple):
        for item in value:
            _check_setting(item)


class CaseConfig(pydantic.BaseModel):
    """Base of every case configuration: frozen, unknown keys forbidden, values validated.

    Validation is strict for every case: a bool is not a number (``seed = true`` is an error, not 1), an
    integer setting takes no float or string, a float setting takes no NaN or infinity, a choice among
    strings is a ``Literal`` (checked before any setup), integers fit int64 and floats lie within
    :data:`FLOAT_MAGNITUDE`.
    """

    model_config = pydantic.ConfigDict(
        frozen=True, extra="forbid", validate_default=True, strict=True, allow_inf_nan=False
    )

    seed: int = pydantic.Field(0, ge=0, le=INT64_MAX, description="Seed of every random draw in the run.")

    @pydantic.field_validator("*", mode="before")
    @classmethod
    def _exact_choice(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
        """A ``Literal`` choice matches by type too: ``case = true`` or ``1.0`` is not the choice ``1``.

        A TOML array given for a tuple setting is read as a tuple; the strict tuple still checks its
        length and entries.
        """
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and get_origin(field.annotation) is tuple and isinstance(value, list):
            return tuple(value)  # a TOML array (config.toml, --config, --set) for a strict tuple setting
        if field is not None and get_origin(field.annotation) is Literal:
            choices = get_args(field.annotation)
            if not any(type(value) is type(c) and value == c for c in choices):
                raise ValueError(f"expected one of {', '.join(repr(c) for c in choices)}")
        return value

    @pydantic.field_validator("*", mode="after")
    @classmethod
    def _representable(cls, value: Any) -> Any:
        _check_setting(value)
        return value


class ConfigError(TwinferValueError):
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
    memory_estimate: Callable[[Any], int] | None = None
    """Bytes a run of this configuration needs at its peak, for the cases whose size grows with a setting
    (a horizon, a number of steps or samples): :func:`resolve_config` refuses a configuration whose
    estimate exceeds the available memory, before any setup."""
    size_keys: tuple[str, ...] = ()
    """The settings :attr:`memory_estimate` grows with, named in the error."""

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
    "chain-scaling": "chain_scaling",
    "chain6": "chain6",
    "common-interface": "common_interface",
    "emps": "emps",
    "grid": "grid",
    "live-damage": "live_damage",
    "live-grid": "live_grid",
    "pinn-bayes": "pinn_bayes",
    "pinn-joint": "pinn_joint",
    "pinn-sparse": "pinn_sparse",
    "schedules": "schedules",
    "silverbox": "silverbox",
    "turbine": "turbine",
    "turbine-grid": "turbine_grid",
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
    """Parse ``key=value`` overrides; values are read as TOML literals, else kept as strings.

    Raises:
        ConfigError: an item is not ``key=value``, or holds a line break (TOML would read the next line as
            another setting and a string would carry it: either way part of the item would be lost).

    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value (for example horizon=2.0).")
        if "\n" in item or "\r" in item:
            raise ConfigError(
                f"--set {key!r}: expected a one-line value; received {raw!r}, which holds a line break "
                "(give each setting its own --set)."
            )
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except (tomllib.TOMLDecodeError, RecursionError):
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


def _check_memory(case: Case, config: CaseConfig) -> None:
    if case.memory_estimate is None:
        return
    need = case.memory_estimate(config)
    have = available_memory()
    if have is None or need <= have:
        return
    keys = ", ".join(repr(k) for k in case.size_keys) or "'(config)'"
    received = ", ".join(f"{k} = {getattr(config, k)!r}" for k in case.size_keys) or repr(config)
    raise ConfigError(
        f"Invalid configuration for case {case.name!r}:\n  {keys}: expected a run that fits in memory; "
        f"it needs about {need / 2**30:.3g} GiB (estimate), {have / 2**30:.3g} GiB are available; "
        f"received {received}"
    )


def _read_toml(config_file: Path) -> dict[str, Any]:
    try:
        payload = read_regular(config_file)
    except OSError as exc:
        raise ConfigError(f"--config {config_file}: could not read the file ({exc}).") from None
    except ValueError as exc:  # not a regular file (/dev/zero, a FIFO), or too large for a config
        raise ConfigError(f"--config {config_file}: {exc}.") from None
    try:
        text = payload.decode("utf-8").removeprefix("\ufeff")  # a BOM, as Windows editors write
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"--config {config_file}: expected a TOML file (UTF-8 text); received bytes that are not "
            f"UTF-8 ({exc.reason} at byte {exc.start}). Is it the right file?"
        ) from None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ConfigError(f"--config {config_file}: could not read a TOML table ({exc}).") from None


def resolve_config(
    case: Case,
    config_file: Path | None = None,
    sets: Mapping[str, Any] | None = None,
    seed: int | None = None,
    quick: bool = False,
) -> CaseConfig:
    """Defaults, then ``--quick`` sizes, then the TOML file, then ``--set`` values, then ``--seed``.

    Raises:
        ConfigError: the file is unreadable or not TOML text, a value does not validate (the message
            names each key, what it expects and what it received), or the run would need more memory
            than is available (:attr:`Case.memory_estimate`).

    """
    values: dict[str, Any] = dict(case.quick) if quick else {}
    if config_file is not None:
        values.update(_read_toml(config_file))
    values.update(sets or {})
    if seed is not None:
        values["seed"] = seed
    config = validate_config(case, values)
    _check_memory(case, config)
    return config


def validate_config(case: Case, values: Mapping[str, Any]) -> CaseConfig:
    """The case's config from a mapping of settings (no defaults layered, no memory check).

    Raises:
        ConfigError: a value does not validate; the message names each key, what it expects and what it
            received.

    """
    try:
        return case.config_type.model_validate(values)
    except pydantic.ValidationError as exc:
        raise ConfigError(_format_errors(case, exc)) from None


def known_names(value: list[str], allowed: Iterable[str]) -> list[str]:
    """A config validator's check: ``value`` is a non-empty list of names, each one of ``allowed``."""
    choices = list(allowed)
    bad = [v for v in value if v not in choices]
    if bad or not value:
        raise ValueError(f"expected a non-empty list of {choices}; unknown: {bad}")
    return value
