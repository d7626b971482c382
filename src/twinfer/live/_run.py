"""The live loop: a source's frames into a twin, its rows and alarms into sinks, snapshots (``twinfer live``).

:func:`run_live` polls the source, renames the stream's columns to the program's names, pushes the
frames into the :class:`~twinfer.live.Twin`, writes rows to the sinks and alarms to the events sink, and
every ``snapshot_every`` seconds (and when it stops) makes everything durable in this order:

1. the Parquet sinks flush their buffers as the next part files (rows and events);
2. the twin's snapshot is written atomically, holding the source position, the parts written and the
   drop counters;
3. the source is told the position is safe (an MQTT source acknowledges the frames up to it).

A twin killed at any moment (SIGKILL included) and resumed from the snapshot (``resume=True``) starts
the source at the snapshot's position and the sinks at its part numbers: parts written after the
snapshot are written again with the same rows, frames after it are read again, so nothing is applied
twice or skipped.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinfer.errors import TwinferRuntimeError
from twinfer.live._sinks import ParquetSink
from twinfer.live._sources import Dropped, Record
from twinfer.live._twin import Twin

__all__ = ["LiveStatus", "SNAPSHOT", "run_live"]

SNAPSHOT = "twin.snapshot"
"""The snapshot's file name under the output folder."""


@dataclass
class LiveStatus:
    """What the loop has done so far (the terminal's status line): counts, lag and real-time factor."""

    started: float = field(default_factory=time.monotonic)
    frames: int = 0
    rows: int = 0
    drops: Counter[str] = field(default_factory=Counter)
    alarms: int = 0
    snapshots: int = 0
    first_t: float | None = None
    last_t: float | None = None
    lag: float = 0.0
    """Seconds the latest frames waited between arriving and their estimate."""

    @property
    def realtime(self) -> float:
        """Stream seconds estimated per wall second."""
        span = 0.0 if self.first_t is None or self.last_t is None else self.last_t - self.first_t
        return span / max(time.monotonic() - self.started, 1e-9)


