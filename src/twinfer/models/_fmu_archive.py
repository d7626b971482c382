"""Validate an FMU and read what a twinfer model needs from its ``modelDescription.xml`` (issue #56).

Everything here reads the archive and its XML (fmpy's parser); nothing of the FMU runs. The checks go
from the outside in (the file, the zip, the description, its FMI version and interface, events, the
binary for this platform, the names asked for), so an FMU that fails any of them never has its binary
loaded. References: FMI 2.0.4 standard (Modelica Association, 2022), sections 2.2 (the model
description), 3.1 (Model Exchange: the continuous state vector is ordered as ``ModelStructure/Derivatives``)
and 2.2.7 (causality and variability of a parameter).

FMI 3.0 Model Exchange FMUs are read the same way (FMI 3.0.1 standard, 2023, chapter 2 "Common
Concepts": the FMI Description Schema and the FMU Distribution): variables are typed elements,
``Float64`` for a real, whose ``causality`` and ``variability`` keep their words;
``ModelStructure/ContinuousStateDerivative`` orders the states; the Model Exchange element's attribute
is ``providesDirectionalDerivatives`` (chapter 3); binaries sit under a platform tuple such as
``binaries/x86_64-linux``. Array variables (``<Dimension>``) and clocks are refused by name;
:mod:`twinfer.models._fmi3` maps the FMI 3.0 calls.
"""

from __future__ import annotations

import dataclasses
import math
import os
import zipfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from xml.etree import ElementTree

from twinfer.models._fmu_errors import (
    FMUArchiveError,
    FMUEventsError,
    FMUKindError,
    FMUNotFoundError,
    FMUPlatformError,
    FMUVariableError,
)

if TYPE_CHECKING:  # fmpy is imported when an FMU is read, not with twinfer
    from fmpy.model_description import ModelDescription, ScalarVariable

Interface = Literal["model-exchange", "co-simulation"]
"""Which interface of an FMU a model runs: Model Exchange (twinfer integrates) or Co-Simulation."""
SETTABLE = ("fixed", "tunable")
"""Variabilities of a real parameter that a model can change (FMI 2.0, section 2.2.7)."""
VERSIONS = ("2.0", "3.0")
"""The FMI versions twinfer reads (``fmiVersion``; FMI 3.0 patch releases such as 3.0.1 read as 3.0)."""
REAL = ("Real", "Float64")
"""The element of a real variable: FMI 2.0's ``<Real>``, FMI 3.0's ``<Float64>``."""


@dataclasses.dataclass(frozen=True)
class Description:
    """What :class:`~twinfer.models.FMU` needs of a validated FMU, by name and value reference.

    The state vector is ordered as the model description's ``ModelStructure/Derivatives``; inputs are its
    real inputs of continuous variability, outputs its real outputs, parameters the real parameters
    chosen (fixed or tunable).
    """

    path: str
    model_identifier: str
    guid: str
    directional: bool
    state_names: tuple[str, ...]
    state_refs: tuple[int, ...]
    derivative_refs: tuple[int, ...]
    state_starts: tuple[float, ...]
    state_nominals: tuple[float, ...]
    input_names: tuple[str, ...]
    input_refs: tuple[int, ...]
    input_nominals: tuple[float, ...]
    output_names: tuple[str, ...]
    output_refs: tuple[int, ...]
    param_names: tuple[str, ...]
    param_refs: tuple[int, ...]
    param_starts: tuple[float, ...]
    param_nominals: tuple[float, ...]
    param_fixed: tuple[bool, ...]
    param_bounds: dict[str, tuple[float, float]]
    single_instance: bool = False
    """``canBeInstantiatedOnlyOncePerProcess``: the FMU allows one instance only."""
    n_events: int = 0
    other_param_names: tuple[str, ...] = ()
    other_param_refs: tuple[int, ...] = ()
    discrete_names: tuple[str, ...] = ()
    fmi_version: str = "2.0"
    """``"2.0"`` or ``"3.0"`` (:data:`VERSIONS`)."""


def _real(v: ScalarVariable) -> bool:
    """A scalar real variable (FMI 3.0 arrays have ``<Dimension>`` children, refused in :func:`describe`)."""
    return v.type in REAL and not getattr(v, "dimensions", None)


