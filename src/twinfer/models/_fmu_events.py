"""Events of an FMU on twinfer's hybrid hooks: the FMI 2.0 Model Exchange event interface (issue #56).

An FMU with event indicators (``numberOfEventIndicators > 0``) or time events answers the hooks of
:class:`~twinfer.models.AbstractModel` that :func:`twinfer.sim.simulate_events` drives:

- ``event_indicators``: ``fmi2GetEventIndicators`` at ``(t, x, u)`` (FMI 2.0.4, section 3.2.2: event
  i is signalled when its indicator changes sign; twinfer's simulators look for + to -), one
  ``jax.pure_callback`` per batch like the FMU's vector field.
- ``event_update``: set time, states and inputs in Continuous-Time Mode, ``fmi2EnterEventMode``, the
  ``fmi2NewDiscreteStates`` iteration until no new discrete states are needed, the states read back with
  ``fmi2GetContinuousStates`` when the FMU reports ``valuesOfContinuousStatesChanged``, and
  ``fmi2EnterContinuousTimeMode`` (section 3.2.2, the event-mode loop of the Model Exchange state machine,
  figure 6). ``terminateSimulation`` is an :class:`~twinfer.models.FMUTerminatedError`.
- ``next_time_event`` / ``time_event_update``: time events. An FMU that defines a next event time
  (``nextEventTimeDefined``) when initialised gets a last entry of ``z`` holding it
  (``next_event_time``); every event update stores the next one the FMU defines (``inf`` for none), and
  the time-event update is the same Event-Mode update at that time. The time's derivative is held at
  zero (twinfer's simulators hold time-event times constant).

**The discrete state z.** The functional contract passes ``(x, z)`` in and out, while the FMU instance
is stateful. Everything an event can change must therefore travel in ``(x, z)``; twinfer restores it on
every call (states with ``fmi2SetContinuousStates``, parameters with ``fmi2SetReal``, re-initialising for
a fixed one). ``x`` carries the continuous states. ``z`` carries, for each of the model's ``params``, the
shift an event made to it: an FMU may change a parameter inside its event update (the Reference
BouncingBall sets ``g := 0`` when it comes to rest), so the value the FMU computes with is
``params + z`` and ``z`` starts at 0 (discrete states ``<name>_event_shift``). An FMU whose description
declares discrete variables (variability ``discrete``, causality local or output) is refused when it
has event indicators: FMI 2.0 lets no importer set those (section 3.2.3), so twinfer cannot restore them
and would silently lose them (:func:`twinfer.models._fmu_archive.describe`). A parameter left out of
``params`` (``parameters=[...]``) that an event changes is an :class:`~twinfer.models.FMUEventsError` when
it happens, as is a time event from an FMU that defined none at its start (z has no slot for it).
Memory an FMU keeps without declaring it as a variable cannot be seen by any importer.

**Where the event is handed over.** The simulators locate a crossing to rounding, so the located state
may lie a few units in the last place on the near side of the surface, where an FMU that tests its own
condition (``h <= 0``) sees no event. If a flagged indicator is still positive, the state is carried
along the vector field by the time its indicator needs to reach zero (at most ``1e-9 max(1, |t|)`` s)
before the FMU enters Event Mode, as a Model Exchange integrator hands over the first point past the
root.

**Derivatives.** Both hooks sit behind ``jax.custom_jvp`` with central finite differences, steps
``eps^(1/3) max(|v|, nominal)`` as the FMU's other derivatives (FMI 2.0 has no directional derivatives
of indicators or of an event update). The event update is not smooth across its own condition: a
perturbation that moves the state off the event side changes what the FMU does, so a column whose one
side acts differently from the unperturbed point is a one-sided difference from the side that acts
alike (the derivative along the event surface, the only direction a located event moves in to first
order). The tangent is linear in the input tangents with Jacobians from the primals, so reverse mode
(training) transposes it.

References:
    Modelica Association, Functional Mock-up Interface 2.0.4 (2022), sections 3.1 (event indicators),
    3.2.2 (the Model Exchange calling sequence and ``fmi2EventInfo``) and 3.2.3 (state machine).
    Specs/model-combination.md 1.1 (the hybrid model class, eqs. 2-6).
    Nocedal & Wright, Numerical Optimization, 2nd ed. (2006), section 8.1 (central differences).

"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array

from twinfer.models._base import AbstractModel, Input, Output, Params, State
from twinfer.models._fmu_errors import FMUCallError, FMUEventsError, FMUTerminatedError
from twinfer.models._fmu_runtime import Runtime, flat_batch

_CUBE_ROOT_EPS = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
_MAX_EVENT_ITERATIONS = 100
_HANDOVER = 1e-9
"""Longest carry along the vector field (seconds, times max(1, |t|)) that hands a located event over."""
_FMI2_WARNING = 1
_FUNCTIONS = (
    "fmi2SetTime",
    "fmi2SetContinuousStates",
    "fmi2SetReal",
    "fmi2GetReal",
    "fmi2GetDerivatives",
    "fmi2GetEventIndicators",
    "fmi2GetContinuousStates",
    "fmi2EnterEventMode",
    "fmi2NewDiscreteStates",
    "fmi2EnterContinuousTimeMode",
)


def _refs(refs: tuple[int, ...]) -> Any:
    return (ctypes.c_uint * len(refs))(*refs)


class Events:
    """The event side of an FMU's :class:`~twinfer.models._fmu_runtime.Runtime` (module docstring).

    Holds the runtime (it never owns the instance: the runtime frees it) and answers the batched
    callbacks: indicators, update and the first time event. Built once per :class:`~twinfer.models.FMU`:
    it initialises the instance once more, keeping the initial event iteration's ``fmi2EventInfo``, to
    learn whether the FMU defines time events.

    Args:
        runtime: the FMU's runtime, already initialised.

    Raises:
        FMUEventsError: an FMU with time events but without event indicators that declares discrete
            variables (refused for the reason the description check gives for one with indicators).

    """

    def __init__(self, runtime: Runtime) -> None:
        from fmpy.fmi2 import fmi2EventInfo

        desc = runtime.desc
        self.runtime = runtime
        self.n_events = desc.n_events
        self.n_state = len(desc.state_refs)
        self.n_params = len(desc.param_refs)
        self._raw = {name: runtime.function(name) for name in _FUNCTIONS}  # argtypes set by fmpy
        self._info = fmi2EventInfo()
        self._param_refs = _refs(desc.param_refs)
        self._other_refs = _refs(desc.other_param_refs)
        self._input_refs = _refs(desc.input_refs)
        n = max(self.n_state, self.n_events, self.n_params, len(desc.other_param_refs), len(desc.input_refs))
        self._buf = (ctypes.c_double * max(n, 1))()
        self._view = np.ctypeslib.as_array(self._buf)
        with runtime._lock:
            self.first_time_event = self._restart(runtime._current or tuple(desc.param_starts))
        self.has_time_events = math.isfinite(self.first_time_event)
        hybrid = self.n_events > 0 or self.has_time_events
        self.n_discrete = self.n_params + int(self.has_time_events) if hybrid else 0
        if self.has_time_events and desc.discrete_names:
            raise FMUEventsError(
                f"FMU {desc.path!r} discrete variables: expected none in an FMU with time events (twinfer "
                "carries an FMU's continuous states and parameters across events, and FMI 2.0 lets no "
                f"importer set a local or output variable); received {list(desc.discrete_names[:8])}."
            )

    # -- FMI calls ---------------------------------------------------------------------------------
    def _hot(self, name: str, *args: Any) -> None:
        status = self._raw[name](self.runtime._fmu.component, *args)
        if status > _FMI2_WARNING:
            raise FMUCallError(
                f"FMU {self.runtime.desc.path!r}: {name} failed with status {status} (3 error, 4 fatal)."
            )

    def _get(self, name: str, size: int, *refs: Any) -> np.ndarray:
        """``size`` doubles from ``fmi2GetReal`` (with ``refs``) or a getter of the instance's arrays."""
        if not size:
            return np.zeros(0)
        if refs:
            self._hot(name, refs[0], size, self._buf)
        else:
            self._hot(name, self._buf, size)
        return self._view[:size].copy()

    def _states(self, x: np.ndarray) -> None:
        if x.size:
            self._view[: x.size] = x
            self._hot("fmi2SetContinuousStates", self._buf, x.size)

    def _set(self, t: float, x: np.ndarray, u: np.ndarray, p: np.ndarray) -> None:
        """Parameters (by their variability, the runtime's rule), time, states and inputs of one point."""
        self.runtime._parameters(tuple(p.tolist()))
        self._hot("fmi2SetTime", t)
        self._states(x)
        if u.size:
            self._view[: u.size] = u
            self._hot("fmi2SetReal", self._input_refs, u.size, self._buf)

    def _restart(self, p: tuple[float, ...]) -> float:
        """Reset and initialise with parameters ``p``; the initial event iteration's next event time.

        The runtime's sequence (FMI 2.0.4, section 3.2.3), keeping the ``fmi2EventInfo`` it discards
        (``inf``: no time event); ends in Continuous-Time Mode.
        """
        runtime = self.runtime
        runtime._hot("fmi2Reset")
        runtime._hot("fmi2SetupExperiment", 0, 0.0, 0.0, 0, 0.0)
        runtime._set(runtime._param_refs, runtime._p, p)
        runtime._hot("fmi2EnterInitializationMode")
        runtime._hot("fmi2ExitInitializationMode")
        _, t_next = self._iterate()
        self._hot("fmi2EnterContinuousTimeMode")
        runtime._current = p
        return t_next

    def _iterate(self) -> tuple[bool, float]:
        """The ``fmi2NewDiscreteStates`` loop of Event Mode.

        Returns whether the continuous states changed, and the next event time (``inf``: none defined).
        """
        info, changed = self._info, False
        path = self.runtime.desc.path
        for _ in range(_MAX_EVENT_ITERATIONS):
            self._hot("fmi2NewDiscreteStates", ctypes.byref(info))
            if info.terminateSimulation:
                raise FMUTerminatedError(
                    f"FMU {path!r}: expected terminateSimulation false at an event; received true (the model "
                    "asked to end the simulation, FMI 2.0.4 section 3.2.2)."
                )
            changed = changed or bool(info.valuesOfContinuousStatesChanged)
            if not info.newDiscreteStatesNeeded:
                break
        else:
            raise FMUCallError(
                f"FMU {path!r}: expected the event iteration to settle; still iterating after "
                f"{_MAX_EVENT_ITERATIONS} rounds."
            )
        return changed, float(info.nextEventTime) if info.nextEventTimeDefined else math.inf

    # -- one point ---------------------------------------------------------------------------------
    def _indicators(self, point: list[np.ndarray]) -> tuple[np.ndarray, bool]:
        t, x, u, p = point
        self._set(float(t[0]), x, u, p)
        return self._get("fmi2GetEventIndicators", self.n_events), False

    def _handover(self, t: float, x: np.ndarray, flagged: np.ndarray) -> np.ndarray:
        """The located state, carried past the surface when a flagged indicator is still positive."""
        c = self._get("fmi2GetEventIndicators", self.n_events)
        late = flagged & (c > 0)
        if not late.any():
            return x
        bound = _HANDOVER * max(1.0, abs(t))
        f = self._get("fmi2GetDerivatives", self.n_state)
        self._states(x + bound * f)
        rate = (self._get("fmi2GetEventIndicators", self.n_events) - c) / bound
        if np.all(rate[late] < 0):
            delay = float(np.max(c[late] / -rate[late]))
            for k in range(8):
                step = min(delay * (1.0 + 1e-6) * 2.0**k, bound)
                carried = x + step * f
                self._states(carried)
                if np.all(self._get("fmi2GetEventIndicators", self.n_events)[late] <= 0):
                    return carried
                if step == bound:
                    break
        self._states(x)  # not a crossing the FMU sees within the bound: hand over the state as located
        return x

    def _update(self, point: list[np.ndarray]) -> tuple[np.ndarray, bool]:
        """``(concat(x+, z+), whether the FMU acted)`` after the flagged events.

        ``which[:-1]`` flags state events, ``which[-1]`` the time event.
        """
        t, x, z, u, p, which = point
        n_p = self.n_params
        flagged = which[:-1] > 0.5
        if not (which > 0.5).any():
            return np.concatenate([x, z]), False
        effective = p + z[:n_p]
        runtime = self.runtime
        time = float(t[0])
        if which[-1] > 0.5:  # a time event reached to rounding is handed over at its own time
            time = max(time, float(z[-1]))
        try:
            self._set(time, x, u, effective)
            if flagged.any():
                self._handover(time, x, flagged)
            others = self._get("fmi2GetReal", len(self._other_refs), self._other_refs)
            self._hot("fmi2EnterEventMode")
            changed, t_next = self._iterate()
            x_new = self._get("fmi2GetContinuousStates", self.n_state) if changed else x.copy()
            p_new = self._get("fmi2GetReal", n_p, self._param_refs)
            others_new = self._get("fmi2GetReal", len(self._other_refs), self._other_refs)
            self._hot("fmi2EnterContinuousTimeMode")
        except Exception:
            runtime._initialise(runtime._current or tuple(runtime.desc.param_starts))  # a known mode again
            raise
        runtime._current = tuple(p_new.tolist())  # the values the instance holds now
        if math.isfinite(t_next) and not self.has_time_events:
            raise FMUEventsError(
                f"FMU {runtime.desc.path!r} nextEventTimeDefined: expected no time events from an FMU that "
                f"defined none at its start (z has no slot for one); received a next event time {t_next!r}."
            )
        moved = np.flatnonzero(others_new != others)
        if moved.size:
            desc, k = runtime.desc, int(moved[0])
            name = desc.other_param_names[k]
            raise FMUEventsError(
                f"FMU {desc.path!r} parameter {name!r}: expected an event to change only the model's params "
                f"{list(desc.param_names)}, which twinfer carries in z; received a change of {name!r} from "
                f"{float(others[k])!r} to {float(others_new[k])!r} (add it with parameters=[...])."
            )
        shifted = p_new != effective
        z_new = z.copy()
        z_new[:n_p] = np.where(shifted, p_new - p, z[:n_p])
        if self.has_time_events:
            z_new[-1] = t_next
        return np.concatenate([x_new, z_new]), changed or bool(shifted.any())

    # -- finite differences and batches --------------------------------------------------------------
    def _column(
        self,
        fn: Callable[[list[np.ndarray]], tuple[np.ndarray, bool]],
        point: list[np.ndarray],
        which: int,
        j: int,
        nominal: float,
        base: tuple[np.ndarray, bool],
    ) -> np.ndarray:
        """Column j of the Jacobian in argument ``which`` (module docstring).

        Central, or one-sided from the side that acts as the unperturbed point does.
        """
        h = _CUBE_ROOT_EPS * max(abs(float(point[which][j])), nominal)
        sides = []
        for sign in (1.0, -1.0):
            moved = [a.copy() for a in point]
            moved[which][j] += sign * h
            sides.append(fn(moved))
        (f_plus, a_plus), (f_minus, a_minus) = sides
        value, acted = base
        if a_plus == acted and a_minus != acted:
            return (f_plus - value) / h
        if a_minus == acted and a_plus != acted:
            return (value - f_minus) / h
        return (f_plus - f_minus) / (2.0 * h)

    def _point(self, kind: str, need: tuple[bool, ...], point: list[np.ndarray]) -> list[np.ndarray]:
        desc = self.runtime.desc
        t = point[0]
        t_nominal = (max(1.0, abs(float(t[0]))),)
        if kind == "indicators":
            fn = self._indicators
            nominals = (t_nominal, desc.state_nominals, desc.input_nominals, desc.param_nominals)
        else:
            fn = self._update
            nominals = (t_nominal, desc.state_nominals, desc.param_nominals, desc.input_nominals)
            nominals = (*nominals, desc.param_nominals)
        base = fn(point)
        out = [base[0]]
        quiet = kind == "update" and not (point[-1] > 0.5).any()  # no event: the identity map
        timed = kind == "update" and point[-1][-1] > 0.5  # a time event's time is held constant
        for which, wanted in enumerate(need):
            if not wanted:
                continue
            width = point[which].size
            if timed and which == 0:
                jac = np.zeros((base[0].size, 1))
            elif quiet:
                jac = np.zeros((base[0].size, width))
                if which in (1, 2):
                    jac[np.arange(width) + (0 if which == 1 else self.n_state), np.arange(width)] = 1.0
            else:
                columns = [self._column(fn, point, which, j, nominals[which][j], base) for j in range(width)]
                jac = np.stack(columns, axis=1) if columns else np.zeros((base[0].size, 0))
            out.append(jac[:, 0] if which == 0 else jac)
        return out

    def start(self, p: np.ndarray) -> np.ndarray:
        """The first time event of the instance initialised with parameters ``p`` (leading axes: a batch)."""
        p = np.asarray(p, dtype=np.float64)
        batch = p.shape[:-1]
        flat = p.reshape(math.prod(batch), p.shape[-1])
        runtime = self.runtime
        with runtime.serving():
            first = [self._restart(tuple(row.tolist())) for row in flat]
        return np.asarray(first, dtype=np.float64).reshape(batch)

    def evaluate(self, kind: str, need: tuple[bool, ...], *args: np.ndarray) -> tuple[np.ndarray, ...]:
        """The body of one callback: value and the asked Jacobian blocks for a batch.

        Args:
            kind: ``"indicators"`` (arguments ``t, x, u, p``) or ``"update"`` (``t, x, z, u, p, which``).
            need: for each differentiable argument, whether to return the value's Jacobian in it.
            *args: the arguments, leading axes broadcast together (``t`` has none of its own).

        Returns:
            ``(value (..., k), *blocks)``: ``(..., k)`` for time, ``(..., k, n_arg)`` for the others.

        """
        batch, widths, flat = flat_batch(*args)
        size = len(flat[0])
        n_out = self.n_events if kind == "indicators" else self.n_state + self.n_discrete
        shapes = [(n_out,)] + [(n_out,) if i == 0 else (n_out, widths[i]) for i, w in enumerate(need) if w]
        runtime = self.runtime
        with runtime.serving():
            rows = [self._point(kind, need, [a[b] for a in flat]) for b in range(size)]
        return tuple(
            np.stack([row[i] for row in rows]).reshape(*batch, *shape) if size else np.zeros((*batch, *shape))
            for i, shape in enumerate(shapes)
        )


