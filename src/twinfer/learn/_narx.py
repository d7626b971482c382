"""A NARX one-step predictor: windows of past inputs and outputs in, the next output out.

The generic NARX form is ``y_{n+1} = F(y_n^(n_y), u_n^(n_u), eta)`` (SI (S16)); the compositional paper
replaces the hydraulic subsystem of the turbine by ``h(t+dt) = f_theta(u_dyn(t), u_stat)`` with a window
of ``L = 200`` samples of two dynamic columns (``x_n``, ``q``) and four static ones (``T_e``, ``T_q``,
``y_r``, ``h0``) (SI (S106)). Here any number of dynamic and static columns and any lag ``L`` are allowed;
:class:`NarxConfig` defaults to the paper's hydraulic configuration (specs 2.5).

The model is a three-layer MLP on z-scored inputs and target, holding its own statistics, so it is called
in physical units. The dynamic window ``(L, n_dyn)`` is flattened row-major, so the dynamic columns are
interleaved, ``x_n(k-L+1), q(k-L+1), x_n(k-L+2), ...``, as the authors' code does; the static columns
follow. :func:`fit_narx` splits the scenarios 70/15/15, trains with AdamW on the normalised MSE in
mini-batches (one jitted :func:`jax.lax.scan` per epoch) and stops early on the validation MSE.

Window alignment (specs 7, decision 18): the authors train on samples ``[t-L, t)`` with the target at
``t+1`` (two steps past the window's end), but their online rolling buffer includes the current sample.
We train and predict with the online alignment: the window ends at sample ``k`` inclusive and the target
is ``y(k+1)``, so the trained model is used exactly as it was fitted.

References:
    Ghorbani & Hackl, SI eq. (S16) (NARX form), (S106) (hydraulic surrogate), Fig. S11 (test metrics);
    specs/compositional-inference.md 2.5 and 7 (decision 18).

"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from twinfer import metrics
from twinfer.checkpoint import Checkpoint, Snapshot, array_digest, as_checkpoint, digest

Progress = Callable[[str, float, float], None]
"""``progress(stage, completed, total)``: the CLI turns it into a progress bar."""

_KIND = "learn-narx"


# -- configuration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class NarxConfig:
    """Settings of :func:`fit_narx`; the defaults are the paper's hydraulic surrogate (SI (S106)).

    Attributes:
        lags: window length ``L`` in samples (200).
        hidden: width of both hidden layers (128).
        dropout: dropout rate after the first hidden layer (0.05).
        learning_rate: AdamW step (1e-4).
        weight_decay: AdamW decoupled weight decay (1e-6).
        batch_size: windows per mini-batch (64); the last batch of an epoch may be smaller.
        max_epochs: most epochs (650).
        patience: epochs without a lower validation MSE before stopping (137).
        stride: samples between consecutive windows' last samples (20).
        split: train, validation and test fractions of the scenarios (0.70, 0.15, 0.15).
        std_floor: added to every standard deviation of the z-scores (1e-6, the authors' value).
        seed: seed of the default key (split, initialisation, shuffling, dropout).
        progress_every: epochs between progress reports.
        checkpoint_every: epochs between checkpoints (one is also written when training ends).

    References:
        specs/compositional-inference.md 2.5 (training settings).

    """

    lags: int = 200
    hidden: int = 128
    dropout: float = 0.05
    learning_rate: float = 1e-4
    weight_decay: float = 1e-6
    batch_size: int = 64
    max_epochs: int = 650
    patience: int = 137
    stride: int = 20
    split: tuple[float, float, float] = (0.70, 0.15, 0.15)
    std_floor: float = 1e-6
    seed: int = 0
    progress_every: int = 10
    checkpoint_every: int = 10

    def __post_init__(self) -> None:
        for name in ("lags", "hidden", "batch_size", "max_epochs", "patience", "stride"):
            _positive_int(getattr(self, name), f"NarxConfig {name}")
        for name in ("progress_every", "checkpoint_every"):
            _positive_int(getattr(self, name), f"NarxConfig {name}")
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ValueError(f"NarxConfig seed: expected an integer in [0, 2**63); received {seed!r}.")
        if not (_real(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"NarxConfig dropout: expected a rate in [0, 1); received {self.dropout!r}.")
        if not (_real(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(
                f"NarxConfig learning_rate: expected a finite value > 0; received {self.learning_rate!r}."
            )
        if not (_real(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(
                f"NarxConfig weight_decay: expected a finite value >= 0; received {self.weight_decay!r}."
            )
        if not (_real(self.std_floor) and self.std_floor > 0):
            raise ValueError(
                f"NarxConfig std_floor: expected a finite value > 0 (it keeps a constant column's z-score "
                f"finite); received {self.std_floor!r}."
            )
        split = self.split
        if (
            not isinstance(split, tuple)
            or len(split) != 3
            or not all(_real(f) and f > 0 for f in split)
            or abs(sum(split) - 1.0) > 1e-9
        ):
            raise ValueError(
                "NarxConfig split: expected three fractions > 0 (train, validation, test) summing to 1, "
                f"e.g. (0.70, 0.15, 0.15); received {split!r}."
            )


def _positive_int(value: Any, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field}: expected an integer >= 1; received {value!r}.")


def _real(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


# -- windows ------------------------------------------------------------------------------------
def _float64(value: Any, field: str, ndim: int) -> np.ndarray:
    """``value`` as a float64 array of ``ndim`` dimensions with finite entries, or a named error."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{field}: expected a rectangular real array; received {error}.") from None
    if array.dtype.kind == "f" and array.dtype != np.float64:
        raise ValueError(
            f"{field}: expected a float64 array; received dtype {array.dtype} (its lost digits cannot be "
            "recovered; produce the data in float64)."
        )
    if array.dtype.kind not in "fiu":
        raise ValueError(f"{field}: expected a real float64 array; received dtype {array.dtype}.")
    if array.ndim != ndim:
        raise ValueError(f"{field}: expected a {ndim}-D array; received shape {array.shape}.")
    array = array.astype(np.float64)
    bad = ~np.isfinite(array)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{field}: expected finite values; received {array[index]} at index {index}.")
    return array


