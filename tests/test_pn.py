"""Probabilistic-numeric ODE filter: IWP closed forms, convergence, calibration, probdiffeq agreement."""

from __future__ import annotations

import dataclasses

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
    n, t_end = 60, 3.0

    @jax.jit  # probdiffeq's solve as one program (op by op, its set-up compiled ~200 small ones)
    def reference(x0):
        tcoeffs, _ = pdx.jetexpand_ode_via_jvp(num=2)(ode, [x0], t=0.0)
        prior = ssm.prior_wiener_integrated(tcoeffs)
        constraint = ssm.constraint_ode_ts0(ode) if method == "ek0" else ssm.constraint_ode_ts1(ode)
        solver = pdx.solver(constraint=constraint, strategy=pdx.strategy_filter())
        ref = ivpsolve.solve_fixed_grid(solver=solver)(prior, grid=jnp.linspace(0.0, t_end, n + 1))
        return ref.u.mean[0], ref.u.std[0]

    ref_mean, ref_std = (np.asarray(v) for v in reference(x0))
    ours = pn_solve(
        PNFilter(duffing, q=2, method=method, calibrate=False),
        params,
        x0,
        jnp.zeros(2),
        t_end / n,
        jnp.zeros((n + 1, 1)),
    )
    np.testing.assert_allclose(np.asarray(ours.mean), ref_mean, rtol=1e-9, atol=1e-11)
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


def _final_state(pn, params, x0, state_sd, h, us, ys, y_mask, chol_R):
    """Run ``pn.step`` over the grid (as pn_solve), returning the last state and the summed log-lik."""
    state = pn.init(params, x0, state_sd, us[0])
    state, info0 = pn.step(state, params, 0.0, us[0], ys[0], y_mask[0], chol_R, ode_update=False)

    def body(s, inp):
        u, y, m = inp
        s, info = pn.step(s, params, h, u, y, m, chol_R)
        return s, (s.mean, pn.marginal_std(s), info.loglik)

    last, (means, stds, lls) = jax.lax.scan(body, state, (us[1:], ys[1:], y_mask[1:]))
    return last, means, stds, info0.loglik + jnp.cumsum(lls)


def _covariance(state, d):
    """Dense covariance of the stacked (derivative-major) state from a dense or block factor."""
    chol = np.asarray(state.chol)
    if chol.ndim == 2:
        return chol @ chol.T
    n = chol.shape[-1]
    cov = np.zeros((d * n, d * n))
    for i in range(d):
        idx = i + d * np.arange(n)
        cov[np.ix_(idx, idx)] = chol[i] @ chol[i].T
    return cov


def _pn_problem(name):
    """Model, measure, shared diffusion, x0, state_sd, h, inputs, data, chol_R: a PN-SMC model, short."""
    from twinfer.experiments.emps import IDIM_PARAMS
    from twinfer.models import EMPS, BoucWen
    from twinfer.sim import discretise

    rng = np.random.default_rng(3)
    if name == "duffing":
        model, h, n = _duffing(0.2, 1.0), 0.02, 200
        x0, state_sd, measure, shared = jnp.array([0.5, 0.0]), jnp.array([0.01, 0.0]), None, False
        us = np.sin(3.0 * h * np.arange(n))[:, None]
        out, noise = (lambda x: x[:1]), 1e-3
    elif name == "emps":
        model, h, n = EMPS(**IDIM_PARAMS), 1e-3, 200
        x0, state_sd, measure, shared = jnp.array([0.1, 0.0]), jnp.array([2e-5, 1e-3]), None, True
        us = 30.0 * np.sin(2 * np.pi * 2.0 * h * np.arange(n))[:, None]
        out, noise = (lambda x: x[:1]), 2e-5
    else:
        model, h, n = BoucWen(), 1.0 / 750, 200
        x0, state_sd, shared = jnp.zeros(3), jnp.zeros(3), False
        measure = lambda X, u, p: X[4:5]  # noqa: E731  (the case's acceleration C-dot X of v)
        us = 20.0 * np.sin(2 * np.pi * 15.0 * h * np.arange(n))[:, None]
        out, noise = (lambda x: model.output(0.0, x, jnp.zeros(1), model.params)[1:]), 1e-2
    step = discretise(model, h / 10, "rk4")

    def sample(x, u):
        y = out(x)
        return jax.lax.fori_loop(0, 10, lambda j, xx: step.transition(0.0, xx, u, model.params), x), y

    ys = jax.jit(lambda: jax.lax.scan(sample, x0, jnp.asarray(us))[1])()
    ys = np.asarray(ys) + noise * rng.normal(size=(n, 1))
    return model, measure, shared, x0, state_sd, h, jnp.asarray(us), jnp.asarray(ys), noise * jnp.eye(1)


