"""Training loop (recovery, growing horizon, exact resume from a checkpoint) and the MLP block."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer.learn import MLP, TrainSettings, apply_mlp, train, trajectory_loss
from twinfer.models import AbstractModel

TS = np.round(np.arange(0.0, 1.0 + 1e-9, 0.05), 10)


class _Decay(AbstractModel):
    """dx/dt = -k x."""

    params: dict

    def __init__(self, k):
        self.params = {"k": jnp.asarray(k)}

    state_names = property(lambda self: ("x",))
    input_names = property(lambda self: ())
    output_names = property(lambda self: ("x",))

    def vector_field(self, t, x, u, params):
        return -params["k"] * x

    def output(self, t, x, u, params):
        return x


X0 = np.array([[1.0], [2.0]])
DATA = np.exp(-2.0 * TS)[None, :, None] * X0[:, None, :]


@pytest.fixture(scope="module")
def loss():
    return trajectory_loss(_Decay(0.5), TS, X0, DATA, (1.0,), fixed_steps=1)


def test_train_recovers_parameter_and_grows_horizon(loss):
    """Claim: Adam on the horizon-masked MAE recovers k = 2 and the horizon reaches the full length."""
    settings = TrainSettings(steps=120, lr_start=0.1, lr_end=0.02, horizon_start=3, horizon_threshold=0.05)
    result = train(loss, {"k": jnp.asarray(0.5)}, ["k"], 2, len(TS), settings)
    assert abs(float(result["params"]["k"]) - 2.0) < 2e-2
    assert result["horizon"][0] <= 4 and result["horizon"][-1] == len(TS)
    assert np.all(np.diff(result["horizon"]) >= 0)


def test_forward_mode_gradient_equals_reverse_mode(loss):
    """Claim: grad_mode='forward' (one tangent per parameter) takes the same Adam steps as reverse mode."""
    kw = {"steps": 5, "lr_start": 0.05, "lr_end": 0.05, "horizon_start": 3}
    params = {"k": jnp.asarray(0.5), "unused": jnp.zeros(2)}
    rev = train(loss, params, ["k", "unused"], 2, len(TS), TrainSettings(**kw))
    for mode in ("forward", "sensitivity"):
        other = train(loss, params, ["k", "unused"], 2, len(TS), TrainSettings(**kw, grad_mode=mode))
        np.testing.assert_allclose(other["loss"], rev["loss"], rtol=1e-12)
        np.testing.assert_allclose(float(other["params"]["k"]), float(rev["params"]["k"]), rtol=1e-12)
    with pytest.raises(ValueError, match="grad_mode"):
        TrainSettings(grad_mode="sideways")
    adaptive = trajectory_loss(_Decay(0.5), TS, X0, DATA, (1.0,))
    with pytest.raises(ValueError, match="grad_mode 'sensitivity': expected a loss with value_and_grad"):
        train(adaptive, params, ["k"], 2, len(TS), TrainSettings(**kw, grad_mode="sensitivity"))


def test_sensitivity_gradient_through_bounces_equals_forward_mode():
    """Claim: loss.value_and_grad (the parameters' directions carried as a matrix through the fixed-step
    simulation, event times by the implicit function theorem) equals JAX forward mode on the same
    simulation, on a ball bouncing off walls (several events inside the horizon), to rounding."""
    from jax.flatten_util import ravel_pytree

    from twinfer.models import BouncingBall2D
    from twinfer.sim import simulate_events

    ts = np.round(np.arange(0.0, 2.0 + 1e-9, 0.02), 10)
    x0s = np.array([[0.5, 2.0, 0.3, -1.0], [-0.2, -3.0, 0.6, 0.5]])
    truth = BouncingBall2D(mu=0.15)
    data = np.stack([np.asarray(simulate_events(truth, ts, x0, fixed_steps=2).states) for x0 in x0s])
    model = BouncingBall2D(mu=0.05, g=9.0, d=0.2)
    loss = trajectory_loss(model, ts, x0s, data, (0.5, 0.1, 0.5, 0.1), fixed_steps=2)
    theta = {k: model.params[k] for k in ("mu", "g", "r", "d")}
    fixed = {"m": model.params["m"]}
    flat, unravel = ravel_pytree(theta)
    for i, horizon in ((0, len(ts)), (1, 60)):
        value, grad = jax.jit(loss.value_and_grad, static_argnums=())(theta, fixed, i, horizon)
        reference = jax.jacfwd(lambda v, i=i, h=horizon: loss(dict(fixed, **unravel(v)), i, h))(flat)
        bounces = int(simulate_events(model, ts, x0s[i], fixed_steps=2).n_events)
        assert bounces >= 3, bounces
        np.testing.assert_allclose(float(value), float(loss(model.params, i, horizon)), rtol=1e-13)
        np.testing.assert_allclose(ravel_pytree(grad)[0], reference, rtol=1e-9, atol=1e-12)


_TWO_DEVICES = """
import jax, jax.numpy as jnp, numpy as np
from twinfer.learn import TrainSettings, train, trajectory_loss
from twinfer.models import AbstractModel
import sys; sys.path.insert(0, {tests!r})
from test_learn import TS, X0, DATA, _Decay
loss = trajectory_loss(_Decay(0.5), TS, X0, DATA, (1.0,), fixed_steps=1)
params = {{"k": jnp.asarray(0.5), "unused": jnp.zeros(2)}}  # 3 tangents over 2 devices: one padded row
kw = dict(steps=8, lr_start=0.05, lr_end=0.05, horizon_start=3, horizon_threshold=0.5, grad_mode="forward")
one = train(loss, params, ["k", "unused"], 3 - 1, len(TS), TrainSettings(**kw, threads=1))
sens = dict(kw, grad_mode="sensitivity")
for name, split, base in (("DEVICES", dict(devices=0), kw), ("THREADS", dict(threads=2), kw),
                          ("SENSITIVITY", dict(threads=2), sens)):
    two = train(loss, params, ["k", "unused"], 3 - 1, len(TS), TrainSettings(**base, **split))
    gap = lambda key: float(np.max(np.abs(np.asarray(one[key]) - np.asarray(two[key]))))
    print(name, gap("loss"), gap("worst"), abs(float(one["params"]["k"]) - float(two["params"]["k"])),
          gap("horizon"), int(one["horizon"][-1]) - 3)
