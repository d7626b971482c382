"""The three PINN cases end to end at --quick size, through the same path as ``twinfer run``."""

import json

import numpy as np
import pytest
import xarray

from twinfer.experiments import get_case, no_progress, resolve_config
from twinfer.experiments.pinn_sparse import unobserved_of
from twinfer.report import new_run_dir, write_run


def _run(name, tmp_path, write=True, **sets):
    case = get_case(name)
    config = resolve_config(case, sets={"checkpoint_dir": str(tmp_path / "ckpt"), **sets}, quick=True)
    artifacts = case.run(config, no_progress)
    if not write:
        return artifacts, None
    run_dir = new_run_dir(tmp_path / "runs", name)
    write_run(run_dir, name, case.description, config.model_dump(), artifacts, case.figures(artifacts.arrays,
              config), case.paper_values(config))  # fmt: skip
    return artifacts, run_dir


def test_unobserved_sets_of_specs():
    """Specs 4.2: 6 DOFs observe {1, 2}; 20 DOFs observe {1..7}."""
    assert unobserved_of(6) == [3, 4, 5, 6]
    assert unobserved_of(20) == list(range(8, 21))


@pytest.mark.slow
# The UKF/RTS baseline's innovations are ~13 predicted sds wide (NIS ~180) and smooth() now says so. A
# likely cause: R holds only the acceleration noise, while the noisy measured force enters the
# acceleration output directly. Its states still fit (ukf_rts.all_u > 90 %); its sds are overconfident.
@pytest.mark.filterwarnings("ignore::twinfer.infer.filters.FilterConsistencyWarning")
def test_pinn_sparse_and_joint_quick(tmp_path):
    """pinn-sparse writes Table 2 metrics with the UKF/RTS comparison; a second run with resume=True
    continues from the finished checkpoint; pinn-joint reports parameters with their errors."""
    art, run_dir = _run("pinn-sparse", tmp_path)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("fitness.all_u", "fitness.unobs_u", "fitness.f1", "ukf_rts.all_u", "timing.train_s"):
        assert np.isfinite(metrics[key])
    assert metrics["train.epochs"] == 150 and metrics["ukf_rts.all_u"] > 90.0
    # the resumed run's metrics only (compare_ukf is not in the checkpoint's fingerprint): no UKF or report
    again, _ = _run("pinn-sparse", tmp_path, write=False, resume=True, compare_ukf=False)
    assert again.metrics["train.resumed_from"] == 150
    assert again.metrics["fitness.all_u"] == art.metrics["fitness.all_u"]
    joint, joint_dir = _run("pinn-joint", tmp_path, compare_ukf=False)
    # Quick size (100 Adam epochs, 50 L-BFGS, 2 hidden layers of 16) identifies no parameter: seeds 123,
    # 1, 2 leave k2 at 0.01-202, kappa2 at 430-18000, k4 27-100 % off; the states' fitness (all_u 69-74 %)
    # is about that of predicting zero (69.7 %); at 4 hidden layers it was the same (k4 3.5-23 % off).
    # What it shows: the errors are scored against the truth of specs 4.3 (k 15, kappa 100 at DOFs 2, 4) ...
    for name in ("k2", "k4", "kappa2", "kappa4"):
        true = 100.0 if name.startswith("kappa") else 15.0
        assert joint.metrics[f"param.{name}_true"] == true
        err = abs(joint.metrics[f"param.{name}"] / true - 1.0) * 100.0
        assert joint.metrics[f"param.{name}_err_pct"] == pytest.approx(err, rel=1e-12)
    # ... and the force at DOF 1 (Eq 15 on the network's states and learned parameters) fits the truth:
    # f1 fitness 91.1-93.4 over those seeds (90.2-90.9 at 4 hidden layers), against 76.7 for predicting zero
    from twinfer.metrics import fitness
    from twinfer.models import pinn_chain as chain_of
    from twinfer.sim import simulate_chain

    cfg = resolve_config(get_case("pinn-joint"), quick=True)
    data = simulate_chain(
        chain_of(5, "duffing", [1]), cfg.horizon, cfg.n_samples, 50.0, {"acc": 2024, "force": 1234}
    )
    zero_f1 = float(fitness(np.zeros(cfg.n_samples), data.force[:, 0]))
    assert joint.metrics["fitness.f1"] > zero_f1 + 8.0
    est = xarray.open_dataset(joint_dir / "estimate.nc")  # a point estimate: the learned values, sd NaN
    assert float(est["mean"].sel(state="k2")[-1]) == pytest.approx(joint.metrics["param.k2"])
    assert np.isnan(est["sd"].sel(state="x1")).all() and "v5" in est["state"].values
    assert "x6" in xarray.open_dataset(run_dir / "estimate.nc")["state"].values  # pinn-sparse: 6 DOFs


