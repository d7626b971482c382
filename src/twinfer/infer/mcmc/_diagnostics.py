"""Posterior summaries and convergence diagnostics through ArviZ (split R-hat, bulk ESS).

References:
    Vehtari, Gelman, Simpson, Carpenter, Buerkner, "Rank-normalization, folding, and localization: an
    improved R-hat for assessing convergence of MCMC", Bayesian Analysis 16 (2021).

"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jaxtyping import ArrayLike, Float


def _arviz() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz

    return arviz


def to_inference_data(
    samples: Float[ArrayLike, "chains draws dim"], names: Sequence[str], attrs: dict[str, Any] | None = None
) -> Any:
    """ArviZ ``InferenceData`` with one posterior variable per name from (chains, draws, dim) samples."""
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[2] != len(names):
        raise ValueError(
            f"to_inference_data samples: expected shape (chains, draws, {len(names)}); received {arr.shape}."
        )
    az = _arviz()
    posterior = {name: arr[:, :, i] for i, name in enumerate(names)}
    idata = az.from_dict(posterior=posterior)
    for key, value in (attrs or {}).items():
        idata.posterior.attrs[key] = value
    return idata


def summarise(idata: Any, names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per variable: mean, sd, 2.5 % and 97.5 % quantiles, R-hat and bulk ESS."""
    az = _arviz()
    rhat, ess = az.rhat(idata), az.ess(idata, method="bulk")
    out = {}
    for name in names:
        draws = np.asarray(idata.posterior[name]).ravel()
        out[name] = {
            "mean": float(np.mean(draws)),
            "sd": float(np.std(draws, ddof=1)),
            "q025": float(np.quantile(draws, 0.025)),
            "q975": float(np.quantile(draws, 0.975)),
            "rhat": float(rhat[name]),
            "ess": float(ess[name]),
        }
    return out


def write_netcdf(idata: Any, path: str | Path) -> bytes:
    """Write ``idata`` with ``to_netcdf`` to ``path`` and return the bytes written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    idata.to_netcdf(str(path))
    return path.read_bytes()
