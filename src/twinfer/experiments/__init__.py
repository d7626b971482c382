"""Case studies of the four papers, runnable as ``twinfer run CASE``."""

from twinfer.experiments import boucwen as _boucwen  # noqa: F401  (registers the case)
from twinfer.experiments import bouncing_ball as _bouncing_ball  # noqa: F401  (registers the case)
from twinfer.experiments import chain4 as _chain4  # noqa: F401  (registers the case)
from twinfer.experiments import common_interface as _common_interface  # noqa: F401  (registers the case)
from twinfer.experiments import emps as _emps  # noqa: F401  (registers the case)
from twinfer.experiments import grid as _grid  # noqa: F401
from twinfer.experiments import pinn_bayes as _pinn_bayes  # noqa: F401  (registers the case)
from twinfer.experiments import pinn_joint as _pinn_joint  # noqa: F401  (registers the case)
from twinfer.experiments import pinn_sparse as _pinn_sparse  # noqa: F401  (registers the case)
from twinfer.experiments import schedules as _schedules  # noqa: F401  (registers the case)
from twinfer.experiments import silverbox as _silverbox  # noqa: F401  (registers the case)
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
