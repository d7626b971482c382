"""The one estimator contract (issue #53): ``twinfer.compile`` -> Program, ``twinfer.estimate`` -> Estimate.

A Program stepped one measurement row at a time equals its ``run`` over the record (to 1e-12), ``run``
equals ``twinfer.estimate``, and a state saved after row k and restored in a new process steps on to the
same numbers. The data are made as an acquisition system makes them (``simulate_dataset``: inputs and
outputs sampled at the same instants, an adaptive-solver truth), on a chain that is not a paper case.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from twinfer.checkpoint import CheckpointError
from twinfer.infer._api import Banded, Central, Distributed, compile, estimate
from twinfer.infer.filters import FilterConsistencyWarning, run_filter
from twinfer.models import Chain
from twinfer.sim import simulate_dataset

SETUP = """
import numpy as np, jax
jax.config.update("jax_enable_x64", True)
from twinfer.models import Chain
from twinfer.sim import simulate_dataset

chain = Chain(
    mass=[1.0, 2.0, 1.5], stiffness=[50.0, 40.0, 30.0], damping=[0.5, 0.4, 0.3], outputs=["a1", "a3"]
)
u = np.asarray(jax.random.normal(jax.random.key(0), (121, chain.n_input)))
data = simulate_dataset(chain, u, 0.01, 0.01, jax.random.key(1), x0=np.full(chain.n_state, 0.05))
problem = dict(noise_sd=0.012, state_sd=0.1, process_sd=1e-6, unknown={"k2": (41.0, 2.0, 0.0)})
"""

ns: dict = {}
exec(SETUP, ns)
CHAIN, DATA, PROBLEM = ns["chain"], ns["data"], ns["problem"]


def _stepped(program, data, start=None, first=1):
    state = program.init(data.inputs[0]) if start is None else start
    rows = []
    for k in range(first, data.n_steps):
        state, row = program.step(state, program.frame(data.inputs[k], data.observations[k]))
        rows.append(row)
    return state, rows


STEPS_EQUAL_RUN = """
from twinfer.infer._api import Central, compile, estimate

