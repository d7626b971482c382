"""Pelton hydro turbine-generator: the 19-state multi-physics unit and its five subsystem modules.

A Pelton unit split into five physical subsystems (specs/compositional-inference.md 3.6, SI (S93)-(S143)):

* M1 governor: PID on the speed deviation driving the needle servo, state ``[x_n, x_int]``
  (:func:`governor_rhs`, S94-S99);
* M2 hydraulics: third-order elastic penstock and first-order nozzle flow, state ``[x1, x2, h, q]``
  (:func:`hydraulics_rhs`, :func:`nozzle_flow`, S100-S105);
* M3 rotation: the rigid-body speed with the linearised turbine torque and the generator's braking
  torque, state ``[n, omega, phi1]`` (:func:`rotational_rhs`, :func:`turbine_torque`,
  :func:`generator_torque`, S108-S117);
* M4 generator lateral vibration with the stator rub, state ``[x_G, y_G, vx_G, vy_G]``
  (:func:`generator_rhs`, :func:`rub_force`, S118-S127);
* M5 runner lateral vibration and shaft torsion, state ``[x_R, y_R, vx_R, vy_R, alpha, beta]``
  (:func:`runner_rhs`, S128-S143).

Each module function takes the coupling variables it receives from the others as explicit arguments
(the messages of Table S6), so a partitioned estimator calls exactly the functions that
:class:`PeltonTurbine`, the monolithic truth model, composes. All functions are pure ``jax.numpy``,
safe under ``jit`` and ``grad`` (the clipping, flooring and rub switch use ``where``/``maximum`` with
finite derivatives).

The constants of Table S7 and the derived quantities the paper omits (the authors' formulas, spec 3.6
"[REPO]") live in :class:`PeltonParams`; its defaults are the standalone unit of section 3.6, and
:meth:`PeltonParams.hierarchical` gives the grid-embedded unit of section 3.7 (another rating, faster
servo, extra runner forces), so one set of functions serves both.

References:
    compositional-inference paper, SI (S93)-(S143), Tables S5-S7, and section S3.7 (hierarchical
    variant); hydraulics and governor after Xu et al. (2017), shafting after Shi et al. (2022), as cited
    there.

"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from twinfer.models._base import AbstractModel, Input, Output, Params, State

__all__ = [
    "PeltonParams",
    "PeltonTurbine",
    "generator_acceleration",
    "generator_matrix",
    "generator_rhs",
    "generator_torque",
    "governor_command",
    "governor_rhs",
    "hydraulics_rhs",
    "nozzle_area",
    "nozzle_flow",
    "rotational_rhs",
    "rub_force",
    "runner_acceleration",
    "runner_rhs",
    "turbine_torque",
]

TORSION_FORMS = ("S137", "grid")
"""Torsion right-hand sides: the paper's (S137)-(S140), or the authors' grid-embedded form (spec 3.7)."""

_POSITIVE = (
    "n_rated Q_rated H_rated eta Z_n T_e T_q y_r s_e alpha_n_deg beta_n_deg T_y m1 m2 J1 J2 d_H "
    "l_shaft a b c E G delta0 rho g x_n0"
).split()
_NON_NEGATIVE = (
    "k_p k_i k_d d_B h_shaft phi_m k_gen k_run k_cross c_gen c_run c_cross c_t D_omega e1 e2 delta2 "
    "k_r f_fric K_seal0 D_seal tau_seal A_vortex f_vortex_ratio f_s k_hyd_load k_bld_load "
    "torque_reaction dc_radial anti_windup"
).split()


class PeltonParams(eqx.Module):
    """Physical constants of one Pelton unit (Table S7) and the quantities derived from them.

    Field names follow Table S7 (SI units; angles of the nozzle in degrees). The shaft lengths ``a``,
    ``b``, ``c`` are the generator-bearing overhang, the bearing span and the runner overhang of the
    shafting model. ``delta2`` (the runner clearance) is carried for completeness; no equation uses it.

    Beyond Table S7: ``e_h`` (head torque coefficient, not given in the paper; 1.5 in the authors' code),
    ``rho`` and ``g``, the governor command ``A_s sin(2 pi f_s t)`` and the rated needle stroke
    ``x_n0 = 0.8`` at which the nozzle passes the rated flow. The section-3.7 extras default to the
    standalone unit: ``k_hyd_load`` and ``k_bld_load`` (load-dependent hydraulic and blade forcing),
    ``torque_reaction`` (0.12 in the grid case), ``dc_radial`` (0/1 switch of the DC radial force),
    ``anti_windup`` (0/1 switch of the governor's integrator clamp) and ``torsion_form`` (``"S137"`` or
    ``"grid"``, see :func:`runner_rhs`).

    Derived quantities are read-only properties computed from the fields, so a copy with another field
    value (``dataclasses.replace``) stays consistent.

    Raises:
        ValueError: at construction, naming a field that is not finite, a physical constant that is not
            positive (masses, inertias, lengths, moduli, time constants) or a coefficient that is
            negative (stiffnesses, dampings, gains, amplitudes, switches), or an unknown
            ``torsion_form``.

    References:
        compositional-inference paper, Table S7; spec 3.6 "[REPO]" (derived formulas, ``e_h``, ``rho``,
        ``g``) and 3.7 (hierarchical extras).

    """

    # machine
    n_rated: float = 375.0
    Q_rated: float = 27.0
    H_rated: float = 595.0
    eta: float = 0.92
    Z_n: float = 6.0
    # hydraulics
    T_e: float = 0.5155
    T_q: float = 0.5
    h0: float = 1.0
    y_r: float = 0.9
    s_e: float = 0.102
    alpha_n_deg: float = 45.0
    beta_n_deg: float = 62.0
    x_n0: float = 0.8
    rho: float = 1000.0
    g: float = 9.81
    # governor
    k_p: float = 5.0
    k_i: float = 2.12
    k_d: float = 10.0
    T_y: float = 0.04
    A_s: float = 0.1
    f_s: float = 0.2
    anti_windup: float = 0.0
    # masses and inertias
    m1: float = 6e5
    m2: float = 3e5
    J1: float = 6.8e6
    J2: float = 3.4e6
    # shaft
    d_H: float = 1.15
    d_B: float = 0.3
    l_shaft: float = 10.3
    h_shaft: float = 11.995
    a: float = 1.5
    b: float = 7.3
    c: float = 1.5
    E: float = 200e9
    G: float = 80e9
    phi_m: float = 0.01
    # bearings and damping
    k_gen: float = 2e9
    k_run: float = 8e9
    k_cross: float = 2e7
    c_gen: float = 1e6
    c_run: float = 1e6
    c_cross: float = 2e4
    c_t: float = 1e3
    D_omega: float = 1e5
    # clearances and rub
    e1: float = 0.5e-3
    e2: float = 0.5e-3
    delta0: float = 4e-3
    delta2: float = 3.5e-3
    k_r: float = 6e9
    f_fric: float = 0.02
    # seal
    K_seal0: float = 3e7
    D_seal: float = 1e5
    tau_seal: float = 0.3
    # torque coefficients
    e_x0: float = 1.0
    e_y0: float = 0.5
    e_h: float = 1.5
    # excitation
    A_vortex: float = 2e4
    f_vortex_ratio: float = 0.25
    # hierarchical-variant extras (spec 3.7), zero for the standalone unit
    k_hyd_load: float = 0.0
    k_bld_load: float = 0.0
    torque_reaction: float = 0.0
    dc_radial: float = 0.0
    torsion_form: str = eqx.field(static=True, default="S137")

    def __check_init__(self) -> None:
        if self.torsion_form not in TORSION_FORMS:
            raise ValueError(
                f"PeltonParams torsion_form: expected one of {TORSION_FORMS}; received {self.torsion_form!r}."
            )
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float | np.floating | np.integer):
                continue  # arrays or tracers substituted for estimation are not checked here
            if not math.isfinite(value):
                raise ValueError(f"PeltonParams {f.name}: expected a finite value; received {value!r}.")
            if f.name in _POSITIVE and value <= 0:
                raise ValueError(
                    f"PeltonParams {f.name}: expected a positive value; received {value!r}. "
                    "Masses, inertias, lengths, moduli and time constants must be > 0 (check the units)."
                )
            if f.name in _NON_NEGATIVE and value < 0:
                raise ValueError(
                    f"PeltonParams {f.name}: expected a value >= 0; received {value!r}. "
                    "Stiffnesses, dampings, gains, amplitudes and switches cannot be negative."
                )

    @classmethod
    def hierarchical(cls, P_gen: float, **overrides: Any) -> PeltonParams:
        """The grid-embedded unit of section 3.7, sized to deliver ``P_gen`` watts at the rated point.

        ``Q_rated = P_gen / (rho g H_rated eta)``, so ``P_rated = P_gen`` and the turbine torque at the
        operating point equals ``P_gen / omega_rated``. The other changes from Table S7 (spec 3.7,
        "[REPO]"): ``T_q = 0.05``, ``k_d = 0.5``, ``T_y = 0.01``, ``c_t = 1e5``, ``e_h = 1.5``; the
        governor reference is ``n_ref = 0`` (``A_s = 0``) with integrator anti-windup; the runner
        carries the load-dependent hydraulic (``k_hyd_load = 2e4``) and blade (``k_bld_load = 2.5e4``)
        forcing, the torque reaction (``0.12 |M_t| / 0.55``) and the DC radial force, and its torsion
        uses the authors' grid form (``torsion_form = "grid"``).

        Args:
            P_gen: the unit's generation at the operating point [W] (e.g. 67e6 for bus 1 of case9).
            **overrides: any field to set differently (``rho``, ``g``, ``H_rated``, ``eta`` enter
                ``Q_rated``).

        Returns:
            The parameters.

        Raises:
            ValueError: when ``P_gen`` is not positive and finite, or a field is invalid.

        References:
            compositional-inference paper, section S3.7 and Table S12; spec 3.7.

        """
        if not (isinstance(P_gen, int | float) and math.isfinite(P_gen) and P_gen > 0):
            raise ValueError(
                f"PeltonParams.hierarchical P_gen: expected a positive generation in watts; received "
                f"{P_gen!r}. Did you pass megawatts as a string or a per-unit value below zero?"
            )
        fields: dict[str, Any] = dict(
            T_q=0.05,
            k_d=0.5,
            T_y=0.01,
            c_t=1e5,
            e_h=1.5,
            A_s=0.0,
            anti_windup=1.0,
            k_hyd_load=2e4,
            k_bld_load=2.5e4,
            torque_reaction=0.12,
            dc_radial=1.0,
            torsion_form="grid",
        )
        fields.update(overrides)
        base = cls(**fields)
        q_rated = P_gen / (base.rho * base.g * base.H_rated * base.eta)
        return dataclasses.replace(base, Q_rated=q_rated)

    # -- derived quantities (spec 3.6 "[REPO]") --------------------------------------------------
    @property
    def omega_rated(self) -> Any:
        """Rated angular speed ``2 pi n_rated / 60`` [rad/s]."""
        return 2.0 * jnp.pi * self.n_rated / 60.0

    @property
    def P_rated(self) -> Any:
        """Rated power ``rho g Q_rated H_rated eta`` [W]."""
        return self.rho * self.g * self.Q_rated * self.H_rated * self.eta

    @property
    def M_gB(self) -> Any:
        """Base torque ``P_rated / omega_rated`` [N m]."""
        return self.P_rated / self.omega_rated

    @property
    def J_p(self) -> Any:
        """Polar second moment of the hollow shaft ``pi/32 (d_H^4 - d_B^4)`` [m^4]."""
        return jnp.pi / 32.0 * (self.d_H**4 - self.d_B**4)

    @property
    def k_y(self) -> Any:
        """Torsional stiffness ``G J_p / l_shaft`` [N m/rad]."""
        return self.G * self.J_p / self.l_shaft

    @property
    def J1_eff(self) -> Any:
        """Generator-side effective inertia ``J1 + 2 m1 e1^2`` [kg m^2]."""
        return self.J1 + 2.0 * self.m1 * self.e1**2

    @property
    def J2_eff(self) -> Any:
        """Runner-side effective inertia ``J2 + 2 m2 (e2 cos phi_m + h_shaft sin phi_m)^2`` [kg m^2]."""
        arm = self.e2 * jnp.cos(self.phi_m) + self.h_shaft * jnp.sin(self.phi_m)
        return self.J2 + 2.0 * self.m2 * arm**2

    @property
    def J_tot(self) -> Any:
        """Total inertia ``J1_eff + J2_eff`` [kg m^2] (S111)."""
        return self.J1_eff + self.J2_eff

    @property
    def J_eq(self) -> Any:
        """Reduced torsional inertia ``J1_eff J2_eff / J_tot`` [kg m^2] (S137)."""
        return self.J1_eff * self.J2_eff / self.J_tot

    @property
    def f_torsion(self) -> Any:
        """Undamped torsional natural frequency ``sqrt(k_y / J_eq) / (2 pi)`` [Hz]."""
        return jnp.sqrt(self.k_y / self.J_eq) / (2.0 * jnp.pi)

    @property
    def I_shaft(self) -> Any:
        """Bending second moment ``pi/64 (d_H^4 - d_B^4)`` [m^4]."""
        return jnp.pi / 64.0 * (self.d_H**4 - self.d_B**4)

    @property
    def k_sB(self) -> Any:
        """Shaft bending stiffness over the bearing span ``3 E I / b^3`` [N/m]."""
        return 3.0 * self.E * self.I_shaft / self.b**3

    @property
    def K11(self) -> Any:
        """Generator-end shaft stiffness ``4 k_sB (a^2 + b^2 + 3ab) / (3ab)`` [N/m] (S123)."""
        a, b = self.a, self.b
        return 4.0 * self.k_sB * (a**2 + b**2 + 3.0 * a * b) / (3.0 * a * b)

    @property
    def K22(self) -> Any:
        """Runner-end shaft stiffness ``4 k_sB (c^2 + b^2 + 3cb) / (3cb)`` [N/m] (S133)."""
        b, c = self.b, self.c
        return 4.0 * self.k_sB * (c**2 + b**2 + 3.0 * c * b) / (3.0 * c * b)

    @property
    def K12(self) -> Any:
        """Cross shaft stiffness ``-4 k_sB (a + b)(b + c) / (3ab)`` [N/m] (S123, S133)."""
        a, b, c = self.a, self.b, self.c
        return -4.0 * self.k_sB * (a + b) * (b + c) / (3.0 * a * b)

    @property
    def _nozzle_cos(self) -> Any:
        return jnp.cos(jnp.deg2rad(self.alpha_n_deg + self.beta_n_deg) / 4.0)

    @property
    def m01(self) -> Any:
        """Linear nozzle-area coefficient ``pi tan(alpha_n/2) 0.218 cos((alpha_n + beta_n)/4)``."""
        return jnp.pi * jnp.tan(jnp.deg2rad(self.alpha_n_deg) / 2.0) * 0.218 * self._nozzle_cos

    @property
    def m02(self) -> Any:
        """Quadratic nozzle-area coefficient ``pi tan^2(alpha_n/2) cos((alpha_n + beta_n)/4)``."""
        return jnp.pi * jnp.tan(jnp.deg2rad(self.alpha_n_deg) / 2.0) ** 2 * self._nozzle_cos

    @property
    def A_n0(self) -> Any:
        """Nozzle area at the rated stroke ``A_n(x_n0)`` [m^2]."""
        return nozzle_area(self, self.x_n0)

    @property
    def C_q(self) -> Any:
        """Flow normalisation ``1 / (A_n(x_n0) sqrt(2 g H_rated))``, so ``q* = 1`` at ``x_n0``, ``h = 0``."""
        return 1.0 / (self.A_n0 * jnp.sqrt(2.0 * self.g * self.H_rated))


# -- M1 governor -----------------------------------------------------------------------------------
def governor_command(p: PeltonParams, t: Any) -> Any:
    """Speed reference of the governor ``s_cmd(t) = A_s sin(2 pi f_s t)`` [p.u.] (spec 3.6, M1)."""
    return p.A_s * jnp.sin(2.0 * jnp.pi * p.f_s * t)


def governor_rhs(p: PeltonParams, x_gov: Any, n: Any, n_dot: Any, s_cmd: Any) -> Any:
    """Time derivative of the governor state ``[x_n, x_int]`` (S94-S99).

        e = s_cmd - n,   u = sat_[0,1](k_p e + k_i x_int - k_d n_dot),
        dx_int/dt = e,   dx_n/dt = (u - x_n) / T_y.

    With ``p.anti_windup = 1`` (the grid unit) the integrator holds while ``u_PID`` is saturated and the
    error drives it further into saturation.

    Args:
        p: the unit's constants.
        x_gov: ``[x_n, x_int]`` (2,).
        n: speed deviation [p.u.], from M3.
        n_dot: its rate ``dn/dt`` [p.u./s], from M3 (S112).
        s_cmd: speed reference [p.u.] (:func:`governor_command`).

    Returns:
        ``[dx_n/dt, dx_int/dt]`` (2,).

    References:
        compositional-inference paper, SI (S94)-(S99); spec 3.7 "[REPO]" (anti-windup).

    """
    x_n, x_int = x_gov[0], x_gov[1]
    e = s_cmd - n
    u_pid = p.k_p * e + p.k_i * x_int - p.k_d * n_dot
    u = jnp.clip(u_pid, 0.0, 1.0)  # eq. (S97)
    pushing = ((u_pid > 1.0) & (e > 0.0)) | ((u_pid < 0.0) & (e < 0.0))
    dx_int = jnp.where((p.anti_windup > 0) & pushing, 0.0, e)
    return jnp.stack([(u - x_n) / p.T_y, dx_int])


# -- M2 hydraulics ---------------------------------------------------------------------------------
def nozzle_area(p: PeltonParams, x_n: Any) -> Any:
    """Effective nozzle area ``max(m01 s_e (x_n+1) - m02 s_e^2 (x_n+1)^2, 1e-8)`` [m^2], x_n in [0, 1].

    References:
        compositional-inference paper, SI (S105); spec 3.6 "[REPO]" (area formula, clip and floor).

    """
    s = p.s_e * (jnp.clip(x_n, 0.0, 1.0) + 1.0)
    return jnp.maximum(p.m01 * s - p.m02 * s**2, 1e-8)


def nozzle_flow(p: PeltonParams, x_n: Any, h: Any) -> Any:
    """Quasi-steady nozzle flow ``q* = C_q A_n(x_n) sqrt(2 g H_rated max(1 + h, 0.1))`` [p.u.] (S105).

    The floor at ``1 + h = 0.1`` keeps the square root (and its derivative) finite; S105 requires
    ``1 + h > 0``.
    """
    return p.C_q * nozzle_area(p, x_n) * jnp.sqrt(2.0 * p.g * p.H_rated * jnp.maximum(1.0 + h, 0.1))


def hydraulics_rhs(p: PeltonParams, x_hyd: Any, x_n: Any) -> Any:
    """Time derivative of the hydraulic state ``[x1, x2, h, q]`` (S100-S105).

        dx1/dt = x2,   dx2/dt = h,
        dh/dt  = -(pi^2 / T_e^2) x2 + (h0 - h / y_r^2 - q^2) / (Z_n T_e^3),
        dq/dt  = (q*(x_n, h) - q) / T_q.

    Args:
        p: the unit's constants.
        x_hyd: ``[x1, x2, h, q]`` (4,); ``h = x3`` is the normalised head deviation.
        x_n: needle stroke [p.u.], from M1.

    Returns:
        ``[dx1/dt, dx2/dt, dh/dt, dq/dt]`` (4,).

    References:
        compositional-inference paper, SI (S100)-(S105).

    """
    x2, h, q = x_hyd[1], x_hyd[2], x_hyd[3]
    dh = -(jnp.pi**2 / p.T_e**2) * x2 + (p.h0 - h / p.y_r**2 - q**2) / (p.Z_n * p.T_e**3)  # eq. (S103)
    dq = (nozzle_flow(p, x_n, h) - q) / p.T_q  # eq. (S104)
    return jnp.stack([x2, h, dh, dq])


# -- M3 rotation -----------------------------------------------------------------------------------
def turbine_torque(
    p: PeltonParams,
    n: Any,
    q: Any,
    h: Any,
    e_x_scaled: Any = 1.0,
    e_y_scaled: Any = 1.0,
    include_head: bool = True,
) -> Any:
    """Turbine torque ``M_t = M_gB [1 + e_x n + e_y (q - 1) + e_h h]`` [N m] (S109).

    Args:
        p: the unit's constants.
        n: speed deviation [p.u.].
        q: flow [p.u.], from M2.
        h: head deviation [p.u.], from M2.
        e_x_scaled: ``e_x / e_x0`` (1 for the truth).
        e_y_scaled: ``e_y / e_y0`` (1 for the truth).
        include_head: keep the ``e_h h`` term (the truth); ``False`` drops it, the authors' EKF form.

    Returns:
        ``M_t``.

    References:
        compositional-inference paper, SI (S109); spec 3.6 "[REPO]" (EKF omits ``e_h h``).

    """
    m_t = 1.0 + e_x_scaled * p.e_x0 * n + e_y_scaled * p.e_y0 * (q - 1.0)
    if include_head:
        m_t = m_t + p.e_h * h
    return p.M_gB * m_t


def generator_torque(p: PeltonParams, omega: Any) -> Any:
    """Generator braking torque ``M_g = M_gB omega / omega_rated`` [N m] (S110)."""
    return p.M_gB * omega / p.omega_rated


def rotational_rhs(p: PeltonParams, x_rot: Any, M_t: Any, M_g: Any) -> Any:
    """Time derivative of the rotational state ``[n, omega, phi1]`` (S110-S113).

        domega/dt = (M_t - M_g - D_omega (omega - omega_rated)) / J_tot,
        dn/dt = (domega/dt) / omega_rated,   dphi1/dt = omega.

    Args:
        p: the unit's constants.
        x_rot: ``[n, omega, phi1]`` (3,).
        M_t: turbine torque [N m] (:func:`turbine_torque`).
        M_g: braking torque [N m] (:func:`generator_torque`, or the grid's electrical torque).

    Returns:
        ``[dn/dt, domega/dt, dphi1/dt]`` (3,); the first entry is the ``n_dot`` message to M1.

    References:
        compositional-inference paper, SI (S110)-(S113).

    """
    omega = x_rot[1]
    domega = (M_t - M_g - p.D_omega * (omega - p.omega_rated)) / p.J_tot  # eq. (S111)
    return jnp.stack([domega / p.omega_rated, domega, omega])


# -- M4 generator lateral --------------------------------------------------------------------------
def rub_force(p: PeltonParams, x_G: Any, y_G: Any) -> tuple[Any, Any]:
    """Stator rub force on the generator rotor (S125); zero while ``r_G = |(x_G, y_G)| <= delta0``.

        F_rub = -((r_G - delta0) k_r / r_G) [x_G - f_fric y_G, f_fric x_G + y_G]   for r_G > delta0.

    The radius is evaluated only outside the clearance, so the derivative at ``r_G = 0`` is finite.

    Returns:
        ``(F_rub_x, F_rub_y)`` [N].

    References:
        compositional-inference paper, SI (S125).

    """
    r2 = x_G**2 + y_G**2
    inside = r2 <= p.delta0**2
    r = jnp.sqrt(jnp.where(inside, p.delta0**2, r2))
    gain = jnp.where(inside, 0.0, (r - p.delta0) * p.k_r / r)
    return -gain * (x_G - p.f_fric * y_G), -gain * (p.f_fric * x_G + y_G)


def generator_matrix(p: PeltonParams) -> Any:
    """The matrix ``A`` (4, 4) of the generator's linear part: ``d x_gen/dt = A x_gen + b`` off the rub.

    ``b = [0, 0, f_x, f_y] / m1`` collects the runner coupling ``-K12 (x_R, y_R)``, the unbalance
    ``m1 e1 omega^2 (cos phi1, sin phi1)`` and the rub force; inside the clearance the generator is the
    linear system a Kalman filter needs (spec 3.6, M4).

    References:
        compositional-inference paper, SI (S119)-(S124).

    """
    k, kc, c, cc = p.k_gen + p.K11, p.k_cross, p.c_gen, p.c_cross
    z = jnp.zeros(())
    one = jnp.ones(())
    rows = [
        [z, z, one, z],
        [z, z, z, one],
        [-k / p.m1 + z, -kc / p.m1 + z, -c / p.m1 + z, -cc / p.m1 + z],
        [kc / p.m1 + z, -k / p.m1 + z, cc / p.m1 + z, -c / p.m1 + z],
    ]
    return jnp.stack([jnp.stack(r) for r in rows])


def generator_acceleration(
    p: PeltonParams, x_gen: Any, x_R: Any, y_R: Any, omega: Any, phi1: Any
) -> tuple[Any, Any]:
    """Generator accelerations ``(x_G'', y_G'') = (F_x,G, F_y,G) / m1`` with the rub force (S121-S125).

        F_x,G = -(k_gen+K11) x_G - K12 x_R - k_cross y_G - c_gen vx_G - c_cross vy_G
                + m1 e1 omega^2 cos phi1 + F_rub,x,
        F_y,G = -(k_gen+K11) y_G - K12 y_R + k_cross x_G - c_gen vy_G + c_cross vx_G
                + m1 e1 omega^2 sin phi1 + F_rub,y.

    Args:
        p: the unit's constants.
        x_gen: ``[x_G, y_G, vx_G, vy_G]`` (4,).
        x_R: runner x displacement [m], from M5.
        y_R: runner y displacement [m], from M5.
        omega: angular speed [rad/s], from M3.
        phi1: rotor angle [rad], from M3.

    Returns:
        ``(x_G'', y_G'')`` [m/s^2], the acceleration message to M5 (S127).

    References:
        compositional-inference paper, SI (S121)-(S125).

    """
    x, y, vx, vy = x_gen[0], x_gen[1], x_gen[2], x_gen[3]
    k = p.k_gen + p.K11
    unbalance = p.m1 * p.e1 * omega**2
    rub_x, rub_y = rub_force(p, x, y)
    f_x = -k * x - p.K12 * x_R - p.k_cross * y - p.c_gen * vx - p.c_cross * vy
    f_y = -k * y - p.K12 * y_R + p.k_cross * x - p.c_gen * vy + p.c_cross * vx
    f_x = f_x + unbalance * jnp.cos(phi1) + rub_x  # eq. (S123)
    f_y = f_y + unbalance * jnp.sin(phi1) + rub_y  # eq. (S124)
    return f_x / p.m1, f_y / p.m1


def generator_rhs(p: PeltonParams, x_gen: Any, x_R: Any, y_R: Any, omega: Any, phi1: Any) -> Any:
    """Time derivative of the generator state ``[x_G, y_G, vx_G, vy_G]`` (S118-S125).

    Affine in ``x_gen`` (matrix :func:`generator_matrix`) except the rub force, which is zero inside the
    clearance. Arguments as :func:`generator_acceleration`.

    Returns:
        ``[vx_G, vy_G, x_G'', y_G'']`` (4,).

    References:
        compositional-inference paper, SI (S119)-(S125).

    """
    a_x, a_y = generator_acceleration(p, x_gen, x_R, y_R, omega, phi1)
    return jnp.stack([x_gen[2], x_gen[3], a_x, a_y])


# -- M5 runner lateral and torsion -----------------------------------------------------------------
def runner_acceleration(
    p: PeltonParams,
    x_run: Any,
    x_G: Any,
    y_G: Any,
    omega: Any,
    phi1: Any,
    q: Any,
    h: Any,
    M_t: Any,
    t: Any,
    K_seal_scaled: Any = 1.0,
) -> tuple[Any, Any]:
    """Runner accelerations ``(x_R'', y_R'') = (F_x,R, F_y,R) / m2`` (S130-S135).

        F_x,R = -(k_run+K22) x_R - K12 x_G - 0.8 k_cross y_R - K_seal x_R - tau_seal omega D_seal y_R
                - c_run vx_R + m2 e2 omega^2 cos phi2 + A_hyd sin(f_v t) + F_blade sin(Z_n omega t),
        F_y,R = -(k_run+K22) y_R - K12 y_G + 0.8 k_cross x_R + tau_seal omega D_seal x_R - K_seal y_R
                - c_run vy_R + m2 e2 omega^2 sin phi2 + A_hyd cos(f_v t) + F_blade cos(Z_n omega t),

    with ``phi2 = phi1 - alpha``, ``K_seal = K_seal_scaled K_seal0``, ``f_v = f_vortex_ratio omega`` (an
    angular rate multiplying ``t``, as printed), and, writing ``w = q sqrt(1 + h)``,
    ``A_hyd = A_vortex q + k_hyd_load w^2`` and ``F_blade = 0.1 A_vortex + k_bld_load w^2``. The grid
    unit (spec 3.7) adds ``torque_reaction |M_t| / 0.55 (cos phi2, sin phi2)`` and
    ``dc_radial (w - 1) M_gB / 0.55`` along x; with the standalone defaults these terms vanish. The
    square root is floored like the nozzle's, ``sqrt(max(1 + h, 0.1))``.

    Args:
        p: the unit's constants.
        x_run: ``[x_R, y_R, vx_R, vy_R, alpha, beta]`` (6,).
        x_G: generator x displacement [m], from M4.
        y_G: generator y displacement [m], from M4.
        omega: angular speed [rad/s], from M3.
        phi1: rotor angle [rad], from M3.
        q: flow [p.u.], from M2.
        h: head deviation [p.u.], from M2 (enters only the grid unit's load terms).
        M_t: turbine torque [N m], from M3 (enters only the grid unit's torque reaction).
        t: time [s] (excitation phases).
        K_seal_scaled: ``K_seal / K_seal0`` (1 for the truth).

    Returns:
        ``(x_R'', y_R'')`` [m/s^2].

    References:
        compositional-inference paper, SI (S130)-(S135); spec 3.7 "[REPO]" (grid-unit extras).

    """
    x, y, vx, vy, alpha = x_run[0], x_run[1], x_run[2], x_run[3], x_run[4]
    phi2 = phi1 - alpha  # eq. (S130)
    cos2, sin2 = jnp.cos(phi2), jnp.sin(phi2)
    k = p.k_run + p.K22
    k_seal = K_seal_scaled * p.K_seal0
    seal_cross = p.tau_seal * omega * p.D_seal
    w = q * jnp.sqrt(jnp.maximum(1.0 + h, 0.1))
    a_hyd = p.A_vortex * q + p.k_hyd_load * w**2
    f_blade = 0.1 * p.A_vortex + p.k_bld_load * w**2  # eq. (S135)
    vortex = p.f_vortex_ratio * omega * t
    blade = p.Z_n * omega * t
    unbalance = p.m2 * p.e2 * omega**2
    reaction = p.torque_reaction * jnp.abs(M_t) / 0.55
    f_x = -k * x - p.K12 * x_G - 0.8 * p.k_cross * y - k_seal * x - seal_cross * y - p.c_run * vx
    f_y = -k * y - p.K12 * y_G + 0.8 * p.k_cross * x + seal_cross * x - k_seal * y - p.c_run * vy
    f_x = f_x + unbalance * cos2 + a_hyd * jnp.sin(vortex) + f_blade * jnp.sin(blade)  # eq. (S133)
    f_y = f_y + unbalance * sin2 + a_hyd * jnp.cos(vortex) + f_blade * jnp.cos(blade)  # eq. (S134)
    f_x = f_x + reaction * cos2 + p.dc_radial * (w - 1.0) * p.M_gB / 0.55
    f_y = f_y + reaction * sin2
    return f_x / p.m2, f_y / p.m2


def runner_rhs(
    p: PeltonParams,
    x_run: Any,
    x_G: Any,
    y_G: Any,
    a_xG: Any,
    a_yG: Any,
    omega: Any,
    phi1: Any,
    q: Any,
    h: Any,
    M_t: Any,
    M_g: Any,
    t: Any,
    K_seal_scaled: Any = 1.0,
) -> Any:
    """Time derivative of the runner state ``[x_R, y_R, vx_R, vy_R, alpha, beta]`` (S128-S141).

    Lateral accelerations from :func:`runner_acceleration`; the torsion, with ``phi2 = phi1 - alpha``,
    ``tau_gen = -m1 e1 (y_G'' cos phi1 - x_G'' sin phi1) / J1_eff`` and
    ``tau_run = m2 e2 (y_R'' cos phi2 - x_R'' sin phi2) / J2_eff``, is for ``torsion_form = "S137"``

        dalpha/dt = beta,
        J_eq dbeta/dt = J_eq (tau_gen + tau_run - M_g / J1_eff - M_t / J2_eff) - c_t beta - k_y alpha,

    and for the authors' grid unit (``"grid"``, spec 3.7, with ``M_g`` the electrical torque)

        dbeta/dt = M_t / J1_eff + M_g / J2_eff - (k_y alpha + c_t beta) / J_eq + tau_gen - tau_run.

    Args:
        p: the unit's constants.
        x_run: ``[x_R, y_R, vx_R, vy_R, alpha, beta]`` (6,).
        x_G: generator x displacement [m], from M4.
        y_G: generator y displacement [m], from M4.
        a_xG: generator acceleration ``x_G''`` [m/s^2], from M4.
        a_yG: generator acceleration ``y_G''`` [m/s^2], from M4.
        omega: angular speed [rad/s], from M3.
        phi1: rotor angle [rad], from M3.
        q: flow [p.u.], from M2.
        h: head deviation [p.u.], from M2.
        M_t: turbine torque [N m], from M3.
        M_g: generator (or electrical) torque [N m], from M3.
        t: time [s].
        K_seal_scaled: ``K_seal / K_seal0``.

    Returns:
        ``[vx_R, vy_R, x_R'', y_R'', beta, dbeta/dt]`` (6,).

    References:
        compositional-inference paper, SI (S130)-(S141); spec 3.7 "[REPO]" (grid torsion form).

    """
    a_x, a_y = runner_acceleration(p, x_run, x_G, y_G, omega, phi1, q, h, M_t, t, K_seal_scaled)
    alpha, beta = x_run[4], x_run[5]
    phi2 = phi1 - alpha
    tau_gen = -p.m1 * p.e1 * (a_yG * jnp.cos(phi1) - a_xG * jnp.sin(phi1)) / p.J1_eff  # eq. (S139)
    tau_run = p.m2 * p.e2 * (a_y * jnp.cos(phi2) - a_x * jnp.sin(phi2)) / p.J2_eff  # eq. (S140)
    restoring = (p.k_y * alpha + p.c_t * beta) / p.J_eq
    if p.torsion_form == "grid":
        dbeta = M_t / p.J1_eff + M_g / p.J2_eff - restoring + tau_gen - tau_run
    else:
        dbeta = tau_gen + tau_run - M_g / p.J1_eff - M_t / p.J2_eff - restoring  # eq. (S137)-(S138)
    return jnp.stack([x_run[2], x_run[3], a_x, a_y, beta, dbeta])


# -- the monolithic unit ---------------------------------------------------------------------------
STATE_NAMES: tuple[str, ...] = tuple(
    "x1 x2 h q x_n x_int n omega phi1 x_G y_G vx_G vy_G x_R y_R vx_R vy_R alpha beta".split()
)
"""State order of Table S5 (S93): M2 ``[x1, x2, h, q]``, M1 ``[x_n, x_int]``, M3 ``[n, omega, phi1]``,
M4 ``[x_G, y_G, vx_G, vy_G]``, M5 ``[x_R, y_R, vx_R, vy_R, alpha, beta]``."""

SLICES = {"M2": slice(0, 4), "M1": slice(4, 6), "M3": slice(6, 9), "M4": slice(9, 13), "M5": slice(13, 19)}
"""Each module's block of the 19-state vector."""

OUTPUT_NAMES = ("omega", "q", "x_G", "y_G", "x_R", "y_R")
"""The measured channels: speed (S116), flow, generator (S126) and runner (S142) displacements."""

_OUTPUT_INDEX = tuple(STATE_NAMES.index(name) for name in OUTPUT_NAMES)
_PARAMS = ("e_x", "e_y", "K_seal")


class PeltonTurbine(AbstractModel):
    """The 19-state Pelton turbine-generator, the standalone truth of section 3.6.

    States (Table S5 order, :data:`STATE_NAMES`): penstock wave states ``x1, x2``, head deviation ``h``
    [p.u.], flow ``q`` [p.u.], needle stroke ``x_n`` [p.u.], governor integrator ``x_int``, speed
    deviation ``n`` [p.u.], angular speed ``omega`` [rad/s], rotor angle ``phi1`` [rad], generator and
    runner displacements and velocities ``x_G, y_G, vx_G, vy_G, x_R, y_R, vx_R, vy_R`` [m, m/s], shaft
    twist ``alpha`` [rad] and its rate ``beta`` [rad/s]. No inputs: time enters through the governor
    command and the runner excitation. Outputs ``[omega, q, x_G, y_G, x_R, y_R]`` (the measured
    channels, S116, S126, S142 and the flow meter).

    ``params = {"e_x": ..., "e_y": ..., "K_seal": ...}`` are the scaled coefficients the filters
    estimate (``e_x / e_x0``, ``e_y / e_y0``, ``K_seal / K_seal0``; 1 for the truth); every other
    constant is in the :class:`PeltonParams` field ``pelton``.

    :meth:`vector_field` is the composition of the module functions with the messages of Table S6: M3's
    ``dn/dt`` goes to the governor, M4's accelerations to the runner torsion.

    Args:
        pelton: the unit's constants (default: Table S7).
        e_x: scaled speed torque coefficient.
        e_y: scaled flow torque coefficient.
        K_seal: scaled seal stiffness.

    Raises:
        ValueError: naming a scaled coefficient that is negative or not finite, or when ``pelton`` is
            not a :class:`PeltonParams`.

    References:
        compositional-inference paper, SI (S93)-(S143), Table S5.

    """

    params: Params
    pelton: PeltonParams

    def __init__(
        self, pelton: PeltonParams | None = None, e_x: float = 1.0, e_y: float = 1.0, K_seal: float = 1.0
    ):
        if pelton is not None and not isinstance(pelton, PeltonParams):
            raise ValueError(
                f"PeltonTurbine pelton: expected a PeltonParams; received {type(pelton).__name__}. "
                "The scaled coefficients go in e_x, e_y, K_seal; every other constant in PeltonParams."
            )
        self.pelton = PeltonParams() if pelton is None else pelton
        params = {"e_x": e_x, "e_y": e_y, "K_seal": K_seal}
        self.check_params(params)
        self.params = {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}

    def check_params(self, params: Params) -> None:
        """The scaled coefficients ``e_x``, ``e_y``, ``K_seal``: finite and >= 0.

        Raises:
            ValueError: naming the coefficient, what is allowed and the value received.

        """
        missing = set(_PARAMS) - set(params)
        if missing:
            raise ValueError(f"PeltonTurbine params: expected keys {_PARAMS}; missing {sorted(missing)}.")
        for name in _PARAMS:
            value = float(np.asarray(params[name], dtype=np.float64))
            if not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"PeltonTurbine {name}: expected a finite scaled coefficient >= 0 (1 is the truth); "
                    f"received {value!r}. The scaled values multiply e_x0, e_y0 and K_seal0; pass the "
                    "ratio, not the dimensional value."
                )

    @property
    def state_names(self) -> tuple[str, ...]:
        return STATE_NAMES

    @property
    def input_names(self) -> tuple[str, ...]:
        return ()

    @property
    def output_names(self) -> tuple[str, ...]:
        return OUTPUT_NAMES

    def initial_state(self) -> State:
        """The standalone truth's start (spec 3.6 "[REPO]").

        ``q = 1``, ``x_n = x_n0`` (0.8), ``omega = omega_rated``, ``x_G = y_G = 5e-5`` m,
        ``x_R = y_R = 3e-5`` m, every other state 0 (including ``x_int`` and ``phi1``).
        """
        p = self.pelton
        x = jnp.zeros(19)
        for name, value in (
            ("q", 1.0),
            ("x_n", p.x_n0),
            ("omega", p.omega_rated),
            ("x_G", 5e-5),
            ("y_G", 5e-5),
            ("x_R", 3e-5),
            ("y_R", 3e-5),
        ):
            x = x.at[STATE_NAMES.index(name)].set(value)
        return x

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        p = self.pelton
        x_hyd, x_gov, x_rot = x[SLICES["M2"]], x[SLICES["M1"]], x[SLICES["M3"]]
        x_gen, x_run = x[SLICES["M4"]], x[SLICES["M5"]]
        h, q = x_hyd[2], x_hyd[3]
        n, omega, phi1 = x_rot[0], x_rot[1], x_rot[2]
        m_t = turbine_torque(p, n, q, h, params["e_x"], params["e_y"])
        m_g = generator_torque(p, omega)
        d_rot = rotational_rhs(p, x_rot, m_t, m_g)
        d_gov = governor_rhs(p, x_gov, n, d_rot[0], governor_command(p, t))
        d_hyd = hydraulics_rhs(p, x_hyd, x_gov[0])
        d_gen = generator_rhs(p, x_gen, x_run[0], x_run[1], omega, phi1)
        d_run = runner_rhs(
            p, x_run, x_gen[0], x_gen[1], d_gen[2], d_gen[3], omega, phi1, q, h, m_t, m_g, t, params["K_seal"]
        )
        return jnp.concatenate([d_hyd, d_gov, d_rot, d_gen, d_run])

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        return jnp.stack([x[i] for i in _OUTPUT_INDEX])
