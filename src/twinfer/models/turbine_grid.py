"""A power grid whose generator buses are Pelton turbine-generators: the hierarchical case of section 3.7.

The IEEE 9-bus network of the compositional-inference paper (specs/compositional-inference.md 3.7,
SI (S144)-(S150)) with each of its three generator buses replaced by the full 19-state turbine of
:mod:`twinfer.models.turbine` (:meth:`PeltonParams.hierarchical` units) and the other buses following
the first-order Kuramoto model

    d delta_b/dt = (P_inj,b + P_e,b(delta)) / D_b,    P_e,b = sum_j K_bj sin(delta_j - delta_b)   (S146).

The turbine's braking torque ``M_g`` becomes the grid torque

    T_e,i = (S_base / omega_rated,i) P_e,i^out,    P_e,i^out = -sum_j K_ij sin(delta_j - delta_i)
                                                                                        (S147)-(S148),

positive for a generating unit (the spec's sign note: S148 is printed with a minus that holds only for
the S146-form inflow), and its rotor angle state is ``delta_i = phi1 - omega_rated t`` (S149), the bus
angle the network sees; ``phi1 = delta_i + omega_rated t`` is rebuilt wherever the lateral forces need
it. The turbine's mechanical rotor angle serves directly as the electrical bus angle (no pole pairs), as
in the paper.

Coupling: ``K_ij = Im(Y_ij)``, the signed susceptance of the nodal admittance matrix (spec 3.7,
Table "case9 K"), positive for these lines. This is *not* what :func:`twinfer.data.load_grid` returns:
that is ``|Y_ij|`` (S71, the scalability study), which differs on every line with resistance (case9
4-5: ``|Y| = 10.689``, ``Im Y = 10.511``); :func:`susceptance_case` builds ``Im(Y)`` from the same
pandapower branch table. The sign needs no conversion: ``Im(Y_ft) = x / (r^2 + x^2) > 0`` for a series
reactance.

What holds exactly at the operating point (:func:`kuramoto_operating_point`,
:meth:`TurbineGrid.initial_state`) before the load step: the bus angles are stationary, and so are the
governor, hydraulics and rotation (``M_t = M_gB = T_e``, Table S10; ``q* = 1``, ``u_PID = x_n = 0.8``).
The lateral vibrations and the shaft torsion are not at rest (periodic unbalance, vortex and blade
forcing; the shaft starts untwisted), but nothing feeds them back into the speed, so the
electromechanical state stays put.

References:
    compositional-inference paper, SI (S144)-(S150), Tables S9-S12; spec 3.7 "[REPO]" (slack
    generation, warm start, initial state, grid-unit extras); decision 20 of spec section 7.

"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models._base import AbstractModel, Input, Output, Params, State
from twinfer.models.turbine import (
    SLICES,
    STATE_NAMES,
    PeltonParams,
    generator_rhs,
    governor_command,
    governor_rhs,
    hydraulics_rhs,
    rotational_rhs,
    runner_rhs,
    turbine_torque,
)

__all__ = [
    "GridCase",
    "LoadStep",
    "OperatingPoint",
    "TorqueBalance",
    "TurbineGrid",
    "bus_rate",
    "coi_angle",
    "grid_torque",
    "kuramoto_operating_point",
    "load_step",
    "power_inflow",
    "susceptance_case",
    "torque_balance",
    "turbine_unit_rhs",
]

N_UNIT = len(STATE_NAMES)
"""States of one turbine block (19)."""

UNIT_STATE_NAMES: tuple[str, ...] = tuple("delta" if s == "phi1" else s for s in STATE_NAMES)
"""One turbine block: :data:`twinfer.models.turbine.STATE_NAMES` with ``phi1`` replaced by the rotor
angle ``delta = phi1 - omega_rated t`` (S149)."""

UNIT_OUTPUT_NAMES = ("x_G", "y_G", "x_R", "y_R", "q", "omega")
"""Measured channels of each generator (spec 3.7, inner estimation)."""

_UNIT_OUTPUT_INDEX = np.asarray([UNIT_STATE_NAMES.index(s) for s in UNIT_OUTPUT_NAMES])
_DELTA = UNIT_STATE_NAMES.index("delta")


# -- the network's case ----------------------------------------------------------------------------
class GridCase(NamedTuple):
    """A lossless network case: susceptance coupling and per-unit injections.

    Attributes:
        K: ``Im(Y_ij)`` (N, N), zero diagonal.
        P_inj: net injections ``(P_gen - P_load) / S_base`` (N,) [p.u.].
        gen_buses: the generator buses (0-based), slack first as in the case's table.
        P_gen: their generation (n_gen,) [W].
        S_base: base power [W].

    """

    K: np.ndarray
    P_inj: np.ndarray
    gen_buses: tuple[int, ...]
    P_gen: np.ndarray
    S_base: float


def _susceptance(n_bus: int, branch: np.ndarray) -> np.ndarray:
    """``Im(Y_ij)`` (i != j) of the nodal admittance matrix from a MATPOWER branch table (dense)."""
    br = np.asarray(branch)
    br = br[np.real(br[:, 10]) > 0]  # in-service branches
    f, t = np.real(br[:, 0]).astype(int), np.real(br[:, 1]).astype(int)
    ys = 1.0 / (np.real(br[:, 2]) + 1j * np.real(br[:, 3]))
    ratio = np.where(np.real(br[:, 8]) == 0, 1.0, np.real(br[:, 8]))
    tap = ratio * np.exp(1j * np.deg2rad(np.real(br[:, 9])))
    y_off = np.zeros((n_bus, n_bus), complex)
    np.add.at(y_off, (f, t), -ys / np.conj(tap))  # Y_ft (MATPOWER manual 3.2)
    np.add.at(y_off, (t, f), -ys / tap)  # Y_tf
    np.fill_diagonal(y_off, 0.0)
    return np.imag(y_off)


def susceptance_case(case: str = "ieee9") -> GridCase:
    """The case's coupling ``K_ij = Im(Y_ij)`` and its lossless injections (spec 3.7 "[REPO]").

    The slack generation is set to the total load less the other units' generation (67 MW for case9), so
    generation equals load and the lossless Kuramoto network balances. ``P_inj`` for case9 is
    ``[0.67, 1.63, 0.85, 0, -0.90, 0, -1.00, 0, -1.25]``.

    Args:
        case: any case :func:`twinfer.data.load_grid` accepts except MATPOWER files (default ``ieee9``).

    Returns:
        The :class:`GridCase`.

    References:
        compositional-inference paper, Table S9; spec 3.7 (K table, P_inj).

    """
    from twinfer.data._grid import pandapower_case  # pandapower loads in seconds: only when asked

    _, ppc = pandapower_case(case)
    s_base = float(np.real(ppc["baseMVA"])) * 1e6
    bus, gen = np.real(np.asarray(ppc["bus"])), np.real(np.asarray(ppc["gen"]))
    n_bus = bus.shape[0]
    gen = gen[gen[:, 7] > 0]  # in service
    gen_bus = gen[:, 0].astype(int)
    _, first = np.unique(gen_bus, return_index=True)
    gen_buses = tuple(int(b) for b in gen_bus[np.sort(first)])
    p_gen = np.array([gen[gen_bus == b, 1].sum() for b in gen_buses]) * 1e6
    slack = np.flatnonzero(bus[:, 1] == 3)
    if slack.size != 1 or int(slack[0]) not in gen_buses:
        raise ValueError(
            f"susceptance_case {case!r}: expected one reference bus (type 3) carrying a generator; "
            f"received reference buses {slack.tolist()} and generator buses {list(gen_buses)}."
        )
    s = gen_buses.index(int(slack[0]))
    load = bus[:, 2].sum() * 1e6
    p_gen[s] = load - (p_gen.sum() - p_gen[s])  # slack = total load - other generation
    p_inj = -bus[:, 2] * 1e6
    p_inj[list(gen_buses)] += p_gen
    return GridCase(
        K=_susceptance(n_bus, np.asarray(ppc["branch"])),
        P_inj=p_inj / s_base,
        gen_buses=gen_buses,
        P_gen=p_gen,
        S_base=s_base,
    )


# -- the operating point ---------------------------------------------------------------------------
class OperatingPoint(NamedTuple):
    """Result of :func:`kuramoto_operating_point`.

    Attributes:
        delta: bus angles (N,) [rad], the slack's 0.
        residual: max over the non-slack buses of ``|P_inj,i + sum_j K_ij sin(delta_j - delta_i)|``.
        slack_power: what the slack delivers, ``-sum_j K_sj sin(delta_j - delta_s)`` [p.u.].
        iterations: Newton steps taken.

    """

    delta: np.ndarray
    residual: float
    slack_power: float
    iterations: int


def _mismatch(K: np.ndarray, P_inj: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return P_inj + np.sum(K * np.sin(delta[None, :] - delta[:, None]), axis=1)


def kuramoto_operating_point(
    K: Any, P_inj: Any, slack: int = 0, tol: float = 1e-12, max_iter: int = 50
) -> OperatingPoint:
    """Angles solving ``P_inj,i + sum_j K_ij sin(delta_j - delta_i) = 0`` for every non-slack bus.

    Newton-Raphson on the non-slack angles with the slack's held at 0, from the DC warm start
    ``L delta = P_inj`` (``L`` the weighted Laplacian of ``K``, the linearised balance). The Jacobian is
    ``dF_i/d delta_j = K_ij cos(delta_j - delta_i)``, ``dF_i/d delta_i = -sum_j K_ij cos(delta_j - delta_i)``.
    The slack absorbs any imbalance ``sum_i P_inj,i`` (zero for a balanced lossless case).

    Args:
        K: coupling (N, N), zero diagonal.
        P_inj: net injections (N,) [p.u.], generation positive.
        slack: the reference bus (0-based).
        tol: stop when the largest non-slack mismatch is at most this.
        max_iter: Newton steps allowed.

    Returns:
        The :class:`OperatingPoint`.

    Raises:
        ValueError: for malformed ``K`` or ``P_inj``, a slack outside the buses, a network that falls
            apart (singular DC system), or no convergence (injections beyond what the lines can carry).

    References:
        compositional-inference paper, Table S9 and (S146); spec 3.7 "[REPO]" (NR from a DC warm
        start, tol 1e-12).

    """
    K = np.asarray(K, dtype=np.float64)
    P_inj = np.asarray(P_inj, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] < 2:
        raise ValueError(
            f"kuramoto_operating_point K: expected a square (N, N) array, N >= 2; received {K.shape}."
        )
    n = K.shape[0]
    if not np.all(np.isfinite(K)) or np.any(np.diag(K) != 0):
        raise ValueError(
            "kuramoto_operating_point K: expected finite couplings with a zero diagonal; received "
            f"diagonal {np.diag(K)}. Did you pass Im(Y_bus) itself rather than its off-diagonal part?"
        )
    if P_inj.shape != (n,) or not np.all(np.isfinite(P_inj)):
        raise ValueError(
            f"kuramoto_operating_point P_inj: expected {n} finite injections; received shape {P_inj.shape}."
        )
    if isinstance(slack, bool) or not isinstance(slack, int | np.integer) or not 0 <= slack < n:
        raise ValueError(f"kuramoto_operating_point slack: expected a bus in 0..{n - 1}; received {slack!r}.")
    if not tol > 0:
        raise ValueError(f"kuramoto_operating_point tol: expected a positive tolerance; received {tol!r}.")
    keep = np.flatnonzero(np.arange(n) != slack)
    laplacian = np.diag(K.sum(axis=1)) - K
    delta = np.zeros(n)
    try:
        delta[keep] = np.linalg.solve(laplacian[np.ix_(keep, keep)], P_inj[keep])  # DC warm start
    except np.linalg.LinAlgError:
        raise ValueError(
            "kuramoto_operating_point K: the DC system is singular; expected a connected network."
        ) from None
    residual = np.inf
    for iteration in range(max_iter + 1):
        mismatch = _mismatch(K, P_inj, delta)[keep]
        residual = float(np.max(np.abs(mismatch)))
        if residual <= tol:
            slack_power = float(P_inj[slack] - _mismatch(K, P_inj, delta)[slack])
            return OperatingPoint(delta, residual, slack_power, iteration)
        if not np.isfinite(residual) or iteration == max_iter:
            break
        weight = K * np.cos(delta[None, :] - delta[:, None])
        jacobian = weight - np.diag(weight.sum(axis=1))
        delta[keep] -= np.linalg.solve(jacobian[np.ix_(keep, keep)], mismatch)
    raise ValueError(
        f"kuramoto_operating_point: expected Newton-Raphson to reach tol {tol:g}; after {max_iter} "
        f"steps the largest mismatch is {residual:.3e} p.u. Are the injections within what the lines can "
        "carry, in per unit of S_base, with generation positive?"
    )


# -- interface laws --------------------------------------------------------------------------------
def identity_law(s_send: Any, s_recv: Any, gamma: Any) -> Any:
    """An interface law that passes the sender's interface variables on (a module's message as it is)."""
    return s_send


def line_law(s_send: Any, s_recv: Any, gamma: Any) -> Any:
    """One line's term ``gamma sin(delta_j - delta_i)`` on the receiver ``i`` from the sender ``j``.

    ``gamma = K_ij`` for a bus (its power, S146), ``-(S_base / omega_rated) K_ij`` for a generator (its
    torque, S147-S148): summed over a node's lines it is :func:`power_inflow` or :func:`grid_torque`.

    References:
        compositional-inference paper, SI (S146)-(S148).

    """
    return gamma * jnp.sin(s_send - s_recv)


def power_inflow(K_row: Any, delta_i: Any, delta_neighbours: Any) -> Any:
    """Power flowing into bus i from the network, ``P_e,i = sum_j K_ij sin(delta_j - delta_i)`` (S146).

    Args:
        K_row: couplings ``K_ij`` (..., D) to the neighbours (zero on padding).
        delta_i: the bus's angle (...,).
        delta_neighbours: the neighbours' angles (..., D), aligned with ``K_row``.

    Returns:
        ``P_e,i`` (...,) [p.u.].

    References:
        compositional-inference paper, SI (S146).

    """
    return jnp.sum(K_row * jnp.sin(delta_neighbours - jnp.asarray(delta_i)[..., None]), axis=-1)


def grid_torque(
    K_row: Any, delta_i: Any, delta_neighbours: Any, omega_rated: Any, S_base: Any = 100e6
) -> Any:
    """Electrical torque on generator i, ``T_e,i = (S_base / omega_rated,i) P_e,i^out`` (S147-S148).

    ``P_e,i^out = -sum_j K_ij sin(delta_j - delta_i)`` is the power the unit sends into the network, so
    ``T_e > 0`` for a generating unit (``xi = 1``; the spec's sign note on S148). It replaces the braking
    torque ``M_g`` of (S110) and enters the grid torsion form of :func:`~twinfer.models.runner_rhs`.

    Args:
        K_row: couplings ``K_ij`` (..., D) to the neighbours.
        delta_i: the generator's rotor angle ``phi1 - omega_rated t`` (...,) [rad].
        delta_neighbours: the neighbours' angles (..., D).
        omega_rated: the unit's rated speed (...,) [rad/s].
        S_base: base power [W].

    Returns:
        ``T_e,i`` (...,) [N m].

    References:
        compositional-inference paper, SI (S147)-(S148); spec 3.7 (sign note).

    """
    return -(S_base / omega_rated) * power_inflow(K_row, delta_i, delta_neighbours)


def bus_rate(P_inj: Any, K_row: Any, delta_b: Any, delta_neighbours: Any, D: Any = 2.0) -> Any:
    """First-order Kuramoto rate of a bus without a machine, ``(P_inj,b + P_e,b) / D_b`` (S146).

    Args:
        P_inj: the bus's injection (...,) [p.u.] (negative for a load).
        K_row: couplings (..., D).
        delta_b: the bus's angle (...,) [rad].
        delta_neighbours: the neighbours' angles (..., D).
        D: damping ``D_b`` (``D_kur = 2``, Table S12).

    Returns:
        ``d delta_b/dt`` (...,) [rad/s].

    References:
        compositional-inference paper, SI (S146), Table S12.

    """
    return (P_inj + power_inflow(K_row, delta_b, delta_neighbours)) / D


def coi_angle(delta_gen: Any, P_gen: Any) -> Any:
    """Centre-of-inertia angle ``delta_COI = sum_i w_i delta_i``, ``w_i = P_gen,i / sum P_gen`` (S150).

    Args:
        delta_gen: generator angles (..., n_gen) [rad].
        P_gen: their ratings (n_gen,) [W or p.u.].

    Returns:
        ``delta_COI`` (...,); report ``delta_i - delta_COI``.

    References:
        compositional-inference paper, SI (S150).

    """
    w = jnp.asarray(P_gen) / jnp.sum(jnp.asarray(P_gen))
    return jnp.sum(jnp.asarray(delta_gen) * w, axis=-1)


class LoadStep(NamedTuple):
    """Extra demand ``load`` [p.u.] at ``bus`` for ``t_on <= t < t_off`` (instantaneous steps).

    Section 3.7: ``LoadStep(bus=8, load=0.20, t_on=5.0, t_off=30.0)``, +20 MW at bus 9.
    """

    bus: int
    load: float
    t_on: float
    t_off: float


def load_step(t: Any, P_inj: Any, step: LoadStep | None) -> Any:
    """Injections at time ``t``: ``P_inj`` less ``step.load`` at ``step.bus`` for ``t_on <= t < t_off``.

    Instantaneous steps (spec 3.7, Disturbance); ``step = None`` leaves ``P_inj`` unchanged.
    """
    P_inj = jnp.asarray(P_inj)
    if step is None:
        return P_inj
    on = (t >= step.t_on) & (t < step.t_off)
    return P_inj.at[step.bus].add(jnp.where(on, -step.load, 0.0))


# -- one embedded unit -----------------------------------------------------------------------------
def turbine_unit_rhs(p: PeltonParams, x: Any, T_e: Any, t: Any) -> Any:
    """Time derivative of one grid-embedded turbine block (:data:`UNIT_STATE_NAMES`, 19 states).

    The standalone composition (:class:`~twinfer.models.PeltonTurbine`) with the braking torque replaced
    by the grid torque ``T_e`` (S148) and ``phi1`` by ``delta = phi1 - omega_rated t`` (S149):
    ``d delta/dt = omega - omega_rated``, and ``phi1 = delta + omega_rated t`` drives the unbalance,
    the runner forces and the torsion. The governor reference is :func:`governor_command` (zero, i.e.
    ``n_ref = 0``, for :meth:`PeltonParams.hierarchical` units); scaled coefficients are the truth's 1.

    Args:
        p: the unit's constants (``torsion_form="grid"`` for section 3.7).
        x: the block (19,).
        T_e: electrical torque [N m] (:func:`grid_torque`).
        t: time [s].

    Returns:
        ``dx/dt`` (19,).

    References:
        compositional-inference paper, SI (S93)-(S143), (S147)-(S149); spec 3.7 "[REPO]".

    """
    x_hyd, x_gov, x_rot = x[SLICES["M2"]], x[SLICES["M1"]], x[SLICES["M3"]]
    x_gen, x_run = x[SLICES["M4"]], x[SLICES["M5"]]
    h, q = x_hyd[2], x_hyd[3]
    n, omega, delta = x_rot[0], x_rot[1], x_rot[2]
    phi1 = delta + p.omega_rated * t  # eq. (S149)
    m_t = turbine_torque(p, n, q, h)
    d_rot = rotational_rhs(p, jnp.stack([n, omega, phi1]), m_t, T_e)  # M_g -> T_e, eq. (S148)
    d_gov = governor_rhs(p, x_gov, n, d_rot[0], governor_command(p, t))
    d_hyd = hydraulics_rhs(p, x_hyd, x_gov[0])
    d_gen = generator_rhs(p, x_gen, x_run[0], x_run[1], omega, phi1)
    d_run = runner_rhs(p, x_run, x_gen[0], x_gen[1], d_gen[2], d_gen[3], omega, phi1, q, h, m_t, T_e, t)
    d_rot = d_rot.at[2].set(omega - p.omega_rated)  # eq. (S149)
    return jnp.concatenate([d_hyd, d_gov, d_rot, d_gen, d_run])


def _stack(units: tuple[PeltonParams, ...]) -> PeltonParams:
    return jax.tree.map(lambda *leaves: jnp.stack([jnp.asarray(v) for v in leaves]), *units)


# -- the coupled model -----------------------------------------------------------------------------
class TurbineGrid(AbstractModel):
    """A Kuramoto network whose generator buses are full turbines: the monolithic truth of section 3.7.

    State layout (``n_gen * 19 + (N - n_gen)``; 63 for case9): one 19-state block per generator, in
    ``gen_buses`` order, each :data:`UNIT_STATE_NAMES` (``x1, x2, h, q, x_n, x_int, n, omega, delta,
    x_G, y_G, vx_G, vy_G, x_R, y_R, vx_R, vy_R, alpha, beta``) with ``delta = phi1 - omega_rated t``
    (S149); then the angles of the other buses in bus order. Names carry the 1-based bus number:
    ``omega_2``, ``delta_1`` ... ``delta_9`` (every bus angle is a ``delta_<bus>``).

    Dynamics: :func:`turbine_unit_rhs` per generator with ``T_e`` from :func:`grid_torque`; the other
    buses :func:`bus_rate` with the injections of :meth:`injection` (the load step applied). No inputs:
    time enters through the disturbance and the turbines' excitation. Outputs: ``x_G, y_G, x_R, y_R, q,
    omega`` of each generator (:data:`UNIT_OUTPUT_NAMES`, names ``x_G_1``, ...).

    ``params = {"P_inj": (N,), "D": (N - n_gen,)}``: the injections [p.u.] (the generator buses'
    entries are unused by the dynamics: their power follows from the turbines) and the buses' damping.
    The operating point :attr:`operating_point` is solved once at construction from the given
    ``P_inj`` (:func:`kuramoto_operating_point`).

    Args:
        K: coupling ``Im(Y_ij)`` (N, N), symmetric, zero diagonal.
        P_inj: injections (N,) [p.u.].
        gen_buses: the generator buses (0-based), one per unit.
        units: the turbines' constants, one :class:`PeltonParams` per generator bus.
        D: damping of the other buses, scalar or (N - n_gen,) (``D_kur = 2``).
        S_base: base power [W].
        slack: the reference bus of the operating point (default ``gen_buses[0]``).
        disturbance: a :class:`LoadStep` at a bus without a machine, or ``None``.
        unit_time_scale: factor on every turbine state's rate, > 0 (1: the physics). 2 reproduces the
            authors' code, whose "Jacobi iteration" re-integrates each of its K = 2 iterations from the
            previous iterate, so that the turbines advance 2 dt per step of the grid (spec section 7
            item 20); Table S11's peak speed dips come from that run.

    Raises:
        ValueError: naming the argument that is malformed (shape, symmetry, bus outside the network or
            repeated, a step at a generator bus, ``t_on > t_off``, non-positive ``D``, ``S_base`` or
            ``unit_time_scale``,
            units of mixed torsion forms) or an operating point that cannot be found.

    References:
        compositional-inference paper, SI (S144)-(S150), Tables S9-S12; spec 3.7.

    """

    K: Any
    units: tuple[PeltonParams, ...]
    gen_buses: tuple[int, ...] = eqx.field(static=True)
    other_buses: tuple[int, ...] = eqx.field(static=True)
    S_base: float = eqx.field(static=True)
    disturbance: LoadStep | None = eqx.field(static=True)
    unit_time_scale: float = eqx.field(static=True)
    operating_point: OperatingPoint
    params: Params

    def __init__(
        self,
        K: Any,
        P_inj: Any,
        gen_buses: Any,
        units: Any,
        D: Any = 2.0,
        S_base: float = 100e6,
        slack: int | None = None,
        disturbance: LoadStep | None = None,
        unit_time_scale: float = 1.0,
    ):
        K = np.asarray(K, dtype=np.float64)
        if (
            K.ndim != 2
            or K.shape[0] != K.shape[1]
            or not np.allclose(K, K.T, rtol=0, atol=1e-12 * abs(K).max())
        ):
            raise ValueError(
                f"TurbineGrid K: expected a symmetric (N, N) coupling; received shape {K.shape}. A phase "
                "shifter makes Im(Y) asymmetric and the lossless balance fails."
            )
        n = K.shape[0]
        gens = tuple(int(b) for b in np.atleast_1d(np.asarray(gen_buses)))
        if not gens or len(set(gens)) != len(gens) or min(gens) < 0 or max(gens) >= n:
            raise ValueError(
                f"TurbineGrid gen_buses: expected distinct buses in 0..{n - 1}; received {list(gens)}."
            )
        units = tuple(units)
        if len(units) != len(gens) or not all(isinstance(u, PeltonParams) for u in units):
            raise ValueError(
                f"TurbineGrid units: expected {len(gens)} PeltonParams, one per generator bus; received "
                f"{[type(u).__name__ for u in units]}."
            )
        forms = {u.torsion_form for u in units}
        if len(forms) != 1:
            raise ValueError(
                f"TurbineGrid units: expected one torsion_form for all; received {sorted(forms)}."
            )
        if not (S_base > 0 and np.isfinite(S_base)):
            raise ValueError(f"TurbineGrid S_base: expected a positive base power in W; received {S_base!r}.")
        others = tuple(b for b in range(n) if b not in gens)
        if disturbance is not None:
            step = LoadStep(*disturbance)
            if not (isinstance(step.bus, int | np.integer) and step.bus in others):
                raise ValueError(
                    f"TurbineGrid disturbance bus: expected a bus without a machine, one of {list(others)}; "
                    f"received {step.bus!r}. A generator bus's injection is its turbine's output."
                )
            if not (np.isfinite(step.load) and step.t_on <= step.t_off):
                raise ValueError(
                    f"TurbineGrid disturbance: expected a finite load and t_on <= t_off; received {step}."
                )
            disturbance = LoadStep(int(step.bus), float(step.load), float(step.t_on), float(step.t_off))
        if not (np.isfinite(unit_time_scale) and unit_time_scale > 0):
            raise ValueError(
                f"TurbineGrid unit_time_scale: expected a positive finite factor (1: the physics); "
                f"received {unit_time_scale!r}."
            )
        self.unit_time_scale = float(unit_time_scale)
        self.K = jnp.asarray(K)
        self.units = units
        self.gen_buses = gens
        self.other_buses = others
        self.S_base = float(S_base)
        self.disturbance = disturbance
        if np.ndim(D) not in (0, 1) or np.size(D) not in (1, len(others)):
            raise ValueError(
                f"TurbineGrid D: expected a scalar or {len(others)} dampings; received shape {np.shape(D)}."
            )
        params = {
            "P_inj": jnp.asarray(P_inj, jnp.float64),
            "D": jnp.broadcast_to(jnp.asarray(D, jnp.float64), (len(others),)),
        }
        self.check_params(params)
        self.params = params
        self.operating_point = kuramoto_operating_point(
            K, np.asarray(params["P_inj"]), gens[0] if slack is None else slack
        )

    @classmethod
    def ieee9(cls, **overrides: Any) -> TurbineGrid:
        """The section-3.7 system: case9 with 67, 163 and 85 MW units and the +20 MW step at bus 9.

        ``K = Im(Y)`` and ``P_inj`` from :func:`susceptance_case`, one :meth:`PeltonParams.hierarchical`
        unit per generator bus, ``D = 2``, ``S_base = 100 MVA``,
        ``disturbance = LoadStep(bus=8, load=0.20, t_on=5.0, t_off=30.0)``.

        Args:
            **overrides: any constructor argument to set differently (``disturbance=None`` for the
                undisturbed network).

        References:
            compositional-inference paper, Tables S9 and S12; spec 3.7.

        """
        case = susceptance_case("ieee9")
        kwargs: dict[str, Any] = dict(
            K=case.K,
            P_inj=case.P_inj,
            gen_buses=case.gen_buses,
            units=tuple(PeltonParams.hierarchical(float(p)) for p in case.P_gen),
            D=2.0,
            S_base=case.S_base,
            disturbance=LoadStep(bus=8, load=0.20, t_on=5.0, t_off=30.0),
        )
        kwargs.update(overrides)
        return cls(**kwargs)

    def check_params(self, params: Params) -> None:
        """``P_inj`` (N,) finite and ``D`` (N - n_gen,) finite and positive.

        Raises:
            ValueError: naming the parameter, the expected shape or range and what was received.

        """
        n, m = self.K.shape[0], len(self.other_buses)
        for name, shape in (("P_inj", (n,)), ("D", (m,))):
            if name not in params:
                raise ValueError(f"TurbineGrid params: expected keys ('P_inj', 'D'); missing {name!r}.")
            value = np.asarray(params[name], dtype=np.float64)
            if value.shape != shape or not np.all(np.isfinite(value)):
                raise ValueError(
                    f"TurbineGrid {name}: expected {shape[0]} finite values; received {value!r}."
                )
        if np.any(np.asarray(params["D"]) <= 0):
            raise ValueError(
                f"TurbineGrid D: expected positive dampings; received {np.asarray(params['D'])}."
            )

    # -- names and layout ------------------------------------------------------------------------
    @property
    def n_gen(self) -> int:
        return len(self.gen_buses)

    @property
    def state_names(self) -> tuple[str, ...]:
        units = tuple(f"{s}_{b + 1}" for b in self.gen_buses for s in UNIT_STATE_NAMES)
        return units + tuple(f"delta_{b + 1}" for b in self.other_buses)

    @property
    def input_names(self) -> tuple[str, ...]:
        return ()

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f"{s}_{b + 1}" for b in self.gen_buses for s in UNIT_OUTPUT_NAMES)

    @property
    def P_gen(self) -> Any:
        """The units' ratings ``P_rated,i`` (n_gen,) [W], the COI weights of (S150)."""
        return jnp.stack([jnp.asarray(u.P_rated) for u in self.units])

    @property
    def omega_rated(self) -> Any:
        """The units' rated speeds (n_gen,) [rad/s]."""
        return jnp.stack([jnp.asarray(u.omega_rated) for u in self.units])

    def unit_states(self, x: State) -> Any:
        """The turbine blocks (n_gen, 19) of a state."""
        return x[: self.n_gen * N_UNIT].reshape(self.n_gen, N_UNIT)

    def bus_angles(self, x: State) -> Any:
        """Every bus's angle (N,) in bus order: the units' ``delta`` and the other buses' angles."""
        delta = jnp.zeros(self.K.shape[0], dtype=x.dtype)
        delta = delta.at[np.asarray(self.gen_buses)].set(self.unit_states(x)[:, _DELTA])
        return delta.at[np.asarray(self.other_buses, dtype=int)].set(x[self.n_gen * N_UNIT :])

    def injection(self, t: Any, params: Params | None = None) -> Any:
        """``P_inj`` at time ``t`` with the disturbance applied (:func:`load_step`)."""
        params = self.params if params is None else params
        return load_step(t, params["P_inj"], self.disturbance)

    def electrical_torque(self, x: State) -> Any:
        """``T_e,i`` (n_gen,) [N m] at state ``x`` (:func:`grid_torque`)."""
        return self.electrical_torque_at(self.bus_angles(x))

    def electrical_torque_at(self, delta: Any) -> Any:
        """``T_e,i`` (n_gen,) [N m] at the bus angles ``delta`` (N,) in bus order (S147-S148)."""
        gens = np.asarray(self.gen_buses)
        return grid_torque(self.K[gens], delta[gens], delta, self.omega_rated, self.S_base)

    # -- dynamics --------------------------------------------------------------------------------
    def initial_state(self) -> State:
        """The operating point of Table S12 with the "[REPO]" details.

        Per unit ``x_n = x_n0 = 0.8``, ``x_int = x_n0 / k_i`` (the PID output is 0.8 at t = 0), ``q = 1``,
        ``omega = omega_rated``, ``delta = delta*_i``, ``x_G = y_G = x_R = y_R = 1e-5`` m, all else 0;
        the other buses at ``delta*`` (:attr:`operating_point`).
        """
        delta_star = jnp.asarray(self.operating_point.delta)
        blocks = []
        for b, p in zip(self.gen_buses, self.units, strict=True):
            x = jnp.zeros(N_UNIT)
            for name, value in (
                ("q", 1.0),
                ("x_n", p.x_n0),
                ("x_int", p.x_n0 / p.k_i),
                ("omega", p.omega_rated),
                ("delta", delta_star[b]),
                ("x_G", 1e-5),
                ("y_G", 1e-5),
                ("x_R", 1e-5),
                ("y_R", 1e-5),
            ):
                x = x.at[UNIT_STATE_NAMES.index(name)].set(value)
            blocks.append(x)
        return jnp.concatenate([*blocks, delta_star[np.asarray(self.other_buses, dtype=int)]])

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        delta = self.bus_angles(x)
        gens, others = np.asarray(self.gen_buses), np.asarray(self.other_buses, dtype=int)
        t_e = grid_torque(self.K[gens], delta[gens], delta, self.omega_rated, self.S_base)  # eq. (S148)
        d_units = jax.vmap(turbine_unit_rhs, in_axes=(0, 0, 0, None))(
            _stack(self.units), self.unit_states(x), t_e, t
        )
        p_inj = self.injection(t, params)
        d_buses = bus_rate(p_inj[others], self.K[others], delta[others], delta, params["D"])  # eq. (S146)
        return jnp.concatenate([self.unit_time_scale * d_units.reshape(-1), d_buses])

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        return self.unit_states(x)[:, _UNIT_OUTPUT_INDEX].reshape(-1)


# -- Table S10 -------------------------------------------------------------------------------------
class TorqueBalance(NamedTuple):
    """Turbine against electrical torque per generator (Table S10).

    Attributes:
        M_t: turbine torques (n_gen,) [N m] (S109).
        T_e: electrical torques (n_gen,) [N m] (S148).
        residual: ``|M_t - T_e|`` (n_gen,) [N m].

    """

    M_t: np.ndarray
    T_e: np.ndarray
    residual: np.ndarray

    @property
    def relative(self) -> np.ndarray:
        """``|M_t - T_e| / |T_e|`` (n_gen,)."""
        return self.residual / np.abs(self.T_e)


def torque_balance(model: TurbineGrid, x: Any = None) -> TorqueBalance:
    """``M_t`` against ``T_e`` for each generator at state ``x`` (default the operating point).

    At the operating point ``M_t = M_gB,i = P_gen,i / omega_rated`` (``n = 0``, ``q = 1``, ``h = 0``) and
    ``T_e,i = S_base P_inj,i / omega_rated`` (the network balance), 1.7061, 4.1508 and 2.1645 MN m for
    case9. The paper's residuals (2.33e-16, 9.31e-16, 4.66e-16) are one unit in the last place of each
    torque written in MN m.

    Args:
        model: the coupled system.
        x: a state (default :meth:`TurbineGrid.initial_state`).

    Returns:
        The :class:`TorqueBalance`.

    References:
        compositional-inference paper, Table S10, SI (S109), (S148).

    """
    x = model.initial_state() if x is None else jnp.asarray(x)
    blocks = model.unit_states(x)
    h_i, q_i, n_i = (UNIT_STATE_NAMES.index(s) for s in ("h", "q", "n"))
    m_t = np.array(
        [float(turbine_torque(p, b[n_i], b[q_i], b[h_i])) for p, b in zip(model.units, blocks, strict=True)]
    )
    t_e = np.asarray(model.electrical_torque(x))
    return TorqueBalance(M_t=m_t, T_e=t_e, residual=np.abs(m_t - t_e))
