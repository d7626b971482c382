"""Linear algebra that cannot hang XLA on a small CPU: batched factorisations without LAPACK's thread fan-out.

The hang. In jaxlib 0.10.2 on the CPU, every *batched* LAPACK call (``potrf`` behind
``jnp.linalg.cholesky``, ``trsm`` behind triangular solves, ``getrf`` behind ``solve``/``inv``/``det``,
``geqrf``/``orgqr`` behind ``qr``) splits its batch over XLA's intra-op thread pool and then *blocks* the
pool worker it runs on until the pieces finish (``ParallelBatchMap`` waiting on a ``BlockingCounter``).
When a program holds two independent batched calls (two vmapped groups of subsystems, say, or a
Cholesky of ``R`` beside one of ``Q``), XLA's thunk executor may start both at once, each on a worker;
on a machine whose pool has two workers (a 2-core CPU) both then wait for pieces that no free worker is
left to run, and the process sits at 0 % CPU for ever. On one pinned core the pool runs the pieces
inline, which is how the hang hid behind pinned benchmarks. gdb on the hung ``twinfer run grid``
(PEGASE 1354, sub-step groups 1/2/4) shows both workers in ``ParallelBatchMap`` under
``lapack_dgetrf_ffi`` (the WLS solves) and, with LU removed, under ``lapack_dtrsm_ffi``. Reduced::

    f = jax.jit(lambda a, b: (jnp.linalg.solve(a, a[..., :1]), jnp.linalg.solve(b, b[..., :1])))
    a = 2 * jnp.eye(15) + jnp.zeros((500, 15, 15)); b = 3 * jnp.eye(15) + jnp.zeros((507, 15, 15))
    for _ in range(200): jax.block_until_ready(f(a, b))   # hangs within a few calls on 2 cores

Unbatched calls run inline and never hung (three concurrent 300 x 300 solves, 300 calls).

The workaround (:func:`use_batch_safe_lowerings`, applied by :func:`twinfer.configure`): on the CPU, the
batched forms of Cholesky and triangular solve on matrices up to :data:`UNROLL_MAX` are lowered to
the kernels here, one column (row) per step of a loop over the whole batch (element-wise code and one
batched matrix-vector product per step, which XLA fuses: as fast as LAPACK for the grid's 15 x 15
cluster factors, and compiled once whatever the size; the same columns written out one by one had
cost about n times the compilation for the same run time), larger ones and LU
and QR to XLA's own HLO operations, which its compiler expands into loops (``CholeskyExpander``,
``TriangularSolveExpander``, ``QrExpander``; LU by jax's portable implementation; 2.3x slower than
LAPACK on that case, so kept for the rare large batched factorisation); unbatched calls and batches
of one keep LAPACK.
Results agree with LAPACK's to rounding. ``TWINFER_LAPACK_BATCHED=1`` keeps jaxlib's lowerings (for a jaxlib
that fixes the bug), and so does ``twinfer.configure(safe_cpu_linalg=False)`` (:func:`use_lapack_lowerings`).
``tests/reliability/test_no_lu_deadlock.py`` checks the compiled estimators and runs the multi-group grid
case unpinned on every core under a hard timeout.

Besides, symmetric positive-definite systems are solved by Cholesky (:func:`spd_solve`,
:func:`spd_inverse`), not by LU.

References:
    Golub & Van Loan, Matrix Computations (4th ed.), Alg. 4.2.1 (Cholesky).

"""

from __future__ import annotations

import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_SAVED: dict[Any, Any] = {}
"""jaxlib's CPU lowering entries of the primitives replaced, while the batch-safe ones are registered."""

UNROLL_MAX = 32
"""Largest batched matrix factorised or solved by the loop kernels below; larger batched ones go to
XLA's HLO expansions (loops over blocks of columns, slower for small matrices)."""


def _batched_cholesky(a: Any) -> Any:
    """Lower Cholesky factor of each matrix of ``a`` (..., n, n), a column per loop step (Alg. 4.2.1).

    Column j of L is ``(a[j:, j] - L[j:, :j] L[j, :j]^T) / sqrt(...)``. Each step is a handful of
    element-wise operations and one batched matrix-vector product over the whole batch; the loop
    (``lax.fori_loop``) is compiled once whatever ``n``, where columns written out one by one cost
    XLA's compiler about n times as much (6.7 s against 1.0 s for 15 x 15 factors and solves) for the
    same run time. Reads the lower triangle; NaN where a matrix is not positive-definite.
    """
    n = a.shape[-1]
    rows = jnp.arange(n)

    def column(j: Any, low: Any) -> Any:
        row_j = lax.dynamic_index_in_dim(low, j, axis=-2, keepdims=False)  # L[j, :j], zeros from j on
        col = lax.dynamic_index_in_dim(a, j, axis=-1, keepdims=False)
        col = col - jnp.einsum("...ik,...k->...i", low, row_j)
        diag = jnp.sqrt(lax.dynamic_index_in_dim(col, j, axis=-1, keepdims=True))
        col = jnp.where(rows >= j, col / diag, 0.0)
        return lax.dynamic_update_index_in_dim(low, col[..., None], j, axis=-1)

    return lax.fori_loop(0, n, column, jnp.zeros_like(a))


