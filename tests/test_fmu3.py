"""FMI 3.0 Model Exchange FMUs as twinfer models (issue #56, item 1: "FMI 3.0 where fmpy supports it").

``tests/fmu_src/SpringMass3`` (model.c and modelDescription.xml, written for these tests) is the FMI 3.0
twin of ``tests/fmu_src/SpringMass``: the same equations, variables and value references, plus
directional derivatives (``fmi3GetDirectionalDerivative``); ``tests/fmu_src/SpringWall3`` is the same
source with a wall at x = 0 (a state event). All are compiled by ``tests/_fmu_build.py`` with the
machine's C compiler against the FMI headers fmpy ships. References: fmpy's own FMI 3.0 Model Exchange
simulation, the closed form of the linear system, the FMI 2.0 twin evaluated point by point, and central
finite differences.
"""

from __future__ import annotations

import re
from pathlib import Path

import fmpy
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import expm

import twinfer
from _fmu_build import build_fmu, compiler, edited_copy
from twinfer.infer.filters._augment import augment
from twinfer.models import FMU, FMUKindError, FMUPlatformError, FMUVariableError
from twinfer.sim import discretise, simulate, simulate_dataset, simulate_events

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler (cc or gcc) to build the test FMUs")

M, K, C = 2.0, 3.0, 0.4  # mass (fixed), stiffness and damping (tunable), not the start values
TRUTH = {"m": M, "k": K, "c": C}
XS = jnp.array([[0.3, -0.2], [0.7, -1.1], [-1.2, 0.4], [0.0, 2.0], [0.5, 0.5]])
US = jnp.array([[0.5], [0.25], [-1.0], [0.0], [2.0]])
PS = jnp.array([[M, K, C], [M, 5.0, C], [4.0, K, 0.1], [1.5, 0.5, 0.0], [M, K, C]])  # (m, k, c) per point


@pytest.fixture(scope="module")
def fmus(tmp_path_factory) -> tuple[Path, Path, Path]:
    """``(SpringMass3.fmu, SpringMass.fmu, SpringWall3.fmu)`` compiled in a temporary folder."""
    folder = tmp_path_factory.mktemp("fmu3")
    return tuple(build_fmu(name, folder) for name in ("SpringMass3", "SpringMass", "SpringWall3"))


def _params(row) -> dict:
    return {"m": row[0], "k": row[1], "c": row[2]}


def _closed_form(x0: np.ndarray, forces: np.ndarray, h: float) -> np.ndarray:
    """States at multiples of ``h`` under ``forces[i]`` held over ``[i h, (i+1) h)``: the exact step of the
    linear system by the matrix exponential of ``[[A, B], [0, 0]]`` (Van Loan, IEEE Trans. Automat.
    Control 23(3), 1978)."""
    step = expm(np.array([[0.0, 1.0, 0.0], [-K / M, -C / M, 1.0 / M], [0.0, 0.0, 0.0]]) * h)
    out = [x0]
    for f in forces[:-1]:
        out.append(step[:2, :2] @ out[-1] + step[:2, 2] * f)
    return np.asarray(out)


# -- simulation ----------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_simulate_equals_fmpy_fmi3_model_exchange_and_the_closed_form(fmus):
    """Under a piecewise-constant force, fmpy's FMI 3.0 Model Exchange simulation (CVode, rtol 1e-10) and
    ``sim.simulate`` of the FMI 3.0 model (Dopri8) both equal the closed form to 1e-7; ``a`` is the
    acceleration; the description is read as FMI 3.0 (states, input, outputs, parameters by name)."""
    h, levels = 0.5, {0.0: 0.0, 1.0: 1.5, 2.5: -0.5}
    times = np.arange(0.0, 5.0 + 1e-9, h)
    forces = np.array([levels[max(s for s in levels if s <= t + 1e-12)] for t in times])
    rows = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.5), (2.5, 1.5), (2.5, -0.5), (5.0, -0.5)]
    signal = np.array(rows, dtype=[("time", np.float64), ("F", np.float64)])
    ref = fmpy.simulate_fmu(
        str(fmus[0]),
        fmi_type="ModelExchange",
        stop_time=5.0,
        output_interval=h,
        input=signal,
        start_values={**TRUTH, "x": 0.3, "v": -0.2},
        relative_tolerance=1e-10,
    )
    ref = ref[np.isin(np.round(ref["time"], 9), np.round(times, 9))]  # fmpy also records at the events
    ref = ref[np.unique(np.round(ref["time"], 9), return_index=True)[1]]  # an event time appears twice
    exact = _closed_form(np.array([0.3, -0.2]), forces, h)
    np.testing.assert_allclose(ref["time"], times, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.stack([ref["x"], ref["v"]], axis=1), exact, rtol=0, atol=1e-7)
    model = FMU(fmus[0], params=TRUTH)
    desc = model.runtime.desc
    assert (desc.fmi_version, desc.directional, model.runtime.directional) == ("3.0", True, True)
    assert (model.state_names, model.input_names, model.output_names) == (("x", "v"), ("F",), ("x", "v", "a"))
    assert model.param_names == ("m", "k", "c") and desc.param_fixed == (True, False, False)
    traj = simulate(model, times, [0.3, -0.2], forces[:, None])
    np.testing.assert_allclose(np.asarray(traj.states), exact, rtol=0, atol=1e-7)
    accel = (forces - K * exact[:, 0] - C * exact[:, 1]) / M
    np.testing.assert_allclose(np.asarray(traj.outputs[:, 2]), accel, rtol=0, atol=1e-7)


