"""FMUs as twinfer models: an FMI 2.0 Model Exchange FMU behind the Model contract (issue #56).

Engineers receive models from Modelica tools, Simulink and vendors as Functional Mock-up Units; the
model-combination paper defines its model class after the FMI (specs/model-combination.md 1.1). An
:class:`FMU` reads one with fmpy and answers :meth:`~FMU.vector_field` and :meth:`~FMU.output` by running
its C code through ``jax.pure_callback``: one callback per batch (a ``vmap`` over sigma points or particles
becomes one call that loops over the points in C), so the FMU works inside every jitted estimator.
Derivatives sit behind ``jax.custom_jvp``: forward and reverse mode (``jacfwd`` for the EKF, ``grad`` for
training) both see the Jacobian the FMU gives (its directional derivatives where it has them, central
finite differences otherwise; :mod:`twinfer.models._fmu_runtime`).

State and time events run through the FMI event interface on twinfer's hybrid hooks
(:mod:`twinfer.models._fmu_events`). Not yet: discrete variables of an FMU with events (refused by name),
FMI 3.0, co-simulation FMUs (refused by name).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, Float

from twinfer.models._base import Input, Output, Params, State
from twinfer.models._fmu_archive import describe
from twinfer.models._fmu_errors import FMUError, FMUKindError
from twinfer.models._fmu_events import AbstractFMU, Events
from twinfer.models._fmu_runtime import DerivativeSource, Kind, Runtime

SOURCES: tuple[str, ...] = ("auto", "directional", "finite_differences")
"""Where an :class:`FMU`'s Jacobians with respect to states and inputs come from."""


def _callback(runtime: Runtime, kind: Kind, need: tuple[bool, ...], *args: Array) -> tuple[Array, ...]:
    """One ``pure_callback`` for the value and the asked Jacobian blocks, batched as a whole under vmap."""
    n_out = len(runtime.desc.state_refs) if kind == "derivatives" else len(runtime.desc.output_refs)
    shapes = [(n_out,)] + [(n_out,) if i == 0 else (n_out, args[i].shape[-1]) for i in range(4) if need[i]]
    return jax.pure_callback(
        functools.partial(runtime.evaluate, kind, need),
        tuple(jax.ShapeDtypeStruct(shape, jnp.float64) for shape in shapes),
        *args,
        vmap_method="expand_dims",
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _evaluate(runtime: Runtime, kind: Kind, t: Array, x: Array, u: Array, p: Array) -> Array:
    return _callback(runtime, kind, (False,) * 4, t, x, u, p)[0]


def _evaluate_jvp(runtime: Runtime, kind: Kind, primals: tuple[Array, ...], tangents: tuple[Any, ...]) -> Any:
    """Tangent ``J_t dt + J_x dx + J_u du + J_p dp``, asking the FMU only for blocks with a nonzero tangent.

    Linear in the tangents with the Jacobians computed from the primals, so JAX transposes it for
    reverse mode.
    """
    need = tuple(not isinstance(d, SymbolicZero) for d in tangents)
    value, *blocks = _callback(runtime, kind, need, *primals)
    out = jnp.zeros_like(value)
    for jac, (which, d) in zip(blocks, [(i, d) for i, d in enumerate(tangents) if need[i]], strict=True):
        out = out + (jac * d if which == 0 else jac @ d)
    return value, out


_evaluate.defjvp(_evaluate_jvp, symbolic_zeros=True)


class FMU(AbstractFMU):
    """An FMI 2.0 Model Exchange FMU as a twinfer model (states, inputs, outputs, parameters by name).

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
            not FMI 2.0 Model Exchange (:class:`FMUKindError`), events with discrete variables it
            cannot carry (:class:`FMUEventsError`), no
            binary for this platform (:class:`FMUPlatformError`), an unknown or unsettable parameter
            name (:class:`FMUVariableError`).

    References:
        Modelica Association, Functional Mock-up Interface 2.0.4 (2022), sections 2.2 and 3.
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
        """The real outputs from ``fmi2GetReal`` at ``(t, x, u)`` and the parameter values in ``params``."""
        return _evaluate(self.runtime, "outputs", *self._args(t, x, u, params))

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
