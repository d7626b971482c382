"""One FMI 2.0 Model Exchange instance, evaluated point by point for a batch (issue #56).

:class:`Runtime` unpacks a validated FMU under a temporary folder, loads its binary with fmpy and owns the
instance; :func:`weakref.finalize` frees the instance and removes the folder when the runtime is garbage
collected (or :meth:`Runtime.close` is called). :meth:`Runtime.evaluate` is the body of the model's one
``jax.pure_callback`` per batch: for each point it sets the parameters, the time, the continuous states and
the inputs, reads the derivatives or the outputs, and, when asked, their Jacobians: the FMU's directional
derivatives (``fmi2GetDirectionalDerivative``) with respect to states and inputs where the FMU provides
them, central finite differences otherwise and always with respect to time and parameters.

Parameters follow the FMI 2.0 rules for their variability (standard 2.0.4, section 3.2.3, the Model
Exchange state machine): a tunable parameter is set in Event Mode (enter it, set, settle the discrete
states, back to Continuous-Time Mode); a fixed one only before initialisation, so a new value resets the
instance (``fmi2Reset``) and initialises it again. The instance keeps the values it was last given, so a
batch whose points share their parameters pays for this once.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from twinfer.models._fmu_archive import Description
from twinfer.models._fmu_errors import FMUCallError

if TYPE_CHECKING:  # fmpy is imported when an FMU is loaded, not with twinfer
    from fmpy.fmi2 import FMU2Model

Kind = Literal["derivatives", "outputs"]
DerivativeSource = Literal["auto", "directional", "finite_differences"]

MAX_INSTANCES = 32
"""Instances of one FMU a :meth:`Runtime.step` may hold: one per distinct parameter vector of a batch (a
UKF's sigma points each carry their own value of an unknown), so a fixed parameter is set (the instance
re-initialised) once per point and step rather than once per point and stage. One for an FMU that
declares ``canBeInstantiatedOnlyOncePerProcess``."""
_CUBE_ROOT_EPS = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
_MAX_EVENT_ITERATIONS = 100
_FMI2_WARNING = 1
_FUNCTIONS = (
    "fmi2SetTime",
    "fmi2SetContinuousStates",
    "fmi2SetReal",
    "fmi2GetDerivatives",
    "fmi2GetReal",
    "fmi2GetDirectionalDerivative",
    "fmi2Reset",
    "fmi2SetupExperiment",
    "fmi2EnterInitializationMode",
    "fmi2ExitInitializationMode",
    "fmi2NewDiscreteStates",
    "fmi2EnterEventMode",
    "fmi2EnterContinuousTimeMode",
)


def _refs(refs: tuple[int, ...]) -> Any:
    return (ctypes.c_uint * len(refs))(*refs)


class _Buffer:
    """A C array of doubles and a NumPy view of it: values copied in and out without a new pointer."""

    def __init__(self, size: int) -> None:
        self.c = (ctypes.c_double * max(size, 1))()
        self.view = np.ctypeslib.as_array(self.c)[:size]


def flat_batch(*arrays: Any) -> tuple[tuple[int, ...], list[int], list[np.ndarray]]:
    """``(t, x, u, p)`` with broadcast leading axes as rows: ``(batch, widths, [(size, width) each])``.

    ``t`` has no trailing axis (its width is 1); the others' last axis is their width.
    """
    args = [np.asarray(a, dtype=np.float64) for a in arrays]
    batch = np.broadcast_shapes(args[0].shape, *(a.shape[:-1] for a in args[1:]))
    size = math.prod(batch)
    widths = [1, *(a.shape[-1] for a in args[1:])]
    flat = [
        np.broadcast_to(a, (*batch, w) if i else batch).reshape(size, w)
        for i, (a, w) in enumerate(zip(args, widths, strict=True))
    ]
    return batch, widths, flat


def _release(fmu: FMU2Model, folder: str, components: list[Any]) -> None:
    """Free the instances, unload their library and remove the unpacked folder (the finalizer)."""
    try:
        for component in components[1:]:
            fmu.fmi2FreeInstance(component)
        if components:
            fmu.component = components[0]
        fmu.freeInstance()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Runtime:
    """The FMU instance behind a :class:`~twinfer.models.FMU` model (module docstring).

    Args:
        desc: the validated :class:`~twinfer.models._fmu_archive.Description`.
        source: where Jacobians with respect to states and inputs come from: ``"auto"`` (directional
            derivatives where the FMU provides them), ``"directional"`` or ``"finite_differences"``.

    """

    def __init__(self, desc: Description, source: DerivativeSource) -> None:
        self.desc = desc
        self.directional = source == "directional" or (source == "auto" and desc.directional)
        self.calls = 0
        import fmpy
        from fmpy.fmi2 import FMU2Model

        self.directory = tempfile.mkdtemp(prefix="twinfer-fmu-")
        try:
            fmpy.extract(desc.path, self.directory)
            if desc.fmi_version != "2.0":  # FMI 3.0 behind the 2.0 calls (twinfer.models._fmi3)
                from twinfer.models._fmi3 import FMU3Instance

                model_class: Any = FMU3Instance
            else:
                model_class = FMU2Model
            fmu = model_class(
                guid=desc.guid,
                unzipDirectory=self.directory,
                modelIdentifier=desc.model_identifier,
                instanceName=desc.model_identifier,
            )
        except Exception as error:  # fmpy raises plain Exceptions when a library fails to load
            shutil.rmtree(self.directory, ignore_errors=True)
            raise FMUCallError(f"FMU {desc.path!r}: loading its binary failed: {error}") from error
        self._fmu = fmu
        self._components: list[Any] = []  # the instances; the first is the model's own (module docstring)
        self._held: list[tuple[float, ...] | None] = []  # the parameter values each instance holds
        self._active = 0
        self._max_instances = 1 if desc.single_instance else MAX_INSTANCES
        self._finalizer = weakref.finalize(self, _release, fmu, self.directory, self._components)
        self._lock = threading.Lock()
        self._current: tuple[float, ...] | None = None  # the parameter values the instance holds
        self._der_refs = _refs(desc.derivative_refs)
        self._input_refs, self._param_refs = _refs(desc.input_refs), _refs(desc.param_refs)
        self._tunable_refs = _refs(
            tuple(r for r, f in zip(desc.param_refs, desc.param_fixed, strict=True) if not f)
        )
        state_index = {ref: i for i, ref in enumerate(desc.state_refs)}
        self._output_state = [state_index.get(ref, -1) for ref in desc.output_refs]
        self._other_outputs = [i for i, s in enumerate(self._output_state) if s < 0]
        self._other_refs = _refs(tuple(desc.output_refs[i] for i in self._other_outputs))
        self._output_refs = _refs(desc.output_refs)
        if desc.fmi_version != "2.0":
            from twinfer.models import _fmi3

            self._raw: dict[str, Any] = _fmi3.functions(fmu)
            self._by_address = _fmi3.by_address(fmu)
        else:
            self._raw = {name: getattr(fmu.dll, name) for name in _FUNCTIONS}  # argtypes set by fmpy
            by_address = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
            self._by_address = tuple(  # the same two functions taking a row's address as an int (no copy)
                by_address((name, fmu.dll)) for name in ("fmi2SetContinuousStates", "fmi2GetDerivatives")
            )
        n_x, n_u, n_y = len(desc.state_refs), len(desc.input_refs), len(desc.output_refs)
        self._x, self._u, self._dx, self._y = _Buffer(n_x), _Buffer(n_u), _Buffer(n_x), _Buffer(n_y)
        self._p, self._tunable = _Buffer(len(desc.param_refs)), _Buffer(len(self._tunable_refs))
        self._seed, self._seeded = (ctypes.c_double * 1)(1.0), _Buffer(max(n_x, n_y))
        with self._lock:
            try:
                fmu.instantiate()
            except Exception as error:  # fmpy raises a plain Exception when fmi2Instantiate returns NULL
                self._finalizer.detach()  # no instance to free
                shutil.rmtree(self.directory, ignore_errors=True)
                raise FMUCallError(f"FMU {desc.path!r}: fmi2Instantiate failed: {error}") from error
            self._components.append(fmu.component)
            self._held.append(None)
            self._initialise(tuple(desc.param_starts))

    @property
    def output_states(self) -> tuple[int, ...] | None:
        """For each output, the state it is an alias of, when every output is one; otherwise ``None``."""
        if self._other_outputs:
            return None
        return tuple(self._output_state)

    def close(self) -> None:
        """Free the instance and remove the unpacked folder now (otherwise when garbage collected)."""
        self._finalizer()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """The frame of every callback's body: the lock held, a live instance, one more call counted."""
        with self._lock:
            if not self.alive:
                raise FMUCallError(
                    f"FMU {self.desc.path!r}: expected a live instance; received a closed model."
                )
            self.calls += 1
            yield

    @property
    def alive(self) -> bool:
        """Whether the instance is still held (not yet freed)."""
        return self._finalizer.alive

    def function(self, name: str) -> Any:
        """The instance's FMI function ``name``, an FMI 2.0 name (FMI 3.0: its counterpart in ``_fmi3``)."""
        if name not in self._raw:
            self._raw[name] = getattr(self._fmu.dll, name)
        return self._raw[name]

    # -- the FMI state machine -------------------------------------------------------------------
    def _hot(self, name: str, *args: Any) -> None:
        """One FMI function of the instance, straight to the library; a status above warning is an error."""
        status = self._raw[name](self._fmu.component, *args)
        if status > _FMI2_WARNING:
            raise FMUCallError(
                f"FMU {self.desc.path!r}: {name} failed with status {status} (3 error, 4 fatal)."
            )

    def _settle(self) -> None:
        """Event iteration (FMI 2.0 section 3.2.2) until no new discrete states, then Continuous-Time Mode."""
        from fmpy.fmi2 import fmi2EventInfo

        info = fmi2EventInfo()
        for _ in range(_MAX_EVENT_ITERATIONS):
            self._hot("fmi2NewDiscreteStates", ctypes.byref(info))
            if info.terminateSimulation:
                raise FMUCallError(
                    f"FMU {self.desc.path!r}: the model asked to terminate during an event iteration."
                )
            if not info.newDiscreteStatesNeeded:
                self._hot("fmi2EnterContinuousTimeMode")
                return
        raise FMUCallError(
            f"FMU {self.desc.path!r}: expected the event iteration to settle; still iterating after "
            f"{_MAX_EVENT_ITERATIONS} rounds."
        )

    def _set(self, refs: Any, buffer: _Buffer, values: Any) -> None:
        if len(refs):
            buffer.view[:] = values
            self._hot("fmi2SetReal", refs, len(refs), buffer.c)

    def _initialise(self, p: tuple[float, ...]) -> None:
        if self._current is not None:
            self._hot("fmi2Reset")
        self._hot("fmi2SetupExperiment", 0, 0.0, 0.0, 0, 0.0)  # no tolerance, start 0, no stop time
        self._set(self._param_refs, self._p, p)
        self._hot("fmi2EnterInitializationMode")
        self._hot("fmi2ExitInitializationMode")
        self._settle()
        self._current = p

    def _parameters(self, p: tuple[float, ...]) -> None:
        current = self._current
        if current == p:
            return
        fixed = self.desc.param_fixed
        if current is None or any(a != b and f for a, b, f in zip(current, p, fixed, strict=True)):
            self._initialise(p)
            return
        self._hot("fmi2EnterEventMode")
        self._set(self._tunable_refs, self._tunable, [v for v, f in zip(p, fixed, strict=True) if not f])
        self._settle()
        self._current = p

    # -- one point -------------------------------------------------------------------------------
    def _value(self, kind: Kind, t: float, x: np.ndarray, u: np.ndarray, p: np.ndarray) -> np.ndarray:
        self._parameters(tuple(p.tolist()))
        self._hot("fmi2SetTime", t)
        if x.size:
            self._x.view[:] = x
            self._hot("fmi2SetContinuousStates", self._x.c, x.size)
        if u.size:
            self._u.view[:] = u
            self._hot("fmi2SetReal", self._input_refs, u.size, self._u.c)
        if kind == "derivatives":
            if x.size:
                self._hot("fmi2GetDerivatives", self._dx.c, x.size)
            return self._dx.view.copy()
        if len(self._output_refs):
            self._hot("fmi2GetReal", self._output_refs, len(self._output_refs), self._y.c)
        return self._y.view.copy()

    def _directional(self, kind: Kind, known: int, n_out: int) -> np.ndarray:
        """``d(unknowns) / d(known)`` at the point last set (``fmi2GetDirectionalDerivative``)."""
        unknown = self._der_refs if kind == "derivatives" else self._other_refs
        column = np.zeros(n_out)
        if not len(unknown):
            return column
        out = self._seeded.view[: len(unknown)]  # a C buffer: ndarray.ctypes costs tens of us a call
        self._hot(
            "fmi2GetDirectionalDerivative",
            unknown,
            len(unknown),
            _refs((known,)),
            1,
            self._seed,
            self._seeded.c,
        )
        if kind == "derivatives":
            return out.copy()
        column[self._other_outputs] = out
        return column

    def _jacobian(
        self, kind: Kind, which: int, point: list[np.ndarray], n_out: int, nominals: tuple[float, ...]
    ) -> np.ndarray:
        """Central differences of the value in argument ``which`` of ``(t, x, u, p)``.

        Step ``h_j = eps^(1/3) max(|v_j|, nominal_j)``, the step that balances the central formula's
        truncation error O(h^2) against rounding O(eps / h) (Nocedal & Wright, Numerical Optimization, 2nd
        ed., 2006, section 8.1, the central-difference formula and its step).
        """
        values = point[which]
        jac = np.empty((n_out, values.size))
        for j in range(values.size):
            h = _CUBE_ROOT_EPS * max(abs(float(values[j])), nominals[j])
            plus, minus = [a.copy() for a in point], [a.copy() for a in point]
            plus[which][j] += h
            minus[which][j] -= h
            f_plus = self._value(kind, float(plus[0][0]), *plus[1:])
            f_minus = self._value(kind, float(minus[0][0]), *minus[1:])
            jac[:, j] = (f_plus - f_minus) / (2.0 * h)
        return jac

    def _point(self, kind: Kind, need: tuple[bool, ...], point: list[np.ndarray]) -> list[np.ndarray]:
        """Value and the asked Jacobian blocks (t, x, u, p) at one point."""
        desc = self.desc
        t, x, u, p = point
        value = self._value(kind, float(t[0]), x, u, p)
        out = [value]
        n_out = value.size
        t_nominal = (max(1.0, abs(float(t[0]))),)
        nominals = (t_nominal, desc.state_nominals, desc.input_nominals, desc.param_nominals)
        directional_blocks: dict[int, np.ndarray] = {}
        if self.directional:
            for which, refs in ((1, desc.state_refs), (2, desc.input_refs)):
                if need[which]:
                    columns = [self._directional(kind, ref, n_out) for ref in refs]
                    directional_blocks[which] = np.stack(columns, axis=1) if columns else np.zeros((n_out, 0))
            if kind == "outputs" and need[1]:
                for i, s in enumerate(self._output_state):
                    if s >= 0:  # an output that is a state: its row is the unit vector e_s
                        directional_blocks[1][i] = np.eye(x.size)[s]
        for which in range(4):
            if not need[which]:
                continue
            if which in directional_blocks:
                out.append(directional_blocks[which])
            else:
                jac = self._jacobian(kind, which, point, n_out, nominals[which])
                out.append(jac[:, 0] if which == 0 else jac)
        return out

    # -- a batch ---------------------------------------------------------------------------------
    def evaluate(
        self, kind: Kind, need: tuple[bool, ...], t: np.ndarray, x: np.ndarray, u: np.ndarray, p: np.ndarray
    ) -> tuple[np.ndarray, ...]:
        """Value (and Jacobian blocks) for a batch: leading axes of the arguments broadcast together.

        Args:
            kind: ``"derivatives"`` (dx/dt) or ``"outputs"`` (y).
            need: for ``(t, x, u, p)``, whether to return the value's Jacobian with respect to it.
            t: times ``(...)``.
            x: states ``(..., n_state)``.
            u: inputs ``(..., n_input)``.
            p: parameter values ``(..., n_param)`` in the order of the model's ``params``.

        Returns:
            ``(value (..., k), *blocks)``, a block ``(..., k)`` for time and ``(..., k, n_arg)`` for the
            others, in the order ``t, x, u, p`` of those asked.

        """
        batch, widths, flat = flat_batch(t, x, u, p)
        size = len(flat[1])
        n_out = len(self.desc.state_refs) if kind == "derivatives" else len(self.desc.output_refs)
        shapes = [(n_out,)] + [(n_out,) if i == 0 else (n_out, widths[i]) for i in range(4) if need[i]]
        with self.serving():
            rows = [self._point(kind, need, [a[b] for a in flat]) for b in range(size)]
        return tuple(
            np.stack([row[i] for row in rows]).reshape(*batch, *shape) if size else np.zeros((*batch, *shape))
            for i, shape in enumerate(shapes)
        )

    # -- a whole integrator step for a batch ---------------------------------------------------------
    def step(
        self,
        step: Any,
        h: float,
        substeps: int,
        need: tuple[bool, ...],
        t: np.ndarray,
        x: np.ndarray,
        u: np.ndarray,
        p: np.ndarray,
    ) -> tuple[np.ndarray, ...]:
        """``substeps`` steps of ``step`` from ``(t, x)`` for a batch, and the asked Jacobians: one callback.

        Each stage of the integrator evaluates every point's derivatives here, on the host, so a filter's
        step is one round trip out of the compiled program instead of one per stage. The points are
        visited grouped by their parameter values, in alternating order from stage to stage, so a batch
        of sigma points whose parameters take three values re-initialises the instance about twice per
        stage, not once per point.

        A Jacobian of the step is the step's forward sensitivity: the same integrator applied to the pair
        ``(x, S)`` with ``dS/dt = J_x S + [d f / d(t, u, p)]`` (every step of :mod:`twinfer.sim._steps` is
        written leaf by leaf, so it steps the pair as it steps ``x``), which is the exact derivative of the
        discrete map given the stages' Jacobians (E. Hairer, S. P. Norsett, G. Wanner, Solving Ordinary
        Differential Equations I, 2nd ed., 1993, Sec. I.14, "internal differentiation").

        Args:
            step: one step ``(rhs, t, x, h) -> x_next`` of :mod:`twinfer.sim` (Euler, Heun or RK4).
            h: the length of one substep.
            substeps: how many substeps of ``h`` make the step.
            need: for ``(t, x, u, p)``, whether to return the step's Jacobian with respect to it.
            t: times ``(...)``.
            x: states ``(..., n_state)``.
            u: inputs ``(..., n_input)``, held over the step.
            p: parameter values ``(..., n_param)``.

        Returns:
            ``(x_next (..., n_state), *blocks)``: ``(..., n_state)`` for time and ``(..., n_state, n_arg)``
            for the others, in the order ``t, x, u, p`` of those asked.

        """
        batch, widths, (times, states, inputs, params) = flat_batch(t, x, u, p)
        size, n = states.shape
        asked = [i for i in range(4) if need[i]]
        columns, start = {}, 0
        for which in asked:
            columns[which] = slice(start, start + widths[which])
            start += widths[which]
        p_rows = [tuple(row) for row in params.tolist()]
        groups: dict[tuple[float, ...], int] = {}
        slots = [groups.setdefault(row, len(groups)) % self._max_instances for row in p_rows]
        order = sorted(range(size), key=slots.__getitem__)
        visits = [order, order[::-1]]  # alternate: an instance shared by groups switches less often
        stage = [0]
        values = self._derivatives_of(inputs, p_rows, slots)
        stage_need = (need[0], True, need[2], False)
        n_p = params.shape[1]
        shifted_rows: list[tuple[float, ...]] = []  # parameter derivatives: central differences, each
        if need[3]:  # shifted vector on its own instance, so no instance is re-initialised per stage
            steps = _CUBE_ROOT_EPS * np.maximum(np.abs(params), self.desc.param_nominals)  # (size, n_p)
            shifts = np.concatenate([np.eye(n_p), -np.eye(n_p)])  # (2 n_p, n_p): + then -
            shifted = params[:, None, :] + shifts[None] * steps[:, None, :]
            shifted_rows = [tuple(row) for row in shifted.reshape(size * 2 * n_p, n_p).tolist()]
        shifted_slots = [groups.setdefault(row, len(groups)) % self._max_instances for row in shifted_rows]
        shifted_values = self._derivatives_of(np.repeat(inputs, 2 * n_p, axis=0), shifted_rows, shifted_slots)
        shifted_order = sorted(range(len(shifted_rows)), key=shifted_slots.__getitem__)

        def rhs(tt: np.ndarray, xs: np.ndarray) -> np.ndarray:
            f = np.empty((size, n))
            values(visits[stage[0] % 2], tt, xs, f)
            stage[0] += 1
            return f

        def rhs_sensitivity(tt: np.ndarray, pair: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
            xs, s = pair
            f, ds = np.empty((size, n)), np.empty_like(s)
            jac: dict[int, Any] = {}
            if shifted_rows:
                shifted_f = np.empty((len(shifted_rows), n))
                shifted_values(
                    shifted_order, np.repeat(tt, 2 * n_p), np.repeat(xs, 2 * n_p, axis=0), shifted_f
                )
                pairs = shifted_f.reshape(size, 2, n_p, n)
                jac_p = np.swapaxes(pairs[:, 0] - pairs[:, 1], 1, 2) / (2.0 * steps[:, None, :])
            for b in visits[stage[0] % 2]:
                self._use(slots[b])
                value, *blocks = self._point(
                    "derivatives", stage_need, [tt[b : b + 1], xs[b], inputs[b], params[b]]
                )
                jac.update(zip([i for i in range(4) if stage_need[i]], blocks, strict=True))
                if shifted_rows:
                    jac[3] = jac_p[b]
                f[b], ds[b] = value, jac[1] @ s[b]
                for which in asked:
                    if which != 1:
                        ds[b][:, columns[which]] += jac[which][:, None] if which == 0 else jac[which]
            stage[0] += 1
            return f, ds

        with self.serving():
            sensitivity = np.zeros((size, n, start))
            if 1 in columns:
                sensitivity[:, :, columns[1]] = np.eye(n)
            state: Any = (states, sensitivity) if asked else states
            try:
                for j in range(substeps):
                    state = step(rhs_sensitivity if asked else rhs, times[:, 0] + j * h, state, h)
            finally:
                self._use(0)  # outside a step the model's own instance is the current one
        final, sensitivity = state if asked else (state, sensitivity)
        blocks = [sensitivity[:, :, columns[which]] for which in asked]
        blocks = [block[:, :, 0] if which == 0 else block for which, block in zip(asked, blocks, strict=True)]
        return tuple(a.reshape(*batch, *a.shape[1:]) for a in [final, *blocks])

    def _use(self, slot: int) -> None:
        """Make instance ``slot`` the current one (instantiating it, the first time, as the first was)."""
        if slot == self._active:
            return
        self._held[self._active] = self._current
        while slot >= len(self._components):  # slots of a step's shifted parameters may come first
            try:
                self._fmu.instantiate()
            except Exception as error:  # fmpy raises a plain Exception when fmi2Instantiate returns NULL
                self._fmu.component = self._components[self._active]
                raise FMUCallError(f"FMU {self.desc.path!r}: fmi2Instantiate failed: {error}") from error
            self._components.append(self._fmu.component)
            self._held.append(None)
        self._fmu.component = self._components[slot]
        self._current = self._held[slot]
        self._active = slot

    def _derivatives_of(self, inputs: np.ndarray, p_rows: list[tuple[float, ...]], slots: list[int]) -> Any:
        """``values(points, t, x, out)``: ``out[b] = dx/dt`` at each point ``b`` of a batch, straight to C.

        The lean body of :meth:`step`'s stages: point ``b`` is evaluated by instance ``slots[b]``, whose
        parameters are set only when they differ from those it holds (a new instance is initialised
        with them) and whose time only when it differs from the time last set on it; each FMI
        function's status is checked as :meth:`_hot` does.
        """
        set_time, set_real = self._raw["fmi2SetTime"], self._raw["fmi2SetReal"]
        set_states, get_derivatives = self._by_address
        n_u = inputs.shape[1]
        u_buffer = self._u
        n = len(self.desc.state_refs)
        row = 8 * n  # bytes of one row of states

        def values(points: list[int], t: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
            x = np.ascontiguousarray(x)
            x_at, out_at = x.ctypes.data, out.ctypes.data
            clocks: dict[int, float] = {}
            for b in points:
                slot = slots[b]
                if slot != self._active:
                    self._use(slot)
                if p_rows[b] != self._current:
                    self._parameters(p_rows[b])
                    clocks.pop(slot, None)
                component = self._fmu.component
                if t[b] != clocks.get(slot):
                    clocks[slot] = float(t[b])
                    if set_time(component, clocks[slot]) > _FMI2_WARNING:
                        self._hot("fmi2SetTime", clocks[slot])  # raises, naming the function and status
                status = set_states(component, x_at + b * row, n)
                if n_u:
                    u_buffer.view[:] = inputs[b]
                    status = max(status, set_real(component, self._input_refs, n_u, u_buffer.c))
                status = max(status, get_derivatives(component, out_at + b * row, n))
                if status > _FMI2_WARNING:
                    raise FMUCallError(
                        f"FMU {self.desc.path!r}: setting the states and inputs or reading the derivatives "
                        f"failed with status {status} (3 error, 4 fatal)."
                    )

        return values
