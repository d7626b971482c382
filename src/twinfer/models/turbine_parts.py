"""The Pelton unit's modules as discrete-time subsystem transitions, for a graph of estimators.

Each function returns a transition ``(x, u, m, params) -> x_next`` over one estimator step ``dt``: the
module's vector field (:mod:`twinfer.models.turbine`) with its messages ``m`` held over the step,
integrated by the one-step method ``step(rhs, t, x, h)`` the caller passes (from
:func:`twinfer.sim.integrator_step`: the model never hard-codes its integrator), followed by the
quantities the module sends that are not its states (Table S6: M3's speed rate and torques, M4's
accelerations), evaluated at the stepped state and carried as derived states.

Two families: the standalone unit of section 3.6 (:func:`governor_transition` .. :func:`runner_transition`,
:func:`central_transition` for the monolithic model with its coefficients appended) and the
grid-embedded units of section 3.7 (:func:`grid_unit_steps`: the rotor angle ``delta = phi1 -
omega_rated t`` and the grid torque ``T_e`` in place of ``M_g``, ``substeps`` steps per ``dt``).

References:
    compositional-inference paper, SI (S93)-(S143) (modules), Table S6 (messages), (S146)-(S149) (the
    grid embedding); specs/compositional-inference.md 3.6-3.7.

"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models import turbine as pelton
from twinfer.models.turbine import PeltonParams, PeltonTurbine
from twinfer.models.turbine_grid import turbine_unit_rhs

Rhs = Callable[[Any, Any], Any]
Step = Callable[[Rhs, Any, Any, Any], Any]
"""A one-step integrator ``(rhs, t, x, h) -> x(t + h)`` (:func:`twinfer.sim.integrator_step`)."""
Transition = Callable[[Any, Any, Any, Any], Any]
"""A subsystem transition ``(x, u, m, params) -> x_next``; ``u[0]`` is the time at the step's start."""


def pelton_unit_rhs(p: PeltonParams, t: Any, x: Any, u: Any = None) -> Any:
    """``dx/dt`` of the standalone 19-state unit with constants ``p`` and the truth's coefficients."""
    model = PeltonTurbine(p)
    return model.vector_field(t, x, jnp.zeros(0), model.params)


def grid_unit_rhs(p: PeltonParams, t: Any, x: Any, t_e: Any) -> Any:
    """``dx/dt`` of one grid-embedded unit under the electrical torque ``t_e`` (:func:`turbine_unit_rhs`)."""
    return turbine_unit_rhs(p, x, t_e, t)


# -- the standalone unit (section 3.6) ---------------------------------------------------------------


def governor_transition(params: PeltonParams, dt: float, step: Step) -> Transition:
    """M1: the PID governor with saturation (S94-S99); messages ``m = [n, dn/dt]`` from M3."""

    def transition(x: Any, u: Any, m: Any, p: Any) -> Any:
        rhs = lambda t, xx: pelton.governor_rhs(params, xx, m[0], m[1], pelton.governor_command(params, t))  # noqa: E731
        return step(rhs, u[0], x, dt)

    return transition


def narx_transition(narx: Callable[[Any, Any], Any], statics: Any, lags: int, spacing: int) -> Transition:
    """M2: a NARX predicts the head one step ahead from its window; the measured flow is passed on (S106).

    The state is ``[h, q]`` followed by the memory of the last ``lags x spacing`` pairs ``(x_n, measured
    q)``; the message is M1's needle ``x_n`` and ``u[1]`` the measured flow. The window is every
    ``spacing``-th pair of the memory, ending at the newest.

    Args:
        narx: ``(window (lags, 2), statics) -> h``.
        statics: the NARX's static inputs ``[T_e, T_q, y_r, h0]``.
        lags: window length L.
        spacing: estimator steps between window samples.

    """
    size = lags * spacing

    def transition(x: Any, u: Any, m: Any, p: Any) -> Any:
        memory = x[2:].reshape(size, 2)
        memory = jnp.concatenate([memory[1:], jnp.stack([m[0], u[1]])[None]])
        window = memory[spacing - 1 :: spacing]
        h = narx(window, statics)
        return jnp.concatenate([jnp.stack([h, u[1]]), memory.reshape(-1)])

    return transition


