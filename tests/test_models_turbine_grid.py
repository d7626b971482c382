"""The IEEE 9-bus network with three embedded Pelton turbines (specs/compositional-inference.md 3.7).

References used here and not taken from the code under test: the spec's printed K table, Table S9's
angles and Table S10's torques; the case9 branch data (r, x) of MATPOWER typed in below; an independent
scipy root solve of the power balance; and a numpy transcription of the coupled equations (spec 3.6 and
3.7, SI S94-S150) integrated with scipy's DOP853.
"""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import root

from twinfer.data import load_grid
from twinfer.models import PeltonParams
from twinfer.models.turbine_grid import (
    LoadStep,
    TurbineGrid,
    bus_rate,
    coi_angle,
    grid_torque,
    kuramoto_operating_point,
    load_step,
    power_inflow,
    susceptance_case,
    torque_balance,
)
from twinfer.sim import discretise, simulate_discrete

# spec 3.7 "[REPO] case9 K" (0-based pairs)
SPEC_K = {
    (0, 3): 17.361,
    (1, 7): 16.000,
    (2, 5): 17.065,
    (3, 4): 10.511,
    (3, 8): 11.604,
    (4, 5): 5.588,
    (5, 6): 9.784,
    (6, 7): 13.698,
    (7, 8): 5.975,
}
# MATPOWER case9 branch table: (from, to, r, x) in p.u., 1-based buses
CASE9_BRANCHES = [
    (1, 4, 0.0, 0.0576),
    (4, 5, 0.017, 0.092),
    (5, 6, 0.039, 0.17),
    (3, 6, 0.0, 0.0586),
    (6, 7, 0.0119, 0.1008),
    (7, 8, 0.0085, 0.072),
    (8, 2, 0.0, 0.0625),
    (8, 9, 0.032, 0.161),
    (9, 4, 0.01, 0.085),
]
SPEC_P_INJ = np.array([0.67, 1.63, 0.85, 0.0, -0.90, 0.0, -1.00, 0.0, -1.25])
SPEC_DELTA_DEG = np.array([0.00, 10.12, 5.34, -2.21, -3.79, 2.49, 1.09, 4.27, -4.09])


def case9_susceptance() -> np.ndarray:
    """Im(Y_ij) = x / (r^2 + x^2) of each series branch (no taps, no shifts in case9)."""
    k = np.zeros((9, 9))
    for f, t, r, x in CASE9_BRANCHES:
        k[f - 1, t - 1] = k[t - 1, f - 1] = x / (r**2 + x**2)
    return k


@pytest.fixture(scope="module")
def model():
    return TurbineGrid.ieee9()


@pytest.fixture(scope="module")
def delta_ref():
    """The operating point by scipy's MINPACK hybrid root finder from a flat start, tight tolerance."""
    k = case9_susceptance()

    def balance(d8):
        d = np.concatenate([[0.0], d8])
        return (SPEC_P_INJ + np.sum(k * np.sin(d[None, :] - d[:, None]), axis=1))[1:]

    sol = root(balance, np.zeros(8), method="hybr", tol=1e-14)
    assert np.max(np.abs(balance(sol.x))) < 1e-13  # converged to rounding ("xtol too small" is fine)
    return np.concatenate([[0.0], sol.x])


# -- the case ------------------------------------------------------------------------------------
def test_coupling_is_the_spec_susceptance_table():
    """K_ij = Im(Y_ij) reproduces the spec's nine pairs to 3 decimals, is zero elsewhere and equals
    x/(r^2+x^2) of MATPOWER's case9 to rounding; load_grid's |Y| differs on the resistive lines."""
    case = susceptance_case("ieee9")
    k = case.K
    assert k.shape == (9, 9)
    for (i, j), printed in SPEC_K.items():
        assert abs(k[i, j] - printed) <= 5e-4, ((i, j), k[i, j], printed)
        assert k[j, i] == k[i, j]
    mask = np.zeros((9, 9), bool)
    for i, j in SPEC_K:
        mask[i, j] = mask[j, i] = True
    assert np.all(k[~mask] == 0)
    np.testing.assert_allclose(k, case9_susceptance(), rtol=1e-13, atol=0)
    # the scalability study's coupling is the magnitude: same on the lossless transformers, larger elsewhere
    magnitude = load_grid("ieee9").coupling.toarray()
    assert magnitude[0, 3] == pytest.approx(k[0, 3], rel=1e-13)
    assert magnitude[3, 4] == pytest.approx(10.689, abs=5e-4) and magnitude[3, 4] > k[3, 4] + 0.1


