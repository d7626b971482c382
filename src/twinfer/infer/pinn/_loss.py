"""The PINN losses of Eq 17 with normalisation, for sparse recovery and joint state-parameter estimation.

``L = lambda_o L_o + lambda_cc L_cc + lambda_p L_p`` with ``<r> = mean_t ||r_t||^2`` (Eq 8-12):

* ``L_o``: measured minus predicted acceleration at the sensed DOFs, at the observation times (Eq 14);
* ``L_cc``: continuity ``du/dt - v`` at all DOFs, at the collocation times;
* ``L_p``: force balance at all DOFs, at the collocation times, in acceleration units
  ``dv/dt - a(z, f*)`` (the repository's form, specs D2; the paper's force form multiplies by M).

Each residual is divided by a fixed scale before squaring (``acc_scale`` for ``L_o`` and ``L_p``,
``vel_scale`` for ``L_cc``), so the three terms are O(1) and the weights are unit-free (specs 2.2, "data
scaling"; the repository divides by data ranges).

References:
    Haywood-Alexander et al., arXiv:2410.01340, Eq 8-17 and Algorithm 1.

"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from twinfer.infer.pinn._network import StateNetwork
from twinfer.infer.pinn._physics import PositiveParameters, chain_residuals, observed_dofs
from twinfer.models import Chain


class LossWeights(NamedTuple):
    """``lambda_o``, ``lambda_cc``, ``lambda_p`` of Eq 17, and ``lambda_ic`` of the optional rest condition.

    ``ic > 0`` adds ``lambda_ic <z(t_0) / scale>`` with the known initial state (the simulations start at
    rest, specs D17). The paper has no initial-condition loss; without it the lightly damped free response
    of the lowest modes is only weakly fixed by accelerations (its acceleration is omega^2 times smaller).
    """

    obs: float = 1.0
    cc: float = 1.0
    ode: float = 1.0
    ic: float = 0.0


def _finite(name: str, value: Any, ndim: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array; received shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite values; found non-finite entries.")
    return arr


class ChainProblem(eqx.Module):
    """What the Eq 17 losses of both stages read besides the data term: model, forces, collocation, weights.

    :class:`SensorProblem` (accelerations at sensed DOFs) and :class:`StateProblem` (states at every DOF)
    add their observations and residual scales to these fields.

    Attributes:
        chain: the model the PINN prescribes (form and fixed parameter values; trainable ones replace
            them where given).
        t_obs, force_obs: observation times and the measured forces at the chain's forced DOFs there.
        t_col, force_col: collocation times of ``L_cc`` and ``L_p`` and the measured force there.
        weights: the lambdas.

    """

    chain: Chain
    t_obs: Float[Array, " To"]
    force_obs: Float[Array, "To n_in"]
    t_col: Float[Array, " Tc"]
    force_col: Float[Array, "Tc n_in"]
    weights: LossWeights = eqx.field(static=True)


class SensorProblem(ChainProblem):
    """Everything the Eq 17 losses need besides the trainable pieces (the fields of :class:`ChainProblem`).

    Attributes:
        sensed: 0-based indices of the DOFs with accelerometers.
        acc_obs: measured accelerations at the sensed DOFs, at ``t_obs``.
        acc_scale, vel_scale: residual scales.
        initial_state: known state at ``t_col[0]`` for the ``ic`` term.

    """

    sensed: tuple[int, ...] = eqx.field(static=True)
    acc_obs: Float[Array, "To s"]
    acc_scale: float = eqx.field(static=True)
    vel_scale: float = eqx.field(static=True)
    initial_state: Float[Array, " 2n"]


def _times_and_forces(
    chain: Chain, t_obs: Any, force_obs: Any, t_col: Any, force_col: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Checked ``(t_obs, force_obs, t_col, force_col)``: finite, 1-D times, one force column per forced DOF.

    ``t_col``/``force_col`` None: the observation times and forces (the caller checks they come together).
    """
    t_o, f_o = _finite("t_obs", t_obs, 1), _finite("force_obs", force_obs, 2)
    t_c = t_o if t_col is None else _finite("t_col", t_col, 1)
    f_c = f_o if force_col is None else _finite("force_col", force_col, 2)
    n_in = len(chain.forced_dofs)
    for name, times, forces in (("force_obs", t_o, f_o), ("force_col", t_c, f_c)):
        if forces.shape != (times.size, n_in):
            raise ValueError(f"{name}: expected shape {(times.size, n_in)}; received {forces.shape}.")
    return t_o, f_o, t_c, f_c


