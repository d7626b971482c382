"""An FMU as a graph subsystem (issue #56, item 3), with a test FMU compiled from its C source.

The same FMU's Co-Simulation interface (its own RK4 solver inside ``fmi2DoStep``) is checked against
fmpy's co-simulation and the zero-order-hold closed form, and runs as a deterministic graph node.

``tests/fmu_src/SpringMass`` (model.c and modelDescription.xml, written for these tests) is compiled
with the machine's C compiler against the FMI 2.0 headers fmpy ships, once per session, into a
temporary folder (no binary is committed). It is checked against fmpy's own Model Exchange simulation
and the closed form of a mass-spring-damper under a piecewise-constant force, then coupled to a native
:class:`~twinfer.models.Chain` through its input and outputs (:class:`~twinfer.infer.graph.Coupled`):
the graph with the FMU subsystem estimates as the same graph with a JAX-written mass-spring-damper does.
"""

from __future__ import annotations

from pathlib import Path

import fmpy
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import expm
from scipy.signal import butter, lfilter

import twinfer
from _fmu_build import build_fmu, compiler, edited_copy
from twinfer.data import Dataset
from twinfer.infer.graph import Coupled, CoupledError, CoupledLoopError, Graph, Link
from twinfer.infer.graph._run import estimate
from twinfer.models import (
    FMU,
    AbstractModel,
    Chain,
    CoSimulationFMU,
    FMUCallError,
    FMUKindError,
    FMUVariableError,
)
from twinfer.sim import discretise, simulate, simulate_dataset, simulate_discrete

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler (cc or gcc) to build the test FMU")

M, K, C = 2.0, 3.0, 0.4  # the FMU's mass (fixed), stiffness and damping (tunable), not its start values
KC, CC = 0.5, 0.1  # the coupling spring and damper between the chain's end mass and the FMU's mass
DT, STEPS = 0.05, 100


@pytest.fixture(scope="session")
def spring_mass(tmp_path_factory) -> Path:
    """SpringMass.fmu compiled from tests/fmu_src/SpringMass in a session's temporary folder."""
    return build_fmu("SpringMass", tmp_path_factory.mktemp("fmu"))


class SpringMass(AbstractModel):
    """The FMU's equations written in JAX: der(x) = v, der(v) = a = (F - k x - c v) / m; outputs x, v, a."""

    params: dict

    def __init__(self, m: float, k: float, c: float):
        self.params = {"m": jnp.asarray(m), "k": jnp.asarray(k), "c": jnp.asarray(c)}

    def vector_field(self, t, x, u, params):
        return jnp.stack([x[1], (u[0] - params["k"] * x[0] - params["c"] * x[1]) / params["m"]])

    def output(self, t, x, u, params):
        return jnp.concatenate([x, self.vector_field(t, x, u, params)[1:]])

    @property
    def state_names(self):
        return ("x", "v")

    @property
    def input_names(self):
        return ("F",)

    @property
    def output_names(self):
        return ("x", "v", "a")


def _closed_form(x0: np.ndarray, forces: np.ndarray, times: np.ndarray, h: float) -> np.ndarray:
    """States at ``times`` (multiples of ``h``) under the force ``forces[i]`` held over ``[i h, (i+1) h)``:
    the exact step of the linear system by the matrix exponential of ``[[A, B], [0, 0]]`` (Van Loan,
    IEEE Trans. Automat. Control 23(3), 1978: the zero-order-hold discretisation)."""
    a = np.array([[0.0, 1.0, 0.0], [-K / M, -C / M, 1.0 / M], [0.0, 0.0, 0.0]])
    step = expm(a * h)
    out, x = [x0], x0
    for f in forces[: len(times) - 1]:
        x = step[:2, :2] @ x + step[:2, 2] * f
        out.append(x)
    return np.asarray(out)


