"""Time as it comes: timestamped frames onto a model's steps (issue #54, item 2).

A live stream delivers frames ``(t, {channel: value})`` carrying any subset of the channels, late,
repeated, out of order or not at all. :class:`Clock` turns them into the model's steps
``t_k = t_0 + k dt`` in order, each with its input and its measurements:

- a frame within ``tolerance * dt`` of a step snaps to it; frames of one step merge;
- a channel's second value for one step is a duplicate (counted; the first value stands);
- a step is applied once it is complete (every channel present) or once a frame ``window`` steps beyond
  it has arrived (the reorder window): until then a late frame for it is put in place;
- a step that no frame reached becomes a prediction-only step (no measurement, the input held);
- a frame for a step already applied is counted, as a duplicate where that step already had those
  channels, otherwise as late, and never applied out of order;
- a stream whose first frames fall off the step grid (a rate that does not match ``dt``) is a
  :class:`RateError` at start; a later off-grid frame is counted.

Inputs follow the dataset convention (:meth:`twinfer.data.Dataset.step_inputs`): a step's frame carries the
input sampled with its outputs; a missing input holds its last value. The clock's whole state is
JSON-able (:meth:`Clock.state`), so a twin's snapshot restores it exactly.
"""

from __future__ import annotations

import math
import operator
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from twinfer.errors import TwinferValueError

__all__ = ["Clock", "RateError", "Step"]

START_FRAMES = 8
"""Frames checked against the step grid at start: any of them off the grid is a :class:`RateError`."""

RECENT_STEPS = 4096
"""Applied steps remembered (with their channels) to tell a duplicate frame from a late one."""


class RateError(TwinferValueError):
    """A stream whose frames do not fall on the model's steps: its rate does not match ``dt``."""


class Step(NamedTuple):
    """One model step ready to apply: its index, time, input (n_u,) and outputs (m,), NaN where missing.

    A named tuple (one is made per step: a frozen dataclass cost a microsecond more at 1 kHz).
    """

    k: int
    t: float
    u: np.ndarray
    y: np.ndarray


