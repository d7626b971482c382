import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.signal

from twinfer.models import Chain
from twinfer.sim import (
    add_noise,
    add_noise_numpy_legacy,
    bandlimited_noise,
    bandlimited_noise_dynasim,
    discretise,
    euler_step,
    graph_node,
    heun_step,
    multisine,
    particle_simulator,
    rk4_step,
    semi_implicit_euler_step,
    simulate,
    simulate_dataset,
    simulate_discrete,
    sine_sweep,
)

CHAIN = Chain([500.0] * 4, [5e4] * 4, [300.0] * 4)


def _final_state(method, dt, horizon=0.4):
    n = int(round(horizon / dt))
    x0 = jnp.array([0.01, 0.0, -0.01, 0.02, 0.0, 0.1, 0.0, -0.1])
    traj = simulate_discrete(discretise(CHAIN, dt, method), x0, jnp.zeros((n, 4)))
    return np.asarray(traj.states[-1])


@pytest.mark.parametrize(("method", "order"), [("euler", 1), ("heun", 2), ("rk4", 4)])
def test_convergence_order_against_exact(method, order):
    """Global error of each scheme on the linear 4-DOF chain falls as dt^order against the exact map."""
    dts = [4e-3, 2e-3, 1e-3] if method != "euler" else [4e-4, 2e-4, 1e-4]
    errors = [np.linalg.norm(_final_state(method, dt) - _final_state("exact", dt)) for dt in dts]
    observed = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(np.abs(observed - order) < 0.3), observed


def test_exact_matches_scipy_cont2discrete():
    """ZOH-exact discretisation equals scipy.signal.cont2discrete to 1e-12."""
    a, b, c, d = (np.asarray(m) for m in CHAIN.linear_matrices(CHAIN.params))
    ad, bd, *_ = scipy.signal.cont2discrete((a, b, c, d), 1e-2, method="zoh")
    x, u = np.linspace(-1, 1, 8), np.array([1.0, -2.0, 3.0, 0.5])
    step = discretise(CHAIN, 1e-2, "exact").transition(0.0, jnp.asarray(x), jnp.asarray(u), CHAIN.params)
    np.testing.assert_allclose(step, ad @ x + bd @ u, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ad, scipy.linalg.expm(a * 1e-2), rtol=1e-12, atol=1e-14)


def test_adaptive_matches_exact_with_zoh_inputs():
    """diffrax with held inputs agrees with the exact discretisation on the linear chain."""
    dt, n = 0.01, 100
    us = np.asarray(jax.random.normal(jax.random.key(0), (n + 1, 4))) * 100.0
    ts = dt * np.arange(n + 1)
    x0 = np.zeros(8)
    exact = simulate_discrete(discretise(CHAIN, dt, "exact"), x0, us[:-1])
    adaptive = simulate(CHAIN, ts, x0, us)
    np.testing.assert_allclose(adaptive.states, exact.states, atol=1e-9, rtol=1e-7)


