"""A model's fastest time scale at an operating point, and whether a record's step can resolve it.

The linearisation ``A = df/dx`` of ``dx/dt = f(t, x, u)`` at ``(t, x, u)`` has eigenvalues ``lambda``;
the largest ``|lambda|`` sets the fastest time scale ``1 / |lambda|max`` (for a lightly damped mode, the
natural frequency ``omega``: period ``2 pi / omega``). An explicit Runge-Kutta step ``dt`` is stable on
such a mode only while ``dt lambda`` lies in the method's stability region (Hairer & Wanner, Solving
Ordinary Differential Equations II, 2nd ed., sec. IV.2, Fig. 2.1: the real-axis extent is 2 for Euler and
Heun, 2.785 for RK4, whose imaginary-axis extent is 2.828); the exact (matrix-exponential) step is stable
at any ``dt`` but resolves a mode only with at least two samples per period (``dt omega < pi``).

:func:`check_step` turns this into a refusal before a filter or a simulation runs: the linearisation's
eigenvalues, scaled by the step, go through the method's stability function (Hairer & Wanner II, sec.
IV.2, eq. 2.4: ``R(z) = 1 + z`` for Euler, ``1 + z + z^2/2`` for Heun, the degree-4 Taylor polynomial of
``exp(z)`` for RK4; semi-implicit Euler's step matrix is formed from the Jacobian's blocks). The step
matrix's spectral radius over the exact flow's, ``exp(dt max Re lambda)`` (at least 1), is the growth the
discretisation adds per step, and its power over the record the growth it adds to the run: a stiff chain
with RK4 at ``dt |lambda| = 28`` multiplies its state by 2.6e4 per step (issue #52: means of 1e54 at a
normal-looking NIS), while Euler on an undamped mode adds ``(dt omega)^2 / 2`` per step, harmless over a
short record and ruinous over a long one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple, ParamSpec

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferValueError, TwinferWarning
from twinfer.models import AbstractModel, Params

P = ParamSpec("P")

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


GROWTH_WARN = 10.0
"""Growth the discretisation alone may add over a record before :func:`check_step` warns
(:class:`StepSizeWarning`): a simulated state then ends up to 10x off from the discretisation alone."""

GROWTH_ERROR = 1e3
"""Growth over a record above which :func:`check_step` refuses the run (:class:`StepSizeError`)."""

MAX_SUBSTEPS = 100_000
"""The largest ``substeps`` :func:`check_step` searches when suggesting one."""

_POLYNOMIALS: dict[str, tuple[float, ...]] = {
    "euler": (1.0, 1.0),
    "heun": (1.0, 1.0, 1.0 / 2.0),
    "rk4": (1.0, 1.0, 1.0 / 2.0, 1.0 / 6.0, 1.0 / 24.0),
}
"""Stability functions ``R(z) = sum c_j z^j`` of the explicit Runge-Kutta methods (Hairer & Wanner II,
sec. IV.2): one step of ``x' = lambda x`` multiplies ``x`` by ``R(dt lambda)``."""


class StepSizeError(TwinferValueError):
    """The record's step is too long for the integrator: the discretisation itself grows without bound."""


class StepSizeWarning(TwinferWarning):
    """The integrator adds noticeable growth over the record (up to :data:`GROWTH_ERROR`-fold)."""


class Stability(NamedTuple):
    """The growth a discretisation adds to a model's linearisation at one operating point.

    ``per_step``: the step matrix's spectral radius over the exact flow's (>= 1 means no damping left);
    ``over_record``: ``per_step`` to the power of the record's steps (inf past float64);
    ``scale``: the fastest time scale there (:func:`fastest_rate`), None without one.
    """

    per_step: float
    over_record: float
    scale: TimeScale | None


@eqx.filter_jit
def _jacobian(model: AbstractModel, t: Any, x: Any, u: Any, params: Any) -> Any:
    """``df/dx`` at ``(t, x, u)``, compiled once per model structure (a warm filter call pays ~0.1 ms)."""
    return jax.jacfwd(lambda s: model.vector_field(t, s, u, params))(x)