def test_case_injections_and_slack_generation():
    """P_inj = spec's list, P_gen = 67/163/85 MW (slack = total load - other generation), sum 0."""
    case = susceptance_case("ieee9")
    np.testing.assert_allclose(case.P_inj, SPEC_P_INJ, rtol=0, atol=1e-15)
    np.testing.assert_allclose(case.P_gen, [67e6, 163e6, 85e6], rtol=1e-15)
    assert case.gen_buses == (0, 1, 2) and case.S_base == 100e6
    assert abs(case.P_inj.sum()) < 1e-14


# -- Table S9 ------------------------------------------------------------------------------------
def test_operating_point_reproduces_table_s9(delta_ref):
    """NR from the DC warm start: Table S9's angles to 0.01 deg, an independent root solve to 1e-10 rad,
    the non-slack residual below 1e-12 and (power balance) the slack delivering 0.67 p.u."""
    op = kuramoto_operating_point(case9_susceptance(), SPEC_P_INJ, slack=0, tol=1e-12)
    assert op.residual < 1e-12
    assert op.delta[0] == 0.0
    np.testing.assert_allclose(np.rad2deg(op.delta), SPEC_DELTA_DEG, rtol=0, atol=0.005 + 1e-12)
    np.testing.assert_allclose(op.delta, delta_ref, rtol=0, atol=1e-10)
    assert op.slack_power == pytest.approx(0.67, abs=1e-12)
    assert 1 <= op.iterations <= 6  # quadratic convergence from the DC start
    all_buses = SPEC_P_INJ + np.sum(case9_susceptance() * np.sin(op.delta[None] - op.delta[:, None]), axis=1)
    assert np.max(np.abs(all_buses)) < 1e-12


def test_operating_point_with_another_slack_differs_by_a_rotation(delta_ref):
    """The balance depends on angle differences only: slack bus 5 gives delta* - delta*_5."""
    op = kuramoto_operating_point(case9_susceptance(), SPEC_P_INJ, slack=4)
    np.testing.assert_allclose(op.delta, delta_ref - delta_ref[4], atol=1e-10)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((np.zeros((9, 8)), SPEC_P_INJ), "K: expected a square"),
        ((case9_susceptance() + np.eye(9), SPEC_P_INJ), "zero diagonal"),
        ((case9_susceptance(), SPEC_P_INJ[:8]), "P_inj: expected 9 finite"),
        ((case9_susceptance(), SPEC_P_INJ, 9), "slack: expected a bus in 0..8"),
        ((case9_susceptance(), 20 * SPEC_P_INJ), "Newton-Raphson to reach tol"),
    ],
)
def test_operating_point_rejects_what_it_cannot_solve(args, match):
    """Malformed inputs and injections no network state can carry raise errors naming the argument."""
    with pytest.raises(ValueError, match=match):
        kuramoto_operating_point(*args)


# -- Table S10 -----------------------------------------------------------------------------------
def test_torque_balance_table_s10(model):
    """M_t = T_e at the operating point to 1e-9 relative; both round to Table S10's MN m values."""
    tb = torque_balance(model)
    assert np.all(tb.relative < 1e-9)
    for m_t, t_e, printed in zip(tb.M_t, tb.T_e, (1.7061, 4.1508, 2.1645), strict=True):
        assert round(m_t / 1e6, 4) == printed and round(t_e / 1e6, 4) == printed
    assert np.all(tb.T_e > 0)  # the spec's sign note: T_e > 0 for a generating unit