def sensor_problem(
    chain: Chain,
    unobserved_dofs: tuple[int, ...] | list[int],
    t_obs: Float[ArrayLike, " To"],
    acc_obs: Float[ArrayLike, "To s"],
    force_obs: Float[ArrayLike, "To n_in"],
    t_col: Float[ArrayLike, " Tc"],
    force_col: Float[ArrayLike, "Tc n_in"],
    *,
    acc_scale: float,
    vel_scale: float,
    weights: LossWeights | None = None,
    initial_state: Float[ArrayLike, " 2n"] | None = None,
) -> SensorProblem:
    """Validated :class:`SensorProblem`.

    Args:
        chain: the PINN's model; its forced DOFs say which force columns are measured.
        unobserved_dofs: 1-based DOFs without sensors; the rest are sensed.
        t_obs: (To,) observation times.
        acc_obs: (To, n_sensed) measured accelerations at the sensed DOFs in increasing DOF order.
        force_obs: (To, n_forced) measured forces.
        t_col: (Tc,) collocation times.
        force_col: (Tc, n_forced) measured forces at the collocation times.
        acc_scale: residual scale of accelerations [m/s^2].
        vel_scale: residual scale of the continuity residual [m/s].
        weights: lambda_o, lambda_cc, lambda_p, lambda_ic.
        initial_state: known state at ``t_col[0]`` for the ``ic`` term (default: rest).

    """
    sensed = observed_dofs(chain.n_dof, list(unobserved_dofs))
    t_o, f_o, t_c, f_c = _times_and_forces(chain, t_obs, force_obs, t_col, force_col)
    acc = _finite("acc_obs", acc_obs, 2)
    if acc.shape != (t_o.size, len(sensed)):
        raise ValueError(f"acc_obs: expected shape {(t_o.size, len(sensed))}; received {acc.shape}.")
    for name, value in (("acc_scale", acc_scale), ("vel_scale", vel_scale)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name}: expected a finite value > 0; received {value!r}.")
    z0 = np.zeros(2 * chain.n_dof) if initial_state is None else _finite("initial_state", initial_state, 1)
    if z0.shape != (2 * chain.n_dof,):
        raise ValueError(f"initial_state: expected shape ({2 * chain.n_dof},); received {z0.shape}.")
    return SensorProblem(
        chain=chain,
        initial_state=jnp.asarray(z0),
        sensed=tuple(d - 1 for d in sensed),
        t_obs=jnp.asarray(t_o),
        acc_obs=jnp.asarray(acc),
        force_obs=jnp.asarray(f_o),
        t_col=jnp.asarray(t_c),
        force_col=jnp.asarray(f_c),
        acc_scale=float(acc_scale),
        vel_scale=float(vel_scale),
        weights=weights or LossWeights(),
    )


def _mean_sq(r: Float[Array, "T k"]) -> Float[Array, ""]:
    """``<r> = (1/N) sum_t ||r_t||^2`` (Eq 8)."""
    return jnp.mean(jnp.sum(r**2, axis=-1))


def _sensor_states(net: StateNetwork, problem: SensorProblem) -> tuple[Array, ...]:
    """Network states and rates at the observation and collocation times, and the state at ``t_0``."""
    z_o, dz_o = net.batch(problem.t_obs)
    z_c, dz_c = net.batch(problem.t_col)
    return z_o, dz_o, z_c, dz_c, net(problem.t_col[0])


