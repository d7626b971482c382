"""Issue #51 item 2: base excitation of chains and shear frames, in the model library and in spec files.

Closed-form checks of the equations of motion under a moving ground (Chopra, Dynamics of Structures,
sections 1.7 and 9.4), the linear structure against Jacobians, the graph of a base-excited frame against
the whole model, and a building under a ground acceleration through ``load_spec`` / ``run_spec``.
"""

from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.signal import butter, sosfilt

from twinfer.infer.graph import Graph
from twinfer.models import Chain, ShearFrame
from twinfer.sim import discretise, simulate_dataset
from twinfer.spec import ChainModel, SpecError, load_spec, run_spec


def _solve(model, u_of_t, x0, t_end, t_eval):
    """The model's own vector field under a continuous input, solved to 1e-11 (scipy's DOP853)."""
    rhs = jax.jit(lambda t, x: model.vector_field(t, x, u_of_t(t), model.params))
    sol = solve_ivp(
        lambda t, x: np.asarray(rhs(t, jnp.asarray(x))),
        (0.0, t_end),
        np.asarray(x0, dtype=np.float64),
        method="DOP853",
        rtol=1e-11,
        atol=1e-13,
        t_eval=t_eval,
    )
    assert sol.success, sol.message
    return sol.y.T


def _lowpass(x, band):
    """``x`` through a 4th-order Butterworth low-pass at ``band`` of the Nyquist frequency."""
    return sosfilt(butter(4, band, output="sos"), x)


