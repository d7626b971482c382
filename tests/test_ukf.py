import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from filterpy.kalman import MerweScaledSigmaPoints, UnscentedKalmanFilter
from scipy.stats import multivariate_normal

from twinfer.infer.filters import augment, particle_filter, rts_smooth, run_ukf, ukf_scan, ukf_step
from twinfer.infer.filters._particle import systematic_resample
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.models import Chain
from twinfer.sim import discretise, simulate_discrete

F_LIN = np.array([[1.0, 0.1], [-0.2, 0.95]])
H_LIN = np.array([[1.0, 0.0], [0.5, 1.0], [0.0, 2.0]])
Q_LIN, R_LIN = 0.01 * np.eye(2), 0.05 * np.eye(3)


def _nonlinear():
    f = lambda x, u: jnp.array([x[0] + 0.1 * x[1], x[1] - 0.1 * jnp.sin(x[0]) + 0.1 * u[0]])
    h = lambda x, u: jnp.array([x[0] ** 2, x[1]])
    fx = lambda x, dt, u: np.array([x[0] + 0.1 * x[1], x[1] - 0.1 * np.sin(x[0]) + 0.1 * u])
    hx = lambda x, u: np.array([x[0] ** 2, x[1]])
    return f, h, fx, hx


def test_ukf_matches_filterpy():
    """With Merwe weights and redrawn sigma points the UKF equals filterpy's UnscentedKalmanFilter."""
    f, h, fx, hx = _nonlinear()
    rng = np.random.default_rng(0)
    us, ys = rng.normal(size=30), 0.3 + 0.1 * rng.normal(size=(30, 2))
    ref = UnscentedKalmanFilter(2, 2, 0.1, hx, fx, MerweScaledSigmaPoints(2, 0.5, 2.0, 1.0))
    ref.x, ref.P, ref.Q, ref.R = np.array([0.3, 0.1]), 0.1 * np.eye(2), 1e-3 * np.eye(2), 1e-2 * np.eye(2)
    means, covs, loglik = [], [], 0.0
    for k in range(30):
        ref.predict(u=us[k])
        ref.update(ys[k], u=us[k])
        means.append(ref.x.copy())
        covs.append(ref.P.copy())
        loglik += ref.log_likelihood
    out = run_ukf(
        f,
        h,
        np.array([0.3, 0.1]),
        0.1 * np.eye(2),
        1e-3 * np.eye(2),
        1e-2 * np.eye(2),
        us[:, None],
        ys,
        weights=UnscentedWeights.merwe(0.5, 2.0, 1.0),
        redraw=True,
    )
    np.testing.assert_allclose(out.means, np.array(means), atol=1e-10)
    np.testing.assert_allclose(out.covs, np.array(covs), atol=1e-10)
    np.testing.assert_allclose(out.loglik, loglik, rtol=1e-10)


def _linear_data(seed, steps=25):
    rng = np.random.default_rng(seed)
    x = np.array([1.0, -0.5])
    ys = []
    for _ in range(steps):
        x = F_LIN @ x + rng.multivariate_normal(np.zeros(2), Q_LIN)
        ys.append(H_LIN @ x + rng.multivariate_normal(np.zeros(3), R_LIN))
    return np.array(ys)


def _dense_loglik(ys, x0, p0):
    """log p(y_1..y_T) of the joint Gaussian built by hand."""
    steps = len(ys)
    means, blocks = [], {}
    trans = [np.linalg.matrix_power(F_LIN, k) for k in range(steps + 1)]
    for i in range(steps):
        means.append(H_LIN @ trans[i + 1] @ x0)
    cov_x = {}
    for i in range(1, steps + 1):
        for j in range(1, steps + 1):
            lo = min(i, j)
            c = trans[i] @ p0 @ trans[j].T
            for k in range(1, lo + 1):
                c = c + trans[i - k] @ Q_LIN @ trans[j - k].T
            cov_x[i, j] = c
    big = np.zeros((3 * steps, 3 * steps))
    for i in range(steps):
        for j in range(steps):
            blocks = H_LIN @ cov_x[i + 1, j + 1] @ H_LIN.T + (R_LIN if i == j else 0.0)
            big[3 * i : 3 * i + 3, 3 * j : 3 * j + 3] = blocks
    return multivariate_normal(np.concatenate(means), big).logpdf(ys.reshape(-1))


