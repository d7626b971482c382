"""One explicit step of ``dx/dt = f(t, x)``: Euler, semi-implicit Euler, Heun, RK4; the package's only copies.

Every fixed-step integrator of twinfer calls these: :func:`twinfer.sim.discretise`, the event-aware
RK4 of :func:`twinfer.sim.simulate_events`, the graph subsystems built by :func:`twinfer.sim.graph_node`
and the grid clusters' Heun sigma points. The state ``x`` may be any pytree (an array, a tuple of phases
and frequencies, a list of per-group blocks); ``rhs`` returns a pytree of the same structure. The
arithmetic is written once, leaf by leaf, in the order below, so every caller gets the same rounding.

Heun also takes the two stages separately: ``rhs`` may be a pair ``(f_1, f_2)`` evaluated at the
predictor and the corrector stage, for a right-hand side whose exogenous terms differ by stage (the grid
clusters' out-of-cluster coupling read at each stage), and ``has_aux=True`` returns what each stage's
``rhs`` reported besides the derivative (the coupling a Jacobi exchange computed at that stage).

References:
    E. Hairer, S. P. Norsett, G. Wanner, Solving Ordinary Differential Equations I (2nd ed., 1993),
    Sec. II.1, Table 1.1 (Euler), 1.2 (Heun's trapezoidal predictor-corrector) and 1.3 (classic RK4);
    compositional-inference paper, SI (S79)-(S80) (Heun on the Kuramoto grid).

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

Rhs = Callable[[Any, Any], Any]


def _tree(op: Callable[..., Any], *trees: Any) -> Any:
    return jax.tree_util.tree_map(op, *trees)


def euler_step(rhs: Rhs, t: Any, x: Any, h: Any) -> Any:
    """One forward-Euler step ``x + h f(t, x)`` (Hairer et al., eq. II.1.1).

    Args:
        rhs: ``f(t, x)``, returning a pytree shaped like ``x``.
        t: time of ``x``.
        x: state (any pytree of arrays).
        h: step length.

    Returns:
        The state at ``t + h``.

    """
    return _tree(lambda xi, ki: xi + h * ki, x, rhs(t, x))


def semi_implicit_euler_step(rhs: Rhs, t: Any, x: Any, h: Any) -> Any:
    """One semi-implicit (symplectic) Euler step of a mechanical state ``x = [q, v]`` with ``dq/dt = v``.

        v' = v + h a(t, q, v),   q' = q + h v',

    where ``a`` is the second half of ``f(t, x)`` (the accelerations). Only for states whose first half
    are positions and second half their velocities.

    Args:
        rhs: ``f(t, x) = [v, a]``.
        t: time of ``x``.
        x: state ``[q, v]`` (2n,).
        h: step length.

    Returns:
        The state at ``t + h``.

    References:
        Hairer, Lubich & Wanner, Geometric Numerical Integration (2nd ed., 2006), eq. (I.1.10).

    """
    n = x.shape[-1] // 2
    v = x[n:] + h * rhs(t, x)[n:]
    return jnp.concatenate([x[:n] + h * v, v])


def _stage_functions(rhs: Rhs | Sequence[Rhs]) -> tuple[Rhs, Rhs]:
    if callable(rhs):
        return rhs, rhs
    if isinstance(rhs, Sequence) and len(rhs) == 2 and all(callable(f) for f in rhs):
        return rhs[0], rhs[1]
    raise TypeError(
        "heun_step rhs: expected a callable f(t, x) or a pair (f_predictor, f_corrector) of them; "
        f"received {type(rhs).__name__}."
    )


def heun_step(rhs: Rhs | Sequence[Rhs], t: Any, x: Any, h: Any, *, has_aux: bool = False) -> Any:
    """One Heun step: Euler predictor, trapezoidal corrector (S79-S80).

        k_1 = f_1(t, x),   x_p = x + h k_1,   k_2 = f_2(t + h, x_p),   x' = x + h/2 (k_1 + k_2).

    Args:
        rhs: ``f(t, x)`` for both stages, or a pair ``(f_1, f_2)``, one per stage.
        t: time of ``x``.
        x: state (any pytree of arrays).
        h: step length.
        has_aux: each stage function returns ``(derivative, aux)``; the step then returns
            ``(x', (aux_1, aux_2))``.

    Returns:
        The state at ``t + h`` (with the stages' aux when ``has_aux``).

    References:
        compositional-inference paper, SI (S79)-(S80); Hairer et al., Sec. II.1.

    """
    f_1, f_2 = _stage_functions(rhs)
    out_1 = f_1(t, x)
    k_1, aux_1 = out_1 if has_aux else (out_1, None)
    x_p = _tree(lambda xi, ki: xi + h * ki, x, k_1)
    out_2 = f_2(t + h, x_p)
    k_2, aux_2 = out_2 if has_aux else (out_2, None)
    x_next = _tree(lambda xi, a, b: xi + 0.5 * h * (a + b), x, k_1, k_2)
    return (x_next, (aux_1, aux_2)) if has_aux else x_next


def rk4_step(rhs: Rhs, t: Any, x: Any, h: Any) -> Any:
    """One step of the classic fourth-order Runge-Kutta method (Hairer et al., Table II.1.3).

        k_1 = f(t, x),             k_2 = f(t + h/2, x + h/2 k_1),
        k_3 = f(t + h/2, x + h/2 k_2),   k_4 = f(t + h, x + h k_3),
        x' = x + h/6 (k_1 + 2 k_2 + 2 k_3 + k_4).

    Args:
        rhs: ``f(t, x)``, returning a pytree shaped like ``x``.
        t: time of ``x``.
        x: state (any pytree of arrays).
        h: step length (may be traced: the event location differentiates through it).

    Returns:
        The state at ``t + h``.

    """
    half = 0.5 * h
    k_1 = rhs(t, x)
    k_2 = rhs(t + half, _tree(lambda xi, ki: xi + half * ki, x, k_1))
    k_3 = rhs(t + half, _tree(lambda xi, ki: xi + half * ki, x, k_2))
    k_4 = rhs(t + h, _tree(lambda xi, ki: xi + h * ki, x, k_3))
    return _tree(lambda xi, a, b, c, d: xi + h / 6.0 * (a + 2.0 * b + 2.0 * c + d), x, k_1, k_2, k_3, k_4)


UNROLL_SUBSTEPS = 4
"""Up to this many substeps :func:`substep_loop` writes the steps out (the compiler fuses them); above,
one ``jax.lax.fori_loop`` (a program whose size does not grow with the count: 60 unrolled RK4 steps
under an EKF's Jacobian compiled for minutes, issue #52)."""


def substep_loop(body: Callable[[Any, Any], Any], x: Any, substeps: int) -> Any:
    """``x = body(j, x)`` for ``j = 0 .. substeps - 1``: unrolled up to :data:`UNROLL_SUBSTEPS`, else a loop.

    Args:
        body: ``(j, x) -> x``, one substep (``j`` a Python int when unrolled, a traced int in the loop).
        x: the state (any pytree of arrays).
        substeps: a static count >= 1.

    """
    if substeps <= UNROLL_SUBSTEPS:
        for j in range(substeps):
            x = body(j, x)
        return x
    return jax.lax.fori_loop(0, substeps, body, x)
