"""The named errors of :class:`twinfer.models.FMU` (issue #56).

Every problem found while validating an FMU is an :class:`FMUError` (a
:class:`~twinfer.errors.TwinferValueError`) naming the field, the expected and the received value; a
failing FMI call while the model runs is an :class:`FMUCallError` (a
:class:`~twinfer.errors.TwinferRuntimeError`).
"""

from __future__ import annotations

from twinfer.errors import TwinferRuntimeError, TwinferValueError


class FMUError(TwinferValueError):
    """Base of the errors raised while validating an FMU (nothing of it has run yet)."""


class FMUNotFoundError(FMUError):
    """The FMU path names no file."""


class FMUArchiveError(FMUError):
    """The file is not a zip archive, has no ``modelDescription.xml``, or that file does not parse."""


class FMUKindError(FMUError):
    """Not FMI 2.0 or 3.0, no Model Exchange interface (co-simulation only), or FMI 3.0 clocks."""


class FMUPlatformError(FMUError):
    """The FMU has no binary for this platform."""


class FMUEventsError(FMUError):
    """Events the model cannot carry (:mod:`twinfer.models._fmu_events`).

    Discrete variables of an FMU with events, a parameter outside ``params`` that an event changes, or a
    time event from an FMU that defined none at its start.
    """


class FMUVariableError(FMUError):
    """A variable or parameter name the model description does not have, or one that cannot be set."""


class FMUCallError(TwinferRuntimeError):
    """An FMI function returned an error status while the model ran."""


class FMUTerminatedError(FMUCallError):
    """The FMU asked to end the simulation (``terminateSimulation`` at an event, FMI 2.0.4 section 3.2.2)."""
