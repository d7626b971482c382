"""The Bouc-Wen benchmark's training record: a ramped random-phase multisine and sampled accelerations.

The pn-smc paper's recipe (specs/pn-smc.md 3.1): a random-phase multisine on equally spaced lines,
ramped linearly over its first 10 %, scaled to a peak force over the record on the observation grid
(:func:`ramped_multisine`); RK4 at the fine rate with the force held per fine step, the states
subsampled to the observation rate, the accelerations from the equation of motion with the force at the
observation instants, and Gaussian noise of a fraction of their RMS (:func:`noisy_accelerations`).

References:
    Longbottom, Champneys & Rogers (pn-smc paper), Sec. 4.1; Noël & Schoukens, "Hysteretic benchmark
    with a dynamic nonlinearity" (2016); specs/pn-smc.md 3.1 and 6.15.

"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from twinfer.models import AbstractModel
from twinfer.sim._cosine_sum import cosine_sum
from twinfer.sim._discretise import discretise
from twinfer.sim._records import accelerations
from twinfer.sim._simulate import simulate_discrete


def ramped_multisine(
    seed: int,
    peak: float,
    n: int,
    rate: float,
    offset: float,
    fs_obs: float,
    lines: tuple[float, float, int] = (0.5, 100.0, 2000),
    duration: float = 3.0,
    ramp: float = 0.3,
) -> np.ndarray:
    """Random-phase multisine on ``lines`` (low, high [Hz], count), ramped over ``ramp`` seconds.

    The phases are drawn uniformly from ``numpy.random.default_rng(seed)``; the signal is scaled so that
    its peak over ``duration`` seconds on the observation grid (``fs_obs``) is ``peak``, and evaluated at
    ``t_k = (k + offset) / rate`` for ``k = 0..n-1``.
    """
    rng = np.random.default_rng(seed)
    freqs = np.linspace(lines[0], lines[1], lines[2])
    phases = rng.uniform(0, 2 * np.pi, lines[2])
    grid = int(round(duration * fs_obs))
    scale = peak / float(np.max(np.abs(cosine_sum(freqs, phases, grid, 1.0 / fs_obs))))
    ts = (np.arange(n) + offset) / rate
    shifted = phases + 2 * np.pi * freqs * offset / rate
    return scale * cosine_sum(freqs, shifted, n, 1.0 / rate) * np.clip(ts / ramp, 0.0, 1.0)


def noisy_accelerations(
    model: AbstractModel,
    force_fine: np.ndarray,
    force_obs: np.ndarray,
    fs_truth: int,
    fs_obs: int,
    noise_frac: float,
    seed: int,
) -> dict[str, np.ndarray]:
    """RK4 truth at ``fs_truth`` from rest, accelerations at ``fs_obs`` with Gaussian noise.

    Args:
        model: the system, started at rest at t = 0.
        force_fine: the force held over each fine step (n_obs * fs_truth / fs_obs,).
        force_obs: the force at the observation instants (n_obs,), with which the accelerations are read.
        fs_truth: the integration rate [Hz] (a multiple of ``fs_obs``).
        fs_obs: the observation rate [Hz].
        noise_frac: the noise sd as a fraction of the accelerations' RMS.
        seed: the noise generator's seed (``numpy.random.default_rng``).

    Returns:
        ``t``, ``u`` (the observed force), ``acc_true``, ``acc`` (noisy), ``noise_sd`` and ``states``, all at
        the observation instants.

    """
    n_fine = force_fine.size
    ts = np.arange(n_fine) / fs_truth
    x0 = jnp.zeros(len(model.state_names))
    traj = simulate_discrete(discretise(model, 1.0 / fs_truth, "rk4"), x0, jnp.asarray(force_fine)[:, None])
    sub = slice(0, n_fine, fs_truth // fs_obs)
    states = np.asarray(traj.states[:-1])[sub]
    acc = np.asarray(accelerations(model, states, force_obs))
    std = noise_frac * np.sqrt(np.mean(acc**2))
    noise = np.random.default_rng(seed).normal(0.0, std, acc.shape)
    return {
        "t": ts[sub],
        "u": force_obs,
        "acc_true": acc,
        "acc": acc + noise,
        "noise_sd": np.array(std),
        "states": states,
    }


def benchmark_test_signals(n: int, fs_test: float, fs_sim: float, seed: int) -> dict[str, np.ndarray]:
    """The Bouc-Wen benchmark's two test forces on the simulation grid, each sample held one fine step.

    A 40 N sine sweep from 20 Hz at 10 Hz/min from rest, and a random-phase multisine on the 5-150 Hz
    lines of an ``n``-sample period at ``fs_test`` (phases from ``numpy.random.default_rng(seed)``),
    scaled to an RMS of 50 N and repeated twice (scored on its second, steady-state period). Both have
    ``n fs_sim / fs_test`` samples per period at ``fs_sim``.

    References:
        Noël & Schoukens, "Hysteretic benchmark with a dynamic nonlinearity" (2016), sec. 4; specs/pn-smc.md
        6.24.

    """
    sub = int(fs_sim / fs_test)
    t_fine = np.arange(n * sub) / fs_sim
    sweep = 40.0 * np.sin(2 * np.pi * (20.0 * t_fine + 0.5 * (10.0 / 60.0) * t_fine**2))
    rng = np.random.default_rng(seed)
    f0 = fs_test / n
    lines = np.arange(int(np.ceil(5.0 / f0)), int(np.floor(150.0 / f0)) + 1)
    phases = rng.uniform(0, 2 * np.pi, lines.size)
    period = cosine_sum(f0 * lines, phases, t_fine.size, 1.0 / fs_sim)
    period *= 50.0 / np.sqrt(np.mean(period**2))
    return {"sinesweep": sweep, "multisine": np.concatenate([period, period])}
