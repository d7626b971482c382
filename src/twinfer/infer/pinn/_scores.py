"""A trained PINN's states scored against a simulated chain record, and the residual scales it trains with.

References:
    Haywood-Alexander, Arcieri, Kamariotis, Chatzi (2024), Tables 2 and 5 (fitness per DOF, eq. 25);
    specs/pinn.md 1.7 (residual scales) and D9 (the force fitness "Obs f").

"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from twinfer import metrics
from twinfer.infer.pinn._fit import network_response
from twinfer.infer.pinn._trainer import TrainResult
from twinfer.models import Chain
from twinfer.sim import ChainData


def residual_scales(acc_noisy: np.ndarray) -> tuple[float, float, float]:
    """Residual scales from the measured accelerations: (acceleration range, velocity, displacement).

    Velocity and displacement scales divide by omega = 2 pi 0.2 rad/s, mid-band of the chains' natural
    frequencies (specs 1.7), so only measured data and the forcing band set them.
    """
    acc = float(np.ptp(acc_noisy))
    omega = 2 * np.pi * 0.2
    return acc, acc / omega, acc / omega**2


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

    Metrics: the fitness table (:func:`twinfer.metrics.fitness_by_dof`), ``fitness.f1`` of the force at
    DOF 1 ("Obs f", specs D9) and the training's time, epochs and final loss.

    Args:
        net: the trained state network.
        model: the chain the network's physics residual used.
        params: the chain's parameters (learned ones for joint estimation).
        data: the record (:func:`twinfer.sim.simulate_chain`).
        observed: the measured DOFs (1-based).
        result: the training's result.

    Returns:
        The metrics, the network's and the truth's ``u``/``udot``/``uddot``, and the arrays to keep.

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
