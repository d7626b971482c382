"""The Gaussian core (twinfer.infer.gaussian) against closed forms and independent references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from oracle_ukf import ukf_cov_scan
from twinfer.infer.filters import run_ukf, ukf_scan
from twinfer.infer.gaussian import (
    HOUSEHOLDER_MAX,
    UnscentedWeights,
    cho_solve,
    cholesky,
    condition_exact,
    predict_condition,
    psd_factor,
    solve_lower,
    tria,
    tria_rows,
    tria_scalar,
    update,
    update_scalar,
)


def _dense_update(m, P, H, d, R, y, mask):
    """The covariance-form Kalman update on the observed components only (numpy, for reference)."""
    o = np.flatnonzero(mask)
    Ho, Ro = H[o], R[np.ix_(o, o)]
    S = Ho @ P @ Ho.T + Ro
    K = P @ Ho.T @ np.linalg.inv(S)
    v = y[o] - Ho @ m - d[o]
    ll = multivariate_normal(np.zeros(len(o)), S).logpdf(v) if len(o) else 0.0
    return m + K @ v, P - K @ S @ K.T, ll


@pytest.mark.parametrize("n", [1, 3, 4, 7])
def test_small_cholesky_and_solves_equal_lapack(n):
    """The written-out factorisation and solves equal LAPACK's to rounding, below and above UNROLL_MAX."""
    a = jax.random.normal(jax.random.key(n), (n, n))
    spd = a @ a.T + n * jnp.eye(n)
    b = jax.random.normal(jax.random.key(n + 100), (n, 2))
    low = cholesky(spd)
    np.testing.assert_allclose(low, jnp.linalg.cholesky(spd), rtol=0, atol=1e-12)
    np.testing.assert_allclose(cho_solve(low, b), jnp.linalg.solve(spd, b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        solve_lower(low, b[:, 0]), jax.scipy.linalg.solve_triangular(low, b[:, 0], lower=True), atol=1e-12
    )


def test_small_cholesky_is_nan_on_indefinite_and_vmaps():
    """An indefinite matrix gives NaN (so the filters' divergence check fires); vmap works."""
    assert bool(jnp.any(jnp.isnan(cholesky(jnp.array([[1.0, 2.0], [2.0, 1.0]])))))
    mats = jnp.stack([jnp.eye(3) * (i + 1.0) for i in range(4)])
    np.testing.assert_allclose(jax.vmap(cholesky)(mats), jnp.linalg.cholesky(mats), atol=1e-14)


@pytest.mark.parametrize("shape", [(6, 12), (3, 6), (HOUSEHOLDER_MAX + 3, 2 * HOUSEHOLDER_MAX)])
def test_tria_kernels_agree_and_factor(shape):
    """Householder rows, the entry-by-entry form and QR (above HOUSEHOLDER_MAX) give the same lower factor
    of A A^T with a non-negative diagonal, also for a rank-deficient A."""
    a = np.random.default_rng(0).normal(size=shape)
    a[:, 3] = 0.0
    low = np.asarray(tria(jnp.asarray(a)))
    np.testing.assert_allclose(low @ low.T, a @ a.T, atol=1e-10)
    assert np.allclose(low, np.tril(low)) and np.all(np.diag(low) >= 0)
    np.testing.assert_allclose(low, np.linalg.cholesky(a @ a.T), atol=1e-9)
    if shape[0] <= 6:
        np.testing.assert_allclose(tria_scalar(jnp.asarray(a)), low, atol=1e-12)
    a[2] = a[1] * 2.0  # rank deficient: the factor is not unique, its product is
    low = np.asarray(tria(jnp.asarray(a)))
    np.testing.assert_allclose(low @ low.T, a @ a.T, atol=1e-10)
    assert np.all(np.isfinite(low)) and np.all(np.diag(low) >= 0)


def _primitives(fn, *args):
    """The names of every primitive ``fn``'s jaxpr holds, nested jaxprs included."""
    names = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            names.add(eqn.primitive.name)
            for value in eqn.params.values():
                for item in value if isinstance(value, (list, tuple)) else [value]:
                    inner = getattr(item, "jaxpr", item)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


def test_tria_takes_the_library_qr_on_one_matrix_and_reflections_in_a_batch_with_one_derivative():
    """A small tria (and an update's joint factor) is one LAPACK QR on a single matrix, the written-out
    reflections under vmap; values agree to rounding, and forward, reverse and second derivatives are
    the reflections' in both."""
    a = jnp.asarray(np.random.default_rng(3).normal(size=(6, 12)))
    batch = jnp.stack([a, 2.0 * a, a[::-1]])
    assert "qr" in _primitives(tria, a)
    assert "qr" not in _primitives(jax.vmap(tria), batch)
    # each evaluation one compiled program (op by op, this test dispatched and compiled ~450 small ones)
    np.testing.assert_allclose(jax.jit(jax.vmap(tria))(batch)[0], jax.jit(tria)(a), atol=1e-13)
    loss = lambda x: jnp.sum(jnp.sin(tria(x)))  # noqa: E731
    g = jax.jit(jax.grad(loss))(a)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(loss))(a), g, atol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.vmap(jax.grad(loss)))(batch)[0], g, atol=1e-12)
    eps = 1e-6 * np.random.default_rng(4).normal(size=a.shape)
    value = jax.jit(loss)
    assert float(jnp.sum(g * eps)) == pytest.approx(float(value(a + eps) - value(a - eps)) / 2, rel=1e-6)
    h = jax.jit(jax.hessian(loss))(a)
    assert h.shape == (6, 12, 6, 12) and np.all(np.isfinite(h))
    m, p = jnp.zeros(4), jnp.asarray(np.diag([1.0, 2.0, 3.0, 4.0]))
    H, y, mask = jnp.eye(2, 4), jnp.array([0.3, -0.1]), jnp.array([True, True])
    one = jax.jit(update)(m, p, H, jnp.zeros(2), jnp.array([0.5, 0.5]), y, mask)
    many = jax.jit(jax.vmap(lambda y: update(m, p, H, jnp.zeros(2), jnp.array([0.5, 0.5]), y, mask)))(
        jnp.stack([y, y])
    )
    np.testing.assert_allclose(many[0][0], one[0], atol=1e-14)
    np.testing.assert_allclose(many[1][0] @ many[1][0].T, one[1] @ one[1].T, atol=1e-13)