def _batched_triangular_solve(
    a: Any, b: Any, *, left_side: bool, lower: bool, transpose_a: bool, conjugate_a: bool, unit_diagonal: bool
) -> Any:
    """``op(a) x = b`` (left) or ``x op(a) = b`` (right) for each matrix of the batch, by substitution.

    Real matrices only (``conjugate_a`` is then a no-op). A right-side solve is the left-side solve of the
    transposed system; ``op(a) = a^T`` swaps lower and upper. One row per loop step (``lax.fori_loop``,
    compiled once whatever ``n``): ``x_i = (b_i - sum_k m_ik x_k) / m_ii`` over the rows solved so far,
    as a batched product with the strict triangle of ``m`` (the other triangle is never read), element-wise
    over the batch and the right-hand sides (Golub & Van Loan Alg. 3.1.1-3.1.2).
    """
    del conjugate_a
    if not left_side:  # x op(a) = b  <=>  op(a)^T x^T = b^T
        xt = _batched_triangular_solve(
            a, jnp.swapaxes(b, -1, -2), left_side=True, lower=lower, transpose_a=not transpose_a,
            conjugate_a=False, unit_diagonal=unit_diagonal,
        )  # fmt: skip
        return jnp.swapaxes(xt, -1, -2)
    m = jnp.swapaxes(a, -1, -2) if transpose_a else a
    forward = lower != transpose_a
    n = m.shape[-1]
    diag = jnp.diagonal(m, axis1=-2, axis2=-1)
    strict = jnp.tril(m, -1) if forward else jnp.triu(m, 1)

    def row(t: Any, x: Any) -> Any:
        i = t if forward else n - 1 - t
        m_i = lax.dynamic_index_in_dim(strict, i, axis=-2, keepdims=False)  # (..., n)
        acc = lax.dynamic_index_in_dim(b, i, axis=-2, keepdims=False) - jnp.einsum("...k,...kr->...r", m_i, x)
        if not unit_diagonal:
            acc = acc / lax.dynamic_index_in_dim(diag, i, axis=-1, keepdims=True)
        return lax.dynamic_update_index_in_dim(x, acc[..., None, :], i, axis=-2)

    return lax.fori_loop(0, n, row, jnp.zeros_like(b))


def _unbatched(prim: Any) -> Any:
    """A lowering that drops a batch of one, binds ``prim`` on the matrices (LAPACK), and restores it."""
    from jax._src.interpreters import mlir

    def fun(*args, **params):
        lead = args[0].shape[:-2]
        squeezed = [a.reshape(a.shape[len(lead) :]) for a in args]
        out = prim.bind(*squeezed, **params)
        if prim.multiple_results:
            return [o.reshape(lead + o.shape) for o in out]
        return out.reshape(lead + out.shape)

    return mlir.lower_fun(fun, multiple_results=prim.multiple_results)


def batch_safe_lowerings_applied() -> bool:
    """Whether the batch-safe CPU lowerings of :func:`use_batch_safe_lowerings` are registered now."""
    return bool(_SAVED)


