"""twinfer: uncertainty-aware inverse inference on engineered dynamical systems.

Importing twinfer changes no global JAX setting. :func:`configure` switches on float64 (every estimator
works in double precision: DESIGN.md, Conventions) and, on the CPU, lowerings of batched factorisations
that cannot deadlock XLA's thread pool (:mod:`twinfer.linalg`); the ``twinfer`` command calls it, and the
entry points that run an estimator or a simulator apply it on first use when nobody has. Entry points
that receive float32 arrays raise instead of losing digits.
"""

from twinfer import data, metrics, models, sim
from twinfer._config import configure
from twinfer._version import __version__
from twinfer.data import Dataset
from twinfer.errors import TwinferError
from twinfer.infer import PN, Banded, Central, Distributed, Estimate, Program, compile, estimate
from twinfer.infer.graph import Graph
from twinfer.models import StateSpace

__all__ = [
    "PN",
    "Banded",
    "Central",
    "Dataset",
    "Distributed",
    "Estimate",
    "Graph",
    "Program",
    "StateSpace",
    "TwinferError",
    "__version__",
    "compile",
    "configure",
    "data",
    "estimate",
    "metrics",
    "models",
    "sim",
]
