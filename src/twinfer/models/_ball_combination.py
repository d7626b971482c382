"""The bouncing ball of the model-combination paper's experiment 1: physics model and MLM combined.

The physics model (FPM) is the friction-free :class:`~twinfer.models.BouncingBall2D`; the machine-learned
model (MLM) is any model of the ball's four states, in the paper a 4-8-2 tanh FFNN whose outputs are the
two accelerations, laid out by :data:`BALL_MLM_LAYOUT`. Scenarios and loss weights are those of the
paper's training and test records.

References:
    Thummerer & Mikelsons, model-combination paper, sec. 5 and A.5-A.7, eqs. (23)-(28), Tabs. 1-2;
    specs/model-combination.md 3.1-3.7.

"""

from __future__ import annotations

import jax

from twinfer.models._base import AbstractModel
from twinfer.models._combine import System, psd
from twinfer.models._combine_model import CombinedModel
from twinfer.models.bouncing_ball import BouncingBall2D

BALL_SCENARIOS = (
    (-0.25, -6.0, 0.5, 8.0),
    (0.5, 8.0, -0.25, -6.0),
    (0.0, 0.0, 0.0, 4.0),
    (-0.75, 4.0, -0.5, 6.0),
    (-0.5, 2.0, 0.5, 2.0),
)
"""Initial states ``[s_x, v_x, s_y, v_y]`` of the five scenarios: 1-4 train, 5 tests (specs 3.4)."""
BALL_LOSS_WEIGHTS = (0.5, 0.1, 0.5, 0.1)
"""Weights of the mean absolute errors of ``s_x, v_x, s_y, v_y`` in the loss (specs 3.5)."""
BALL_MLM_LAYOUT = (("in", 0), ("net", 0), ("in", 2), ("net", 1))
"""The MLM's state derivative: the velocities passed through, the network's two outputs as accelerations."""
BALL_STATE = ("x1", "x2", "x3", "x4")
"""The combined model's state names."""


def ball_combination(
    mlm: AbstractModel, topology: str, key: jax.Array, noise: float
) -> tuple[CombinedModel, BouncingBall2D]:
    """The combined model of one PSD-family topology (FPM = s_a, MLM = s_b) and the FPM.

    Events are the FPM's, evaluated on the global state as in the authors' code (specs 3.3).

    Args:
        mlm: the machine-learned model (trainable).
        topology: one of :data:`~twinfer.models.TOPOLOGIES`.
        key: the key of the connection matrices' initialisation noise (Tab. 2).
        noise: half-width of that noise.

    Returns:
        The combined model and its friction-free physics model.

    """
    fpm = BouncingBall2D(mu=0.0)
    combo = psd(System(fpm, "vector_field", trainable=False), System(mlm), topology, key=key, noise=noise)
    return CombinedModel(combo, BALL_STATE, events="global", event_model=fpm), fpm
