"""The Pelton turbine-generator as a graph of its five physical modules, each with its own estimator.

The compositional-inference paper's heterogeneous system (SI S93-S143, Tables S5-S8): a 19-state hydro
unit (:class:`twinfer.models.PeltonTurbine`) cut into M1 governor (``none``: propagated), M2 hydraulics
(a NARX surrogate, ``learned``), M3 rotational dynamics (EKF with the torque coefficients e_x, e_y), M4
generator bearing (KF) and M5 runner (UKF with the seal stiffness K_seal), exchanging the interface
variables of Table S6 on eight edges (:func:`turbine_graph`); and the central UKF on the monolithic model
with the three coefficients appended (:func:`turbine_central`), the same physics as one subsystem;
:func:`prior_draw` starts the filters at a draw from their prior. Section 3.7's hierarchy: three such
units (governor, hydraulics and rotation propagated, generator and runner KFs) as graphs nested in the
IEEE 9-bus network's graph of Kuramoto buses (:func:`turbine_grid_graph`, :func:`turbine_unit_graph`).

Quantities a module sends that are not its states (M3's speed rate and the two torques, M4's
accelerations) are computed by the module's own physics at its filtered state and carried as derived
states after its estimated ones (zero process noise): their covariance is the linearised image of the
state's, and the receiver reads them as it reads any interface variable.

References:
    Ghorbani & Hackl, SI section 3.6, eq. (S93)-(S143), Tables S5-S8; section 3.7, eq. (S144)-(S150),
    Table S12; specs/compositional-inference.md 2.5, 3.6-3.7 and 7 items 14-20.

"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from twinfer.errors import TwinferValueError
from twinfer.infer.gaussian import UnscentedWeights, psd_factor
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._parts import Interface, Port, Subsystem
from twinfer.learn import NARX, narx_statics
from twinfer.models import PeltonParams, PeltonTurbine, TurbineGrid
from twinfer.models import turbine as pelton
from twinfer.models import turbine_parts as parts
from twinfer.models.turbine_grid import UNIT_OUTPUT_NAMES, UNIT_STATE_NAMES, identity_law, line_law
from twinfer.sim import heun_step, integrator_step

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


# -- three turbines in the IEEE 9-bus network (section 3.7) -------------------------------------------


GRID_GENERATOR = ("x_G", "y_G", "vx_G", "vy_G")
"""M4's estimated states in a grid-embedded unit."""
GRID_RUNNER = ("x_R", "y_R", "vx_R", "vy_R", "alpha", "beta")
"""M5's estimated states in a grid-embedded unit (K_seal known)."""


@dataclass(frozen=True)
class TurbineGridSettings:
    """The estimators' settings of :func:`turbine_grid_graph`; the defaults are Table S12's.

    ``dt`` is the outer step and ``substeps`` the Heun steps per step in every subsystem; the KFs' process
    noise (scaled by ``dt``) and prior variances are ``q_gen``, ``q_run``, ``q_tor`` and ``p0_gen``,
    ``p0_run``, ``p0_tor``; M4's R is ``lateral_noise_sd**2``, M5's ``r_run_factor`` times it. ``messages``
    and ``rule`` are the M4 <-> M5 edges' kind and rule; ``exchange`` is what M4 and M5 read of each other
    over a step: ``"held"`` (the paper's) or ``"path"`` (the neighbour's displacement continued by its
    velocity from the time it holds, carried as a last state; deterministic messages, paper rule).
    """

    dt: float = 1e-3
    substeps: int = 2
    lateral_noise_sd: float = 2e-6
    r_run_factor: float = 100.0
    q_gen: float = 1e-11
    q_run: float = 2e-12
    q_tor: float = 1e-8
    p0_gen: float = 1e-7
    p0_run: float = 1e-7
    p0_tor: float = 1e-5
    messages: Literal["deterministic", "probabilistic"] = "deterministic"
    rule: Literal["paper", "split"] = "paper"
    exchange: Literal["held", "path"] = "path"

    def __post_init__(self) -> None:
        if self.exchange == "path" and (self.messages, self.rule) != ("deterministic", "paper"):
            raise TwinferValueError(
                "exchange 'path' continues the neighbour's mean, a deterministic message: expected messages "
                f"= 'deterministic' and rule = 'paper'; received {self.messages!r} and {self.rule!r}"
            )


