"""The Pelton turbine-generator as a graph of its five physical modules, each with its own estimator.

The compositional-inference paper's heterogeneous system (SI S93-S143, Tables S5-S8): a 19-state hydro
unit (:class:`twinfer.models.PeltonTurbine`) cut into M1 governor (``none``: propagated), M2 hydraulics
(a NARX surrogate, ``learned``), M3 rotational dynamics (EKF with the torque coefficients e_x, e_y), M4
generator bearing (KF) and M5 runner (UKF with the seal stiffness K_seal), exchanging the interface
variables of Table S6 on eight edges (:func:`turbine_graph`); and the central UKF on the monolithic model
with the three coefficients appended (:func:`turbine_central`), the same physics as one subsystem.

Quantities a module sends that are not its states (M3's speed rate and the two torques, M4's
accelerations) are computed by the module's own physics at its filtered state and carried as derived
states after its estimated ones (zero process noise): their covariance is the linearised image of the
state's, and the receiver reads them as it reads any interface variable.

References:
    Ghorbani & Hackl, SI section 3.6, eq. (S93)-(S143), Tables S5-S8; specs/compositional-inference.md
    2.5, 3.6 and 7 items 14-19.

"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np

from twinfer.infer.gaussian import UnscentedWeights
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._parts import Interface, Port, Subsystem
from twinfer.learn import NARX
from twinfer.models import PeltonParams, PeltonTurbine
from twinfer.models import turbine as pelton
from twinfer.models import turbine_parts as parts
from twinfer.sim import integrator_step

TURBINE_OUTPUTS = ("omega", "q", "x_G", "y_G", "x_R", "y_R")
"""The six sensors (Table S8): speed, flow, generator and runner lateral displacements."""
TURBINE_COEFFICIENTS = ("e_x", "e_y", "K_seal")
"""The three scaled coefficients the filters estimate (truth 1.0)."""


@dataclass(frozen=True)
class TurbineSettings:
    """The estimators' settings of the turbine graphs; the defaults are the ``turbine`` case's.

    ``*_noise_sd`` are the sensors' standard deviations; ``q_*`` and ``p0_*`` the process-noise and prior
    variances of Table S8 per module (M3: n, omega, phi1, e_x, e_y; M4: x, y, vx, vy; M5: x, y, vx, vy,
    alpha, beta, K_seal), every ``Q`` scaled by ``q_scale``; ``r_floor`` is added to each sensor
    variance; ``q_governor`` is M1's (and the central filter's governor and hydraulics') variance per
    state. ``rotational_noise``: ``"shaft"`` enters Q and P0 of n, omega, phi1 as one torque disturbance
    (:func:`shaft_covariances`), ``"table"`` as Table S8's independent random walks. ``rotational_head``
    keeps e_h h in M3's torque. ``narx_lags`` and ``narx_spacing`` are the NARX's window (S106);
    ``integrator`` steps every module (``"heun"`` or ``"rk4"``); ``messages`` and ``rule`` are every
    edge's kind and rule (:class:`~twinfer.infer.graph.Interface`; the NARX's edge keeps ``"paper"``);
    the coefficients start at ``initial_factor``.
    """

    dt: float = 2e-3
    omega_noise_sd: float = 0.02
    q_noise_sd: float = 0.01
    lateral_noise_sd: float = 5e-6
    initial_factor: float = 0.7
    rotational_head: bool = True
    q_rotational: tuple[float, float, float, float, float] = (1e-10, 1e-10, 1e-10, 1e-15, 1e-14)
    p0_rotational: tuple[float, float, float, float, float] = (1e-6, 1e-6, 1e-6, 10.0, 10.0)
    q_generator: tuple[float, float, float, float] = (1e-10, 1e-10, 1e-11, 1e-11)
    p0_generator: tuple[float, float, float, float] = (1e-8, 1e-8, 1e-4, 1e-4)
    q_runner: tuple[float, float, float, float, float, float, float] = (
        1e-10,
        1e-10,
        1e-8,
        1e-8,
        1e-8,
        1e-8,
        1e-8,
    )
    p0_runner: tuple[float, float, float, float, float, float, float] = (
        1e-8,
        1e-8,
        1e-4,
        1e-4,
        1e-4,
        1e-4,
        1e2,
    )
    rotational_noise: Literal["shaft", "table"] = "shaft"
    q_scale: float = 1e-2
    r_floor: float = 0.0
    q_governor: float = 1e-12
    narx_lags: int = 200
    narx_spacing: int = 5
    integrator: Literal["heun", "rk4"] = "rk4"
    messages: Literal["deterministic", "probabilistic"] = "probabilistic"
    rule: Literal["paper", "split"] = "split"


TURBINE_DEFAULTS = TurbineSettings()
"""The ``turbine`` case's settings (the authors' standalone run, specs 3.6 [REPO], with its fixes)."""


def _identity(s_send: Any, s_recv: Any, gamma: Any) -> Any:
    """An interface law that passes the sender's interface variables on (Table S6)."""
    return s_send


