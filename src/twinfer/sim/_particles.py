"""Ensemble simulation: one fixed-step RK4 simulation per parameter particle, open loop or in a feedback loop.

A posterior (or prior) cloud of parameter vectors is scored by simulating the model under every particle
(the test protocol of the PN-SMC paper, Sec. 4 and Table 2: the RMSE of each particle's open-loop
simulation). The particles are vmapped and jitted in chunks (bounded memory); each simulation is a
``lax.scan`` over the output samples with ``substeps`` :func:`twinfer.sim.discretise` RK4 steps per
sample. Inputs follow the package's time convention: a fine-step input ``u_j`` is held over its step.

References:
    Longbottom, Champneys & Rogers, Sec. 4 and Table 2 (specs/pn-smc.md 5, 6.25-6.26);
    Janot, Gautier & Brunot (2019), Sec. 3.5 (the EMPS closed-loop validation).

"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models import AbstractModel, set_param_vector
from twinfer.sim._discretise import discretise


def _particle_params(base_params: Mapping[str, Any], names: tuple[str, ...], theta: Any) -> dict[str, Any]:
    return set_param_vector(dict(base_params), names, theta)


def _map_chunks(run: Callable[..., Any], thetas: np.ndarray, chunk: int, *shared: Any) -> np.ndarray:
    """``run(thetas[i:i + chunk], *shared)`` over the chunks of the particles, concatenated."""
    out = [np.asarray(run(jnp.asarray(thetas[i : i + chunk]), *shared)) for i in range(0, len(thetas), chunk)]
    return np.concatenate(out, axis=0)


def _check_settings(where: str, substeps: int, chunk: int) -> None:
    for field, value in (("substeps", substeps), ("chunk", chunk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where} {field}: expected an integer >= 1; received {value!r}.")


def _check(where: str, names: tuple[str, ...], thetas: Any, substeps: int, chunk: int) -> np.ndarray:
    thetas = np.asarray(thetas, dtype=np.float64)
    if thetas.ndim != 2 or thetas.shape[1] != len(names):
        raise ValueError(
            f"{where} thetas: expected shape (N, {len(names)}) (one column per name in {names}); received "
            f"{thetas.shape}."
        )
    _check_settings(where, substeps, chunk)
    return thetas


def particle_simulator(
    model: AbstractModel,
    base_params: Mapping[str, Any],
    names: tuple[str, ...],
    x0: Any,
    us: Any,
    dt: float,
    substeps: int,
    output_index: int,
    chunk: int = 256,
) -> Callable[[Any], np.ndarray]:
    """Open-loop RK4 simulation of particles, output sampled every ``substeps`` steps, as a function of them.

    Compiled once per particle-chunk shape, so repeated simulations of the same model, input and start
    under new parameters (a least-squares fit's residual, evaluated a hundred times) reuse it:
    ``particle_simulator(...)(thetas)``.

    Args:
        model: the model.
        base_params: its parameters.
        names: the scalar parameters each particle sets (``"k"``, ``"kappa1"``, ...).
        x0: initial state.
        us: inputs at the fine step ``(T * substeps, n_u)``, ``us[j]`` held over fine step ``j``.
        dt: fine step.
        substeps: fine steps per output sample.
        output_index: which model output to return.
        chunk: particles simulated at once (bounds memory).

    Returns:
        A function of ``thetas`` ``(N, p)`` (natural-scale parameters, column ``i`` for ``names[i]``)
        returning ``(N, T)`` outputs at the coarse samples ``t = k * substeps * dt``, k = 0..T-1.

    References:
        PN-SMC paper, Sec. 4, Table 2 (specs/pn-smc.md 6.25-6.26).

    """
    _check_settings("particle_simulator", substeps, chunk)
    us = jnp.asarray(us, jnp.float64)
    if us.ndim != 2 or us.shape[1] != model.n_input or us.shape[0] % substeps:
        raise ValueError(
            f"particle_simulator us: expected shape (T * {substeps}, {model.n_input}) (fine-step inputs, "
            f"{substeps} per output sample); received {tuple(us.shape)}."
        )
    step = discretise(model, dt, "rk4")
    us = us.reshape(-1, substeps, model.n_input)
    x0 = jnp.asarray(x0, jnp.float64)

    def one(theta, us, x0):
        params = _particle_params(base_params, names, theta)

        def outer(x, u_block):
            y = model.output(0.0, x, u_block[0], params)[output_index]
            x = jax.lax.fori_loop(0, substeps, lambda j, xx: step.transition(0.0, xx, u_block[j], params), x)
            return x, y

        return jax.lax.scan(outer, x0, us)[1]

    run = jax.jit(jax.vmap(one, in_axes=(0, None, None)))

    def simulate(thetas: Any) -> np.ndarray:
        return _map_chunks(run, _check("particle_simulator", names, thetas, substeps, chunk), chunk, us, x0)

    return simulate


def simulate_particles_feedback(
    model: AbstractModel,
    base_params: Mapping[str, Any],
    names: tuple[str, ...],
    thetas: Any,
    x0: Any,
    refs: Any,
    law: Callable[[Any, Any, Any], tuple[Any, Any]],
    law_state0: Any,
    dt: float,
    substeps: int,
    output_index: int,
    chunk: int = 256,
) -> np.ndarray:
    """RK4 simulation of every particle inside a digital feedback loop (sampled control, held input).

    At each sample ``k`` the output ``y_k`` of the simulated state is read, the control law gives
    ``u_k, s_{k+1} = law(s_k, r_k, y_k)`` from its state ``s_k`` and the external signals ``r_k``, and
    ``u_k`` is held over ``(t_k, t_{k+1}]`` (the DAC's zero-order hold) for ``substeps`` RK4 steps.

    Args:
        model: the model (plant).
        base_params: its parameters.
        names: the scalar parameters each particle sets.
        thetas: ``(N, p)`` natural-scale parameters, column ``i`` for ``names[i]``.
        x0: initial plant state.
        refs: pytree of per-sample external signals, leading axis ``T`` (references, disturbances).
        law: the controller ``(state, r_k, y_k) -> (u_k (n_u,), state)``.
        law_state0: its initial state.
        dt: fine step (sampling period / ``substeps``).
        substeps: fine steps per sample.
        output_index: which model output is fed back and returned.
        chunk: particles simulated at once (bounds memory).

    Returns:
        ``(N, T)`` outputs ``y_k`` at the samples ``t = k * substeps * dt``, k = 0..T-1.

    References:
        Janot, Gautier & Brunot (2019), Eqs. (6)-(7), Sec. 3.5 (closed-loop validation of a plant model).

    """
    thetas = _check("simulate_particles_feedback", names, thetas, substeps, chunk)
    step = discretise(model, dt, "rk4")
    refs = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), refs)

    def one(theta):
        params = _particle_params(base_params, names, theta)

        def outer(carry, r):
            x, s = carry
            y = model.output(0.0, x, jnp.zeros(model.n_input), params)[output_index]
            u, s = law(s, r, y)
            x = jax.lax.fori_loop(0, substeps, lambda j, xx: step.transition(0.0, xx, u, params), x)
            return (x, s), y

        return jax.lax.scan(outer, (jnp.asarray(x0, jnp.float64), law_state0), refs)[1]

    return _map_chunks(jax.jit(jax.vmap(one)), thetas, chunk)


def fine_input(u: Any, substeps: int, hold: str) -> np.ndarray:
    """Inputs for a simulation with ``substeps`` fine steps per sample, ``(T * substeps, 1)``.

    ``"linear"``: the linear interpolant between samples taken at the midpoint of each fine step (held
    over the step, a second-order accurate quadrature of the interpolated input); ``"zoh"``: each
    sample held over its whole period (specs/pn-smc.md 6.4, 6.26).

    Args:
        u: input samples (T,).
        substeps: fine steps per sample.
        hold: ``"linear"`` or ``"zoh"``.

    Returns:
        ``(T * substeps, 1)`` fine-step inputs for :func:`particle_simulator`.

    """
    u = np.asarray(u, np.float64)
    if hold == "zoh":
        return np.repeat(u, substeps)[:, None]
    if hold != "linear":
        raise ValueError(f"fine_input hold: expected 'linear' or 'zoh'; received {hold!r}.")
    t_mid = (np.arange(u.size * substeps) + 0.5) / substeps
    return np.interp(t_mid, np.arange(u.size), u)[:, None]
