"""Forward simulation: fixed-step on a :class:`DiscreteModel`, adaptive on diffrax with dense output."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, overload

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer._config import ensure
from twinfer.models import AbstractModel
from twinfer.sim._discretise import DiscreteModel
from twinfer.sim._timescale import check_step, unit_hint
from twinfer.sim._trajectory import Trajectory, any_traced, check_array

if TYPE_CHECKING:
    import diffrax


def simulate_discrete(
    dmodel: DiscreteModel,
    x0: Any,
    inputs: Any | None,
    t0: float = 0.0,
    params: Any = None,
    n_steps: int | None = None,
    *,
    where: str = "simulate_discrete",
) -> Trajectory:
    """Step a discrete model over ``T`` inputs with ``jax.lax.scan``.

    The step is checked against the model before and after (:func:`twinfer.sim.check_step`, at the
    initial state and at the largest state reached): a step the integrator cannot take on this model is a
    :class:`~twinfer.sim.StepSizeError` (a :class:`StepSizeWarning` when it adds 10- to 1000-fold growth
    over the record), a non-finite state a ``ValueError`` naming the step.

    Args:
        dmodel: from :func:`twinfer.sim.discretise`.
        x0: initial state (n_state,).
        inputs: (T, n_input), input k held over [t_k, t_k + dt); None for autonomous models.
        t0: time of ``x0``.
        params: parameters (default: the model's own).
        n_steps: number of steps when ``inputs`` is None.
        where: the caller's name in error messages.

    Returns:
        Trajectory with ``ts`` (T+1,), ``states`` (T+1, n_state) including ``x0``, and ``outputs``
        (T, n_output) with ``outputs[k] = output(t_k, x_k, u_k)``.

    """
    ensure(where, dmodel=dmodel, x0=x0, params=params)
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
    n = int(us.shape[0])
    u_first = None if not n else us[0]
    method, model, sub = dmodel.method, dmodel.model, dmodel.substeps
    if any_traced(x0, us, params, t0):  # inside a transformation: nothing concrete to check
        ts = t0 + dmodel.dt * jnp.arange(n + 1)
        states, ys = _scan_discrete(dmodel, x0, ts, us, params)
        return Trajectory(ts=ts, states=states, outputs=ys)
    check_step(
        where,
        model,
        dmodel.dt,
        method,
        x0,
        u_first,
        substeps=sub,
        n_steps=n,
        params=params,
        t=t0,
    )
    ts = t0 + dmodel.dt * jnp.arange(n + 1)
    states, ys = _scan_discrete(dmodel, x0, ts, us, params)
    host = np.asarray(states)
    finite = np.isfinite(host).reshape(n + 1, -1).all(axis=1)
    if not finite.all():
        k = int(np.argmax(~finite))
        raise ValueError(
            f"{where}: the {method!r} simulation of {type(model).__name__} became non-finite at step {k}"
            f" (t = {float(ts[k]):g}); check the parameters, the inputs and the step dt / substeps "
            f"({dmodel.dt:g} / {sub}).{unit_hint(model, dmodel.dt / sub, method, host[0], u_first)}"
        )
    if n and method != "exact" and host.ndim == 2:  # the runaway check: the step at the largest state
        k = int(np.argmax(np.linalg.norm(host, axis=1)))
        at = f"the simulated state at t = {float(ts[k]):g}"
        u_k = us[min(k, n - 1)]
        check_step(
            where,
            model,
            dmodel.dt,
            method,
            host[k],
            u_k,
            substeps=sub,
            n_steps=n,
            params=params,
            at=at,
        )
    return Trajectory(ts=ts, states=states, outputs=ys)


@eqx.filter_jit
def _scan_discrete(dmodel: DiscreteModel, x0: Any, ts: Any, us: Any, params: Any) -> tuple[Any, Any]:
    """The scan of :func:`simulate_discrete`, compiled once per model structure and shapes."""

    def body(x: Any, tu: Any) -> tuple[Any, Any]:
        t, u = tu
        return dmodel.transition(t, x, u, params), (x, dmodel.output(t, x, u, params))

    x_last, (xs, ys) = jax.lax.scan(body, x0, (ts[:-1], us))
    return jnp.concatenate([xs, x_last[None]]), ys


class _InputField(eqx.Module):
    """``model.vector_field`` with the input read at ``t`` from the solve's ``args = (us, ts, params)``.

    The samples, times and parameters travel as the solve's arguments, not as constants of a new
    closure, so a second solve of the same model structure and shapes reuses diffrax's compiled program
    (a closure per call made every :func:`simulate` compile anew: about 3 s for a six-mass chain).
    """

    model: AbstractModel
    interpolation: str = eqx.field(static=True)
    u_fn: Callable[[Any], Any] | None = None

    def input(self, t: Any, args: Any) -> Any:
        us, ts, _ = args
        if self.u_fn is not None:
            return self.u_fn(t)
        if us is None:
            return jnp.zeros(self.model.n_input)
        if self.interpolation == "linear":
            return jax.vmap(lambda col: jnp.interp(t, ts, col), in_axes=1)(us)
        return us[jnp.clip(jnp.searchsorted(ts, t, side="right") - 1, 0, us.shape[0] - 1)]

    def __call__(self, t: Any, x: Any, args: Any) -> Any:
        return self.model.vector_field(t, x, self.input(t, args), args[2])


@overload
def simulate(
    model: AbstractModel, ts: Any, x0: Any, *args: Any, dense: Literal[False] = False, **options: Any
) -> Trajectory: ...


@overload
def simulate(
    model: AbstractModel, ts: Any, x0: Any, *args: Any, dense: Literal[True], **options: Any
) -> tuple[Trajectory, diffrax.Solution]: ...


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
    ensure("simulate", model=model, x0=x0, params=params)
    params = model.params if params is None else params
    ts_np = np.asarray(ts, dtype=np.float64)
    if ts_np.ndim != 1 or ts_np.size < 2 or not np.all(np.diff(ts_np) > 0):
        raise ValueError(f"simulate ts: expected an increasing 1-D array of >= 2 times; received {ts_np!r}.")
    x0 = jnp.asarray(check_array("simulate x0", x0, (model.n_state,)))
    if interpolation not in ("zoh", "linear"):
        raise ValueError(f"simulate interpolation: expected 'zoh' or 'linear'; received {interpolation!r}.")
    tsj = jnp.asarray(ts_np)
    us = None
    if inputs is not None and not callable(inputs):
        us = jnp.asarray(
            check_array("simulate inputs", inputs, (ts_np.size, model.n_input), " (len(ts), n_input)")
        )
    field = _InputField(model, interpolation, inputs if callable(inputs) else None)
    import diffrax  # adaptive solves only: 0.15 s to import, not on the fixed-step path

    controller: Any = diffrax.PIDController(rtol=rtol, atol=atol)
    if us is not None and interpolation == "zoh":
        controller = diffrax.ClipStepSizeController(controller, jump_ts=tsj)
    args = (us, tsj, params)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Dopri8(),
        t0=tsj[0],
        t1=tsj[-1],
        dt0=None,
        y0=x0,
        args=args,
        saveat=diffrax.SaveAt(ts=tsj, dense=dense),
        stepsize_controller=controller,
        max_steps=max_steps,
    )
    states = sol.ys
    outputs = jax.vmap(lambda t, x: model.output(t, x, field.input(t, args), params))(tsj, states)
    traj = Trajectory(ts=tsj, states=states, outputs=outputs)
    return (traj, sol) if dense else traj
