"""Issue #51 item 7: the spec and grid edges.

A grid's estimator defaults to the distributed one and a central UKF that cannot fit in memory is refused
before anything runs (with the estimate); grid reports carry theta's and omega's coverage; MATPOWER
``.mat`` files read as their ``.m`` twins; a misspelt spec key gets the closest allowed one; ``from_csv``
checks input names against the model as it checks output names.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.io
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.data import GridNetwork, branch_coupling, from_csv, from_table, load_grid
from twinfer.experiments.grid import GridConfig, grid_estimator
from twinfer.infer.graph import Partition
from twinfer.models import Chain, KuramotoNetwork
from twinfer.spec import Estimator, SpecError, _central_grid_bytes, load_spec, run_spec


def _ring_tables(n: int) -> dict[str, np.ndarray]:
    """MATPOWER tables of a ring of ``n`` buses numbered from 101, with a chord and a tapped branch."""
    bus = np.array([[101 + i, 1, 0, 0, 0, 0, 1, 1, 0, 345, 1, 1.1, 0.9] for i in range(n)], dtype=float)
    gen = np.array([[101 + i, 100, 0, 300, -300, 1, 100, 1, 300, 10] for i in range(0, n, 5)], dtype=float)
    rows = [(i, (i + 1) % n, 0.01, 0.1, 0.0, 0.0) for i in range(n)]
    rows.append((0, n // 2, 0.02, 0.15, 1.05, 3.0))  # a transformer: tap 1.05 shifted 3 degrees
    branch = np.array(
        [
            [101 + f, 101 + t, r, x, 0.0, 250, 250, 250, tap, shift, 1, -360, 360]
            for f, t, r, x, tap, shift in rows
        ]
    )
    return {"bus": bus, "gen": gen, "branch": branch}


def _write_m(path: Path, tables: dict[str, np.ndarray]) -> Path:
    """A MATPOWER ``.m`` case file of ``tables`` (numbers as Python writes them, NaN as ``nan``)."""

    def table(a: np.ndarray) -> str:
        return "\n".join("    " + " ".join(repr(float(v)) for v in row) + ";" for row in a)

    body = "\n".join(f"mpc.{k} = [\n{table(tables[k])}\n];" for k in ("bus", "gen", "branch"))
    path.write_text(f"function mpc = case_ring\n% written by a test\nmpc.baseMVA = 100;\n{body}\n")
    return path


def _same_network(a, b) -> None:
    np.testing.assert_array_equal(a.coupling.toarray(), b.coupling.toarray())
    np.testing.assert_array_equal(a.gen_buses, b.gen_buses)
    np.testing.assert_array_equal(a.bus_ids, b.bus_ids)


GRID_SIM = "[simulate]\nduration = 0.2\ndt = 0.01\nnoise_sd = 0.02\n"


def _spec(tmp_path: Path, body: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_item7_a_grid_spec_without_kind_is_distributed_and_a_chain_keeps_its_default(tmp_path):
    """A grid's [estimator] without kind is distributed (one UKF per cluster), with or without other
    estimator keys; an explicit central stays central; a chain's default is the Estimator's own. Keys a
    grid does not read (prior, process noise) are refused rather than dropped."""
    grid = '[model]\nkind = "grid"\nnetwork = "ieee9"\n' + GRID_SIM
    assert load_spec(_spec(tmp_path, grid))[0].estimator.kind == "distributed"
    with_messages = grid + '[estimator]\nmessages = "deterministic"\n'
    spec = load_spec(_spec(tmp_path, with_messages))[0]
    assert spec.estimator.kind == "distributed" and spec.estimator.messages == "deterministic"
    central = grid + '[estimator]\nkind = "central"\n'
    assert load_spec(_spec(tmp_path, central))[0].estimator.kind == "central"
    chain = (
        '[model]\nkind = "chain"\nmass = [1.0, 1.0]\nstiffness = 100.0\ndamping = 0.5\noutputs = ["a1"]\n'
        "[simulate]\nduration = 0.2\ndt = 0.01\nnoise_sd = 0.02\n"
    )
    assert load_spec(_spec(tmp_path, chain))[0].estimator.kind == Estimator.model_fields["kind"].default
    with pytest.raises(SpecError, match=r"estimator.process_sd: a grid's prior, process noise") as err:
        load_spec(_spec(tmp_path, grid + "[estimator]\nprocess_sd = 1e-3\n"))
    assert "received process_sd = 0.001" in str(err.value)


def test_item7_a_central_grid_ukf_beyond_memory_is_refused_before_it_runs(tmp_path):
    """An explicit central UKF on a 30,000-bus network (90,000 states: its covariance alone 60 GiB, the
    estimate 12 copies) is refused by run_spec before the record is simulated or read, for [simulate] and
    [data] alike, naming the key, the estimate and what is available; the CLI exits 2 with the message.
    The same network without kind validates (the distributed default)."""
    n = 30_000
    _write_m(tmp_path / "big.m", _ring_tables(n))
    model = '[model]\nkind = "grid"\nnetwork = "big.m"\n'
    spec, base = load_spec(_spec(tmp_path, model + GRID_SIM + '[estimator]\nkind = "central"\n'))
    with pytest.raises(
        SpecError, match=r"spec estimator.kind: expected an estimator that fits in memory"
    ) as err:
        run_spec(spec, base)
    message = str(err.value)
    assert f"central UKF on {n} buses ({3 * n} states) needs about " in message
    need = float(message.split("needs about ")[1].split(" GiB")[0])
    assert need == pytest.approx(12 * 8 * (3 * n) ** 2 / 2**30, rel=1e-2), message
    assert "GiB are available; received kind = 'central'" in message and "s_max = 5" in message
    (tmp_path / "pmu.csv").write_text("t,theta1\n0.0,0.1\n0.01,0.1\n")
    measured = model + 'damping = 0.2\n[data]\nfile = "pmu.csv"\ntime = "t"\n[estimator]\nkind = "central"\n'
    spec, base = load_spec(_spec(tmp_path, measured + "noise_sd = 0.02\n", "data.toml"))
    with pytest.raises(SpecError, match=rf"central UKF on {n} buses"):
        run_spec(spec, base)
    result = CliRunner().invoke(
        app, ["estimate", str(tmp_path / "data.toml"), "--out", str(tmp_path / "runs")]
    )
    assert result.exit_code == 2 and "fits in memory" in " ".join(result.output.split()), result.output
    assert load_spec(_spec(tmp_path, model + GRID_SIM, "default.toml"))[0].estimator.kind == "distributed"


def test_item7_the_central_ukf_memory_estimate_bounds_xla_s_own_count():
    """The estimate behind the refusal (12 copies of the 3N x 3N covariance, float64) is an upper bound
    of XLA's memory analysis of the central grid UKF's compiled scan on a 40-bus network, and not more
    than twice it."""
    n, steps = 40, 5
    branch = _ring_tables(n)["branch"].copy()
    branch[:, :2] -= 101
    net = GridNetwork("ring", branch_coupling(n, branch), np.array([0]), np.arange(n))
    model = KuramotoNetwork(*net.neighbours, np.full(n, 0.2), np.zeros(n))
    whole = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
    config = GridConfig.model_validate({"case": "ieee9", "steps": steps, "wls": False, "wnls": False})
    scan = grid_estimator(config, whole, model, np.zeros(2 * n), 1e-4).scan
    ys = jax.ShapeDtypeStruct((steps, 2 * n), jnp.float64)
    analysis = jax.jit(scan).lower(ys).compile().memory_analysis()
    assert analysis is not None
    counted = analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes
    estimate = _central_grid_bytes(n, steps)
    assert counted <= estimate <= 2 * counted, (counted, estimate)


def test_item7_grid_reports_theta_and_omega_coverage_and_rmse(tmp_path):
    """A simulated grid spec (a MATPOWER network, the default distributed UKF) reports the 95 % coverage
    of theta and of omega besides Omega's, and the RMSE of both; the coverages equal a recount from the
    run's arrays (phase errors wrapped with the complex exponential, band 1.959964 sd) and are above 0.9
    for this calibrated filter."""
    _write_m(tmp_path / "ring.m", _ring_tables(6))
    body = '[model]\nkind = "grid"\nnetwork = "ring.m"\ns_max = 3\n' + GRID_SIM
    spec, base = load_spec(_spec(tmp_path, body))
    _, _, artifacts, _ = run_spec(spec, base)
    m, arrays = artifacts.metrics, artifacts.arrays
    for key in ("coverage95_theta", "coverage95_omega", "coverage95_Omega", "rmse_theta", "rmse_omega"):
        assert np.isfinite(m[f"distributed.{key}"]), (key, sorted(m))
    assert "central.coverage95_theta" not in m
    mean, sd, truth = arrays["distributed_mean"], arrays["distributed_std"], arrays["truth"]
    n = mean.shape[1]
    theta_error = np.angle(np.exp(1j * (mean[:, :, 0] - truth[1:, :n])))
    omega_error = mean[:, :, 1] - truth[1:, n:]
    recount = {
        "theta": np.mean(np.abs(theta_error) <= 1.959964 * sd[:, :, 0]),
        "omega": np.mean(np.abs(omega_error) <= 1.959964 * sd[:, :, 1]),
    }
    for q, value in recount.items():
        assert m[f"distributed.coverage95_{q}"] == pytest.approx(value, abs=1e-12)
        assert value >= 0.9, recount
    assert m["distributed.rmse_omega"] == pytest.approx(np.mean(np.sqrt(np.mean(omega_error**2, axis=0))))


def test_item7_a_matpower_mat_file_reads_as_its_m_twin(tmp_path):
    """A .mat file written with scipy.io.savemat (a struct mpc, as MATLAB's save and pandapower's to_mpc
    write it, or MATPOWER's version-1 top-level tables) loads to the network of the same tables as a .m
    file: coupling, generator buses and bus numbers. A .mat without the tables, or with a branch table too
    narrow, is a named error from the checks the .m route uses."""
    tables = _ring_tables(12)
    reference = load_grid(str(_write_m(tmp_path / "ring.m", tables)))
    assert reference.n_bus == 12 and reference.bus_ids[0] == 101
    scipy.io.savemat(tmp_path / "ring.mat", {"mpc": {"baseMVA": 100.0, "version": "2", **tables}})
    _same_network(load_grid(str(tmp_path / "ring.mat")), reference)
    scipy.io.savemat(tmp_path / "ring_v1.mat", {"baseMVA": 100.0, **tables})
    _same_network(load_grid(str(tmp_path / "ring_v1.mat")), reference)
    scipy.io.savemat(tmp_path / "other.mat", {"bus": tables["bus"]})
    with pytest.raises(
        ValueError, match=r"expected a struct mpc \(or variables bus, gen, branch\); received"
    ):
        load_grid(str(tmp_path / "other.mat"))
    narrow = {**tables, "branch": tables["branch"][:, :10]}
    scipy.io.savemat(tmp_path / "narrow.mat", {"mpc": narrow})
    with pytest.raises(ValueError, match=r"mpc.branch: expected at least 11 columns; received 10"):
        load_grid(str(tmp_path / "narrow.mat"))
    _write_m(tmp_path / "narrow.m", narrow)
    with pytest.raises(ValueError, match=r"mpc.branch: expected at least 11 columns; received 10"):
        load_grid(str(tmp_path / "narrow.m"))
    with pytest.raises(ValueError, match=r"no such file"):
        load_grid(str(tmp_path / "missing.mat"))


def test_item7_pandapower_to_mpc_mat_is_the_bundled_network(tmp_path):
    """pandapower's own MATPOWER export (converter.matpower.to_mpc: savemat of {'mpc': ...}, NaN in the
    columns it leaves unset) of its case9 reads as load_grid("ieee9") reads the bundled case (its PYPOWER
    tables, pi transformers, |Y_ij| of them) and as a .m file of the same tables; a grid spec names it
    relative to the spec file."""
    from pandapower.converter.matpower.to_mpc import to_mpc
    from pandapower.converter.pypower.to_ppc import to_ppc
    from pandapower.networks import case9

    net = case9()
    settings = {"init": "flat", "calculate_voltage_angles": True, "trafo_model": "pi"}
    mpc = to_mpc(net, str(tmp_path / "case9.mat"), **settings)
    assert np.isnan(mpc["mpc"]["gen"]).any()  # what a reader must tolerate outside the columns it uses
    from_mat = load_grid(str(tmp_path / "case9.mat"))
    _same_network(from_mat, load_grid(str(_write_m(tmp_path / "case9.m", mpc["mpc"]))))
    bundled = branch_coupling(9, np.real(to_ppc(net, **settings)["branch"]))  # load_grid("ieee9")'s route
    np.testing.assert_allclose(from_mat.coupling.toarray(), bundled.toarray(), rtol=1e-12)
    assert from_mat.gen_buses.tolist() == [0, 1, 2]
    body = '[model]\nkind = "grid"\nnetwork = "case9.mat"\n' + GRID_SIM
    spec, base = load_spec(_spec(tmp_path, body))
    assert base == tmp_path.resolve() and spec.model.kind == "grid" and spec.model.network == "case9.mat"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "estimater = 1\n",
            "unknown key 'estimater' (did you mean 'estimator'?); allowed keys in the top level",
        ),
        (
            '[model]\nkind = "grid"\nnetwrok = "ieee9"\n',
            "unknown key 'model.netwrok' (did you mean 'network'?)",
        ),
        (
            '[model]\nkind = "chain"\noutput = ["a1"]\n',
            "unknown key 'model.output' (did you mean 'outputs'?)",
        ),
        (
            '[model]\nkind = "gird"\n',
            "'model.kind': expected one of 'chain', 'grid', 'fmu'; received 'gird' (did you mean 'grid'?)",
        ),
        (
            "[simulate]\nseeed = 3\n",
            "unknown key 'simulate.seeed' (did you mean 'seed'?); allowed keys in [simulate]:",
        ),
        (
            '[data]\nfile = "x.csv"\ntime = "t"\noutput = []\n',
            "unknown key 'data.output' (did you mean 'outputs'?)",
        ),
        ("[estimator]\nnosie_sd = 0.1\n", "unknown key 'estimator.nosie_sd' (did you mean 'noise_sd'?)"),
        ('[estimator]\nkind = "centrl"\n', "received 'centrl' (did you mean 'central'?)"),
        (
            "[estimator]\nProcess_SD = 0.1\n",
            "unknown key 'estimator.Process_SD' (did you mean 'process_sd'?)",
        ),
        ("[simulate]\nsmoother = true\n", "'smoother' is a key of [estimator]; allowed keys in [simulate]"),
        ("[unknown]\nK2 = [1.0, 0.1, 0.0]\n", "received 'K2' (did you mean 'k2'?)"),
    ],
    ids=[
        "top",
        "grid",
        "chain",
        "model-kind",
        "simulate",
        "data",
        "estimator",
        "option",
        "case",
        "elsewhere",
        "unknown-name",
    ],  # fmt: skip
)
def test_item7_a_misspelt_spec_key_suggests_the_closest_allowed_one(tmp_path, body, expected):
    """Every section of a spec (the top level, [model] of each kind, [data], [simulate], [estimator], its
    options, [unknown]) answers a misspelt key with the closest allowed one, and lists those allowed; a
    key put in the wrong section names the section that holds it."""
    model = '[model]\nkind = "chain"\nmass = [1.0, 1.0]\nstiffness = 100.0\ndamping = 0.5\noutputs = ["a1"]\n'
    simulate = "[simulate]\nduration = 0.2\ndt = 0.01\nnoise_sd = 0.02\n"
    text = body if "[model]" in body else body + model  # top-level keys stay above the tables
    if "[simulate]" in body:
        text = text.replace("[simulate]\n", simulate)
    elif "[data]" not in body:
        text += simulate
    with pytest.raises(SpecError) as err:
        load_spec(_spec(tmp_path, text))
    assert expected in str(err.value), str(err.value)


def _chain_csv(tmp_path: Path):
    chain = Chain([1.0, 1.0, 1.0], 100.0, 0.5, forced_dofs=[3], outputs=["a1", "x3"])
    rows = ["t,shaker,acc1,disp3"] + [f"{0.01 * k},{np.sin(k)},{0.1 * k},{0.2 * k}" for k in range(5)]
    (tmp_path / "rig.csv").write_text("\n".join(rows) + "\n")
    return chain, tmp_path / "rig.csv"


def test_item7_from_csv_checks_input_names_against_the_model_like_output_names(tmp_path):
    """With the model, from_csv refuses an input column named unlike the model's inputs exactly as it
    refuses such an output (naming the model's channels, what it received and the mapping to pass), takes
    mappings of either in the model's order or another, and checks the inputs' count."""
    chain, csv = _chain_csv(tmp_path)
    outputs = {"a1": "acc1", "x3": "disp3"}
    with pytest.raises(ValueError) as err:
        from_csv(csv, "t", ["shaker"], outputs, model=chain)
    assert str(err.value) == (
        "from_csv inputs: expected the model's inputs ('f3',) (one column each, named after them or mapped "
        "to them); received 1 ('shaker',): 'f3' missing; 'shaker' not the model's. Name the columns after "
        "the model's channels: from_csv(..., inputs={'f3': 'shaker'})."
    )
    with pytest.raises(ValueError) as err:
        from_csv(csv, "t", {"f3": "shaker"}, ["acc1", "disp3"], model=chain)
    assert str(err.value) == (
        "from_csv outputs: expected the model's outputs ('a1', 'x3') (one column each, named after them or "
        "mapped to them); received 2 ('acc1', 'disp3'): 'a1', 'x3' missing; 'acc1', 'disp3' not the "
        "model's ('acc1': did you mean 'a1'?). Name the columns after the model's channels: from_csv(..., "
        "outputs={'a1': 'acc1', 'x3': 'disp3'})."
    )
    with pytest.raises(ValueError, match=r"inputs: expected the model's inputs \('f3',\) .* received none"):
        from_csv(csv, "t", None, outputs, model=chain)
    with pytest.raises(
        ValueError,
        match=r"received 1 \('F3',\): 'f3' missing; 'F3' not the model's \('F3': did you mean 'f3'\?\)",
    ):
        from_csv(csv, "t", {"F3": "shaker"}, outputs, model=chain)
    data = from_csv(csv, "t", {"f3": "shaker"}, {"x3": "disp3", "a1": "acc1"}, model=chain)
    assert data.input_names == chain.input_names and data.output_names == chain.output_names
    np.testing.assert_allclose(np.asarray(data.observations)[:, 1], 0.2 * np.arange(5))  # x3 in place 2
    unchecked = from_csv(csv, "t", ["shaker"], ["acc1", "disp3"])  # without a model: the columns' names
    assert unchecked.input_names == ("shaker",)


def test_item7_from_table_checks_a_parquet_file_s_names_the_same_way(tmp_path):
    """from_table (Parquet here) gives the model check of from_csv, before reading: an input column not
    the model's is refused with the mapping to pass; the model's names pass."""
    import pandas as pd

    chain, csv = _chain_csv(tmp_path)
    pd.read_csv(csv).to_parquet(tmp_path / "rig.parquet")
    with pytest.raises(
        ValueError, match=r"^from_table inputs: .* from_table\(\.\.\., inputs=\{'f3': 'shaker'\}\)\.$"
    ):
        from_table(tmp_path / "rig.parquet", "t", ["shaker"], {"a1": "acc1", "x3": "disp3"}, model=chain)
    data = from_table(
        tmp_path / "rig.parquet", "t", {"f3": "shaker"}, {"a1": "acc1", "x3": "disp3"}, model=chain
    )
    assert data.input_names == ("f3",) and data.n_steps == 5
    with pytest.raises(TypeError, match=r"from_table model: expected a twinfer model"):
        from_table(tmp_path / "rig.parquet", "t", ["shaker"], ["acc1"], model="chain")
