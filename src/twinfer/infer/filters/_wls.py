"""Weighted least squares, one step (WLS) or iterated to the minimiser (WNLS): the grid's static baselines.

The estimate at step k minimises ``J(x) = ||y - h(x)||^2_{R^-1} + ||x - x_bar||^2_{Q^-1}`` with
``x_bar = f(x_{k-1})``. WLS takes one Gauss-Newton step from the prediction; WNLS iterates damped
Gauss-Newton steps to the minimiser. Both report ``P = (Q^-1 + H^T R^-1 H)^-1`` formed afresh every step:
the previous step's uncertainty is never carried forward, which is what makes them "static": a component
that ``h`` does not see (the natural frequencies of the grid case) keeps its predicted value and a spread
of ``Q`` alone. Both share one information-form atom, :func:`_information`.

References:
    compositional-inference paper, SI section on the WLS/WNLS baselines (specs/compositional-inference.md
    3.5, "WLS step" and "WNLS"); Schweppe & Wildes (1970), Power system static-state estimation;
    Nocedal & Wright, Numerical Optimization (2nd ed.), sec. 10.3 (Gauss-Newton, Levenberg-Marquardt).

"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from twinfer.infer.filters._gaussian_filter import Innovation, Measurement, Transition
from twinfer.linalg import spd_inverse, spd_solve


class WlsStep(NamedTuple):
    """One WLS/WNLS step's estimate, its covariance ``(Q^-1 + H^T R^-1 H)^-1`` and a finiteness flag.

    ``iterations`` is the number of Gauss-Newton steps taken (1 for WLS).
    """

    mean: Float[Array, " n"]
    cov: Float[Array, "n n"]
    ok: Bool[Array, ""]
    iterations: Int[Array, ""] | None = None


def _inverse(cov: Any, name: str) -> Any:
    """The inverse of an SPD covariance (n, n), or the inverse variances (n,) of a diagonal one."""
    if jnp.ndim(cov) == 1:
        return 1.0 / cov
    if jnp.ndim(cov) != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(
            f"StaticStep {name}: expected a covariance (n, n) or its variances (n,); received "
            f"shape {jnp.shape(cov)}."
        )
    return spd_inverse(cov)


def _times(inv: Any, a: Any) -> Any:
    """``inv @ a`` for an inverse covariance given as a matrix or as the diagonal's entries."""
    if inv.ndim == 2:
        return inv @ a
    return (inv[:, None] if a.ndim == 2 else inv) * a


def _measure(h: Measurement | Any, x: Any, u: Any) -> tuple[Any, Any]:
    """``h(x)`` and ``dh/dx``: forward mode for a function, the matrix itself for a linear ``h``."""
    if callable(h):
        return h(x, u), jax.jacfwd(h)(x, u)
    matrix = jnp.asarray(h, dtype=x.dtype)  # linear: no Jacobian to trace (nor a product to fold)
    return matrix @ x, matrix


def _information(
    h: Measurement | Float[Array, "m n"],
    x: Float[Array, " n"],
    x_bar: Float[Array, " n"],
    q_inv: Float[Array, "n n"] | Float[Array, " n"],
    r_inv: Float[Array, "m m"] | Float[Array, " m"],
    u: Any,
    y: Float[Array, " m"],
    mask: Bool[Array, " m"],
    innovation: Innovation | None,
) -> tuple[Float[Array, "n n"], Float[Array, " n"]]:
    """Gauss-Newton normal equations of ``J`` at ``x``: precision ``Q^-1 + H^T R^-1 H`` and ``-grad J / 2``.

    ``-grad J / 2 = H^T R^-1 (y - h(x)) - Q^-1 (x - x_bar)`` with ``H = dh/dx`` at ``x`` (forward mode;
    the authors' code uses central differences). Masked measurements contribute nothing. Inverse
    covariances come as matrices or, for diagonal ones, as vectors; every inverse is an SPD one by
    Cholesky (:mod:`twinfer.linalg`: an LU here deadlocks XLA on 2 cores).
    """
    y_x, jac = _measure(h, x, u)
    jac = jac * mask[:, None].astype(x.dtype)
    y = jnp.where(mask, y, y_x)
    innov = y - y_x if innovation is None else innovation(y, y_x)
    weighted = _times(r_inv, jac).T  # H^T R^-1: products only, so a WNLS iteration factorises one matrix
    prior = jnp.diag(q_inv) if q_inv.ndim == 1 else q_inv
    return prior + weighted @ jac, weighted @ innov - _times(q_inv, x - x_bar)


