"""Two-mass segments of a spring-damper chain as graph subsystems (the S1/S2 partition of eq. S20-S21).

A segment holds masses (a, b) joined by an internal spring-damper (k, c), optionally tied to ground by
(kg, cg) at mass a, with state [x_a, x_b, v_a, v_b] (+ [k] when the internal stiffness is unknown and
augmented, section 2.4). Interface forces arrive as the message vector m = [force on a, force on b].
The interface law between segments is the spring-damper force the sender exerts on the receiver,
F = k (x_s - x_r) + c (v_s - v_r) (eq. S24-S26), identical in both directions.

References:
    Ghorbani & Hackl, SI eq. (S20-S26); specs/compositional-inference.md section 3.1.

"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp


def segment_accel(x: Any, u: Any, m: Any, p: Any) -> Any:
    """Accelerations [a_a, a_b] of a segment; the internal stiffness is x[4] when augmented."""
    k = x[4] if x.shape[0] == 5 else p["k"]
    xa, xb, va, vb = x[0], x[1], x[2], x[3]
    inner = k * (xa - xb) + p["c"] * (va - vb)
    fa = u[0] + m[0] - p["kg"] * xa - p["cg"] * va - inner
    fb = u[1] + m[1] + inner
    return jnp.stack([fa / p["ma"], fb / p["mb"]])


def _vector_field(x: Any, u: Any, m: Any, p: Any) -> Any:
    acc = segment_accel(x, u, m, p)
    return jnp.concatenate([x[2:4], acc, jnp.zeros(x.shape[0] - 4, x.dtype)])


@functools.cache
def segment_transition(method: str) -> Callable[..., Any]:
    """Transition over one step dt = p['dt'] with the input and message held: euler, heun or rk4."""

    def transition(x: Any, u: Any, m: Any, p: Any) -> Any:
        h = p["dt"]
        f = lambda z: _vector_field(z, u, m, p)  # noqa: E731
        if method == "euler":
            return x + h * f(x)
        if method == "heun":
            k1 = f(x)
            return x + 0.5 * h * (k1 + f(x + h * k1))
        if method == "rk4":
            k1 = f(x)
            k2 = f(x + 0.5 * h * k1)
            k3 = f(x + 0.5 * h * k2)
            k4 = f(x + h * k3)
            return x + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        raise ValueError(f"segment_transition method: expected euler, heun or rk4; received {method!r}.")

    return transition


@functools.cache
def segment_output(sensed: tuple[int, ...]) -> Callable[..., Any]:
    """Measured accelerations of the segment's masses ``sensed`` (local indices 0, 1)."""
    idx = jnp.asarray(sensed, dtype=int)

    def output(x: Any, u: Any, m: Any, p: Any) -> Any:
        return segment_accel(x, u, m, p)[idx]

    return output


def spring_damper_law(s_send: Any, s_recv: Any, gamma: Any) -> Any:
    """F = k (x_s - x_r) + c (v_s - v_r) with gamma = [k, c] (eq. S24); ports are [x, v]."""
    d = s_send - s_recv
    return jnp.atleast_1d(gamma[0] * d[0] + gamma[1] * d[1])


def segment_params(
    ma: float, mb: float, k: float, c: float, kg: float, cg: float, dt: float
) -> dict[str, Any]:
    return {
        "ma": jnp.asarray(ma),
        "mb": jnp.asarray(mb),
        "k": jnp.asarray(k),
        "c": jnp.asarray(c),
        "kg": jnp.asarray(kg),
        "cg": jnp.asarray(cg),
        "dt": jnp.asarray(dt),
    }
