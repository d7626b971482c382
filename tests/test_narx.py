"""NARX surrogate: windows, statistics, physical-unit calls, rolling buffer, training, resume, errors."""

import dataclasses
from types import SimpleNamespace

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from twinfer import metrics as M
from twinfer.checkpoint import Checkpoint, CheckpointError
from twinfer.learn import NARX, NarxConfig, fit_narx, narx_metrics, narx_windows

# a setting the NARX represents: y(k+1) = 0.8 y(k) + 0.3 u(k) - 0.1 u(k-1) + c, dynamic [u, y], static [c]
CONFIG = NarxConfig(
    lags=5, hidden=32, dropout=0.0, learning_rate=3e-3, batch_size=32, max_epochs=80, patience=80, stride=2
)


def _linear_scenario(rng, samples=300):
    u, c = rng.normal(size=samples), rng.uniform(-0.2, 0.2)
    y = np.zeros(samples)
    for k in range(samples - 1):
        y[k + 1] = 0.8 * y[k] + 0.3 * u[k] - 0.1 * (u[k - 1] if k else 0.0) + c
    return np.stack([u, y], axis=1), np.array([c]), y


@pytest.fixture(scope="module")
def scenarios():
    rng = np.random.default_rng(0)
    return [_linear_scenario(rng) for _ in range(12)]


@pytest.fixture(scope="module")
def fitted(scenarios):
    return fit_narx(scenarios, CONFIG)


def _windows(scenarios, indices, config):
    parts = [narx_windows(*scenarios[i], config.lags, config.stride) for i in indices]
    return tuple(np.concatenate([p[j] for p in parts]) for j in range(3))


def _leaves(model):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(model.layers)]