def _version(path: str, xml: bytes) -> tuple[str, dict[str, str]]:
    """``(fmiVersion, attributes of <ModelExchange>)`` read before fmpy parses the description.

    An FMI 1.0 FMU or one of a version fmpy does not know is refused by its version, not by a schema.
    """
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError:
        return "", {}  # fmpy's parser names the problem (FMUArchiveError)
    version = root.get("fmiVersion") or ""
    read = "3.0" if version == "3.0" or version.startswith("3.0.") else version
    if read not in VERSIONS:
        raise FMUKindError(
            f"FMU {path!r} fmiVersion: expected one of {list(VERSIONS)} (FMI 2.0 or 3.0 Model Exchange); "
            f"received {version!r}."
        )
    me = root.find("ModelExchange")
    return read, dict(me.attrib) if me is not None else {}


def _float(value: Any, default: float) -> float:
    return default if value is None or value == "" else float(value)


def _archive(path: str) -> ModelDescription:
    """The parsed model description after the file and zip checks."""
    if not os.path.isfile(path):
        raise FMUNotFoundError(
            f"FMU path: expected an existing .fmu file; received {path!r}, which is not a file."
        )
    if not zipfile.is_zipfile(path):
        raise FMUArchiveError(
            f"FMU path: expected a zip archive (an .fmu is one); received {path!r}, which is not."
        )
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        if "modelDescription.xml" not in names:
            raise FMUArchiveError(
                f"FMU {path!r}: expected a modelDescription.xml at the archive's root; received a zip "
                f"holding {sorted(names)[:8]} (is this an FMU?)."
            )
        _version(path, zf.read("modelDescription.xml"))  # an unknown version is refused by name first
    import fmpy

    try:
        return fmpy.read_model_description(path, validate=True)
    except Exception as error:  # fmpy raises plain Exceptions (lxml, schema) for a broken description
        raise FMUArchiveError(
            f"FMU {path!r} modelDescription.xml: expected a valid FMI model description; received one that "
            f"does not parse: {error}"
        ) from error


def _check_kind(path: str, md: ModelDescription, interface: Interface) -> tuple[str, bool]:
    """``(modelIdentifier, providesDirectionalDerivative)`` of the interface asked for, once checked."""
    with zipfile.ZipFile(path) as zf:
        version, attributes = _version(path, zf.read("modelDescription.xml"))
    if interface == "co-simulation":
        return _check_cosimulation(path, md, version), False
    me = md.modelExchange
    if me is None or me.modelIdentifier is None:
        raise FMUKindError(
            f"FMU {path!r} interface: expected Model Exchange (a <ModelExchange> element: twinfer integrates "
            "the equations itself); received a co-simulation-only FMU."
        )
    if version == "3.0":  # fmpy 0.3 drops FMI 3.0's plural attribute: read it from the XML
        return me.modelIdentifier, attributes.get("providesDirectionalDerivatives") in ("true", "1")
    return me.modelIdentifier, bool(me.providesDirectionalDerivative)


def _check_cosimulation(path: str, md: ModelDescription, version: str) -> str:
    """The Co-Simulation ``modelIdentifier`` of an FMI 2.0 FMU that can get and set its FMU state."""
    cs = md.coSimulation
    if cs is None or cs.modelIdentifier is None:
        raise FMUKindError(
            f"FMU {path!r} interface: expected Co-Simulation (a <CoSimulation> element: the FMU steps itself "
            "with fmi2DoStep); received a Model-Exchange-only FMU (use twinfer.models.FMU)."
        )
    if version != "2.0":
        raise FMUKindError(
            f"FMU {path!r} fmiVersion: expected 2.0 for a co-simulation FMU (twinfer steps FMI 3.0 FMUs "
            f"through Model Exchange only); received {version}."
        )
    if not cs.canGetAndSetFMUstate:
        raise FMUKindError(
            f"FMU {path!r} <CoSimulation> canGetAndSetFMUstate: expected true (an estimator takes a step "
            "more than once from the same point, so twinfer restores the FMU state before each); received "
            "false."
        )
    return cs.modelIdentifier


