"""Configuration corner cases: each is a named ConfigError before any setup, never a crash mid-run.

Every error names the key, what it expects and what it received (``_format_errors``); the property tests
feed arbitrary ``--set`` values and TOML files to a few cases' configs and accept only two outcomes: a
valid config, or a ConfigError naming the key.
"""

import dataclasses
import math
import re
import tempfile
import tomllib
import typing
from pathlib import Path
from unittest import mock

import jax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from twinfer.cli import app
from twinfer.experiments import REGISTRY, ConfigError, _case, all_cases, get_case, parse_set, resolve_config
from twinfer.report import to_toml

runner = CliRunner()


def _error(case: str, *items: str, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        resolve_config(get_case(case), sets=parse_set(items), **kwargs)
    return str(info.value)


def _value(case: str, key: str, sets: dict):
    return getattr(resolve_config(get_case(case), sets=sets), key)


def _names(message: str, key: str, received: str) -> None:
    """The message names the key and the received value (the expectation sits between them)."""
    assert re.search(rf"'{re.escape(key)}'[^\n]*: [^\n]+; received {re.escape(received)}", message), message


def test_horizon_inf_is_a_named_config_error():
    """horizon=inf used to reach int(round(inf / dt)): OverflowError mid-setup."""
    message = _error("chain4", "horizon=inf")
    _names(message, "horizon", "inf")
    assert "finite" in message
    _names(_error("schedules", "horizon=-inf"), "horizon", "-inf")
    _names(_error("pinn-joint", "horizon=nan"), "horizon", "nan")


def test_horizon_beyond_memory_is_refused_with_the_estimate():
    """horizon=1e7 asked numpy for 298 GiB; the estimate (1e10 steps) refuses it up front, in GiB."""
    message = _error("chain4", "horizon=1e7")
    assert "'horizon', 'dt': expected a run that fits in memory" in message
    found = re.search(r"needs about ([0-9.e+]+) GiB", message)
    assert found is not None, message
    needed = float(found.group(1))
    assert needed > 1e4  # 1e10 steps at 12 KiB each: ~1e5 GiB
    assert "received horizon = 10000000.0, dt = 0.001" in message
    _names(_error("schedules", "horizon=1e7"), "dt", "horizon = 10000000.0, dt = 0.001")


def test_grid_steps_beyond_memory_are_refused_with_the_estimate():
    """The grid's estimate grows with steps times buses; the largest network's default run fits 2 GiB."""
    message = _error("grid", "steps=1000000000")
    assert "'steps', 'case': expected a run that fits in memory" in message
    assert "received steps = 1000000000, case = 'ieee300'" in message
    case = get_case("grid")
    assert case.memory_estimate is not None
    big = case.memory_estimate(resolve_config(case, sets={"case": "pegase9241"}))
    assert case.memory_estimate(resolve_config(case)) < big < 2 * 2**30


@pytest.mark.parametrize("case", ["pinn-sparse", "pinn-joint", "pinn-bayes"])
def test_pinn_n_samples_beyond_memory_are_refused_with_the_estimate(case):
    message = _error(case, "n_samples=10000000000")
    assert "'n_samples', 'width', 'depth', 'n_fourier': expected a run that fits in memory" in message
    assert "received n_samples = 10000000000" in message


def test_sample_count_beyond_memory_is_refused_without_allocating():
    """The estimate counts samples arithmetically (t_end / dt = 1e200 would not fit as an array)."""
    for case in ("common-interface", "bouncing-ball"):
        message = _error(case, "t_end=1e100", "dt=1e-100")
        assert "'t_end', 'dt': expected a run that fits in memory" in message


def test_shipped_configs_fit_the_memory_estimate_of_a_small_machine():
    """The estimates refuse no default or --quick run on a 4 GiB machine; the scaling cases have one."""
    with_estimate = {n for n, c in all_cases().items() if c.memory_estimate is not None}
    scaling = {"chain4", "schedules", "grid", "pinn-sparse", "pinn-joint", "pinn-bayes"}
    scaling |= {"common-interface", "bouncing-ball"}
    assert scaling <= with_estimate
    for name in with_estimate:
        case = get_case(name)
        assert case.memory_estimate is not None
        for quick in (False, True):
            assert case.memory_estimate(resolve_config(case, quick=quick)) < 4 * 2**30, name


def test_memory_check_uses_the_available_memory(monkeypatch):
    """The same config passes or fails with the memory there is; the default run fits in 1 GiB."""
    case = get_case("chain4")
    assert case.memory_estimate is not None
    default = resolve_config(case)
    assert case.memory_estimate(default) < 2**30
    longer = case.memory_estimate(resolve_config(case, sets={"horizon": 100.0}))
    assert longer > case.memory_estimate(default)  # grows with horizon / dt
    monkeypatch.setattr(_case, "available_memory", lambda: longer - 1)
    with pytest.raises(ConfigError, match=r"'horizon', 'dt': expected a run that fits in memory"):
        resolve_config(case, sets={"horizon": 100.0})
    assert _value("chain4", "horizon", {}) == 10.0
    monkeypatch.setattr(_case, "available_memory", lambda: None)  # unknown: no refusal
    assert _value("chain4", "horizon", {"horizon": 100.0}) == 100.0


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="Linux /proc/meminfo")
def test_available_memory_is_positive_and_below_total():
    have = _case.available_memory()
    assert have is not None and 0 < have
    lines = Path("/proc/meminfo").read_text().splitlines()
    total = int(next(x for x in lines if x.startswith("MemTotal:")).split()[1])
    assert have <= total * 1024


