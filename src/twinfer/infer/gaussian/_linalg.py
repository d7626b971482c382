"""Small-matrix linear algebra of the Gaussian core: Cholesky, triangular solves and ``tria``.

Under ``vmap`` over many subsystems or particles, XLA on the CPU runs ``jnp.linalg.cholesky``, QR and
triangular solves as one library call per matrix of the batch; for the 3x3 innovation covariance of a
few sensors, or the 6x12 blocks of a probabilistic ODE solver, that per-call cost dominates a filter
step. Written out with a static Python loop, the same arithmetic becomes a short chain of fused
element-wise operations over the whole batch. Each function picks its kernel by the matrix size:

* :func:`cholesky` and the solves are written out element by element up to :data:`UNROLL_MAX`
  (above it, a single 10x10 factor unrolled costs more than the library call it replaces);
* :func:`tria` uses Householder reflections on whole rows up to :data:`HOUSEHOLDER_MAX` rows under
  ``vmap`` and QR (``jnp.linalg.qr``, one LAPACK call) otherwise: the written-out reflections fuse
  across a batch, while on one matrix of more than :data:`UNROLL_MAX` rows the library call is faster
  (24 x 48 inside a scan: 15 against 37 us; 4 x 8: 2.6 against 1.7 us, so up to 4 rows reflections).
  The choice is made when the function is batched (``jax.custom_batching.custom_vmap``); derivatives of
  either go through the reflections (a ``custom_jvp``), so forward and reverse mode, Hessians and their
  batches all work. :func:`tria_scalar` writes every entry out, for the ``(q+1) x
  2(q+1)`` blocks of the block-diagonal ODE filter; :func:`tria_rows` stops after the first ``k``
  reflections, which is all a square-root update needs.

The results agree to rounding whichever kernel runs (``tests/test_gaussian_core.py``).

References:
    Golub & Van Loan, Matrix Computations (4th ed.), Alg. 4.2.1 (Cholesky), 3.1.1-3.1.2 (forward and
    back substitution) and 5.2.1 (Householder QR).

"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

UNROLL_MAX = 4
"""Largest dimension factorised and solved element by element; larger ones go to the library routine."""

HOUSEHOLDER_MAX = 32
"""Most rows :func:`tria` triangularises by written-out Householder reflections; more go to QR."""


def cholesky(a: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """Lower Cholesky factor of a symmetric positive-definite matrix (NaN where it is not)."""
    n = a.shape[-1]
    if n == 0 or n > UNROLL_MAX:  # the empty factor of no sensors is the library's too
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


def solve_lower(low: Float[Array, "n n"], b: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
    """``low^{-1} b`` for lower-triangular ``low`` (n, n) and ``b`` (n,) or (n, k)."""
    n = low.shape[-1]
    if n > UNROLL_MAX:
        return jax.scipy.linalg.solve_triangular(low, b, lower=True)
    rows: list[Any] = []
    for i in range(n):
        acc = b[i] - sum((low[i, k] * rows[k] for k in range(i)), jnp.zeros_like(b[i]))
        rows.append(acc / low[i, i])
    return jnp.stack(rows)


def solve_upper_t(low: Float[Array, "n n"], b: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
    """``low^{-T} b`` for lower-triangular ``low`` (back substitution on its transpose)."""
    n = low.shape[-1]
    if n > UNROLL_MAX:
        return jax.scipy.linalg.solve_triangular(low, b, lower=True, trans="T")
    rows: list[Any] = [None] * n
    for i in reversed(range(n)):
        acc = b[i] - sum((low[k, i] * rows[k] for k in range(i + 1, n)), jnp.zeros_like(b[i]))
        rows[i] = acc / low[i, i]
    return jnp.stack(rows)


def cho_solve(low: Float[Array, "n n"], b: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
    """``A^{-1} b`` given the lower Cholesky factor ``low`` of ``A``."""
    return solve_upper_t(low, solve_lower(low, b))


def _householder(r: Any, j: int) -> Any:
    """Reflection j of a Householder QR of ``r`` (m, n): zero column j below the diagonal.

    Written on the whole array with the rows above j masked out, not on the shrinking block
    ``r[j:, j:]``: every reflection then has the same shape, which XLA fuses into a few loops over the
    batch under ``vmap`` (about 1.4 times faster on a batch of 15 x 31 blocks than slicing after every
    reflection, same numbers: the masked entries are exact zeros). :func:`_reflect` slices after every
    :data:`REFLECTION_BLOCK` reflections instead, which is faster than either.
    """
    below = jnp.arange(r.shape[0]) >= j
    x = jnp.where(below, r[:, j], 0.0)
    alpha = jnp.sqrt(jnp.sum(x**2))
    sign = jnp.where(x[j] >= 0, 1.0, -1.0)
    v = x.at[j].add(sign * alpha)
    vtv = jnp.sum(v**2)
    beta = jnp.where(vtv > 0, 2.0 / jnp.where(vtv > 0, vtv, 1.0), 0.0)
    w = jnp.where(jnp.arange(r.shape[1]) >= j, v @ r, 0.0)
    return r - beta * v[:, None] * w[None, :]


def _positive_diagonal(low: Any) -> Any:
    signs = jnp.where(jnp.diag(low) < 0, -1.0, 1.0)
    return low * signs[None, :]


REFLECTION_BLOCK = 4
"""Reflections applied to one array before the finished rows are sliced off (:func:`_reflect`)."""


def _reflect(a: Any, k: int) -> tuple[Any, Any]:
    """The first ``k`` Householder reflections of a QR of ``a^T`` (``a`` is (n, m), ``n, m >= k``).

    Returns the first ``k`` rows of ``R`` (k, n) and the trailing block ``R[k:, k:]`` (m - k, n - k)
    still to be reduced. Reflections are applied to the whole array, masked, in blocks of
    :data:`REFLECTION_BLOCK`; after each block its finished rows and columns are sliced off. That keeps
    each reflection's shape fixed for XLA to fuse across a batch (:func:`_householder`) while skipping
    most of the finished part: 1.2-1.6 times faster under ``vmap`` than masking the whole array for all
    ``k`` (10 x 20 to 25 x 53 blocks, batches of 100), the same numbers to rounding.
    """
    r = a.T
    done = []
    j = 0
    while j < k:
        b = min(REFLECTION_BLOCK, k - j)
        for i in range(b):
            r = _householder(r, i)
        done.append(jnp.pad(r[:b], ((0, 0), (j, 0))))  # rows j..j+b of R, over all n columns
        r = r[b:, b:]
        j += b
    return jnp.concatenate(done, axis=0), r


def _tria_reflections(a: Any) -> Any:
    """:func:`tria` by Householder reflections written out on whole rows (``a`` at least as wide as tall)."""
    top, _ = _reflect(a, a.shape[0])
    return _positive_diagonal(jnp.tril(top.T))


def _tria_library(a: Any) -> Any:
    """:func:`tria` by one ``jnp.linalg.qr`` of ``a^T`` (LAPACK on the CPU)."""
    _, r = jnp.linalg.qr(a.T, mode="reduced")
    return _positive_diagonal(r.T)


def by_batching(one: Any, many: Any) -> Any:
    """``one(*arrays)`` on single arrays, ``many`` mapped under ``vmap``; derivatives (any mode) of ``many``.

    For kernels whose best form depends on batching: a library call on one matrix, written-out
    arithmetic that fuses across a batch (``jax.custom_batching.custom_vmap``, which has no derivative
    rules of its own, inside a ``custom_jvp``). ``one`` and ``many`` must agree to rounding. When none of
    the arrays is batched, ``one`` runs, once for the whole batch.
    """

    @jax.custom_batching.custom_vmap
    def chosen(*arrays: Any) -> Any:
        return one(*arrays)

    @chosen.def_vmap
    def batched(axis_size: int, in_batched: Any, *arrays: Any) -> tuple[Any, Any]:
        arrays = tuple(
            a if is_batched else jnp.broadcast_to(a, (axis_size, *a.shape))
            for a, is_batched in zip(arrays, in_batched, strict=True)
        )
        out = jax.vmap(many)(*arrays)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    @jax.custom_jvp
    def kernel(*arrays: Any) -> Any:
        return chosen(*arrays)

    @kernel.defjvp
    def kernel_jvp(primals: Any, tangents: Any) -> Any:
        return jax.jvp(many, primals, tangents)

    return kernel


_tria_small = by_batching(_tria_library, _tria_reflections)
"""The library QR on one matrix, the reflections under ``vmap``; derivatives of the reflections."""


def tria(a: Float[Array, "n m"]) -> Float[Array, "n n"]:
    """Lower-triangular ``L`` with ``L L^T = A A^T`` and a non-negative diagonal (``A`` is (n, m)).

    Covariances are added in square-root form by triangularising stacked factors:
    ``tria([L_1, L_2])`` is a factor of ``L_1 L_1^T + L_2 L_2^T``. Up to :data:`HOUSEHOLDER_MAX` rows
    under ``vmap`` this is a Householder QR of ``A^T`` written out on whole rows (without forming ``Q``;
    a zero column, e.g. after a zero-noise update, is left as is); above, or on a single matrix,
    ``jnp.linalg.qr``. A matrix narrower than it is tall is padded with zero columns.
    """
    n, m = a.shape
    if m < n:
        a = jnp.concatenate([a, jnp.zeros((n, n - m), a.dtype)], axis=1)
        m = n
    if n > HOUSEHOLDER_MAX:
        return _tria_library(a)
    if n <= UNROLL_MAX:  # a few rows: the reflections beat a library call on one matrix too
        return _tria_reflections(a)
    return _tria_small(a)


def tria_scalar(a: Float[Array, "n m"]) -> Float[Array, "n n"]:
    """:func:`tria` with every matrix entry a separate array: for blocks of a few rows under ``vmap``.

    The same reflections as :func:`tria`, written on a nested list of entries, so that under ``vmap``
    over particles every operation is element-wise with nothing sliced or scattered; for the 3 x 6
    blocks of the block-diagonal ODE filter about 1.5 times faster on the CPU than the row form
    (``twinfer bench pn``). Equal to :func:`tria` to rounding (sums are taken in another order).
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
    return _positive_diagonal(low)


def tria_rows(a: Float[Array, "n m"], k: int) -> Float[Array, "n m"]:
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
    top, rest = _reflect(a, k)
    signs = jnp.where(jnp.diag(top[:, :k]) < 0, -1.0, 1.0)
    first = jnp.concatenate([jnp.tril(top[:, :k].T), top[:, k:].T], axis=0) * signs[None, :]
    right = jnp.concatenate([jnp.zeros((k, m - k), a.dtype), rest.T], axis=0)
    return jnp.concatenate([first, right], axis=1)
