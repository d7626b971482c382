"""Estimation specs: a user's own system, data and estimator in one TOML file (``twinfer estimate``).

A spec names a library model (a chain, a grid) or an FMU (``kind = "fmu"``: :class:`FmuModel`) and its
known parameters, where the data come from (a CSV file with a column mapping, or a simulation of the
model itself, which also gives the truth), the unknown parameters with their priors, and the
estimator: central (one filter or smoother on the whole model), distributed (the model cut into
subsystems by :meth:`twinfer.infer.graph.Graph.from_model`, exchanging messages) or banded (the same
subsystems, each keeping its correlation with ``bandwidth`` neighbours on either side:
:class:`twinfer.infer.Banded`), all run by :func:`twinfer.infer.estimate`. Example::

    name = "frame"

    [model]                       # a twinfer.models.Chain
    kind = "chain"
    mass = [500.0, 500.0, 500.0, 500.0]
    stiffness = 5e4               # one value for every connection, or one per connection
    damping = 300.0
    forced_dofs = [4]
    outputs = ["a1", "a3"]
    # base = "acceleration"       # a moving ground: input ag first, "A3" an absolute acceleration

    [data]                        # or [simulate]
    file = "frame.csv"            # relative to the spec
    time = "t"
    inputs = ["f4"]               # one column per input (the ground's, then the forced DOFs')
    outputs = ["acc1", "acc3"]    # one column per model output, in the model's order

    [estimator]
    kind = "distributed"          # or "central", or "banded" (with bandwidth = 2)
    partition = [[1, 2], [3, 4]]
    noise_sd = 0.05
    state_sd = 1e-3

    [unknown]
    k4 = [2.5e4, 5e3, 0.0]        # initial value, prior sd, random-walk sd per step

:func:`load_spec` validates a spec (every error names its key, what it expects and what it received);
:func:`run_spec` runs it and returns the :class:`~twinfer.infer.Estimate`, the dataset and the run's
metrics, arrays and figures for :func:`twinfer.report.write_run`.
"""

from __future__ import annotations

import math
import re
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pydantic

from twinfer import _spec_fmu  # the FMU part of a spec (kind = "fmu"), issue #56
from twinfer._atomic import read_regular
from twinfer._spec_shared import Problems as _Problems
from twinfer._spec_shared import band_limited as _band_limited
from twinfer._spec_shared import triple_problem as _triple_problem
from twinfer._spec_shared import values_problem as _values_problem
from twinfer.data._checks import did_you_mean as _did_you_mean
from twinfer.errors import TwinferRuntimeError, TwinferValueError
from twinfer.report._run import RUN_NAME_MAX

if typing.TYPE_CHECKING:  # the models are imported when a spec runs, not with twinfer.spec
    from twinfer.models import FMU

__all__ = ["LiveSetup", "Spec", "SpecError", "live_setup", "load_spec", "run_spec"]


class SpecError(TwinferValueError):
    """A spec that cannot be read or does not validate; the message names each offending key."""


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _problem_lines(exc: pydantic.ValidationError) -> list[str]:
    """One line per problem of a failed :class:`Spec` validation, each naming its key.

    Keys are named as the spec writes them (``model.network``, not pydantic's ``model.grid.network``).
    An unknown key, an unknown option and an unknown model kind get the closest allowed one
    (:func:`difflib.get_close_matches`) and the list of those allowed.
    """
    lines = []
    for item in exc.errors():
        shown, table = _spec_location(item["loc"])
        key = ".".join(shown) or "(spec)"
        ctx = item.get("ctx", {})
        error = ctx.get("error")
        if isinstance(error, _Problems):  # the validators' own lines, each naming its key
            lines += error.lines
        elif item["type"] == "value_error":
            lines.append(f"{key}: {error}")
        elif item["type"] == "extra_forbidden":
            lines.append(_unknown_key(shown, table))
        elif item["type"] == "union_tag_invalid":  # the model kind
            tags = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
            lines.append(
                f"'{key}.kind': expected one of {ctx.get('expected_tags')}; received {ctx.get('tag')!r}"
                + _did_you_mean(ctx.get("tag"), tags)
            )
        elif item["type"] == "literal_error":  # an option: estimator.kind = "centrl"
            options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
            lines.append(
                f"{key!r}: {item['msg']}; received {item.get('input')!r}"
                + _did_you_mean(item.get("input"), options)
            )
        else:
            lines.append(f"{key!r}: {item['msg']}; received {item.get('input')!r}")
    return lines


Real = Annotated[float, pydantic.Strict()]
"""A number as TOML writes one (an integer or a float); a quoted string such as ``"60.0"`` is refused."""
Values = Real | list[Real]


class ChainModel(_Strict):
    """A :class:`twinfer.models.Chain` (masses [kg], stiffnesses [N/m], dampings [N s/m]).

    ``base``: a moving ground, ``"acceleration"`` (input ``ag`` [m/s^2], states and ``a``/``v``/``x``
    outputs relative to the ground, ``A3`` the absolute acceleration an accelerometer on mass 3 reads) or
    ``"displacement"`` (inputs ``xg`` [m], ``vg`` [m/s], everything absolute); its inputs come before the
    forces, in ``[data] inputs`` too.
    """

    kind: Literal["chain"]
    mass: Values
    stiffness: Values
    damping: Values
    cubic_stiffness: Values | None = None
    vdp_damping: Values | None = None
    forced_dofs: list[int] | None = None
    outputs: list[str] = pydantic.Field(min_length=1)
    base: Literal["acceleration", "displacement"] | None = None


class GridModel(_Strict):
    """A power grid as a Kuramoto network (the ``grid`` case).

    ``network``: a network pandapower ships, by name, or a pandapower JSON / MATPOWER ``.m`` or ``.mat``
    file (relative to the spec); ``s_max`` the largest cluster; ``damping`` the damping d of every bus
    (one value or one per bus), needed with measured ``[data]`` (a simulation draws it, Table S4);
    ``pmus`` the buses with a PMU (from 1) for ``twinfer live`` (default: every bus), whose clusters keep
    every bus without one with its stiffest neighbour (:func:`twinfer.live.grid_twin`).

    A grid's ``[estimator]`` without ``kind`` is distributed (one UKF per cluster): a central UKF keeps
    its 3N x 3N covariance and sigma points, and is refused before it starts where they would not fit
    in memory (an estimate of its bytes, named in the error).
    """

    kind: Literal["grid"]
    network: str
    s_max: int = pydantic.Field(default=5, ge=1, le=10)
    damping: Values | None = None
    pmus: list[int] | None = None


class FmuModel(_Strict):
    """An FMI 2.0 Model Exchange FMU (:class:`twinfer.models.FMU`), its variables by their names.

    ``path``: the ``.fmu`` file (relative to the spec); ``params``: values replacing some real
    parameters' start values (with ``[simulate]`` they are the truth); ``outputs``: the FMU's outputs
    that are measured, in the order of ``[data] outputs`` (the others are unmeasured); ``derivatives``:
    where the EKF's Jacobians come from (:class:`~twinfer.models.FMU`). The FMU's archive and model
    description are validated when the spec is read (nothing of it runs then), and every name is
    checked against them. The states start at the FMU's start values unless ``[estimator] x0`` says
    otherwise.
    """

    kind: Literal["fmu"]
    path: Path
    params: dict[str, Real] = {}
    outputs: list[str] = pydantic.Field(min_length=1)
    derivatives: Literal["auto", "directional", "finite_differences"] = "auto"


class CsvData(_Strict):
    """Measured data in a file: the columns that hold time, the inputs and the outputs.

    CSV, Parquet or netCDF, chosen by the file's suffix (:func:`twinfer.data.from_table`).
    """

    file: Path
    time: str
    inputs: list[str] = []
    outputs: list[str] = []
    states: list[str] | None = None
    input_hold: Literal["linear", "zoh"] = "linear"
    """How the inputs behave between samples (:attr:`twinfer.data.Dataset.input_hold`): a measured
    signal (``"linear"``) or a command held over each interval (``"zoh"``)."""


class Simulation(_Strict):
    """Data simulated from the model itself, so the truth is known.

    A band-limited force on each forced DOF (white noise of ``force_sd`` through a 4th-order Butterworth
    low-pass at ``force_band`` of the Nyquist frequency), measured with noise of ``noise_sd`` per output;
    the record holds the forces as a load cell measures them, with noise of ``input_noise_sd`` per forced
    DOF (the truth is driven by the applied ones: :func:`twinfer.sim.simulate_dataset`). A chain with a
    ``base`` moves its ground the same way, with ``ground_sd`` (m/s^2 for a ground acceleration, m for a
    ground displacement, whose velocity is its derivative), recorded without noise.
    """

    duration: Real = pydantic.Field(gt=0)
    dt: Real = pydantic.Field(gt=0)
    noise_sd: Values
    force_sd: Real = pydantic.Field(default=1.0, ge=0)
    force_band: Real = pydantic.Field(default=0.05, gt=0, lt=1)
    input_noise_sd: Values = 0.0
    ground_sd: Real = pydantic.Field(default=1.0, ge=0)
    seed: int = 0

    @pydantic.field_validator("seed")
    @classmethod
    def _seed(cls, value: int) -> int:
        if not 0 <= value <= 2**63 - 1:
            raise ValueError(
                f"expected a non-negative integer, at most 2**63 - 1 (numpy's and JAX's random seeds); "
                f"received {value}"
            )
        return value


