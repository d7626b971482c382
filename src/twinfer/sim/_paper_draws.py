"""Gaussian forcing and sensor noise of a simulated record, drawn as a paper's authors drew them.

A record that reproduces a published table must draw its random forcing and measurement noise in the
authors' order from the authors' generator: :func:`forcing_and_noise` with ``rng = "numpy-paper"`` draws
the forces of every step, then the noise of each channel in turn, from ``numpy.random.default_rng(seed)``
(the compositional-inference paper's script 01); ``"jax"`` draws both from split ``jax.random`` keys.

References:
    Ghorbani & Hackl, SI section 3.1, Table S1; authors' script 01 ([REPO] settings of
    specs/compositional-inference.md 3.1).

"""

from __future__ import annotations

from typing import Literal

import jax
import numpy as np


def forcing_and_noise(
    n_steps: int,
    channels: int,
    force_sd: float,
    noise_sd: float,
    seed: int,
    rng: Literal["numpy-paper", "jax"] = "numpy-paper",
) -> tuple[np.ndarray, np.ndarray]:
    """Forces (N, c) and measurement noise (N+1, c), Gaussian, in the authors' draw order for numpy-paper.

    Args:
        n_steps: the steps N (a force per step, a noise sample per instant t_0..t_N).
        channels: the forced DOFs, one sensor each.
        force_sd: the forces' standard deviation.
        noise_sd: the noise's standard deviation.
        seed: the generator's seed.
        rng: ``"numpy-paper"`` (the authors' generator and order) or ``"jax"``.

    Returns:
        The forces and the noise.

    """
    if rng == "numpy-paper":
        gen = np.random.default_rng(seed)
        forces = gen.normal(0.0, force_sd, size=(n_steps, channels))
        noise = np.stack([gen.normal(0.0, noise_sd, size=n_steps + 1) for _ in range(channels)], axis=1)
        return forces, noise
    key_force, key_noise = jax.random.split(jax.random.key(seed))
    forces = force_sd * jax.random.normal(key_force, (n_steps, channels))
    noise = noise_sd * jax.random.normal(key_noise, (n_steps + 1, channels))
    return np.asarray(forces), np.asarray(noise)
