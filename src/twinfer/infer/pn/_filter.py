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
small blocks (:mod:`twinfer.infer.gaussian`), which under ``vmap`` over particles avoids one LAPACK
call per particle.

Covariance structure (``PNFilter.structure``, :mod:`twinfer.infer.pn._structure`): with EK0, a diagonal
``Gamma`` and a measurement whose every component depends on one ODE dimension, the covariance stays
block-diagonal over the ODE dimensions, and the block-diagonal filter keeps one ``(q+1) x (q+1)``
factor per dimension: the prediction is one ``(q+1) x 2(q+1)`` QR per block, the ODE and data updates
are scalar square-root (Potter) updates, one per row, each on the block its row touches. Same numbers
as the dense filter to rounding (tested on the PN-SMC models); for Bouc-Wen (d = 3, 500 particles) the
step is about 6 times faster (``twinfer bench pn``). ``"auto"`` (the default) chooses it where it is
exact; EK1 is always dense.

References:
    Longbottom et al., Eq. (12)-(20); Tronarp et al. (2019) (EK0/EK1 as Gaussian filtering);
    Schober, Särkkä & Hennig (2019) and Bosch, Hennig & Tronarp (2021) (local and per-dimension
    diffusion estimates); Krämer & Hennig (2020) (square-root implementation); Krämer, Bosch,
    Schmidt & Hennig (2022) (block-diagonal EK0).

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from twinfer._config import ensure
from twinfer.infer.gaussian import condition_exact, tria, tria_scalar, update, update_scalar
from twinfer.infer.pn._prior import iwp_chol_q_1d, iwp_transition, iwp_transition_1d, projection
from twinfer.infer.pn._structure import (
    STRUCTURES,
    from_blocks,
    generic_like,
    probe_measurement_blocks,
    to_blocks,
)
from twinfer.models import AbstractModel

METHODS = ("ek0", "ek1")

Measure = Callable[[Float[Array, " N"], Any, Any], Float[Array, " n_y"]]
"""``measure(X, u, params) -> y``: the measured quantity as a function of the stacked state X."""


class PNState(NamedTuple):
    """Filter state: stacked mean ``(d(q+1),)``, its Cholesky factor, diffusion ``(d,)``, count, time.

    The factor is ``(d(q+1), d(q+1))`` for the dense filter and ``(d, q+1, q+1)`` (one factor per ODE
    dimension, :mod:`twinfer.infer.pn._structure`) for the block-diagonal one.
    """

    mean: Float[Array, " N"]
    chol: Float[Array, "N N"] | Float[Array, "d q+1 q+1"]
    diffusion: Float[Array, " d"]
    n_calibrated: Int[Array, ""]
    t: Float[Array, ""]


