"""The probabilistic-numeric ODE filter as a :class:`~twinfer.infer.Program`: one grid step per frame.

Each frame predicts with the integrated Wiener process prior over one record step, conditions on the
ODE residual at the frame's time (read with the frame's own input: the vector field is evaluated where
the frame was sampled) and on the frame's measurements (:meth:`PNFilter.step`). The state is the
filter's :class:`PNState` with the running log-likelihood, so a record stepped a frame at a time and one
scanned at once (:meth:`PNProgram.run`) give the same estimate.

References:
    Longbottom et al. (pn-smc paper), Eq. (12)-(20); Tronarp et al. (2019).

"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.data import Dataset
from twinfer.infer._estimate import Estimate
from twinfer.infer._program import Frame, Program, Row, frames_of
from twinfer.infer.filters._errors import DivergenceError
from twinfer.infer.pn._filter import PNFilter, PNState
from twinfer.infer.pn._prior import projection


class PNProgramState(NamedTuple):
    """The PN filter's state after k frames, the last input, the frame count and the log-likelihood."""

    filter: PNState
    u: Any
    k: Any
    loglik: Any


class PNProgram(Program):
    """A :class:`PNFilter` over records of step ``dt`` with fixed parameters and sensor noise.

    Numbers (``params``, ``x0``, ``state_sd``, ``chol_R``) are array fields: :meth:`with_numbers` keeps
    the compiled step.
    """

    pn: PNFilter
    params: Any
    x0: Any
    state_sd: Any
    chol_R: Any
    dt: float = eqx.field(static=True)

    def init(self, u0: Any = None) -> PNProgramState:
        """The IWP prior at t_0 (value ``x0`` with ``state_sd``, derivatives from the vector field)."""
        u0 = jnp.zeros(len(self.input_names)) if u0 is None else jnp.asarray(u0, jnp.float64)
        state = self.pn.init(self.params, self.x0, self.state_sd, u0)
        zero = jnp.zeros((), jnp.int32)
        return PNProgramState(state, u0, zero, jnp.zeros((), jnp.float64))

    @eqx.filter_jit
    def step(self, state: PNProgramState, frame: Frame) -> tuple[PNProgramState, Row]:
        """One record step: predict, ODE update, data update (:meth:`PNFilter.step`)."""
        state, (mean, std, loglik) = self._advance(state, frame)
        ok = jnp.all(jnp.isfinite(mean)) & jnp.all(jnp.isfinite(std)) & jnp.isfinite(loglik)
        return state, Row(mean, std, loglik, jnp.zeros((), jnp.float64), ok)

    def _advance(self, state: PNProgramState, frame: Frame) -> tuple[PNProgramState, tuple[Any, Any, Any]]:
        mask = jnp.ones(jnp.shape(frame.y), bool) if frame.mask is None else frame.mask
        y = jnp.where(mask, frame.y, 0.0)
        new, info = self.pn.step(state.filter, self.params, self.dt, frame.u, y, mask, self.chol_R)
        mean = projection(self.pn.q, self.pn.d, 0) @ new.mean
        out = (mean, self.pn.marginal_std(new), info.loglik)
        return PNProgramState(
            new, jnp.asarray(frame.u, state.u.dtype), state.k + 1, state.loglik + info.loglik
        ), out

    def run(self, data: Dataset) -> Estimate:
        """The PN filter over ``data`` in one compiled scan; row 0 is the prior at t_0.

        Raises:
            ValueError: a record whose outputs or step are not the program's.
            DivergenceError: a non-finite estimate, naming the first row.

        """
        if data.output_names != self.output_names:
            raise ValueError(
                f"Program.run data: expected the outputs {self.output_names}; received {data.output_names}."
            )
        if not np.isclose(data.dt, self.dt, rtol=1e-9, atol=0.0):
            raise ValueError(
                f"Program.run data: expected a record with the program's step {self.dt:g} s; received "
                f"{data.dt:g} s."
            )
        u0, frames = frames_of(data)
        first, means, stds, loglik = _scan(self, jnp.asarray(u0), Frame(*(jnp.asarray(a) for a in frames)))
        means = np.concatenate([np.asarray(first[0])[None], np.asarray(means)])
        stds = np.concatenate([np.asarray(first[1])[None], np.asarray(stds)])
        bad = ~(np.isfinite(means).all(axis=1) & np.isfinite(stds).all(axis=1))
        if bad.any():
            row = int(np.argmax(bad))
            raise DivergenceError(
                f"Program.run: the PN filter's estimate is non-finite at row {row} (t = "
                f"{float(data.times[row]):g}). Check the model, the step and the noise levels."
            )
        return Estimate(
            times=data.times,
            means=means,
            stds=stds,
            covs=None,
            state_names=self.state_names,
            loglik=float(loglik),
        )


@eqx.filter_jit
def _scan(program: PNProgram, u0: Any, frames: Frame) -> tuple[Any, Any, Any, Any]:
    """:meth:`PNProgram._advance` scanned over the frames, and the prior's moments."""
    state = program.init(u0)
    prior = (
        projection(program.pn.q, program.pn.d, 0) @ state.filter.mean,
        program.pn.marginal_std(state.filter),
    )
    final, (means, stds, _) = jax.lax.scan(lambda s, f: program._advance(s, f), state, frames)
    return prior, means, stds, final.loglik