def test_torque_balance_sees_an_unbalanced_state(model):
    """Raising unit 2's flow by 1 % raises its M_t by M_gB e_y 0.01 and leaves the others balanced."""
    x = model.initial_state()
    x = x.at[model.state_names.index("q_2")].add(0.01)
    tb = torque_balance(model, x)
    m_gb = float(model.units[1].M_gB)
    assert tb.residual[1] == pytest.approx(m_gb * 0.5 * 0.01, rel=1e-9)
    assert tb.relative[0] < 1e-9 and tb.relative[2] < 1e-9


# -- the coupled model ---------------------------------------------------------------------------
def test_layout_names_and_initial_state(model):
    """63 states: three 19-state blocks (phi1 -> delta) then buses 4..9; Table S12 initial values."""
    names = model.state_names
    assert model.n_state == 63 and model.n_input == 0 and model.n_output == 18
    assert names[:9] == ("x1_1", "x2_1", "h_1", "q_1", "x_n_1", "x_int_1", "n_1", "omega_1", "delta_1")
    assert names[19 + 8] == "delta_2" and names[38 + 18] == "beta_3"
    assert names[57:] == tuple(f"delta_{b}" for b in range(4, 10))
    assert model.output_names[:6] == ("x_G_1", "y_G_1", "x_R_1", "y_R_1", "q_1", "omega_1")
    x0 = model.initial_state()
    op = model.operating_point
    np.testing.assert_allclose(model.bus_angles(x0), op.delta, rtol=0, atol=0)
    for i, p in enumerate(model.units):
        block = dict(
            zip(
                [s.rsplit("_", 1)[0] for s in names[19 * i : 19 * i + 19]],
                x0[19 * i : 19 * i + 19],
                strict=True,
            )
        )
        assert float(block["x_n"]) == 0.8 and float(block["q"]) == 1.0
        assert float(p.k_i * block["x_int"]) == pytest.approx(0.8, rel=1e-15)  # PID output 0.8
        assert float(block["omega"]) == pytest.approx(2 * math.pi * 375 / 60, rel=1e-15)
        for s in ("x_G", "y_G", "x_R", "y_R"):
            assert float(block[s]) == 1e-5
        for s in ("x1", "x2", "h", "n", "vx_G", "vy_G", "vx_R", "vy_R", "alpha", "beta"):
            assert float(block[s]) == 0.0
        assert float(p.A_s) == 0.0  # n_ref = 0
    y0 = model.output(0.0, x0, jnp.zeros(0), model.params)
    np.testing.assert_array_equal(y0[:4], 1e-5)


def test_operating_point_is_an_equilibrium_of_the_electromechanics(model):
    """Before the step every bus angle, the governor, hydraulics and rotation (n, omega, delta) are at
    rest to rounding; the lateral vibration and torsion are not (periodic forcing, untwisted shaft)."""
    x0 = model.initial_state()
    d = np.asarray(model.vector_field(1.0, x0, jnp.zeros(0), model.params))
    blocks = d[:57].reshape(3, 19)
    np.testing.assert_allclose(d[57:], 0.0, atol=1e-14)
    np.testing.assert_allclose(blocks[:, :9], 0.0, atol=1e-13)
    assert np.all(np.abs(blocks[:, 7]) < 1e-15)  # domega/dt, rad/s^2
    assert np.all(np.abs(blocks[:, [11, 12, 15, 16, 18]]).max(axis=1) > 1e-2)


