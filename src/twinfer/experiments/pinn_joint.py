"""Case ``pinn-joint``: joint state and parameter estimation with a PINN (paper section 4.2, Tables 3-5).

A 5-DOF chain forced at DOF 1 is measured (acceleration and force) at DOFs 1, 3, 5; the stiffness and
nonlinear parameters of the connections at the unobserved DOFs 2 and 4 are trainable, constrained positive,
and learned with the network from the same Eq 17 loss (specs 2.5). Cases (specs 4.3): 1-3 Duffing at SNR
50/20/10, 4 Van der Pol, 5 linear PINN model on Duffing data, 6 nominal values with perturbed truth.

References:
    Haywood-Alexander et al., arXiv:2410.01340, section 4.2, Tables 3-5, Figs 9-12.

"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pydantic

from twinfer.errors import TwinferRuntimeError
from twinfer.experiments import _pinn_data as pinn_data
from twinfer.experiments._case import Progress
from twinfer.experiments._pinn_data import PinnTrainConfig
from twinfer.infer._chain_baseline import ukf_rts_states
from twinfer.infer.pinn import PositiveParameters, score_states
from twinfer.metrics import fitness_by_dof
from twinfer.models import get_param, value_error_factors
from twinfer.report import PaperValue, RunArtifacts, at_most
from twinfer.report.figures.pinn import parameter_figures

CASES = {
    1: ("duffing", "exact", 50.0),
    2: ("duffing", "exact", 20.0),
    3: ("duffing", "exact", 10.0),
    4: ("vdp", "exact", 50.0),
    5: ("duffing", "linear", 50.0),
    6: ("duffing", "value", 50.0),
}
UNOBSERVED = (2, 4)
INITIAL = {"k": 10.0, "kappa": 75.0, "mu": 1.0}  # the repository's initial guesses (specs D8)


class PinnJointConfig(PinnTrainConfig):
    """Configuration of ``pinn-joint``."""

    seed: int = pydantic.Field(123, ge=0, description="Seed of the network initialisation.")
    case: Literal[1, 2, 3, 4, 5, 6] = pydantic.Field(1, description="Scenario of specs 4.3.")
    horizon: float = pydantic.Field(60.0, gt=0, description="Simulated window [s].")
    n_samples: int = pydantic.Field(4096, ge=16, description="Samples on the window.")
    param_learning_rate: float = pydantic.Field(1e-2, gt=0, description="Adam step of the parameters.")
    epochs: int = pydantic.Field(1000, ge=1, description="Adam epochs before L-BFGS.")
    lbfgs_steps: int = pydantic.Field(5000, ge=0, description="L-BFGS steps after Adam (beyond the paper).")
    lbfgs_physics_factor: float = pydantic.Field(
        10.0, gt=0, description="Factor on lambda_cc and lambda_ode in the L-BFGS phase (repository phase 2)."
    )
    param_solve: Literal["gradient", "projection"] = pydantic.Field(
        "projection", description="L-BFGS phase: parameters solved for the states (variable projection)."
    )


def run(config: PinnJointConfig, progress: Progress) -> RunArtifacts:
    """Simulate, train network and parameters together, score parameters and states."""
    start = time.perf_counter()
    system, scenario, snr = CASES[config.case]
    factors = value_error_factors(5, lambda i: 43810 + 100 * i) if scenario == "value" else None
    truth_chain, model, data = pinn_data.simulate_case(
        config, 5, system, "linear" if scenario == "linear" else system, factors, snr, progress
    )
    groups = ["k"] + ([] if scenario == "linear" else ["kappa" if system == "duffing" else "mu"])
    names = [f"{g}{d}" for g in groups for d in UNOBSERVED]
    theta = PositiveParameters({n: INITIAL[n.rstrip("0123456789")] for n in names})
    net, theta_fit, result, observed = pinn_data.train_sensor_pinn(
        "pinn-joint", config, model, data, UNOBSERVED, theta, progress
    )
    if theta_fit is None:  # train_sensor_pinn fits the parameters it is given
        raise TwinferRuntimeError("internal: the joint PINN returned no fitted parameters.")
    scores = score_states(net, model, theta_fit.apply(model.params), data, observed, result)
    out, truth = scores.metrics, scores.truth
    for name, value in theta_fit.as_dict().items():
        true = float(get_param(truth_chain.params, name))
        out[f"param.{name}"] = float(value)
        out[f"param.{name}_true"] = true
        out[f"param.{name}_err_pct"] = abs(float(value) - true) / true * 100.0
    arrays = {
        **scores.arrays,
        "param_names": np.asarray(names),
        "param_history": np.stack([result.history[f"param.{n}"] for n in names], axis=1),
        "param_true": np.asarray([out[f"param.{n}_true"] for n in names]),
    }
    notes = [
        f"Case {config.case}: {system} truth, PINN model '{scenario}', SNR {snr:g} dB; observed DOFs "
        f"{list(observed)}; trainable {names} from the repository's initial guesses (k 10, kappa 75, mu 1), "
        "positive by p = scale exp(raw), trained jointly from the first epoch (specs D8).",
        f"Trained {result.epochs} epochs in {result.train_s:.1f} s on a machine shared with other jobs.",
        f"Training: {config.epochs} Adam epochs (parameters by gradient, lambda_cc = {config.lambda_cc:g}, "
        f"lambda_ode = {config.lambda_ode:g}), then {config.lbfgs_steps} L-BFGS steps with the physics "
        f"weights x{config.lbfgs_physics_factor:g} (the repository's phase 2 also raises them) and, with "
        f"param_solve = '{config.param_solve}', the parameters solved exactly for the network's states at "
        "every step (variable projection: the Eq 17 loss is quadratic in k, kappa, mu). Beyond the paper: "
        "trained by gradient alone the parameters barely move once Adam has stopped (kappa stuck near 82).",
    ]
    if scenario == "value":
        notes.append("Value-error truth perturbs c, k and kappa by the same per-DOF factors (specs D11).")
    if config.compare_ukf:
        progress("UKF + RTS smoother (same sensors, true parameters)", 0, 1)
        ukf = ukf_rts_states(truth_chain, data, observed, config.obs_stride, snr)
        out.update(fitness_by_dof(ukf, truth, observed, prefix="ukf_rts"))
        progress("UKF + RTS smoother (same sensors, true parameters)", 1, 1)
        notes.append("`ukf_rts.*`: UKF + RTS smoother given the true parameters (a state-only reference).")
    out["timing.run_s"] = time.perf_counter() - start
    estimate = net.to_estimate(data.times, model.state_names, theta_fit.as_dict())  # a point estimate
    notes.append("estimate.nc: the PINN's states and learned parameters (a point estimate, sd NaN).")
    files = {"estimate.nc": estimate.netcdf_bytes()}
    return RunArtifacts(metrics=out, arrays=arrays, notes=notes, files=files)


def figures(arrays: Mapping[str, Any], config: PinnJointConfig) -> dict[str, Any]:
    """Figs 9-12 (:func:`~twinfer.report.figures.pinn.parameter_figures` at :data:`UNOBSERVED`)."""
    return parameter_figures(arrays, UNOBSERVED)


# Tables 3-4 (specs 4.3): estimate and error (%) of each estimated parameter per case
_PARAMS = {
    1: ("Table 3, SNR 50", {"k2": (14.91, 0.615), "k4": (14.95, 0.370), "kappa2": (106.0, 6.00),
                           "kappa4": (99.674, 0.326)}),
    2: ("Table 3, SNR 20", {"k2": (14.83, 1.16), "k4": (14.84, 1.09), "kappa2": (84.32, 15.68),
                           "kappa4": (102.36, 2.36)}),
    3: ("Table 3, SNR 10", {"k2": (15.02, 0.145), "k4": (14.86, 0.931), "kappa2": (91.01, 8.99),
                           "kappa4": (69.16, 30.84)}),
    4: ("Table 4, Van der Pol", {"k2": (14.76, 1.61), "k4": (14.72, 1.87), "mu2": (0.802, 6.886),
                                "mu4": (0.775, 3.33)}),
    5: ("Table 4, linear model", {"k2": (15.70, 4.60), "k4": (14.95, 0.34)}),
    6: ("Table 4, value error", {"k2": (13.40, 3.98), "k4": (13.90, 2.06), "kappa2": (119.25, 28.2),
                                "kappa4": (109.20, 20.27)}),
}  # fmt: skip
# Table 5: all u, u', u'', obs u, u', u'', obs f (DOF 1 only, specs D9), unobs u, u', u'' per case
_TABLE5_ROWS = {
    1: ("Duffing no error SNR 50", (99.60, 99.72, 99.64, 99.65, 99.80, 99.72, 99.73, 99.53, 99.59, 99.52)),
    2: ("Duffing no error SNR 20", (98.85, 99.24, 99.38, 98.97, 99.34, 99.56, 99.41, 98.66, 99.07, 99.11)),
    3: ("Duffing no error SNR 10", (97.15, 98.12, 98.40, 97.37, 98.37, 98.79, 98.361, 96.81, 97.73, 97.82)),
    4: ("VdP no error SNR 50", (98.63, 99.03, 99.17, 98.77, 99.12, 99.34, 98.42, 98.41, 98.90, 98.91)),
    5: ("Linear model SNR 50", (98.00, 98.77, 99.10, 98.23, 99.18, 99.48, 99.31, 97.66, 98.16, 98.54)),
    6: ("Value error SNR 50", (98.56, 99.01, 99.36, 98.81, 99.45, 99.79, 99.71, 98.18, 98.35, 98.72)),
}
_TABLE5_KEYS = (
    "all_u", "all_udot", "all_uddot", "obs_u", "obs_udot", "obs_uddot", "f1", "unobs_u", "unobs_udot",
    "unobs_uddot",
)  # fmt: skip


def paper_values(config: PinnJointConfig) -> dict[str, PaperValue]:
    """Tables 3-5's rows of this configuration's case (1-6): parameters and fitness."""
    source, params = _PARAMS[config.case]
    out = {}
    for name, (value, err) in params.items():
        out[f"param.{name}"] = PaperValue(value, source)
        out[f"param.{name}_err_pct"] = PaperValue(
            err,
            source,
            at_most(
                max(2.0, 1.0 / err),
                "a percent error against the truth from another training run: at most twice the paper's, "
                "or 1 %, whichever is larger (beating it passes)",
            ),
        )
    label, row = _TABLE5_ROWS[config.case]
    out.update(pinn_data.fitness_row(_TABLE5_KEYS, row, f"Table 5, {label}"))
    return out


CASE = pinn_data.register_pinn_case(
    "pinn-joint",
    "PINN joint state-parameter estimation on a 5-DOF chain (PINN paper section 4.2).",
    PinnJointConfig,
    run,
    figures,
    pinn_data.SENSOR_QUICK,
    paper_values,
)
