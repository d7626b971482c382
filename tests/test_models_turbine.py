"""The Pelton turbine-generator (specs/compositional-inference.md 3.6-3.7, SI S93-S143).

References used here and not taken from the code under test: the derived constants the spec prints, an
independent numpy transcription of the spec's equations (:func:`reference_rhs`), scipy's LSODA, the
authors' notebook sanity outputs for the monolithic truth and Table S10's torque balance.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from twinfer.models import (
    PeltonParams,
    PeltonTurbine,
    generator_acceleration,
    generator_matrix,
    generator_rhs,
    generator_torque,
    governor_command,
    governor_rhs,
    hydraulics_rhs,
    nozzle_area,
    nozzle_flow,
    rotational_rhs,
    rub_force,
    runner_acceleration,
    runner_rhs,
    turbine_torque,
)
from twinfer.sim import heun_step, simulate

P = PeltonParams()


def assert_printed(value, printed: str):
    """``value`` rounds to ``printed``: it lies within half a unit of the printed last digit."""
    mantissa = printed.lower().split("e")[0]
    exponent = int(printed.lower().split("e")[1]) if "e" in printed.lower() else 0
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    half_unit = 0.5 * 10.0 ** (exponent - decimals)
    assert abs(float(value) - float(printed)) <= half_unit * (1 + 1e-9), (value, printed)


@pytest.mark.parametrize(
    ("name", "printed"),
    [
        ("omega_rated", "39.26991"),
        ("P_rated", "1.449898e8"),
        ("M_gB", "3.692136e6"),
        ("k_y", "1.327480e9"),
        ("J1_eff", "6.800000e6"),
        ("J2_eff", "3.408705e6"),
        ("J_tot", "1.020870e7"),
        ("J_eq", "2.270532e6"),
        ("f_torsion", "3.848"),
        ("K11", "1.418586e9"),
        ("K22", "1.418586e9"),
        ("K12", "-1.242848e9"),
        ("m01", "0.2533214"),
        ("m02", "0.4813264"),
        ("C_q", "0.3056098"),
        ("A_n0", "0.0302848"),
    ],
)
def test_derived_constants_match_the_printed_values(name, printed):
    """Every derived constant of spec 3.6 "[REPO]" rounds to the value printed there."""
    assert_printed(getattr(P, name), printed)


def test_torsional_frequency_and_nozzle_from_their_definitions():
    """f_n = sqrt(k_y/J_eq)/(2 pi) = 3.848 Hz; A_n(0.8) printed; q* = 1 at x_n = 0.8, h = 0 (S105)."""
    assert_printed(math.sqrt(float(P.k_y) / float(P.J_eq)) / (2 * math.pi), "3.848")
    assert_printed(nozzle_area(P, 0.8), "0.0302848")
    assert float(nozzle_flow(P, 0.8, 0.0)) == pytest.approx(1.0, rel=1e-14)
    # clip to [0, 1] and the area floor
    assert float(nozzle_area(P, 1.7)) == float(nozzle_area(P, 1.0))
    assert float(nozzle_area(P, -0.5)) == float(nozzle_area(P, 0.0))
    assert float(nozzle_area(dataclasses.replace(P, s_e=10.0), 1.0)) == 1e-8
    # the head floor: sqrt(max(1 + h, 0.1))
    ratio = float(nozzle_flow(P, 0.8, -3.0)) / float(nozzle_flow(P, 0.8, 0.0))
    assert ratio == pytest.approx(math.sqrt(0.1), rel=1e-14)


# -- an independent transcription of the spec's equations -------------------------------------------
def constants(p: PeltonParams) -> dict:
    """Table S7 fields and the derived constants (checked against the printed values above) as floats."""
    names = [f.name for f in dataclasses.fields(p) if f.name != "torsion_form"]
    derived = "omega_rated M_gB k_y J1_eff J2_eff J_tot J_eq K11 K22 K12 m01 m02 C_q".split()
    return {name: float(getattr(p, name)) for name in names + derived}


def reference_rhs(t, x, c, e_x=1.0, e_y=1.0, k_seal=1.0):
    """The 19-state right-hand side written out from spec 3.6 (S94-S143), plain numpy, standalone form."""
    x1, x2, h, q, xn, xint, n, w, phi1, xg, yg, vxg, vyg, xr, yr, vxr, vyr, al, be = x
    wr, mgb = c["omega_rated"], c["M_gB"]
    # M3 (S109-S113)
    mt = mgb * (1 + e_x * c["e_x0"] * n + e_y * c["e_y0"] * (q - 1) + c["e_h"] * h)
    mg = mgb * w / wr
    wdot = (mt - mg - c["D_omega"] * (w - wr)) / c["J_tot"]
    ndot = wdot / wr
    # M1 (S94-S98)
    err = c["A_s"] * math.sin(2 * math.pi * c["f_s"] * t) - n
    u = min(max(c["k_p"] * err + c["k_i"] * xint - c["k_d"] * ndot, 0.0), 1.0)
    # M2 (S101-S105)
    sn = c["s_e"] * (min(max(xn, 0.0), 1.0) + 1)
    area = max(c["m01"] * sn - c["m02"] * sn**2, 1e-8)
    qstar = c["C_q"] * area * math.sqrt(2 * c["g"] * c["H_rated"] * max(1 + h, 0.1))
    hdot = -(math.pi**2) / c["T_e"] ** 2 * x2 + (c["h0"] - h / c["y_r"] ** 2 - q**2) / (
        c["Z_n"] * c["T_e"] ** 3
    )
    # M4 (S121-S125)
    rg = math.hypot(xg, yg)
    fr = -(rg - c["delta0"]) * c["k_r"] / rg if rg > c["delta0"] else 0.0
    kg = c["k_gen"] + c["K11"]
    fxg = (
        -kg * xg
        - c["K12"] * xr
        - c["k_cross"] * yg
        - c["c_gen"] * vxg
        - c["c_cross"] * vyg
        + c["m1"] * c["e1"] * w**2 * math.cos(phi1)
        + fr * (xg - c["f_fric"] * yg)
    )
    fyg = (
        -kg * yg
        - c["K12"] * yr
        + c["k_cross"] * xg
        - c["c_gen"] * vyg
        + c["c_cross"] * vxg
        + c["m1"] * c["e1"] * w**2 * math.sin(phi1)
        + fr * (c["f_fric"] * xg + yg)
    )
    axg, ayg = fxg / c["m1"], fyg / c["m1"]
    # M5 (S130-S140)
    phi2 = phi1 - al
    kr = c["k_run"] + c["K22"]
    ks = k_seal * c["K_seal0"]
    cs = c["tau_seal"] * w * c["D_seal"]
    fv, fb = c["f_vortex_ratio"] * w, 0.1 * c["A_vortex"]
    fxr = (
        -kr * xr
        - c["K12"] * xg
        - 0.8 * c["k_cross"] * yr
        - ks * xr
        - cs * yr
        - c["c_run"] * vxr
        + c["m2"] * c["e2"] * w**2 * math.cos(phi2)
        + c["A_vortex"] * q * math.sin(fv * t)
        + fb * math.sin(c["Z_n"] * w * t)
    )
    fyr = (
        -kr * yr
        - c["K12"] * yg
        + 0.8 * c["k_cross"] * xr
        + cs * xr
        - ks * yr
        - c["c_run"] * vyr
        + c["m2"] * c["e2"] * w**2 * math.sin(phi2)
        + c["A_vortex"] * q * math.cos(fv * t)
        + fb * math.cos(c["Z_n"] * w * t)
    )
    axr, ayr = fxr / c["m2"], fyr / c["m2"]
    tau_gen = -c["m1"] * c["e1"] * (ayg * math.cos(phi1) - axg * math.sin(phi1)) / c["J1_eff"]
    tau_run = c["m2"] * c["e2"] * (ayr * math.cos(phi2) - axr * math.sin(phi2)) / c["J2_eff"]
    t_imb = c["J_eq"] * (tau_gen + tau_run - mg / c["J1_eff"] - mt / c["J2_eff"])
    bdot = (t_imb - c["c_t"] * be - c["k_y"] * al) / c["J_eq"]
    return np.array(
        [
            x2, h, hdot, (qstar - q) / c["T_q"], (u - xn) / c["T_y"], err, ndot, wdot, w,
            vxg, vyg, axg, ayg, vxr, vyr, axr, ayr, be, bdot,
        ]
    )  # fmt: skip


def random_states(n, seed, scale_disp=2e-4):
    """Plausible states: hydraulics and governor O(0.1), speed near rated, displacements ~ 0.2 mm."""
    rng = np.random.default_rng(seed)
    x = np.empty((n, 19))
    x[:, 0:3] = rng.normal(0, 0.05, (n, 3))
    x[:, 3] = rng.uniform(0.7, 1.2, n)
    x[:, 4] = rng.uniform(-0.1, 1.1, n)  # straddles the clip of the stroke
    x[:, 5] = rng.normal(0, 0.3, n)
    x[:, 6] = rng.normal(0, 0.02, n)
    x[:, 7] = float(P.omega_rated) * (1 + x[:, 6])
    x[:, 8] = rng.uniform(-10, 10, n)
    x[:, 9:11] = rng.normal(0, scale_disp, (n, 2))
    x[:, 11:13] = rng.normal(0, scale_disp * 75, (n, 2))
    x[:, 13:15] = rng.normal(0, scale_disp / 4, (n, 2))
    x[:, 15:17] = rng.normal(0, scale_disp * 40, (n, 2))
    x[:, 17] = rng.normal(-2.8e-3, 1e-3, n)
    x[:, 18] = rng.normal(0, 0.05, n)
    return x


def test_vector_field_matches_the_spec_transcription():
    """PeltonTurbine.vector_field equals the numpy transcription of S94-S143 on random states and times.

    Half the states sit outside the 4 mm clearance, so the rub force is exercised too; the scaled
    coefficients are away from 1 so each enters where it should.
    """
    model = PeltonTurbine(e_x=0.7, e_y=1.3, K_seal=0.6)
    c = constants(model.pelton)
    f = jax.jit(lambda t, x: model.vector_field(t, x, jnp.zeros(0), model.params))
    xs = np.concatenate([random_states(20, 0), random_states(20, 1, scale_disp=4e-3)])
    ts = np.random.default_rng(2).uniform(0, 130, len(xs))
    for t, x in zip(ts, xs, strict=True):
        expected = reference_rhs(t, x, c, 0.7, 1.3, 0.6)
        np.testing.assert_allclose(f(t, x), expected, rtol=1e-9, atol=0)


def test_vector_field_is_the_composition_of_the_module_functions():
    """The modules wired by hand along Table S6's messages give the monolithic vector field exactly."""
    model = PeltonTurbine(e_x=0.8, e_y=1.1, K_seal=0.9)
    p = model.pelton
    for t, x in zip([0.3, 17.0, 88.8], random_states(3, 5), strict=True):
        xj = jnp.asarray(x)
        mt = turbine_torque(p, xj[6], xj[3], xj[2], 0.8, 1.1)
        mg = generator_torque(p, xj[7])
        d_rot = rotational_rhs(p, xj[6:9], mt, mg)
        d_gov = governor_rhs(p, xj[4:6], xj[6], d_rot[0], governor_command(p, t))
        d_hyd = hydraulics_rhs(p, xj[0:4], xj[4])
        a_xg, a_yg = generator_acceleration(p, xj[9:13], xj[13], xj[14], xj[7], xj[8])
        d_gen = generator_rhs(p, xj[9:13], xj[13], xj[14], xj[7], xj[8])
        d_run = runner_rhs(
            p, xj[13:19], xj[9], xj[10], a_xg, a_yg, xj[7], xj[8], xj[3], xj[2], mt, mg, t, 0.9
        )
        by_hand = np.concatenate([d_hyd, d_gov, d_rot, d_gen, d_run])
        np.testing.assert_allclose(model.vector_field(t, xj, jnp.zeros(0), model.params), by_hand, rtol=1e-14)
        ax, ay = runner_acceleration(p, xj[13:19], xj[9], xj[10], xj[7], xj[8], xj[3], xj[2], mt, t, 0.9)
        np.testing.assert_allclose([d_run[2], d_run[3]], [ax, ay], rtol=1e-14)