# -- JAX side ------------------------------------------------------------------------------------------
def _host(events: Events, kind: str, need: tuple[bool, ...], *args: Array) -> tuple[Array, ...]:
    """One ``pure_callback`` for the value and the asked Jacobian blocks, batched as a whole under vmap."""
    n_out = events.n_events if kind == "indicators" else events.n_state + events.n_discrete
    shapes = [(n_out,)] + [
        (n_out,) if i == 0 else (n_out, args[i].shape[-1]) for i, w in enumerate(need) if w
    ]
    return jax.pure_callback(
        functools.partial(events.evaluate, kind, need),
        tuple(jax.ShapeDtypeStruct(shape, jnp.float64) for shape in shapes),
        *args,
        vmap_method="expand_dims",
    )


def _tangent(
    events: Events, kind: str, n_diff: int, primals: tuple[Any, ...], tangents: tuple[Any, ...]
) -> Any:
    """``sum_i J_i d_i`` over the differentiable arguments with a nonzero tangent (linear: transposable)."""
    need = tuple(not isinstance(d, SymbolicZero) for d in tangents[:n_diff])
    value, *blocks = _host(events, kind, need, *primals)
    out = jnp.zeros_like(value)
    for jac, (which, d) in zip(
        blocks, [(i, d) for i, d in enumerate(tangents[:n_diff]) if need[i]], strict=True
    ):
        out = out + (jac * d if which == 0 else jac @ d)
    return value, out


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _indicators(events: Events, t: Array, x: Array, u: Array, p: Array) -> Array:
    return _host(events, "indicators", (False,) * 4, t, x, u, p)[0]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _update(events: Events, t: Array, x: Array, z: Array, u: Array, p: Array, which: Array) -> Array:
    return _host(events, "update", (False,) * 5, t, x, z, u, p, which)[0]


