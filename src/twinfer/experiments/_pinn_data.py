"""Data of the PINN paper's case studies: chains, band-limited forcing, RK4 truth, noise, scenarios.

Shared by ``pinn-sparse``, ``pinn-joint`` and ``pinn-bayes`` (specs/pinn.md 1.4-1.6 and 4.1): dynasim-0.1.6
banded noise (amplitude 500, 0.05-1.0 Hz, seed 43810 + DOF index), fixed-step RK4 from rest with the force
held over each step, accelerations from the equation of motion with the clean force, and the repository's
per-channel SNR noise with its seeds (:func:`twinfer.sim.simulate_chain`). Every number comes from the
library (models, sim, infer.pinn, metrics).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import jax
import numpy as np
import pydantic

from twinfer.experiments._case import Case, Progress, register
from twinfer.experiments._checkpointing import CheckpointSettings, case_checkpoint
from twinfer.infer.pinn import (
    LossWeights,
    PositiveParameters,
    StateNetwork,
    TrainResult,
    TrainSettings,
    fit_pinn,
    sensor_losses,
)
from twinfer.infer.pinn._record_problems import sensor_record_problem
from twinfer.models import Chain, pinn_chain
from twinfer.report import PaperValue, RunArtifacts, at_least
from twinfer.sim import ChainData, simulate_chain


def fitness_row(keys: Sequence[str], row: Sequence[float], source: str) -> dict[str, PaperValue]:
    """A fitness table's row as paper values ``fitness.<key>`` (Tables 2 and 5), all from ``source``."""
    tol = at_least(
        0.99,
        "a fitness in percent from another training run and noise draw: at most about one point below the "
        "paper's, higher passes",
    )
    return {f"fitness.{k}": PaperValue(v, source, tol) for k, v in zip(keys, row, strict=True)}


# -- shared PINN driver of pinn-sparse and pinn-joint ---------------------------------------------------
class PinnTrainConfig(CheckpointSettings):
    """Network, loss and trainer settings shared by the PINN cases (specs D1: the paper gives none)."""

    width: int = pydantic.Field(128, ge=1, description="Hidden width (repository: 256).")
    depth: int = pydantic.Field(4, ge=1, description="Hidden layers (repository: 4).")
    activation: Literal["tanh", "silu", "elu", "sin"] = pydantic.Field("tanh", description="Activation.")
    n_fourier: int = pydantic.Field(64, ge=0, description="Fourier input features (0: plain time).")
    max_cycles: float = pydantic.Field(60.0, gt=0, description="Highest feature frequency, cycles/window.")
    epochs: int = pydantic.Field(4000, ge=1, description="Maximum epochs.")
    lbfgs_steps: int = pydantic.Field(0, ge=0, description="L-BFGS steps after Adam (0: Adam only, paper).")
    learning_rate: float = pydantic.Field(1e-3, gt=0, description="Adam step of the network.")
    param_learning_rate: float = pydantic.Field(1e-2, gt=0, description="Adam step of system parameters.")
    decay: float = pydantic.Field(0.9995, gt=0, le=1, description="Network learning-rate decay per epoch.")
    chunk: int = pydantic.Field(250, ge=1, description="Epochs per jitted chunk.")
    patience: int = pydantic.Field(6, ge=1, description="Chunks without improvement before stopping.")
    min_improvement: float = pydantic.Field(
        1e-3, ge=0, description="Relative improvement resetting patience."
    )
    lambda_obs: float = pydantic.Field(1.0, ge=0, description="Weight of L_o (Eq 17).")
    lambda_cc: float = pydantic.Field(10.0, ge=0, description="Weight of L_cc (Eq 17).")
    lambda_ode: float = pydantic.Field(10.0, ge=0, description="Weight of L_p (Eq 17).")
    lambda_ic: float = pydantic.Field(0.0, ge=0, description="Weight of a soft rest condition (0: paper).")
    param_solve: Literal["gradient", "projection"] = pydantic.Field(
        "gradient",
        description="Joint estimation in the L-BFGS phase: parameters trained by gradient, or solved exactly "
        "for the current states (variable projection; the loss is quadratic in c, k, kappa, mu).",
    )
    lbfgs_physics_factor: float = pydantic.Field(
        1.0, gt=0, description="Factor on lambda_cc and lambda_ode in the L-BFGS phase (1: same loss)."
    )
    anchor_rest: bool = pydantic.Field(True, description="Hard rest initial condition (False: paper).")
    obs_stride: int = pydantic.Field(8, ge=1, description="Observation every n-th sample (repository: 8).")
    col_stride: int = pydantic.Field(8, ge=1, description="Collocation every n-th sample (repository: 8).")
    compare_ukf: bool = pydantic.Field(True, description="Also run the UKF + RTS smoother on the same data.")


