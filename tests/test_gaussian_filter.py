import jax
import jax.numpy as jnp
import numpy as np
import pytest

from oracle_ukf import ukf_cov_scan
from twinfer.infer.filters import gaussian_filter
from twinfer.infer.gaussian import UnscentedWeights, linear, taylor, tria, unscented


def _random_system(seed, n=3, m=2, steps=15):
    rng = np.random.default_rng(seed)
    F = 0.9 * np.linalg.qr(rng.normal(size=(n, n)))[0]
    H = rng.normal(size=(m, n))
    lq, lr = rng.normal(size=(n, n)) * 0.1, rng.normal(size=(m, m)) * 0.2 + np.eye(m) * 0.3
    Q, R = lq @ lq.T + 1e-3 * np.eye(n), lr @ lr.T
    ys = rng.normal(size=(steps, m))
    return F, H, Q, R, ys


def _covariance_kf(F, H, Q, R, x0, P0, ys, masks):
    """Textbook covariance-form KF (Alg. 4, S12) with masked components dropped: the reference."""
    x, P, ll, means, covs = x0.copy(), P0.copy(), 0.0, [], []
    for y, mask in zip(ys, masks, strict=True):
        x, P = F @ x, F @ P @ F.T + Q
        Ho, yo, Ro = H[mask], y[mask], R[np.ix_(mask, mask)]
        S = Ho @ P @ Ho.T + Ro
        K = P @ Ho.T @ np.linalg.inv(S)
        innov = yo - Ho @ x
        ll += -0.5 * (innov @ np.linalg.solve(S, innov) + np.linalg.slogdet(2 * np.pi * S)[1])
        x, P = x + K @ innov, P - K @ S @ K.T
        means.append(x)
        covs.append(P)
    return np.array(means), np.array(covs), ll


def _linear_filter(F, H, Q, R, x0, ys, masks=None, **options):
    """``gaussian_filter`` with the KF linearisation on ``x' = F x``, ``y = H x``, starting from N(x0, I)."""
    return gaussian_filter(
        lambda x, u: jnp.asarray(F) @ x,
        lambda x, u: jnp.asarray(H) @ x,
        jnp.asarray(x0),
        jnp.eye(3),
        jnp.linalg.cholesky(Q),
        jnp.linalg.cholesky(R),
        jnp.zeros((15, 1)),
        ys,
        masks,
        linearisation=linear,
        **options,
    )


@pytest.mark.parametrize("seed", range(4))
def test_square_root_kf_equals_covariance_form(seed):
    """Square-root atoms reproduce the covariance-form KF to 1e-10, with correlated R and missing data."""
    F, H, Q, R, ys = _random_system(seed)
    masks = np.random.default_rng(seed + 10).random(ys.shape) > 0.3
    x0, P0 = np.ones(3), np.eye(3)
    ref_m, ref_c, ref_ll = _covariance_kf(F, H, Q, R, x0, P0, ys, masks)
    out = _linear_filter(F, H, Q, R, x0, jnp.where(masks, ys, jnp.nan))
    np.testing.assert_allclose(out.means, ref_m, atol=1e-10)
    np.testing.assert_allclose(np.einsum("tij,tkj->tik", out.chols, out.chols), ref_c, atol=1e-10)
    np.testing.assert_allclose(out.loglik, ref_ll, rtol=1e-10)


@pytest.mark.parametrize("lin", ["taylor", "unscented"])
def test_ekf_and_sqrt_ukf_equal_kf_on_linear_model(lin):
    """EKF and the square-root (SLR) UKF equal the KF when the model is linear-Gaussian."""
    F, H, Q, R, ys = _random_system(7)
    args = (
        lambda x, u: jnp.asarray(F) @ x,
        lambda x, u: jnp.asarray(H) @ x,
        jnp.ones(3),
        jnp.eye(3),
        jnp.linalg.cholesky(Q),
        jnp.linalg.cholesky(R),
        jnp.zeros((15, 1)),
        jnp.asarray(ys),
    )
    ref = gaussian_filter(*args, linearisation=linear)
    other = gaussian_filter(
        *args, linearisation=taylor if lin == "taylor" else unscented(UnscentedWeights.merwe(1.0, 2.0, 0.0))
    )
    np.testing.assert_allclose(other.means, ref.means, atol=1e-10)
    np.testing.assert_allclose(other.loglik, ref.loglik, rtol=1e-10)


