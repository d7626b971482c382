"""A co-simulation FMU as a model stepped by ``fmi2DoStep`` with its own solver (issue #56, item 3).

A Co-Simulation FMU carries its solver inside: the importer sets the inputs, which the FMU holds over a
communication step, calls ``fmi2DoStep(t, h)`` and reads the outputs at ``t + h`` (FMI 2.0.4, section
4). Its state is opaque (``fmi2FMUstate``), so :class:`CoSimulationFMU`'s state vector is its real outputs
at the last communication point, held between communication points (what co-simulation exchanges), and
one more entry, ``fmu_state``: a handle to the FMU state saved after that step. An estimator may take a
step more than once from the same state (the EKF's value and Jacobian, a graph node's mean and message
gain), so a step never advances a shared instance: it restores the saved state (``fmi2SetFMUstate``),
steps and saves the new one. Its handle is a digest of where the step started and what it was given
(:func:`_derived`): a step taken again is looked up, not stepped, and the same run gives the same numbers.
Handle ``0`` is the FMU initialised with the parameter values given (and its time 0); the FMU keeps its
own time, which the handle carries.

Derivatives: the outputs' Jacobian with respect to the inputs held over the step is central finite
differences (each a step again from the restored state, steps from the inputs' nominal values). The
outputs at the next communication point depend on the previous ones only through the opaque state, which
no importer may set (FMI 2.0.4, section 4.2.4: a local continuous variable is not settable after
initialisation), so their Jacobian with respect to the state vector is zero: a covariance propagated
through the FMU keeps what the inputs bring over one step, not its own history. That is the compositional
paper's deterministic node (exchange of means). The parameters are set at initialisation (handle 0) and
have no derivative: an estimator that asks for one gets a named error.

References:
    Modelica Association, Functional Mock-up Interface 2.0.4 (2022), section 4 (Co-Simulation:
    ``fmi2DoStep``, inputs held over the communication step) and section 2.1.8 (getting and setting the
    FMU state). Ghorbani & Hackl, "Subsystem structure as an inferential resource", section 1 (a
    deterministic component exchanging means).

"""

from __future__ import annotations

import collections
import functools
import hashlib
import math
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from twinfer.models._base import AbstractModel, Input, Output, Params, State
from twinfer.models._fmu_archive import Description, describe
from twinfer.models._fmu_errors import FMUCallError, FMUError, FMUKindError, FMUVariableError
from twinfer.models._fmu_runtime import flat_batch
from twinfer.models._host_call import host_call

HANDLE = "fmu_state"
"""The name of the last state of a :class:`CoSimulationFMU`: a handle to the saved FMU state."""
MAX_SAVED = 65_536
"""FMU states a :class:`CoSimulationFMU` keeps (the most recent; the initial ones always): a handle older
than that is refused by name. A filter or a graph steps forward, so only the last few are read again."""
_CUBE_ROOT_EPS = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)


def _derived(handle: float, u: np.ndarray, p: np.ndarray, h: float) -> int:
    """The handle of the state a step reaches: a 52-bit digest of where it starts and what it is given.

    A step of a deterministic FMU from one state with one input, parameters and length reaches one state,
    so its handle is a function of those (the same run twice gives the same numbers, and a step taken
    again, as an estimator's mean and Jacobian take it, is looked up, not stepped). Never 0 (the initial
    state's).
    """
    data = np.concatenate([[handle, h], np.asarray(u, np.float64), np.asarray(p, np.float64)]).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 12 or 1


