"""Measurement noise by standard deviation or by signal-to-noise ratio (dB), per channel."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _channels(name: str, y: Any) -> np.ndarray:
    arr = np.asarray(y, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} y: expected shape (T, n_channels); received {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} y: expected finite values; found non-finite entries.")
    return arr


def noise_sd_for_snr(y: Any, snr_db: float) -> Any:
    """Per-channel noise sd with sigma^2 = mean(y_i^2) 10^(-SNR/10) (specs/pinn.md 1.6)."""
    power = jnp.mean(jnp.asarray(y) ** 2, axis=0)
    return jnp.sqrt(power * 10.0 ** (-snr_db / 10.0))


def add_noise(key: Any, y: Any, *, noise_sd: Any = None, snr_db: float | None = None) -> Any:
    """``y`` plus independent Gaussian noise per channel, by ``noise_sd`` (one or per channel) or ``snr_db``.

    A channel with zero power gets zero noise under ``snr_db``.
    """
    arr = jnp.asarray(_channels("add_noise", y))
    if (noise_sd is None) == (snr_db is None):
        raise ValueError(
            "add_noise: expected exactly one of noise_sd= or snr_db=; received "
            f"noise_sd={noise_sd!r}, snr_db={snr_db!r}."
        )
    if noise_sd is not None:
        sigma = jnp.broadcast_to(jnp.asarray(noise_sd, dtype=jnp.float64), (arr.shape[1],))
        if not bool(jnp.all(sigma >= 0)):
            raise ValueError(f"add_noise noise_sd: expected values >= 0; received {np.asarray(noise_sd)}.")
    else:
        sigma = noise_sd_for_snr(arr, float(snr_db))  # type: ignore[arg-type]
    return arr + sigma[None, :] * jax.random.normal(key, arr.shape)


def add_noise_numpy_legacy(y: Any, snr_db: float, seed: int) -> np.ndarray:
    """The PINN paper's ``add_noise``: per channel ``np.random.seed(seed + i)``, ``normal(0, sigma_i, T)``."""
    arr = _channels("add_noise_numpy_legacy", y)
    sigma = np.asarray(noise_sd_for_snr(arr, snr_db))
    out = arr.copy()
    for i in range(arr.shape[1]):
        np.random.seed(seed + i)
        out[:, i] += np.random.normal(0.0, sigma[i], arr.shape[0]) if sigma[i] > 0 else 0.0
    return out