_indicators.defjvp(
    lambda events, primals, tangents: _tangent(events, "indicators", 4, primals, tangents),
    symbolic_zeros=True,
)
_update.defjvp(
    lambda events, primals, tangents: _tangent(events, "update", 5, primals, tangents), symbolic_zeros=True
)


class AbstractFMU(AbstractModel):
    """The hybrid hooks of an FMU with events (module docstring); :class:`~twinfer.models.FMU` is one.

    Without events every hook keeps :class:`~twinfer.models.AbstractModel`'s "none" default.
    With them, ``z`` holds the shift an event made to each of ``params`` (named ``<name>_event_shift``,
    0 at the start): the FMU computes with ``params + z``; with time events its last entry is the FMU's
    next event time (``next_event_time``, ``inf`` for none).
    """

    runtime: eqx.AbstractVar[Runtime]
    events: eqx.AbstractVar[Events]

    def _vector(self, params: Params, z: Array | None = None) -> Array:
        """The values of ``params`` in the FMU's order, shifted by ``z`` where given."""
        names = self.runtime.desc.param_names
        if not names:
            return jnp.zeros((0,))
        p = jnp.stack([jnp.asarray(params[n], dtype=jnp.float64) for n in names])
        return p if z is None or not self.n_discrete else p + z[: len(names)]

    def _shifted(self, params: Params, z: Array) -> Params:
        if not self.n_discrete:
            return params
        names = self.runtime.desc.param_names
        return {**params, **dict(zip(names, list(self._vector(params, z)), strict=True))}

    @property
    def n_events(self) -> int:
        """``numberOfEventIndicators`` of the model description."""
        return self.events.n_events

    @property
    def discrete_state_names(self) -> tuple[str, ...]:
        """``<name>_event_shift`` for each of ``params`` (and ``next_event_time``) when the FMU has events."""
        if not self.events.n_discrete:
            return ()
        shifts = tuple(f"{name}_event_shift" for name in self.runtime.desc.param_names)
        return (*shifts, "next_event_time") if self.has_time_events else shifts

    @property
    def has_time_events(self) -> bool:
        """Whether the FMU defined a next event time (``nextEventTimeDefined``) when initialised."""
        return self.events.has_time_events

    def initial_discrete_state(self, params: Params) -> Array:
        """No shifts, and the FMU's first time event when initialised with ``params`` (held constant)."""
        shifts = jnp.zeros((self.events.n_params if self.n_discrete else 0,))
        if not self.has_time_events:
            return shifts
        first = jax.pure_callback(
            self.events.start,
            jax.ShapeDtypeStruct((), jnp.float64),
            jax.lax.stop_gradient(self._vector(params)),
            vmap_method="expand_dims",
        )
        return jnp.concatenate([shifts, first[None]])

    def next_time_event(self, t: Any, z: Array, u: Input, params: Params) -> Any:
        """The next event time the FMU defined at its last event (carried in ``z``), ``inf`` for none."""
        return z[-1] if self.has_time_events else jnp.inf

    def time_event_update(self, t: Any, x: State, z: Array, u: Input, params: Params) -> tuple[State, Array]:
        """``(x+, z+)`` from the FMU's Event Mode at its time event, once ``t`` reached it (to rounding)."""
        if not self.has_time_events:
            return x, z
        t, x, u = self._point(t, x, u)
        z = jnp.asarray(z, dtype=jnp.float64)
        p = self._vector(params)
        # reached to rounding, as the simulators snap a time event to a save time; the flag travels per
        # point because under vmap the cond runs both branches, and the FMU skips the points not due
        due = jax.lax.stop_gradient(t >= z[-1] - 1e-10 * jnp.maximum(1.0, jnp.abs(t)))
        flags = jnp.concatenate([jnp.zeros((self.n_events,)), due.astype(jnp.float64)[None]])
        out = jax.lax.cond(
            due,
            lambda: _update(self.events, t, x, z, u, p, flags),
            lambda: jnp.concatenate([x, z]),
        )
        return out[: self.n_state], out[self.n_state :]

    def hybrid_vector_field(self, t: Any, x: State, z: Array, u: Input, params: Params) -> State:
        """dx/dt with the parameters an event shifted (``params + z``)."""
        return self.vector_field(t, x, u, self._shifted(params, z))

    def hybrid_output(self, t: Any, x: State, z: Array, u: Input, params: Params) -> Output:
        """The outputs with the parameters an event shifted (``params + z``)."""
        return self.output(t, x, u, self._shifted(params, z))

    def _point(self, t: Any, x: Any, u: Any) -> tuple[Array, Array, Array]:
        u = jnp.zeros((0,)) if self.n_input == 0 else jnp.asarray(u, dtype=jnp.float64)
        return jnp.asarray(t, dtype=jnp.float64), jnp.asarray(x, dtype=jnp.float64), u

    def event_indicators(self, t: Any, x: State, z: Array, u: Input, params: Params) -> Array:
        """``fmi2GetEventIndicators`` at ``(t, x, u)`` and ``params + z``; event i fires on + to -."""
        if not self.n_events:
            return jnp.zeros((0,), dtype=jnp.asarray(x).dtype)
        t, x, u = self._point(t, x, u)
        return _indicators(self.events, t, x, u, self._vector(params, z))

    def event_update(
        self, t: Any, x: State, z: Array, u: Input, params: Params, which: Array
    ) -> tuple[State, Array]:
        """``(x+, z+)`` from the FMU's Event Mode at ``t`` when any of ``which`` fired, else ``(x, z)``."""
        if not self.n_events:
            return x, z
        t, x, u = self._point(t, x, u)
        z = jnp.asarray(z, dtype=jnp.float64)
        p = self._vector(params)
        flags = jax.lax.stop_gradient(jnp.asarray(which, dtype=jnp.float64))
        flags = jnp.concatenate([flags, jnp.zeros((1,))])  # the last slot flags a time event
        out = jax.lax.cond(
            jnp.any(flags > 0.5),
            lambda: _update(self.events, t, x, z, u, p, flags),
            lambda: jnp.concatenate([x, z]),
        )
        return out[: self.n_state], out[self.n_state :]