def test_sqrt_ukf_matches_covariance_ukf_on_nonlinear_model():
    """The square-root SLR UKF and the covariance-form sigma-point UKF (redraw, the test oracle) agree on a
    nonlinear model."""
    f = lambda x, u: jnp.array([x[0] + 0.1 * x[1], x[1] - 0.1 * jnp.sin(x[0]) + 0.1 * u[0]])
    h = lambda x, u: jnp.array([x[0] ** 2, x[1]])
    rng = np.random.default_rng(0)
    us, ys = jnp.asarray(rng.normal(size=(30, 1))), jnp.asarray(0.3 + 0.1 * rng.normal(size=(30, 2)))
    w = UnscentedWeights.merwe(1.0, 2.0, 0.5)
    x0, P0, Q, R = jnp.array([0.3, 0.1]), 0.1 * jnp.eye(2), 1e-3 * jnp.eye(2), 1e-2 * jnp.eye(2)
    masks = jnp.ones(ys.shape, bool)
    ref_m, _, ref_ll = ukf_cov_scan(
        f, h, x0, P0, Q, R, us, ys, masks, alpha=1.0, beta=2.0, kappa=0.5, redraw=True
    )
    sqrt_form = gaussian_filter(
        f,
        h,
        x0,
        jnp.linalg.cholesky(P0),
        jnp.linalg.cholesky(Q),
        jnp.linalg.cholesky(R),
        us,
        ys,
        linearisation=unscented(w),
    )
    np.testing.assert_allclose(sqrt_form.means, ref_m, atol=1e-10)
    np.testing.assert_allclose(sqrt_form.loglik, ref_ll, rtol=1e-10)


def test_redrawn_sigma_point_ukf_equals_the_unscented_linearisation_with_missing_values():
    """ukf_scan(redraw=True) (one QR a half step) and gaussian_filter with the unscented linearisation
    (statistical linear regression) give the same moments for non-negative weights: CentralProgram's
    "redrawn" filter takes the first (twinfer bench peers: about 2.4 times faster)."""
    from twinfer.infer.filters import ukf_scan

    f = lambda x, u: jnp.array([x[0] + 0.1 * x[1], x[1] - 0.1 * jnp.sin(x[0]) + 0.1 * u[0]])
    h = lambda x, u: jnp.array([x[0] ** 2, x[1], x[0] * x[1]])
    rng = np.random.default_rng(4)
    us, ys = jnp.asarray(rng.normal(size=(40, 1))), jnp.asarray(0.3 + 0.1 * rng.normal(size=(40, 3)))
    masks = jnp.asarray(rng.random(size=(40, 3)) > 0.3)
    lr = rng.normal(size=(3, 3)) * 0.05 + 0.1 * np.eye(3)
    chols = (0.3 * jnp.eye(2), 0.03 * jnp.eye(2), jnp.asarray(np.linalg.cholesky(lr @ lr.T)))
    x0 = jnp.array([0.3, 0.1])
    merwe = UnscentedWeights.merwe
    for w in (merwe(), merwe(1.0, 2.0, 0.5), UnscentedWeights.paper_code(1.0)):
        slr = gaussian_filter(f, h, x0, *chols, us, ys, masks, linearisation=unscented(w))
        direct = ukf_scan(f, h, x0, *chols, us, ys, masks, weights=w, redraw=True)
        np.testing.assert_allclose(direct.means, slr.means, rtol=0, atol=1e-12)
        np.testing.assert_allclose(direct.covs, slr.covs, rtol=0, atol=1e-13)
        np.testing.assert_allclose(direct.loglik, slr.loglik, rtol=1e-12)


def test_tria_and_extra_process_noise():
    """tria gives a lower factor of A A^T; injected extra process noise adds to Q exactly."""
    a = jax.random.normal(jax.random.key(0), (3, 5))
    low = tria(a)
    np.testing.assert_allclose(low @ low.T, a @ a.T, atol=1e-12)
    assert np.allclose(np.triu(np.asarray(low), 1), 0.0) and np.all(np.diag(np.asarray(low)) >= 0)
    F, H, Q, R, ys = _random_system(3)
    base = dict(us=jnp.zeros((15, 1)), ys=jnp.asarray(ys), linearisation=linear)
    f, h = (lambda x, u: jnp.asarray(F) @ x), (lambda x, u: jnp.asarray(H) @ x)
    extra = jnp.broadcast_to(0.2 * jnp.eye(3), (15, 3, 3))
    injected = gaussian_filter(
        f,
        h,
        jnp.ones(3),
        jnp.eye(3),
        jnp.linalg.cholesky(Q),
        jnp.linalg.cholesky(R),
        extra_chol_Q=extra,
        **base,
    )
    merged = gaussian_filter(
        f,
        h,
        jnp.ones(3),
        jnp.eye(3),
        jnp.linalg.cholesky(Q + 0.04 * np.eye(3)),
        jnp.linalg.cholesky(R),
        **base,
    )
    np.testing.assert_allclose(injected.means, merged.means, atol=1e-10)


