"""Reliability of the public estimator API: bad input gets a named error, never a silent wrong result.

Each test below is named after one defect found on the committed tree (a silent wrong result or a raw
JAX/NumPy exception at a public entry point); the property tests at the end generate bad estimator
arguments and bad datasets and require a named error (``ValueError``/``TypeError`` naming the
argument) or a finite result, never another exception type and never NaN (DESIGN.md, Conventions).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from twinfer.data import Dataset
from twinfer.infer.filters import DivergenceError, FilterConsistencyWarning, run_filter, run_ukf, smooth
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.infer.graph import Graph, Subsystem
from twinfer.infer.graph._run import compile, run, with_numbers
from twinfer.models import Chain
from twinfer.sim import StepSizeError, discretise, simulate_discrete

TRUE_K = 40.0
NOISE = 0.05
STEPS = 120


@functools.cache
def _data() -> Dataset:
    """A 1-DOF oscillator (m = 1, k = 40, c = 0.4) under random forcing, acceleration measured."""
    truth = Chain([1.0], [TRUE_K], [0.4])
    dt = 0.01
    forces = 5.0 * jax.random.normal(jax.random.key(0), (STEPS, 1))
    traj = simulate_discrete(discretise(truth, dt, "exact"), jnp.zeros(2), forces)
    acc = jax.vmap(lambda x, u: truth.output(0.0, x, u, truth.params))(traj.states[1:], forces)
    noise = NOISE * jax.random.normal(jax.random.key(1), acc.shape)
    obs = np.concatenate([np.zeros((1, 1)), np.asarray(acc + noise)])
    inputs = np.concatenate([np.asarray(forces), np.zeros((1, 1))])
    held = {"alignment": "held"}  # y_k+1 = h(x_k+1, u_k), made by hand above
    return Dataset(
        dt * np.arange(STEPS + 1), obs, inputs=inputs, output_names=truth.output_names, metadata=held
    )


def _model(k: float = TRUE_K) -> Chain:
    return Chain([1.0], [k], [0.4])


KW: dict[str, Any] = {
    "state_sd": 1e-2,
    "process_sd": 1e-4,
    "noise_sd": NOISE,
    "unknown": {"k1": (30.0, 10.0, 1e-3)},
}


# -- filter() / smooth() ------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", [run_filter, smooth])
def test_filter_with_zero_noise_sd_is_refused(entry):
    """noise_sd = 0 gave k = -5e3 for a true 5e4 without a word; now a named error."""
    with pytest.raises(ValueError, match=r"noise_sd: expected values > 0; received \[0.0\]"):
        entry(_model(30.0), _data(), **{**KW, "noise_sd": 0.0})


def test_negative_prior_sds_are_refused():
    """A negative prior sd of an unknown parameter was squared away silently; state_sd must be > 0."""
    with pytest.raises(ValueError, match=r"unknown\['k1'\]: expected .*prior sd > 0.*received \(30.0, -10.0"):
        run_filter(_model(30.0), _data(), **{**KW, "unknown": {"k1": (30.0, -10.0, 1e-3)}})
    with pytest.raises(ValueError, match=r"state_sd: expected values > 0; received \[-0.01, -0.01\]"):
        run_filter(_model(30.0), _data(), **{**KW, "state_sd": -1e-2})
    with pytest.raises(ValueError, match=r"process_sd: expected values >= 0 .*received \[-1.0, 0.0\]"):
        run_filter(_model(30.0), _data(), **{**KW, "process_sd": [-1.0, 0.0]})


def test_chain_refuses_negative_mass_stiffness_and_damping():
    """Negative stiffness or damping built a non-physical chain; also through with_params."""
    with pytest.raises(ValueError, match=r"Chain stiffness: expected >= 0 values; .*\(k2 = -5.0\)"):
        Chain([1.0, 1.0], [1.0, -5.0], 0.1)
    with pytest.raises(ValueError, match=r"Chain damping: expected >= 0 values; .*\(c1 = -0.1\)"):
        Chain([1.0, 1.0], 1.0, [-0.1, 0.1])
    with pytest.raises(ValueError, match=r"Chain mass: expected positive values"):
        Chain([1.0, 0.0], 1.0, 0.1)
    with pytest.raises(ValueError, match=r"Chain stiffness: .*\(k1 = -3.0\)"):
        _model().with_params(k1=-3.0)
    chain = Chain([1.0, 1.0], [1.0, 0.0], 0.0)  # zero stiffness and damping are physical: accepted
    assert float(chain.params["k"][1]) == 0.0
    # traced values inside jit are not checked (no concrete value), and the substitution still works
    assert float(jax.jit(lambda k: _model().with_params(k1=k).params["k"][0])(7.0)) == 7.0


def test_wrong_model_warns_naming_the_normalised_innovation_statistic():
    """A model ten times too soft gave a log-likelihood without a warning; the NIS now flags it.

    The right model gives a mean NIS near 1 (its expectation for a consistent filter) and no warning.
    """
    kw: dict[str, Any] = {"state_sd": 1e-2, "process_sd": 1e-6, "noise_sd": NOISE}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        right = run_filter(_model(), _data(), **kw)
    assert right.nis is not None and 0.5 < right.nis < 2.0
    with pytest.warns(FilterConsistencyWarning, match=r"normalised innovation squared \(NIS\) averages"):
        wrong = run_filter(_model(TRUE_K / 10.0), _data(), **kw)
    assert wrong.nis is not None and wrong.nis > 10.0
    assert wrong.loglik < right.loglik


def test_run_ukf_names_a_covariance_that_loses_positive_definiteness():
    """Negative sigma-point weights made the covariance indefinite (eigenvalue -6e-6) with a positive
    diagonal: run_ukf returned it silently. Now a DivergenceError naming the step."""
    f = lambda x, u: jnp.stack([x[0] + 0.1 * x[1], x[1] + 0.5 * x[0] ** 2])  # noqa: E731
    ys = jnp.asarray(np.random.default_rng(0).normal(size=(29, 1)))
    args = (jnp.array([1.0, 0.0]), jnp.eye(2), 1e-6 * jnp.eye(2), 0.1 * jnp.eye(1), jnp.zeros((29, 1)), ys)
    weights = UnscentedWeights.merwe(1.0, 0.0, -1.9)
    with pytest.raises(DivergenceError, match="UKF diverged at step 28"):
        run_ukf(f, lambda x, u: x[:1], *args, weights=weights)
    out = run_ukf(f, lambda x, u: x[:1], *args[:-2], jnp.zeros((28, 1)), ys[:28], weights=weights)
    assert np.all(np.linalg.eigvalsh(np.asarray(out.covs)) > 0)  # up to step 27 it is fine


def test_an_unstable_discretisation_is_refused_not_returned_silently():
    """RK4 at omega dt = 100 blows up. The covariance-form UKF lost positive-definiteness at step 4 (a
    DivergenceError); the square-root UKF stayed finite with variances of 1e16 that the data pinned (a
    NIS of ~1e-6). Since #52 both filters are refused before they run, naming the step and the substeps
    that fix it (:func:`twinfer.sim.check_step`)."""
    kw = {**KW, "unknown": None}
    for estimator in ("ukf", "ekf"):
        with pytest.raises(StepSizeError, match=r"dt/substeps \|lambda\| = 100;.*use substeps=36 or more"):
            run_filter(_model(1e8), _data(), **{**kw, "estimator": estimator})


def test_filter_checks_input_count_and_names():
    """A model with 1 input on a dataset with 2 gave a raw JAX broadcast error; names were unchecked."""
    data = _data()
    assert data.inputs is not None
    two = Dataset(
        data.times, data.observations, inputs=np.repeat(data.inputs, 2, axis=1), output_names=("a1",)
    )
    with pytest.raises(ValueError, match=r"filter dataset inputs: expected 1 columns \('f1',\).*received 2"):
        run_filter(_model(), two)
    none = Dataset(data.times, data.observations, output_names=("a1",))
    with pytest.raises(ValueError, match=r"smooth dataset inputs: expected 1 columns .*received 0"):
        smooth(_model(), none)
    named = Dataset(
        data.times, data.observations, inputs=data.inputs, output_names=("a1",), input_names=("g",)
    )
    with pytest.raises(ValueError, match=r"dataset inputs: expected the names \('f1',\).*received \('g',\)"):
        run_filter(_model(), named)


def test_filter_checks_lengths_of_noise_sd_x0_and_unknown():
    """Wrong-length noise_sd/x0 gave raw NumPy broadcast errors, a 2-tuple in unknown an IndexError."""
    with pytest.raises(ValueError, match=r"filter noise_sd: expected a scalar or 1 values, one per a1; "):
        run_filter(_model(), _data(), noise_sd=[0.1, 0.1])
    with pytest.raises(
        ValueError, match=r"filter x0: expected a scalar or 2 values, one per x1, v1; .*\(3,\)"
    ):
        run_filter(_model(), _data(), x0=[0.0, 0.0, 0.0])
    with pytest.raises(
        ValueError, match=r"unknown\['k1'\]: expected 3 float64 numbers .*received \(30.0, 10.0\)"
    ):
        run_filter(_model(), _data(), unknown={"k1": (30.0, 10.0)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"filter unknown: expected parameter names of the model .*'k9'"):
        run_filter(_model(), _data(), unknown={"k9": (30.0, 10.0, 0.0)})
    with pytest.raises(TypeError, match=r"filter unknown: expected a mapping"):
        run_filter(_model(), _data(), unknown=[("k1", 30.0, 10.0, 0.0)])  # type: ignore[arg-type]


# -- run_ukf -------------------------------------------------------------------------------------------
def _f(x, u):
    return 0.9 * x


def _h(x, u):
    return x


_UKF = (np.zeros(2), np.eye(2), 0.01 * np.eye(2), np.eye(2), np.zeros((30, 1)))


def _ys(seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(30, 2))


def test_run_ukf_checks_output_count_of_h():
    """h returning 3 values for 2 measured columns gave a raw broadcast TypeError."""
    with pytest.raises(
        ValueError, match=r"UKF h: expected h\(x, u\) to return shape \(2,\) .*received \(3,\)"
    ):
        run_ukf(_f, lambda x, u: jnp.concatenate([x, x[:1]]), *_UKF, _ys())
    with pytest.raises(
        ValueError, match=r"UKF f: expected f\(x, u\) to return shape \(2,\) .*received \(1,\)"
    ):
        run_ukf(lambda x, u: x[:1], _h, *_UKF, _ys())


def test_run_ukf_treats_nan_in_ys_as_missing_and_refuses_inf():
    """NaN with masks=None was reported as 'UKF diverged'; now it is a missing value, inf a named error."""
    ys = _ys()
    ys[5, 0] = np.nan
    by_nan = run_ukf(_f, _h, *_UKF, ys)
    mask = np.ones(ys.shape, bool)
    mask[5, 0] = False
    by_mask = run_ukf(_f, _h, *_UKF, np.where(mask, ys, 123.0), mask)
    np.testing.assert_array_equal(np.asarray(by_nan.means), np.asarray(by_mask.means))
    assert float(by_nan.loglik) == float(by_mask.loglik)
    ys[5, 0] = np.inf
    with pytest.raises(
        ValueError, match=r"run_ukf ys: expected finite values or NaN \(missing\); received inf "
    ):
        run_ukf(_f, _h, *_UKF, ys)
    ys[5, 0] = np.nan
    with pytest.raises(
        ValueError, match=r"run_ukf ys: expected finite values where masks is True; received nan"
    ):
        run_ukf(_f, _h, *_UKF, ys, np.ones(ys.shape, bool))


def test_run_ukf_refuses_float32_ys():
    """float32 measurements were accepted (digits silently lost); now a named error."""
    with pytest.raises(ValueError, match="run_ukf ys: expected float64; received float32"):
        run_ukf(_f, _h, *_UKF, _ys().astype(np.float32))


# -- graph run -----------------------------------------------------------------------------------------
def _transition(x, u, m, p):
    return p["a"] * x + u


def _output(x, u, m, p):
    return x


def _graph(a1: float = 0.9) -> Graph:
    def sub(name: str, a: float, col: int) -> Subsystem:
        return Subsystem(
            name=name,
            transition=_transition,
            output=_output,
            params={"a": jnp.asarray(a)},
            x0=jnp.zeros(1),
            P0=jnp.eye(1),
            Q=1e-2 * jnp.eye(1),
            R=0.1 * jnp.eye(1),
            inputs=(col,),
            outputs=(col,),
            ports={},
            n_msg=0,
            estimator="kf",
        )

    return Graph("g", [sub("s1", a1, 0), sub("s2", 0.9, 1)])


_GRAPH_T = 20


@functools.cache
def _compiled():
    return compile(_graph())


def _record(seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((_GRAPH_T, 2)), np.random.default_rng(seed).normal(size=(_GRAPH_T, 2))


def test_graph_run_names_the_diverged_subsystem_and_step():
    """A diverging subsystem gave all-NaN estimates without an error; now DivergenceError with a hint."""
    us, ys = _record()
    with pytest.raises(
        DivergenceError, match=r"subsystem 's1' at step \d+: .*Likely causes: process noise Q"
    ):
        run(_graph(1e200), us=us, ys=ys)
    compiled = compile(_graph(1e200))  # inside jit: eqx.branched_error_if names the subsystem
    with pytest.raises(Exception, match="graph run diverged: subsystem 's1'"):  # noqa: B017 (XLA wraps it)
        jax.block_until_ready(compiled.scan(compiled.numbers, us, ys, np.ones(ys.shape, bool), check=True))
    ok = compiled.scan(_compiled().numbers, us, ys, np.ones(ys.shape, bool), check=True)  # same structure
    assert all(np.isfinite(np.asarray(m)).all() for m in ok[0])


def test_graph_run_names_a_finite_runaway():
    """A state that runs away while finite (innovations of 1e6 standard deviations, the covariance tiny
    and PSD) passed the check, which saw only non-finite values and lost PSD (issue #20)."""
    us, ys = _record()
    sure = Graph("g", [dataclasses.replace(_graph().nodes[0], Q=1e-12 * jnp.eye(1), R=1e-12 * jnp.eye(1))])
    with pytest.raises(DivergenceError, match=r"subsystem 's1' at step 1: an innovation exceeded 1e\+04"):
        run(sure, us=us[:, :1], ys=ys[:, :1])
    res = run(_graph(), us=us, ys=ys)  # the same data with the stated noise: no false alarm
    assert np.all(res["s1"].step_logliks > -50.0)  # data N(0, 1) against R = 0.1: a few sigma at most


def test_graph_run_masks_nan_observations_and_refuses_inf():
    """An inf observation was silently masked; NaN stays 'missing' (documented), inf is a named error."""
    us, ys = _record()
    ys[3, 1] = np.nan
    by_nan = run(_graph(), us=us, ys=ys, compiled=_compiled())
    mask = np.isfinite(ys)
    outs = _compiled().scan(_compiled().numbers, us, np.where(mask, ys, -7.0), mask)
    np.testing.assert_array_equal(by_nan["s2"].means[1:], np.asarray(outs[0][0])[:, 1])
    ys[3, 1] = np.inf
    with pytest.raises(
        ValueError, match=r"run ys: expected finite values or NaN \(missing\); received inf at row 3"
    ):
        run(_graph(), us=us, ys=ys, compiled=_compiled())


def test_graph_run_refuses_non_finite_inputs_float32_and_bad_covariances():
    us, ys = _record()
    us[2, 0] = np.nan
    with pytest.raises(ValueError, match=r"run us: expected finite values; received nan at row 2, column 0"):
        run(_graph(), us=us, ys=ys, compiled=_compiled())
    with pytest.raises(ValueError, match="run ys: expected a float64 array; received dtype float32"):
        run(_graph(), us=np.zeros((_GRAPH_T, 2)), ys=ys.astype(np.float32), compiled=_compiled())
    with pytest.raises(ValueError, match=r"run us, ys: expected the same number of rows T"):
        run(_graph(), us=np.zeros((5, 2)), ys=ys, compiled=_compiled())
    bad = eqx.tree_at(lambda g: g.nodes[1].Q, _graph(), -jnp.eye(1))
    numbers = with_numbers(_compiled(), bad)
    with pytest.raises(ValueError, match=r"subsystem 's2' Q: expected a positive semi-definite covariance"):
        run(bad, us=np.zeros((_GRAPH_T, 2)), ys=ys, compiled=_compiled(), numbers=numbers)


# -- property tests: bad arguments get a named error or a finite result ----------------------------------
def _named_or_finite(names: tuple[str, ...], call) -> None:
    """``call()`` raises a ValueError/TypeError naming one of ``names``, or returns only finite numbers."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FilterConsistencyWarning)  # a legitimate verdict on odd input
            result = call()
    except (ValueError, TypeError) as error:
        named = [re.search(rf"(?<!\w){re.escape(name)}(?!\w)", str(error)) for name in names]
        assert any(named), f"{names} not named in: {error}"
        event(f"named {type(error).__name__}")
        return
    leaves = jax.tree_util.tree_leaves(result)
    numbers = [np.asarray(leaf) for leaf in leaves if np.asarray(leaf).dtype.kind in "fc"]
    assert numbers and all(np.isfinite(x).all() for x in numbers), "a non-finite result without an error"
    event("finite result")


_FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)
_BAD = st.one_of(
    _FLOATS,
    st.sampled_from([0.0, -1.0, 1e-200, 1e200, float("nan"), float("inf")]),
    st.lists(st.floats(-2.0, 2.0), min_size=0, max_size=4),
    st.sampled_from(
        [np.float32(0.1), np.ones(2, np.float32), "0.1", [[0.1], [0.1, 0.2]], None, np.ones((2, 2)), True]
    ),
)
_UNKNOWN = st.one_of(
    st.dictionaries(
        st.sampled_from(["k1", "m1", "c1", "k9", ""]),
        st.one_of(st.tuples(_FLOATS, _FLOATS, _FLOATS), st.lists(st.floats(-1e3, 1e3), max_size=4)),
        max_size=2,
    ),
    st.sampled_from([[("k1", 30.0, 10.0, 0.0)], "k1", {"k1": "abc"}, {"k1": (30.0, 10.0, np.float32(0.1))}]),
)


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(arg=st.sampled_from(["x0", "state_sd", "process_sd", "noise_sd"]), value=_BAD)
def test_property_bad_filter_arguments_are_named_or_harmless(arg, value):
    _named_or_finite((arg,), lambda: run_filter(_model(30.0), _data(), **{**KW, arg: value}))


@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])
@given(unknown=_UNKNOWN, estimator=st.sampled_from(["ukf", "ekf", "kf", "pf"]))
def test_property_bad_unknown_and_estimator_are_named_or_harmless(unknown, estimator):
    call = lambda: run_filter(_model(30.0), _data(), **{**KW, "unknown": unknown, "estimator": estimator})  # noqa: E731
    _named_or_finite(("unknown", "estimator"), call)


@st.composite
def _datasets(draw):
    """Constructor arguments of a Dataset for the 1-DOF chain with one corruption (or none)."""
    data = _data()
    n = data.n_steps
    assert data.inputs is not None
    obs, inputs = data.observations.copy(), data.inputs.copy()
    kwargs = {"output_names": ("a1",), "inputs": inputs}
    fault = draw(
        st.sampled_from(["none", "nan", "inf", "shape", "rows", "f32", "names", "in_names", "no_in"])
    )
    row = draw(st.integers(0, n - 1))
    if fault == "nan":
        target = draw(st.sampled_from(["obs", "inputs", "masked"]))
        if target == "masked":  # a masked NaN is a missing value: valid
            kwargs["mask"] = np.ones(obs.shape, bool)
            kwargs["mask"][row, 0] = False
        (obs if target != "inputs" else inputs)[row, 0] = np.nan
    elif fault == "inf":
        (obs if draw(st.booleans()) else inputs)[row, 0] = draw(st.sampled_from([np.inf, -np.inf]))
    elif fault == "shape":
        obs = np.concatenate([obs, obs], axis=1) if draw(st.booleans()) else obs[:, 0]
    elif fault == "rows":
        obs = obs[:-1]
    elif fault == "f32":
        obs = obs.astype(np.float32)
    elif fault == "names":
        kwargs["output_names"] = draw(st.sampled_from([("y1",), ("a1", "a1"), ("",), 5]))
    elif fault == "in_names":
        kwargs["input_names"] = draw(st.sampled_from([("g",), ("f1", "f2"), ("u1",), ("f1",)]))
    elif fault == "no_in":
        kwargs["inputs"] = None
    return data.times, obs, kwargs


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_datasets())
def test_property_bad_datasets_are_named_or_harmless(spec):
    times, obs, kwargs = spec
    try:
        data = Dataset(times, obs, **kwargs)
    except (ValueError, TypeError) as error:
        assert "Dataset." in str(error), str(error)
        event("Dataset refused it")
        return
    _named_or_finite(
        ("data", "dataset inputs", "dataset outputs"), lambda: run_filter(_model(30.0), data, **KW)
    )


_UKF_ARGS = ("x0", "cov0", "q", "r", "us", "ys", "masks")


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(
    arg=st.sampled_from(_UKF_ARGS),
    fault=st.sampled_from(["nan", "inf", "f32", "int", "shape", "transpose", "neg"]),
)
def test_property_bad_run_ukf_arguments_are_named_or_harmless(arg, fault):
    args = dict(zip(_UKF_ARGS, (*_UKF, _ys(), np.ones((30, 2), bool)), strict=True))
    value = np.array(args[arg], copy=True)
    if fault in ("nan", "inf") and value.dtype.kind == "f":
        value.reshape(-1)[0] = np.nan if fault == "nan" else np.inf
    elif fault == "f32" and value.dtype.kind == "f":
        value = value.astype(np.float32)
    elif fault == "int":
        value = value.astype(np.int64)
    elif fault == "shape":
        value = value[..., :-1] if value.ndim else value
    elif fault == "transpose":
        value = value.T
    elif fault == "neg" and value.dtype.kind == "f":
        value = (
            -value - np.eye(*value.shape[-2:])
            if value.ndim == 2 and value.shape[0] == value.shape[1]
            else -value
        )
    args[arg] = value
    call = lambda: run_ukf(_f, _h, *(args[a] for a in _UKF_ARGS))  # noqa: E731
    _named_or_finite((arg, "UKF diverged"), call)


@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.sampled_from(["us", "ys"]),
    fault=st.sampled_from(["nan", "inf", "-inf", "f32", "1d", "rows", "cols", "huge"]),
    row=st.integers(0, _GRAPH_T - 1),
)
def test_property_bad_graph_records_are_named_or_harmless(which, fault, row):
    us, ys = _record()
    value = us if which == "us" else ys
    if fault in ("nan", "inf", "-inf", "huge"):
        value[row, 0] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "huge": 1e308}[fault]
    elif fault == "f32":
        value = value.astype(np.float32)
    elif fault == "1d":
        value = value[:, 0]
    elif fault == "rows":
        value = value[:-1]
    elif fault == "cols":
        value = value[:, :1]
    record = {"us": us, "ys": ys, which: value}
    call = lambda: run(_graph(), compiled=_compiled(), **record)  # noqa: E731
    _named_or_finite((which, "graph run diverged"), call)