def _release(fmu: Any, folder: str, *held: dict[Any, tuple[Any, ...]]) -> None:
    """Free the saved states and the instance, unload the library, remove the folder (the finalizer).

    ``held``: the dictionaries whose values start with a saved FMU state (the initial and the stepped).
    """
    try:
        for states in held:
            for state, *_ in states.values():
                fmu.freeFMUstate(state)
        fmu.freeInstance()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class CoSimRuntime:
    """The instance of a :class:`CoSimulationFMU` and its saved FMU states, by handle (module docstring).

    Args:
        desc: the validated Co-Simulation :class:`~twinfer.models._fmu_archive.Description`.

    """

    def __init__(self, desc: Description, start: Mapping[int, float] | None = None) -> None:
        import fmpy
        from fmpy.fmi2 import FMU2Slave

        self.desc = desc
        self.start = dict(start or {})
        self.calls = 0
        self.directory = tempfile.mkdtemp(prefix="twinfer-fmu-")
        try:
            fmpy.extract(desc.path, self.directory)
            fmu = FMU2Slave(
                guid=desc.guid,
                unzipDirectory=self.directory,
                modelIdentifier=desc.model_identifier,
                instanceName=desc.model_identifier,
            )
            fmu.instantiate()
        except Exception as error:  # fmpy raises plain Exceptions when a library fails to load
            shutil.rmtree(self.directory, ignore_errors=True)
            raise FMUCallError(
                f"FMU {desc.path!r}: loading its Co-Simulation binary failed: {error}"
            ) from error
        self._fmu = fmu
        self._initialised = False
        self._saved: collections.OrderedDict[int, tuple[Any, float, np.ndarray]] = collections.OrderedDict()
        self._initial: dict[tuple[float, ...], tuple[Any, float]] = {}
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _release, fmu, self.directory, self._initial, self._saved)

    def close(self) -> None:
        """Free the states and the instance and remove the unpacked folder now."""
        self._finalizer()

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as error:  # fmpy raises an Exception for a status above warning
            raise FMUCallError(f"FMU {self.desc.path!r}: {what} failed: {error}") from error

    def _initial_state(self, p: tuple[float, ...]) -> tuple[Any, float]:
        """The FMU initialised with the parameter values ``p`` at time 0, saved once per ``p``."""
        if p not in self._initial:
            fmu = self._fmu
            if self._initialised:
                self._call("fmi2Reset", fmu.reset)
            self._call("fmi2SetupExperiment", fmu.setupExperiment, None, 0.0)
            if self.start:
                self._call(
                    "fmi2SetReal (start values)", fmu.setReal, list(self.start), list(self.start.values())
                )
            if p:
                self._call("fmi2SetReal (parameters)", fmu.setReal, list(self.desc.param_refs), list(p))
            self._call("fmi2EnterInitializationMode", fmu.enterInitializationMode)
            self._call("fmi2ExitInitializationMode", fmu.exitInitializationMode)
            self._initialised = True
            state = self._call("fmi2GetFMUstate", fmu.getFMUstate)
            self._initial[p] = (state, 0.0)
        return self._initial[p]

    def _state(self, handle: float, p: tuple[float, ...]) -> tuple[Any, float]:
        if handle == 0:
            return self._initial_state(p)
        key = int(handle)
        if key != handle or key not in self._saved:
            raise FMUCallError(
                f"FMU {self.desc.path!r} {HANDLE}: expected the handle of a saved FMU state (0, the "
                f"initialised FMU, or one of the last {MAX_SAVED} steps); received {handle!r}. A "
                "co-simulation FMU is a deterministic node: step it with estimator 'none', whose mean "
                "carries the handle unchanged."
            )
        state, time, _ = self._saved[key]
        return state, time

    def _outputs(self) -> np.ndarray:
        refs = list(self.desc.output_refs)
        return np.asarray(
            self._call("fmi2GetReal", self._fmu.getReal, refs) if refs else [], dtype=np.float64
        )

    def _step_from(self, state: Any, time: float, u: np.ndarray, h: float) -> np.ndarray:
        """Restore ``state``, hold ``u`` and take one communication step of ``h``: the outputs after it."""
        fmu = self._fmu
        self._call("fmi2SetFMUstate", fmu.setFMUstate, state)
        if len(u):
            self._call("fmi2SetReal (inputs)", fmu.setReal, list(self.desc.input_refs), u.tolist())
        self._call("fmi2DoStep", fmu.doStep, time, h, 0)
        return self._outputs()

    def _save(self, key: int, time: float, outputs: np.ndarray) -> None:
        state = self._call("fmi2GetFMUstate", self._fmu.getFMUstate)
        self._saved[key] = (state, time, outputs)
        while len(self._saved) > MAX_SAVED:
            _, (old, _, _) = self._saved.popitem(last=False)
            self._fmu.freeFMUstate(old)

    def _check_alive(self) -> None:
        if not self._finalizer.alive:
            raise FMUCallError(f"FMU {self.desc.path!r}: expected a live instance; received a closed model.")

    def initial_outputs(self, p: Sequence[float]) -> np.ndarray:
        """The outputs of the FMU initialised with the parameter values ``p`` (at handle 0)."""
        with self._lock:
            self._check_alive()
            state, _ = self._initial_state(tuple(float(v) for v in p))
            self._call("fmi2SetFMUstate", self._fmu.setFMUstate, state)
            return self._outputs()

    def step(self, h: float, jacobian: bool, handle: Any, u: Any, p: Any) -> np.ndarray:
        """A batch of communication steps: rows ``[outputs, new handle]``, then ``d outputs / d u``.

        Args:
            h: the communication step.
            jacobian: whether to append the central-difference Jacobian of the outputs in the inputs.
            handle: the saved states, shape ``batch``.
            u: the inputs held over the step, ``(*batch, n_u)``.
            p: the parameter values, ``(*batch, n_p)`` (used for handle 0).

        Returns:
            ``(*batch, n_y + 1, 1 + n_u)`` if ``jacobian`` else ``(*batch, n_y + 1, 1)``.

        """
        batch, _, (hs, us, ps) = flat_batch(handle, u, p)
        n_y, n_u = len(self.desc.output_refs), us.shape[1]
        out = np.zeros((hs.shape[0], n_y + 1, 1 + (n_u if jacobian else 0)))
        nominals = np.asarray(self.desc.input_nominals, dtype=np.float64)
        with self._lock:
            if not self._finalizer.alive:
                raise FMUCallError(
                    f"FMU {self.desc.path!r}: expected a live instance; received a closed model."
                )
            self.calls += 1
            for row in range(hs.shape[0]):
                state, time = self._state(float(hs[row, 0]), tuple(ps[row].tolist()))
                if jacobian:
                    for j in range(n_u):
                        delta = _CUBE_ROOT_EPS * max(abs(us[row, j]), nominals[j])
                        up, down = us[row].copy(), us[row].copy()
                        up[j] += delta
                        down[j] -= delta
                        diff = self._step_from(state, time, up, h) - self._step_from(state, time, down, h)
                        out[row, :n_y, 1 + j] = diff / (2.0 * delta)
                key = _derived(hs[row, 0], us[row], ps[row], h)
                if key in self._saved:  # this step was taken before: the same state, the same outputs
                    self._saved.move_to_end(key)
                    out[row, :n_y, 0] = self._saved[key][2]
                else:
                    y = out[row, :n_y, 0] = self._step_from(state, time, us[row], h)
                    self._save(key, time + h, y.copy())
                out[row, n_y, 0] = key
        return out.reshape(*batch, n_y + 1, out.shape[-1])


