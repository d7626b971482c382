"""The PN filter as a per-particle incremental log-likelihood for the IBIS sampler.

Step ``k`` assimilates observation ``y_k`` at ``t_k = t_0 + k h``: at ``k = 0`` only the data update
(the initial state already satisfies the ODE), afterwards ``substeps`` filter steps of ``h / substeps``
(predict and ODE update each) and the data update at ``t_k``; the increment is ``-phi_k`` (Eq. 20).
Parameters not named stay at the model's values.

Input between samples (specs 6.4): ``"linear"`` interpolates ``u`` between ``u_{k-1}`` and ``u_k``
(a band-limited input sampled with its signal, e.g. the Silverbox voltage); ``"zoh"`` holds
``u_{k-1}`` over ``(t_{k-1}, t_k]`` (a digital controller's output through a DAC, e.g. the EMPS force).
With one sub-step, ``"linear"`` evaluates the ODE residual at ``t_k`` with ``u_k``.
"""

from __future__ import annotations

from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from twinfer.infer.pn._filter import PNFilter, PNSolution, PNState
from twinfer.infer.pn._prior import projection
from twinfer.models import set_param_vector


class PNLikelihood(eqx.Module):
    """``init(theta)``/``step(carry, theta, k)`` of :class:`twinfer.infer.smc.IncrementalLikelihood`.

    Attributes:
        pn: the PN filter (model, q, EK0/EK1, measurement function).
        base_params: the model's parameters; ``names`` are replaced by ``theta``.
        names: scalar parameter names that ``theta`` holds, in order.
        x0: initial ODE state; ``state_sd`` its standard deviations.
        h: grid step (the data period, specs 6.4).
        us: inputs at the grid points ``(T, n_u)``; ys: measurements ``(T, n_y)``; y_mask: observed.
        chol_R: measurement-noise Cholesky factor.
        substeps: filter steps per data period (ODE residual conditioned at each).
        input_hold: ``"linear"`` or ``"zoh"``: the input between samples.

    """

    pn: PNFilter
    base_params: Any
    names: tuple[str, ...] = eqx.field(static=True)
    x0: Float[Array, " d"]
    state_sd: Float[Array, " d"]
    h: float = eqx.field(static=True)
    us: Float[Array, "T n_u"]
    ys: Float[Array, "T n_y"]
    y_mask: Bool[Array, "T n_y"]
    chol_R: Float[Array, "n_y n_y"]
    substeps: int = eqx.field(static=True, default=1)
    input_hold: Literal["linear", "zoh"] = eqx.field(static=True, default="linear")

    def __check_init__(self) -> None:
        if not isinstance(self.substeps, int) or self.substeps < 1:
            raise ValueError(f"PNLikelihood substeps: expected an integer >= 1; received {self.substeps!r}.")
        if self.input_hold not in ("linear", "zoh"):
            raise ValueError(
                f"PNLikelihood input_hold: expected 'linear' or 'zoh'; received {self.input_hold!r}."
            )

    @property
    def n_steps(self) -> int:
        return int(self.ys.shape[0])

    def params(self, theta: Float[Array, " p"]) -> Any:
        """Model parameters with the named entries replaced by ``theta``'s first ones (in order)."""
        return set_param_vector(self.base_params, self.names, theta[: len(self.names)])

    def init(self, theta: Float[Array, " p"]) -> PNState:
        return self.pn.init(self.params(theta), self.x0, self.state_sd, self.us[0])

    def step(
        self, carry: PNState, theta: Float[Array, " p"], k: Int[Array, ""] | int
    ) -> tuple[PNState, Float[Array, ""]]:
        params = self.params(theta)
        first = jnp.asarray(k) == 0  # an array, so that ~first is a logical not for a Python int too
        m = self.substeps
        u_prev, u_now = self.us[jnp.maximum(k - 1, 0)], self.us[k]
        no_y = jnp.zeros_like(self.y_mask[k])

        def sub(j, state):
            frac = (j + 1) / m
            u = u_prev if self.input_hold == "zoh" else u_prev + frac * (u_now - u_prev)
            new, _ = self.pn.step(state, params, self.h / m, u, self.ys[k], no_y, self.chol_R)
            return new

        if m > 1:
            moved = jax.lax.fori_loop(0, m - 1, sub, carry)
        else:
            moved = carry
        u_last = u_prev if self.input_hold == "zoh" else u_now
        h = jnp.where(first, 0.0, self.h / m)
        # k = 0: data update only on the initial state; the sub-steps above are discarded there
        start = jax.tree_util.tree_map(lambda a, b: jnp.where(first, a, b), carry, moved)
        new, info = self.pn.step(
            start,
            params,
            h,
            jnp.where(first, u_now, u_last),
            self.ys[k],
            self.y_mask[k],
            self.chol_R,
            ode_update=~first,
        )
        return new, info.loglik

    def solve(self, theta: Float[Array, " p"]) -> PNSolution:
        """The filter's ODE-state means and standard deviations at every data time under ``theta``.

        The same steps as the likelihood (its sub-steps and input rule), so ``loglik`` is the sum of the
        increments the sampler sees.
        """
        e0 = projection(self.pn.q, self.pn.d, 0)

        def body(carry: PNState, k: Any) -> tuple[PNState, tuple[Any, Any, Any]]:
            new, ll = self.step(carry, theta, k)
            return new, (e0 @ new.mean, self.pn.marginal_std(new), ll)

        last, (means, stds, lls) = jax.lax.scan(body, self.init(theta), jnp.arange(self.n_steps))
        return PNSolution(mean=means, std=stds, diffusion=last.diffusion, loglik=jnp.sum(lls))

    @eqx.filter_jit
    def filtered_means(self, thetas: Float[Array, "P p"], component: int = 0) -> Float[Array, "P T"]:
        """Each particle's filtered mean of ODE-state ``component`` at every data time (:meth:`solve`).

        One compiled program for every call with the same shapes (the particles are vmapped).
        """
        return jax.vmap(lambda th: self.solve(th).mean[:, component])(thetas)

    def posterior_states(
        self, thetas: Float[ArrayLike, "P p"], times: Any, state_names: Any = None, batch: int | None = None
    ) -> Any:
        """The states' posterior over equally weighted particles ``thetas``: a mixture of their filters.

        Each particle's filter (:meth:`solve`) gives a Gaussian per time; the mixture's mean is their
        average and its variance the average of ``sd^2 + mean^2`` less the squared mean (the law of total
        variance: filter uncertainty plus the spread between parameter particles). Returned as a
        :class:`twinfer.infer.Estimate` on ``times`` (pn-smc Fig. 3: posterior states on the training data).
        With ``y_mask`` all False after the start it is the posterior's open-loop prediction, the solver's
        own uncertainty included (pn-smc Sec. 4.2: "the posterior second moment").

        ``batch`` solves that many particles at a time (the last batch padded with copies of the last
        particle, which are dropped), so memory grows with ``batch`` rather than with the particle count.
        """
        from twinfer.infer._estimate import Estimate

        thetas = jnp.asarray(thetas, jnp.float64)
        count = thetas.shape[0]
        size = count if batch is None else max(1, min(int(batch), count))
        solve = eqx.filter_jit(lambda lik, th: jax.vmap(lik.solve)(th))
        total_mean, total_second = 0.0, 0.0
        for first in range(0, count, size):
            chunk = thetas[first : first + size]
            real = chunk.shape[0]
            if real < size:
                chunk = jnp.concatenate([chunk, jnp.repeat(chunk[-1:], size - real, axis=0)])
            sols = solve(self, chunk)
            total_mean = total_mean + jnp.sum(sols.mean[:real], axis=0)
            total_second = total_second + jnp.sum(sols.std[:real] ** 2 + sols.mean[:real] ** 2, axis=0)
        mean = jnp.asarray(total_mean) / count
        var = jnp.asarray(total_second) / count - mean**2
        std = jnp.sqrt(jnp.maximum(var, 0.0))
        names = tuple(f"x[{i}]" for i in range(mean.shape[1])) if state_names is None else tuple(state_names)
        return Estimate(np.asarray(times, np.float64), np.asarray(mean), np.asarray(std), None, names)
