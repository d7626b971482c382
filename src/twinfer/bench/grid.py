"""Benchmark ``grid``: run time and accuracy of the six estimators of Fig. S9 against the number of buses.

Each network is partitioned (S_max = 5; 3 for IEEE 300 as Table S2 used), simulated for 300 Heun steps,
and estimated by the UKF and the static WLS / WNLS baselines, each centralised and distributed
(:data:`~twinfer.infer.graph._grid.GRID_ESTIMATORS`); compile time is kept apart and the run time is the
median of three calls (one for the centralised UKF from 118 buses, whose run takes seconds to minutes).
The centralised estimators run up to 300 buses (their cost grows as N^3), the distributed ones on every
network up to PEGASE 9241. Per network: run times, Table S2's speed-ups and parallel projection, and the
mean RMSE of theta and omega (Fig. S9(b,c)). The log-log slopes of run time against buses are fitted by
least squares; ``bench_grid.png`` sets the run times beside the paper's Table S2 (sequential Python) UKF
times, ``bench_grid_accuracy.png`` the RMSEs. Quick: IEEE 9 to 39 at 60 steps, the central estimators
up to 39 buses, the WLS/WNLS baselines on IEEE 9 and 14 only.

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

from twinfer.bench._grid_scores import grid_metrics, table_s2_timings
from twinfer.bench._harness import Progress, register
from twinfer.data import load_grid
from twinfer.infer.graph import Partition
from twinfer.infer.graph._grid import (
    GRID_DEFAULTS,
    GRID_ESTIMATORS,
    GRID_LABELS,
    GridMethod,
    grid_estimator,
    partition_for,
    whole_network,
)
from twinfer.infer.graph._kuramoto import stable_substeps
from twinfer.models import KuramotoNetwork, draw_grid_parameters
from twinfer.sim import simulate_grid
from twinfer.timing import time_jitted

SEED = 42
"""The grid case's seed of the parameter and record draws."""
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
    model: KuramotoNetwork,
    partition: Partition,
    sim,
    central: bool,
    repeats: int = 3,
    method: GridMethod = "ukf",
    devices: int = 1,
):
    g = GRID_DEFAULTS
    fn = grid_estimator(
        model,
        partition,
        sim["init"],
        dt=g.dt,
        process_sd=g.process_sd(central),
        noise_sd=g.noise_sd,
        gamma=g.ukf_gamma,
        method=method,
        devices=devices,
    )
    timed = time_jitted(fn.scan, jnp.asarray(sim["observations"]), repeats=repeats)
    return timed, fn.to_buses(timed.value)


def _slope(buses: list[float], times: list[float]) -> float:
    return float(np.polyfit(np.log(buses), np.log(times), 1)[0])


@register(
    "grid", "Kuramoto grids: UKF, WLS and WNLS, centralised and distributed: run time and RMSE against buses"
)
def bench_grid(quick: bool, progress: Progress) -> dict[str, float]:
    """Times and state RMSEs per network and estimator, and the fitted scaling exponents."""
    cases = IEEE[:4] if quick else IEEE + LARGE
    central_max = 39 if quick else 300
    baseline_max = 14 if quick else 10**6  # quick: the WLS/WNLS baselines on IEEE 9 and 14 only
    out: dict[str, float] = {}
    rows: list[tuple[str, int, dict[str, tuple[float, float, float]]]] = []  # prefix -> (s, rmse th, om)
    sharded_rows: list[tuple[float, float]] = []  # (buses, run time) over every device
    n_dev = len(jax.devices())
    for case in cases:
        g, steps = GRID_DEFAULTS, 60 if quick else 300
        s_max = 3 if case == "ieee300" else g.s_max
        net = load_grid(case)
        index, weight = net.neighbours
        key_params, key_sim = jax.random.split(jax.random.key(SEED))
        d, big_omega = draw_grid_parameters(net.n_bus, key_params)
        model = KuramotoNetwork(index, weight, d, big_omega)
        sim = simulate_grid(model, g.dt, steps, stable_substeps(weight, g.dt), g.noise_sd, key_sim)
        n = net.n_bus
        partition = partition_for(net, s_max, g.dt, g.bond)
        whole = whole_network(n)
        found: dict[str, tuple[float, float, float]] = {}
        for prefix, (method, central) in GRID_ESTIMATORS.items():
            if (central and n > central_max) or (method != "ukf" and n > baseline_max):
                continue
            what = f"{3 * n} states" if central else f"{partition.n_clusters} clusters"
            progress(f"{case}: {GRID_LABELS[prefix]} ({what})")
            # From 118 buses one central UKF run takes seconds to minutes, far above the machine's noise.
            repeats = 1 if central and method == "ukf" and n >= 118 else 3
            timed, (means, stds) = _timed(
                model, whole if central else partition, sim, central, repeats, method
            )
            scores = grid_metrics(prefix, means, stds, sim["states"], big_omega)
            out[f"{case}.{prefix}.run_s"] = timed.median_s
            out[f"{case}.{prefix}.compile_s"] = timed.compile_s
            for q in ("theta", "omega"):
                out[f"{case}.{prefix}.rmse_{q}"] = scores[f"{prefix}.rmse_{q}"]
            found[prefix] = (timed.median_s, scores[f"{prefix}.rmse_theta"], scores[f"{prefix}.rmse_omega"])
        times = {f"{prefix}.run_s": v[0] for prefix, v in found.items()}
        out.update({f"{case}.{k}": v for k, v in table_s2_timings(times, partition.n_clusters).items()})
        if n_dev > 1 and n >= 300:
            progress(f"{case}: distributed over {n_dev} devices")
            sharded, _ = _timed(model, partition, sim, False, devices=n_dev)
            out[f"{case}.distributed_sharded.run_s"] = sharded.median_s
            out[f"{case}.distributed_sharded.compile_s"] = sharded.compile_s
            out["distributed_sharded.devices"] = float(n_dev)
            sharded_rows.append((float(n), sharded.median_s))
        rows.append((case, n, found))
    for prefix in GRID_ESTIMATORS:
        points = [(float(n), found[prefix][0]) for _, n, found in rows if prefix in found]
        if len(points) >= 2:
            out[f"{prefix}.loglog_slope"] = _slope([b for b, _ in points], [t for _, t in points])
    big = [(float(n), found["distributed"][0]) for _, n, found in rows if n >= 300]
    if len(big) >= 2:
        out["distributed.loglog_slope_300_to_9241"] = _slope([b for b, _ in big], [t for _, t in big])
    if len(sharded_rows) >= 2:
        out["distributed_sharded.loglog_slope_300_to_9241"] = _slope(
            [b for b, _ in sharded_rows], [t for _, t in sharded_rows]
        )
    _figure(rows, sharded_rows)
    _accuracy_figure(rows)
    return out