# -- metrics added for the NARX ---------------------------------------------------------------------
def test_mse_mae_hand_computed():
    """Errors [1, -2, 3]: MSE 14/3, MAE 2; per column along an axis; angles wrapped; RMSE**2 = MSE."""
    est, truth = np.array([1.0, -2.0, 3.0]), np.zeros(3)
    assert M.mse(est, truth) == pytest.approx(14 / 3)
    assert M.mae(est, truth) == pytest.approx(2.0)
    assert M.mse(est, truth) == pytest.approx(M.rmse(est, truth) ** 2)
    np.testing.assert_allclose(M.mae(np.array([[1.0, 2.0], [-3.0, 4.0]]), np.zeros((2, 2)), axis=0), [2, 3])
    assert M.mae([np.pi - 0.01], [-np.pi + 0.01], period=2 * np.pi) == pytest.approx(0.02)
    with pytest.raises(ValueError, match=r"mae: expected estimate and truth to have the same shape"):
        M.mae([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"mse: expected finite truth; received nan at index \(1,\)"):
        M.mse([1.0, 2.0], [1.0, np.nan])


# -- windows ----------------------------------------------------------------------------------------
def test_narx_windows_hand_built():
    """Windows end at k inclusive (k = L-1, L-1+stride, ...), target y(k+1); rows flatten interleaved."""
    k = np.arange(7.0)
    dynamic, static, target = np.stack([10 + k, 20 + k], axis=1), np.array([5.0, 6.0]), 100 + k
    windows, statics, targets = narx_windows(dynamic, static, target, lags=3, stride=2)
    expected = np.array([[[10, 20], [11, 21], [12, 22]], [[12, 22], [13, 23], [14, 24]]], dtype=float)
    np.testing.assert_array_equal(windows, expected)
    np.testing.assert_array_equal(windows[0].reshape(-1), [10, 20, 11, 21, 12, 22])
    np.testing.assert_array_equal(statics, [[5, 6], [5, 6]])
    np.testing.assert_array_equal(targets, [103, 105])
    windows, _, targets = narx_windows(dynamic, static, target, lags=3, stride=1)
    assert windows.shape == (4, 3, 2) and windows.dtype == np.float64
    np.testing.assert_array_equal(windows[-1, :, 0], [13, 14, 15])
    np.testing.assert_array_equal(targets, [103, 104, 105, 106])
    windows, _, targets = narx_windows(dynamic[:4], static, target[:4], lags=3, stride=5)
    assert windows.shape == (1, 3, 2) and targets.tolist() == [103]


# -- the model --------------------------------------------------------------------------------------
def test_statistics_from_training_split_only(fitted, scenarios):
    """Per-column mean and std (+ std_floor) of the training scenarios' samples, not of all scenarios."""
    model, train = fitted.model, fitted.splits["train"]
    assert sorted(train + fitted.splits["validation"] + fitted.splits["test"]) == list(range(12))
    assert (len(train), len(fitted.splits["validation"]), len(fitted.splits["test"])) == (8, 2, 2)
    dyn = np.concatenate([scenarios[i][0] for i in train])
    stat = np.concatenate([np.repeat(scenarios[i][1][None], len(scenarios[i][2]), 0) for i in train])
    y = np.concatenate([scenarios[i][2] for i in train])
    floor = CONFIG.std_floor
    np.testing.assert_allclose(model.dynamic_mean, dyn.mean(0), rtol=1e-12)
    np.testing.assert_allclose(model.dynamic_std, dyn.std(0) + floor, rtol=1e-12)
    np.testing.assert_allclose(model.static_mean, stat.mean(0), rtol=1e-12)
    np.testing.assert_allclose(model.static_std, stat.std(0) + floor, rtol=1e-12)
    np.testing.assert_allclose(model.target_mean, y.mean(), rtol=1e-12)
    np.testing.assert_allclose(model.target_std, y.std() + floor, rtol=1e-12)
    everything = np.concatenate([s[2] for s in scenarios])
    assert abs(float(model.target_mean) - everything.mean()) > 1e-6


def test_call_is_the_normalised_mlp_in_physical_units(fitted, scenarios):
    """model(window, static) = tstd * MLP(z-scored interleaved window, z-scored static) + tmean."""
    model = fitted.model
    window, static, _ = narx_windows(*scenarios[0], CONFIG.lags, CONFIG.stride)
    w, s = window[3], static[3]
    v = np.concatenate(
        [
            ((w - model.dynamic_mean) / model.dynamic_std).reshape(-1),
            (s - model.static_mean) / model.static_std,
        ]
    )
    (w1, b1), (w2, b2), (w3, b3) = [
        (np.asarray(layer.weight), np.asarray(layer.bias)) for layer in model.layers
    ]
    h = np.maximum(w2 @ np.maximum(w1 @ v + b1, 0) + b2, 0)
    expected = (w3 @ h + b3)[0] * float(model.target_std) + float(model.target_mean)
    assert model.layers[0].weight.shape == (32, 5 * 2 + 1) and model.layers[0].weight.dtype == jnp.float64
    assert float(model(w, s)) == pytest.approx(expected, rel=1e-12)
    assert float(jax.jit(lambda m, w, s: m(w, s))(model, w, s)) == pytest.approx(expected, rel=1e-12)


def test_dropout_only_with_key_and_inference_off():
    """Dropout acts only for inference=False with a key; no static columns is allowed."""
    model = NARX(4, 2, 0, hidden=16, dropout=0.5, key=jax.random.key(1))
    w, s, k = jnp.linspace(-1.0, 1.0, 8).reshape(4, 2), jnp.zeros(0), jax.random.key(2)
    base = float(model(w, s))
    assert float(model(w, s, key=k)) == base
    assert float(model(w, s, inference=False)) == base
    assert float(model(w, s, key=k, inference=False)) != base
    with pytest.raises(ValueError, match=r"NARX window: expected shape \(lags, n_dynamic\) = \(4, 2\); "):
        model(w[:3], s)


def test_rolling_buffer_matches_training_windows(scenarios):
    """initial_buffer then push gives, at sample k, the left-padded window ending at k (jit-safe)."""
    model = NARX(3, 2, 1, hidden=8, key=jax.random.key(0))
    first = jnp.array([1.0, 2.0])
    buffer = model.initial_buffer(first)
    np.testing.assert_array_equal(buffer, [[1, 2], [1, 2], [1, 2]])
    buffer = jax.jit(NARX.push)(buffer, jnp.array([3.0, 4.0]))
    np.testing.assert_array_equal(buffer, [[1, 2], [1, 2], [3, 4]])
    np.testing.assert_array_equal(model.push(buffer, jnp.array([5.0, 6.0])), [[1, 2], [3, 4], [5, 6]])
    dynamic, static, target = scenarios[0]
    windows, _, _ = narx_windows(dynamic, static, target, 3, 1)

    def step(buf, sample):
        buf = NARX.push(buf, sample)
        return buf, buf

    _, buffers = jax.lax.scan(step, model.initial_buffer(dynamic[0]), jnp.asarray(dynamic[1:]))
    np.testing.assert_array_equal(buffers[1 : 1 + len(windows)], windows)  # buffer at k = 2, 3, ...
    np.testing.assert_array_equal(buffers[0], [dynamic[0], dynamic[0], dynamic[1]])
    other = NARX(3, 2, 1, hidden=8, key=jax.random.key(1))

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def filter_step(m, buf, sample, static):
        buf = NARX.push(buf, sample)
        return buf, m(buf, static)

    for m in (model, other, model):  # another model of the same shapes reuses the compiled step
        buf, prediction = filter_step(m, buffer, jnp.array([7.0, 8.0]), jnp.array([0.1]))
        assert float(prediction) == pytest.approx(float(m(buf, jnp.array([0.1]))), rel=1e-12)
    with pytest.raises(ValueError, match=r"NARX.push sample: expected shape \(2,\)"):
        NARX.push(buffer, jnp.zeros(3))
    with pytest.raises(ValueError, match=r"NARX.initial_buffer first_sample: expected shape \(2,\)"):
        model.initial_buffer(jnp.zeros(1))


# -- training ---------------------------------------------------------------------------------------
def test_training_recovers_a_representable_system(fitted, scenarios):
    """Claim: on held-out scenarios the one-step RMSE is < 5 % of the target's std; untrained it is not."""
    windows, statics, targets = _windows(scenarios, fitted.splits["test"], CONFIG)
    assert fitted.test == pytest.approx(narx_metrics(fitted.model, windows, statics, targets), rel=1e-12)
    assert fitted.test["rmse"] < 0.05 * targets.std()
    untrained = eqx.tree_at(
        lambda m: m.layers, fitted.model, NARX(5, 2, 1, hidden=32, key=jax.random.key(9)).layers
    )
    assert narx_metrics(untrained, windows, statics, targets)["rmse"] > 0.05 * targets.std()
    test, std = fitted.test, float(fitted.model.target_std)
    assert test["rmse"] == pytest.approx(np.sqrt(test["mse"])) and test["mae"] <= test["rmse"]
    assert test["rmse_normalised"] == pytest.approx(test["rmse"] / std, rel=1e-9)
    assert test["mse_normalised"] == pytest.approx(test["mse"] / std**2, rel=1e-9)
    assert test["mae_normalised"] == pytest.approx(test["mae"] / std, rel=1e-9)
    history = fitted.history
    assert history["train"].shape == history["validation"].shape == (CONFIG.max_epochs,)
    assert history["validation"][-1] < 0.01 * history["validation"][0]
    assert history["validation"][fitted.best_epoch - 1] == history["validation"].min()
    assert not fitted.stopped_early and fitted.epochs == CONFIG.max_epochs


def test_best_model_is_kept(fitted, scenarios):
    """The returned model's validation MSE (normalised) is the history's minimum, not the last epoch's."""
    windows, statics, targets = _windows(scenarios, fitted.splits["validation"], CONFIG)
    val = narx_metrics(fitted.model, windows, statics, targets)["mse_normalised"]
    assert val == pytest.approx(fitted.history["validation"][fitted.best_epoch - 1], rel=1e-9)


def test_same_seed_same_weights_other_seed_other_weights(fitted, scenarios):
    """Training is a function of the key and the data: repeated bit for bit, changed by another seed."""
    again = fit_narx(scenarios, CONFIG)
    for a, b in zip(_leaves(fitted.model), _leaves(again.model), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fitted.history["validation"], again.history["validation"])
    other = fit_narx(scenarios, dataclasses.replace(CONFIG, seed=1, max_epochs=2))
    assert not np.array_equal(_leaves(fitted.model)[0], _leaves(other.model)[0])
    short = dataclasses.replace(CONFIG, max_epochs=2)
    keyed = fit_narx(scenarios, short, key=jax.random.key(0))
    assert keyed.splits == fitted.splits  # the default key is jax.random.key(seed)
    objects = [SimpleNamespace(dynamic=d, static=s, target=y) for d, s, y in scenarios]
    as_objects = fit_narx(objects, short)
    for a, b in zip(_leaves(keyed.model), _leaves(as_objects.model), strict=True):
        np.testing.assert_array_equal(a, b)


def test_early_stopping_on_an_unlearnable_target():
    """Claim: on targets of pure noise the validation MSE stops improving and training stops after
    ``patience`` epochs, keeping the best epoch's model."""
    rng = np.random.default_rng(3)
    data = [(rng.normal(size=(60, 1)), np.zeros(1), rng.normal(size=60)) for _ in range(6)]
    config = NarxConfig(
        lags=8,
        hidden=32,
        dropout=0.0,
        learning_rate=2e-2,
        batch_size=16,
        max_epochs=300,
        patience=4,
        stride=1,
    )
    lines = []
    fit = fit_narx(data, config, log=lines.append)
    assert fit.stopped_early and fit.epochs == fit.best_epoch + config.patience < config.max_epochs
    assert fit.history["validation"][fit.best_epoch - 1] == fit.history["validation"].min()
    assert lines[-1].startswith(f"narx epoch {fit.epochs}/300: train ")


def test_checkpoint_resume_matches_uninterrupted_run(tmp_path, scenarios):
    """Claim: 3 epochs with a checkpoint, resumed to 6, end exactly where 6 uninterrupted epochs end."""
    config = dataclasses.replace(CONFIG, max_epochs=6, checkpoint_every=2, progress_every=2)
    calls = []
    full = fit_narx(scenarios, config, progress=lambda *a: calls.append(a))
    assert calls == [("narx", 2, 6), ("narx", 4, 6), ("narx", 6, 6)]
    ckpt = Checkpoint(tmp_path / "narx.ckpt", {"case": "test"})
    first = fit_narx(scenarios, dataclasses.replace(config, max_epochs=3), checkpoint=ckpt)
    assert first.epochs == 3
    resumed = fit_narx(scenarios, config, checkpoint=dataclasses.replace(ckpt, resume=True))
    assert resumed.epochs == 6 and resumed.best_epoch == full.best_epoch
    np.testing.assert_array_equal(resumed.history["train"], full.history["train"])
    np.testing.assert_array_equal(resumed.history["validation"], full.history["validation"])
    for a, b in zip(_leaves(full.model), _leaves(resumed.model), strict=True):
        np.testing.assert_array_equal(a, b)
    assert resumed.test == full.test


def test_checkpoint_of_other_data_config_or_key_is_refused(tmp_path, scenarios):
    """A checkpoint is never resumed by another training; a fresh run does not overwrite one."""
    config = dataclasses.replace(CONFIG, max_epochs=1)
    ckpt = Checkpoint(tmp_path / "narx.ckpt", {"case": "test"}, resume=True)
    fit_narx(scenarios, config, checkpoint=ckpt)
    changed = [(d.copy(), s, y) for d, s, y in scenarios]
    changed[4][0][10, 0] += 1e-9
    with pytest.raises(CheckpointError, match=r"fingerprint differs in narx_data"):
        fit_narx(changed, config, checkpoint=ckpt)
    with pytest.raises(CheckpointError, match=r"fingerprint differs in narx_config"):
        fit_narx(scenarios, dataclasses.replace(config, learning_rate=1e-3), checkpoint=ckpt)
    with pytest.raises(CheckpointError, match=r"fingerprint differs in narx_key"):
        fit_narx(scenarios, config, key=jax.random.key(5), checkpoint=ckpt)
    with pytest.raises(CheckpointError, match=r"resume was not asked for"):
        fit_narx(scenarios, config, checkpoint=dataclasses.replace(ckpt, resume=False))


# -- bad input --------------------------------------------------------------------------------------
def test_bad_scenarios_name_the_field(scenarios):
    config = dataclasses.replace(CONFIG, max_epochs=1)
    good = list(scenarios[:3])
    d, s, y = good[1]
    with pytest.raises(
        ValueError, match=r"fit_narx scenarios\[1\]\.target: expected 300 samples \(the rows "
    ):
        fit_narx([good[0], (d, s, y[:-1]), good[2]], config)
    with pytest.raises(ValueError, match=r"scenarios\[2\]\.dynamic: expected at least lags \+ 1 = 6 samples"):
        fit_narx([good[0], good[1], (d[:5], s, y[:5])], config)
    with pytest.raises(ValueError, match=r"scenarios\[0\]\.static: expected finite values; received nan"):
        fit_narx([(d, np.array([np.nan]), y), good[1], good[2]], config)
    bad = d.copy()
    bad[7, 1] = np.inf
    with pytest.raises(ValueError, match=r"scenarios\[1\]\.dynamic: expected finite .* index \(7, 1\)"):
        fit_narx([good[0], (bad, s, y), good[2]], config)
    with pytest.raises(ValueError, match=r"scenarios\[2\]: expected 2 dynamic and 1 static columns"):
        fit_narx([good[0], good[1], (d[:, :1], s, y)], config)
    with pytest.raises(
        ValueError, match=r"scenarios\[0\]\.dynamic: expected a float64 array; received dtype"
    ):
        fit_narx([(d.astype(np.float32), s, y), good[1], good[2]], config)
    with pytest.raises(ValueError, match=r"expected at least one scenario in each .* received 2 scenario"):
        fit_narx(good[:2], config)
    with pytest.raises(ValueError, match=r"narx_windows target: expected 300 samples"):
        narx_windows(d, s, y[:10], 5, 1)
    with pytest.raises(ValueError, match=r"narx_windows stride: expected an integer >= 1; received 0"):
        narx_windows(d, s, y, 5, 0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lags": 0}, r"NarxConfig lags: expected an integer >= 1; received 0"),
        ({"dropout": 1.0}, r"NarxConfig dropout: expected a rate in \[0, 1\); received 1.0"),
        ({"split": (0.7, 0.2, 0.2)}, r"NarxConfig split: expected three fractions > 0 .* received \(0.7"),
        ({"learning_rate": -1e-4}, r"NarxConfig learning_rate: expected a finite value > 0"),
        ({"std_floor": 0.0}, r"NarxConfig std_floor: expected a finite value > 0"),
    ],
)
def test_config_errors_name_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        NarxConfig(**change)
    assert NarxConfig().lags == 200 and NarxConfig().split == (0.70, 0.15, 0.15)
