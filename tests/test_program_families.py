"""Issue #53's acceptance for the Program contract: every filtering family, stepped a row at a time,
equals its ``run`` to 1e-12, ``run`` equals ``twinfer.estimate``, and a graph's state saved after row k and
restored in a new process steps on to the same numbers (``make accept``: about two minutes of compiles).

The families: the central filter (UKF with propagated and with redrawn sigma points, EKF, KF), the PN ODE
filter, message passing and the banded filter on a ``Graph.from_model`` chain (a system that is not a
paper case, with an unknown stiffness), and the field engine on the IEEE 118-bus network. Each check
runs as a user's process runs: XLA's default compile flags, not the suite's fast ones (tests/conftest.py),
under which a standalone step and the same step inside a scan round differently.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.acceptance

SETUP = textwrap.dedent(
    """
    import time, warnings
    import numpy as np, jax
    import twinfer
    from twinfer.data import Dataset, load_grid
    from twinfer.infer.graph import kuramoto_graph
    from twinfer.infer.graph._grid import GRID_DEFAULTS, partition_for
    from twinfer.models import Chain, KuramotoNetwork
    from twinfer.sim import simulate_dataset

    chain = Chain(mass=[1.0, 1.2, 0.8, 1.0], stiffness=[40.0, 35.0, 30.0, 45.0], damping=0.4,
                  outputs=["a1", "a2", "a4"])
    u = np.asarray(jax.random.normal(jax.random.key(2), (61, chain.n_input)))
    data = simulate_dataset(chain, u, 0.01, 0.01, jax.random.key(3))
    kw = dict(noise_sd=0.01, state_sd=0.1, process_sd=1e-6, unknown={"k3": (32.0, 3.0, 0.0)})

    def stepped(program, data, state=None, first=1):
        state = program.init(None if data.inputs is None else data.inputs[0]) if state is None else state
        rows = []
        for k in range(first, data.n_steps):
            u = None if data.inputs is None else data.inputs[k]
            state, row = program.step(state, program.frame(u, data.observations[k]))
            rows.append(row)
        return state, rows

    def check(name, program, data, est, loglik=True):
        state, rows = stepped(program, data)
        for f, col in (("mean", est.means), ("std", est.stds)):
            got = np.stack([np.asarray(getattr(r, f)) for r in rows])
            scale = np.nanmax(np.abs(col))
            np.testing.assert_allclose(got, np.asarray(col)[1:], rtol=1e-12, atol=1e-12 * scale)
        if loglik:
            np.testing.assert_allclose(float(state.loglik), est.loglik, rtol=1e-12)
        print(name, "ok")

    def same_as_estimate(system, data, method, program, **problem):
        est = program.run(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # message passing's bands warn (its own check)
            again = twinfer.estimate(system, data, method, **problem)
        np.testing.assert_array_equal(np.asarray(again.means), np.asarray(est.means))
        np.testing.assert_array_equal(np.asarray(again.stds), np.asarray(est.stds))
        return est
    """
)

FAMILIES = textwrap.dedent(
    """
    central = [twinfer.Central(), twinfer.Central(linearisation="redrawn"), twinfer.Central(filter="ekf")]
    for method in central:
        p = twinfer.compile(chain, method, data=data, **kw)
        est = same_as_estimate(chain, data, method, p, **kw)
        check(f"central-{method.filter}-{method.linearisation}", p, data, est)
    linear = dict(noise_sd=0.01, state_sd=0.1, process_sd=1e-6)
    p = twinfer.compile(chain, "kf", data=data, **linear)
    check("central-kf", p, data, same_as_estimate(chain, data, "kf", p, **linear))
    pn = dict(noise_sd=0.01, state_sd=0.1)
    p = twinfer.compile(chain, "pn", data=data, **pn)
    check("pn", p, data, same_as_estimate(chain, data, "pn", p, **pn))
    halves = [[1, 2], [3, 4]]
    for method in (twinfer.Distributed(partition=halves), twinfer.Banded(partition=halves)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = twinfer.compile(chain, method, data=data, **kw)
        check(type(method).__name__, p, data, same_as_estimate(chain, data, method, p, **kw))

    net = load_grid("ieee118")
    n = net.n_bus
    index, weight = net.neighbours
    rng = np.random.default_rng(0)
    model = KuramotoNetwork(index, weight, np.ones(n), rng.normal(0, 0.1, n))
    clusters = partition_for(net, 5, 0.01, GRID_DEFAULTS.bond)
    graph = kuramoto_graph(model, clusters, dt=0.01, x0=np.zeros((n, 3)), state_sd=(0.5, 0.5, 1.0),
                           process_sd=(0.001, 0.01, 0.001), noise_sd=0.1).graph
    y = rng.normal(0, 0.05, (31, 2 * n))
    y[:, ::3] = np.nan  # a third of the channels missing
    names = [f"{q}{b + 1}" for q in ("theta", "omega") for b in range(n)]
    grid = Dataset(np.arange(31) * 0.01, y, mask=~np.isnan(y), output_names=names)
    p = twinfer.compile(graph, twinfer.Distributed(), data=grid)
    check("field-ieee118", p, grid, same_as_estimate(graph, grid, twinfer.Distributed(), p), loglik=False)
    """
)


def _users_process(script: str, timeout: int = 900) -> str:
    env = {**os.environ, "TWINFER_TEST_XLA_DEFAULTS": "1", "XLA_FLAGS": "", "JAX_ENABLE_X64": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.mark.timeout(1200)
def test_every_filtering_family_steps_to_its_run_and_to_estimate():
    out = _users_process(SETUP + FAMILIES)
    assert out.count(" ok") == 8, out


@pytest.mark.timeout(900)
def test_a_graph_state_restored_in_a_new_process_steps_on_exactly(tmp_path):
    path, out = tmp_path / "graph.state", tmp_path / "out.npy"
    save = textwrap.dedent(
        f"""
        method = twinfer.Banded(partition=[[1, 2], [3, 4]], bandwidth=1)
        p = twinfer.compile(chain, method, data=data, **kw)
        state, _ = stepped(p, data.window(t_end=float(data.times[30])))
        p.save_state(state, {str(path)!r})
        whole, _ = stepped(p, data)
        np.save({str(out)!r}, np.asarray(whole.carry[0]))
        """
    )
    resume = textwrap.dedent(
        f"""
        method = twinfer.Banded(partition=[[1, 2], [3, 4]], bandwidth=1)
        p = twinfer.compile(chain, method, data=data, **kw)
        state, _ = stepped(p, data, state=p.load_state({str(path)!r}), first=31)
        np.testing.assert_allclose(np.asarray(state.carry[0]), np.load({str(out)!r}), rtol=1e-12, atol=0)
        print("resumed ok")
        """
    )
    _users_process(SETUP + save)
    assert "resumed ok" in _users_process(SETUP + resume)