def test_adaptive_solve_compiles_once_per_model_structure_and_takes_callable_inputs(caplog):
    """A second solve of the same model and shapes, with other inputs, start and parameters, compiles
    nothing; its states are its own (they match the exact discretisation). A callable input agrees with
    the same (linear) input sampled and interpolated."""
    dt, n = 0.01, 50
    ts = dt * np.arange(n + 1)
    draws = [np.asarray(jax.random.normal(jax.random.key(i), (n + 1, 4))) * 100.0 for i in (1, 2)]
    simulate(CHAIN, ts, np.zeros(8), draws[0])
    x0 = np.full(8, 1e-3)
    params = dict(CHAIN.params)
    with caplog.at_level("WARNING"), jax.log_compiles():
        second = simulate(CHAIN, ts, x0, draws[1], params=params)
    compiled = [r.getMessage() for r in caplog.records if "diffeqsolve" in r.getMessage()]
    assert not compiled, compiled
    exact = simulate_discrete(discretise(CHAIN, dt, "exact"), x0, draws[1][:-1])
    np.testing.assert_allclose(second.states, exact.states, atol=1e-9, rtol=1e-7)
    caplog.clear()
    with caplog.at_level("WARNING"), jax.log_compiles():
        again = simulate_discrete(discretise(CHAIN, dt, "exact"), np.zeros(8), draws[0][:-1])
    assert not [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not np.allclose(again.states, exact.states)
    with caplog.at_level("WARNING"), jax.log_compiles():  # another length: a new program, and it says so
        simulate_discrete(discretise(CHAIN, dt, "exact"), np.zeros(8), draws[0][:-2])
    assert [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    u = lambda t: jnp.asarray([50.0, -20.0, 0.0, 10.0]) * t + 5.0  # noqa: E731
    held = np.asarray(jax.vmap(u)(jnp.asarray(ts)))
    by_call = simulate(CHAIN, ts, x0, u)
    by_samples = simulate(CHAIN, ts, x0, held, interpolation="linear")
    np.testing.assert_allclose(by_call.states, by_samples.states, atol=1e-10, rtol=1e-8)


def test_adaptive_duffing_matches_fine_rk4():
    """On a Duffing chain the adaptive solve agrees with fine-step RK4."""
    duff = Chain(10.0, 15.0, 1.0, cubic_stiffness=100.0, n_dof=2)
    x0 = jnp.array([0.3, -0.2, 0.0, 0.5])
    ts = np.linspace(0.0, 2.0, 21)
    adaptive = simulate(duff, ts, x0)
    fine = simulate_discrete(discretise(duff, 1e-3, "rk4"), x0, None, n_steps=2000)
    np.testing.assert_allclose(adaptive.states[-1], fine.states[-1], atol=1e-9)


def test_discretise_and_simulate_errors():
    duff = Chain(10.0, 15.0, 1.0, cubic_stiffness=100.0, n_dof=2)
    with pytest.raises(ValueError, match="method 'exact': expected a linear model"):
        discretise(duff, 0.1, "exact")
    with pytest.raises(ValueError, match="of euler, semi-implicit-euler, heun, rk4, exact; received 'rk5'"):
        discretise(CHAIN, 0.1, "rk5")
    with pytest.raises(ValueError, match="dt: expected a finite number > 0; received -0.1"):
        discretise(CHAIN, -0.1)
    with pytest.raises(ValueError, match=r"inputs: expected shape \(11, 4\) \(len\(ts\), n_input\)"):
        simulate(CHAIN, np.linspace(0, 1, 11), np.zeros(8), np.zeros((10, 4)))
    with pytest.raises(ValueError, match=r"x0: expected shape \(8,\); received \(7,\)"):
        simulate_discrete(discretise(CHAIN, 0.1), np.zeros(7), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="x0: expected finite values"):
        simulate_discrete(discretise(CHAIN, 0.1), np.full(8, np.nan), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="ts: expected an increasing"):
        simulate(CHAIN, np.array([0.0, 0.0, 1.0]), np.zeros(8))


def test_one_step_equals_the_stability_polynomial():
    """On dx/dt = lambda x one step is exactly the truncated exponential series (Hairer et al. IV.2)."""
    lam, h, x = -3.0 + 2.0j, 0.1, 1.0 + 0.5j
    z = lam * h
    f = lambda t, y: lam * y  # noqa: E731
    series = [1.0, z, z**2 / 2, z**3 / 6, z**4 / 24]
    for step, order in ((euler_step, 1), (heun_step, 2), (rk4_step, 4)):
        got = complex(step(f, 0.0, jnp.asarray(x), h))
        assert got == pytest.approx(x * sum(series[: order + 1]), rel=1e-15, abs=1e-15)


def test_steps_act_leaf_by_leaf_on_pytrees():
    """A pytree state (tuple of blocks) steps exactly like the concatenated array (same arithmetic)."""
    a = jnp.array([[0.0, 1.0, 0.2], [-2.0, -0.3, 0.1], [0.5, 0.0, -1.0]])
    x = jnp.array([0.3, -0.7, 1.1])
    flat = lambda t, y: jnp.sin(a @ y) + t  # noqa: E731

    def split(t, y):
        d = flat(t, jnp.concatenate([y[0], y[1]]))
        return d[:1], d[1:]

    for step in (euler_step, heun_step, rk4_step):
        whole = step(flat, 0.2, x, 0.05)
        parts = step(split, 0.2, (x[:1], x[1:]), 0.05)
        np.testing.assert_array_equal(np.asarray(jnp.concatenate(parts)), np.asarray(whole))


def test_heun_stage_functions_and_aux():
    """A pair of equal stage functions is the plain step; has_aux returns each stage's report."""
    f = lambda t, y: -2.0 * y + t  # noqa: E731
    x = jnp.array([1.0, -0.5])
    plain = heun_step(f, 0.0, x, 0.1)
    np.testing.assert_array_equal(heun_step((f, f), 0.0, x, 0.1), plain)
    stepped, (aux_1, aux_2) = heun_step(lambda t, y: (f(t, y), (t, y)), 0.0, x, 0.1, has_aux=True)
    np.testing.assert_array_equal(stepped, plain)
    assert aux_1[0] == 0.0 and aux_2[0] == pytest.approx(0.1)
    np.testing.assert_array_equal(aux_2[1], x + 0.1 * f(0.0, x))  # the corrector stage sees x_p
    # different stages: the corrector's function alone decides k_2
    g = lambda t, y: jnp.zeros_like(y)  # noqa: E731
    np.testing.assert_allclose(heun_step((f, g), 0.0, x, 0.1), x + 0.05 * f(0.0, x), rtol=1e-15)
    with pytest.raises(TypeError, match="heun_step rhs: expected a callable"):
        heun_step((f,), 0.0, x, 0.1)


def test_substeps_equal_repeated_steps_and_semi_implicit_euler():
    """substeps=k is k steps of dt/k; semi-implicit Euler updates v first, then q with the new v."""
    x0 = jnp.array([0.01, 0.0, -0.01, 0.02, 0.0, 0.1, 0.0, -0.1])
    u = jnp.array([10.0, -5.0, 0.0, 2.0])
    for method in ("euler", "heun", "rk4", "semi-implicit-euler"):
        one = discretise(CHAIN, 4e-3, method, substeps=4).transition(0.0, x0, u, CHAIN.params)
        fine = discretise(CHAIN, 1e-3, method)
        x = x0
        for _ in range(4):
            x = fine.transition(0.0, x, u, CHAIN.params)
        np.testing.assert_array_equal(np.asarray(one), np.asarray(x))
    h = 1e-3
    acc = CHAIN.acceleration(x0, u, CHAIN.params)
    v = x0[4:] + h * acc
    expected = jnp.concatenate([x0[:4] + h * v, v])
    got = semi_implicit_euler_step(lambda t, y: CHAIN.vector_field(t, y, u, CHAIN.params), 0.0, x0, h)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    with pytest.raises(ValueError, match="substeps: expected an integer >= 1; received 0"):
        discretise(CHAIN, 0.1, "rk4", substeps=0)
    with pytest.raises(ValueError, match="substeps: expected 1 with method 'exact'"):
        discretise(CHAIN, 0.1, "exact", substeps=2)
    with pytest.raises(ValueError, match="semi-implicit-euler': expected a mechanical state"):
        discretise(_odd_state_model(), 0.1, "semi-implicit-euler")


def test_graph_node_adds_the_message_to_the_input_of_the_discretised_model():
    """A node's transition and output are the model's with u + m, stepped by discretise (S1-S2)."""
    seg = CHAIN.segment(3, 4)
    node = graph_node(seg, 1e-3, "heun", substeps=2)
    x, u, m = jnp.array([0.01, -0.02, 0.1, 0.2]), jnp.array([3.0, -1.0]), jnp.array([-40.0, 0.0])
    step = discretise(seg, 1e-3, "heun", substeps=2)
    np.testing.assert_array_equal(
        np.asarray(node.transition(x, u, m, seg.params)),
        np.asarray(step.transition(0.0, x, u + m, seg.params)),
    )
    np.testing.assert_array_equal(
        np.asarray(node.output(x, u, m, seg.params)), np.asarray(seg.output(0.0, x, u + m, seg.params))
    )
    with pytest.raises(ValueError, match=r"graph_node Chain: expected the input u and the message m.*\(2,\)"):
        node.transition(x, u, jnp.zeros(3), seg.params)


def test_particle_simulator_equals_one_simulation_per_particle():
    """Each particle's row is the fixed-step RK4 simulation with its parameters, sampled every substeps."""
    duff = Chain(1.0, 4.0, 0.1, cubic_stiffness=1.0, n_dof=1, outputs=["x1"])
    thetas = np.array([[4.0, 0.1], [9.0, 0.3], [1.0, 0.0]])
    us = np.sin(0.05 * np.arange(40))[:, None]
    x0 = jnp.array([0.2, 0.0])
    simulate = particle_simulator(duff, duff.params, ("k1", "c1"), x0, us, 0.01, 4, 0, chunk=2)
    sims = simulate(thetas)
    assert sims.shape == (3, 10)
    for row, (k, c) in zip(sims, thetas, strict=True):
        p = {**duff.params, "k": jnp.array([k]), "c": jnp.array([c])}
        ref = simulate_discrete(discretise(duff, 0.01, "rk4"), x0, us, params=p).states[:-1:4, 0]
        np.testing.assert_allclose(row, np.asarray(ref), rtol=1e-13, atol=1e-15)
    with pytest.raises(
        ValueError, match=r"particle_simulator us: expected shape \(T \* 3, 1\).*received \(40, 1\)"
    ):
        particle_simulator(duff, duff.params, ("k1", "c1"), x0, us, 0.01, 3, 0)
    # compiled once, called again with new particles: the same rows
    np.testing.assert_array_equal(simulate(thetas[::-1]), sims[::-1])
    with pytest.raises(
        ValueError, match=r"particle_simulator thetas: expected shape \(N, 2\).*received \(3,\)"
    ):
        simulate(thetas[:, 0])
    with pytest.raises(
        ValueError, match=r"particle_simulator substeps: expected an integer >= 1; received 0"
    ):
        particle_simulator(duff, duff.params, ("k1", "c1"), x0, us, 0.01, 0, 0)


def _odd_state_model():
    from twinfer.infer.filters import augment

    return augment(Chain(1.0, 1.0, 0.0, n_dof=1), ["k1"])


def test_bandlimited_noise_spectrum_and_rms():
    """Band-limited noise has its power inside the band and the requested RMS."""
    ts = np.arange(4096) * 0.01
    sig = np.asarray(bandlimited_noise(jax.random.key(1), ts, 1.0, 5.0, rms=2.0))
    assert np.isclose(np.sqrt(np.mean(sig**2)), 2.0)
    power = np.abs(np.fft.rfft(sig)) ** 2
    freqs = np.fft.rfftfreq(ts.size, 0.01)
    inband = (freqs >= 1.0) & (freqs <= 5.0)
    assert power[~inband].sum() < 1e-20 * power.sum()
    with pytest.raises(ValueError, match="band: expected 0 <= f_low < f_high <= Nyquist"):
        bandlimited_noise(jax.random.key(1), ts, 5.0, 1.0, rms=1.0)


def test_dynasim_recipe_sanity_values():
    """specs/pinn.md 1.4 (60 s, 4096 samples, seed 43810): 114 bins, RMS 1.303, max 3.42 at amplitude 500."""
    ts = np.linspace(0.0, 60.0, 4096)
    sig = bandlimited_noise_dynasim(ts, (0.05, 1.0), amplitude=500.0, seed=43810)
    freqs = np.abs(np.fft.fftfreq(4096, ts[1] - ts[0]))
    assert np.sum((freqs >= 0.05) & (freqs <= 1.0)) == 114
    assert np.isclose(np.sqrt(np.mean(sig**2)), 1.303, atol=1e-3)
    assert np.isclose(np.max(np.abs(sig)), 3.42, atol=1e-2)


def test_multisine_and_sweep():
    ts = np.linspace(0.0, 10.0, 2001)
    ms = np.asarray(multisine(jax.random.key(2), ts, [1.0, 2.0, 3.0], rms=1.5))
    assert np.isclose(np.sqrt(np.mean(ms**2)), 1.5)
    sweep = np.asarray(sine_sweep(ts, 0.5, 5.0, 2.0))
    assert np.max(np.abs(sweep)) <= 2.0 + 1e-12 and sweep[0] == 0.0
    with pytest.raises(ValueError, match="freqs: expected positive"):
        multisine(jax.random.key(2), ts, [0.0], rms=1.0)


def test_noise_by_snr_and_std():
    """The achieved SNR matches the request; a zero channel stays zero."""
    ts = np.linspace(0, 100, 200_001)
    y = np.stack([np.sin(ts), np.zeros_like(ts)], axis=1)
    noisy = np.asarray(add_noise(jax.random.key(3), y, snr_db=20.0))
    snr = 10 * np.log10(np.mean(y[:, 0] ** 2) / np.mean((noisy[:, 0] - y[:, 0]) ** 2))
    assert abs(snr - 20.0) < 0.05
    assert np.all(noisy[:, 1] == 0.0)
    noisy = np.asarray(add_noise(jax.random.key(4), y, noise_sd=0.1))
    assert abs(np.std(noisy[:, 1]) - 0.1) < 1e-3
    legacy = add_noise_numpy_legacy(y[:1000], 10.0, seed=2024)
    assert np.all(legacy[:, 1] == 0.0) and not np.allclose(legacy[:, 0], y[:1000, 0])
    with pytest.raises(ValueError, match="exactly one of noise_sd= or snr_db="):
        add_noise(jax.random.key(3), y)
    with pytest.raises(ValueError, match=r"y: expected shape \(T, n_channels\)"):
        add_noise(jax.random.key(3), np.zeros(5), noise_sd=1.0)


def test_item1_simulate_dataset_reads_y_k_with_u_k_and_a_filter_on_it_is_consistent():
    """simulate_dataset: the exact truth of a linear chain equals the adaptive solve; without noise,
    y_k = h(x_k, u_k) (sampled, the default: accelerations read with the force of the same instant), and
    with alignment="held" y_{k+1} = h(x_{k+1}, u_k); the UKF on the record recovers an unknown stiffness
    inside its 95 % interval with NIS about 1."""
    import warnings

    from twinfer.infer.filters import FilterConsistencyWarning, run_filter
    from twinfer.models import Chain
    from twinfer.sim import simulate, simulate_dataset

    chain = Chain(
        [2.0, 1.0, 1.5], [400.0, 300.0, 200.0], [1.0, 0.8, 0.6], forced_dofs=[1], outputs=("a1", "a3", "x2")
    )
    rng = np.random.default_rng(4)
    dt, n = 0.005, 800
    force = np.repeat(rng.normal(size=(n // 10 + 1, 1)) * 20.0, 10, axis=0)[: n + 1]
    clean = simulate_dataset(chain, force, dt, 0.0, jax.random.key(0), truth="exact")
    ref = simulate(chain, clean.times, jnp.zeros(6), force, interpolation="zoh")
    np.testing.assert_allclose(clean.truth_states, np.asarray(ref.states), rtol=1e-7, atol=1e-9)
    held = simulate_dataset(chain, force, dt, 0.0, jax.random.key(0), truth="exact", alignment="held")
    assert (clean.alignment, held.alignment) == ("sampled", "held")
    for k in (0, 5, 399):
        y = chain.output(0.0, jnp.asarray(clean.truth_states[k + 1]), jnp.asarray(force[k + 1]), chain.params)
        np.testing.assert_allclose(clean.observations[k + 1], np.asarray(y), rtol=1e-12, atol=1e-12)
        y = chain.output(0.0, jnp.asarray(held.truth_states[k + 1]), jnp.asarray(force[k]), chain.params)
        np.testing.assert_allclose(held.observations[k + 1], np.asarray(y), rtol=1e-12, atol=1e-12)
    assert clean.output_names == ("a1", "a3", "x2") and clean.truth_params["k2"] == 300.0
    sd = np.array([0.5, 0.5, 1e-4])
    data = simulate_dataset(chain, force, dt, sd, jax.random.key(1), truth="rk4", substeps=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FilterConsistencyWarning)
        est = run_filter(
            chain, data, noise_sd=sd, process_sd=1e-4, state_sd=0.1, unknown={"k2": (200.0, 100.0, 0.0)}
        )
    assert 0.3 < est.nis < 3.0, est.nis
    mean, std = (float(np.asarray(v)[-1]) for v in est.params["k2"])
    assert abs(mean - 300.0) < 1.96 * std and std < 20.0, (mean, std)
    again = simulate_dataset(chain, force, dt, sd, jax.random.key(1), truth="rk4", substeps=4)
    np.testing.assert_array_equal(again.observations, data.observations)


def test_simulate_dataset_errors_name_the_argument():
    from twinfer.models import Chain
    from twinfer.sim import simulate_dataset

    chain = Chain([1.0, 1.0], [100.0, 100.0], [0.1, 0.1], forced_dofs=[2])
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"inputs: expected shape \(T \+ 1, 1\)"):
        simulate_dataset(chain, np.zeros((10, 2)), 0.01, 0.1, key)
    with pytest.raises(ValueError, match=r"noise_sd: expected finite values >= 0"):
        simulate_dataset(chain, np.zeros((10, 1)), 0.01, -1.0, key)
    with pytest.raises(ValueError, match=r"truth: expected one of"):
        simulate_dataset(chain, np.zeros((10, 1)), 0.01, 0.1, key, truth="dopri")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"inputs: Chain has 1 inputs"):
        simulate_dataset(chain, None, 0.01, 0.1, key, n_steps=5)
    with pytest.raises(ValueError, match=r"inputs: expected a float64 array; received dtype float32"):
        simulate_dataset(chain, np.zeros((10, 1), np.float32), 0.01, 0.1, key)


def test_a_process_noise_in_the_truth_has_the_given_covariance():
    """simulate_dataset(process_cov=Q): on a linear chain with its exact truth, the residuals
    x_{k+1} - Phi x_k - Gamma u_k (Phi, Gamma from scipy's matrix exponential, an independent route)
    are the added noise: zero-mean with covariance Q (a rank-one Q, as a torque disturbance gives)."""
    chain = Chain([100.0, 80.0], [2e4, 1.8e4], 30.0, forced_dofs=[2], outputs=("a1",))
    dt, n = 1e-3, 20000
    g = np.asarray([0.0, 1e-5, 0.0, 2e-3])
    Q = np.outer(g, g) + np.diag([1e-12, 0.0, 1e-12, 1e-8])
    force = np.random.default_rng(0).normal(size=(n + 1, 1)) * 50.0
    data = simulate_dataset(chain, force, dt, 0.01, jax.random.key(3), process_cov=Q)
    A, B, _, _ = (np.asarray(m) for m in chain.linear_matrices(chain.params))
    block = scipy.linalg.expm(np.block([[A, B], [np.zeros((1, 5))]]) * dt)
    phi, gamma = block[:4, :4], block[:4, 4:]
    x = np.asarray(data.truth_states)
    residual = x[1:] - x[:-1] @ phi.T - force[:-1] @ gamma.T
    d = np.sqrt(np.diag(Q))
    np.testing.assert_allclose(np.cov(residual.T) / np.outer(d, d), Q / np.outer(d, d), atol=0.03)
    assert np.all(np.abs(residual.mean(axis=0)) <= 4.0 * d / np.sqrt(n))
    assert data.metadata["process_cov"] == Q.tolist()
    quiet = simulate_dataset(chain, force, dt, 0.01, jax.random.key(3))
    np.testing.assert_array_equal(data.observations[0], quiet.observations[0])  # the same sensor noise draw
    with pytest.raises(ValueError, match=r"process_cov: expected a finite symmetric \(4, 4\) matrix"):
        simulate_dataset(chain, force, dt, 0.01, jax.random.key(3), process_cov=np.eye(3))
    duffing = Chain(
        [100.0, 80.0], [2e4, 1.8e4], 30.0, cubic_stiffness=[0.0, 1e9], forced_dofs=[2], outputs=("a1",)
    )
    with pytest.raises(ValueError, match=r"process_cov: .* needs a stepped truth"):
        simulate_dataset(duffing, force[:10], dt, 0.01, jax.random.key(3), process_cov=Q)


def test_simulate_dataset_input_noise_none_is_no_noise():
    from twinfer.models import Chain
    from twinfer.sim import simulate_dataset

    chain = Chain([1.0, 2.0], [10.0, 20.0], 0.1, forced_dofs=[2], outputs=["a1"])
    force = np.sin(np.arange(11) * 0.1)[:, None]
    plain = simulate_dataset(chain, force, 0.01, 0.0, jax.random.key(0), input_noise_sd=None)
    np.testing.assert_array_equal(plain.inputs, force)
    noisy = simulate_dataset(chain, force, 0.01, 0.0, jax.random.key(0), input_noise_sd=0.5)
    assert not np.allclose(noisy.inputs, force)
    np.testing.assert_array_equal(noisy.truth_states, plain.truth_states)  # the truth is the applied force's
