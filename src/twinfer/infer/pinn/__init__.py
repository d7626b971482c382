"""Physics-informed neural networks for MDOF oscillators: network, physics losses, trainer.

References:
    Haywood-Alexander, Arcieri, Kamariotis, Chatzi, "Response estimation and system identification of
    dynamical systems via physics-informed neural networks", arXiv:2410.01340 (2024).

"""

from twinfer.infer.pinn._bayes import (
    affine_force,
    force_log_posterior,
    gamma_logpdf,
    layer_estimate,
    layer_log_posterior,
)
from twinfer.infer.pinn._fit import PinnFit, fit_pinn, held_force_collocation, network_response
from twinfer.infer.pinn._loss import (
    ChainProblem,
    LossWeights,
    SensorProblem,
    StateProblem,
    projected_parameters,
    sensor_losses,
    sensor_problem,
    state_losses,
    state_problem,
)
from twinfer.infer.pinn._network import ACTIVATIONS, StateNetwork
from twinfer.infer.pinn._physics import (
    PositiveParameters,
    chain_residuals,
    check_parameter_names,
    observed_dofs,
    predicted_force,
)
from twinfer.infer.pinn._scores import StateScores, residual_scales, score_states
from twinfer.infer.pinn._trainer import TrainResult, TrainSettings, loss_parts, train
from twinfer.infer.pinn._two_stage import LayerData, TwoStageResult, repeat_noise_sd, two_stage_posterior

__all__ = [
    "ACTIVATIONS",
    "ChainProblem",
    "LayerData",
    "LossWeights",
    "PinnFit",
    "PositiveParameters",
    "SensorProblem",
    "StateNetwork",
    "StateProblem",
    "StateScores",
    "TrainResult",
    "TrainSettings",
    "TwoStageResult",
    "chain_residuals",
    "affine_force",
    "force_log_posterior",
    "gamma_logpdf",
    "held_force_collocation",
    "layer_estimate",
    "layer_log_posterior",
    "check_parameter_names",
    "fit_pinn",
    "loss_parts",
    "network_response",
    "observed_dofs",
    "predicted_force",
    "projected_parameters",
    "sensor_losses",
    "sensor_problem",
    "state_losses",
    "state_problem",
    "repeat_noise_sd",
    "residual_scales",
    "score_states",
    "train",
    "two_stage_posterior",
]
