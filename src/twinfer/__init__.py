"""twinfer: uncertainty-aware inverse inference on engineered dynamical systems.

Float64 is switched on when twinfer is imported: every estimator works in double precision
(DESIGN.md, Conventions). Entry points that receive float32 arrays raise instead of losing digits.
"""

import jax

jax.config.update("jax_enable_x64", True)

from twinfer import data, metrics, models, sim  # noqa: E402

__version__ = "0.1.0"

__all__ = ["data", "metrics", "models", "sim", "__version__"]
