"""Condition monitoring of a running twin: parameter drift and innovation consistency (issue #54, item 5).

Two alarms read the rows a twin produces, chunk by chunk (vectorised over the chunk, so a twin that
catches up on a backlog checks every row without a Python loop per row):

- :class:`DriftAlarm`: each unknown's posterior against its baseline, the posterior at the end of a
  learning period. With ``m_b``/``s_b`` the baseline mean/sd and ``m``/``s`` the current ones, the
  distance is ``z = |m - m_b| / sqrt(s^2 + s_b^2)`` (two Gaussians' difference in its own sd; the two
  posteriors share data, so under no change ``z`` is smaller than a standard normal's); the alarm is
  raised when ``z > level`` (and the relative change exceeds ``relative``) for ``persistence`` seconds,
  naming the unknown, and cleared when it falls back.
- :class:`InnovationAlarm`: a windowed chi-square test per sensor and per group of sensors. Under a
  model that fits, each output's standardised innovation ``v_i / sqrt(S_ii)`` (:class:`twinfer.infer.Row`
  ``innov``) is N(0, 1) and white over time, so over the last ``window`` seconds the sum of its squares
  over its ``n`` observed values is chi-square with ``n`` degrees of freedom (Bar-Shalom, Li &
  Kirubarajan, Estimation with Applications to Tracking and Navigation, 2001, Sec. 5.4: the
  time-average NIS test). The alarm is raised when that sum's upper tail probability falls below
  ``p`` (a stuck or drifting sensor, or a part of the model that no longer fits), naming the sensor or
  group, and cleared once it has stayed above ``p_clear`` for a whole window (no flapping).
  With ``test="mean"`` it tests the innovations' windowed mean instead: a sensor's sum ``s`` over its
  ``n`` values is N(0, n), so ``s^2 / n`` is chi-square(1), and a group's sensors add theirs
  (chi-square with as many degrees of freedom as sensors tested). A persistent bias (a line that
  trips and shifts the power flow, a sensor's offset) grows ``s`` in proportion to ``n`` but the sum
  of squares only through its square, so the mean test sees a bias of a fraction of the noise's sd
  that the NIS test misses; it is blind to a change of spread, which the NIS test sees (Willsky, A
  survey of design methods for failure detection in dynamic systems, Automatica 12, 1976: the
  innovations' mean under a jump).

Both start after ``learning`` seconds (the filter's transient and the baseline); defaults are chosen so
that a healthy record raises nothing (a test's false-alarm probability per window is ``p``). An alarm
never stops the twin: it is an event (a flat dict) for the events sink and the terminal.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import special

from twinfer.errors import TwinferValueError

__all__ = ["DriftAlarm", "InnovationAlarm", "Monitor", "innovation_alarms"]

MIN_VALUES = 10
"""Observed values a window needs before it is tested (a sensor sampled slower than the model's step is
tested over fewer values; a window with fewer, a sensor out, is not tested)."""


@functools.lru_cache(maxsize=32)
def _quantiles(p: float, top: int) -> np.ndarray:
    """Chi-square quantiles of upper tail ``p`` for 0..``top`` degrees of freedom (0 read as 1), read-only."""
    table = special.chdtri(np.maximum(np.arange(top + 1, dtype=np.float64), 1.0), p)
    table.flags.writeable = False
    return table


def _runs(flags: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """Consecutive-True run lengths down axis 0 of ``flags`` (c, k), continuing runs ``carry`` (k,)."""
    c = flags.shape[0]
    idx = np.arange(c)[:, None]
    last_false = np.maximum.accumulate(np.where(~flags, idx, -1), axis=0)
    return np.where(flags, np.where(last_false < 0, idx + 1 + carry[None, :], idx - last_false), 0)


def _events(
    kind: str,
    names: Sequence[str],
    raised: np.ndarray,
    up: np.ndarray,
    down: np.ndarray,
    rows: Any,
    value: Any,
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Raise/clear transitions down a chunk: ``up``/``down`` (c, k) where each name would rise/clear."""
    events: list[dict[str, Any]] = []
    state = raised.copy()
    # only a name raised already or rising in the chunk can change (healthy, ``down`` holds almost
    # everywhere: 1M entries a chunk on a 1,888-bus grid's tests, looped over in Python before)
    cols = np.flatnonzero(raised | up.any(axis=0))
    rows_at, at = np.nonzero((up | down)[:, cols])  # row-major, names in order: the events' order
    for i, j in zip(rows_at.tolist(), cols[at].tolist(), strict=True):
        if up[i, j] and not state[j]:
            state[j] = True
            events.append(_event(kind, names[int(j)], "raised", rows, i, float(value[i, j])))
        elif down[i, j] and state[j]:
            state[j] = False
            events.append(_event(kind, names[int(j)], "cleared", rows, i, float(value[i, j])))
    return events, state


