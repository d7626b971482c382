"""Figures of a sequential Monte Carlo posterior: prior against posterior, ESS, tempering stages.

Drawn from the arrays a PN-SMC run saves (``posterior_*``, ``prior_*``, and ``smc_*`` for IBIS or
``tempering_*`` for adaptive tempering).

References:
    Longbottom, Champneys & Rogers, Sec. 3-4 (specs/pn-smc.md 2, 4).

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from twinfer.report._posterior import posterior_figures


def tempering_figure(arrays: Mapping[str, Any]) -> dict[str, Any]:
    """Temperature, ESS after the reweighting and MH acceptance per tempering stage (empty for IBIS)."""
    import matplotlib.pyplot as plt

    if "tempering_lambdas" not in arrays:
        return {}
    lam = np.asarray(arrays["tempering_lambdas"])
    stages = np.arange(1, lam.size + 1)
    fig, (ax, ax_e) = plt.subplots(2, 1, figsize=(8, 4.5), sharex=True)
    ax.semilogy(stages, lam, "o-", ms=3)
    ax.set_ylabel("temperature lambda")
    ax_e.plot(stages, np.asarray(arrays["tempering_ess"]), "o-", ms=3, label="ESS after reweighting")
    ax_a = ax_e.twinx()
    ax_a.plot(stages, np.asarray(arrays["tempering_acceptance"]), "C1s-", ms=3, label="MH acceptance")
    ax_a.set_ylim(0, 1)
    ax_a.set_ylabel("acceptance", color="C1")
    ax_e.set_ylabel("ESS")
    ax_e.set_xlabel("tempering stage")
    fig.tight_layout()
    return {"smc_tempering": fig}


def smc_figures(arrays: Mapping[str, Any], truth: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Prior vs posterior (with ``truth`` where known), ESS over time (IBIS) and the tempering stages.

    ``{"prior_vs_posterior", "smc_ess"}`` (:func:`~twinfer.report.posterior_figures`) and
    ``"smc_tempering"`` (:func:`tempering_figure`), each where the arrays hold its data.
    """
    figs = posterior_figures(arrays, truth)
    figs.update(tempering_figure(arrays))
    return figs