def test_ukf_on_linear_model_equals_dense_gaussian_likelihood():
    """On a linear-Gaussian model the redraw UKF is the KF: its log-likelihood is the dense joint density."""
    ys = _linear_data(1)
    x0, p0 = np.array([0.5, 0.0]), 0.3 * np.eye(2)
    out = run_ukf(
        lambda x, u: jnp.asarray(F_LIN) @ x,
        lambda x, u: jnp.asarray(H_LIN) @ x,
        x0,
        p0,
        Q_LIN,
        R_LIN,
        np.zeros((len(ys), 1)),
        ys,
        weights=UnscentedWeights.merwe(0.3, 2.0, 0.0),
        redraw=True,
    )
    np.testing.assert_allclose(out.loglik, _dense_loglik(ys, x0, p0), rtol=1e-10)


def test_masked_component_equals_reduced_model():
    """A masked measurement component is the same as filtering without that sensor."""
    ys = _linear_data(2)
    masks = np.ones(ys.shape, bool)
    masks[::3, 1] = False
    f = lambda x, u: jnp.asarray(F_LIN) @ x
    args = (np.zeros(2), np.eye(2), np.linalg.cholesky(Q_LIN))
    full = ukf_scan(
        f,
        lambda x, u: jnp.asarray(H_LIN) @ x,
        *args,
        np.linalg.cholesky(R_LIN),
        jnp.zeros((25, 1)),
        jnp.where(masks, ys, jnp.nan),
        jnp.asarray(masks),
        redraw=True,
    )
    reduced = ukf_scan(
        f,
        lambda x, u: jnp.asarray(H_LIN[[0, 2]]) @ x,
        *args,
        np.linalg.cholesky(R_LIN[:2, :2]),
        jnp.zeros((25, 1)),
        jnp.asarray(ys[:, [0, 2]]),
        redraw=True,
    )
    np.testing.assert_allclose(full.means[0], reduced.means[0], atol=1e-12)
    assert np.all(np.isfinite(np.asarray(full.means)))


def test_calibration_of_filtered_states():
    """Over many seeds of a linear model, 95% intervals of the filtered states cover 93-97% of the truth."""
    f = lambda x, u: jnp.asarray(F_LIN) @ x
    h = lambda x, u: jnp.asarray(H_LIN) @ x

    def one(key):
        k0, kq, kr = jax.random.split(key, 3)
        x0 = jax.random.normal(k0, (2,))
        wq = jax.random.multivariate_normal(kq, jnp.zeros(2), jnp.asarray(Q_LIN), (40,))
        wr = jax.random.multivariate_normal(kr, jnp.zeros(3), jnp.asarray(R_LIN), (40,))
        xs = jax.lax.scan(lambda x, w: (f(x, 0) + w, f(x, 0) + w), x0, wq)[1]
        ys = xs @ jnp.asarray(H_LIN).T + wr
        out = ukf_scan(
            f,
            h,
            jnp.zeros(2),
            jnp.eye(2),
            jnp.asarray(np.linalg.cholesky(Q_LIN)),
            jnp.asarray(np.linalg.cholesky(R_LIN)),
            jnp.zeros((40, 1)),
            ys,
            redraw=True,
        )
        sd = jnp.sqrt(jnp.diagonal(out.covs, axis1=1, axis2=2))
        return jnp.abs(out.means - xs) <= 1.959964 * sd

    inside = jax.vmap(one)(jax.random.split(jax.random.key(0), 400))
    assert 0.93 <= float(jnp.mean(inside)) <= 0.97


