"""Models: the interface and the library of systems."""

from twinfer.models._base import AbstractModel, Params
from twinfer.models._params import get_param, locate, param_names, set_params
from twinfer.models.chain import Chain

__all__ = ["AbstractModel", "Chain", "Params", "get_param", "locate", "param_names", "set_params"]
from twinfer.models._combine import BLOCKS, TOPOLOGIES, Combination, System, noisy, psd  # noqa: E402
from twinfer.models._combine_model import CombinedModel  # noqa: E402
from twinfer.models.bouncing_ball import BouncingBall2D  # noqa: E402

__all__ += [
    "BLOCKS",
    "TOPOLOGIES",
    "BouncingBall2D",
    "Combination",
    "CombinedModel",
    "System",
    "noisy",
    "psd",
]
