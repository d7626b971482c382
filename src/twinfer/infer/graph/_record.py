"""A record checked and laid out for a compiled graph's scan: inputs, observations, masks and numbers.

Step k applies ``inputs[k]`` over [t_k, t_{k+1}) and updates with ``observations[k+1]``, read with the
input the record's alignment says (:meth:`twinfer.data.Dataset.step_inputs`). A NaN observation is
missing; an infinite one, a non-finite input, float32 data or a non-PSD covariance is a named error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twinfer.data._checks import first_bad
from twinfer.infer.filters._errors import first_not_psd
from twinfer.infer.graph._numbers import Compiled, Numbers


def _prepare_record(
    compiled: Compiled, numbers: Any, dataset: Any, us: Any, ys: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any, Any]:
    """Checked host arrays ``(us, ys with missing values zeroed, masks, times, us_meas)`` of a record.

    ``us_meas``: the inputs the measurements were read with (a dataset's
    :meth:`~twinfer.data.Dataset.step_inputs`), None for arrays (``ys[k]`` read with ``us[k]``).

    Raises:
        ValueError: as :func:`twinfer.infer.graph._run.run` for the record and the graph's numbers.

    """
    times, us_meas = None, None
    if dataset is not None:
        pairs = dataset.step_inputs()  # the step's input, and the one y_k+1 was read with
        us, us_meas = np.split(pairs, 2, axis=1)
        ys = np.asarray(dataset.observations)[1:]
        times = np.asarray(dataset.times)
        check_step(
            [g.template.dynamics.dt for g in compiled.groups if g.template.dynamics is not None], dataset
        )
    if us is None or ys is None:
        raise ValueError("run: expected a dataset or both us and ys; received neither.")
    us, ys = _record("us", us), _record("ys", ys)
    if us.shape[0] != ys.shape[0]:
        raise ValueError(
            f"run us, ys: expected the same number of rows T (input k and measurement k+1 per row); "
            f"received us {us.shape}, ys {ys.shape}."
        )
    _check_finite("us", us, allow_nan=False)
    _check_finite("ys", ys, allow_nan=True)
    for gi, g in enumerate(compiled.groups):
        for field, arr, arg in (("inputs", us, "us"), ("outputs", ys, "ys")):
            for i, cols in zip(g.members, np.asarray(numbers.groups[gi][field]), strict=True):
                low = -1  # -1: an output never measured (padding), an input the data does not carry
                if cols.size and (cols.max() >= arr.shape[1] or cols.min() < low):
                    raise ValueError(
                        f"run: subsystem {compiled.names[i]!r} {field}: expected columns in {low}.."
                        f"{arr.shape[1] - 1} (the columns of {arg}, shape {arr.shape}); received "
                        f"{cols.tolist()}."
                    )
    _check_numbers(compiled, numbers)
    masks = ~np.isnan(ys)
    return us, np.where(masks, ys, 0.0), masks, times, us_meas


def check_step(steps: Any, dataset: Any, where: str = "run") -> None:
    """Check that the record is sampled uniformly at the step the graph's subsystems integrate over.

    ``steps``: the subsystems' steps, where they carry one (:class:`twinfer.sim.Dynamics`).

    Raises:
        ValueError: for a non-uniform record or one sampled at another step, naming both.

    """
    steps = sorted({float(s) for s in steps})
    if not steps or not hasattr(type(dataset), "dt"):
        return
    try:
        dt = float(dataset.dt)
    except ValueError as error:
        raise ValueError(
            f"{where} dataset: the graph's subsystems step every {steps[0]:g} s, so the record must be "
            f"sampled at that step; {error}"
        ) from None
    for step in steps:
        if abs(step - dt) > 1e-9 * step:
            raise ValueError(
                f"{where} dataset: expected samples {step:g} s apart (the step the graph's subsystems "
                f"integrate over: Graph.from_model's dt); received {dt:g} s. Build the graph with dt={dt:g}."
            )


def _record(name: str, value: Any) -> np.ndarray:
    """``value`` as a 2-D float64 host array (integers converted exactly; float16/32 refused)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu" or arr.dtype in (np.float16, np.float32):
        raise ValueError(
            f"run {name}: expected a float64 array; received dtype {arr.dtype} (convert with "
            "np.asarray(x, dtype=np.float64) only if the lost digits do not matter)."
        )
    if arr.ndim != 2:
        raise ValueError(f"run {name}: expected a 2-D array (T, columns); received shape {arr.shape}.")
    return arr.astype(np.float64)


def _check_finite(name: str, arr: np.ndarray, *, allow_nan: bool) -> None:
    found = first_bad(arr, np.isinf(arr) if allow_nan else None)
    if found is not None:
        (row, col), value = found
        allowed = "finite values or NaN (missing)" if allow_nan else "finite values"
        raise ValueError(f"run {name}: expected {allowed}; received {value} at row {row}, column {col}.")


def _check_numbers(compiled: Compiled, numbers: Numbers) -> None:
    """Every subsystem's x0 finite, P0, Q and R finite and positive semi-definite (one batch per group)."""
    for gi, g in enumerate(compiled.groups):
        arr = numbers.groups[gi]
        for field in ("x0", "P0", "Q", "R"):
            values = np.asarray(arr[field])
            finite = np.all(np.isfinite(values).reshape(len(g.members), -1), axis=1, keepdims=False)
            finite = np.asarray(finite, dtype=bool)
            j = int(np.argmax(~finite)) if not finite.all() else -1
            if j < 0 and field != "x0":
                j = first_not_psd(values)
            if j < 0:
                continue
            v = values[j]
            where = f"run: subsystem {compiled.names[g.members[j]]!r} {field}"
            if not finite[j]:
                raise ValueError(f"{where}: expected finite values; received {v.tolist()}.")
            eig = float(np.linalg.eigvalsh(0.5 * (v + v.T))[0])
            raise ValueError(
                f"{where}: expected a positive semi-definite covariance; received a matrix with eigenvalue "
                f"{eig:.3g}."
            )
