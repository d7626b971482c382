"""SINDy learned interface law (specs/compositional-inference.md section 2.7, eq. S47-S50).

The interface force is modelled as ``F = Theta(dx, dv) xi`` over the library
``Theta = [dx, dv, dx^3, |dv| dv, dx dv, 1]`` (S49), with ``dx = x_s - x_r`` and ``dv = v_s - v_r`` the
relative displacement and velocity across the interface. ``dx`` and ``dv`` are reconstructed from the
interface accelerations by trapezoidal integration with a high-pass filter against drift, and ``xi`` is
fitted by sequentially thresholded least squares (pysindy's STLSQ, S48) on normalised library columns.

References:
    Ghorbani & Hackl, SI eq. (S47-S50); Brunton, Proctor & Kutz (2016) PNAS 113, 3932 (STLSQ);
    Kaptanoglu et al. (2022) JOSS 7, 3994 (PySINDy).

"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

TERMS = ("dx", "dv", "dx^3", "|dv|dv", "dx*dv", "1")


def library(dx: Any, dv: Any) -> Any:
    """Theta(dx, dv) = [dx, dv, dx^3, |dv| dv, dx dv, 1] (eq. S49), stacked on the last axis."""
    xp = jnp if isinstance(dx, jnp.ndarray) else np
    return xp.stack([dx, dv, dx**3, xp.abs(dv) * dv, dx * dv, xp.ones_like(dx)], axis=-1)


def library_law(s_send: Any, s_recv: Any, xi: Any) -> Any:
    """Force on the receiver, F(dx, dv) = Theta xi with dx, dv = sender - receiver (ports [x, v])."""
    d = s_send - s_recv
    return jnp.atleast_1d(library(d[0], d[1]) @ xi)


def library_reaction(s_send: Any, s_recv: Any, xi: Any) -> Any:
    """The reaction -F(dx, dv) with dx, dv = receiver - sender: the same law seen from the other side."""
    d = s_recv - s_send
    return jnp.atleast_1d(-(library(d[0], d[1]) @ xi))


def linear_coefficients(k: float, c: float) -> np.ndarray:
    """The analytic spring-damper law k dx + c dv in library coordinates (S24)."""
    return np.array([k, c, 0.0, 0.0, 0.0, 0.0])


def reconstruct_relative(acc_rel: Any, dt: float, detrend_degree: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Relative velocity and displacement from relative acceleration (S47 pre-processing).

    Trapezoidal integration twice, each followed by the removal of a least-squares polynomial trend of
    ``detrend_degree`` (a high-pass that removes the integration drift without the phase and
    low-frequency loss of a Butterworth filter; the paper gives no filter, section 7 item 6).

    Returns:
        ``(dx, dv)`` arrays of the input's length.

    """
    acc = np.asarray(acc_rel, dtype=np.float64)
    if acc.ndim != 1 or acc.size < 16:
        raise ValueError(
            f"reconstruct_relative acc_rel: expected a 1-D record of >= 16 samples; received {acc.shape}."
        )
    if not 0 <= detrend_degree <= 10:
        raise ValueError(f"reconstruct_relative detrend_degree: expected 0..10; received {detrend_degree}.")
    t = np.linspace(-1.0, 1.0, acc.size)

    def integrate(a: np.ndarray) -> np.ndarray:
        out = np.concatenate([[0.0], np.cumsum(0.5 * dt * (a[1:] + a[:-1]))])
        return out - np.polynomial.polynomial.polyval(
            t, np.polynomial.polynomial.polyfit(t, out, detrend_degree)
        )

    dv = integrate(acc)
    dx = integrate(dv)
    return dx, dv


class SindyFit(NamedTuple):
    """Fitted coefficients ``xi`` over :data:`TERMS` and the fit's R^2 on the training data."""

    xi: np.ndarray
    r2: float


def fit_interface_law(dx: Any, dv: Any, force: Any, threshold: float = 0.05, alpha: float = 1e-9) -> SindyFit:
    """Sparse regression F ~ Theta(dx, dv) xi with pysindy's STLSQ (S48).

    Library columns are scaled to unit RMS before the regression (so one threshold suits terms of very
    different magnitudes) and the coefficients scaled back; ``threshold`` applies to the scaled
    coefficients relative to the force's RMS.

    Args:
        dx: relative displacement (N,).
        dv: relative velocity (N,).
        force: interface force (N,).
        threshold: STLSQ threshold on normalised coefficients.
        alpha: ridge regularisation of STLSQ.

    Returns:
        :class:`SindyFit`.

    """
    import pysindy as ps

    dx, dv, force = (np.asarray(a, dtype=np.float64) for a in (dx, dv, force))
    if not dx.shape == dv.shape == force.shape or dx.ndim != 1:
        raise ValueError(
            f"fit_interface_law: expected equal 1-D shapes; received dx {dx.shape}, dv {dv.shape}, "
            f"force {force.shape}."
        )
    theta = library(dx, dv)
    scale = np.sqrt(np.mean(theta**2, axis=0))
    scale[scale == 0] = 1.0
    f_scale = float(np.sqrt(np.mean(force**2))) or 1.0
    opt = ps.STLSQ(threshold=threshold, alpha=alpha, normalize_columns=False)
    opt.fit(theta / scale, force[:, None] / f_scale)
    xi = np.asarray(opt.coef_).reshape(-1) * f_scale / scale
    pred = theta @ xi
    r2 = 1.0 - float(np.sum((force - pred) ** 2) / np.sum((force - force.mean()) ** 2))
    return SindyFit(xi, r2)