@pytest.mark.slow
def test_pinn_bayes_quick_writes_posterior(tmp_path):
    """pinn-bayes: posterior summaries, R-hat from 4 chains and posterior.nc readable as netCDF."""
    art, run_dir = _run("pinn-bayes", tmp_path)
    m = art.metrics
    # NUTS mixes at quick size (4 chains x 100 draws after 100 warm-up): seeds 43810, 1, 2 give R-hat
    # 1.015-1.023, min ESS 451-557 of 400 draws and no divergences. Chains stuck apart (a broken
    # adaptation or gradient) give R-hat well above 1.1 and an ESS of a few per chain.
    assert m["posterior.rhat_max"] < 1.1 and m["posterior.ess_min"] > 100
    assert m["posterior.divergences"] <= 4  # 1 % of the draws
    ds = xarray.open_dataset(run_dir / "posterior.nc", group="posterior")
    assert ds["k1"].shape == (4, 100)
    # the reported correlation is that of the saved draws (at quick size kappa stays at its Gamma(3, 0.5)
    # prior, ~6 against the true 100, so the correlation's value carries no claim here)
    k1, kappa1 = ds["k1"].values.ravel(), ds["kappa1"].values.ravel()
    assert m["posterior.corr_k1_kappa1"] == pytest.approx(np.corrcoef(k1, kappa1)[0, 1], abs=1e-9)
    est = xarray.open_dataset(run_dir / "estimate.nc")  # the one result type: states with bands
    assert list(est["state"].values[:4]) == ["u1", "u2", "v1", "v2"] and "k1" in est["state"].values
    assert np.all(est["sd"].values[1:] > 0) and 0.0 <= art.metrics["posterior.states.cov95"] <= 1.0
    # quick size: stage 1 is undertrained, yet the states' posterior mean must beat predicting zero (NRMSE
    # over the range: 0.22); seeds 43810, 1, 2 give 0.16 / 0.17 / 0.12 (0.53-0.78 of it)
    from twinfer.experiments.pinn_bayes import simulate

    states = simulate(resolve_config(get_case("pinn-bayes"), quick=True))["states"]
    zero = float(np.mean(np.sqrt(np.mean(states**2, axis=0)) / np.ptp(states, axis=0)))
    assert art.metrics["posterior.states.nrmse"] < 0.9 * zero


def test_repeat_noise_sd_estimates_the_noise_scale_from_the_repeats():
    """The stage-1 noise scales come from the scatter between repeats of one clean signal."""
    from twinfer.infer.pinn import repeat_noise_sd

    rng = np.random.default_rng(0)
    clean = np.sin(np.linspace(0, 20, 4000))[None, :, None] * np.array([1.0, 5.0])
    noisy = clean + rng.normal(0.0, 1.0, (5, 4000, 2)) * np.array([0.1, 0.3])
    np.testing.assert_allclose(repeat_noise_sd(noisy), [0.1, 0.3], rtol=0.02)
    with pytest.raises(ValueError, match="repeats: expected shape"):
        repeat_noise_sd(noisy[:1])


