"""Bouc-Wen and EMPS models, and the PN-SMC cases end to end at --quick size."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.models import EMPS, BoucWen


def test_boucwen_vector_field_matches_equations():
    """Eq. (26) with nu = 1 at a hand-picked state, and finite derivatives at z = 0 (Taylor init)."""
    model = BoucWen()
    x, u = jnp.array([1e-3, 0.02, -3.0]), jnp.array([5.0])
    dx = np.asarray(model.vector_field(0.0, x, u, model.params))
    acc = (5.0 - 10.0 * 0.02 - 5e4 * 1e-3 + 3.0) / 2.0
    dz = 5e4 * 0.02 - 1e3 * (0.8 * 0.02 * 3.0 * -1.0 + -1.1 * 0.02 * 3.0)
    np.testing.assert_allclose(dx, [0.02, acc, dz], rtol=1e-12)
    import jax

    jac = jax.jacfwd(lambda s: model.vector_field(0.0, s, u, model.params))(jnp.zeros(3))
    assert np.all(np.isfinite(np.asarray(jac)))
    with pytest.raises(ValueError, match="unknown parameters"):
        BoucWen(mass=2.0)


def test_emps_vector_field_matches_equations():
    model = EMPS()
    dx = np.asarray(model.vector_field(0.0, jnp.array([0.1, -0.2]), jnp.array([30.0]), model.params))
    p = {k: float(v) for k, v in model.params.items()}
    expected = (30.0 - p["Fv"] * -0.2 - p["Fc"] * -1.0 - p["offset"]) / p["M"]
    np.testing.assert_allclose(dx, [-0.2, expected], rtol=1e-12)
    with pytest.raises(ValueError, match="positive mass"):
        EMPS(M=-1.0)


@pytest.mark.slow
def test_boucwen_quick_end_to_end(tmp_path):
    """`twinfer run boucwen --quick` writes metrics, the posterior netCDF and its summary."""
    result = CliRunner().invoke(app, ["run", "boucwen", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("boucwen-")]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("sinesweep.test.rmse_mean", "multisine.test.rmse_mean", "smc.resample_count", "timing.run_s"):
        assert np.isfinite(metrics[key])
    assert metrics["posterior.m.sd"] > 0
    assert (run_dir / "posterior.nc").is_file() and (run_dir / "posterior_summary.md").is_file()
    assert (run_dir / "figures" / "prior_vs_posterior.png").is_file()


def test_small_tria_matches_lapack_tria():
    """The element-wise Householder ``tria`` equals the QR-based one, also for rank-deficient blocks."""
    from twinfer.infer.filters import tria as tria_qr
    from twinfer.infer.pn._small import tria

    a = np.random.default_rng(0).normal(size=(6, 12))
    a[:, 3] = 0.0
    np.testing.assert_allclose(tria(jnp.asarray(a)), tria_qr(jnp.asarray(a)), atol=1e-12)
    a[2] = a[1] * 2.0  # rank deficient: the factor is not unique, its product is
    low = np.asarray(tria(jnp.asarray(a)))
    np.testing.assert_allclose(low @ low.T, a @ a.T, atol=1e-12)
    assert np.all(np.isfinite(low)) and np.all(np.diag(low) >= 0) and np.allclose(low, np.tril(low))


def test_fine_input_linear_midpoints_and_hold():
    from twinfer.experiments._pnsmc import fine_input

    u = np.array([0.0, 2.0, 6.0])
    np.testing.assert_allclose(fine_input(u, 2, "linear")[:, 0], [0.5, 1.5, 3.0, 5.0, 6.0, 6.0])
    np.testing.assert_allclose(fine_input(u, 2, "zoh")[:, 0], [0.0, 0.0, 2.0, 2.0, 6.0, 6.0])
    with pytest.raises(ValueError, match="hold"):
        fine_input(u, 2, "cubic")


@pytest.mark.parametrize("hold", ["linear", "zoh"])
def test_pn_likelihood_substeps_converge_to_interpolated_input_solution(hold):
    """A forced linear oscillator: the PN mean after 1 s approaches the exact solution for the same
    input interpolation, and four sub-steps per sample are much closer than one."""
    import jax
    from scipy.integrate import solve_ivp

    from twinfer.infer.pn import PNFilter, PNLikelihood
    from twinfer.models import Chain

    model = Chain([1.0], [40.0], [0.5], outputs=["x1"])
    h, n = 0.05, 21
    ts = np.arange(n) * h
    us = np.sin(3.0 * ts) + ts

    def u_of(t):
        k = min(int(t / h), n - 2)
        return us[k] if hold == "zoh" else np.interp(t, ts, us)

    exact = solve_ivp(
        lambda t, x: [x[1], u_of(t) - 40.0 * x[0] - 0.5 * x[1]],
        (0.0, ts[-1]),
        [0.0, 0.0],
        max_step=h / 10,
        rtol=1e-11,
        atol=1e-13,
    ).y[:, -1]

    def final_error(m):
        lik = PNLikelihood(
            pn=PNFilter(model, q=2, method="ek1"),
            base_params=model.params,
            names=("k1",),
            x0=jnp.zeros(2),
            x0_std=jnp.zeros(2),
            h=h,
            us=jnp.asarray(us)[:, None],
            ys=jnp.zeros((n, 1)),
            y_mask=jnp.zeros((n, 1), bool),
            chol_R=jnp.eye(1),
            substeps=m,
            input_hold=hold,
        )
        theta = jnp.array([40.0])

        @jax.jit
        def run():
            return jax.lax.scan(lambda c, k: lik.step(c, theta, k), lik.init(theta), jnp.arange(n))

        carry, lls = run()
        assert np.all(np.asarray(lls) == 0.0)  # no data observed
        return float(np.max(np.abs(np.asarray(carry.mean[:2]) - exact)))

    e1, e4 = final_error(1), final_error(4)
    # a held input jumps at every sample, which the smooth IWP prior resolves at low order only
    ratio, rel = (0.1, 2e-3) if hold == "linear" else (0.5, 2e-2)
    assert e4 < ratio * e1
    assert e4 < rel * np.max(np.abs(exact))
