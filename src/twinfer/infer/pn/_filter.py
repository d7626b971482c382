"""Gaussian ODE filter (EK0 / EK1) with online diffusion calibration and a data update.

One step at grid time ``t_k`` (specs/pn-smc.md 1.4, 2.2, option A of 6.5):

1. predict with the IWP prior ``A(h)``, ``Q(h) = Q1(h) kron Gamma_k`` (Eq. 16);
2. condition on the ODE residual ``0 = C-dot X - f(C X, u_k, theta)`` as a zero-noise pseudo-observation
   (Eq. 12c, R = 0), linearised at the predicted mean: EK0 drops the Jacobian of ``f`` (H = C-dot,
   Eq. 17), EK1 keeps it (H = C-dot - J_f C);
3. condition on the measurement ``y_k = g(X, u_k) + v``, ``v ~ N(0, R_y)`` (g linearised at the mean);
   the log of its innovation density is ``-phi_k`` (Eq. 20).

Diffusion (specs 6.1-6.2, option b): the local quasi-maximum-likelihood estimate of each dimension,
``sigma2_k,i = zhat_k,i^2 / (C-dot Q1(h) C-dot^T)`` (the unit-diffusion innovation variance of the
residual, which depends only on the predicted mean and so is known before ``Q`` is formed), enters a
running mean ``Gamma_k = mean_{s<=k} sigma2_s`` used in step k's ``Q``. The likelihood is then a
deterministic function of ``theta`` and the data up to ``t_k``, which the IMH move of the SMC sampler
requires; the running mean tends to the paper's global average (Eq. 19, Bosch et al. form).

Everything is square-root: the prediction is one QR (``tria``); each update is the first ``n_z``
(or ``n_y``) Householder reflections of the QR of its block (``tria_rows``), which give the innovation
and gain factors and a square (not triangular) factor of the updated covariance: the rest of a full QR
would only re-triangularise that factor, which the next prediction's QR does anyway (in the Bouc-Wen
step this removes 18 of 31 reflections). The reflections are written out element by element for the
small blocks (:mod:`twinfer.infer.pn._small`), which under ``vmap`` over particles avoids one LAPACK
call per particle.

References:
    Longbottom et al., Eq. (12)-(20); Tronarp et al. (2019) (EK0/EK1 as Gaussian filtering);
    Schober, Särkkä & Hennig (2019) and Bosch, Hennig & Tronarp (2021) (local and per-dimension
    diffusion estimates); Krämer & Hennig (2020) (square-root implementation).

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from twinfer.infer.pn._prior import iwp_chol_q_1d, iwp_transition, projection
from twinfer.infer.pn._small import solve_lower, tria, tria_rows
from twinfer.models import AbstractModel

METHODS = ("ek0", "ek1")

Measure = Callable[[Any, Any, Any], Any]
"""``measure(X, u, params) -> y``: the measured quantity as a function of the stacked state X."""


class PNState(NamedTuple):
    """Filter state: stacked mean ``(d(q+1),)``, its Cholesky factor, diffusion ``(d,)``, count, time."""

    mean: Any
    chol: Any
    diffusion: Any
    n_calibrated: Any
    t: Any


class PNInfo(NamedTuple):
    """Per-step output: data log-likelihood increment ``-phi_k``, ODE residual ``zhat``, local diffusion."""

    loglik: Any
    residual: Any
    local_diffusion: Any


def condition_exact(mean: Any, chol: Any, H: Any, residual: Any, mask: Any) -> tuple[Any, Any]:
    """Condition on ``0 = H x + d`` with zero noise (``residual = H mean + d``); masked rows are ignored.

    The first ``n_z`` reflections of a QR of ``[[0, H L], [0, L]]`` (:func:`tria_rows`) give ``L_S``, the
    gain factor and a square posterior factor, as the
    square-root update of :func:`twinfer.infer.filters.update` with ``L_R = 0``. Unobserved rows (mask
    False) get zero ``H`` and unit ``L_S`` so shapes stay static.
    """
    m = mask.astype(mean.dtype)
    n_z, n_x = H.shape
    H_eff = H * m[:, None]
    block = jnp.concatenate(
        [
            jnp.concatenate([jnp.diag(1.0 - m), H_eff @ chol], axis=1),
            jnp.concatenate([jnp.zeros((n_x, n_z), mean.dtype), chol], axis=1),
        ],
        axis=0,
    )
    big = tria_rows(block, n_z)
    chol_S, gain_factor, chol_post = big[:n_z, :n_z], big[n_z:, :n_z], big[n_z:, n_z:]
    z = solve_lower(chol_S, -residual * m)
    return mean + gain_factor @ z, chol_post


def _update(mean: Any, chol: Any, H: Any, d: Any, chol_R: Any, y: Any, mask: Any) -> tuple[Any, Any, Any]:
    """Square-root update on ``y = H x + d + v``, ``v ~ N(0, R)`` (as :func:`twinfer.infer.filters.update`).

    Masked components get zero rows in ``H`` and in the factor of ``R`` and a unit innovation variance;
    masking rows of the factor is exact for independent sensors (diagonal ``R``, as in every case
    here) and, with all components observed, for any ``R``.
    Returns the posterior mean, factor and the log innovation density.
    """
    m = mask.astype(mean.dtype)
    n_y, n_x = H.shape
    chol_R_eff = chol_R * m[:, None] + jnp.diag(1.0 - m)
    innovation = (y - (H @ mean + d)) * m
    block = jnp.concatenate(
        [
            jnp.concatenate([chol_R_eff, (H * m[:, None]) @ chol], axis=1),
            jnp.concatenate([jnp.zeros((n_x, n_y), mean.dtype), chol], axis=1),
        ],
        axis=0,
    )
    big = tria_rows(block, n_y)
    chol_S, gain_factor, chol_post = big[:n_y, :n_y], big[n_y:, :n_y], big[n_y:, n_y:]
    z = solve_lower(chol_S, innovation)
    loglik = -0.5 * (z @ z) - jnp.sum(jnp.log(jnp.diag(chol_S))) - 0.5 * jnp.sum(m) * jnp.log(2 * jnp.pi)
    return mean + gain_factor @ z, chol_post, loglik


class PNFilter(eqx.Module):
    """A Gaussian ODE filter for a twinfer model, with an optional measurement update.

    Attributes:
        model: the ODE ``dx/dt = f(t, x, u; params)`` (any :class:`~twinfer.models.AbstractModel`).
        q: IWP order (number of derivatives in the prior).
        method: ``"ek0"`` (the paper's EKF0) or ``"ek1"``.
        measure: ``(X, u, params) -> y`` on the stacked state; default the model's output at ``C X``.
        diffusion_floor: lower bound of each calibrated diffusion (keeps ``Q`` positive definite when
            the residual is exactly zero, e.g. a system at rest).
        calibrate: False keeps the diffusion of the initial state (unit by default): the textbook
            uncalibrated filter.
        shared_diffusion: one diffusion for all ODE dimensions (the largest local estimate) instead of
            one per dimension. A second-order system in first-order form has the trivially satisfied
            residual ``x' - v`` in its position dimension, whose per-dimension estimate collapses and
            makes the position chain over-confident; sharing keeps it at the scale of the dynamics.

    """

    model: AbstractModel
    q: int = eqx.field(static=True, default=2)
    method: str = eqx.field(static=True, default="ek0")
    measure: Measure | None = eqx.field(static=True, default=None)
    diffusion_floor: float = eqx.field(static=True, default=1e-20)
    calibrate: bool = eqx.field(static=True, default=True)
    shared_diffusion: bool = eqx.field(static=True, default=False)

    def __check_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"PNFilter method: expected one of {METHODS}; received {self.method!r}.")
        if not isinstance(self.q, int) or self.q < 1:
            raise ValueError(f"PNFilter q: expected an integer >= 1; received {self.q!r}.")

    @property
    def d(self) -> int:
        return self.model.n_state

    def _f(self, t: Any, x: Any, u: Any, params: Any) -> Any:
        return self.model.vector_field(t, x, u, params)

    def observe(self, X: Any, u: Any, params: Any, t: Any = 0.0) -> Any:
        """The measurement function ``g(X, u)`` on the stacked state."""
        if self.measure is not None:
            return self.measure(X, u, params)
        return self.model.output(t, X[: self.d], u, params)

    def init(self, params: Any, x0: Any, x0_std: Any, u0: Any, t0: float = 0.0) -> PNState:
        """``X_1``: value ``x0``, first derivative ``f(x0)``, second ``J_f f`` (Taylor mode), rest zero.

        Args:
            params: model parameters.
            x0: initial ODE state ``(d,)``.
            x0_std: standard deviation of each component of ``x0`` ``(d,)`` (zero where known).
            u0: input at ``t0``.
            t0: initial time.

        Returns:
            :class:`PNState` with unit diffusion and no calibration steps yet.

        References:
            Longbottom et al., Eq. (12a) (values are DECIDE-3 of specs/pn-smc.md).

        """
        d, q = self.d, self.q
        x0 = jnp.asarray(x0, dtype=jnp.float64)
        f0 = lambda x: self._f(t0, x, u0, params)
        dx, ddx = jax.jvp(f0, (x0,), (f0(x0),))
        blocks = [x0, dx] + ([ddx] if q >= 2 else []) + [jnp.zeros(d)] * max(q - 2, 0)
        chol = (
            jnp.zeros((d * (q + 1), d * (q + 1))).at[:d, :d].set(jnp.diag(jnp.asarray(x0_std, jnp.float64)))
        )
        return PNState(
            mean=jnp.concatenate(blocks),
            chol=chol,
            diffusion=jnp.ones(d),
            n_calibrated=jnp.zeros((), jnp.int32),
            t=jnp.asarray(t0, jnp.float64),
        )

    def step(
        self,
        state: PNState,
        params: Any,
        h: Any,
        u: Any,
        y: Any,
        y_mask: Any,
        chol_R: Any,
        ode_update: Any = True,
    ) -> tuple[PNState, PNInfo]:
        """Advance by ``h``: predict, ODE update, data update (``h = 0``, no ODE update: data only).

        Args:
            state: filter state at the previous grid time.
            params: model parameters.
            h: step length (0 for the data update at the initial time).
            u: input sampled at the new grid time.
            y: measurement at the new grid time ``(n_y,)``.
            y_mask: which entries of ``y`` are observed (all False for a pure ODE solve).
            chol_R: Cholesky factor of the measurement-noise covariance ``(n_y, n_y)``.
            ode_update: whether to condition on the ODE residual (and calibrate) at this step.

        Returns:
            The new state and :class:`PNInfo` (``loglik = -phi_k``, Eq. 20).

        """
        d, q = self.d, self.q
        E0, E1 = projection(q, d, 0), projection(q, d, 1)
        t = state.t + h
        ode = jnp.asarray(ode_update, bool)
        # eq. (16): the predicted mean does not depend on Gamma, so the residual is known before Q
        A, _ = iwp_transition(q, d, h, jnp.ones(d))
        mean_p = A @ state.mean
        fx = self._f(t, E0 @ mean_p, u, params)
        residual = E1 @ mean_p - fx
        q11 = iwp_chol_q_1d(q, h)[1, :]
        s_unit = jnp.where(ode, q11 @ q11, 1.0)
        local = residual**2 / s_unit
        if self.shared_diffusion:
            local = jnp.full_like(local, jnp.max(local))
        n_new = state.n_calibrated + ode.astype(jnp.int32)
        # running mean of the local estimates (the first one replaces the unit initial value)
        running = state.diffusion + jnp.where(ode, (local - state.diffusion) / jnp.maximum(n_new, 1), 0.0)
        diffusion = jnp.maximum(running, self.diffusion_floor) if self.calibrate else state.diffusion
        _, chol_Q = iwp_transition(q, d, h, diffusion)
        mean_p, chol_p = mean_p, tria(jnp.concatenate([A @ state.chol, chol_Q], axis=1))
        if self.method == "ek0":
            H = E1
        else:
            J = jax.jacfwd(lambda x: self._f(t, x, u, params))(E0 @ mean_p)
            H = E1 - J @ E0
        mean_o, chol_o = condition_exact(mean_p, chol_p, H, residual, jnp.broadcast_to(ode, (d,)))
        g = lambda X: self.observe(X, u, params, t)
        Hy = jax.jacfwd(g)(mean_o)
        dy = g(mean_o) - Hy @ mean_o
        mean_f, chol_f, loglik = _update(mean_o, chol_o, Hy, dy, chol_R, y, y_mask)
        new = PNState(mean=mean_f, chol=chol_f, diffusion=diffusion, n_calibrated=n_new, t=t)
        return new, PNInfo(loglik=loglik, residual=residual, local_diffusion=local)


class PNSolution(NamedTuple):
    """A PN solve over a grid: means and standard deviations of ``C X`` and the final diffusion."""

    mean: Any
    std: Any
    diffusion: Any
    loglik: Any


def pn_solve(
    pn: PNFilter,
    params: Any,
    x0: Any,
    x0_std: Any,
    h: Any,
    us: Any,
    ys: Any | None = None,
    y_mask: Any | None = None,
    chol_R: Any | None = None,
) -> PNSolution:
    """Run the filter over ``len(us)`` grid points ``t_0 + k h`` (ODE solve, or filter with data).

    The first grid point uses the initial state (data update only); each later point predicts, updates
    on the ODE residual and, where ``y_mask`` is True, on the data. Standard deviations use the
    running diffusion of each step (the paper rescales with the final global estimate, Sec. 2.6).

    Args:
        pn: the filter.
        params: model parameters.
        x0: initial ODE state ``(d,)``.
        x0_std: standard deviations of ``x0`` ``(d,)``.
        h: grid step, or per-step lengths ``(T-1,)``; a zero step is skipped (no prediction, no ODE or
            data update), which lets grids of different lengths share one compiled solve.
        us: inputs at the grid points ``(T, n_u)``.
        ys: measurements ``(T, n_y)`` or None for a pure ODE solve.
        y_mask: observed entries ``(T, n_y)``; default all observed when ``ys`` is given.
        chol_R: measurement-noise Cholesky factor ``(n_y, n_y)``.

    Returns:
        :class:`PNSolution` with ``mean``/``std`` ``(T, d)`` and the total data log-likelihood.

    """
    us = jnp.asarray(us, jnp.float64)
    n_steps = us.shape[0]
    if ys is None:
        ys = jnp.zeros((n_steps, 1))
        y_mask = jnp.zeros((n_steps, 1), bool)
        chol_R = jnp.eye(1)
        pn = dataclasses.replace(pn, measure=_first_entry)
    ys = jnp.asarray(ys, jnp.float64)
    y_mask = jnp.ones(ys.shape, bool) if y_mask is None else jnp.asarray(y_mask, bool)
    if chol_R is None:
        raise ValueError(
            "pn_solve chol_R: expected the measurement-noise Cholesky factor with ys; received None."
        )
    d = pn.d
    E0 = projection(pn.q, d, 0)
    state0 = pn.init(params, x0, x0_std, us[0])
    state0, info0 = pn.step(state0, params, 0.0, us[0], ys[0], y_mask[0], chol_R, ode_update=False)

    hs = jnp.broadcast_to(jnp.asarray(h, jnp.float64), (n_steps - 1,))

    def body(state, inp):
        h_k, u, y, m = inp
        live = h_k > 0
        state, info = pn.step(state, params, h_k, u, y, m & live, chol_R, ode_update=live)
        return state, (E0 @ state.mean, _marginal_std(E0, state.chol), state.diffusion, info.loglik)

    last, (means, stds, diffs, lls) = jax.lax.scan(body, state0, (hs, us[1:], ys[1:], y_mask[1:]))
    means = jnp.concatenate([(E0 @ state0.mean)[None], means])
    stds = jnp.concatenate([_marginal_std(E0, state0.chol)[None], stds])
    return PNSolution(mean=means, std=stds, diffusion=last.diffusion, loglik=info0.loglik + jnp.sum(lls))


def _first_entry(X: Any, u: Any, params: Any) -> Any:
    return X[:1]


def _marginal_std(E: Any, chol: Any) -> Any:
    return jnp.sqrt(jnp.sum((E @ chol) ** 2, axis=1))