@pytest.mark.timeout(300)
def test_spring_mass_fmu_matches_fmpy_and_the_closed_form(spring_mass):
    """Under a piecewise-constant force (steps at t = 1 and 2.5 s, input events for fmpy), fmpy's Model
    Exchange simulation (CVode, rtol 1e-10) and ``sim.simulate`` of the FMU model (Dopri8) both equal
    the closed form to 1e-7, and the output ``a`` is the acceleration; the FMU's fixed mass (reset) and
    tunable stiffness (event mode) set through ``params`` give the vector field of the formula."""
    h, levels = 0.5, {0.0: 0.0, 1.0: 1.5, 2.5: -0.5}
    times = np.arange(0.0, 5.0 + 1e-9, h)
    forces = np.array([levels[max(s for s in levels if s <= t + 1e-12)] for t in times])
    rows = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.5), (2.5, 1.5), (2.5, -0.5), (5.0, -0.5)]
    signal = np.array(rows, dtype=[("time", np.float64), ("F", np.float64)])
    start = {"m": M, "k": K, "c": C, "x": 0.3, "v": -0.2}
    ref = fmpy.simulate_fmu(
        str(spring_mass),
        fmi_type="ModelExchange",
        stop_time=5.0,
        output_interval=h,
        input=signal,
        start_values=start,
        relative_tolerance=1e-10,
    )
    on_grid = np.isin(np.round(ref["time"], 9), np.round(times, 9))  # fmpy also records at the events
    ref = ref[on_grid]
    _, first = np.unique(np.round(ref["time"], 9), return_index=True)  # an event time is recorded twice
    ref = ref[first]
    exact = _closed_form(np.array([0.3, -0.2]), forces, times, h)
    np.testing.assert_allclose(ref["time"], times, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.stack([ref["x"], ref["v"]], axis=1), exact, rtol=0, atol=1e-7)
    model = FMU(spring_mass, params={"m": M, "k": K, "c": C})
    assert (model.state_names, model.input_names, model.output_names) == (("x", "v"), ("F",), ("x", "v", "a"))
    assert model.param_names == ("m", "k", "c") and not model.runtime.directional
    traj = simulate(model, times, [0.3, -0.2], forces[:, None])
    np.testing.assert_allclose(np.asarray(traj.states), exact, rtol=0, atol=1e-7)
    accel = (forces - K * exact[:, 0] - C * exact[:, 1]) / M
    np.testing.assert_allclose(np.asarray(traj.outputs[:, 2]), accel, rtol=0, atol=1e-7)
    x, u = jnp.array([0.7, -1.1]), jnp.array([0.25])
    for m, k in ((M, 5.0), (4.0, 5.0), (4.0, K)):  # tunable k (event mode), fixed m (reset), then both back
        params = {"m": jnp.asarray(m), "k": jnp.asarray(k), "c": jnp.asarray(C)}
        got = np.asarray(model.vector_field(0.0, x, u, params))
        np.testing.assert_allclose(got, [-1.1, (0.25 - k * 0.7 + C * 1.1) / m], rtol=0, atol=1e-15)


def _links() -> list[Link]:
    """A spring KC and damper CC between the chain's mass 2 and the FMU's mass: equal and opposite forces,
    the chain's states read from its state, the FMU's through its outputs x and v."""
    out = []
    for source, gain in (("chain.x2", KC), ("msd.x", -KC), ("chain.v2", CC), ("msd.v", -CC)):
        out += [Link("msd.F", source, gain), Link("chain.f2", source, -gain)]
    return out


def _chain() -> Chain:
    return Chain([1.0, 1.0], [4.0, 3.0], [0.1, 0.1], forced_dofs=[1, 2], outputs=("a1", "a2"))


@pytest.fixture(scope="module")
def record() -> tuple[Dataset, np.ndarray]:
    """The coupled system written natively, simulated exactly (Dopri8 at 1e-10) under a low-passed random
    force on the chain's first mass; every output measured with 5 % noise. Returns the data and the sds."""
    native = Coupled({"chain": _chain(), "msd": SpringMass(M, K, C)}, _links())
    b, a = butter(2, 0.2)
    force = lfilter(b, a, np.random.default_rng(1).normal(size=(STEPS + 1, 1)) * 3.0, axis=0)
    clean = simulate_dataset(native, force, DT, 0.0, jax.random.key(0))
    sd = 0.05 * np.sqrt(np.mean(np.asarray(clean.observations) ** 2, axis=0))
    return simulate_dataset(native, force, DT, sd, jax.random.key(1)), sd