class Live(_Strict):
    """How ``twinfer live`` takes a stream of frames (:class:`twinfer.live.Twin`, docs/live.md).

    ``dt`` is the model's step (default: ``[simulate] dt``); frames within ``tolerance`` of a step snap
    to it and a step waits ``window`` steps for late channels. ``snapshot_every`` seconds (wall clock)
    the twin writes its snapshot. The alarms: an unknown's drift beyond ``drift_level`` (in sds of its
    change from the baseline taken after ``learning`` seconds, and by at least ``drift_relative`` of the
    baseline) for ``persistence`` seconds; a sensor's
    or a group's innovations over ``innovation_window`` seconds with a chi-square tail below
    ``innovation_p``, their time-average NIS (``innovation_test = "nis"``), their mean (``"mean"``: a
    persistent bias, such as a tripped line's) or both; ``groups`` names sets of outputs (as the model
    names them) tested together.
    """

    dt: Real | None = pydantic.Field(default=None, gt=0)
    tolerance: Real = pydantic.Field(default=0.25, gt=0, lt=0.5)
    window: int = pydantic.Field(default=0, ge=0, le=100_000)
    snapshot_every: Real = pydantic.Field(default=10.0, gt=0)
    learning: Real = pydantic.Field(default=60.0, ge=0)
    drift_level: Real = pydantic.Field(default=5.0, gt=0)
    persistence: Real = pydantic.Field(default=2.0, ge=0)
    drift_relative: Real = pydantic.Field(default=0.0, ge=0)
    innovation_window: Real = pydantic.Field(default=1.0, gt=0)
    innovation_p: Real = pydantic.Field(default=1e-9, gt=0, lt=1e-2)
    innovation_test: Literal["nis", "mean", "both"] = "nis"
    groups: dict[str, list[str]] = {}


_MESSAGE_KEYS = ("messages", "rule", "schedule")
"""The keys of message passing: each implies ``route = "messages"`` for ``kind = "distributed"``."""


class Estimator(_Strict):
    """The estimator and its noise levels: standard deviations, as in ``run_filter``.

    ``kind = "distributed"`` on a chain runs the banded filter with the unknowns global at the bandwidth
    :func:`twinfer.infer.graph.default_bandwidth` chooses (one wider than the partition needs), unless
    ``route = "messages"`` (or any of ``messages``, ``rule``, ``schedule``) asks for the compositional-
    inference paper's message passing, which is then checked against the banded filter on a window of the
    record (:func:`twinfer.infer.graph.check_messages`).
    """

    kind: Literal["central", "distributed", "banded"] = "central"
    route: Literal["banded", "messages"] | None = None
    estimator: Literal["ukf", "ekf", "kf"] = "ukf"
    integrator: Literal["rk4", "euler", "exact"] = "rk4"
    substeps: int = pydantic.Field(default=1, ge=1, le=100_000)
    kernel: Literal["qr", "gram"] = "qr"
    smoother: bool = False
    partition: list[list[int]] | Literal["auto"] | None = None
    messages: Literal["probabilistic", "deterministic"] = "probabilistic"
    rule: Literal["split", "shared", "paper"] = "split"
    schedule: Literal["jacobi", "gauss_seidel", "ab2"] = "jacobi"
    bandwidth: int = pydantic.Field(default=2, ge=1)
    parameters: Literal["local", "global"] = "local"
    input_sd: Values = 0.0
    noise_sd: Values | Literal["auto"] | None = None
    state_sd: Values = 1e-3
    process_sd: Values | Literal["auto"] = 1e-6
    x0: Values = 0.0

    @pydantic.model_validator(mode="after")
    def _partition_for_distributed(self) -> Estimator:
        problems = []
        if self.kind == "central" and self.partition:
            problems.append(
                "estimator.partition: a partition is only for kind = 'distributed'; received "
                f"{self.partition!r} with kind = 'central'"
            )
        if self.integrator == "exact" and self.substeps != 1:
            problems.append(
                "estimator.substeps: expected 1 with integrator = 'exact' (the matrix exponential is exact "
                f"for any step); received {self.substeps}"
            )
        if self.kind != "central" and self.kernel != "qr":
            problems.append(
                "estimator.kernel: the Gram kernel is a central filter's (kind = 'central'); received "
                f"kernel = {self.kernel!r} with kind = {self.kind!r}"
            )
        if self.kind != "central" and self.smoother:
            problems.append(
                "estimator.smoother: the RTS smoother runs only after a central filter (kind = 'central'); "
                f"received smoother = true with kind = {self.kind!r}"
            )
        if self.kind != "banded" and "bandwidth" in self.model_fields_set:
            chosen = " (kind = 'distributed' chooses the smallest its partition allows)"
            problems.append(
                "estimator.bandwidth: the number of neighbouring subsystems whose correlation each keeps, "
                f"only for kind = 'banded'; received bandwidth = {self.bandwidth} with kind = {self.kind!r}"
                + (chosen if self.kind == "distributed" else "")
            )
        if self.kind != "banded" and "parameters" in self.model_fields_set:
            problems.append(
                "estimator.parameters: where the unknowns' correlations are kept, only for kind = 'banded'; "
                f"received parameters = {self.parameters!r} with kind = {self.kind!r}"
            )
        if self.kind == "banded" and "estimator" in self.model_fields_set:
            problems.append(
                "estimator.estimator: the banded filter linearises the whole chain's model itself "
                "(Jacobians, with the linearisation's error variance added to R); expected no estimator "
                f"with kind = 'banded'; received estimator = {self.estimator!r}"
            )
        for key in _MESSAGE_KEYS:
            if self.kind != "distributed" and key in self.model_fields_set:
                problems.append(
                    f"estimator.{key}: how subsystems exchange interface messages, only for kind = "
                    f"'distributed'; received {key} = {getattr(self, key)!r} with kind = {self.kind!r}"
                )
            elif self.route == "banded" and key in self.model_fields_set:
                problems.append(
                    f"estimator.{key}: how subsystems exchange interface messages, only for route = "
                    f"'messages'; received {key} = {getattr(self, key)!r} with route = 'banded'"
                )
        auto = [k for k in ("process_sd", "noise_sd") if getattr(self, k) == "auto"]
        input_sd = np.any(np.asarray(self.input_sd) != 0)
        if auto and (self.kind != "central" or input_sd):
            problems += [
                f"estimator.{k}: 'auto' (the level from the data) runs with the central filter without "
                f"input_sd; received it with kind = {self.kind!r}"
                + (f", input_sd = {self.input_sd!r}" if input_sd else "")
                + "; give the level as numbers"
                for k in auto
            ]
        if self.kind != "distributed" and self.route is not None:
            problems.append(
                "estimator.route: how a distributed estimator runs, 'banded' (its default: each subsystem "
                "keeping its neighbours' correlation) or 'messages' (the paper's message passing), only for "
                f"kind = 'distributed'; received route = {self.route!r} with kind = {self.kind!r}"
            )
        if self.kind == "distributed" and not self.message_passing and "estimator" in self.model_fields_set:
            problems.append(
                "estimator.estimator: each subsystem's local filter, only for message passing; kind = "
                "'distributed' runs the banded filter, which linearises the whole chain's model itself; "
                f"expected route = 'messages' with estimator; received estimator = {self.estimator!r} "
                f"with route = {self.route or 'banded'!r}"
            )
        if self.smoother and "input_sd" in self.model_fields_set:
            problems.append(
                "estimator.input_sd: the load cells' noise enters a filter on the graph of the chain, which "
                "has no RTS smoother; expected smoother = false with input_sd; received smoother = true"
            )
        if problems:
            raise _Problems(problems)
        return self

    @property
    def message_passing(self) -> bool:
        """Whether a distributed estimator runs message passing.

        It does with ``route = "messages"``, or a message key (``messages``, ``rule``, ``schedule``)
        given without a route.
        """
        if self.kind != "distributed":
            return False
        if self.route is not None:
            return self.route == "messages"
        return any(key in self.model_fields_set for key in _MESSAGE_KEYS)

    @property
    def description(self) -> str:
        """The estimator in a few words, for reports."""
        if self.kind == "banded":
            return (
                f"banded Gaussian filter (each subsystem's correlation with {self.bandwidth} neighbours kept)"
            )
        if self.kind == "distributed" and self.message_passing:
            how = f"{self.messages} messages, {self.schedule}"
            return f"distributed {self.estimator} (message passing, {how})"
        if self.kind == "distributed":
            return "distributed: banded Gaussian filter (one bandwidth wider than the partition needs)"
        return f"{self.kind} {self.estimator}"


