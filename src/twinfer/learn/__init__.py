"""Learning: SINDy interface laws, a NARX surrogate, neural blocks as models, one training loop."""

from twinfer.learn._emps import controller_checks, open_loop_floor
from twinfer.learn._least_squares import duffing_equation_error_fit, gain_fit, output_error_fit
from twinfer.learn._narx import NARX, NarxConfig, NarxFit, fit_narx, narx_metrics, narx_windows
from twinfer.learn._neural import MLP, RNN, SecondOrderNeuralODE, apply_mlp, init_mlp
from twinfer.learn._pelton_narx import hydraulics_scenarios, narx_statics, scenario_units
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
    "NARX",
    "RNN",
    "TERMS",
    "NarxConfig",
    "NarxFit",
    "SecondOrderNeuralODE",
    "SindyFit",
    "TrainResult",
    "TrainSettings",
    "apply_mlp",
    "balance_force",
    "controller_checks",
    "fit_interface_law",
    "duffing_equation_error_fit",
    "fit_narx",
    "gain_fit",
    "highpass",
    "hydraulics_scenarios",
    "init_mlp",
    "library",
    "library_law",
    "library_reaction",
    "linear_coefficients",
    "narx_metrics",
    "narx_statics",
    "narx_windows",
    "open_loop_floor",
    "output_error_fit",
    "reconstruct_relative",
    "scenario_units",
    "train",
    "trajectory_loss",
]
