"""Filters: square-root KF/EKF/UKF, paper-code UKF, RTS smoother, particle filter, augmentation."""

from twinfer.infer.filters._api import EstimateResult, filter, smooth
from twinfer.infer.filters._atoms import UpdateInfo, predict, tria, update
from twinfer.infer.filters._augment import Augmented, augment
from twinfer.infer.filters._errors import NIS_WARN, DivergenceError, FilterConsistencyWarning
from twinfer.infer.filters._gaussian_filter import (
    GaussianFilterOutput,
    gaussian_filter,
    linear,
    taylor,
    unscented,
)
from twinfer.infer.filters._particle import ParticleOutput, particle_filter, systematic_resample
from twinfer.infer.filters._smoother import SmootherOutput, rts_smooth
from twinfer.infer.filters._ukf import FilterOutput, UkfStep, UnscentedWeights, run_ukf, ukf_scan, ukf_step
from twinfer.infer.filters._wls import WlsStep, wls_step

__all__ = [
    "NIS_WARN",
    "Augmented",
    "DivergenceError",
    "EstimateResult",
    "FilterConsistencyWarning",
    "FilterOutput",
    "GaussianFilterOutput",
    "ParticleOutput",
    "SmootherOutput",
    "UkfStep",
    "UnscentedWeights",
    "UpdateInfo",
    "WlsStep",
    "augment",
    "filter",
    "gaussian_filter",
    "linear",
    "particle_filter",
    "predict",
    "rts_smooth",
    "smooth",
    "run_ukf",
    "systematic_resample",
    "taylor",
    "tria",
    "ukf_scan",
    "ukf_step",
    "unscented",
    "update",
    "wls_step",
]