def use_batch_safe_lowerings(force: bool = False) -> bool:
    """Lower batched Cholesky, triangular solve, LU and QR on the CPU without LAPACK's batch fan-out.

    Batched real matrices up to :data:`UNROLL_MAX` go to the loop kernels above (Cholesky and
    triangular solve), larger or complex ones, and LU and QR, to XLA's HLO expansions; unbatched calls
    and batches of one (a centralised filter vmapped over one cluster) keep LAPACK. The rules are
    registered for the CPU platform only: programs compiled for a GPU never see them. Idempotent;
    programs compiled before keep the lowering they were compiled with. See the module docstring for
    the hang this avoids.

    Args:
        force: apply even where ``TWINFER_LAPACK_BATCHED=1`` asks to keep jaxlib's lowerings.

    Returns:
        Whether the lowerings are now the batch-safe ones (False when ``TWINFER_LAPACK_BATCHED=1`` keeps
        jaxlib's and ``force`` is False).

    """
    if _SAVED:
        return True
    if not force and os.environ.get("TWINFER_LAPACK_BATCHED", "").strip() in ("1", "true", "yes"):
        return False
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg as lax_linalg

    cpu_rules = mlir._platform_specific_lowerings["cpu"]
    unrolled = {
        lax_linalg.cholesky_p: mlir.lower_fun(_batched_cholesky, multiple_results=False),
        lax_linalg.triangular_solve_p: mlir.lower_fun(_batched_triangular_solve, multiple_results=False),
    }
    generic = {
        lax_linalg.cholesky_p: lax_linalg._cholesky_lowering,
        lax_linalg.triangular_solve_p: lax_linalg._triangular_solve_lowering,
        lax_linalg.lu_p: mlir.lower_fun(lax_linalg._lu_python, multiple_results=True),
        lax_linalg.geqrf_p: lax_linalg._geqrf_lowering_rule,
        lax_linalg.householder_product_p: lax_linalg._householder_product_lowering,
    }
    saved = {prim: cpu_rules[prim] for prim in generic}
    for prim, expanded in generic.items():
        lapack_rule = saved[prim].rule
        small = unrolled.get(prim)

        def rule(ctx, *args, _prim=prim, _lapack=lapack_rule, _expanded=expanded, _small=small, **params):
            aval = ctx.avals_in[0]
            if len(aval.shape) <= 2:
                return _lapack(ctx, *args, **params)
            if math.prod(aval.shape[:-2]) == 1:  # a batch of one (a vmap over one cluster): LAPACK
                return _unbatched(_prim)(ctx, *args, **params)
            real = jnp.issubdtype(aval.dtype, jnp.floating)
            if _small is not None and real and aval.shape[-1] <= UNROLL_MAX:
                return _small(ctx, *args, **params)
            return _expanded(ctx, *args, **params)

        mlir.register_lowering(prim, rule, platform="cpu")
    _SAVED.update(saved)
    return True


def use_lapack_lowerings() -> None:
    """Put jaxlib's own CPU lowerings back where :func:`use_batch_safe_lowerings` replaced them.

    Idempotent (nothing to do when the batch-safe ones are not registered). Programs compiled before
    keep the lowering they were compiled with.
    """
    from jax._src.interpreters import mlir

    cpu_rules = mlir._platform_specific_lowerings["cpu"]
    for prim, entry in _SAVED.items():
        cpu_rules[prim] = entry
    _SAVED.clear()


def spd_solve(a: Any, b: Any) -> Any:
    """``a^-1 b`` for a symmetric positive-definite ``a`` by Cholesky (NaN where ``a`` is not SPD)."""
    return jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(a), True), b)


def spd_inverse(a: Any) -> Any:
    """``a^-1`` of a symmetric positive-definite ``a`` by Cholesky (NaN where ``a`` is not SPD)."""
    return spd_solve(a, jnp.eye(a.shape[-1], dtype=a.dtype))


def psd_factor(a: Any, name: str = "covariance") -> Any:
    """Lower-triangular factor ``L L^T = A`` of a user's positive semi-definite matrix (or a stack of them).

    For the boundary of an estimator, where covariances arrive as matrices: a Cholesky factor where
    ``A`` is positive-definite, otherwise (a zero process noise on a fixed parameter, say) the
    triangularised symmetric square root, so a singular but valid covariance is accepted. Traced
    arrays (inside ``jit``) take the Cholesky factor.

    Raises:
        ValueError: naming ``name`` when ``A`` has a clearly negative eigenvalue.

    """
    try:
        arr = np.asarray(a, dtype=np.float64)
    except jax.errors.TracerArrayConversionError:
        return jnp.linalg.cholesky(0.5 * (a + jnp.swapaxes(a, -1, -2)))
    if arr.ndim > 2:
        return np.stack([psd_factor(m, name) for m in arr])
    sym = 0.5 * (arr + arr.T)
    try:
        return np.linalg.cholesky(sym)
    except np.linalg.LinAlgError:
        pass
    w, v = np.linalg.eigh(sym)
    scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
    if w.size and w[0] < -1e-10 * scale:
        raise ValueError(
            f"{name}: expected a positive semi-definite covariance; received a matrix with eigenvalue "
            f"{w[0]:.3g}."
        )
    root = v * np.sqrt(np.maximum(w, 0.0))[None, :]
    _, r = np.linalg.qr(root.T)
    low = r.T
    return low * np.where(np.diag(low) < 0, -1.0, 1.0)[None, :]
