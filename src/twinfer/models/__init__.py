"""Models: the interface and the library of systems."""

from twinfer.models._base import AbstractModel, Params
from twinfer.models._params import get_param, locate, param_names, set_params
from twinfer.models.boucwen import BoucWen
from twinfer.models.chain import Chain
from twinfer.models.emps import EMPS
from twinfer.models.kuramoto import KuramotoNetwork, wrap_angle

__all__ = [
    "EMPS",
    "AbstractModel",
    "BoucWen",
    "Chain",
    "KuramotoNetwork",
    "Params",
    "get_param",
    "locate",
    "param_names",
    "set_params",
    "wrap_angle",
]
