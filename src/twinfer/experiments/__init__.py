"""Case studies of the four papers, runnable as ``twinfer run CASE``."""

from twinfer.experiments import bouncing_ball as _bouncing_ball  # noqa: F401  (registers the case)
from twinfer.experiments import chain4 as _chain4  # noqa: F401  (registers the case)
from twinfer.experiments._case import (
    REGISTRY,
    Case,
    CaseConfig,
    ConfigError,
    Progress,
    get_case,
    no_progress,
    parse_set,
    register,
    resolve_config,
)

__all__ = [
    "REGISTRY",
    "Case",
    "CaseConfig",
    "ConfigError",
    "Progress",
    "get_case",
    "no_progress",
    "parse_set",
    "register",
    "resolve_config",
]