@pytest.mark.parametrize(("shape", "k"), [((9, 9), 3), ((11, 17), 6), ((11, 17), 9)])
def test_tria_rows_gives_the_update_factors_of_the_full_tria(shape, k):
    """k reflections: T lower-triangular with T T^T = A1 A1^T (the full tria's top block), the cross block
    G T^T = A2 A1^T, and the remaining factor B B^T = A2 A2^T - G G^T (the updated covariance). k of 6
    and 9 take more than one block of reflections (REFLECTION_BLOCK = 4), with a remainder."""
    a = np.random.default_rng(1).normal(size=shape)
    out = np.asarray(tria_rows(jnp.asarray(a), k))
    T, G, B = out[:k, :k], out[k:, :k], out[k:, k:]
    np.testing.assert_allclose(out[:k, k:], 0.0, atol=0)
    np.testing.assert_allclose(T, np.asarray(tria(jnp.asarray(a)))[:k, :k], atol=1e-12)
    np.testing.assert_allclose(G @ T.T, a[k:] @ a[:k].T, atol=1e-12)
    np.testing.assert_allclose(B @ B.T, a[k:] @ a[k:].T - G @ G.T, atol=1e-12)
    with pytest.raises(ValueError, match="tria_rows k"):
        tria_rows(jnp.asarray(a), 0)


