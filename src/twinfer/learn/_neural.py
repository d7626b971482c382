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
from twinfer.models.bouncing_ball import AbstractPlanarMotion

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


class _EventsFrom(AbstractModel):
    """Shared event delegation: state events (and the discrete state) of an optional event model."""

    event_model: eqx.AbstractVar[AbstractModel | None]

    @property
    def discrete_state_names(self) -> tuple[str, ...]:
        return () if self.event_model is None else self.event_model.discrete_state_names

    @property
    def n_events(self) -> int:
        return 0 if self.event_model is None else self.event_model.n_events

    def initial_discrete_state(self, params: Params) -> Array:
        m = self.event_model
        return jnp.zeros((0,)) if m is None else m.initial_discrete_state(m.params)

    def event_indicators(self, t: Any, x: State, z: Array, u: Input, params: Params) -> Array:
        m = self.event_model
        return jnp.zeros((0,)) if m is None else m.event_indicators(t, x, z, u, m.params)

    def event_update(
        self, t: Any, x: State, z: Array, u: Input, params: Params, which: Array
    ) -> tuple[State, Array]:
        m = self.event_model
        return (x, z) if m is None else m.event_update(t, x, z, u, m.params, which)


class SecondOrderNeuralODE(_EventsFrom, AbstractPlanarMotion):
    """Neural ODE of a 2-D mechanical state ``[s_x, v_x, s_y, v_y]``: dx/dt = [v_x, NN_1(x), v_y, NN_2(x)].

    With ``event_model`` (e.g. the bouncing ball) its state events act on the state ("Cont. + Eve.").

    References:
        Model-combination paper A.9; specs 3.8 (the authors' LuxSecondOrderNeuralODE, NN 4-16-16-2).

    """

    params: Params
    sizes: tuple[int, ...] = eqx.field(static=True)
    activations: tuple[str, ...] = eqx.field(static=True)
    event_model: AbstractModel | None

    def __init__(
        self,
        *,
        key: Any,
        sizes: Sequence[int] = (4, 16, 16, 2),
        activations: Sequence[str] = ("tanh", "tanh", "identity"),
        event_model: AbstractModel | None = None,
    ):
        _check(sizes, activations)
        if sizes[0] != 4 or sizes[-1] != 2:
            raise ValueError(
                f"SecondOrderNeuralODE sizes: expected 4 inputs and 2 outputs; received {sizes}."
            )
        self.sizes, self.activations = tuple(sizes), tuple(activations)
        self.params = {"theta": init_mlp(key, self.sizes)}
        self.event_model = event_model

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        acc = apply_mlp(params["theta"], self.sizes, self.activations, x)
        return jnp.stack([x[1], acc[0], x[3], acc[1]])


class RNN(AbstractModel):
    """A recurrent network as a time-event model: its hidden state is the discrete state.

    ``z = [h_1..h_n, t_next]``; at each sampling instant (a time event, period ``1 / rate``) the update
    is ``h <- NN(h)`` and ``t_next += 1 / rate``; the output is ``h``. The continuous state is a single
    clock (dt/dt = 1) so the common simulator applies. With ``event_model`` (the bouncing ball, "Disc. +
    Eve."), every indicator of the event model that goes from >= 0 to < 0 across the update fires its
    update on h.

    References:
        Model-combination paper sec. 1.2 and A.9; specs 3.8 (LuxDiscreteModel(:time), 20 Hz in the code).

    """

    params: Params
    sizes: tuple[int, ...] = eqx.field(static=True)
    activations: tuple[str, ...] = eqx.field(static=True)
    rate: float = eqx.field(static=True)
    event_model: AbstractModel | None

    def __init__(
        self,
        *,
        key: Any,
        sizes: Sequence[int] = (4, 16, 16, 4),
        activations: Sequence[str] = ("tanh", "tanh", "identity"),
        rate: float = 20.0,
        event_model: AbstractModel | None = None,
    ):
        _check(sizes, activations)
        if sizes[0] != sizes[-1]:
            raise ValueError(f"RNN sizes: expected as many outputs as inputs; received {list(sizes)}.")
        if not rate > 0:
            raise ValueError(f"RNN rate: expected a positive sampling rate [Hz]; received {rate}.")
        self.sizes, self.activations, self.rate = tuple(sizes), tuple(activations), float(rate)
        self.params = {"theta": init_mlp(key, self.sizes)}
        self.event_model = event_model

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("clock",)

    @property
    def input_names(self) -> tuple[str, ...]:
        return ()

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f"h{i + 1}" for i in range(self.sizes[0]))

    @property
    def discrete_state_names(self) -> tuple[str, ...]:
        return (*self.output_names, "t_next")

    @property
    def has_time_events(self) -> bool:
        return True

    def initial_state(self, h0: Any, t0: float = 0.0) -> tuple[Array, Array]:
        """``(x0, z0)`` for hidden state ``h0`` at time ``t0``; the first update is at ``t0 + 1/rate``."""
        return jnp.array([t0]), jnp.concatenate(
            [jnp.asarray(h0, dtype=float), jnp.array([t0 + 1 / self.rate])]
        )

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        return jnp.ones(1)

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        raise TypeError("RNN output depends on the discrete state; use hybrid_output.")

    def hybrid_output(self, t: Any, x: State, z: Array, u: Input, params: Params) -> Output:
        return z[:-1]

    def next_time_event(self, t: Any, z: Array, u: Input, params: Params) -> Any:
        return z[-1]

    def time_event_update(self, t: Any, x: State, z: Array, u: Input, params: Params) -> tuple[State, Array]:
        h = z[:-1]
        new = apply_mlp(params["theta"], self.sizes, self.activations, h)
        m = self.event_model
        if m is not None:
            zm = m.initial_discrete_state(m.params)
            before = m.event_indicators(t, h, zm, u, m.params)
            after = m.event_indicators(t, new, zm, u, m.params)
            # a crossing out of the box: inside (c >= 0) before, outside after. Not the bare sign
            # change of the authors' code, whose reset puts the ball 1e-16 inside the wall: ours puts it
            # on the wall (c = 0), which a sign test would count as a new bounce at every update.
            which = (before >= 0) & (after < 0)
            new = m.event_update(t, new, zm, u, m.params, which)[0]
        return x, jnp.concatenate([new, z[-1:] + 1 / self.rate])
