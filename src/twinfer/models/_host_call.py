"""A pure call from a compiled program to a NumPy function on the host, one per batch (issue #56).

``jax.pure_callback`` hands every argument to its Python function as a new device array
(``jax.device_put`` of the host buffer) and the function converts it back to NumPy: on this project's
2-core machine that round trip is about 50 of the 70 us a trivial callback costs, more than an FMU's own
work on a small model. :func:`host_call` is the same XLA host callback (``mlir.emit_python_callback``, as
``pure_callback`` lowers to) given the NumPy array XLA passes, as a primitive with its own batching rule:
a ``vmap`` moves the batch axes to the front and makes one call for the whole batch (``pure_callback``'s
``vmap_method="expand_dims"``). It has no derivative rules: callers wrap it in ``jax.custom_jvp``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

HostFunction = Callable[[np.ndarray], np.ndarray]

host_call_p = Primitive("twinfer_host_call")


def host_call(fn: HostFunction, packed: Any, out_shape: tuple[int, ...]) -> Any:
    """``fn(packed)`` on the host: ``packed`` of shape ``(..., k)`` float64 to ``(..., *out_shape)``.

    Args:
        fn: a NumPy function, pure (equal inputs give equal outputs), taking every leading (batch) axis
            of ``packed`` and returning them in front of ``out_shape``.
        packed: the argument, float64.
        out_shape: the shape of one result (without the batch axes).

    """
    return host_call_p.bind(jnp.asarray(packed, dtype=jnp.float64), fn=fn, out_shape=tuple(out_shape))


def _impl(packed: Any, *, fn: HostFunction, out_shape: tuple[int, ...]) -> Any:
    return jnp.asarray(_checked(fn, out_shape)(np.asarray(packed)))


def _abstract(packed: Any, *, fn: HostFunction, out_shape: tuple[int, ...]) -> Any:
    return ShapedArray((*packed.shape[:-1], *out_shape), jnp.float64)


def _checked(fn: HostFunction, out_shape: tuple[int, ...]) -> HostFunction:
    def call(packed: np.ndarray) -> np.ndarray:
        out = np.ascontiguousarray(fn(packed), dtype=np.float64)
        expected = (*packed.shape[:-1], *out_shape)
        if out.shape != expected:
            raise ValueError(f"host_call result: expected shape {expected}; received {out.shape}.")
        return out

    return call


def _lowering(ctx: Any, packed: Any, *, fn: HostFunction, out_shape: tuple[int, ...]) -> Any:
    call = _checked(fn, out_shape)
    results, _, _ = mlir.emit_python_callback(
        ctx,
        lambda array: (call(array),),
        None,
        [packed],
        ctx.avals_in,
        ctx.avals_out,
        has_side_effect=False,
        returns_token=False,
    )
    return results


def _batched(args: Any, dims: Any, *, fn: HostFunction, out_shape: tuple[int, ...]) -> Any:
    (packed,), (dim,) = args, dims
    return host_call_p.bind(jnp.moveaxis(packed, dim, 0), fn=fn, out_shape=out_shape), 0


host_call_p.def_impl(_impl)
host_call_p.def_abstract_eval(_abstract)
mlir.register_lowering(host_call_p, _lowering, cacheable=False)
batching.primitive_batchers[host_call_p] = _batched
