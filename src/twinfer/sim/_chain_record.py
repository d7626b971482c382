"""Chain records: forced responses of a :class:`~twinfer.models.Chain` from rest, clean and with noise.

Two recipes the cases simulated in their own files: the PINN paper's record (dynasim-0.1.6 banded force
at the forced DOFs, fixed-step RK4 from rest with the force held over each step, accelerations from the
equation of motion with the clean force, per-channel SNR noise with the repository's seeds; specs/pinn.md
1.4-1.6), and a chain forced at every DOF by a given force record, simulated by one jitted scan that
returns its states and accelerations (the compositional-inference paper's 4-DOF chain, SI eq. S20-S21).

"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models import Chain
from twinfer.sim._discretise import discretise
from twinfer.sim._noise import add_noise_numpy_legacy
from twinfer.sim._records import accelerations
from twinfer.sim._signals import bandlimited_noise_dynasim
from twinfer.sim._simulate import simulate_discrete


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

    Args:
        chain: the chain; its ``forced_dofs`` (1-based) receive the force.
        horizon: the record's length [s].
        n_samples: samples on ``[0, horizon]``, both ends included.

    Returns:
        The times (T,), the forces (T, n_forced) and the states (T, 2 n_dof).

    References:
        Haywood-Alexander et al. (2024), the PINN paper; specs/pinn.md 1.4-1.5.

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
    """RK4 truth from rest under dynasim banded noise at the forced DOFs, plus SNR noise (specs 1.4-1.6).

    Args:
        chain: the truth chain (:func:`forced_response`).
        horizon: the record's length [s].
        n_samples: samples on ``[0, horizon]``.
        snr_db: the signal-to-noise ratio of every channel [dB].
        seeds: the noise seeds of the accelerations (``"acc"``) and of the forces (``"force"``),
            :func:`~twinfer.sim.add_noise_numpy_legacy`'s.

    Returns:
        The clean and noisy record.

    """
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


@functools.cache
def chain_response(
    n_dof: int, mass: float, stiffness: float, damping: float, dt: float, method: str
) -> Callable[[Any], tuple[Any, Any]]:
    """Jitted ``forces (N, n) -> (states (N+1, 2n), accelerations (N+1, n))`` of a uniform chain from rest.

    Every DOF is forced; the chain is stepped by :func:`~twinfer.sim.discretise` with ``method``.
    Accelerations are taken at the propagated state with the step's force (the acceleration a sensor
    reads at ``t_{k+1}``, the compositional-inference authors' measurement); row 0 uses ``u_0``. Cached,
    so records of one length share one compilation.

    References:
        Ghorbani & Hackl, SI eq. (S20-S21) (the 4-DOF chain).

    """
    chain = Chain([mass] * n_dof, [stiffness] * n_dof, [damping] * n_dof)
    step = discretise(chain, dt, method)

    @jax.jit
    def run(forces: Any) -> tuple[Any, Any]:
        states = simulate_discrete(step, jnp.zeros(2 * n_dof), forces).states
        held = jnp.concatenate([forces[:1], forces], axis=0)
        acc = accelerations(chain, states, held)
        return states, acc

    return run
