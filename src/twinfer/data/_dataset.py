"""The Dataset: times, inputs, observations with a missing-value mask, and optional truth."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, final

import numpy as np

from twinfer.data import _checks as ck

_DT_RTOL = 1e-9

ALIGNMENTS = ("sampled", "held")
"""How a record's rows pair inputs with outputs (:attr:`Dataset.alignment`)."""

HOLDS = ("zoh", "linear")
"""How a record's inputs behave between samples (:attr:`Dataset.input_hold`)."""

_LEGACY_HELD = "row k: u_k held"  # the free-text alignment simulate_dataset wrote before "held" was named


@final
class Dataset:
    """An immutable, validated record of one experiment, held as NumPy float64 arrays.

    Observations carry a boolean ``mask`` (True = observed). Masked-out entries are stored as NaN,
    so filters can consume ``observations`` directly with static shapes (STYLE.md, item 5); every
    observed entry must be finite. Arrays are copied on construction and are read-only.

    Float16/float32 ``times``, ``inputs``, ``observations`` or ``truth_states`` are refused, not
    widened: the digits they lost cannot be recovered, and estimators run in float64 (DESIGN.md,
    Conventions). Pass ``np.asarray(x, dtype=np.float64)`` if that loss is acceptable to you.
    Integer arrays are converted exactly.

    Args:
        times: ``(T,)`` strictly increasing, finite sample times.
        observations: ``(T, n_y)`` measured outputs. Entries where ``mask`` is False are ignored
            (they may be NaN or anything else) and stored as NaN.
        inputs: ``(T, n_u)`` finite exogenous inputs, or None for an autonomous system.
        mask: ``(T, n_y)`` boolean, True where observed. Default: everything observed.
        truth_states: ``(T, n_x)`` finite true states (simulated data), or None.
        truth_params: ``{scalar parameter name: true value}`` (names as ``Model.param_names``).
        input_names: ``n_u`` unique names; default ``("u1", "u2", ...)``.
        output_names: ``n_y`` unique names; default ``("y1", "y2", ...)``.
        state_names: ``n_x`` unique names; default ``("x1", ...)``. Only with ``truth_states``.
        metadata: JSON-serialisable dict (source, units, seed, ...). Its ``"alignment"`` entry, when
            present, is ``"sampled"`` or ``"held"`` (:attr:`alignment`); its ``"input_hold"``,
            ``"zoh"`` or ``"linear"`` (:attr:`input_hold`).

    The time convention (one for every estimator): row k holds the time ``t_k``, the input ``u_k`` and
    the output ``y_k`` sampled at the same instant, as a data acquisition system records them, so
    ``y_k = h(x_k, u_k) + v_k``; for the dynamics the input is held over ``[t_k, t_{k+1})``. A
    record made the other way (``y_{k+1} = h(x_{k+1}, u_k)``: the output read with the input held
    over the interval before it, the compositional-inference paper's code) says
    ``metadata={"alignment": "held"}``; the two differ wherever an output depends directly on an
    input (an accelerometer on a forced mass).

    Raises:
        ValueError: naming the field, what was expected and what was received.

    """

    __slots__ = (
        "_times", "_inputs", "_observations", "_mask", "_truth_states", "_truth_params",
        "_input_names", "_output_names", "_state_names", "_metadata",
    )  # fmt: skip

    def __init__(
        self,
        times: Any,
        observations: Any,
        *,
        inputs: Any = None,
        mask: Any = None,
        truth_states: Any = None,
        truth_params: Mapping[str, float] | None = None,
        input_names: Iterable[str] | None = None,
        output_names: Iterable[str] | None = None,
        state_names: Iterable[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        t = ck.float64_array(times, "times", 1)
        ck.check_finite(t, "times")
        if t.size == 0:
            raise ck.fail("times", "at least one time step", "an empty array")
        steps = np.diff(t)
        if (steps <= 0).any():
            k = int(np.argmax(steps <= 0)) + 1
            raise ck.fail(
                "times",
                "strictly increasing",
                f"times[{k}]={float(t[k])!r} <= times[{k - 1}]={float(t[k - 1])!r}",
            )
        n = t.shape[0]

        y = ck.float64_array(observations, "observations", 2)
        ck.check_rows(y, "observations", n)
        if mask is None:
            m = np.ones(y.shape, dtype=bool)
        else:
            m = np.array(ck.as_array(mask, "mask", "a boolean array"), copy=True)
            if m.dtype != np.bool_:
                raise ck.fail("mask", "a boolean array (True = observed)", f"dtype {m.dtype}")
            if m.shape != y.shape:
                raise ck.fail("mask", f"shape {y.shape} to match observations", str(m.shape))
        ck.check_finite(y, "observations", where=m)
        y = np.where(m, y, np.nan)
        y.flags.writeable = False
        m.flags.writeable = False

        u = None
        if inputs is not None:
            u = ck.float64_array(inputs, "inputs", 2)
            ck.check_rows(u, "inputs", n)
            ck.check_finite(u, "inputs")

        x = None
        if truth_states is not None:
            x = ck.float64_array(truth_states, "truth_states", 2)
            ck.check_rows(x, "truth_states", n)
            ck.check_finite(x, "truth_states")
        elif state_names is not None and tuple(state_names):
            raise ck.fail("state_names", "no names when truth_states is None", tuple(state_names))

        put = object.__setattr__
        put(self, "_times", t)
        put(self, "_observations", y)
        put(self, "_mask", m)
        put(self, "_inputs", u)
        put(self, "_truth_states", x)
        put(self, "_truth_params", ck.truth_params(truth_params))
        put(self, "_input_names", ck.names(input_names, "input_names", 0 if u is None else u.shape[1], "u"))
        put(self, "_output_names", ck.names(output_names, "output_names", y.shape[1], "y"))
        put(self, "_state_names", ck.names(state_names, "state_names", 0 if x is None else x.shape[1], "x"))
        put(self, "_metadata", ck.metadata_json(metadata))
        _metadata_choice(json.loads(self._metadata), "alignment")
        _metadata_choice(json.loads(self._metadata), "input_hold")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Dataset is immutable; use a method that returns a new one (set {name!r}).")

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        return _from_dict, (self.to_dict(),)  # pickle / copy go through validation too

    def __repr__(self) -> str:
        observed = int(self._mask.sum())
        return (
            f"Dataset(samples={self.n_steps}, t=[{self._times[0]:g}, {self._times[-1]:g}], "
            f"inputs={self._input_names}, outputs={self._output_names}, "
            f"observed={observed}/{self._mask.size}, truth_states={self._truth_states is not None}, "
            f"truth_params={sorted(self._truth_params)})"
        )

    # -- fields ----------------------------------------------------------------------------------
    @property
    def times(self) -> np.ndarray:
        """``(T,)`` sample times, strictly increasing."""
        return self._times

    @property
    def inputs(self) -> np.ndarray | None:
        """``(T, n_u)`` inputs, or None."""
        return self._inputs

    @property
    def observations(self) -> np.ndarray:
        """``(T, n_y)`` observations, NaN where ``mask`` is False."""
        return self._observations

    @property
    def mask(self) -> np.ndarray:
        """``(T, n_y)`` boolean, True where observed."""
        return self._mask

    @property
    def truth_states(self) -> np.ndarray | None:
        """``(T, n_x)`` true states, or None."""
        return self._truth_states

    @property
    def truth_params(self) -> dict[str, float]:
        """``{parameter name: true value}`` (a copy)."""
        return dict(self._truth_params)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._output_names

    @property
    def state_names(self) -> tuple[str, ...]:
        return self._state_names

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata dict (a fresh copy on each access)."""
        return json.loads(self._metadata)

    @property
    def alignment(self) -> str:
        """How rows pair inputs with outputs (``metadata["alignment"]``; see the class docstring).

        ``"sampled"`` (default): ``y_k = h(x_k, u_k)``, inputs and outputs read at the same instants;
        ``"held"``: ``y_{k+1} = h(x_{k+1}, u_k)``, each output read with the input of the interval
        before it.
        """
        return _metadata_choice(self.metadata, "alignment")

    @property
    def input_hold(self) -> str:
        """How the inputs behave between samples, for the dynamics (``metadata["input_hold"]``).

        ``"zoh"`` (default): each sample held over its interval (a digital command through a zero-order
        hold); ``"linear"``: a continuous signal (a shaker's force, a ground acceleration) read at the
        samples, taken as linear between them.
        """
        return _metadata_choice(self.metadata, "input_hold")

    def step_inputs(self) -> np.ndarray:
        """Per estimator step k, the input held over ``[t_k, t_{k+1})`` and the one ``y_{k+1}`` was read with.

        ``(T - 1, 2 n_u)``: the held inputs in the first ``n_u`` columns, the measurement's in the last.
        The one reading of the time convention (class docstring): a ``"sampled"`` record pairs
        ``y_{k+1}`` with its own ``u_{k+1}``, a ``"held"`` one with ``u_k``. The held input is
        ``u_k`` (``input_hold="zoh"``) or, for a signal linear between the samples
        (``input_hold="linear"``), the interval's mean ``(u_k + u_{k+1}) / 2``: its response over the
        step differs from the exact one by O(dt^3) per step, where holding ``u_k`` errs by O(dt^2)
        (the integral of ``exp(A (dt - s)) B w (s - dt / 2)`` over the step, w the signal's slope).
        Every estimator takes its inputs from here.
        """
        n = self._times.shape[0] - 1
        if self._inputs is None:
            return np.zeros((n, 0))
        u = self._inputs
        held = 0.5 * (u[:-1] + u[1:]) if self.input_hold == "linear" else u[:-1]
        meas = u[1:] if self.alignment == "sampled" else u[:-1]
        return np.concatenate([held, meas], axis=1)

    # -- derived ---------------------------------------------------------------------------------
    @property
    def n_steps(self) -> int:
        """The number of samples T (rows): one more than the intervals ``simulate_dataset``'s ``n_steps``."""
        return int(self._times.shape[0])

    @property
    def dt(self) -> float:
        """The uniform time step ``(t[-1] - t[0]) / (T - 1)``.

        Raises:
            ValueError: if there is only one time step, or if any time deviates from the uniform
                grid ``t[0] + k dt`` by more than ``1e-9 dt`` (plus the rounding of the stored times).

        """
        t = self._times
        if t.shape[0] < 2:
            raise ck.fail("dt", "at least two time steps for a step size", f"{t.shape[0]} step")
        dt = float((t[-1] - t[0]) / (t.shape[0] - 1))
        grid = t[0] + dt * np.arange(t.shape[0])
        deviation = np.abs(t - grid)
        tol = _DT_RTOL * dt + 8 * np.finfo(np.float64).eps * np.abs(t).max()
        if deviation.max() > tol:
            k = int(np.argmax(deviation))
            raise ck.fail(
                "dt",
                f"uniform steps (relative deviation <= {_DT_RTOL:g})",
                f"times[{k}]={float(t[k])!r} vs uniform grid {float(grid[k])!r} (dt={dt!r}); "
                "the sampling is non-uniform",
            )
        return dt

    # -- new datasets ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The constructor arguments as a dict of copies, so ``Dataset(**ds.to_dict())`` equals ``ds``."""

        def copy(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a.copy()

        return {
            "times": copy(self._times),
            "observations": copy(self._observations),
            "inputs": copy(self._inputs),
            "mask": copy(self._mask),
            "truth_states": copy(self._truth_states),
            "truth_params": self.truth_params,
            "input_names": self._input_names,
            "output_names": self._output_names,
            "state_names": self._state_names,
            "metadata": self.metadata,
        }

    def _replace(self, **changes: Any) -> Dataset:
        return Dataset(**{**self.to_dict(), **changes})

    def window(self, t_start: float | None = None, t_end: float | None = None) -> Dataset:
        """The steps with ``t_start <= t <= t_end`` (both ends inclusive; None means unbounded)."""
        lo = -np.inf if t_start is None else _bound("t_start", t_start)
        hi = np.inf if t_end is None else _bound("t_end", t_end)
        if lo > hi:
            raise ck.fail("window", "t_start <= t_end", f"t_start={lo!r}, t_end={hi!r}")
        keep = (self._times >= lo) & (self._times <= hi)
        if not keep.any():
            raise ck.fail(
                "window",
                f"at least one time in [{lo!r}, {hi!r}]",
                f"none; the data span [{float(self._times[0])!r}, {float(self._times[-1])!r}]",
            )

        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[keep]

        return self._replace(
            times=cut(self._times),
            observations=cut(self._observations),
            inputs=cut(self._inputs),
            mask=cut(self._mask),
            truth_states=cut(self._truth_states),
        )

    def with_mask(self, mask: Any) -> Dataset:
        """A copy with ``mask`` replacing the current one (not combined with it).

        Entries already masked out hold NaN, so unmasking one raises (observed values must be finite).
        """
        return self._replace(mask=mask)

    def select_outputs(self, names: Sequence[str]) -> Dataset:
        """A copy keeping only the named outputs, in the order given."""
        if isinstance(names, str):
            names = [names]
        unknown = [n for n in names if n not in self._output_names]
        if unknown or not names:
            raise ck.fail("output_names", f"one or more of {self._output_names}", list(names))
        cols = [self._output_names.index(n) for n in names]
        return self._replace(
            observations=self._observations[:, cols], mask=self._mask[:, cols], output_names=tuple(names)
        )

    # -- tables ----------------------------------------------------------------------------------
    def to_dataframe(self, time: str = "t") -> Any:
        """A pandas DataFrame indexed by time: the inputs, the outputs (NaN where masked), the true states.

        Column names are the channel names, so :func:`twinfer.data.from_csv` of :meth:`to_csv`'s file
        with the same names gives this dataset back (``truth_params`` and ``metadata`` are not tables).

        Raises:
            ValueError: if a name is used twice across inputs, outputs, states and ``time``.

        """
        import pandas as pd

        names = [time, *self._input_names, *self._output_names, *self.state_names]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ck.fail(
                "to_dataframe",
                "distinct names across time, inputs, outputs and states (one column each)",
                f"{repeated} used twice",
            )
        columns: dict[str, np.ndarray] = {}
        if self._inputs is not None:
            columns.update(zip(self._input_names, self._inputs.T, strict=True))
        shown = np.where(self._mask, self._observations, np.nan)
        columns.update(zip(self._output_names, shown.T, strict=True))
        if self._truth_states is not None:
            columns.update(zip(self.state_names, self._truth_states.T, strict=True))
        return pd.DataFrame(columns, index=pd.Index(self._times, name=time))

    def to_csv(self, path: str | Path, time: str = "t") -> Path:
        """Write :meth:`to_dataframe` as CSV (shortest round-trip digits; masked outputs as empty cells)."""
        path = Path(path)
        self.to_dataframe(time).to_csv(path, na_rep="")
        return path

    # -- files -----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write to ``path`` as ``.npz`` atomically (temporary file, then ``os.replace``)."""
        from twinfer.data._io import save_npz

        return save_npz(self, path)

    @staticmethod
    def load(path: str | Path) -> Dataset:
        """Read a Dataset written by :meth:`save`."""
        from twinfer.data._io import load_npz

        return load_npz(path)


_MEANINGS = {
    "alignment": (ALIGNMENTS, "sampled: y_k = h(x_k, u_k); held: y_k+1 = h(x_k+1, u_k)"),
    "input_hold": (HOLDS, "zoh: each input sample held over its interval; linear: a continuous signal"),
}


def _metadata_choice(metadata: Mapping[str, Any], key: str) -> str:
    """``metadata[key]`` as one of its allowed values (missing: the first); a named error otherwise."""
    allowed, meaning = _MEANINGS[key]
    value = metadata.get(key, allowed[0])
    if key == "alignment" and isinstance(value, str) and value.startswith(_LEGACY_HELD):
        return "held"
    if value not in allowed:
        raise ck.fail(f"metadata[{key!r}]", f"one of {allowed} ({meaning})", repr(value))
    return str(value)


def _bound(name: str, value: Any) -> float:
    try:
        bound = float(value)
    except (TypeError, ValueError):
        raise ck.fail("window", f"a number or None for {name}", repr(value)) from None
    if np.isnan(bound):
        raise ck.fail("window", f"a number or None for {name}", "nan")
    return bound


def _from_dict(fields: dict[str, Any]) -> Dataset:
    return Dataset(**fields)
