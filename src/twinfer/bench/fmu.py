"""Benchmark ``fmu``: a filter on an FMU against the same filter on the model written in JAX (issue #56).

The Modelica Association's Reference FMU ``VanDerPol`` (FMI 2.0 Model Exchange, from ``../shared/fmus``,
found as the data are) and :class:`~twinfer.models.VanDerPol`, its equations in JAX; the damping ``mu``
unknown (prior 1 +- 0.5, truth 1.5), ``x0`` measured with noise sd 0.05 every 0.1 s, the record simulated
from the JAX model. For the UKF and the EKF each, one compiled program per model
(:func:`twinfer.compile`) runs the whole record; reported per filter:

- ``<filter>.fmu_steps_per_s`` and ``<filter>.jax_steps_per_s``: record steps per second of the compiled
  run after its first (compiling) call, medians of the repeats;
- ``<filter>.ratio``: JAX steps per second over the FMU's (issue #56's target: at most 20);
- ``<filter>.callbacks_per_step``: the FMU's host calls per record step (one per batch of points: the
  UKF's sigma points stepped whole, the EKF's step with its Jacobian; outputs that are states need none);
- ``<filter>.mu_abs_diff``: the two estimates' final mu apart (the same filter on the same equations).

The FMU's time is its host calls' Python: per step, every stage of every sigma point is a few FMI calls
through ctypes, and each point with its own ``mu`` (a fixed parameter) re-initialises its instance once
(``docs/fmu.md``).
"""

from __future__ import annotations

import numpy as np

import twinfer
from twinfer.bench._harness import Progress, register
from twinfer.data import Dataset
from twinfer.data._benchmarks import default_data_root
from twinfer.errors import TwinferValueError
from twinfer.models import FMU, VanDerPol
from twinfer.sim import simulate
from twinfer.timing import timed

DT, NOISE_SD, MU = 0.1, 0.05, 1.5
NUMBERS = {
    "x0": [2.0, 0.0],
    "state_sd": [0.1, 0.1],
    "process_sd": [1e-4, 1e-4],
    "noise_sd": [NOISE_SD, NOISE_SD],
    "unknown": {"mu": (1.0, 0.5, 0.0)},
}


def _record(n_steps: int) -> Dataset:
    """Noisy x0 of the JAX Van der Pol with mu = 1.5 (x1 not measured)."""
    ts = np.arange(n_steps + 1) * DT
    states = np.asarray(simulate(VanDerPol(MU), ts, NUMBERS["x0"]).states)
    y = states + NOISE_SD * np.random.default_rng(0).standard_normal(states.shape)
    mask = np.zeros(states.shape, dtype=bool)
    mask[:, 0] = True
    return Dataset(ts, y, mask=mask, output_names=("x0", "x1"))


@register("fmu", "UKF and EKF on the Van der Pol Reference FMU against the same model in JAX (issue #56)")
def bench_fmu(quick: bool, progress: Progress) -> dict[str, float]:
    """Steps per second of each filter on the FMU and on the JAX model, and the FMU's callbacks per step."""
    path = default_data_root().parent / "fmus" / "VanDerPol.fmu"
    if not path.is_file():
        raise TwinferValueError(
            f"bench fmu: expected the Reference FMU VanDerPol.fmu at {path} (../shared/fmus, found as the "
            "data are: TWINFER_DATA_ROOT); received no file."
        )
    n_steps, repeats = (100, 1) if quick else (400, 3)
    data = _record(n_steps)
    fmu, jax_model = FMU(path), VanDerPol()
    figures: dict[str, float] = {"steps": float(n_steps), "target_ratio": 20.0}
    for method in ("ukf", "ekf"):
        rates, mus = {}, {}
        for label, model in (("fmu", fmu), ("jax", jax_model)):
            progress(f"{method} on the {label} model: compile and {repeats} timed runs of {n_steps} steps")
            program = twinfer.compile(model, method, data=data, **NUMBERS)  # type: ignore[arg-type]
            before = fmu.calls
            est, seconds = timed(program.run, data, repeats=repeats)
            if label == "fmu":
                runs = 1 + repeats  # the first call and the repeats: the same callbacks each time
                figures[f"{method}.callbacks_per_step"] = (fmu.calls - before) / (runs * n_steps)
            rates[label] = n_steps / seconds.median_s
            mus[label] = float(est.params["mu"][0][-1])
            figures[f"{method}.{label}_steps_per_s"] = rates[label]
            figures[f"{method}.{label}_compile_s"] = seconds.compile_only_s
        figures[f"{method}.ratio"] = rates["jax"] / rates["fmu"]
        figures[f"{method}.mu_abs_diff"] = abs(mus["fmu"] - mus["jax"])
    return figures
