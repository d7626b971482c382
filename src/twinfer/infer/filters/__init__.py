"""Filters built from the Gaussian core: square-root KF/EKF/UKF drivers, RTS smoother, particle filter.

The atoms they run (predict, update, tria, linearisations) live in :mod:`twinfer.infer.gaussian`; the
way to run a filter over a record, or one measurement at a time, is :func:`twinfer.infer.estimate` and
:func:`twinfer.infer.compile` with a :class:`~twinfer.infer.Central` method. Here: :func:`run_filter` and
:func:`smooth` on a model and a dataset (the keywords of the central method); :func:`run_ukf` on
functions and covariances; :func:`gaussian_filter`, :func:`ukf_scan` and :func:`ukf_step` are the
square-root drivers (factors named ``chol_*``); :func:`augment` appends unknown parameters as random
walks; :func:`tuning_of` reads the noise levels an ``"auto"`` run chose.
"""

from twinfer.infer.filters._api import run_filter, smooth
from twinfer.infer.filters._augment import augment
from twinfer.infer.filters._errors import DivergenceError, FilterConsistencyWarning, ParameterBoundWarning
from twinfer.infer.filters._gaussian_filter import GaussianFilterOutput, Kernel, gaussian_filter
from twinfer.infer.filters._particle import particle_filter
from twinfer.infer.filters._smoother import rts_smooth
from twinfer.infer.filters._tune import NoiseTuning, tuning_of
from twinfer.infer.filters._ukf import run_ukf, ukf_scan, ukf_step

__all__ = [
    "DivergenceError",
    "FilterConsistencyWarning",
    "GaussianFilterOutput",
    "Kernel",
    "NoiseTuning",
    "ParameterBoundWarning",
    "augment",
    "gaussian_filter",
    "particle_filter",
    "rts_smooth",
    "run_filter",
    "run_ukf",
    "smooth",
    "tuning_of",
    "ukf_scan",
    "ukf_step",
]
