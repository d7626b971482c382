"""Kalman-family filters: UKF, RTS smoother, joint state-parameter augmentation."""

from twinfer.infer.filters._augment import Augmented, augment
from twinfer.infer.filters._smoother import SmootherOutput, rts_smooth
from twinfer.infer.filters._ukf import FilterOutput, UnscentedWeights, run_ukf, ukf_scan

__all__ = [
    "Augmented",
    "FilterOutput",
    "SmootherOutput",
    "UnscentedWeights",
    "augment",
    "rts_smooth",
    "run_ukf",
    "ukf_scan",
]
