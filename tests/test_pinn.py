"""PINN network, physics operator, losses and trainer (specs/pinn.md 2.2-2.6)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.infer.pinn import (
    LossWeights,
    PositiveParameters,
    StateNetwork,
    TrainSettings,
    chain_residuals,
    layer_estimate,
    observed_dofs,
    predicted_force,
    sensor_losses,
    sensor_problem,
    train,
)
from twinfer.models import Chain


def test_residual_zero_on_closed_form_free_vibration():
    """A damped free vibration u = exp(-zeta w t) cos(w_d t) of a 1-DOF chain has zero residuals."""
    m, k, c = 10.0, 15.0, 1.0
    chain = Chain(m, k, c, n_dof=1)
    w = np.sqrt(k / m)
    zeta = c / (2 * np.sqrt(k * m))
    wd = w * np.sqrt(1 - zeta**2)

    def u(t):
        return jnp.exp(-zeta * w * t) * jnp.cos(wd * t)

    def z(t):
        return jnp.stack([u(t), jax.grad(u)(t)])

    ts = jnp.linspace(0.0, 20.0, 201)
    zs, dzs = jax.vmap(lambda t: jax.jvp(z, (t,), (1.0,)))(ts)
    r_cc, r_ode, _ = chain_residuals(chain, chain.params, zs, dzs, jnp.zeros((201, 1)))
    np.testing.assert_allclose(r_cc, 0.0, atol=1e-13)
    np.testing.assert_allclose(r_ode, 0.0, atol=1e-13)


def _duffing_matrices(chain):
    """K, C, K_n of specs 1.2 written out independently of the Chain model."""
    n = chain.n_dof
    k, c, kap = (np.asarray(chain.params[g]) for g in ("k", "c", "kappa"))
    big_k, big_c, k_n = np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n))
    for i in range(n):
        big_k[i, i] = k[i] + (k[i + 1] if i + 1 < n else 0.0)
        big_c[i, i] = c[i] + (c[i + 1] if i + 1 < n else 0.0)
        k_n[i, i] = kap[i]
        if i + 1 < n:
            big_k[i, i + 1] = big_k[i + 1, i] = -k[i + 1]
            big_c[i, i + 1] = big_c[i + 1, i] = -c[i + 1]
            k_n[i, i + 1] = -kap[i + 1]
    return big_k, big_c, k_n


def test_predicted_force_matches_eq15_on_manufactured_solution():
    """For any smooth u(t), Eq 15 rows n:2n equal M u'' + C u' + K u + K_n g_k(u), and with that force
    as the measured input the force-balance residual vanishes (manufactured exact solution)."""
    chain = Chain(
        [10.0, 12.0, 9.0], [15.0, 14.0, 16.0], [1.0, 0.8, 1.2], cubic_stiffness=[100.0, 90.0, 110.0]
    )
    freqs = jnp.array([0.3, 0.5, 0.7])

    def u(t):
        return 0.2 * jnp.sin(2 * jnp.pi * freqs * t + jnp.arange(3.0))

    def z(t):
        return jnp.concatenate([u(t), jax.jacfwd(u)(t)])

    ts = jnp.linspace(0.0, 5.0, 51)
    zs, dzs = jax.vmap(lambda t: jax.jvp(z, (t,), (1.0,)))(ts)
    big_k, big_c, k_n = _duffing_matrices(chain)
    x = np.asarray(zs[:, :3])
    rel = x - np.concatenate([np.zeros((51, 1)), x[:, :-1]], axis=1)
    expected = (
        np.asarray(dzs[:, 3:]) * np.asarray(chain.params["m"])
        + np.asarray(zs[:, 3:]) @ big_c.T
        + x @ big_k.T
        + rel**3 @ k_n.T
    )
    f_pred = predicted_force(chain, chain.params, zs, dzs)
    np.testing.assert_allclose(f_pred, expected, rtol=1e-11, atol=1e-11)
    _, r_ode, _ = chain_residuals(chain, chain.params, zs, dzs, f_pred)
    np.testing.assert_allclose(r_ode, 0.0, atol=1e-12)


def test_network_rate_is_time_derivative():
    """state_and_rate returns dz/dt (chain rule through the normalised time) to finite-difference accuracy."""
    net = StateNetwork(jax.random.key(0), 4, 2.0, 10.0, width=16, depth=2, n_fourier=4, max_cycles=5.0)
    t, h = 4.3, 1e-5
    _, dz = net.state_and_rate(jnp.asarray(t))
    fd = (net(jnp.asarray(t + h)) - net(jnp.asarray(t - h))) / (2 * h)
    np.testing.assert_allclose(dz, fd, rtol=1e-7, atol=1e-9)


def test_anchored_network_starts_at_the_initial_state():
    """With initial_state the output equals it at t0 exactly, and batch agrees with single calls."""
    z0 = np.array([0.1, -0.2, 0.0, 0.3])
    net = StateNetwork(jax.random.key(2), 4, 1.0, 5.0, width=8, depth=2, initial_state=z0)
    np.testing.assert_allclose(net(jnp.asarray(1.0)), z0, atol=1e-15)
    ts = jnp.array([1.0, 2.5, 6.0])
    zs, dzs = net.batch(ts)
    z1, dz1 = net.state_and_rate(ts[1])
    np.testing.assert_allclose(zs[0], z0, atol=1e-15)
    np.testing.assert_allclose(zs[1], z1, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dzs[1], dz1, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="initial_state: expected 4 finite values"):
        StateNetwork(jax.random.key(2), 4, 1.0, 5.0, initial_state=[0.0, 1.0])


def _small_problem(n_obs=12):
    chain = Chain(10.0, 15.0, 1.0, cubic_stiffness=100.0, n_dof=3, forced_dofs=[1])
    ts = np.linspace(0.0, 6.0, n_obs)
    acc = 0.3 * np.stack([np.sin(ts), np.cos(1.3 * ts)], axis=1)
    force = np.sin(0.7 * ts)[:, None]
    problem = sensor_problem(
        chain,
        [3],
        ts,
        acc,
        force,
        ts,
        force,
        acc_scale=0.6,
        vel_scale=0.5,
        weights=LossWeights(1.0, 2.0, 3.0, 0.5),
    )
    net = StateNetwork(jax.random.key(1), 6, 0.0, 6.0, width=8, depth=2, out_scale=0.3)
    theta = PositiveParameters({"k3": 10.0, "kappa3": 75.0}, {"k3": 10.0, "kappa3": 75.0})
    return problem, net, theta


def test_loss_gradients_match_finite_differences():
    """d L / d(system parameters) and d L / d(network weights) agree with central differences."""
    problem, net, theta = _small_problem()

    def loss(raw, bias):
        th = eqx.tree_at(lambda p: p.raw, theta, raw)
        nt = eqx.tree_at(lambda n: n.mlp.layers[-1].bias, net, bias)
        return sensor_losses(nt, th, problem)[0]

    raw0, bias0 = theta.raw + jnp.array([0.3, -0.2]), net.mlp.layers[-1].bias
    g_raw, g_bias = jax.grad(loss, argnums=(0, 1))(raw0, bias0)
    h = 1e-6
    fd_raw = [(loss(raw0.at[i].add(h), bias0) - loss(raw0.at[i].add(-h), bias0)) / (2 * h) for i in range(2)]
    fd_bias = [(loss(raw0, bias0.at[i].add(h)) - loss(raw0, bias0.at[i].add(-h))) / (2 * h) for i in range(6)]
    np.testing.assert_allclose(g_raw, fd_raw, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(g_bias, fd_bias, rtol=1e-6, atol=1e-9)
    assert np.all(np.abs(np.asarray(g_raw)) > 1e-6)


def test_positive_parameters_start_at_guess_and_stay_positive():
    theta = PositiveParameters({"k2": 10.0, "kappa2": 75.0}, {"k2": 10.0})
    np.testing.assert_allclose(theta.values(), [10.0, 75.0])
    moved = eqx.tree_at(lambda p: p.raw, theta, jnp.array([-50.0, 3.0]))
    assert np.all(np.asarray(moved.values()) > 0)
    with pytest.raises(ValueError, match="expected finite initial values and scales > 0"):
        PositiveParameters({"k2": -1.0})


def test_unobserved_dof_outside_system_raises():
    """A request for an unobserved DOF that the chain does not have names the field and the range."""
    with pytest.raises(ValueError, match=r"unobserved_dofs: expected 1-based DOF indices in 1..6.*\[7\]"):
        observed_dofs(6, [3, 4, 7])
    with pytest.raises(ValueError, match="in 1..6"):
        observed_dofs(6, [0])
    with pytest.raises(ValueError, match="at least one DOF must be observed"):
        observed_dofs(2, [1, 2])
    assert observed_dofs(6, [3, 4, 5, 6]) == (1, 2)
    problem, *_ = _small_problem()
    with pytest.raises(ValueError, match=r"unobserved_dofs: expected 1-based DOF indices in 1..3"):
        sensor_problem(
            problem.chain, [4], problem.t_obs, problem.acc_obs, problem.force_obs, problem.t_col,
            problem.force_col, acc_scale=1.0, vel_scale=1.0,
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"acc_obs: expected shape \(12, 1\); received \(12, 2\)"):
        sensor_problem(
            problem.chain, [2, 3], problem.t_obs, problem.acc_obs, problem.force_obs, problem.t_col,
            problem.force_col, acc_scale=1.0, vel_scale=1.0,
        )  # fmt: skip


def test_trainer_stops_on_plateau_and_refuses_nan():
    net = StateNetwork(jax.random.key(0), 2, 0.0, 1.0, width=4, depth=1)
    flat = train((net,), lambda tr: (jnp.asarray(1.0) + 0.0 * tr[0](0.5)[0], {}), TrainSettings(
        epochs=1000, chunk=5, patience=3))  # fmt: skip
    assert flat.stopped_early and flat.epochs == 20
    with pytest.raises(ValueError, match="non-finite at epoch 1"):
        train((net,), lambda tr: (jnp.log(-1.0 + 0.0 * tr[0](0.5)[0]), {}), TrainSettings(epochs=5, chunk=5))
    with pytest.raises(ValueError, match=r"TrainSettings.learning_rate: expected a finite value > 0"):
        train((net,), lambda tr: (tr[0](0.5)[0], {}), TrainSettings(learning_rate=-1.0))
    with pytest.raises(ValueError, match="activation: expected one of"):
        StateNetwork(jax.random.key(0), 2, 0.0, 1.0, activation="relu6")


def test_force_posterior_equals_direct_gaussian_likelihood():
    """The sufficient-statistic posterior equals the Eq 22b likelihood summed over repeats, evaluated
    directly, plus the Gamma priors and the log-Jacobian, at arbitrary parameters (Duffing and VdP)."""
    from jax.scipy.stats import gamma

    from twinfer.infer.pinn import force_log_posterior

    for extra in ({"cubic_stiffness": 100.0}, {"vdp_damping": 0.75}):
        chain = Chain(10.0, 15.0, 1.0, n_dof=2, **extra)
        nl = "kappa" if "cubic_stiffness" in extra else "mu"
        names = ["c1", "c2", "k1", "k2", f"{nl}1", f"{nl}2"]
        key = jax.random.key(3)
        z, dz = jax.random.normal(key, (2, 40, 4)) * 0.3
        reps = jax.random.normal(jax.random.key(4), (3, 40, 2))
        priors = {n: (2.0, 0.5) for n in names}
        logp = force_log_posterior(chain, z, dz, reps, names, priors, (3.0, 0.5))
        scale = jnp.array([1, 1, 1, 1, 100, 100.0]) if nl == "kappa" else 1.0
        theta = jnp.array([0.9, 1.2, 14.0, 16.0, 0.8, 1.1]) * scale
        sigma = 0.7
        from twinfer.models import set_params

        params = set_params(chain.params, dict(zip(names, theta, strict=True)))
        mu = predicted_force(chain, params, z, dz)
        direct = jnp.sum(jax.scipy.stats.norm.logpdf(reps, mu[None], sigma)) + 0.5 * reps.size * jnp.log(
            2 * jnp.pi
        )
        values = jnp.concatenate([theta, jnp.array([sigma])])
        direct = direct + jnp.sum(gamma.logpdf(values, jnp.array([2.0] * 6 + [3.0]), scale=2.0))
        direct = direct + jnp.sum(jnp.log(values))
        np.testing.assert_allclose(logp(jnp.log(values)), direct, rtol=1e-10)


def test_lbfgs_phase_minimises_its_own_loss():
    """With ``lbfgs_loss_fn`` the L-BFGS phase minimises the second loss from where Adam stopped."""
    x0 = (jnp.array([0.0, 2.0]),)
    first = lambda tr: (jnp.sum((tr[0] - 1.0) ** 2), {})  # noqa: E731
    second = lambda tr: (jnp.sum((tr[0] - 3.0) ** 2 * jnp.array([1.0, 50.0])), {})  # noqa: E731
    out = train(x0, first, TrainSettings(epochs=10, chunk=10, lbfgs_steps=20), lbfgs_loss_fn=second)
    np.testing.assert_allclose(out.trainable[0], [3.0, 3.0], atol=1e-6)
    assert out.history["loss"][-1] < 1e-10


def test_projected_parameters_recover_the_parameters_that_generated_the_data():
    """Variable projection: with data generated from the network's own states at known parameters, one
    Newton step from a wrong guess returns those parameters (the loss is quadratic in them)."""
    from twinfer.infer.pinn import projected_parameters
    from twinfer.models import set_params

    chain = Chain(10.0, 15.0, 1.0, cubic_stiffness=100.0, n_dof=3, forced_dofs=[1, 2, 3])
    net = StateNetwork(jax.random.key(5), 6, 0.0, 5.0, width=8, depth=2, out_scale=0.2)
    ts = jnp.linspace(0.0, 5.0, 64)
    true = {"k2": 14.0, "kappa2": 110.0, "c3": 1.3}
    z, dz = net.batch(ts)
    force = predicted_force(chain, set_params(chain.params, true), z, dz)  # zero force residual at truth
    problem = sensor_problem(chain, [2], ts, dz[:, [3, 5]], force, ts, force, acc_scale=1.0, vel_scale=1.0)
    guess = PositiveParameters({"k2": 10.0, "kappa2": 75.0, "c3": 2.0})
    solved = projected_parameters(net, guess, problem)
    np.testing.assert_allclose(solved.values(), [14.0, 110.0, 1.3], rtol=1e-6)
    lower = projected_parameters(net, guess, problem, bounds=(1e-3, 1.2))  # kappa2 clipped at 1.2 * 75
    assert float(lower.as_dict()["kappa2"]) == pytest.approx(90.0)


def test_state_problem_writes_the_physics_at_its_own_collocation_times():
    """With ``t_col``/``force_col`` the force term uses those times and forces: data made
    from the network's own states at the collocation times are fitted exactly at the true parameters,
    although the observation times carry a different force; one of the pair alone is refused."""
    from twinfer.infer.pinn import projected_parameters, state_losses, state_problem
    from twinfer.models import set_params

    chain = Chain(10.0, 15.0, 1.0, cubic_stiffness=100.0, n_dof=2, forced_dofs=[1, 2])
    net = StateNetwork(jax.random.key(7), 4, 0.0, 5.0, width=8, depth=2, out_scale=0.2)
    t_obs = jnp.linspace(0.0, 5.0, 41)
    t_col = 0.5 * (t_obs[1:] + t_obs[:-1])
    true = {"c2": 1.4, "k1": 13.0, "kappa2": 120.0}
    z_c, dz_c = net.batch(t_col)
    f_col = predicted_force(chain, set_params(chain.params, true), z_c, dz_c)
    z_o = jax.vmap(net)(t_obs)
    kw = {"disp_scale": 0.1, "vel_scale": 0.1, "acc_scale": 0.1}
    problem = state_problem(chain, t_obs, z_o, jnp.ones((41, 2)), t_col=t_col, force_col=f_col, **kw)
    theta = PositiveParameters(true)
    _, parts = state_losses(net, theta, problem)
    assert float(parts["obs"]) < 1e-20 and float(parts["ode"]) < 1e-20  # (cc: a random net has du/dt != v)
    guess = PositiveParameters({"c2": 2.0, "k1": 10.0, "kappa2": 75.0})
    solved = projected_parameters(net, guess, problem).values()
    np.testing.assert_allclose(solved, [1.4, 13.0, 120.0], rtol=1e-6)
    with pytest.raises(ValueError, match="t_col/force_col: expected both or neither"):
        state_problem(chain, t_obs, z_o, jnp.ones((41, 2)), t_col=t_col, **kw)
    with pytest.raises(ValueError, match=r"force_col: expected shape \(40, 2\)"):
        state_problem(chain, t_obs, z_o, jnp.ones((41, 2)), t_col=t_col, force_col=f_col[:-1], **kw)


def test_network_is_linear_in_its_output_layer():
    """basis @ last_layer.T + offset is the network's state and dH @ last_layer.T its rate (plain and
    anchored networks), and the rate column of the basis matches finite differences."""
    ts = jnp.array([0.4, 1.7, 3.2])
    for z0 in (None, np.array([0.1, -0.2, 0.0, 0.3])):
        net = StateNetwork(jax.random.key(5), 4, 0.0, 4.0, width=8, depth=2, n_fourier=3, max_cycles=2.0,
                           out_scale=[0.5, 0.5, 2.0, 2.0], initial_state=z0)  # fmt: skip
        h, dh, offset = net.basis(ts)
        w = net.last_layer()
        z, dz = net.batch(ts)
        np.testing.assert_allclose(h @ w.T + offset, z, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(dh @ w.T, dz, rtol=1e-12, atol=1e-14)
        eps = 1e-5
        fd = (net.basis(ts + eps)[0] - net.basis(ts - eps)[0]) / (2 * eps)
        np.testing.assert_allclose(dh, fd, rtol=1e-6, atol=1e-9)


def test_layer_posterior_equals_direct_gaussian_likelihood():
    """The Gram-matrix posterior over (output layer, parameters, sigma_f) equals the u, v, continuity and
    force likelihoods evaluated point by point, plus the Gamma priors and the log-Jacobian; bad shapes
    raise naming the field."""
    from jax.scipy.stats import gamma, norm

    from twinfer.infer.pinn import layer_log_posterior
    from twinfer.models import set_params

    chain = Chain(10.0, 15.0, 1.0, cubic_stiffness=100.0, n_dof=2)
    names = ["c1", "c2", "k1", "k2", "kappa1", "kappa2"]
    k = jax.random.split(jax.random.key(7), 6)
    p, t_o, t_c = 5, 30, 25
    h_o, h_c, dh_c = (jax.random.normal(k[0], (t_o, p)), jax.random.normal(k[1], (t_c, p)),
                      jax.random.normal(k[2], (t_c, p)))  # fmt: skip
    off_o, off_c = jnp.array([0.1, 0.0, -0.2, 0.05]), jnp.array([0.0, 0.3, 0.0, -0.1])
    z_obs = jax.random.normal(k[3], (t_o, 4))
    force = jax.random.normal(k[4], (t_c, 2))
    scale = np.array([0.1, 0.2, 0.3, 0.4])
    priors = {n: (2.0, 0.5) for n in names}
    logp, shape = layer_log_posterior(chain, (h_o, None, off_o), z_obs, scale, (h_c, dh_c, off_c), force,
                                      names, priors, (3.0, 0.5))  # fmt: skip
    assert shape == (4, p)
    w = 0.3 * jax.random.normal(k[5], shape)
    theta = jnp.array([0.9, 1.2, 14.0, 16.0, 80.0, 110.0])
    sigma = 0.7
    zc, dzc = h_c @ w.T + off_c, dh_c @ w.T
    params = set_params(chain.params, dict(zip(names, theta, strict=True)))
    direct = jnp.sum(norm.logpdf(z_obs, h_o @ w.T + off_o, scale)) + jnp.sum(jnp.log(scale)) * t_o
    direct += jnp.sum(norm.logpdf(dzc[:, :2] - zc[:, 2:], 0.0, scale[2:])) + jnp.sum(jnp.log(scale[2:])) * t_c
    direct += jnp.sum(norm.logpdf(force, predicted_force(chain, params, zc, dzc), sigma))
    direct += 0.5 * (z_obs.size + 2 * t_c + force.size) * jnp.log(2 * jnp.pi)
    values = jnp.concatenate([theta, jnp.array([sigma])])
    direct += jnp.sum(gamma.logpdf(values, jnp.array([2.0] * 6 + [3.0]), scale=2.0))
    direct += jnp.sum(jnp.log(values))
    q = jnp.concatenate([w.ravel(), jnp.log(values)])
    np.testing.assert_allclose(logp(q), direct, rtol=1e-10)
    with pytest.raises(ValueError, match=r"z_obs: expected shape \(30, 4\)"):
        layer_log_posterior(chain, (h_o, None, off_o), z_obs[:, :2], scale, (h_c, dh_c, off_c), force, names,
                            priors, (3.0, 0.5))  # fmt: skip
    with pytest.raises(ValueError, match="z_scale: expected 4 finite values > 0"):
        layer_log_posterior(chain, (h_o, None, off_o), z_obs, -scale, (h_c, dh_c, off_c), force, names,
                            priors, (3.0, 0.5))  # fmt: skip


def test_layer_estimate_matches_the_sampled_trajectories():
    """The states' posterior from output-layer samples: exact moments equal the per-sample trajectories'."""
    net = StateNetwork(jax.random.key(3), 4, 0.0, 2.0, width=8, depth=2, initial_state=[0.1, 0.0, 0.0, 0.2])
    ts = jnp.linspace(0.0, 2.0, 50)
    h, dh, off = net.basis(ts)
    rng = np.random.default_rng(0)
    w0 = np.asarray(net.last_layer())
    layers = w0.ravel() + 0.01 * rng.normal(size=(300, w0.size)) @ rng.normal(size=(w0.size, w0.size)) / 6
    k = rng.normal(5.0, 0.3, size=300)
    est = layer_estimate((h, dh, off), ts, layers, ["u1", "u2", "v1", "v2"], {"k1": k})
    traj = np.einsum("tp,sip->sti", np.asarray(h), layers.reshape(300, 4, -1)) + np.asarray(off)
    np.testing.assert_allclose(est.means[:, :4], traj.mean(axis=0), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(est.stds[:, :4], traj.std(axis=0, ddof=1), rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(est.stds[0, :4], 0.0, atol=1e-14)  # anchored at t0: no spread
    assert est.parameters == ("k1",) and est.interval("k1")[0] < 5.0 < est.interval("k1")[1]
    np.testing.assert_allclose(
        np.asarray(net.batch(ts)[0]), np.asarray(h) @ w0.T + np.asarray(off), atol=1e-12
    )
    with pytest.raises(ValueError, match=r"layer_samples: expected shape \(S >= 2, "):
        layer_estimate((h, dh, off), ts, layers[:, :-1], ["u1", "u2", "v1", "v2"])
    with pytest.raises(ValueError, match=r"parameter_samples\['k1'\]: expected 300 samples"):
        layer_estimate((h, dh, off), ts, layers, ["u1", "u2", "v1", "v2"], {"k1": k[:5]})


def test_state_network_to_estimate_is_a_point_estimate():
    """A trained PINN claims no certainty: state sd NaN; learned parameters as columns."""
    net = StateNetwork(jax.random.key(4), 4, 0.0, 1.0, width=8, depth=2)
    ts = np.linspace(0.0, 1.0, 11)
    est = net.to_estimate(ts, ["u1", "u2", "v1", "v2"], {"c1": 0.5, "k1": np.array([9.0, 11.0])})
    np.testing.assert_allclose(est.means[:, :4], np.asarray(net.batch(jnp.asarray(ts))[0]))
    assert np.isnan(est.stds[:, :5]).all() and est.stds[0, 5] == pytest.approx(np.sqrt(2.0))
    assert est.state_names == ("u1", "u2", "v1", "v2", "c1", "k1") and est.parameters == ("c1", "k1")
    with pytest.raises(ValueError, match="state_names: expected 4 names; received 2"):
        net.to_estimate(ts, ["u1", "u2"])


def test_train_result_to_estimate_is_the_networks_point_estimate_with_its_learned_parameters():
    """A PINN trainer's result as an Estimate: the trained network's states (sd NaN), then the learned
    PositiveParameters among the extras as constant columns (sd NaN), exactly StateNetwork.to_estimate."""
    from twinfer.infer.pinn import TrainResult

    net = StateNetwork(jax.random.key(4), 4, 0.0, 1.0, width=8, depth=2)
    theta = PositiveParameters({"k1": 2.0e3, "c1": 5.0})
    result = TrainResult((net, theta), {"epoch": [], "loss": []}, 0, False, 0, 0.0)
    ts = np.linspace(0.0, 1.0, 11)
    names = ["u1", "u2", "v1", "v2"]
    est = result.to_estimate(ts, names)
    ref = net.to_estimate(ts, names, theta.as_dict())
    np.testing.assert_array_equal(est.means, ref.means)
    assert est.state_names == ("u1", "u2", "v1", "v2", "k1", "c1") and est.parameters == ("k1", "c1")
    np.testing.assert_allclose(est.means[:, 4], 2.0e3, rtol=1e-12)
    assert np.isnan(est.stds).all()
    with pytest.raises(ValueError, match="TrainResult.to_estimate trainable: expected a StateNetwork first"):
        TrainResult((theta,), {}, 0, False, 0, 0.0).to_estimate(ts, names)