@pytest.mark.timeout(300)
def test_wall_bounces_equal_fmpy_fmi3_and_the_closed_form(fmus):
    """State events through ``fmi3GetEventIndicators`` and ``fmi3UpdateDiscreteStates``: the bounce times of
    ``simulate_events`` on SpringWall3 (the restitution e = 0.5 set as a tunable parameter) equal fmpy's
    FMI 3.0 Model Exchange simulation (CVode, rtol 1e-12) to 1e-6 s and the closed form to 1e-9 s (from
    the wall the free oscillator returns to it after half a damped period, pi / omega_d), the states on
    the grid equal fmpy's to 1e-6, and each bounce leaves the wall at e times the speed it hit it with."""
    ts = np.round(np.arange(0.0, 5.0 + 1e-9, 0.05), 10)
    model = FMU(fmus[2], params={"e": 0.5})
    assert model.n_events == 1 and model.param_names == ("m", "k", "c", "e") and not model.has_time_events
    traj = simulate_events(model, ts, model.start_state, inputs=lambda t: jnp.zeros(1))
    out = fmpy.simulate_fmu(
        str(fmus[2]),
        fmi_type="ModelExchange",
        stop_time=5.0,
        output_interval=0.05,
        relative_tolerance=1e-12,
        start_values={"e": 0.5},
        record_events=True,
    )
    t, v = (np.array(out[name], dtype=np.float64) for name in ("time", "v"))
    # fmpy records an event as two rows at one time; CVode also stops where z crosses back (- to +), an
    # event where the FMU changes nothing, which twinfer (+ to - only) does not locate: keep the bounces
    events = t[np.flatnonzero((np.diff(t) == 0) & (np.diff(v) != 0))]
    alpha, omega = 0.1 / 2.0, np.sqrt(1.0 - 0.05**2)  # m = 1, k = 1, c = 0.1: x = e^(-a t)(A cos + B sin)
    first = (np.arctan2(-0.1, alpha * 0.1 / omega) % np.pi) / omega  # x0 = 0.1, v0 = 0: x(t1) = 0
    n = int(traj.n_events)
    assert n == len(events) == 2
    got = np.asarray(traj.event_times[:n])
    np.testing.assert_allclose(got, events, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, first + np.arange(n) * np.pi / omega, rtol=0, atol=1e-9)
    on_grid = np.flatnonzero(np.isin(np.round(t, 10), ts) & np.append(np.diff(t) != 0, True))
    fmpy_states = np.stack([out["x"][on_grid], out["v"][on_grid]], axis=1)
    np.testing.assert_allclose(np.asarray(traj.states), fmpy_states, rtol=0, atol=1e-6)
    # v = -x0 (a^2 + w^2) / w e^(-a t) sin(w t), sin(w t1) = w / sqrt(a^2 + w^2) and a^2 + w^2 = k / m = 1;
    # from the wall at speed -e v1 the oscillator returns after pi / w with e v1 e^(-a pi / w)
    speeds = [-0.1 * np.exp(-alpha * first)]
    speeds.append(0.5 * speeds[0] * np.exp(-alpha * np.pi / omega))
    hit = np.flatnonzero((np.diff(t) == 0) & (np.diff(v) != 0))
    np.testing.assert_allclose(v[hit], speeds, rtol=1e-6)  # fmpy's speed into the wall
    np.testing.assert_allclose(v[hit + 1], -0.5 * v[hit], rtol=1e-12)  # out of it: e times that