def _propagated(
    name: str, transition: Any, params: Any, x0: Any, ports: dict[str, Port], n_msg: int, names: Any
) -> Subsystem:
    """A subsystem stepped without a filter (estimator ``none``: zero P0 and Q, no outputs)."""
    n = len(x0)
    return Subsystem(
        name=name,
        transition=transition,
        output=np.zeros((0, n)),
        params=params,
        x0=jnp.asarray(x0, dtype=jnp.float64),
        P0=np.zeros((n, n)),
        Q=np.zeros((n, n)),
        R=np.zeros((0, 0)),
        inputs=(0,),
        outputs=(),
        ports=ports,
        n_msg=n_msg,
        estimator="none",
        state_names=tuple(names),
    )


def turbine_unit_graph(
    model: TurbineGrid, i: int, x0_unit: Any, t_e0: float, settings: TurbineGridSettings
) -> Graph:
    """Generator ``i``'s five subsystems and eight identity edges as a graph to nest.

    M1 governor, M2 hydraulics and M3 rotation (with the rotor angle ``delta = phi1 - omega_rated t``)
    are propagated; M4 generator and M5 runner are KFs on their linearisation that read the measured
    omega and q (the record's inputs ``1 + 2 i`` and ``2 + 2 i``) and update with (x_G, y_G) and (x_R,
    y_R) (the outputs ``6 i ..`` in :data:`~twinfer.models.turbine_grid.UNIT_OUTPUT_NAMES` order). It
    exports ``grid`` (M3) and ``grid_runner`` (M5), the ports that read the rotor angle and receive the
    grid torque. Started at ``x0_unit``; derived states (dn/dt, M_t, accelerations) at their values there
    with ``T_e = t_e0``.

    References:
        Ghorbani & Hackl, SI (S144)-(S150), Table S12 (Q, P0, R).

    """
    s = settings
    f = parts.grid_unit_steps(s.dt, s.substeps, heun_step)
    path = int(s.exchange == "path")
    p = model.units[i]
    tag = f"_{model.gen_buses[i] + 1}"
    v = {n: float(x) for n, x in zip(UNIT_STATE_NAMES, np.asarray(x0_unit), strict=True)}
    core = jnp.asarray([v["n"], v["omega"], v["delta"]])
    d0, m_t0 = parts.grid_rotational_rhs(p, core, v["h"], v["q"], t_e0)
    gen0 = jnp.asarray([v[n] for n in GRID_GENERATOR])
    acc0, p0_gen = parts.generator_prior(
        p, gen0, v["x_R"], v["y_R"], v["omega"], v["delta"], _diag([s.p0_gen] * 4)
    )
    omega_col, q_col = 1 + 2 * i, 2 + 2 * i
    out = {n: 6 * i + k for k, n in enumerate(UNIT_OUTPUT_NAMES)}
    r_gen, r_run = s.lateral_noise_sd**2, s.r_run_factor * s.lateral_noise_sd**2
    q_gen = [s.q_gen, s.q_gen, 100 * s.q_gen, 100 * s.q_gen, 0.0, 0.0]
    q_run = [s.q_run, s.q_run, 100 * s.q_run, 100 * s.q_run, s.q_tor, 10 * s.q_tor, 0.0]
    nodes = [
        _propagated(
            "M1", f.governor, p, [v["x_n"], v["x_int"]], {"needle": Port((0,)), "speed": Port((), (0, 1))},
            2, [f"x_n{tag}", f"x_int{tag}"],
        ),
        _propagated(
            "M2", f.hydraulics, p, [v["x1"], v["x2"], v["h"], v["q"]],
            {"needle": Port((), (0,)), "head_flow": Port((2, 3)), "head": Port((2,))},
            1, [f"{n}{tag}" for n in ("x1", "x2", "h", "q")],
        ),
        _propagated(
            "M3", f.rotational, p, [v["n"], v["omega"], v["delta"], float(d0[0]), float(m_t0)],
            {"head_flow": Port((), (0, 1)), "grid": Port((2,), (2,)), "speed": Port((0, 3)),
             "rotor": Port((2,)), "shaft": Port((2, 4))},
            3, [f"{n}{tag}" for n in ("n", "omega", "delta", "n_dot", "M_t")],
        ),
        Subsystem(
            name="M4",
            transition=f.generator_path if path else f.generator,
            output=np.eye(6 + path)[:2],
            params=p,
            x0=jnp.concatenate([gen0, acc0, jnp.zeros(path)]),  # the record starts at t = 0
            P0=scipy.linalg.block_diag(p0_gen, np.zeros((path, path))),  # the time stamp is known
            Q=s.dt * _diag(q_gen + [0.0] * path),
            R=_diag([r_gen, r_gen]),
            inputs=(0, omega_col),
            outputs=(out["x_G"], out["y_G"]),
            ports={
                "lateral": Port((0, 1, 2, 3, 4, 5, 6)) if path else Port((0, 1, 4, 5)),
                "runner": Port((), (0, 1, 2, 3, 4) if path else (0, 1)),
                "rotor": Port((), (5,) if path else (2,)),
            },
            n_msg=6 if path else 3,
            estimator="kf",
            state_names=tuple(f"{n}{tag}" for n in (*GRID_GENERATOR, "ax_G", "ay_G", *(("~t_G",) * path))),
        ),
        Subsystem(
            name="M5",
            transition=f.runner_path if path else f.runner,
            output=np.eye(7 + path)[:2],
            params=p,
            x0=jnp.asarray([*(v[n] for n in GRID_RUNNER), v["delta"], *([0.0] * path)]),
            P0=_diag([s.p0_run] * 4 + [s.p0_tor] * 2 + [0.0] * (1 + path)),
            Q=s.dt * _diag(q_run + [0.0] * path),
            R=_diag([r_run, r_run]),
            inputs=(0, omega_col, q_col),
            outputs=(out["x_R"], out["y_R"]),
            ports={
                "lateral": Port((0, 1, 2, 3, 7)) if path else Port((0, 1)),
                "head": Port((), (0,)),
                "shaft": Port((), (1, 2)),
                "generator": Port((), tuple(range(3, 10)) if path else (3, 4, 5, 6)),
                "grid": Port((6,), (10,) if path else (7,)),
            },
            n_msg=11 if path else 8,
            estimator="kf",
            state_names=(*(f"{n}{tag}" for n in GRID_RUNNER), f"~delta_copy{tag}", *((f"~t_R{tag}",) * path)),
        ),
    ]  # fmt: skip
    kind, rule = s.messages, s.rule
    edges = [
        Interface("M1", "needle", "M2", "needle", identity_law, {}),
        Interface("M2", "head_flow", "M3", "head_flow", identity_law, {}),
        Interface("M2", "head", "M5", "head", identity_law, {}),
        Interface("M3", "speed", "M1", "speed", identity_law, {}),
        Interface("M3", "rotor", "M4", "rotor", identity_law, {}),
        Interface("M3", "shaft", "M5", "shaft", identity_law, {}),
        Interface("M4", "lateral", "M5", "generator", identity_law, {}, kind, rule),
        Interface("M5", "lateral", "M4", "runner", identity_law, {}, kind, rule),
    ]
    return Graph(f"G{tag[1:]}", nodes, edges, exports={"grid": ("M3", "grid"), "grid_runner": ("M5", "grid")})


