import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.experiments import ConfigError, get_case, parse_set, resolve_config

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def test_readme_commands_exist_in_makefile():
    """The README opens with `make run` and `make test`, and the Makefile defines both."""
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```")[1]
    assert "make run" in first_block and "make test" in first_block
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test", "bench"):
        assert re.search(rf"^{target}:", makefile, re.M), target
    assert "twinfer run chain4" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_list_shows_chain4():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    assert "chain4" in result.output


def test_list_case_shows_its_settings_and_quick_values():
    result = runner.invoke(app, ["list", "chain4"], terminal_width=200)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if " horizon " in line)
    assert "10.0" in row and "2.0" in row  # the default and the --quick size
    assert "k4_init" in result.output
    bad = runner.invoke(app, ["list", "chian4"])
    assert bad.exit_code == 2 and "list case: expected one of" in bad.output and "'chian4'" in bad.output


def test_command_help_is_plain_text():
    from twinfer.cli._app import plain_help

    doc = """First line.

        See :mod:`twinfer.spec` and :class:`~twinfer.infer.Estimate`; writes
        ``report.md``.
        """
    assert plain_help(doc) == "First line.\n\nSee twinfer.spec and Estimate; writes report.md."
    result = runner.invoke(app, ["estimate", "--help"], terminal_width=200)
    assert ":mod:" not in result.output and "``" not in result.output


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ("horizon=-1", "'horizon': Input should be greater than 0; received -1"),
        ("horizn=2", "unknown key 'horizn'; allowed keys: seed, horizon"),
        ("sensors=some", "'sensors'"),
        ("state_window_start=20", "state_window_start = 20.0 must be below horizon"),
    ],
)
def test_invalid_setting_names_the_key(setting, match):
    case = get_case("chain4")
    with pytest.raises(ConfigError, match=re.escape(match)):
        resolve_config(case, sets=parse_set([setting]))


def test_cli_invalid_setting_exits_nonzero(tmp_path):
    result = runner.invoke(app, ["run", "chain4", "--set", "horizon=-1", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "horizon" in result.output
    assert not any(tmp_path.iterdir())


def test_unknown_case_and_bad_set_syntax():
    result = runner.invoke(app, ["run", "no-such-case"])
    assert result.exit_code != 0 and "expected one of" in result.output
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_set(["horizon"])


def test_config_precedence(tmp_path):
    """Defaults < --quick < TOML file < --set < --seed."""
    case = get_case("chain4")
    file = tmp_path / "c.toml"
    file.write_text("horizon = 3.0\nnoise_sd = 0.01\n")
    cfg = resolve_config(case, file, parse_set(["noise_sd=0.02"]), seed=5, quick=True)
    assert cfg.horizon == 3.0 and cfg.noise_sd == 0.02 and cfg.seed == 5
    assert cfg.state_window_start == 0.8  # from --quick


@pytest.mark.slow
def test_run_chain4_quick_writes_run_folder(tmp_path):
    """`twinfer run chain4 --quick` writes a complete run folder; `report` re-renders it."""
    result = runner.invoke(app, ["run", "chain4", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (run_dir,) = list(tmp_path.iterdir())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["sim.steps"] == 2000 and metrics["timing.run_s"] > 0
    assert (run_dir / "figures" / "simulation.png").stat().st_size > 10_000
    for fig in ("estimators_x3_v3.png", "estimators_k4.png", "interface_force.png"):
        assert (run_dir / "figures" / fig).is_file()
    for key in ("state_rmse", "k4_nrmse", "coverage95", "coverage68", "nll"):
        key = f"central.{key}"
        assert np.isfinite(metrics[key])
    assert metrics["central.coverage95"] >= 0.9
    for name in ("config.toml", "arrays.npz", "report.md", "meta.json"):
        assert (run_dir / name).is_file()
    assert "Table S1" in (run_dir / "report.md").read_text()
    again = runner.invoke(app, ["report", str(run_dir)])
    assert again.exit_code == 0, again.output


def test_report_on_missing_folder(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code != 0 and "config.toml" in result.output


def test_every_case_module_registers_the_case_it_is_listed_under():
    from twinfer.experiments import CASE_MODULES, all_cases

    assert list(all_cases()) == sorted(CASE_MODULES)
    with pytest.raises(KeyError, match="pinn-sparse"):
        get_case("no-such-case")
