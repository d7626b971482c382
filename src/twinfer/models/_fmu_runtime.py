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

import ctypes
import math
import shutil
import tempfile
import threading
import weakref
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from twinfer.models._fmu_archive import Description
from twinfer.models._fmu_errors import FMUCallError

if TYPE_CHECKING:  # fmpy is imported when an FMU is loaded, not with twinfer
    from fmpy.fmi2 import FMU2Model

Kind = Literal["derivatives", "outputs"]
DerivativeSource = Literal["auto", "directional", "finite_differences"]

_CUBE_ROOT_EPS = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)
_MAX_EVENT_ITERATIONS = 100
_POINTER = ctypes.POINTER(ctypes.c_double)
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


def _ptr(array: np.ndarray) -> Any:
    return array.ctypes.data_as(_POINTER)


class _Buffer:
    """A C array of doubles and a NumPy view of it: values copied in and out without a new pointer."""

    def __init__(self, size: int) -> None:
        self.c = (ctypes.c_double * max(size, 1))()
        self.view = np.ctypeslib.as_array(self.c)[:size]


def _release(fmu: FMU2Model, folder: str) -> None:
    """Free the instance, unload its library and remove the unpacked folder (the finalizer)."""
    try:
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
            fmu = FMU2Model(
                guid=desc.guid,
                unzipDirectory=self.directory,
                modelIdentifier=desc.model_identifier,
                instanceName=desc.model_identifier,
            )
        except Exception as error:  # fmpy raises plain Exceptions when a library fails to load
            shutil.rmtree(self.directory, ignore_errors=True)
            raise FMUCallError(f"FMU {desc.path!r}: loading its binary failed: {error}") from error
        self._fmu = fmu
        self._finalizer = weakref.finalize(self, _release, fmu, self.directory)
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
        self._raw = {name: getattr(fmu.dll, name) for name in _FUNCTIONS}  # argtypes set by fmpy
        n_x, n_u, n_y = len(desc.state_refs), len(desc.input_refs), len(desc.output_refs)
        self._x, self._u, self._dx, self._y = _Buffer(n_x), _Buffer(n_u), _Buffer(n_x), _Buffer(n_y)
        self._p, self._tunable = _Buffer(len(desc.param_refs)), _Buffer(len(self._tunable_refs))
        with self._lock:
            try:
                fmu.instantiate()
            except Exception as error:  # fmpy raises a plain Exception when fmi2Instantiate returns NULL
                self._finalizer.detach()  # no instance to free
                shutil.rmtree(self.directory, ignore_errors=True)
                raise FMUCallError(f"FMU {desc.path!r}: fmi2Instantiate failed: {error}") from error
            self._initialise(tuple(desc.param_starts))

    def close(self) -> None:
        """Free the instance and remove the unpacked folder now (otherwise when garbage collected)."""
        self._finalizer()

    @property
    def alive(self) -> bool:
        """Whether the instance is still held (not yet freed)."""
        return self._finalizer.alive

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
        seed, out = np.ones(1), np.empty(len(unknown))
        self._hot(
            "fmi2GetDirectionalDerivative", unknown, len(unknown), _refs((known,)), 1, _ptr(seed), _ptr(out)
        )
        if kind == "derivatives":
            return out
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
        args = [np.asarray(a, dtype=np.float64) for a in (t, x, u, p)]
        batch = np.broadcast_shapes(args[0].shape, *(a.shape[:-1] for a in args[1:]))
        size = math.prod(batch)
        widths = [1, *(a.shape[-1] for a in args[1:])]
        flat = [
            np.ascontiguousarray(np.broadcast_to(a, (*batch, w) if i else batch).reshape(size, w))
            for i, (a, w) in enumerate(zip(args, widths, strict=True))
        ]
        n_out = len(self.desc.state_refs) if kind == "derivatives" else len(self.desc.output_refs)
        shapes = [(n_out,)] + [(n_out,) if i == 0 else (n_out, widths[i]) for i in range(4) if need[i]]
        with self._lock:
            if not self.alive:
                raise FMUCallError(
                    f"FMU {self.desc.path!r}: expected a live instance; received a closed model."
                )
            self.calls += 1
            rows = [self._point(kind, need, [a[b] for a in flat]) for b in range(size)]
        return tuple(
            np.stack([row[i] for row in rows]).reshape(*batch, *shape) if size else np.zeros((*batch, *shape))
            for i, shape in enumerate(shapes)
        )
