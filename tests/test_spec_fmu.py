"""`twinfer estimate` of a spec with ``[model] kind = "fmu"`` (issue #56, item 5): the Reference FMUs.

The FMUs are read from ``../shared/fmus`` (a test copies one beside its spec, or edits a copy); every
test is skipped when that folder is absent. References: fmpy's own Model Exchange simulation (CVode,
rtol 1e-12) for a measured record, and the JAX-written Van der Pol estimated on the same record.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import fmpy
import fmpy.fmi2
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray
from typer.testing import CliRunner

import twinfer
from _fmu_build import edited_copy
from twinfer.cli import app
from twinfer.data import Dataset
from twinfer.data._benchmarks import default_data_root
from twinfer.models import AbstractModel, VanDerPol
from twinfer.spec import SpecError, live_setup, load_spec, run_spec

FMUS = default_data_root().parent / "fmus"  # ../shared/fmus, found as the data are (TWINFER_DATA_ROOT)
VDP = FMUS / "VanDerPol.fmu"
pytestmark = pytest.mark.skipif(not VDP.is_file(), reason=f"Reference FMUs not found under {FMUS}")

MODEL = '[model]\nkind = "fmu"\npath = "VanDerPol.fmu"\noutputs = ["x0"]\n'
SIMULATE = "\n[simulate]\nduration = 15.0\ndt = 0.1\nnoise_sd = 0.05\nseed = 0\n"
ESTIMATOR = "\n[estimator]\nstate_sd = 0.1\nprocess_sd = 1e-4\n"
UNKNOWN = "\n[unknown]\nmu = [1.0, 0.5, 0.0]\n"


def _invoke(*args):
    return CliRunner().invoke(app, ["estimate", *map(str, args)])


def _folder(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    return run


def _spec(tmp_path: Path, body: str, fmu: Path | None = VDP) -> Path:
    """``body`` as ``tmp_path/vdp.toml``, with ``fmu`` copied beside it as ``VanDerPol.fmu``."""
    if fmu is not None:
        shutil.copy(fmu, tmp_path / "VanDerPol.fmu")
    spec = tmp_path / "vdp.toml"
    spec.write_text(body)
    return spec


def _copy(tmp_path: Path, *, drop: str | None = None, edit=None) -> Path:
    """A copy of the Van der Pol FMU without the members under ``drop``, its XML edited."""
    return edited_copy(VDP, tmp_path / "edited.fmu", drop=drop, edit=edit)


def _cosimulation_only(xml: str) -> str:
    return re.sub(r"<ModelExchange.*?</ModelExchange>", "", xml, flags=re.S)


def _edit(path: Path, *pairs: tuple[str, str]) -> None:
    """Replace each ``old`` in the file by ``new``; an ``old`` not found exactly once is an error."""
    text = path.read_text()
    for old, new in pairs:
        assert text.count(old) == 1, (path.name, old)
        text = text.replace(old, new)
    path.write_text(text)


_GET, _SET = (
    '        default:\n            logError(comp, "Get',
    '        default:\n            logError(comp, "Set',
)


def _forced_van_der_pol(tmp_path: Path) -> Path:
    """The Reference Van der Pol FMU rebuilt from the sources it ships with a continuous real input u
    (value reference 6): ``der(x1) = mu (1 - x0^2) x1 - x0 + u``, its partial derivative 1, compiled
    here with the FMI headers fmpy ships and the machine's C compiler (no binary without its source)."""
    folder = tmp_path / "forced"
    with zipfile.ZipFile(VDP) as zf:
        zf.extractall(folder)
    sources = folder / "sources"
    _edit(
        sources / "config.h",
        ("vr_mu\n", "vr_mu, vr_u\n"),
        ("    double mu;\n", "    double mu;\n    double u;\n"),
    )
    _edit(
        sources / "model.c",
        ("    M(mu) = 1;\n", "    M(mu) = 1;\n    M(u) = 0;\n"),
        ("- M(x0);\n", "- M(x0) + M(u);\n"),
        (_GET, "        case vr_u:\n            ASSERT_NVALUES(1);\n            values[(*index)++] = M(u);\n"
         "            return OK;\n" + _GET),
        (_SET, "        case vr_u:\n            ASSERT_NVALUES(1);\n            M(u) = values[(*index)++];\n"
         "            break;\n" + _SET),
        ("    } else {\n        *partialDerivative = 0;",
         "    } else if (unknown == vr_der_x1 && known == vr_u) {\n        *partialDerivative = 1;\n"
         "    } else {\n        *partialDerivative = 0;"),
    )  # fmt: skip
    _edit(
        folder / "modelDescription.xml",
        ("  </ModelVariables>", '    <ScalarVariable name="u" valueReference="6" causality="input" '
         'variability="continuous">\n      <Real start="0"/>\n    </ScalarVariable>\n  </ModelVariables>'),
        ('<Unknown index="5" dependencies="2 4" dependenciesKind="dependent dependent"/>',
         '<Unknown index="5" dependencies="2 4 7" dependenciesKind="dependent dependent constant"/>'),
    )  # fmt: skip
    binary = folder / "binaries" / fmpy.platform / f"VanDerPol{fmpy.sharedLibraryExtension}"
    headers = Path(fmpy.__file__).parent / "c-code"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O2", f"-I{headers}", f"-I{sources}", str(sources / "all.c"), "-o",
         str(binary), "-lm"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    target = tmp_path / "ForcedVanDerPol.fmu"
    with zipfile.ZipFile(target, "w") as zf:
        for file in sorted(folder.rglob("*")):
            zf.write(file, file.relative_to(folder).as_posix())
    return target


