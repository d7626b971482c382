"""Graphs from library models: the dispatch behind :meth:`Graph.from_model`.

A :class:`~twinfer.models.Chain` is cut into contiguous segments of its DOFs (:func:`chain_graph`), a
:class:`~twinfer.models.KuramotoNetwork` into clusters of buses (:func:`kuramoto_graph`), and any other
model that declares its interface coupling into groups of its states (:func:`model_graph`).

References:
    Ghorbani & Hackl, section 1 and 3, SI (S20)-(S26) (the chain's segments), (S73)-(S92) (the grid's
    clusters).

"""

from __future__ import annotations

import dataclasses
from typing import Any

from twinfer.infer.graph._chain import chain_graph
from twinfer.infer.graph._coupled import Coupled, coupled_graph
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._kuramoto import kuramoto_graph
from twinfer.infer.graph._model import model_graph
from twinfer.models import AbstractModel, Chain, KuramotoNetwork


def from_model(model: Any, partition: Any = None, **options: Any) -> Graph:
    """The graph of a library model cut into subsystems along its own interfaces.

    * a :class:`~twinfer.models.Chain` and contiguous DOF groups: :func:`chain_graph` (its keywords);
    * a :class:`~twinfer.infer.graph.Coupled` model, one subsystem per part unless ``partition`` says
      otherwise (a :class:`~twinfer.models.CoSimulationFMU` part a node stepped by ``fmi2DoStep``):
      :func:`~twinfer.infer.graph._coupled.coupled_graph`;
    * a :class:`~twinfer.models.KuramotoNetwork` and a :class:`~twinfer.infer.graph.Partition`:
      :func:`kuramoto_graph` (its keywords; the graph is its ``.graph``, its columns named as the
      network's outputs and inputs);
    * any other model that declares its interface coupling
      (:attr:`~twinfer.models.AbstractModel.connections`, or ``connections=``) and groups of its
      state names: :func:`model_graph` (its keywords).

    Also ``Graph.from_model``.

    Raises:
        TypeError: for a model that declares no interface coupling, naming the ways to give one.

    """
    if isinstance(model, Coupled):
        return coupled_graph(model, partition, **options)
    if partition is None:
        raise TypeError(
            f"Graph.from_model partition: expected the groups to cut a {type(model).__name__} into (only a "
            "Coupled model has a default, one group per part); received none."
        )
    if isinstance(model, Chain):
        return chain_graph(model, partition, **options)
    if isinstance(model, KuramotoNetwork):
        graph = kuramoto_graph(model, partition, **options).graph  # columns read by position: named
        return dataclasses.replace(graph, output_names=model.output_names, input_names=model.input_names)
    if isinstance(model, AbstractModel) and (model.connections or options.get("connections")):
        return model_graph(model, partition, **options)
    raise TypeError(
        "Graph.from_model model: expected a Chain, a KuramotoNetwork or a model that declares its "
        f"interface coupling (a `connections` property or the connections= keyword); received "
        f"{type(model).__name__} with none. Or build the graph from Subsystem (twinfer.sim.graph_node) "
        "and Interface."
    )


Graph.from_model = staticmethod(from_model)