def _sensor_terms(
    states: tuple[Array, ...], params: Any, problem: SensorProblem
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    chain = problem.chain
    z_o, dz_o, z_c, dz_c, z0 = states
    _, _, acc_o = chain_residuals(chain, params, z_o, dz_o, problem.force_obs)
    sensed = jnp.asarray(problem.sensed)
    l_obs = _mean_sq((problem.acc_obs - acc_o[:, sensed]) / problem.acc_scale)
    r_cc, r_ode, _ = chain_residuals(chain, params, z_c, dz_c, problem.force_col)
    l_cc = _mean_sq(r_cc / problem.vel_scale)
    l_ode = _mean_sq(r_ode / problem.acc_scale)
    l_ic = jnp.sum(((z0 - problem.initial_state) / problem.vel_scale) ** 2)
    w = problem.weights
    total = w.obs * l_obs + w.cc * l_cc + w.ode * l_ode + w.ic * l_ic
    return total, {"obs": l_obs, "cc": l_cc, "ode": l_ode, "ic": l_ic}


def sensor_losses(
    net: StateNetwork, theta: PositiveParameters | None, problem: SensorProblem
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Total loss and its parts ``obs``, ``cc``, ``ode`` (Eq 17, normalised).

    Args:
        net: the state network.
        theta: trainable system parameters substituted into the chain, or None (sparse recovery).
        problem: data, collocation and weights.

    Returns:
        ``(L, {"obs": L_o, "cc": L_cc, "ode": L_p})``.

    """
    params = problem.chain.params if theta is None else theta.apply(problem.chain.params)
    return _sensor_terms(_sensor_states(net, problem), params, problem)


def projected_parameters(
    net: StateNetwork,
    theta: PositiveParameters,
    problem: SensorProblem | StateProblem,
    *,
    bounds: tuple[float, float] = (1e-3, 1e3),
) -> PositiveParameters:
    """The parameter values minimising the Eq 17 loss for the network's current states (variable projection).

    Eq 14-16 are affine in ``c``, ``k``, ``kappa`` and ``mu`` once the states are fixed, so the loss is an
    exact quadratic in the parameter values and one Newton step from any point reaches its minimum. Used
    inside a loss (with the result's gradient stopped) the network then descends the reduced loss
    ``L(net, theta*(net))``, whose gradient is the partial derivative at ``theta*`` (the envelope theorem),
    which removes the slow coupling of network and parameters in joint training (Golub and Pereyra's
    variable projection).

    Args:
        net: the state network.
        theta: the parameters to solve for (their current values are the expansion point; their scales
            set the bounds).
        problem: data, collocation and weights (sensor data of Eq 17 or state data of Eq 23).
        bounds: the solution is clipped to ``[bounds[0], bounds[1]] * scale`` per parameter, so early, poorly
            fitted states cannot send a value to zero, below, or to a stiff extreme.

    Returns:
        ``theta`` at the minimiser (values clipped), gradients stopped.

    References:
        Golub & Pereyra, "Separable nonlinear least squares: the variable projection method and its
        applications", Inverse Problems 19 (2003) R1-R26; Haywood-Alexander et al., Eq 14-17.

    """
    v0 = jax.lax.stop_gradient(theta.values())
    if isinstance(problem, SensorProblem):
        sensor_states = jax.lax.stop_gradient(_sensor_states(net, problem))

        def loss_of(values: Any) -> Any:
            params = theta.with_values(values).apply(problem.chain.params)
            return _sensor_terms(sensor_states, params, problem)[0]
    else:
        state_states = jax.lax.stop_gradient(_state_states(net, problem))

        def loss_of(values: Any) -> Any:
            params = theta.with_values(values).apply(problem.chain.params)
            return _state_terms(state_states, params, problem)[0]

    grad, hess = jax.grad(loss_of)(v0), jax.hessian(loss_of)(v0)
    # a relative ridge of 1e-12 keeps the solve defined when a parameter has no effect on the loss
    hess = hess + 1e-12 * jnp.diag(jnp.abs(jnp.diag(hess)) + 1e-300)
    values = v0 - jnp.linalg.solve(hess, grad)
    scales = jnp.asarray(theta.scales)
    values = jnp.clip(values, bounds[0] * scales, bounds[1] * scales)
    return theta.with_values(jax.lax.stop_gradient(values))


class StateProblem(ChainProblem):
    """Data of the Bayesian scheme's first stage: states and force observed at every DOF (section 4.3).

    The fields of :class:`ChainProblem`, with ``t_obs`` the observation and collocation times and
    ``force_obs`` the measured forces (means of the repeats); the collocation times and forces default to
    them. With a force held constant over each sample step (zero-order hold, specs 1.5) the mid-step times
    ``t_i + dt/2`` with the held sample ``f_i`` are exact, whereas at ``t_i`` itself the force jumps and a
    smooth network's derivative sees the mean of ``f_{i-1}`` and ``f_i``, half a step late.

    Attributes:
        z_obs: (T, 2n) measured ``[u, v]`` (mean of the repeats: with a common noise scale the squared
            error summed over repeats differs from the mean's by a constant).
        disp_scale, vel_scale, acc_scale: residual scales, one per DOF (a scalar is broadcast). With the
            measurement noise standard deviations of the fitted quantities, ``L_o + L_cc + L_p`` is the
            Gaussian negative log-likelihood of Eq 23 at fixed noise scales, up to constants.

    """

    z_obs: Float[Array, "T 2n"]
    disp_scale: Float[Array, " n"]
    vel_scale: Float[Array, " n"]
    acc_scale: Float[Array, " n"]


def state_problem(
    chain: Chain,
    t_obs: Float[ArrayLike, " T"],
    z_obs: Float[ArrayLike, "T 2n"],
    force_obs: Float[ArrayLike, "T n_in"],
    *,
    disp_scale: Float[ArrayLike, " n"] | float,
    vel_scale: Float[ArrayLike, " n"] | float,
    acc_scale: Float[ArrayLike, " n"] | float,
    weights: LossWeights | None = None,
    t_col: Float[ArrayLike, " Tc"] | None = None,
    force_col: Float[ArrayLike, "Tc n_in"] | None = None,
) -> StateProblem:
    """Validated :class:`StateProblem` (shapes and finiteness checked, errors name the field).

    The scales are scalars or one value per DOF (displacement [m], velocity [m/s], acceleration [m/s^2]).
    ``t_col`` and ``force_col`` (given together) are the collocation times and forces of the physics terms;
    by default the observation times and forces.
    """
    if (t_col is None) != (force_col is None):
        raise ValueError("t_col/force_col: expected both or neither; received only one of them.")
    t, f, t_c, f_c = _times_and_forces(chain, t_obs, force_obs, t_col, force_col)
    z = _finite("z_obs", z_obs, 2)
    if z.shape != (t.size, chain.n_state):
        raise ValueError(f"z_obs: expected shape {(t.size, chain.n_state)}; received {z.shape}.")
    per_dof = {}
    for name, value in (("disp_scale", disp_scale), ("vel_scale", vel_scale), ("acc_scale", acc_scale)):
        arr = np.asarray(value, dtype=np.float64)
        if (
            arr.ndim > 1
            or (arr.ndim == 1 and arr.size != chain.n_dof)
            or not np.all(np.isfinite(arr) & (arr > 0))
        ):
            raise ValueError(
                f"{name}: expected a finite value > 0 or {chain.n_dof} of them; received {arr.tolist()!r}."
            )
        per_dof[name] = jnp.asarray(np.broadcast_to(arr, (chain.n_dof,)).copy())
    return StateProblem(
        chain=chain,
        t_obs=jnp.asarray(t),
        z_obs=jnp.asarray(z),
        force_obs=jnp.asarray(f),
        t_col=jnp.asarray(t_c),
        force_col=jnp.asarray(f_c),
        weights=weights or LossWeights(),
        **per_dof,
    )


def _state_terms(
    states: tuple[Array, ...], params: Any, problem: StateProblem
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    z_o, z_c, dz_c = states
    n = problem.chain.n_dof
    r_z = problem.z_obs - z_o
    l_obs = _mean_sq(r_z[:, :n] / problem.disp_scale) + _mean_sq(r_z[:, n:] / problem.vel_scale)
    r_cc, r_ode, _ = chain_residuals(problem.chain, params, z_c, dz_c, problem.force_col)
    l_cc = _mean_sq(r_cc / problem.vel_scale)
    l_ode = _mean_sq(r_ode / problem.acc_scale)
    w = problem.weights
    return w.obs * l_obs + w.cc * l_cc + w.ode * l_ode, {"obs": l_obs, "cc": l_cc, "ode": l_ode}


def state_losses(
    net: StateNetwork, theta: PositiveParameters | None, problem: StateProblem
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Eq 17 with state observations (Eq 23 with fixed noise scales): ``obs`` on u and v, ``cc``, ``ode``.

    With ``theta`` the system parameters are learned from the same loss, never given (specs D13).
    """
    params = problem.chain.params if theta is None else theta.apply(problem.chain.params)
    return _state_terms(_state_states(net, problem), params, problem)


def _state_states(net: StateNetwork, problem: StateProblem) -> tuple[Array, ...]:
    """Network states at the observation times, states and rates at the collocation times."""
    z_c, dz_c = net.batch(problem.t_col)
    return jax.vmap(net)(problem.t_obs), z_c, dz_c