def test_vibrations_do_not_feed_back_into_the_electromechanics(model):
    """Changing every lateral and torsion state leaves the M1-M3 and bus derivatives unchanged: the
    electromechanical operating point is kept exactly however the rotor vibrates."""
    x0 = model.initial_state()
    lateral = np.r_[[19 * i + np.arange(9, 19) for i in range(3)]].ravel()
    rng = np.random.default_rng(3)
    x1 = x0.at[lateral].add(rng.normal(0, 1e-4, lateral.size))
    d0 = model.vector_field(2.3, x0, jnp.zeros(0), model.params)
    d1 = model.vector_field(2.3, x1, jnp.zeros(0), model.params)
    keep = np.setdiff1d(np.arange(63), lateral)
    np.testing.assert_array_equal(d0[keep], d1[keep])
    assert not np.allclose(d0[lateral], d1[lateral])


def test_doubled_unit_time_doubles_the_turbines_rates_only(model):
    """``unit_time_scale=2`` (the authors' re-integration, decision 20): at a state off the operating point,
    every turbine state's rate is exactly twice the physics' and the other buses' rates are unchanged."""
    rng = np.random.default_rng(5)
    x = model.initial_state() + rng.normal(0, 1e-3, 63)
    fast = TurbineGrid.ieee9(disturbance=model.disturbance, unit_time_scale=2.0)
    d1 = model.vector_field(7.0, x, jnp.zeros(0), model.params)
    d2 = fast.vector_field(7.0, x, jnp.zeros(0), fast.params)
    np.testing.assert_array_equal(d2[:57], 2.0 * d1[:57])
    np.testing.assert_array_equal(d2[57:], d1[57:])
    assert np.count_nonzero(d1[:57]) > 40  # the comparison is not of zeros


def test_load_step_changes_bus_9_only_inside_its_window(model):
    """P_inj,9 drops by 0.20 p.u. for 5 <= t < 30 s and nowhere else; the bus-9 rate follows by -0.1."""
    base = np.asarray(model.params["P_inj"])
    for t in (0.0, 4.999999, 30.0, 45.0):
        np.testing.assert_array_equal(model.injection(t), base)
    for t in (5.0, 12.0, 29.999999):
        expected = base.copy()
        expected[8] -= 0.20
        np.testing.assert_array_equal(model.injection(t), expected)
    x0 = model.initial_state()
    before = model.vector_field(4.9, x0, jnp.zeros(0), model.params)
    after = model.vector_field(5.0, x0, jnp.zeros(0), model.params)
    assert float(after[-1] - before[-1]) == pytest.approx(-0.10, abs=1e-14)
    np.testing.assert_allclose(after[57:-1], before[57:-1], atol=1e-14)
    quiet = TurbineGrid.ieee9(disturbance=None)
    np.testing.assert_array_equal(quiet.injection(10.0), base)
    shifted = load_step(3.0, base, LoadStep(bus=4, load=-0.1, t_on=2.0, t_off=3.5))
    assert float(shifted[4]) == pytest.approx(-0.80) and np.all(
        np.delete(np.asarray(shifted), 4) == np.delete(base, 4)
    )


