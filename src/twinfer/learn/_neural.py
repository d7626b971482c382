"""Neural building blocks as twinfer models: an FFNN output function, a neural ODE, an RNN with time events.

Weights live in one flat parameter group ``theta`` (the Model convention of flat 1-D groups), unravelled
into the layers inside the call, so every estimator and the training loop see them like any parameter.
Initialisation is Glorot-uniform weights and zero biases (the Lux defaults of the authors' code).

References:
    Thummerer & Mikelsons, model-combination paper, sec. 1.2 and A.9 (FFNN = output map g, neural ODE =
    FFNN in f_c, RNN = discrete state updated at periodic time events); specs 3.2 (MLM) and 3.8.

"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from twinfer.models import AbstractModel, Params
from twinfer.models._base import Input, Output, State

_ACT = {"tanh": jnp.tanh, "identity": lambda v: v, "relu": jax.nn.relu}


def _layer_shapes(sizes: Sequence[int]) -> list[tuple[tuple[int, int], tuple[int]]]:
    return [((sizes[i + 1], sizes[i]), (sizes[i + 1],)) for i in range(len(sizes) - 1)]


def init_mlp(key: Any, sizes: Sequence[int]) -> Array:
    """Flat parameters of an FFNN: Glorot-uniform weights, zero biases."""
    parts = []
    for (w_shape, b_shape), k in zip(
        _layer_shapes(sizes), jax.random.split(key, len(sizes) - 1), strict=True
    ):
        limit = np.sqrt(6.0 / (w_shape[0] + w_shape[1]))
        parts += [jnp.ravel(jax.random.uniform(k, w_shape, minval=-limit, maxval=limit)), jnp.zeros(b_shape)]
    return jnp.concatenate(parts)


def apply_mlp(theta: Array, sizes: Sequence[int], activations: Sequence[str], v: Array) -> Array:
    """Evaluate the FFNN ``act_L(W_L ... act_1(W_1 v + c_1) ... + c_L)`` with weights from ``theta``."""
    offset = 0
    for (w_shape, b_shape), act in zip(_layer_shapes(sizes), activations, strict=True):
        n_w = w_shape[0] * w_shape[1]
        w = jnp.reshape(theta[offset : offset + n_w], w_shape)
        b = theta[offset + n_w : offset + n_w + b_shape[0]]
        offset += n_w + b_shape[0]
        v = _ACT[act](w @ v + b)
    return v


def _check(sizes: Sequence[int], activations: Sequence[str]) -> None:
    if len(sizes) < 2 or any(int(s) < 1 for s in sizes):
        raise ValueError(f"MLP sizes: expected >= 2 positive layer widths; received {list(sizes)}.")
    if len(activations) != len(sizes) - 1 or any(a not in _ACT for a in activations):
        raise ValueError(
            f"MLP activations: expected {len(sizes) - 1} of {sorted(_ACT)}; received {list(activations)}."
        )


class MLP(AbstractModel):
    """A feed-forward network as a static model: input upsilon, output gamma = g(upsilon) (no state).

    ``layout`` builds the output from network outputs and pass-through inputs: entry ``("net", k)``
    is network output k, ``("in", j)`` is input j. The second-order MLM of experiment 1 is
    ``[("in", 0), ("net", 0), ("in", 2), ("net", 1)]`` (specs 3.2, the authors' LuxSecondOrderModel).

    Args:
        sizes: layer widths, input first.
        activations: one per layer.
        key: PRNG key of the initialisation.
        layout: output layout (default: the network outputs in order).
        names: ``(input_names, output_names)``; default ``u1..``, ``y1..``.

    """

    params: Params
    sizes: tuple[int, ...] = eqx.field(static=True)
    activations: tuple[str, ...] = eqx.field(static=True)
    layout: tuple[tuple[str, int], ...] = eqx.field(static=True)
    names: tuple[tuple[str, ...], tuple[str, ...]] = eqx.field(static=True)

    def __init__(
        self,
        sizes: Sequence[int],
        activations: Sequence[str],
        *,
        key: Any,
        layout: Sequence[tuple[str, int]] | None = None,
        names: tuple[Sequence[str], Sequence[str]] | None = None,
    ):
        _check(sizes, activations)
        self.sizes, self.activations = tuple(int(s) for s in sizes), tuple(activations)
        self.layout = tuple(layout) if layout is not None else tuple(("net", k) for k in range(sizes[-1]))
        for kind, idx in self.layout:
            limit = self.sizes[0] if kind == "in" else self.sizes[-1]
            if kind not in ("in", "net") or not 0 <= idx < limit:
                raise ValueError(
                    f"MLP layout entry {(kind, idx)!r}: expected ('in', <{limit}) or ('net', ...)."
                )
        if names is None:
            names = (
                tuple(f"u{i + 1}" for i in range(self.sizes[0])),
                tuple(f"y{i + 1}" for i in range(len(self.layout))),
            )
        self.names = (tuple(names[0]), tuple(names[1]))
        self.params = {"theta": init_mlp(key, self.sizes)}

    @property
    def state_names(self) -> tuple[str, ...]:
        return ()

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.names[0]

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.names[1]

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        return jnp.zeros((0,))

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        net = apply_mlp(params["theta"], self.sizes, self.activations, u)
        return jnp.stack([u[i] if kind == "in" else net[i] for kind, i in self.layout])