def test_joint_estimation_recovers_stiffness():
    """Augmenting k2 as a random walk recovers a 2-DOF oscillator stiffness from noisy accelerations."""
    truth = Chain([1.0, 1.0], [40.0, 25.0], [0.4, 0.4], forced_dofs=[1])
    dt, steps = 0.01, 1500
    forces = 5.0 * jax.random.normal(jax.random.key(3), (steps, 1))
    traj = simulate_discrete(discretise(truth, dt, "exact"), jnp.zeros(4), forces)
    acc = jax.vmap(lambda x, u: truth.output(0.0, x, u, truth.params))(traj.states[1:], forces)
    ys = acc + 0.05 * jax.random.normal(jax.random.key(4), acc.shape)
    model = augment(truth.with_params(k2=15.0), ["k2"])
    step = discretise(model, dt, "rk4")
    out = run_ukf(
        lambda x, u: step.transition(0.0, x, u, model.params),
        lambda x, u: model.output(0.0, x, u, model.params),
        model.initial_state(jnp.zeros(4)),
        jnp.diag(jnp.array([1e-4] * 4 + [100.0])),
        jnp.diag(jnp.array([1e-8] * 4 + [1e-6])),
        0.05**2 * jnp.eye(2),
        forces,
        ys,
    )
    k2, sd = model.named_params(out.means, jnp.sqrt(jnp.diagonal(out.covs, axis1=1, axis2=2)))["k2"]
    assert abs(float(k2[-1]) - 25.0) < 0.5 and abs(float(k2[-1]) - 25.0) < 4 * float(sd[-1])


def test_divergence_names_the_step():
    """A model that blows up raises an error naming the step instead of returning NaN."""
    f = lambda x, u: x * jnp.where(x[0] > 1e150, jnp.inf, 1e30)
    with pytest.raises(ValueError, match=r"UKF diverged at step \d+ \(t = "):
        run_ukf(
            f,
            lambda x, u: x,
            np.ones(2),
            np.eye(2),
            np.eye(2),
            np.eye(2),
            np.zeros((20, 1)),
            np.zeros((20, 2)),
            times=np.arange(20) * 0.1,
        )


def test_boundary_errors_and_trace_once():
    f = eqx.debug.assert_max_traces(lambda x, u: 0.9 * x, max_traces=1)
    h = lambda x, u: x
    for seed in range(2):  # the second call must reuse the compiled scan
        run_ukf(
            f,
            h,
            np.zeros(2),
            np.eye(2),
            np.eye(2),
            np.eye(2),
            np.zeros((5, 1)),
            np.random.default_rng(seed).normal(size=(5, 2)),
        )
    with pytest.raises(ValueError, match=r"run_ukf q: expected shape \(2, 2\); received \(3, 3\)"):
        run_ukf(f, h, np.zeros(2), np.eye(2), np.eye(3), np.eye(2), np.zeros((5, 1)), np.zeros((5, 2)))
    with pytest.raises(ValueError, match="run_ukf cov0: expected float64; received float32"):
        run_ukf(
            f,
            h,
            np.zeros(2),
            np.eye(2, dtype=np.float32),
            np.eye(2),
            np.eye(2),
            np.zeros((5, 1)),
            np.zeros((5, 2)),
        )
    with pytest.raises(ValueError, match="alpha: expected > 0"):
        UnscentedWeights.merwe(alpha=0.0)
    with pytest.raises(KeyError, match="Unknown parameter 'k9'"):
        augment(Chain([1.0, 1.0], 1.0, 1.0), ["k9"])


