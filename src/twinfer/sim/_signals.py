"""Excitation signals: white and band-limited Gaussian noise, random-phase multisine, linear sine sweep.

All take explicit ``jax.random`` keys, except :func:`bandlimited_noise_dynasim`, which reproduces the
numpy recipe of the PINN paper's data generator for paper reproduction (specs/pinn.md 1.4).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _grid(name: str, ts: Any) -> np.ndarray:
    arr = np.asarray(ts, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2 or not np.all(np.diff(arr) > 0):
        raise ValueError(f"{name} ts: expected an increasing 1-D time grid; received shape {arr.shape}.")
    return arr


def _positive(name: str, value: float) -> float:
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a finite value > 0; received {value!r}.")
    return float(value)


def _band(name: str, f_low: float, f_high: float, dt: float) -> None:
    nyquist = 0.5 / dt
    if not 0 <= f_low < f_high <= nyquist:
        raise ValueError(
            f"{name} band: expected 0 <= f_low < f_high <= Nyquist ({nyquist:g} Hz); "
            f"received ({f_low}, {f_high})."
        )


def white_noise(key: Any, n: int, std: float, n_channels: int = 1) -> Any:
    """Independent Gaussian samples, shape (n, n_channels)."""
    if n < 1 or n_channels < 1:
        raise ValueError(f"white_noise: expected n >= 1 and n_channels >= 1; received {n}, {n_channels}.")
    if not (np.isfinite(std) and std >= 0):
        raise ValueError(f"white_noise std: expected a finite value >= 0; received {std!r}.")
    return std * jax.random.normal(key, (n, n_channels))


def bandlimited_noise(key: Any, ts: Any, f_low: float, f_high: float, rms: float) -> Any:
    """Gaussian-like noise with a flat spectrum on ``f_low <= |f| <= f_high`` Hz, scaled to ``rms``.

    Random phases on a flat amplitude spectrum (inverse FFT of unit magnitudes in the band).
    """
    ts = _grid("bandlimited_noise", ts)
    dt = float(ts[1] - ts[0])
    _band("bandlimited_noise", f_low, f_high, dt)
    rms = _positive("bandlimited_noise rms", rms)
    freqs = jnp.fft.rfftfreq(ts.size, dt)
    inband = (freqs >= f_low) & (freqs <= f_high)
    if not bool(jnp.any(inband)):
        raise ValueError(
            f"bandlimited_noise band: no FFT bin in [{f_low}, {f_high}] Hz for {ts.size} samples at dt={dt}."
        )
    phases = jax.random.uniform(key, freqs.shape, maxval=2 * jnp.pi)
    signal = jnp.fft.irfft(jnp.where(inband, jnp.exp(1j * phases), 0.0), n=ts.size)
    return signal * (rms / jnp.sqrt(jnp.mean(signal**2)))


def bandlimited_noise_dynasim(
    ts: Any, band: tuple[float, float] = (0.05, 1.0), amplitude: float = 1.0, seed: int = 43810
) -> np.ndarray:
    """The PINN paper's banded noise (dynasim <= 0.1.10), reproduced exactly (specs/pinn.md 1.4).

    ``np.random.seed(seed)``; unit spectrum where band[0] <= |fftfreq| <= band[1]; random phases on the
    positive half, conjugate-symmetric negative half; ``amplitude * real(ifft(F))``.
    """
    ts = _grid("bandlimited_noise_dynasim", ts)
    n, dt = ts.size, float(ts[1] - ts[0])
    state = np.random.RandomState(seed)
    freqs = np.abs(np.fft.fftfreq(n, dt))
    spectrum = np.where((freqs >= band[0]) & (freqs <= band[1]), 1.0, 0.0).astype(complex)
    n_pos = (n - 1) // 2
    spectrum[1 : n_pos + 1] *= np.exp(1j * 2 * np.pi * state.rand(n_pos))
    spectrum[-1 : -1 - n_pos : -1] = np.conj(spectrum[1 : n_pos + 1])
    return amplitude * np.real(np.fft.ifft(spectrum))


def multisine(key: Any, ts: Any, freqs: Any, rms: float) -> Any:
    """Random-phase multisine: unit cosines at ``freqs`` Hz, uniform phases, scaled to ``rms``."""
    ts = jnp.asarray(_grid("multisine", ts))
    freqs = jnp.atleast_1d(jnp.asarray(freqs, dtype=jnp.float64))
    if not bool(jnp.all(freqs > 0)):
        raise ValueError(f"multisine freqs: expected positive frequencies; received {np.asarray(freqs)}.")
    rms = _positive("multisine rms", rms)
    phases = jax.random.uniform(key, freqs.shape, maxval=2 * jnp.pi)
    signal = jnp.sum(jnp.cos(2 * jnp.pi * freqs[None, :] * ts[:, None] + phases[None, :]), axis=1)
    return signal * (rms / jnp.sqrt(jnp.mean(signal**2)))


def sine_sweep(ts: Any, f0: float, f1: float, amplitude: float) -> Any:
    """Linear chirp from ``f0`` to ``f1`` Hz over the grid: A sin(2 pi (f0 t + (f1 - f0) t^2 / (2 T)))."""
    ts = jnp.asarray(_grid("sine_sweep", ts))
    if not (f0 >= 0 and f1 >= 0):
        raise ValueError(f"sine_sweep: expected f0, f1 >= 0; received {f0}, {f1}.")
    tau = ts - ts[0]
    duration = tau[-1]
    return amplitude * jnp.sin(2 * jnp.pi * (f0 * tau + 0.5 * (f1 - f0) * tau**2 / duration))
