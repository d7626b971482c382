"""Filters built from the Gaussian core: square-root KF/EKF/UKF drivers, RTS smoother, particle filter.

The atoms they run (predict, update, tria, linearisations) live in :mod:`twinfer.infer.gaussian`.
:func:`run_filter` (also importable as ``filter``) and :func:`smooth` are the entry points on a model
and a dataset; :func:`run_ukf` on functions and covariances; :func:`gaussian_filter`, :func:`ukf_scan`
and :func:`ukf_step` are the square-root drivers (factors named ``chol_*``).
"""

from twinfer.infer.filters._api import (
    ESTIMATORS,
    LINEARISATIONS,
    EstimateOptions,
    EstimateResult,
    filter,
    run_filter,
    smooth,
)
from twinfer.infer.filters._augment import Augmented, augment
from twinfer.infer.filters._errors import (
    NIS_ALPHA,
    NIS_LOW,
    NIS_WARN,
    DivergenceError,
    FilterConsistencyWarning,
    ParameterBoundWarning,
    nis_band,
)
from twinfer.infer.filters._gaussian_filter import GaussianFilterOutput, gaussian_filter
from twinfer.infer.filters._particle import ParticleOutput, particle_filter, systematic_resample
from twinfer.infer.filters._smoother import SmootherOutput, rts_smooth
from twinfer.infer.filters._tune import NOISE_BOUNDS, PLATEAU, PROCESS_BOUNDS, NoiseTuning, tuning_of
from twinfer.infer.filters._ukf import FilterOutput, UkfStep, run_ukf, ukf_scan, ukf_step
from twinfer.infer.filters._wls import STATIC_STEPS, WlsStep, wls_step, wnls_step
from twinfer.infer.gaussian import UnscentedWeights, linear, taylor, unscented

__all__ = [
    "ESTIMATORS",
    "LINEARISATIONS",
    "NIS_ALPHA",
    "NIS_LOW",
    "NIS_WARN",
    "NOISE_BOUNDS",
    "PLATEAU",
    "PROCESS_BOUNDS",
    "STATIC_STEPS",
    "Augmented",
    "DivergenceError",
    "EstimateOptions",
    "EstimateResult",
    "FilterConsistencyWarning",
    "FilterOutput",
    "GaussianFilterOutput",
    "NoiseTuning",
    "ParameterBoundWarning",
    "ParticleOutput",
    "SmootherOutput",
    "UkfStep",
    "UnscentedWeights",
    "WlsStep",
    "augment",
    "filter",
    "gaussian_filter",
    "linear",
    "nis_band",
    "particle_filter",
    "rts_smooth",
    "run_filter",
    "run_ukf",
    "smooth",
    "systematic_resample",
    "taylor",
    "tuning_of",
    "ukf_scan",
    "ukf_step",
    "unscented",
    "wls_step",
    "wnls_step",
]
