"""The central filter (KF, EKF, both UKFs) as a :class:`~twinfer.infer.Program`: one step per measurement.

:func:`~twinfer.infer.filters.run_filter`, :func:`~twinfer.infer.filters.smooth` and
``twinfer.estimate(model, data, Central(...))`` all run :meth:`CentralProgram.scan`, the scan of the same
step a live twin calls frame by frame (:meth:`CentralProgram.step`), so a record filtered at once and one
fed a row at a time give the same estimate.

References:
    compositional-inference paper, Alg. 4-6 (KF, EKF, UKF); Särkkä & Svensson, Bayesian Filtering and
    Smoothing (2nd ed.), Sec. 9.4 (statistical linear regression).

"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.data import Dataset
from twinfer.infer._estimate import Estimate
from twinfer.infer._program import Frame, Program, Row, frames_of, input_pair
from twinfer.infer.filters._augment import log_scaled
from twinfer.infer.filters._errors import DivergenceError
from twinfer.infer.filters._gaussian_filter import GaussianFilterOutput, GaussianStep, Kernel, gaussian_step
from twinfer.infer.filters._ukf import ukf_step
from twinfer.infer.gaussian import UnscentedWeights, linear, taylor, unscented


class FilterState(NamedTuple):
    """A central filter's state after k measurements: what its next step needs, and nothing else.

    ``mean``/``chol`` the posterior (the filter's coordinates: an unknown on a log scale is its log),
    ``u`` the last frame's input, ``k`` the frames taken, ``loglik`` and ``nis`` their sums, ``n_obs``
    the observed values, ``bad`` the first frame whose posterior was non-finite (-1: none).
    """

    mean: Any
    chol: Any
    u: Any
    k: Any
    loglik: Any
    nis: Any
    n_obs: Any
    bad: Any


@functools.lru_cache(maxsize=16)
def _unscented(weights: UnscentedWeights) -> Any:
    """One linearisation function per weights (a stable static part of the jitted step)."""
    return unscented(weights)


def lognormal_row(mean: Any, std: Any, log_cols: tuple[int, ...]) -> tuple[Any, Any]:
    """``mean``/``std`` with the ``log_cols`` columns (Gaussian on ``z = log theta``) as theta's moments.

    ``E theta = exp(mu + s^2 / 2)``, ``SD theta = E sqrt(exp(s^2) - 1)`` (the log-normal; Johnson, Kotz &
    Balakrishnan, Continuous Univariate Distributions vol. 1, 2nd ed., eq. 14.8a-b), traced.
    """
    if not log_cols:
        return mean, std
    idx = jnp.asarray(log_cols)
    mu, s = mean[..., idx], std[..., idx]
    a = jnp.exp(mu + 0.5 * s**2)
    return mean.at[..., idx].set(a), std.at[..., idx].set(a * jnp.sqrt(jnp.expm1(s**2)))


class CentralProgram(Program):
    """The square-root KF / EKF / UKF of one model over its whole state (unknowns appended).

    Built by :func:`twinfer.compile` (or :func:`~twinfer.infer.filters.run_filter`); the numbers
    (``x0``, the factors ``chol_P0``, ``chol_Q``, ``chol_R`` and the model's parameters inside ``f``
    and ``h``) are array fields, so :meth:`with_numbers` reuses the compiled step.
    """

    f: Any
    h: Any
    x0: Any
    chol_P0: Any
    chol_Q: Any
    chol_R: Any
    linearisation: str = eqx.field(static=True)
    weights: UnscentedWeights | None = eqx.field(static=True)
    log_cols: tuple[int, ...] = eqx.field(static=True)
    dt: float = eqx.field(static=True)
    kernel: Kernel = eqx.field(static=True, default="qr")

    # -- the contract --------------------------------------------------------------------------------
    def init(self, u0: Any = None) -> FilterState:
        """The prior at t_0; ``u0`` the input sampled with it (zeros when None)."""
        u0 = jnp.zeros(len(self.input_names)) if u0 is None else jnp.asarray(u0, dtype=jnp.float64)
        zero = jnp.zeros((), jnp.float64)
        count = jnp.zeros((), jnp.int32)
        return FilterState(
            jnp.asarray(self.x0), jnp.asarray(self.chol_P0), u0, count, zero, zero, count, count - 1
        )

    @eqx.filter_jit
    def step(self, state: FilterState, frame: Frame) -> tuple[FilterState, Row]:
        """One measurement row: predict over ``[t_k, t_{k+1})``, update with the frame's outputs."""
        # one step as a loop of a trip count XLA cannot see: the loop body is compiled on its own, as in
        # :meth:`scan`, so a record fed a row at a time and one filtered at once round alike (a standalone
        # step, or a loop of known trip count 1, is fused with its surroundings and rounds differently)
        blank = jax.tree_util.tree_map(
            lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(self.advance, state, frame)[1]
        )
        once = jnp.minimum(state.k, 0) + 1

        def body(_: Any, carry: Any) -> Any:
            return self.advance(carry[0], frame)

        state, out = jax.lax.fori_loop(0, once, body, (state, blank))
        std = jnp.sqrt(jnp.maximum(jnp.sum(out.chol * out.chol, axis=1), 0.0))
        mean, std = lognormal_row(out.mean, std, self.log_cols)
        return state, Row(mean, std, out.loglik, out.nis, out.ok, out.innov)

    def run(self, data: Dataset) -> Estimate:
        """The filtered estimate over ``data`` (row 0 the prior): :meth:`scan`, then :meth:`estimate_of`.

        Raises:
            ValueError: a record whose outputs, inputs, step or time convention are not the program's.
            DivergenceError: the posterior became non-finite, naming the step and its time.

        """
        out = self.scan(data, smoother_inputs=False)
        bad = int(out.first_bad_step)
        if bad >= 0:
            raise DivergenceError(
                f"Program.run: the filter diverged at step {bad} (t = {float(data.times[1 + bad]):g}): "
                "non-finite state or covariance. Check the model, the noise levels and the prior."
            )
        return self.estimate_of(data, out)

    def estimate_of(self, data: Dataset, out: GaussianFilterOutput) -> Estimate:
        """The :class:`~twinfer.infer.Estimate` of a :meth:`scan` over ``data``.

        The prior, then the filtered moments; unknowns on a log scale in their own units.
        """
        cov0 = self.chol_P0 @ self.chol_P0.T
        means, covs, stds = _filtered_summary(self.x0, cov0, out.means, out.chols)
        n_obs = int(np.asarray(data.mask[1:]).sum())
        est = Estimate(
            times=data.times,
            means=means,
            stds=stds,
            covs=covs,
            state_names=self.state_names,
            parameters=self.parameters,
            loglik=float(out.loglik),
            nis=float(out.nis) if n_obs and out.nis is not None else None,
        )
        return log_scaled(est, self.log_cols, "Program.run")

    # -- the engine ----------------------------------------------------------------------------------
    def advance(self, state: FilterState, frame: Frame) -> tuple[FilterState, GaussianStep]:
        """:meth:`step` with the whole step record.

        The record holds the predicted moments and the cross-covariance, which the RTS smoother reads.
        """
        mask = jnp.ones(jnp.shape(frame.y), bool) if frame.mask is None else frame.mask
        y = jnp.where(mask, frame.y, 0.0)
        pair = input_pair(state.u, frame.u, self.input_hold, self.alignment)
        weights = UnscentedWeights.merwe() if self.weights is None else self.weights
        # Redrawn sigma points with non-negative weights: the statistical linear regression's moments
        # are the sigma points' own (A P A^T + Omega is their covariance), so the direct square-root UKF
        # (ukf_step with redraw, one factorisation a half step) gives the same posterior to rounding,
        # about 2.4 times faster than linearising (twinfer bench peers).
        direct = (
            self.linearisation == "redrawn"
            and self.kernel == "qr"
            and weights.centre_weight(state.mean.shape[0]) >= 0
        )
        if self.linearisation == "propagated" or direct:
            out = ukf_step(
                self.f,
                self.h,
                state.mean,
                state.chol,
                self.chol_Q,
                self.chol_R,
                pair,
                y,
                mask,
                weights=weights,
                redraw=direct,
                kernel=self.kernel,
            )
        else:
            lin = {"taylor": taylor, "linear": linear}.get(self.linearisation)
            lin = _unscented(self.weights or UnscentedWeights.merwe()) if lin is None else lin
            out = gaussian_step(
                self.f, self.h, lin, self.chol_Q, self.chol_R, state.mean, state.chol, pair, y, mask,
                kernel=self.kernel,
            )  # fmt: skip
        bad = jnp.where((state.bad < 0) & ~out.ok, state.k, state.bad)
        new = FilterState(
            out.mean,
            out.chol,
            jnp.asarray(frame.u, state.u.dtype),
            state.k + 1,
            state.loglik + out.loglik,
            state.nis + out.nis,
            state.n_obs + jnp.sum(mask).astype(state.n_obs.dtype),
            bad,
        )
        return new, out

    def scan(self, data: Dataset, smoother_inputs: bool = True) -> GaussianFilterOutput:
        """The filter over a record in one compiled call: every step's moments.

        ``smoother_inputs`` (default) also keeps the predicted moments and cross-covariances the RTS
        smoother reads; without them (None in the output) the scan is faster.
        """
        self.check_record(data)
        u0, frames = frames_of(data)
        return _scan(self, jnp.asarray(u0), Frame(*(jnp.asarray(a) for a in frames)), smoother_inputs)

    def check_record(self, data: Dataset) -> None:
        """``data`` against the program: outputs, input count, step and time convention, named."""
        if data.output_names != self.output_names:
            raise ValueError(
                f"Program.run data: expected the outputs {self.output_names}; received {data.output_names}."
            )
        n_u = 0 if data.inputs is None else data.inputs.shape[1]
        if n_u != len(self.input_names):
            raise ValueError(
                f"Program.run data: expected {len(self.input_names)} input columns {self.input_names}; "
                f"received {n_u}."
            )
        if not np.isclose(data.dt, self.dt, rtol=1e-9, atol=0.0):
            raise ValueError(
                f"Program.run data: expected a record with the program's step {self.dt:g} s; received a step "
                f"of {data.dt:g} s (compile the program for this record's step)."
            )
        for field in ("input_hold", "alignment"):
            if n_u and getattr(data, field) != getattr(self, field):
                raise ValueError(
                    f"Program.run data {field}: expected the program's {getattr(self, field)!r}; received "
                    f"{getattr(data, field)!r} (compile with {field}={getattr(data, field)!r})."
                )

    def with_numbers(self, **numbers: Any) -> CentralProgram:
        """The same compiled program with other numbers (no recompile).

        Any of ``x0``, ``chol_P0``, ``chol_Q``, ``chol_R`` (arrays of the same shapes), and ``params``
        (the model's parameters, same structure).

        Raises:
            ValueError: an unknown name, or an array of another shape, named.

        """
        allowed = ("x0", "chol_P0", "chol_Q", "chol_R", "params")
        program = self
        for name, value in numbers.items():
            if name not in allowed:
                raise ValueError(
                    f"Program.with_numbers: expected names among {', '.join(allowed)}; received {name!r}."
                )
            if name == "params":
                program = eqx.tree_at(lambda p: (p.f.params, p.h.params), program, (value, value))
                continue
            old, new = np.shape(getattr(program, name)), np.asarray(value, dtype=np.float64)
            if new.shape != old:
                raise ValueError(f"Program.with_numbers {name}: expected shape {old}; received {new.shape}.")
            program = eqx.tree_at(lambda p, n=name: getattr(p, n), program, jnp.asarray(new))
        return program


@eqx.filter_jit
def _scan(
    program: CentralProgram, u0: Any, frames: Frame, smoother_inputs: bool = True
) -> GaussianFilterOutput:
    """:meth:`CentralProgram.advance` scanned over the frames: the one time loop of a central filter.

    ``smoother_inputs=False`` keeps only the filtered moments: the predicted ones and the
    cross-covariances (the RTS smoother's inputs) are then None and never computed. Kept, they cost a
    10-state EKF's scan a third of its time (two products a step, and the Gram kernel's predicted factor).
    """

    def body(state: FilterState, frame: Frame) -> tuple[FilterState, tuple[Any, ...]]:
        state, out = program.advance(state, frame)
        if not smoother_inputs:
            return state, (out.mean, out.chol)
        return state, (out.mean, out.chol, out.pred_mean, out.pred_chol, out.cross_cov)

    final, rows = jax.lax.scan(body, program.init(u0), frames)
    ms, cs, pm, pc, cc = rows if smoother_inputs else (*rows, None, None, None)
    nis = jnp.where(final.n_obs > 0, final.nis / jnp.maximum(final.n_obs, 1), 0.0)
    return GaussianFilterOutput(ms, cs, pm, pc, cc, final.loglik, final.bad, nis)


@jax.jit
def _filtered_summary(x_init: Any, cov0: Any, means: Any, chols: Any) -> tuple[Any, Any, Any]:
    """Means and covariances over t_0..t_T (the prior first) and standard deviations, in one program.

    Op by op, this assembly cost a warm call as much as the filter itself.
    """
    covs = jnp.concatenate([cov0[None], jnp.einsum("tij,tkj->tik", chols, chols)])
    stds = jnp.sqrt(jnp.maximum(jnp.diagonal(covs, axis1=1, axis2=2), 0.0))
    return jnp.concatenate([x_init[None], means]), covs, stds