def run_live(
    twin: Twin,
    source: Any,
    out: Path,
    *,
    columns: Mapping[str, str],
    sinks: Sequence[Any] = (),
    snapshot_every: float = 10.0,
    resume: bool = False,
    idle_exit: float | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_status: Callable[[LiveStatus], None] = lambda status: None,
    on_events: Callable[[list[dict[str, Any]]], None] = lambda events: None,
    make_source: Callable[[Any], Any] | None = None,
) -> LiveStatus:
    """Run a twin on a source until it ends, goes idle or ``should_stop()``; snapshot at the end.

    The source ends (a finished stream), ``idle_exit`` seconds pass without a frame, or ``should_stop()``
    turns True; the final snapshot is written in every case, an error included.

    Args:
        twin: the twin (fresh; with ``resume`` it is loaded from ``out / SNAPSHOT``).
        source: a source (``poll``/``position``/``commit``/``close``); with ``resume`` and
            ``make_source``, ``make_source(position)`` replaces it, started at the snapshot's position.
        out: the output folder (rows and events as Parquet parts, the snapshot).
        columns: stream column -> the program's input or output name.
        sinks: more sinks for the rows (``write``/``flush``/``close``), written as rows come.
        snapshot_every: wall-clock seconds between snapshots.
        resume: continue from the snapshot in ``out`` (where there is none yet, start afresh).
        idle_exit: stop after this many seconds without a frame (None: never; a finished stream stops);
            a source with a connection (MQTT) counts only the time it is connected: a twin waits for a
            broker that went away, and an event ``source disconnected`` / ``source connected`` says so.
        should_stop: polled between batches (Ctrl-C).
        on_status: called about once a second with the status.
        on_events: called with each batch of alarm and source events as they happen.
        make_source: builds the source at a position (for ``resume``).

    Raises:
        CheckpointError: ``resume`` with a snapshot of another twin or a corrupt one.

    """
    out.mkdir(parents=True, exist_ok=True)
    status = LiveStatus()
    parts = {"rows": 0, "events": 0}
    if resume and (out / SNAPSHOT).exists():  # nothing to resume (killed before its first): start afresh
        saved = twin.load(out / SNAPSHOT)
        parts = dict(saved["parts"])
        status.drops.update(saved["drops"])
        status.frames, status.rows = int(saved["frames"]), int(saved["rows"])
        if make_source is not None:
            source.close()
            source = make_source(saved["position"])
    elif (out / SNAPSHOT).exists():
        raise TwinferRuntimeError(
            f"twinfer live --out {out}: a snapshot of an earlier twin is there; pass --resume to continue "
            "it, or choose another folder."
        )
    rows_sink = ParquetSink(out, prefix="estimates", start_part=parts["rows"])
    events_sink = ParquetSink(out, prefix="events", start_part=parts["events"])

    def snapshot() -> None:
        if twin.state is None:
            return
        parts["rows"], parts["events"] = rows_sink.flush(), events_sink.flush()
        position = source.position()
        twin.save(out / SNAPSHOT, position=position, parts=dict(parts), drops=dict(status.drops),
                  frames=status.frames, rows=status.rows)  # fmt: skip
        source.commit(position)
        status.snapshots += 1

    last_frame = last_snapshot = last_status = time.monotonic()
    connected = getattr(source, "connected", None)  # a source with a connection (MQTT): True or False
    try:
        while not should_stop():
            items = source.poll(0.05)
            now = time.monotonic()
            records = [item for item in items if isinstance(item, Record)]
            dropped = [item for item in items if isinstance(item, Dropped)]
            status.drops.update(d.reason for d in dropped)
            source_events = [
                _source_event(d.reason, d.detail) for d in dropped if d.reason in ("truncated", "rotated")
            ]
            link = getattr(source, "connected", None)
            if link is not None and link != connected:  # the broker went away, or came back
                detail = (
                    "subscribed again" if link else getattr(source, "last_error", "") or "connection lost"
                )
                source_events.append(_source_event("connected" if link else "disconnected", detail))
                connected = link
                last_frame = now  # the idle clock counts connected time only
            if records:
                status.frames += len(records)
                rows, events = twin.push(
                    [(r.t, {columns[c]: v for c, v in r.values.items()}) for r in records]
                )
                _emit(rows, events + source_events, rows_sink, events_sink, sinks, status, on_events)
                status.lag = time.monotonic() - now
                last_frame = time.monotonic()  # idle from when the frames are done (a first compile is slow)
            elif source_events:
                _emit(None, source_events, rows_sink, events_sink, sinks, status, on_events)
            if getattr(source, "finished", False) and not items:
                break
            if idle_exit is not None and connected is not False and now - last_frame > idle_exit:
                break  # idle: connected (or no connection to keep) and no frame for idle_exit seconds
            if now - last_snapshot >= snapshot_every:
                snapshot()
                last_snapshot = now
            if now - last_status >= 1.0:
                on_status(status)
                last_status = now
        if getattr(source, "finished", False) and twin.state is not None:
            rows, events = twin.finish()
            _emit(rows, events, rows_sink, events_sink, sinks, status, on_events)
    finally:
        snapshot()
        for sink in sinks:
            sink.close()
        source.close()
        on_status(status)
    return status


def _source_event(name: str, detail: str) -> dict[str, Any]:
    """An event of the source itself (a file truncated or rotated, a broker lost or back), not an alarm."""
    return {"t": None, "step": None, "alarm": "source", "name": name, "state": detail, "value": None}


def _emit(
    rows: Any,
    events: list[dict[str, Any]],
    rows_sink: ParquetSink,
    events_sink: ParquetSink,
    sinks: Sequence[Any],
    status: LiveStatus,
    on_events: Callable[[list[dict[str, Any]]], None],
) -> None:
    if rows is not None and len(rows):
        records = rows.records()
        rows_sink.write(records)
        for sink in sinks:
            sink.write(records)
        status.rows += len(rows)
        status.first_t = float(rows.t[0]) if status.first_t is None else status.first_t
        status.last_t = float(rows.t[-1])
    if events:
        events_sink.write(events)
        status.alarms += sum(1 for e in events if e["alarm"] != "source" and e["state"] == "raised")
        on_events(events)