def test_smoother_equals_dense_gaussian_posterior():
    """RTS smoothing of the (linear) UKF equals conditioning the joint Gaussian of states and data."""
    steps = 8
    ys = _linear_data(5, steps)
    x0, p0 = np.array([0.5, 0.0]), 0.3 * np.eye(2)
    out = run_ukf(
        lambda x, u: jnp.asarray(F_LIN) @ x,
        lambda x, u: jnp.asarray(H_LIN) @ x,
        x0,
        p0,
        Q_LIN,
        R_LIN,
        np.zeros((steps, 1)),
        ys,
        redraw=True,
    )
    smooth = rts_smooth(out, x0, p0)
    # dense prior over x_0..x_T and y_1..y_T
    trans = [np.linalg.matrix_power(F_LIN, k) for k in range(steps + 1)]
    mean_x = np.concatenate([trans[i] @ x0 for i in range(steps + 1)])
    cov_x = np.zeros((2 * (steps + 1), 2 * (steps + 1)))
    for i in range(steps + 1):
        for j in range(steps + 1):
            c = trans[i] @ p0 @ trans[j].T
            for k in range(1, min(i, j) + 1):
                c = c + trans[i - k] @ Q_LIN @ trans[j - k].T
            cov_x[2 * i : 2 * i + 2, 2 * j : 2 * j + 2] = c
    obs = np.zeros((3 * steps, 2 * (steps + 1)))
    for i in range(steps):
        obs[3 * i : 3 * i + 3, 2 * (i + 1) : 2 * (i + 2)] = H_LIN
    s_cov = obs @ cov_x @ obs.T + np.kron(np.eye(steps), R_LIN)
    gain = cov_x @ obs.T @ np.linalg.inv(s_cov)
    post_mean = mean_x + gain @ (ys.reshape(-1) - obs @ mean_x)
    post_cov = cov_x - gain @ obs @ cov_x
    np.testing.assert_allclose(np.asarray(smooth.means).reshape(-1), post_mean, atol=1e-10)
    for i in range(steps + 1):
        np.testing.assert_allclose(smooth.covs[i], post_cov[2 * i : 2 * i + 2, 2 * i : 2 * i + 2], atol=1e-10)


def test_particle_filter_loglik_converges_to_kalman():
    """The bootstrap PF log-likelihood approaches the exact (KF) value as the particle count grows."""
    ys = _linear_data(6, 20)
    x0, p0 = np.array([0.5, 0.0]), 0.3 * np.eye(2)
    f = lambda x, u: jnp.asarray(F_LIN) @ x
    h = lambda x, u: jnp.asarray(H_LIN) @ x
    exact = float(_dense_loglik(ys, x0, p0))

    def estimates(n):
        one = lambda k: (
            particle_filter(
                k,
                f,
                h,
                jnp.asarray(x0),
                jnp.asarray(p0),
                jnp.asarray(Q_LIN),
                jnp.asarray(R_LIN),
                jnp.zeros((20, 1)),
                jnp.asarray(ys),
                n_particles=n,
            ).loglik
        )
        return np.asarray(jax.vmap(one)(jax.random.split(jax.random.key(n), 8)))

    runs = {n: estimates(n) for n in (100, 1000, 10000)}
    errors = [np.mean(np.abs(runs[n] - exact)) for n in (100, 1000, 10000)]
    assert errors[2] < errors[1] < errors[0]
    big = runs[10000]
    assert abs(big.mean() - exact) < 3.0 * big.std() / np.sqrt(len(big)) + 0.02


def test_systematic_resample_and_errors():
    idx = systematic_resample(jax.random.key(0), jnp.log(jnp.array([0.0, 0.5, 0.5, 0.0]) + 1e-300))
    assert set(np.asarray(idx).tolist()) <= {1, 2} and np.sum(np.asarray(idx) == 1) == 2
    with pytest.raises(ValueError, match="ess_threshold: expected in \\(0, 1\\]; received 1.5"):
        particle_filter(jax.random.key(0), None, None, None, None, None, None, None, None, ess_threshold=1.5)