class Spec(_Strict):
    """A validated spec (see the module docstring).

    Everything that can be checked from the spec alone is checked here, before any data is read or any
    estimator built: the sources, the column counts against the model, the noise levels (signs and one
    value or one per output or state), the prior mean's length, the partition and the unknowns (their
    names among the chain's parameters, their three numbers).
    """

    name: str = pydantic.Field(default="estimate", pattern=r"^[A-Za-z0-9_.-]+$")
    """The run folder's name before its time stamp: letters, digits, ``_``, ``.`` and ``-``, at most
    ``RUN_NAME_MAX`` (217) of them (a file name holds 255 bytes)."""
    model: ChainModel | GridModel | FmuModel = pydantic.Field(discriminator="kind")
    data: CsvData | None = None
    simulate: Simulation | None = None
    estimator: Estimator = Estimator()
    unknown: dict[str, tuple[float, float, float]] = {}
    live: Live = Live()

    @pydantic.model_validator(mode="before")
    @classmethod
    def _grid_distributed_by_default(cls, values: Any) -> Any:
        """A grid's ``[estimator]`` without ``kind``: the distributed one, whatever a chain's default is.

        A grid's distributed estimator is message passing between its clusters' UKFs (``route``).
        """
        if not isinstance(values, dict):
            return values  # pydantic's own error: expected a table
        model, estimator = values.get("model"), values.get("estimator", {})
        if not (isinstance(model, dict) and model.get("kind") == "grid" and isinstance(estimator, dict)):
            return values
        chosen = {"kind": "distributed"} | estimator
        if chosen["kind"] == "distributed" and "route" in Estimator.model_fields:
            chosen = {"route": "messages"} | chosen
        return {**values, "estimator": chosen}

    @pydantic.field_validator("name")
    @classmethod
    def _fits_a_file_name(cls, value: str) -> str:
        if len(value.encode()) > RUN_NAME_MAX:
            raise ValueError(
                f"expected at most {RUN_NAME_MAX} characters (the run folder's name adds a time stamp, and a "
                f"file name holds 255 bytes); received {len(value.encode())}"
            )
        return value

    @pydantic.field_validator("unknown", mode="before")
    @classmethod
    def _unknown_triples(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value  # pydantic's own error: expected a table
        problems = [
            f"unknown.{name}: expected [initial value, prior sd, random-walk sd per step], three numbers; "
            f"received {triple!r}"
            for name, triple in value.items()
            if not (
                isinstance(triple, list | tuple)
                and len(triple) == 3
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in triple)
            )
        ]
        if problems:
            raise _Problems(problems)
        return value

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> Spec:
        problems: list[str] = []
        if (self.data is None) == (self.simulate is None):
            both = "both" if self.data is not None else "neither"
            problems.append(
                f"[data] / [simulate]: give exactly one of [data] and [simulate]; received {both}"
            )
        if self.data is not None and self.estimator.noise_sd is None:
            problems.append(
                "estimator.noise_sd: expected the measurement noise sd with measured [data] (one value, or "
                "one per output); received none"
            )
        if isinstance(self.model, GridModel):
            problems += _grid_problems(self, self.model)
        elif isinstance(self.model, FmuModel):
            problems += _spec_fmu.problems(self, self.model)
        else:
            problems += _chain_problems(self, self.model)
        if problems:
            raise _Problems(problems)
        return self


_GRID_IGNORES = ("integrator", "state_sd", "process_sd", "x0", "rule", "schedule")
"""Estimator keys a grid does not read: its prior, process noise and Heun sub-steps are the grid case's
(Table S4), its messages the cluster field's."""


def _grid_problems(spec: Spec, model: GridModel) -> list[str]:
    """What a grid spec gets wrong.

    The damping, column lists, unknowns, a partition, the noise levels, estimator keys a grid does not read.
    """
    problems = []
    e = spec.estimator
    given = [k for k in _GRID_IGNORES if k in e.model_fields_set]
    if given:
        problems.append(
            f"estimator.{given[0]}: a grid's prior, process noise, integration and messages are the grid "
            "case's settings (Table S4); expected none of "
            f"{', '.join(_GRID_IGNORES)}; received {', '.join(f'{k} = {getattr(e, k)!r}' for k in given)}"
        )
    if "estimator" in e.model_fields_set and e.estimator != "ukf":
        problems.append(
            "estimator.estimator: a grid's clusters (and its central filter) are UKFs; expected 'ukf'; "
            f"received {e.estimator!r}"
        )
    if getattr(e, "route", None) == "banded":
        problems.append(
            "estimator.route: a grid's distributed estimator is one UKF per cluster exchanging messages "
            "(the banded filter is for a chain); expected 'messages' or none; received 'banded'"
        )
    if (spec.data is not None) != (model.damping is not None):
        problems.append(
            "model.damping: expected with measured [data] (the buses' damping d) and only then "
            f"(a [simulate] section draws it); received damping={model.damping}"
        )
    dampings = (
        [] if model.damping is None else model.damping if isinstance(model.damping, list) else [model.damping]
    )
    if not all(math.isfinite(v) and v >= 0 for v in dampings):
        problems.append(
            "model.damping: expected a damping d >= 0 for every bus (as a chain's damping), finite; received "
            f"{model.damping}. Check the sign and units"
        )
    d = spec.data
    if d is not None and (d.inputs or d.outputs or d.states):
        problems.append(
            "data: a grid's columns are found by name (theta<bus>, omega<bus>, buses from 1); expected no "
            f"inputs, outputs or states lists; received inputs={d.inputs}, outputs={d.outputs}, "
            f"states={d.states}"
        )
    if spec.estimator.kind == "banded":
        problems.append(
            "estimator.kind: 'banded' (a posterior Markov along a chain of subsystems) is for a chain; "
            "expected 'central' or 'distributed' for a grid; received 'banded'"
        )
    if spec.unknown or spec.estimator.partition:
        problems.append(
            "unknown / estimator.partition: a grid takes no [unknown] and no partition (its clusters are "
            f"found by s_max); received unknown={dict(spec.unknown)}, partition={spec.estimator.partition!r}"
        )
    if spec.estimator.noise_sd == "auto":
        problems.append(
            "estimator.noise_sd: expected one value for a grid ('auto' is for chains); received 'auto'"
        )
    elif spec.estimator.noise_sd is not None:
        problems += _values_problem("estimator.noise_sd", spec.estimator.noise_sd, 0, "grid", "> 0")
    loads = {"estimator.input_sd": spec.estimator.input_sd}
    if spec.simulate is not None:
        loads["simulate.input_noise_sd"] = spec.simulate.input_noise_sd
    problems += [
        f"{key}: a grid has no recorded forces; expected none; received {value}"
        for key, value in loads.items()
        if np.any(np.asarray(value) != 0)
    ]
    if spec.simulate is not None:
        problems += _values_problem("simulate.noise_sd", spec.simulate.noise_sd, 0, "grid", ">= 0")
    return problems


def _chain_problems(spec: Spec, model: ChainModel) -> list[str]:
    """What a chain spec gets wrong against its chain: counts, signs, the partition, the unknowns.

    Checks needing the number of DOFs are skipped where it is unclear (mass, stiffness and damping all
    one value, or lists of different lengths): building the chain names that fault.
    """
    lengths = {len(v) for v in (model.mass, model.stiffness, model.damping) if isinstance(v, list)}
    n = lengths.pop() if len(lengths) == 1 else None
    e, outs = spec.estimator, model.outputs
    per_output = f"output ({', '.join(outs)})"
    per_state = f"state (x1..x{n}, v1..v{n})"
    problems = []
    absolute = [o for o in outs if o[:1] == "A"]
    if absolute and model.base != "acceleration":
        problems.append(
            f"model.outputs: {absolute} are absolute accelerations, which differ from the lower-case 'a' "
            f'outputs only under a ground acceleration; expected base = "acceleration" with them; received '
            f"base = {model.base!r} (name them {[o.lower() for o in absolute]})"
        )
    if e.noise_sd is not None and e.noise_sd != "auto":
        problems += _values_problem("estimator.noise_sd", e.noise_sd, len(outs), per_output, "> 0")
    if spec.simulate is not None:
        bound = ">= 0" if e.noise_sd is not None else "> 0"
        note = (
            "" if e.noise_sd is not None else " (it is the estimator's too: estimator.noise_sd is not given)"
        )
        problems += _values_problem(
            "simulate.noise_sd", spec.simulate.noise_sd, len(outs), per_output, bound, note
        )
    states = None if n is None else 2 * n
    problems += _values_problem("estimator.state_sd", e.state_sd, states, per_state, "> 0")
    if e.process_sd != "auto":
        problems += _values_problem("estimator.process_sd", e.process_sd, states, per_state, ">= 0")
    problems += _values_problem("estimator.x0", e.x0, states, per_state, "any")
    forced = (
        model.forced_dofs if model.forced_dofs is not None else (None if n is None else list(range(1, n + 1)))
    )
    per_force = f"forced DOF ({forced})" if forced is not None else "forced DOF"
    count = None if forced is None else len(forced)
    problems += _values_problem("estimator.input_sd", e.input_sd, count, per_force, ">= 0")
    if spec.simulate is not None:
        problems += _values_problem(
            "simulate.input_noise_sd", spec.simulate.input_noise_sd, count, per_force, ">= 0"
        )
    if e.kind != "central" and not e.partition:
        problems.append(
            f"estimator.partition: a {e.kind} estimator of a chain needs a partition, e.g. "
            '[[1, 2], [3, 4]] or "auto" (two masses each, every subsystem measured); received none'
        )
    nonlinear = [k for k in ("cubic_stiffness", "vdp_damping") if getattr(model, k) is not None]
    if e.kind == "central" and e.estimator == "kf" and (nonlinear or spec.unknown):
        why = [f"model.{k}" for k in nonlinear] + [f"unknown.{k}" for k in spec.unknown]
        problems.append(
            "estimator.estimator: 'kf' needs a linear model (a chain without cubic_stiffness or vdp_damping "
            "and without [unknown], whose parameters in the state multiply states); use 'ekf' or 'ukf'; "
            f"received 'kf' with {', '.join(why)}"
        )
    if isinstance(e.partition, list) and n is not None:
        problems += _partition_problem(e.partition, n)
    problems += _unknown_problems(spec.unknown, model, n)
    d = spec.data
    if d is not None and n is not None:
        forced = list(range(1, n + 1)) if model.forced_dofs is None else model.forced_dofs
        ground = {None: [], "acceleration": ["ag"], "displacement": ["xg", "vg"]}[model.base]
        if len(d.inputs) != len(ground) + len(forced):
            first = f"the ground's {', '.join(ground)}, then " if ground else ""
            hint = (
                " (forced_dofs = [] for the ground motion alone)"
                if ground and model.forced_dofs is None
                else ""
            )
            problems.append(
                f"data.inputs: expected {len(ground) + len(forced)} input columns ({first}one per forced DOF "
                f"{forced}, in order){hint}; received {len(d.inputs)} {d.inputs}"
            )
        if len(d.outputs) != len(outs):
            problems.append(
                f"data.outputs: expected {len(outs)} output columns (one per model output {list(outs)}, in "
                f"order); received {len(d.outputs)} {d.outputs}"
            )
        if d.states is not None and len(d.states) != 2 * n:
            problems.append(
                f"data.states: expected {2 * n} columns (x1..x{n}, v1..v{n}), one per state in the "
                f"model's order; received {len(d.states)} {d.states}"
            )
    return problems


