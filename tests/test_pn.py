"""Probabilistic-numeric ODE filter: IWP closed forms, convergence, calibration, probdiffeq agreement."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from twinfer.infer.pn import PNFilter, iwp_transition, iwp_transition_1d, pn_solve
from twinfer.models import Chain


def test_iwp_closed_forms_match_spec_tables():
    """A1(1), Q1(1) for q = 1, 2, 3 equal the hand-computed values of specs/pn-smc.md 1.2 (Eq. 15)."""
    a, q = iwp_transition_1d(1, 1.0)
    np.testing.assert_allclose(a, [[1, 1], [0, 1]])
    np.testing.assert_allclose(q, [[1 / 3, 1 / 2], [1 / 2, 1]])
    a, q = iwp_transition_1d(2, 1.0)
    np.testing.assert_allclose(a, [[1, 1, 1 / 2], [0, 1, 1], [0, 0, 1]])
    np.testing.assert_allclose(q, [[1 / 20, 1 / 8, 1 / 6], [1 / 8, 1 / 3, 1 / 2], [1 / 6, 1 / 2, 1]])
    a, q = iwp_transition_1d(3, 1.0)
    np.testing.assert_allclose(a[0], [1, 1, 1 / 2, 1 / 6])
    np.testing.assert_allclose(q[0], [1 / 252, 1 / 72, 1 / 30, 1 / 24])
    np.testing.assert_allclose(q[1], [1 / 72, 1 / 20, 1 / 8, 1 / 6])
    _, q = iwp_transition_1d(2, 1 / 4096)
    np.testing.assert_allclose(np.diag(q), [4.3368e-20, 4.8506e-12, 2.4414e-4], rtol=1e-4)
    np.testing.assert_allclose([q[0, 1], q[0, 2], q[1, 2]], [4.4409e-16, 2.4253e-12, 2.9802e-8], rtol=1e-4)


@pytest.mark.parametrize("q", [1, 2, 3])
def test_iwp_semigroup_and_integral(q):
    """A(h1+h2) = A(h1) A(h2); Q(h1+h2) = A(h2) Q(h1) A(h2)^T + Q(h2); chol Q is a factor of Q (Eq. 13)."""
    h1, h2, d = 0.3, 0.45, 2
    gamma = jnp.array([2.0, 0.5])
    a1, l1 = iwp_transition(q, d, h1, gamma)
    a2, l2 = iwp_transition(q, d, h2, gamma)
    a12, l12 = iwp_transition(q, d, h1 + h2, gamma)
    np.testing.assert_allclose(a12, a2 @ a1, atol=1e-14)
    np.testing.assert_allclose(l12 @ l12.T, a2 @ l1 @ l1.T @ a2.T + l2 @ l2.T, atol=1e-13)
    _, q1 = iwp_transition_1d(q, h1)
    np.testing.assert_allclose(l1 @ l1.T, np.kron(q1, np.diag(gamma)), atol=1e-14)
    assert np.all(np.linalg.eigvalsh(np.asarray(q1)) > 0)


N_MAX = 160
T_END = 3.0


def _duffing(c: float, kappa: float) -> Chain:
    return Chain([1.0], [4.0], [c], cubic_stiffness=[kappa], outputs=["x1"])


@eqx.filter_jit
def _solve(pn, params, x0, hs, us):
    return pn_solve(pn, params, x0, jnp.zeros(2), hs, us)


def _grid_steps(n: int) -> jnp.ndarray:
    """Per-step lengths of an n-step grid on [0, T_END], zero-padded to N_MAX (one compiled solve)."""
    return jnp.where(jnp.arange(N_MAX) < n, T_END / n, 0.0)


def _reference(c: float, kappa: float, forcing: bool, ts) -> np.ndarray:
    def rhs(t, x):
        u = np.sin(3.0 * t) if forcing else 0.0
        return [x[1], u - c * x[1] - 4.0 * x[0] - kappa * x[0] ** 3]

    return solve_ivp(rhs, (0, ts[-1]), [0.5, 0.0], t_eval=ts, method="DOP853", rtol=1e-13, atol=1e-13).y.T


@pytest.mark.parametrize("method", ["ek0", "ek1"])
@pytest.mark.parametrize("q", [1, 2])
def test_convergence_order_linear_and_nonlinear(method, q):
    """Halving h reduces the final-time error of the mean by at least 2^q on a linear (kappa = 0) and a
    Duffing oscillator (global order q of the IWP(q) filter, Kersting et al. 2020; observed ~q+1)."""
    for c, kappa in ((0.0, 0.0), (0.1, 2.0)):
        model = _duffing(c, kappa)
        pn = PNFilter(model, q=q, method=method)
        ref = _reference(c, kappa, False, np.array([0.0, T_END]))[-1]
        errs = []
        for n in (40, 80, 160):
            sol = _solve(pn, model.params, jnp.array([0.5, 0.0]), _grid_steps(n), jnp.zeros((N_MAX + 1, 1)))
            errs.append(float(np.max(np.abs(np.asarray(sol.mean[-1]) - ref))))
        orders = np.log2(np.asarray(errs[:-1]) / np.asarray(errs[1:]))
        assert np.all(orders > q - 0.1), (c, kappa, errs, orders)


@pytest.mark.parametrize(("method", "most"), [("ek0", 0.7), ("ek1", 0.9)])
def test_calibrated_band_covers_error(method, most):
    """With the running quasi-MLE diffusion, |error| <= 2 std on most grid points of a forced Duffing
    oscillator. EK0 ignores the Jacobian of f, so its position band is narrower than the global error
    on part of the run (the paper's remark on a global-average diffusion, Sec. 4.2); EK1 covers ~all."""
    model = _duffing(0.2, 1.0)
    h = T_END / N_MAX
    ts = h * np.arange(N_MAX + 1)
    us = jnp.asarray(np.sin(3.0 * ts))[:, None]
    sol = _solve(
        PNFilter(model, q=2, method=method), model.params, jnp.array([0.5, 0.0]), _grid_steps(N_MAX), us
    )
    err = np.abs(np.asarray(sol.mean) - _reference(0.2, 1.0, True, ts))[1:]
    std = np.asarray(sol.std)[1:]
    assert np.max(err) < 1e-3
    assert np.mean(err <= 2.0 * std) > most, np.mean(err <= 2.0 * std, axis=0)


def test_diffusion_shrinks_with_step():
    """The calibrated integration standard deviation at T decreases as h decreases (specs 8.3)."""
    model = _duffing(0.0, 0.0)
    pn = PNFilter(model, q=2)
    stds = []
    for n in (40, 80, 160):
        sol = _solve(pn, model.params, jnp.array([0.5, 0.0]), _grid_steps(n), jnp.zeros((N_MAX + 1, 1)))
        stds.append(float(sol.std[-1, 0]))
    assert stds[0] > stds[1] > stds[2] > 0


@pytest.mark.parametrize("method", ["ek0", pytest.param("ek1", marks=pytest.mark.slow)])
def test_agrees_with_probdiffeq(method):
    """Same IWP(2) prior, same Taylor initialisation, unit diffusion, fixed grid: the filtering means and
    standard deviations equal probdiffeq's dense filter (ts0 for EK0, ts1 for EK1)."""
    from probdiffeq import ivpsolve
    from probdiffeq import probdiffeq as pdx

    duffing = Chain([1.0], [1.0], [0.1], cubic_stiffness=[2.0], outputs=["x1"])
    params = duffing.params

    def vf(y, *, t):
        return duffing.vector_field(t, y, jnp.zeros(1), params)

    ode = pdx.ode(vf)
    ssm = pdx.state_space_model_dense()
    x0 = jnp.array([1.0, 0.0])
    tcoeffs, _ = pdx.jetexpand_ode_via_jvp(num=2)(ode, [x0], t=0.0)
    prior = ssm.prior_wiener_integrated(tcoeffs)
    constraint = ssm.constraint_ode_ts0(ode) if method == "ek0" else ssm.constraint_ode_ts1(ode)
    solver = pdx.solver(constraint=constraint, strategy=pdx.strategy_filter())
    n, t_end = 60, 3.0
    grid = jnp.linspace(0.0, t_end, n + 1)
    ref = ivpsolve.solve_fixed_grid(solver=solver)(prior, grid=grid)
    ref_mean = np.asarray(ref.u.mean[0])
    ours = pn_solve(
        PNFilter(duffing, q=2, method=method, calibrate=False),
        params,
        x0,
        jnp.zeros(2),
        t_end / n,
        jnp.zeros((n + 1, 1)),
    )
    np.testing.assert_allclose(np.asarray(ours.mean), ref_mean, rtol=1e-9, atol=1e-11)
    ref_std = np.asarray(ref.u.std[0])
    np.testing.assert_allclose(np.asarray(ours.std), ref_std, rtol=1e-6, atol=1e-12)


def test_data_update_loglik_first_step():
    """At t_0 with a known state the data update gives the Gaussian density of y_0 (Eq. 20)."""
    model = Chain([1.0], [4.0], [0.0], outputs=["x1"])
    x0 = jnp.array([0.3, 0.0])
    ys = jnp.array([[0.35]])
    sol = pn_solve(
        PNFilter(model, q=2),
        model.params,
        x0,
        jnp.zeros(2),
        0.01,
        jnp.zeros((1, 1)),
        ys,
        chol_R=jnp.eye(1) * 0.1,
    )
    expected = -0.5 * np.log(2 * np.pi * 0.01) - 0.5 * (0.05 / 0.1) ** 2
    np.testing.assert_allclose(float(sol.loglik), expected, rtol=1e-12)


def test_likelihood_peaks_at_true_stiffness():
    """The data log-likelihood sum_k -phi_k (Eq. 20) of noisy positions is highest at the true stiffness."""
    h, n = T_END / N_MAX, N_MAX
    ts = h * np.arange(n + 1)
    y_true = 0.5 * np.cos(np.sqrt(5.0) * ts)
    ys = jnp.asarray(y_true + 1e-3 * np.random.default_rng(0).normal(size=n + 1))[:, None]
    model = _duffing(0.0, 0.0)
    pn = PNFilter(model, q=2)
    stiffness = jnp.array([4.6, 4.9, 5.0, 5.1, 5.4])

    def loglik(k):
        params = {**model.params, "k": jnp.array([k])}
        return pn_solve(
            pn,
            params,
            jnp.array([0.5, 0.0]),
            jnp.zeros(2),
            h,
            jnp.zeros((n + 1, 1)),
            ys,
            chol_R=1e-3 * jnp.eye(1),
        ).loglik

    lls = np.asarray(jax.jit(jax.vmap(loglik))(stiffness))
    assert np.argmax(lls) == 2, lls
    assert np.all(np.diff(lls[:3]) > 0) and np.all(np.diff(lls[2:]) < 0)


def test_bad_settings_raise():
    model = Chain([1.0], [4.0], [0.0], outputs=["x1"])
    with pytest.raises(ValueError, match="method"):
        PNFilter(model, method="ek2")
    with pytest.raises(ValueError, match="q"):
        PNFilter(model, q=0)