def _scenario(
    dynamic: Any, static: Any, target: Any, lags: int, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One checked scenario: dynamic (T, n_dyn), static (n_stat,), target (T,) with T >= lags + 1."""
    d = _float64(dynamic, f"{where}dynamic", 2)
    s = _float64(static, f"{where}static", 1)
    y = _float64(target, f"{where}target", 1)
    if d.shape[1] < 1:
        raise ValueError(f"{where}dynamic: expected at least one column; received shape {d.shape}.")
    if y.shape[0] != d.shape[0]:
        raise ValueError(
            f"{where}target: expected {d.shape[0]} samples (the rows of dynamic); received {y.shape[0]}."
        )
    if d.shape[0] < lags + 1:
        raise ValueError(
            f"{where}dynamic: expected at least lags + 1 = {lags + 1} samples (one window and its "
            f"next-step target); received {d.shape[0]}."
        )
    return d, s, y


def narx_windows(
    dynamic: Any, static: Any, target: Any, lags: int, stride: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The training windows of one scenario: samples ``k-L+1..k`` (inclusive) and the target ``y(k+1)``.

    The last samples ``k`` of the windows are ``L-1, L-1+stride, ...`` up to ``T-2`` (the last one whose
    next sample exists). This is the alignment of the online rolling buffer (see the module docstring;
    the authors' training windows ended one sample earlier).

    Args:
        dynamic: ``(T, n_dyn)`` dynamic inputs (for the turbine ``[x_n, q]``).
        static: ``(n_stat,)`` static inputs of the scenario (for the turbine ``[T_e, T_q, y_r, h0]``).
        target: ``(T,)`` the predicted output (for the turbine ``h``).
        lags: window length ``L`` (>= 1).
        stride: samples between consecutive windows (>= 1).

    Returns:
        ``(windows, statics, targets)`` of shapes ``(N, L, n_dyn)``, ``(N, n_stat)``, ``(N,)``; a window
        flattened row-major interleaves the dynamic columns, as the model reads it.

    Raises:
        ValueError: non-finite or float32 data, ``target`` not of the length of ``dynamic``, fewer than
            ``lags + 1`` samples, or ``lags`` / ``stride`` below 1 (the message names the field).

    References:
        Ghorbani & Hackl, SI eq. (S16), (S106); specs/compositional-inference.md 2.5 and 7 (decision 18).

    """
    _positive_int(lags, "narx_windows lags")
    _positive_int(stride, "narx_windows stride")
    d, s, y = _scenario(dynamic, static, target, lags, "narx_windows ")
    last = np.arange(lags - 1, d.shape[0] - 1, stride)
    rows = last[:, None] + np.arange(1 - lags, 1)[None, :]
    return d[rows], np.broadcast_to(s, (last.size, s.size)).copy(), y[last + 1]


# -- the model ----------------------------------------------------------------------------------
Layers = tuple[eqx.nn.Linear, eqx.nn.Linear, eqx.nn.Linear]


def _forward(layers: Layers, dropout: float, v: Array, key: Any) -> Array:
    """The MLP on one normalised input: Linear-ReLU-Dropout-Linear-ReLU-Linear (SI (S106)).

    Dropout acts only when ``key`` is given.
    """
    first, second, last = layers
    h = jax.nn.relu(first(v))
    h = eqx.nn.Dropout(dropout)(h, key=key, inference=key is None)
    h = jax.nn.relu(second(h))
    return last(h)[0]


def _init_layers(width: int, hidden: int, key: Any) -> Layers:
    """The three layers, uniform in ``+-1/sqrt(fan_in)``."""
    k1, k2, k3 = jax.random.split(key, 3)
    return (
        eqx.nn.Linear(width, hidden, dtype=jnp.float64, key=k1),
        eqx.nn.Linear(hidden, hidden, dtype=jnp.float64, key=k2),
        eqx.nn.Linear(hidden, 1, dtype=jnp.float64, key=k3),
    )


class NARX(eqx.Module):
    """The NARX one-step predictor ``y(k+1) = f(window of L dynamic samples ending at k, static)``.

    An MLP ``Linear(L n_dyn + n_stat, hidden) - ReLU - Dropout - Linear(hidden, hidden) - ReLU -
    Linear(hidden, 1)`` in float64 on z-scored inputs, whose output is un-z-scored with the target's
    statistics, so :meth:`__call__` takes and returns physical units. The statistics are per dynamic
    column, per static column and of the target (mean and std + floor, from the training split).
    Weights and biases start uniform in ``+-1/sqrt(fan_in)`` (equinox's default, as PyTorch's).

    Args:
        lags: window length ``L``.
        n_dynamic: dynamic columns (2 for the turbine: ``x_n``, ``q``).
        n_static: static columns (4 for the turbine: ``T_e``, ``T_q``, ``y_r``, ``h0``; 0 allowed).
        hidden: width of the hidden layers.
        dropout: dropout rate after the first hidden layer.
        key: PRNG key of the initialisation.
        dynamic_mean, dynamic_std: ``(n_dynamic,)`` statistics (default 0 and 1).
        static_mean, static_std: ``(n_static,)`` statistics (default 0 and 1).
        target_mean, target_std: scalar statistics of the target (default 0 and 1).

    References:
        Ghorbani & Hackl, SI eq. (S16), (S106); specs/compositional-inference.md 2.5.

    """

    layers: Layers
    dynamic_mean: Float[Array, " dynamic"]
    dynamic_std: Float[Array, " dynamic"]
    static_mean: Float[Array, " static"]
    static_std: Float[Array, " static"]
    target_mean: Float[Array, ""]
    target_std: Float[Array, ""]
    lags: int = eqx.field(static=True)
    dropout: float = eqx.field(static=True)

    def __init__(
        self,
        lags: int,
        n_dynamic: int,
        n_static: int,
        *,
        hidden: int = 128,
        dropout: float = 0.05,
        key: Any,
        dynamic_mean: Any = None,
        dynamic_std: Any = None,
        static_mean: Any = None,
        static_std: Any = None,
        target_mean: Any = 0.0,
        target_std: Any = 1.0,
    ):
        _positive_int(lags, "NARX lags")
        _positive_int(n_dynamic, "NARX n_dynamic")
        _positive_int(hidden, "NARX hidden")
        if isinstance(n_static, bool) or not isinstance(n_static, int) or n_static < 0:
            raise ValueError(f"NARX n_static: expected an integer >= 0; received {n_static!r}.")
        if not (_real(dropout) and 0.0 <= dropout < 1.0):
            raise ValueError(f"NARX dropout: expected a rate in [0, 1); received {dropout!r}.")
        self.layers = _init_layers(lags * n_dynamic + n_static, hidden, key)
        f64 = jnp.float64

        def stat(value: Any, fill: float, shape: tuple[int, ...], name: str, positive: bool) -> Array:
            a = np.full(shape, fill) if value is None else np.asarray(value, dtype=np.float64)
            if a.shape != shape or not np.all(np.isfinite(a)) or (positive and np.any(a <= 0)):
                need = "finite and > 0" if positive else "finite"
                raise ValueError(f"NARX {name}: expected shape {shape}, {need}; received {a.tolist()!r}.")
            return jnp.asarray(a, dtype=f64)

        self.dynamic_mean = stat(dynamic_mean, 0.0, (n_dynamic,), "dynamic_mean", False)
        self.dynamic_std = stat(dynamic_std, 1.0, (n_dynamic,), "dynamic_std", True)
        self.static_mean = stat(static_mean, 0.0, (n_static,), "static_mean", False)
        self.static_std = stat(static_std, 1.0, (n_static,), "static_std", True)
        self.target_mean = stat(target_mean, 0.0, (), "target_mean", False)
        self.target_std = stat(target_std, 1.0, (), "target_std", True)
        self.lags, self.dropout = lags, float(dropout)

    @property
    def n_dynamic(self) -> int:
        """Number of dynamic columns."""
        return self.dynamic_mean.shape[0]

    @property
    def n_static(self) -> int:
        """Number of static columns."""
        return self.static_mean.shape[0]

    def normalise(self, window: Array, static: Array) -> Float[Array, " features"]:
        """The MLP's input: the z-scored window flattened row-major (interleaved), then the static."""
        w = (window - self.dynamic_mean) / self.dynamic_std
        s = (static - self.static_mean) / self.static_std
        return jnp.concatenate([jnp.reshape(w, (-1,)), s])

    def __call__(
        self,
        window: Float[Array, "lags dynamic"],
        static: Float[Array, " static"],
        *,
        key: Any = None,
        inference: bool = True,
    ) -> Float[Array, ""]:
        """The one-step prediction ``y(k+1)`` in physical units from the window ending at ``k``.

        Args:
            window: ``(L, n_dynamic)`` the last ``L`` dynamic samples, oldest first, physical units.
            static: ``(n_static,)`` static inputs, physical units.
            key: dropout key (used only with ``inference=False``).
            inference: no dropout (default); with ``False`` and a key, dropout is active.

        Returns:
            The scalar prediction in the target's physical units.

        References:
            Ghorbani & Hackl, SI eq. (S106).

        """
        window, static = jnp.asarray(window), jnp.asarray(static)
        if window.shape != (self.lags, self.n_dynamic):
            raise ValueError(
                f"NARX window: expected shape (lags, n_dynamic) = ({self.lags}, {self.n_dynamic}); "
                f"received {window.shape}."
            )
        if static.shape != (self.n_static,):
            raise ValueError(f"NARX static: expected shape ({self.n_static},); received {static.shape}.")
        z = _forward(self.layers, self.dropout, self.normalise(window, static), None if inference else key)
        return z * self.target_std + self.target_mean

    @staticmethod
    def push(buffer: Float[Array, "lags dynamic"], sample: Float[Array, " dynamic"]) -> Array:
        """The rolling buffer one step on: the oldest row dropped, ``sample`` appended as the last row."""
        buffer, sample = jnp.asarray(buffer), jnp.asarray(sample)
        if buffer.ndim != 2 or sample.shape != buffer.shape[1:]:
            raise ValueError(
                f"NARX.push sample: expected shape {buffer.shape[1:]} (one row of the buffer "
                f"{buffer.shape}); received {sample.shape}."
            )
        return jnp.concatenate([buffer[1:], sample[None, :].astype(buffer.dtype)], axis=0)

    def initial_buffer(self, first_sample: Float[Array, " dynamic"]) -> Float[Array, "lags dynamic"]:
        """The buffer at the first sample: ``L`` copies of it (left-padding until the buffer is full).

        References:
            specs/compositional-inference.md 2.5 ("left-padded with the first sample").

        """
        first_sample = jnp.asarray(first_sample, dtype=jnp.float64)
        if first_sample.shape != (self.n_dynamic,):
            raise ValueError(
                f"NARX.initial_buffer first_sample: expected shape ({self.n_dynamic},); received "
                f"{first_sample.shape}."
            )
        return jnp.broadcast_to(first_sample, (self.lags, self.n_dynamic))


# -- metrics ------------------------------------------------------------------------------------
@eqx.filter_jit
def _predict(model: NARX, windows: Array, statics: Array) -> Array:
    return jax.vmap(model)(windows, statics)


def narx_metrics(model: NARX, windows: Any, statics: Any, targets: Any) -> dict[str, float]:
    """MSE, RMSE and MAE of the one-step predictions, in normalised and in physical units (Fig. S11).

    Normalised units are the target's z-score with the model's statistics, ``(y - mean) / std``, so the
    normalised RMSE is the physical one divided by the target's training std.

    Args:
        model: the predictor.
        windows: ``(N, L, n_dynamic)`` windows (from :func:`narx_windows`).
        statics: ``(N, n_static)``.
        targets: ``(N,)`` the true next samples.

    Returns:
        ``{"mse", "rmse", "mae"}`` (physical units) and ``{"mse_normalised", "rmse_normalised",
        "mae_normalised"}``.

    References:
        Ghorbani & Hackl, SI Fig. S11; specs/compositional-inference.md, Table T17-T18.

    """
    w = _float64(windows, "narx_metrics windows", 3)
    s = _float64(statics, "narx_metrics statics", 2)
    y = _float64(targets, "narx_metrics targets", 1)
    n = y.shape[0]
    if n < 1 or w.shape != (n, model.lags, model.n_dynamic) or s.shape != (n, model.n_static):
        raise ValueError(
            f"narx_metrics windows, statics: expected shapes (N, {model.lags}, {model.n_dynamic}) and "
            f"(N, {model.n_static}) with N = len(targets) = {n} >= 1; received {w.shape} and {s.shape}."
        )
    predicted = np.asarray(_predict(model, jnp.asarray(w), jnp.asarray(s)))
    mean, std = float(model.target_mean), float(model.target_std)
    p_norm, y_norm = (predicted - mean) / std, (y - mean) / std
    return {
        "mse": float(metrics.mse(predicted, y)),
        "rmse": float(metrics.rmse(predicted, y)),
        "mae": float(metrics.mae(predicted, y)),
        "mse_normalised": float(metrics.mse(p_norm, y_norm)),
        "rmse_normalised": float(metrics.rmse(p_norm, y_norm)),
        "mae_normalised": float(metrics.mae(p_norm, y_norm)),
    }


# -- training -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NarxFit:
    """The result of :func:`fit_narx`.

    Attributes:
        model: the model of the lowest validation MSE.
        history: ``{"train": (E,), "validation": (E,)}`` normalised MSE per epoch: the mean over the
            epoch's mini-batches (with dropout, before each step) and over the validation windows.
        best_epoch: the epoch (1-based) of ``model``: ``history["validation"][best_epoch - 1]`` is the
            lowest.
        epochs: epochs trained (``E``).
        stopped_early: whether ``patience`` epochs passed without improvement before ``max_epochs``.
        test: :func:`narx_metrics` of ``model`` on the test scenarios' windows (SI Fig. S11).
        splits: scenario indices of ``"train"``, ``"validation"`` and ``"test"``.
        seconds: training time (a resumed run's earlier time included).

    """

    model: NARX
    history: dict[str, np.ndarray]
    best_epoch: int
    epochs: int
    stopped_early: bool
    test: dict[str, float]
    splits: dict[str, tuple[int, ...]]
    seconds: float


class _Hyper(NamedTuple):
    """The static settings of the jitted epoch."""

    learning_rate: float
    weight_decay: float
    batch_size: int
    dropout: float


def _optimiser(hyper: _Hyper) -> Any:
    import optax  # training only: not imported with twinfer.learn

    return optax.adamw(hyper.learning_rate, weight_decay=hyper.weight_decay)


@eqx.filter_jit
def _epoch(
    layers: Layers,
    opt_state: Any,
    inputs: Array,
    targets: Array,
    val_inputs: Array,
    val_targets: Array,
    key: Any,
    hyper: _Hyper,
) -> tuple[Layers, Any, Array, Array]:
    """One epoch: shuffled mini-batches of AdamW on the normalised MSE, then the validation MSE."""
    import optax

    opt, batch = _optimiser(hyper), hyper.batch_size
    n = inputs.shape[0]
    n_batches = -(-n // batch)
    k_order, k_drop = jax.random.split(key)
    # the last batch is padded with window 0 at weight 0: a smaller batch, as a DataLoader keeps it
    order = jnp.zeros(n_batches * batch, dtype=int).at[:n].set(jax.random.permutation(k_order, n))
    weight = (jnp.arange(n_batches * batch) < n).astype(inputs.dtype)

    def loss(th: Layers, idx: Array, w: Array, k: Any) -> tuple[Array, Array]:
        keys = jax.random.split(k, batch)
        predicted = jax.vmap(lambda v, kk: _forward(th, hyper.dropout, v, kk))(inputs[idx], keys)
        total = jnp.sum(w * (predicted - targets[idx]) ** 2)
        return total / jnp.sum(w), total

    def step(carry: tuple[Any, Any], xs: tuple[Array, Array, Array]) -> tuple[Any, Array]:
        th, state = carry
        idx, w, b = xs
        (_, total), grads = jax.value_and_grad(loss, has_aux=True)(th, idx, w, jax.random.fold_in(k_drop, b))
        updates, state = opt.update(grads, state, th)
        return (optax.apply_updates(th, updates), state), total

    xs = (order.reshape(n_batches, batch), weight.reshape(n_batches, batch), jnp.arange(n_batches))
    (layers, opt_state), totals = jax.lax.scan(step, (layers, opt_state), xs)
    val = jax.vmap(lambda v: _forward(layers, hyper.dropout, v, None))(val_inputs)
    return layers, opt_state, jnp.sum(totals) / n, jnp.mean((val - val_targets) ** 2)


def _as_triple(item: Any, i: int) -> tuple[Any, Any, Any]:
    if all(hasattr(item, a) for a in ("dynamic", "static", "target")):
        return item.dynamic, item.static, item.target
    if isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 3:
        return item[0], item[1], item[2]
    raise ValueError(
        f"fit_narx scenarios[{i}]: expected a (dynamic, static, target) tuple or an object with those "
        f"attributes; received {type(item).__name__}."
    )


def _split_counts(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    """Scenarios per split: validation and test rounded (at least one each), the rest for training."""
    n_val, n_test = (max(1, math.floor(f * n + 0.5)) for f in fractions[1:])
    if n - n_val - n_test < 1:
        raise ValueError(
            f"fit_narx scenarios: expected at least one scenario in each of train, validation and test "
            f"(split {fractions}); received {n} scenario(s), which leave(s) {n - n_val - n_test} for "
            "training. Provide at least 3 scenarios."
        )
    return n - n_val - n_test, n_val, n_test


def _statistics(data: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], floor: float) -> dict[str, Any]:
    """Means and stds (+ floor) over every sample of the given scenarios (the training split).

    Each sample (row) counts once, the static columns repeated on every row of their scenario, as the
    per-column statistics of the training rows of a data table.
    """
    dyn = np.concatenate([d for d, _, _ in data])
    stat = np.concatenate([np.broadcast_to(s, (d.shape[0], s.size)) for d, s, _ in data])
    y = np.concatenate([t for _, _, t in data])
    return {
        "dynamic_mean": dyn.mean(axis=0),
        "dynamic_std": dyn.std(axis=0) + floor,
        "static_mean": stat.mean(axis=0),
        "static_std": stat.std(axis=0) + floor,
        "target_mean": y.mean(),
        "target_std": y.std() + floor,
    }


def _windows_of(
    data: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], config: NarxConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = [narx_windows(d, s, y, config.lags, config.stride) for d, s, y in data]
    return tuple(np.concatenate([p[j] for p in parts]) for j in range(3))  # type: ignore[return-value]


def _normalised(model: NARX, windows: np.ndarray, statics: np.ndarray, targets: np.ndarray) -> tuple:
    return _normalise_all(model, jnp.asarray(windows), jnp.asarray(statics), jnp.asarray(targets))


@eqx.filter_jit
def _normalise_all(model: NARX, windows: Array, statics: Array, targets: Array) -> tuple[Array, Array]:
    """The MLP's inputs ``(N, L n_dyn + n_stat)`` and the z-scored targets ``(N,)``."""
    return jax.vmap(model.normalise)(windows, statics), (targets - model.target_mean) / model.target_std


def fit_narx(
    scenarios: Sequence[Any],
    config: NarxConfig = NarxConfig(),
    *,
    key: Any = None,
    checkpoint: Checkpoint | None = None,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> NarxFit:
    """Train a :class:`NARX` on scenarios split 70/15/15, with AdamW and early stopping (SI (S106)).

    The scenarios are permuted with the key and split into train, validation and test (at least one
    each). The z-score statistics come from the training scenarios only. Each epoch shuffles the
    training windows, takes AdamW steps on mini-batches of the normalised MSE (one jitted scan), then
    evaluates the validation MSE; the model of the lowest validation MSE is kept, and training stops
    after ``patience`` epochs without a lower one. The same key and data give the same weights.

    Args:
        scenarios: ``(dynamic (T, n_dyn), static (n_stat,), target (T,))`` tuples, or objects with those
            attributes; ``T`` may differ between scenarios, the column counts may not.
        config: settings (default: the paper's).
        key: PRNG key of the split, the initialisation, the shuffling and the dropout (default
            ``jax.random.key(config.seed)``).
        checkpoint: where the weights, optimiser state, best weights and history are saved every
            ``checkpoint_every`` epochs and at the end (None: none). This function adds the config (less
            ``max_epochs``, ``progress_every``, ``checkpoint_every``), the key and the data's digests to
            its fingerprint, so a checkpoint of other data, config or key is refused. With ``resume`` set,
            training continues from it, up to the given ``max_epochs``.
        progress: ``progress("narx", epoch, max_epochs)`` every ``progress_every`` epochs and at the end.
        log: receives a line with the epoch and the train and validation losses at the same times.

    Returns:
        :class:`NarxFit` (best model, loss history, test metrics, splits).

    Raises:
        ValueError: bad scenarios (the message names the scenario and field) or fewer than 3.
        FloatingPointError: the training loss became non-finite (lower the learning rate).
        twinfer.checkpoint.CheckpointError: a checkpoint of another run, corrupt, or present while
            ``resume`` is off.

    References:
        Ghorbani & Hackl, SI eq. (S106), Fig. S11; specs/compositional-inference.md 2.5 and 7 (18).

    """
    if not isinstance(config, NarxConfig):
        raise TypeError(f"fit_narx config: expected a NarxConfig; received {type(config).__name__}.")
    data = [
        _scenario(*_as_triple(item, i), config.lags, f"fit_narx scenarios[{i}].")
        for i, item in enumerate(scenarios)
    ]
    if data:
        n_dyn, n_stat = data[0][0].shape[1], data[0][1].size
        for i, (d, s, _) in enumerate(data):
            if d.shape[1] != n_dyn or s.size != n_stat:
                raise ValueError(
                    f"fit_narx scenarios[{i}]: expected {n_dyn} dynamic and {n_stat} static columns (as "
                    f"scenarios[0]); received {d.shape[1]} and {s.size}."
                )
    n_train, n_val, _ = _split_counts(len(data), config.split)
    key = jax.random.key(config.seed) if key is None else key
    k_split, k_init, k_train = jax.random.split(key, 3)
    order = np.asarray(jax.random.permutation(k_split, len(data)))
    splits = {
        "train": tuple(sorted(int(i) for i in order[:n_train])),
        "validation": tuple(sorted(int(i) for i in order[n_train : n_train + n_val])),
        "test": tuple(sorted(int(i) for i in order[n_train + n_val :])),
    }
    model = NARX(
        config.lags,
        n_dyn,
        n_stat,
        hidden=config.hidden,
        dropout=config.dropout,
        key=k_init,
        **_statistics([data[i] for i in splits["train"]], config.std_floor),
    )
    train_in, train_y = _normalised(model, *_windows_of([data[i] for i in splits["train"]], config))
    val_in, val_y = _normalised(model, *_windows_of([data[i] for i in splits["validation"]], config))
    hyper = _Hyper(config.learning_rate, config.weight_decay, config.batch_size, config.dropout)

    layers = model.layers
    opt_state = _optimiser(hyper).init(layers)
    best = layers
    state = {"epoch": 0, "best_epoch": 0, "best": math.inf, "stopped": False, "seconds": 0.0}
    history: dict[str, list[float]] = {"train": [], "validation": []}
    ckpt = as_checkpoint(checkpoint, "fit_narx")
    if ckpt is not None:
        own = {
            k: v
            for k, v in dataclasses.asdict(config).items()
            if k not in ("max_epochs", "progress_every", "checkpoint_every")
        }
        ckpt = ckpt.extended(
            narx_config=digest(own), narx_key=array_digest(key), narx_data=array_digest(data)
        )
        if ckpt.begin():
            snap = ckpt.load(_KIND)
            layers, opt_state, best = snap.state((layers, opt_state, best))
            state, history = _counters(snap, config.max_epochs)

    tic = time.perf_counter()
    while not state["stopped"] and state["epoch"] < config.max_epochs:
        epoch = state["epoch"] + 1
        layers, opt_state, train_loss, val_loss = _epoch(
            layers, opt_state, train_in, train_y, val_in, val_y, jax.random.fold_in(k_train, epoch), hyper
        )
        history["train"].append(float(train_loss))
        history["validation"].append(float(val_loss))
        if not (math.isfinite(history["train"][-1]) and math.isfinite(history["validation"][-1])):
            raise FloatingPointError(
                f"fit_narx: the loss became {history['train'][-1]} (validation {history['validation'][-1]}) "
                f"at epoch {epoch}; lower learning_rate."
            )
        if history["validation"][-1] < state["best"]:
            state.update(best=history["validation"][-1], best_epoch=epoch)
            best = layers
        state["epoch"] = epoch
        state["stopped"] = epoch - state["best_epoch"] >= config.patience and epoch < config.max_epochs
        done = state["stopped"] or epoch == config.max_epochs
        if ckpt is not None and (epoch % config.checkpoint_every == 0 or done):
            meta = {**state, "seconds": state["seconds"] + time.perf_counter() - tic, "history": history}
            ckpt.save(_KIND, (layers, opt_state, best), meta)
        if epoch % config.progress_every == 0 or done:
            if progress is not None:
                progress("narx", epoch, config.max_epochs)
            if log is not None:
                train_loss, val_loss = history["train"][-1], history["validation"][-1]
                log(
                    f"narx epoch {epoch}/{config.max_epochs}: train {train_loss:.4e}, validation "
                    f"{val_loss:.4e} (best {state['best']:.4e} at epoch {state['best_epoch']})"
                )
    model = eqx.tree_at(lambda m: m.layers, model, best)
    test = narx_metrics(model, *_windows_of([data[i] for i in splits["test"]], config))
    return NarxFit(
        model=model,
        history={k: np.asarray(v) for k, v in history.items()},
        best_epoch=int(state["best_epoch"]),
        epochs=int(state["epoch"]),
        stopped_early=bool(state["stopped"]),
        test=test,
        splits=splits,
        seconds=state["seconds"] + time.perf_counter() - tic,
    )


def _counters(snap: Snapshot, max_epochs: int) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The progress counters and history of a checkpoint, refused unless they fit this training."""
    meta: Mapping[str, Any] = snap.meta
    epoch, best_epoch, history = meta.get("epoch"), meta.get("best_epoch"), meta.get("history")
    if not isinstance(epoch, int) or not isinstance(best_epoch, int) or not isinstance(history, dict):
        raise snap.refuse("its epoch, best_epoch or history records are missing.")
    if not 1 <= best_epoch <= epoch <= max_epochs:
        raise snap.refuse(
            f"it records epoch {epoch} (best {best_epoch}); this training has at most {max_epochs} epochs "
            "(raise max_epochs to continue it)."
        )
    if sorted(history) != ["train", "validation"] or any(len(v) != epoch for v in history.values()):
        raise snap.refuse(f"its history does not hold {epoch} epochs.")
    state = {
        "epoch": epoch,
        "best_epoch": best_epoch,
        "best": float(meta.get("best", math.inf)),
        "stopped": bool(meta.get("stopped", False)),
        "seconds": float(meta.get("seconds", 0.0)),
    }
    return state, {k: [float(x) for x in v] for k, v in history.items()}