def _diag(values: Any) -> np.ndarray:
    return np.diag(np.asarray(values, dtype=np.float64))


def narx_statics(params: PeltonParams) -> np.ndarray:
    """The NARX's static inputs u_stat = [T_e, T_q, y_r, h0] of a unit (S106)."""
    return np.asarray([params.T_e, params.T_q, params.y_r, params.h0])


def shaft_covariances(settings: TurbineSettings, params: PeltonParams) -> tuple[np.ndarray, np.ndarray]:
    """Q and P0 of the shaft states [n, omega, phi1] (M3 and the central UKF).

    ``"table"``: Table S8's diagonal. ``"shaft"``: one torque disturbance on the shaft moves omega by
    ``w`` over a step (dn = domega / omega_rated, dphi1 = omega dt): ``Q = q_omega v v^T``. The initial
    speed error moves n and omega together (``p_omega u u^T`` with ``u = [1 / omega_rated, 1, 0]``); the
    initial angle is uncertain on its own (``p_phi1``). Both keep ``n - omega / omega_rated`` exactly
    known, as it is in the truth (n is the speed deviation ``(omega - omega_rated) / omega_rated``), so n
    is as well determined as the measured omega.
    """
    q, p0 = settings.q_rotational, settings.p0_rotational
    if settings.rotational_noise == "table":
        return _diag(q[:3]), _diag(p0[:3])
    v = np.asarray([1.0 / params.omega_rated, 1.0, 0.5 * settings.dt])
    u = np.asarray([1.0 / params.omega_rated, 1.0, 0.0])
    return q[1] * np.outer(v, v), p0[1] * np.outer(u, u) + _diag([0.0, 0.0, p0[2]])


def _governor(settings: TurbineSettings, params: PeltonParams, x0: Any) -> Subsystem:
    """M1: the PID governor with saturation (S94-S99), propagated; messages n, dn/dt from M3."""
    return Subsystem(
        name="M1",
        transition=parts.governor_transition(params, settings.dt, integrator_step(settings.integrator)),
        output=np.zeros((0, 2)),
        params={},
        x0=jnp.asarray(x0),
        P0=settings.q_governor * np.eye(2),
        Q=settings.q_governor * np.eye(2),
        R=np.zeros((0, 0)),
        inputs=(0,),
        outputs=(),
        ports={"needle": Port((0,)), "speed": Port((), (0, 1))},
        n_msg=2,
        estimator="none",
        state_names=("x_n", "x_int"),
    )


def _hydraulics(
    settings: TurbineSettings, params: PeltonParams, narx: NARX, first: Any, sd_h: float
) -> Subsystem:
    """M2: the NARX predicts h one step ahead from its window; the measured q is passed on (S106).

    The state is ``[h, q]`` followed by the memory of the last ``lags x spacing`` (x_n, measured q)
    pairs (``Subsystem.memory``); its covariance is the NARX's test error and the flow sensor's.
    """
    lags, spacing = settings.narx_lags, settings.narx_spacing
    size = lags * spacing
    transition = parts.narx_transition(narx, jnp.asarray(narx_statics(params)), lags, spacing)
    memory0 = jnp.tile(jnp.asarray(first, dtype=jnp.float64), size)
    return Subsystem(
        name="M2",
        transition=transition,
        output=np.zeros((0, 2 + 2 * size)),
        params={},
        x0=jnp.concatenate([jnp.asarray([0.0, first[1]]), memory0]),
        P0=_diag([sd_h**2, settings.q_noise_sd**2]),
        Q=_diag([sd_h**2, settings.q_noise_sd**2]),
        R=np.zeros((0, 0)),
        inputs=(0, 1),
        outputs=(),
        ports={"head_flow": Port((0, 1)), "needle": Port((), (0,))},
        n_msg=1,
        estimator="learned",
        state_names=("h", "q", *(f"~memory{i}" for i in range(2 * size))),
        memory=2 * size,
    )