def _partition_problem(partition: list[list[int]], n: int) -> list[str]:
    """``[problem]`` unless the groups are contiguous, in order and cover DOFs 1..n once."""
    flat = [d for group in partition for d in group]
    if flat == list(range(1, n + 1)) and all(partition):
        return []
    missing = sorted(set(range(1, n + 1)) - set(flat))
    twice = sorted({d for d in flat if flat.count(d) > 1})
    outside = sorted({d for d in flat if not 1 <= d <= n})
    why = [
        *([f"DOF {', '.join(map(str, missing))} in no group"] if missing else []),
        *([f"DOF {', '.join(map(str, twice))} in more than one"] if twice else []),
        *([f"DOF {', '.join(map(str, outside))} outside 1..{n}"] if outside else []),
        *(["an empty group"] if not all(partition) else []),
    ] or ["the DOFs out of order"]
    return [
        f"estimator.partition: expected contiguous DOF groups in order covering 1..{n} once, each group "
        f"listing its DOFs (not a range), e.g. {_example_partition(n)}; received {partition} "
        f"({'; '.join(why)})"
    ]


def _example_partition(n: int) -> list[list[int]]:
    half = max(1, n // 2)
    return [list(range(1, half + 1)), list(range(half + 1, n + 1))] if n > 1 else [[1]]


_PARAM_GROUPS = (
    ("m", "mass", "> 0"),
    ("k", "stiffness", ">= 0"),
    ("c", "damping", ">= 0"),
    ("kappa", "cubic_stiffness", "any"),
    ("mu", "vdp_damping", "any"),
)
"""A chain's parameter groups, the model key that gives them, and the sign the value must have."""


def _unknown_problems(
    unknown: dict[str, tuple[float, float, float]], model: ChainModel, n: int | None
) -> list[str]:
    """The unknowns' names among the chain's parameters, and their three numbers."""
    groups = [
        (g, bound)
        for g, key, bound in _PARAM_GROUPS
        if key in ("mass", "stiffness", "damping") or getattr(model, key) is not None
    ]
    names = [f"{g}{i}" for g, _ in groups for i in range(1, (n or 0) + 1)]
    problems = []
    for name, (init, prior_sd, walk_sd) in unknown.items():
        if n is not None and name not in names:
            problems.append(
                f"unknown.{name}: expected a parameter of the chain ({', '.join(names)}); received {name!r}"
                + _did_you_mean(name, names)
            )
            continue
        triple = _triple_problem(name, init, prior_sd, walk_sd)
        if triple:
            problems += triple
            continue
        bound = next((b for g, b in groups if name.rstrip("0123456789") == g), "any")
        if (bound == "> 0" and not init > 0) or (bound == ">= 0" and not init >= 0):
            problems.append(
                f"unknown.{name}: expected an initial value {bound} (as the chain's own {name} must be); "
                f"received {init!r}"
            )
    return problems


def load_spec(path: str | Path) -> tuple[Spec, Path]:
    """Read and validate a spec file; returns the spec and the folder relative paths start from.

    An FMU's archive and model description are read and every name the spec gives is checked against
    them; nothing of the FMU runs here. Its ``[estimator] x0``, when not given, becomes the FMU's start
    values (so the run folder's ``config.toml`` records the prior mean that ran).

    Raises:
        SpecError: the file cannot be read or is not TOML, or a value does not validate (each key named
            with what it expects and what it received).

    """
    path = Path(path)
    try:
        text = read_regular(path).decode("utf-8").removeprefix("\ufeff")  # a BOM, as Windows editors write
    except OSError as exc:
        raise SpecError(f"spec {path}: could not read the file ({exc}).") from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"spec {path}: expected TOML text (UTF-8); received bytes that are not ({exc.reason})."
        ) from None
    except ValueError as exc:  # not a regular file (/dev/zero, a FIFO), or too large for a spec
        raise SpecError(f"spec {path}: {exc}.") from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"spec {path}: could not read a TOML table ({exc}).") from None
    try:
        spec, base = Spec.model_validate(values), path.resolve().parent
    except pydantic.ValidationError as exc:
        raise SpecError(f"spec {path}:\n  " + "\n  ".join(_problem_lines(exc))) from None
    if isinstance(spec.model, FmuModel):  # its model description, read and checked: nothing of it runs
        try:
            desc = _spec_fmu.description(spec, spec.model, base)
        except _Problems as exc:
            raise SpecError(f"spec {path}:\n  " + "\n  ".join(exc.lines)) from None
        if "x0" not in spec.estimator.model_fields_set:  # the prior mean as the run folder records it
            estimator = spec.estimator.model_copy(update={"x0": list(desc.state_starts)})
            spec = spec.model_copy(update={"estimator": estimator})
    return spec, base


def _tables(cls: Any, key: str) -> list[type[pydantic.BaseModel]]:
    """The spec classes that field ``key`` of ``cls`` holds (several for a tagged union), or none."""
    is_table = isinstance(cls, type) and issubclass(cls, pydantic.BaseModel)
    field = cls.model_fields.get(key) if is_table else None

    def flat(annotation: Any) -> list[Any]:
        args = typing.get_args(annotation)
        return [t for a in args for t in flat(a)] if args else [annotation]

    found = [] if field is None else flat(field.annotation)
    return [t for t in found if isinstance(t, type) and issubclass(t, pydantic.BaseModel)]


def _spec_location(loc: tuple[Any, ...]) -> tuple[list[str], type[pydantic.BaseModel] | None]:
    """A pydantic error location as the spec writes it, and the class of the table holding its last key.

    A tagged union's tag is dropped (``model.network``); the class is None where the key's table is not
    one of the spec's classes.
    """
    table: Any = Spec
    shown: list[str] = []
    parts = list(loc)
    while len(parts) > 1 and table is not None:
        key = str(parts.pop(0))
        shown.append(key)
        options = _tables(table, key)
        if len(options) > 1:  # a tagged union: pydantic names the tag after the key
            tag = parts.pop(0)
            options = [t for t in options if tag in typing.get_args(t.model_fields["kind"].annotation)]
        table = options[0] if len(options) == 1 else None
    return shown + [str(p) for p in parts], table


def _unknown_key(shown: list[str], table: type[pydantic.BaseModel] | None) -> str:
    """The line for a key its table does not allow.

    It names the closest allowed key, the allowed keys, and the tables that do hold a key of that name
    (one put in the wrong table).
    """
    name, where = shown[-1], ".".join(shown[:-1])
    line = f"unknown key {'.'.join(shown)!r}"
    if table is None:
        return line
    allowed = list(table.model_fields)
    line += _did_you_mean(name, allowed)
    homes = [
        f"[{key}]"
        for key in Spec.model_fields
        if key != where and any(name in t.model_fields for t in _tables(Spec, key))
    ]
    if homes and not _did_you_mean(name, allowed):
        line += f"; {name!r} is a key of {' and '.join(homes)}"
    return line + f"; allowed keys in {f'[{where}]' if where else 'the top level'}: {', '.join(allowed)}"