def test_monolithic_truth_against_scipy_lsoda():
    """twinfer.sim.simulate (Dopri8) on PeltonTurbine agrees with scipy's LSODA on the spec's numpy
    transcription over the first 0.5 s from the truth's initial state.

    Both solvers are asked for a relative error of 1e-10 per step. In 0.5 s the governor (starting at
    u = 0) shuts the needle from 0.8 to ~0.09 and reopens it, crossing the saturation's kink, the runner
    modes (~28 Hz) go through some fourteen lightly damped cycles and the torsion (3.85 Hz, damping
    ratio ~1e-5) through two. Local errors of 1e-10 accumulate over a few thousand steps; the two
    solutions agree to ~2e-8 of each state's range (worst: the runner velocities). The bound, 1e-6 of
    the range, keeps a margin of fifty for the platform's rounding and is still four orders below what a
    wrong sign or coefficient changes (a term of relative size 1e-4 of a force moves a state by more).
    """
    model = PeltonTurbine()
    c = constants(model.pelton)
    x0 = np.asarray(model.initial_state())
    ts = np.linspace(0.0, 0.5, 51)
    traj = simulate(model, ts, x0)
    scale = np.array(
        [1e-3] * 3
        + [1.0] * 3
        + [1e-2, 1.0, 1.0]
        + [1e-4] * 2
        + [1e-2] * 2
        + [1e-4] * 2
        + [1e-2] * 2
        + [1e-3, 1e-1]
    )
    ref = solve_ivp(
        lambda t, x: reference_rhs(t, x, c), (0.0, 0.5), x0, method="LSODA", t_eval=ts, rtol=1e-10,
        atol=1e-12 * scale,
    )  # fmt: skip
    assert ref.success
    got, want = np.asarray(traj.states), ref.y.T
    span = np.ptp(want, axis=0) + 1e-300
    assert np.all(np.abs(got - want).max(axis=0) <= 1e-6 * span), np.abs(got - want).max(axis=0) / span
    # the run did what the spec says it does at start-up: the needle closes, the torsion swings
    assert want[:, 4].min() < 0.1 and want[-1, 4] > 0.25 and np.ptp(want[:, 17]) > 5e-3
    np.testing.assert_allclose(traj.outputs, got[:, [7, 3, 9, 10, 13, 14]], rtol=0, atol=0)