@pytest.mark.parametrize("case", ["chain4", "grid", "emps", "pinn-sparse"])
def test_seed_at_or_above_2_63_is_a_named_config_error(case):
    """Seeds are int64 (what jax.random.key takes); 2**63 and up used to run (numpy) or crash (JAX)."""
    _names(_error(case, f"seed={2**63}"), "seed", str(2**63))
    _names(_error(case, seed=2**64), "seed", str(2**64))
    largest = resolve_config(get_case(case), seed=2**63 - 1).seed
    assert largest == 2**63 - 1
    jax.random.key(largest)  # the largest accepted seed is a valid JAX key
    with pytest.raises(OverflowError):
        jax.random.key(2**63)  # ...and the bound is JAX's own
    _names(_error(case, "seed=-1"), "seed", "-1")


def test_sindy_train_seed_is_bounded_too():
    """The int64 bound is generic: every integer setting, not only the one named ``seed``."""
    _names(_error("chain4", f"sindy_train_seed={2**70}"), "sindy_train_seed", str(2**70))
    _names(_error("grid", f"steps={2**63}"), "steps", str(2**63))


def test_binary_config_file_is_a_named_config_error(tmp_path):
    """A --config file that is not UTF-8 used to raise UnicodeDecodeError."""
    file = tmp_path / "settings.toml"
    file.write_bytes(b"horizon = 2.0\n\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match=r"settings\.toml: expected a TOML file \(UTF-8 text\)"):
        resolve_config(get_case("chain4"), file)
    result = runner.invoke(app, ["run", "chain4", "--config", str(file), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "UTF-8" in result.output
    assert not (tmp_path / "o").exists()


def test_unreadable_or_malformed_config_file_is_a_named_config_error(tmp_path):
    with pytest.raises(ConfigError, match="could not read the file"):
        resolve_config(get_case("chain4"), tmp_path / "absent.toml")
    nested = tmp_path / "deep.toml"
    nested.write_text("v = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="deep.toml"):
        resolve_config(get_case("chain4"), nested)


def test_grid_noise_sd_1e300_is_a_named_config_error():
    """noise_sd=1e300 used to overflow noise_sd**2 inside the JIT-compiled run."""
    message = _error("grid", "noise_sd=1e300")
    _names(message, "noise_sd", "1e+300")
    assert "magnitude between 1e-100 and 1e+100" in message
    assert _value("grid", "noise_sd", {"noise_sd": 0.5}) == 0.5


@pytest.mark.parametrize("case", ["chain4", "grid"])
def test_ukf_gamma_inf_is_refused_before_the_run(case):
    """ukf_gamma=inf used to fail only after the full run (NaN estimates reaching the RMSE)."""
    _names(_error(case, "ukf_gamma=inf"), "ukf_gamma", "inf")
    _names(_error(case, "ukf_gamma=nan"), "ukf_gamma", "nan")


def test_noise_sd_inf_is_a_named_config_error():
    """noise_sd=inf used to reach the dataset check as -inf observations."""
    _names(_error("chain4", "noise_sd=inf"), "noise_sd", "inf")
    _names(_error("emps", "noise_sd=inf"), "noise_sd", "inf")


def test_emps_prediction_horizon_below_two_samples_is_a_named_config_error():
    """A horizon of one sample would observe every sample and score none."""
    message = _error("emps", "prediction_horizons=[100, 1]")
    assert "prediction_horizons" in message and "at least 2 samples; received [100, 1]" in message, message


def test_mass_1e_300_is_a_named_config_error():
    """mass=1e-300 used to overflow k/m into inf observations; 1e+300 and 1e-101 are as meaningless."""
    _names(_error("chain4", "mass=1e-300"), "mass", "1e-300")
    _names(_error("chain4", "stiffness=1e300"), "stiffness", "1e+300")
    _names(_error("chain4", "q_local=1e-101"), "q_local", "1e-101")
    assert _value("chain4", "q_local", {"q_local": 1e-100}) == 1e-100
    assert _value("chain4", "force_sd", {"force_sd": 0.0}) == 0.0


FREE_STRINGS = {"checkpoint", "checkpoint_dir"}
"""String settings that are paths, not choices."""


def _is_plain_str(annotation) -> bool:
    return annotation is str or (
        typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,)
    )


def test_every_choice_string_is_a_literal():
    """Every string setting of every case is a Literal choice or a path (or a list checked by its own
    validator); a free string such as grad_mode used to be checked only after setup."""
    lists_with_validators = {
        ("bouncing-ball", "topologies"),
        ("common-interface", "models"),
        ("grid", "case"),  # a named network, a pandapower network or a file: check_grid_case validates it
    }
    for name, case in all_cases().items():
        for key, field in case.config_type.model_fields.items():
            if _is_plain_str(field.annotation):
                assert key in FREE_STRINGS or (name, key) in lists_with_validators, (name, key)


@pytest.mark.parametrize(
    ("case", "item", "key", "choices"),
    [
        ("bouncing-ball", "grad_mode=sideways", "grad_mode", "'sensitivity', 'forward'"),
        ("schedules", "method=rk5", "method", "'euler', 'heun', 'rk4'"),
        ("chain4", "sensors=some", "sensors", "'all', 'sparse'"),
        ("grid", "case=ieee15", "case", "'ieee9'"),
    ],
)
def test_grad_mode_sideways_is_a_named_config_error(case, item, key, choices):
    """Choice strings are Literals: refused by pydantic up front, listing the choices."""
    message = _error(case, item)
    _names(message, key, repr(item.partition("=")[2]))
    assert choices in message


def test_seed_true_is_a_named_config_error():
    """seed=true used to run as seed 1: a bool is not a number (and a number is not a bool)."""
    _names(_error("chain4", "seed=true"), "seed", "True")
    _names(_error("chain4", "horizon=true"), "horizon", "True")
    _names(_error("grid", "steps=false"), "steps", "False")
    _names(_error("pinn-joint", "case=true"), "case", "True")  # Literal[1, ..., 6]: True is not 1
    _names(_error("pinn-joint", "case=1.0"), "case", "1.0")
    _names(_error("grid", "wls=1"), "wls", "1")
    _names(_error("grid", 'wls="yes"'), "wls", "'yes'")
    _names(_error("grid", "steps=300.0"), "steps", "300.0")  # an integer setting takes no float
    _names(_error("chain4", 'horizon="2.0"'), "horizon", "'2.0'")  # ...and no string
    assert _value("chain4", "horizon", {"horizon": 30}) == 30.0  # int for float: fine


def test_set_value_with_newline_is_a_named_config_error():
    """`--set 'horizon=2.0\\nnoise_sd=5'` used to set horizon and silently drop the rest."""
    with pytest.raises(ConfigError, match=r"--set 'horizon': expected a one-line value; received"):
        parse_set(["horizon=2.0\nnoise_sd=5"])
    with pytest.raises(ConfigError, match="line break"):
        parse_set(["horizon=2.0\r"])
    result = runner.invoke(app, ["run", "chain4", "--set", "horizon=2.0\nnoise_sd=5"])
    assert result.exit_code == 2 and "line break" in result.output


def test_string_setting_with_a_control_character_is_a_named_config_error():
    _names(_error("bouncing-ball", 'checkpoint_dir="a\\tb"'), "checkpoint_dir", repr("a\tb"))
    assert "U+0009" in _error("bouncing-ball", 'checkpoint_dir="a\\tb"')


@pytest.mark.parametrize("text", ["runs/\U0001f600", "d\u00e9j\u00e0/\u2028/\U00010348", 'q"uote\\back'])
def test_non_bmp_string_setting_round_trips_through_config_toml(text):
    """A non-BMP character in a string setting used to be written as a JSON surrogate pair, which
    tomllib refuses: the run folder's config.toml was unreadable."""
    case = get_case("bouncing-ball")
    config = resolve_config(case, sets={"checkpoint_dir": text})
    again = tomllib.loads(to_toml(config.model_dump()))
    assert again["checkpoint_dir"] == text
    assert case.config_type.model_validate(again) == config


def test_every_case_default_and_quick_config_still_validates():
    """The strict rules refuse none of the shipped configurations."""
    for case in all_cases().values():
        for quick in (False, True):
            config = resolve_config(case, quick=quick)
            assert case.config_type.model_validate(tomllib.loads(to_toml(config.model_dump()))) == config


def test_a_toml_array_for_a_tuple_setting_is_read_and_its_length_checked(tmp_path):
    """A tuple setting (turbine's Q vectors) takes a TOML array from a file or --set; a wrong length is
    a ConfigError naming the missing entry, and a string entry one naming the bad one."""
    case = get_case("turbine")
    path = tmp_path / "my.toml"
    path.write_text("q_generator = [1e-10, 1e-10, 1e-11, 2e-11]\n")
    assert resolve_config(case, path).model_dump()["q_generator"] == (1e-10, 1e-10, 1e-11, 2e-11)
    with pytest.raises(ConfigError, match=r"'q_runner\.6': Field required"):
        resolve_config(case, sets={"q_runner": [1e-10, 1e-10, 1e-8, 1e-8, 1e-8, 1e-8]})
    with pytest.raises(ConfigError, match=r"'q_generator\.1'"):
        resolve_config(case, sets={"q_generator": [1e-10, "x", 1e-11, 1e-11]})


# ---- properties: a valid config or a ConfigError naming the key, never another exception ----

PROPERTY_CASES = ["chain4", "grid", "emps", "pinn-joint", "bouncing-ball", "schedules"]

RAW_VALUES = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["inf", "-inf", "nan", "true", "false", "1e300", "1e-300", "[]", "[1, 2]", '"x"', "{}"]),
    st.sampled_from(['["P"]', '["PS", "x"]', "'a'", "2.0\n3", "ieee14", "ek1", "1_000", "0x10"]),
    st.sampled_from(["1979-05-27", "07:32:00", "{a = 1}", '"\U0001f600"', "\U0001f600", "\udcff"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats().map(repr),
    st.lists(st.integers(-5, 5), max_size=3).map(str),
)


def _check_outcome(given_values: dict, call) -> None:
    """``call()`` is a valid config holding sane values, or a ConfigError naming a given key."""
    try:
        config = call()
    except ConfigError as exc:
        message = str(exc)
        assert any(repr(k) in message or f"{k} = " in message for k in given_values), (given_values, message)
        return
    for key, given_value in given_values.items():
        value = getattr(config, key)
        assert isinstance(value, bool) == isinstance(given_value, bool), (key, given_value, value)
        if isinstance(value, float):
            assert math.isfinite(value) and (value == 0 or 1e-100 <= abs(value) <= 1e100), (key, value)
        elif isinstance(value, int):
            assert -(2**63) <= value < 2**63, (key, value)
        elif isinstance(value, str):
            assert value.isprintable() or value == "", (key, value)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    case_name=st.sampled_from(PROPERTY_CASES),
    data=st.data(),
)
def test_set_values_give_a_valid_config_or_a_named_config_error(case_name, data):
    case = get_case(case_name)
    fields = list(case.config_type.model_fields)
    key = data.draw(st.one_of(st.sampled_from(fields), st.from_regex(r"[a-z_]{1,12}", fullmatch=True)))
    raw = data.draw(RAW_VALUES)
    try:
        sets = parse_set([f"{key}={raw}"])
    except ConfigError as exc:
        assert "line break" in str(exc) and repr(key) in str(exc)
        return
    _check_outcome(sets, lambda: resolve_config(case, sets=sets))


TOML_VALUES = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=4)), max_size=3),
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(case_name=st.sampled_from(PROPERTY_CASES), data=st.data())
def test_toml_files_give_a_valid_config_or_a_named_config_error(case_name, data, tmp_path_factory):
    case = get_case(case_name)
    fields = list(case.config_type.model_fields)
    table = data.draw(st.dictionaries(st.sampled_from(fields), TOML_VALUES, min_size=1, max_size=4))
    file = tmp_path_factory.mktemp("toml") / "c.toml"
    file.write_text(to_toml(table), encoding="utf-8")
    _check_outcome(table, lambda: resolve_config(case, file))


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(payload=st.binary(max_size=64))
def test_arbitrary_bytes_as_config_file_give_a_valid_config_or_a_named_config_error(
    payload, tmp_path_factory
):
    file = tmp_path_factory.mktemp("bin") / "c.toml"
    file.write_bytes(payload)
    try:
        resolve_config(get_case("chain4"), file)
    except ConfigError as exc:
        assert "c.toml" in str(exc)