def _check_platform(path: str, identifier: str, version: str) -> None:
    import fmpy

    platform = fmpy.platform_tuple if version == "3.0" else fmpy.platform  # FMI 3.0: a platform tuple
    wanted = f"binaries/{platform}/{identifier}{fmpy.sharedLibraryExtension}"
    with zipfile.ZipFile(path) as zf:
        if wanted not in zf.namelist():
            raise FMUPlatformError(
                f"FMU {path!r} binary: expected {wanted} for this platform ({platform}); received an "
                f"FMU for {fmpy.supported_platforms(path) or 'no platform'}."
            )


def _state(path: str, derivative: ScalarVariable | None) -> tuple[ScalarVariable, ScalarVariable]:
    """``(derivative, state)``: a ``ModelStructure/Derivatives`` entry and the state it differentiates."""
    state = None if derivative is None else derivative.derivative
    if derivative is None or state is None:
        raise FMUArchiveError(
            f"FMU {path!r} ModelStructure/Derivatives: expected each entry to name a variable with a "
            f"derivative attribute; received {getattr(derivative, 'name', None)!r} without one."
        )
    return derivative, state


def _parameters(path: str, md: ModelDescription, chosen: Sequence[str] | None) -> tuple[ScalarVariable, ...]:
    by_name = {v.name: v for v in md.modelVariables}
    eligible = [
        v for v in md.modelVariables if _real(v) and v.causality == "parameter" and v.variability in SETTABLE
    ]
    names = [v.name for v in eligible] if chosen is None else list(chosen)
    if len(set(names)) != len(names):
        raise FMUVariableError(f"FMU {path!r} parameters: expected distinct names; received {names}.")
    picked = []
    for name in names:
        var = by_name.get(name)
        if var is None or var not in eligible:
            why = (
                "no such variable"
                if var is None
                else f"type {var.type}, causality {var.causality}, variability {var.variability}"
            )
            raise FMUVariableError(
                f"FMU {path!r} parameter {name!r}: expected a real parameter with variability fixed or "
                f"tunable, one of {[v.name for v in eligible]}; received {name!r} ({why})."
            )
        if name[-1].isdigit():
            raise FMUVariableError(
                f"FMU {path!r} parameter {name!r}: expected a name that does not end in a digit (twinfer "
                f"reads 'k4' as the 4th entry of 'k'); received {name!r}: leave it out with parameters=[...]."
            )
        picked.append(var)
    return tuple(picked)


