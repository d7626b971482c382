"""Kalman-family filters: unscented Kalman filter and joint state-parameter augmentation."""

from twinfer.infer.filters._augment import Augmented, augment
from twinfer.infer.filters._ukf import FilterOutput, UnscentedWeights, run_ukf, ukf_scan

__all__ = ["Augmented", "FilterOutput", "UnscentedWeights", "augment", "run_ukf", "ukf_scan"]