def turbine_grid_graph(model: TurbineGrid, settings: TurbineGridSettings) -> Graph:
    """The network's bus nodes and one nested :func:`turbine_unit_graph` per generator, joined per line.

    The non-generator buses are first-order Kuramoto nodes (Heun, propagated; the time input switches
    the model's load step). Every line (i, j) carries one edge each way into a bus (``K_ij sin``, S146)
    and, into a generator, one edge to M3's and one to M5's ``grid`` port (``-(S_base/omega_rated) K_ij
    sin``, S147-S148). Started at the model's initial state.

    Returns:
        The graph ``"ieee9_turbines"``, its estimates in the model's state order, then each generator's
        derived ``n_dot``, ``M_t``, ``ax_G``, ``ay_G``.

    References:
        Ghorbani & Hackl, SI (S144)-(S150).

    """
    f = parts.grid_unit_steps(settings.dt, settings.substeps, heun_step)
    x0 = jnp.asarray(model.initial_state())
    blocks, t_e0 = np.asarray(model.unit_states(x0)), np.asarray(model.electrical_torque(x0))
    p_inj, damping = np.asarray(model.params["P_inj"]), np.asarray(model.params["D"])
    delta0 = np.asarray(model.bus_angles(x0))
    step = model.disturbance
    nodes: list[Subsystem | Graph] = []
    for k, b in enumerate(model.other_buses):
        params = {
            "P": jnp.asarray(p_inj[b]),
            "D": jnp.asarray(damping[k]),
            "load": jnp.asarray(step.load if step is not None and step.bus == b else 0.0),
            "t_on": jnp.asarray(step.t_on if step is not None else 0.0),
            "t_off": jnp.asarray(step.t_off if step is not None else 0.0),
        }
        ports = {"grid": Port((0,), (0,))}
        nodes.append(_propagated(f"bus{b + 1}", f.bus, params, [delta0[b]], ports, 1, [f"delta_{b + 1}"]))
    for i in range(model.n_gen):
        nodes.append(turbine_unit_graph(model, i, blocks[i], float(t_e0[i]), settings))
    gens = {b: i for i, b in enumerate(model.gen_buses)}
    K, omega_rated = np.asarray(model.K), np.asarray(model.omega_rated)

    def node(b: int) -> str:
        return f"G{b + 1}" if b in gens else f"bus{b + 1}"

    edges = []
    for r in range(K.shape[0]):  # receiver
        for c in range(K.shape[0]):  # sender
            if r == c or K[r, c] == 0:
                continue
            if r in gens:
                coef = jnp.asarray(-(model.S_base / omega_rated[gens[r]]) * K[r, c])  # eq. (S147)-(S148)
                edges.append(Interface(node(c), "grid", node(r), "grid", line_law, coef))
                edges.append(Interface(node(c), "grid", node(r), "grid_runner", line_law, coef))
            else:
                edges.append(Interface(node(c), "grid", node(r), "grid", line_law, jnp.asarray(K[r, c])))
    derived = (f"{n}_{b + 1}" for b in model.gen_buses for n in ("n_dot", "M_t", "ax_G", "ay_G"))
    return Graph("ieee9_turbines", nodes, edges, state_order=(*model.state_names, *derived))