def test_heun_truth_reproduces_the_authors_notebook():
    """Heun, dt = 5e-4 s, 150 s from the truth's initial state (spec 3.6 "notebook sanity outputs").

    Final speed 378.13 rpm; over the second half (t >= 75 s): mean q 1.043, generator orbit RMS radius
    214.90 um (max 218.97), runner 55.69 um (max 58.94), alpha peak-to-peak 5.4889 mrad, beta
    peak-to-peak 132.70 mrad/s. These are the authors' numbers from their own code, so they check the
    reading of every equation that the spec leaves open (torsion sign, vortex phase, clip and floors).
    """
    model = PeltonTurbine()
    dt, n_steps = 5e-4, 300_000
    rhs = lambda t, x: model.vector_field(t, x, jnp.zeros(0), model.params)

    @jax.jit
    def run(x0):
        def body(x, k):
            x = heun_step(rhs, k * dt, x, dt)
            return x, x

        return jax.lax.scan(body, x0, jnp.arange(n_steps))[1]

    xs = np.asarray(run(model.initial_state()))
    late = xs[n_steps // 2 - 1 :]
    assert_printed(xs[-1, 7] * 60 / (2 * np.pi), "378.13")
    assert_printed(late[:, 3].mean(), "1.043")
    r_gen = np.hypot(late[:, 9], late[:, 10]) * 1e6
    r_run = np.hypot(late[:, 13], late[:, 14]) * 1e6
    assert_printed(np.sqrt(np.mean(r_gen**2)), "214.90")
    assert_printed(r_gen.max(), "218.97")
    assert_printed(np.sqrt(np.mean(r_run**2)), "55.69")
    assert_printed(r_run.max(), "58.94")
    assert_printed(np.ptp(late[:, 17]) * 1e3, "5.4889")
    assert_printed(np.ptp(late[:, 18]) * 1e3, "132.70")


# -- generator structure and rub --------------------------------------------------------------------
def test_rub_force_zero_inside_and_closed_form_outside():
    """S125: zero for r_G <= delta0 = 4 mm; outside, -(r-delta0) k_r / r [x - f y, f x + y]."""
    for x, y in [(0.0, 0.0), (1e-3, -2e-3), (4e-3, 0.0), (2.8e-3, 2.8e-3)]:
        assert [float(v) for v in rub_force(P, x, y)] == [0.0, 0.0]
    x, y = 3e-3, 4e-3  # r = 5 mm, 1 mm into the stator
    gain = -(1e-3) * 6e9 / 5e-3
    fx, fy = rub_force(P, x, y)
    assert float(fx) == pytest.approx(gain * (x - 0.02 * y), rel=1e-12)  # -3.504e6 N
    assert float(fy) == pytest.approx(gain * (0.02 * x + y), rel=1e-12)
    assert float(fx) == pytest.approx(-3.504e6, rel=1e-12)
    # finite derivatives at the centre, where sqrt(x^2 + y^2) has none
    jac = jax.jacfwd(lambda v: jnp.stack(rub_force(P, v[0], v[1])))(jnp.zeros(2))
    assert np.all(np.asarray(jac) == 0.0)


def test_generator_rhs_is_affine_in_its_state_inside_the_clearance():
    """Inside the clearance d(generator_rhs)/d(x_gen) is one constant matrix, the one S121-S124 give."""
    m1, k, kc, cg, cc = 6e5, 2e9 + float(P.K11), 2e7, 1e6, 2e4
    expected = np.array(
        [
            [0, 0, 1, 0],
            [0, 0, 0, 1],
            [-k / m1, -kc / m1, -cg / m1, -cc / m1],
            [kc / m1, -k / m1, cc / m1, -cg / m1],
        ]
    )
    np.testing.assert_allclose(generator_matrix(P), expected, rtol=1e-14)
    jac = jax.jit(jax.jacfwd(lambda xg, xr, yr, w, ph: generator_rhs(P, xg, xr, yr, w, ph)))
    rng = np.random.default_rng(3)
    for _ in range(5):
        xg = np.concatenate([rng.uniform(-2.5e-3, 2.5e-3, 2), rng.normal(0, 0.1, 2)])
        args = (rng.normal(0, 1e-4), rng.normal(0, 1e-4), rng.uniform(30, 45), rng.uniform(-5, 5))
        np.testing.assert_allclose(jac(jnp.asarray(xg), *args), expected, rtol=1e-12)
        # and the remainder is the forcing b = [0, 0, f_x, f_y] / m1 of the spec
        b = np.asarray(generator_rhs(P, jnp.asarray(xg), *args)) - expected @ xg
        xr, yr, w, ph = args
        unb = 6e5 * 0.5e-3 * w**2
        fb = (
            np.array([0, 0, -float(P.K12) * xr + unb * np.cos(ph), -float(P.K12) * yr + unb * np.sin(ph)])
            / m1
        )
        np.testing.assert_allclose(b, fb, rtol=1e-9, atol=1e-12)
    outside = jnp.array([4e-3, 3e-3, 0.0, 0.0])
    assert not np.allclose(jac(outside, 0.0, 0.0, 39.0, 0.0), expected, rtol=1e-6)


# -- M1, M3 pieces ------------------------------------------------------------------------------------
def test_governor_saturation_and_anti_windup():
    """S96-S98: u saturates to [0, 1]; the grid unit's integrator holds when pushing into saturation."""
    x_gov = jnp.array([0.5, 1.0])
    # u_PID = 5 * 0.3 + 2.12 * 1 - 0 = 3.62 -> u = 1
    np.testing.assert_allclose(governor_rhs(P, x_gov, 0.0, 0.0, 0.3), [(1 - 0.5) / 0.04, 0.3], rtol=1e-14)
    # u_PID = 5 * (-0.1) + 2.12 * 0.1 - 10 * 0.2 < 0 -> u = 0
    np.testing.assert_allclose(
        governor_rhs(P, jnp.array([0.5, 0.1]), 0.1, 0.2, 0.0), [-0.5 / 0.04, -0.1], rtol=1e-14
    )
    # unsaturated: u = 5 * 0.02 + 2.12 * 0.1 - 10 * 0.001 = 0.302
    np.testing.assert_allclose(
        governor_rhs(P, jnp.array([0.3, 0.1]), -0.02, 0.001, 0.0), [(0.302 - 0.3) / 0.04, 0.02], rtol=1e-12
    )
    aw = dataclasses.replace(P, anti_windup=1.0)
    assert float(governor_rhs(aw, x_gov, 0.0, 0.0, 0.3)[1]) == 0.0  # saturated high, e > 0: held
    assert float(governor_rhs(aw, x_gov, 0.0, 0.0, -0.1)[1]) == -0.1  # u_PID = 1.62 but e < 0: runs
    assert float(governor_command(P, 1.25)) == pytest.approx(0.1 * math.sin(2 * math.pi * 0.2 * 1.25))


def test_turbine_torque_forms():
    """S109 with and without the e_h h term (the authors' EKF form); S110-S113 at a hand-worked point."""
    n, q, h = 0.01, 1.05, -0.02
    mgb = float(P.M_gB)
    full = mgb * (1 + 0.9 * 1.0 * n + 1.2 * 0.5 * (q - 1) + 1.5 * h)
    assert float(turbine_torque(P, n, q, h, 0.9, 1.2)) == pytest.approx(full, rel=1e-14)
    ekf = mgb * (1 + 0.9 * n + 0.6 * (q - 1))
    assert float(turbine_torque(P, n, q, h, 0.9, 1.2, include_head=False)) == pytest.approx(ekf, rel=1e-14)
    w = 40.0
    d = np.asarray(rotational_rhs(P, jnp.array([n, w, 1.0]), 3.7e6, 3.6e6))
    wdot = (3.7e6 - 3.6e6 - 1e5 * (w - 2 * math.pi * 375 / 60)) / float(P.J_tot)
    np.testing.assert_allclose(d, [wdot / (2 * math.pi * 375 / 60), wdot, w], rtol=1e-13)


# -- the hierarchical unit (3.7) ----------------------------------------------------------------------
@pytest.mark.parametrize(("p_gen", "printed"), [(67e6, "1.7061"), (163e6, "4.1508"), (85e6, "2.1645")])
def test_hierarchical_rating_balances_torque(p_gen, printed):
    """Q_rated = P_gen / (rho g H eta) gives P_rated = P_gen and M_t = M_gB = Table S10's T_e at the
    operating point n = 0, q = 1, h = 0."""
    p = PeltonParams.hierarchical(p_gen)
    assert float(p.P_rated) == pytest.approx(p_gen, rel=1e-15)
    assert float(p.Q_rated) == pytest.approx(p_gen / (1000 * 9.81 * 595 * 0.92), rel=1e-15)
    mt = float(turbine_torque(p, 0.0, 1.0, 0.0))
    assert mt == float(p.M_gB)
    assert mt == pytest.approx(p_gen / (2 * math.pi * 375 / 60), rel=1e-14)
    assert_printed(mt / 1e6, printed)
    assert (p.T_q, p.k_d, p.T_y, p.c_t, p.e_h, p.A_s) == (0.05, 0.5, 0.01, 1e5, 1.5, 0.0)
    # the machine itself is Table S7's: only the rating moved
    assert float(p.J_eq) == float(P.J_eq) and float(p.C_q) == float(P.C_q)


def test_hierarchical_runner_extras_in_closed_form():
    """Spec 3.7: the load-dependent forcing, torque reaction and DC radial force add exactly their terms;
    the grid torsion form is M_t/J1 + T_e/J2 - (k_y a + c_t b)/J_eq + tau_gen - tau_run."""
    ph = PeltonParams.hierarchical(85e6)
    base = dataclasses.replace(ph, k_hyd_load=0.0, k_bld_load=0.0, torque_reaction=0.0, dc_radial=0.0)
    x_run = jnp.array([2e-5, -1e-5, 1e-3, 2e-3, -1e-3, 0.01])
    xg, yg, w, phi1, q, h, mt, t = 1e-4, -5e-5, 39.0, 2.0, 1.02, 0.03, -2.2e6, 3.3
    a_base = np.array(runner_acceleration(base, x_run, xg, yg, w, phi1, q, h, mt, t))
    a_full = np.array(runner_acceleration(ph, x_run, xg, yg, w, phi1, q, h, mt, t))
    load = q**2 * (1 + h)
    phi2 = phi1 - (-1e-3)
    extra_x = (
        2e4 * load * math.sin(0.25 * w * t) + 2.5e4 * load * math.sin(6 * w * t)
        + 0.12 * 2.2e6 / 0.55 * math.cos(phi2) + (q * math.sqrt(1 + h) - 1) * float(ph.M_gB) / 0.55
    )  # fmt: skip
    extra_y = 2e4 * load * math.cos(0.25 * w * t) + 2.5e4 * load * math.cos(6 * w * t)
    extra_y += 0.12 * 2.2e6 / 0.55 * math.sin(phi2)
    np.testing.assert_allclose(a_full - a_base, np.array([extra_x, extra_y]) / 3e5, rtol=1e-9)
    # torsion, grid form
    axg, ayg, te = 0.3, -0.2, 2.16e6
    d = np.asarray(runner_rhs(ph, x_run, xg, yg, axg, ayg, w, phi1, q, h, mt, te, t))
    ax, ay = a_full
    j1, j2, jeq = float(ph.J1_eff), float(ph.J2_eff), float(ph.J_eq)
    tau_gen = -6e5 * 0.5e-3 * (ayg * math.cos(phi1) - axg * math.sin(phi1)) / j1
    tau_run = 3e5 * 0.5e-3 * (ay * math.cos(phi2) - ax * math.sin(phi2)) / j2
    bdot = mt / j1 + te / j2 - (float(ph.k_y) * -1e-3 + 1e5 * 0.01) / jeq + tau_gen - tau_run
    assert d[5] == pytest.approx(bdot, rel=1e-12)
    np.testing.assert_allclose(d[:5], [1e-3, 2e-3, ax, ay, 0.01], rtol=1e-14)


# -- interface, transformations, errors ---------------------------------------------------------------
def test_model_interface_and_initial_state():
    model = PeltonTurbine()
    assert model.n_state == 19 and model.input_names == () and model.param_names == ("e_x", "e_y", "K_seal")
    assert model.state_names[:9] == ("x1", "x2", "h", "q", "x_n", "x_int", "n", "omega", "phi1")
    assert model.output_names == ("omega", "q", "x_G", "y_G", "x_R", "y_R")
    x0 = np.asarray(model.initial_state())
    expected = np.zeros(19)
    expected[[3, 4, 7, 9, 10, 13, 14]] = [1.0, 0.8, 2 * math.pi * 375 / 60, 5e-5, 5e-5, 3e-5, 3e-5]
    np.testing.assert_allclose(x0, expected, rtol=1e-15)
    np.testing.assert_allclose(model.output(0.0, x0, jnp.zeros(0), model.params), x0[[7, 3, 9, 10, 13, 14]])
    # the hydraulics start at their equilibrium (h0 - h/y_r^2 - q^2 = 0, q* = q)
    np.testing.assert_allclose(model.vector_field(0.0, x0, jnp.zeros(0), model.params)[:4], 0.0, atol=1e-12)


def test_gradients_are_finite_and_match_finite_differences():
    """jit(grad) of a scalar of the vector field w.r.t. the scaled parameters and the state is finite at
    the centred rotor (r_G = 0) and equals central differences elsewhere."""
    model = PeltonTurbine()
    x = jnp.asarray(random_states(1, 9)[0])

    def scalar(params, x):
        return jnp.sum(model.vector_field(1.7, x, jnp.zeros(0), params) * jnp.arange(1.0, 20.0) ** -2)

    g_p, g_x = jax.jit(jax.grad(scalar, argnums=(0, 1)))(model.params, x)
    for name in ("e_x", "e_y", "K_seal"):
        eps = 1e-6
        hi = {**model.params, name: model.params[name] + eps}
        lo = {**model.params, name: model.params[name] - eps}
        fd = (scalar(hi, x) - scalar(lo, x)) / (2 * eps)
        assert float(g_p[name]) == pytest.approx(float(fd), rel=1e-6)
    centred = x.at[9:11].set(0.0)
    assert np.all(np.isfinite(np.asarray(jax.grad(scalar, argnums=1)(model.params, centred))))
    assert np.all(np.isfinite(np.asarray(g_x)))


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: PeltonTurbine(e_x=-0.1), "PeltonTurbine e_x: expected a finite scaled coefficient >= 0"),
        (lambda: PeltonTurbine(K_seal=float("nan")), "PeltonTurbine K_seal: .*received nan"),
        (lambda: PeltonTurbine().with_params(e_y=-2.0), "PeltonTurbine e_y"),
        (lambda: PeltonTurbine({"e_x": 1.0}), "PeltonTurbine pelton: expected a PeltonParams; received dict"),
        (lambda: PeltonParams(m1=0.0), "PeltonParams m1: expected a positive value; received 0.0"),
        (lambda: PeltonParams(k_gen=-1.0), "PeltonParams k_gen: expected a value >= 0; received -1.0"),
        (lambda: PeltonParams(e_h=float("inf")), "PeltonParams e_h: expected a finite value"),
        (lambda: PeltonParams(torsion_form="paper"), "PeltonParams torsion_form: expected one of"),
        (lambda: PeltonParams.hierarchical(-67e6), "PeltonParams.hierarchical P_gen: expected a positive"),
    ],
)
def test_invalid_values_are_rejected_by_name(build, match):
    with pytest.raises(ValueError, match=match):
        build()