@pytest.mark.timeout(600)
def test_a_graph_with_an_fmu_subsystem_estimates_like_the_native_graph(spring_mass, record):
    """The FMU coupled to a two-mass Chain through its force input and its outputs x and v, each part a
    UKF subsystem, the FMU's stiffness k unknown (held by the FMU's subsystem, which reads it): the
    estimate equals the same graph's with the JAX-written mass-spring-damper (states, k and their sds)
    to 1e-9 of the sd, the truth of k lies in its 95 % interval and the states cover the truth."""
    fmu = FMU(spring_mass, params={"m": M, "k": K, "c": C})
    coupled = Coupled({"chain": _chain(), "msd": fmu}, _links())
    native = Coupled({"chain": _chain(), "msd": SpringMass(M, K, C)}, _links())
    assert (
        coupled.state_names
        == native.state_names
        == ("chain.x1", "chain.x2", "chain.v1", "chain.v2", "msd.x", "msd.v")
    )
    assert coupled.input_names == ("chain.f1",)
    assert coupled.output_names == ("chain.a1", "chain.a2", "msd.x", "msd.v", "msd.a")
    data, sd = record
    options = dict(noise_sd=sd, state_sd=0.1, process_sd=1e-4, unknown={"msd.k": (2.0, 1.0, 0.0)})
    graph = Graph.from_model(coupled, dt=DT, **options)  # one subsystem per part
    holders = {s.name: s.parameters for s in graph.flatten()[0]}
    assert holders == {"S1": (), "S2": ("msd.k",)}, holders
    before = fmu.calls
    got = estimate(graph, data)
    calls = (fmu.calls - before) / STEPS
    want = estimate(Graph.from_model(native, dt=DT, **options), data)
    assert got.state_names == want.state_names == (*coupled.state_names, "msd.k")
    sds = np.asarray(want.stds)
    np.testing.assert_array_less(np.abs(np.asarray(got.means) - np.asarray(want.means)), 1e-9 * sds)
    np.testing.assert_allclose(np.asarray(got.stds), sds, rtol=1e-9, atol=0)
    low, high = got.interval("msd.k")
    assert low < K < high, (low, high)
    error = np.asarray(got.means)[:, :6] - np.asarray(data.truth_states)
    coverage = np.mean(np.abs(error) <= 1.96 * sds[:, :6])
    assert 0.9 <= coverage <= 1.0, coverage
    assert calls > 0, calls  # the FMU ran inside the graph's filters, in callbacks per step


@pytest.mark.timeout(600)
def test_the_fmu_as_a_deterministic_node(spring_mass, record):
    """``estimator=("ukf", "none")``: the FMU's subsystem only propagates (no update, no covariance
    beyond its prior and process noise), driven by the chain's messages; it follows the truth to 2 % of
    its motion, and the chain's UKF, reading it through the coupling, still covers its own states.

    The same FMU's Co-Simulation interface as that node (one ``fmi2DoStep`` a step, the chain's states
    held over it, the chain reading its outputs held): it follows the truth to 5 % of its motion (the
    explicit coupling's error, O(dt)), the chain's estimate stays within 0.5 sd of the Model Exchange
    node's graph and covers its states, and a second run gives the same numbers (each run starts from the
    FMU's initial state, handle 0)."""
    fmu = FMU(spring_mass, params={"m": M, "k": K, "c": C})
    coupled = Coupled({"chain": _chain(), "msd": fmu}, _links())
    data, sd = record
    options = dict(estimator=("ukf", "none"), noise_sd=sd, state_sd=1e-3, process_sd=1e-4)
    est = estimate(Graph.from_model(coupled, dt=DT, **options), data)
    truth = np.asarray(data.truth_states)
    error = np.asarray(est.means) - truth
    assert np.max(np.abs(error[:, 4:])) < 0.02 * np.max(np.abs(truth[:, 4:])), np.abs(error[:, 4:]).max()
    coverage = np.mean(np.abs(error[:, :4]) <= 1.96 * np.asarray(est.stds)[:, :4])
    assert 0.9 <= coverage <= 1.0, coverage

    stepped = CoSimulationFMU(spring_mass, params={"m": M, "k": K, "c": C}, start={"x": 0.0, "v": 0.0})
    cosim = Coupled({"chain": _chain(), "msd": stepped}, _links())
    assert cosim.state_names[4:] == ("msd.x", "msd.v", "msd.a", "msd.fmu_state")
    graph = Graph.from_model(cosim, dt=DT, **options)
    before = stepped.calls
    got = estimate(graph, data)
    calls = (stepped.calls - before) / STEPS
    again = estimate(graph, data)
    np.testing.assert_array_equal(np.asarray(again.means), np.asarray(got.means))  # the handles too
    means = np.asarray(got.means)
    assert np.max(np.abs(means[:, 4:6] - truth[:, 4:])) < 0.05 * np.max(np.abs(truth[:, 4:]))
    assert np.max(np.abs(means[:, :4] - np.asarray(est.means)[:, :4]) / np.asarray(est.stds)[:, :4]) < 0.5
    coverage = np.mean(np.abs(means[:, :4] - truth[:, :4]) <= 1.96 * np.asarray(got.stds)[:, :4])
    assert 0.9 <= coverage <= 1.0, coverage
    assert calls <= 4, calls  # host calls per step: the mean, the state and message Jacobians, a1


