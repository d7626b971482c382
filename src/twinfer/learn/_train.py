"""One training loop for any model with parameters: growing horizon, Adam with a schedule, checkpoints.

Every step draws one training scenario at random, takes a gradient step of Adam on its loss over the
current horizon, then evaluates every scenario at that horizon and extends the horizon by one sample
when the worst loss is below a threshold (specs 3.5). The loss is a function ``loss(params, i, horizon)``
so the loop does not know what the model is: a combined model, a neural ODE or an RNN with time events
all train unchanged (specs 3.8). :func:`trajectory_loss` builds the weighted MAE of specs 3.5 from a
model and its scenarios with :func:`twinfer.sim.simulate_events`.

References:
    Thummerer & Mikelsons, model-combination paper, A.5 (training), A.9 (common interface); specs 3.5,
    3.8 and 5 items 4-6 (loss scaling, learning-rate ramp, horizon rule).

"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from twinfer._config import ensure
from twinfer.checkpoint import Checkpoint, Snapshot, array_digest, as_checkpoint, digest
from twinfer.models import AbstractModel, Params
from twinfer.sharding import device_mesh, map_cores, usable_cores
from twinfer.sim import simulate_events, simulate_rk4_sensitivity
from twinfer.sim._events_rk4 import _carry

Loss = Callable[[Params, Any, Any], Any]
"""``loss(params, scenario_index, horizon_samples) -> scalar``."""


def trajectory_loss(
    model: AbstractModel,
    ts: Any,
    x0s: Any,
    targets: Any,
    weights: Sequence[float],
    z0s: Any = None,
    **sim_options: Any,
) -> Loss:
    """Weighted MAE over the first ``horizon`` samples: sum_j w_j mean_k |y_kj - y^data_kj| (specs 3.5).

    Args:
        model: the model to train (its outputs are compared with ``targets``).
        ts: save grid (T,).
        x0s: initial states, one row per scenario (S, n_state).
        targets: data (S, T, n_output).
        weights: one weight per output (0.5 on positions and 0.1 on velocities in experiment 1).
        z0s: initial discrete states, one row per scenario (default: the model's own), e.g. the
            hidden state of an RNN.
        **sim_options: passed to :func:`twinfer.sim.simulate_events`.

    Returns:
        The loss; integration stops after the horizon, so a short horizon is cheap. With ``fixed_steps``
        on a model without time events it also has ``value_and_grad(theta, fixed, i, horizon)``: the
        loss at ``{**fixed, **theta}`` and its gradient along ``theta`` by forward sensitivity of the
        fixed-step simulation (:func:`twinfer.sim.simulate_rk4_sensitivity`), which
        ``TrainSettings(grad_mode="sensitivity")`` uses.

    """
    tsj = jnp.asarray(ts)
    x0s, targets, w = jnp.asarray(x0s), jnp.asarray(targets), jnp.asarray(weights, dtype=float)
    if targets.shape != (x0s.shape[0], tsj.shape[0], model.n_output) or w.shape != (model.n_output,):
        raise ValueError(
            f"trajectory_loss: expected targets (S, T, n_output) = ({x0s.shape[0]}, {tsj.shape[0]}, "
            f"{model.n_output}) and {model.n_output} weights; received {targets.shape} and {w.shape}."
        )

    z0j = None if z0s is None else jnp.asarray(z0s)

    def loss(params: Params, i: Any, horizon: Any) -> Any:
        z0 = None if z0j is None else z0j[i]
        traj = simulate_events(model, ts, x0s[i], z0, params=params, t_stop=tsj[horizon - 1], **sim_options)
        mask = (jnp.arange(tsj.shape[0]) < horizon)[:, None]
        mae = jnp.sum(jnp.abs(traj.outputs - targets[i]) * mask, axis=0) / horizon
        return jnp.sum(w * mae)

    def value_and_grad(theta: Params, fixed: Params, i: Any, horizon: Any) -> tuple[Any, Params]:
        """The loss at ``{**fixed, **theta}`` and its gradient along ``theta`` by forward sensitivity.

        The states' derivatives along every parameter travel as one matrix through the fixed-step
        simulation (:func:`twinfer.sim.simulate_rk4_sensitivity`); the gradient of the weighted MAE is
        then sum_k sum_j w_j sign(y_kj - y^data_kj) dy_kj/dtheta / horizon. Needs ``fixed_steps``.
        """
        flat, unravel = ravel_pytree(theta)
        params_of = lambda v: dict(fixed, **unravel(v))  # noqa: E731
        u_fn = sim_options.get("inputs") or (lambda t: jnp.zeros(model.n_input))
        z0 = model.initial_discrete_state(params_of(flat)) if z0j is None else z0j[i]
        xs, sxs, zs, szs, short = simulate_rk4_sensitivity(
            model,
            tsj,
            x0s[i],
            jnp.asarray(z0, dtype=x0s.dtype),
            params_of,
            flat,
            u_fn,
            tsj[horizon - 1],
            substeps=int(sim_options["fixed_steps"]),
            max_pieces=int(sim_options.get("max_events_per_interval", 3)) + 1,
        )
        xs = eqx.error_if(
            xs,
            short,
            "trajectory_loss: more state events inside one fixed step than max_events_per_interval; the "
            "trajectory chatters (Zeno) or fixed_steps is too small.",
        )

        def output(t: Any, x: Any, z: Any, sx: Any, sz: Any) -> tuple[Any, Any]:
            def h(x: Any, z: Any, v: Any) -> Any:
                return model.hybrid_output(t, x, z, u_fn(t), params_of(v))

            return _carry(h, (x, z), (sx, sz), flat)

        ys, sys_ = jax.vmap(output)(tsj, xs, zs, sxs, szs)
        mask = (jnp.arange(tsj.shape[0]) < horizon)[:, None]
        residual = ys - targets[i]
        value = jnp.sum(w * jnp.sum(jnp.abs(residual) * mask, axis=0) / horizon)
        grad = jnp.einsum("kj,kjp->p", w * jnp.sign(residual) * mask / horizon, sys_)
        return value, unravel(grad)

    if "fixed_steps" in sim_options and sim_options["fixed_steps"] and not model.has_time_events:
        loss.value_and_grad = value_and_grad  # type: ignore[attr-defined]
    return loss


@dataclass(frozen=True)
class TrainSettings:
    """Settings of :func:`train` (defaults: experiment 1 of the paper with the authors' schedule).

    ``lr_start -> lr_end`` is a linear ramp over ``steps`` (the authors' code; the paper says a constant
    1e-3, which is ``lr_start = lr_end = 1e-3``). The horizon starts at ``horizon_start`` samples and
    grows by one whenever the worst scenario's loss is below ``horizon_threshold``. ``grad_mode``
    ``"forward"`` computes the gradient by forward mode with one tangent per parameter (the authors'
    ForwardDiff; cheaper than reverse mode through a long simulation scan when there are only about a
    hundred parameters, as in experiment 1). ``"sensitivity"`` gives the same gradient by forward
    sensitivity of the fixed-step simulation, the parameters' directions carried as one matrix
    (``loss.value_and_grad`` of :func:`trajectory_loss` with ``fixed_steps``; the gradient alone 2-4x
    faster than ``"forward"`` on experiment 1, on one core). ``devices`` (forward mode only; 0 = every
    visible device) splits the tangent directions, and the worst-scenario check's scenarios, over that
    many devices (on a CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` makes N host devices,
    one per core); the steps are the same as on one device. ``threads`` (forward or sensitivity on one
    device; 0 = every usable core) splits them the same way over threads of one device instead: on a CPU
    each thread runs its share of the tangents (forward mode) and of the scenarios on its own core, with
    no collective in between (the two host devices of a 2-core machine were slower than one: their
    collectives run on the same cores).
    """

    steps: int = 20_000
    lr_start: float = 1e-4
    lr_end: float = 1e-3
    horizon_start: int = 11
    horizon_threshold: float = 0.05
    seed: int = 0
    checkpoint_every: int = 500
    progress_every: int = 50
    stages: tuple[tuple[float, int], ...] = field(default_factory=tuple)
    grad_mode: str = "reverse"
    devices: int = 1
    threads: int = 0

    def __post_init__(self) -> None:
        if self.grad_mode not in ("reverse", "forward", "sensitivity"):
            raise ValueError(
                "TrainSettings grad_mode: expected 'reverse', 'forward' or 'sensitivity'; received "
                f"{self.grad_mode!r}."
            )
        if self.devices < 0 or (self.devices != 1 and self.grad_mode != "forward"):
            raise ValueError(
                "TrainSettings devices: expected 1, or >= 0 with grad_mode 'forward' (0: all visible); "
                f"received {self.devices} with grad_mode {self.grad_mode!r}."
            )
        if self.threads < 0 or (self.threads > 1 and (self.devices != 1 or self.grad_mode == "reverse")):
            raise ValueError(
                "TrainSettings threads: expected 0 (every core) or a positive count, more than 1 only with "
                f"grad_mode 'forward' or 'sensitivity' on one device; received {self.threads} with grad_mode "
                f"{self.grad_mode!r} and devices {self.devices}."
            )
        if self.steps < 1 or self.horizon_start < 1 or self.checkpoint_every < 1 or self.progress_every < 1:
            raise ValueError(f"TrainSettings: steps, horizon_start, *_every must be >= 1; received {self}.")
        if not (self.lr_start > 0 and self.lr_end > 0):
            raise ValueError(
                f"TrainSettings learning rates: expected > 0; received {self.lr_start}, {self.lr_end}."
            )


class TrainResult(dict):
    """The result of :func:`train`.

    Keys: ``params`` (all groups), ``loss`` and ``worst`` (the drawn and the worst scenario's loss per
    step), ``horizon`` (per step), ``steps`` done and ``seconds`` spent (the steps of an interrupted
    run before its checkpoint included, so a resumed run reports its whole training time).
    """


def _schedule(settings: TrainSettings) -> Any:
    import optax

    if settings.stages:
        boundaries, values, total = [], [], 0
        for lr, n in settings.stages:
            values.append(lr)
            total += n
            boundaries.append(total)
        return optax.join_schedules([optax.constant_schedule(v) for v in values], boundaries[:-1])
    return optax.linear_schedule(settings.lr_start, settings.lr_end, settings.steps)


def train(
    loss: Loss,
    params: Params,
    trainable: Sequence[str],
    n_scenarios: int,
    n_samples: int,
    settings: TrainSettings,
    *,
    checkpoint: Checkpoint | None = None,
    progress: Callable[[str, float, float], None] | None = None,
    stage: str = "train",
) -> TrainResult:
    """Minimise ``loss`` over the groups ``trainable`` of ``params`` with Adam.

    Args:
        loss: ``loss(params, i, horizon)`` (e.g. from :func:`trajectory_loss`).
        params: initial parameters (all groups; only ``trainable`` ones change).
        trainable: names of the groups to learn.
        n_scenarios: number of training scenarios (i is drawn uniformly from 0..n_scenarios-1).
        n_samples: samples per scenario (the horizon never exceeds it).
        settings: steps, schedule, horizon rule, seed, checkpoint and progress periods.
        checkpoint: where the parameters, optimiser state and history are saved every
            ``checkpoint_every`` steps (:class:`~twinfer.checkpoint.Checkpoint`; None: none). Its
            fingerprint should name the loss (case, config, data); this loop adds its settings, the
            trainable groups and their initial values. With ``resume`` set and the file present, training
            continues from it after the fingerprint, shapes, dtypes and step counters are checked.
        progress: ``progress(stage, done, total)``.
        stage: name shown with the progress.

    Returns:
        :class:`TrainResult`.

    Raises:
        twinfer.checkpoint.CheckpointError: a checkpoint of another run, corrupt, of other shapes or
            dtypes, with impossible counters, or present while ``resume`` is off.

    """
    ensure("train", params=params)
    missing = [g for g in trainable if g not in params]
    if missing:
        raise KeyError(f"train trainable: groups {missing} are not in params ({sorted(params)}).")
    if settings.grad_mode == "sensitivity" and not hasattr(loss, "value_and_grad"):
        raise ValueError(
            "train grad_mode 'sensitivity': expected a loss with value_and_grad (trajectory_loss with "
            "fixed_steps, on a model without time events); received a loss without it."
        )
    total = sum(s[1] for s in settings.stages) if settings.stages else settings.steps
    fixed = {k: v for k, v in params.items() if k not in trainable}
    theta = {k: jnp.asarray(params[k]) for k in trainable}
    import optax  # training only: not imported with twinfer.learn (0.07 s)

    opt = optax.adam(_schedule(settings))
    opt_state = opt.init(theta)
    key = jax.random.key(settings.seed)
    horizon, start = int(min(settings.horizon_start, n_samples)), 0
    history = {"loss": [], "worst": [], "horizon": []}
    spent = 0.0
    ckpt = as_checkpoint(checkpoint, "learn.train")
    if ckpt is not None:
        own = {"settings": repr(settings), "trainable": list(trainable), "scenarios": n_scenarios,
               "samples": n_samples, "initial": array_digest(theta)}  # fmt: skip
        ckpt = ckpt.extended(trainer=digest(own))
    if ckpt is not None and ckpt.begin():
        snap = ckpt.load("learn-train")
        theta, opt_state = snap.state((theta, opt_state))
        start, horizon, history, spent = _counters(snap, total, n_samples)

    def full(th):
        return dict(fixed, **th)

    mesh = device_mesh(settings.devices, "devices", "TrainSettings devices")
    split = _split_over(mesh)

    def forward(th, k, horizon, basis):
        """The drawn scenario's loss and its derivatives along the rows of ``basis`` (forward mode)."""
        i = jax.random.randint(k, (), 0, n_scenarios)
        flat, unravel = ravel_pytree(th)
        values, tangents = jax.vmap(
            lambda e: jax.jvp(lambda w: loss(full(unravel(w)), i, horizon), (flat,), (e,))
        )(basis)
        return values, tangents

    def sensitivity(th, k, horizon):
        """The drawn scenario's loss and gradient by forward sensitivity (``loss.value_and_grad``)."""
        i = jax.random.randint(k, (), 0, n_scenarios)
        return loss.value_and_grad(th, fixed, i, horizon)  # type: ignore[attr-defined]

    def losses(th, horizon, scenarios):
        return jax.lax.map(lambda j: loss(full(th), j, horizon), scenarios)

    def adam(th, state, grads):
        updates, state = opt.update(grads, state, th)
        return optax.apply_updates(th, updates), state

    def check(each, horizon):
        """The worst scenario's loss; the horizon grows by one sample when it is small."""
        worst = jnp.max(each)
        grow = (worst < settings.horizon_threshold) & (horizon < n_samples)
        return worst, horizon + grow.astype(horizon.dtype)

    def one_program(th, state, k, horizon):
        if settings.grad_mode == "forward":
            flat, unravel = ravel_pytree(th)
            # one tangent per parameter; rows padded with zero directions to a multiple of the devices
            count = 1 if mesh is None else mesh.size
            basis = jnp.eye(-(-flat.size // count) * count, flat.size, dtype=flat.dtype)
            values, tangents = split(lambda b, t: forward(t, k, horizon, b), basis, th)
            value, grads = values[0], unravel(tangents[: flat.size])
        elif settings.grad_mode == "sensitivity":
            value, grads = sensitivity(th, k, horizon)
        else:
            i = jax.random.randint(k, (), 0, n_scenarios)
            value, grads = jax.value_and_grad(lambda t: loss(full(t), i, horizon))(th)
        th, state = adam(th, state, grads)
        count = 1 if mesh is None else mesh.size
        # scenario indices padded (by repeats of the last) to a multiple of the devices
        scenarios = jnp.minimum(jnp.arange(-(-n_scenarios // count) * count), n_scenarios - 1)
        worst, horizon = check(split(lambda js, t: losses(t, horizon, js), scenarios, th), horizon)
        return th, state, value, worst, horizon

    tic = time.perf_counter()
    h = jnp.asarray(horizon, dtype=jnp.int32)
    workers = 1 if settings.grad_mode == "reverse" or mesh is not None else settings.threads or usable_cores()
    step: Callable[..., Any] = jax.jit(one_program)
    if workers > 1:
        gradient = (
            jax.jit(sensitivity)
            if settings.grad_mode == "sensitivity"
            else _split_tangents(jax.jit(forward), theta, workers)
        )
        step = _threaded(gradient, (losses, adam, check), n_scenarios, workers)
    for n in range(start, total):
        theta, opt_state, value, worst, h = step(theta, opt_state, jax.random.fold_in(key, n), h)
        history["loss"].append(float(value))
        history["worst"].append(float(worst))
        history["horizon"].append(int(h))
        if not np.isfinite(history["loss"][-1]):
            raise FloatingPointError(f"train: the loss became {value} at step {n}; lower the learning rate.")
        if ckpt is not None and ((n + 1) % settings.checkpoint_every == 0 or n + 1 == total):
            meta = {"step": n + 1, "horizon": int(h), "seconds": spent + time.perf_counter() - tic}
            ckpt.save("learn-train", (theta, opt_state), {**meta, "history": history})
        if progress is not None and ((n + 1) % settings.progress_every == 0 or n + 1 == total):
            progress(stage, n + 1, total)
    return TrainResult(
        params=full(theta),
        loss=np.asarray(history["loss"]),
        worst=np.asarray(history["worst"]),
        horizon=np.asarray(history["horizon"]),
        steps=total,
        seconds=spent + time.perf_counter() - tic,
    )


def _split_tangents(forward: Callable[..., Any], theta: Any, workers: int) -> Callable[..., Any]:
    """Forward mode's ``gradient(th, k, h)`` with the tangent directions cut into one chunk per thread."""
    flat, unravel = ravel_pytree(theta)
    basis = jnp.eye(flat.size, dtype=flat.dtype)

    def gradient(th: Any, k: Any, h: Any) -> tuple[Any, Any]:
        values, tangents = map_cores(forward, basis, workers=workers, shared=(th, k, h))
        return values[0], unravel(tangents)

    return gradient


def _threaded(
    gradient: Callable[..., Any], parts: tuple[Callable, ...], n_scenarios: int, workers: int
) -> Callable[..., Any]:
    """A training step whose work is split over ``workers`` threads.

    ``gradient(th, k, h)`` gives the drawn scenario's loss and gradient: forward mode with its tangent
    directions cut into one chunk per thread, or the sensitivity gradient in one call (its parameters'
    directions already travel as one matrix). ``parts`` are train's ``losses``, ``adam`` and ``check``;
    the worst-scenario check's scenarios are cut into one chunk per thread as well
    (:func:`twinfer.sharding.map_cores`). The steps are those of one thread: gradient, Adam, then the
    check at the updated parameters.
    """
    losses, adam, check = (jax.jit(p) for p in parts)
    scenarios = jnp.arange(n_scenarios)

    def step(th: Any, state: Any, k: Any, h: Any) -> tuple[Any, ...]:
        value, grads = gradient(th, k, h)
        th, state = adam(th, state, grads)
        worst, h = check(map_cores(losses, scenarios, workers=workers, shared=(th, h)), h)
        return th, state, value, worst, h

    return step


def _split_over(mesh: jax.sharding.Mesh | None) -> Callable[..., Any]:
    """``split(f, rows, shared)``: ``f(rows, shared)`` with ``rows`` split over the mesh's devices."""
    if mesh is None:
        return lambda f, rows, shared: f(rows, shared)
    spec = jax.sharding.PartitionSpec("devices")

    def split(f: Callable[..., Any], rows: Any, shared: Any) -> Any:
        shared_spec = jax.tree_util.tree_map(lambda _: jax.sharding.PartitionSpec(), shared)
        # check_vma off: eqx.error_if conds inside the simulation do not carry the varying-axis types
        run = jax.shard_map(f, mesh=mesh, in_specs=(spec, shared_spec), out_specs=spec, check_vma=False)
        return run(rows, shared)

    return split


def _counters(snap: Snapshot, total: int, n_samples: int) -> tuple[int, int, dict, float]:
    """Step, horizon, history and seconds of a checkpoint, refused unless they fit this training."""
    step, horizon, history = snap.meta.get("step"), snap.meta.get("horizon"), snap.meta.get("history")
    if not isinstance(step, int) or not isinstance(horizon, int) or not isinstance(history, dict):
        raise snap.refuse("its step, horizon or history records are missing.")
    if not 0 <= step <= total or not 1 <= horizon <= n_samples:
        raise snap.refuse(
            f"it records step {step} at horizon {horizon}; this training has {total} steps of at most "
            f"{n_samples} samples."
        )
    if sorted(history) != ["horizon", "loss", "worst"] or any(len(v) != step for v in history.values()):
        raise snap.refuse(f"its history does not hold {step} steps.")
    return step, horizon, history, float(snap.meta.get("seconds", 0.0))