def _amplitude(t, y, w):
    """Amplitude of the component of ``y`` at angular frequency ``w`` (least squares on sin, cos, 1)."""
    basis = np.stack([np.sin(w * t), np.cos(w * t), np.ones_like(t)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
    return float(np.hypot(coef[0], coef[1]))


@pytest.mark.parametrize("ratio", [0.7, 1.0, 1.4])
def test_item2_single_storey_under_harmonic_ground_acceleration_has_the_closed_form_steady_state(ratio):
    """One storey, ``m u'' + c u' + k u = -m ag`` with ``ag = a0 sin(w t)`` (Chopra eq. 1.7.4, 3.2).

    In steady state the relative displacement's amplitude is ``a0 / sqrt((wn^2 - w^2)^2 + (2 z wn w)^2)``
    and the absolute acceleration's (the transmissibility) ``a0 sqrt(wn^4 + (2 z wn w)^2)`` over the same
    root: both read from the model's own state and outputs (``x1``, ``A1``) to 1e-6 relative.
    """
    m, k, c, a0 = 2.0e4, 3.0e7, 1.5e5, 2.5
    frame = ShearFrame([m], [k], [c], outputs=["x1", "A1", "a1"])
    wn, two_z_wn = np.sqrt(k / m), c / m  # zeta = 0.097: transients fall by e^-15 in 4 s
    w = ratio * wn
    t = np.linspace(4.0, 4.0 + 8 * 2 * np.pi / w, 1601)
    states = _solve(frame, lambda s: jnp.stack([a0 * jnp.sin(w * s)]), np.zeros(2), t[-1], t)
    ys = np.asarray(
        jax.vmap(lambda s, x: frame.output(s, x, jnp.stack([a0 * jnp.sin(w * s)]), frame.params))(
            jnp.asarray(t), jnp.asarray(states)
        )
    )
    root = np.hypot(wn**2 - w**2, two_z_wn * w)
    np.testing.assert_allclose(_amplitude(t, ys[:, 0], w), a0 / root, rtol=1e-6)
    np.testing.assert_allclose(
        _amplitude(t, ys[:, 1], w), a0 * np.hypot(wn**2, two_z_wn * w) / root, rtol=1e-6
    )
    # the relative acceleration: w^2 times the relative displacement
    np.testing.assert_allclose(_amplitude(t, ys[:, 2], w), w**2 * a0 / root, rtol=1e-6)


@pytest.mark.parametrize(
    ("base", "outputs"),
    [
        (None, ("a1", "x2", "v3", "a3")),
        ("acceleration", ("A1", "a2", "x3", "v1", "A3")),
        ("displacement", ("a1", "x2", "v3", "a3")),
    ],
)
def test_item2_linear_matrices_are_the_jacobians_of_vector_field_and_output(base, outputs):
    """``(A, B, C, D)`` equal the Jacobians of the vector field and outputs and reproduce them exactly.

    Checked at a random state and input, with a force at DOF 2 after the ground's inputs, for a fixed
    ground, a ground acceleration (``B``'s ``ag`` column is ``-1`` on every velocity, ``D`` has ``+1`` for
    each ``A`` output) and a ground displacement (``k1 / m1``, ``c1 / m1`` on mass 1).
    """
    chain = Chain(
        [1.0, 2.0, 1.5], [100.0, 200.0, 150.0], [1.0, 2.0, 3.0], forced_dofs=[2], outputs=outputs, base=base
    )
    assert chain.input_names == {None: (), "acceleration": ("ag",), "displacement": ("xg", "vg")}[base] + (
        "f2",
    )
    matrices = chain.linear_matrices(chain.params)
    assert matrices is not None
    a_mat, b_mat, c_mat, d_mat = matrices
    rng = np.random.default_rng(1)
    x, u = jnp.asarray(rng.normal(size=6)), jnp.asarray(rng.normal(size=chain.n_input))
    f = lambda x, u: chain.vector_field(0.0, x, u, chain.params)  # noqa: E731
    h = lambda x, u: chain.output(0.0, x, u, chain.params)  # noqa: E731
    for got, want in (
        (jax.jacfwd(f, 0)(x, u), a_mat),
        (jax.jacfwd(f, 1)(x, u), b_mat),
        (jax.jacfwd(h, 0)(x, u), c_mat),
        (jax.jacfwd(h, 1)(x, u), d_mat),
    ):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(f(x, u), a_mat @ x + b_mat @ u, rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(h(x, u), c_mat @ x + d_mat @ u, rtol=1e-13, atol=1e-12)
    if base == "acceleration":
        np.testing.assert_array_equal(np.asarray(b_mat)[3:, 0], -1.0)
    if base == "displacement":
        np.testing.assert_allclose(np.asarray(b_mat)[3, :2], [100.0, 1.0])
        np.testing.assert_array_equal(np.asarray(b_mat)[4:, :2], 0.0)


def test_item2_absolute_acceleration_is_the_relative_one_plus_the_ground_acceleration():
    """``A_i = a_i + ag`` at any state and input; ``x``/``v`` outputs stay relative (the states)."""
    frame = ShearFrame(
        [1.0, 2.0, 1.5], [100.0, 200.0, 150.0], 2.0, outputs=["a1", "A1", "a3", "A3", "x2", "v3"]
    )
    rng = np.random.default_rng(2)
    for _ in range(3):
        x, ag = jnp.asarray(rng.normal(size=6)), float(rng.normal())
        y = np.asarray(frame.output(0.0, x, jnp.asarray([ag]), frame.params))
        np.testing.assert_allclose(y[1], y[0] + ag, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(y[3], y[2] + ag, rtol=1e-14, atol=1e-14)
        np.testing.assert_array_equal(y[4:], np.asarray(x)[[1, 5]])


def test_item2_ground_displacement_and_ground_acceleration_agree_on_the_same_motion():
    """A 3-storey frame under ``xg = -a0 / w^2 sin(w t)`` (so ``ag = a0 sin(w t)``), solved both ways.

    ``base="displacement"`` (absolute states, inputs ``xg``, ``vg``) and ``base="acceleration"`` (states
    relative to the ground, input ``ag``) are the same motion: ``x_abs - xg`` equals the relative
    displacement and ``a3`` (absolute there) equals ``A3``, to the solver's tolerance.
    """
    args = ([1.0e4, 1.0e4, 0.8e4], [2.0e7, 1.8e7, 1.5e7], [2.0e4, 2.0e4, 1.0e4])
    rel = ShearFrame(*args, outputs=["A1", "A3"])
    ab = ShearFrame(*args, base="displacement", outputs=["a1", "a3"])
    a0, w = 3.0, 2.0 * np.pi * 2.3
    ag = lambda t: jnp.stack([a0 * jnp.sin(w * t)])  # noqa: E731
    ground = lambda t: jnp.stack([-a0 / w**2 * jnp.sin(w * t), -a0 / w * jnp.cos(w * t)])  # noqa: E731
    t = np.linspace(0.0, 3.0, 301)
    x_rel = _solve(rel, ag, np.zeros(6), t[-1], t)
    x_abs = _solve(ab, ground, np.r_[np.zeros(3), np.full(3, -a0 / w)], t[-1], t)  # at rest on the ground
    g = np.asarray(jax.vmap(ground)(jnp.asarray(t)))
    scale = np.abs(x_rel[:, :3]).max()
    np.testing.assert_allclose(x_abs[:, :3] - g[:, :1], x_rel[:, :3], rtol=0, atol=1e-8 * scale)
    np.testing.assert_allclose(
        x_abs[:, 3:] - g[:, 1:], x_rel[:, 3:], rtol=0, atol=1e-8 * np.abs(x_rel[:, 3:]).max()
    )
    y_rel = jax.vmap(lambda s, x: rel.output(s, x, ag(s), rel.params))(jnp.asarray(t), jnp.asarray(x_rel))
    y_abs = jax.vmap(lambda s, x: ab.output(s, x, ground(s), ab.params))(jnp.asarray(t), jnp.asarray(x_abs))
    np.testing.assert_allclose(y_abs, y_rel, rtol=0, atol=1e-7 * np.abs(np.asarray(y_rel)).max())


@pytest.mark.parametrize("base", ["acceleration", "displacement"])
def test_item2_a_base_excited_chain_cut_into_subsystems_steps_as_the_whole_chain(base):
    """``Graph.from_model`` of a base-excited chain: its monolithic step and outputs are the chain's own.

    The ground's inputs reach the subsystems they act on (``ag`` every one, ``xg``, ``vg`` the one with
    mass 1), before the forces, so the graph of 2 + 2 masses with a force at DOF 3 steps (RK4) and
    measures exactly as the whole chain (relative and absolute accelerations at both ends).
    """
    outputs = ["A1", "a2", "A4", "x3"] if base == "acceleration" else ["a1", "a4", "x2"]
    chain = Chain(
        [2.0, 1.0, 3.0, 1.5],
        [300.0, 200.0, 250.0, 150.0],
        [2.0, 1.0, 3.0, 1.0],
        forced_dofs=[3],
        outputs=outputs,
        base=base,
    )
    graph = Graph.from_model(chain, [[1, 2], [3, 4]], dt=0.01)
    subs = graph.flatten()[0]
    ground = chain.n_ground
    assert subs[0].inputs[:ground] == tuple(range(ground))
    assert (subs[1].inputs[:ground] == tuple(range(ground))) == (base == "acceleration")
    mono = graph.monolithic()
    order = np.asarray([0, 1, 4, 5, 2, 3, 6, 7])  # the subsystems' [x1, x2, v1, v2, x3, x4, v3, v4]
    rng = np.random.default_rng(3)
    step = discretise(chain, 0.01, "rk4")
    for _ in range(2):
        x, u = jnp.asarray(rng.normal(size=8)), jnp.asarray(rng.normal(size=chain.n_input))
        u_mono = jnp.asarray([0.0 if col < 0 else u[col] for col in mono.inputs])
        np.testing.assert_allclose(
            mono.transition(x[order], u_mono, jnp.zeros(0), mono.params),
            step.transition(0.0, x, u, chain.params)[order],
            rtol=1e-13,
            atol=1e-13,
        )
        np.testing.assert_allclose(
            cast(Any, mono.output)(x[order], u_mono, jnp.zeros(0), mono.params),
            chain.output(0.0, x, u, chain.params)[np.asarray(mono.outputs)],
            rtol=1e-13,
            atol=1e-12,
        )


_FRAME = """
name = "quake"

[model]
kind = "chain"
mass = [2e4, 2e4, 2e4, 2e4]
stiffness = [8e6, 7e6, 6e6, 5e6]
damping = 3e4
forced_dofs = []
outputs = ["A2", "A4"]
base = "acceleration"
"""


def test_item2_a_building_from_a_csv_with_absolute_accelerometers_through_a_spec(tmp_path):
    """A 4-storey frame under a ground acceleration, as a CSV of ``ag`` and two absolute accelerometers.

    Recorded as an acquisition system records it: the ground acceleration a continuous signal (linear
    between its samples), ``ag`` and the accelerometers read at the same instants. The truth takes 200
    steps per sample: it holds the signal over each (at the step's start), a lag of half a step that at
    20 steps biased k3 by 1-2 sd. ``[data] inputs = ["ground"]`` maps onto the input ``ag``; the central
    UKF's 95 % interval for the unknown storey stiffness k3 holds the truth (6e6 N/m, from a prior 1 sd
    below it) and the states (true columns given) are covered.
    """
    frame = ShearFrame([2e4] * 4, [8e6, 7e6, 6e6, 5e6], 3e4, outputs=["A2", "A4"])
    samples = jnp.asarray(_lowpass(np.random.default_rng(0).normal(size=301) * 5.0, 0.1))
    grid = jnp.arange(301) * 0.01
    ground = lambda t: jnp.interp(t, grid, samples)[None]  # noqa: E731
    data = simulate_dataset(frame, ground, 0.01, 0.05, jax.random.key(0), n_steps=300, oversample=200)
    states = [f"true_{s}" for s in frame.state_names]
    assert data.inputs is not None and data.truth_states is not None
    table = np.column_stack([data.times, data.inputs, data.observations, data.truth_states])
    np.savetxt(
        tmp_path / "quake.csv",
        table,
        delimiter=",",
        header=",".join(["t", "ground", "acc2", "acc4", *states]),
        comments="",
    )
    (tmp_path / "quake.toml").write_text(
        _FRAME
        + f"""
[data]
file = "quake.csv"
time = "t"
inputs = ["ground"]
outputs = ["acc2", "acc4"]
states = {states}

[estimator]
noise_sd = 0.05
state_sd = 1e-3

[unknown]
k3 = [4.5e6, 1.5e6, 0.0]
""".replace("'", '"')
    )
    spec, base = load_spec(tmp_path / "quake.toml")
    assert isinstance(spec.model, ChainModel) and spec.model.base == "acceleration"
    est, loaded, artifacts, _ = run_spec(spec, base)
    assert loaded.input_names == ("ag",)
    metrics = artifacts.metrics
    assert metrics["param.k3_low"] <= 6e6 <= metrics["param.k3_high"], metrics
    assert metrics["param.k3_sd"] < 0.01 * 6e6  # learnt from the record, not the prior's 5e6
    assert metrics["state.coverage95"] > 0.85, metrics


def test_item2_a_simulated_frame_under_a_ground_displacement_through_a_spec(tmp_path):
    """``[simulate]`` of a ``base = "displacement"`` frame: a band-limited ``xg`` of ``ground_sd`` and its
    derivative ``vg``, recorded as the inputs; the unknown's interval holds the truth."""
    body = (
        _FRAME.replace('["A2", "A4"]', '["a2", "a4"]').replace('"acceleration"', '"displacement"')
        + """
[simulate]
duration = 2.0
dt = 0.01
noise_sd = 0.05
ground_sd = 0.01
force_band = 0.2

[estimator]
state_sd = 1e-3

[unknown]
k3 = [4.5e6, 1.5e6, 0.0]
"""
    )
    (tmp_path / "shake.toml").write_text(body)
    spec, base = load_spec(tmp_path / "shake.toml")
    est, data, artifacts, _ = run_spec(spec, base)
    assert data.input_names == ("xg", "vg")
    xg, vg = np.asarray(data.inputs).T
    np.testing.assert_allclose(vg[1:-1], (xg[2:] - xg[:-2]) / 0.02, rtol=1e-12)  # vg: xg's derivative
    assert np.std(xg) > 1e-3
    metrics = artifacts.metrics
    assert metrics["param.k3_low"] <= 6e6 <= metrics["param.k3_high"], metrics


def test_item2_named_errors_for_absolute_outputs_without_a_ground_and_the_ground_input_column(tmp_path):
    """``A3`` without ``base="acceleration"`` is refused, from Python and from a spec, naming the output
    and the base; a spec whose ``[data] inputs`` leave out the ground's column names ``ag`` and the fix."""
    with pytest.raises(ValueError, match=r"'A3'.*expected base='acceleration'.*received base=None"):
        Chain([1.0, 1.0, 1.0], 1.0, 1.0, outputs=["a1", "A3"])
    with pytest.raises(ValueError, match=r"'A1'.*received base='displacement'.*name it 'a1'"):
        ShearFrame([1.0], [1.0], [1.0], base="displacement", outputs=["A1"])
    with pytest.raises(ValueError, match=r"Chain base: expected None or one of .*received 'ground'"):
        Chain([1.0], 1.0, 1.0, base="ground")
    data = '\n[data]\nfile = "x.csv"\ntime = "t"\ninputs = ["ground"]\noutputs = ["a", "b"]\n'
    data += "[estimator]\nnoise_sd = 0.1\n"
    (tmp_path / "a.toml").write_text(_FRAME.replace('\nbase = "acceleration"', "") + data)
    with pytest.raises(
        SpecError, match=r"model\.outputs: \['A2', 'A4'\].*base = \"acceleration\".*received base = None"
    ):
        load_spec(tmp_path / "a.toml")
    (tmp_path / "b.toml").write_text(_FRAME.replace("forced_dofs = []\n", "") + data)
    with pytest.raises(
        SpecError,
        match=r"data\.inputs: expected 5 input columns \(the ground's ag, then one per forced DOF "
        r"\[1, 2, 3, 4\], in order\) \(forced_dofs = \[\] for the ground motion alone\); "
        r"received 1 \['ground'\]",
    ):
        load_spec(tmp_path / "b.toml")
