"""Fitting a state network (and its system parameters) to a problem's loss: the two-phase PINN fit.

:func:`fit_pinn` trains a :class:`~twinfer.infer.pinn.StateNetwork` alone, or jointly with
:class:`~twinfer.infer.pinn.PositiveParameters`, on the loss of a sensor problem (Eq 17) or a state
problem (Eq 23): Adam, then optionally L-BFGS on a second problem (heavier physics weights once the data
are fitted, as the repository's phase 2) with the parameters solved exactly for the network's states at
every step (variable projection, :func:`~twinfer.infer.pinn.projected_parameters`).
:func:`network_response` evaluates a trained network on a time grid.

References:
    Haywood-Alexander et al., arXiv:2410.01340, Eq 15-17 and 23, sections 2.5-2.6; Golub & Pereyra,
    Inverse Problems 19 (2003) R1-R26 (variable projection).

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from twinfer.checkpoint import Checkpoint
from twinfer.errors import TwinferValueError
from twinfer.infer.pinn._loss import SensorProblem, StateProblem, projected_parameters
from twinfer.infer.pinn._network import StateNetwork
from twinfer.infer.pinn._physics import PositiveParameters, predicted_force
from twinfer.infer.pinn._trainer import LossFn, Progress, TrainResult, TrainSettings, train
from twinfer.models import Chain

Problem = SensorProblem | StateProblem
Losses = Callable[[StateNetwork, PositiveParameters | None, Any], tuple[Any, dict[str, Any]]]
"""``losses(net, theta, problem) -> (total, parts)``: :func:`~twinfer.infer.pinn.sensor_losses` or
:func:`~twinfer.infer.pinn.state_losses`."""


class PinnFit(NamedTuple):
    """What :func:`fit_pinn` returns: the trained network, its parameters (None if none) and the record."""

    net: StateNetwork
    theta: PositiveParameters | None
    result: TrainResult


def _loss(losses: Losses, problem: Problem, project: bool) -> LossFn:
    """The trainer's loss of ``(net,)`` or ``(net, theta)``, with the parameters' values among its parts."""

    def loss_fn(trainable: tuple[Any, ...]) -> tuple[Any, dict[str, Any]]:
        net, *rest = trainable
        theta = rest[0] if rest else None
        if theta is not None and project:
            theta = projected_parameters(net, theta, problem)
        total, parts = losses(net, theta, problem)
        if theta is not None:  # the parameters' trajectories, for a convergence figure
            parts = {**parts, **{f"param.{k}": v for k, v in theta.as_dict().items()}}
        return total, parts

    return loss_fn


def fit_pinn(
    net: StateNetwork,
    theta: PositiveParameters | None,
    losses: Losses,
    problem: Problem,
    settings: TrainSettings,
    *,
    lbfgs_problem: Problem | None = None,
    project: bool = False,
    progress: Progress | None = None,
    checkpoint: Checkpoint | None = None,
    stage: str = "train PINN",
) -> PinnFit:
    """Train ``net`` (and ``theta``) on ``losses(net, theta, problem)``: Adam, then L-BFGS.

    Args:
        net: the state network at its initialisation.
        theta: the system parameters trained with it (None: the problem's model is known).
        losses: the problem's loss (:data:`Losses`).
        problem: the data, collocation and weights of the Adam phase (and of L-BFGS unless
            ``lbfgs_problem`` is given).
        settings: the trainer's settings (``settings.lbfgs_steps`` > 0 for an L-BFGS phase).
        lbfgs_problem: the L-BFGS phase's problem if it differs (for instance heavier physics weights).
        project: in the L-BFGS phase solve ``theta`` exactly for the network's states at every step
            (variable projection; needs ``theta``), and return the solution at the final network.
        progress: ``progress(stage, epoch, epochs)`` callback.
        checkpoint: where the trainer keeps its state between chunks (None: nowhere).
        stage: the progress label.

    Returns:
        :class:`PinnFit`; the training history holds ``param.<name>`` per chunk when ``theta`` is trained.

    Raises:
        TwinferValueError: ``project`` without parameters to solve for.

    References:
        Haywood-Alexander et al., Eq 17 and 23, section 2.6 (two phases); Golub & Pereyra (2003).

    """
    if project and theta is None:
        raise TwinferValueError("fit_pinn project: expected parameters theta to solve for; received None.")
    second = problem if lbfgs_problem is None else lbfgs_problem
    result = train(
        (net,) if theta is None else (net, theta),
        _loss(losses, problem, False),
        settings,
        progress=progress,
        checkpoint=checkpoint,
        stage=stage,
        lbfgs_loss_fn=_loss(losses, second, True) if (lbfgs_problem is not None or project) else None,
    )
    net_fit, *rest = result.trainable
    theta_fit = rest[0] if rest else None
    if project and theta_fit is not None:  # the L-BFGS phase solved for them; the solution at the end
        theta_fit = eqx.filter_jit(projected_parameters)(net_fit, theta_fit, second)
    return PinnFit(net_fit, theta_fit, result)


def network_response(
    net: StateNetwork, model: Chain, params: Any, times: Float[ArrayLike, " T"]
) -> dict[str, np.ndarray]:
    """A chain's network states at ``times``: ``u``, ``udot``, ``uddot`` (T, n) and the Eq 15 ``force``.

    The accelerations are the network's time derivative of its velocities; the force is the one the
    states imply through the chain's equation of motion with ``params`` (Eq 15).
    """
    z, dz = eqx.filter_jit(lambda nt, ts: nt.batch(ts))(net, jnp.asarray(times))
    force = predicted_force(model, params, z, dz)
    n = model.n_dof
    return {"u": np.asarray(z[:, :n]), "udot": np.asarray(z[:, n:]), "uddot": np.asarray(dz[:, n:]),
            "force": np.asarray(force)}  # fmt: skip


def held_force_collocation(
    times: Float[ArrayLike, " T"], stride: int, midstep: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``i`` (every ``stride``-th sample) of the held force samples used, and the physics' times.

    A record whose force sample ``f_i`` is held over ``[t_i, t_{i+1})`` (zero-order hold) has, at the
    mid-step time ``t_i + dt/2``, exactly the force ``f_i`` and a smooth state, whereas at ``t_i`` the force
    jumps and a smooth network's derivative effectively sees ``(f_{i-1} + f_i)/2``: half a step of delay,
    a phase error that biases damping estimates by several percent. ``midstep=False`` keeps the samples
    (the PINN paper's repository's choice).

    Returns:
        ``(idx, t_col)``: the sample indices and the collocation times (the last sample dropped at
        mid-steps, having no step after it).

    Raises:
        TwinferValueError: a stride that is not a positive integer.

    References:
        specs/pinn.md 1.5 (the held force); Haywood-Alexander et al., Eq 22-24 (the physics' points).

    """
    if isinstance(stride, bool) or not isinstance(stride, int | np.integer) or stride < 1:
        raise TwinferValueError(
            f"held_force_collocation stride: expected an integer >= 1; received {stride!r}."
        )
    t = np.asarray(times, dtype=np.float64)
    idx = np.arange(0, t.size, stride)
    if not midstep:
        return idx, t[idx]
    idx = idx[idx < t.size - 1]
    return idx, 0.5 * (t[idx] + t[idx + 1])