for method in (Central(),):  # the other families and kernels: tests/test_program_families.py (make accept)
    numbers = problem if method.filter != "kf" else {**problem, "unknown": None}
    program = compile(chain, method, data=data, **numbers)
    est = program.run(data)
    state = program.init(data.inputs[0])
    rows = []
    for k in range(1, data.n_steps):
        state, row = program.step(state, program.frame(data.inputs[k], data.observations[k]))
        rows.append(row)
    means, stds = (np.stack([np.asarray(getattr(r, f)) for r in rows]) for f in ("mean", "std"))
    np.testing.assert_allclose(means, np.asarray(est.means)[1:], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(stds, np.asarray(est.stds)[1:], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(float(state.loglik), est.loglik, rtol=1e-12)
    np.testing.assert_allclose(sum(float(r.loglik) for r in rows), est.loglik, rtol=1e-12)
    same = estimate(chain, data, method, **numbers)
    np.testing.assert_array_equal(np.asarray(same.means), np.asarray(est.means))
    np.testing.assert_array_equal(np.asarray(same.stds), np.asarray(est.stds))
    assert (same.loglik, same.state_names, same.log_scale) == (est.loglik, est.state_names, est.log_scale)
    print(method.filter, method.linearisation, "ok")

"""


def _users_process(script: str, timeout: int = 600) -> str:
    """Run ``script`` as a user's process: XLA's default compile flags, not the suite's fast ones.

    The suite compiles with the legacy emitters at optimisation level 0 (tests/conftest.py), which rounds
    a standalone step and the same step inside a scan differently (2e-11 relative on a log-scale
    unknown's sd here); a user's program is compiled with XLA's defaults, where they agree to 1e-16.
    """
    env = {**os.environ, "TWINFER_TEST_XLA_DEFAULTS": "1", "XLA_FLAGS": "", "JAX_ENABLE_X64": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_central_program_steps_equal_its_run_and_estimate():
    """The UKF a row at a time equals its scan to 1e-12, and estimate; every family: make accept."""
    out = _users_process(SETUP + STEPS_EQUAL_RUN)
    assert out.count(" ok") == 1


def test_a_log_scale_unknown_is_in_its_own_units_in_rows_and_run():
    problem = {**PROBLEM, "unknown": {"k2": (41.0, 2.0, 1e-4)}}  # a stiffness: log scale by default
    program = compile(CHAIN, "ukf", data=DATA, **problem)
    est = program.run(DATA)
    assert est.log_scale == ("k2",)
    _, rows = _stepped(program, DATA)
    col = est.state_names.index("k2")
    np.testing.assert_allclose([float(r.mean[col]) for r in rows], np.asarray(est.means)[1:, col], rtol=1e-12)
    np.testing.assert_allclose([float(r.std[col]) for r in rows], np.asarray(est.stds)[1:, col], rtol=1e-10)
    same = estimate(CHAIN, DATA, "ukf", **problem)
    np.testing.assert_array_equal(np.asarray(same.means), np.asarray(est.means))


def test_state_saved_mid_record_restores_exactly_in_a_new_process(tmp_path):
    program = compile(CHAIN, "ukf", data=DATA, **PROBLEM)
    state, _ = _stepped(program, DATA)
    k = 50
    mid, _ = _stepped(program, _head(DATA, k + 1))
    path = program.save_state(mid, tmp_path / "state.twin")
    script = SETUP + textwrap.dedent(
        f"""
        from twinfer.infer._api import compile
        program = compile(chain, "ukf", data=data, **problem)
        state = program.load_state({str(path)!r})
        for k in range({k + 1}, data.n_steps):
            state, row = program.step(state, program.frame(data.inputs[k], data.observations[k]))
        out = np.concatenate([np.asarray(state.mean), [float(state.loglik)]])
        np.save({str(tmp_path / "out.npy")!r}, out)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    resumed = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(resumed[:-1], np.asarray(state.mean), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(resumed[-1], float(state.loglik), rtol=1e-12)
    other = compile(CHAIN, "ukf", data=DATA, **{**PROBLEM, "noise_sd": 0.024})
    with pytest.raises(CheckpointError, match="numbers"):
        other.load_state(path)


def _head(data, rows):
    return data.window(t_end=float(data.times[rows - 1]))


def test_with_numbers_gives_the_same_program_other_numbers():
    program = compile(CHAIN, "ukf", data=DATA, **PROBLEM)
    wider = program.with_numbers(chol_R=2.0 * np.asarray(program.chol_R))
    direct = compile(CHAIN, "ukf", data=DATA, **{**PROBLEM, "noise_sd": 0.024})
    np.testing.assert_allclose(
        np.asarray(wider.run(DATA).means), np.asarray(direct.run(DATA).means), rtol=1e-12
    )
    with pytest.raises(ValueError, match=r"with_numbers chol_R: expected shape \(2, 2\)"):
        program.with_numbers(chol_R=np.eye(3))


def test_methods_and_keywords_are_validated_by_name():
    with pytest.raises(
        ValueError, match="Central filter: expected one of 'ukf', 'ekf', 'kf'; received 'ufk'"
    ):
        Central(filter="ufk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Central kernel: expected one of 'qr', 'gram'; received 'cholesky'"):
        Central(filter="ekf", kernel="cholesky")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="filter kernel: expected one of 'qr', 'gram'; received 'lu'"):
        run_filter(CHAIN, DATA, estimator="ekf", kernel="lu", **PROBLEM)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="Banded bandwidth: expected None or an integer >= 1; received 0"):
        Banded(bandwidth=0)
    with pytest.raises(ValueError, match="Distributed schedule"):
        Distributed(schedule="jacobbi")
    with pytest.raises(ValueError, match="estimate method: expected a method object"):
        estimate(CHAIN, DATA, "ufk")
    with pytest.raises(TypeError, match=r"estimate: unexpected keyword 'noise'.*did you mean 'noise_sd'"):
        estimate(CHAIN, DATA, noise=0.1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="compile method: the RTS smoother"):
        compile(CHAIN, "rts", dt=0.01)
    with pytest.raises(ValueError, match="compile noise_sd: expected standard deviations; received 'auto'"):
        compile(CHAIN, "ukf", dt=0.01, noise_sd="auto")
    with pytest.raises(ValueError, match="compile dt"):
        compile(CHAIN, "ukf")
    program = compile(CHAIN, "ukf", dt=0.01, noise_sd=0.01)
    with pytest.raises(ValueError, match=r"Program.frame y: expected shape \(2,\)"):
        program.frame(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="Program.run data: expected a record with the program's step 0.01"):
        coarse = simulate_dataset(CHAIN, np.zeros((11, 3)), 0.02, 0.01, jax.random.key(0))
        program.run(coarse)


def test_a_prediction_only_frame_widens_the_band():
    program = compile(CHAIN, "ukf", dt=0.01, noise_sd=0.01, state_sd=0.1, process_sd=1e-3)
    state = program.init()
    seen, row_seen = program.step(state, program.frame(np.zeros(3), np.zeros(2)))
    blind, row_blind = program.step(state, program.frame(np.zeros(3)))
    assert float(row_blind.loglik) == 0.0
    assert np.all(np.asarray(row_blind.std) >= np.asarray(row_seen.std))


def test_distributed_and_banded_estimate_run_on_a_model():
    chain = Chain(mass=[1.0] * 4, stiffness=[40.0] * 4, damping=[0.4] * 4, outputs=["a1", "a2", "a4"])
    u = np.asarray(jax.random.normal(jax.random.key(2), (61, chain.n_input)))
    data = simulate_dataset(chain, u, 0.01, 0.01, jax.random.key(3))
    kw = dict(noise_sd=0.01, state_sd=0.1, process_sd=1e-6)
    banded = estimate(chain, data, Banded(partition=[[1, 2], [3, 4]]), **kw)
    with pytest.warns(FilterConsistencyWarning, match="graph estimate"):  # messages drop the correlations
        messages = estimate(chain, data, Distributed(partition=[[1, 2], [3, 4]]), **kw)
    central = estimate(chain, data, "ekf", **kw)
    full = estimate(chain, data, Banded(partition=[[1, 2], [3, 4]], bandwidth=1, update="taylor"), **kw)
    assert banded.state_names[: chain.n_state] == central.state_names[: chain.n_state]
    assert np.isfinite(banded.loglik) and np.isfinite(messages.loglik)
    # the banded filter at bandwidth >= p - 1 with Taylor updates is the central EKF, on the graph's own
    # discretisation of the coupling (1e-10 apart here, against sds of 1e-3)
    sd = np.asarray(central.stds)
    assert np.all(np.abs(np.asarray(full.means) - np.asarray(central.means)) <= 1e-6 * sd)
    assert np.all(np.abs(np.asarray(full.stds) - sd) <= 1e-6 * sd)


def _primitive_shapes(jaxpr, name, found):
    """Input shapes of every ``name`` equation in ``jaxpr`` and the jaxprs nested in it."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            found.append(tuple(eqn.invars[0].aval.shape))
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    _primitive_shapes(inner, name, found)
    return found


def test_a_backlog_writes_its_rows_in_place_and_equals_single_steps():
    """``steps`` over a chunk: rows by dynamic update slices (a scatter was copied whole every step).

    The scatters left are the model's own (the unknown ``k2`` set into its group); none has the chunk's
    leading axis. Its rows and final state equal single steps.
    """
    program = compile(CHAIN, "ekf", data=DATA, **PROBLEM)
    chunk = 11  # not the state size (7), whose scatters are the log-scale unknown's
    frames = [program.frame(DATA.inputs[k], DATA.observations[k]) for k in range(1, chunk + 1)]
    stacked = jax.tree_util.tree_map(lambda *a: np.stack(a), *frames)
    state = program.init(DATA.inputs[0])
    jaxpr = jax.make_jaxpr(lambda s, f, c: program.steps(s, f, c))(state, stacked, np.int32(5))
    shapes = _primitive_shapes(jaxpr.jaxpr, "scatter", [])
    assert not [s for s in shapes if s[:1] == (chunk,)], shapes
    final, rows = jax.jit(lambda s, f, c: program.steps(s, f, c))(state, stacked, np.int32(5))
    single, singles = _stepped(program, _head(DATA, 6))
    np.testing.assert_allclose(np.asarray(final.mean), np.asarray(single.mean), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        np.asarray(rows.mean[:5]), np.stack([np.asarray(r.mean) for r in singles]), rtol=1e-12, atol=1e-15
    )
    np.testing.assert_array_equal(np.asarray(rows.mean[5:]), 0.0)


@pytest.mark.parametrize("filter_", ["ekf", "kf"])
def test_the_gram_kernel_equals_the_qr_kernel_with_missing_outputs_and_correlated_noise(filter_):
    """Covariances by products and Cholesky (``kernel="gram"``) against stacked factors by QR.

    On a record with a tenth of its outputs missing, correlated sensor noise, and (for the EKF) a
    log-scale unknown: means, sds, log-likelihood and NIS agree to rounding, and the EKF's gram Program
    a row at a time equals its run to rounding: 1e-11 of each column's scale (XLA fuses the products of
    a lone step and of a scan differently; QR's library calls round alike, to 1e-12). The UKF's gram
    update is ``ukf_step``'s (tests/test_ukf.py).
    """
    rng = np.random.default_rng(3)
    data = DATA.with_mask(np.asarray(DATA.mask) & (rng.random(DATA.observations.shape) > 0.1))
    problem = {k: v for k, v in PROBLEM.items() if k != "noise_sd"}
    problem["noise_cov"] = np.array([[1.4e-4, 0.5e-4], [0.5e-4, 1.2e-4]])
    if filter_ == "kf":
        problem.pop("unknown")
    ests = {
        kernel: compile(CHAIN, Central(filter=filter_, kernel=kernel), data=data, **problem).run(data)
        for kernel in ("qr", "gram")
    }
    qr, gram = ests["qr"], ests["gram"]
    np.testing.assert_allclose(np.asarray(gram.means), np.asarray(qr.means), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(gram.stds), np.asarray(qr.stds), rtol=1e-9, atol=1e-14)
    assert gram.loglik == pytest.approx(qr.loglik, rel=1e-10)
    assert gram.nis == pytest.approx(qr.nis, rel=1e-9)
    if filter_ == "kf":
        return
    program = compile(CHAIN, Central(filter=filter_, kernel="gram"), data=data, **problem)
    _, rows = _stepped(program, data)
    stepped, run = np.stack([np.asarray(r.mean) for r in rows]), np.asarray(gram.means)[1:]
    assert np.all(np.abs(stepped - run) <= 1e-11 * np.max(np.abs(run), axis=0)), np.max(np.abs(stepped - run))