def _event(kind: str, name: str, state: str, rows: Any, i: int, value: float) -> dict[str, Any]:
    return {"t": float(rows.t[i]), "step": int(rows.k[i]), "alarm": kind, "name": name, "state": state,
            "value": value}  # fmt: skip


@dataclass
class DriftAlarm:
    """An unknown's posterior leaving its baseline (the module docstring gives the test).

    Args:
        learning: seconds after the first row at whose end the baseline is taken.
        level: the distance ``z`` (in the difference's sds) beyond which an unknown has moved.
        persistence: seconds ``z`` must stay beyond ``level`` before the alarm is raised.
        relative: the smallest relative change ``|m - m_b| / |m_b|`` that counts (0: any).

    """

    learning: float = 60.0
    level: float = 5.0
    persistence: float = 2.0
    relative: float = 0.0
    kind: str = field(default="drift", init=False)

    def start(self, names: Sequence[str], columns: Sequence[int], dt: float) -> dict[str, Any]:
        """The alarm's state for unknowns ``names`` in row columns ``columns``, rows ``dt`` apart."""
        for key, value in (("learning", self.learning), ("persistence", self.persistence)):
            if not np.isfinite(value) or value < 0:
                raise TwinferValueError(f"DriftAlarm {key}: expected seconds >= 0; received {value!r}.")
        if not self.level > 0 or self.relative < 0:
            raise TwinferValueError(
                f"DriftAlarm level/relative: expected level > 0 and relative >= 0; received "
                f"{self.level!r}/{self.relative!r}."
            )
        k = len(names)
        return {"names": list(names), "columns": np.asarray(columns, dtype=np.int64), "dt": dt,
                "t_end": np.full(1, np.nan), "base_mean": np.full(k, np.nan), "base_std": np.full(k, np.nan),
                "run": np.zeros(k, np.int64), "raised": np.zeros(k, bool)}  # fmt: skip

    def check(self, state: dict[str, Any], rows: Any) -> list[dict[str, Any]]:
        """Test a chunk of rows; updates ``state``; returns the raise/clear events."""
        if not len(state["names"]) or rows.t.size == 0:
            return []
        if np.isnan(state["t_end"][0]):
            state["t_end"][0] = rows.t[0] + self.learning
        mean, std = rows.mean[:, state["columns"]], rows.std[:, state["columns"]]
        learnt = rows.t >= state["t_end"][0]
        if np.isnan(state["base_mean"]).all():
            if not learnt.any():
                return []
            first = int(np.argmax(learnt))
            state["base_mean"][:], state["base_std"][:] = mean[first], std[first]
        base_m, base_s = state["base_mean"], state["base_std"]
        z = np.abs(mean - base_m) / np.sqrt(std**2 + base_s**2)
        moved = (z > self.level) & (np.abs(mean - base_m) >= self.relative * np.abs(base_m)) & learnt[:, None]
        run = _runs(moved, state["run"])
        state["run"] = run[-1].copy()
        need = max(1, int(round(self.persistence / state["dt"])))
        events, state["raised"] = _events(
            self.kind, state["names"], state["raised"], run >= need, ~moved, rows, z
        )
        return events