def _chain(spec: Spec) -> Any:
    from twinfer.models import Chain

    m = spec.model
    if not isinstance(m, ChainModel):
        raise TwinferRuntimeError(f"internal: _chain expects a chain model; received {type(m).__name__}.")
    try:
        return Chain(
            m.mass,
            m.stiffness,
            m.damping,
            cubic_stiffness=m.cubic_stiffness,
            vdp_damping=m.vdp_damping,
            forced_dofs=m.forced_dofs,
            outputs=m.outputs,
            base=m.base,
        )
    except ValueError as exc:
        raise SpecError(f"spec model: {exc}") from None


def _fmu(spec: Spec, model: FmuModel, base: Path) -> FMU:
    """The spec's :class:`~twinfer.models.FMU`, its description validated first (nothing runs before)."""
    from twinfer.models import FMU, FMUError

    try:
        _spec_fmu.description(spec, model, base)
    except _Problems as exc:
        raise SpecError("spec:\n  " + "\n  ".join(exc.lines)) from None
    try:
        return FMU(
            _spec_fmu.path(model, base),
            params=model.params,
            parameters=_spec_fmu.parameters(spec, model),
            derivatives=model.derivatives,
        )
    except FMUError as exc:
        raise SpecError(f"spec model.path: {exc}") from None


def _table(d: CsvData, base: Path) -> Any:
    """``[data]``'s file (relative to ``base``) read by :func:`twinfer.data.from_table`, its columns named."""
    from twinfer.data import from_table

    file = d.file if d.file.is_absolute() else base / d.file
    try:
        return from_table(file, d.time, d.inputs or None, d.outputs, states=d.states, input_hold=d.input_hold)
    except (OSError, ValueError) as exc:
        raise SpecError(f"spec data.file {file}: {exc}") from None


def _dataset(spec: Spec, chain: Any, base: Path) -> Any:
    """The spec's record: its data file's columns renamed to the chain's, or a simulation of the chain."""
    from twinfer.data import Dataset

    if spec.data is not None:
        d = spec.data  # its column counts are checked against the chain by Spec
        table = _table(d, base)
        # the file's columns under the model's names (the filters check the names, the graph the order)
        return Dataset(
            **{
                **table.to_dict(),
                "input_names": chain.input_names if chain.input_names else None,
                "output_names": chain.output_names,
                "state_names": chain.state_names if d.states is not None else None,
                "metadata": {
                    **table.metadata,
                    "columns": {"time": d.time, "inputs": d.inputs, "outputs": d.outputs, "states": d.states},
                },
            }
        )
    import jax

    from twinfer.sim import simulate_dataset

    s = spec.simulate
    if s is None:  # Spec holds [data] or [simulate]
        raise TwinferRuntimeError("internal: a spec without [data] reached the simulation of its record.")
    n = int(round(s.duration / s.dt))
    rng = np.random.default_rng(s.seed)
    forces = _band_limited(s.force_band, rng, n + 1, len(chain.forced_dofs), s.force_sd)
    ground = _band_limited(s.force_band, rng, n + 1, min(chain.n_ground, 1), s.ground_sd)
    if chain.n_ground == 2:  # a ground displacement and its velocity
        ground = np.concatenate([ground, np.gradient(ground, s.dt, axis=0)], axis=1)
    noise_sd = np.broadcast_to(np.asarray(s.input_noise_sd, dtype=np.float64), (len(chain.forced_dofs),))
    return simulate_dataset(
        chain,
        np.concatenate([ground, forces], axis=1),
        s.dt,
        s.noise_sd,
        jax.random.key(s.seed),
        input_noise_sd=np.concatenate([np.zeros(chain.n_ground), noise_sd]),  # the ground's recorded exactly
    )


def _step(data: Any) -> float:
    times = np.asarray(data.times)
    dts = np.diff(times)
    if dts.size == 0:
        raise SpecError(f"spec data: expected at least two rows (one step length dt); received {times.size}.")
    off = ~np.isclose(dts, dts[0], rtol=1e-6, atol=0.0)
    if off.any():
        k = int(np.argmax(off))
        raise SpecError(
            f"spec data: expected equally spaced times (one step length dt = {dts[0]:g} from the first two "
            f"rows); received a step of {dts[k]:g} from time {times[k]:g} to {times[k + 1]:g} (data rows "
            f"{k + 1} and {k + 2})."
        )
    return float(dts[0])


def run_spec(spec: Spec, base: str | Path = ".") -> tuple[Any, Any, Any, Any]:
    """Run a spec: ``(estimate, dataset, artifacts, figures)``.

    ``artifacts`` (:class:`twinfer.report.RunArtifacts`) holds the metrics: the log-likelihood, the NIS
    of a central filter, each unknown's final mean, sd and 95 % interval, and, where the truth is known
    (a simulation, or truth columns in the data), the state RMSE and 95 % coverage and each unknown's
    error and whether its interval holds the truth. ``figures`` is a function making the figures.

    An FMU (``kind = "fmu"``) is unpacked under a temporary folder, which goes with its instance when
    the run ends (:meth:`twinfer.models.FMU.close`).

    Raises:
        SpecError: for a spec that does not fit its model or data, naming the key.
        ValueError: from the estimator, naming the argument (e.g. an unknown parameter name).

    """
    if isinstance(spec.model, GridModel):
        if spec.data is not None:
            return _run_grid_data(spec, spec.model, Path(base))
        return _run_grid(spec, spec.model, Path(base))
    if isinstance(spec.model, FmuModel):
        fmu = _fmu(spec, spec.model, Path(base))
        try:
            return _run_model(spec, fmu, Path(base))
        finally:
            fmu.close()
    return _run_model(spec, _chain(spec), Path(base))


def _run_model(spec: Spec, system: Any, base: Path) -> tuple[Any, Any, Any, Any]:
    """:func:`run_spec` of a chain or an FMU: ``system``, the model built from ``[model]``."""
    from twinfer import metrics
    from twinfer.infer import Banded, Central, Distributed, estimate
    from twinfer.infer.filters import tuning_of
    from twinfer.infer.graph import check_messages, default_bandwidth
    from twinfer.report import RunArtifacts

    fmu = spec.model if isinstance(spec.model, FmuModel) else None
    if spec.simulate is not None:  # the record's length is known before it is simulated
        rows = int(round(spec.simulate.duration / spec.simulate.dt)) + 1
        _refuse_run_beyond_memory(spec, system.n_state, rows)
    if fmu is None:
        data = _dataset(spec, system, base)
    else:  # [data]'s file read by _table, as a chain's is
        data = _spec_fmu.dataset(spec, fmu, system, None if spec.data is None else _table(spec.data, base))
    _refuse_run_beyond_memory(spec, system.n_state, len(data.times))
    dt = _step(data)
    e = spec.estimator
    noise_sd = e.noise_sd if e.noise_sd is not None else spec.simulate.noise_sd  # type: ignore[union-attr]
    x0: Any = e.x0
    if fmu is not None:
        noise_sd, x0 = _spec_fmu.numbers(spec, fmu, system, noise_sd)
    options: dict[str, Any] = dict(
        noise_sd=noise_sd, state_sd=e.state_sd, process_sd=e.process_sd, x0=x0, unknown=spec.unknown or None
    )
    input_sd = np.asarray(e.input_sd, dtype=np.float64)
    route: dict[str, float] = {}  # a distributed route's metrics, and its notes
    route_notes: list[str] = []
    split: dict[str, Any] = dict(
        partition=e.partition,
        filter=e.estimator,
        integrator=e.integrator,
        substeps=e.substeps,
        messages=e.messages,
        rule=e.rule,
    )
    if e.kind == "central":  # load cells' noise: twinfer.estimate runs one subsystem holding the chain
        central = Central(
            filter=e.estimator,
            smoother=e.smoother,
            integrator=e.integrator,
            substeps=e.substeps,
            kernel=e.kernel,
        )
        est = estimate(system, data, central, input_sd=input_sd if np.any(input_sd) else None, **options)
    else:
        graph = Banded(**split).graph(system, data, dt, {**options, "input_sd": input_sd})
        if e.kind == "banded":
            est = estimate(graph, data, Banded(bandwidth=e.bandwidth, parameters=e.parameters))
        elif not e.message_passing:  # the calibrated default: the banded filter, one wider than the cuts need
            bandwidth = default_bandwidth(graph, data)
            est = estimate(graph, data, Banded(bandwidth=bandwidth, parameters="global"))
            route = {"distributed.bandwidth": float(bandwidth)}
            route_notes.append(
                f'kind = "distributed" ran the banded filter (its default route) at bandwidth {bandwidth} '
                "with the unknowns global (each subsystem keeps its correlation with the subsystems up to "
                f"{bandwidth} away, and every unknown with all of them), which message passing drops, so "
                "its bands cover like the central filter's. route = \"messages\" runs the paper's message "
                "passing instead (docs/spec-files.md)."
            )
        else:
            est = estimate(graph, data, Distributed(schedule=e.schedule))
            check = check_messages(graph, data, e.schedule)
            route = {
                "check.gap_per_value": check.gap,
                "check.loglik_messages": check.loglik_messages,
                "check.loglik_banded": check.loglik_banded,
                "check.steps": float(check.steps),
                "check.bandwidth": float(check.bandwidth),
                "check.seconds": check.seconds,
            }
            route_notes += [
                "Message passing keeps no correlation between the subsystems' errors: where they co-drift "
                '(a chain fixed at one end, unmeasured forces) its bands under-cover. kind = "banded" keeps '
                "it, and a higher log-likelihood on the same data tells which describes the record better "
                "(docs/getting-started.md).",
                f"Checked against the banded filter (bandwidth {check.bandwidth}) on the first {check.steps} "
                f"steps in {check.seconds:.1f} s: log-likelihood {check.loglik_messages:.6g} against "
                f"{check.loglik_banded:.6g}, {check.gap:.3g} nats per measured value "
                + (
                    "worse: its bands are likely too narrow (the warning above)."
                    if check.fits_worse
                    else f"apart (warning above {check.threshold:g})."
                ),
            ]
    out: dict[str, float] = {"loglik": float(est.loglik)}
    if est.nis is not None:
        out["nis"] = float(est.nis)
    tuning = tuning_of(est)  # process_sd / noise_sd = "auto"
    out |= {} if tuning is None else tuning.metrics()
    truth_params = dict(data.truth_params or {}) if spec.simulate is not None else {}
    for name in est.parameters:
        mean, sd = (float(np.asarray(v)[-1]) for v in est.series(name))
        low, high = est.interval(name)
        out |= {
            f"param.{name}": mean,
            f"param.{name}_sd": sd,
            f"param.{name}_low": low,
            f"param.{name}_high": high,
        }
        if name in truth_params:
            true = float(truth_params[name])
            out[f"param.{name}_err_pct"] = 100.0 * abs(mean - true) / abs(true)
            out[f"param.{name}_covered"] = float(low <= true <= high)
    arrays: dict[str, Any] = {
        "times": np.asarray(est.times),
        "means": np.asarray(est.means),
        "stds": np.asarray(est.stds),
    }
    n = system.n_state
    truth = None if data.truth_states is None else np.asarray(data.truth_states)
    if truth is not None:
        mean, sd = np.asarray(est.means)[:, :n], np.asarray(est.stds)[:, :n]
        out["state.rmse"] = float(metrics.rmse(mean, truth))
        out["state.coverage95"] = float(metrics.coverage(mean, sd, truth, 0.95))
        arrays["truth_states"] = truth
    notes = [f"{e.description}, {len(data.times) - 1} steps of {dt:g} s"]
    if fmu is not None:
        unmeasured = [o for o in system.output_names if o not in fmu.outputs]
        notes.append(
            f"FMU {fmu.path.name}: states {', '.join(system.state_names)} (prior mean {x0}); measured "
            f"outputs {', '.join(fmu.outputs)}"
            + (f"; unmeasured {', '.join(unmeasured)}" if unmeasured else "")
            + "."
        )
    notes += [] if tuning is None else [f"{str(tuning)[0].upper()}{str(tuning)[1:]}."]
    out |= route
    notes += route_notes
    artifacts = RunArtifacts(out, arrays, notes=tuple(notes))
    return est, data, artifacts, lambda: est.plot(truth=data)