# -- the FMI 2.0 twin ----------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_vector_field_outputs_and_steps_equal_the_fmi2_twin(fmus):
    """At a batch of points whose parameters differ (a tunable k set in Event Mode, a fixed m by
    re-initialising), the vector field, the outputs and a host RK4 step (one callback, on the instance
    pool) of the FMI 3.0 FMU equal the FMI 2.0 twin's to 1e-12."""
    fmi3, fmi2 = FMU(fmus[0]), FMU(fmus[1])

    def batch(model, fn):
        return np.asarray(jax.jit(jax.vmap(lambda x, u, p: fn(model, x, u, _params(p))))(XS, US, PS))

    for fn in (
        lambda m, x, u, p: m.vector_field(0.3, x, u, p),
        lambda m, x, u, p: m.output(0.3, x, u, p),
        lambda m, x, u, p: discretise(m, 0.1, "rk4", 2).transition(0.3, x, u, p),
    ):
        before = fmi3.calls
        got = batch(fmi3, fn)
        assert fmi3.calls - before == 1
        np.testing.assert_allclose(got, batch(fmi2, fn), rtol=0, atol=1e-12)
    assert len(fmi3.runtime._components) == 4  # one instance per distinct parameter vector of the step
    want = [(XS[i, 1], (US[i, 0] - PS[i, 1] * XS[i, 0] - PS[i, 2] * XS[i, 1]) / PS[i, 0]) for i in range(5)]
    np.testing.assert_allclose(batch(fmi3, lambda m, x, u, p: m.vector_field(0.0, x, u, p)), want, atol=1e-15)


