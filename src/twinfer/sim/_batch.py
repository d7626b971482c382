"""A batch of systems that differ in their parameters, each stepped over one record: vmap of a scan.

For training scenarios and reference runs (many units of one model with varied constants, each under
its own held input) this replaces a Python loop over systems by one compiled program.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from twinfer.sim._steps import Rhs


@functools.partial(jax.jit, static_argnums=(0, 1, 5, 6))
def simulate_batch(
    rhs: Callable[[Any, Any, Any, Any], Any],
    step: Callable[[Rhs, Any, Any, Any], Any],
    params: Any,
    x0: Float[Array, "U n"],
    inputs: Float[Array, "U T ..."],
    dt: float,
    substeps: int,
) -> Float[Array, "U T+1 n"]:
    """Each system ``i`` of the batch stepped ``substeps`` times per ``dt`` over ``T`` held inputs.

    ``x_{k+1} = step^substeps(f_i, x_k)`` with ``f_i(t, x) = rhs(params_i, t, x, u_ik)``, the input
    ``u_ik`` held over ``[k dt, (k + 1) dt)``, time starting at 0.

    Args:
        rhs: ``(params_i, t, x, u) -> dx/dt`` (a function the compiled program is keyed on).
        step: the one-step method ``(f, t, x, h) -> x(t + h)`` (:func:`twinfer.sim.integrator_step`).
        params: a pytree whose leaves carry the batch axis U first.
        x0: initial states (U, n).
        inputs: held inputs (U, T, ...); (U, T, 0) for autonomous systems.
        dt: step between records [s] (static).
        substeps: integrator steps per ``dt`` (static).

    Returns:
        The states (U, T + 1, n), the initial state first.

    """
    h = dt / substeps

    def one(p: Any, x: Any, us: Any) -> Any:
        def body(x: Any, inp: Any) -> Any:
            k, u = inp
            for j in range(substeps):
                x = step(lambda t, xx: rhs(p, t, xx, u), k * dt + j * h, x, h)
            return x, x

        _, xs = jax.lax.scan(body, x, (jnp.arange(us.shape[0]), us))
        return jnp.concatenate([x[None], xs])

    return jax.vmap(one)(params, x0, inputs)