def _rotational(settings: TurbineSettings, params: PeltonParams, x0: Any) -> Subsystem:
    """M3: the EKF on [n, omega, phi1, e_x, e_y] (S108-S117), with dn/dt, M_t, M_g derived after them."""
    step = integrator_step(settings.integrator)
    transition = parts.rotational_transition(params, settings.dt, step, settings.rotational_head)
    r = settings.omega_noise_sd**2 + settings.r_floor
    q_shaft, p0_shaft = shaft_covariances(settings, params)
    q_m3 = _diag([0.0, 0.0, 0.0, *settings.q_rotational[3:], 0.0, 0.0, 0.0])
    p0_m3 = _diag([0.0, 0.0, 0.0, *settings.p0_rotational[3:], 0.0, 0.0, 0.0])
    q_m3[:3, :3], p0_m3[:3, :3] = q_shaft, p0_shaft
    return Subsystem(
        name="M3",
        transition=transition,
        output=np.eye(8)[1:2],
        params={},
        x0=jnp.asarray(x0),
        P0=p0_m3,
        Q=settings.q_scale * q_m3,
        R=_diag([r]),
        inputs=(0,),
        outputs=(TURBINE_OUTPUTS.index("omega"),),
        ports={
            "speed": Port((0, 5)),
            "shaft": Port((1, 2)),
            "shaft_torques": Port((1, 2, 6, 7)),
            "head_flow": Port((), (0, 1)),
        },
        n_msg=2,
        estimator="ekf",
        state_names=("n", "omega", "phi1", "e_x", "e_y", "n_dot", "M_t", "M_g"),
        parameters=("e_x", "e_y"),
    )


def _generator(settings: TurbineSettings, params: PeltonParams, x0: Any) -> Subsystem:
    """M4: the KF on [x_G, y_G, vx_G, vy_G] (S118-S127), its accelerations derived after them.

    Messages: x_R, y_R from M5, omega, phi1 from M3.
    """
    transition = parts.generator_transition(params, settings.dt, integrator_step(settings.integrator))
    r = settings.lateral_noise_sd**2 + settings.r_floor
    return Subsystem(
        name="M4",
        transition=transition,
        output=np.eye(6)[:2],
        params={},
        x0=jnp.asarray(x0),
        P0=_diag([*settings.p0_generator, 0.0, 0.0]),
        Q=settings.q_scale * _diag([*settings.q_generator, 0.0, 0.0]),
        R=_diag([r, r]),
        inputs=(0,),
        outputs=(TURBINE_OUTPUTS.index("x_G"), TURBINE_OUTPUTS.index("y_G")),
        ports={"lateral": Port((0, 1, 4, 5)), "runner": Port((), (0, 1)), "shaft": Port((), (2, 3))},
        n_msg=4,
        estimator="kf",
        state_names=("x_G", "y_G", "vx_G", "vy_G", "ax_G", "ay_G"),
    )


