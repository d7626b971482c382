"""A running estimator: frames in as they arrive, estimate rows out, constant memory (issue #54, item 1).

A :class:`Twin` holds a compiled :class:`~twinfer.infer.Program` (``twinfer.compile``), a
:class:`~twinfer.live._clock.Clock` that puts timestamped frames onto the model's steps, the program's
state, and its alarms. :meth:`Twin.push` takes one or many frames and returns the rows they completed.
When more steps are ready than one at a time can keep up with, the backlog runs as a scan of
``program.step`` over chunks whose lengths come from a small fixed set (:data:`CHUNKS`), so nothing is
compiled while running beyond one program per chunk length. Nothing grows with the stream: the rows kept
for plots (:attr:`Twin.history`) and the events are bounded.

:meth:`Twin.save` writes a snapshot (the program's state, the clock, the alarms' state and the caller's
metadata, e.g. a source position) atomically with :mod:`twinfer.checkpoint`'s verified format,
fingerprinted by the program, the clock's rules and the alarms' settings; :meth:`Twin.resume` continues
from it exactly, and refuses by name a snapshot of another twin or a corrupt file.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from twinfer.checkpoint import Checkpoint, digest
from twinfer.errors import TwinferRuntimeError, TwinferValueError
from twinfer.infer import Program
from twinfer.infer._program import Frame
from twinfer.live._clock import Clock
from twinfer.live._monitor import DriftAlarm, InnovationAlarm, Monitor

__all__ = ["CHUNK", "Rows", "Twin", "TwinDiverged"]

CHUNK = 256
"""Steps one compiled call takes at most: a backlog runs in chunks of up to this many through one compiled
program (:meth:`twinfer.infer.Program.steps`), a single step through another of one row."""

SNAPSHOT_KIND = "live.twin"


class TwinDiverged(TwinferRuntimeError):
    """The estimate became non-finite at a step: the twin keeps its last finite state and stops there."""


@dataclass(frozen=True)
class Rows:
    """Estimate rows: step, time, the mean and sd of every column, the likelihood, the innovations.

    ``k`` (c,), ``t`` (c,), ``mean``/``std`` (c, n) over ``names``, the log-likelihood increment and NIS
    per row, and each output's standardised innovation ``innov`` (c, m; None where the program's family
    gives none) with ``observed`` (c, m) the outputs each row had.
    """

    names: tuple[str, ...]
    outputs: tuple[str, ...]
    k: np.ndarray
    t: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    loglik: np.ndarray
    nis: np.ndarray
    observed: np.ndarray
    innov: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.t.size)

    @staticmethod
    def empty(names: Sequence[str], outputs: Sequence[str]) -> Rows:
        """No rows."""
        n, m = len(names), len(outputs)
        z = np.zeros(0)
        empty = np.zeros((0, n))
        return Rows(
            tuple(names), tuple(outputs), np.zeros(0, np.int64), z, empty, empty, z, z, np.zeros((0, m), bool)
        )

    @staticmethod
    def concat(parts: Sequence[Rows]) -> Rows:
        """Rows one after another (``parts`` non-empty, of one program)."""
        if len(parts) == 1:
            return parts[0]
        innov = None if parts[0].innov is None else np.concatenate([p.innov for p in parts])  # type: ignore[misc]
        cat = [np.concatenate([getattr(p, key) for p in parts]) for key in
               ("k", "t", "mean", "std", "loglik", "nis", "observed")]  # fmt: skip
        return Rows(parts[0].names, parts[0].outputs, *cat, innov=innov)

    def records(self) -> list[dict[str, Any]]:
        """One flat dict per row, what the sinks write.

        Keys: ``t``, ``step``, each column's mean and ``<name>_sd``, ``loglik``, ``nis``.
        """
        keys = ["t", "step", *self.names, *(f"{n}_sd" for n in self.names), "loglik", "nis"]
        table = np.column_stack([self.t, self.k, self.mean, self.std, self.loglik, self.nis])
        out = [dict(zip(keys, row, strict=True)) for row in table.tolist()]
        for rec in out:
            rec["step"] = int(rec["step"])
        return out


_COMPILED: dict[int, tuple[Any, Any]] = {}
"""Each live program's numbers and jitted chunk step, by the program's id (dropped with the program)."""


def _compiled(program: Program) -> tuple[Any, Any]:
    """``program``'s array leaves and one jitted :meth:`~twinfer.infer.Program.steps` (shared by twins)."""
    key = id(program)
    if key not in _COMPILED:
        dynamic, static = eqx.partition(program, eqx.is_array)

        def advance(numbers: Any, state: Any, frames: Frame, count: Any) -> tuple[Any, Any]:
            return eqx.combine(numbers, static).steps(state, frames, count)

        _COMPILED[key] = (dynamic, jax.jit(advance))  # jax.jit's own dispatch: the fastest per call
        weakref.finalize(program, _COMPILED.pop, key, None)
    return _COMPILED[key]


