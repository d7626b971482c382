"""Filters: UKF, RTS smoother, bootstrap particle filter, joint state-parameter augmentation."""

from twinfer.infer.filters._api import EstimateResult, filter, smooth
from twinfer.infer.filters._augment import Augmented, augment
from twinfer.infer.filters._particle import ParticleOutput, particle_filter, systematic_resample
from twinfer.infer.filters._smoother import SmootherOutput, rts_smooth
from twinfer.infer.filters._ukf import FilterOutput, UnscentedWeights, run_ukf, ukf_scan

__all__ = [
    "Augmented",
    "EstimateResult",
    "FilterOutput",
    "ParticleOutput",
    "SmootherOutput",
    "UnscentedWeights",
    "augment",
    "filter",
    "particle_filter",
    "rts_smooth",
    "smooth",
    "run_ukf",
    "systematic_resample",
    "ukf_scan",
]