def _runner(settings: TurbineSettings, params: PeltonParams, x0: Any) -> Subsystem:
    """M5: the UKF (gamma = 1) on [x_R, y_R, vx_R, vy_R, alpha, beta, K_seal] (S128-S143).

    Messages: h, q from M2; omega, phi1, M_t, M_g from M3; x_G, y_G and their accelerations from M4.
    """
    transition = parts.runner_transition(params, settings.dt, integrator_step(settings.integrator))
    r = settings.lateral_noise_sd**2 + settings.r_floor
    return Subsystem(
        name="M5",
        transition=transition,
        output=np.eye(7)[:2],
        params={},
        x0=jnp.asarray(x0),
        P0=_diag(settings.p0_runner),
        Q=settings.q_scale * _diag(settings.q_runner),
        R=_diag([r, r]),
        inputs=(0,),
        outputs=(TURBINE_OUTPUTS.index("x_R"), TURBINE_OUTPUTS.index("y_R")),
        ports={
            "lateral": Port((0, 1)),
            "head_flow": Port((), (0, 1)),
            "shaft_torques": Port((), (2, 3, 4, 5)),
            "generator": Port((), (6, 7, 8, 9)),
        },
        n_msg=10,
        estimator="ukf",
        weights=UnscentedWeights.paper_code(1.0),
        state_names=("x_R", "y_R", "vx_R", "vy_R", "alpha", "beta", "K_seal"),
        parameters=("K_seal",),
    )


def _check_initial(x0: Any, names: Sequence[str]) -> np.ndarray:
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.shape != (len(names),):
        raise ValueError(
            f"turbine graph x0: expected the unit's {len(names)} states ({', '.join(names)}); received "
            f"shape {x0.shape}."
        )
    return x0


def turbine_graph(
    params: PeltonParams,
    narx: NARX,
    x0: Any,
    q_first: float,
    sd_h: float,
    settings: TurbineSettings = TURBINE_DEFAULTS,
) -> Graph:
    """The five modules and the eight message edges of Table S6, each module with its own estimator.

    The estimated states start at ``x0``, the coefficients at ``settings.initial_factor``, the derived
    quantities (dn/dt, the torques M_t and M_g, the generator's accelerations) at their values there.

    Args:
        params: the unit's parameters (the estimators' model; the coefficients are scaled by them).
        narx: M2's surrogate of the head, trained on windows of ``settings.narx_lags`` (x_n, measured q)
            samples every ``settings.narx_spacing`` steps (:func:`twinfer.learn.fit_narx`).
        x0: the unit's initial state (19,), in :class:`~twinfer.models.PeltonTurbine`'s state order.
        q_first: the measured flow at the record's first row (it fills the NARX's window).
        sd_h: the NARX's error on the head (its test RMSE): M2's process noise on h.
        settings: the estimators' settings.

    Returns:
        The graph ``"turbine"`` over the data's inputs ``(t, measured q)`` and the outputs
        :data:`TURBINE_OUTPUTS`, its estimates in the unit's state order, then
        :data:`TURBINE_COEFFICIENTS`.

    References:
        Ghorbani & Hackl, SI (S93)-(S143), Table S6 (the edges), Table S8 (the noise levels).

    """
    names = tuple(PeltonTurbine(params).state_names)
    x0 = _check_initial(x0, names)
    v = {n: float(x0[names.index(n)]) for n in names}
    c0 = settings.initial_factor
    h0, q0 = v["h"], v["q"]
    m_t0 = float(pelton.turbine_torque(params, v["n"], q0, h0, c0, c0, include_head=settings.rotational_head))
    m_g0 = float(pelton.generator_torque(params, v["omega"]))
    rot0 = [v["n"], v["omega"], v["phi1"], c0, c0]
    n_dot0 = float(pelton.rotational_rhs(params, jnp.asarray(rot0[:3]), m_t0, m_g0)[0])
    gen0 = [v["x_G"], v["y_G"], v["vx_G"], v["vy_G"]]
    run0 = [v["x_R"], v["y_R"], v["vx_R"], v["vy_R"], v["alpha"], v["beta"], c0]
    acc0 = pelton.generator_acceleration(params, jnp.asarray(gen0), v["x_R"], v["y_R"], v["omega"], v["phi1"])
    nodes = [
        _governor(settings, params, [v["x_n"], v["x_int"]]),
        _hydraulics(settings, params, narx, np.asarray([v["x_n"], q_first]), sd_h),
        _rotational(settings, params, [*rot0, n_dot0, m_t0, m_g0]),
        _generator(settings, params, [*gen0, float(acc0[0]), float(acc0[1])]),
        _runner(settings, params, run0),
    ]
    kind, rule = settings.messages, settings.rule
    edges = [
        Interface("M1", "needle", "M2", "needle", _identity, {}, kind, "paper"),
        Interface("M2", "head_flow", "M3", "head_flow", _identity, {}, kind, rule),
        Interface("M2", "head_flow", "M5", "head_flow", _identity, {}, kind, rule),
        Interface("M3", "speed", "M1", "speed", _identity, {}, kind, rule),
        Interface("M3", "shaft", "M4", "shaft", _identity, {}, kind, rule),
        Interface("M3", "shaft_torques", "M5", "shaft_torques", _identity, {}, kind, rule),
        Interface("M4", "lateral", "M5", "generator", _identity, {}, kind, rule),
        Interface("M5", "lateral", "M4", "runner", _identity, {}, kind, rule),
    ]
    return Graph("turbine", nodes, edges, state_order=(*names, *TURBINE_COEFFICIENTS))