def rotational_torques(
    params: PeltonParams, core: Any, h: Any, q: Any, include_head: bool
) -> tuple[Any, Any]:
    """M3's turbine and generator torques at ``core = [n, omega, phi1, e_x, e_y]`` (S108-S109)."""
    m_t = pelton.turbine_torque(params, core[0], q, h, core[3], core[4], include_head=include_head)
    return m_t, pelton.generator_torque(params, core[1])


def rotational_transition(params: PeltonParams, dt: float, step: Step, include_head: bool) -> Transition:
    """M3: ``[n, omega, phi1, e_x, e_y]`` (S108-S117), then ``dn/dt, M_t, M_g`` at the stepped state.

    Messages ``m = [h, q]`` from M2; the two coefficients are constants of the step.
    """

    def rhs(core: Any, h: Any, q: Any) -> Any:
        m_t, m_g = rotational_torques(params, core, h, q, include_head)
        return jnp.concatenate([pelton.rotational_rhs(params, core[:3], m_t, m_g), jnp.zeros(2)])

    def transition(x: Any, u: Any, m: Any, p: Any) -> Any:
        h, q = m[0], m[1]
        core = step(lambda t, c: rhs(c, h, q), 0.0, x[:5], dt)
        m_t, m_g = rotational_torques(params, core, h, q, include_head)
        n_dot = rhs(core, h, q)[0]
        return jnp.concatenate([core, jnp.stack([n_dot, m_t, m_g])])

    return transition


def generator_transition(params: PeltonParams, dt: float, step: Step) -> Transition:
    """M4: ``[x_G, y_G, vx_G, vy_G]`` (S118-S127), then its accelerations at the stepped state.

    Messages ``m = [x_R, y_R, omega, phi1]`` from M5 and M3.
    """

    def transition(x: Any, u: Any, m: Any, p: Any) -> Any:
        rhs = lambda t, xx: pelton.generator_rhs(params, xx, m[0], m[1], m[2], m[3])  # noqa: E731
        core = step(rhs, 0.0, x[:4], dt)
        acc = pelton.generator_acceleration(params, core, m[0], m[1], m[2], m[3])
        return jnp.concatenate([core, jnp.stack(acc)])

    return transition


def runner_transition(params: PeltonParams, dt: float, step: Step) -> Transition:
    """M5: ``[x_R, y_R, vx_R, vy_R, alpha, beta, K_seal]`` (S128-S143), K_seal a constant of the step.

    Messages ``m = [h, q, omega, phi1, M_t, M_g, x_G, y_G, ax_G, ay_G]`` from M2, M3 and M4.
    """

    def rhs(t: Any, x: Any, m: Any) -> Any:
        h, q, omega, phi1, m_t, m_g, x_g, y_g, ax_g, ay_g = (m[i] for i in range(10))
        dx = pelton.runner_rhs(params, x[:6], x_g, y_g, ax_g, ay_g, omega, phi1, q, h, m_t, m_g, t, x[6])
        return jnp.concatenate([dx, jnp.zeros(1)])

    def transition(x: Any, u: Any, m: Any, p: Any) -> Any:
        return step(lambda t, xx: rhs(t, xx, m), u[0], x, dt)

    return transition


def central_transition(model: PeltonTurbine, dt: float, step: Step) -> Transition:
    """The monolithic 19-state model with ``[e_x, e_y, K_seal]`` appended as constant states (22)."""

    def rhs(t: Any, x: Any) -> Any:
        coeffs: dict[str, Any] = {"e_x": x[19], "e_y": x[20], "K_seal": x[21]}
        return jnp.concatenate([model.vector_field(t, x[:19], jnp.zeros(0), coeffs), jnp.zeros(3)])

    def transition(x: Any, u: Any, m: Any, p: Any) -> Any:
        return step(rhs, u[0], x, dt)

    return transition


