"""Compositional inference: subsystems with local estimators exchanging interface messages on a graph.

The parts (:class:`Subsystem`, :class:`Port`, :class:`Interface`, :class:`Field`) make a :class:`Graph`;
builders make graphs from library models (:func:`from_model`, also ``Graph.from_model``;
:func:`chain_graph`, :func:`model_graph`), from models joined through their inputs and outputs, an FMU
among them (``Graph.from_model`` on a :class:`Coupled` model), from power networks
(:func:`kuramoto_graph`) and from partitions (:class:`Partition`). A graph is run by
:func:`twinfer.infer.estimate` or compiled into a :class:`~twinfer.infer.Program` by
:func:`twinfer.infer.compile`, with a :class:`~twinfer.infer.Distributed` method (local message
passing on a :class:`Schedule`; the field engine for networks coupled by sparse sums) or a
:class:`~twinfer.infer.Banded` one (the banded filter that keeps each subsystem's correlation with its
neighbours, :func:`default_bandwidth` wide). :func:`check_messages` measures what messages lose against
the banded filter (:class:`MessageFitWarning`); :func:`clear_compiled` empties the compiled-program
caches. The design of messages and of the banded filter, with their measurements, is in
``docs/design-messages.md`` and ``docs/design-banded.md``.

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource for coupled engineered systems",
    section 1, Alg. 1-3 (specs/compositional-inference.md sections 1-2).

"""

from twinfer.infer.graph._builders import from_model
from twinfer.infer.graph._cache import clear_compiled
from twinfer.infer.graph._chain import chain_graph
from twinfer.infer.graph._check import MessageFitWarning, check_messages, default_bandwidth
from twinfer.infer.graph._coupled import Coupled, CoupledError, CoupledLoopError, Link
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._kuramoto import kuramoto_graph
from twinfer.infer.graph._messages import Schedule
from twinfer.infer.graph._model import model_graph
from twinfer.infer.graph._partition import Partition
from twinfer.infer.graph._parts import Field, Interface, Port, Subsystem

__all__ = [
    "Coupled",
    "CoupledError",
    "CoupledLoopError",
    "Field",
    "Graph",
    "Interface",
    "Link",
    "MessageFitWarning",
    "Partition",
    "Port",
    "Schedule",
    "Subsystem",
    "chain_graph",
    "check_messages",
    "clear_compiled",
    "default_bandwidth",
    "from_model",
    "kuramoto_graph",
    "model_graph",
]