"""


def test_forward_mode_split_over_two_devices_or_two_threads_takes_the_same_steps():
    """Claim: devices=0 (tangents and scenarios split over 2 host devices), threads=2 (over two
    threads of one device) and the sensitivity gradient with its check over two threads take the steps
    of forward mode on one thread on one device."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from _xla import QUICK_XLA_FLAGS

    # two host devices with the suite's quick compile options (the variable set alone compiled the child's
    # programs with XLA's defaults): the runs compared are all the child's, compiled alike
    flags = " ".join(["--xla_force_host_platform_device_count=2", *QUICK_XLA_FLAGS])
    env = dict(os.environ, XLA_FLAGS=flags, JAX_ENABLE_X64="1")
    script = _TWO_DEVICES.format(tests=str(Path(__file__).parent))
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("DEVICES", "THREADS", "SENSITIVITY"):
        diffs = next(line for line in proc.stdout.splitlines() if line.startswith(name)).split()[1:]
        assert max(float(v) for v in diffs[:4]) <= 1e-12, proc.stdout
        assert int(diffs[4]) > 0, "the horizon never grew: the worst-scenario check was not exercised"
    with pytest.raises(ValueError, match="devices"):
        TrainSettings(devices=2)  # reverse mode has no tangents to split
    with pytest.raises(
        ValueError, match=r"threads: expected 0 \(every core\) or a positive count, more than 1"
    ):
        TrainSettings(threads=2, grad_mode="forward", devices=0)
    with pytest.raises(ValueError, match="threads"):
        TrainSettings(threads=2)  # reverse mode: one program


