"""Case studies of the four papers, runnable as ``twinfer run CASE``.

Case modules are imported on first use through :func:`get_case` (see ``CASE_MODULES``).
"""

from twinfer.experiments._case import (
    CASE_MODULES,
    REGISTRY,
    Case,
    CaseConfig,
    ConfigError,
    Progress,
    all_cases,
    get_case,
    no_progress,
    parse_set,
    register,
    resolve_config,
)

__all__ = [
    "CASE_MODULES",
    "REGISTRY",
    "Case",
    "CaseConfig",
    "ConfigError",
    "Progress",
    "all_cases",
    "get_case",
    "no_progress",
    "parse_set",
    "register",
    "resolve_config",
]
