"""`twinfer estimate SPEC.toml`: a user's chain from a CSV file or a simulation, central or distributed."""

import json

import jax
import numpy as np
import pytest
import xarray
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.models import Chain
from twinfer.sim import simulate_dataset

CHAIN = """
[model]
kind = "chain"
mass = [100.0, 80.0, 120.0, 90.0]
stiffness = [2e4, 1.8e4, 2.2e4, 2e4]
damping = 30.0
forced_dofs = [4]
outputs = ["a1", "a3", "a4"]
"""


def _invoke(*args):
    return CliRunner().invoke(app, ["estimate", *map(str, args)])


def _folder(out):
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    return run


def test_a_chain_from_a_csv_file_distributed_writes_estimate_nc_and_metrics(tmp_path):
    chain = Chain([100.0, 80.0, 120.0, 90.0], [2e4, 1.8e4, 2.2e4, 2e4], 30.0, forced_dofs=[4],
                  outputs=("a1", "a3", "a4"))  # fmt: skip
    force = np.random.default_rng(0).normal(size=(1001, 1)) * 200.0
    data = simulate_dataset(chain, force, 1e-3, 0.05, jax.random.key(0))
    table = np.column_stack([data.times, data.inputs, data.observations])
    np.savetxt(tmp_path / "frame.csv", table, delimiter=",", header="t,f4,acc1,acc3,acc4", comments="")
    spec = tmp_path / "frame.toml"
    spec.write_text(
        'name = "frame"\n' + CHAIN + '\n[data]\nfile = "frame.csv"\ntime = "t"\ninputs = ["f4"]\n'
        'outputs = ["acc1", "acc3", "acc4"]\n\n[estimator]\nkind = "distributed"\n'
        "partition = [[1, 2], [3, 4]]\nnoise_sd = 0.05\n\n[unknown]\nk4 = [2.5e4, 5e3, 0.0]\n"
    )
    result = _invoke(spec, "--out", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    run = _folder(tmp_path / "runs")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["param.k4_low"] < metrics["param.k4"] < metrics["param.k4_high"]
    assert np.isfinite(metrics["loglik"]) and "state.rmse" not in metrics  # no truth in the CSV
    with xarray.open_dataset(run / "estimate.nc", engine="h5netcdf") as est:
        assert list(est["state"].values) == [*chain.state_names, "k4"]
        np.testing.assert_allclose(est["time"].values, data.times)
    assert (run / "report.md").exists() and any(run.glob("figures/*"))


def test_a_simulated_chain_central_reports_the_truths_coverage(tmp_path):
    spec = tmp_path / "sim.toml"
    spec.write_text(
        CHAIN + "\n[simulate]\nduration = 1.0\ndt = 1e-3\nnoise_sd = 0.05\nforce_sd = 200.0\n\n"
        '[estimator]\nkind = "central"\nprocess_sd = 1e-5\n\n[unknown]\nk2 = [1.5e4, 5e3, 0.0]\n'
    )
    result = _invoke(spec, "--out", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    metrics = json.loads((_folder(tmp_path / "runs") / "metrics.json").read_text())
    assert 0.0 <= metrics["state.coverage95"] <= 1.0 and metrics["state.rmse"] > 0
    assert metrics["param.k2_covered"] == 1.0, metrics
    assert metrics["nis"] > 0


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (CHAIN + "\n[simulate]\nduration = 1.0\ndt = 1e-3\nnoise_sd = 0.1\ncolour = 1\n", "simulate.colour"),
        (CHAIN, "give exactly one of [data] and [simulate]"),
        (
            CHAIN
            + '\n[simulate]\nduration = 1.0\ndt = 1e-3\nnoise_sd = 0.1\n[estimator]\nkind = "distributed"\n',
            "needs a partition",
        ),
        (
            CHAIN.replace('"chain"', '"truss"') + "\n[simulate]\nduration = 1\ndt = 1e-3\nnoise_sd = 0.1\n",
            "model.kind",
        ),
        (
            CHAIN + '\n[data]\nfile = "missing.csv"\ntime = "t"\ninputs = ["f4"]\noutputs = ["a", "b", "c"]\n'
            "[estimator]\nnoise_sd = 0.1\n",
            "data.file",
        ),
        (
            CHAIN + '\n[data]\nfile = "x.csv"\ntime = "t"\noutputs = ["a"]\n[estimator]\nnoise_sd = 0.1\n',
            "expected 1 input columns",
        ),
    ],
    ids=["unknown-key", "no-source", "no-partition", "bad-model", "missing-file", "column-count"],
)
def test_bad_specs_exit_2_naming_the_key(tmp_path, body, named):
    spec = tmp_path / "bad.toml"
    spec.write_text(body)
    result = _invoke(spec, "--out", tmp_path / "runs")
    assert result.exit_code == 2, result.output
    assert named in " ".join(result.output.split()), result.output