@pytest.mark.parametrize(
    ("estimator", "linearisation"), [("ukf", "propagated"), ("ukf", "redrawn"), ("ekf", None)]
)
def test_filter_and_smooth_entry_points_on_a_dataset(estimator, linearisation):
    """filter()/smooth() on a Dataset: named k2 estimate, smoothing reduces the state error, masks work."""
    from twinfer.data import Dataset
    from twinfer.infer.filters import run_filter, smooth

    truth = Chain([1.0, 1.0], [40.0, 25.0], [0.4, 0.4], forced_dofs=[1])
    dt, steps = 0.01, 800
    forces = 5.0 * jax.random.normal(jax.random.key(7), (steps, 1))
    traj = simulate_discrete(discretise(truth, dt, "exact"), jnp.zeros(4), forces)
    inputs = np.concatenate([np.asarray(forces), np.zeros((1, 1))])
    acc = jax.vmap(lambda x, u: truth.output(0.0, x, u, truth.params))(
        traj.states, jnp.concatenate([forces[:1], forces])
    )
    obs = np.asarray(acc + 0.05 * jax.random.normal(jax.random.key(8), acc.shape))
    mask = np.ones(obs.shape, bool)
    mask[100:200, 1] = False
    data = Dataset(
        times=dt * np.arange(steps + 1),
        observations=obs,
        mask=mask,
        inputs=inputs,
        truth_states=np.asarray(traj.states),
        output_names=truth.output_names,
        metadata={"alignment": "held"},  # y_k+1 = h(x_k+1, u_k), made by hand above
    )
    kwargs = dict(
        state_sd=1e-2,
        process_sd=1e-4,
        noise_sd=0.05,
        unknown={"k2": (20.0, 10.0, 1e-3)},
        estimator=estimator,
        linearisation=linearisation,
    )
    filt = run_filter(truth.with_params(k2=20.0), data, **kwargs)
    smoo = smooth(truth.with_params(k2=20.0), data, **kwargs)
    assert filt.means.shape == (steps + 1, 5) and filt.state_names[-1] == "k2"
    k2, sd = filt.params["k2"]
    assert abs(float(k2[-1]) - 25.0) < 4 * float(sd[-1]) and abs(float(k2[-1]) - 25.0) < 1.0
    err = lambda r: float(np.sqrt(np.mean((np.asarray(r.means[:, :4]) - data.truth_states) ** 2)))
    assert err(smoo) < err(filt)
    with pytest.raises(ValueError, match="estimator: expected one of 'ukf', 'ekf', 'kf'; received 'ekf2'"):
        run_filter(truth, data, estimator="ekf2")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"dataset outputs: expected \('a1',\) .* from_csv\(\.\.\., outputs=\{'a1': "
    ):
        run_filter(Chain([1.0, 1.0], 1.0, 1.0, outputs=["a1"]), data)


def test_divergence_raises_inside_jit():
    """With check=True the jitted scan itself raises (eqx.error_if) instead of returning NaN."""
    f = lambda x, u: x * jnp.where(x[0] > 1e150, jnp.inf, 1e30)
    run = jax.jit(
        lambda ys: (
            ukf_scan(
                f,
                lambda x, u: x,
                jnp.ones(2),
                jnp.eye(2),
                jnp.eye(2),
                jnp.eye(2),
                jnp.zeros((20, 1)),
                ys,
                check=True,
            ).loglik
        )
    )
    with pytest.raises(Exception, match="filter diverged"):
        jax.block_until_ready(run(jnp.zeros((20, 2))))


def test_a_linear_measurement_given_as_a_matrix_updates_as_its_sigma_points_would():
    """h = H (the Kalman update, no sigma points through h) equals h = lambda x: H x to rounding."""
    rng = np.random.default_rng(11)
    n, m = 5, 3
    a = rng.normal(size=(n, n))
    cov = a @ a.T + n * np.eye(n)
    mean, y = rng.normal(size=n), rng.normal(size=m)
    h_mat = rng.normal(size=(m, n))
    f = lambda x, u: jnp.sin(x) + 0.5 * x  # noqa: E731
    chols = (np.linalg.cholesky(cov), np.sqrt(0.1) * np.eye(n), np.sqrt(0.2) * np.eye(m))
    args = (jnp.asarray(mean), *map(jnp.asarray, chols), None, jnp.asarray(y))
    weights = UnscentedWeights.merwe(1.0, 2.0, 0.0)
    for mask, redraw in (
        (np.ones(m, bool), False),
        (np.array([True, False, True]), False),
        (np.ones(m, bool), True),
    ):
        kw = {"weights": weights, "redraw": redraw}
        by_points = ukf_step(f, lambda x, u: jnp.asarray(h_mat) @ x, *args, jnp.asarray(mask), **kw)
        by_matrix = ukf_step(f, jnp.asarray(h_mat), *args, jnp.asarray(mask), **kw)
        for name in ("mean", "cov", "loglik", "pred_mean", "pred_cov"):
            np.testing.assert_allclose(
                np.asarray(getattr(by_matrix, name)),
                np.asarray(getattr(by_points, name)),
                rtol=1e-10,
                atol=1e-12,
            )


