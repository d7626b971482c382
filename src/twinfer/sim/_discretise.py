"""Discrete-time transitions of continuous-time models: Euler, semi-implicit Euler, Heun, RK4, exact (linear).

A model never hard-codes its integrator (DESIGN.md, Contracts): filters and truth simulators obtain a
one-step map ``x_{k+1} = transition(t_k, x_k, u_k, params)`` from :func:`discretise`, with the input held
constant over the step (zero-order hold). A step of ``dt`` may be taken as ``substeps`` equal steps of
the method. The stage arithmetic of every method is the one of :mod:`twinfer.sim._steps`.
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from twinfer.models import AbstractModel
from twinfer.sim._steps import euler_step, heun_step, rk4_step, semi_implicit_euler_step, substep_loop

METHODS = ("euler", "semi-implicit-euler", "heun", "rk4", "exact")
_STEPS = {
    "euler": euler_step,
    "semi-implicit-euler": semi_implicit_euler_step,
    "heun": heun_step,
    "rk4": rk4_step,
}

_HOST_STEPS = ("euler", "heun", "rk4")
"""The methods a model may take whole through :meth:`~twinfer.models.AbstractModel.host_step` (written
leaf by leaf, so they run on NumPy arrays as they do on JAX's)."""


def integrator_step(method: str) -> Any:
    """The one step ``(rhs, t, x, h) -> x_next`` of a fixed-step method (:data:`METHODS` but ``"exact"``)."""
    if method not in _STEPS:
        raise ValueError(f"integrator_step method: expected one of {', '.join(_STEPS)}; received {method!r}.")
    return _STEPS[method]


class DiscreteModel(eqx.Module):
    """A continuous-time model stepped with a fixed ``dt`` by one method.

    Attributes:
        model: the continuous-time model.
        dt: step length [s].
        method: one of :data:`METHODS`.
        substeps: steps of ``dt / substeps`` taken per step of ``dt`` (1 for ``"exact"``).

    """

    model: AbstractModel
    dt: float = eqx.field(static=True)
    method: str = eqx.field(static=True)
    substeps: int = eqx.field(static=True, default=1)

    def transition(self, t: Any, x: Any, u: Any, params: Any) -> Any:
        """One step from ``x`` at ``t`` with the input ``u`` held over ``[t, t + dt)``."""
        if self.method == "exact":
            a_d, b_d = exact_matrices(self.model, params, self.dt)
            return a_d @ x + b_d @ jnp.atleast_1d(u) if b_d.shape[1] else a_d @ x
        step = _STEPS[self.method]
        h = self.dt / self.substeps
        if self.method in _HOST_STEPS:
            stepped = self.model.host_step(step, t, x, u, params, h, self.substeps)
            if stepped is not None:
                return stepped
        f = lambda tt, xx: self.model.vector_field(tt, xx, u, params)
        return substep_loop(lambda j, xx: step(f, t + j * h, xx, h), x, self.substeps)

    def output(self, t: Any, x: Any, u: Any, params: Any) -> Any:
        """The model's output at ``(t, x, u)``."""
        return self.model.output(t, x, u, params)

    @property
    def params(self) -> Any:
        return self.model.params

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.model.state_names

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.model.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.model.output_names

    @property
    def param_names(self) -> tuple[str, ...]:
        return self.model.param_names

    @property
    def n_state(self) -> int:
        return self.model.n_state

    @property
    def n_input(self) -> int:
        return self.model.n_input

    @property
    def n_output(self) -> int:
        return self.model.n_output


MAX_SQUARINGS = 64
"""Squarings allowed in :func:`exact_matrices`' matrix exponential: enough for ``||A dt||`` up to 1e19."""


def exact_matrices(model: AbstractModel, params: Any, dt: float) -> tuple[Any, Any]:
    """Zero-order-hold exact ``(A_d, B_d)`` from expm([[A, B], [0, 0]] dt) (Van Loan).

    Up to :data:`MAX_SQUARINGS` squarings of the scaled Pade approximant (Higham 2005, "The scaling and
    squaring method for the matrix exponential revisited"): JAX's default of 16 returns NaN once
    ``||A dt||`` passes about 3e5, which a 500 Hz mode sampled at 10 Hz reaches (issue #52).
    """
    mats = model.linear_matrices(params)
    if mats is None:
        raise ValueError(f"discretise method 'exact': {type(model).__name__} is nonlinear.")
    a_mat, b_mat = mats[0], mats[1]
    n, m = a_mat.shape[0], b_mat.shape[1]
    block = jnp.zeros((n + m, n + m), dtype=a_mat.dtype)
    block = block.at[:n, :n].set(a_mat).at[:n, n:].set(b_mat)
    phi = jsl.expm(block * dt, max_squarings=MAX_SQUARINGS)
    return phi[:n, :n], phi[:n, n:]


def discretise(model: AbstractModel, dt: float, method: str = "rk4", substeps: int = 1) -> DiscreteModel:
    """A fixed-step discrete-time version of ``model``.

    Args:
        model: a continuous-time twinfer model.
        dt: step length, finite and positive.
        method: ``"euler"`` (the compositional-inference paper's scheme), ``"semi-implicit-euler"``
            (states ``[q, v]`` with ``dq/dt = v`` only: velocities first, then positions with the new
            velocities), ``"heun"`` (S79-S80), ``"rk4"``, or ``"exact"`` (matrix exponential; linear
            models only). One step of each is :func:`~twinfer.sim.euler_step`,
            :func:`~twinfer.sim.semi_implicit_euler_step`, :func:`~twinfer.sim.heun_step` or
            :func:`~twinfer.sim.rk4_step`.
        substeps: the step of ``dt`` is taken as this many steps of ``dt / substeps`` with the input held
            (an integer >= 1; 1 for ``"exact"``, which is exact for any step).

    Returns:
        A :class:`DiscreteModel` with ``transition(t, x, u, params)``.

    """
    if method not in METHODS:
        raise ValueError(f"discretise method: expected one of {', '.join(METHODS)}; received {method!r}.")
    if not (isinstance(dt, int | float) and math.isfinite(dt) and dt > 0):
        raise ValueError(f"discretise dt: expected a finite number > 0; received {dt!r}.")
    if isinstance(substeps, bool) or not isinstance(substeps, int) or substeps < 1:
        raise ValueError(f"discretise substeps: expected an integer >= 1; received {substeps!r}.")
    if method == "exact" and substeps != 1:
        raise ValueError(
            f"discretise substeps: expected 1 with method 'exact' (exact for any step); received {substeps}."
        )
    if method == "semi-implicit-euler" and model.n_state % 2:
        raise ValueError(
            "discretise method 'semi-implicit-euler': expected a mechanical state [q, v] of even length; "
            f"{type(model).__name__} has {model.n_state} states."
        )
    if method == "exact" and not model.is_linear:
        raise ValueError(
            f"discretise method 'exact': expected a linear model (linear_matrices not None); "
            f"{type(model).__name__} is nonlinear. Use 'rk4' or a finer step instead."
        )
    return DiscreteModel(model=model, dt=float(dt), method=method, substeps=substeps)