class _Valid(Exception):
    """Raised by the stand-in run: the CLI accepted the config (nothing is simulated)."""


def _refuse_to_run(config, progress):
    raise _Valid(config)


_OUT = Path(tempfile.mkdtemp(prefix="twinfer-test-config-"))


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(list(get_case("chain4").config_type.model_fields)), raw=RAW_VALUES)
def test_cli_set_gives_a_valid_config_or_exit_2_naming_the_key(key, raw):
    """Through `twinfer run` in-process: exit 2 with the key in the message, or the case's run is called."""
    stand_in = dataclasses.replace(get_case("chain4"), run=_refuse_to_run)
    with mock.patch.dict(REGISTRY, {"chain4": stand_in}):
        result = runner.invoke(app, ["run", "chain4", "--set", f"{key}={raw}", "--out", str(_OUT)])
    if result.exit_code == 1 and "_Valid" in result.output:
        return  # the config was accepted and the (stand-in) run called; the CLI names its error
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    flat = " ".join(result.output.split())
    assert repr(key) in flat or f"{key} = " in flat, flat


def test_cli_config_error_with_markup_characters_is_printed_verbatim():
    result = runner.invoke(app, ["run", "chain4", "--set", 'sensors="[/x]"'])
    assert result.exit_code == 2 and "received '[/x]'" in result.output


def test_bouncing_ball_gradient_needs_its_solver_and_devices_need_forward_mode():
    """grad_mode 'sensitivity' (the default) follows the fixed-step scheme only: with the adaptive
    solver, or split over devices, the config is refused naming the settings and the way out."""
    message = _error("bouncing-ball", "fixed_steps=0")
    assert "grad_mode 'sensitivity' needs fixed_steps >= 1" in message and "'fixed_steps': 0" in message
    message = _error("bouncing-ball", "devices=0")
    assert "splitting over devices needs grad_mode 'forward'" in message and "'devices': 0" in message
    assert _value("bouncing-ball", "fixed_steps", {"fixed_steps": 0, "grad_mode": "forward"}) == 0


def test_boucwen_seeds_and_chain4_sindy_messages_are_named_errors():
    """The calibration repeats need at least one run; the SINDy message kind is one of two names."""
    _names(_error("boucwen", "seeds=0"), "seeds", "0")
    message = _error("chain4", "sindy_messages=mean")
    _names(message, "sindy_messages", "'mean'")
    assert "probabilistic" in message and "deterministic" in message