def test_mlp_matches_manual_network_and_layout():
    """Claim: the flat-parameter FFNN equals tanh(W2 tanh(W1 v + c1) + c2) with pass-through entries."""
    mlp = MLP(
        (4, 8, 2),
        ("tanh", "tanh"),
        key=jax.random.key(0),
        layout=[("in", 0), ("net", 0), ("in", 2), ("net", 1)],
    )
    theta = np.asarray(mlp.params["theta"])
    assert theta.size == 58
    w1, c1 = theta[:32].reshape(8, 4), theta[32:40]
    w2, c2 = theta[40:56].reshape(2, 8), theta[56:58]
    v = np.array([0.3, -1.0, 2.0, 0.5])
    net = np.tanh(w2 @ np.tanh(w1 @ v + c1) + c2)
    np.testing.assert_allclose(
        np.asarray(apply_mlp(mlp.params["theta"], (4, 8, 2), ("tanh", "tanh"), v)), net
    )
    out = mlp.output(0.0, jnp.zeros(0), jnp.asarray(v), mlp.params)
    np.testing.assert_allclose(np.asarray(out), [v[0], net[0], v[2], net[1]], rtol=1e-12)
    with pytest.raises(ValueError, match="activations"):
        MLP((4, 2), ("tanh", "tanh"), key=jax.random.key(0))


def test_rnn_is_a_time_event_model():
    """Claim: simulated at 20 Hz, the RNN output is the recursion h_{k+1} = NN(h_k), held between samples."""
    from twinfer.learn import RNN
    from twinfer.sim import simulate_events

    rnn = RNN(key=jax.random.key(3))
    ts = np.round(np.arange(0.0, 0.3 + 1e-9, 0.01), 10)
    x0, z0 = rnn.initial_state([-0.75, 4.0, 0.75, 0.0])
    traj = simulate_events(rnn, ts, x0, z0)
    h = [np.array([-0.75, 4.0, 0.75, 0.0])]
    for _ in range(6):
        h.append(np.asarray(apply_mlp(rnn.params["theta"], rnn.sizes, rnn.activations, jnp.asarray(h[-1]))))
    expected = np.stack([h[int(np.floor(t * 20 + 1e-9))] for t in ts])
    np.testing.assert_allclose(np.asarray(traj.outputs), expected, rtol=1e-12, atol=1e-12)


def test_rnn_bounce_rule_fires_on_leaving_the_box_only():
    """Claim: the RNN's bounce wrapper reflects an update that leaves the box (eq. 28 on h) and does not
    fire again for a state that starts on the wall (indicator 0) and moves inside."""
    from twinfer.learn import RNN
    from twinfer.models import BouncingBall2D

    rnn = RNN(key=jax.random.key(0), event_model=BouncingBall2D(mu=0.15))

    def update_to(target, h):
        theta = jnp.zeros_like(rnn.params["theta"]).at[-4:].set(jnp.asarray(target))
        z = jnp.concatenate([jnp.asarray(h), jnp.array([0.05])])
        return np.asarray(rnn.time_event_update(0.05, jnp.zeros(1), z, jnp.zeros(0), {"theta": theta})[1])

    out = update_to([-1.2, -2.0, 0.0, 0.5], [-0.8, -2.0, 0.0, 0.5])
    np.testing.assert_allclose(out, [-0.9, 1.8, 0.0, 0.5, 0.1], atol=1e-12)
    out = update_to([-0.7, 1.8, 0.0, 0.5], [-0.9, 1.8, 0.0, 0.5])
    np.testing.assert_allclose(out, [-0.7, 1.8, 0.0, 0.5, 0.1], atol=1e-12)
