"""One jitted PINN trainer: Adam then optional L-BFGS (optax), chunked scans, plateau stop, checkpoints.

The trainable object is a tuple ``(network, *extras)``; the network is updated with Adam at
``learning_rate`` (optionally decaying exponentially), every extra (trainable system parameters, learned
noise scales) with its own Adam at ``param_learning_rate`` (specs 2.5: the repository uses two
optimisers). After the Adam epochs (or an Adam plateau), ``lbfgs_steps`` iterations of L-BFGS with a zoom
line search refine everything together (our choice beyond the paper, which trains with Adam only: the
quasi-Newton phase lowers the physics residuals by orders of magnitude where Adam stalls). Steps run
``chunk`` at a time inside one ``jax.lax.scan``; between chunks the trainer reports progress, checks for a
plateau and writes a checkpoint. Training is full-batch and deterministic, so a run resumed from a
checkpoint reaches exactly the parameters of an uninterrupted run.

References:
    Haywood-Alexander et al., arXiv:2410.01340, Algorithm 1; specs/pinn.md 2.6 (training settings).

"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import numpy as np
import optax
from jaxtyping import ArrayLike, Float

from twinfer._config import ensure
from twinfer.checkpoint import Checkpoint, array_digest, as_checkpoint, digest
from twinfer.infer._estimate import Estimate
from twinfer.infer.pinn._network import StateNetwork
from twinfer.infer.pinn._physics import PositiveParameters

Progress = Callable[[str, float, float], None]
LossFn = Callable[[Any], tuple[Any, dict[str, Any]]]


class TrainSettings(NamedTuple):
    """Trainer settings.

    Attributes:
        epochs: maximum number of full-batch epochs.
        learning_rate: Adam step of the network.
        param_learning_rate: Adam step of every extra trainable (system parameters, noise scales).
        decay: multiplicative learning-rate decay per epoch of the network (1.0: constant).
        chunk: epochs per jitted scan (progress, plateau check and checkpoint between chunks).
        patience: chunks without a relative improvement of ``min_improvement`` before stopping.
        min_improvement: relative improvement of the best chunk-mean loss that resets the patience.
        checkpoint_every: chunks between checkpoints.
        lbfgs_steps: L-BFGS iterations after the Adam phase (0: Adam only, as the paper).
        lbfgs_memory: number of past updates L-BFGS keeps.

    """

    epochs: int = 10_000
    learning_rate: float = 1e-3
    param_learning_rate: float = 1e-2
    decay: float = 1.0
    chunk: int = 250
    patience: int = 8
    min_improvement: float = 1e-3
    checkpoint_every: int = 1
    lbfgs_steps: int = 0
    lbfgs_memory: int = 20


class TrainResult(NamedTuple):
    """Trained objects and the loss history (one row per chunk: epoch, total, then the parts)."""

    trainable: Any
    history: dict[str, list[float]]
    epochs: int
    stopped_early: bool
    resumed_from: int
    train_s: float
    """Seconds of training, summed over the interrupted and the resumed parts."""

    def to_estimate(
        self,
        times: Float[ArrayLike, " T"],
        state_names: Sequence[str],
        parameters: Mapping[str, Float[ArrayLike, "..."]] | None = None,
    ) -> Estimate:
        """The trained network's states at ``times`` as a point :class:`~twinfer.infer.Estimate`.

        The states' standard deviations are NaN (a trained PINN carries no uncertainty,
        :meth:`StateNetwork.to_estimate`); the learned system parameters (the trainable
        :class:`PositiveParameters` among the extras) follow as constant columns with NaN sds, unless
        ``parameters`` gives the columns to append (values, or a posterior's samples).

        Raises:
            ValueError: when the first trainable is not a :class:`StateNetwork`, or ``state_names`` does
                not name every output.

        """
        network = self.trainable[0]
        if not isinstance(network, StateNetwork):
            raise ValueError(
                "TrainResult.to_estimate trainable: expected a StateNetwork first (network, *extras); "
                f"received {type(network).__name__}."
            )
        if parameters is None:
            parameters = {
                k: v for extra in self.trainable[1:] if isinstance(extra, PositiveParameters)
                for k, v in extra.as_dict().items()
            }  # fmt: skip
        return network.to_estimate(times, state_names, parameters)


def _check(settings: TrainSettings) -> None:
    positive = ("epochs", "learning_rate", "param_learning_rate", "decay", "chunk", "patience")
    for name in positive:
        value = getattr(settings, name)
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"TrainSettings.{name}: expected a finite value > 0; received {value!r}.")
    if settings.lbfgs_steps < 0 or settings.lbfgs_memory < 1:
        raise ValueError(
            f"TrainSettings.lbfgs_steps/lbfgs_memory: expected >= 0 and >= 1; received "
            f"{settings.lbfgs_steps}, {settings.lbfgs_memory}."
        )
    if settings.decay > 1.0:
        raise ValueError(f"TrainSettings.decay: expected a value in (0, 1]; received {settings.decay}.")


def _optimiser(trainable: tuple[Any, ...], settings: TrainSettings) -> optax.GradientTransformation:
    lr = settings.learning_rate
    schedule = optax.exponential_decay(lr, 1, settings.decay) if settings.decay < 1.0 else lr
    labels = tuple(
        jax.tree.map(lambda _, i=i: "net" if i == 0 else "param", part) for i, part in enumerate(trainable)
    )
    return optax.multi_transform(
        {"net": optax.adam(schedule), "param": optax.adam(settings.param_learning_rate)}, labels
    )


def train(
    trainable: tuple[Any, ...],
    loss_fn: LossFn,
    settings: TrainSettings,
    *,
    progress: Progress | None = None,
    checkpoint: Checkpoint | None = None,
    stage: str = "train PINN",
    lbfgs_loss_fn: LossFn | None = None,
) -> TrainResult:
    """Minimise ``loss_fn(trainable)`` with Adam, in jitted chunks of epochs.

    Args:
        trainable: ``(network, *extras)``; inexact arrays are trained, everything else is static.
        loss_fn: ``trainable -> (loss, {part: value})``, pure and traceable.
        settings: :class:`TrainSettings`.
        progress: ``progress(stage, epoch, epochs)`` callback.
        checkpoint: where to save the trainables and optimiser state between chunks
            (:class:`~twinfer.checkpoint.Checkpoint`; None: none). Its fingerprint should name the loss
            (case, config, data); the trainer adds its settings and the initial trainables. With
            ``resume`` set and the file present, training continues from it after the fingerprint,
            shapes, dtypes and epoch counters are checked.
        stage: progress label.
        lbfgs_loss_fn: the loss of the L-BFGS phase if it differs from ``loss_fn`` (for instance heavier
            physics weights once Adam has fitted the data); None to keep ``loss_fn``.

    Returns:
        :class:`TrainResult` with the final trainables.

    Raises:
        ValueError: for bad settings or a non-finite loss (named with the epoch where it appeared).
        twinfer.checkpoint.CheckpointError: a checkpoint of another run, corrupt, of other shapes or
            dtypes, with impossible counters, or present while ``resume`` is off.

    """
    ensure("train", trainable=trainable)
    _check(settings)
    trainable = tuple(trainable)
    dynamic, static = eqx.partition(trainable, eqx.is_inexact_array)
    adam = _optimiser(dynamic, settings)
    lbfgs = optax.lbfgs(memory_size=settings.lbfgs_memory)
    opt_state: Any = adam.init(dynamic)

    def loss_of(dyn: Any) -> tuple[Any, dict[str, Any]]:
        return loss_fn(eqx.combine(dyn, static))

    second = loss_fn if lbfgs_loss_fn is None else lbfgs_loss_fn

    def second_of(dyn: Any) -> tuple[Any, dict[str, Any]]:
        return second(eqx.combine(dyn, static))

    def value_of(dyn: Any) -> Any:
        return second_of(dyn)[0]

    @eqx.filter_jit
    def adam_chunk(dyn: Any, opt: Any) -> tuple[Any, Any, Any, Any]:
        def step(carry: Any, _: Any) -> tuple[Any, Any]:
            d, o = carry
            (loss, parts), grads = jax.value_and_grad(loss_of, has_aux=True)(d)
            updates, o = adam.update(grads, o, d)
            return (optax.apply_updates(d, updates), o), (loss, parts)

        (dyn, opt), (losses, parts) = jax.lax.scan(step, (dyn, opt), None, length=settings.chunk)
        return dyn, opt, losses, parts

    @eqx.filter_jit
    def lbfgs_chunk(dyn: Any, opt: Any) -> tuple[Any, Any, Any, Any]:
        value_and_grad = optax.value_and_grad_from_state(value_of)

        def step(carry: Any, _: Any) -> tuple[Any, Any]:
            d, o = carry
            value, grads = value_and_grad(d, state=o)
            updates, o = lbfgs.update(grads, o, d, value=value, grad=grads, value_fn=value_of)
            return (optax.apply_updates(d, updates), o), value

        (dyn, opt), losses = jax.lax.scan(step, (dyn, opt), None, length=settings.chunk)
        _, parts = second_of(dyn)  # the parts at the end of the chunk (one extra evaluation)
        return dyn, opt, losses, parts

    epoch, best, stall, history = 0, np.inf, 0, {"epoch": [], "loss": []}
    phase, adam_end, previous_s = "adam", -1, 0.0
    total = settings.epochs + settings.lbfgs_steps
    ckpt = as_checkpoint(checkpoint, "train")
    if ckpt is not None:
        ckpt = ckpt.extended(trainer=digest(settings._asdict()), initial=array_digest(dynamic))
    if ckpt is not None and ckpt.begin():
        snap = ckpt.load("pinn-train")
        meta = snap.meta
        phase, adam_end = str(meta.get("phase")), int(meta.get("adam_end", -1))
        epoch, history = meta.get("epoch"), meta.get("history")
        known = phase in ("adam", "lbfgs", "done")
        if not known or not isinstance(epoch, int) or not isinstance(history, dict):
            raise snap.refuse("its training records (phase, epoch, history) are missing or unknown.")
        chunks = len(history.get("loss", []))
        if not 0 <= epoch <= total + 2 * settings.chunk or chunks * settings.chunk != epoch:
            raise snap.refuse(
                f"it records epoch {epoch} with {chunks} chunks; this training has at most {total} epochs "
                f"in chunks of {settings.chunk}."
            )
        like = (dynamic, opt_state if meta.get("optimiser") == "adam" else lbfgs.init(dynamic))
        dynamic, opt_state = snap.state(like)
        best, stall, previous_s = meta["best"], meta["stall"], meta.get("train_s", 0.0)
    resumed_from, stopped, done = epoch, False, phase == "done"
    start = time.perf_counter()
    n_chunks = 0
    while not done:
        chunk = adam_chunk if phase == "adam" else lbfgs_chunk
        dynamic, opt_state, losses, parts = chunk(dynamic, opt_state)
        losses = np.asarray(losses)
        if not np.all(np.isfinite(losses)):
            bad = int(np.argmax(~np.isfinite(losses)))
            raise ValueError(
                f"train: the loss became non-finite at epoch {epoch + bad + 1} ({phase}, received "
                f"{losses[bad]}); lower learning_rate or check the data scales."
            )
        epoch += settings.chunk
        n_chunks += 1
        mean_loss = float(np.mean(losses) if phase == "adam" else losses[-1])
        history["epoch"].append(epoch)
        history["loss"].append(mean_loss)
        for key, value in parts.items():
            history.setdefault(key, []).append(float(np.mean(np.asarray(value))))
        if mean_loss < best * (1.0 - settings.min_improvement):
            best, stall = mean_loss, 0
        else:
            stall += 1
        plateau = stall >= settings.patience
        if phase == "adam" and (plateau or epoch >= settings.epochs):
            if settings.lbfgs_steps > 0:  # switch to L-BFGS from the current parameters
                phase, adam_end, best, stall = "lbfgs", epoch, np.inf, 0
                opt_state = lbfgs.init(dynamic)
            else:
                done, stopped = True, plateau
        elif phase == "lbfgs" and (plateau or epoch >= adam_end + settings.lbfgs_steps):
            done, stopped = True, plateau
        if done:
            phase = "done"
        if ckpt is not None and (n_chunks % settings.checkpoint_every == 0 or done):
            meta = {"epoch": epoch, "best": best, "stall": stall, "phase": phase, "history": history,
                    "optimiser": "lbfgs" if adam_end >= 0 else "adam", "adam_end": adam_end,
                    "train_s": previous_s + time.perf_counter() - start}  # fmt: skip
            ckpt.save("pinn-train", (dynamic, opt_state), meta)
        if progress is not None:
            progress(stage, min(epoch, total), total)
    if progress is not None:
        progress(stage, total, total)
    return TrainResult(
        trainable=eqx.combine(dynamic, static),
        history=history,
        epochs=epoch,
        stopped_early=stopped,
        resumed_from=resumed_from,
        train_s=previous_s + time.perf_counter() - start,
    )


def loss_parts(loss_fn: LossFn, trainable: tuple[Any, ...]) -> dict[str, float]:
    """The loss parts of ``trainable`` as floats (with ``total``)."""
    total, parts = eqx.filter_jit(loss_fn)(trainable)
    return {"total": float(total), **{k: float(v) for k, v in parts.items()}}
