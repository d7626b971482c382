"""Models: the interface, combinators and the library of systems."""

from twinfer.models._base import AbstractModel, Connection, Params
from twinfer.models._combine import BLOCKS, TOPOLOGIES, Combination, System, noisy, psd
from twinfer.models._combine_model import CombinedModel
from twinfer.models._params import get_param, locate, param_names, set_params
from twinfer.models.boucwen import BoucWen
from twinfer.models.bouncing_ball import BouncingBall2D
from twinfer.models.chain import Chain, spring_damper_law
from twinfer.models.emps import EMPS
from twinfer.models.kuramoto import KuramotoNetwork, wrap_angle
from twinfer.models.network import Link, SpringNetwork

__all__ = [
    "BLOCKS",
    "EMPS",
    "TOPOLOGIES",
    "AbstractModel",
    "Connection",
    "BoucWen",
    "BouncingBall2D",
    "Chain",
    "Combination",
    "CombinedModel",
    "KuramotoNetwork",
    "Link",
    "Params",
    "SpringNetwork",
    "System",
    "get_param",
    "locate",
    "noisy",
    "param_names",
    "psd",
    "set_params",
    "spring_damper_law",
    "wrap_angle",
]
