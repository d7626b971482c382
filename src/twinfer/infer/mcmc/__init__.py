"""MCMC: NUTS with window adaptation (blackjax) and ArviZ diagnostics."""

from twinfer.infer.mcmc._diagnostics import summarise, to_inference_data, write_netcdf
from twinfer.infer.mcmc._nuts import NutsResult, nuts

__all__ = ["NutsResult", "nuts", "summarise", "to_inference_data", "write_netcdf"]