class PNInfo(NamedTuple):
    """Per-step output: data log-likelihood increment ``-phi_k``, ODE residual ``zhat``, local diffusion."""

    loglik: Float[Array, ""]
    residual: Float[Array, " d"]
    local_diffusion: Float[Array, " d"]


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
        structure: covariance structure. ``"dense"``: one factor of the whole stacked state.
            ``"blockdiag"``: one ``(q+1)``-sized factor per ODE dimension, exact for EK0 when each
            measured component depends on one dimension and the sensors are independent (diagonal
            ``R``) (:mod:`twinfer.infer.pn._structure`); a ValueError at trace time if that does not
            hold. ``"auto"``: block-diagonal where it is exact for any ``R`` (EK0 and one measured
            component, or ``measure_blocks`` declared), dense otherwise. Same means, covariances and
            log-likelihoods to rounding; block-diagonal costs ``d`` small QRs instead of one large.
        measure_blocks: the ODE dimension each measured component depends on, declared by the caller
            (default: found from the measurement's Jacobian at a generic point). Checked at each step.

    """

    model: AbstractModel
    q: int = eqx.field(static=True, default=2)
    method: str = eqx.field(static=True, default="ek0")
    measure: Measure | None = eqx.field(static=True, default=None)
    diffusion_floor: float = eqx.field(static=True, default=1e-20)
    calibrate: bool = eqx.field(static=True, default=True)
    shared_diffusion: bool = eqx.field(static=True, default=False)
    structure: str = eqx.field(static=True, default="auto")
    measure_blocks: tuple[int, ...] | None = eqx.field(static=True, default=None)

    def __check_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"PNFilter method: expected one of {METHODS}; received {self.method!r}.")
        if not isinstance(self.q, int) or self.q < 1:
            raise ValueError(f"PNFilter q: expected an integer >= 1; received {self.q!r}.")
        if self.structure not in STRUCTURES:
            raise ValueError(
                f"PNFilter structure: expected one of {STRUCTURES}; received {self.structure!r}."
            )
        if self.structure == "blockdiag" and self.method != "ek0":
            raise ValueError(
                f"PNFilter structure: 'blockdiag' needs method 'ek0' (EK1's H = C-dot - J_f C couples the "
                f"ODE dimensions); received method {self.method!r}. Use structure 'dense' or 'auto'."
            )
        if self.measure_blocks is not None and not all(
            isinstance(b, int) and 0 <= b < self.d for b in self.measure_blocks
        ):
            raise ValueError(
                f"PNFilter measure_blocks: expected a tuple of ODE dimensions in 0..{self.d - 1}; "
                f"received {self.measure_blocks!r}."
            )

    @property
    def d(self) -> int:
        return self.model.n_state

    def _f(self, t: Any, x: Any, u: Any, params: Any) -> Any:
        return self.model.vector_field(t, x, u, params)

    def observe(
        self, X: Float[Array, " N"], u: Float[Array, " n_u"], params: Any, t: Float[ArrayLike, ""] = 0.0
    ) -> Float[Array, " n_y"]:
        """The measurement function ``g(X, u)`` on the stacked state."""
        if self.measure is not None:
            return self.measure(X, u, params)
        return self.model.output(t, X[: self.d], u, params)

    def blocks(self, params: Any, u: Float[Array, " n_u"]) -> tuple[int, ...] | None:
        """The ODE dimension each measured component depends on when the filter runs block-diagonal.

        None: the dense filter (``structure`` "dense", EK1, or "auto" where block-diagonal is not known
        to be exact). Evaluated at trace time from shapes only (:mod:`twinfer.infer.pn._structure`).

        Raises:
            ValueError: ``structure="blockdiag"`` and a measured component depends on several ODE
                dimensions, or ``measure_blocks`` disagrees with the measurement's Jacobian.

        """
        if self.structure == "dense" or self.method != "ek0":
            return None
        n = self.d * (self.q + 1)
        u_g, params_g = generic_like(u), generic_like(params, seed=2)
        pattern = probe_measurement_blocks(lambda X: self.observe(X, u_g, params_g, 1.0), n, self.d)
        if self.measure_blocks is not None:
            if pattern is not None and (
                len(pattern) != len(self.measure_blocks)
                or any(set(p) - {b} for p, b in zip(pattern, self.measure_blocks, strict=False))
            ):
                raise ValueError(
                    f"PNFilter measure_blocks: the measurement's Jacobian touches the ODE dimensions "
                    f"{pattern} per component; received the declaration {self.measure_blocks!r}."
                )
            return self.measure_blocks
        single = pattern is not None and all(len(p) <= 1 for p in pattern)
        if self.structure == "blockdiag" and not single:
            raise ValueError(
                "PNFilter structure: 'blockdiag' needs each measured component to depend on one ODE "
                f"dimension; the measurement's Jacobian touches {pattern} (None: it could not be "
                "evaluated on concrete stand-ins). Declare measure_blocks or use structure 'dense'."
            )
        if pattern is None or not single or (self.structure == "auto" and len(pattern) > 1):
            return None  # auto: with several components only a declaration vouches for a diagonal R
        return tuple(p[0] if p else 0 for p in pattern)

    def init(
        self,
        params: Any,
        x0: Float[ArrayLike, " d"],
        state_sd: Float[ArrayLike, " d"],
        u0: Float[Array, " n_u"],
        t0: float = 0.0,
    ) -> PNState:
        """``X_1``: value ``x0``, first derivative ``f(x0)``, second ``J_f f`` (Taylor mode), rest zero.

        Args:
            params: model parameters.
            x0: initial ODE state ``(d,)``.
            state_sd: standard deviation of each component of ``x0`` ``(d,)`` (zero where known).
            u0: input at ``t0``.
            t0: initial time.

        Returns:
            :class:`PNState` with unit diffusion and no calibration steps yet (dense or block factor,
            as :meth:`blocks` decides).

        References:
            Longbottom et al., Eq. (12a) (values are DECIDE-3 of specs/pn-smc.md).

        """
        d, q = self.d, self.q
        x0 = jnp.asarray(x0, dtype=jnp.float64)
        f0 = lambda x: self._f(t0, x, u0, params)
        dx, ddx = jax.jvp(f0, (x0,), (f0(x0),))
        blocks = [x0, dx] + ([ddx] if q >= 2 else []) + [jnp.zeros(d)] * max(q - 2, 0)
        std0 = jnp.broadcast_to(jnp.asarray(state_sd, jnp.float64), (d,))
        if self.blocks(params, u0) is not None:
            chol = jnp.zeros((d, q + 1, q + 1)).at[:, 0, 0].set(std0)
        else:
            chol = jnp.zeros((d * (q + 1), d * (q + 1))).at[:d, :d].set(jnp.diag(std0))
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
        h: Float[ArrayLike, ""],
        u: Float[Array, " n_u"],
        y: Float[Array, " n_y"],
        y_mask: Bool[Array, " n_y"],
        chol_R: Float[Array, "n_y n_y"],
        ode_update: Bool[ArrayLike, ""] = True,
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
        if state.chol.ndim == 3:
            return self._step_blockdiag(state, params, h, u, y, y_mask, chol_R, ode_update)
        d, q = self.d, self.q
        E0, E1 = projection(q, d, 0), projection(q, d, 1)
        t = state.t + h
        ode = jnp.asarray(ode_update, bool)
        # eq. (16): the predicted mean does not depend on Gamma, so the residual is known before Q
        A, _ = iwp_transition(q, d, h, jnp.ones(d))
        mean_p = A @ state.mean
        fx = self._f(t, E0 @ mean_p, u, params)
        residual = E1 @ mean_p - fx
        local, n_new, diffusion = self._calibrate(state, residual, h, ode)
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
        mean_f, chol_f, info = update(mean_o, chol_o, Hy, dy, chol_R, y, y_mask, triangular=False)
        loglik = info.loglik
        new = PNState(mean=mean_f, chol=chol_f, diffusion=diffusion, n_calibrated=n_new, t=t)
        return new, PNInfo(loglik=loglik, residual=residual, local_diffusion=local)

    def _calibrate(self, state: PNState, residual: Any, h: Any, ode: Any) -> tuple[Any, Any, Any]:
        """Local quasi-MLE diffusion of each dimension and its running mean (specs 6.1-6.2, option b)."""
        q11 = iwp_chol_q_1d(self.q, h)[1, :]
        s_unit = jnp.where(ode, q11 @ q11, 1.0)
        local = residual**2 / s_unit
        if self.shared_diffusion:
            local = jnp.full_like(local, jnp.max(local))
        n_new = state.n_calibrated + ode.astype(jnp.int32)
        # running mean of the local estimates (the first one replaces the unit initial value)
        running = state.diffusion + jnp.where(ode, (local - state.diffusion) / jnp.maximum(n_new, 1), 0.0)
        diffusion = jnp.maximum(running, self.diffusion_floor) if self.calibrate else state.diffusion
        return local, n_new, diffusion

    def _step_blockdiag(
        self, state: PNState, params: Any, h: Any, u: Any, y: Any, y_mask: Any, chol_R: Any, ode_update: Any
    ) -> tuple[PNState, PNInfo]:
        """:meth:`step` with one ``(q+1)``-sized factor per ODE dimension (EK0; exactness in ``_structure``).

        Per block ``i``: predict with ``A1``, ``chol Q1 sqrt(Gamma_i)``; condition on the scalar residual
        row ``e_1`` (Eq. 17); then one scalar data update per measured component on the block it touches,
        all linearised at the ODE-updated mean, as the dense joint update with a diagonal ``R``. The
        updates are scalar square-root (Potter) updates (:func:`~twinfer.infer.gaussian.update_scalar`)
        and the small products are written element-wise, so the step has no batched matrix product.
        """
        blocks = self.blocks(params, u)
        if blocks is None:
            raise ValueError(
                f"PNFilter step: received a block-diagonal state (factor {state.chol.shape}) but the filter "
                f"(structure {self.structure!r}, method {self.method!r}) resolves to dense here."
            )
        d, n = self.d, self.q + 1
        t = state.t + h
        ode = jnp.asarray(ode_update, bool)
        a1, _ = iwp_transition_1d(self.q, h)
        means_p = jnp.stack([_upper_times(a1, m) for m in to_blocks(state.mean, d)])  # eq. (16)
        fx = self._f(t, means_p[:, 0], u, params)
        residual = means_p[:, 1] - fx
        local, n_new, diffusion = self._calibrate(state, residual, h, ode)
        chol_q1 = iwp_chol_q_1d(self.q, h)
        e1 = jnp.zeros(n).at[1].set(1.0)
        means_l, chols_l = [], []
        # a static loop over the d blocks: under vmap over particles, a vmap over blocks as well makes
        # XLA's CPU code for the small reflections several times slower (measured in bench pn)
        for i in range(d):
            a1_chol = _upper_times(a1, state.chol[i])
            chol_p = tria_scalar(jnp.concatenate([a1_chol, jnp.sqrt(diffusion[i]) * chol_q1], axis=1))
            m_i, c_i, _ = update_scalar(means_p[i], chol_p, e1, -residual[i], 0.0, ode)  # eq. (17)
            means_l.append(m_i)
            chols_l.append(c_i)
        means, chols = jnp.stack(means_l), jnp.stack(chols_l)
        g = lambda X: self.observe(X, u, params, t)
        mean_o = from_blocks(means)
        Hy = jax.jacfwd(g)(mean_o)
        dy = g(mean_o) - jnp.sum(Hy * mean_o[None, :], axis=1)
        n_y = Hy.shape[0]
        if len(blocks) != n_y:
            raise ValueError(
                f"PNFilter measure_blocks: expected one ODE dimension per measured component ({n_y}); "
                f"received {blocks!r}."
            )
        off = np.ones((n_y, n, d), bool)
        for r, b in enumerate(blocks):
            off[r, :, b] = False
        Hy = eqx.error_if(
            Hy,
            jnp.any((jnp.abs(Hy) > 0) & off.reshape(n_y, n * d)),
            f"PNFilter structure: a measured component depends on an ODE dimension other than the one "
            f"assigned to it {blocks}; use structure='dense' or fix measure_blocks.",
        )
        if n_y > 1:
            chol_R = eqx.error_if(
                chol_R,
                jnp.any(jnp.abs(chol_R - jnp.diag(jnp.diag(chol_R))) > 0),
                "PNFilter chol_R: the block-diagonal filter needs independent sensors (a diagonal factor); "
                "received off-diagonal entries. Use structure='dense'.",
            )
        loglik = jnp.zeros(())
        for r, b in enumerate(blocks):
            h_r = Hy[r, b::d]
            innovation = y[r] - jnp.sum(h_r * means[b]) - dy[r]
            m_b, c_b, ll = update_scalar(means[b], chols[b], h_r, innovation, chol_R[r, r], y_mask[r])
            means, chols, loglik = means.at[b].set(m_b), chols.at[b].set(c_b), loglik + ll
        new = PNState(mean=from_blocks(means), chol=chols, diffusion=diffusion, n_calibrated=n_new, t=t)
        return new, PNInfo(loglik=loglik, residual=residual, local_diffusion=local)

    def marginal_std(self, state: PNState, derivative: int = 0) -> Float[Array, " d"]:
        """Standard deviations ``(d,)`` of the ``derivative``-th derivative of the ODE state."""
        if state.chol.ndim == 3:
            return jnp.sqrt(jnp.sum(state.chol[:, derivative, :] ** 2, axis=-1))
        return _marginal_std(projection(self.q, self.d, derivative), state.chol)


class PNSolution(NamedTuple):
    """A PN solve over a grid: means and standard deviations of ``C X`` and the final diffusion."""

    mean: Float[Array, "T d"]
    std: Float[Array, "T d"]
    diffusion: Float[Array, " d"]
    loglik: Float[Array, ""]

    def to_estimate(self, times: Any, state_names: Any = None) -> Any:
        """The solve as a :class:`twinfer.infer.Estimate` on its grid ``times`` (T,).

        ``state_names`` name the d columns (default ``"x[i]"``); no covariances are kept.

        Raises:
            ValueError: when ``times`` or ``state_names`` do not match the solution's shape.

        """
        from twinfer.infer._estimate import Estimate

        mean, std = np.asarray(self.mean), np.asarray(self.std)
        names = tuple(f"x[{i}]" for i in range(mean.shape[1])) if state_names is None else tuple(state_names)
        if np.shape(times) != (mean.shape[0],) or len(names) != mean.shape[1]:
            raise ValueError(
                f"PNSolution.to_estimate: expected {mean.shape[0]} times and {mean.shape[1]} names; received "
                f"times of shape {np.shape(times)} and {len(names)} names."
            )
        return Estimate(np.asarray(times, np.float64), mean, std, None, names, loglik=float(self.loglik))


def pn_solve(
    pn: PNFilter,
    params: Any,
    x0: Float[ArrayLike, " d"],
    state_sd: Float[ArrayLike, " d"],
    h: Float[ArrayLike, ""] | Float[ArrayLike, " T-1"],
    us: Float[ArrayLike, "T n_u"],
    ys: Float[ArrayLike, "T n_y"] | None = None,
    y_mask: Bool[ArrayLike, "T n_y"] | None = None,
    chol_R: Float[Array, "n_y n_y"] | None = None,
) -> PNSolution:
    """Run the filter over ``len(us)`` grid points ``t_0 + k h`` (ODE solve, or filter with data).

    The first grid point uses the initial state (data update only); each later point predicts, updates
    on the ODE residual and, where ``y_mask`` is True, on the data. Standard deviations use the
    running diffusion of each step (the paper rescales with the final global estimate, Sec. 2.6).

    Args:
        pn: the filter.
        params: model parameters.
        x0: initial ODE state ``(d,)``.
        state_sd: standard deviations of ``x0`` ``(d,)``.
        h: grid step, or per-step lengths ``(T-1,)``; a zero step is skipped (no prediction, no ODE or
            data update), which lets grids of different lengths share one compiled solve.
        us: inputs at the grid points ``(T, n_u)``.
        ys: measurements ``(T, n_y)`` or None for a pure ODE solve.
        y_mask: observed entries ``(T, n_y)``; default all observed when ``ys`` is given.
        chol_R: measurement-noise Cholesky factor ``(n_y, n_y)``.

    Returns:
        :class:`PNSolution` with ``mean``/``std`` ``(T, d)`` and the total data log-likelihood.

    """
    ensure("pn_solve", pn=pn, params=params, x0=x0, state_sd=state_sd, us=us, ys=ys)
    us = jnp.asarray(us, jnp.float64)
    n_steps = us.shape[0]
    if ys is None:
        # no data: the block filter takes no measurement at all; the dense update needs one (masked) row
        no_data = dataclasses.replace(pn, measure=_no_entry)
        n_y = 0 if no_data.blocks(params, us[0]) is not None else 1
        pn = no_data if n_y == 0 else dataclasses.replace(pn, measure=_first_entry)
        ys = jnp.zeros((n_steps, n_y))
        y_mask = jnp.zeros((n_steps, n_y), bool)
        chol_R = jnp.eye(n_y)
    ys = jnp.asarray(ys, jnp.float64)
    y_mask = jnp.ones(ys.shape, bool) if y_mask is None else jnp.asarray(y_mask, bool)
    if chol_R is None:
        raise ValueError(
            "pn_solve chol_R: expected the measurement-noise Cholesky factor with ys; received None."
        )
    d = pn.d
    E0 = projection(pn.q, d, 0)
    state0 = pn.init(params, x0, state_sd, us[0])
    state0, info0 = pn.step(state0, params, 0.0, us[0], ys[0], y_mask[0], chol_R, ode_update=False)

    hs = jnp.broadcast_to(jnp.asarray(h, jnp.float64), (n_steps - 1,))

    def body(state, inp):
        h_k, u, y, m = inp
        live = h_k > 0
        state, info = pn.step(state, params, h_k, u, y, m & live, chol_R, ode_update=live)
        return state, (E0 @ state.mean, pn.marginal_std(state), state.diffusion, info.loglik)

    last, (means, stds, diffs, lls) = jax.lax.scan(body, state0, (hs, us[1:], ys[1:], y_mask[1:]))
    means = jnp.concatenate([(E0 @ state0.mean)[None], means])
    stds = jnp.concatenate([pn.marginal_std(state0)[None], stds])
    return PNSolution(mean=means, std=stds, diffusion=last.diffusion, loglik=info0.loglik + jnp.sum(lls))


def _upper_times(upper: Any, b: Any) -> Any:
    """``upper @ b`` for an upper-triangular ``upper`` as row combinations (no batched matrix product)."""
    n = upper.shape[0]
    rows = [sum((upper[i, k] * b[k] for k in range(i + 1, n)), upper[i, i] * b[i]) for i in range(n)]
    return jnp.stack(rows)


def _first_entry(X: Any, u: Any, params: Any) -> Any:
    return X[:1]


def _no_entry(X: Any, u: Any, params: Any) -> Any:
    return X[:0]


def _marginal_std(E: Any, chol: Any) -> Any:
    return jnp.sqrt(jnp.sum((E @ chol) ** 2, axis=1))
