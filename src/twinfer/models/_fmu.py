"""FMUs as twinfer models: an FMI 2.0 or 3.0 Model Exchange FMU behind the Model contract (issue #56).

Engineers receive models from Modelica tools, Simulink and vendors as Functional Mock-up Units; the
model-combination paper defines its model class after the FMI (specs/model-combination.md 1.1). An
:class:`FMU` reads one with fmpy and answers :meth:`~FMU.vector_field` and :meth:`~FMU.output` by running
its C code through a host call (:mod:`twinfer.models._host_call`): one call per batch (a ``vmap`` over
sigma points or particles becomes one call that loops over the points in C), so the FMU works inside every
jitted estimator. :meth:`~FMU.host_step` takes a whole integrator step in one call, so a filter's step
leaves the compiled program once, not once per stage. Derivatives sit behind ``jax.custom_jvp``: forward
and reverse mode (``jacfwd`` for the EKF, ``grad`` for training) both see the Jacobian the FMU gives (its
directional derivatives where it has them, central finite differences otherwise;
:mod:`twinfer.models._fmu_runtime`), and a step's Jacobian is its forward sensitivities.

State and time events run through the FMI event interface on twinfer's hybrid hooks
(:mod:`twinfer.models._fmu_events`). FMI 3.0 FMUs run through the same calls, mapped by
:mod:`twinfer.models._fmi3`. Not yet: discrete variables of an FMU with events, FMI 3.0 arrays and clocks,
co-simulation FMUs (each refused by name).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, Float

from twinfer.models._base import Input, Output, Params, State
from twinfer.models._fmu_archive import describe
from twinfer.models._fmu_errors import FMUError, FMUKindError
from twinfer.models._fmu_events import AbstractFMU, Events
from twinfer.models._fmu_runtime import DerivativeSource, Kind, Runtime
from twinfer.models._host_call import host_call

SOURCES: tuple[str, ...] = ("auto", "directional", "finite_differences")
"""Where an :class:`FMU`'s Jacobians with respect to states and inputs come from."""


def _unpacked(host: Any, widths: tuple[int, ...], packed: np.ndarray) -> np.ndarray:
    """``host(t, x, u, p)`` on the columns of one packed array; its value and blocks side by side."""
    t, x, u, p = np.split(np.asarray(packed), np.cumsum(widths)[:-1], axis=-1)
    value, *blocks = host(t[..., 0], x, u, p)
    return np.concatenate(
        [value[..., None], *(b[..., None] if b.ndim == value.ndim else b for b in blocks)], -1
    )


def _host_call(host: Any, n_out: int, need: tuple[bool, ...], *args: Array) -> tuple[Array, ...]:
    """One host call to ``host(t, x, u, p) -> (value, *blocks)``, batched as a whole under vmap.

    ``(t, x, u, p)`` travel as one array and the value and the asked Jacobian blocks come back as one
    (:func:`~twinfer.models._host_call.host_call`, which hands XLA's NumPy buffer to the host as is).
    """
    widths = (1, *(a.shape[-1] for a in args[1:]))
    packed = jnp.concatenate([jnp.reshape(args[0], (1,)), *args[1:]])
    cols = [1] + [widths[i] for i in range(4) if need[i]]
    out = host_call(functools.partial(_unpacked, host, widths), packed, (n_out, sum(cols)))
    edges = np.cumsum(cols)
    blocks = [out[:, a:b] for a, b in zip(edges[:-1], edges[1:], strict=True)]
    asked = [i for i in range(4) if need[i]]
    return (out[:, 0], *(block[:, 0] if i == 0 else block for i, block in zip(asked, blocks, strict=True)))


def _callback(runtime: Runtime, kind: Kind, need: tuple[bool, ...], *args: Array) -> tuple[Array, ...]:
    """The value and the asked Jacobian blocks of ``kind`` at ``(t, x, u, p)``: one callback per batch."""
    n_out = len(runtime.desc.state_refs) if kind == "derivatives" else len(runtime.desc.output_refs)
    return _host_call(functools.partial(runtime.evaluate, kind, need), n_out, need, *args)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _evaluate(runtime: Runtime, kind: Kind, t: Array, x: Array, u: Array, p: Array) -> Array:
    return _callback(runtime, kind, (False,) * 4, t, x, u, p)[0]


