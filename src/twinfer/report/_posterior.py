"""Posterior output of a sampler run: ArviZ InferenceData (netCDF), summary table, figures.

Works from the arrays a case saves (``posterior_theta`` (N, p), ``posterior_log_w``, ``posterior_names``,
``prior_loc``/``prior_scale``/``prior_log`` and the SMC diagnostics ``smc_ess``,
``smc_resample_times``), so ``twinfer report`` can re-create everything from ``arrays.npz``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from twinfer.report._files import write_text


def has_posterior(arrays: Mapping[str, Any]) -> bool:
    """Whether the arrays hold a particle posterior."""
    return "posterior_theta" in arrays and "posterior_names" in arrays


def to_inference_data(arrays: Mapping[str, Any]) -> Any:
    """InferenceData: one chain of N particles, log-weights in ``sample_stats``, prior spec in attrs."""
    import arviz as az

    theta = np.asarray(arrays["posterior_theta"])
    names = [str(n) for n in np.asarray(arrays["posterior_names"])]
    posterior = {name: theta[None, :, i] for i, name in enumerate(names)}
    stats = {"log_weight": np.asarray(arrays["posterior_log_w"])[None, :]}
    attrs = {
        "prior_loc": np.asarray(arrays["prior_loc"]).tolist(),
        "prior_scale": np.asarray(arrays["prior_scale"]).tolist(),
        "prior_log": np.asarray(arrays["prior_log"]).astype(int).tolist(),
    }
    return az.from_dict(posterior=posterior, sample_stats=stats, attrs=attrs)


def summary_table(arrays: Mapping[str, Any]) -> str:
    """Markdown table: weighted mean, sd, 1%/50%/99% quantiles of each parameter, with the prior."""
    theta = np.asarray(arrays["posterior_theta"])
    names = [str(n) for n in np.asarray(arrays["posterior_names"])]
    log_w = np.asarray(arrays["posterior_log_w"])
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    lines = [
        "| parameter | prior (sampling space) | mean | sd | q01 | q50 | q99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, name in enumerate(names):
        x = theta[:, i]
        order = np.argsort(x)
        cdf = np.cumsum(w[order])
        q = [float(x[order][min(np.searchsorted(cdf, p), len(x) - 1)]) for p in (0.01, 0.5, 0.99)]
        mean = float(np.sum(w * x))
        sd = float(np.sqrt(np.sum(w * (x - mean) ** 2)))
        kind = "log-normal" if bool(np.asarray(arrays["prior_log"])[i]) else "normal"
        loc, scale = float(np.asarray(arrays["prior_loc"])[i]), float(np.asarray(arrays["prior_scale"])[i])
        quant = " | ".join(f"{v:.6g}" for v in q)
        lines.append(f"| {name} | {kind}({loc:.4g}, {scale:.3g}) | {mean:.6g} | {sd:.3g} | {quant} |")
    return "\n".join(lines) + "\n"


def write_posterior(run_dir: Path, arrays: Mapping[str, Any]) -> list[Path]:
    """Write ``posterior.nc`` (ArviZ netCDF) and ``posterior_summary.md`` if the arrays hold a posterior."""
    if not has_posterior(arrays):
        return []
    run_dir = Path(run_dir)
    nc = run_dir / "posterior.nc"
    tmp = run_dir / ".posterior.nc.tmp"
    to_inference_data(arrays).to_netcdf(str(tmp))
    tmp.replace(nc)
    md = write_text(run_dir / "posterior_summary.md", summary_table(arrays))
    return [nc, Path(md)]


def posterior_figures(arrays: Mapping[str, Any], truth: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Prior vs posterior per parameter, and ESS over time with the resampling events."""
    import matplotlib.pyplot as plt

    theta = np.asarray(arrays["posterior_theta"])
    names = [str(n) for n in np.asarray(arrays["posterior_names"])]
    loc, scale = np.asarray(arrays["prior_loc"]), np.asarray(arrays["prior_scale"])
    logs = np.asarray(arrays["prior_log"]).astype(bool)
    log_w = np.asarray(arrays["posterior_log_w"])
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    n = len(names)
    cols = min(n, 4)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for i, name in enumerate(names):
        ax = axes[i // cols][i % cols]
        z_grid = np.linspace(loc[i] - 4 * scale[i], loc[i] + 4 * scale[i], 400)
        dens = np.exp(-0.5 * ((z_grid - loc[i]) / scale[i]) ** 2) / (scale[i] * np.sqrt(2 * np.pi))
        x_grid = np.exp(z_grid) if logs[i] else z_grid
        prior_dens = dens / x_grid if logs[i] else dens
        ax.plot(x_grid, prior_dens, "C0", lw=1, label="prior")
        ax.hist(theta[:, i], bins=40, weights=w, density=True, color="C1", alpha=0.6, label="posterior")
        if truth and name in truth:
            ax.axvline(truth[name], color="k", ls="--", lw=1, label="truth")
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    figs = {"prior_vs_posterior": fig}
    if "smc_ess" in arrays:
        fig2, ax = plt.subplots(figsize=(8, 3))
        ess = np.asarray(arrays["smc_ess"])
        ax.plot(np.arange(1, ess.size + 1), ess, lw=0.8, label="ESS after each observation")
        for t in np.asarray(arrays.get("smc_resample_times", [])):
            ax.axvline(float(t), color="C3", lw=0.5, alpha=0.6)
        ax.set_xlabel("observations assimilated")
        ax.set_ylabel("ESS")
        ax.set_title("IBIS: ESS over time; red lines are resample-and-move events")
        ax.grid(alpha=0.3)
        figs["smc_ess"] = fig2
    return figs
