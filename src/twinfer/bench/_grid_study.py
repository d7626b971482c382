"""The power-grid study on one network: draws, record, the chosen estimators, their scores and timings.

Shared by the ``grid`` case and a grid spec (``twinfer estimate``), so both draw, simulate, estimate and
score a network alike: the damping and natural frequencies of Table S4
(:func:`~twinfer.models.draw_grid_parameters`), the truth by the paper's Heun scheme and its
measurements (:func:`~twinfer.sim.simulate_grid`), each estimator of :data:`GRID_ESTIMATORS` on the
generator-seeded partition or the whole network (:func:`~twinfer.infer.graph._grid.grid_estimator`),
scored as Table S3 (:func:`~twinfer.bench._grid_scores.grid_metrics`) and timed as Table S2.

References:
    Ghorbani & Hackl, SI (S71)-(S92), Tables S2-S4, Fig. S9 (specs/compositional-inference.md 3.5).

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.bench._grid_scores import grid_metrics, table_s2_timings
from twinfer.infer.graph._grid import (
    GRID_ESTIMATORS,
    GRID_LABELS,
    GridSettings,
    grid_estimator,
    partition_for,
    whole_network,
)
from twinfer.infer.graph._kuramoto import stable_substeps
from twinfer.infer.graph._partition import Partition
from twinfer.models import KuramotoNetwork, draw_grid_parameters
from twinfer.sim import simulate_grid
from twinfer.timing import time_jitted


@dataclass(frozen=True)
class GridStudy:
    """A network's study: its metrics, arrays, partition and the truth's Heun sub-steps per step.

    ``metrics`` is flat; ``arrays`` holds ``truth``, ``observations``, ``Omega``, ``labels`` and each
    estimator's ``<prefix>_mean`` / ``<prefix>_std`` ((T, N, 3) per bus).
    """

    metrics: dict[str, float]
    arrays: dict[str, Any]
    partition: Partition
    substeps: int


def grid_study(
    net: Any,
    prefixes: Sequence[str],
    settings: GridSettings,
    *,
    seed: int,
    steps: int,
    substeps: int = 0,
    messages: Literal["held", "probabilistic"] = "probabilistic",
    devices: int = 1,
    progress: Callable[[str, float, float], None] | None = None,
) -> GridStudy:
    """Draw, simulate and estimate ``net`` with the estimators ``prefixes`` (keys of :data:`GRID_ESTIMATORS`).

    Args:
        net: the network (:func:`~twinfer.data.load_grid`).
        prefixes: the estimators to run, in this order.
        settings: step, noise, partition and filter settings (Table S4: ``GRID_DEFAULTS``).
        seed: the seed of the draws (the parameters from its first split, the record from its second).
        steps: the record's length in steps.
        substeps: Heun sub-steps per step for the truth and the filters (0: the fewest stable ones, for
            the truth over the network, for each cluster over its own buses).
        messages: out-of-cluster phases ``"held"`` (S89) or ``"probabilistic"``.
        devices: devices the cluster axis is split over (0: all visible).
        progress: ``(stage, completed, total)``, called before the record and each estimator.

    Returns:
        The :class:`GridStudy`; its metrics are the partition's, Table S3's per estimator and its run and
        compile seconds (one timed run after the compiling one), and Table S2's derived timings.

    """
    report = progress or (lambda stage, completed, total: None)
    total = 2 + len(prefixes)
    index, weight = net.neighbours
    key_params, key_sim = jax.random.split(jax.random.key(seed))
    damping, big_omega = draw_grid_parameters(net.n_bus, key_params)
    model = KuramotoNetwork(index, weight, damping, big_omega)
    partition = partition_for(net, settings.s_max, settings.dt, settings.bond)
    report("simulate", 1, total)
    truth_substeps = substeps or stable_substeps(np.asarray(model.weight), settings.dt)
    record = simulate_grid(model, settings.dt, steps, truth_substeps, settings.noise_sd, key_sim)
    metrics: dict[str, float] = {
        "partition.clusters": float(partition.n_clusters),
        "partition.mean_size": partition.mean_size,
        "network.buses": float(net.n_bus),
    }
    arrays: dict[str, Any] = {
        "truth": record["states"],
        "observations": record["observations"],
        "Omega": big_omega,
        "labels": partition.labels,
    }
    whole = whole_network(net.n_bus)
    for i, prefix in enumerate(prefixes):
        method, central = GRID_ESTIMATORS[prefix]
        report(GRID_LABELS[prefix], 2 + i, total)
        estimator = grid_estimator(
            model,
            whole if central else partition,
            record["init"],
            dt=settings.dt,
            process_sd=settings.process_sd(central),
            noise_sd=settings.noise_sd,
            gamma=settings.ukf_gamma,
            substeps=substeps or None,
            method=method,
            messages=messages,
            devices=devices,
        )
        timed = time_jitted(estimator.scan, jnp.asarray(record["observations"]), repeats=1)
        means, stds = estimator.to_buses(timed.value)
        metrics.update(grid_metrics(prefix, means, stds, record["states"], big_omega))
        metrics[f"{prefix}.run_s"] = timed.median_s
        metrics[f"{prefix}.compile_s"] = timed.compile_s
        arrays.update({f"{prefix}_mean": means, f"{prefix}_std": stds})
    metrics.update(table_s2_timings(metrics, partition.n_clusters))
    return GridStudy(metrics, arrays, partition, truth_substeps)
