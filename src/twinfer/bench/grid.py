"""Benchmark ``grid``: run time of the centralised and distributed UKFs against the number of buses.

Each network is partitioned (S_max = 5; 3 for IEEE 300 as Table S2 used), simulated for 300 Heun steps,
and filtered; compile time is kept apart and the run time is the median of three calls (one for the
centralised UKF from 118 buses, whose run takes seconds to minutes). The centralised UKF runs up to 300
buses (its cost grows as N^3), the distributed one on every network up to PEGASE 9241. The log-log slopes
of run time against buses are fitted by least squares and written with the times, and a figure sets both
series beside the paper's Table S2 (sequential Python) times.

With more than one JAX device visible (on the CPU: ``XLA_FLAGS=--xla_force_host_platform_device_count=2
twinfer bench grid``), the distributed UKF is timed a second time from 300 buses up with its cluster axis
split over every device, as ``<case>.distributed_sharded.run_s`` and its own slope; the one-device times
stay as they are, so both series come from the same run.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.bench._harness import Progress, register
from twinfer.data import load_grid
from twinfer.experiments.grid import GridConfig, draw_parameters, grid_estimator, simulate
from twinfer.infer.clusters import Partition, partition_greedy
from twinfer.models import KuramotoNetwork
from twinfer.timing import time_jitted

IEEE = ("ieee9", "ieee14", "ieee30", "ieee39", "ieee57", "ieee118", "ieee300")
LARGE = ("pegase1354", "pegase2869", "rte6470", "pegase9241")
PAPER_S2 = {  # Table S2 (UKF central, UKF distributed) seconds, sequential Python, one core
    "ieee9": (0.79, 0.43, 9),
    "ieee14": (1.72, 0.82, 14),
    "ieee30": (7.5, 2.4, 30),
    "ieee39": (14.3, 3.0, 39),
    "ieee57": (45.5, 5.8, 57),
    "ieee118": (215.1, 12.0, 118),
    "ieee300": (2836.8, 145.6, 300),
}


def _timed(
    config: GridConfig, model: KuramotoNetwork, partition: Partition, sim, q_big: float, repeats: int = 3
):
    fn = grid_estimator(config, partition, model, sim["init"], q_big)
    return time_jitted(fn.scan, jnp.asarray(sim["observations"]), repeats=repeats)


def _slope(buses: list[float], times: list[float]) -> float:
    return float(np.polyfit(np.log(buses), np.log(times), 1)[0])


@register("grid", "Kuramoto grids: centralised vs distributed UKF run time against buses, log-log slopes")
def bench_grid(quick: bool, progress: Progress) -> dict[str, float]:
    """Times per network and the fitted scaling exponents."""
    cases = IEEE[:4] if quick else IEEE + LARGE
    central_max = 39 if quick else 300
    out: dict[str, float] = {}
    rows = []
    sharded_rows: list[tuple[float, float]] = []  # (buses, run time) over every device
    n_dev = len(jax.devices())
    for case in cases:
        config = GridConfig.model_validate(
            {"case": case, "s_max": 3 if case == "ieee300" else 5, "steps": 60 if quick else 300}
        )
        net = load_grid(case)
        index, weight = net.neighbours
        key_params, key_sim = jax.random.split(jax.random.key(config.seed))
        d, big_omega = draw_parameters(net.n_bus, key_params)
        model = KuramotoNetwork(index, weight, d, big_omega)
        sim = simulate(config, model, key_sim)
        n = net.n_bus
        partition = partition_greedy(net.coupling, net.gen_buses, config.s_max)
        progress(f"{case}: distributed ({partition.n_clusters} clusters)")
        dist = _timed(config, model, partition, sim, config.q_Omega_distributed)
        out[f"{case}.distributed.run_s"] = dist.median_s
        out[f"{case}.distributed.compile_s"] = dist.compile_s
        central_s = float("nan")
        if n <= central_max:
            progress(f"{case}: central ({3 * n} states)")
            whole = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
            # From 118 buses one central run takes seconds to minutes, far above the machine's noise.
            cen = _timed(config, model, whole, sim, config.q_Omega_central, repeats=1 if n >= 118 else 3)
            central_s = cen.median_s
            out[f"{case}.central.run_s"] = central_s
            out[f"{case}.central.compile_s"] = cen.compile_s
            out[f"{case}.speedup_distributed_vs_central"] = central_s / dist.median_s
        if n_dev > 1 and n >= 300:
            progress(f"{case}: distributed over {n_dev} devices")
            spread = config.model_copy(update={"devices": n_dev})
            sharded = _timed(spread, model, partition, sim, config.q_Omega_distributed)
            out[f"{case}.distributed_sharded.run_s"] = sharded.median_s
            out[f"{case}.distributed_sharded.compile_s"] = sharded.compile_s
            out["distributed_sharded.devices"] = float(n_dev)
            sharded_rows.append((float(n), sharded.median_s))
        rows.append((case, n, central_s, dist.median_s))
    buses = [float(r[1]) for r in rows]
    dist_times = [r[3] for r in rows]
    central = [(b, r[2]) for b, r in zip(buses, rows, strict=True) if np.isfinite(r[2])]
    if len(central) >= 2:
        out["central.loglog_slope"] = _slope([b for b, _ in central], [t for _, t in central])
    out["distributed.loglog_slope"] = _slope(buses, dist_times)
    big = [(b, t) for b, t in zip(buses, dist_times, strict=True) if b >= 300]
    if len(big) >= 2:
        out["distributed.loglog_slope_300_to_9241"] = _slope([b for b, _ in big], [t for _, t in big])
    if len(sharded_rows) >= 2:
        out["distributed_sharded.loglog_slope_300_to_9241"] = _slope(
            [b for b, _ in sharded_rows], [t for _, t in sharded_rows]
        )
    _figure(rows, sharded_rows)
    return out


def _figure(rows: list[tuple[str, int, float, float]], sharded: list[tuple[float, float]]) -> None:
    """``bench_grid.png`` beside ``bench.json``: run time against buses, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    buses = np.array([r[1] for r in rows], float)
    central = np.array([r[2] for r in rows])
    ok = np.isfinite(central)
    ax.loglog(buses[ok], central[ok], "o-", label="twinfer central UKF")
    ax.loglog(buses, [r[3] for r in rows], "s-", label="twinfer distributed UKF")
    if sharded:
        ax.loglog(*zip(*sharded, strict=True), "^-", label="twinfer distributed, all devices")
    paper = [(v[2], v[0], v[1]) for v in PAPER_S2.values()]
    ax.loglog(
        [p[0] for p in paper], [p[1] for p in paper], "o:", color="0.5", label="paper central (Table S2)"
    )
    ax.loglog([p[0] for p in paper], [p[2] for p in paper], "s:", color="0.7", label="paper distributed")
    ax.set_xlabel("buses")
    ax.set_ylabel("run time for 300 steps [s]")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(Path("bench_grid.png"), dpi=120)
    plt.close(fig)
