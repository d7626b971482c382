"""Scores of the power-grid study: Table S3's errors and Table S2's derived timing columns.

Shared by the ``grid`` benchmark and the ``grid`` case, so both score a run alike.

References:
    Ghorbani & Hackl, SI Tables S2-S3, Fig. S9(b,c) (specs/compositional-inference.md 3.5, 7 item 10).

"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from twinfer.metrics import coverage, nrmse, nrmse_pooled, nrmse_population, rmse


def bus_rmse(estimate: np.ndarray, truth: np.ndarray, period: float | None = None) -> float:
    """Mean over buses (axis 1) of each bus's RMSE over time (Fig. S9(b,c)); ``period`` wraps phases."""
    return float(np.mean(rmse(estimate, truth, axis=0, period=period)))


def grid_metrics(
    prefix: str, means: np.ndarray, stds: np.ndarray, states: np.ndarray, big_omega: np.ndarray
) -> dict[str, float]:
    """Table S3 metrics: theta and omega NRMSE pooled, Omega's on the population range.

    Pooled over buses and steps on the wrapped phase (``nrmse_theta``, ``nrmse_omega``); per bus then
    averaged as ``..._per_bus``. Also the mean over buses of each bus's RMSE of theta (wrapped errors)
    and omega, the quantities of Fig. S9(b,c) (``rmse_theta``, ``rmse_omega``). ``means``, ``stds``:
    (T, N, 3) per bus at t_1..t_T; ``states``: the truth (T+1, 2N) from t_0; ``big_omega``: (N,).
    """
    n = big_omega.shape[0]
    truth = {"theta": states[1:, :n], "omega": states[1:, n:]}
    omega_truth = np.broadcast_to(big_omega, means[:, :, 2].shape)
    return {
        f"{prefix}.rmse_theta": bus_rmse(means[:, :, 0], truth["theta"], period=2 * np.pi),
        f"{prefix}.rmse_omega": bus_rmse(means[:, :, 1], truth["omega"]),
        f"{prefix}.nrmse_theta": nrmse_pooled(means[:, :, 0], truth["theta"], period=2 * np.pi),
        f"{prefix}.nrmse_omega": nrmse_pooled(means[:, :, 1], truth["omega"]),
        f"{prefix}.nrmse_theta_per_bus": float(nrmse(means[:, :, 0], truth["theta"], period=2 * np.pi)),
        f"{prefix}.nrmse_omega_per_bus": float(nrmse(means[:, :, 1], truth["omega"])),
        f"{prefix}.nrmse_Omega": nrmse_population(means[:, :, 2], big_omega),
        f"{prefix}.coverage95_Omega": coverage(means[:, :, 2], stds[:, :, 2], omega_truth, level=0.95),
    }


SPEEDUPS = {  # Table S2's speed-up column, central over distributed run time, per method
    "ukf": ("speedup_distributed_vs_central", "central", "distributed"),
    "wls": ("speedup_wls_distributed_vs_central", "central_wls", "wls"),
    "wnls": ("speedup_wnls_distributed_vs_central", "central_wnls", "wnls"),
}


def table_s2_timings(metrics: Mapping[str, float], n_clusters: int) -> dict[str, float]:
    """Table S2's derived columns from the run times present in ``metrics``.

    Per method, the speed-up central / distributed run time (where both ran), and the "parallel"
    projection, the distributed UKF's sequential time over the number of clusters N_s (one core per
    cluster, the paper's column; no communication cost).
    """
    out = {}
    for name, central, distributed in SPEEDUPS.values():
        if f"{central}.run_s" in metrics and f"{distributed}.run_s" in metrics:
            out[name] = metrics[f"{central}.run_s"] / metrics[f"{distributed}.run_s"]
    if "distributed.run_s" in metrics:
        out["distributed.parallel_s"] = metrics["distributed.run_s"] / n_clusters
    return out