class LiveSetup(typing.NamedTuple):
    """What a live twin of a spec needs: its compiled program, step, and the stream's column names.

    ``columns`` maps each stream column to the program's input or output name (``[data]``'s columns,
    or the model's own names); ``time`` is the stream's time column; ``groups`` the outputs the
    innovation alarm tests together (``[live] groups``, and a grid's clusters: ``S<c> (buses ...)``);
    ``measured`` the outputs the stream carries where not all (an FMU's measured outputs), which the
    twin's clock waits for (:class:`twinfer.live.Twin`'s ``measured``).
    """

    program: Any
    dt: float
    time: str
    columns: dict[str, str]
    groups: dict[str, list[str]] = {}
    measured: tuple[str, ...] | None = None


def live_setup(spec: Spec, base: Path | None = None) -> LiveSetup:
    """The compiled estimator of a spec and its stream's layout (``twinfer live``).

    A chain: its central filter. A grid (with ``model.damping``, as for measured ``[data]``): its
    clusters' UKFs on the field engine (or one central UKF), each bus's ``theta<b>``/``omega<b>`` a
    channel, every cluster's sensors a group of the innovation alarm. ``base``: the folder a network
    file is relative to.

    Raises:
        SpecError: a spec the live twin cannot run (a distributed or banded chain estimator, noise
            levels "auto", no step), naming the key.

    """
    from twinfer.infer import Central, compile

    e = spec.estimator
    if isinstance(spec.model, GridModel):
        return _grid_live_setup(spec, spec.model, Path(".") if base is None else base)
    if e.kind != "central":
        raise SpecError(f'spec estimator.kind: expected "central" for twinfer live; received "{e.kind}".')
    noise_sd = e.noise_sd if e.noise_sd is not None else spec.simulate.noise_sd  # type: ignore[union-attr]
    if noise_sd == "auto" or e.process_sd == "auto":
        raise SpecError(
            'spec estimator: twinfer live needs numbers for noise_sd and process_sd; received "auto".'
        )
    dt = spec.live.dt if spec.live.dt is not None else (spec.simulate.dt if spec.simulate else None)
    if dt is None:
        raise SpecError(
            "spec live.dt: expected the model's step [s] (the stream's sampling interval); received none."
        )
    fmu = spec.model if isinstance(spec.model, FmuModel) else None
    x0: Any = e.x0
    if fmu is None:
        system = _chain(spec)
    else:  # the FMU lives as long as the twin's program (its instance is freed with it)
        system = _fmu(spec, fmu, Path(".") if base is None else base)
        noise_sd, x0 = _spec_fmu.numbers(spec, fmu, system, noise_sd)
    input_sd = np.asarray(e.input_sd, dtype=np.float64)
    hold = spec.data.input_hold if spec.data is not None else "zoh"
    program = compile(
        system,
        Central(
            filter=e.estimator, smoother=False, integrator=e.integrator, substeps=e.substeps, kernel=e.kernel
        ),
        dt=float(dt),
        input_hold=hold,
        noise_sd=noise_sd,
        state_sd=e.state_sd,
        process_sd=e.process_sd,
        x0=x0,
        unknown=spec.unknown or None,
        input_sd=input_sd if np.any(input_sd) else None,
    )
    measured = list(program.output_names) if fmu is None else list(fmu.outputs)  # an FMU's, by name
    if spec.data is not None:
        names = [*(spec.data.inputs or []), *spec.data.outputs]
        time = spec.data.time
    else:
        names, time = [*system.input_names, *measured], "t"
    columns = dict(zip(names, [*program.input_names, *measured], strict=True))
    groups = _live_groups(spec, program, {})
    return LiveSetup(program, float(dt), time, columns, groups, None if fmu is None else tuple(measured))


def _live_groups(spec: Spec, program: Any, own: dict[str, list[str]]) -> dict[str, list[str]]:
    """``own`` groups and the spec's ``[live] groups``, checked against the program's outputs."""
    unknown = sorted({s for group in spec.live.groups.values() for s in group} - set(program.output_names))
    if unknown:
        raise SpecError(
            f"spec live.groups: expected outputs among {list(program.output_names)}; received {unknown}."
        )
    return {**own, **{k: list(v) for k, v in spec.live.groups.items()}}


def _grid_live_setup(spec: Spec, model: GridModel, base: Path) -> LiveSetup:
    """A grid spec's live twin (:func:`live_setup`): :func:`twinfer.live.grid_twin` on the spec's PMUs."""
    from twinfer.infer.graph._kuramoto import stable_substeps
    from twinfer.live import grid_twin

    if model.damping is None:
        raise SpecError(
            "spec model.damping: a grid's live twin needs the buses' damping d (as for measured [data]); "
            "received none."
        )
    if spec.live.dt is None:
        raise SpecError("spec live.dt: expected the PMU frames' interval [s] for a grid twin; received none.")
    e = spec.estimator
    if e.noise_sd is None or e.noise_sd == "auto" or np.ndim(e.noise_sd) != 0:
        raise SpecError(
            f"spec estimator.noise_sd: expected one number for a grid twin; received {e.noise_sd!r}."
        )
    net = _measured_network(spec, model, base)
    n = net.n_bus
    pmus = np.arange(n) if model.pmus is None else np.asarray(model.pmus, dtype=np.int64) - 1
    if pmus.size == 0 or pmus.min() < 0 or pmus.max() >= n or np.unique(pmus).size != pmus.size:
        raise SpecError(
            f"spec model.pmus: expected distinct buses in 1..{n} (from 1); received {model.pmus}."
        )
    # every cluster at the network's stable Heun sub-steps: a cluster's own count ignores its neighbours'
    # stiff lines, and on case1888rte that gave about 200 false alarms per healthy record (live-grid)
    dt = float(spec.live.dt)
    twin = grid_twin(
        net,
        np.broadcast_to(np.asarray(model.damping, dtype=np.float64), (n,)),
        pmus,
        dt=dt,
        noise_sd=float(e.noise_sd),  # type: ignore[arg-type]
        s_max=model.s_max,
        messages="probabilistic" if e.messages == "probabilistic" else "held",
        substeps=stable_substeps(np.asarray(net.neighbours[1]), dt),
        central=e.kind == "central",
    )
    program = twin.program
    time = spec.data.time if spec.data is not None else "t"
    columns = {name: name for name in program.output_names}
    return LiveSetup(program, dt, time, columns, _live_groups(spec, program, twin.groups))


