"""A spec's ``[live]`` table and :func:`twinfer.spec.live_setup`: what ``twinfer live`` runs or refuses."""

from pathlib import Path

import pytest

from twinfer.spec import SpecError, live_setup, load_spec

pytestmark = pytest.mark.timeout(120)

CHAIN = """
name = "frame"
[model]
kind = "chain"
mass = [1.0, 1.0, 1.0]
stiffness = 100.0
damping = 0.5
forced_dofs = [3]
outputs = ["a1", "a3"]
"""
DATA = '[data]\nfile = "stream.csv"\ntime = "time"\ninputs = ["load"]\noutputs = ["acc1", "acc3"]\n'


def _setup(tmp_path: Path, text: str):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    spec, _ = load_spec(path)
    return live_setup(spec)


def test_the_streams_columns_map_to_the_programs_names(tmp_path):
    setup = _setup(tmp_path, CHAIN + DATA + "[estimator]\nnoise_sd = 0.05\n[live]\ndt = 0.01\nwindow = 2\n")
    assert setup.dt == 0.01 and setup.time == "time"
    assert setup.columns == {"load": "f3", "acc1": "a1", "acc3": "a3"}
    assert setup.program.output_names == ("a1", "a3")


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("[estimator]\nnoise_sd = 0.05\n", "live.dt: expected the model's step"),
        ('[estimator]\nnoise_sd = "auto"\n[live]\ndt = 0.01\n', "needs numbers for noise_sd and process_sd"),
        (
            '[estimator]\nkind = "banded"\npartition = [[1], [2, 3]]\nnoise_sd = 0.05\n[live]\ndt = 0.01\n',
            'estimator.kind: expected "central" for twinfer live',
        ),
        ('[estimator]\nnoise_sd = 0.05\n[live]\ndt = 0.01\ngroups = {left = ["a2"]}\n', "live.groups"),
    ],
)
def test_what_the_live_twin_cannot_run_is_refused_by_key(tmp_path, extra, named):
    with pytest.raises(SpecError, match=named):
        _setup(tmp_path, CHAIN + DATA + extra)


@pytest.mark.parametrize(("key", "value"), [("tolerance", "0.7"), ("window", "-1"), ("snapshot_every", "0")])
def test_the_live_table_is_validated(tmp_path, key, value):
    with pytest.raises(SpecError, match=f"live.{key}"):
        _setup(tmp_path, CHAIN + DATA + f"[estimator]\nnoise_sd = 0.05\n[live]\ndt = 0.01\n{key} = {value}\n")
