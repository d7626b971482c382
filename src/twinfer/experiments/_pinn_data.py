"""Data of the PINN paper's case studies: chains, band-limited forcing, RK4 truth, noise, scenarios.

Shared by ``pinn-sparse``, ``pinn-joint`` and ``pinn-bayes`` (specs/pinn.md 1.4-1.6 and 4.1): dynasim-0.1.6
banded noise (amplitude 500, 0.05-1.0 Hz, seed 43810 + DOF index), fixed-step RK4 from rest with the force
held over each step, accelerations from the equation of motion with the clean force, and the repository's
per-channel SNR noise with its seeds. Every number comes from the library (models, sim, metrics).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import jax
import numpy as np
import pydantic

from twinfer import metrics
from twinfer.data import Dataset
from twinfer.experiments._case import Case, Progress, register
from twinfer.experiments._checkpointing import CheckpointSettings, case_checkpoint
from twinfer.infer import Central, estimate
from twinfer.infer.pinn import (
    LossWeights,
    PositiveParameters,
    StateNetwork,
    TrainResult,
    TrainSettings,
    fit_pinn,
    network_response,
    observed_dofs,
    sensor_losses,
    sensor_problem,
)
from twinfer.models import Chain
from twinfer.report import PaperValue, RunArtifacts, at_least
from twinfer.sim import (
    accelerations,
    add_noise_numpy_legacy,
    bandlimited_noise_dynasim,
    discretise,
    noise_sd_for_snr,
    simulate_discrete,
)

NOMINAL = {"m": 10.0, "c": 1.0, "k": 15.0, "kappa": 100.0, "mu": 0.75}


def perturbation_factors(n_dof: int, seed_of_dof: Any) -> np.ndarray:
    """Value-error factors ``1 + sign r`` per DOF, the repository recipe of specs 4.1 (one per DOF)."""
    factors = []
    for i in range(n_dof):
        state = np.random.RandomState(int(seed_of_dof(i)))
        r = state.uniform(0.05, 0.10)
        sign = [-1.0, 1.0][state.randint(0, 2)]
        factors.append(1.0 + sign * r)
    return np.asarray(factors)


def chain_of(
    n_dof: int,
    nonlinearity: str,
    forced_dofs: Sequence[int],
    factors: Any = None,
    values: Mapping | None = None,
) -> Chain:
    """A nominal chain (``nonlinearity`` in duffing/vdp/linear), optionally perturbed.

    Every c, k, kappa, mu is multiplied by per-DOF ``factors`` (the value-error truth, with the
    nonlinear ones perturbed too, specs D11).
    """
    vals = {**NOMINAL, **(values or {})}
    fac = np.ones(n_dof) if factors is None else np.asarray(factors)
    extra: dict[str, Any] = {}
    if nonlinearity == "duffing":
        extra["cubic_stiffness"] = vals["kappa"] * fac
    elif nonlinearity == "vdp":
        extra["vdp_damping"] = vals["mu"] * fac
    elif nonlinearity != "linear":
        raise ValueError(f"nonlinearity: expected 'duffing', 'vdp' or 'linear'; received {nonlinearity!r}.")
    return Chain(
        [vals["m"]] * n_dof,
        vals["k"] * fac,
        vals["c"] * fac,
        forced_dofs=list(forced_dofs),
        n_dof=n_dof,
        **extra,
    )


@dataclass(frozen=True)
class ChainData:
    """Clean truth and noisy measurements on one time grid."""

    times: np.ndarray
    states: np.ndarray  # (T, 2n) clean u, v
    acc: np.ndarray  # (T, n) clean accelerations
    force: np.ndarray  # (T, n_forced) clean forces
    acc_noisy: np.ndarray
    force_noisy: np.ndarray


def forced_response(
    chain: Chain, horizon: float, n_samples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times, forces and RK4 states from rest under dynasim banded noise at the forced DOFs (specs 1.4-1.5).

    The force at DOF ``d`` is :func:`~twinfer.sim.bandlimited_noise_dynasim` (0.05-1.0 Hz, amplitude
    500, seed ``43810 + d - 1``), held over each step.
    """
    ts = np.linspace(0.0, horizon, n_samples)
    force = np.stack(
        [bandlimited_noise_dynasim(ts, (0.05, 1.0), 500.0, seed=43810 + d - 1) for d in chain.forced_dofs],
        axis=1,
    )
    traj = simulate_discrete(
        discretise(chain, float(ts[1] - ts[0]), "rk4"), np.zeros(chain.n_state), force[:-1]
    )
    return ts, force, np.asarray(traj.states)


def simulate_chain(
    chain: Chain, horizon: float, n_samples: int, snr_db: float, seeds: Mapping[str, int]
) -> ChainData:
    """RK4 truth from rest under dynasim banded noise at the forced DOFs, plus SNR noise (specs 1.4-1.6)."""
    ts, force, states = forced_response(chain, horizon, n_samples)
    acc = np.asarray(accelerations(chain, states, force))
    return ChainData(
        times=ts,
        states=states,
        acc=acc,
        force=force,
        acc_noisy=add_noise_numpy_legacy(acc, snr_db, seeds["acc"]),
        force_noisy=add_noise_numpy_legacy(force, snr_db, seeds["force"]),
    )


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


