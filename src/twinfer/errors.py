"""The bases of every error and warning twinfer raises, so ``except TwinferError`` catches them all.

Each error class of the library derives from one of these and keeps its built-in base, so code that
catches the built-in still works:

* :class:`TwinferValueError` (a ``ValueError``): bad input, named by its field, with the expected and
  the received value (a spec, a config, a run folder, a record's step that no integrator can take);
* :class:`TwinferRuntimeError` (a ``RuntimeError``): a failure while running (a checkpoint that cannot
  be used; an internal invariant that does not hold, whose message starts ``internal:``).

A diverging estimator (:class:`twinfer.infer.filters.DivergenceError`) is both a run-time failure and,
as it always was, a ``ValueError`` (the data or the noise levels do not fit the model). Warnings derive
from :class:`TwinferWarning`, so ``warnings.simplefilter("error", TwinferWarning)`` turns every one of
twinfer's into an error.

This module imports nothing from twinfer: it sits below every layer (DESIGN.md, Layers).
"""

from __future__ import annotations

__all__ = ["TwinferError", "TwinferRuntimeError", "TwinferValueError", "TwinferWarning"]


class TwinferError(Exception):
    """Base of every error twinfer raises."""


class TwinferValueError(TwinferError, ValueError):
    """Bad input: the message names the field, the expected and the received value."""


class TwinferRuntimeError(TwinferError, RuntimeError):
    """A failure while running (divergence, an unusable checkpoint, a broken internal invariant)."""


class TwinferWarning(UserWarning):
    """Base of every warning twinfer issues."""