_CENTRAL_UKF_COPIES = 12
"""Bytes of the central grid UKF's jitted scan over ``8 L^2`` (L = 3N states, float64), rounded up from
XLA's memory analysis of it (``jax.jit(...).lower(...).compile().memory_analysis()``, temporaries):
11.1 on ieee30, ieee57 and ieee118, 11.7 on ieee300 and pegase1354 (1.54 GB). They are the covariance and
its square root, the 2L + 1 sigma points before and after the Heun sub-steps, their weighted deviations
and the factorisation's work space, each L x L or (2L + 1) x L."""


def _central_grid_bytes(n_bus: int, steps: int) -> int:
    """Peak bytes of a central UKF on ``n_bus`` buses over ``steps`` steps.

    :data:`_CENTRAL_UKF_COPIES` copies of an ``L x L`` float64 matrix (L = 3N), and the record (truth,
    observations, means and standard deviations of both estimators, 16 values a bus and step).
    """
    states = 3 * n_bus
    return _CENTRAL_UKF_COPIES * 8 * states**2 + 16 * 8 * n_bus * (steps + 1)


def _refuse_central_beyond_memory(n_bus: int, steps: int, s_max: int) -> None:
    """Refuse (:class:`SpecError`) a central UKF on ``n_bus`` buses that would not fit in memory.

    Available: the kernel's ``MemAvailable``, capped by a container's headroom. Called before anything is
    computed.
    """
    from twinfer._resources import available_memory

    need, have = _central_grid_bytes(n_bus, steps), available_memory()
    if have is None or need <= have:
        return
    states = 3 * n_bus
    raise SpecError(
        f"spec estimator.kind: expected an estimator that fits in memory; a central UKF on {n_bus} buses "
        f"({states} states) needs about {need / 2**30:.3g} GiB (estimate: {_CENTRAL_UKF_COPIES} copies of "
        f"its {states} x {states} covariance in float64, {8 * states**2 / 2**30:.3g} GiB each), and "
        f"{have / 2**30:.3g} GiB are available; received kind = 'central'. Leave kind out (or "
        f"kind = 'distributed'): one UKF per cluster of at most s_max = {s_max} buses."
    )


_RUN_COPIES = {"filter": 7, "smoother": 14, "distributed": 32}
"""Float64 arrays of a row's size a chain's run holds per row at its peak, rounded up from peak RSS
measured on `twinfer estimate`. Central filter: 8 states, 200,000 against 1,000,000 rows, 1.19 GB against
3.48 GB, so 2.87 kB per row, 5.6 copies of the 8 x 8 covariance. Those copies are the filter's square
roots, its predicted factors and cross-covariances, the Estimate's covariances and the netCDF file's
copy; 7 leaves a margin. The RTS smoother keeps filtered, predicted and smoothed ones, so twice that. A
distributed estimator (banded by default) keeps no covariance across subsystems: about 26 vectors of n
per row (its windows, means and standard deviations), measured on 4 masses and one unknown at 2,000
against 40,000 rows. A 4-copy figure let a 10-million-row CSV through: the run reached 24 GB and the
kernel killed it."""

_RUN_SHARE = 0.8
"""The share of the available memory a run may plan to take: the estimate is a measured rate, not a
bound, and the rest of the machine keeps working."""

_RUN_BASE = 2**30
"""Bytes the process holds besides the run's rows (JAX, the libraries, the record as read)."""


def _run_bytes(spec: Spec, n_state: int, rows: int) -> tuple[int, str]:
    """Peak bytes of a run of a chain over ``rows`` rows, and a few words on what they hold."""
    n = n_state + len(spec.unknown)
    e = spec.estimator
    if e.kind != "central":
        copies = _RUN_COPIES["distributed"]
        return (
            _RUN_BASE + copies * 8 * rows * n,
            f"{copies} vectors of {n} values per row in float64, and 1 GiB",
        )
    copies = _RUN_COPIES["smoother" if e.smoother else "filter"]
    what = f"{copies} copies of the {n} x {n} covariance per row in float64" + (
        " (the smoother keeps filtered, predicted and smoothed ones)" if e.smoother else ""
    )
    return _RUN_BASE + copies * 8 * rows * n * n, what + ", and 1 GiB for the process"


def _refuse_run_beyond_memory(spec: Spec, n_state: int, rows: int) -> None:
    """Refuse (:class:`SpecError`) a chain's run over ``rows`` rows that would not fit in memory.

    Available: the kernel's ``MemAvailable``, capped by a container's headroom. Called before the
    estimator runs (before the simulation, for ``[simulate]``).
    """
    from twinfer._resources import available_memory

    (need, what), have = _run_bytes(spec, n_state, rows), available_memory()
    if have is None or need <= _RUN_SHARE * have:
        return
    n = n_state + len(spec.unknown)
    source = (
        f"[simulate] duration = {spec.simulate.duration:g}, dt = {spec.simulate.dt:g}"
        if spec.simulate is not None
        else f"data.file with {rows} rows"
    )
    change = ["fewer rows (a shorter [simulate] duration, a larger dt, or a part of the data file)"]
    if spec.estimator.smoother:
        change.append("smoother = false (about half the memory)")
    if spec.estimator.kind == "central":
        change.append('kind = "distributed" (no covariance across subsystems is kept)')
    raise SpecError(
        f"spec estimator: expected a run that fits in memory; {rows} rows of {n} estimated values "
        f"({n_state} states and {len(spec.unknown)} unknown parameter(s)) need about {need / 2**30:.3g} "
        f"GiB (estimate: {what}), and {have / 2**30:.3g} GiB are available (a run may take "
        f"{_RUN_SHARE:.0%}); received {source}. Use " + ", or ".join(change) + "."
    )


def _network_path(model: GridModel, base: Path) -> str:
    """The spec's network: a file relative to the spec, or a name pandapower ships."""
    network = model.network
    if network.lower().endswith((".json", ".m", ".mat")) and not Path(network).is_absolute():
        return str(base / network)
    return network