@pytest.mark.timeout(300)
def test_a_cosimulation_fmu_steps_as_fmpy_does(spring_mass):
    """``CoSimulationFMU``: its states are the outputs and a handle; ``sim.simulate_discrete`` (one
    ``fmi2DoStep`` a step) equals fmpy's co-simulation of the same FMU to 1e-12 under a piecewise-constant
    force, and the closed form to 1e-7 (the FMU's RK4, ten steps per 0.1 s); the Jacobian of a step in the
    input (central differences, each from the restored FMU state) equals the zero-order-hold closed form's
    to 1e-6; it has no vector field (a named error from the adaptive ``sim.simulate``); closed, its folder
    is gone and a step is a named error."""
    h = 0.1
    times = np.arange(0.0, 5.0 + 1e-9, h)
    forces = np.where(times < 1.0 - 1e-9, 0.0, np.where(times < 2.5 - 1e-9, 1.5, -0.5))
    model = CoSimulationFMU(spring_mass, params={"m": M, "k": K, "c": C}, start={"x": 0.3, "v": -0.2})
    assert (model.state_names, model.input_names, model.output_names) == (
        ("x", "v", "a", "fmu_state"),
        ("F",),
        ("x", "v", "a"),
    )
    np.testing.assert_allclose(np.asarray(model.start_state), [0.3, -0.2, (-K * 0.3 + C * 0.2) / M, 0.0])
    traj = simulate_discrete(discretise(model, h, "rk4"), model.start_state, forces[:-1, None])
    signal = np.array(list(zip(times, forces, strict=True)), dtype=[("time", np.float64), ("F", np.float64)])
    start = {"m": M, "k": K, "c": C, "x": 0.3, "v": -0.2}
    ref = fmpy.simulate_fmu(
        str(spring_mass),
        fmi_type="CoSimulation",
        stop_time=5.0,
        output_interval=h,
        input=signal,
        start_values=start,
    )
    states = np.asarray(traj.states)
    np.testing.assert_allclose(states[:, :3], np.stack([ref["x"], ref["v"], ref["a"]], 1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        states[:, :2], _closed_form(np.array([0.3, -0.2]), forces, times, h), atol=1e-7
    )
    step = discretise(model, h, "rk4")
    jac = jax.jacfwd(lambda u: step.transition(0.0, model.start_state, u, model.params))(jnp.array([0.4]))
    a = np.array([[0.0, 1.0, 0.0], [-K / M, -C / M, 1.0 / M], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(np.asarray(jac)[:2, 0], expm(a * h)[:2, 2], rtol=0, atol=1e-6)
    assert np.asarray(jac)[3, 0] == 0.0
    with pytest.raises(FMUKindError, match="vector field: expected a Model Exchange FMU"):
        simulate(model, times, model.start_state, forces[:, None])
    folder, start = Path(model.runtime.directory), model.start_state
    assert folder.is_dir()
    model.close()  # frees the saved states and the instance, removes the unpacked folder
    assert not folder.exists()
    with pytest.raises(FMUCallError, match="closed model"):
        step.transition(0.0, start, jnp.array([0.4]), model.params)
    with pytest.raises(FMUCallError, match="closed model"):
        model.start_state  # noqa: B018  (the property reads the FMU)


@pytest.mark.timeout(120)
def test_coupling_errors_are_named(spring_mass):
    """An unknown part, input or source, and a link whose source feeds through from a linked input (the
    FMU's acceleration a into its own force F: an algebraic loop) are named errors."""
    fmu = FMU(spring_mass)
    with pytest.raises(CoupledError, match=r"link target 'pump.F'.*'<part>.<name>'"):
        Coupled({"chain": _chain(), "msd": fmu}, [Link("pump.F", "chain.x2")])
    with pytest.raises(CoupledError, match=r"link target 'msd.G'.*an input of 'msd' \('F',\)"):
        Coupled({"chain": _chain(), "msd": fmu}, [Link("msd.G", "chain.x2")])
    with pytest.raises(CoupledError, match=r"link source 'chain.a9'.*an output \('a1', 'a2'\)"):
        Coupled({"chain": _chain(), "msd": fmu}, [Link("msd.F", "chain.a9")])
    with pytest.raises(CoupledLoopError, match=r"link source 'msd.a'.*\['F'\].*algebraic loop"):
        Coupled({"chain": _chain(), "msd": fmu}, [Link("msd.F", "chain.x2"), Link("chain.f2", "msd.a")])
    with pytest.raises(TypeError, match=r"Graph.from_model partition: .*a Chain .*received none"):
        Graph.from_model(_chain(), dt=DT)


@pytest.mark.timeout(120)
def test_cosimulation_errors_are_named(spring_mass, tmp_path):
    """A Model-Exchange-only FMU, one that cannot get and set its state, a start value for a parameter or
    an unknown name; in a graph a co-simulation part with a UKF, an unknown among its parameters, an x0
    that moves its start or a group mixing it with other states; a whole-model filter on a Coupled model
    holding it, and a filter on it alone (estimate and compile): each named."""

    def only_me(xml: str) -> str:
        return xml[: xml.index("<CoSimulation")] + xml[xml.index("</CoSimulation>") + 15 :]

    with pytest.raises(FMUKindError, match="expected Co-Simulation .* Model-Exchange-only"):
        CoSimulationFMU(edited_copy(spring_mass, tmp_path / "me.fmu", edit=only_me))
    no_state = edited_copy(
        spring_mass, tmp_path / "ns.fmu", edit=lambda xml: xml.replace('canGetAndSetFMUstate="true"', "")
    )
    with pytest.raises(FMUKindError, match="canGetAndSetFMUstate: expected true"):
        CoSimulationFMU(no_state)
    with pytest.raises(FMUVariableError, match=r"start\['k'\].*a parameter goes in params"):
        CoSimulationFMU(spring_mass, start={"k": 2.0})
    with pytest.raises(FMUVariableError, match=r"start\['y'\].*no such variable"):
        CoSimulationFMU(spring_mass, start={"y": 2.0})
    cosim = Coupled({"chain": _chain(), "msd": CoSimulationFMU(spring_mass)}, _links())
    with pytest.raises(CoupledError, match=r"estimator of S2 .*expected 'none'.*received 'ukf'"):
        Graph.from_model(cosim, dt=DT)
    with pytest.raises(CoupledError, match=r"unknown 'msd.k'"):
        Graph.from_model(cosim, dt=DT, estimator=("ukf", "none"), unknown={"msd.k": (2.0, 1.0, 0.0)})
    with pytest.raises(CoupledError, match=r"x0 of \['msd.x', 'msd.v', 'msd.a', 'msd.fmu_state'\]"):
        Graph.from_model(cosim, dt=DT, estimator=("ukf", "none"), x0=np.zeros(8))
    mixed = [("chain.x1", "chain.v1"), ("chain.x2", "chain.v2", "msd.x", "msd.v", "msd.a", "msd.fmu_state")]
    with pytest.raises(CoupledError, match=r"co-simulation part 'msd'.*one group of their own"):
        Graph.from_model(cosim, mixed, dt=DT, estimator="none")
    with pytest.raises(FMUKindError, match="vector field"):
        discretise(cosim, DT, "rk4").transition(0.0, jnp.zeros(8), jnp.zeros(1), cosim.params)
    alone = CoSimulationFMU(spring_mass)
    data = Dataset(np.arange(11) * DT, np.zeros((11, 3)), output_names=alone.output_names)
    with pytest.raises(TypeError, match=r"filter model: .*co-simulation FMU, whose state is opaque"):
        twinfer.estimate(alone, data, "ukf")
    with pytest.raises(TypeError, match=r"co-simulation FMU, whose state is opaque"):
        twinfer.compile(alone, "ekf", dt=DT)
