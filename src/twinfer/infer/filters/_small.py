"""Cholesky factorisation and solves for small matrices, written out element by element.

Under ``vmap`` over many independent systems, XLA on the CPU runs ``jnp.linalg.cholesky`` and
triangular solves as one LAPACK call per matrix of the batch; for the 3x3 innovation covariance and the
10x10 state covariance of a typical subsystem that per-call cost dominates a UKF step (profiled in
``twinfer bench filters``). Written out with a static Python loop, the same arithmetic becomes a handful
of fused element-wise operations over the whole batch. Above :data:`UNROLL_MAX` the LAPACK routines are
used: unrolling the 10x10 state covariance too made the batched filter faster but a single filter two
times slower (each scalar operation then runs on its own), so only the innovation covariance of a few
sensors is written out. The results agree to rounding either way.

References:
    Golub & Van Loan, Matrix Computations (4th ed.), Alg. 4.2.1 (Cholesky) and 3.1.1-3.1.2
    (forward and back substitution).

"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

UNROLL_MAX = 4
"""Largest dimension factorised and solved element by element; larger ones go to LAPACK."""


def cholesky(a: Any) -> Any:
    """Lower Cholesky factor of a symmetric positive-definite matrix (NaN where it is not)."""
    n = a.shape[-1]
    if n > UNROLL_MAX:
        return jnp.linalg.cholesky(a)
    low: list[list[Any]] = [[None] * n for _ in range(n)]
    for j in range(n):
        diag = a[j, j] - sum((low[j][k] ** 2 for k in range(j)), jnp.zeros_like(a[j, j]))
        d = jnp.sqrt(diag)
        low[j][j] = d
        for i in range(j + 1, n):
            off = a[i, j] - sum((low[i][k] * low[j][k] for k in range(j)), jnp.zeros_like(a[i, j]))
            low[i][j] = off / d
    zero = jnp.zeros_like(a[0, 0])
    return jnp.stack([jnp.stack([low[i][j] if j <= i else zero for j in range(n)]) for i in range(n)])


def solve_lower(low: Any, b: Any) -> Any:
    """``low^{-1} b`` for lower-triangular ``low`` (n, n) and ``b`` (n,) or (n, k)."""
    n = low.shape[-1]
    if n > UNROLL_MAX:
        return jax.scipy.linalg.solve_triangular(low, b, lower=True)
    rows: list[Any] = []
    for i in range(n):
        acc = b[i] - sum((low[i, k] * rows[k] for k in range(i)), jnp.zeros_like(b[i]))
        rows.append(acc / low[i, i])
    return jnp.stack(rows)


def solve_upper_t(low: Any, b: Any) -> Any:
    """``low^{-T} b`` for lower-triangular ``low`` (back substitution on its transpose)."""
    n = low.shape[-1]
    if n > UNROLL_MAX:
        return jax.scipy.linalg.solve_triangular(low, b, lower=True, trans="T")
    rows: list[Any] = [None] * n
    for i in reversed(range(n)):
        acc = b[i] - sum((low[k, i] * rows[k] for k in range(i + 1, n)), jnp.zeros_like(b[i]))
        rows[i] = acc / low[i, i]
    return jnp.stack(rows)


def cho_solve(low: Any, b: Any) -> Any:
    """``A^{-1} b`` given the lower Cholesky factor ``low`` of ``A``."""
    return solve_upper_t(low, solve_lower(low, b))