def test_a_grid_from_a_pandapower_json_file(tmp_path):
    """A network written by pandapower (not one of the bundled names) runs through the grid case,
    distributed without a partition (the clusters come from s_max); the Estimate holds theta, omega and
    Omega per bus, the metrics the calibration of the distributed UKF."""
    import pandapower
    import pandapower.networks

    pandapower.to_json(pandapower.networks.case9(), str(tmp_path / "net.json"))
    spec = tmp_path / "grid.toml"
    spec.write_text(
        'name = "my-grid"\n[model]\nkind = "grid"\nnetwork = "net.json"\n\n'
        "[simulate]\nduration = 0.3\ndt = 0.01\nnoise_sd = 0.02\n"
        '[estimator]\nkind = "distributed"\n'  # a grid's clusters need no partition
    )
    result = _invoke(spec, "--out", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    run = _folder(tmp_path / "runs")
    metrics = json.loads((run / "metrics.json").read_text())
    assert 0.0 <= metrics["distributed.coverage95_Omega"] <= 1.0, sorted(metrics)
    with xarray.open_dataset(run / "estimate.nc", engine="h5netcdf") as est:
        assert list(est["state"].values[:2]) == ["theta1", "theta2"] and est.sizes["time"] == 30
        assert est.attrs["parameters"].split(",")[0] == "Omega1"


def test_a_partition_may_be_automatic(tmp_path):
    from twinfer.spec import load_spec

    path = tmp_path / "auto.toml"
    path.write_text(
        CHAIN + '\n[simulate]\nduration = 1.0\ndt = 1e-3\nnoise_sd = 0.1\n[estimator]\nkind = "distributed"\n'
        'partition = "auto"\n'
    )
    spec, _ = load_spec(path)
    assert spec.estimator.partition == "auto"


def test_a_grid_from_measured_phases_and_frequencies(tmp_path):
    """Measured PMU-like data of a grid (a Parquet file, one bus's phase column absent): the Kuramoto
    network of the named network with the spec's damping, estimated by clusters; the Estimate holds theta,
    omega and Omega for every bus, the unmeasured phase's bus least certain. Without damping: exit 2."""
    import pandas as pd

    from twinfer.data import load_grid
    from twinfer.models import KuramotoNetwork

    net = load_grid("ieee9")
    n = net.n_bus
    rng = np.random.default_rng(0)
    model = KuramotoNetwork(*net.neighbours, np.full(n, 0.2), rng.choice(np.linspace(-1, 1, 21), n))
    x0 = np.concatenate([rng.uniform(-0.5, 0.5, n), rng.uniform(-0.2, 0.2, n)])
    data = simulate_dataset(model, None, 0.01, 0.02, jax.random.key(0), x0=x0, n_steps=200)
    frame = pd.DataFrame(np.asarray(data.observations), columns=list(data.output_names)).drop(
        columns="theta4"
    )
    frame.insert(0, "t", np.asarray(data.times))
    frame.to_parquet(tmp_path / "pmu.parquet")
    body = '[model]\nkind = "grid"\nnetwork = "ieee9"\n{}\n[data]\nfile = "pmu.parquet"\ntime = "t"\n\n'
    body += '[estimator]\nkind = "distributed"\nnoise_sd = 0.02\n'
    (tmp_path / "grid.toml").write_text(body.format("damping = 0.2\n"))
    result = _invoke(tmp_path / "grid.toml", "--out", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    run = _folder(tmp_path / "runs")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["data.measured_channels"] == 2 * n - 1 and metrics["network.buses"] == n
    with xarray.open_dataset(run / "estimate.nc", engine="h5netcdf") as est:
        names = [f"{q}{b + 1}" for q in ("theta", "omega", "Omega") for b in range(n)]
        assert list(est["state"].values) == names
        sd = est["sd"].sel(state=[f"Omega{b + 1}" for b in range(n)]).values[-1]
    assert np.argmax(sd) == 3, sd  # bus 4, whose phase is not measured
    (tmp_path / "bad.toml").write_text(body.format(""))
    result = _invoke(tmp_path / "bad.toml", "--out", tmp_path / "runs")
    assert result.exit_code == 2 and "model.damping" in " ".join(result.output.split()), result.output
