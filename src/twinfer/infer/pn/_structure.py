"""Covariance structure of the PN filter: when the stacked covariance stays block-diagonal.

Group the stacked state ``X`` (derivative-major, :mod:`twinfer.infer.pn._prior`) by ODE dimension:
block ``i`` holds ``(X^(0)_i, ..., X^(q)_i)``. The covariance stays block-diagonal over the ``d``
blocks through a step when

- the prior acts per block: ``A = A1 kron I_d``, ``Q = Q1 kron Gamma`` with a diagonal ``Gamma``
  (per-dimension or shared diffusion, Eq. 14 and specs 6.1-6.2);
- the ODE update is EK0: ``H = C-dot`` (Eq. 17) has one row per dimension, each touching its own
  block only, and the update is independent per block (EK1's ``C-dot - J_f C`` couples the blocks);
- each measured component depends on one block and the sensors are independent (diagonal ``R``): a
  sequence of scalar updates, each touching one block, equals the joint update (the joint innovation
  density factorises into the sequential ones when every row is linearised at the same mean);
- the initial covariance is block-diagonal: ``state_sd`` is per component.

Then a step is ``d`` independent square-root steps of size ``q + 1`` (QR of ``(q+1) x 2(q+1)``
instead of ``d(q+1) x 2d(q+1)``): the same numbers, far fewer operations. Which block each measured
component touches is found once per trace by a Jacobian of the measurement at a generic point
(:func:`probe_measurement_blocks`), or declared by the caller; the filter then checks the Jacobian
at every step (``eqx.error_if``), so a structure that the generic point missed fails loudly.

References:
    Krämer, Bosch, Schmidt & Hennig (2022), "Probabilistic ODE solutions in millions of dimensions"
    (block-diagonal EK0 with a diagonal diffusion); Särkkä & Svensson, Bayesian Filtering and
    Smoothing (2nd ed.), Sec. 6.2 (sequential processing of independent measurements).

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

STRUCTURES = ("dense", "blockdiag", "auto")


def to_blocks(mean: Any, d: int) -> Any:
    """Stacked derivative-major mean ``(d (q+1),)`` -> per-dimension blocks ``(d, q+1)``."""
    return jnp.reshape(mean, (-1, d)).T


def from_blocks(blocks: Any) -> Any:
    """Per-dimension blocks ``(d, q+1)`` -> stacked derivative-major mean ``(d (q+1),)``."""
    return jnp.reshape(blocks.T, (-1,))


def block_pattern(jac: np.ndarray, d: int) -> tuple[tuple[int, ...], ...]:
    """For a Jacobian ``(n_y, d (q+1))`` on the stacked state: the ODE dimensions each row touches.

    Non-finite entries count as touching (conservative).
    """
    n_y = jac.shape[0]
    touched = np.any(np.reshape(jac, (n_y, jac.shape[1] // d, d)) != 0, axis=1)
    return tuple(tuple(int(i) for i in np.flatnonzero(row)) for row in touched)


def probe_measurement_blocks(
    observe: Callable[[Any], Any], n_stacked: int, d: int
) -> tuple[tuple[int, ...], ...] | None:
    """Dimensions each measured component depends on, from the Jacobian at a generic concrete point.

    ``observe(X)`` must close over concrete values only: the caller passes random stand-ins of the
    same shapes for the (possibly traced) input and parameters. The Jacobian is evaluated eagerly even
    inside a trace (``jax.ensure_compile_time_eval``); if ``observe`` closes over a traced value the
    pattern is unknown (None).

    Args:
        observe: the measurement on the stacked state, with concrete input and parameters.
        n_stacked: length of the stacked state ``d (q+1)``.
        d: number of ODE dimensions.

    Returns:
        One tuple of dimensions per measured component, or None when it cannot be evaluated.

    """
    point = np.random.default_rng(0).uniform(0.5, 1.5, n_stacked)
    try:
        with jax.ensure_compile_time_eval():
            jac = np.asarray(jax.jacfwd(observe)(jnp.asarray(point)))
    except jax.errors.JAXTypeError:
        return None
    return block_pattern(np.reshape(jac, (-1, n_stacked)), d)


def generic_like(tree: Any, seed: int = 1) -> Any:
    """Concrete stand-ins of a pytree of arrays: floating leaves uniform in [0.5, 1.5], others as they are.

    Only shapes and dtypes of the leaves are read, so traced leaves are fine; a traced non-floating
    leaf is kept (and makes :func:`probe_measurement_blocks` return None if the measurement uses it).
    """
    rng = np.random.default_rng(seed)

    def one(a: Any) -> Any:
        dtype = jnp.result_type(a)
        if jnp.issubdtype(dtype, jnp.inexact):
            return jnp.asarray(rng.uniform(0.5, 1.5, jnp.shape(a)), dtype)
        return a

    return jax.tree_util.tree_map(one, tree)
