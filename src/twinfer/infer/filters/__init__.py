"""Filters: UKF, RTS smoother, bootstrap particle filter, joint state-parameter augmentation."""

from twinfer.infer.filters._augment import Augmented, augment
from twinfer.infer.filters._particle import ParticleOutput, particle_filter, systematic_resample
from twinfer.infer.filters._smoother import SmootherOutput, rts_smooth
from twinfer.infer.filters._ukf import FilterOutput, UnscentedWeights, run_ukf, ukf_scan

__all__ = [
    "Augmented",
    "FilterOutput",
    "ParticleOutput",
    "SmootherOutput",
    "UnscentedWeights",
    "augment",
    "particle_filter",
    "rts_smooth",
    "run_ukf",
    "systematic_resample",
    "ukf_scan",
]