class StaticStep(eqx.Module):
    """A static estimator's step, WLS or WNLS: predict with ``f``, then Gauss-Newton towards ``y``.

    WLS (``iterate=False``): one weighted Gauss-Newton step from the prediction,
    ``x = x_bar + (Q^-1 + H^T R^-1 H)^-1 H^T R^-1 (y - h(x_bar))`` with ``x_bar = f(mean, u)`` and
    ``H = dh/dx`` at ``x_bar`` (exact, by forward-mode differentiation, where the authors' code uses
    central differences); the covariance is the inverse precision at ``x_bar``.

    WNLS (``iterate=True``): damped Gauss-Newton to the minimiser of ``J``. From ``x_0 = x_bar``,
    ``x_{i+1} = x_i + (Q^-1 + H_i^T R^-1 H_i + damping I)^-1 (H_i^T R^-1 (y - h(x_i)) - Q^-1 (x_i -
    x_bar))`` with ``H_i = dh/dx`` at ``x_i``, until the step's Euclidean norm is below ``tol`` (that step
    is still taken) or after ``max_iter`` steps (a ``lax.while_loop``; vmapped, it runs until every member
    has stopped, each member's iterate frozen once it has). The covariance is ``(Q^-1 + H^T R^-1 H)^-1``
    at the solution. With a linear ``h`` the undamped first step is exact, so WNLS equals WLS up to the
    damping (a relative 1e-8 of the first step, removed by the second).

    Attributes:
        iterate: False: WLS; True: WNLS.
        damping: WNLS's Levenberg damping added to the precision's diagonal (the authors' 1e-8).
        max_iter: WNLS's largest number of Gauss-Newton steps (the authors' 5).
        tol: WNLS stops once a step's norm is below this (the authors' 1e-7).

    References:
        specs/compositional-inference.md 3.5, "WLS step" and "WNLS" (the authors' code, script 06);
        Nocedal & Wright, Numerical Optimization (2nd ed.), eqs. (10.23) and (10.31) (Gauss-Newton step;
        Levenberg).

    """

    iterate: bool = eqx.field(static=True, default=False)
    damping: float = eqx.field(static=True, default=1e-8)
    max_iter: int = eqx.field(static=True, default=5)
    tol: float = eqx.field(static=True, default=1e-7)

    def __check_init__(self) -> None:
        if self.max_iter < 1:
            raise ValueError(
                f"StaticStep max_iter: expected at least 1 Gauss-Newton step; received {self.max_iter}."
            )

    def __call__(
        self,
        f: Transition,
        h: Measurement | Float[Array, "m n"],
        mean: Float[Array, " n"],
        q: Float[Array, "n n"] | Float[Array, " n"],
        r: Float[Array, "m m"] | Float[Array, " m"],
        u: Float[ArrayLike, " n_u"],
        y: Float[Array, " m"],
        mask: Bool[Array, " m"],
        *,
        innovation: Innovation | None = None,
    ) -> WlsStep:
        """One step from the previous estimate ``mean`` (pure; vmaps over subsystems).

        Args:
            f: transition ``(x, u) -> x_next``.
            h: measurement ``(x, u) -> y``, or a matrix (m, n) for a linear one (then its own Jacobian).
            mean: previous estimate (n,).
            q: process-noise covariance (n, n), the prior weight of the prediction, or its variances (n,)
                when it is diagonal (inverted element-wise, no factorisation).
            r: measurement-noise covariance (m, m), or its variances (m,) when it is diagonal.
            u: input of this step.
            y: measurement (m,); entries with ``mask`` False are ignored.
            mask: boolean (m,).
            innovation: ``(y, y_pred) -> residual`` (a wrapped difference for angles), default
                ``y - y_pred``.

        Returns:
            :class:`WlsStep`, with ``iterations`` the Gauss-Newton steps taken (1 for WLS).

        """
        x_bar = f(mean, u)
        q_inv, r_inv = _inverse(q, "q"), _inverse(r, "r")

        def info(x: Any) -> tuple[Any, Any]:
            return _information(h, x, x_bar, q_inv, r_inv, u, y, mask, innovation)

        if not self.iterate:
            precision, rhs = info(x_bar)
            cov = spd_inverse(precision)
            x, iterations = x_bar + cov @ rhs, jnp.ones((), jnp.int32)
        else:
            eye = jnp.eye(x_bar.shape[0], dtype=x_bar.dtype)

            def cond(carry: Any) -> Any:
                _, i, done = carry
                return (i < self.max_iter) & ~done

            def body(carry: Any) -> Any:
                x, i, _ = carry
                precision, rhs = info(x)
                delta = spd_solve(precision + self.damping * eye, rhs)
                return x + delta, i + 1, ~(jnp.linalg.norm(delta) >= self.tol)  # a NaN step stops too

            start = (x_bar, jnp.zeros((), jnp.int32), jnp.array(False))
            x, iterations, _ = jax.lax.while_loop(cond, body, start)
            cov = spd_inverse(info(x)[0])
        ok = jnp.all(jnp.isfinite(x)) & jnp.all(jnp.isfinite(cov))
        return WlsStep(x, cov, ok, iterations)


wls_step = StaticStep()
"""WLS: one weighted Gauss-Newton step from the prediction (:class:`StaticStep`)."""
wnls_step = StaticStep(iterate=True)
"""WNLS: damped Gauss-Newton to the minimiser, the authors' settings (:class:`StaticStep`)."""
STATIC_STEPS = {"wls": wls_step, "wnls": wnls_step}
"""The static estimators by the name a :class:`~twinfer.infer.graph.Subsystem` gives as its ``estimator``."""