@pytest.mark.parametrize("name", ["duffing", "emps", "boucwen"])
def test_blockdiag_equals_dense(name):
    """EK0 with a diagonal diffusion and a measurement touching one ODE dimension keeps the covariance
    block-diagonal (specs 1.4, _structure): the block filter's means, covariances and per-step
    log-likelihoods equal the dense filter's to rounding on the PN-SMC models (calibrated, with data,
    some samples unobserved)."""
    model, measure, shared, x0, state_sd, h, us, ys, chol_R = _pn_problem(name)
    mask = jnp.asarray(np.arange(ys.shape[0]) % 7 != 3)[:, None]
    run = eqx.filter_jit(_final_state)
    res = {}
    for structure in ("dense", "blockdiag"):
        pn = PNFilter(model, q=2, measure=measure, shared_diffusion=shared, structure=structure)
        res[structure] = run(pn, model.params, x0, state_sd, h, us, ys, mask, chol_R)
    (sd, md, stdd, lld), (sb, mb, stdb, llb) = res["dense"], res["blockdiag"]
    assert sd.chol.ndim == 2 and sb.chol.ndim == 3
    # each stacked component relative to its own scale over the run (some cross zero)
    err = np.abs(np.asarray(mb) - np.asarray(md)) / np.max(np.abs(np.asarray(md)), axis=0)
    assert np.max(err) < 1e-10, np.max(err, axis=0)
    np.testing.assert_allclose(np.asarray(stdb), np.asarray(stdd), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(llb), np.asarray(lld), rtol=1e-10)
    cov_d, cov_b = _covariance(sd, model.n_state), _covariance(sb, model.n_state)
    np.testing.assert_allclose(cov_b, cov_d, rtol=1e-8, atol=1e-12 * np.max(np.abs(cov_d)))
    np.testing.assert_allclose(np.asarray(sb.diffusion), np.asarray(sd.diffusion), rtol=1e-10)