def scales(acc_noisy: np.ndarray) -> tuple[float, float, float]:
    """Residual scales from the measured accelerations: (acceleration range, velocity, displacement).

    Velocity and displacement scales divide by omega = 2 pi 0.2 rad/s, mid-band of the chains' natural
    frequencies (specs 1.7), so only measured data and the forcing band set them.
    """
    acc = float(np.ptp(acc_noisy))
    omega = 2 * np.pi * 0.2
    return acc, acc / omega, acc / omega**2


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
    """Build the Eq 17 problem from ``data`` and train the network (and ``theta``)."""
    observed = observed_dofs(model.n_dof, list(unobserved))
    sensed = [d - 1 for d in observed]
    io = np.arange(0, data.times.size, config.obs_stride)
    ic = np.arange(0, data.times.size, config.col_stride)
    acc_s, vel_s, disp_s = scales(data.acc_noisy[:, sensed])
    problem = sensor_problem(
        model, list(unobserved), data.times[io], data.acc_noisy[io][:, sensed], data.force_noisy[io],
        data.times[ic], data.force_noisy[ic], acc_scale=acc_s, vel_scale=vel_s,
        weights=LossWeights(config.lambda_obs, config.lambda_cc, config.lambda_ode, config.lambda_ic),
    )  # fmt: skip
    net = StateNetwork(
        jax.random.key(config.seed), model.n_state, float(data.times[0]),
        float(data.times[-1] - data.times[0]), width=config.width, depth=config.depth,
        activation=config.activation,
        out_scale=[disp_s] * model.n_dof + [vel_s] * model.n_dof, n_fourier=config.n_fourier,
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


def ukf_rts_states(
    model: Chain, data: ChainData, observed: Sequence[int], stride: int, snr_db: float
) -> dict[str, np.ndarray]:
    """UKF + RTS smoother on the PINN's data.

    Accelerations at the same DOFs and instants (every ``stride``-th sample, the others masked), the
    noisy measured force as input, start at rest.
    """
    sensed = [d - 1 for d in observed]
    names = tuple(f"a{d}" for d in observed)
    p = model.params
    chain = Chain(
        p["m"], p["k"], p["c"], cubic_stiffness=p.get("kappa"), vdp_damping=p.get("mu"),
        forced_dofs=model.forced_dofs, outputs=names,
    )  # fmt: skip
    mask = np.zeros((data.times.size, len(sensed)), dtype=bool)
    mask[::stride] = True
    obs = np.where(mask, data.acc_noisy[:, sensed], np.nan)
    dataset = Dataset(
        data.times, obs, inputs=data.force_noisy, mask=mask, output_names=names,
        input_names=chain.input_names,
        metadata={"alignment": "held"},  # the published baseline's reading (REPRODUCTION.md)
    )  # fmt: skip
    n = chain.n_dof
    force_sd = float(np.asarray(noise_sd_for_snr(data.force_noisy, snr_db)).max())
    process = [1e-9] * n + [max(force_sd / 10.0 * float(data.times[1] - data.times[0]), 1e-9)] * n
    noise_sd = np.asarray(noise_sd_for_snr(data.acc_noisy[:, sensed], snr_db))
    est = estimate(chain, dataset, Central("ukf", smoother=True), x0=0.0, state_sd=1e-6, process_sd=process,
                   noise_sd=noise_sd)  # fmt: skip
    means = np.asarray(est.means)
    acc = np.asarray(accelerations(chain, means, data.force_noisy))
    return {"u": means[:, :n], "udot": means[:, n:], "uddot": acc, "u_sd": np.asarray(est.stds)[:, :n]}


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
    truth_chain = chain_of(n_dof, truth_system, [1], factors)
    model = chain_of(n_dof, model_system, [1])
    progress("simulate", 0, 1)
    data = simulate_chain(truth_chain, config.horizon, config.n_samples, snr_db, {"acc": 2024, "force": 1234})
    progress("simulate", 1, 1)
    return truth_chain, model, data


class StateScores(NamedTuple):
    """What :func:`score_states` returns: metrics, the network's and the truth's states, arrays."""

    metrics: dict[str, float]
    est: dict[str, np.ndarray]
    truth: dict[str, np.ndarray]
    arrays: dict[str, Any]


def score_states(
    net: Any, model: Chain, params: Any, data: ChainData, observed: Sequence[int], result: TrainResult
) -> StateScores:
    """The trained network's states on the clean grid, scored (Tables 2 and 5), and the arrays kept.

    Metrics: the fitness table, ``fitness.f1`` of the force at DOF 1 ("Obs f", specs D9) and the
    training's time, epochs and final loss.
    """
    n = model.n_dof
    est = network_response(net, model, params, data.times)
    truth = {"u": data.states[:, :n], "udot": data.states[:, n:], "uddot": data.acc}
    out = metrics.fitness_by_dof(est, truth, observed)
    out["fitness.f1"] = float(metrics.fitness(est["force"][:, 0], data.force[:, 0]))
    out["timing.train_s"] = result.train_s
    out["train.epochs"] = float(result.epochs)
    out["train.final_loss"] = result.history["loss"][-1]
    arrays: dict[str, Any] = {
        "times": data.times,
        "truth_u": truth["u"],
        "pinn_u": est["u"],
        "observed": np.asarray(observed),
        "history_epoch": np.asarray(result.history["epoch"]),
        "history_loss": np.asarray(result.history["loss"]),
    }
    return StateScores(out, est, truth, arrays)


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
