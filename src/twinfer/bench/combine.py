"""Benchmark ``combine``: time per training step of the bouncing-ball topologies (experiment 1).

Each topology of case ``bouncing-ball`` (specs 3.1-3.6) is trained by :func:`twinfer.learn.train`
exactly as the case trains it (forward-mode gradient, random scenario, worst-scenario horizon check),
for a few steps at the full 211-sample horizon: the most expensive step of a run, reached after the
horizon has grown. The first step (trace + compile) is timed apart; the figure is the median of the
later steps. ``<topology>.train_20k_upper_s`` = 20,000 x that median, an upper bound of a full run's
training time (its early steps have shorter horizons). Each topology is timed with the case's gradient
(forward sensitivity, the parameters' directions carried as one matrix: ``<topology>.step_ms``) and, in
the same run, with the authors' forward mode, one tangent per parameter, on one core
(``<topology>.forward.step_ms``) and with the tangents and scenarios split over a thread per usable
core (``<topology>.forward.threads.step_ms``; with more than one visible device, also over all of them:
``<topology>.forward.split.step_ms``). ``<topology>.speedup`` = forward.threads / sensitivity.
"""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np

from twinfer.bench._harness import Progress, register
from twinfer.sharding import usable_cores


@register("combine", "bouncing-ball training step at the full horizon, per topology (one and all devices)")
def bench_combine(quick: bool, progress: Progress) -> dict[str, float]:
    """Median seconds per Adam step of P, PD, PSD (quick: P) at the full horizon."""
    from twinfer.experiments.bouncing_ball import SCENARIOS, WEIGHTS, BouncingBallConfig, build
    from twinfer.learn import TrainSettings, train, trajectory_loss
    from twinfer.models import BouncingBall2D
    from twinfer.sim import simulate_events

    topologies = ("P",) if quick else ("P", "PD", "PSD")
    n_steps = 4 if quick else 25
    config = BouncingBallConfig.model_validate({"topologies": list(topologies)})
    ts, x0s = config.ts, np.asarray(SCENARIOS[:4])
    gt = BouncingBall2D(mu=0.15)
    truth = np.stack([np.asarray(simulate_events(gt, ts, x).states) for x in x0s])
    sim = {"rtol": config.rtol, "atol": config.atol, "max_events_per_interval": config.events_per_step}
    sim["fixed_steps"] = config.fixed_steps
    # label, gradient, devices, threads
    variants = [
        ("", config.grad_mode, 1, 0),
        (".forward", "forward", 1, 1),
        (".forward.threads", "forward", 1, 0),
    ]
    if len(jax.devices()) > 1:
        variants.append((".forward.split", "forward", 0, 1))
    figures: dict[str, float] = {"config.steps_timed": float(n_steps), "config.horizon": float(len(ts))}
    for topology in topologies:
        model, _ = build(config, topology)
        loss = trajectory_loss(model, ts, x0s, truth, WEIGHTS, **sim)
        figures[f"{topology}.n_parameters"] = float(
            sum(np.size(model.params[g]) for g in model.trainable_groups)
        )
        for suffix, mode, devices, threads in variants:
            stamps: list[float] = []
            settings = TrainSettings(
                steps=n_steps + 1,
                lr_start=config.lr_start,
                lr_end=config.lr_end,
                horizon_start=len(ts),
                seed=config.seed,
                progress_every=1,
                grad_mode=mode,
                devices=devices,
                threads=threads,
            )
            label = f"{topology}{suffix}"
            used = devices or len(jax.devices())
            cores = (threads or usable_cores()) if mode == "forward" else 1
            progress(
                f"{label}: {n_steps} {mode} steps at horizon {len(ts)}, {used} device(s), {cores} thread(s)"
            )
            start = time.perf_counter()
            train(
                loss, model.params, model.trainable_groups, len(x0s), len(ts), settings,
                progress=lambda *_, stamps=stamps: stamps.append(time.perf_counter()),
            )  # fmt: skip
            steps = np.diff(stamps)
            median = statistics.median(steps.tolist())
            figures[f"{label}.compile_s"] = stamps[0] - start
            figures[f"{label}.step_ms"] = 1e3 * median
            figures[f"{label}.train_20k_upper_s"] = 20_000 * median
        one = figures[f"{topology}.forward.step_ms"]
        figures[f"{topology}.forward.threads_speedup"] = one / figures[f"{topology}.forward.threads.step_ms"]
        if len(variants) > 3:
            figures[f"{topology}.forward.split_speedup"] = one / figures[f"{topology}.forward.split.step_ms"]
        figures[f"{topology}.speedup"] = (
            figures[f"{topology}.forward.threads.step_ms"] / figures[f"{topology}.step_ms"]
        )
    figures["devices"] = float(len(jax.devices()))
    figures["cores"] = float(usable_cores())
    return figures