# -- the grid-embedded units (section 3.7) -----------------------------------------------------------


class GridUnitSteps(NamedTuple):
    """The transitions ``(x, u, m, params) -> x_next`` shared by every grid-embedded unit and bus."""

    bus: Transition
    governor: Transition
    hydraulics: Transition
    rotational: Transition
    generator: Transition
    runner: Transition
    generator_path: Transition
    runner_path: Transition


def grid_rotational_rhs(p: PeltonParams, core: Any, h: Any, q: Any, t_e: Any) -> tuple[Any, Any]:
    """``d[n, omega, delta]/dt`` (S110-S113 with M_g -> T_e and S149) and the turbine torque."""
    m_t = pelton.turbine_torque(p, core[0], q, h)
    d = pelton.rotational_rhs(p, core, m_t, t_e)
    return d.at[2].set(core[1] - p.omega_rated), m_t


def generator_prior(
    p: PeltonParams, gen0: Any, x_R: Any, y_R: Any, omega: Any, phi1: Any, cov0: Any
) -> tuple[Any, Any]:
    """M4's derived accelerations at ``gen0`` and the prior covariance of ``[x_gen, a_gen]`` they induce.

    The accelerations (S121-S125) are derived states after M4's four; their prior is the linearised image
    of the state's, ``J cov0 J^T`` with ``J = [I_4; d a / d x_gen]`` (a singular port covariance cannot
    be factored for a probabilistic split message, so the derived block must be consistent with the
    state's).

    Args:
        p: the unit's constants.
        gen0: ``[x_G, y_G, vx_G, vy_G]`` (4,) at the record's start.
        x_R: runner x displacement [m].
        y_R: runner y displacement [m].
        omega: angular speed [rad/s].
        phi1: rotor angle [rad] at the record's start.
        cov0: (4, 4) the state block's prior covariance.

    Returns:
        ``(a0, cov)``: the accelerations (2,) at ``gen0`` and the (6, 6) covariance of ``[x_gen, a_gen]``.

    References:
        compositional-inference paper, SI (S121)-(S125) (the accelerations) and Table S12 (P0_gen).

    """

    def acc(c: Any) -> Any:
        return jnp.stack(pelton.generator_acceleration(p, c, x_R, y_R, omega, phi1))

    lift = np.vstack([np.eye(4), np.asarray(jax.jacfwd(acc)(gen0))])
    return acc(gen0), lift @ np.asarray(cov0) @ lift.T


