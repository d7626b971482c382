"""twinfer.infer.Estimate: the one result type (intervals by name, xarray/netCDF/pandas, merging)."""

import numpy as np
import pytest
import xarray

from twinfer.infer import Estimate, merge_estimates


def _estimate():
    times = np.linspace(0.0, 1.0, 5)
    means = np.column_stack([np.sin(times), np.cos(times), np.full(5, 2.0)])
    stds = np.column_stack([np.full(5, 0.1), np.full(5, 0.2), np.linspace(1.0, 0.5, 5)])
    return Estimate(times, means, stds, None, ("x1", "v1", "k1"), ("k1",), loglik=-3.5)


def test_interval_is_mean_plus_minus_the_normal_quantile_and_params_are_by_name():
    est = _estimate()
    low, high = est.interval("k1")
    np.testing.assert_allclose([low, high], [2.0 - 1.959963984540054 * 0.5, 2.0 + 1.959963984540054 * 0.5])
    low, high = est.interval("x1", level=0.5, at=0)
    np.testing.assert_allclose([low, high], [-0.6744897501960817 * 0.1, 0.6744897501960817 * 0.1])
    assert list(est.params) == ["k1"]
    np.testing.assert_array_equal(est.params["k1"][1], est.stds[:, 2])


def test_bad_names_levels_and_shapes_are_named_errors():
    est = _estimate()
    with pytest.raises(KeyError, match="no column 'k2'; columns: x1, v1, k1"):
        est.interval("k2")
    with pytest.raises(ValueError, match=r"level: expected a value in \(0, 1\); received 95"):
        est.interval("k1", level=95)
    with pytest.raises(ValueError, match=r"at: expected a row index in \[-5, 5\) .*received 1000000"):
        est.interval("k1", at=10**6)
    assert est.interval("k1", at=-5) == est.interval("k1", at=0)
    with pytest.raises(ValueError, match=r"Estimate stds: expected shape \(5, 3\)"):
        Estimate(est.times, est.means, est.stds[:, :2], None, est.state_names)
    with pytest.raises(ValueError, match="parameters: expected names among state_names"):
        Estimate(est.times, est.means, est.stds, None, est.state_names, ("c1",))


def test_xarray_netcdf_and_dataframe_hold_the_same_numbers(tmp_path):
    est = _estimate()
    path = est.to_netcdf(tmp_path / "estimate.nc")
    back = xarray.open_dataset(path, engine="h5netcdf")
    np.testing.assert_array_equal(back["mean"].sel(state="v1").values, est.means[:, 1])
    np.testing.assert_array_equal(back["sd"].values, est.stds)
    assert back.attrs["loglik"] == -3.5 and back.attrs["parameters"] == "k1"
    back.close()
    frame = est.to_dataframe()
    assert list(frame.columns) == ["x1", "x1_sd", "v1", "v1_sd", "k1", "k1_sd"]
    np.testing.assert_array_equal(frame.index.values, est.times)
    np.testing.assert_array_equal(frame["k1_sd"].values, est.stds[:, 2])


def test_merge_orders_named_columns_first_and_refuses_a_column_twice():
    t = np.arange(3.0)
    a = (("x2", "v2"), np.ones((3, 2)), np.full((3, 2), 0.1))
    b = (("x1", "v1", "k1"), np.zeros((3, 3)), np.full((3, 3), 0.2))
    est = merge_estimates([a, b], t, order=["x1", "x2", "v1", "v2"], parameters=["k1"], loglik=-1.0)
    assert est.state_names == ("x1", "x2", "v1", "v2", "k1")
    np.testing.assert_array_equal(est.means[0], [0, 1, 0, 1, 0])
    assert est.covs is None and est.parameters == ("k1",)
    with pytest.raises(ValueError, match="'x1' is estimated by two subsystems"):
        merge_estimates([b, b], t)
    with pytest.raises(ValueError, match="merge_estimates order: expected names of estimated columns"):
        merge_estimates([a], t, order=["x9"])


def test_pn_solutions_and_smc_posteriors_convert_to_estimates():
    """PNSolution.to_estimate keeps the grid's means and sds; IBISResult.to_estimate gives the weighted
    posterior moments of the particles (numpy's weighted average and covariance as the reference)."""
    import jax.numpy as jnp

    from twinfer.infer.pn import PNSolution
    from twinfer.infer.smc import IBISResult

    rng = np.random.default_rng(0)
    sol = PNSolution(
        jnp.asarray(rng.normal(size=(5, 2))), jnp.ones((5, 2)) * 0.1, jnp.ones(2), jnp.asarray(-3.0)
    )
    est = sol.to_estimate(np.linspace(0, 1, 5), ("x", "v"))
    np.testing.assert_array_equal(est.means, np.asarray(sol.mean))
    assert est.state_names == ("x", "v") and est.loglik == -3.0 and est.covs is None
    with pytest.raises(ValueError, match="expected 5 times and 2 names"):
        sol.to_estimate(np.linspace(0, 1, 4))
    theta = rng.normal(size=(200, 2)) * [1.0, 3.0] + [2.0, -1.0]
    log_w = rng.normal(size=200)
    res = IBISResult(theta, theta, log_w, rng.normal(size=200), np.ones(3), np.zeros(0, int), np.zeros(0))
    post = res.to_estimate(("k", "c"))
    w = np.exp(log_w) / np.exp(log_w).sum()
    np.testing.assert_allclose(post.means[0], np.average(theta, axis=0, weights=w), rtol=1e-12)
    np.testing.assert_allclose(post.covs[0], np.cov(theta.T, aweights=w, bias=True), rtol=1e-10)
    assert post.parameters == ("k", "c")
    low, high = post.interval("k")
    assert low < post.means[0, 0] < high
    with pytest.raises(ValueError, match="IBISResult.to_estimate names: expected 2 names; received 1"):
        res.to_estimate(("k",))


