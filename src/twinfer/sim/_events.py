"""Simulation of hybrid models with state and time events on diffrax.

The save grid ``ts`` splits the horizon into intervals. Each interval is integrated by at most
``max_events_per_interval + 1`` diffrax solves: a solve runs until the end of the interval, the next time
event, or a state event, whichever comes first. A state event is an indicator crossing zero from + to -;
diffrax locates it by Newton root finding on the step's dense interpolant, the model's update is applied
at the located time (super-dense time: the saved value is the right limit x(t+)) and integration restarts.
Everything is ``lax.scan``/``lax.cond`` with static shapes, so the whole simulation is jit-compiled once and
reverse-mode differentiable; the event times carry derivatives through the implicit function theorem of
the root find, so gradients of a loss flow through bounces.

References:
    Thummerer & Mikelsons, model-combination paper, eqs. (2)-(6) (HUDA-ODE), specs 1.4 (solver wiring).

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferRuntimeError
from twinfer.models import AbstractModel
from twinfer.sim._events_rk4 import event_carry, simulate_rk4
from twinfer.sim._trajectory import check_array


class HybridTrajectory(NamedTuple):
    """A simulated hybrid trajectory; row k of ``states``/``discrete``/``outputs`` belongs to ``ts[k]``.

    ``event_times`` (max_events,) and ``event_which`` (max_events, n_events) record the state events in
    order (padded with ``inf`` / False); ``n_events`` counts them.
    """

    ts: Any
    states: Any
    discrete: Any
    outputs: Any
    event_times: Any
    event_which: Any
    n_events: Any


def simulate_events(
    model: AbstractModel,
    ts: Any,
    x0: Any,
    z0: Any = None,
    params: Any = None,
    *,
    inputs: Callable[[Any], Any] | None = None,
    t_stop: Any = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    event_tol: float = 1e-12,
    max_events: int = 64,
    max_events_per_interval: int = 3,
    max_steps: int = 64,
    solver: Any = None,
    fixed_steps: int | None = None,
) -> HybridTrajectory:
    """Solve a hybrid model with event location, update and restart, saved at ``ts``.

    Args:
        model: any model; state events from ``event_indicators``/``event_update``, time events from
            ``next_time_event``/``time_event_update``.
        ts: increasing save times (T,); the solve starts at ``ts[0]``.
        x0: initial continuous state (n_state,).
        z0: initial discrete state (default: ``model.initial_discrete_state(params)``).
        params: parameters (default: the model's own).
        inputs: a callable ``u(t)`` or None for autonomous models.
        t_stop: optional (traceable) time after which integration stops and the state is held; used by
            training over a growing horizon so that samples beyond it cost nothing.
        rtol: relative tolerance of the PID step-size controller.
        atol: absolute tolerance of the PID step-size controller.
        event_tol: tolerance of the Newton root find on the event time.
        max_events: most state events in the whole simulation; more raise an error.
        max_events_per_interval: most state events between two save times; more raise an error.
        max_steps: solver step limit per solve.
        solver: a diffrax solver (default Tsit5, the authors' choice).
        fixed_steps: if given, integrate with this many classic RK4 steps per save interval in one
            scan with Newton event location inside a step (:mod:`twinfer.sim._events_rk4`; the fast
            path for training, ``max_events_per_interval`` then bounds the events inside one step);
            ``rtol``, ``atol``, ``event_tol``, ``max_steps`` and ``solver`` are not used.

    Returns:
        :class:`HybridTrajectory`.

    Raises:
        ValueError / EquinoxRuntimeError: bad ``ts``/``x0``/``z0``, or more events than allowed (a Zeno
            trajectory or a model that chatters), with the limit named.

    """
    params = model.params if params is None else params
    ts_np = np.asarray(ts, dtype=np.float64)
    if ts_np.ndim != 1 or ts_np.size < 2 or not np.all(np.diff(ts_np) > 0):
        raise ValueError(
            f"simulate_events ts: expected an increasing 1-D array of >= 2 times; received {ts_np!r}."
        )
    if max_events < 1 or max_events_per_interval < 1:
        raise ValueError(
            "simulate_events max_events / max_events_per_interval: expected >= 1; received "
            f"{max_events} / {max_events_per_interval}."
        )
    x0 = jnp.asarray(check_array("simulate_events x0", x0, (model.n_state,)))
    if z0 is None:
        z0 = model.initial_discrete_state(params)
    z0 = jnp.asarray(check_array("simulate_events z0", z0, (model.n_discrete,)), dtype=x0.dtype)
    if fixed_steps is not None and int(fixed_steps) < 1:
        raise ValueError(f"simulate_events fixed_steps: expected >= 1; received {fixed_steps}.")
    tsj = jnp.asarray(ts_np)
    stop = tsj[-1] if t_stop is None else jnp.asarray(t_stop, dtype=tsj.dtype)
    return _simulate(
        model,
        tsj,
        x0,
        z0,
        params,
        inputs,
        stop,
        rtol=rtol,
        atol=atol,
        event_tol=event_tol,
        max_events=max_events,
        max_events_per_interval=max_events_per_interval,
        max_steps=max_steps,
        solver=solver,
        fixed_steps=None if fixed_steps is None else int(fixed_steps),
    )


@eqx.filter_jit
def _simulate(
    model: AbstractModel,
    tsj: Any,
    x0: Any,
    z0: Any,
    params: Any,
    inputs: Callable[[Any], Any] | None,
    stop: Any,
    *,
    rtol: float,
    atol: float,
    event_tol: float,
    max_events: int,
    max_events_per_interval: int,
    max_steps: int,
    solver: Any,
    fixed_steps: int | None,
) -> HybridTrajectory:
    """:func:`simulate_events` after its checks, compiled once per model structure, options and shapes.

    The model's and the parameters' arrays, the times, the initial states and ``stop`` are traced; the
    rest (``inputs`` by identity, the tolerances and limits) is static, so repeated simulations of one
    model on new initial states or parameters reuse one program instead of tracing the scans anew.
    """
    u_fn: Callable[[Any], Any] = inputs if inputs is not None else (lambda t: jnp.zeros(model.n_input))
    if fixed_steps is not None:
        states, discrete, n, ev_t, ev_w = simulate_rk4(
            model,
            tsj,
            x0,
            z0,
            params,
            u_fn,
            stop,
            substeps=fixed_steps,
            max_events=max_events,
            max_pieces=max_events_per_interval + 1,
        )
        return _finish(model, tsj, states, discrete, n, ev_t, ev_w, max_events, u_fn, params)
    import diffrax  # adaptive solves only (0.15 s to import with optimistix)
    import optimistix as optx

    n_ev = model.n_events
    solver = diffrax.Tsit5() if solver is None else solver
    term = diffrax.ODETerm(lambda t, x, args: model.hybrid_vector_field(t, x, args[0], u_fn(t), args[1]))
    controller = diffrax.PIDController(rtol=rtol, atol=atol)
    event = None
    if n_ev > 0:

        def indicator(i: int) -> Callable[..., Any]:
            return lambda t, y, args, **kw: model.event_indicators(t, y, args[0], u_fn(t), args[1])[i]

        conds = tuple(indicator(i) for i in range(n_ev))
        event = diffrax.Event(conds, root_finder=optx.Newton(rtol=event_tol, atol=event_tol), direction=False)

    def solve_piece(t, x, z, t_next):
        """One solve from t to min(t_next, next time event), stopped early by a state event."""
        t_time = model.next_time_event(t, z, u_fn(t), params)
        # a time event within rounding of the save time is taken at the save time (e.g. 3 * 0.05 vs 0.15)
        t_time = jnp.where(
            jnp.abs(t_time - t_next) <= 1e-10 * jnp.maximum(1.0, jnp.abs(t_next)), t_next, t_time
        )
        t_end = jnp.minimum(t_next, t_time)
        sol = diffrax.diffeqsolve(
            term,
            solver,
            t0=t,
            t1=t_end,
            dt0=jnp.maximum(t_end - t, 1e-14),
            y0=x,
            args=(z, params),
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=controller,
            event=event,
            max_steps=max_steps,
        )
        if sol.ts is None or sol.ys is None:  # SaveAt(t1=True) saves both
            raise TwinferRuntimeError("internal: diffrax saved no end point of an event segment.")
        t_f, x_f = sol.ts[-1], sol.ys[-1]
        if n_ev > 0:
            which = jnp.stack(jax.tree_util.tree_leaves(sol.event_mask))
        else:
            which = jnp.zeros((0,), dtype=bool)
        return t_f, x_f, which, t_time

    def piece(carry, _):
        t, x, z, n, ev_t, ev_w, done, t_next = carry

        def advance(carry):
            t, x, z, n, ev_t, ev_w, done, t_next = carry
            t_f, x_f, which, t_time = solve_piece(t, x, z, t_next)
            state_hit = jnp.any(which)
            time_hit = jnp.logical_and(~state_hit, t_f >= t_time)
            if n_ev > 0:
                x_s, z_s = model.event_update(t_f, x_f, z, u_fn(t_f), params, which)
                x_f = jnp.where(state_hit, x_s, x_f)
                z_f = jnp.where(state_hit, z_s, z)
                slot = jnp.minimum(n, max_events - 1)
                ev_t = jnp.where(state_hit, ev_t.at[slot].set(t_f), ev_t)
                ev_w = jnp.where(state_hit, ev_w.at[slot].set(which), ev_w)
                n = n + state_hit.astype(n.dtype)
            else:
                z_f = z
            if model.has_time_events:
                x_t, z_t = model.time_event_update(t_f, x_f, z_f, u_fn(t_f), params)
                x_f = jnp.where(time_hit, x_t, x_f)
                z_f = jnp.where(time_hit, z_t, z_f)
            return t_f, x_f, z_f, n, ev_t, ev_w, t_f >= t_next, t_next

        return jax.lax.cond(done, lambda c: c, advance, carry), None

    def interval(carry, t_next):
        t, x, z, n, ev_t, ev_w = carry
        skip = t >= stop
        inner = (t, x, z, n, ev_t, ev_w, skip, t_next)
        (t_f, x, z, n, ev_t, ev_w, done, _), _ = jax.lax.scan(
            piece, inner, None, length=max_events_per_interval + 1
        )
        x = eqx.error_if(
            x,
            ~done,
            f"simulate_events: more than {max_events_per_interval} state events between two save "
            "times (max_events_per_interval); the trajectory chatters (Zeno) or the save grid is too "
            "coarse.",
        )
        t_f = jnp.where(skip, t_next, t_f)
        return (t_f, x, z, n, ev_t, ev_w), (x, z)

    init = event_carry(tsj, x0, z0, max_events, n_ev)
    (_, _, _, n, ev_t, ev_w), (xs, zs) = jax.lax.scan(interval, init, tsj[1:])
    states = jnp.concatenate([x0[None], xs])
    discrete = jnp.concatenate([z0[None], zs])
    return _finish(model, tsj, states, discrete, n, ev_t, ev_w, max_events, u_fn, params)


def _finish(
    model: AbstractModel,
    tsj: Any,
    states: Any,
    discrete: Any,
    n: Any,
    ev_t: Any,
    ev_w: Any,
    max_events: int,
    u_fn: Callable[[Any], Any],
    params: Any,
) -> HybridTrajectory:
    """Check the event count and evaluate the outputs on the saved states."""
    states = eqx.error_if(
        states,
        n > max_events,
        f"simulate_events: more than max_events = {max_events} state events; raise max_events or check "
        "the model for chattering (Zeno) behaviour.",
    )
    outputs = jax.vmap(lambda t, x, z: model.hybrid_output(t, x, z, u_fn(t), params))(tsj, states, discrete)
    return HybridTrajectory(tsj, states, discrete, outputs, ev_t, ev_w, n)