@functools.cache
def grid_unit_steps(dt: float, substeps: int, step: Step) -> GridUnitSteps:
    """Each subsystem's transition: ``substeps`` steps of ``step`` on its module function, messages held.

    ``u[0]`` is the time at the step's start; time-dependent terms (the load step, ``phi1 = delta +
    omega_rated t``, the runner's excitation) are evaluated at each stage's time. Cached per ``(dt,
    substeps, step)``, so every generator (and every run with that step) shares the same functions and
    the engine stacks them. ``generator`` and ``runner`` hold the neighbour's lateral state over the step
    (the paper's exchange); ``generator_path`` and ``runner_path`` continue it from the time it holds by
    its velocity (and the generator's acceleration), that time carried as the last state.
    """
    h = dt / substeps

    def integrate(rhs: Rhs, t0: Any, x: Any) -> Any:
        for j in range(substeps):
            x = step(rhs, t0 + j * h, x, h)
        return x

    def bus(x: Any, u: Any, m: Any, p: Any) -> Any:
        def rhs(t: Any, xx: Any) -> Any:
            on = (t >= p["t_on"]) & (t < p["t_off"])
            injection = p["P"] - jnp.where(on, p["load"], 0.0)
            return jnp.reshape((injection + m[0]) / p["D"], (1,))  # eq. (S146)

        return integrate(rhs, u[0], x)

    def governor(x: Any, u: Any, m: Any, p: Any) -> Any:
        rhs = lambda t, xx: pelton.governor_rhs(p, xx, m[0], m[1], pelton.governor_command(p, t))  # noqa: E731
        return integrate(rhs, u[0], x)

    def hydraulics(x: Any, u: Any, m: Any, p: Any) -> Any:
        return integrate(lambda t, xx: pelton.hydraulics_rhs(p, xx, m[0]), u[0], x)

    def rotational(x: Any, u: Any, m: Any, p: Any) -> Any:
        h_, q, t_e = m[0], m[1], m[2]
        core = integrate(lambda t, c: grid_rotational_rhs(p, c, h_, q, t_e)[0], u[0], x[:3])
        d, m_t = grid_rotational_rhs(p, core, h_, q, t_e)
        return jnp.concatenate([core, jnp.stack([d[0], m_t])])

    def lateral_generator(x: Any, u: Any, p: Any, runner_at: Callable[[Any], Any], delta: Any) -> Any:
        """M4's step with the runner's displacement ``runner_at(t) = (x_R, y_R)``; with its accelerations."""
        omega, t1 = u[1], u[0] + dt

        def rhs(t: Any, c: Any) -> Any:
            x_r, y_r = runner_at(t)
            return pelton.generator_rhs(p, c, x_r, y_r, omega, delta + p.omega_rated * t)

        core = integrate(rhs, u[0], x[:4])
        x_r, y_r = runner_at(t1)
        acc = pelton.generator_acceleration(p, core, x_r, y_r, omega, delta + p.omega_rated * t1)
        return jnp.concatenate([core, jnp.stack(acc)])

    def lateral_runner(x: Any, u: Any, p: Any, generator_at: Callable[[Any], Any], m: Any) -> Any:
        """M5's step with the generator's ``generator_at(t) = (x_G, y_G, ax_G, ay_G)``.

        ``m``: the head, the rotor angle, the turbine torque and the electrical torque, held.
        """
        h_, delta, m_t, t_e = m
        omega, q = u[1], u[2]

        def rhs(t: Any, c: Any) -> Any:
            x_g, y_g, ax_g, ay_g = generator_at(t)
            phi1 = delta + p.omega_rated * t  # eq. (S149)
            return pelton.runner_rhs(p, c, x_g, y_g, ax_g, ay_g, omega, phi1, q, h_, m_t, t_e, t)

        core = integrate(rhs, u[0], x[:6])
        return jnp.concatenate([core, jnp.reshape(delta, (1,))])

    def generator(x: Any, u: Any, m: Any, p: Any) -> Any:
        return lateral_generator(x, u, p, lambda t: (m[0], m[1]), m[2])

    def runner(x: Any, u: Any, m: Any, p: Any) -> Any:
        return lateral_runner(x, u, p, lambda t: (m[3], m[4], m[5], m[6]), (m[0], m[1], m[2], m[7]))

    def generator_path(x: Any, u: Any, m: Any, p: Any) -> Any:
        x_r, y_r, vx_r, vy_r, t_r, delta = (m[i] for i in range(6))
        runner_at = lambda t: (x_r + vx_r * (t - t_r), y_r + vy_r * (t - t_r))  # noqa: E731
        return jnp.append(lateral_generator(x, u, p, runner_at, delta), u[0] + dt)

    def runner_path(x: Any, u: Any, m: Any, p: Any) -> Any:
        x_g, y_g, vx_g, vy_g, ax_g, ay_g, t_g = (m[i] for i in range(3, 10))

        def generator_at(t: Any) -> Any:
            s = t - t_g
            return x_g + vx_g * s + 0.5 * ax_g * s**2, y_g + vy_g * s + 0.5 * ay_g * s**2, ax_g, ay_g

        return jnp.append(lateral_runner(x, u, p, generator_at, (m[0], m[1], m[2], m[10])), u[0] + dt)

    return GridUnitSteps(
        bus, governor, hydraulics, rotational, generator, runner, generator_path, runner_path
    )