def test_interface_laws_on_padded_neighbour_lists(model):
    """grid_torque, bus_rate and power_inflow on a bus's padded neighbour list equal the dense sums;
    the COI angle is the P_gen-weighted mean (S150)."""
    delta = model.operating_point.delta
    k = np.asarray(model.K)
    w = 2 * math.pi * 375 / 60
    # bus 4 (0-based 3): neighbours 1, 5, 9, padded with itself at weight 0
    nb, kw = np.array([0, 4, 8, 3]), np.array([k[3, 0], k[3, 4], k[3, 8], 0.0])
    inflow = sum(k[3, j] * math.sin(delta[j] - delta[3]) for j in range(9))
    assert float(power_inflow(kw, delta[3], delta[nb])) == pytest.approx(inflow, rel=1e-14)
    assert float(bus_rate(0.3, kw, delta[3], delta[nb], 2.0)) == pytest.approx((0.3 + inflow) / 2, rel=1e-14)
    # generator 2 (bus 2, 0-based 1) sends 1.63 p.u.
    t_e = grid_torque(np.array([k[1, 7]]), delta[1], np.array([delta[7]]), w)
    assert float(t_e) == pytest.approx(163e6 / w, rel=1e-12)
    np.testing.assert_allclose(
        model.electrical_torque(model.initial_state()), np.array([67, 163, 85]) * 1e6 / w, rtol=1e-12
    )
    coi = coi_angle(delta[:3], np.array([67.0, 163.0, 85.0]))
    assert float(coi) == pytest.approx((67 * delta[0] + 163 * delta[1] + 85 * delta[2]) / 315, rel=1e-14)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(K=np.triu(case9_susceptance())), "K: expected a symmetric"),
        (dict(gen_buses=(0, 1, 1)), "gen_buses: expected distinct"),
        (dict(units=(PeltonParams.hierarchical(67e6),)), "units: expected 3 PeltonParams"),
        (
            dict(units=(PeltonParams(), PeltonParams.hierarchical(1.63e8), PeltonParams.hierarchical(8.5e7))),
            "one torsion_form",
        ),
        (
            dict(disturbance=LoadStep(bus=1, load=0.2, t_on=5.0, t_off=30.0)),
            "disturbance bus: expected a bus without",
        ),
        (dict(disturbance=LoadStep(bus=8, load=0.2, t_on=30.0, t_off=5.0)), "t_on <= t_off"),
        (dict(D=-2.0), "D: expected positive"),
        (dict(D=np.ones(4)), "D: expected a scalar or 6"),
        (dict(P_inj=SPEC_P_INJ[:8]), "P_inj: expected 9 finite"),
        (dict(S_base=0.0), "S_base: expected a positive"),
        (dict(unit_time_scale=0.0), "unit_time_scale: expected a positive"),
    ],
)
def test_invalid_construction_is_rejected_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TurbineGrid.ieee9(**kwargs)


# -- an independent transcription ----------------------------------------------------------------
def consts(p: PeltonParams) -> dict:
    names = (
        "k_p k_i k_d T_y T_e T_q h0 y_r Z_n s_e g H_rated e_x0 e_y0 e_h D_omega m1 m2 e1 e2 k_gen k_run "
        "k_cross c_gen c_run c_cross c_t delta0 k_r f_fric K_seal0 D_seal tau_seal A_vortex f_vortex_ratio "
        "k_hyd_load k_bld_load omega_rated M_gB k_y J1_eff J2_eff J_tot J_eq K11 K22 K12 m01 m02 C_q"
    ).split()
    return {n: float(getattr(p, n)) for n in names}