def _step_call(runtime: CoSimRuntime, h: float, jacobian: bool, handle: Any, u: Any, p: Any) -> Any:
    """One host call for a batch: ``(*batch, n_y + 1, 1 [+ n_u])`` (:meth:`CoSimRuntime.step`)."""
    n_u, n_y = u.shape[-1], len(runtime.desc.output_refs)
    packed = jnp.concatenate([handle[..., None], u, p], axis=-1)

    def host(packed_: np.ndarray) -> np.ndarray:
        return runtime.step(h, jacobian, packed_[..., 0], packed_[..., 1 : 1 + n_u], packed_[..., 1 + n_u :])

    return host_call(host, packed, (n_y + 1, 1 + (n_u if jacobian else 0)))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _do_step(runtime: CoSimRuntime, h: float, handle: Any, u: Any, p: Any) -> Any:
    return _step_call(runtime, h, False, handle, u, p)[..., 0]


def _do_step_jvp(runtime: CoSimRuntime, h: float, primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
    """The step and its tangent: ``d y / d u`` by central differences, zero in the state (module doc)."""
    _, du, dp = tangents
    if not isinstance(dp, SymbolicZero):
        raise FMUKindError(
            f"FMU {runtime.desc.path!r} parameters: expected no derivative with respect to a co-simulation "
            "FMU's parameters (they are set at initialisation and the FMU state is opaque); received a "
            "request for one (an unknown of the FMU's, or training through it)."
        )
    if isinstance(du, SymbolicZero):
        value = _step_call(runtime, h, False, *primals)[..., 0]
        return value, jnp.zeros_like(value)
    out = _step_call(runtime, h, True, *primals)
    value, jac = out[..., 0], out[..., 1:]
    return value, jnp.einsum("...ij,...j->...i", jac, du)


_do_step.defjvp(_do_step_jvp, symbolic_zeros=True)


def _start_refs(desc: Description, start: Mapping[str, float]) -> dict[int, float]:
    """``{value reference: value}`` of the ``start`` values, each name checked (FMI 2.0.4, section 2.2.7)."""
    if not start:
        return {}
    import fmpy

    by_name = {v.name: v for v in fmpy.read_model_description(desc.path).modelVariables}
    out = {}
    for name, value in start.items():
        var = by_name.get(name)
        settable = (
            var is not None
            and var.type == "Real"
            and (var.initial in ("exact", "approx") or var.causality == "input")
        )
        if var is None or not settable or var.causality == "parameter":
            why = "no such variable" if var is None else f"causality {var.causality}, initial {var.initial}"
            raise FMUVariableError(
                f"FMU {desc.path!r} start[{name!r}]: expected a real variable whose start value can be set "
                f"before initialisation (initial exact or approx, or an input; a parameter goes in params); "
                f"received {name!r} ({why})."
            )
        if not math.isfinite(float(value)):
            raise FMUVariableError(
                f"FMU {desc.path!r} start[{name!r}]: expected a finite number; received {value!r}."
            )
        out[var.valueReference] = float(value)
    return out


class CoSimulationFMU(AbstractModel):
    """An FMI 2.0 Co-Simulation FMU as a model stepped by ``fmi2DoStep`` (module docstring).

    States: the FMU's real outputs at the last communication point, then ``fmu_state`` (a handle to the
    saved FMU state; 0 is the initialised FMU, :attr:`start_state`). Inputs: its real continuous inputs,
    held over each communication step. Outputs: its real outputs (read from the state). ``params``: its
    real parameters (fixed or tunable), set at initialisation.

    A communication step is a whole discretised step: ``twinfer.sim`` with ``"euler"``, ``"heun"`` or
    ``"rk4"`` takes it through :meth:`host_step` (the FMU's own solver; the method only asks for the
    step), and in a graph (:meth:`twinfer.infer.graph.Graph.from_model` on a
    :class:`~twinfer.infer.graph.Coupled` model) it is a deterministic node (estimator ``"none"``). It has
    no vector field: :meth:`vector_field` is a named error.

    Args:
        path: the ``.fmu`` file.
        params: values replacing some parameters' start values.
        parameters: which real parameters become ``params`` (default: every fixed or tunable one).
        start: start values of other real variables, set before initialisation (the FMU's initial state,
            ``{"x": 0.0}``): each one whose ``initial`` is ``"exact"`` or ``"approx"``, or an input.

    Raises:
        FMUError: a subclass naming what failed: a missing file, not an FMU, no Co-Simulation interface,
            one that cannot get and set its FMU state, FMI 3.0 (not yet), no binary for this platform, an
            unknown parameter name, a ``start`` name that is not a real variable with a settable start
            value or a value that is not finite (:mod:`twinfer.models._fmu_errors`).

    References:
        Modelica Association, Functional Mock-up Interface 2.0.4 (2022), section 4.

    """

    params: Params
    runtime: CoSimRuntime = eqx.field(static=True)
    steps_itself: ClassVar[bool] = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        params: Mapping[str, float] | None = None,
        parameters: Sequence[str] | None = None,
        start: Mapping[str, float] | None = None,
    ) -> None:
        desc = describe(path, parameters, params, interface="co-simulation")
        self.runtime = CoSimRuntime(desc, _start_refs(desc, start or {}))
        self.params = {
            name: jnp.asarray(value, dtype=jnp.float64)
            for name, value in zip(desc.param_names, desc.param_starts, strict=True)
        }

    def _p(self, params: Params) -> Any:
        names = self.runtime.desc.param_names
        if not names:
            return jnp.zeros((0,))
        return jnp.stack([jnp.asarray(params[n], dtype=jnp.float64) for n in names])

    def communicate(self, x: State, u: Input, params: Params, h: float) -> State:
        """One communication step of ``h`` from the saved state ``x[-1]`` with ``u`` held: the next state."""
        if not (math.isfinite(h) and h > 0):
            raise FMUError(f"CoSimulationFMU step h: expected a finite positive number; received {h!r}.")
        x = jnp.asarray(x, dtype=jnp.float64)
        u = jnp.zeros((*x.shape[:-1], 0)) if self.n_input == 0 else jnp.asarray(u, dtype=jnp.float64)
        p = jnp.broadcast_to(self._p(params), (*x.shape[:-1], len(self.runtime.desc.param_names)))
        return _do_step(self.runtime, float(h), x[..., -1], u, p)

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        """None: a co-simulation FMU integrates itself (a named error, raised when traced)."""
        raise FMUKindError(
            f"FMU {self.runtime.desc.path!r} vector field: expected a Model Exchange FMU "
            "(twinfer.models.FMU) for equations twinfer integrates; received a co-simulation FMU, which "
            "steps with its own solver: discretise it with 'euler', 'heun' or 'rk4' (one fmi2DoStep a "
            "step), or make it a graph node (Graph.from_model on a Coupled model, estimator 'none')."
        )

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        """The outputs at the last communication point: the state without its handle."""
        return jnp.asarray(x, dtype=jnp.float64)[..., :-1]

    def host_step(
        self, step: Any, t: Any, x: State, u: Input, params: Params, h: float, substeps: int
    ) -> State | None:
        """One ``fmi2DoStep`` of ``h * substeps`` (the FMU's own solver; ``step`` is not used)."""
        return self.communicate(x, u, params, h * substeps)

    @property
    def state_names(self) -> tuple[str, ...]:
        return (*self.runtime.desc.output_names, HANDLE)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.runtime.desc.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.runtime.desc.output_names

    @property
    def start_state(self) -> Any:
        """The outputs of the FMU initialised with :attr:`params`, and handle 0."""
        p = [float(self.params[n]) for n in self.runtime.desc.param_names]
        return jnp.asarray([*self.runtime.initial_outputs(p), 0.0], dtype=jnp.float64)

    @property
    def calls(self) -> int:
        """How many host calls (batches) the FMU has answered so far."""
        return self.runtime.calls

    def close(self) -> None:
        """Free the FMU and its saved states and remove its folder now."""
        self.runtime.close()
