"""Simulation: integrator steps, discretisation, graph nodes, fixed-step and adaptive solves, signals."""

from twinfer.sim._batch import simulate_batch
from twinfer.sim._chain_record import ChainData, chain_response, forced_response, simulate_chain
from twinfer.sim._dataset import simulate_dataset
from twinfer.sim._discretise import METHODS, DiscreteModel, discretise, exact_matrices, integrator_step
from twinfer.sim._emps import open_loop_simulator, simulate_closed_loop
from twinfer.sim._grid import simulate_grid
from twinfer.sim._grid_outage import simulate_grid_outage, without_line
from twinfer.sim._node import Dynamics, GraphNode, StagedNode, graph_node, heun_node
from twinfer.sim._noise import add_noise, add_noise_numpy_legacy, noise_sd_for_snr
from twinfer.sim._particles import (
    fine_input,
    particle_simulator,
    simulate_particles_feedback,
)
from twinfer.sim._records import accelerations, measured_inputs
from twinfer.sim._signals import (
    bandlimited_noise,
    bandlimited_noise_dynasim,
    multisine,
    sine_sweep,
    white_noise,
)
from twinfer.sim._simulate import simulate, simulate_discrete
from twinfer.sim._steps import euler_step, heun_step, rk4_step, semi_implicit_euler_step, substep_loop
from twinfer.sim._trajectory import Trajectory

__all__ = [
    "METHODS",
    "DiscreteModel",
    "Dynamics",
    "GraphNode",
    "ChainData",
    "Trajectory",
    "accelerations",
    "chain_response",
    "add_noise",
    "add_noise_numpy_legacy",
    "bandlimited_noise",
    "bandlimited_noise_dynasim",
    "discretise",
    "euler_step",
    "fine_input",
    "forced_response",
    "exact_matrices",
    "graph_node",
    "heun_node",
    "integrator_step",
    "heun_step",
    "measured_inputs",
    "multisine",
    "noise_sd_for_snr",
    "open_loop_simulator",
    "rk4_step",
    "semi_implicit_euler_step",
    "substep_loop",
    "simulate",
    "simulate_batch",
    "simulate_closed_loop",
    "simulate_chain",
    "simulate_dataset",
    "simulate_discrete",
    "simulate_grid",
    "simulate_grid_outage",
    "particle_simulator",
    "simulate_particles_feedback",
    "StagedNode",
    "sine_sweep",
    "white_noise",
    "without_line",
]
from twinfer.sim._events import HybridTrajectory, simulate_events  # noqa: E402
from twinfer.sim._events_rk4 import simulate_rk4_sensitivity  # noqa: E402

__all__ += ["HybridTrajectory", "simulate_events", "simulate_rk4_sensitivity"]
from twinfer.sim._timescale import (  # noqa: E402
    STEP_LIMITS,
    Stability,
    StepProblem,
    StepSizeError,
    StepSizeWarning,
    TimeScale,
    check_step,
    fastest_rate,
    stability,
    step_mismatch,
    step_problem,
    unit_hint,
)

__all__ += [
    "STEP_LIMITS",
    "Stability",
    "StepProblem",
    "StepSizeError",
    "StepSizeWarning",
    "TimeScale",
    "check_step",
    "fastest_rate",
    "stability",
    "step_mismatch",
    "step_problem",
    "unit_hint",
]
from twinfer.sim._standalone import simulate_standalone_units  # noqa: E402

__all__ += ["simulate_standalone_units"]
