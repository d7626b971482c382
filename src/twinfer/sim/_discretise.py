"""Discrete-time transitions of continuous-time models: explicit Euler, Heun, RK4 and exact (linear).

A model never hard-codes its integrator (DESIGN.md, Contracts): filters and truth simulators obtain a
one-step map ``x_{k+1} = transition(t_k, x_k, u_k, params)`` from :func:`discretise`, with the input held
constant over the step (zero-order hold).
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from twinfer.models import AbstractModel

METHODS = ("euler", "heun", "rk4", "exact")


class DiscreteModel(eqx.Module):
    """A continuous-time model stepped with a fixed ``dt`` by one method.

    Attributes:
        model: the continuous-time model.
        dt: step length [s].
        method: one of ``"euler"``, ``"heun"``, ``"rk4"``, ``"exact"``.

    """

    model: AbstractModel
    dt: float = eqx.field(static=True)
    method: str = eqx.field(static=True)

    def transition(self, t: Any, x: Any, u: Any, params: Any) -> Any:
        """One step from ``x`` at ``t`` with the input ``u`` held over ``[t, t + dt)``."""
        h = self.dt
        f = lambda tt, xx: self.model.vector_field(tt, xx, u, params)
        if self.method == "euler":
            return x + h * f(t, x)
        if self.method == "heun":
            k1 = f(t, x)
            k2 = f(t + h, x + h * k1)
            return x + 0.5 * h * (k1 + k2)
        if self.method == "rk4":
            k1 = f(t, x)
            k2 = f(t + 0.5 * h, x + 0.5 * h * k1)
            k3 = f(t + 0.5 * h, x + 0.5 * h * k2)
            k4 = f(t + h, x + h * k3)
            return x + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        a_d, b_d = exact_matrices(self.model, params, h)
        return a_d @ x + b_d @ jnp.atleast_1d(u) if b_d.shape[1] else a_d @ x

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


def exact_matrices(model: AbstractModel, params: Any, dt: float) -> tuple[Any, Any]:
    """Zero-order-hold exact ``(A_d, B_d)`` from expm([[A, B], [0, 0]] dt) (Van Loan)."""
    mats = model.linear_matrices(params)
    if mats is None:
        raise ValueError(f"discretise method 'exact': {type(model).__name__} is nonlinear.")
    a_mat, b_mat = mats[0], mats[1]
    n, m = a_mat.shape[0], b_mat.shape[1]
    block = jnp.zeros((n + m, n + m), dtype=a_mat.dtype)
    block = block.at[:n, :n].set(a_mat).at[:n, n:].set(b_mat)
    phi = jsl.expm(block * dt)
    return phi[:n, :n], phi[:n, n:]


def discretise(model: AbstractModel, dt: float, method: str = "rk4") -> DiscreteModel:
    """A fixed-step discrete-time version of ``model``.

    Args:
        model: a continuous-time twinfer model.
        dt: step length, finite and positive.
        method: ``"euler"`` (the compositional-inference paper's scheme), ``"heun"``, ``"rk4"``, or
            ``"exact"`` (matrix exponential; linear models only).

    Returns:
        A :class:`DiscreteModel` with ``transition(t, x, u, params)``.

    """
    if method not in METHODS:
        raise ValueError(f"discretise method: expected one of {', '.join(METHODS)}; received {method!r}.")
    if not (isinstance(dt, int | float) and math.isfinite(dt) and dt > 0):
        raise ValueError(f"discretise dt: expected a finite number > 0; received {dt!r}.")
    if method == "exact" and model.linear_matrices(model.params) is None:
        raise ValueError(
            f"discretise method 'exact': expected a linear model (linear_matrices not None); "
            f"{type(model).__name__} is nonlinear. Use 'rk4' or a finer step instead."
        )
    return DiscreteModel(model=model, dt=float(dt), method=method)
