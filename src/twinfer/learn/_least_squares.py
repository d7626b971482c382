"""Least-squares fits of parameters: output error by trust-region Gauss-Newton, equation error by lstsq.

Two classical criteria of system identification (Ljung, System Identification, 2nd ed., 1999, Sec. 7.3
and 4.2): the *output error* of a simulation driven by the measured input, minimised over the
parameters by a bounded trust-region Gauss-Newton (:func:`output_error_fit`), and the *equation error*
of a model linear in its coefficients, regressed in one step (:func:`duffing_equation_error_fit`,
:func:`gain_fit`). Reference fits of the case studies (floors and starting points), not samplers.

"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from jaxtyping import Float


def output_error_fit(
    simulate: Callable[[np.ndarray], np.ndarray],
    y: Float[np.ndarray, " T"],
    start: Float[np.ndarray, " p"],
    positive: Sequence[bool],
) -> tuple[float, Float[np.ndarray, " p"]]:
    """Parameters minimising ``sum_k (yhat_k(theta) - y_k)^2`` from ``start``, trust-region Gauss-Newton.

    ``scipy.optimize.least_squares`` with the parameters scaled by ``|start|``, forward differences of
    relative step 1e-4, and each parameter marked in ``positive`` kept above ``1e-9 |start|`` (the others
    free). A local fit: it stops in the minimum nearest ``start``.

    Args:
        simulate: ``theta (1, p) -> yhat (1, T)``, the simulated output of a batch of one.
        y: the measured output (T,).
        start: initial parameters (p,), non-zero.
        positive: per parameter, whether it is kept positive.

    Returns:
        The RMSE of the fitted simulation and the fitted parameters (p,).

    References:
        Ljung (1999), Sec. 7.3 (output-error criterion); Branch, Coleman & Li (1999), SIAM J. Sci. Comput.
        21(1) (the trust-region reflective method of ``least_squares``).

    """
    from scipy.optimize import least_squares

    start = np.asarray(start, np.float64)
    y = np.asarray(y, np.float64)
    if len(positive) != start.size:
        raise ValueError(
            f"output_error_fit positive: expected one flag per parameter ({start.size}); received "
            f"{len(positive)}."
        )

    def residual(theta: np.ndarray) -> np.ndarray:
        return simulate(theta[None])[0] - y

    lower = np.array([1e-9 * abs(start[i]) if pos else -np.inf for i, pos in enumerate(positive)])
    fit = least_squares(residual, start, x_scale=np.abs(start), diff_step=1e-4, bounds=(lower, np.inf))
    return float(np.sqrt(np.mean(fit.fun**2))), np.asarray(fit.x)


def duffing_equation_error_fit(
    u: Float[np.ndarray, " T"], y: Float[np.ndarray, " T"], h: float
) -> Float[np.ndarray, " 4"]:
    """``u = m a + c v + k y + kappa y^3`` by least squares, ``v`` and ``a`` central differences of ``y``.

    Args:
        u: the input force (T,), sampled every ``h``.
        y: the measured displacement (T,).
        h: the sampling period.

    Returns:
        ``|(m, c, k, kappa)|`` (the magnitudes: a starting point for positive parameters).

    References:
        Ljung (1999), Sec. 4.2 (equation error, linear regression); the Silverbox's Duffing form,
        Schoukens & Ljung (2019), eq. (1).

    """
    v = (y[2:] - y[:-2]) / (2 * h)
    a = (y[2:] - 2 * y[1:-1] + y[:-2]) / h**2
    x = y[1:-1]
    design = np.stack([a, v, x, x**3], axis=1)
    coef, *_ = np.linalg.lstsq(design, u[1:-1], rcond=None)
    return np.abs(coef)


def gain_fit(regressor: Float[np.ndarray, " T"], target: Float[np.ndarray, " T"]) -> float:
    """The least-squares gain ``g = (p . r) / (p . p)`` of ``target ~ g regressor``."""
    p = np.asarray(regressor, np.float64)
    return float(p @ np.asarray(target, np.float64) / (p @ p))
