"""The process-wide JAX settings twinfer runs under: applied by :func:`configure`, never at import.

Importing a library should not change the process it is imported into (DESIGN.md, Contracts: importing
twinfer changes no global JAX setting). twinfer needs two settings that are global in JAX: float64
arrays, and, on the CPU, lowerings of batched factorisations that cannot deadlock XLA's thread pool
(:mod:`twinfer.linalg`). :func:`configure` applies them; the ``twinfer`` command and the test suite call
it first thing. A library user who forgets is not left in float32: the entry points that run an
estimator or a simulator call :func:`ensure`, which applies ``configure()`` with its defaults the first
time, unless :func:`configure` has already run.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp

from twinfer import linalg
from twinfer.errors import TwinferValueError

__all__ = ["configure", "ensure"]

_CONFIGURED = False
"""Whether :func:`configure` has run in this process (called directly or through :func:`ensure`)."""


def configure(x64: bool = True, safe_cpu_linalg: bool | Literal["auto"] = "auto") -> None:
    """Set the process-wide JAX settings twinfer's estimators need. Idempotent; cheap to call again.

    Call it once, before making the arrays you hand to twinfer (the ``twinfer`` command and the tests do).
    Library entry points that run an estimator or a simulator (``run_filter``, ``smooth``, ``run_ukf``,
    ``gaussian_filter``, ``sim.simulate*``, IBIS, tempering, NUTS, the PINN and hybrid-model trainers,
    ``pn_solve``) apply ``configure()`` with these defaults on their first call when it has not run
    (:func:`ensure`). That lazy step can only help arrays made afterwards: an array a user built in
    float32 before it (JAX's default without x64) stays float32, and the entry points' float64 checks
    refuse it with an error naming the argument, rather than lose digits silently. So call
    ``twinfer.configure()`` (or set ``JAX_ENABLE_X64=1``) before building inputs with ``jax.numpy``.

    Args:
        x64: True switches JAX to 64-bit arrays (``jax_enable_x64``): every twinfer estimator works in
            float64 (DESIGN.md, Conventions), since covariance factors and log-likelihoods of long
            records lose too many digits in float32. False leaves JAX's setting as the process has it
            (twinfer never switches float64 off); :func:`ensure` then no longer applies it.
        safe_cpu_linalg: whether batched Cholesky, triangular solve, LU and QR on the CPU are lowered
            without LAPACK's batch fan-out, which can deadlock XLA's thread pool on a small machine
            (two concurrent batched factorisations on 2 cores: :mod:`twinfer.linalg`). ``"auto"``
            applies the workaround to programs compiled for CPU devices (GPU programs never see it)
            unless ``TWINFER_LAPACK_BATCHED=1`` asks to keep jaxlib's lowerings; it does not query the
            backend, which would initialise it before ``jax.distributed.initialize`` can run. True
            applies it regardless of that variable; False restores jaxlib's lowerings. Either way only
            programs compiled afterwards change.

    Raises:
        TwinferValueError: for a ``safe_cpu_linalg`` other than True, False or ``"auto"``, or an ``x64``
            that is not a bool.

    """
    global _CONFIGURED
    if not isinstance(x64, bool):
        raise TwinferValueError(f"configure x64: expected True or False; received {x64!r}.")
    if safe_cpu_linalg not in (True, False, "auto") or not isinstance(safe_cpu_linalg, (bool, str)):
        raise TwinferValueError(
            f"configure safe_cpu_linalg: expected True, False or 'auto'; received {safe_cpu_linalg!r}."
        )
    if x64 and not jax.config.read("jax_enable_x64"):
        jax.config.update("jax_enable_x64", True)
    if safe_cpu_linalg is False:
        linalg.use_lapack_lowerings()
    else:
        linalg.use_batch_safe_lowerings(force=safe_cpu_linalg is True)
    _CONFIGURED = True


def ensure(where: str, **trees: Any) -> None:
    """Apply :func:`configure` with its defaults unless it has run, then refuse non-float64 floating arrays.

    Called first thing by the entry points that run an estimator or a simulator, so a library user who
    never called :func:`configure` still computes in float64. Arrays made before that first call (a model
    whose parameters became float32 arrays when it was built) are refused here by name instead of being
    used with their lost digits: widening them afterwards cannot bring the digits back.

    Args:
        where: the entry point, named in the error (``"run_filter"``).
        **trees: the arguments to check, by name (a model, parameters, initial states): pytrees whose
            floating leaves must be float64. Leaves without a dtype (Python numbers, functions) and
            non-floating ones (integers, masks, PRNG keys) are not checked.

    Raises:
        TwinferValueError: for a floating leaf that is not float64, naming the argument, the leaf's path,
            the expected and the received dtype.

    """
    if not _CONFIGURED:
        configure()
    for name, tree in trees.items():
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            dtype = getattr(leaf, "dtype", None)
            if dtype is None or not jnp.issubdtype(dtype, jnp.floating) or dtype == jnp.float64:
                continue
            raise TwinferValueError(
                f"{where} {name}{jax.tree_util.keystr(path)}: expected float64; received {dtype}. An array "
                "made before float64 was switched on is float32: call twinfer.configure() (or set "
                "JAX_ENABLE_X64=1) before building models and arrays."
            )
