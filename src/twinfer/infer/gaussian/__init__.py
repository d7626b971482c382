"""The one Gaussian core: square-root atoms, small-matrix linear algebra and linearisations.

Everything below that filters calls these; nothing else writes a Kalman update (DESIGN.md):

* atoms on ``(mean, chol)``: :func:`predict`, :func:`update` (one masking rule, correlated noise
  allowed), :func:`predict_condition` (both in one factorisation, for a measurement map known
  before the prediction), :func:`condition` (on a joint factor; :func:`condition_moments` on its Gram
  matrix, the same read-off), :func:`condition_exact` (noise-free
  pseudo-observations), :func:`update_scalar` (sequential Potter updates), :func:`masked_loglik`;
* linear algebra whose unrolled kernels are chosen by size: :func:`tria`, :func:`tria_rows`,
  :func:`tria_scalar`, :func:`cholesky`, :func:`solve_lower`, :func:`solve_upper_t`,
  :func:`cho_solve`;
* linearisations: :func:`linear` (KF), :func:`taylor` (EKF), :func:`unscented` (UKF) with
  :class:`UnscentedWeights`.
"""

from twinfer.infer.gaussian._atoms import (
    UpdateInfo,
    condition,
    condition_exact,
    condition_moments,
    masked_loglik,
    noise_factor,
    predict,
    predict_condition,
    update,
    update_scalar,
)
from twinfer.infer.gaussian._linalg import (
    HOUSEHOLDER_MAX,
    UNROLL_MAX,
    cho_solve,
    cholesky,
    solve_lower,
    solve_upper_t,
    tria,
    tria_rows,
    tria_scalar,
)
from twinfer.infer.gaussian._linearise import (
    Linearisation,
    UnscentedWeights,
    deviation_factor,
    linear,
    reads_factor,
    taylor,
    unscented,
)
from twinfer.linalg import psd_factor

__all__ = [
    "HOUSEHOLDER_MAX",
    "UNROLL_MAX",
    "Linearisation",
    "UnscentedWeights",
    "UpdateInfo",
    "cho_solve",
    "cholesky",
    "condition",
    "condition_exact",
    "condition_moments",
    "deviation_factor",
    "linear",
    "masked_loglik",
    "noise_factor",
    "predict",
    "predict_condition",
    "psd_factor",
    "reads_factor",
    "solve_lower",
    "solve_upper_t",
    "taylor",
    "tria",
    "tria_rows",
    "tria_scalar",
    "unscented",
    "update",
    "update_scalar",
]