def test_summary_tables_each_column_and_scores_it_against_a_datasets_truth():
    from twinfer.data import Dataset
    from twinfer.metrics import coverage, rmse

    est = _estimate()
    table = est.summary()
    assert list(table.index) == ["x1", "v1", "k1"] and list(table.columns) == ["mean", "sd", "low", "high"]
    assert tuple(table.loc["k1", ["low", "high"]]) == est.interval("k1")
    assert table.attrs["loglik"] == -3.5 and table.attrs["time"] == 1.0
    truth_states = np.column_stack([np.sin(est.times) + 0.2, np.cos(est.times)])  # x1 outside its band
    data = Dataset(
        est.times,
        np.zeros((5, 1)),
        truth_states=truth_states,
        truth_params={"k1": 2.9},
        state_names=["x1", "v1"],
    )
    scored = est.summary(["x1", "k1"], truth=data, level=0.9, at=0)
    assert scored.loc["x1", "truth"] == truth_states[0, 0] and not scored.loc["x1", "inside"]
    assert (
        scored.loc["x1", "coverage"]
        == coverage(est.means[:, 0], est.stds[:, 0], truth_states[:, 0], 0.9)
        == 0.0
    )
    assert scored.loc["x1", "rmse"] == pytest.approx(rmse(est.means[:, 0], truth_states[:, 0]))
    assert (
        scored.loc["k1", "truth"] == 2.9 and scored.loc["k1", "inside"] and np.isnan(scored.loc["k1", "rmse"])
    )
    with pytest.raises(ValueError, match="expected 5 rows .* for 'x1'.*received shape \\(4,\\)"):
        est.summary(truth={"x1": np.zeros(4)})
    with pytest.raises(KeyError, match="no column 'k9'"):
        est.summary(["k9"])


def test_plot_draws_every_column_with_its_band_and_a_selection_of_a_large_system():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = _estimate().plot(truth={"k1": 2.0})
    assert sorted(figs) == ["parameters", "states"]
    assert [ax.get_ylabel() for ax in figs["states"].axes] == ["x1", "v1"]  # one row: position, velocity
    assert figs["parameters"].axes[0].get_lines()[-1].get_ydata()[0] == 2.0  # the truth's line
    plt.close("all")
    n, p = 100, 40  # a large system: 50 positions, 50 velocities, 40 unknowns
    names = [f"x{i}" for i in range(50)] + [f"v{i}" for i in range(50)] + [f"w{i}" for i in range(p)]
    t = np.arange(3.0)
    big = Estimate(t, np.zeros((3, n + p)), np.ones((3, n + p)), None, tuple(names), tuple(names[n:]))
    figs = big.plot()
    assert sorted(figs) == ["parameters", "parameters-2", "states", "states-2"]
    assert figs["states"]._suptitle.get_text().startswith("32 of 100 states, evenly spaced")
    assert figs["parameters"]._suptitle.get_text().startswith("16 of 40 parameters")
    labels = [ax.get_ylabel() for f in ("states", "states-2") for ax in figs[f].axes]
    assert labels[:2] == ["x0", "v0"] and labels[-2:] == ["x49", "v49"]
    chosen = big.plot(["v3", "w7"], truth={"v3": np.ones(3)})
    assert [ax.get_ylabel() for ax in chosen["estimate"].axes] == ["v3 error", "w7"]
    with pytest.raises(KeyError, match="no column 'q1'"):
        big.plot(["q1"])
    plt.close("all")


def test_repr_names_the_record_and_the_unknowns_not_the_arrays():
    text = repr(_estimate())
    assert text == "Estimate(5 times 0..1 s, 3 columns [x1, v1, k1]; k1 2 +- 0.5; loglik -3.5)"


def test_per_step_fields_are_checked_exported_and_kept_through_jax():
    """The optional per-step fields (one-step predictions, log-likelihood terms, NIS) lie over t_1..t_N:
    a wrong shape is a named error; to_xarray carries them over ``step`` (the times t_1..t_N); they are
    leaves of the pytree, so a transformation keeps them."""
    import jax

    est = _estimate()
    steps, n = 4, 3
    rng = np.random.default_rng(1)
    a = rng.normal(size=(steps, n, n))
    per_step = {
        "pred_means": rng.normal(size=(steps, n)),
        "pred_covs": a @ a.transpose(0, 2, 1),
        "step_logliks": rng.normal(size=steps),
        "step_nis": rng.uniform(size=steps),
    }
    full = Estimate(est.times, est.means, est.stds, None, est.state_names, loglik=-3.5, **per_step)
    ds = full.to_xarray()
    np.testing.assert_array_equal(ds["step"].values, est.times[1:])
    np.testing.assert_array_equal(ds["pred_cov"].values, per_step["pred_covs"])
    np.testing.assert_array_equal(ds["step_nis"].values, per_step["step_nis"])
    assert ds["pred_mean"].dims == ("step", "state") and "cov" not in ds
    assert "step" not in est.to_xarray().dims
    doubled = jax.tree_util.tree_map(lambda x: 2 * x, full)
    np.testing.assert_array_equal(doubled.step_logliks, 2 * per_step["step_logliks"])
    with pytest.raises(ValueError, match=r"pred_means: expected shape \(4, 3\) .* received \(5, 3\)"):
        Estimate(est.times, est.means, est.stds, None, est.state_names, pred_means=est.means)
    with pytest.raises(ValueError, match=r"Estimate step_nis: expected shape \(4,\) .* received \(3,\)"):
        Estimate(est.times, est.means, est.stds, None, est.state_names, step_nis=np.ones(3))
