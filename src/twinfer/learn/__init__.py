"""Learning: neural building blocks as models and one training loop for any model with parameters."""

from twinfer.learn._neural import MLP, RNN, SecondOrderNeuralODE, apply_mlp, init_mlp
from twinfer.learn._train import TrainResult, TrainSettings, train, trajectory_loss

__all__ = [
    "MLP",
    "RNN",
    "SecondOrderNeuralODE",
    "TrainResult",
    "TrainSettings",
    "apply_mlp",
    "init_mlp",
    "train",
    "trajectory_loss",
]
