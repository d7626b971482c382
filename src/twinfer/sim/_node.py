"""A graph subsystem's transition and output from a model: the model discretised, messages as an input.

A compositional-inference subsystem (:class:`twinfer.infer.graph.Subsystem`) is a local discrete-time
model ``x' = transition(x, u, m, params)``, ``y = output(x, u, m, params)`` whose aggregated interface
message ``m`` acts on it. For the mechanical and network models of the papers the message is a force
(or torque, or power) on the same coordinates as the model's own inputs, so it enters as one more term
of the input: the subsystem integrates ``model.vector_field(t, x, u + m, params)`` with the step of
:func:`twinfer.sim.discretise`, the message held over the step like the input (section 1, eq. S1-S2;
Jacobi holds it over the step, S3). The physics is the model's and the integrator is ``sim``'s; a
subsystem adds nothing to either.

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource", section 1, SI eq. (S1)-(S4),
    (S20)-(S26) (the chain's segments, messages as forces).

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from twinfer.models import AbstractModel
from twinfer.sim._discretise import discretise
from twinfer.sim._steps import heun_step, substep_loop


class Dynamics(NamedTuple):
    """The continuous-time side of a staged graph node, which a field's predicted messages step.

    Attributes:
        vector_field: ``(x, u, m, params) -> dx/dt`` with ``m`` the message of one integrator stage.
        dt: step length.
        substeps: steps of ``dt / substeps`` per step.
        method: the integrator (a :func:`twinfer.sim.discretise` method; ``"heun"`` for a staged node).

    """

    vector_field: Callable[[Any, Any, Any, Any], Any]
    dt: float
    substeps: int
    method: str = "heun"


class GraphNode(NamedTuple):
    """The two functions a :class:`~twinfer.infer.graph.Subsystem` is built from.

    Attributes:
        transition: ``(x, u, m, params) -> x_next`` over one step.
        output: ``(x, u, m, params) -> y`` at the state with the step's input and message.

    """

    transition: Callable[[Any, Any, Any, Any], Any]
    output: Callable[[Any, Any, Any, Any], Any]
    dynamics: Dynamics | None = None


def graph_node(model: AbstractModel, dt: float, method: str = "rk4", substeps: int = 1) -> GraphNode:
    """A subsystem's ``transition`` and ``output``: a time-invariant model, its message added to its input.

    The message vector must have the model's input length: slot ``i`` of ``m`` is added to input ``i``
    (a chain segment's messages are the cut connections' forces on its masses, its inputs the external
    forces on the same masses). ``params`` is the subsystem's own parameter pytree, in the model's
    structure, so subsystems built from one call (one model structure) with different numbers batch
    together in :func:`twinfer.infer.graph._run.compile`. Time does not enter (a subsystem has no time
    argument): the model is evaluated at ``t = 0``.

    Args:
        model: the continuous-time model (for a partition, one segment of the whole, e.g.
            :meth:`twinfer.models.Chain.segment`, augmented with unknown parameters if estimated).
        dt: step length, finite and positive.
        method: a :func:`twinfer.sim.discretise` method.
        substeps: steps of ``dt / substeps`` per step.

    Returns:
        :class:`GraphNode` ``(transition, output, dynamics)``; ``dynamics`` (None for ``"exact"``) lets
        :meth:`twinfer.infer.graph.Graph.monolithic` step the coupled model with the same integrator.

    References:
        compositional-inference paper, section 1, SI (S1)-(S4).

    """
    step = discretise(model, dt, method, substeps)
    n_input = model.n_input

    def driven(u: Any, m: Any) -> Any:
        if jnp.shape(m) != (n_input,) or jnp.shape(u) != (n_input,):
            raise ValueError(
                f"graph_node {type(model).__name__}: expected the input u and the message m of the model's "
                f"input length ({n_input},) (each message slot adds to one input); received u of shape "
                f"{jnp.shape(u)} and m of shape {jnp.shape(m)}."
            )
        return u + m

    def transition(x: Any, u: Any, m: Any, params: Any) -> Any:
        return step.transition(0.0, x, driven(u, m), params)

    def output(x: Any, u: Any, m: Any, params: Any) -> Any:
        return model.output(0.0, x, driven(u, m), params)

    def vector_field(x: Any, u: Any, m: Any, params: Any) -> Any:
        return model.vector_field(0.0, x, driven(u, m), params)

    dynamics = None if method == "exact" else Dynamics(vector_field, float(dt), int(substeps), method)
    return GraphNode(transition, output, dynamics)


class StagedNode(NamedTuple):
    """A subsystem's ``transition`` reading one message per Heun stage, and its :class:`Dynamics`."""

    transition: Callable[[Any, Any, Any, Any], Any]
    dynamics: Dynamics


def heun_node(vector_field: Callable[[Any, Any, Any, Any], Any], dt: float, substeps: int = 1) -> StagedNode:
    """A subsystem stepped by ``substeps`` Heun steps whose message is given per stage.

    The transition's message is ``m`` of shape ``(substeps, 2, n_msg)``: row ``[k, 0]`` drives the
    predictor stage of sub-step ``k``, row ``[k, 1]`` its corrector (S79-S80). A message held over the
    step (Jacobi, S3 and S89) is the same row repeated; a message that follows the neighbours through the
    step (a field's ``"predicted"`` messages, :class:`twinfer.infer.graph.Field`) differs per stage. Each
    sub-step is :func:`twinfer.sim.heun_step`, so the node and the network's own Heun simulation share the
    integrator.

    Args:
        vector_field: ``(x, u, m_stage, params) -> dx/dt`` (m_stage of length n_msg).
        dt: step length, finite and positive.
        substeps: Heun steps of ``dt / substeps`` per step, >= 1.

    Returns:
        :class:`StagedNode` ``(transition, dynamics)``.

    References:
        compositional-inference paper, SI (S79)-(S80), (S89).

    """
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"heun_node dt: expected a finite step > 0; received {dt}.")
    if int(substeps) != substeps or substeps < 1:
        raise ValueError(f"heun_node substeps: expected an integer >= 1; received {substeps}.")
    substeps = int(substeps)
    h = dt / substeps

    def transition(x: Any, u: Any, m: Any, params: Any) -> Any:
        def stage(mk: Any) -> Callable[[Any, Any], Any]:
            return lambda t, xx: vector_field(xx, u, mk, params)

        def one(k: Any, xx: Any) -> Any:
            return heun_step((stage(m[k, 0]), stage(m[k, 1])), 0.0, xx, h)

        return substep_loop(one, x, substeps)

    return StagedNode(transition, Dynamics(vector_field, float(dt), substeps))
