"""Square-root factorisation and triangular solves for the small matrices of a PN filter step.

Under ``vmap`` over particles XLA on the CPU runs ``jnp.linalg.qr`` and triangular solves as one
LAPACK call per matrix of the batch, and for the 6x12 or 9x18 blocks of a 2- or 3-state ODE with
q = 2 that per-call cost dominates the step. Written out with a static Python loop (Householder
reflections on whole rows), the same arithmetic becomes a short chain of fused element-wise
operations over the batch (measured in ``twinfer bench pn``).

References:
    Golub & Van Loan, Matrix Computations (4th ed.), Alg. 5.2.1 (Householder QR) and 3.1.1
    (forward substitution).

"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp


def tria(a: Any) -> Any:
    """Lower-triangular ``L`` with ``L L^T = A A^T`` and a non-negative diagonal, for ``A`` (n, m), m >= n.

    Householder QR of ``A^T`` without forming ``Q``: reflection j zeroes column j of ``A^T`` below
    the diagonal. A zero column (a rank-deficient ``A``, e.g. after a zero-noise update) is left as
    is. Matches :func:`twinfer.infer.filters.tria` to rounding.
    """
    n, m = a.shape
    if m < n:
        raise ValueError(f"tria: expected a wide matrix (n, m) with m >= n; received shape {a.shape}.")
    r = a.T
    for j in range(n):
        x = r[j:, j]
        alpha = jnp.sqrt(jnp.sum(x**2))
        sign = jnp.where(x[0] >= 0, 1.0, -1.0)
        v = x.at[0].add(sign * alpha)
        vtv = jnp.sum(v**2)
        beta = jnp.where(vtv > 0, 2.0 / jnp.where(vtv > 0, vtv, 1.0), 0.0)
        w = v @ r[j:, j:]
        r = r.at[j:, j:].add(-beta * v[:, None] * w[None, :])
    low = jnp.tril(r[:n, :n].T)
    signs = jnp.where(jnp.diag(low) < 0, -1.0, 1.0)
    return low * signs[None, :]


def solve_lower(low: Any, b: Any) -> Any:
    """``low^{-1} b`` by forward substitution, for lower-triangular ``low`` (n, n) and ``b`` (n,)."""
    n = low.shape[-1]
    rows: list[Any] = []
    for i in range(n):
        acc = b[i] - sum((low[i, k] * rows[k] for k in range(i)), jnp.zeros_like(b[i]))
        rows.append(acc / low[i, i])
    return jnp.stack(rows)
