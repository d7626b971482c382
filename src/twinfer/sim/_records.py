"""What a simulated record's cases read besides its outputs: accelerations along it, sensors as inputs.

Two steps every simulated case took in its own words: the accelerations of a mechanical model at every
sample of a trajectory (the clean signal an accelerometer measures), and a record whose inputs are the
time and some of its own noisy outputs (a subsystem that reads a sensor in place of a neighbour's
estimate, as the compositional-inference paper's turbine modules read the measured speed and flow).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from twinfer.data import Dataset
from twinfer.errors import TwinferValueError
from twinfer.models import AbstractModel


def accelerations(model: AbstractModel, states: Any, inputs: Any, params: Any = None) -> Array:
    """``model.acceleration(x_k, u_k, params)`` at every row of a trajectory.

    Args:
        model: a model with ``acceleration(x, u, params)`` (a chain, a spring network, Bouc-Wen).
        states: (T, n_state) states.
        inputs: (T, n_input) the input each row is read with ((T,) for a model of one scalar input).
        params: the parameters (default: the model's own).

    Returns:
        (T, n_dof) accelerations.

    Raises:
        TwinferValueError: for a model without ``acceleration``, or rows that do not match.

    """
    if not callable(getattr(model, "acceleration", None)):
        raise TwinferValueError(
            f"accelerations model: expected a model with acceleration(x, u, params); received "
            f"{type(model).__name__}."
        )
    xs, us = jnp.asarray(states), jnp.asarray(inputs)
    if xs.ndim != 2 or us.ndim == 0 or xs.shape[0] != us.shape[0]:
        raise TwinferValueError(
            f"accelerations states, inputs: expected (T, {model.n_state}) and (T, {model.n_input}) (or (T,) "
            f"for one input) with the same T; received {tuple(xs.shape)} and {tuple(us.shape)}."
        )
    p = model.params if params is None else params
    acceleration = model.acceleration  # type: ignore[attr-defined]
    return jax.vmap(lambda x, u: acceleration(x, u, p))(xs, us)


def measured_inputs(
    data: Dataset, outputs: Sequence[str], names: Sequence[str], metadata: Mapping[str, Any] | None = None
) -> Dataset:
    """``data`` with its inputs replaced by the time and the measured ``outputs``, row k read at ``t_k``.

    Args:
        data: a record (its observations are the noisy outputs).
        outputs: the output names whose measured values become inputs, in order.
        names: the name of each such input.
        metadata: entries added to (or replacing) the record's metadata.

    Returns:
        A :class:`~twinfer.data.Dataset` with inputs ``[t, y_outputs...]`` named ``("t", *names)`` and
        everything else of ``data``.

    Raises:
        TwinferValueError: for an output the record does not have, or names that do not match.

    """
    have = tuple(data.output_names)
    missing = [s for s in outputs if s not in have]
    if missing or len(outputs) != len(names):
        raise TwinferValueError(
            f"measured_inputs outputs, names: expected outputs among {have} and one name each; received "
            f"{tuple(outputs)} and {tuple(names)}."
        )
    times = np.asarray(data.times)
    obs = np.asarray(data.observations)
    cols = [times, *(obs[:, have.index(s)] for s in outputs)]
    return Dataset(
        times,
        obs,
        inputs=np.stack(cols, axis=1),
        truth_states=data.truth_states,
        truth_params=dict(data.truth_params),
        input_names=("t", *names),
        output_names=have,
        state_names=data.state_names,
        metadata={**data.metadata, **dict(metadata or {})},
    )
