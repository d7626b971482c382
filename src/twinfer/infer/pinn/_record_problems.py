"""The PINN problems of simulated records: sparse accelerometers, and states measured in repeats.

:func:`sensor_record_problem` is Eq. 17's problem of a chain record measured by accelerometers at some
DOFs (sparse sensing, joint state-parameter estimation). The Bayesian PINN case measures the same forced
response R times with independent noise; stage 1 of the two-stage estimator trains a PINN with learned
parameters on the mean of the repeats (specs D13: no true parameters, no clean force).
:func:`repeats_problem` builds that problem: the mean of the states at every ``stride``-th sample, the
physics at the held force's collocation times, and Eq. 23 at fixed noise scales, each residual divided
by the noise sd of the mean of the repeats, estimated from the scatter between them
(:func:`twinfer.infer.pinn.repeat_noise_sd`: data only, no true noise level).

References:
    Haywood-Alexander et al., arXiv:2410.01340 (2024), sections 4.1 and 4.3, Eqs. (17) and (23);
    specs/pinn.md 1.5, D2, D5 and D13.

"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import Float

from twinfer.errors import TwinferValueError
from twinfer.infer.pinn._fit import held_force_collocation
from twinfer.infer.pinn._loss import LossWeights, SensorProblem, StateProblem, sensor_problem, state_problem
from twinfer.infer.pinn._physics import observed_dofs
from twinfer.infer.pinn._scores import residual_scales
from twinfer.infer.pinn._two_stage import repeat_noise_sd
from twinfer.models import Chain
from twinfer.sim import ChainData


def repeats_problem(
    model: Chain,
    times: Float[np.ndarray, " T"],
    z_noisy: Float[np.ndarray, "R T s"],
    f_noisy: Float[np.ndarray, "R T n_in"],
    stride: int,
    midstep: bool,
    weights: LossWeights,
) -> tuple[StateProblem, list[float]]:
    """The state problem of the repeats' mean, and the network's output scales.

    Args:
        model: the chain (its masses turn the force's noise scale into an acceleration's).
        times: the record's sample times.
        z_noisy: the measured displacements then velocities of every repeat.
        f_noisy: the measured force of every repeat.
        stride: samples between the observations the problem fits.
        midstep: the physics at the mid-step times (the force held over each step, specs 1.5) rather than
            at the samples (:func:`twinfer.infer.pinn.held_force_collocation`).
        weights: the loss weights of Eq. 23.

    Returns:
        The :class:`~twinfer.infer.pinn.StateProblem`, and the output scales per state (the range of the
        mean's displacements, then of its velocities).

    """
    idx = np.arange(0, times.size, stride)
    t_obs = times[idx]
    z_mean = z_noisy.mean(axis=0)[idx]
    icol, t_col = held_force_collocation(times, stride, midstep)
    f_mean = f_noisy.mean(axis=0)
    repeats = z_noisy.shape[0]
    sd_z = repeat_noise_sd(z_noisy[:, idx]) / np.sqrt(repeats)  # eq. (23) at fixed noise scales
    sd_f = repeat_noise_sd(f_noisy[:, icol]) / np.sqrt(repeats)
    masses = np.asarray(model.params["m"])
    n = model.n_dof
    problem = state_problem(
        model, t_obs, z_mean, f_mean[idx], disp_scale=sd_z[:n], vel_scale=sd_z[n:], acc_scale=sd_f / masses,
        weights=weights, t_col=t_col, force_col=f_mean[icol],
    )  # fmt: skip
    disp_s, vel_s = float(np.ptp(z_mean[:, :n])), float(np.ptp(z_mean[:, n:]))
    return problem, [disp_s] * n + [vel_s] * n


def sensor_record_problem(
    model: Chain,
    data: ChainData,
    unobserved: Sequence[int],
    obs_stride: int,
    col_stride: int,
    weights: LossWeights,
) -> tuple[SensorProblem, tuple[int, ...], list[float]]:
    """The Eq. 17 problem of a chain record measured by accelerometers at every DOF but ``unobserved``.

    The noisy accelerations at the sensed DOFs every ``obs_stride``-th sample, the noisy measured force at
    the observations and at every ``col_stride``-th sample (the collocation points), each residual over
    the scales the measured accelerations give (:func:`twinfer.infer.pinn.residual_scales`: their range,
    and the velocity and displacement that range means at 0.2 Hz).

    Args:
        model: the PINN's chain.
        data: the record (:func:`twinfer.sim.simulate_chain`).
        unobserved: the 1-based DOFs without a sensor.
        obs_stride: samples between observations.
        col_stride: samples between collocation points.
        weights: the loss weights of Eq. 17.

    Returns:
        The :class:`~twinfer.infer.pinn.SensorProblem`, the sensed DOFs (1-based) and the network's output
        scales per state (the displacement scale, then the velocity scale).

    References:
        Haywood-Alexander et al., arXiv:2410.01340 (2024), section 4.1, Eq. (17); specs/pinn.md D2, D5.

    """
    observed = observed_dofs(model.n_dof, list(unobserved))
    sensed = [d - 1 for d in observed]
    io = np.arange(0, data.times.size, obs_stride)
    ic = np.arange(0, data.times.size, col_stride)
    acc_s, vel_s, disp_s = residual_scales(data.acc_noisy[:, sensed])
    problem = sensor_problem(
        model, list(unobserved), data.times[io], data.acc_noisy[io][:, sensed], data.force_noisy[io],
        data.times[ic], data.force_noisy[ic], acc_scale=acc_s, vel_scale=vel_s, weights=weights,
    )  # fmt: skip
    return problem, observed, [disp_s] * model.n_dof + [vel_s] * model.n_dof


def force_points(
    times: Float[np.ndarray, " T"], stride: int, midstep: bool, heldout: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The samples and times at which stage 2 of the two-stage estimator reads the force (specs D14).

    Stage 1's collocation points (:func:`twinfer.infer.pinn.held_force_collocation`), or with ``heldout``
    the samples half a ``stride`` after them, which stage 1 never fitted, read at the same offset from
    their sample as stage 1's (the mid-step with ``midstep``).

    Returns:
        The sample indices and their times.

    """
    icol, t_col = held_force_collocation(times, stride, midstep)
    if not heldout:
        return icol, t_col
    if stride < 2:
        raise TwinferValueError(
            "force_points: heldout=True expected stride >= 2 (points between the stage-1 ones; the "
            f"cases' obs_stride); received stride={stride}."
        )
    idx = icol + stride // 2
    idx = idx[idx < times.size - 1]
    return idx, times[idx] + (t_col[0] - times[icol[0]])  # same offset as stage 1