def test_structure_auto_choice_and_errors():
    """ "auto" is block-diagonal exactly where that is exact (EK0, one measured dimension), dense for EK1
    or a measurement coupling dimensions; "blockdiag" raises where it is not exact; a declared or probed
    pattern that the measurement breaks at run time raises (eqx.error_if)."""
    from twinfer.models import BoucWen

    duffing = _duffing(0.1, 1.0)
    u0 = jnp.zeros(1)
    assert PNFilter(duffing).init(duffing.params, jnp.ones(2), jnp.zeros(2), u0).chol.shape == (2, 3, 3)
    assert PNFilter(duffing, method="ek1").init(duffing.params, jnp.ones(2), jnp.zeros(2), u0).chol.ndim == 2
    bw = BoucWen()
    # the model's default output (x, a) has an acceleration that depends on all three states
    assert PNFilter(bw).blocks(bw.params, u0) is None
    with pytest.raises(ValueError, match="blockdiag"):
        PNFilter(bw, structure="blockdiag").blocks(bw.params, u0)
    assert PNFilter(bw, measure=lambda X, u, p: X[4:5]).blocks(bw.params, u0) == (1,)
    two = PNFilter(bw, measure=lambda X, u, p: jnp.stack([X[0], X[4]]))
    assert two.blocks(bw.params, u0) is None  # two sensors: only a declaration vouches for a diagonal R
    assert dataclasses.replace(two, measure_blocks=(0, 1)).blocks(bw.params, u0) == (0, 1)
    with pytest.raises(ValueError, match="measure_blocks"):
        dataclasses.replace(two, measure_blocks=(0, 2)).blocks(bw.params, u0)
    with pytest.raises(ValueError, match="ek0"):
        PNFilter(duffing, method="ek1", structure="blockdiag")
    with pytest.raises(ValueError, match="structure"):
        PNFilter(duffing, structure="diag")
    # depends on the velocity only above 10: the generic probe point (values near 1) misses it
    sneaky = PNFilter(duffing, measure=lambda X, u, p: X[:1] + jnp.maximum(X[1:2] - 10.0, 0.0))
    ys = jnp.zeros((3, 1))
    with pytest.raises(Exception, match="depends on an ODE dimension"):
        pn_solve(
            sneaky,
            duffing.params,
            jnp.array([0.0, 20.0]),
            jnp.zeros(2),
            0.01,
            jnp.zeros((3, 1)),
            ys,
            chol_R=jnp.eye(1),
        )


def test_pn_likelihood_solve_is_the_samplers_filter_and_mixes_particles():
    """PNLikelihood.solve runs the likelihood's own steps (its log-likelihood is the sum of the sampler's
    increments); posterior_states of identical particles is that one filter, and of two particles
    the mixture's moments (law of total variance), in batches or all at once."""
    from twinfer.infer.pn import PNLikelihood

    model = Chain([1.0], [4.0], [0.2], forced_dofs=[1], outputs=["x1"])
    t = np.arange(60) * 0.05
    us = np.sin(3.0 * t)[:, None]
    ys = 0.1 * np.sin(2.0 * t)[:, None]
    lik = PNLikelihood(
        pn=PNFilter(model, q=2), base_params=model.params, names=("k1",), x0=jnp.zeros(2),
        state_sd=jnp.full(2, 0.1), h=0.05, us=jnp.asarray(us), ys=jnp.asarray(ys),
        y_mask=jnp.ones((60, 1), bool), chol_R=0.01 * jnp.eye(1),
    )  # fmt: skip
    theta = jnp.array([4.0])
    sol = lik.solve(theta)
    carry, total = lik.init(theta), 0.0
    step = jax.jit(lambda c, th, k: lik.step(c, th, k))  # one program for the 60 steps (op by op: ~10 s)
    for k in range(60):
        carry, ll = step(carry, theta, k)
        total += float(ll)
    assert float(sol.loglik) == pytest.approx(total, rel=1e-10)
    same = lik.posterior_states(jnp.stack([theta, theta]), t)
    np.testing.assert_allclose(same.means, sol.mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(same.stds, sol.std, rtol=1e-8, atol=1e-12)
    other = lik.solve(jnp.array([6.0]))
    mix = lik.posterior_states(jnp.array([[4.0], [6.0]]), t, ("x", "v"))
    mean = (sol.mean + other.mean) / 2
    var = (sol.std**2 + other.std**2) / 2 + ((sol.mean - other.mean) / 2) ** 2
    np.testing.assert_allclose(mix.means, mean, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(mix.stds, np.sqrt(var), rtol=1e-8, atol=1e-12)
    assert mix.state_names == ("x", "v") and np.all(np.isfinite(mix.stds))
    # in batches of two (the last padded with a copy that must not count): the moments of all three
    three = jnp.array([[4.0], [6.0], [5.0]])
    whole, batched = lik.posterior_states(three, t), lik.posterior_states(three, t, batch=2)
    np.testing.assert_allclose(batched.means, whole.means, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(batched.stds, whole.stds, rtol=1e-10, atol=1e-14)