@dataclass
class Clock:
    """Frames onto steps (the module docstring gives the rules).

    Args:
        dt: the model's step [s].
        inputs: the input channels, in the program's order.
        outputs: the measured channels, in the program's order.
        t0: the time of step 0 (the prior); None: the step of the grid ``k dt`` (through time 0, as a
            sampling clock ticks) nearest the first frame.
        tolerance: how far from a step a frame may lie, as a fraction of ``dt`` (below 0.5).
        window: the reorder window in steps: a step waits for missing channels until a frame this many
            steps later arrives (0: applied when complete or when any later frame arrives).
        measured: the outputs the stream carries (None: every output); a step is complete once its inputs
            and these are in (an FMU's unmeasured outputs are never waited for).

    """

    dt: float
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    t0: float | None = None
    tolerance: float = 0.25
    window: int = 0
    measured: tuple[str, ...] | None = None
    next_k: int = 0
    """The next step to take (step 0 is the prior's: its frame gives only the first input)."""
    last_u: list[float] | None = None
    pending: dict[int, dict[str, float]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    seen: int = 0
    recent: OrderedDict[int, frozenset[str]] = field(default_factory=OrderedDict)
    """The last :data:`RECENT_STEPS` steps taken, with the channels each had (oldest first)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise TwinferValueError(f"Clock dt: expected a positive finite step [s]; received {self.dt!r}.")
        if not 0 < self.tolerance < 0.5:
            raise TwinferValueError(
                f"Clock tolerance: expected a fraction of dt in (0, 0.5) (a frame must snap to one step); "
                f"received {self.tolerance!r}."
            )
        if self.window < 0:
            raise TwinferValueError(
                f"Clock window: expected a number of steps >= 0; received {self.window!r}."
            )
        clash = set(self.inputs) & set(self.outputs)
        if clash:
            raise TwinferValueError(
                f"Clock channels: expected distinct input and output names; {sorted(clash)} are both."
            )
        self._channels = frozenset(self.inputs) | frozenset(self.outputs)
        measured = self.outputs if self.measured is None else tuple(self.measured)
        if not set(measured) <= set(self.outputs):
            raise TwinferValueError(
                f"Clock measured: expected some of the outputs {list(self.outputs)}; received "
                f"{sorted(set(measured) - set(self.outputs))}."
            )
        self._needed = frozenset(self.inputs) | frozenset(measured)
        self._outputs = frozenset(self.outputs)
        self._pick = operator.itemgetter(*self.outputs) if len(self.outputs) > 1 else None
        for key in ("frames", "applied", "predicted", "duplicate", "late", "off-grid"):
            self.counts.setdefault(key, 0)

    @property
    def started(self) -> bool:
        """Whether a frame has arrived (and set ``t0``)."""
        return self.t0 is not None

    def time(self, k: int) -> float:
        """The time of step ``k``."""
        return float((self.t0 or 0.0) + k * self.dt)

    # -- frames in -----------------------------------------------------------------------------------
    def add(self, t: float, values: Mapping[str, float]) -> str | None:
        """Take one frame; returns None when it is kept, else why it is not (also counted).

        Raises:
            RateError: one of the first frames is off the step grid.
            TwinferValueError: a channel the program does not have, or a non-finite time.

        """
        if not math.isfinite(t):
            raise TwinferValueError(f"Clock frame t: expected a finite time [s]; received {t!r}.")
        if not self._channels.issuperset(values):
            raise TwinferValueError(
                f"Clock frame channels: expected some of {sorted(self._channels)}; "
                f"received {sorted(set(values) - self._channels)}."
            )
        self.counts["frames"] += 1
        self.seen += 1
        if self.t0 is None:  # the grid k dt through time 0, from the step nearest the first frame
            self.t0 = round(t / self.dt) * self.dt
        x = (t - self.t0) / self.dt
        k = round(x)
        if abs(x - k) > self.tolerance:
            if self.seen <= START_FRAMES:
                raise RateError(
                    f"stream time {t:.9g} s: expected frames on the model's steps t0 + k dt (t0 = "
                    f"{self.t0:.9g} s, dt = {self.dt:g} s, within {self.tolerance:g} dt); this frame lies "
                    f"{x:.3f} steps after t0. The stream's rate does not match the model's step: set dt "
                    "to the sampling interval (or a divisor of it)."
                )
            return self._drop("off-grid")
        if k < self.next_k:
            return self._drop(self._applied_kind(k, values))
        slot = self.pending.get(k)
        if slot is None:  # the common case: the step's first frame
            self.pending[k] = {name: float(value) for name, value in values.items()}
            return None
        new = {name: float(value) for name, value in values.items() if name not in slot}
        slot.update(new)  # a second value for a channel of this step is a duplicate: the first one stands
        return None if len(new) == len(values) else self._drop("duplicate")

    def _applied_kind(self, k: int, values: Mapping[str, float]) -> str:
        channels = self.recent.get(k)
        return "duplicate" if channels is not None and set(values) <= channels else "late"

    def _drop(self, why: str) -> str:
        self.counts[why] += 1
        return why

    # -- steps out -----------------------------------------------------------------------------------
    def ready(self, flush: bool = False) -> list[Step]:
        """The steps that can be taken now, in order (``flush``: every pending one, end of stream).

        The first is step 0 (its input starts the estimator) until that is taken.
        """
        out: list[Step] = []
        if not self.started or not self.pending:
            return out
        last = max(self.pending)
        while self.next_k <= last:
            k = self.next_k
            slot = self.pending.get(k)
            complete = slot is not None and self._needed <= slot.keys()
            if not (complete or flush or last > k + self.window):
                break
            out.append(self._take(k, slot or {}))
        return out

    def _take(self, k: int, slot: dict[str, float]) -> Step:
        self.pending.pop(k, None)
        held = self.last_u if self.last_u is not None else [0.0] * len(self.inputs)
        u = [float(slot.get(name, last)) for name, last in zip(self.inputs, held, strict=True)]
        if self._pick is not None and self._outputs.issubset(slot):  # every output: one C-level read
            y = np.array(self._pick(slot), dtype=np.float64)
        else:
            y = np.array([slot.get(name, np.nan) for name in self.outputs], dtype=np.float64)
        self.last_u = u
        self.next_k = k + 1
        if k > 0:  # step 0 is the prior's: no measurement is applied there
            self.counts["applied"] += 1
            self.counts["predicted"] += 1 if self._outputs.isdisjoint(slot) else 0
        self.recent[k] = frozenset(slot)
        if len(self.recent) > RECENT_STEPS:  # the oldest out in O(1) (a dict's first key is found by
            self.recent.popitem(last=False)  # skipping every deleted one before it: 3 us a step here)
        return Step(k, self.time(k), np.array(u, dtype=np.float64), y)

    # -- snapshot ------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything the clock holds, JSON-able (a twin's snapshot)."""
        return {
            "t0": self.t0,
            "next_k": self.next_k,
            "last_u": self.last_u,
            "pending": {str(k): v for k, v in self.pending.items()},
            "counts": dict(self.counts),
            "seen": self.seen,
            "recent": [[k, sorted(c)] for k, c in self.recent.items()],
        }

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Set the clock to a :meth:`state` (of a clock with the same dt, channels and rules)."""
        self.t0 = saved["t0"]
        self.next_k = int(saved["next_k"])
        self.last_u = saved["last_u"]
        self.pending = {int(k): dict(v) for k, v in saved["pending"].items()}
        self.counts = {**self.counts, **saved["counts"]}
        self.seen = int(saved["seen"])
        self.recent = OrderedDict((int(k), frozenset(c)) for k, c in saved["recent"])

    def settings(self) -> dict[str, Any]:
        """The rules (a snapshot's fingerprint part: a clock of other rules does not resume it)."""
        return {
            "dt": self.dt,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            **({} if self.measured is None else {"measured": list(self.measured)}),
            "tolerance": self.tolerance,
            "window": self.window,
        }
