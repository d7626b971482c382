"""Scores of the two-stage Bayesian PINN's posterior against the truth of a simulated record.

:func:`two_stage_scores` reads the NUTS posterior of the physical parameters (ArviZ summary and draws)
of :func:`twinfer.infer.pinn.two_stage_posterior`: each parameter's stage-1 value, posterior mean, sd,
error and whether its 95 % interval holds the truth; the correlations of each DOF's stiffness and damping
with its nonlinear coefficient (the ridge of Figs 13-14); the convergence diagnostics and the sampler's
cost; and the states' posterior against the truth.

References:
    Haywood-Alexander et al., arXiv:2410.01340 (2024), section 4.3, Eqs. (22)-(24), Figs 13-14, Table 6;
    Vehtari et al., "Rank-normalization, folding, and localization: an improved R-hat", Bayesian
    Analysis 16 (2021) (R-hat, ESS).

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np

from twinfer.infer._estimate import Estimate
from twinfer.infer.mcmc import NutsResult
from twinfer.metrics import coverage, nrmse


def two_stage_scores(
    summary: Mapping[str, Mapping[str, float]],
    samples: np.ndarray,
    fit: NutsResult,
    stage1: np.ndarray,
    truths: Mapping[str, float],
    nonlinear: str,
    est: Estimate,
    states: np.ndarray,
    stage2: Literal["frozen", "layer"],
) -> dict[str, float]:
    """The posterior's metrics: ``stage1.*``, ``posterior.*`` (parameters, states, diagnostics).

    Args:
        summary: the ArviZ summary per variable (``mean``, ``sd``, ``q025``, ``q975``, ``rhat``, ``ess``),
            the parameters of ``truths`` and ``sigma_f``.
        samples: the draws (chains, draws, p + 1), the parameters in the order of ``truths``.
        fit: the NUTS run (timings, step counts, divergences).
        stage1: the stage-1 point estimate of the parameters, in the order of ``truths``.
        truths: each parameter's true value (``c1``, ``c2``, ``k1``, ``k2`` and the nonlinear ones).
        nonlinear: the nonlinear coefficient's name (``kappa`` or ``mu``).
        est: the states' posterior on the record (its first four columns ``u1, u2, v1, v2``).
        states: the true states (T, 4).
        stage2: ``"layer"`` scores the states' 95 % coverage too (``"frozen"`` has no spread).

    Returns:
        Per parameter ``stage1.<p>``, ``posterior.<p>.mean``/``sd``/``err_pct``/``in95``; the
        correlations ``posterior.corr_k<i>_<nl><i>`` and ``corr_c<i>_<nl><i>``; ``posterior.rhat_max``,
        ``ess_min``, ``ess_per_s``, ``ess_per_cpu_s``, ``steps_per_draw``, ``divergences``, ``all_in95``,
        ``max_err_pct``; the states' ``posterior.states.nrmse`` (and ``cov95`` with ``"layer"``).

    """
    names = list(truths)
    out: dict[str, float] = {}
    for i, name in enumerate(names):
        true = truths[name]
        s = summary[name]
        out[f"stage1.{name}"] = float(stage1[i])
        out[f"posterior.{name}.mean"] = s["mean"]
        out[f"posterior.{name}.sd"] = s["sd"]
        out[f"posterior.{name}.err_pct"] = abs(s["mean"] - true) / true * 100.0
        out[f"posterior.{name}.in95"] = float(s["q025"] <= true <= s["q975"])
    out["posterior.sigma_f.mean"] = summary["sigma_f"]["mean"]
    if stage2 == "layer":
        sd = est.stds[:, :4]
        live = np.all(sd > 0, axis=1)  # an anchored network has no spread at t0
        out["posterior.states.cov95"] = coverage(est.means[live, :4], sd[live], states[live], 0.95)
    out["posterior.states.nrmse"] = float(nrmse(est.means[:, :4], states))
    flat = samples.reshape(-1, samples.shape[-1])
    corr = np.corrcoef(flat.T)
    for i in (1, 2):
        nl = names.index(f"{nonlinear}{i}")
        out[f"posterior.corr_k{i}_{nonlinear}{i}"] = float(corr[names.index(f"k{i}"), nl])
        out[f"posterior.corr_c{i}_{nonlinear}{i}"] = float(corr[names.index(f"c{i}"), nl])
    ess_min = min(s["ess"] for s in summary.values())
    out["posterior.rhat_max"] = max(s["rhat"] for s in summary.values())
    out["posterior.ess_min"] = ess_min
    out["posterior.ess_per_s"] = ess_min / fit.sample_s
    out["posterior.ess_per_cpu_s"] = ess_min / fit.sample_cpu_s
    out["posterior.steps_per_draw"] = fit.steps_mean
    out["posterior.divergences"] = float(fit.divergences)
    out["posterior.all_in95"] = float(all(out[f"posterior.{n}.in95"] == 1.0 for n in names))
    out["posterior.max_err_pct"] = max(out[f"posterior.{n}.err_pct"] for n in names)
    return out