def _tangent(value: Array, blocks: list[Array], tangents: tuple[Any, ...], need: tuple[bool, ...]) -> Any:
    """``J_t dt + J_x dx + J_u du + J_p dp`` over the blocks asked (those with a nonzero tangent).

    Linear in the tangents with the Jacobians computed from the primals, so JAX transposes it for
    reverse mode.
    """
    out = jnp.zeros_like(value)
    for jac, (which, d) in zip(blocks, [(i, d) for i, d in enumerate(tangents) if need[i]], strict=True):
        out = out + (jac * d if which == 0 else jac @ d)
    return out


def _evaluate_jvp(runtime: Runtime, kind: Kind, primals: tuple[Array, ...], tangents: tuple[Any, ...]) -> Any:
    """Value and tangent, asking the FMU only for Jacobian blocks with a nonzero tangent."""
    need = tuple(not isinstance(d, SymbolicZero) for d in tangents)
    value, *blocks = _callback(runtime, kind, need, *primals)
    return value, _tangent(value, blocks, tangents, need)


_evaluate.defjvp(_evaluate_jvp, symbolic_zeros=True)


def _step_callback(
    runtime: Runtime, step: Any, h: float, substeps: int, need: tuple[bool, ...], *args: Array
) -> tuple[Array, ...]:
    """A whole integrator step of a batch, and the asked Jacobian blocks: one callback per batch."""
    return _host_call(
        functools.partial(runtime.step, step, h, substeps, need), args[1].shape[-1], need, *args
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2, 3))
def _step(
    runtime: Runtime, step: Any, h: float, substeps: int, t: Array, x: Array, u: Array, p: Array
) -> Array:
    return _step_callback(runtime, step, h, substeps, (False,) * 4, t, x, u, p)[0]


def _step_jvp(
    runtime: Runtime,
    step: Any,
    h: float,
    substeps: int,
    primals: tuple[Array, ...],
    tangents: tuple[Any, ...],
) -> Any:
    """The step and its tangent from the step's forward sensitivities, in the same callback."""
    need = tuple(not isinstance(d, SymbolicZero) for d in tangents)
    value, *blocks = _step_callback(runtime, step, h, substeps, need, *primals)
    return value, _tangent(value, blocks, tangents, need)


_step.defjvp(_step_jvp, symbolic_zeros=True)