class Twin:
    """A running estimator over a live stream (the module docstring gives the whole behaviour).

    Args:
        program: a compiled estimator (``twinfer.compile(system, method, dt=...)``).
        dt: the model's step [s]; frames are expected on ``t0 + k dt``.
        t0: the time of step 0 (the prior); None: the step of the grid ``k dt`` (through time 0) nearest
            the first frame.
        tolerance: how far from a step a frame may lie, as a fraction of ``dt``.
        window: the reorder window in steps (:class:`~twinfer.live._clock.Clock`).
        alarms: the condition monitors to run (default: a drift alarm on the unknowns and a per-sensor
            innovation alarm). ``()`` runs none.
        history: rows kept for plots (:attr:`history`); events kept likewise.
        chunk: the most steps one compiled call takes (:data:`CHUNK`).
        measured: the outputs the stream carries (default: all); a step is applied as soon as its
            inputs and these are in, so an output no frame carries (an FMU's unmeasured one) is not
            waited for.

    """

    def __init__(
        self,
        program: Program,
        *,
        dt: float,
        t0: float | None = None,
        tolerance: float = 0.25,
        window: int = 0,
        alarms: Sequence[Monitor] | None = None,
        history: int = 10_000,
        chunk: int = CHUNK,
        measured: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(program, Program):
            raise TwinferValueError(
                "Twin program: expected a twinfer Program (twinfer.compile(...)); "
                f"received {type(program).__name__}."
            )
        if int(chunk) < 1:
            raise TwinferValueError(f"Twin chunk: expected a number of steps >= 1; received {chunk!r}.")
        self.program = program
        self.clock = Clock(
            float(dt),
            program.input_names,
            program.output_names,
            t0,
            tolerance,
            window,
            None if measured is None else tuple(measured),
        )
        self.chunk = int(chunk)
        self._numbers, self._advance = _compiled(program)
        self.alarms: tuple[Monitor, ...] = (
            (DriftAlarm(), InnovationAlarm()) if alarms is None else tuple(alarms)
        )
        self.names = program.state_names
        columns = [self.names.index(p) for p in program.parameters]
        self._alarm_states: list[dict[str, Any]] = [
            a.start(program.parameters, columns, self.clock.dt)
            if isinstance(a, DriftAlarm)
            else a.start(program.output_names, self.clock.dt)
            for a in self.alarms
        ]
        self.state: Any = None
        self.history: deque[Rows] = deque()
        self._history_rows = 0
        self._history_max = int(history)
        self.events: deque[dict[str, Any]] = deque(maxlen=int(history))

    # -- frames in, rows out -------------------------------------------------------------------------
    @property
    def counts(self) -> dict[str, int]:
        """Frames taken, steps applied (and of them prediction-only), frames dropped by reason, alarms."""
        return {**self.clock.counts, "alarms": sum(1 for e in self.events if e["state"] == "raised")}

    def push(self, frames: Iterable[Any]) -> tuple[Rows, list[dict[str, Any]]]:
        """Take frames (``(t, {channel: value})`` pairs or objects with ``t`` and ``values``).

        Returns:
            The rows the frames completed (possibly none: a step waits for its channels or its reorder
            window) and the alarms' events among them.

        Raises:
            RateError: the first frames do not fall on the model's steps.
            TwinferValueError: a frame with a channel the program does not have, or a non-finite time.
            TwinDiverged: the estimate became non-finite.

        """
        for frame in frames:
            t, values = (frame.t, frame.values) if hasattr(frame, "values") else frame
            self.clock.add(float(t), values)
        return self._apply(self.clock.ready())

    def finish(self) -> tuple[Rows, list[dict[str, Any]]]:
        """Apply every pending step (the stream ended): missing channels stay missing."""
        return self._apply(self.clock.ready(flush=True))

    def _apply(self, steps: list[Any]) -> tuple[Rows, list[dict[str, Any]]]:
        if steps and steps[0].k == 0:  # step 0: the prior, with the first input
            self.state = self.program.init(np.asarray(steps[0].u, dtype=np.float64))
            steps = steps[1:]
        if not steps:
            return Rows.empty(self.names, self.program.output_names), []
        parts = [self._run(steps[i : i + self.chunk]) for i in range(0, len(steps), self.chunk)]
        rows = Rows.concat(parts)
        events: list[dict[str, Any]] = []
        for alarm, state in zip(self.alarms, self._alarm_states, strict=True):
            if isinstance(alarm, DriftAlarm):
                events += alarm.check(state, rows)
            else:
                events += alarm.check(state, rows, rows.observed)
        events.sort(key=lambda e: e["step"])
        self.events.extend(events)
        self._remember(rows)
        return rows, events

    def _run(self, steps: list[Any]) -> Rows:
        c, n_u, m = len(steps), len(self.program.input_names), len(self.program.output_names)
        size = 1 if c == 1 else self.chunk  # two compiled programs: one frame as it comes, a backlog
        u, y = np.zeros((size, n_u)), np.full((size, m), np.nan)
        u[:c] = np.stack([s.u for s in steps]).reshape(c, n_u)
        y[:c] = np.stack([s.y for s in steps]).reshape(c, m)
        observed = np.isfinite(y)
        frames = Frame(u, np.where(observed, y, 0.0), observed)
        state, out = self._advance(self._numbers, self.state, frames, np.int32(c))
        out = jax.tree_util.tree_map(lambda a: np.asarray(a)[:c], out)
        observed = observed[:c]
        ok = out.ok
        if not ok.all():
            bad = steps[int(np.argmin(ok))]
            raise TwinDiverged(
                f"Twin: the estimate became non-finite at step {bad.k} (t = {bad.t:.9g} s); the twin keeps "
                "the state before this chunk. Check the model, the noise levels and the stream's values."
            )
        self.state = state
        k = np.array([s.k for s in steps], np.int64)
        t = np.array([s.t for s in steps])
        return Rows(self.names, self.program.output_names, k, t, out.mean, out.std, out.loglik, out.nis,
                    observed, out.innov)  # fmt: skip

    def _remember(self, rows: Rows) -> None:
        self.history.append(rows)
        self._history_rows += len(rows)
        while self.history and self._history_rows - len(self.history[0]) >= self._history_max:
            self._history_rows -= len(self.history.popleft())

    def recent(self) -> Rows:
        """The rows kept for plots (at most ``history`` of the latest, give or take a chunk)."""
        if not self.history:
            return Rows.empty(self.names, self.program.output_names)
        return Rows.concat(list(self.history))

    # -- snapshots -----------------------------------------------------------------------------------
    def fingerprint(self) -> dict[str, str]:
        """The program's fingerprint, the clock's rules and the alarms' settings (a snapshot's owner)."""
        return {
            **self.program.fingerprint(),
            "clock": digest(self.clock.settings()),
            "alarms": digest([repr(a) for a in self.alarms]),
        }

    def _snapshot_state(self) -> dict[str, Any]:
        arrays = [{k: v for k, v in s.items() if isinstance(v, np.ndarray)} for s in self._alarm_states]
        return {"filter": self.state, "alarms": arrays}

    def save(self, path: str | Path, **meta: Any) -> Path:
        """Write a snapshot atomically: the state, the clock, the alarms and ``meta`` (JSON-able).

        Raises:
            TwinferRuntimeError: nothing to save yet (no frame has arrived).

        """
        if self.state is None:
            raise TwinferRuntimeError("Twin.save: no frame has arrived yet; there is no state to save.")
        checkpoint = Checkpoint(Path(path), self.fingerprint(), resume=True)
        body = {"clock": self.clock.state(), "caller": dict(meta)}  # the last input: in the filter's state
        checkpoint.save(SNAPSHOT_KIND, self._snapshot_state(), body)
        return checkpoint.path

    def load(self, path: str | Path) -> dict[str, Any]:
        """Continue from a snapshot written by :meth:`save` of a twin like this one.

        Returns:
            The ``meta`` given to :meth:`save` (e.g. the source position).

        Raises:
            CheckpointError: a corrupt file, or a snapshot of another twin (program, numbers, clock rules,
                alarms or version), named.

        """
        snap = Checkpoint(Path(path), self.fingerprint(), resume=True).load(SNAPSHOT_KIND)
        template = {"filter": self.program.init(), "alarms": self._snapshot_state()["alarms"]}
        restored = snap.state(template)
        self.state = restored["filter"]
        for state, arrays in zip(self._alarm_states, restored["alarms"], strict=True):
            state.update({k: np.array(v) for k, v in arrays.items()})
        self.clock.restore(snap.meta["clock"])
        return dict(snap.meta.get("caller", {}))
