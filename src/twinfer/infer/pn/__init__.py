"""Probabilistic-numeric ODE solver: IWP prior, EK0/EK1 Gaussian ODE filter with a data update."""

from twinfer.infer.gaussian import condition_exact
from twinfer.infer.pn._filter import (
    METHODS,
    PNFilter,
    PNInfo,
    PNSolution,
    PNState,
    pn_solve,
)
from twinfer.infer.pn._likelihood import PNLikelihood
from twinfer.infer.pn._prior import iwp_chol_q_1d, iwp_transition, iwp_transition_1d, projection
from twinfer.infer.pn._program import PNProgram
from twinfer.infer.pn._structure import STRUCTURES

__all__ = [
    "METHODS",
    "PNFilter",
    "PNProgram",
    "PNInfo",
    "PNLikelihood",
    "PNSolution",
    "PNState",
    "STRUCTURES",
    "condition_exact",
    "iwp_chol_q_1d",
    "iwp_transition",
    "iwp_transition_1d",
    "pn_solve",
    "projection",
]
