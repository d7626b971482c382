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

The workaround (:func:`use_batch_safe_lowerings`, applied when twinfer is imported): on the CPU, the
batched forms of Cholesky, triangular solve, LU and QR are lowered to XLA's own HLO operations, which
its compiler expands into loops over the whole batch (``CholeskyExpander``, ``TriangularSolveExpander``,
``QrExpander``; LU by jax's portable implementation); unbatched calls keep LAPACK. Results agree with
LAPACK's to rounding; for the many small matrices of vmapped filters the expanded loops are also faster
than one LAPACK call per matrix. ``TWINFER_LAPACK_BATCHED=1`` keeps jaxlib's lowerings (for a jaxlib
that fixes the bug). ``tests/reliability/test_no_lu_deadlock.py`` checks the compiled estimators and runs
the multi-group grid case unpinned on every core under a hard timeout.

Besides, twinfer factorises symmetric positive-definite systems by Cholesky (:func:`spd_solve`,
:func:`spd_inverse`) and general square ones by Householder QR (:func:`solve`), never by LU.

References:
    Golub & Van Loan, Matrix Computations (4th ed.), Alg. 4.2.1 (Cholesky) and 5.2.1 (Householder QR).

"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp

_APPLIED = False


def use_batch_safe_lowerings() -> bool:
    """Lower batched Cholesky, triangular solve, LU and QR on the CPU to XLA's HLO expansions.

    Idempotent; returns whether the CPU lowerings are now the batch-safe ones (False when
    ``TWINFER_LAPACK_BATCHED=1`` keeps jaxlib's). See the module docstring for the hang this avoids.
    """
    global _APPLIED
    if _APPLIED:
        return True
    if os.environ.get("TWINFER_LAPACK_BATCHED", "").strip() in ("1", "true", "yes"):
        return False
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg as lax_linalg

    cpu_rules = mlir._platform_specific_lowerings["cpu"]
    generic = {
        lax_linalg.cholesky_p: lax_linalg._cholesky_lowering,
        lax_linalg.triangular_solve_p: lax_linalg._triangular_solve_lowering,
        lax_linalg.lu_p: mlir.lower_fun(lax_linalg._lu_python, multiple_results=True),
        lax_linalg.geqrf_p: lax_linalg._geqrf_lowering_rule,
        lax_linalg.householder_product_p: lax_linalg._householder_product_lowering,
    }
    for prim, batched_rule in generic.items():
        lapack_rule = cpu_rules[prim].rule

        def rule(ctx, *args, _lapack=lapack_rule, _batched=batched_rule, **params):
            batched = len(ctx.avals_in[0].shape) > 2
            return (_batched if batched else _lapack)(ctx, *args, **params)

        mlir.register_lowering(prim, rule, platform="cpu")
    _APPLIED = True
    return True


def solve(a: Any, b: Any) -> Any:
    """``a^-1 b`` for a square nonsingular ``a`` (n, n) by Householder QR; ``b`` is (n,) or (n, k)."""
    q, r = jnp.linalg.qr(a)
    return jax.scipy.linalg.solve_triangular(r, q.T @ b, lower=False)


def spd_solve(a: Any, b: Any) -> Any:
    """``a^-1 b`` for a symmetric positive-definite ``a`` by Cholesky (NaN where ``a`` is not SPD)."""
    return jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(a), True), b)


def spd_inverse(a: Any) -> Any:
    """``a^-1`` of a symmetric positive-definite ``a`` by Cholesky (NaN where ``a`` is not SPD)."""
    return spd_solve(a, jnp.eye(a.shape[-1], dtype=a.dtype))
