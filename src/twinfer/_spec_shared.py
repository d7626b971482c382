"""What :mod:`twinfer.spec` shares with its FMU part, :mod:`twinfer._spec_fmu` (FMU spec files, issue #56).

The exception that carries several spec problems, one line each naming its key; the check of one number
or one per output or state; the check of an unknown's three numbers; and the band-limited excitation of
a simulated record. The chains and grids of :mod:`twinfer.spec` use them as the FMU's checks and records
do. They sit below both modules, so :mod:`twinfer._spec_fmu` imports nothing of :mod:`twinfer.spec` when
it runs (only its tables' names, for the type checker); this module imports nothing of twinfer above
:mod:`twinfer.errors`.
"""

from __future__ import annotations

import math

import numpy as np

from twinfer.errors import TwinferRuntimeError, TwinferValueError

__all__ = ["Problems", "band_limited", "triple_problem", "values_problem"]


class Problems(TwinferValueError):
    """Several spec problems found together, one line each naming its key (``estimator.noise_sd: ...``).

    Raised inside :class:`twinfer.spec.Spec`'s validators and by :func:`twinfer._spec_fmu.description`;
    :func:`twinfer.spec.load_spec` prints its lines as they are.
    """

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def values_problem(
    key: str, value: float | list[float], count: int | None, per: str, bound: str, note: str = ""
) -> list[str]:
    """``[problem]`` unless ``value`` is one number or ``count`` numbers (one per ``per``) with ``bound``.

    ``count`` None: any length; 0: one value only (``per`` then names the model). ``bound``: ``"> 0"``,
    ``">= 0"`` (standard deviations, whose squares must also be finite) or ``"any"`` (a mean).
    """
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and (count == 0 or (count is not None and len(value) != count)):
        expected = f"one value for a {per}" if count == 0 else f"one value or {count}, one per {per}"
        return [f"{key}: expected {expected}; received {len(value)} values {value}"]
    if bound == "> 0" and any(v <= 0 for v in values):
        return [f"{key}: expected standard deviations > 0{note}; received {value}"]
    if bound == ">= 0" and any(v < 0 for v in values):
        return [f"{key}: expected standard deviations >= 0{note}; received {value}"]
    if bound != "any" and not all(math.isfinite(v * v) for v in values):
        return [f"{key}: expected standard deviations whose square (a variance) is finite; received {value}"]
    return []


def triple_problem(name: str, init: float, prior_sd: float, walk_sd: float) -> list[str]:
    """``[problem]`` unless an unknown's prior sd is > 0 and its random-walk sd >= 0, both squarable."""
    if not prior_sd > 0 or not walk_sd >= 0 or not all(math.isfinite(v * v) for v in (prior_sd, walk_sd)):
        return [
            f"unknown.{name}: expected [initial value, prior sd > 0, random-walk sd >= 0] (sds with "
            f"finite squares); received [{init!r}, {prior_sd!r}, {walk_sd!r}]"
        ]
    return []


def band_limited(band: float, rng: np.random.Generator, rows: int, columns: int, sd: float) -> np.ndarray:
    """White noise of ``sd`` through a 4th-order Butterworth low-pass at ``band`` of the Nyquist frequency."""
    from scipy.signal import butter, lfilter

    coeffs = butter(4, band)
    if coeffs is None:  # butter returns (b, a) by default; its annotation allows None
        raise TwinferRuntimeError("internal: scipy.signal.butter returned no coefficients.")
    return np.asarray(lfilter(coeffs[0], coeffs[1], rng.normal(size=(rows, columns)) * sd, axis=0))