class _ForcedVanDerPol(AbstractModel):
    """The forced Van der Pol written in JAX: the oracle of the FMU built by :func:`_forced_van_der_pol`."""

    params: dict

    def __init__(self) -> None:
        self.params = {"mu": jnp.asarray(1.0, dtype=jnp.float64)}

    def vector_field(self, t, x, u, params):
        return jnp.stack([x[1], params["mu"] * ((1.0 - x[0] * x[0]) * x[1]) - x[0] + u[0]])

    def output(self, t, x, u, params):
        return x

    @property
    def state_names(self):
        return ("x0", "x1")

    @property
    def input_names(self):
        return ("u",)

    @property
    def output_names(self):
        return ("x0", "x1")


@pytest.mark.timeout(300)
def test_a_simulated_fmu_spec_covers_the_true_mu_and_writes_a_run_folder(tmp_path, monkeypatch):
    """The Van der Pol FMU beside the spec (a relative path), simulated with mu = 1.5 ([model.params]),
    x0 measured with noise of 0.05 over 150 steps of 0.1 s, x1 unmeasured, the UKF from mu = 1: the
    95 % interval holds the truth, the states' bands hold the true states, the run folder holds
    estimate.nc (states x0, x1 and mu), metrics, figures, a report and the FMU's start values as x0,
    and the FMU's temporary folder is gone after the run."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    spec = _spec(tmp_path, MODEL + "\n[model.params]\nmu = 1.5\n" + SIMULATE + ESTIMATOR + UNKNOWN)
    result = _invoke(spec, "--out", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    run = _folder(tmp_path / "runs")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["param.mu_low"] < 1.5 < metrics["param.mu_high"], metrics
    assert metrics["param.mu_covered"] == 1.0 and metrics["param.mu_sd"] < 0.1, metrics
    assert metrics["state.coverage95"] >= 0.9 and 0.5 < metrics["nis"] < 2.0, metrics
    with xarray.open_dataset(run / "estimate.nc", engine="h5netcdf") as est:
        assert list(est["state"].values) == ["x0", "x1", "mu"]
        np.testing.assert_allclose(est["time"].values, 0.1 * np.arange(151), rtol=0, atol=1e-12)
    assert (run / "figures" / "states.png").exists() and (run / "figures" / "parameters.png").exists()
    report = (run / "report.md").read_text()
    assert "central ukf on an FMU" in report and "measured outputs x0; unmeasured x1" in report
    assert "x0 = [2.0, 0.0]" in (run / "config.toml").read_text()
    assert list((tmp_path / "tmp").iterdir()) == []  # the unpacked FMU was removed


@pytest.mark.timeout(300)
def test_a_measured_csv_through_the_fmu_spec_equals_the_jax_model_on_the_same_record(tmp_path):
    """A record made by fmpy's own Model Exchange simulation (mu = 1.5), x0 with noise in a column named
    ``pos``: the spec's EKF on the FMU gives mu (mean and sd) equal to the JAX-written Van der Pol's
    under ``twinfer.estimate`` with the same numbers to 1e-6, and its interval holds the truth."""
    n, dt, sd = 100, 0.1, 0.05
    out = fmpy.simulate_fmu(str(VDP), fmi_type="ModelExchange", stop_time=n * dt, output_interval=dt,
                            relative_tolerance=1e-12, start_values={"mu": 1.5})  # fmt: skip
    t = dt * np.arange(n + 1)
    pos = np.asarray(out["x0"]) + sd * np.random.default_rng(3).standard_normal(n + 1)
    np.savetxt(tmp_path / "vdp.csv", np.column_stack([t, pos]), delimiter=",", header="t,pos",
               comments="", fmt="%.17g")  # fmt: skip
    body = MODEL + '\n[data]\nfile = "vdp.csv"\ntime = "t"\noutputs = ["pos"]\n'
    body += ESTIMATOR + 'estimator = "ekf"\nnoise_sd = 0.05\n' + UNKNOWN
    result = _invoke(_spec(tmp_path, body), "--out", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    metrics = json.loads((_folder(tmp_path / "runs") / "metrics.json").read_text())
    assert "state.rmse" not in metrics and "param.mu_covered" not in metrics  # no truth in the file
    data = Dataset(t, np.column_stack([pos, np.full(n + 1, np.nan)]), output_names=("x0", "x1"),
                   mask=np.column_stack([np.ones(n + 1, bool), np.zeros(n + 1, bool)]))  # fmt: skip
    oracle = twinfer.estimate(VanDerPol(), data, "ekf", x0=[2.0, 0.0], state_sd=0.1, process_sd=1e-4,
                              noise_sd=0.05, unknown={"mu": (1.0, 0.5, 0.0)})  # fmt: skip
    mean, std = oracle.params["mu"]
    assert abs(metrics["param.mu"] - float(mean[-1])) < 1e-6, (metrics, float(mean[-1]))
    assert abs(metrics["param.mu_sd"] - float(std[-1])) < 1e-6, (metrics, float(std[-1]))
    assert abs(metrics["loglik"] - float(oracle.loglik)) < 1e-6 * abs(float(oracle.loglik))
    assert metrics["param.mu_low"] < 1.5 < metrics["param.mu_high"], metrics


def _zip_without_description(tmp_path: Path) -> Path:
    with zipfile.ZipFile(tmp_path / "VanDerPol-not.fmu", "w") as zf:
        zf.writestr("readme.txt", "hello")
    return tmp_path / "VanDerPol-not.fmu"


SIMULATED = MODEL + SIMULATE + UNKNOWN


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("fmu", "body", "named"),
    [
        (None, SIMULATED, "model.path: FMU path: expected an existing .fmu file; received"),
        (_zip_without_description, SIMULATED, "model.path: FMU '*': expected a modelDescription.xml"),
        (
            lambda p: _copy(p, drop=f"binaries/{fmpy.platform}"),
            SIMULATED,
            f"model.path: FMU '*' binary: expected binaries/{fmpy.platform}/VanDerPol",
        ),
        (
            lambda p: _copy(p, edit=_cosimulation_only),
            SIMULATED,
            "model.path: FMU '*' interface: expected Model Exchange * received a co-simulation-only FMU",
        ),
        (
            VDP,
            SIMULATED + "[model.params]\nnu = 1.0\n",
            "model.params.nu: FMU '*' parameter 'nu': expected a",
        ),
        (
            VDP,
            MODEL + SIMULATE + "[unknown]\nnu = [1.0, 0.5, 0.0]\n",
            "unknown.nu: * one of ['mu']; received 'nu'",
        ),
        (
            VDP,
            MODEL + SIMULATE + "[unknown]\nx1 = [0.0, 0.5, 0.0]\n",
            "unknown.x1: * (type Real, causality output",
        ),
        (
            lambda p: _copy(
                p, edit=lambda xml: xml.replace('<Real start="1"/>', '<Real start="1" min="0" max="10"/>')
            ),
            MODEL + SIMULATE + "[unknown]\nmu = [-1.0, 0.5, 0.0]\n",
            "unknown.mu: expected a value within 'mu''s declared range [0, 10] (its min and max in the model "
            "description); received -1.0",
        ),
        (
            FMUS / "Dahlquist.fmu",
            MODEL.replace('"x0"', '"x"') + 'derivatives = "directional"\n' + SIMULATE,
            "model.derivatives: expected an FMU with providesDirectionalDerivative for 'directional'",
        ),
        (
            VDP,
            SIMULATED.replace('["x0"]', '["x0", "y"]'),
            "model.outputs: expected outputs of the FMU (x0, x1); received 'y'",
        ),
        (
            VDP,
            SIMULATED + '[estimator]\nkind = "banded"\n',
            "estimator.kind: an FMU is one model * received 'banded'",
        ),
        (
            VDP,
            SIMULATED + '[estimator]\nkind = "distributed"\npartition = [[1]]\n',
            "estimator.kind: * expected 'central'; received 'distributed'",
        ),
        (
            VDP,
            SIMULATED + '[estimator]\nestimator = "kf"\n',
            "estimator.estimator: 'kf' needs a linear model",
        ),
        (
            VDP,
            SIMULATED + '[estimator]\nintegrator = "exact"\n',
            "estimator.integrator: 'exact' * received 'exact'",
        ),
        (
            VDP,
            SIMULATED + "[estimator]\nstate_sd = [0.1, 0.1, 0.1]\n",
            "estimator.state_sd: expected one value or 2, one per state (x0, x1); received 3 values",
        ),
        (
            VDP,
            MODEL + '[data]\nfile = "x.csv"\ntime = "t"\ninputs = ["u"]\noutputs = ["pos"]\n'
            "[estimator]\nnoise_sd = 0.1\n",
            "data.inputs: expected 0 input columns (one per input of the FMU [], in order); received 1",
        ),
        (
            VDP,
            SIMULATED.replace("noise_sd = 0.05", "noise_sd = [0.05, 0.05]"),
            "simulate.noise_sd: expected one",
        ),
    ],
    ids=[
        "missing-file",
        "not-an-fmu",
        "other-platform",
        "co-simulation-only",
        "param-name",
        "unknown-name",
        "unknown-not-a-parameter",
        "unknown-outside-its-range",
        "no-directional-derivatives",
        "sensor-name",
        "banded",
        "distributed",
        "kf",
        "exact",
        "state-sd-count",
        "input-count",
        "noise-count",
    ],
)
def test_bad_fmu_specs_exit_2_naming_the_key(tmp_path, fmu, body, named):
    """Each problem of an FMU spec is a line naming its key, the expected and the received value, with
    exit status 2 before anything runs (the archive's own named errors under ``model.path``)."""
    source = fmu(tmp_path) if callable(fmu) else fmu
    result = _invoke(_spec(tmp_path, body, source), "--out", tmp_path / "runs")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    pattern = ".*?".join(re.escape(part) for part in named.split("*"))
    assert re.search(pattern, text), text
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.timeout(60)
def test_nothing_of_the_fmu_runs_when_its_spec_is_read(tmp_path, monkeypatch):
    """``load_spec`` reads an FMU's archive and XML only: neither a valid spec nor a co-simulation-only
    FMU without a binary (which fails on its description, the first check) unpacks or loads it."""
    touched = []
    monkeypatch.setattr(fmpy.fmi2, "FMU2Model", lambda **kw: touched.append("load"))
    monkeypatch.setattr(fmpy, "extract", lambda *a, **kw: touched.append("extract"))
    spec, base = load_spec(_spec(tmp_path, SIMULATED))
    assert spec.model.kind == "fmu" and base == tmp_path.resolve()
    assert spec.estimator.x0 == [2.0, 0.0]  # the FMU's start values
    broken = _copy(tmp_path, drop="binaries/", edit=_cosimulation_only)
    with pytest.raises(SpecError, match=r"model\.path: .*co-simulation-only"):
        load_spec(_spec(tmp_path, SIMULATED, broken))
    assert touched == []


@pytest.mark.timeout(300)
def test_a_live_twin_of_an_fmu_spec_equals_its_program_over_the_whole_record(tmp_path):
    """``twinfer live``'s setup of an FMU spec: the stream's column ``pos`` is the FMU's output x0 (x1
    unmeasured, never waited for), and a :class:`~twinfer.live.Twin` fed the record frame by frame (UKF,
    mu unknown) applies each step as its frame comes and gives every row of the program's run over the
    whole record to 1e-12."""
    from twinfer.live import Twin

    n, dt, sd = 60, 0.1, 0.05
    out = fmpy.simulate_fmu(str(VDP), fmi_type="ModelExchange", stop_time=n * dt, output_interval=dt,
                            relative_tolerance=1e-12, start_values={"mu": 1.5})  # fmt: skip
    t = dt * np.arange(n + 1)
    pos = np.asarray(out["x0"]) + sd * np.random.default_rng(5).standard_normal(n + 1)
    body = MODEL + '\n[data]\nfile = "stream.csv"\ntime = "t"\noutputs = ["pos"]\n'
    body += ESTIMATOR + "noise_sd = 0.05\n" + UNKNOWN + "\n[live]\ndt = 0.1\n"
    spec, base = load_spec(_spec(tmp_path, body))
    setup = live_setup(spec, base)
    assert setup.columns == {"pos": "x0"} and setup.program.output_names == ("x0", "x1")
    assert setup.measured == ("x0",)
    twin = Twin(setup.program, dt=setup.dt, alarms=(), measured=setup.measured)
    rows, _ = twin.push((float(ti), {setup.columns["pos"]: float(p)}) for ti, p in zip(t, pos, strict=True))
    assert twin.finish()[0].k.size == 0  # each step applied when its frame came: x1 is not waited for
    data = Dataset(t, np.column_stack([pos, np.full(n + 1, np.nan)]), output_names=("x0", "x1"),
                   mask=np.column_stack([np.ones(n + 1, bool), np.zeros(n + 1, bool)]))  # fmt: skip
    est = setup.program.run(data)
    assert rows.k.tolist() == list(range(1, n + 1))
    np.testing.assert_allclose(rows.mean, np.asarray(est.means[1:]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rows.std, np.asarray(est.stds[1:]), rtol=1e-12, atol=1e-12)
    low, high = est.interval("mu")
    assert low < 1.5 < high


@pytest.fixture(scope="module")
def forced(tmp_path_factory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the forced Van der Pol FMU from its sources")
    return _forced_van_der_pol(tmp_path_factory.mktemp("forced"))


FORCED = '[model]\nkind = "fmu"\npath = "ForcedVanDerPol.fmu"\noutputs = ["x0"]\n'


@pytest.mark.timeout(300)
def test_an_fmu_input_from_a_csv_column_equals_the_jax_model_on_the_same_record(tmp_path, forced):
    """The forced Van der Pol FMU (built from source) driven by a measured force column (held over each
    step, ``input_hold = "zoh"``): the spec's UKF gives mu (mean and sd) and the log-likelihood equal to
    the JAX-written forced Van der Pol's under ``twinfer.estimate`` to 1e-6, its interval holding 1.5."""
    from twinfer.sim import simulate_dataset

    n, dt = 100, 0.1
    force = 0.8 * np.sin(0.9 * dt * np.arange(n + 1))[:, None]
    truth = simulate_dataset(_ForcedVanDerPol().with_params(mu=1.5), force, dt, [0.05, 0.0],
                             jax.random.key(1), x0=[2.0, 0.0])  # fmt: skip
    pos = np.asarray(truth.observations)[:, 0]
    np.savetxt(tmp_path / "rig.csv", np.column_stack([truth.times, force[:, 0], pos]), delimiter=",",
               header="t,force,pos", comments="", fmt="%.17g")  # fmt: skip
    shutil.copy(forced, tmp_path / forced.name)
    data = (
        '\n[data]\nfile = "rig.csv"\ntime = "t"\ninputs = ["force"]\noutputs = ["pos"]\ninput_hold = "zoh"\n'
    )
    spec = _spec(tmp_path, FORCED + data + ESTIMATOR + "noise_sd = 0.05\n" + UNKNOWN, None)
    result = _invoke(spec, "--out", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    metrics = json.loads((_folder(tmp_path / "runs") / "metrics.json").read_text())
    observed = np.column_stack([np.ones(n + 1, bool), np.zeros(n + 1, bool)])
    y = np.column_stack([pos, np.full(n + 1, np.nan)])
    record = Dataset(truth.times, y, inputs=force, mask=observed, input_names=("u",),
                     output_names=("x0", "x1"), metadata={"input_hold": "zoh"})  # fmt: skip
    oracle = twinfer.estimate(_ForcedVanDerPol(), record, "ukf", x0=[2.0, 0.0], state_sd=0.1,
                              process_sd=1e-4, noise_sd=0.05, unknown={"mu": (1.0, 0.5, 0.0)})  # fmt: skip
    mean, std = oracle.params["mu"]
    assert abs(metrics["param.mu"] - float(mean[-1])) < 1e-6, (metrics, float(mean[-1]))
    assert abs(metrics["param.mu_sd"] - float(std[-1])) < 1e-6, (metrics, float(std[-1]))
    assert abs(metrics["loglik"] - float(oracle.loglik)) < 1e-6 * abs(float(oracle.loglik))
    assert metrics["param.mu_low"] < 1.5 < metrics["param.mu_high"], metrics


@pytest.mark.timeout(300)
def test_a_simulated_fmu_with_an_input_drives_it_with_a_band_limited_force(tmp_path, forced):
    """``[simulate]`` of the forced FMU (``run_spec``): its input u a band-limited force of ``force_sd``
    held over each step, the truth the FMU's own solve with mu = 1.5; the UKF's interval holds the truth
    and its bands the true states. (The EKF's bands hold fewer here, 0.78 of them on a sine force, and
    equally for the JAX-written model: its linearisation, not the FMU.)"""
    shutil.copy(forced, tmp_path / forced.name)
    simulate = "\n[simulate]\nduration = 10.0\ndt = 0.1\nnoise_sd = 0.05\nforce_sd = 2.0\nforce_band = 0.2\n"
    body = FORCED + "[model.params]\nmu = 1.5\n" + simulate + ESTIMATOR + UNKNOWN
    _, data, artifacts, _ = run_spec(*load_spec(_spec(tmp_path, body, None)))
    metrics = artifacts.metrics
    assert metrics["param.mu_covered"] == 1.0 and metrics["state.coverage95"] >= 0.9, metrics
    assert data.input_names == ("u",) and data.input_hold == "zoh" and data.truth_params == {"mu": 1.5}
    inputs = np.asarray(data.inputs)
    assert inputs.shape == (101, 1) and 0.1 < float(np.std(inputs)) < 2.0
    assert np.asarray(data.mask).tolist() == [[True, False]] * 101
