"""FMUs with state events (issue #56): the Reference BouncingBall on twinfer's hybrid hooks.

The FMU is read from ``../shared/fmus`` (skipped when absent). References: fmpy's own Model Exchange
simulation (CVode, events recorded), the closed-form bounce times of a ball under constant gravity, the
upstream reference trajectory (explicit Euler at 1 ms with events at step ends, reproduced with the
model's hooks), the JAX-written bouncing ball of :mod:`twinfer.models.bouncing_ball`, and finite
differences. Variants of the FMU with time events or one that terminates are built from the FMU's own
sources (``sources/`` in the archive, one line edited) with the machine's C compiler and fmpy's FMI
headers; those tests are skipped without a compiler.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import fmpy
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.data._benchmarks import default_data_root
from twinfer.models import FMU, BouncingBall2D
from twinfer.sim import simulate_events, simulate_rk4_sensitivity

FMUS = default_data_root().parent / "fmus"  # ../shared/fmus, found as the data are (TWINFER_DATA_ROOT)
BALL = FMUS / "BouncingBall.fmu"
pytestmark = pytest.mark.skipif(not BALL.is_file(), reason=f"Reference FMUs not found under {FMUS}")

G, E, V_MIN = 9.81, 0.7, 0.1  # the FMU's start values and its resting speed (sources/model.c)
TS = np.round(np.arange(0.0, 3.0 + 1e-9, 0.01), 10)
NONE = jnp.zeros(0)


def _closed_form_bounces(e: float = E, g: float = G, h0: float = 1.0) -> np.ndarray:
    """Impact times of a ball dropped from rest at h0: t_1 = sqrt(2 h0 / g), then flights of 2 v_k / g with
    v_k = e^k sqrt(2 g h0), up to the impact after which the FMU's ball rests (rebound below V_MIN)."""
    v, t, times = float(np.sqrt(2 * g * h0)), float(np.sqrt(2 * h0 / g)), []
    while True:
        times.append(t)
        v *= e
        if v < V_MIN:
            return np.array(times)
        t += 2 * v / g


def _fmpy_events() -> tuple[np.ndarray, np.ndarray]:
    """Fmpy's Model Exchange simulation (CVode, rtol 1e-12): event times and the states on TS."""
    out = fmpy.simulate_fmu(
        str(BALL),
        fmi_type="ModelExchange",
        stop_time=3.0,
        output_interval=0.01,
        relative_tolerance=1e-12,
        record_events=True,
    )
    t = out["time"]
    events = t[np.flatnonzero(np.diff(t) == 0)]  # a recorded event is two rows at one time
    on_grid = np.flatnonzero(np.isin(np.round(t, 10), TS) & np.append(np.diff(t) != 0, True))
    return events, np.stack([out["h"][on_grid], out["v"][on_grid]], axis=1)


@pytest.fixture(scope="module")
def ball():
    return FMU(BALL)


@pytest.fixture(scope="module")
def adaptive(ball):
    return simulate_events(ball, TS, ball.start_state)


