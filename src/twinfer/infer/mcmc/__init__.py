"""MCMC: NUTS with window adaptation (blackjax) and ArviZ diagnostics."""

from twinfer.infer.mcmc._diagnostics import summarise, to_inference_data, write_netcdf
from twinfer.infer.mcmc._nuts import NutsResult, nuts
from twinfer.infer.mcmc._precondition import Whitening, laplace_whitening

__all__ = [
    "NutsResult",
    "Whitening",
    "laplace_whitening",
    "nuts",
    "summarise",
    "to_inference_data",
    "write_netcdf",
]