def _series(rows, prefix: str, k: int) -> tuple[list[float], list[float]]:
    """(buses, value k of ``found[prefix]``) over the networks where the estimator ran."""
    points = [(float(n), found[prefix][k]) for _, n, found in rows if prefix in found]
    return [b for b, _ in points], [v for _, v in points]


_STYLE = {  # prefix -> (colour, marker, line): one colour per method, solid central, dashed distributed
    "central": ("C0", "o", "-"),
    "distributed": ("C0", "s", "--"),
    "central_wls": ("C2", "o", "-"),
    "wls": ("C2", "s", "--"),
    "central_wnls": ("C3", "x", ":"),  # dotted and thin markers: WNLS may sit on WLS (a linear h)
    "wnls": ("C3", "+", ":"),
}


def _figure(rows, sharded: list[tuple[float, float]]) -> None:
    """``bench_grid.png`` beside ``bench.json``: run time of every estimator against buses, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for prefix in GRID_ESTIMATORS:
        buses, times = _series(rows, prefix, 0)
        if buses:
            color, marker, line = _STYLE[prefix]
            ax.loglog(
                buses, times, marker=marker, ls=line, color=color, label=f"twinfer {GRID_LABELS[prefix]}"
            )
    if sharded:
        ax.loglog(*zip(*sharded, strict=True), "^-", color="C1", label="twinfer distributed UKF, all devices")
    paper = [(v[2], v[0], v[1]) for v in PAPER_S2.values()]
    ax.loglog(
        [p[0] for p in paper], [p[1] for p in paper], "o:", color="0.5", label="paper central UKF (Table S2)"
    )
    ax.loglog([p[0] for p in paper], [p[2] for p in paper], "s:", color="0.7", label="paper distributed UKF")
    ax.set_xlabel("buses")
    ax.set_ylabel("run time for the record [s]")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, frameon=False, ncol=2)
    fig.tight_layout()
    fig.savefig(Path("bench_grid.png"), dpi=120)
    plt.close(fig)


def _accuracy_figure(rows) -> None:
    """``bench_grid_accuracy.png``: mean RMSE of theta and omega per network, six estimators (Fig. S9b,c)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for k, (ax, name) in enumerate(zip(axes, ("theta [rad]", "omega [rad/s]"), strict=True), start=1):
        for prefix in GRID_ESTIMATORS:
            buses, values = _series(rows, prefix, k)
            if buses:
                color, marker, line = _STYLE[prefix]
                ax.loglog(buses, values, marker=marker, ls=line, color=color, label=GRID_LABELS[prefix])
        ax.set_xlabel("buses")
        ax.set_title(f"mean RMSE of {name}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    fig.savefig(Path("bench_grid_accuracy.png"), dpi=120)
    plt.close(fig)