def reference_rhs(t, x, cs, k, p_inj, step=(8, 0.20, 5.0, 30.0)):
    """The coupled system written from the spec (3.6 equations, 3.7 "[REPO]" grid unit), numpy only."""
    dx = np.zeros_like(x)
    delta = np.concatenate([x[[8, 27, 46]], x[57:]])
    inflow = np.array([sum(k[i, j] * math.sin(delta[j] - delta[i]) for j in range(9)) for i in range(9)])
    for g, c in enumerate(cs):
        s = x[19 * g : 19 * g + 19]
        x2, h, q, x_n, x_int, n, w, dl = s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8]
        xg, yg, vxg, vyg, xr, yr, vxr, vyr, al, be = s[9:19]
        wr = c["omega_rated"]
        phi1 = dl + wr * t
        m_t = c["M_gB"] * (1 + c["e_x0"] * n + c["e_y0"] * (q - 1) + c["e_h"] * h)
        t_e = 100e6 / wr * (-inflow[g])
        dw = (m_t - t_e - c["D_omega"] * (w - wr)) / c["J_tot"]
        dn = dw / wr
        e = 0.0 - n
        u_pid = c["k_p"] * e + c["k_i"] * x_int - c["k_d"] * dn
        u = min(max(u_pid, 0.0), 1.0)
        dint = 0.0 if (u_pid > 1 and e > 0) or (u_pid < 0 and e < 0) else e
        se = c["s_e"] * (min(max(x_n, 0.0), 1.0) + 1)
        area = max(c["m01"] * se - c["m02"] * se**2, 1e-8)
        q_star = c["C_q"] * area * math.sqrt(2 * c["g"] * c["H_rated"] * (1 + h))
        dh = -(math.pi**2 / c["T_e"] ** 2) * x2 + (c["h0"] - h / c["y_r"] ** 2 - q**2) / (
            c["Z_n"] * c["T_e"] ** 3
        )
        # generator lateral with rub
        r = math.hypot(xg, yg)
        rub = (r - c["delta0"]) * c["k_r"] / r if r > c["delta0"] else 0.0
        kg = c["k_gen"] + c["K11"]
        ub1 = c["m1"] * c["e1"] * w**2
        fxg = -kg * xg - c["K12"] * xr - c["k_cross"] * yg - c["c_gen"] * vxg - c["c_cross"] * vyg
        fyg = -kg * yg - c["K12"] * yr + c["k_cross"] * xg - c["c_gen"] * vyg + c["c_cross"] * vxg
        fxg += ub1 * math.cos(phi1) - rub * (xg - c["f_fric"] * yg)
        fyg += ub1 * math.sin(phi1) - rub * (c["f_fric"] * xg + yg)
        axg, ayg = fxg / c["m1"], fyg / c["m1"]
        # runner lateral with the grid-unit extras
        phi2 = phi1 - al
        kr = c["k_run"] + c["K22"]
        seal = c["tau_seal"] * w * c["D_seal"]
        load = (q * math.sqrt(1 + h)) ** 2
        a_hyd = c["A_vortex"] * q + c["k_hyd_load"] * load
        f_bl = 0.1 * c["A_vortex"] + c["k_bld_load"] * load
        fv, fb = c["f_vortex_ratio"] * w * t, c["Z_n"] * w * t
        ub2 = c["m2"] * c["e2"] * w**2
        react = 0.12 * abs(m_t) / 0.55
        fxr = (
            -kr * xr
            - c["K12"] * xg
            - 0.8 * c["k_cross"] * yr
            - c["K_seal0"] * xr
            - seal * yr
            - c["c_run"] * vxr
        )
        fyr = (
            -kr * yr
            - c["K12"] * yg
            + 0.8 * c["k_cross"] * xr
            + seal * xr
            - c["K_seal0"] * yr
            - c["c_run"] * vyr
        )
        fxr += ub2 * math.cos(phi2) + a_hyd * math.sin(fv) + f_bl * math.sin(fb) + react * math.cos(phi2)
        fxr += (q * math.sqrt(1 + h) - 1) * c["M_gB"] / 0.55
        fyr += ub2 * math.sin(phi2) + a_hyd * math.cos(fv) + f_bl * math.cos(fb) + react * math.sin(phi2)
        axr, ayr = fxr / c["m2"], fyr / c["m2"]
        tau_gen = -c["m1"] * c["e1"] * (ayg * math.cos(phi1) - axg * math.sin(phi1)) / c["J1_eff"]
        tau_run = c["m2"] * c["e2"] * (ayr * math.cos(phi2) - axr * math.sin(phi2)) / c["J2_eff"]
        dbe = (
            m_t / c["J1_eff"]
            + t_e / c["J2_eff"]
            - (c["k_y"] * al + c["c_t"] * be) / c["J_eq"]
            + tau_gen
            - tau_run
        )
        dx[19 * g : 19 * g + 19] = [
            x2, h, dh, (q_star - q) / c["T_q"], (u - x_n) / c["T_y"], dint, dn, dw, w - wr,
            vxg, vyg, axg, ayg, vxr, vyr, axr, ayr, be, dbe,
        ]  # fmt: skip
    p = p_inj.copy()
    if step[2] <= t < step[3]:
        p[step[0]] -= step[1]
    dx[57:] = (p[3:] + inflow[3:]) / 2.0
    return dx