def _state_metrics(prefix: str, mean: np.ndarray, std: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Pooled 95 % coverage of the phases (errors wrapped to [-pi, pi)) and of the frequencies.

    ``mean``, ``std``: (T, N, 3) per bus (theta, omega, Omega) at t_1..t_T; ``truth``: (T + 1, 2N) from t_0.
    The grid case reports their RMSE (``rmse_theta``, wrapped, and ``rmse_omega``: each bus's, averaged).
    """
    from twinfer import metrics

    n = mean.shape[1]
    theta, omega = truth[1:, :n], truth[1:, n:]
    period = 2.0 * np.pi
    # the true phase's representative nearest the estimate: the coverage of the wrapped error
    near = theta + period * np.round((mean[:, :, 0] - theta) / period)
    return {
        f"{prefix}.coverage95_theta": float(metrics.coverage(mean[:, :, 0], std[:, :, 0], near, 0.95)),
        f"{prefix}.coverage95_omega": float(metrics.coverage(mean[:, :, 1], std[:, :, 1], omega, 0.95)),
    }


def _run_grid(spec: Spec, model: GridModel, base: Path) -> tuple[Any, Any, Any, Any]:
    """A grid spec as the ``grid`` case runs it: the draws, the record, the UKFs, their scores, figures.

    :func:`twinfer.bench._grid_study.grid_study` with Table S4's settings
    (:data:`~twinfer.infer.graph._grid.GRID_DEFAULTS`) at the spec's step, noise and ``s_max``: the
    damping and natural frequencies drawn and the record simulated from the spec's seed as the case draws
    them, the distributed UKF on the generator-seeded clusters of at most ``s_max`` buses and the central
    one (``kind = "central"``) on the whole network. The Estimate holds ``theta``, ``omega`` and ``Omega``
    per bus (``Omega``, the natural frequency, as a parameter). The metrics are the case's (Table S3's
    errors and the run times) with the pooled 95 % coverage of theta and omega of each UKF that ran. A
    central UKF that would not fit in memory is refused before the record is simulated.
    """
    import dataclasses
    import time

    from twinfer.bench._grid_study import grid_study
    from twinfer.data import check_grid_case, load_grid
    from twinfer.infer import Estimate
    from twinfer.infer.graph._grid import GRID_DEFAULTS
    from twinfer.report import RunArtifacts
    from twinfer.report._grid_figures import grid_figures

    start = time.perf_counter()
    sim, e = spec.simulate, spec.estimator
    if sim is None:  # Spec requires [simulate] for a grid without [data]
        raise TwinferRuntimeError("internal: a grid spec without [simulate] reached its simulation.")
    network = _network_path(model, base)
    if np.ndim(sim.noise_sd) != 0:
        raise SpecError(f"spec simulate.noise_sd: expected one value for a grid; received {sim.noise_sd}.")
    sigma, steps = float(sim.noise_sd), int(round(sim.duration / sim.dt))  # type: ignore[arg-type]
    if not (math.isfinite(sigma) and sigma > 0):
        raise SpecError(f"spec simulate.noise_sd: expected a number > 0 for a grid; received {sim.noise_sd}.")
    if steps < 2:
        raise SpecError(
            f"spec simulate.duration: expected at least 2 steps of dt = {sim.dt:g}; received duration = "
            f"{sim.duration:g} ({steps} steps)."
        )
    try:
        net = load_grid(check_grid_case(network))
    except (OSError, ValueError) as exc:
        raise SpecError(f"spec model.network: {exc}") from None
    if e.kind == "central":
        _refuse_central_beyond_memory(net.n_bus, steps, model.s_max)
    default = GRID_DEFAULTS  # the grid case's settings (Table S4)
    settings = dataclasses.replace(default, dt=sim.dt, noise_sd=sigma, s_max=model.s_max)
    messages = "probabilistic" if e.messages == "probabilistic" else "held"
    ran = ("distributed", "central") if e.kind == "central" else ("distributed",)
    study = grid_study(net, ran, settings, seed=sim.seed, steps=steps, messages=messages)
    metrics, arrays, partition = study.metrics, study.arrays, study.partition
    truth = np.asarray(arrays["truth"])
    for prefix in ran:
        metrics |= _state_metrics(prefix, arrays[f"{prefix}_mean"], arrays[f"{prefix}_std"], truth)
    metrics["timing.run_s"] = time.perf_counter() - start
    mean, std = arrays[f"{ran[-1]}_mean"], arrays[f"{ran[-1]}_std"]
    buses = mean.shape[1]
    columns = [f"{q}{b + 1}" for q in ("theta", "omega", "Omega") for b in range(buses)]
    est = Estimate(
        times=sim.dt * np.arange(1, steps + 1),
        means=np.concatenate([mean[:, :, k] for k in range(3)], axis=1),
        stds=np.concatenate([std[:, :, k] for k in range(3)], axis=1),
        covs=None,
        state_names=tuple(columns),
        parameters=tuple(columns[2 * buses :]),
    )
    notes = (
        f"{e.kind} UKF on {network}: {net.n_bus} buses, {len(net.gen_buses)} generator buses, "
        f"{partition.n_clusters} clusters (S_max = {model.s_max}, mean size {partition.mean_size:.2f}); "
        f"{steps} steps of {sim.dt:g} s, the truth by the paper's Heun scheme ({study.substeps} sub-step(s) "
        "a step) with the grid case's draws of the damping and natural frequencies (Table S4).",
        f"Messages between clusters: {messages} (docs/design-messages.md); the noise levels of Table S4 "
        f"(distributed Q_Omega = {default.q_Omega_distributed:g}, the authors' code).",
    )
    artifacts = RunArtifacts(metrics, arrays, notes=notes)
    return est, None, artifacts, lambda: grid_figures(arrays, case=network, dt=sim.dt, s_max=model.s_max)


def _measured_network(spec: Spec, model: GridModel, base: Path) -> Any:
    """A measured grid's network; a central filter that would not fit in memory is refused here.

    Before a record is read: its length does not change the verdict much.
    """
    from twinfer.data import load_grid

    try:
        net = load_grid(_network_path(model, base))
    except (OSError, ValueError) as exc:
        raise SpecError(f"spec model.network: {exc}") from None
    if spec.estimator.kind == "central":
        _refuse_central_beyond_memory(net.n_bus, 0, model.s_max)
    return net


def _grid_graph(
    spec: Spec, model: GridModel, net: Any, dt: float, x0: np.ndarray, substeps: int | None = None
) -> tuple[Any, Any]:
    """The Kuramoto network of a grid spec with measured data, cut into its clusters (or one, central).

    The spec's damping and noise sd, the grid case's other settings (Table S4,
    :data:`~twinfer.infer.graph._grid.GRID_DEFAULTS`), natural frequencies unknown around 0; ``x0``
    (n, 3) the prior mean of each bus's (theta, omega, Omega). Returns the graph (its columns named as
    the network's: ``theta<b>``, ``omega<b>``) and the partition.
    """
    import dataclasses

    from twinfer.infer.graph import Partition
    from twinfer.infer.graph._grid import GRID_DEFAULTS, grid_graph, partition_for
    from twinfer.models import KuramotoNetwork

    e, n = spec.estimator, net.n_bus
    if model.damping is None or e.noise_sd is None or e.noise_sd == "auto":  # Spec requires both here
        raise TwinferRuntimeError("internal: a measured grid spec without model.damping or noise_sd.")
    if np.ndim(e.noise_sd) != 0 or np.ndim(model.damping) not in (0, 1):
        raise SpecError("spec estimator.noise_sd: expected one value for a grid.")
    damping = np.broadcast_to(np.asarray(model.damping, dtype=np.float64), (n,))
    index, weight = net.neighbours
    central = e.kind == "central"
    default = GRID_DEFAULTS  # the grid case's settings (Table S4)
    if central:
        partition = Partition(labels=np.zeros(n, int), clusters=(np.arange(n),))
    else:
        partition = partition_for(net, model.s_max, dt, default.bond)
    network = KuramotoNetwork(index, weight, damping, np.zeros(n))
    graph = grid_graph(
        network,
        partition,
        x0,
        dt=dt,
        process_sd=default.process_sd(central),
        noise_sd=float(e.noise_sd),  # type: ignore[arg-type]
        gamma=default.ukf_gamma,
        messages="probabilistic" if e.messages == "probabilistic" else "held",
        substeps=substeps,
    ).graph
    names = {"output_names": network.output_names, "input_names": network.input_names}
    return dataclasses.replace(graph, **names), partition


def _run_grid_data(spec: Spec, model: GridModel, base: Path) -> tuple[Any, Any, Any, Any]:
    """A grid from measured phases and frequencies: the Kuramoto network of the file's buses, estimated.

    The data file's columns ``theta<b>`` and ``omega<b>`` (buses numbered from 1 in the network's order;
    a missing column is an unmeasured bus, NaN a missing sample) are the measurements; the natural
    frequencies Omega are unknown (prior 0 +- 1, random walk as the grid case's), the damping the
    spec's. Central: one UKF on the whole network; distributed: the clusters of ``s_max`` buses. The
    noise levels other than the measurement's are the grid case's defaults (Table S4).
    """
    from twinfer.data import Dataset, from_table, table_columns
    from twinfer.data._grid import grid_columns
    from twinfer.infer import Distributed, estimate
    from twinfer.report import RunArtifacts

    d, e = spec.data, spec.estimator
    if d is None or model.damping is None or e.noise_sd is None:  # Spec requires all three here
        raise TwinferRuntimeError("internal: a grid spec's data, model.damping or noise_sd is None.")
    net = _measured_network(spec, model, base)
    n = net.n_bus
    file = d.file if d.file.is_absolute() else base / d.file
    try:
        present = set(table_columns(file))
    except (OSError, ValueError) as exc:
        raise SpecError(f"spec data.file {file}: {exc}") from None
    names = [f"{q}{b + 1}" for q in ("theta", "omega") for b in range(n)]
    try:
        measured = grid_columns(net, sorted(present), f"spec data.file {file}")
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    if isinstance(model.damping, list) and len(model.damping) not in (1, n):
        raise SpecError(
            f"spec model.damping: expected one value or {n}, one per bus of {net.name!r}; received "
            f"{len(model.damping)} values {model.damping}."
        )
    try:
        table = from_table(file, d.time, None, measured)
    except (OSError, ValueError) as exc:
        raise SpecError(f"spec data.file {file}: {exc}") from None
    y = np.full((len(table.times), 2 * n), np.nan)
    y[:, [names.index(c) for c in measured]] = np.asarray(table.observations)
    data = Dataset(table.times, y, mask=~np.isnan(y), output_names=names, metadata={"source": str(file)})
    dt = _step(data)
    x0 = np.stack([np.nan_to_num(y[0, :n]), np.nan_to_num(y[0, n:]), np.zeros(n)], axis=1)
    graph, partition = _grid_graph(spec, model, net, dt, x0)
    est = estimate(graph, data, Distributed())  # the field engine, Jacobi
    omega_sd = np.asarray(est.stds)[-1, 2 * n :]
    out = {
        "network.buses": float(n),
        "data.measured_channels": float(len(measured)),
        "partition.clusters": float(partition.n_clusters),
        "Omega.final_sd_median": float(np.median(omega_sd)),
    }
    arrays = {"times": np.asarray(est.times), "means": np.asarray(est.means), "stds": np.asarray(est.stds)}
    notes = (
        f"{e.kind} UKF on {n} buses ({partition.n_clusters} clusters), "
        f"{len(data.times) - 1} steps of {dt:g} s",
    )
    return est, data, RunArtifacts(out, arrays, notes=notes), est.plot