def test_square_root_kf_matches_filterpy():
    """The square-root KF equals filterpy's KalmanFilter (means, covariances, log-likelihood) to 1e-8."""
    from filterpy.kalman import KalmanFilter

    F, H, Q, R, ys = _random_system(11)
    ref = KalmanFilter(dim_x=3, dim_z=2)
    ref.x, ref.P, ref.F, ref.H, ref.Q, ref.R = np.ones(3), np.eye(3), F, H, Q, R
    means, covs, loglik = [], [], 0.0
    for y in ys:
        ref.predict()
        ref.update(y)
        means.append(ref.x.copy())
        covs.append(ref.P.copy())
        loglik += ref.log_likelihood
    out = gaussian_filter(
        lambda x, u: jnp.asarray(F) @ x,
        lambda x, u: jnp.asarray(H) @ x,
        jnp.ones(3),
        jnp.eye(3),
        jnp.linalg.cholesky(Q),
        jnp.linalg.cholesky(R),
        jnp.zeros((15, 1)),
        jnp.asarray(ys),
        linearisation=linear,
    )
    np.testing.assert_allclose(out.means, np.array(means), atol=1e-8)
    np.testing.assert_allclose(np.einsum("tij,tkj->tik", out.chols, out.chols), np.array(covs), atol=1e-8)
    np.testing.assert_allclose(out.loglik, loglik, rtol=1e-8)


@pytest.mark.parametrize("kernel", ["qr", "gram"])
def test_explicit_masks_are_taken_as_given_and_keep_a_batch_covariance_unbatched(kernel):
    """Given masks decide what is read: NaN outside them is never read, NaN inside them diverges (named
    step), and under ``vmap`` over records that share them every record's covariance is computed once,
    equal to the covariance-form KF of each record."""
    F, H, Q, R, _ = _random_system(3)
    rng = np.random.default_rng(4)
    ys = rng.normal(size=(5, 15, 2))  # five records of the same system
    masks = rng.random((15, 2)) > 0.3
    x0, P0 = np.ones(3), np.eye(3)

    def run(y, m, check=False):
        return _linear_filter(F, H, Q, R, x0, y, m, kernel=kernel, check=check)

    holes = np.where(masks, ys, np.nan)  # NaN wherever unobserved: never read
    out = jax.vmap(run, in_axes=(0, None))(jnp.asarray(holes), jnp.asarray(masks))
    for b in range(5):
        ref_m, ref_c, ref_ll = _covariance_kf(F, H, Q, R, x0, P0, ys[b], masks)
        np.testing.assert_allclose(out.means[b], ref_m, atol=1e-10)
        np.testing.assert_allclose(out.loglik[b], ref_ll, rtol=1e-10)
        np.testing.assert_allclose(np.einsum("tij,tkj->tik", out.chols[b], out.chols[b]), ref_c, atol=1e-10)
    assert np.all(np.asarray(out.first_bad_step) == -1)

    # the scan carries one covariance factor for the batch: (3, 3), not (5, 3, 3)
    jaxpr = jax.make_jaxpr(jax.vmap(run, in_axes=(0, None)))(jnp.asarray(holes), jnp.asarray(masks))
    scans = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    carried = [v.aval.shape for v in scans[0].outvars[: scans[0].params["num_carry"]]]
    assert (3, 3) in carried and (5, 3, 3) not in carried

    # an observed entry that is not finite: the step that reads it is named
    bad = np.array(ys[0])
    observed = np.argwhere(masks)[4]
    bad[tuple(observed)] = np.nan
    one = run(jnp.asarray(bad), jnp.asarray(masks))
    assert int(one.first_bad_step) == observed[0]
    with pytest.raises(Exception, match="filter diverged"):  # check=True raises inside jit
        jax.block_until_ready(run(jnp.asarray(bad), jnp.asarray(masks), check=True).loglik)