@pytest.mark.timeout(120)
def test_jacobians_equal_the_fmi2_twin_and_the_closed_form(fmus):
    """The vector field's and the output's Jacobians in (x, F) from ``fmi3GetDirectionalDerivative`` equal
    the closed form to 1e-12; with finite differences the FMI 3.0 FMU's EKF step Jacobian (RK4 of the
    k- and m-augmented model) equals the FMI 2.0 twin's to 1e-12."""
    fmi3 = FMU(fmus[0])
    vector_field = jax.jacfwd(lambda x, u, p: fmi3.vector_field(0.0, x, u, _params(p)), argnums=(0, 1))
    output = jax.jacfwd(lambda x, u, p: fmi3.output(0.0, x, u, _params(p)), argnums=(0, 1))
    for i in range(len(XS)):
        m, k, c = (float(v) for v in PS[i])
        jac_x, jac_u = vector_field(XS[i], US[i], PS[i])
        np.testing.assert_allclose(np.asarray(jac_x), [[0.0, 1.0], [-k / m, -c / m]], rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(jac_u), [[0.0], [1.0 / m]], rtol=0, atol=1e-12)
        out_x, out_u = output(XS[i], US[i], PS[i])
        np.testing.assert_allclose(
            np.asarray(out_x), [[1.0, 0.0], [0.0, 1.0], [-k / m, -c / m]], rtol=0, atol=1e-12
        )
        np.testing.assert_allclose(np.asarray(out_u), [[0.0], [0.0], [1.0 / m]], rtol=0, atol=1e-12)

    def step_jacobian(model):
        step = discretise(augment(model, ["k", "m"]), 0.1, "rk4", 2)
        z = jnp.array([0.7, -1.1, 2.5, 1.5])
        fn = jax.jit(jax.jacfwd(lambda z, u: step.transition(0.2, z, u, model.params), argnums=(0, 1)))
        return [np.asarray(j) for j in fn(z, jnp.array([0.25]))]

    differences = step_jacobian(FMU(fmus[0], derivatives="finite_differences"))
    for got, want in zip(differences, step_jacobian(FMU(fmus[1])), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.timeout(120)
def test_directional_derivatives_equal_finite_differences(fmus):
    """The EKF's step Jacobian (in the state, k, m and the force) from the FMU's directional derivatives
    equals the one from central finite differences to 1e-9 (the system is linear, so differences are
    exact to rounding), at a batch of points in one callback."""
    directional, differences = FMU(fmus[0]), FMU(fmus[0], derivatives="finite_differences")
    assert directional.runtime.directional and not differences.runtime.directional

    def step_jacobians(model):
        step = discretise(augment(model, ["k", "m"]), 0.1, "rk4", 2)
        zs = jnp.concatenate([XS, PS[:, jnp.array([1, 0])]], axis=1)  # (x, v, k, m)
        jac = jax.jacfwd(lambda z, u: step.transition(0.2, z, u, model.params), argnums=(0, 1))
        before = model.calls
        out = jax.jit(jax.vmap(jac))(zs, US)
        assert model.calls - before == 1
        return [np.asarray(j) for j in out]

    for got, want in zip(step_jacobians(directional), step_jacobians(differences), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


# -- estimation ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def record(fmus):
    """The FMI 2.0 twin at the truth, forced by a random step signal; x and a measured with noise."""
    forces = np.repeat(np.random.default_rng(3).normal(size=(16, 1)) * 2.0, 5, axis=0)[:61]
    return simulate_dataset(FMU(fmus[1], params=TRUTH), forces, 0.1, 0.02, jax.random.key(0), x0=[0.3, -0.2])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", ["ukf", "ekf"])
def test_k_and_m_estimated_as_the_fmi2_twin_does(fmus, record, method):
    """The tunable stiffness k and the fixed mass m, unknowns of the UKF and the EKF from noisy data:
    the FMI 3.0 FMU's estimate (means and sds) equals the FMI 2.0 twin's to 1e-9."""

    def run(path):
        est = twinfer.estimate(
            FMU(path, params=TRUTH),
            record,
            method,
            x0=[0.3, -0.2],
            state_sd=[0.02, 0.02],
            process_sd=[1e-4, 1e-4],
            noise_sd=[0.02, 0.02, 0.02],
            unknown={"k": (2.5, 0.5, 0.0), "m": (1.7, 0.3, 0.0)},
        )
        return np.asarray(est.means), np.asarray(est.stds)

    (mean3, sd3), (mean2, sd2) = run(fmus[0]), run(fmus[1])
    np.testing.assert_allclose(mean3, mean2, rtol=0, atol=1e-9)
    np.testing.assert_allclose(sd3, sd2, rtol=0, atol=1e-9)
    assert abs(mean3[-1, 2] - K) < 3 * sd3[-1, 2] and abs(mean3[-1, 3] - M) < 3 * sd3[-1, 3]


# -- validation ----------------------------------------------------------------------------------------
def _edited(tmp_path: Path, fmu: Path, name: str, edit=None, drop: str | None = None) -> Path:
    """A copy of ``fmu`` with its modelDescription.xml edited and the members under ``drop`` left out."""
    return edited_copy(fmu, tmp_path / f"{name}.fmu", drop=drop, edit=edit)


@pytest.mark.timeout(60)
def test_named_errors_for_versions_interfaces_and_platforms(fmus, tmp_path, monkeypatch):
    """FMI 1.0 and an unknown version (the FMI 2.0 and 3.0 descriptions edited), an FMI 3.0
    co-simulation-only FMU and one without this platform's binary under its platform tuple: each a named
    error, raised before anything of the FMU is unpacked or loaded."""
    touched = []
    monkeypatch.setattr(fmpy, "extract", lambda *a, **kw: touched.append("extract"))
    monkeypatch.setattr("twinfer.models._fmi3.FMU3Instance", lambda **kw: touched.append("load"))
    for fmu, version in ((fmus[1], "1.0"), (fmus[0], "1.0"), (fmus[0], "4.0"), (fmus[1], "3.1")):
        old = 'fmiVersion="3.0"' if fmu == fmus[0] else 'fmiVersion="2.0"'
        new = f'fmiVersion="{version}"'
        edited = _edited(tmp_path, fmu, f"v{version}", lambda xml, o=old, n=new: xml.replace(o, n))
        expected = rf"fmiVersion: expected one of \['2.0', '3.0'\].*received '{version}'"
        with pytest.raises(FMUKindError, match=expected):
            FMU(edited)
    cosimulation = '<CoSimulation modelIdentifier="SpringMass3"/>'
    only = _edited(tmp_path, fmus[0], "cs", lambda xml: re.sub(r"<ModelExchange[^>]*/>", cosimulation, xml))
    with pytest.raises(FMUKindError, match="co-simulation-only"):
        FMU(only)
    with pytest.raises(FMUPlatformError, match=f"binaries/{fmpy.platform_tuple}/SpringMass3"):
        FMU(_edited(tmp_path, fmus[0], "nobinary", drop="binaries/"))
    array = '<Float64 name="der(v)" valueReference="4" causality="local" variability="continuous" '
    arrays = _edited(
        tmp_path,
        fmus[0],
        "array",
        lambda xml: re.sub(
            re.escape(array) + r"([^>]*)/>", array + r'\1><Dimension start="1"/></Float64>', xml
        ),
    )
    with pytest.raises(
        FMUVariableError, match=r"expected scalar states.*received array derivatives \['der\(v\)'\]"
    ):
        FMU(arrays)
    clock = '<Clock name="tick" valueReference="20" causality="input" intervalVariability="constant" '
    clock += 'intervalDecimal="0.1"/>'
    clocked = _edited(
        tmp_path, fmus[0], "clock", lambda xml: xml.replace("</ModelVariables>", clock + "</ModelVariables>")
    )
    with pytest.raises(FMUKindError, match=r"clocks: expected none.*received \['tick'\]"):
        FMU(clocked)
    assert touched == []
