"""Models: the interface and the library of systems."""

from twinfer.models._base import AbstractModel, Params
from twinfer.models._params import get_param, locate, param_names, set_params
from twinfer.models.chain import Chain

__all__ = ["AbstractModel", "Chain", "Params", "get_param", "locate", "param_names", "set_params"]
from twinfer.models.boucwen import BoucWen  # noqa: E402

__all__ += ["BoucWen"]
from twinfer.models.emps import EMPS  # noqa: E402

__all__ += ["EMPS"]
