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
from twinfer.models.turbine import (
    PeltonParams,
    PeltonTurbine,
    generator_acceleration,
    generator_matrix,
    generator_rhs,
    generator_torque,
    governor_command,
    governor_rhs,
    hydraulics_rhs,
    nozzle_area,
    nozzle_flow,
    rotational_rhs,
    rub_force,
    runner_acceleration,
    runner_rhs,
    turbine_torque,
)

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
    "PeltonParams",
    "PeltonTurbine",
    "SpringNetwork",
    "System",
    "generator_acceleration",
    "generator_matrix",
    "generator_rhs",
    "generator_torque",
    "get_param",
    "locate",
    "governor_command",
    "governor_rhs",
    "hydraulics_rhs",
    "noisy",
    "nozzle_area",
    "nozzle_flow",
    "param_names",
    "psd",
    "rotational_rhs",
    "rub_force",
    "runner_acceleration",
    "runner_rhs",
    "set_params",
    "spring_damper_law",
    "turbine_torque",
    "wrap_angle",
]
