"""Learning: SINDy interface laws, neural building blocks as models, one training loop for any model."""

from twinfer.learn._neural import MLP, RNN, SecondOrderNeuralODE, apply_mlp, init_mlp
from twinfer.learn._sindy import (
    TERMS,
    SindyFit,
    balance_force,
    fit_interface_law,
    highpass,
    library,
    library_law,
    library_reaction,
    linear_coefficients,
    reconstruct_relative,
)
from twinfer.learn._train import TrainResult, TrainSettings, train, trajectory_loss

__all__ = [
    "MLP",
    "RNN",
    "TERMS",
    "SecondOrderNeuralODE",
    "SindyFit",
    "TrainResult",
    "TrainSettings",
    "apply_mlp",
    "balance_force",
    "fit_interface_law",
    "highpass",
    "init_mlp",
    "library",
    "library_law",
    "library_reaction",
    "linear_coefficients",
    "reconstruct_relative",
    "train",
    "trajectory_loss",
]
