"""Learned models: SINDy interface laws."""

from twinfer.learn._sindy import (
    TERMS,
    SindyFit,
    fit_interface_law,
    library,
    library_law,
    library_reaction,
    linear_coefficients,
    reconstruct_relative,
)

__all__ = [
    "TERMS",
    "SindyFit",
    "fit_interface_law",
    "library",
    "library_law",
    "library_reaction",
    "linear_coefficients",
    "reconstruct_relative",
]