def _oscillator_data():
    """A 1-DOF oscillator under random forcing, acceleration measured (60 steps)."""
    from twinfer.data import Dataset

    truth = Chain([1.0], [40.0], [0.4])
    dt, steps = 0.01, 60
    forces = 5.0 * jax.random.normal(jax.random.key(0), (steps, 1))
    traj = simulate_discrete(discretise(truth, dt, "exact"), jnp.zeros(2), forces)
    acc = jax.vmap(lambda x, u: truth.output(0.0, x, u, truth.params))(traj.states[1:], forces)
    obs = np.concatenate(
        [np.zeros((1, 1)), np.asarray(acc + 0.05 * jax.random.normal(jax.random.key(1), acc.shape))]
    )
    inputs = np.concatenate([np.asarray(forces), np.zeros((1, 1))])
    held = {"alignment": "held"}  # y_k+1 = h(x_k+1, u_k), made by hand above
    return truth, Dataset(
        dt * np.arange(steps + 1), obs, inputs=inputs, output_names=truth.output_names, metadata=held
    )


def test_deprecated_method_and_discretisation_warn_naming_the_new_keywords_and_give_the_same_numbers():
    """method= and discretisation= still work for one release: a DeprecationWarning names estimator /
    linearisation / integrator, and the result is that of the new keywords."""
    from twinfer.infer.filters import run_filter

    model, data = _oscillator_data()
    kw = {"state_sd": 1e-2, "process_sd": 1e-4, "noise_sd": 0.05}
    for old, new in (
        ({"method": "ukf"}, {"estimator": "ukf"}),
        ({"method": "ukf-sqrt"}, {"estimator": "ukf", "linearisation": "redrawn"}),
        ({"method": "ekf", "discretisation": "heun"}, {"estimator": "ekf", "integrator": "heun"}),
    ):
        with pytest.warns(DeprecationWarning) as record:
            before = run_filter(model, data, **kw, **old)  # type: ignore[call-arg]
        said = " ".join(str(w.message) for w in record)
        assert re.search(r"use estimator='(ukf|ekf)', linearisation='(propagated|redrawn|taylor)'", said)
        after = run_filter(model, data, **kw, **new)  # type: ignore[call-arg]
        np.testing.assert_array_equal(np.asarray(before.means), np.asarray(after.means))
        assert before.loglik == after.loglik
    with pytest.warns(DeprecationWarning, match="use integrator='euler'"):
        run_filter(model, data, **kw, discretisation="euler")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="filter method: the deprecated name of estimator"):
        run_filter(model, data, method="ekf", estimator="ekf")  # type: ignore[call-arg]


