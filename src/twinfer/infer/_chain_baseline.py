"""The Bayesian-filtering baseline of the PINN paper's cases: a UKF with an RTS smoother on the same data.

The PINN paper compares its response estimates with a Kalman-family baseline given the same sparse,
noisy accelerations and the measured force; :func:`ukf_rts_states` is that baseline on a chain record
(:class:`twinfer.sim.ChainData`), through :func:`twinfer.infer.estimate` with a smoothing
:class:`~twinfer.infer.Central` UKF.

References:
    Haywood-Alexander et al., "Response estimation and system identification of dynamical systems via
    physics-informed neural networks", section 4.1; Saerkkae, "Bayesian Filtering and Smoothing", ch. 9
    (unscented RTS smoother); specs/pinn.md 4.1.

"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from twinfer.data import Dataset
from twinfer.infer._api import Central, estimate
from twinfer.models import Chain
from twinfer.sim import ChainData, accelerations, noise_sd_for_snr


def ukf_rts_states(
    model: Chain, data: ChainData, observed: Sequence[int], stride: int, snr_db: float
) -> dict[str, np.ndarray]:
    """UKF + RTS smoother on the PINN's data.

    Accelerations at the same DOFs and instants (every ``stride``-th sample, the others masked), the
    noisy measured force as input, start at rest. The measurement noise sd is the one of ``snr_db`` per
    channel; the process noise is 1e-9 on the displacements and a tenth of the force noise's sd times the
    step on the velocities.

    Args:
        model: the chain whose parameters the filter takes.
        data: the record (times, noisy accelerations, noisy force).
        observed: the measured DOFs (1-based).
        stride: samples between measurements.
        snr_db: the record's signal-to-noise ratio [dB].

    Returns:
        The smoothed displacements ``u``, velocities ``udot``, accelerations ``uddot`` (from the equation
        of motion at the smoothed states with the measured force) and the displacements' sds ``u_sd``.

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