def describe(
    path: str | os.PathLike[str],
    parameters: Sequence[str] | None = None,
    values: Mapping[str, float] | None = None,
    interface: Interface = "model-exchange",
) -> Description:
    """Validate the FMU at ``path`` and read its states, inputs, outputs and parameters.

    Args:
        path: the ``.fmu`` file.
        parameters: the real parameters (fixed or tunable) that become the model's ``params``; default all.
        values: values replacing some of those parameters' start values.
        interface: ``"model-exchange"`` (:class:`~twinfer.models.FMU`) or ``"co-simulation"``
            (:class:`~twinfer.models.CoSimulationFMU`: FMI 2.0 that can get and set its FMU state; its
            events stay inside it).

    Returns:
        The :class:`Description`.

    Raises:
        FMUError: a subclass naming the first check that fails (module docstring), the expected and the
            received value.

    """
    path = os.fspath(path)
    md = _archive(path)
    identifier, directional = _check_kind(path, md, interface)
    version = "3.0" if (md.fmiVersion or "").startswith("3.") else "2.0"
    if version == "3.0":
        _check_fmi3(path, md)
    if interface == "model-exchange":
        _check_events(path, md)
    _check_platform(path, identifier, version)
    params = _parameters(path, md, parameters)
    values = dict(values or {})
    unknown = sorted(set(values) - {v.name for v in params})
    if unknown:
        raise FMUVariableError(
            f"FMU {path!r} params[{unknown[0]!r}]: expected one of the model's parameters "
            f"{[v.name for v in params]}; received {unknown[0]!r}."
        )
    for name, value in values.items():
        if not math.isfinite(float(value)):
            raise FMUVariableError(
                f"FMU {path!r} params[{name!r}]: expected a finite number; received {value!r}."
            )
    pairs = [_state(path, d.variable) for d in md.derivatives]
    states = [state for _, state in pairs]
    inputs = [
        v for v in md.modelVariables if v.causality == "input" and _real(v) and v.variability == "continuous"
    ]
    outputs = [o.variable for o in md.outputs if o.variable is not None and _real(o.variable)]
    bounds = {
        v.name: (_float(v.min, -math.inf), _float(v.max, math.inf))
        for v in params
        if v.min is not None or v.max is not None
    }
    return Description(
        path=path,
        model_identifier=identifier,
        guid=md.guid or "",
        directional=directional,
        state_names=tuple(v.name for v in states),
        state_refs=tuple(v.valueReference for v in states),
        derivative_refs=tuple(derivative.valueReference for derivative, _ in pairs),
        state_starts=tuple(_float(v.start, 0.0) for v in states),
        state_nominals=tuple(abs(_float(v.nominal, 1.0)) for v in states),
        input_names=tuple(v.name for v in inputs),
        input_refs=tuple(v.valueReference for v in inputs),
        input_nominals=tuple(abs(_float(v.nominal, 1.0)) for v in inputs),
        output_names=tuple(v.name for v in outputs),
        output_refs=tuple(v.valueReference for v in outputs),
        param_names=tuple(v.name for v in params),
        param_refs=tuple(v.valueReference for v in params),
        param_starts=tuple(float(values.get(v.name, _float(v.start, 0.0))) for v in params),
        param_nominals=tuple(abs(_float(v.nominal, 1.0)) for v in params),
        param_fixed=tuple(v.variability == "fixed" for v in params),
        param_bounds=bounds,
        single_instance=bool(
            getattr(
                md.modelExchange if interface == "model-exchange" else md.coSimulation,
                "canBeInstantiatedOnlyOncePerProcess",
                False,
            )
        ),
        n_events=int(md.numberOfEventIndicators or 0),
        other_param_names=tuple(v.name for v in _settable(md) if v not in params),
        other_param_refs=tuple(v.valueReference for v in _settable(md) if v not in params),
        discrete_names=_discrete(md),
        fmi_version=version,
    )


def _check_fmi3(path: str, md: ModelDescription) -> None:
    """What twinfer does not carry of an FMI 3.0 description: array states, clocks (FMI 3.0.1, chapter 2)."""
    arrays = [d.variable.name for d in md.derivatives if d.variable is not None and d.variable.dimensions]
    if arrays:
        raise FMUVariableError(
            f"FMU {path!r} ModelStructure/ContinuousStateDerivative: expected scalar states (twinfer reads "
            f"no FMI 3.0 arrays); received array derivatives {arrays[:8]}."
        )
    clocks = [v.name for v in md.modelVariables if v.type == "Clock"]
    if clocks:
        raise FMUKindError(
            f"FMU {path!r} clocks: expected none (twinfer's FMI 3.0 Model Exchange has no clocked "
            f"partitions); received {clocks[:8]}."
        )


def _settable(md: ModelDescription) -> list[ScalarVariable]:
    """The real parameters of variability fixed or tunable (those a model can set)."""
    return [
        v for v in md.modelVariables if _real(v) and v.causality == "parameter" and v.variability in SETTABLE
    ]


def _check_events(path: str, md: ModelDescription) -> None:
    """An FMU with event indicators: refused if it declares discrete variables twinfer cannot carry.

    An event may change them, and FMI 2.0 lets no importer set a local or output variable (section 3.2.3,
    the variables ``fmi2SetXXX`` may be called on), so twinfer could not restore them on the next call
    (:mod:`twinfer.models._fmu_events`).
    """
    discrete = list(_discrete(md))
    if md.numberOfEventIndicators and discrete:
        raise FMUEventsError(
            f"FMU {path!r} discrete variables: expected none in an FMU with event indicators (twinfer "
            "carries an FMU's continuous states and parameters across events, and FMI 2.0 lets no importer "
            f"set a local or output variable); received {len(discrete)}: {discrete[:8]}."
        )


def _discrete(md: ModelDescription) -> tuple[str, ...]:
    """The discrete local and output variables, which an event may change and no importer may set."""
    return tuple(
        v.name
        for v in md.modelVariables
        if v.variability == "discrete" and v.causality in ("local", "output")
    )