def test_kf_equals_ekf_on_a_linear_model_and_refuses_a_nonlinear_one():
    """On a linear model the EKF's Jacobians are exact, so estimator 'kf' and 'ekf' agree to the last bit;
    'kf' refuses unknown parameters in the state (a product of states) and a nonlinear chain."""
    from twinfer.infer.filters import run_filter

    model, data = _oscillator_data()
    kw = {"state_sd": 1e-2, "process_sd": 1e-4, "noise_sd": 0.05, "integrator": "exact"}
    kf = run_filter(model, data, estimator="kf", **kw)  # type: ignore[arg-type]
    ekf = run_filter(model, data, estimator="ekf", **kw)  # type: ignore[arg-type]
    np.testing.assert_array_equal(np.asarray(kf.means), np.asarray(ekf.means))
    with pytest.raises(ValueError, match=r"filter estimator: 'kf' needs a linear model .*unknown parameters"):
        run_filter(model, data, estimator="kf", unknown={"k1": (40.0, 1.0, 0.0)})
    duffing = Chain([1.0], [40.0], [0.4], cubic_stiffness=[100.0])
    with pytest.raises(ValueError, match=r"'kf' needs a linear model .*received Chain, which is nonlinear"):
        run_filter(duffing, data, estimator="kf")


def test_filter_options_are_checked_by_name():
    """A linearisation of another estimator, weights without a UKF, a misspelt keyword: named errors;
    the options' declared keys are the ones the filter reads (no drift between the two lists)."""
    import twinfer.infer.filters as filters
    from twinfer.infer.filters import run_filter, smooth
    from twinfer.infer.filters._api import EstimateOptions, _Settings
    from twinfer.infer.gaussian import UnscentedWeights

    assert not hasattr(filters, "filter")  # one name per thing (#53): run_filter, no alias
    assert set(EstimateOptions.__annotations__) == {*_Settings._fields, "method", "discretisation"}
    model, data = _oscillator_data()
    wrong = r"filter linearisation: expected one of 'taylor' for estimator 'ekf'; received 'redrawn'"
    with pytest.raises(ValueError, match=wrong):
        run_filter(model, data, estimator="ekf", linearisation="redrawn")
    with pytest.raises(ValueError, match=r"smooth weights: sigma-point weights are the UKF's"):
        smooth(model, data, estimator="ekf", weights=UnscentedWeights.merwe())
    with pytest.raises(
        ValueError,
        match=r"filter integrator: expected one of 'euler', 'semi-implicit-euler', 'heun', 'rk4', 'exact'",
    ):
        run_filter(model, data, integrator="rk5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"filter: unexpected keyword 'noise'; expected one of x0, state_sd"):
        run_filter(model, data, noise=0.1)  # type: ignore[call-arg]


@pytest.mark.timeout(120)
def test_a_bank_of_filters_split_over_cores_equals_one_vmapped_call():
    """map_cores runs a vmapped ukf_scan in one thread per chunk (five systems in two chunks, the last
    padded): the same log-likelihoods and means as one call, for the QR and the Gram kernel, which agree
    to rounding; bad batches and worker counts are named errors."""
    from twinfer.sharding import map_cores

    f, h, _, _ = _nonlinear()
    rng = np.random.default_rng(7)
    us = jnp.asarray(rng.normal(size=(5, 60, 1)))
    ys = jnp.asarray(rng.normal(size=(5, 60, 2)) * 0.1)
    chols = (0.3 * jnp.eye(2), 0.05 * jnp.eye(2), 0.2 * jnp.eye(2))

    def bank(kernel):
        one = lambda u, y: ukf_scan(f, h, jnp.array([0.1, 0.0]), *chols, u, y, kernel=kernel)  # noqa: E731
        return jax.jit(jax.vmap(lambda u, y: (one(u, y).loglik, one(u, y).means)))

    outs = {}
    for kernel in ("qr", "gram"):
        whole = bank(kernel)(us, ys)
        split = map_cores(bank(kernel), us, ys, workers=2)
        for a, b in zip(whole, split, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-13, atol=1e-15)
        outs[kernel] = whole
    np.testing.assert_allclose(outs["gram"][0], outs["qr"][0], rtol=1e-10)
    with pytest.raises(ValueError, match=r"positive count; received -1"):
        map_cores(bank("qr"), us, ys, workers=-1)
    with pytest.raises(ValueError, match=r"leading \(batch\) size; received leading sizes \[4, 5\]"):
        map_cores(bank("qr"), us, ys[:4])