def turbine_central(params: PeltonParams, x0: Any, settings: TurbineSettings = TURBINE_DEFAULTS) -> Graph:
    """The central UKF: the monolithic 19-state model with the three coefficients appended (22 states).

    Stepped like the modules of :func:`turbine_graph`; Q and P0 per state are the modules' (the
    governor's and the hydraulics': ``q_governor``; the NARX's h has no counterpart), the shaft block
    from :func:`shaft_covariances`.

    Args:
        params: the unit's parameters.
        x0: the unit's initial state (19,); the coefficients start at ``settings.initial_factor``.
        settings: the estimators' settings.

    Returns:
        The one-subsystem graph ``"central"``, its estimates in the unit's state order, then
        :data:`TURBINE_COEFFICIENTS`.

    References:
        Ghorbani & Hackl, SI section 3.6 (the central reference), Table S8.

    """
    model = PeltonTurbine(params)
    names = tuple(model.state_names)
    x0 = _check_initial(x0, names)
    s = settings
    transition = parts.central_transition(model, s.dt, integrator_step(s.integrator))
    per_state = {
        **dict(zip(("n", "omega", "phi1"), zip(s.q_rotational, s.p0_rotational, strict=False), strict=False)),
        **dict(
            zip(("x_G", "y_G", "vx_G", "vy_G"), zip(s.q_generator, s.p0_generator, strict=True), strict=True)
        ),
        **dict(
            zip(
                ("x_R", "y_R", "vx_R", "vy_R", "alpha", "beta"),
                zip(s.q_runner, s.p0_runner, strict=False),
                strict=False,
            )
        ),
    }
    q = [per_state.get(n, (s.q_governor, s.q_governor))[0] for n in names]
    p0 = [per_state.get(n, (s.q_governor, s.q_governor))[1] for n in names]
    q += [s.q_rotational[3], s.q_rotational[4], s.q_runner[6]]
    p0 += [s.p0_rotational[3], s.p0_rotational[4], s.p0_runner[6]]
    start = np.concatenate([x0, [s.initial_factor] * 3])
    sd = np.asarray([s.omega_noise_sd, s.q_noise_sd] + [s.lateral_noise_sd] * 4)
    rows = [names.index(o) for o in TURBINE_OUTPUTS]
    q_central, p0_central = _diag(q), _diag(p0)
    rot = np.asarray([names.index(n) for n in ("n", "omega", "phi1")])
    q_central[np.ix_(rot, rot)], p0_central[np.ix_(rot, rot)] = shaft_covariances(s, params)
    node = Subsystem(
        name="central",
        transition=transition,
        output=np.eye(22)[rows],
        params={},
        x0=jnp.asarray(start),
        P0=p0_central,
        Q=s.q_scale * q_central,
        R=_diag(sd**2 + s.r_floor),
        inputs=(0,),
        outputs=tuple(range(6)),
        ports={},
        n_msg=0,
        estimator="ukf",
        weights=UnscentedWeights.paper_code(1.0),
        state_names=(*names, *TURBINE_COEFFICIENTS),
        parameters=TURBINE_COEFFICIENTS,
    )
    return Graph("central", [node], state_order=(*names, *TURBINE_COEFFICIENTS))
