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


def _householder(r: Any, j: int) -> Any:
    """Reflection j of a Householder QR of ``r`` (m, n): zero column j below the diagonal, in place."""
    x = r[j:, j]
    alpha = jnp.sqrt(jnp.sum(x**2))
    sign = jnp.where(x[0] >= 0, 1.0, -1.0)
    v = x.at[0].add(sign * alpha)
    vtv = jnp.sum(v**2)
    beta = jnp.where(vtv > 0, 2.0 / jnp.where(vtv > 0, vtv, 1.0), 0.0)
    w = v @ r[j:, j:]
    return r.at[j:, j:].add(-beta * v[:, None] * w[None, :])


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
        r = _householder(r, j)
    low = jnp.tril(r[:n, :n].T)
    signs = jnp.where(jnp.diag(low) < 0, -1.0, 1.0)
    return low * signs[None, :]


def tria_scalar(a: Any) -> Any:
    """:func:`tria` with every matrix entry a separate array: for the ``(q+1) x 2(q+1)`` blocks.

    The same reflections as :func:`tria`, written on a nested list of entries, so that under ``vmap``
    over particles every operation is element-wise over the particles with nothing sliced or
    scattered; for the 3 x 6 blocks of the block-diagonal filter this is about 1.5 times faster on
    the CPU than the row form (``twinfer bench pn``). Equal to :func:`tria` to rounding (sums are
    taken in another order).
    """
    n, m = a.shape
    if m < n:
        raise ValueError(f"tria_scalar: expected a wide matrix (n, m) with m >= n; received shape {a.shape}.")
    r = [[a[j, i] for j in range(n)] for i in range(m)]  # r = A^T, entry by entry
    for j in range(n):
        x = [r[i][j] for i in range(j, m)]
        alpha = jnp.sqrt(sum(xi * xi for xi in x))
        v = [x[0] + jnp.where(x[0] >= 0, 1.0, -1.0) * alpha, *x[1:]]
        vtv = sum(vi * vi for vi in v)
        beta = jnp.where(vtv > 0, 2.0 / jnp.where(vtv > 0, vtv, 1.0), 0.0)
        for k in range(j, n):
            w = beta * sum(v[i - j] * r[i][k] for i in range(j, m))
            for i in range(j, m):
                r[i][k] = r[i][k] - v[i - j] * w
    zero = jnp.zeros_like(r[0][0])
    low = jnp.stack([jnp.stack([r[k][i] if k <= i else zero for k in range(n)]) for i in range(n)])
    signs = jnp.where(jnp.diag(low) < 0, -1.0, 1.0)
    return low * signs[None, :]


def tria_rows(a: Any, k: int) -> Any:
    """``A Theta`` for an orthogonal ``Theta`` that makes the first ``k`` rows lower-triangular.

    The first ``k`` reflections of :func:`tria` only: for ``A = [[A11, A12], [A21, A22]]`` with ``k``
    top rows the result is ``[[T, 0], [G, B]]`` with ``T`` (k, k) lower-triangular with a non-negative
    diagonal, ``T T^T = A1 A1^T``, ``G T^T = A2 A1^T`` and ``G G^T + B B^T = A2 A2^T``. For the block
    of a square-root update, ``T`` is the innovation factor, ``G`` the gain factor and ``B`` a
    (square, not triangular) factor of the updated covariance: the remaining reflections of a full
    ``tria`` would only re-triangularise ``B`` (Golub & Van Loan, Alg. 5.2.1 stopped after k steps).
    """
    n, m = a.shape
    if not 0 < k <= min(n, m):
        raise ValueError(f"tria_rows k: expected 1..{min(n, m)} for shape {a.shape}; received {k}.")
    r = a.T
    for j in range(k):
        r = _householder(r, j)
    out = r.T
    top = out[:k, :k]
    signs = jnp.where(jnp.diag(top) < 0, -1.0, 1.0)
    first = jnp.concatenate([jnp.tril(top), out[k:, :k]], axis=0) * signs[None, :]
    return jnp.concatenate([first, out[:, k:].at[:k].set(0.0)], axis=1)


def solve_lower(low: Any, b: Any) -> Any:
    """``low^{-1} b`` by forward substitution, for lower-triangular ``low`` (n, n) and ``b`` (n,)."""
    n = low.shape[-1]
    rows: list[Any] = []
    for i in range(n):
        acc = b[i] - sum((low[i, k] * rows[k] for k in range(i)), jnp.zeros_like(b[i]))
        rows.append(acc / low[i, i])
    return jnp.stack(rows)
