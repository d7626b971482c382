"""Moments, quantiles and equal-weight draws of a weighted particle cloud (on the host, float64).

Every summary of an SMC posterior ``{(theta_n, w_n)}`` goes through these: the weights are normalised
once (:func:`normalised_weights`), the mean and standard deviation are the weighted sample moments, the
quantiles the inverse of the weighted empirical CDF, and :func:`equal_weight_draw` resamples the cloud so
that each drawn particle carries the same weight (for scoring particles one by one).

References:
    Chopin (2002), "A sequential particle filter method for static models", Biometrika 89(3), eq. (2)
    (weighted particle estimates); Longbottom, Champneys & Rogers (pn-smc paper), Eq. (22)-(23).

"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float


def normalised_weights(log_w: Float[np.ndarray, " N"]) -> Float[np.ndarray, " N"]:
    """``w_n = exp(log_w_n - max log_w) / sum_m exp(log_w_m - max log_w)``.

    Raises:
        ValueError: when ``log_w`` is empty or has no finite entry.

    """
    log_w = np.asarray(log_w, np.float64)
    if log_w.ndim != 1 or log_w.size == 0 or not np.isfinite(log_w).any():
        raise ValueError(
            f"particle log-weights: expected a non-empty vector with a finite entry; received shape "
            f"{log_w.shape} with {int(np.isfinite(log_w).sum())} finite entries."
        )
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def weighted_moments(
    theta: Float[np.ndarray, "N p"], log_w: Float[np.ndarray, " N"]
) -> tuple[Float[np.ndarray, " p"], Float[np.ndarray, " p"]]:
    """Weighted mean ``sum_n w_n theta_n`` and standard deviation per column of ``theta``.

    Args:
        theta: particles (N, p).
        log_w: their log-weights (N,), not necessarily normalised.

    Returns:
        ``(mean, sd)``, each (p,): ``sd_i = sqrt(sum_n w_n (theta_ni - mean_i)^2)``.

    """
    theta = np.asarray(theta, np.float64)
    w = normalised_weights(log_w)
    if theta.ndim != 2 or theta.shape[0] != w.size:
        raise ValueError(f"particles theta: expected shape ({w.size}, p); received {theta.shape}.")
    mean = np.array([np.sum(w * theta[:, i]) for i in range(theta.shape[1])])
    sd = np.array([np.sqrt(np.sum(w * (theta[:, i] - mean[i]) ** 2)) for i in range(theta.shape[1])])
    return mean, sd


def weighted_quantiles(
    theta: Float[np.ndarray, "N p"], log_w: Float[np.ndarray, " N"], probs: tuple[float, ...]
) -> tuple[Float[np.ndarray, " p"], ...]:
    """Per column, the smallest particle value whose weighted empirical CDF reaches each of ``probs``.

    Returns:
        One (p,) array per entry of ``probs``.

    """
    theta = np.asarray(theta, np.float64)
    w = normalised_weights(log_w)
    out = tuple(np.empty(theta.shape[1]) for _ in probs)
    for i in range(theta.shape[1]):
        order = np.argsort(theta[:, i])
        cdf = np.cumsum(w[order])
        for values, p in zip(out, probs, strict=True):
            values[i] = theta[order, i][min(np.searchsorted(cdf, p), len(cdf) - 1)]
    return out


def equal_weight_draw(
    theta: Float[np.ndarray, "N p"], log_w: Float[np.ndarray, " N"], n: int, seed: int
) -> Float[np.ndarray, "n p"]:
    """``n`` particles (0: N) drawn with replacement by their weights (multinomial resampling).

    Each drawn particle then carries weight ``1 / n``, so particles can be scored one by one. The draw
    uses ``numpy.random.default_rng(seed)``.
    """
    w = normalised_weights(log_w)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(w), size=n or len(w), p=w)
    return np.asarray(theta)[idx]
