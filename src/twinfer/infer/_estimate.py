"""The one result type of twinfer's state estimators: :class:`Estimate`.

Every estimator that tracks states over a record (:func:`twinfer.infer.estimate` with any method,
``run_filter``, ``smooth``, a compositional graph's engines) returns the same object: times, the names of the
columns (states, then unknown parameters), means and marginal standard deviations per time, the full
covariances where the estimator keeps them, and the log-likelihood of the measurements. Parameters are
read by name with :meth:`Estimate.interval`; :meth:`Estimate.to_xarray`, :meth:`Estimate.to_netcdf` and
:meth:`Estimate.to_dataframe` hand the result to the usual tools.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from twinfer.data._checks import did_you_mean
from twinfer.infer._figures import estimate_figures


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Estimate:
    """Estimates over the record's times t_0..t_N (row 0 is the prior at t_0); a JAX pytree.

    Attributes:
        times: (N+1,) times.
        means: (N+1, n) means of every column (states, then unknown parameters).
        stds: (N+1, n) marginal standard deviations, >= 0 (NaN down a whole column: a point estimate
            without uncertainty, such as a PINN's states).
        covs: (N+1, n, n) covariances, or None where the estimator does not keep the cross-covariances
            (a distributed graph keeps each subsystem's own block only).
        state_names: names of the n columns.
        parameters: the columns that are unknown parameters (random-walk states), by name.
        loglik: log-likelihood of the measurements y_1..y_N under the estimator (NaN when none).
        nis: mean normalised innovation squared per observed measurement (about 1 for a consistent
            filter); None when the estimator does not compute it.
        log_scale: the columns estimated on a log scale (a positive unknown whose log the filter
            tracks, :func:`twinfer.infer.filters.run_filter`): their ``means``, ``stds`` and ``covs``
            are the log-normal's moments in the parameter's own units, and their intervals come from
            the log space, ``exp(log_mean -+ z log_sd)``.
        log_means: (N+1, len(log_scale)) means of the logs of the ``log_scale`` columns (None when none).
        log_stds: (N+1, len(log_scale)) standard deviations of those logs (None when none).
        pred_means: (N, n) one-step predicted means over t_1..t_N: row k - 1 is the mean of the state
            at t_k given y_1..y_{k-1} (before the update with y_k); None where the estimator does not
            keep them (a graph's subsystem run by message passing keeps them).
        pred_covs: (N, n, n) the covariances of those predictions over t_1..t_N (None without).
        step_logliks: (N,) the log-likelihood terms over t_1..t_N, row k - 1 the log density of y_k
            given y_1..y_{k-1}; they sum to ``loglik`` (None without).
        step_nis: (N,) the normalised innovation squared ``v^T S^-1 v`` per step over t_1..t_N, over the
            outputs observed at t_k (0 at a step without an update; None without).

    """

    times: Any
    means: Any
    stds: Any
    covs: Any
    state_names: tuple[str, ...]
    parameters: tuple[str, ...] = ()
    loglik: float = float("nan")
    nis: float | None = None
    log_scale: tuple[str, ...] = ()
    log_means: Any = None
    log_stds: Any = None
    pred_means: Any = None
    pred_covs: Any = None
    step_logliks: Any = None
    step_nis: Any = None

    def __post_init__(self) -> None:
        n = len(self.state_names)
        rows = np.shape(self.times)[0]
        for field in ("means", "stds"):
            shape = np.shape(getattr(self, field))
            if shape != (rows, n):
                raise ValueError(
                    f"Estimate {field}: expected shape {(rows, n)} (times x state_names); received {shape}."
                )
        if len(set(self.state_names)) != n:
            raise ValueError(f"Estimate state_names: expected unique names; received {self.state_names}.")
        missing = [p for p in self.parameters if p not in self.state_names]
        if missing:
            raise ValueError(
                f"Estimate parameters: expected names among state_names {self.state_names}; received "
                f"{missing}."
            )
        if [p for p in self.log_scale if p not in self.state_names] or len(set(self.log_scale)) != len(
            self.log_scale
        ):
            raise ValueError(
                f"Estimate log_scale: expected distinct names among state_names {self.state_names}; received "
                f"{self.log_scale}."
            )
        for field in ("log_means", "log_stds"):
            value = getattr(self, field)
            shape = None if value is None else np.shape(value)
            if shape != ((rows, len(self.log_scale)) if self.log_scale else None):
                raise ValueError(
                    f"Estimate {field}: expected shape {(rows, len(self.log_scale))} (times x log_scale) "
                    f"with log_scale, None without; received {shape} for log_scale {self.log_scale}."
                )
        steps = max(rows - 1, 0)
        for field, expected in (
            ("pred_means", (steps, n)),
            ("pred_covs", (steps, n, n)),
            ("step_logliks", (steps,)),
            ("step_nis", (steps,)),
        ):
            value = getattr(self, field)
            if value is not None and np.shape(value) != expected:
                raise ValueError(
                    f"Estimate {field}: expected shape {expected} (the steps t_1..t_N of {rows} times"
                    f"{' x state_names' if len(expected) > 1 else ''}) or None; received {np.shape(value)}."
                )
        for field, names in (("stds", self.state_names), ("log_stds", self.log_scale)):
            _check_sds(field, getattr(self, field), names)

    def _column(self, name: str) -> int:
        try:
            return self.state_names.index(name)
        except ValueError:
            raise KeyError(f"Estimate: no column {name!r}; columns: {', '.join(self.state_names)}.") from None

    @property
    def params(self) -> dict[str, tuple[Any, Any]]:
        """``{name: (mean (N+1,), sd (N+1,))}`` of each unknown parameter."""
        return {p: self.series(p) for p in self.parameters}

    def series(self, name: str) -> tuple[Any, Any]:
        """Mean and standard deviation over time of one column (a state or a parameter)."""
        j = self._column(name)
        return self.means[:, j], self.stds[:, j]

    def interval(self, name: str, level: float = 0.95, at: int = -1) -> tuple[float, float]:
        """The central ``level`` interval of one column at row ``at`` (default the last): mean -+ z sd.

        A ``log_scale`` column's is ``exp(log_mean -+ z log_sd)``, the log-normal's central interval.

        Raises:
            KeyError: for a name that is not a column, naming the columns.
            ValueError: for a level outside (0, 1), or a row ``at`` outside the record.

        """
        z, row = self._z(level, "interval"), self._row(at, "interval")
        low, high = self._limits(name, z)
        return float(low[row]), float(high[row])

    def band(self, name: str, level: float = 0.95) -> tuple[Any, Any]:
        """The central ``level`` interval of one column at every time: ``(low (N+1,), high (N+1,))``.

        As :meth:`interval` (from the log space on a ``log_scale`` column).

        Raises:
            KeyError: for a name that is not a column, naming the columns.
            ValueError: for a level outside (0, 1).

        """
        return self._limits(name, self._z(level, "band"))

    def _limits(self, name: str, z: float) -> tuple[Any, Any]:
        """Lower and upper ends (N+1,) of one column's band ``z`` standard deviations wide."""
        if name in self.log_scale:
            j = self.log_scale.index(name)
            mu, sd = np.asarray(self.log_means)[:, j], np.asarray(self.log_stds)[:, j]
            return np.exp(mu - z * sd), np.exp(mu + z * sd)
        mean, sd = (np.asarray(v) for v in self.series(name))
        return mean - z * sd, mean + z * sd

    def _z(self, level: float, where: str) -> float:
        """The band half-width in sds of a checked ``level`` (:func:`twinfer.metrics.band_z`)."""
        from twinfer.metrics import band_z

        if not 0.0 < level < 1.0:
            raise ValueError(f"Estimate.{where} level: expected a value in (0, 1); received {level}.")
        return band_z(level)

    def _row(self, at: int, where: str) -> int:
        """A checked row index ``at`` (negative from the end)."""
        rows = len(self.times)
        if isinstance(at, bool) or not isinstance(at, int | np.integer) or not -rows <= at < rows:
            raise ValueError(
                f"Estimate.{where} at: expected a row index in [{-rows}, {rows}) (negative from the end); "
                f"received {at!r}."
            )
        return int(at)

    def truth_of(self, truth: Any) -> dict[str, Any]:
        """The true values of this estimate's columns that ``truth`` holds, by name.

        ``truth`` is a :class:`twinfer.data.Dataset` (its ``truth_states``, matched by ``state_names``,
        and ``truth_params``), a ``{name: value or (N+1,) array}`` mapping, or an ``(N+1, k)`` array of
        the first k columns. States map to ``(N+1,)`` arrays, parameters to floats; columns that
        ``truth`` does not hold are left out.

        Raises:
            ValueError: for truth rows that do not match the estimate's times, an array with more
                columns than the estimate, or a mapping key that is not a column (naming the closest
                column: a misspelt ``"K4"`` would otherwise leave ``k4`` without a truth).

        """
        rows = len(self.times)
        found: dict[str, Any] = {}
        if truth is None:
            return found
        if hasattr(truth, "truth_states") and hasattr(truth, "truth_params"):
            if truth.truth_states is not None:
                found |= dict(zip(truth.state_names, np.asarray(truth.truth_states).T, strict=True))
            found |= {k: float(v) for k, v in (truth.truth_params or {}).items()}
            where = "the dataset's truth_states"
        elif isinstance(truth, Mapping):
            foreign = [k for k in truth if k not in self.state_names]
            if foreign:
                raise ValueError(
                    f"Estimate truth: expected keys among the columns {self.state_names}; received "
                    + ", ".join(f"{k!r}{did_you_mean(k, self.state_names)}" for k in foreign)
                    + "."
                )
            found = {k: (np.asarray(v) if np.ndim(v) else float(v)) for k, v in truth.items()}
            where = "truth"
        else:
            array = np.asarray(truth)
            if array.ndim != 2 or array.shape[1] > len(self.state_names):
                raise ValueError(
                    f"Estimate truth: expected a Dataset, a mapping or a (times, <= {len(self.state_names)}) "
                    f"array of the first columns; received shape {array.shape}."
                )
            found = dict(zip(self.state_names, array.T, strict=False))
            where = "truth"
        found = {k: v for k, v in found.items() if k in self.state_names}
        for name, value in found.items():
            if np.ndim(value) and np.shape(value) != (rows,):
                raise ValueError(
                    f"Estimate truth: expected {rows} rows (the estimate's times) for {name!r} in {where}; "
                    f"received shape {np.shape(value)}."
                )
        return found

    def summary(
        self, names: Sequence[str] | None = None, *, truth: Any = None, level: float = 0.95, at: int = -1
    ) -> Any:
        """A :class:`pandas.DataFrame`, one row per column (default every column; unknowns last).

        Columns ``mean``, ``sd`` and the central ``level`` interval ``low``, ``high`` at row ``at``
        (default the last). With ``truth`` (a :class:`twinfer.data.Dataset` of a simulated record, or
        what :meth:`truth_of` takes), also ``truth`` at that row, ``inside`` (the interval holds it), and
        over the whole record for each state ``coverage`` (the fraction of times its band holds the
        truth: near ``level`` for a calibrated estimator) and ``rmse``. A column whose truth is not
        given (or not finite at that row) is unknown, not outside: ``truth`` NaN and ``inside``
        ``<NA>`` (a nullable boolean column). ``attrs`` holds ``loglik``, ``nis``, ``level`` and the
        row's ``time``.

        Raises:
            KeyError: for a name that is not a column, naming the columns.
            ValueError: as :meth:`interval` and :meth:`truth_of`.

        """
        import pandas as pd

        from twinfer import metrics

        names = list(self.state_names if names is None else names)
        z, at = self._z(level, "summary"), self._row(at, "summary")
        true = self.truth_of(truth)
        rows = []
        for name in names:
            mean, sd = (np.asarray(v) for v in self.series(name))
            low, high = self._limits(name, z)
            row: dict[str, Any] = {
                "mean": float(mean[at]),
                "sd": float(sd[at]),
                "low": float(low[at]),
                "high": float(high[at]),
            }
            if truth is not None:
                value = true.get(name)
                row["truth"] = float(
                    np.nan if value is None else np.asarray(value)[at] if np.ndim(value) else value
                )
                known = bool(np.isfinite(row["truth"]))
                row["inside"] = bool(row["low"] <= row["truth"] <= row["high"]) if known else pd.NA
                states = value is not None and np.ndim(value) == 1
                row["coverage"] = metrics.coverage(mean, sd, value, z=z) if states else np.nan
                row["rmse"] = metrics.rmse(mean, value) if states else np.nan
            rows.append(row)
        frame = pd.DataFrame(rows, index=pd.Index(names, name="column"))
        if truth is not None:
            frame["inside"] = frame["inside"].astype("boolean")
        frame.attrs = {
            "loglik": float(self.loglik),
            "nis": self.nis,
            "level": level,
            "time": float(np.asarray(self.times)[at]),
        }
        return frame

    def plot(
        self, names: Sequence[str] | None = None, *, truth: Any = None, level: float = 0.95
    ) -> dict[str, Any]:
        """Figures of the states and the unknowns over time with their central ``level`` bands.

        Every state (two columns, the first and second half of the state: positions and velocities)
        and then every unknown; on a large system an evenly spaced selection, which the title says.
        ``names`` draws exactly those columns. With ``truth`` (as :meth:`summary`) each state's error is
        drawn inside its band and each unknown's true value as a line.

        Returns:
            ``{figure name: matplotlib Figure}`` (``states``, ``parameters``, ``states-2``, ...).

        """
        for name in names or ():
            self._column(name)
        return estimate_figures(self, self.truth_of(truth), names, level, z=self._z(level, "plot"))

    def __repr__(self) -> str:
        columns = list(self.state_names)
        shown = ", ".join(columns if len(columns) <= 8 else [*columns[:6], "...", columns[-1]])
        try:  # concrete numbers; inside a transformation (tracers) the names alone
            t, means, stds = (np.asarray(getattr(self, k)) for k in ("times", "means", "stds"))
            last = {p: (means[-1, self._column(p)], stds[-1, self._column(p)]) for p in self.parameters[:4]}
            unknowns = "".join(f"; {p} {m:.6g} +- {s:.3g}" for p, (m, s) in last.items())
            more = f" (+{len(self.parameters) - 4} more)" if len(self.parameters) > 4 else ""
            nis = "" if self.nis is None else f", NIS {float(self.nis):.3g}"
            numbers = f"{len(t)} times {t[0]:g}..{t[-1]:g} s, "
            tail = f"{unknowns}{more}; loglik {float(self.loglik):.6g}{nis}"
        except Exception:  # noqa: BLE001
            numbers, tail = "", ""
        return f"Estimate({numbers}{len(columns)} columns [{shown}]{tail})"

    def to_xarray(self) -> Any:
        """An :class:`xarray.Dataset`: ``mean`` and ``sd`` over ``(time, state)``.

        Also ``cov`` over ``(time, state, state_)`` when kept, ``log_mean`` and ``log_sd`` over
        ``(time, log_column)`` for the ``log_scale`` columns, and, when kept, the per-step fields over
        ``step`` (the times t_1..t_N): ``pred_mean`` over ``(step, state)``, ``pred_cov`` over
        ``(step, state, state_)``, ``step_loglik`` and ``step_nis`` over ``(step,)``; attributes
        ``loglik``, ``nis`` and ``parameters`` (comma-separated).
        """
        import xarray as xr

        coords: dict[str, Any] = {"time": np.asarray(self.times), "state": list(self.state_names)}
        data: dict[str, Any] = {
            "mean": (("time", "state"), np.asarray(self.means)),
            "sd": (("time", "state"), np.asarray(self.stds)),
        }
        if self.covs is not None:
            data["cov"] = (("time", "state", "state_"), np.asarray(self.covs))
            coords["state_"] = list(self.state_names)
        if self.log_scale:
            data["log_mean"] = (("time", "log_column"), np.asarray(self.log_means))
            data["log_sd"] = (("time", "log_column"), np.asarray(self.log_stds))
            coords["log_column"] = list(self.log_scale)
        per_step = {
            "pred_mean": (("step", "state"), self.pred_means),
            "pred_cov": (("step", "state", "state_"), self.pred_covs),
            "step_loglik": (("step",), self.step_logliks),
            "step_nis": (("step",), self.step_nis),
        }
        for name, (dims, value) in per_step.items():
            if value is not None:
                data[name] = (dims, np.asarray(value))
                coords["step"] = np.asarray(self.times)[1:]
                if "state_" in dims:
                    coords["state_"] = list(self.state_names)
        attrs = {"loglik": float(self.loglik), "parameters": ",".join(self.parameters)}
        if self.nis is not None:
            attrs["nis"] = float(self.nis)
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def to_netcdf(self, path: str | Path) -> Path:
        """Write :meth:`to_xarray` to a netCDF file (h5netcdf engine); returns the path."""
        path = Path(path)
        self.to_xarray().to_netcdf(path, engine="h5netcdf")
        return path

    def netcdf_bytes(self) -> bytes:
        """The bytes of :meth:`to_netcdf`'s file (for a run folder's extra files)."""
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            return self.to_netcdf(Path(tmp) / "estimate.nc").read_bytes()

    def to_dataframe(self) -> Any:
        """A :class:`pandas.DataFrame` indexed by time with columns ``<name>`` (mean) and ``<name>_sd``."""
        import pandas as pd

        means, stds = np.asarray(self.means), np.asarray(self.stds)
        columns: dict[str, Any] = {}
        for j, name in enumerate(self.state_names):
            columns[name] = means[:, j]
            columns[f"{name}_sd"] = stds[:, j]
        return pd.DataFrame(columns, index=pd.Index(np.asarray(self.times), name="time"))


def _check_sds(field: str, value: Any, names: Sequence[str]) -> None:
    """Raise unless every standard deviation in ``value`` is >= 0 (NaN refused, +inf kept).

    A negative or NaN sd would give intervals with ``low > high`` or none at all. A column NaN at every
    row is a point estimate that carries no uncertainty (a PINN's states, a parameter fitted once): kept,
    its intervals NaN. Built inside a JAX transformation (tracers), the values are not known and not
    checked.
    """
    if value is None:
        return
    try:
        array = np.asarray(value)
    except jax.errors.TracerArrayConversionError:
        return
    bad = np.argwhere(~(array >= 0.0) & ~np.all(np.isnan(array), axis=0, keepdims=True))
    if bad.size:
        row, col = (int(i) for i in bad[0])
        raise ValueError(
            f"Estimate {field}: expected standard deviations >= 0 (NaN only down a whole column: a point "
            f"estimate); received {array[row, col]} "
            f"for {names[col]!r} at row {row} ({len(bad)} such value{'s' if len(bad) > 1 else ''})."
        )


_DATA = (
    "times",
    "means",
    "stds",
    "covs",
    "loglik",
    "nis",
    "log_means",
    "log_stds",
    "pred_means",
    "pred_covs",
    "step_logliks",
    "step_nis",
)
_META = ("state_names", "parameters", "log_scale")


def _flatten(est: Estimate) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    return tuple(getattr(est, k) for k in _DATA), tuple(getattr(est, k) for k in _META)


def _unflatten(meta: tuple[Any, ...], data: tuple[Any, ...]) -> Estimate:
    est = object.__new__(Estimate)  # no validation: jax rebuilds trees with placeholders
    for k, v in (*zip(_DATA, data, strict=True), *zip(_META, meta, strict=True)):
        object.__setattr__(est, k, v)
    return est


jax.tree_util.register_pytree_node(Estimate, _flatten, _unflatten)


def merge_estimates(
    blocks: Sequence[tuple[Sequence[str], Any, Any]],
    times: Any,
    *,
    order: Sequence[str] = (),
    parameters: Sequence[str] = (),
    loglik: float = float("nan"),
) -> Estimate:
    """One :class:`Estimate` from per-subsystem ``(names, means, stds)`` blocks (no cross-covariances).

    Columns named in ``order`` come first, in that order; the others follow in block order.

    Raises:
        ValueError: when two blocks name the same column, or ``order`` names a column no block has.

    """
    names: list[str] = []
    mean_cols: list[Any] = []
    sd_cols: list[Any] = []
    for block_names, means, stds in blocks:
        for j, name in enumerate(block_names):
            if name in names:
                raise ValueError(f"merge_estimates: the column {name!r} is estimated by two subsystems.")
            names.append(name)
            mean_cols.append(np.asarray(means)[:, j])
            sd_cols.append(np.asarray(stds)[:, j])
    unknown = [n for n in order if n not in names]
    if unknown:
        raise ValueError(
            f"merge_estimates order: expected names of estimated columns {names}; received {unknown}."
        )
    first = [names.index(n) for n in order]
    index = first + [j for j in range(len(names)) if j not in first]
    return Estimate(
        times=np.asarray(times),
        means=np.stack([mean_cols[j] for j in index], axis=1),
        stds=np.stack([sd_cols[j] for j in index], axis=1),
        covs=None,
        state_names=tuple(names[j] for j in index),
        parameters=tuple(parameters),
        loglik=float(loglik),
    )
