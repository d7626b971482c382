"""FMI 3.0 Model Exchange behind the FMI 2.0 calls of twinfer's FMU runtime (issue #56).

The runtime (:class:`~twinfer.models._fmu_runtime.Runtime`) and the event hooks
(:mod:`twinfer.models._fmu_events`) call an FMU's C functions through a table keyed by their FMI 2.0
names, with FMI 2.0 signatures. For an FMI 3.0 FMU this module builds that table from the FMI 3.0
functions (Modelica Association, Functional Mock-up Interface 3.0.1, 2023), each the same operation of
the Model Exchange state machine (chapter 3, "FMI for Model Exchange"; the common functions in chapter
2, "Common Concepts", section "Application Programming Interface"):

- ``fmi2SetReal`` / ``fmi2GetReal``: ``fmi3SetFloat64`` / ``fmi3GetFloat64`` ("Getting and Setting
  Variable Values") with ``nValues = nValueReferences`` (twinfer uses scalar variables only: arrays are
  refused by :func:`twinfer.models._fmu_archive.describe`).
- ``fmi2SetupExperiment`` + ``fmi2EnterInitializationMode``: FMI 3.0 passes the tolerance, start and stop
  time to ``fmi3EnterInitializationMode`` itself ("Initialization, Termination, and Resetting an FMU");
  the first call only keeps them for the second.
- ``fmi2NewDiscreteStates``: ``fmi3UpdateDiscreteStates`` (Event Mode of the state machine), its six
  out-arguments written into the caller's ``fmi2EventInfo`` (``newDiscreteStatesNeeded`` is
  ``discreteStatesNeedUpdate``).
- ``fmi2GetDirectionalDerivative``: ``fmi3GetDirectionalDerivative`` ("Getting Partial Derivatives") with
  ``nSeed = nKnowns`` and ``nSensitivity = nUnknowns``.
- ``fmi2GetDerivatives``: ``fmi3GetContinuousStateDerivatives`` (chapter 3); ``fmi2SetTime``,
  ``fmi2SetContinuousStates``, ``fmi2GetContinuousStates``, ``fmi2GetEventIndicators``, ``fmi2Reset``,
  ``fmi2ExitInitializationMode``, ``fmi2EnterEventMode`` and ``fmi2EnterContinuousTimeMode``: their FMI 3.0
  namesakes, whose signatures are the FMI 2.0 ones.

The status codes are the same numbers in both versions (OK 0, Warning 1, Discard 2, Error 3, Fatal 4).
fmpy sets every FMI 3.0 function's ``argtypes`` from ``fmpy.fmi3`` (the header ``fmi3FunctionTypes.h``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from fmpy.fmi2 import fmi2EventInfo
from fmpy.fmi3 import FMU3Model

SAME = {
    "fmi2SetTime": "fmi3SetTime",
    "fmi2SetContinuousStates": "fmi3SetContinuousStates",
    "fmi2GetDerivatives": "fmi3GetContinuousStateDerivatives",
    "fmi2GetContinuousStates": "fmi3GetContinuousStates",
    "fmi2GetEventIndicators": "fmi3GetEventIndicators",
    "fmi2Reset": "fmi3Reset",
    "fmi2ExitInitializationMode": "fmi3ExitInitializationMode",
    "fmi2EnterEventMode": "fmi3EnterEventMode",
    "fmi2EnterContinuousTimeMode": "fmi3EnterContinuousTimeMode",
}
"""FMI 2.0 functions whose FMI 3.0 counterpart takes the same arguments."""


class FMU3Instance(FMU3Model):
    """fmpy's FMI 3.0 Model Exchange model, plus the one method the runtime's finalizer calls by 2.0 name."""

    def fmi2FreeInstance(self, component: Any) -> None:
        """``fmi3FreeInstance`` ("Creation, Destruction and Logging of FMU Instances")."""
        self.fmi3FreeInstance(component)


def _key(component: Any) -> int:
    return int(getattr(component, "value", component) or 0)


def functions(fmu: FMU3Instance) -> dict[str, Callable[..., int]]:
    """The FMI 2.0-named table of an FMI 3.0 instance's functions (module docstring)."""
    dll = fmu.dll
    table: dict[str, Callable[..., int]] = {name: getattr(dll, name3) for name, name3 in SAME.items()}
    set_float64, get_float64 = dll.fmi3SetFloat64, dll.fmi3GetFloat64
    enter_initialization, update = dll.fmi3EnterInitializationMode, dll.fmi3UpdateDiscreteStates
    directional = dll.fmi3GetDirectionalDerivative
    experiments: dict[int, tuple[Any, ...]] = {}

    def set_real(component: Any, refs: Any, n: int, values: Any) -> int:
        return set_float64(component, refs, n, values, n)

    def get_real(component: Any, refs: Any, n: int, values: Any) -> int:
        return get_float64(component, refs, n, values, n)

    def setup_experiment(
        component: Any, tolerance_defined: int, tolerance: float, start: float, stop_defined: int, stop: float
    ) -> int:
        experiments[_key(component)] = (bool(tolerance_defined), tolerance, start, bool(stop_defined), stop)
        return 0

    def enter_initialization_mode(component: Any) -> int:
        experiment = experiments.pop(_key(component), (False, 0.0, 0.0, False, 0.0))
        return enter_initialization(component, *experiment)

    flags = [ctypes.c_bool() for _ in range(5)]
    next_time = ctypes.c_double()

    def new_discrete_states(component: Any, info: Any) -> int:
        status = update(component, *(ctypes.byref(f) for f in flags), ctypes.byref(next_time))
        event: fmi2EventInfo = getattr(info, "_obj", info)  # a byref(fmi2EventInfo) or the structure
        (
            event.newDiscreteStatesNeeded,
            event.terminateSimulation,
            event.nominalsOfContinuousStatesChanged,
            event.valuesOfContinuousStatesChanged,
            event.nextEventTimeDefined,
        ) = (int(f.value) for f in flags)
        event.nextEventTime = next_time.value
        return status

    def directional_derivative(
        component: Any, unknowns: Any, n_unknowns: int, knowns: Any, n_knowns: int, seed: Any, out: Any
    ) -> int:
        return directional(component, unknowns, n_unknowns, knowns, n_knowns, seed, n_knowns, out, n_unknowns)

    table.update(
        fmi2SetReal=set_real,
        fmi2GetReal=get_real,
        fmi2SetupExperiment=setup_experiment,
        fmi2EnterInitializationMode=enter_initialization_mode,
        fmi2NewDiscreteStates=new_discrete_states,
        fmi2GetDirectionalDerivative=directional_derivative,
    )
    return table


def by_address(fmu: FMU3Instance) -> tuple[Any, Any]:
    """``fmi3SetContinuousStates`` and ``fmi3GetContinuousStateDerivatives``, a row's address as an int."""
    prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    names = ("fmi3SetContinuousStates", "fmi3GetContinuousStateDerivatives")
    return prototype((names[0], fmu.dll)), prototype((names[1], fmu.dll))
