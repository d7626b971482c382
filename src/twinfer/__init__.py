"""twinfer: uncertainty-aware inverse inference on engineered dynamical systems.

Float64 is switched on when twinfer is imported: every estimator works in double precision
(DESIGN.md, Conventions). Entry points that receive float32 arrays raise instead of losing digits.
Batched factorisations on the CPU are lowered so that they cannot deadlock XLA's thread pool
(:mod:`twinfer.linalg`).
"""

import jax

jax.config.update("jax_enable_x64", True)

from twinfer.linalg import use_batch_safe_lowerings  # noqa: E402

use_batch_safe_lowerings()  # batched LAPACK calls can deadlock XLA on 2 cores: see twinfer.linalg

from twinfer import data, metrics, models, sim  # noqa: E402

__version__ = "0.1.0"

__all__ = ["data", "metrics", "models", "sim", "__version__"]
