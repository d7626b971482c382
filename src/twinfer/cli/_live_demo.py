"""``twinfer live --demo``: a simulated structure streamed into a file being written, a stiffness loss in it.

The structure is the ``live-damage`` case's 8-mass chain (1 kHz, accelerometers on masses 2, 4, 6 and 8,
ambient random forces on every mass, unmeasured) at a shorter scale: 30-35 s healthy, then one spring
loses 10 % of its stiffness, 20 s more. A writer thread appends the record to ``stream.csv`` at
``speed`` times real time, as an acquisition system would (whole lines and partial ones); the twin is
the ordinary ``twinfer live`` on a spec (``demo.toml``) written beside it: the chain with its nominal
stiffnesses, the unmeasured forces as recorded zeros with their spread as ``input_sd`` (which an
accelerometer on a forced mass reads too: carried exactly, see :func:`twinfer.infer.graph.chain_graph`),
every stiffness unknown with a small random walk. After the stream ends, ``demo.png`` draws the
damaged spring's track with its drift alarm.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twinfer.experiments.live_damage import LiveDamageConfig, scenarios

CONFIG = LiveDamageConfig.model_validate(
    {
        "n_seeds": 1,
        "healthy": 30.0,
        "onset_spread": 5.0,
        "after": 20.0,
        "loss": 0.1,
        "learning": 10.0,
        "stuck_after": 1.0,
        "stuck_spread": 0.0,
        "stuck_window": 1.0,
    }
)
"""The demo's scale (the case's chain, forcing, sensors, noise and alarm settings otherwise)."""

SEED = 3


@dataclass(frozen=True)
class Demo:
    """What the demo wrote: its spec and stream, and the fault it injected."""

    spec: Path
    stream: Path
    onset: float
    spring: str
    truth: np.ndarray
    rows: np.ndarray


def prepare(folder: Path) -> Demo:
    """Write ``demo.toml`` and simulate the record (the stream's rows, not yet written) into ``folder``."""
    c = CONFIG
    loss, _ = scenarios(c, SEED)
    n = len(c.stiffness)
    sensors = [f"a{s}" for s in c.sensors]
    forces = [f"f{d}" for d in range(1, n + 1)]
    unknown = "\n".join(
        f"k{i + 1} = [{k:.1f}, {c.prior_sd * k:.3f}, {c.walk_sd * k:.4g}]" for i, k in enumerate(c.stiffness)
    )
    spec = folder / "demo.toml"
    spec.write_text(
        f"""# twinfer live --demo: the live-damage case's 8-mass chain at 1 kHz (docs/live.md)
name = "live-demo"

[model]
kind = "chain"
mass = {[c.mass] * n}
stiffness = {list(c.stiffness)}
damping = {c.damping}
forced_dofs = {list(range(1, n + 1))}
outputs = {sensors}

[data]
file = "stream.csv"
time = "t"
inputs = {forces}
outputs = {sensors}

[estimator]
kind = "central"
estimator = "{c.filter}"
noise_sd = {c.noise_sd}
state_sd = {[1e-3] * n + [0.05] * n}
process_sd = 0.0
input_sd = {c.force_sd}
smoother = false

[unknown]
{unknown}

[live]
dt = {c.dt}
learning = {c.learning}
drift_level = {c.drift_level}
persistence = {c.persistence}
drift_relative = {c.relative}
innovation_window = {c.innovation_window}
innovation_p = {c.innovation_p}
snapshot_every = 5.0
"""
    )
    steps = loss.observations.shape[0]
    t = c.dt * np.arange(steps)
    rows = np.column_stack([t, np.zeros((steps, n)), loss.observations])
    return Demo(spec, folder / "stream.csv", loss.onset, loss.culprit, loss.truth, rows)


def start_writer(demo: Demo, speed: float) -> threading.Thread:
    """Append the record to ``demo.stream`` at ``speed`` times real time, 0.1 s of it at a time."""
    c = CONFIG
    header = ",".join(
        ["t", *(f"f{d}" for d in range(1, len(c.stiffness) + 1)), *(f"a{s}" for s in c.sensors)]
    )
    block = max(1, int(round(0.1 / c.dt)))

    def write() -> None:
        with demo.stream.open("w") as f:
            f.write(header + "\n")
            f.flush()
            start = time.perf_counter()
            for i in range(0, demo.rows.shape[0], block):
                lines = "".join(",".join(f"{v:.9g}" for v in row) + "\n" for row in demo.rows[i : i + block])
                half = len(lines) // 2  # a partial last line, completed a moment later
                f.write(lines[:half])
                f.flush()
                f.write(lines[half:])
                f.flush()
                due = start + (i + block) * c.dt / speed
                time.sleep(max(0.0, due - time.perf_counter()))

    thread = threading.Thread(target=write, name="twinfer-live-demo-writer", daemon=True)
    thread.start()
    return thread


def figure(demo: Demo, out: Path) -> tuple[Path, float]:
    """``demo.png``: the damaged spring's track from the twin's Parquet parts, with its drift alarm.

    Returns the figure's path and the time of the first drift alarm naming that spring (NaN: none).
    """
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from twinfer.report.figures.live import drift_track_figure

    rows = pd.concat([pd.read_parquet(p) for p in sorted(out.glob("estimates-*.parquet"))])
    alarm = float("nan")
    parts = sorted(out.glob("events-*.parquet"))
    if parts:
        events = pd.concat([pd.read_parquet(p) for p in parts])
        named = (events["alarm"] == "drift") & (events["name"] == demo.spring) & (events["state"] == "raised")
        if named.any():
            alarm = float(events.loc[named, "t"].min())
    t = rows["t"].to_numpy()
    truth = np.interp(t, CONFIG.dt * np.arange(demo.truth.size), demo.truth)
    fig = drift_track_figure(
        t,
        rows[demo.spring].to_numpy(),
        rows[f"{demo.spring}_sd"].to_numpy(),
        truth,
        demo.spring,
        demo.onset,
        alarm,
    )
    path = out.parent / "demo.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path, alarm


def summary(demo: Demo, alarm: float) -> str:
    """One line: the injected loss and when (or whether) the twin named it."""
    said = (
        f"the drift alarm named {demo.spring} at t = {alarm:.1f} s ({alarm - demo.onset:.1f} s later)"
        if np.isfinite(alarm)
        else f"no drift alarm named {demo.spring}"
    )
    lost = f"{demo.spring} lost {100 * CONFIG.loss:g} % of its stiffness at t = {demo.onset:.1f} s"
    return f"demo: {lost}; {said}."


__all__ = ["CONFIG", "Demo", "figure", "prepare", "start_writer", "summary"]
