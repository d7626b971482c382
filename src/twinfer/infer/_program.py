"""The one estimator contract: a :class:`Program` advances an estimate by one measurement.

``twinfer.compile(system, method)`` returns a Program for every estimator family that filters. Its three
verbs are the whole contract (DESIGN.md, Contracts):

- ``program.init(u0=None) -> state``: the prior at t_0, as a pytree of arrays;
- ``program.step(state, frame) -> (state, row)``: one measurement row in (a :class:`Frame`: the input and
  the outputs sampled at t_{k+1}, with a mask of the observed outputs), one estimate :class:`Row` and its
  log-likelihood increment out; jitted, so a live twin calls it once per frame;
- ``program.run(data) -> Estimate``: a scan of ``step`` over a record, in one compiled call.

``state`` holds everything the next step needs (the posterior, the last input, the step count, the
running log-likelihood and NIS sums), so a state saved after row k and restored in another process
continues exactly (:meth:`Program.save_state`, :meth:`Program.load_state`, on :mod:`twinfer.checkpoint`'s
verified format). ``program.with_numbers(...)`` gives the same compiled program other numbers (noise
levels, a prior, model parameters) without a recompile: numbers are the program's array leaves.

The time convention is the dataset's (:meth:`twinfer.data.Dataset.step_inputs`): a frame carries the
input sampled with its outputs; the dynamics over ``[t_k, t_{k+1})`` read the input held from the
previous frame (``input_hold="zoh"``) or the mean of the two (``"linear"``), and the outputs read their
own frame's input (``alignment="sampled"``) or the previous one (``"held"``, the compositional paper's
code). The state carries the previous frame's input for that reason.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from twinfer.checkpoint import Checkpoint, array_digest, digest, package_version
from twinfer.data import Dataset
from twinfer.infer._estimate import Estimate

__all__ = ["Frame", "Program", "Row"]


class Frame(NamedTuple):
    """One measurement row: the input ``u`` (n_u,) and the outputs ``y`` (m,) sampled at one instant.

    ``mask`` (m,) marks the observed outputs (default: where ``y`` is finite); a missing output is
    ``NaN`` or masked, never read.
    """

    u: Any
    y: Any
    mask: Any = None


class Row(NamedTuple):
    """One estimate row: the mean and marginal sd of every column (states, then unknowns) after a frame.

    ``loglik`` is the frame's log-likelihood increment ``log p(y_k | y_1..y_{k-1})``, ``nis`` its
    normalised innovation squared summed over the observed outputs, ``ok`` False where the estimate
    became non-finite (a diverged filter). Unknowns estimated on a log scale are in their own units (the
    log-normal's moments), as in :class:`~twinfer.infer.Estimate`. ``innov`` (m,), where the family
    gives it, is each output's innovation over its own predicted sd (0 where unobserved): N(0, 1) and
    white per sensor under a model that fits, what a live twin's consistency alarm tests.
    """

    mean: Any
    std: Any
    loglik: Any
    nis: Any
    ok: Any
    innov: Any = None


def input_pair(u_prev: Any, u: Any, input_hold: str, alignment: str) -> Any:
    """The step's input pair ``[held, measured]`` from two frames' inputs (:meth:`Dataset.step_inputs`)."""
    held = 0.5 * (u_prev + u) if input_hold == "linear" else u_prev
    meas = u if alignment == "sampled" else u_prev
    return jnp.concatenate([held, meas])


def frames_of(data: Dataset) -> tuple[Any, Frame]:
    """A record as ``(u_0, frames)``: the first row's input and the later rows as stacked frames.

    Measurements that are masked or missing become 0 with the mask False (never read).
    """
    n_u = 0 if data.inputs is None else data.inputs.shape[1]
    inputs = np.zeros((data.n_steps, n_u)) if data.inputs is None else np.asarray(data.inputs)
    mask = np.asarray(data.mask[1:])
    ys = np.where(mask, np.nan_to_num(np.asarray(data.observations[1:])), 0.0)
    return inputs[0], Frame(inputs[1:], ys, mask)


class Program(eqx.Module):
    """A compiled estimator: ``init``, ``step``, ``run`` (the module docstring gives the contract).

    Subclasses hold their numbers as array fields (so :meth:`with_numbers` does not recompile) and their
    structure as static fields. ``state_names`` are the columns of a :class:`Row` and of the
    :class:`~twinfer.infer.Estimate` that :meth:`run` returns; ``parameters`` the unknowns among them.
    """

    state_names: tuple[str, ...] = eqx.field(static=True)
    parameters: tuple[str, ...] = eqx.field(static=True)
    input_names: tuple[str, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)
    input_hold: Literal["zoh", "linear"] = eqx.field(static=True)
    alignment: Literal["sampled", "held"] = eqx.field(static=True)

    @abc.abstractmethod
    def init(self, u0: Any = None) -> Any:
        """The state at t_0 (the prior), with ``u0`` the input sampled at t_0 (zeros when None)."""

    @abc.abstractmethod
    def step(self, state: Any, frame: Frame) -> tuple[Any, Row]:
        """Advance ``state`` by one measurement row; jitted."""

    @abc.abstractmethod
    def run(self, data: Dataset) -> Estimate:
        """The estimate over a whole record: a scan of :meth:`step` in one compiled call."""

    # -- shared --------------------------------------------------------------------------------------
    def steps(self, state: Any, frames: Frame, count: Any) -> tuple[Any, Row]:
        """:meth:`step` over the first ``count`` of stacked frames (leading axis c): a backlog at once.

        A loop whose trip count XLA cannot see, so one compiled program serves every ``count <= c`` (a
        live twin compiles it once per chunk capacity; call it under ``jax.jit``). Rows come stacked,
        zeros past ``count``.
        """
        step = type(self).step
        plain = getattr(step, "__wrapped__", step)  # the jitted step's own function, traced in the loop
        one = jax.tree_util.tree_map(lambda a: a[0], frames)
        shapes = jax.eval_shape(lambda s, f: plain(self, s, f)[1], state, one)
        size = jax.tree_util.tree_leaves(frames)[0].shape[0]
        rows = jax.tree_util.tree_map(lambda a: jnp.zeros((size, *a.shape), a.dtype), shapes)

        def body(i: Any, carry: Any) -> Any:
            s, out = carry
            s, row = plain(
                self, s, jax.tree_util.tree_map(lambda a: lax.dynamic_index_in_dim(a, i, 0, False), frames)
            )
            # a dynamic update slice, written in place; ``acc.at[i].set`` is a scatter, which XLA's CPU
            # backend copied whole each step (23 of 60 us a step of the 24-state chain EKF's backlog)
            return s, jax.tree_util.tree_map(
                lambda acc, x: lax.dynamic_update_index_in_dim(acc, x, i, 0), out, row
            )

        return jax.lax.fori_loop(0, count, body, (state, rows))

    def frame(self, u: Any = None, y: Any = None, mask: Any = None) -> Frame:
        """A :class:`Frame` checked against the program: ``u`` (n_u,), ``y`` (m,) float64, ``mask`` (m,).

        ``y`` None is a frame without measurements (a prediction-only step); a NaN output is missing.

        Raises:
            ValueError: naming the field, the expected and the received shape or dtype.

        """
        n_u, m = len(self.input_names), len(self.output_names)
        u_arr = np.zeros(n_u) if u is None else np.asarray(u)
        y_arr = np.full(m, np.nan) if y is None else np.asarray(y)
        for name, arr, size, names in (
            ("u", u_arr, n_u, self.input_names),
            ("y", y_arr, m, self.output_names),
        ):
            if arr.shape != (size,):
                raise ValueError(
                    f"Program.frame {name}: expected shape ({size},), one value per "
                    f"{', '.join(names) or '-'}; received shape {arr.shape}."
                )
            if arr.dtype != np.float64 and arr.dtype.kind in "fc":
                raise ValueError(
                    f"Program.frame {name}: expected float64; received {arr.dtype} (the estimators run in "
                    "float64: twinfer.configure())."
                )
        u_arr, y_arr = u_arr.astype(np.float64), y_arr.astype(np.float64)
        if not np.isfinite(u_arr).all():
            raise ValueError(f"Program.frame u: expected finite inputs; received {u_arr.tolist()}.")
        if np.isinf(y_arr).any():
            raise ValueError(
                f"Program.frame y: expected finite values or NaN (missing); received {y_arr.tolist()}."
            )
        observed = np.isfinite(y_arr) if mask is None else np.asarray(mask, dtype=bool) & np.isfinite(y_arr)
        if observed.shape != (m,):
            raise ValueError(f"Program.frame mask: expected shape ({m},); received {observed.shape}.")
        return Frame(jnp.asarray(u_arr), jnp.asarray(np.where(observed, y_arr, 0.0)), jnp.asarray(observed))

    def fingerprint(self) -> dict[str, str]:
        """Digests of the program's structure and numbers and of twinfer's version (a state's owner)."""
        leaves = [x for x in jax.tree_util.tree_leaves(self) if eqx.is_array(x)]
        return {
            "program": type(self).__name__,
            "names": digest([self.state_names, self.parameters, self.input_names, self.output_names]),
            "layout": digest([self.input_hold, self.alignment, [[x.dtype.str, x.shape] for x in leaves]]),
            "numbers": array_digest(leaves),
            "version": package_version(),
        }

    def save_state(self, state: Any, path: str | Path, **meta: Any) -> Path:
        """Write ``state`` to ``path`` atomically, fingerprinted by this program (a twin's snapshot)."""
        checkpoint = Checkpoint(Path(path), self.fingerprint(), resume=True)
        checkpoint.save(f"program.{type(self).__name__}", state, meta)
        return checkpoint.path

    def load_state(self, path: str | Path) -> Any:
        """The state saved by :meth:`save_state` of this same program, restored exactly.

        Raises:
            CheckpointError: a corrupt file, or a state of another program (other structure, names,
                numbers or version), named.

        """
        snapshot = Checkpoint(Path(path), self.fingerprint(), resume=True).load(
            f"program.{type(self).__name__}"
        )
        return snapshot.state(self.init())
