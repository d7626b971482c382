"""A combination used as a dynamical model: upsilon_z = x, gamma_z = dx/dt, with events.

Events come either from a model evaluated on the global state (``events="global"``, what the authors'
code does in experiment 1, specs 3.3) or from a submodel's own local state (``events="a"``/``"b"``). In the
local case the submodel's indicators are evaluated on its local input upsilon_k(x) and its update gives a
new local state upsilon_k+; the new global state solves r(x) = upsilon_k(x) - upsilon_k+ = 0 (eqs. 17,
21; with biases), by Gauss-Newton with minimum-norm steps from x-: entries of x to which upsilon_k is not
sensitive (zero Jacobian columns) are left unchanged, as the paper asks (specs 2.4).

References:
    Thummerer & Mikelsons, model-combination paper, sec. 4.3, eqs. (16)-(17), (20)-(22).

"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from twinfer.models._base import AbstractModel, Input, Output, Params, State
from twinfer.models._combine import Combination


class CombinedModel(AbstractModel):
    """A :class:`Combination` whose input is the state and whose output is the state derivative.

    Args:
        combination: the combined system (sizes n_z_in = n_z_out = number of states).
        state_names: names of the global state.
        events: ``"none"``, ``"global"`` (use ``event_model``'s events on x), ``"a"`` or ``"b"``.
        event_model: the model whose events act on the global state when ``events="global"``.
        backsolve_steps: Gauss-Newton iterations of the local-to-global back-solve.
        params: initial parameters (default: ``combination.initial_params()``).

    """

    combination: Combination
    params: Params
    names: tuple[str, ...] = eqx.field(static=True)
    events: str = eqx.field(static=True)
    event_model: AbstractModel | None
    backsolve_steps: int = eqx.field(static=True)

    def __init__(
        self,
        combination: Combination,
        state_names: Sequence[str],
        events: str = "none",
        event_model: AbstractModel | None = None,
        backsolve_steps: int = 8,
        params: Params | None = None,
    ):
        n = len(state_names)
        if combination.n_z_in != n or combination.n_z_out != n:
            raise ValueError(
                f"CombinedModel: expected a combination with {n} inputs and outputs (one per state); "
                f"received {combination.n_z_in} and {combination.n_z_out}."
            )
        if events not in ("none", "global", "a", "b"):
            raise ValueError(f"CombinedModel events: expected none, global, a or b; received {events!r}.")
        if events == "global" and (event_model is None or event_model.n_state != n):
            raise ValueError("CombinedModel events='global': expected an event_model with the same states.")
        if events in ("a", "b") and getattr(combination, events).role != "vector_field":
            raise ValueError(f"CombinedModel events={events!r}: the submodel must have role 'vector_field'.")
        self.combination, self.names, self.events = combination, tuple(state_names), events
        self.event_model, self.backsolve_steps = event_model, backsolve_steps
        self.params = combination.initial_params() if params is None else dict(params)

    # -- names --------------------------------------------------------------------------------------
    @property
    def state_names(self) -> tuple[str, ...]:
        return self.names

    @property
    def input_names(self) -> tuple[str, ...]:
        return ()

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.names

    def _event_source(self) -> AbstractModel | None:
        if self.events == "global":
            return self.event_model
        if self.events in ("a", "b"):
            return getattr(self.combination, self.events).model
        return None

    @property
    def discrete_state_names(self) -> tuple[str, ...]:
        source = self._event_source()
        return () if source is None else source.discrete_state_names

    @property
    def n_events(self) -> int:
        source = self._event_source()
        return 0 if source is None else source.n_events

    def initial_discrete_state(self, params: Params) -> Array:
        source = self._event_source()
        return jnp.zeros((0,)) if source is None else source.initial_discrete_state(source.params)

    @property
    def trainable_groups(self) -> tuple[str, ...]:
        return self.combination.trainable_groups()

    # -- equations ----------------------------------------------------------------------------------
    def _signals(self, t: Any, x: State, z: Array, params: Params) -> dict[str, Any]:
        kw = {f"z_{self.events}": z} if self.events in ("a", "b") else {}
        return self.combination.evaluate(t, x, params, **kw)

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        return self.combination.evaluate(t, x, params)["gz"]

    def hybrid_vector_field(self, t: Any, x: State, z: Array, u: Input, params: Params) -> State:
        return self._signals(t, x, z, params)["gz"]

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        return x

    def event_indicators(self, t: Any, x: State, z: Array, u: Input, params: Params) -> Array:
        source = self._event_source()
        if source is None:
            return jnp.zeros((0,))
        if self.events == "global":
            return source.event_indicators(t, x, z, jnp.zeros(source.n_input), source.params)
        local = self._signals(t, x, z, params)[f"u{self.events}"]
        sub = Combination.sub_params(params, self.events)
        return source.event_indicators(t, local, z, jnp.zeros(source.n_input), sub)

    def event_update(
        self, t: Any, x: State, z: Array, u: Input, params: Params, which: Array
    ) -> tuple[State, Array]:
        source = self._event_source()
        if source is None:
            return x, z
        if self.events == "global":
            return source.event_update(t, x, z, jnp.zeros(source.n_input), source.params, which)
        key = f"u{self.events}"
        sub = Combination.sub_params(params, self.events)
        local = self._signals(t, x, z, params)[key]
        local_new, z_new = source.event_update(t, local, z, jnp.zeros(source.n_input), sub, which)
        return self.backsolve(t, x, z, params, local_new), z_new

    def backsolve(self, t: Any, x: State, z: Array, params: Params, local_new: Any) -> State:
        """The global state whose local input equals ``local_new`` (eqs. 17, 21), nearest to ``x``."""
        key = f"u{self.events}"

        def residual(xg):
            return self._signals(t, xg, z, params)[key] - local_new

        def step(xg, _):
            r = residual(xg)
            jac = jax.jacfwd(residual)(xg)
            # minimum-norm Gauss-Newton step J^T (J J^T)^-1 r: insensitive entries stay unchanged
            return xg - jac.T @ jnp.linalg.solve(jac @ jac.T, r), None

        x_new, _ = jax.lax.scan(step, x, None, length=self.backsolve_steps)
        bad = ~(jnp.max(jnp.abs(residual(x_new))) < 1e-8)
        return eqx.error_if(
            x_new,
            bad,
            f"CombinedModel: the local-to-global back-solve of an event in s_{self.events} did not find "
            "a global state (residual above 1e-8); the connection to this submodel is not invertible.",
        )