# -- the filters' prior draw (section 3.6) ----------------------------------------------------------


TURBINE_ESTIMATED = (
    "n",
    "omega",
    "phi1",
    "x_G",
    "y_G",
    "vx_G",
    "vy_G",
    "x_R",
    "y_R",
    "vx_R",
    "vy_R",
    "alpha",
    "beta",
)
"""The unit's states a filter of :func:`turbine_graph` estimates (M3, M4, M5); M1's are propagated and
M2's h is the NARX's."""


def prior_draw(settings: TurbineSettings, params: PeltonParams, x0: Any, key: Any) -> np.ndarray:
    """The unit's state ``x0`` (19,) with the :data:`TURBINE_ESTIMATED` states drawn from the filters' prior.

    One draw from ``N(x0, P0)`` of the estimated states, ``P0`` the modules' (M3's shaft block from
    :func:`shaft_covariances`, M4's and M5's Table S8 diagonals); the others keep ``x0``'s values. A
    filter started at the truth itself keeps a band of sd ``sqrt(P0)`` around an error that is zero where
    the data carry no information (phi1 is seen only through the unbalance's phase), which over-covers
    for a reason that is not the filter's: a calibration test needs the truth to be a draw from the
    filter's prior.
    """
    names = tuple(PeltonTurbine(params).state_names)
    x = _check_initial(x0, names).copy()
    _, p0_shaft = shaft_covariances(settings, params)
    p0 = np.asarray(
        scipy.linalg.block_diag(p0_shaft, _diag(settings.p0_generator), _diag(settings.p0_runner[:6]))
    )
    root = np.asarray(psd_factor(p0, "turbine P0"))
    z = np.asarray(jax.random.normal(key, (p0.shape[0],)))
    x[[names.index(s) for s in TURBINE_ESTIMATED]] += root @ z
    return x
