"""The FMU part of a spec file (``[model] kind = "fmu"``: FMU spec files, issue #56).

:mod:`twinfer.spec` holds the schema (:class:`twinfer.spec.FmuModel` among the model kinds) and
dispatches to the functions here: :func:`problems`, what an FMU spec gets wrong that the spec alone
shows (run by :class:`twinfer.spec.Spec`'s validation); :func:`description`, the FMU's model
description read and every name the spec gives checked against it before anything of the FMU runs
(:func:`twinfer.spec.load_spec`); :func:`path` and :func:`parameters`, the FMU file and the parameters
the model is built with; :func:`dataset`, the record from ``[data]`` or ``[simulate]`` over all the
FMU's outputs, the unmeasured ones masked out; and :func:`numbers`, the filter's noise levels and prior
mean. The spec's errors stay :class:`twinfer.spec.SpecError`, raised by :mod:`twinfer.spec`.

Nothing here imports :mod:`twinfer.spec` when it runs (its tables are named for the type checker only),
and fmpy is imported only when an FMU is read (:mod:`twinfer.models._fmu_archive`), not with this module.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from twinfer._spec_shared import Problems, band_limited, triple_problem, values_problem
from twinfer.data._checks import did_you_mean as _did_you_mean
from twinfer.errors import TwinferRuntimeError

if TYPE_CHECKING:  # the models and the data are imported when a spec runs; the spec's tables for types only
    from twinfer.data import Dataset
    from twinfer.models import FMU
    from twinfer.models._fmu_archive import Description
    from twinfer.spec import FmuModel, Spec

__all__ = ["dataset", "description", "numbers", "parameters", "path", "problems"]


def problems(spec: Spec, model: FmuModel) -> list[str]:
    """What an FMU spec gets wrong that the spec alone shows: the estimator, the noise levels, counts.

    The checks that need the FMU's model description (its variables' names, its states and inputs) are
    :func:`description`'s.
    """
    e, outs = spec.estimator, model.outputs
    per_output = f"measured output ({', '.join(outs)})"
    problems = []
    if e.kind != "central":
        problems.append(
            "estimator.kind: an FMU is one model whose equations are compiled code behind the FMI, which "
            f"cannot be cut into subsystems; expected 'central'; received {e.kind!r}"
        )
    if e.estimator == "kf":
        problems.append(
            "estimator.estimator: 'kf' needs a linear model, and an FMU gives its equations as compiled "
            "code, not as matrices; expected 'ukf' or 'ekf'; received 'kf'"
        )
    if e.integrator == "exact":
        problems.append(
            "estimator.integrator: 'exact' is the matrix exponential of a linear model, and an FMU gives "
            "its equations as compiled code, not as matrices; expected 'rk4' or 'euler'; received 'exact'"
        )
    if np.any(np.asarray(e.input_sd) != 0):
        problems.append(
            "estimator.input_sd: recorded inputs' noise in the process noise is for a chain's forces, not "
            f"yet for an FMU's inputs; expected 0; received {e.input_sd!r}"
        )
    if len(set(outs)) != len(outs):
        problems.append(f"model.outputs: expected distinct output names; received {outs}")
    if e.noise_sd is not None and e.noise_sd != "auto":
        problems += values_problem("estimator.noise_sd", e.noise_sd, len(outs), per_output, "> 0")
    sim = spec.simulate
    if sim is not None:
        bound = ">= 0" if e.noise_sd is not None else "> 0"
        note = (
            "" if e.noise_sd is not None else " (it is the estimator's too: estimator.noise_sd is not given)"
        )
        problems += values_problem("simulate.noise_sd", sim.noise_sd, len(outs), per_output, bound, note)
        if "ground_sd" in sim.model_fields_set:
            problems.append(
                "simulate.ground_sd: the motion of a chain's moving ground; an FMU has none (force_sd "
                f"drives its inputs); expected no ground_sd; received {sim.ground_sd!r}"
            )
    if spec.data is not None and len(spec.data.outputs) != len(outs):
        problems.append(
            f"data.outputs: expected {len(outs)} output columns (one per measured output {outs}, in "
            f"order); received {len(spec.data.outputs)} {spec.data.outputs}"
        )
    for name, (init, prior_sd, walk_sd) in spec.unknown.items():
        problems += triple_problem(name, init, prior_sd, walk_sd)
    return problems


def path(model: FmuModel, base: Path) -> Path:
    """The FMU file: ``model.path`` relative to the spec's folder, as a data file's is."""
    return model.path if model.path.is_absolute() else base / model.path


def parameters(spec: Spec, model: FmuModel) -> list[str]:
    """The FMU parameters a spec names, which become the model's ``params``.

    ``[model.params]``'s, then the unknowns not among them; the FMU's other parameters keep their start
    values.
    """
    return list(dict.fromkeys([*model.params, *spec.unknown]))


def description(spec: Spec, model: FmuModel, base: Path) -> Description:
    """The FMU's model description, validated before anything of the FMU runs, with every name checked.

    :func:`twinfer.models._fmu_archive.describe` reads the archive and its ``modelDescription.xml``
    (FMI 2.0.4, sections 2.2 and 3.1) and loads no binary.

    Returns:
        The :class:`~twinfer.models._fmu_archive.Description`.

    Raises:
        Problems: one line per problem, each naming its spec key: ``model.path`` (a missing file, a zip
            that is not an FMU, not FMI 2.0 Model Exchange (co-simulation only), events, no binary for
            this platform: :mod:`twinfer.models._fmu_errors`; or no continuous states),
            ``model.params.<name>`` and ``unknown.<name>`` (not a real parameter of variability fixed or
            tunable, or outside its declared min and max), ``model.outputs`` (not an output of the FMU),
            ``model.derivatives`` (``"directional"`` from an FMU without them), and the counts that
            depend on its states and inputs (``data.inputs``, ``data.states``, ``estimator.state_sd``,
            ``process_sd``, ``x0``, ``simulate.input_noise_sd``).

    """
    from twinfer.models import FMUError, FMUVariableError
    from twinfer.models._fmu_archive import describe

    file = path(model, base)
    keyed = [*((f"model.params.{n}", n) for n in model.params), *((f"unknown.{n}", n) for n in spec.unknown)]
    try:
        desc = describe(file, parameters(spec, model), model.params)
    except FMUVariableError as exc:  # which names: each on its own (on this path only)
        lines = []
        for key, name in keyed:
            try:
                describe(file, [name])
            except FMUVariableError as one:
                lines.append(f"{key}: {one}")
        raise Problems(lines or [f"model.params: {exc}"]) from None
    except FMUError as exc:
        raise Problems([f"model.path: {exc}"]) from None
    outputs, states, inputs = desc.output_names, desc.state_names, desc.input_names
    problems = [
        f"model.outputs: expected outputs of the FMU ({', '.join(outputs) or 'none'}); received {name!r}"
        + _did_you_mean(name, list(outputs))
        for name in model.outputs
        if name not in outputs
    ]
    if model.derivatives == "directional" and not desc.directional:
        problems.append(
            "model.derivatives: expected an FMU with providesDirectionalDerivative for 'directional'; "
            "received one without (use 'auto' or 'finite_differences')"
        )
    values = [
        *((f"model.params.{n}", n, v) for n, v in model.params.items()),
        *((f"unknown.{n}", n, triple[0]) for n, triple in spec.unknown.items()),
    ]
    for key, name, value in values:
        low, high = desc.param_bounds.get(name, (-math.inf, math.inf))
        if not low <= value <= high:
            problems.append(
                f"{key}: expected a value within {name!r}'s declared range [{low:g}, {high:g}] (its min and "
                f"max in the model description); received {value!r}"
            )
    e, d, sim = spec.estimator, spec.data, spec.simulate
    if not states:
        problems.append(
            f"model.path: expected an FMU with continuous states (ModelStructure/Derivatives) for a filter "
            f"to estimate; received {str(file)!r}, which has none"
        )
    else:
        per_state = f"state ({', '.join(states)})"
        problems += values_problem("estimator.state_sd", e.state_sd, len(states), per_state, "> 0")
        if e.process_sd != "auto":
            problems += values_problem("estimator.process_sd", e.process_sd, len(states), per_state, ">= 0")
        problems += values_problem("estimator.x0", e.x0, len(states), per_state, "any")
    if d is not None and len(d.inputs) != len(inputs):
        problems.append(
            f"data.inputs: expected {len(inputs)} input columns (one per input of the FMU {list(inputs)}, "
            f"in order); received {len(d.inputs)} {d.inputs}"
        )
    if d is not None and d.states is not None and len(d.states) != len(states):
        problems.append(
            f"data.states: expected {len(states)} columns, one per state of the FMU {list(states)} in "
            f"order; received {len(d.states)} {d.states}"
        )
    if sim is not None and inputs:
        per_input = f"input ({', '.join(inputs)})"
        problems += values_problem(
            "simulate.input_noise_sd", sim.input_noise_sd, len(inputs), per_input, ">= 0"
        )
    elif sim is not None and np.any(np.asarray(sim.input_noise_sd) != 0):
        problems.append(
            f"simulate.input_noise_sd: the FMU has no inputs; expected 0; received {sim.input_noise_sd!r}"
        )
    if problems:
        raise Problems(problems)
    return desc


def dataset(spec: Spec, model: FmuModel, fmu: FMU, table: Any) -> Dataset:
    """An FMU spec's record over all the FMU's outputs, those not in ``model.outputs`` masked out.

    ``[data]``: ``table``, its file as :mod:`twinfer.spec` read it (None with ``[simulate]``), its output
    columns, by position, under the measured outputs' names, its input columns under the FMU's inputs'.
    ``[simulate]``: :func:`twinfer.sim.simulate_dataset` of the FMU itself (its ``params`` the truth, from
    its start values; an adaptive Dopri8 solve at tolerance 1e-10), each input a band-limited signal of
    ``force_sd``, each measured output with noise of ``noise_sd``.
    """
    import jax

    from twinfer.data import Dataset
    from twinfer.sim import simulate_dataset

    measured = [fmu.output_names.index(name) for name in model.outputs]
    d, s = spec.data, spec.simulate
    if d is not None:
        y = np.full((len(table.times), fmu.n_output), np.nan)
        mask = np.zeros(y.shape, dtype=bool)
        y[:, measured], mask[:, measured] = np.asarray(table.observations), np.asarray(table.mask)
        columns = {"time": d.time, "inputs": d.inputs, "outputs": d.outputs, "states": d.states}
        return Dataset(
            table.times,
            y,
            inputs=table.inputs,
            mask=mask,
            truth_states=table.truth_states,
            input_names=fmu.input_names or None,
            output_names=fmu.output_names,
            state_names=fmu.state_names if d.states is not None else None,
            metadata={**table.metadata, "columns": columns},
        )
    if s is None:  # Spec holds [data] or [simulate]
        raise TwinferRuntimeError("internal: a spec without [data] reached the simulation of its record.")
    n = int(round(s.duration / s.dt))
    noise = np.zeros(fmu.n_output)
    noise[measured] = np.broadcast_to(np.asarray(s.noise_sd, dtype=np.float64), (len(measured),))
    inputs = (
        band_limited(s.force_band, np.random.default_rng(s.seed), n + 1, fmu.n_input, s.force_sd)
        if fmu.n_input
        else None
    )
    record = simulate_dataset(
        fmu,
        inputs,
        s.dt,
        noise,
        jax.random.key(s.seed),
        x0=fmu.start_state,
        n_steps=None if fmu.n_input else n,
        input_noise_sd=s.input_noise_sd if fmu.n_input else None,
    )
    mask = np.zeros(np.shape(record.observations), dtype=bool)
    mask[:, measured] = True
    return Dataset(**{**record.to_dict(), "mask": mask})


def numbers(spec: Spec, model: FmuModel, fmu: FMU, noise_sd: Any) -> tuple[Any, Any]:
    """``(noise_sd, x0)`` of an FMU's filter.

    One sd per output (the unmeasured ones' are never used: they are masked out), and the estimator's
    x0, or the FMU's start values where the spec gives none.
    """
    if noise_sd != "auto":
        full = np.ones(fmu.n_output)
        full[[fmu.output_names.index(o) for o in model.outputs]] = noise_sd
        noise_sd = full.tolist()
    e = spec.estimator
    return noise_sd, e.x0 if "x0" in e.model_fields_set else np.asarray(fmu.start_state).tolist()
