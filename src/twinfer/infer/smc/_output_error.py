"""The output-error (simulation-error) likelihood: the model simulated open loop, scored on every sample.

For parameters ``theta`` the model is integrated from a known initial state ``x0`` by ``substeps`` RK4
steps per sample period, driven by the recorded inputs only (no measured output enters the simulation),
and each measurement is scored as

    y_k = h(x_k(theta), u_k) + e_k,   e_k ~ N(0, sigma^2 I),
    log p(y | theta) = sum_k log N(y_k; h(x_k(theta), u_k), sigma^2 I),

the output-error model of system identification (Ljung 1999, Sec. 4.2 and 7.3). ``sigma`` is either given
or the last entry of ``theta`` (estimated with the parameters, so that it absorbs the model's misfit).
Its maximum is the least-squares fit of the simulated output: the criterion that a simulation-based
digital twin is judged by. A filter's likelihood (:class:`~twinfer.infer.pn.PNLikelihood`) scores
one-step predictions instead, an equation-error criterion; under model error the two optima differ
(the ``emps`` case study measures by how much).

The errors of a wrong model are correlated in time, not white: the white-noise likelihood then counts
every sample as independent, so the parameters' posterior is narrower than their uncertainty. The
predictive band of the output (the particles' simulations plus ``sigma``) is the quantity to check.

Step ``k`` (:class:`~twinfer.infer.smc.IncrementalLikelihood`) advances from ``x_{k-1}`` over the
``substeps`` fine inputs of block ``k - 1`` (none at ``k = 0``) and scores ``y_k``. The alignment is
:func:`twinfer.sim.particle_simulator`'s: the same ``(T * substeps, n_u)`` fine inputs (from
:func:`twinfer.sim.fine_input`) give the same outputs.

References:
    Ljung, L. (1999), *System Identification: Theory for the User*, 2nd ed., Sec. 4.2 (output-error
    model structures) and 7.3 (prediction-error criteria).

"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from twinfer.models import AbstractModel, set_param_vector
from twinfer.sim import discretise


class OutputErrorLikelihood(eqx.Module):
    """``init(theta)``/``step(carry, theta, k)`` of :class:`twinfer.infer.smc.IncrementalLikelihood`.

    Attributes:
        model: the continuous-time model (simulated by RK4).
        base_params: the model's parameters; ``names`` are replaced by ``theta``.
        names: scalar parameter names that ``theta`` holds, in order.
        x0: the initial state (known).
        us: fine-step inputs ``(T * substeps, n_u)``, ``substeps`` per sample
            (:func:`twinfer.sim.fine_input`).
        ys: measurements ``(T, n_y)`` of the outputs ``outputs``.
        dt: the fine step (the sample period over ``substeps``) [s].
        substeps: RK4 steps per sample period.
        outputs: indices of the model's outputs that ``ys`` holds.
        noise_sd: the measurement-noise standard deviation; ``None``: ``theta[len(names)]`` (estimated).

    """

    model: AbstractModel
    base_params: Any
    names: tuple[str, ...] = eqx.field(static=True)
    x0: Float[Array, " d"]
    us: Float[Array, "TS n_u"]
    ys: Float[Array, "T n_y"]
    dt: float = eqx.field(static=True)
    substeps: int = eqx.field(static=True, default=1)
    outputs: tuple[int, ...] = eqx.field(static=True, default=(0,))
    noise_sd: float | None = eqx.field(static=True, default=None)

    def __check_init__(self) -> None:
        where = "OutputErrorLikelihood"
        if isinstance(self.substeps, bool) or not isinstance(self.substeps, int) or self.substeps < 1:
            raise ValueError(f"{where} substeps: expected an integer >= 1; received {self.substeps!r}.")
        if not (isinstance(self.dt, int | float) and math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"{where} dt: expected a finite number > 0; received {self.dt!r}.")
        if self.noise_sd is not None and not (math.isfinite(self.noise_sd) and self.noise_sd > 0):
            raise ValueError(
                f"{where} noise_sd: expected a finite number > 0 or None; received {self.noise_sd}."
            )
        ys, us = np.asarray(self.ys), np.asarray(self.us)
        if ys.ndim != 2 or ys.shape[1] != len(self.outputs):
            raise ValueError(
                f"{where} ys: expected shape (T, {len(self.outputs)}) (one column per output index "
                f"{self.outputs}); received {ys.shape}."
            )
        bad = [i for i in self.outputs if not 0 <= i < self.model.n_output]
        if bad:
            raise ValueError(
                f"{where} outputs: expected indices in [0, {self.model.n_output}); received {self.outputs}."
            )
        if us.ndim != 2 or us.shape != (ys.shape[0] * self.substeps, self.model.n_input):
            raise ValueError(
                f"{where} us: expected shape ({ys.shape[0] * self.substeps}, {self.model.n_input}) "
                f"({self.substeps} fine-step inputs per sample); received {us.shape}."
            )
        if not (np.all(np.isfinite(ys)) and np.all(np.isfinite(us))):
            arr, name = (ys, "ys") if not np.all(np.isfinite(ys)) else (us, "us")
            row = int(np.argwhere(~np.isfinite(arr))[0, 0])
            raise ValueError(
                f"{where} {name}: expected finite values; received a non-finite value at row {row}."
            )
        if np.asarray(self.x0).shape != (self.model.n_state,):
            raise ValueError(
                f"{where} x0: expected shape ({self.model.n_state},); received {np.asarray(self.x0).shape}."
            )

    @property
    def n_steps(self) -> int:
        return int(self.ys.shape[0])

    def params(self, theta: Float[Array, " p"]) -> Any:
        """Model parameters with the named entries replaced by ``theta``'s first ones (in order)."""
        return set_param_vector(self.base_params, self.names, theta[: len(self.names)])

    def sigma(self, theta: Float[Array, " p"]) -> Any:
        """The noise sd: ``noise_sd``, or the entry of ``theta`` after the named parameters."""
        return self.noise_sd if self.noise_sd is not None else theta[len(self.names)]

    def init(self, theta: Float[Array, " p"]) -> Float[Array, " d"]:
        return jnp.asarray(self.x0, jnp.float64)

    def step(
        self, carry: Float[Array, " d"], theta: Float[Array, " p"], k: Int[Array, ""] | int
    ) -> tuple[Float[Array, " d"], Float[Array, ""]]:
        params = self.params(theta)
        k = jnp.asarray(k)
        block = jnp.maximum(k - 1, 0) * self.substeps
        step = discretise(self.model, self.dt, "rk4")
        x = carry
        for j in range(self.substeps):  # unrolled: substeps is small and static
            t = (block + j) * self.dt
            x = step.transition(t, x, self.us[block + j], params)
        x = jnp.where(k == 0, carry, x)
        u_k = self.us[k * self.substeps]
        y_hat = jnp.atleast_1d(self.model.output(k * self.substeps * self.dt, x, u_k, params))
        resid = self.ys[k] - y_hat[jnp.asarray(self.outputs)]
        sigma = self.sigma(theta)
        n_y = resid.shape[0]
        ll = -0.5 * jnp.sum(resid**2) / sigma**2 - n_y * jnp.log(sigma) - 0.5 * n_y * jnp.log(2 * jnp.pi)
        return x, ll