# -- simulation ----------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_bounce_times_equal_fmpy_model_exchange_and_the_closed_form(ball, adaptive):
    """Issue #56's acceptance: the event times of ``simulate_events`` (Tsit5, rtol 1e-8) on the FMU equal
    fmpy's Model Exchange simulation to 1e-6 s (10 bounces and the resting impact), the closed form to
    1e-9 s, and the states on the grid equal fmpy's to 1e-6. At rest the FMU has set g := 0 itself:
    z carries that shift (g + z_g = 0), and the ball stays on the floor."""
    events, states = _fmpy_events()
    closed = _closed_form_bounces()
    n = int(adaptive.n_events)
    assert n == len(events) == len(closed) == 11
    got = np.asarray(adaptive.event_times[:n])
    np.testing.assert_allclose(got, events, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, closed, rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(adaptive.states), states, rtol=0, atol=1e-6)
    assert ball.discrete_state_names == ("g_event_shift", "e_event_shift")
    np.testing.assert_array_equal(np.asarray(adaptive.discrete[0]), [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(adaptive.discrete[-1]), [G, 0.0])
    rest = TS > closed[-1]
    np.testing.assert_array_equal(
        np.asarray(adaptive.states)[rest], [[np.finfo(float).tiny, 0.0]] * rest.sum()
    )
    np.testing.assert_array_equal(np.asarray(adaptive.outputs), np.asarray(adaptive.states))


@pytest.mark.timeout(300)
def test_fixed_step_rk4_path_gives_the_same_bounces(ball, adaptive):
    """The training path (``fixed_steps``: RK4 with Newton location on the step map) finds the same 11
    events as the adaptive solve to 1e-9 s and the same resting state."""
    traj = simulate_events(ball, TS, ball.start_state, fixed_steps=4)
    assert int(traj.n_events) == 11
    np.testing.assert_allclose(
        np.asarray(traj.event_times[:11]), np.asarray(adaptive.event_times[:11]), rtol=0, atol=1e-9
    )
    np.testing.assert_allclose(np.asarray(traj.states), np.asarray(adaptive.states), rtol=0, atol=1e-8)
    np.testing.assert_array_equal(np.asarray(traj.discrete[-1]), [G, 0.0])


@pytest.mark.timeout(300)
def test_the_hooks_reproduce_the_upstream_reference_trajectory(ball):
    """``BouncingBall_reference_out.csv`` is the upstream simulator's explicit Euler at 1 ms with an event
    wherever an indicator changed sign over a step (its first row is exactly 1 - 45 g 1e-6). The same
    scheme written with the model's ``hybrid_vector_field``, ``event_indicators`` and ``event_update``
    reproduces it to 1e-12 over 3 s, the bounces and the resting event included."""
    ref = np.genfromtxt(FMUS / "BouncingBall_reference_out.csv", delimiter=",", names=True)
    dt, params = 1e-3, ball.params

    def step(carry, k):
        x, z, c = carry
        t = k * dt
        x = x + dt * ball.hybrid_vector_field(t - dt, x, z, NONE, params)
        c_new = ball.event_indicators(t, x, z, NONE, params)
        x, z = ball.event_update(t, x, z, NONE, params, (c > 0) != (c_new > 0))
        return (x, z, ball.event_indicators(t, x, z, NONE, params)), x

    x0, z0 = ball.start_state, ball.initial_discrete_state(params)
    first = (x0, z0, ball.event_indicators(0.0, x0, z0, NONE, params))
    _, xs = jax.jit(lambda: jax.lax.scan(step, first, jnp.arange(1, 3001)))()
    got = np.concatenate([np.asarray(x0)[None], np.asarray(xs)])[::10]
    np.testing.assert_allclose(got, np.stack([ref["h"], ref["v"]], axis=1), rtol=0, atol=1e-12)


@pytest.mark.timeout(300)
def test_the_jax_bouncing_ball_bounces_at_the_same_times(adaptive):
    """``BouncingBall2D`` dropped straight down (friction-free, restitution 1 - d = 0.7, floor at
    -1 + r) is the same ball: its first 10 impact times equal the FMU's to 1e-9 s (the FMU's 11th is its
    resting impact, which the JAX ball does not model)."""
    native = BouncingBall2D(mu=0.0, g=G, r=0.1, d=1 - E)
    ts = TS[TS <= 2.49]
    traj = simulate_events(native, ts, jnp.array([0.0, 0.0, 0.1, 0.0]), max_events=16)
    assert int(traj.n_events) == 10
    np.testing.assert_allclose(
        np.asarray(traj.event_times[:10]), np.asarray(adaptive.event_times[:10]), rtol=0, atol=1e-9
    )
    height = np.asarray(traj.states[:, 2]) + 0.9
    np.testing.assert_allclose(height, np.asarray(adaptive.states[: ts.size, 0]), rtol=0, atol=1e-8)


# -- derivatives ---------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_sensitivities_through_bounces_equal_the_closed_form(ball):
    """d(h, v)(1.2 s) / d(e, g) through two bounces by the fixed-step forward sensitivity that training
    uses (event times by the implicit function theorem through the FMU's indicator, the update's
    Jacobian by one-sided differences at the event surface) equal the closed form's to 1e-6."""
    ts = jnp.asarray(TS[TS <= 1.2 + 1e-9])

    def closed(w):
        e, g = w[0], -w[1]
        v0 = jnp.sqrt(2 * g)
        t2 = jnp.sqrt(2 / g) + 2 * e * v0 / g
        s, v2 = 1.2 - t2, e * e * v0
        return jnp.stack([v2 * s - g * s**2 / 2, v2 - g * s])

    w = jnp.array([E, -G])
    xs, sxs, _, _, short = simulate_rk4_sensitivity(
        ball,
        ts,
        ball.start_state,
        jnp.zeros(2),
        lambda v: {"e": v[0], "g": v[1]},
        w,
        lambda t: NONE,
        ts[-1],
        substeps=4,
        max_pieces=2,
    )
    assert not bool(short)
    np.testing.assert_allclose(np.asarray(xs[-1]), np.asarray(closed(w)), rtol=0, atol=1e-8)
    np.testing.assert_allclose(np.asarray(sxs[-1]), np.asarray(jax.jacfwd(closed)(w)), rtol=0, atol=1e-6)


@pytest.mark.timeout(120)
def test_indicator_and_update_jacobians_and_the_hand_over_at_the_surface(ball):
    """At impact the update is (h, v) -> (tiny, -e v): its Jacobian is [[0, 0], [0, -e]] and d v+/d e =
    -v, whether the located state lies just past the surface or a few ulps before it (carried over it),
    though a central difference in h would straddle the FMU's own ``h <= 0``; the indicator is h. A
    batch is one callback, and a point whose event was not flagged is left as it is."""
    p, z, fired = ball.params, jnp.zeros(2), jnp.array([True])
    jac = jax.jacfwd(lambda x: ball.event_indicators(0.0, x, z, NONE, p))(jnp.array([0.3, -1.0]))
    np.testing.assert_allclose(np.asarray(jac), [[1.0, 0.0]], rtol=0, atol=1e-9)
    for h in (-1e-12, 0.0, 1e-17):
        x = jnp.array([h, -3.0])
        x_new, z_new = ball.event_update(0.5, x, z, NONE, p, fired)
        np.testing.assert_array_equal(np.asarray(x_new), [np.finfo(float).tiny, 3.0 * E])
        np.testing.assert_array_equal(np.asarray(z_new), [0.0, 0.0])
        dx = jax.jacfwd(lambda x: ball.event_update(0.5, x, z, NONE, p, fired)[0])(x)  # noqa: B023
        np.testing.assert_allclose(np.asarray(dx), [[0.0, 0.0], [0.0, -E]], rtol=0, atol=1e-9)
        de = jax.jacfwd(lambda e: ball.event_update(0.5, x, z, NONE, {**p, "e": e}, fired)[0])(E)  # noqa: B023
        np.testing.assert_allclose(np.asarray(de), [0.0, 3.0], rtol=0, atol=1e-9)
    xs = jnp.array([[-1e-12, -3.0], [-1e-12, -2.0], [0.4, 1.0]])
    before = ball.calls
    out, _ = jax.vmap(lambda x: ball.event_update(0.5, x, z, NONE, p, fired))(xs)
    assert ball.calls - before == 1
    np.testing.assert_array_equal(np.asarray(out[:, 1]), [3.0 * E, 2.0 * E, 1.0])
    before = ball.calls
    x_same, _ = ball.event_update(0.5, xs[0], z, NONE, p, jnp.array([False]))
    assert ball.calls == before and np.array_equal(np.asarray(x_same), np.asarray(xs[0]))


@pytest.mark.timeout(120)
def test_a_parameter_the_fmu_changes_at_rest_travels_in_z(ball):
    """The impact that leaves the ball below V_MIN makes the FMU set g := 0: z_g becomes -g, so the vector
    field then computes with g + z_g = 0 (the ball stays at rest) however the instance was left; d z_g / d g
    is -1. Left out of ``params``, such a change is a named error, and the instance is usable after it."""
    p, x = ball.params, jnp.array([-1e-12, -0.1])
    x_new, z_new = ball.event_update(0.5, x, jnp.zeros(2), NONE, p, jnp.array([True]))
    np.testing.assert_array_equal(np.asarray(x_new), [np.finfo(float).tiny, 0.0])
    np.testing.assert_array_equal(np.asarray(z_new), [G, 0.0])
    ball.vector_field(0.0, jnp.array([1.0, 0.0]), NONE, p)  # the instance back at g = -9.81
    np.testing.assert_array_equal(
        np.asarray(ball.hybrid_vector_field(0.6, x_new, z_new, NONE, p)), [0.0, 0.0]
    )
    dz = jax.jacfwd(
        lambda g: ball.event_update(0.5, x, jnp.zeros(2), NONE, {**p, "g": g}, jnp.array([True]))[1]
    )(-G)
    np.testing.assert_allclose(np.asarray(dz), [-1.0, 0.0], rtol=0, atol=1e-9)
    only_e = FMU(BALL, parameters=["e"])
    assert only_e.discrete_state_names == ("e_event_shift",)
    with pytest.raises(
        jax.errors.JaxRuntimeError,
        match=r"FMUEventsError: .*parameter 'g'.*change of 'g' from -9\.81 to 0\.0",
    ):
        only_e.event_update(0.5, x, jnp.zeros(1), NONE, only_e.params, jnp.array([True]))
    x_ok, _ = only_e.event_update(
        0.5, jnp.array([-1e-12, -3.0]), jnp.zeros(1), NONE, only_e.params, jnp.array([True])
    )
    np.testing.assert_array_equal(np.asarray(x_ok), [np.finfo(float).tiny, 3.0 * E])


# -- what is refused -----------------------------------------------------------------------------------
def _variant(tmp_path: Path, name: str, source: Callable[[str], str]) -> Path:
    """A copy of BouncingBall.fmu with ``sources/model.c`` edited by ``source`` and compiled
    (``sources/all.c`` with fmpy's FMI 2.0 headers) into the archive's binary for this platform."""
    build = tmp_path / f"{name}-src"
    with zipfile.ZipFile(BALL) as zf:
        zf.extractall(build, [m for m in zf.namelist() if m.startswith("sources/")])
    model_c = build / "sources" / "model.c"
    original = model_c.read_text()
    edited = source(original)
    assert edited != original, "the edit matched nothing in sources/model.c"
    model_c.write_text(edited)
    headers = Path(fmpy.__file__).parent / "c-code"
    library = build / "BouncingBall.so"
    command = ["cc", "-shared", "-fPIC", "-O1", f"-I{headers}", "-o", str(library), "all.c", "-lm"]
    subprocess.run(command, cwd=build / "sources", check=True, capture_output=True, timeout=120)
    replaced = {
        "sources/model.c": edited.encode(),
        f"binaries/{fmpy.platform}/BouncingBall.so": library.read_bytes(),
    }
    target = tmp_path / f"{name}.fmu"
    with zipfile.ZipFile(BALL) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, replaced.get(item.filename, src.read(item.filename)))
    return target


needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the FMU variants")


@needs_cc
@pytest.mark.timeout(120)
def test_terminate_simulation_at_an_event_is_a_named_error(tmp_path):
    """A variant whose event update asks to terminate (``terminateSimulation`` when the rebound is below
    3.5 m/s, i.e. at the first impact) raises :class:`FMUTerminatedError` from the update."""
    variant = _variant(
        tmp_path,
        "terminates",
        lambda c: c.replace(
            "comp->terminateSimulation  = false;", "comp->terminateSimulation  = M(v) > 0 && M(v) < 3.5;"
        ),
    )
    model = FMU(variant)
    with pytest.raises(jax.errors.JaxRuntimeError, match="FMUTerminatedError: .*terminateSimulation"):
        model.event_update(
            0.5, jnp.array([-1e-12, -4.0]), jnp.zeros(2), NONE, model.params, jnp.array([True])
        )
    x_new, _ = model.event_update(
        0.5, jnp.array([-1e-12, -6.0]), jnp.zeros(2), NONE, model.params, jnp.array([True])
    )
    np.testing.assert_allclose(np.asarray(x_new), [np.finfo(float).tiny, 4.2], rtol=1e-15)


KICK = """if (comp->time > 0 && fabs(comp->time - 0.25 * floor(comp->time / 0.25 + 0.5)) < 1e-12) {
        M(v) += 1.0;
        comp->valuesOfContinuousStatesChanged = true;
    }
    comp->nextEventTimeDefined = true;
    comp->nextEventTime = 0.25 * (floor(comp->time / 0.25 + 1e-9) + 1);"""