def _jacobian_at(model: AbstractModel, x: Any, u: Any, params: Params | None, t: float) -> np.ndarray | None:
    """The Jacobian as a host array, or None.

    None for no state, too many states, wrong shapes, a non-finite Jacobian, or a model that steps itself
    (:attr:`~twinfer.models.AbstractModel.steps_itself`).
    """
    params = model.params if params is None else params
    x = np.asarray(x, dtype=np.float64)
    if model.steps_itself or x.shape != (model.n_state,) or not 0 < model.n_state <= MAX_STATES:
        return None
    u = np.asarray(u, dtype=np.float64).reshape(model.n_input)
    jac = np.asarray(_jacobian(model, jnp.float64(t), jnp.asarray(x), jnp.asarray(u), params))
    return jac if np.all(np.isfinite(jac)) else None


def _linearised(
    model: AbstractModel, x: Any, u: Any, params: Params | None, t: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """The Jacobian at ``(t, x, u)`` (``u`` None: zeros) and its eigenvalues; None as :func:`_jacobian_at`."""
    jac = _jacobian_at(model, x, np.zeros(model.n_input) if u is None else u, params, t)
    return None if jac is None else (jac, np.linalg.eigvals(jac))


def _scale(eig: np.ndarray) -> TimeScale | None:
    """The fastest time scale of eigenvalues ``eig``; None without a finite non-zero one."""
    rate = float(np.max(np.abs(eig))) if eig.size else 0.0
    return TimeScale(rate) if rate > 0 and math.isfinite(rate) else None


def _over_record(per_step: float, n_steps: int) -> float:
    """``per_step ** n_steps`` (``n_steps`` at least 1), inf past float64."""
    if not math.isfinite(per_step):
        return math.inf
    log_g = max(n_steps, 1) * math.log(max(per_step, 1e-300))
    return math.inf if log_g > 700.0 else math.exp(log_g)


def _growth(jac: np.ndarray, eig: np.ndarray, dt: float, integrator: str, substeps: int) -> float:
    """Spectral radius of ``substeps`` steps of ``dt / substeps`` over the exact flow's (inf past float64)."""
    if integrator == "exact" or integrator not in (*_POLYNOMIALS, "semi-implicit-euler") or not eig.size:
        return 1.0
    h = dt / substeps
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        log_flow = max(0.0, float(dt * np.max(np.real(eig))))
        if integrator == "semi-implicit-euler":  # v' = v + h (Jq q + Jv v), q' = q + h v'
            n = jac.shape[0] // 2
            jq, jv, eye = jac[n:, :n], jac[n:, n:], np.eye(n)
            step = np.block([[eye + h * h * jq, h * (eye + h * jv)], [h * jq, eye + h * jv]])
            one = float(np.max(np.abs(np.linalg.eigvals(step))))
        else:
            one = float(np.max(np.abs(np.polynomial.polynomial.polyval(h * eig, _POLYNOMIALS[integrator]))))
        log_g = substeps * math.log(one) - log_flow if one > 0 else -math.inf
    if math.isnan(log_g) or log_g > 700.0:
        return math.inf
    return math.exp(log_g)


def stability(
    model: AbstractModel,
    dt: float,
    integrator: str,
    x: Any,
    u: Any = None,
    *,
    substeps: int = 1,
    n_steps: int = 1,
    params: Params | None = None,
    t: float = 0.0,
) -> Stability | None:
    """The growth ``integrator`` at step ``dt`` adds to ``model`` linearised at ``(t, x, u)``.

    Exact for a linear model (its step matrix is ``R(dt A)``); for a nonlinear one, the local picture at
    the operating point.

    Args:
        model: a continuous-time twinfer model.
        dt: the step between records (each taken as ``substeps`` steps).
        integrator: ``"euler"``, ``"semi-implicit-euler"``, ``"heun"``, ``"rk4"`` or ``"exact"``.
        x: (n_state,) the operating point (a filter's prior mean, a simulation's initial state).
        u: (n_input,) input there (None: zeros).
        substeps: integrator steps per ``dt``.
        n_steps: steps of ``dt`` in the record.
        params: the parameters (default the model's own).
        t: time of the operating point.

    Returns:
        The :class:`Stability`, or None when the Jacobian cannot be formed (no state, more than
        :data:`MAX_STATES` states, non-finite).

    References:
        Hairer & Wanner, Solving Ordinary Differential Equations II, 2nd ed., sec. IV.2 (stability
        functions and regions of explicit Runge-Kutta methods).

    """
    lin = _linearised(model, x, u, params, t)
    return None if lin is None else _stability_of(*lin, dt, integrator, substeps, n_steps)


def _stability_of(
    jac: np.ndarray, eig: np.ndarray, dt: float, integrator: str, substeps: int, n_steps: int
) -> Stability:
    g = _growth(jac, eig, dt, integrator, substeps)
    return Stability(g, _over_record(g, n_steps), _scale(eig))


def _step_error(eig: np.ndarray, dt: float, integrator: str, substeps: int) -> float:
    """The largest ``|R(h lambda)^s - exp(dt lambda)|`` over the eigenvalues: one record step's model error.

    Relative to the state (a mode of size 1); 0 for ``"exact"``; inf where it cannot be formed
    (semi-implicit Euler's step is not a function of the eigenvalues alone: its growth only is judged).
    """
    if integrator == "exact" or not eig.size:
        return 0.0
    if integrator not in _POLYNOMIALS:
        return math.inf
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.polynomial.polynomial.polyval(eig * (dt / substeps), _POLYNOMIALS[integrator]) ** substeps
        err = float(np.max(np.abs(r - np.exp(eig * dt))))
    return err if math.isfinite(err) else math.inf


ACCURACY = 1e-2
"""Model error per record step (relative to the state) of the substeps :func:`check_step` calls accurate."""


def _enough_substeps(
    jac: np.ndarray, eig: np.ndarray, dt: float, integrator: str, substeps: int, n_steps: int, accurate: bool
) -> int | None:
    """The fewest substeps with record growth <= GROWTH_WARN (and, ``accurate``, step error <= ACCURACY).

    Doubling from ``substeps``, then bisection; None past :data:`MAX_SUBSTEPS`.
    """

    def fine(s: int) -> bool:
        stable = _over_record(_growth(jac, eig, dt, integrator, s), n_steps) <= GROWTH_WARN
        return stable and (not accurate or _step_error(eig, dt, integrator, s) <= ACCURACY)

    high = substeps
    while not fine(high):
        if high >= MAX_SUBSTEPS:
            return None
        high = min(2 * high, MAX_SUBSTEPS)
    low = max(substeps, high // 2)
    while low < high:  # the first fine one in (high / 2, high]; growth and error fall with substeps here
        mid = (low + high) // 2
        low, high = (low, mid) if fine(mid) else (mid + 1, high)
    return high


class StepProblem(NamedTuple):
    """What :func:`step_problem` found wrong: ``error`` (beyond :data:`GROWTH_ERROR`, else a warning)."""

    error: bool
    text: str
    stability: Stability


def step_problem(
    where: str,
    model: AbstractModel,
    dt: float,
    integrator: str,
    x: Any,
    u: Any = None,
    *,
    substeps_name: str = "substeps",
    at: str = "the prior",
    name: str | None = None,
    substeps: int = 1,
    n_steps: int = 1,
    params: Params | None = None,
    t: float = 0.0,
) -> StepProblem | Stability | None:
    """Whether the step is one the integrator cannot take on this model, with the message saying why.

    :func:`stability` at ``(t, x, u)``: growth over the record above :data:`GROWTH_ERROR` is an error
    (:func:`check_step` raises :class:`StepSizeError`), above :data:`GROWTH_WARN` a warning
    (:class:`StepSizeWarning`). The message names
    the fastest mode, ``dt |lambda|``, the growth per step and over the record, the fewest ``substeps``
    that bring it under :data:`GROWTH_WARN`, and a likely unit mistake (:func:`step_mismatch`).

    Args:
        where: the calling function, for the message.
        model: the model, as for :func:`stability` (and ``dt``, ``integrator``, ``x``, ``u``, ``substeps``,
            ``n_steps``, ``params``, ``t`` below).
        dt: the step between records.
        integrator: the method; ``"exact"`` is never refused (the matrix exponential is stable at any step).
        x: the operating point.
        u: the input there.
        substeps_name: how the caller's argument for substeps is spelled in the suggestion.
        at: the operating point, in words.
        name: the model's name in the message (default its class name).
        substeps: integrator steps per ``dt``.
        n_steps: steps of ``dt`` in the record.
        params: the parameters.
        t: the time of the operating point.

    Returns:
        A :class:`StepProblem`; else the :class:`Stability` found (growth within :data:`GROWTH_WARN`), or
        None when the Jacobian cannot be formed (nothing is checked).

    """
    if integrator == "exact":
        return None
    lin = _linearised(model, x, u, params, t)
    if lin is None:
        return None
    jac, eig = lin
    found = _stability_of(jac, eig, dt, integrator, substeps, n_steps)
    if found.over_record <= GROWTH_WARN:
        return found
    accurate = None
    more = _enough_substeps(jac, eig, dt, integrator, substeps, n_steps, False)
    if more is not None and integrator in _POLYNOMIALS:
        accurate = _enough_substeps(jac, eig, dt, integrator, more, n_steps, True)
    scale = found.scale
    mode = (
        f"its fastest mode at {at} has |lambda| = {scale.rate:.3g} 1/s (time constant "
        f"{_duration(scale.time_constant)}, period {_duration(scale.period)}), so dt/{substeps_name} "
        f"|lambda| = {dt / substeps * scale.rate:.3g}"
        if scale is not None
        else f"at {at}"
    )
    grows = (
        f"the {integrator!r} discretisation multiplies the state by {found.per_step:.4g} per step where the "
        f"model itself does not grow, {_times(found.over_record)} over the record's {n_steps} steps"
    )
    if more is None:
        fix = f"no {substeps_name} up to {MAX_SUBSTEPS} is enough"
    elif accurate is not None and accurate > more:
        fix = (
            f"use {substeps_name}={more} or more (integrator steps per record step; {accurate} keep the "
            f"discretisation's own error per record step under {ACCURACY:.0%})"
        )
    elif accurate is None and integrator in _POLYNOMIALS:
        fix = (
            f"use {substeps_name}={more} or more (integrator steps per record step; an error per record step "
            f"under {ACCURACY:.0%} needs over {MAX_SUBSTEPS}: try integrator 'rk4')"
        )
    else:
        fix = f"use {substeps_name}={more} or more (integrator steps per record step)"
    exact = " or integrator='exact' (a linear model's matrix exponential)" if model.is_linear else ""
    units = step_mismatch(dt, scale, integrator, at) if integrator in STEP_LIMITS and substeps == 1 else ""
    units = f" {units}" if units else ""
    text = (
        f"{where} integrator: the step dt = {dt:g} with {substeps_name}={substeps} is too long for "
        f"{name or type(model).__name__}: {mode}; {grows}. Expected a step the integrator can take: "
        f"{fix}{exact}, or a record sampled faster.{units}"
    )
    return StepProblem(found.over_record > GROWTH_ERROR, text, found)


def _enforced(find: Callable[P, StepProblem | Stability | None]) -> Callable[P, Stability | None]:
    """``find``'s verdict enforced: a :class:`StepProblem` that is an error raised, one that is not warned."""

    def check_step(*args: P.args, **kwargs: P.kwargs) -> Stability | None:
        """Refuse a step the integrator cannot take on this model; warn when it adds growth over the record.

        :func:`step_problem` (the same arguments), raised as :class:`StepSizeError` or warned as
        :class:`StepSizeWarning`.

        Returns:
            The :class:`Stability` found (None when nothing could be checked).

        """
        found = find(*args, **kwargs)
        if found is None or isinstance(found, Stability):
            return found
        if found.error:
            raise StepSizeError(found.text)
        warnings.warn(found.text, StepSizeWarning, stacklevel=3)
        return found.stability

    return check_step


check_step = _enforced(step_problem)


def _times(factor: float) -> str:
    return "without bound (past float64)" if not math.isfinite(factor) else f"{factor:.3g}-fold"


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
    lin = _linearised(model, x, u, params, t)
    return None if lin is None else _scale(lin[1])


def _duration(seconds: float) -> str:
    """``0.002`` -> ``"2 ms"``: a time in the unit that reads best."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"


def step_mismatch(dt: float, scale: TimeScale | None, integrator: str, at: str = "the prior") -> str:
    """A sentence naming a likely unit mistake when ``dt`` is far from the model's time scale, else ``""``.

    Too long: ``dt |lambda|max`` beyond the integrator's :data:`STEP_LIMITS` (an explicit method then
    diverges); when the step divided by 1e3 (1e6) would fit, the time column is likely in milliseconds
    (microseconds). Too short: ``dt |lambda|max`` below :data:`TOO_FINE`.

    Args:
        dt: the record's step, in the units of its time column.
        scale: :func:`fastest_rate` at the prior (None: no sentence).
        at: where ``scale`` was found, in words.
        integrator: a name of :data:`STEP_LIMITS`.

    """
    if scale is None or integrator not in STEP_LIMITS or not dt > 0:
        return ""
    limit, ratio = STEP_LIMITS[integrator], dt * scale.rate
    facts = (
        f"The record's step is {dt:g} (s?); the model's fastest time scale is "
        f"{_duration(scale.time_constant)} (1/|lambda|max of its Jacobian at {at}; natural period "
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