def test_vector_field_matches_the_spec_transcription(model, delta_ref):
    """At random states around the operating point (one generator rubbing the stator), before, inside
    and after the load step, the vector field equals the numpy transcription to 1e-10 relative."""
    cs = [consts(p) for p in model.units]
    k = case9_susceptance()
    rng = np.random.default_rng(7)
    x0 = np.asarray(model.initial_state())
    scale = np.tile(
        [1e-2, 1e-2, 2e-2, 5e-2, 5e-2, 5e-2, 1e-3, 0.04, 0.1] + [2e-4] * 4 + [2e-4] * 4 + [1e-3, 1e-2], 3
    )
    scale = np.concatenate([scale, np.full(6, 0.1)])
    for t, rub in ((1.3, False), (7.7, True), (31.0, False)):
        x = x0 + scale * rng.normal(size=63)
        if rub:
            x[19 + 9] = 5e-3  # generator 2 outside its 4 mm clearance
        ours = np.asarray(model.vector_field(t, jnp.asarray(x), jnp.zeros(0), model.params))
        ref = reference_rhs(t, x, cs, k, SPEC_P_INJ)
        np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max() * 1e-3)
    # the operating point the transcription uses is the independent root solve's
    np.testing.assert_allclose(x0[[8, 27, 46]], delta_ref[:3], atol=1e-10)


def test_step_response_against_scipy_dop853(model):
    """Starting at the operating point when the +20 MW step begins (t0 = 5 s), RK4 (dt 2e-4 s) on the
    model and DOP853 (rtol 1e-10) on the transcription agree over 1 s; the speeds dip and bus 9 lags."""
    t0, n_steps, dt = 5.0, 5000, 2e-4
    x0 = np.asarray(model.initial_state())
    traj = simulate_discrete(discretise(model, dt, "rk4"), x0, None, t0=t0, n_steps=n_steps)
    cs = [consts(p) for p in model.units]
    k = case9_susceptance()
    t_eval = t0 + dt * np.arange(0, n_steps + 1, 500)
    sol = solve_ivp(
        reference_rhs, (t0, t_eval[-1]), x0, method="DOP853", t_eval=t_eval, rtol=1e-10, atol=1e-14,
        args=(cs, k, SPEC_P_INJ),
    )  # fmt: skip
    assert sol.success
    ours = np.asarray(traj.states)[::500]
    ref = sol.y.T
    # per-state scale: the range the state covers, or its size when it barely moves
    span = np.maximum(ref.max(0) - ref.min(0), 1e-3 * np.abs(ref).max(0) + 1e-12)
    assert np.max(np.abs(ours - ref) / span) < 1e-5
    n_idx = [6, 25, 44]
    assert np.all(ref[-1, n_idx] < -1e-5)  # every unit slows after the extra demand
    assert ref[-1, -1] < x0[-1] - 1e-3  # bus 9 angle falls behind


def test_operating_point_is_kept_by_a_simulation_before_the_step(model):
    """Two seconds of RK4 from the operating point at t = 0: the speeds, rotor and bus angles, flows
    and strokes stay at their operating values while the rotors vibrate."""
    x0 = np.asarray(model.initial_state())
    traj = simulate_discrete(discretise(model, 1e-3, "rk4"), x0, None, t0=0.0, n_steps=2000)
    xs = np.asarray(traj.states)
    assert np.all(np.isfinite(xs))
    electro = np.concatenate([19 * g + np.arange(9) for g in range(3)] + [np.arange(57, 63)])
    np.testing.assert_allclose(
        xs[:, electro], np.broadcast_to(x0[electro], (2001, electro.size)), rtol=0, atol=1e-10
    )
    lateral = xs[:, [9, 10, 28, 29, 47, 48]]
    assert np.ptp(lateral, axis=0).min() > 1e-6 and np.abs(lateral).max() < 4e-3  # inside the clearance
