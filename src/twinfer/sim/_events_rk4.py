"""Fixed-step hybrid simulation: classic RK4 sub-steps in one ``lax.scan`` with event localisation.

The training path of :func:`twinfer.sim.simulate_events` (``fixed_steps=m``): every save interval is
split into ``m`` equal RK4 steps (:func:`twinfer.sim.rk4_step`). A step that would carry an event
indicator from + to - (or pass the next time event) is cut at the event: the crossing time ``tau`` solves
``c_i(RK4(x, tau)) = 0`` by Newton iterations on the step map itself (so the located state is exactly the
one integrated to), the update is applied and the rest of the step is integrated from the new state. The
Newton iterates are held constant for differentiation and one final Newton step is taken on live values,
so ``d tau = -(dc_i / dp) / (dc_i / dtau)``: the implicit-function derivative of the event time, which is
what carries gradients through bounces.

Compared with one adaptive diffrax solve per interval, the fixed step has no step-size controller,
no while loop and no root-finder loop, so differentiation is through a plain scan (the hot path of
training). Measured on experiment 1, topology P, full horizon, loaded 2-core CPU: reverse-mode gradient
0.25 s CPU adaptive vs 0.14 s fixed-step, 0.075 s with forward mode; compile about 4 times faster.

References:
    Thummerer & Mikelsons, model-combination paper, eqs. (2)-(6); specs 1.4 (event location) and 3.5
    (the authors' solver is Tsit5 at tolerances 1e-3 / 1e-6; a fixed 2.5 ms RK4 step is more accurate
    than that on experiment 1).

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from twinfer.models import AbstractModel
from twinfer.sim._steps import rk4_step


def simulate_rk4(
    model: AbstractModel,
    tsj: Any,
    x0: Any,
    z0: Any,
    params: Any,
    u_fn: Callable[[Any], Any],
    stop: Any,
    *,
    substeps: int,
    max_events: int,
    max_pieces: int,
    newton_iters: int = 4,
) -> tuple[Any, Any, Any, Any, Any]:
    """Fixed-step simulation on the grid ``tsj``; returns ``(states, discrete, n, event_times, which)``.

    Args:
        model: the hybrid model.
        tsj: save grid (T,).
        x0: initial continuous state.
        z0: initial discrete state.
        params: parameters.
        u_fn: input signal ``u(t)``.
        stop: time after which the state is held (training horizon).
        substeps: RK4 steps per save interval.
        max_events: most state events in the whole run (event log length).
        max_pieces: most pieces per RK4 step (1 + events and time events in one step).
        newton_iters: Newton iterations of the event-time location.

    Returns:
        States and discrete states at ``tsj`` (right limits), the event count, the event times and
        which indicators fired at each.

    """
    n_ev = model.n_events

    def field(z: Any) -> Callable[[Any, Any], Any]:
        return lambda t, x: model.hybrid_vector_field(t, x, z, u_fn(t), params)

    def indicators(t: Any, x: Any, z: Any) -> Any:
        return model.event_indicators(t, x, z, u_fn(t), params)

    def locate(t: Any, x: Any, z: Any, h: Any, c0: Any, c1: Any, crossed: Any) -> tuple[Any, Any]:
        """Earliest crossing time in (0, h] and the indicators that fire there."""

        def g(tau: Any, i: Any, t: Any, x: Any, p: Any) -> Any:
            f = lambda s, y: model.hybrid_vector_field(s, y, z, u_fn(s), p)  # noqa: E731
            return model.event_indicators(t + tau, rk4_step(f, t, x, tau), z, u_fn(t + tau), p)[i]

        def newton(tau: Any, i: Any, t: Any, x: Any, p: Any) -> Any:
            value, slope = jax.jvp(lambda s: g(s, i, t, x, p), (tau,), (jnp.ones_like(tau),))
            return value, jnp.where(slope == 0, -1.0, slope)

        sg = jax.lax.stop_gradient
        t_c, x_c, p_c, h_c = sg(t), sg(x), sg(params), sg(h)

        def one(i: Any, a: Any, b: Any) -> Any:
            guess = h_c * a / jnp.where(a - b == 0, 1.0, a - b)

            def body(_: Any, tau: Any) -> Any:
                value, slope = newton(tau, i, t_c, x_c, p_c)
                return jnp.clip(tau - value / slope, 0.0, h_c)

            tau = jax.lax.fori_loop(0, newton_iters, body, jnp.clip(guess, 0.0, h_c))
            return tau, newton(tau, i, t_c, x_c, p_c)[1]

        taus, slopes = jax.vmap(one)(jnp.arange(n_ev), sg(c0), sg(c1))
        taus = jnp.where(crossed, taus, jnp.inf)
        first = jnp.argmin(taus)
        tau = taus[first]
        which = crossed & (taus <= tau + 1e-12 * jnp.maximum(1.0, h_c))
        # one live Newton step of the first indicator: its derivative is the implicit-function
        # derivative of the event time, d tau = -(dc/dp) / (dc/dtau)
        tau = tau - g(tau, first, t, x, params) / slopes[first]
        return tau, which

    def advance(carry: Any) -> Any:
        """One piece: RK4 from t to the step end or the next time event, cut at a state event."""
        t, x, z, n, ev_t, ev_w, t_end = carry
        t_time = model.next_time_event(t, z, u_fn(t), params)
        t_time = jnp.where(jnp.abs(t_time - t_end) <= 1e-10 * jnp.maximum(1.0, jnp.abs(t_end)), t_end, t_time)
        t_to = jnp.minimum(t_end, t_time)
        h = t_to - t
        f = field(z)
        x1 = rk4_step(f, t, x, h)
        if n_ev > 0:
            c0, c1 = indicators(t, x, z), indicators(t_to, x1, z)
            crossed = (c0 > 0) & (c1 <= 0)
            state_hit = jnp.any(crossed)

            def hit(_: Any) -> Any:
                tau, which = locate(t, x, z, h, c0, c1, crossed)
                x_e = rk4_step(f, t, x, tau)
                x_s, z_s = model.event_update(t + tau, x_e, z, u_fn(t + tau), params, which)
                return t + tau, x_s, z_s, which

            def miss(_: Any) -> Any:
                return t_to, x1, z, jnp.zeros((n_ev,), dtype=bool)

            t_f, x_f, z_f, which = jax.lax.cond(state_hit, hit, miss, None)
            slot = jnp.minimum(n, max_events - 1)
            ev_t = jnp.where(state_hit, ev_t.at[slot].set(t_f), ev_t)
            ev_w = jnp.where(state_hit, ev_w.at[slot].set(which), ev_w)
            n = n + state_hit.astype(n.dtype)
        else:
            state_hit = jnp.asarray(False)
            t_f, x_f, z_f = t_to, x1, z
        if model.has_time_events:
            time_hit = ~state_hit & (t_to >= t_time)
            x_t, z_t = model.time_event_update(t_f, x_f, z_f, u_fn(t_f), params)
            x_f = jnp.where(time_hit, x_t, x_f)
            z_f = jnp.where(time_hit, z_t, z_f)
        return t_f, x_f, z_f, n, ev_t, ev_w, t_end

    def piece(carry: Any, _: Any) -> tuple[Any, None]:
        return jax.lax.cond(carry[0] >= carry[6], lambda c: c, advance, carry), None

    def step(carry: Any, t_end: Any) -> tuple[Any, None]:
        # the first piece always runs (t < t_end at the start of a step); the further pieces only
        # after an event cut the step short, so an event-free step costs one RK4 step and no loop
        t, x, z, n, ev_t, ev_w, short = carry
        first = advance((t, x, z, n, ev_t, ev_w, t_end))
        if max_pieces > 1:
            first = jax.lax.cond(
                first[0] < t_end,
                lambda c: jax.lax.scan(piece, c, None, length=max_pieces - 1)[0],
                lambda c: c,
                first,
            )
        t, x, z, n, ev_t, ev_w, _ = first
        return (t_end, x, z, n, ev_t, ev_w, short | (t < t_end)), None

    def interval(carry: Any, bounds: Any) -> tuple[Any, Any]:
        t0, t1 = bounds

        def run(c: Any) -> Any:
            if substeps == 1:
                return step(c, t1)[0]
            ends = t0 + (t1 - t0) * jnp.arange(1, substeps + 1) / substeps
            return jax.lax.scan(step, c, ends.at[-1].set(t1))[0]

        def hold(c: Any) -> Any:
            return (t1, *c[1:])

        carry = jax.lax.cond(t0 >= stop, hold, run, carry)
        return carry, (carry[1], carry[2])

    init = (
        tsj[0],
        x0,
        z0,
        jnp.asarray(0, dtype=jnp.int32),
        jnp.full((max_events,), jnp.inf, dtype=tsj.dtype),
        jnp.zeros((max_events, n_ev), dtype=bool),
        jnp.asarray(False),
    )
    (_, _, _, n, ev_t, ev_w, short), (xs, zs) = jax.lax.scan(interval, init, (tsj[:-1], tsj[1:]))
    xs = eqx.error_if(
        xs,
        short,
        f"simulate_events: more than {max_pieces - 1} events inside one fixed step "
        "(max_events_per_interval); the trajectory chatters (Zeno) or fixed_steps is too small.",
    )
    return (
        jnp.concatenate([x0[None], xs]),
        jnp.concatenate([z0[None], zs]),
        n,
        ev_t,
        ev_w,
    )