class FMU(AbstractFMU):
    """An FMI 2.0 or 3.0 Model Exchange FMU as a twinfer model (states, inputs, outputs, parameters by name).

    States are the model description's continuous states (in ``ModelStructure/Derivatives`` order),
    inputs its real inputs of continuous variability, outputs its real outputs, ``params`` its real
    parameters of variability fixed or tunable (``{name: value}``; any can be estimated as an unknown).
    Other inputs (discrete, integer, boolean, string) keep their start values. The FMU is validated
    before anything of it runs, unpacked under a temporary folder and instantiated once; the instance is
    freed and the folder removed when the model (and every copy of it, such as ``with_params``'s) is
    garbage collected, or at :meth:`close`. A jitted function that closed over the model keeps it alive
    in JAX's caches until they are cleared.

    Args:
        path: the ``.fmu`` file.
        params: values replacing some parameters' start values (``{"mu": 1.5}``).
        parameters: which real parameters become ``params`` (default: every fixed or tunable one).
        derivatives: where Jacobians with respect to states and inputs come from: ``"auto"`` (the FMU's
            directional derivatives where ``providesDirectionalDerivative``, else central finite
            differences), ``"directional"`` or ``"finite_differences"``. Time and parameter
            derivatives are always central differences with steps from the nominal values.

    Raises:
        FMUError: a subclass naming what failed (:mod:`twinfer.models._fmu_errors`): a missing file
            (:class:`FMUNotFoundError`), not a zip or no model description (:class:`FMUArchiveError`),
            not FMI 2.0 or 3.0 Model Exchange (:class:`FMUKindError`), events with discrete variables it
            cannot carry (:class:`FMUEventsError`), no
            binary for this platform (:class:`FMUPlatformError`), an unknown or unsettable parameter
            name (:class:`FMUVariableError`).

    References:
        Modelica Association, Functional Mock-up Interface 2.0.4 (2022), sections 2.2 and 3; Functional
        Mock-up Interface 3.0.1 (2023), chapters 2 and 3.
        Specs/model-combination.md 1.1 (FMUs fall into the model class, eq. 6).

    """

    params: Params
    runtime: Runtime = eqx.field(static=True)
    events: Events = eqx.field(static=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        params: Mapping[str, float] | None = None,
        parameters: Sequence[str] | None = None,
        derivatives: DerivativeSource = "auto",
    ) -> None:
        if derivatives not in SOURCES:
            raise FMUError(f"FMU derivatives: expected one of {SOURCES}; received {derivatives!r}.")
        desc = describe(path, parameters, params)
        if derivatives == "directional" and not desc.directional:
            raise FMUKindError(
                f"FMU {desc.path!r} derivatives: expected an FMU with providesDirectionalDerivative for "
                "'directional'; received one without (use 'auto' or 'finite_differences')."
            )
        self.runtime = Runtime(desc, derivatives)
        self.events = Events(self.runtime)
        self.params = {
            name: jnp.asarray(value, dtype=jnp.float64)
            for name, value in zip(desc.param_names, desc.param_starts, strict=True)
        }

    def _args(self, t: Any, x: Any, u: Any, params: Params) -> tuple[Array, ...]:
        names = self.runtime.desc.param_names
        p = (
            jnp.stack([jnp.asarray(params[n], dtype=jnp.float64) for n in names])
            if names
            else jnp.zeros((0,))
        )
        u = jnp.zeros((0,)) if self.n_input == 0 else jnp.asarray(u, dtype=jnp.float64)
        return jnp.asarray(t, dtype=jnp.float64), jnp.asarray(x, dtype=jnp.float64), u, p

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        """dx/dt from ``fmi2GetDerivatives`` at ``(t, x, u)`` and the parameter values in ``params``."""
        if self.n_state == 0:
            return jnp.zeros((0,))
        return _evaluate(self.runtime, "derivatives", *self._args(t, x, u, params))

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        """The real outputs from ``fmi2GetReal`` at ``(t, x, u)`` and the parameter values in ``params``.

        Outputs that are all continuous states (the same value reference: an FMI alias) are read from
        ``x`` without leaving the compiled program.
        """
        aliases = self.runtime.output_states
        if aliases is not None:
            return jnp.asarray(x, dtype=jnp.float64)[..., jnp.asarray(aliases, dtype=jnp.int32)]
        return _evaluate(self.runtime, "outputs", *self._args(t, x, u, params))

    def host_step(
        self, step: Any, t: Any, x: State, u: Input, params: Params, h: float, substeps: int
    ) -> State | None:
        """The whole step in one callback: every stage and substep on the host (``Runtime.step``).

        Under ``jacfwd`` or ``grad`` the same callback returns the step's Jacobians (its forward
        sensitivities), so an EKF's step is one host round trip and a UKF's one per batch of sigma
        points, instead of one per stage.
        """
        if self.n_state == 0:
            return None
        return _step(self.runtime, step, float(h), int(substeps), *self._args(t, x, u, params))

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.runtime.desc.state_names

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.runtime.desc.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.runtime.desc.output_names

    @property
    def param_bounds(self) -> dict[str, tuple[float, float]]:
        """The ``min`` and ``max`` the model description declares for a parameter, where it does."""
        return dict(self.runtime.desc.param_bounds)

    @property
    def start_state(self) -> Float[Array, " n_state"]:
        """The states' start values from the model description."""
        return jnp.asarray(self.runtime.desc.state_starts, dtype=jnp.float64)

    @property
    def calls(self) -> int:
        """How many callbacks (batches) the FMU has answered so far, for measuring."""
        return self.runtime.calls

    @property
    def directory(self) -> str:
        """The temporary folder the FMU is unpacked under (removed with the model)."""
        return self.runtime.directory

    def close(self) -> None:
        """Free the FMU instance and remove its folder now; the model cannot be evaluated afterwards."""
        self.runtime.close()