@pytest.mark.parametrize("n_x", [3, 40])
def test_update_with_correlated_noise_and_a_mask_equals_the_dense_update(n_x):
    """One masking rule: the marginal of a correlated R on the observed components, both kernels (Householder
    rows below HOUSEHOLDER_MAX, QR above), against the covariance-form update and scipy's density."""
    rng = np.random.default_rng(2)
    n_y = 4
    a = rng.normal(size=(n_x, n_x))
    P = a @ a.T + np.eye(n_x)
    b = rng.normal(size=(n_y, n_y))
    R = b @ b.T + 0.5 * np.eye(n_y)
    m, H, d, y = rng.normal(size=n_x), rng.normal(size=(n_y, n_x)), rng.normal(size=n_y), rng.normal(size=n_y)
    for mask in (np.ones(n_y, bool), np.array([True, False, True, False]), np.zeros(n_y, bool)):
        args = [jnp.asarray(v) for v in (m, np.linalg.cholesky(P), H, d, np.linalg.cholesky(R), y)]
        mean, chol, info = update(*args, jnp.asarray(mask))
        ref_m, ref_P, ref_ll = _dense_update(m, P, H, d, R, y, mask)
        np.testing.assert_allclose(mean, ref_m, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(chol @ chol.T), ref_P, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(float(info.loglik), ref_ll, rtol=1e-10, atol=1e-12)
        assert np.allclose(chol, np.tril(chol))
        y_missing = jnp.where(
            jnp.asarray(mask), args[5], jnp.nan
        )  # the value of a masked entry is never read
        np.testing.assert_allclose(update(*args[:5], y_missing, jnp.asarray(mask))[0], mean, rtol=0)


@pytest.mark.parametrize("n_x", [3, 9, 40])
def test_predict_condition_equals_predict_then_update_on_one_system_and_in_a_batch(n_x):
    """One factorisation of the joint factor written from the prior equals the covariance-form predict and
    update (correlated R, masks), on one system (the library QR) and under vmap (reflections, a square
    factor carried); the triangular factor is that of the posterior; no sensor gives the prediction."""
    rng = np.random.default_rng(3)
    n_y, q = 4, 2
    a = rng.normal(size=(n_x, n_x))
    P = a @ a.T + np.eye(n_x)
    A, N = rng.normal(size=(n_x, n_x)) / np.sqrt(n_x), rng.normal(size=(n_x, q))
    b_r = rng.normal(size=(n_y, n_y))
    R = b_r @ b_r.T + 0.5 * np.eye(n_y)
    m, b, H = rng.normal(size=n_x), rng.normal(size=n_x), rng.normal(size=(n_y, n_x))
    d, y = rng.normal(size=n_y), rng.normal(size=n_y)
    P_pred, m_pred = A @ P @ A.T + N @ N.T, A @ m + b
    fixed = [jnp.asarray(v) for v in (np.linalg.cholesky(P), A, b, N, H, d, np.linalg.cholesky(R))]

    def run(mean, y, mask):
        chol_P, A_, b_, N_, H_, d_, chol_R = fixed
        return predict_condition(mean, chol_P, A_, b_, N_, H_, d_, chol_R, y, mask)

    masks = (np.ones(n_y, bool), np.array([True, False, True, False]), np.zeros(n_y, bool))
    for mask in masks:
        mean, carry, chol, chol_pred, info = run(jnp.asarray(m), jnp.asarray(y), jnp.asarray(mask))
        ref_m, ref_P, ref_ll = _dense_update(m_pred, P_pred, H, d, R, y, mask)
        np.testing.assert_allclose(chol_pred, np.linalg.cholesky(P_pred), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(mean, ref_m, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(np.asarray(chol @ chol.T), ref_P, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.asarray(carry @ carry.T), ref_P, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(float(info.loglik), ref_ll, rtol=1e-10, atol=1e-10)
        assert np.allclose(chol, np.tril(chol))
    means = jnp.asarray(rng.normal(size=(3, n_x)))
    ys = jnp.asarray(rng.normal(size=(3, n_y)))
    batch = jax.vmap(run)(means, ys, jnp.asarray(np.stack(masks)))
    for i, mask in enumerate(masks):
        prior_mean, y_i = A @ np.asarray(means[i]) + b, np.asarray(ys[i])
        ref_m, ref_P, ref_ll = _dense_update(prior_mean, P_pred, H, d, R, y_i, mask)
        np.testing.assert_allclose(batch[0][i], ref_m, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(np.asarray(batch[1][i] @ batch[1][i].T), ref_P, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.asarray(batch[2][i] @ batch[2][i].T), ref_P, rtol=1e-9, atol=1e-9)
        assert np.allclose(batch[2][i], np.tril(batch[2][i]))
        np.testing.assert_allclose(batch[3][i], np.linalg.cholesky(P_pred), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(float(batch[4].loglik[i]), ref_ll, rtol=1e-10, atol=1e-10)
    grad = jax.grad(lambda mu: run(mu, jnp.asarray(y), jnp.ones(n_y, bool))[4].loglik)(jnp.asarray(m))
    step = 1e-6 * np.eye(n_x)[0]
    ll = lambda mu: _dense_update(A @ mu + b, P_pred, H, d, R, y, np.ones(n_y, bool))[2]  # noqa: E731
    np.testing.assert_allclose(float(grad[0]), (ll(m + step) - ll(m - step)) / 2e-6, rtol=1e-5)
    chol_P, A_, b_, N_ = fixed[:4]
    nothing = (jnp.zeros((0, n_x)), jnp.zeros(0), jnp.zeros((0, 0)), jnp.zeros(0), jnp.zeros(0, bool))
    none = predict_condition(jnp.asarray(m), chol_P, A_, b_, N_, *nothing)
    np.testing.assert_allclose(none[0], m_pred, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(none[2] @ none[2].T), P_pred, rtol=1e-9, atol=1e-9)
    assert float(none[4].loglik) == 0.0


def test_scalar_and_exact_updates_equal_the_dense_update():
    """Potter's scalar square-root update equals the QR-based update (mean, covariance, log density), for a
    noisy and a zero-noise (ODE residual) row; an exact observation leaves zero variance along h."""
    rng = np.random.default_rng(5)
    chol = jnp.asarray(np.tril(rng.normal(size=(3, 3))))
    mean, h = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=3))
    y, d = 0.7, 0.2
    m1, c1, info = update(
        mean, chol, h[None], jnp.array([d]), jnp.array([[0.3]]), jnp.array([y]), jnp.array([True])
    )
    m2, c2, ll2 = update_scalar(mean, chol, h, y - h @ mean - d, 0.3, jnp.array(True))
    np.testing.assert_allclose(m2, m1, rtol=1e-12)
    np.testing.assert_allclose(c2 @ c2.T, c1 @ c1.T, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ll2, info.loglik, rtol=1e-12)
    residual = h @ mean + d
    m1, c1 = condition_exact(mean, chol, h[None], jnp.array([residual]), jnp.array([True]))
    m2, c2, _ = update_scalar(mean, chol, h, -residual, 0.0, jnp.array(True))
    np.testing.assert_allclose(m2, m1, rtol=1e-12)
    np.testing.assert_allclose(c2 @ c2.T, c1 @ c1.T, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(c2 @ c2.T) @ np.asarray(h), 0.0, atol=1e-13)
    m3, c3, ll3 = update_scalar(mean, chol, h, 1.0, 0.3, jnp.array(False))
    assert np.all(m3 == mean) and np.all(c3 == chol) and ll3 == 0.0


def test_psd_factor_accepts_singular_covariances_and_names_indefinite_ones():
    sing = np.diag([2.0, 0.0, 1.0])
    low = psd_factor(sing)
    np.testing.assert_allclose(low @ low.T, sing, atol=1e-14)
    with pytest.raises(ValueError, match=r"Q: expected a positive semi-definite covariance; received .* -1"):
        psd_factor(np.diag([1.0, -1.0]), "Q")


@pytest.mark.parametrize(
    ("alpha", "beta", "kappa", "redraw"),
    [(1.0, 0.0, 0.0, False), (1.0, 0.0, 1.0, False), (1.0, 2.0, 0.0, True), (0.5, 2.0, 0.0, False)],
)
def test_square_root_ukf_equals_the_covariance_form_oracle(alpha, beta, kappa, redraw):
    """The square-root UKF (paper-code weights, Merwe's, redrawn points, and a negative central weight)
    reproduces the covariance-form equations of Alg. 6 on a nonlinear oscillator with missing data."""
    rng = np.random.default_rng(3)
    f = lambda x, u: jnp.stack([x[0] + 0.05 * x[1], x[1] - 0.05 * (x[0] + x[0] ** 3) + u[0]])  # noqa: E731
    h = lambda x, u: jnp.stack([jnp.sin(x[0]), x[0] * x[1]])  # noqa: E731
    T = 60
    us = jnp.asarray(rng.normal(size=(T, 1)) * 0.1)
    ys = jnp.asarray(rng.normal(size=(T, 2)) * 0.3)
    masks = jnp.asarray(rng.random((T, 2)) > 0.3)
    x0, P0 = jnp.array([0.5, 0.0]), jnp.diag(jnp.array([0.2, 0.1]))
    Q, R = jnp.array([[1e-3, 2e-4], [2e-4, 2e-3]]), jnp.array([[0.09, 0.02], [0.02, 0.05]])
    w = UnscentedWeights(alpha=alpha, beta=beta, kappa=kappa)
    ref_m, ref_P, ref_ll = ukf_cov_scan(
        f, h, x0, P0, Q, R, us, ys, masks, alpha=alpha, beta=beta, kappa=kappa, redraw=redraw
    )
    chol = [jnp.linalg.cholesky(a) for a in (P0, Q, R)]
    out = ukf_scan(f, h, x0, *chol, us, ys, masks, weights=w, redraw=redraw)
    np.testing.assert_allclose(out.means, ref_m, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(out.covs, ref_P, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(float(out.loglik), float(ref_ll), rtol=1e-10)
    via_run = run_ukf(f, h, x0, P0, Q, R, us, ys, masks, weights=w, redraw=redraw)
    np.testing.assert_allclose(via_run.means, out.means, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("redraw", [False, True])
def test_sequential_update_of_independent_sensors_equals_the_joint_update(redraw):
    """A matrix h with a vector of sensor standard deviations takes one scalar update per sensor (the grid's
    clusters); it equals the joint square-root update with the diagonal factor, masked components included."""
    from twinfer.infer.filters import ukf_step

    rng = np.random.default_rng(8)
    n, m = 6, 4
    a = rng.normal(size=(n, n))
    chol = np.linalg.cholesky(a @ a.T + np.eye(n))
    H = rng.normal(size=(m, n))
    std = np.array([0.3, 0.1, 0.5, 0.2])
    f = lambda x, u: x + 0.1 * jnp.sin(x)  # noqa: E731
    w = UnscentedWeights.paper_code(1.0)
    for mask in (np.ones(m, bool), np.array([True, False, True, False])):
        args = (jnp.asarray(rng.normal(size=n)), jnp.asarray(chol), 0.1 * jnp.eye(n))
        y, mk = jnp.asarray(rng.normal(size=m)), jnp.asarray(mask)
        seq = ukf_step(f, jnp.asarray(H), *args, jnp.asarray(std), None, y, mk, weights=w, redraw=redraw)
        joint = ukf_step(
            f, jnp.asarray(H), *args, jnp.diag(jnp.asarray(std)), None, y, mk, weights=w, redraw=redraw
        )
        np.testing.assert_allclose(seq.mean, joint.mean, rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(seq.chol, joint.chol, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(float(seq.loglik), float(joint.loglik), rtol=1e-11)
        np.testing.assert_allclose(float(seq.nis), float(joint.nis), rtol=1e-10)


def test_gram_kernel_equals_the_qr_update_for_functions_matrices_masks_and_correlated_noise():
    """ukf_step(kernel='gram') (joint covariance by products, conditioned by condition_moments) gives the
    QR kernel's posterior mean, factor, log-likelihood and NIS, for a nonlinear h and for a matrix H, with
    correlated R, vector R and missing components; it refuses a negative central weight by name."""
    from twinfer.infer.filters import ukf_step

    rng = np.random.default_rng(11)
    n, m = 5, 3
    a = rng.normal(size=(n, n))
    chol = jnp.asarray(np.linalg.cholesky(a @ a.T + np.eye(n)))
    H = jnp.asarray(rng.normal(size=(m, n)))
    r = rng.normal(size=(m, m))
    chol_r_full = jnp.asarray(np.linalg.cholesky(r @ r.T + 0.5 * np.eye(m)))
    f = lambda x, u: x + 0.1 * jnp.sin(x) + u  # noqa: E731
    h_fn = lambda x, u: jnp.tanh(H @ x)  # noqa: E731
    w = UnscentedWeights.paper_code(1.0)
    chol_q = 0.2 * jnp.eye(n)
    for h in (h_fn, H):
        for chol_r in (chol_r_full, jnp.asarray([0.3, 0.2, 0.4])):
            for mask in (np.ones(m, bool), np.array([True, False, True])):
                x, y = jnp.asarray(rng.normal(size=n)), jnp.asarray(rng.normal(size=m))
                args = (f, h, x, chol, chol_q, chol_r, 0.01, y, jnp.asarray(mask))
                qr = ukf_step(*args, weights=w)
                gram = ukf_step(*args, weights=w, kernel="gram")
                np.testing.assert_allclose(gram.mean, qr.mean, rtol=1e-11, atol=1e-13)
                np.testing.assert_allclose(
                    gram.chol @ gram.chol.T, qr.chol @ qr.chol.T, rtol=1e-10, atol=1e-13
                )
                np.testing.assert_allclose(float(gram.loglik), float(qr.loglik), rtol=1e-11)
                np.testing.assert_allclose(float(gram.nis), float(qr.nis), rtol=1e-10)
    with pytest.raises(ValueError, match=r"kernel='gram': expected a non-negative central weight"):
        ukf_step(
            f,
            H,
            x,
            chol,
            chol_q,
            chol_r_full,
            0.0,
            y,
            jnp.ones(m, bool),
            weights=UnscentedWeights(0.5, 2.0, 0.0),
            kernel="gram",
        )


def test_ukf_scan_takes_sensor_standard_deviations_as_chol_R():
    """``ukf_scan`` passes a vector ``chol_R`` (independent sensors) to every step: it equals the scan with
    the diagonal factor, for a measurement function and for a matrix (the per-sensor path), with gaps."""
    rng = np.random.default_rng(11)
    T, n, m = 25, 3, 2
    f = lambda x, u: x + 0.05 * jnp.sin(x) + u  # noqa: E731
    H = jnp.asarray(rng.normal(size=(m, n)))
    us = jnp.asarray(rng.normal(size=(T, n)) * 0.01)
    ys = jnp.asarray(rng.normal(size=(T, m)))
    masks = jnp.asarray(rng.random((T, m)) > 0.3)
    std = jnp.array([0.3, 0.2])
    args = (jnp.zeros(n), jnp.eye(n), 0.1 * jnp.eye(n))
    for h in (lambda x, u: H @ x, H):
        by_std = ukf_scan(f, h, *args, std, us, ys, masks)
        by_factor = ukf_scan(f, h, *args, jnp.diag(std), us, ys, masks)
        np.testing.assert_allclose(by_std.means, by_factor.means, rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(by_std.covs, by_factor.covs, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(float(by_std.loglik), float(by_factor.loglik), rtol=1e-11)
