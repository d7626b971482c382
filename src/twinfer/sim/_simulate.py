"""Forward simulation: fixed-step on a :class:`DiscreteModel`, adaptive on diffrax with dense output."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models import AbstractModel
from twinfer.sim._discretise import DiscreteModel
from twinfer.sim._trajectory import Trajectory, check_array

if TYPE_CHECKING:
    import diffrax


def simulate_discrete(
    dmodel: DiscreteModel,
    x0: Any,
    inputs: Any | None,
    t0: float = 0.0,
    params: Any = None,
    n_steps: int | None = None,
) -> Trajectory:
    """Step a discrete model over ``T`` inputs with ``jax.lax.scan``.

    Args:
        dmodel: from :func:`twinfer.sim.discretise`.
        x0: initial state (n_state,).
        inputs: (T, n_input), input k held over [t_k, t_k + dt); None for autonomous models.
        t0: time of ``x0``.
        params: parameters (default: the model's own).
        n_steps: number of steps when ``inputs`` is None.

    Returns:
        Trajectory with ``ts`` (T+1,), ``states`` (T+1, n_state) including ``x0``, and ``outputs``
        (T, n_output) with ``outputs[k] = output(t_k, x_k, u_k)``.

    """
    params = dmodel.params if params is None else params
    x0 = jnp.asarray(check_array("simulate_discrete x0", x0, (dmodel.n_state,)))
    if inputs is None:
        if n_steps is None or n_steps < 1:
            raise ValueError(f"simulate_discrete n_steps: expected >= 1 without inputs; received {n_steps}.")
        us = jnp.zeros((n_steps, dmodel.n_input))
    else:
        shape = jnp.shape(inputs)
        steps = shape[0] if len(shape) == 2 else -1
        us = jnp.asarray(
            check_array("simulate_discrete inputs", inputs, (steps, dmodel.n_input), " (T, n_input)")
        )
    ts = t0 + dmodel.dt * jnp.arange(us.shape[0] + 1)

    def body(x, tu):
        t, u = tu
        return dmodel.transition(t, x, u, params), (x, dmodel.output(t, x, u, params))

    x_last, (xs, ys) = jax.lax.scan(body, x0, (ts[:-1], us))
    return Trajectory(ts=ts, states=jnp.concatenate([xs, x_last[None]]), outputs=ys)


def simulate(
    model: AbstractModel,
    ts: Any,
    x0: Any,
    inputs: Any | Callable[[Any], Any] | None = None,
    params: Any = None,
    *,
    interpolation: str = "zoh",
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 1_000_000,
    dense: bool = False,
) -> Trajectory | tuple[Trajectory, diffrax.Solution]:
    """Adaptive solve (Dopri8 with a PID step controller) saved at ``ts``.

    Args:
        model: a continuous-time model.
        ts: increasing save times (T,); the solve starts at ``ts[0]``.
        x0: initial state.
        inputs: samples (T, n_input) at ``ts`` (held, ``"zoh"``, or ``"linear"``-interpolated), a callable
            ``u(t)``, or None for autonomous models.
        params: parameters (default: the model's own).
        interpolation: ``"zoh"`` or ``"linear"`` for sampled inputs.
        rtol: relative tolerance of the step-size controller.
        atol: absolute tolerance of the step-size controller.
        max_steps: solver step limit.
        dense: also return the diffrax solution (dense output, ``sol.evaluate(t)``).

    Returns:
        Trajectory (``outputs[k] = output(ts[k], x(ts[k]), u(ts[k]))``), and the solution if ``dense``.

    """
    params = model.params if params is None else params
    ts_np = np.asarray(ts, dtype=np.float64)
    if ts_np.ndim != 1 or ts_np.size < 2 or not np.all(np.diff(ts_np) > 0):
        raise ValueError(f"simulate ts: expected an increasing 1-D array of >= 2 times; received {ts_np!r}.")
    x0 = jnp.asarray(check_array("simulate x0", x0, (model.n_state,)))
    if interpolation not in ("zoh", "linear"):
        raise ValueError(f"simulate interpolation: expected 'zoh' or 'linear'; received {interpolation!r}.")
    step_ts = None
    if inputs is None:
        u_fn: Callable[[Any], Any] = lambda t: jnp.zeros(model.n_input)
    elif callable(inputs):
        u_fn = inputs
    else:
        us = jnp.asarray(
            check_array("simulate inputs", inputs, (ts_np.size, model.n_input), " (len(ts), n_input)")
        )
        tsj = jnp.asarray(ts_np)
        if interpolation == "linear":
            u_fn = lambda t: jax.vmap(lambda col: jnp.interp(t, tsj, col), in_axes=1)(us)
        else:
            u_fn = lambda t: us[jnp.clip(jnp.searchsorted(tsj, t, side="right") - 1, 0, us.shape[0] - 1)]
            step_ts = tsj
    import diffrax  # adaptive solves only: 0.15 s to import, not on the fixed-step path

    term = diffrax.ODETerm(lambda t, x, args: model.vector_field(t, x, u_fn(t), params))
    controller: Any = diffrax.PIDController(rtol=rtol, atol=atol)
    if step_ts is not None:
        controller = diffrax.ClipStepSizeController(controller, jump_ts=step_ts)
    tsj = jnp.asarray(ts_np)
    sol = diffrax.diffeqsolve(
        term,
        diffrax.Dopri8(),
        t0=tsj[0],
        t1=tsj[-1],
        dt0=None,
        y0=x0,
        saveat=diffrax.SaveAt(ts=tsj, dense=dense),
        stepsize_controller=controller,
        max_steps=max_steps,
    )
    states = sol.ys
    outputs = jax.vmap(lambda t, x: model.output(t, x, u_fn(t), params))(tsj, states)
    traj = Trajectory(ts=tsj, states=states, outputs=outputs)
    return (traj, sol) if dense else traj
