"""Compositional inference: subsystems with local estimators exchanging interface messages on a graph.

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource for coupled engineered systems",
    section 1, Alg. 1-3 (specs/compositional-inference.md sections 1-2).

"""

from twinfer.infer.graph._banded import banded_estimate, clear_compiled, timed_banded_estimate
from twinfer.infer.graph._check import (
    CHECK_STEPS,
    GAP_WARN,
    MessageCheck,
    MessageFitWarning,
    check_messages,
    default_bandwidth,
    smallest_bandwidth,
)
from twinfer.infer.graph._compile import (
    SCHEDULES,
    Compiled,
    GraphResult,
    Numbers,
    Schedule,
    compile,
    compile_graph,
    compiled_for,
    estimate,
    law_moments,
    law_moments_series,
    run,
    timed_estimate,
    unpack,
    with_numbers,
)
from twinfer.infer.graph._diffusion import diffuse, subsystem_laplacian
from twinfer.infer.graph._field import (
    FIELD_MESSAGES,
    FIELD_VARIANCES,
    Field,
    FieldEngine,
    FieldEstimate,
    FieldNumbers,
    check_field_run,
    field_estimates,
    run_field,
)
from twinfer.infer.graph._from_model import auto_partition, chain_graph, model_graph
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._parts import Interface, Port, Subsystem, two_way

__all__ = [
    "CHECK_STEPS",
    "GAP_WARN",
    "MessageCheck",
    "MessageFitWarning",
    "check_messages",
    "smallest_bandwidth",
    "default_bandwidth",
    "FIELD_MESSAGES",
    "FIELD_VARIANCES",
    "SCHEDULES",
    "Field",
    "FieldEngine",
    "FieldEstimate",
    "FieldNumbers",
    "auto_partition",
    "banded_estimate",
    "clear_compiled",
    "timed_banded_estimate",
    "diffuse",
    "subsystem_laplacian",
    "model_graph",
    "chain_graph",
    "check_field_run",
    "field_estimates",
    "run_field",
    "Compiled",
    "Graph",
    "GraphResult",
    "Interface",
    "Numbers",
    "Port",
    "Schedule",
    "Subsystem",
    "compile",
    "compile_graph",
    "compiled_for",
    "estimate",
    "law_moments",
    "law_moments_series",
    "timed_estimate",
    "run",
    "two_way",
    "unpack",
    "with_numbers",
]