@dataclass
class InnovationAlarm:
    """A windowed chi-square test of each sensor's (and group's) standardised innovations.

    Args:
        window: seconds of innovations each test sums.
        p: the test's upper-tail probability below which the alarm is raised.
        p_clear: the probability above which (for a whole window) a raised alarm clears.
        learning: seconds after the first row before testing (the filter's transient).
        groups: named groups of outputs (a subsystem's sensors) tested together, besides each sensor.
        test: ``"nis"``, the time-average NIS (events ``"innovation"``), or ``"mean"``, the windowed mean
            (events ``"innovation-mean"``): the module docstring gives both.

    """

    window: float = 1.0
    p: float = 1e-9
    p_clear: float = 1e-2
    learning: float = 10.0
    groups: Mapping[str, Sequence[str]] = field(default_factory=dict)
    test: Literal["nis", "mean"] = "nis"
    kind: str = field(default="innovation", init=False)

    def __post_init__(self) -> None:
        if self.test not in ("nis", "mean"):
            raise TwinferValueError(
                f"InnovationAlarm test: expected 'nis' or 'mean'; received {self.test!r}."
            )
        self.kind = "innovation" if self.test == "nis" else "innovation-mean"

    def start(self, outputs: Sequence[str], dt: float) -> dict[str, Any]:
        """The alarm's state for sensors ``outputs``, rows ``dt`` apart."""
        if not 0 < self.p < self.p_clear < 1:
            raise TwinferValueError(
                "InnovationAlarm p/p_clear: expected 0 < p < p_clear < 1; "
                f"received {self.p!r}/{self.p_clear!r}."
            )
        if not self.window > 0 or not self.learning >= 0:
            raise TwinferValueError(
                f"InnovationAlarm window/learning: expected seconds > 0 / >= 0; received "
                f"{self.window!r}/{self.learning!r}."
            )
        index = {name: i for i, name in enumerate(outputs)}
        member = np.zeros((len(outputs), len(self.groups)), np.float64)
        for j, (group, sensors) in enumerate(self.groups.items()):
            missing = [s for s in sensors if s not in index]
            if missing or not sensors:
                raise TwinferValueError(
                    f"InnovationAlarm groups[{group!r}]: expected some of the outputs {list(outputs)}; "
                    f"received {list(sensors)}."
                )
            member[[index[s] for s in sensors], j] = 1.0
        width = max(1, int(round(self.window / dt)))
        m, k = len(outputs), len(outputs) + len(self.groups)
        return {"names": [*outputs, *self.groups], "member": member, "t_start": np.full(1, np.nan),
                "sum": np.zeros((width, m)), "seen": np.zeros((width, m)), "filled": np.zeros(1, np.int64),
                "raised": np.zeros(k, bool), "calm": np.zeros(k, np.int64)}  # fmt: skip

    def check(self, state: dict[str, Any], rows: Any, observed: np.ndarray) -> list[dict[str, Any]]:
        """Test a chunk of rows (``observed`` (c, m) the outputs each row had); returns the events."""
        if rows.innov is None or rows.t.size == 0:
            return []
        if np.isnan(state["t_start"][0]):
            state["t_start"][0] = rows.t[0] + self.learning
        seen = observed.astype(np.float64)
        z = np.where(observed, rows.innov, 0.0)
        x = z**2 if self.test == "nis" else z
        width, c = state["sum"].shape[0], rows.t.size
        all_x, all_seen = np.concatenate([state["sum"], x]), np.concatenate([state["seen"], seen])
        head = np.zeros((1, all_x.shape[1]))
        cx, cn = np.concatenate([head, np.cumsum(all_x, 0)]), np.concatenate([head, np.cumsum(all_seen, 0)])
        total = cx[width + 1 :] - cx[1 : c + 1]  # each new row's window: rows (i - width, i]
        count = np.rint(cn[width + 1 :] - cn[1 : c + 1])
        state["sum"], state["seen"] = all_x[-width:].copy(), all_seen[-width:].copy()
        member = state["member"]
        if self.test == "nis":
            # a sensor's sum of squares over its n values is chi-square(n); a group's, over its values
            stat = np.concatenate([total, total @ member], axis=1)
            dof = np.concatenate([count, count @ member], axis=1)
            enough = dof >= MIN_VALUES
        else:
            # a sensor's window sum over its n values is N(0, n): sum^2 / n is chi-square(1); a group's
            # sensors (each with enough values) add theirs, chi-square with as many degrees of freedom
            enough_s = count >= MIN_VALUES
            square = np.where(enough_s, total**2 / np.maximum(count, 1.0), 0.0)
            stat = np.concatenate([square, square @ member], axis=1)
            dof = np.concatenate([enough_s, enough_s @ member], axis=1).astype(np.float64)
            enough = dof >= 1
        filled = state["filled"][0] + np.arange(1, c + 1)
        state["filled"][0] = min(int(filled[-1]), width)
        ready = (filled >= width)[:, None] & (rows.t >= state["t_start"][0])[:, None] & enough
        # the tail probability below p <=> the statistic above the chi-square quantile of its degrees of
        # freedom, read from a table (a whole number up to the window's, or the group's size); chdtrc at
        # every entry cost 1.3 ms a frame on a 1,888-bus grid's 4,154 tests
        at = np.rint(dof).astype(np.int64)
        top = 1 << int(at.max(initial=0)).bit_length()
        tested = dof > 0
        up = ready & tested & (stat > _quantiles(self.p, top)[at])
        quiet = ~tested | (stat < _quantiles(self.p_clear, top)[at])
        calm = _runs(ready & quiet, state["calm"])  # cleared after a whole calm window
        state["calm"] = calm[-1].copy()
        down = calm >= width
        value = stat / np.maximum(dof, 1.0)
        events, state["raised"] = _events(self.kind, state["names"], state["raised"], up, down, rows, value)
        return events


def innovation_alarms(
    test: Literal["nis", "mean", "both"],
    *,
    window: float,
    p: float,
    learning: float,
    groups: Mapping[str, Sequence[str]],
) -> tuple[InnovationAlarm, ...]:
    """The innovation alarms ``test`` names: the NIS test, the mean test, or both (one settings each)."""
    if test not in ("nis", "mean", "both"):
        raise TwinferValueError(f"innovation test: expected 'nis', 'mean' or 'both'; received {test!r}.")
    tests: tuple[Literal["nis", "mean"], ...] = ("nis", "mean") if test == "both" else (test,)
    return tuple(
        InnovationAlarm(window=window, p=p, learning=learning, groups=groups, test=kind) for kind in tests
    )


Monitor = DriftAlarm | InnovationAlarm
"""An alarm a :class:`~twinfer.live.Twin` runs on its rows."""
