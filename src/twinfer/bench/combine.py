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

# The case's training settings (the paper's and the authors', specs/model-combination.md 3.4-3.6)
T_END, DT = 2.1, 0.01  # simulated time per scenario and sampling period [s]
TOL = 1e-6  # the solver's rtol and atol in training
FIXED_STEPS = 1  # RK4 steps per sample
EVENTS_PER_STEP = 4  # most events inside one fixed step
LR_START, LR_END = 1e-4, 1e-3  # Adam's learning rate at the first and the last step
INIT_NOISE = 1e-4  # half-width of the connection matrices' initialisation noise (Tab. 2)
SEED = 0  # the case's default seed


@register("combine", "bouncing-ball training step at the full horizon, per topology (one and all devices)")
def bench_combine(quick: bool, progress: Progress) -> dict[str, float]:
    """Median seconds per Adam step of P, PD, PSD (quick: P) at the full horizon."""
    from twinfer.learn import MLP, TrainSettings, train, trajectory_loss
    from twinfer.models import (
        BALL_LOSS_WEIGHTS,
        BALL_MLM_LAYOUT,
        BALL_SCENARIOS,
        BouncingBall2D,
        ball_combination,
    )
    from twinfer.sim import simulate_events

    topologies = ("P",) if quick else ("P", "PD", "PSD")
    n_steps = 4 if quick else 25
    ts, x0s = np.round(np.arange(0.0, T_END + 1e-9, DT), 10), np.asarray(BALL_SCENARIOS[:4])
    gt = BouncingBall2D(mu=0.15)
    truth = np.stack([np.asarray(simulate_events(gt, ts, x).states) for x in x0s])
    sim = {"rtol": TOL, "atol": TOL, "max_events_per_interval": EVENTS_PER_STEP, "fixed_steps": FIXED_STEPS}
    # label, gradient, devices, threads
    variants = [
        ("", "sensitivity", 1, 0),
        (".forward", "forward", 1, 1),
        (".forward.threads", "forward", 1, 0),
    ]
    if len(jax.devices()) > 1:
        variants.append((".forward.split", "forward", 0, 1))
    figures: dict[str, float] = {"config.steps_timed": float(n_steps), "config.horizon": float(len(ts))}
    for topology in topologies:
        key_mlm, key_w = jax.random.split(jax.random.key(SEED))
        network = MLP((4, 8, 2), ("tanh", "tanh"), key=key_mlm, layout=BALL_MLM_LAYOUT)
        model, _ = ball_combination(network, topology, key_w, INIT_NOISE)
        loss = trajectory_loss(model, ts, x0s, truth, BALL_LOSS_WEIGHTS, **sim)
        figures[f"{topology}.n_parameters"] = float(
            sum(np.size(model.params[g]) for g in model.trainable_groups)
        )
        for suffix, mode, devices, threads in variants:
            stamps: list[float] = []
            settings = TrainSettings(
                steps=n_steps + 1,
                lr_start=LR_START,
                lr_end=LR_END,
                horizon_start=len(ts),
                seed=SEED,
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