def test_midstep_collocation_removes_the_zero_order_hold_delay():
    """The simulation holds each force sample over its step. A smooth derivative at the samples sees the
    force half a step late and the least-squares damping is biased; at mid-steps ``t_i + dt/2`` with the
    held ``f_i`` the same data give the damping back (the reason for ``collocation = "midstep"``)."""
    from twinfer.experiments.pinn_bayes import PinnBayesConfig
    from twinfer.infer.pinn import held_force_collocation
    from twinfer.models import pinn_chain as chain_of
    from twinfer.sim import bandlimited_noise_dynasim, discretise, simulate_discrete

    config = PinnBayesConfig(n_samples=2048, horizon=60.0, obs_stride=1)
    chain = chain_of(2, "linear", [1, 2])
    ts = np.linspace(0.0, config.horizon, config.n_samples)
    dt = ts[1] - ts[0]
    force = np.stack([bandlimited_noise_dynasim(ts, (0.05, 1.0), 500.0, 43810 + i) for i in range(2)], axis=1)
    x = np.asarray(simulate_discrete(discretise(chain, dt, "rk4"), np.zeros(4), force[:-1]).states)

    def damping(z, dz, f):  # least squares for (c1, c2, k1, k2) of f = M dv/dt + C v + K u, per DOF
        rel_u, rel_v = np.diff(z[:, :2], axis=1, prepend=0.0), np.diff(z[:, 2:], axis=1, prepend=0.0)
        rows = np.zeros((2 * len(z), 4))
        rows[0::2] = np.stack([rel_v[:, 0], -rel_v[:, 1], rel_u[:, 0], -rel_u[:, 1]], 1)
        rows[1::2, [1, 3]] = np.stack([rel_v[:, 1], rel_u[:, 1]], 1)
        rhs = (f - 10.0 * dz[:, 2:]).ravel()
        return np.linalg.lstsq(rows, rhs, rcond=None)[0]

    i = np.arange(1, config.n_samples - 1)  # samples: central differences, force f_i
    at_samples = damping(x[i], (x[i + 1] - x[i - 1]) / (2 * dt), force[i])
    idx, t_mid = held_force_collocation(ts, config.obs_stride, midstep=True)
    np.testing.assert_allclose(t_mid, ts[idx] + dt / 2)
    mid = 0.5 * (x[idx] + x[idx + 1])
    at_mid = damping(mid, (x[idx + 1] - x[idx]) / dt, force[idx])
    assert np.all(np.abs(at_samples[:2] - 1.0) > 0.03)  # half a step of delay: several percent on c
    np.testing.assert_allclose(at_mid, [1.0, 1.0, 15.0, 15.0], rtol=5e-3)


def test_each_configuration_is_compared_with_its_own_paper_row():
    """Issue #22: pinn-sparse case c, pinn-joint cases 4 and 5, pinn-bayes on Van der Pol each get the
    paper's row of that configuration, not the default's."""
    sparse = get_case("pinn-sparse")
    row = sparse.paper_values(resolve_config(sparse, sets={"case": "c"}))
    assert row["fitness.f1"].value == 94.07 and "SNR 10" in row["fitness.f1"].source
    joint = get_case("pinn-joint")
    vdp = joint.paper_values(resolve_config(joint, sets={"case": 4}))
    assert vdp["param.mu2"].value == 0.802 and "param.kappa2" not in vdp and vdp["fitness.f1"].value == 98.42
    linear = joint.paper_values(resolve_config(joint, sets={"case": 5}))
    assert {k for k in linear if k.startswith("param.")} == {
        "param.k2", "param.k4", "param.k2_err_pct", "param.k4_err_pct"
    } and linear["fitness.unobs_u"].value == 97.66  # fmt: skip
    bayes = get_case("pinn-bayes")
    v = bayes.paper_values(resolve_config(bayes, sets={"system": "vdp"}))
    assert v["posterior.mu1.mean"].value == 0.720 and v["posterior.mu1.err_pct"].value == 4.0
    assert "posterior.kappa1.mean" not in v and "Van der Pol" in v["posterior.c1.sd"].source
