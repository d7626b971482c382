"""A model's fastest time scale at an operating point, and whether a record's step can resolve it.

The linearisation ``A = df/dx`` of ``dx/dt = f(t, x, u)`` at ``(t, x, u)`` has eigenvalues ``lambda``;
the largest ``|lambda|`` sets the fastest time scale ``1 / |lambda|max`` (for a lightly damped mode, the
natural frequency ``omega``: period ``2 pi / omega``). An explicit Runge-Kutta step ``dt`` is stable on
such a mode only while ``dt lambda`` lies in the method's stability region (Hairer & Wanner, Solving
Ordinary Differential Equations II, 2nd ed., sec. IV.2, Fig. 2.1: the real-axis extent is 2 for Euler and
Heun, 2.785 for RK4, whose imaginary-axis extent is 2.828); the exact (matrix-exponential) step is stable
at any ``dt`` but resolves a mode only with at least two samples per period (``dt omega < pi``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models import AbstractModel, Params

STEP_LIMITS: dict[str, float] = {
    "euler": 2.0,
    "semi-implicit-euler": 2.0,
    "heun": 2.0,
    "rk4": 2.785,
    "exact": math.pi,
}
"""The largest ``dt |lambda|`` each integrator of :func:`twinfer.sim.discretise` handles (module docstring):
the stability region's extent along the negative real axis for the explicit methods (Euler and Heun are
unstable on an undamped mode at any step), the sampling limit (two samples per period) for ``"exact"``."""

MAX_STATES = 2000
"""Above this many states :func:`fastest_rate` skips the dense eigenvalue solve (O(n^3)) and returns None."""

_UNITS = ((1e3, "milliseconds"), (1e6, "microseconds"))
_SLOW_UNITS = ((60.0, "minutes"), (3600.0, "hours"))
TOO_FINE = 1e-5
"""``dt |lambda|max`` below which the step looks too short for the model (over 600,000 samples per
fastest period): a time column in minutes or hours read as seconds, or parameters in the wrong units."""


class TimeScale(NamedTuple):
    """The fastest rate ``|lambda|max`` (1/s) of a model's linearisation, and its derived times."""

    rate: float

    @property
    def time_constant(self) -> float:
        """``1 / |lambda|max`` (s)."""
        return 1.0 / self.rate

    @property
    def period(self) -> float:
        """``2 pi / |lambda|max`` (s): the natural period of the fastest lightly damped mode."""
        return 2.0 * math.pi / self.rate


def fastest_rate(
    model: AbstractModel, x: Any, u: Any, params: Params | None = None, t: float = 0.0
) -> TimeScale | None:
    """The largest ``|lambda|`` of ``df/dx`` at ``(t, x, u)``: the model's fastest time scale there.

    Args:
        model: a continuous-time twinfer model.
        x: (n_state,) operating point (the prior mean of a filter).
        u: (n_input,) input held there.
        params: the parameters (default the model's own).
        t: time.

    Returns:
        :class:`TimeScale`, or None when the model has no state, more than :data:`MAX_STATES` states,
        a non-finite Jacobian, or no non-zero eigenvalue (pure integrators set no time scale).

    References:
        Hairer & Wanner, Solving Ordinary Differential Equations II, 2nd ed., sec. IV.2.

    """
    params = model.params if params is None else params
    x = jnp.asarray(x, dtype=jnp.float64)
    if x.shape != (model.n_state,) or not 0 < model.n_state <= MAX_STATES:
        return None
    u = jnp.asarray(u, dtype=jnp.float64).reshape(model.n_input)
    jac = np.asarray(jax.jacfwd(lambda s: model.vector_field(t, s, u, params))(x))
    if not np.all(np.isfinite(jac)):
        return None
    rate = float(np.max(np.abs(np.linalg.eigvals(jac))))
    return TimeScale(rate) if rate > 0 and math.isfinite(rate) else None


def _duration(seconds: float) -> str:
    """``0.002`` -> ``"2 ms"``: a time in the unit that reads best."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"


def step_mismatch(dt: float, scale: TimeScale | None, integrator: str) -> str:
    """A sentence naming a likely unit mistake when ``dt`` is far from the model's time scale, else ``""``.

    Too long: ``dt |lambda|max`` beyond the integrator's :data:`STEP_LIMITS` (an explicit method then
    diverges); when the step divided by 1e3 (1e6) would fit, the time column is likely in milliseconds
    (microseconds). Too short: ``dt |lambda|max`` below :data:`TOO_FINE`.

    Args:
        dt: the record's step, in the units of its time column.
        scale: :func:`fastest_rate` at the prior (None: no sentence).
        integrator: a name of :data:`STEP_LIMITS`.

    """
    if scale is None or integrator not in STEP_LIMITS or not dt > 0:
        return ""
    limit, ratio = STEP_LIMITS[integrator], dt * scale.rate
    facts = (
        f"The record's step is {dt:g} (s?); the model's fastest time scale is "
        f"{_duration(scale.time_constant)} (1/|lambda|max of its Jacobian at the prior; natural period "
        f"{_duration(scale.period)}), so dt |lambda|max = {ratio:.3g}"
    )
    if ratio > limit:
        what = "stability limit" if integrator != "exact" else "sampling limit (two samples per period)"
        head = f"Time units? {facts}, beyond the {what} {limit:g} of integrator {integrator!r}"
        for factor, unit in _UNITS:
            if ratio / factor <= limit:
                return (
                    f"{head}: is the time column in {unit}? Divide the times by {factor:g} (or the step is "
                    "too long for this model: resample the record faster)."
                )
        return (
            f"{head}: the step is far too long for this model; check the time column's units and the "
            "model's parameters (a stiffness in N/mm read as N/m is 1000x too stiff)."
        )
    if ratio < TOO_FINE:
        for factor, unit in _SLOW_UNITS:
            if ratio * factor >= TOO_FINE:
                return (
                    f"Time units? {facts}: the step is far shorter than the model's "
                    f"fastest motion; is the time column in {unit}? Multiply the times by {factor:g} (or "
                    "check the model's parameters' units)."
                )
        return (
            f"Time units? {facts}: the step is far shorter than the model's fastest "
            "motion; check the time column's units and the model's parameters."
        )
    return ""


def unit_hint(model: AbstractModel, dt: float, integrator: str, x: Any, u: Any = None) -> str:
    """:func:`step_mismatch` at the operating point ``(x, u)``, with a leading space; ``""`` when none.

    For a divergence message: never raises (a model whose Jacobian cannot be taken gives ``""``, so the
    message it would add to is not lost). ``u`` None is a zero input.
    """
    try:
        u = np.zeros(model.n_input) if u is None else u
        sentence = step_mismatch(dt, fastest_rate(model, x, u), integrator)
    except Exception:  # noqa: BLE001  (a hint must not replace the error it explains)
        return ""
    return f" {sentence}" if sentence else ""