"""A time event every 0.25 s that kicks the ball upwards by 1 m/s (the variant's event update)."""


@needs_cc
@pytest.mark.timeout(300)
def test_time_events_follow_fmpy_model_exchange(tmp_path):
    """A variant with a time event every 0.25 s (v += 1 m/s): z carries the FMU's next event time (0.25
    at the start, then what each event defines), and ``simulate_events`` gives the states of fmpy's Model
    Exchange simulation to 1e-6 and its three bounce times to 1e-6 s over 1.5 s; in a batch, only the
    points that reached the time event are handed to the FMU."""
    variant = _variant(tmp_path, "kicked", lambda c: c.replace("comp->nextEventTimeDefined = false;", KICK))
    model = FMU(variant)
    assert model.has_time_events
    assert model.discrete_state_names == ("g_event_shift", "e_event_shift", "next_event_time")
    np.testing.assert_array_equal(np.asarray(model.initial_discrete_state(model.params)), [0.0, 0.0, 0.25])
    ts = TS[TS <= 1.5 + 1e-9]
    out = fmpy.simulate_fmu(
        str(variant),
        fmi_type="ModelExchange",
        stop_time=1.5,
        output_interval=0.01,
        relative_tolerance=1e-12,
        record_events=True,
    )
    t = out["time"]
    events = t[np.flatnonzero(np.diff(t) == 0)]
    bounces = events[np.abs(events / 0.25 - np.round(events / 0.25)) > 1e-9]
    on_grid = np.flatnonzero(np.isin(np.round(t, 10), ts) & np.append(np.diff(t) != 0, True))
    traj = simulate_events(model, ts, model.start_state)
    assert int(traj.n_events) == len(bounces) == 3
    np.testing.assert_allclose(np.asarray(traj.event_times[:3]), bounces, rtol=0, atol=1e-6)
    want = np.stack([out["h"][on_grid], out["v"][on_grid]], axis=1)
    np.testing.assert_allclose(np.asarray(traj.states), want, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(traj.discrete[-1]), [0.0, 0.0, 1.75])
    # a batch of points, one not yet due (left as it is), one due and one a rounding before it (kicked)
    z, x = jnp.array([0.0, 0.0, 0.25]), jnp.array([0.5, -1.0])
    before = model.calls
    xs, zs = jax.vmap(lambda t: model.time_event_update(t, x, z, NONE, model.params))(
        jnp.array([0.1, 0.25, 0.25 - 1e-12])
    )
    assert model.calls - before == 1
    np.testing.assert_array_equal(np.asarray(xs), [[0.5, -1.0], [0.5, 0.0], [0.5, 0.0]])
    np.testing.assert_array_equal(np.asarray(zs[:, 2]), [0.25, 0.5, 0.5])


@needs_cc
@pytest.mark.timeout(120)
def test_a_time_event_defined_after_the_start_is_refused_by_name(tmp_path):
    """A variant that defines no time event at its start (so z has no slot for one) but defines one at
    its first impact is a named error from that update."""
    late = "comp->nextEventTimeDefined = comp->time > 0.3; comp->nextEventTime = comp->time + 0.25;"
    model = FMU(_variant(tmp_path, "late", lambda c: c.replace("comp->nextEventTimeDefined = false;", late)))
    assert not model.has_time_events and model.discrete_state_names == ("g_event_shift", "e_event_shift")
    with pytest.raises(jax.errors.JaxRuntimeError, match="FMUEventsError: .*nextEventTimeDefined"):
        model.event_update(
            0.5, jnp.array([-1e-12, -4.0]), jnp.zeros(2), NONE, model.params, jnp.array([True])
        )
