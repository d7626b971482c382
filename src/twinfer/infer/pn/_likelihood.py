"""The PN filter as a per-particle incremental log-likelihood for the IBIS sampler.

Step ``k`` assimilates observation ``y_k`` at ``t_k = t_0 + k h``: at ``k = 0`` only the data update
(the initial state already satisfies the ODE), afterwards predict, ODE update and data update; the
increment is ``-phi_k`` (Eq. 20). Parameters not named stay at the model's values.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp

from twinfer.infer.pn._filter import PNFilter, PNState
from twinfer.models import set_params


class PNLikelihood(eqx.Module):
    """``init(theta)``/``step(carry, theta, k)`` of :class:`twinfer.infer.smc.IncrementalLikelihood`.

    Attributes:
        pn: the PN filter (model, q, EK0/EK1, measurement function).
        base_params: the model's parameters; ``names`` are replaced by ``theta``.
        names: scalar parameter names that ``theta`` holds, in order.
        x0: initial ODE state; ``x0_std`` its standard deviations.
        h: grid step (the data period, specs 6.4).
        us: inputs at the grid points ``(T, n_u)``; ys: measurements ``(T, n_y)``; y_mask: observed.
        chol_R: measurement-noise Cholesky factor.

    """

    pn: PNFilter
    base_params: Any
    names: tuple[str, ...] = eqx.field(static=True)
    x0: Any
    x0_std: Any
    h: float = eqx.field(static=True)
    us: Any
    ys: Any
    y_mask: Any
    chol_R: Any

    @property
    def n_steps(self) -> int:
        return int(self.ys.shape[0])

    def params(self, theta: Any) -> Any:
        """Model parameters with the named entries replaced by ``theta``."""
        return set_params(self.base_params, {name: theta[i] for i, name in enumerate(self.names)})

    def init(self, theta: Any) -> PNState:
        return self.pn.init(self.params(theta), self.x0, self.x0_std, self.us[0])

    def step(self, carry: PNState, theta: Any, k: Any) -> tuple[PNState, Any]:
        first = k == 0
        h = jnp.where(first, 0.0, self.h)
        new, info = self.pn.step(
            carry,
            self.params(theta),
            h,
            self.us[k],
            self.ys[k],
            self.y_mask[k],
            self.chol_R,
            ode_update=~first,
        )
        return new, info.loglik
