"""Laplace preconditioning for NUTS: the posterior mode by Newton's method and a whitening factor.

For a posterior with hundreds of strongly correlated, badly scaled coordinates (a network's output layer
sampled beside physical parameters), a diagonal mass matrix leaves NUTS with tiny steps. Sampling
``xi`` with ``x = mode + L xi``, where ``L L^T`` is the inverse negative Hessian at the mode (the Laplace
approximation's covariance), is equivalent to a dense mass matrix fixed from the Hessian; the target is
unchanged (a linear change of variables has a constant Jacobian), so the draws are exact NUTS draws.

References:
    Betancourt, "A Conceptual Introduction to Hamiltonian Monte Carlo", arXiv:1701.02434, section 4.2
    (Euclidean metric as a linear transformation); Nocedal & Wright, Numerical Optimization, ch. 3.

"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float


class Whitening(NamedTuple):
    """``x = mode + factor @ xi``; ``factor @ factor.T`` is the inverse negative Hessian at the mode."""

    mode: Float[np.ndarray, " dim"]
    factor: Float[np.ndarray, "dim dim"]
    newton_steps: int


def laplace_whitening(
    logdensity: Callable[[Float[Array, " dim"]], Float[Array, ""]],
    x0: Float[ArrayLike, " dim"],
    *,
    max_steps: int = 20,
    tol: float = 1e-9,
) -> Whitening:
    """Newton's method to the mode of ``logdensity`` from ``x0``, then the whitening factor there.

    Each step solves with the eigen-decomposition of the Hessian, eigenvalues taken in absolute value
    (a descent step away from the mode too) and halved until the log-density rises.

    Args:
        logdensity: smooth log target on an unconstrained vector.
        x0: starting point (dim,).
        max_steps: Newton iterations at most.
        tol: stop when a step raises the log-density by less than this.

    Returns:
        :class:`Whitening`.

    Raises:
        ValueError: when the log-density is not finite at ``x0`` or the Hessian at the end is not
            negative definite (no mode found).

    """
    value = jax.jit(logdensity)
    grad = jax.jit(jax.grad(logdensity))
    hess = jax.jit(jax.hessian(logdensity))
    x = jnp.asarray(x0, dtype=jnp.float64)
    current = float(value(x))
    if not np.isfinite(current):
        raise ValueError("laplace_whitening x0: the log-density is not finite at the starting point.")
    steps = 0
    while steps < max_steps:
        steps += 1
        eig, vec = np.linalg.eigh(-np.asarray(hess(x)))
        g = np.asarray(grad(x))
        step = vec @ ((vec.T @ g) / np.maximum(np.abs(eig), 1e-12 * np.abs(eig).max()))
        size, improved = 1.0, False
        while size > 1e-6:
            trial = x + size * jnp.asarray(step)
            new = float(value(trial))
            if np.isfinite(new) and new >= current:
                improved = True
                break
            size /= 2
        if not improved:
            break
        x, gain, current = trial, new - current, new
        if gain < tol:
            break
    eig, vec = np.linalg.eigh(-np.asarray(hess(x)))
    if not eig.min() > 0:
        raise ValueError(
            f"laplace_whitening: expected a negative definite Hessian at the mode; smallest curvature "
            f"{eig.min():.3g} after {steps} Newton steps."
        )
    return Whitening(mode=np.asarray(x), factor=vec / np.sqrt(eig), newton_steps=steps)
