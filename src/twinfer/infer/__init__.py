"""Estimators: one verb, one contract, one result, and the families behind them.

:func:`estimate` returns an :class:`Estimate`; :func:`compile` a :class:`Program` (``init``, ``step``,
``run``); the families are the filters, graphs, PN, SMC, MCMC and PINNs.
"""

from twinfer.infer import filters, gaussian
from twinfer.infer._estimate import Estimate, merge_estimates
from twinfer.infer._program import Frame, Program, Row

__all__ = ["Estimate", "Frame", "Program", "Row", "filters", "gaussian", "merge_estimates"]
from twinfer.infer import pn, smc  # noqa: E402
from twinfer.infer._api import PN, Banded, Central, Distributed, compile, estimate  # noqa: E402

__all__ += ["PN", "Banded", "Central", "Distributed", "compile", "estimate", "pn", "smc"]