def train_settings(config: PinnTrainConfig) -> TrainSettings:
    """Trainer settings from a case configuration."""
    keys = ("epochs", "learning_rate", "param_learning_rate", "decay", "chunk", "patience", "min_improvement",
            "lbfgs_steps")  # fmt: skip
    return TrainSettings(**{k: getattr(config, k) for k in keys})


def train_sensor_pinn(
    case: str,
    config: PinnTrainConfig,
    model: Chain,
    data: ChainData,
    unobserved: Sequence[int],
    theta: PositiveParameters | None,
    progress: Progress,
) -> tuple[Any, PositiveParameters | None, TrainResult, tuple[int, ...]]:
    """Build the Eq 17 problem from ``data`` and train the network (and ``theta``).

    The problem is :func:`~twinfer.infer.pinn._record_problems.sensor_record_problem`'s.
    """
    weights = LossWeights(config.lambda_obs, config.lambda_cc, config.lambda_ode, config.lambda_ic)
    problem, observed, out_scale = sensor_record_problem(
        model, data, unobserved, config.obs_stride, config.col_stride, weights
    )
    net = StateNetwork(
        jax.random.key(config.seed), model.n_state, float(data.times[0]),
        float(data.times[-1] - data.times[0]), width=config.width, depth=config.depth,
        activation=config.activation,
        out_scale=out_scale, n_fourier=config.n_fourier,
        max_cycles=config.max_cycles, initial_state=np.zeros(model.n_state) if config.anchor_rest else None,
    )  # fmt: skip
    inputs = (data.times, data.acc_noisy, data.force_noisy)
    ckpt = case_checkpoint(case, config, case, data=inputs, exclude=("compare_ukf",))
    # the repository's phase 2 raises the physics weight once the data are fitted (specs 2.6)
    w, fac = problem.weights, config.lbfgs_physics_factor
    second = dataclasses.replace(problem, weights=w._replace(cc=w.cc * fac, ode=w.ode * fac))
    fit = fit_pinn(
        net, theta, sensor_losses, problem, train_settings(config), progress=progress, checkpoint=ckpt,
        lbfgs_problem=second if fac != 1.0 else None,
        project=theta is not None and config.param_solve == "projection",
    )  # fmt: skip
    return fit.net, fit.theta, fit.result, observed


def pinn_memory_estimate(config: Any) -> int:
    """Peak bytes of a PINN case's run, for :func:`~twinfer.experiments.resolve_config` to refuse one.

    It grows with ``n_samples`` (the data, the points and their activations).

    Measured on pinn-sparse at width 16, depth 4, 8 Fourier features: peak RSS 858 MB at 512 samples,
    876 MB at 4 096, about 5 kB per sample, that is 64 bytes per sample and activation of a point
    (2 n_fourier + depth width); the activations are taken to scale linearly with the width. Above a
    512 MiB floor (the numerical stack itself).
    """
    per_sample = 64 * (2 * config.n_fourier + config.depth * config.width)
    return 512 * 2**20 + per_sample * config.n_samples


SENSOR_QUICK = {
    "epochs": 100,
    "lbfgs_steps": 50,
    "chunk": 50,
    "width": 16,
    "depth": 2,  # compile-bound at this size: 2 hidden layers take about 20 % less CPU than 4 per case
    "n_fourier": 8,
    "n_samples": 512,
    "horizon": 10.0,
    "max_cycles": 10.0,
}
"""The ``--quick`` settings of ``pinn-sparse`` and ``pinn-joint``."""


def simulate_case(
    config: Any,
    n_dof: int,
    truth_system: str,
    model_system: str,
    factors: Any,
    snr_db: float,
    progress: Progress,
) -> tuple[Chain, Chain, ChainData]:
    """The truth chain, the PINN's model chain (forced at DOF 1) and the record of ``pinn-sparse``/``-joint``.

    The record is :func:`simulate_chain` over ``config.horizon`` with ``config.n_samples`` samples and the
    repository's noise seeds (specs 1.6).
    """
    truth_chain = pinn_chain(n_dof, truth_system, [1], factors)
    model = pinn_chain(n_dof, model_system, [1])
    progress("simulate", 0, 1)
    data = simulate_chain(truth_chain, config.horizon, config.n_samples, snr_db, {"acc": 2024, "force": 1234})
    progress("simulate", 1, 1)
    return truth_chain, model, data


def register_pinn_case(
    name: str,
    description: str,
    config_type: type[PinnTrainConfig],
    run: Callable[[Any, Progress], RunArtifacts],
    figures: Callable[[Mapping[str, Any], Any], dict[str, Any]],
    quick: Mapping[str, Any],
    paper_for: Callable[[Any], Mapping[str, PaperValue]],
) -> Case:
    """Register a PINN case with the memory estimate and size settings every PINN case shares."""
    return register(
        Case(
            name,
            description,
            config_type,
            run,
            figures,
            quick,
            paper_for=paper_for,
            memory_estimate=pinn_memory_estimate,
            size_keys=("n_samples", "width", "depth", "n_fourier"),
        )
    )
