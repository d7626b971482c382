"""High-level entry points: ``run_filter(model, dataset, ...)`` and ``smooth(...)`` with named results.

A continuous-time model goes through :func:`twinfer.sim.discretise` (the ``integrator``); unknown
parameters are appended to the state as random walks (:func:`augment`); the scan runs once, jitted;
results come back as named state and parameter trajectories with standard deviations.

The choices are named by what they choose: ``estimator`` (``"ukf"``, ``"ekf"``, ``"kf"``), the
``linearisation`` where an estimator has more than one (the UKF's ``"propagated"`` or ``"redrawn"``
sigma points), and the ``integrator`` of the continuous-time model (``"euler"``, ``"heun"``, ``"rk4"``,
``"exact"``). Users give standard deviations (``state_sd``, ``process_sd``, ``noise_sd``) on purpose:
they are what a data sheet states; every filter below runs on their square-root (``chol_*``) factors.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypedDict, Unpack

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from twinfer._config import ensure
from twinfer.data import Dataset
from twinfer.infer._estimate import Estimate
from twinfer.infer.filters._augment import (
    Scale,
    augment,
    natural_estimate,
    scaled_prior,
    warn_if_out_of_bounds,
)
from twinfer.infer.filters._errors import (
    NIS_ALPHA,
    NIS_FACTOR,
    DivergenceError,
    FilterConsistencyWarning,
    first_not_psd,
    inconsistency,
    nis_band,
)
from twinfer.infer.filters._gaussian_filter import Kernel
from twinfer.infer.filters._program import CentralProgram, _filtered_summary, _unscented
from twinfer.infer.filters._smoother import rts_smooth
from twinfer.infer.filters._tune import AUTO, attach, filter_loglik, is_auto, noise_floor, tune_noise
from twinfer.infer.gaussian import UnscentedWeights, linear, psd_factor, taylor
from twinfer.models import AbstractModel, CoSimulationFMU, StateSpace
from twinfer.sim import METHODS as INTEGRATORS
from twinfer.sim import StepProblem, StepSizeError, StepSizeWarning, discretise, step_problem, unit_hint

Estimator = Literal["ukf", "ekf", "kf"]
LinearisationName = Literal["propagated", "redrawn", "taylor", "linear"]
Integrator = Literal["euler", "heun", "rk4", "exact"]

ESTIMATORS: tuple[str, ...] = ("ukf", "ekf", "kf")
KERNELS: tuple[str, ...] = ("qr", "gram")
"""A Gaussian filter step's algebra (:data:`~twinfer.infer.filters.Kernel`); the first is the default."""
LINEARISATIONS: dict[str, tuple[str, ...]] = {
    "ukf": ("propagated", "redrawn"),
    "ekf": ("taylor",),
    "kf": ("linear",),
}
"""The linearisations of each estimator; the first is its default."""

_METHODS = {"ukf": ("ukf", "propagated"), "ukf-sqrt": ("ukf", "redrawn"), "ekf": ("ekf", "taylor")}
"""The deprecated ``method=`` values as ``(estimator, linearisation)``."""


class EstimateOptions(TypedDict, total=False):
    """The keywords of :func:`run_filter` and :func:`smooth`, every one optional (see :func:`run_filter`).

    ``method`` and ``discretisation`` are the deprecated names of ``estimator``/``linearisation`` and
    ``integrator``: accepted, with a ``DeprecationWarning``, for one release.
    """

    x0: Float[ArrayLike, " n"] | Sequence[float]
    state_sd: Float[ArrayLike, " n"] | Sequence[float]
    process_sd: Float[ArrayLike, " n"] | Sequence[float] | Literal["auto"]
    noise_sd: Float[ArrayLike, " m"] | Sequence[float] | Literal["auto"]
    state_cov: Float[ArrayLike, "n n"] | None
    process_cov: Float[ArrayLike, "n n"] | None
    noise_cov: Float[ArrayLike, "m m"] | None
    unknown: Mapping[str, tuple[float, float, float] | tuple[float, float, float, Scale]] | None
    estimator: Estimator
    linearisation: LinearisationName | None
    integrator: Integrator
    substeps: int
    weights: UnscentedWeights | None
    kernel: Kernel
    method: str
    discretisation: str


class _Settings(NamedTuple):
    """The options with their defaults (the one place they are set)."""

    x0: Any = 0.0
    state_sd: Any = 1.0
    process_sd: Any = 1e-6
    noise_sd: Any = 1.0
    state_cov: Any = None
    process_cov: Any = None
    noise_cov: Any = None
    unknown: Any = None
    estimator: str = "ukf"
    linearisation: str | None = None
    integrator: str = "rk4"
    substeps: int = 1
    weights: Any = None
    kernel: str = "qr"


def _settings(where: str, options: Mapping[str, Any]) -> _Settings:
    """The options of one call with defaults filled in; deprecated keywords translated (with a warning)."""
    opts = dict(options)
    extra = sorted(set(opts) - set(EstimateOptions.__annotations__))
    if extra:
        raise TypeError(
            f"{where}: unexpected keyword {extra[0]!r}; expected one of {', '.join(_Settings._fields)}."
        )
    if "discretisation" in opts:
        if "integrator" in opts:
            raise TypeError(f"{where} discretisation: the deprecated name of integrator; received both.")
        opts["integrator"] = opts.pop("discretisation")
        warnings.warn(
            f"{where} discretisation: renamed; use integrator={opts['integrator']!r} (the old keyword "
            "goes in the next release).",
            DeprecationWarning,
            stacklevel=4,
        )
    if "method" in opts:
        method = opts.pop("method")
        if "estimator" in opts or "linearisation" in opts:
            raise TypeError(
                f"{where} method: the deprecated name of estimator and linearisation; received it with them."
            )
        if not isinstance(method, str) or method not in _METHODS:
            raise ValueError(
                f"{where} method: expected one of {', '.join(map(repr, _METHODS))} (deprecated: use "
                f"estimator= and linearisation=); received {method!r}."
            )
        opts["estimator"], opts["linearisation"] = _METHODS[method]
        warnings.warn(
            f"{where} method: replaced by estimator and linearisation; use estimator="
            f"{opts['estimator']!r}, linearisation={opts['linearisation']!r} for method={method!r} (the "
            "old keyword goes in the next release).",
            DeprecationWarning,
            stacklevel=4,
        )
    return _Settings(**opts)


def _choice(where: str, field: str, value: Any, allowed: tuple[str, ...], note: str = "") -> str:
    """``value`` if one of ``allowed``, else a ValueError naming the field, the choices and ``value``."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(
            f"{where} {field}: expected one of {', '.join(map(repr, allowed))}{note}; received {value!r}."
        )
    return value


class _Transition(eqx.Module):
    """``(x, u) -> x_next`` as a pytree, so repeated calls with the same model structure reuse the jit.

    ``u`` is a step's input pair ``[u_k, u_meas]`` (:meth:`Dataset.step_inputs`); the dynamics read ``u_k``.
    """

    step: Any
    params: Any

    def __call__(self, x: Any, u: Any) -> Any:
        return self.step.transition(0.0, x, u[: u.shape[-1] // 2], self.params)


class _Output(eqx.Module):
    """``(x, u) -> y`` as a pytree (see :class:`_Transition`); reads the pair's measurement input."""

    model: AbstractModel
    params: Any

    def __call__(self, x: Any, u: Any) -> Any:
        return self.model.output(0.0, x, u[u.shape[-1] // 2 :], self.params)


def _vector(where: str, name: str, value: Any, names: tuple[str, ...], *, lower: str = ">= 0") -> Any:
    """``value`` as ``len(names)`` finite float64 values (a scalar is broadcast) with sign ``lower``.

    ``lower``: ``"any"`` (a mean), ``">= 0"`` or ``"> 0"`` (standard deviations).
    """
    n = len(names)
    try:
        arr = np.asarray(value)
    except ValueError:  # ragged nested sequences
        raise ValueError(f"{where} {name}: expected a scalar or {n} numbers; received {value!r}.") from None
    if arr.dtype.kind not in "fiu" or arr.dtype == np.float16 or arr.dtype == np.float32:
        raise ValueError(
            f"{where} {name}: expected a scalar or {n} float64 numbers ({', '.join(names)}); received "
            f"dtype {arr.dtype}."
        )
    if arr.ndim != 0 and arr.shape != (n,):
        raise ValueError(
            f"{where} {name}: expected a scalar or {n} values, one per {', '.join(names)}; received "
            f"shape {arr.shape}."
        )
    arr = np.broadcast_to(arr.astype(np.float64), (n,))
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{where} {name}: expected finite values; received {arr.tolist()}.")
    with np.errstate(over="ignore", under="ignore"):
        square = arr**2
    if lower != "any" and not np.all(np.isfinite(square)):
        raise ValueError(
            f"{where} {name}: expected values whose square (a variance) is finite; received {arr.tolist()}."
        )
    if lower == "> 0" and np.any((arr <= 0) | (square <= 0)):
        raise ValueError(f"{where} {name}: expected values > 0; received {arr.tolist()}.{_ZERO_HINT[name]}")
    if lower == ">= 0" and np.any(arr < 0):
        raise ValueError(
            f"{where} {name}: expected values >= 0 (standard deviations); received {arr.tolist()}."
        )
    return arr


_COVARIANCES = {"state_cov": "state_sd", "process_cov": "process_sd", "noise_cov": "noise_sd"}
"""Each full covariance keyword and the standard deviations it stands in for."""


def _covariance(where: str, name: str, value: Any, names: tuple[str, ...]) -> np.ndarray:
    """The lower factor ``L L^T = value`` of a user's full covariance over ``names``, validated.

    ``process_cov`` may be singular (a state without process noise); ``state_cov`` and ``noise_cov``
    must be positive-definite (a noise-free sensor, or a state known exactly, makes a factor singular).
    """
    n = len(names)
    try:
        arr = np.asarray(value)
    except ValueError:
        raise ValueError(f"{where} {name}: expected an ({n}, {n}) matrix; received {value!r}.") from None
    if arr.dtype.kind not in "fiu" or arr.dtype in (np.float16, np.float32):
        raise ValueError(f"{where} {name}: expected a float64 matrix; received dtype {arr.dtype}.")
    if arr.shape != (n, n):
        raise ValueError(
            f"{where} {name}: expected shape ({n}, {n}), rows and columns {', '.join(names)}; received "
            f"shape {arr.shape}."
        )
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{where} {name}: expected finite entries; received {arr.tolist()}.")
    scale = max(float(np.max(np.abs(arr), initial=0.0)), np.finfo(np.float64).tiny)
    if np.max(np.abs(arr - arr.T), initial=0.0) > 1e-10 * scale:
        i, j = divmod(int(np.argmax(np.abs(arr - arr.T))), n)
        raise ValueError(
            f"{where} {name}: expected a symmetric matrix; entry ({i}, {j}) differs from its transpose."
        )
    factor = np.asarray(psd_factor(arr, f"{where} {name}"))
    if name != "process_cov" and np.min(np.abs(np.diag(factor)), initial=np.inf) <= 1e-12 * np.sqrt(scale):
        raise ValueError(
            f"{where} {name}: expected a positive-definite covariance; received a singular one."
            + _ZERO_HINT[_COVARIANCES[name]]
        )
    return factor


def _factors(
    where: str, options: Mapping[str, Any], opts: Any, names: tuple[str, ...], outputs: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """The full covariances given (``state_cov``, ...) as factors, each alone (not with its ``*_sd``)."""
    out: dict[str, np.ndarray] = {}
    for name, sd in _COVARIANCES.items():
        value = getattr(opts, name)
        if value is None:
            continue
        if options.get(sd) is not None:
            raise ValueError(
                f"{where} {name}: the full covariance stands in for {sd}; received both (give one)."
            )
        out[name] = _covariance(where, name, value, outputs if name == "noise_cov" else names)
    return out


def _block(factor: np.ndarray | None, diagonal: np.ndarray, tail: np.ndarray) -> Any:
    """``blockdiag(factor or diag(diagonal), diag(tail))``: a base factor with the unknowns' walks."""
    base = np.diag(diagonal) if factor is None else factor
    n, k = base.shape[0], tail.shape[0]
    out = np.zeros((n + k, n + k))
    out[:n, :n] = base
    out[n:, n:] = np.diag(tail)
    return jnp.asarray(out)


class _StepOf(eqx.Module):
    """A discrete-time system's transition ``(x, u pair) -> x_next`` (reads ``u_k``, :class:`_Transition`)."""

    system: StateSpace

    def __call__(self, x: Any, u: Any) -> Any:
        return self.system.transition(x, u[: u.shape[-1] // 2])


class _ReadOf(eqx.Module):
    """A discrete-time system's measurement ``(x, u pair) -> y`` (reads the measurement's input)."""

    system: StateSpace

    def __call__(self, x: Any, u: Any) -> Any:
        return self.system.output(x, u[u.shape[-1] // 2 :])


_ARGS_HINT = (
    "In filter terms: Q comes from process_sd (and the random-walk sd in unknown), R from noise_sd, the "
    "initial covariance from state_sd (and the prior sd in unknown), the initial mean from x0."
)


def _time_hint(model: AbstractModel | StateSpace, data: Dataset, integrator: str, x_init: Any) -> str:
    """A divergence message's sentence on the record's step against the model's time scales, or ``""``.

    The model's fastest time scale at the prior (:func:`twinfer.sim.unit_hint`): a time column in
    milliseconds shows there. A discrete-time system has no time scale to compare.
    """
    if isinstance(model, StateSpace):
        return ""
    return unit_hint(model, data.dt, integrator, x_init, None if data.inputs is None else data.inputs[0])


def _step_verdict(problem: Any, deferred: StepProblem | None = None) -> None:
    """Raise a :class:`StepProblem` that is an error; warn one that is not (or a deferred one)."""
    if isinstance(problem, StepProblem) and problem.error:
        raise StepSizeError(problem.text)
    if isinstance(problem, StepProblem):
        warnings.warn(problem.text, StepSizeWarning, stacklevel=4)
    elif deferred is not None:
        warnings.warn(
            f"{deferred.text} The estimate then left that region (the step is stable at its end), so the run "
            "stands; a prior nearer the truth, or more substeps, avoids the unstable start.",
            StepSizeWarning,
            stacklevel=4,
        )


def _check_along(check: Any, data: Dataset, n_base: int, means: Any) -> StepProblem | None:
    """:func:`~twinfer.sim.step_problem` again after the run: the runaway check.

    The prior's linearisation misses a nonlinear model that stiffens along the run (a hardening spring
    at large motion) or an unknown stiffness that the data drive up. Judged at the estimate's end, and
    at its largest state (by norm) with the unknowns' final values.
    """
    if means.ndim != 2 or not means.shape[0]:
        return None
    norms = np.linalg.norm(np.nan_to_num(means[:, :n_base], nan=np.inf), axis=1)
    k, last = int(np.argmax(norms)), means.shape[0] - 1
    for row, x in ((last, means[last]), (k, np.concatenate([means[k, :n_base], means[last, n_base:]]))):
        u_k = None if data.inputs is None else data.inputs[min(row, data.n_steps - 1)]
        found = check(x, u_k, at=f"the estimate at t = {float(data.times[row]):g}")
        if isinstance(found, StepProblem):
            return found
    return None


_ZERO_HINT = {
    "noise_sd": " A noise-free measurement makes the innovation covariance singular and the filter "
    "trusts the model over the data without limit; give the sensor's real noise level.",
    "state_sd": " The prior covariance must be positive-definite; use a small value for a state known "
    "almost exactly.",
}


def _unknown(
    where: str, model: AbstractModel, unknown: Any, *, log_default: bool = False
) -> dict[str, tuple[float, float, float, str]]:
    """Validated ``{parameter name: (prior mean, prior sd > 0, random-walk sd >= 0, scale)}``.

    In the filter's coordinates: of ``log(theta)`` where the scale is ``"log"`` (:func:`scaled_prior`;
    ``log_default``: a parameter declared positive defaults to it, as in :func:`run_filter`; the graph
    builders, which check their unknowns here, keep the linear scale).
    """
    if unknown is None:
        return {}
    if not isinstance(unknown, Mapping):
        raise TypeError(
            f"{where} unknown: expected a mapping {{name: (initial value, prior sd, random-walk sd)}}; "
            f"received {type(unknown).__name__}."
        )
    out: dict[str, tuple[float, float, float, str]] = {}
    for name, spec in unknown.items():
        if not isinstance(name, str) or name not in model.param_names:
            raise ValueError(
                f"{where} unknown: expected parameter names of the model ({', '.join(model.param_names)}); "
                f"received {name!r}."
            )
        scale = spec[3] if isinstance(spec, tuple | list) and len(spec) == 4 else None
        try:
            values = np.asarray(spec if scale is None else spec[:3])
        except ValueError:
            values = np.asarray([0.0])  # ragged: reported below
        if values.shape != (3,) or values.dtype.kind not in "fiu" or values.dtype in (np.float16, np.float32):
            raise ValueError(
                f"{where} unknown[{name!r}]: expected 3 float64 numbers (initial value, prior sd, "
                f"random-walk sd per step) and optionally the scale 'log' or 'linear'; received {spec!r}."
            )
        init, sd0, sdq = (float(v) for v in values)
        if not all(np.isfinite([init, sd0, sdq])) or sd0 <= 0 or sdq < 0:
            raise ValueError(
                f"{where} unknown[{name!r}]: expected a finite initial value, prior sd > 0 and random-walk "
                f"sd >= 0; received ({init!r}, {sd0!r}, {sdq!r})."
            )
        with np.errstate(over="ignore", under="ignore"):
            var0, varq = np.float64(sd0) ** 2, np.float64(sdq) ** 2
        if not (np.isfinite(var0) and var0 > 0 and np.isfinite(varq)):
            raise ValueError(
                f"{where} unknown[{name!r}]: expected sds whose squares (variances) are finite and, for the "
                f"prior sd, > 0 in float64; received ({init!r}, {sd0!r}, {sdq!r})."
            )
        try:
            model.with_params(**{name: init})
        except ValueError as error:
            raise ValueError(f"{where} unknown[{name!r}]: initial value {init!r} refused: {error}") from None
        out[name] = scaled_prior(where, model, name, (init, sd0, sdq), scale, log_default=log_default)
    return out


def _check_data(where: str, model: AbstractModel | StateSpace, data: Any) -> None:
    """The dataset against the model: its type, at least two steps, the inputs' count and names, outputs."""
    if not isinstance(model, AbstractModel | StateSpace):
        raise TypeError(
            f"{where} model: expected a twinfer model (AbstractModel) or a StateSpace; received "
            f"{type(model).__name__}."
        )
    if not isinstance(data, Dataset):
        raise TypeError(f"{where} data: expected a twinfer.data.Dataset; received {type(data).__name__}.")
    if data.n_steps < 2:
        raise ValueError(f"{where} data: expected at least 2 time steps; received {data.n_steps}.")
    if data.output_names != model.output_names:
        raise ValueError(
            f"{where} dataset outputs: expected {model.output_names} (the model's outputs); "
            f"received {data.output_names}. Name a table's columns after them: from_csv(..., "
            f"outputs={dict(zip(model.output_names, data.output_names, strict=False))})."
        )
    n_u = 0 if data.inputs is None else data.inputs.shape[1]
    if n_u != len(model.input_names):
        raise ValueError(
            f"{where} dataset inputs: expected {len(model.input_names)} columns {model.input_names} (the "
            f"model's inputs); received {n_u} columns {data.input_names}."
        )
    default = tuple(f"u{i + 1}" for i in range(n_u))
    if data.input_names not in (default, model.input_names):
        raise ValueError(
            f"{where} dataset inputs: expected the names {model.input_names} (the model's inputs, or the "
            f"default unnamed {default}); received {data.input_names}."
        )


class Layout(NamedTuple):
    """What a program compiled without a record needs to know of the records it will read.

    ``dt`` the step, ``input_hold`` and ``alignment`` the time convention
    (:class:`twinfer.data.Dataset`), ``n_steps`` the record length the step check judges growth over.
    """

    dt: float
    input_hold: str = "zoh"
    alignment: str = "sampled"
    n_steps: int = 1000


def _run(
    model: AbstractModel | StateSpace,
    data: Dataset | None,
    where: str,
    options: Mapping[str, Any],
    layout: Layout | None = None,
) -> Any:
    """The body of :func:`run_filter` (``where="filter"``) and :func:`smooth` (``where="smooth"``).

    With ``data`` None, the :class:`CentralProgram` for records of ``layout`` (``twinfer.compile``). A
    :class:`~twinfer.models.StateSpace` is filtered as it is written: its transition is the step (no
    integrator, no step check), and it has no parameters to estimate.
    """
    discrete = isinstance(model, StateSpace)
    if isinstance(model, CoSimulationFMU):
        raise TypeError(
            f"{where} model: expected a model whose state a filter can carry; received a co-simulation FMU, "
            f"whose state is opaque ({model.state_names[-1]!r} is a handle to a saved FMU state, which sigma "
            "points and Jacobians cannot move): make it a deterministic node of a graph (Graph.from_model on "
            "a Coupled model, estimator 'none'), or use its Model Exchange interface (twinfer.models.FMU)."
        )
    opts = _settings(where, options)
    estimator = _choice(where, "estimator", opts.estimator, ESTIMATORS)
    allowed = LINEARISATIONS[estimator]
    lin_name = allowed[0] if opts.linearisation is None else opts.linearisation
    _choice(where, "linearisation", lin_name, allowed, f" for estimator {estimator!r}")
    integrator = _choice(where, "integrator", opts.integrator, INTEGRATORS)
    kernel = _choice(where, "kernel", opts.kernel, KERNELS)
    if data is not None:
        _check_data(where, model, data)
    elif layout is None:
        raise TypeError(f"{where}: expected a dataset or a layout (the step and time convention).")
    if discrete and opts.unknown:
        raise ValueError(
            f"{where} unknown: a StateSpace has no parameters to estimate; received {opts.unknown!r} (append "
            "the unknown to the state, with a transition that keeps it)."
        )
    unknown = {} if discrete else _unknown(where, model, opts.unknown, log_default=True)  # type: ignore[arg-type]
    scales = {name: v[3] for name, v in unknown.items()}
    aug = augment(model, list(unknown), [v == "log" for v in scales.values()]) if unknown else model  # type: ignore[arg-type]
    if estimator == "kf" and not aug.is_linear:
        reason = " (its unknown parameters, in the state, multiply states)" if unknown else ""
        raise ValueError(
            f"{where} estimator: 'kf' needs a linear model (linear_matrices not None); received "
            f"{type(model).__name__}{reason}, which is nonlinear. Use estimator 'ekf' or 'ukf'."
        )
    n_base = len(model.state_names)
    base_names = model.state_names
    # host (numpy) arrays up to the jitted filter: no eager device op per argument on a warm call
    prior = np.asarray([v[:3] for v in unknown.values()], dtype=np.float64).reshape(-1, 3)
    x_init = np.concatenate([_vector(where, "x0", opts.x0, base_names, lower="any"), prior[:, 0]])
    sd0 = np.concatenate([_vector(where, "state_sd", opts.state_sd, base_names, lower="> 0"), prior[:, 1]])
    auto_q, auto_r = (is_auto(where, k, getattr(opts, k)) for k in ("process_sd", "noise_sd"))
    if data is None and (auto_q or auto_r):
        raise ValueError(
            f"{where} {'process_sd' if auto_q else 'noise_sd'}: expected standard deviations; received "
            f"{AUTO!r}, which tunes the levels on a record (twinfer.estimate has one; a compiled program "
            "does not)."
        )
    q_base = sd0[:n_base] if auto_q else _vector(where, "process_sd", opts.process_sd, base_names)
    sdr = _vector(where, "noise_sd", 1.0 if auto_r else opts.noise_sd, model.output_names, lower="> 0")
    factors = _factors(where, options, opts, base_names, model.output_names)
    if factors and (auto_q or auto_r):
        raise ValueError(
            f"{where} {'process_sd' if auto_q else 'noise_sd'}: {AUTO!r} tunes standard deviations; received "
            f"it with {', '.join(factors)} (give the covariances, or 'auto' and standard deviations)."
        )
    if "state_cov" in factors:  # the step check and the prior's spread read the marginal sds
        sd0[:n_base] = np.sqrt(np.sum(factors["state_cov"] ** 2, axis=1))
    weights = opts.weights
    if weights is not None and not isinstance(weights, UnscentedWeights):
        raise TypeError(
            f"{where} weights: expected UnscentedWeights or None; received {type(weights).__name__}."
        )
    if weights is not None and estimator != "ukf":
        raise ValueError(
            f"{where} weights: sigma-point weights are the UKF's; received them with estimator "
            f"{estimator!r}. Drop weights or use estimator 'ukf'."
        )
    dt = layout.dt if data is None else data.dt  # type: ignore[union-attr]
    substeps = opts.substeps
    if isinstance(substeps, bool) or not isinstance(substeps, int | np.integer) or substeps < 1:
        raise ValueError(f"{where} substeps: expected an integer >= 1; received {substeps!r}.")
    if integrator == "exact" and substeps != 1:
        raise ValueError(
            f"{where} substeps: expected 1 with integrator 'exact' (exact for any step); received {substeps}."
        )
    if discrete:
        check, deferred = None, None
        f: Any = _StepOf(model)  # type: ignore[arg-type]
        h: Any = _ReadOf(model)  # type: ignore[arg-type]
    else:
        try:
            step = discretise(aug, dt, integrator, int(substeps))  # type: ignore[arg-type]
        except ValueError as error:
            raise ValueError(f"{where} integrator: {error}") from None
        params = aug.params  # type: ignore[union-attr]
        u_first = None if data is None or data.inputs is None else data.inputs[0]
        n_steps = layout.n_steps if data is None else data.n_steps - 1  # type: ignore[union-attr]
        check = functools.partial(
            step_problem,
            where,
            aug,  # type: ignore[arg-type]
            dt,
            integrator,
            substeps=int(substeps),
            n_steps=n_steps,
            name=type(model).__name__,
        )
        at_prior = check(x_init, u_first, at="the prior")
        deferred = at_prior if isinstance(at_prior, StepProblem) and unknown and data is not None else None
        if deferred is None:  # with unknowns, the data may move them to where the step is fine: judged after
            _step_verdict(at_prior)
        f = _Transition(step, params)
        h = _Output(aug, params)  # type: ignore[arg-type]
    if lin_name == "propagated":
        lin = None
    elif lin_name == "redrawn":
        lin = _unscented(weights or UnscentedWeights.merwe())
    else:
        lin = taylor if lin_name == "taylor" else linear
    tuning = None
    if data is not None and (auto_q or auto_r):  # noise levels from the data (docs/tuning.md)
        us = data.step_inputs()
        ys, masks = np.nan_to_num(data.observations[1:]), np.asarray(data.mask[1:])
        loglik = filter_loglik(
            f, h, x_init, sd0, prior[:, 2], us, ys, masks, linearisation=lin, weights=weights
        )
        tuning = tune_noise(
            loglik,
            process_shape=sd0[:n_base] if auto_q else None,
            noise_shape=noise_floor(ys, masks) if auto_r else None,
            process_sd=q_base,
            noise_sd=sdr,
            state_names=base_names,
            output_names=model.output_names,
        )
        q_base = q_base if tuning.process_sd is None else tuning.process_sd
        sdr = sdr if tuning.noise_sd is None else tuning.noise_sd
    program = CentralProgram(
        state_names=tuple(aug.state_names),
        parameters=tuple(aug.state_names[n_base + i] for i in range(len(unknown))),
        input_names=tuple(model.input_names),
        output_names=tuple(model.output_names),
        input_hold=(layout if data is None else data).input_hold,  # type: ignore[union-attr]
        alignment=(layout if data is None else data).alignment,  # type: ignore[union-attr]
        f=f,
        h=h,
        x0=jnp.asarray(x_init),
        chol_P0=_block(factors.get("state_cov"), sd0[:n_base], prior[:, 1]),
        chol_Q=_block(factors.get("process_cov"), q_base, prior[:, 2]),
        chol_R=jnp.asarray(factors.get("noise_cov", np.diag(sdr))),
        linearisation=lin_name,
        weights=weights,
        log_cols=tuple(n_base + i for i, s in enumerate(scales.values()) if s == "log"),
        dt=float(dt),
        kernel=kernel,  # type: ignore[arg-type]
    )
    if data is None:
        return program
    out = program.scan(data, smoother_inputs=where == "smooth")
    bad = int(out.first_bad_step)
    if bad >= 0 and deferred is not None:
        raise StepSizeError(
            f"{deferred.text} The filter then diverged at step {bad}: non-finite state or covariance."
        )
    if bad >= 0:
        name = "UKF" if lin_name == "propagated" else f"estimator {estimator!r} ({lin_name})"
        raise DivergenceError(
            f"{where}: {name} diverged at step {bad} (t = {float(data.times[1 + bad]):g}): non-finite state "
            f"or covariance (a covariance no longer positive-definite). Check the model."
            f"{_time_hint(aug, data, integrator, x_init)} {_ARGS_HINT}"
        )
    cov0 = np.diag(sd0**2) if "state_cov" not in factors else np.asarray(program.chol_P0 @ program.chol_P0.T)
    if where == "smooth":
        sm = rts_smooth(out, x_init, cov0)
        means, covs = sm.means, sm.covs
        bad = first_not_psd(covs)
        finite = np.isfinite(np.asarray(means)).all(axis=1)
        if not finite.all():
            bad = min(k for k in (bad, int(np.argmax(~finite))) if k >= 0)
        if bad >= 0:
            raise DivergenceError(
                f"smooth: the RTS smoother diverged at row {bad} (t = {float(data.times[bad]):g}): "
                "non-finite state or a covariance that is not positive semi-definite (a singular "
                f"predicted covariance: try a larger process_sd).{_time_hint(aug, data, integrator, x_init)}"
            )
        stds = jnp.sqrt(jnp.maximum(jnp.diagonal(covs, axis1=1, axis2=2), 0.0))
    else:
        means, covs, stds = _filtered_summary(x_init, cov0, out.means, out.chols)
    if integrator != "exact" and check is not None:
        _step_verdict(_check_along(check, data, n_base, np.asarray(means)), deferred)
    n_obs = int(np.asarray(data.mask[1:]).sum())
    nis = float(out.nis) if n_obs and out.nis is not None else None
    verdict = inconsistency(nis, n_obs, alpha=NIS_ALPHA)
    band_low, band_high = nis_band(n_obs)
    band_low, band_high = min(band_low, 1.0 / NIS_FACTOR), max(band_high, NIS_FACTOR)
    expected = (
        f"a consistent filter gives {band_low:.3g}..{band_high:.3g} over {n_obs} values (chi-square, "
        f"false-alarm rate {NIS_ALPHA:g}, and at most {NIS_FACTOR:g}x from 1)"
    )
    auto = ["process_sd", "noise_sd"]
    auto = [k for k in auto if not (tuning is not None and getattr(tuning, k) is not None)]
    try_auto = f" Try {' and '.join(f'{k}={AUTO!r}' for k in auto)} (docs/tuning.md)." if auto else ""
    if verdict == "high":
        warnings.warn(
            f"{where}: the normalised innovation squared (NIS) averages {nis:.3g} per measurement; "
            f"{expected}. The innovations are larger than the filter predicts: the model, its parameters "
            "or the noise levels (noise_sd, process_sd) do not fit the data, so the estimates and the "
            f"log-likelihood ({float(out.loglik):.4g}) are not trustworthy.{try_auto}",
            FilterConsistencyWarning,
            stacklevel=3,
        )
    elif verdict == "low":
        warnings.warn(
            f"{where}: the normalised innovation squared (NIS) averages {nis:.3g} per measurement; "
            f"{expected}. The innovations are smaller than the filter predicts, so its variances are "
            "larger than the data justify: noise levels (noise_sd, process_sd) too high, a process noise "
            "absorbing a model error (an unknown parameter can then be biased with bands that look "
            "wide), or an unstable discretisation (try a smaller time step or another integrator)."
            f"{try_auto}",
            FilterConsistencyWarning,
            stacklevel=3,
        )
    est = Estimate(
        times=data.times,
        means=means,
        stds=stds,
        covs=covs,
        state_names=tuple(aug.state_names),
        parameters=tuple(aug.state_names[n_base + i] for i in range(len(unknown))),
        loglik=float(out.loglik),
        nis=nis,
    )
    if not discrete:
        est = natural_estimate(est, aug, where)  # log-scale unknowns in their own units  # type: ignore[arg-type]
        warn_if_out_of_bounds(where, model, est, scales)  # type: ignore[arg-type]
    return est if tuning is None else attach(est, tuning)


def run_filter(model: AbstractModel, data: Dataset, **options: Unpack[EstimateOptions]) -> Estimate:
    """Filter a dataset with a model: states (and unknown parameters) with uncertainty at each time.

    What :func:`twinfer.infer.estimate` runs for a model with a :class:`~twinfer.infer.Central` method
    (these keywords are its options and the problem's numbers).

    Time alignment (:class:`twinfer.data.Dataset`): row k of the dataset holds the input u_k and the
    measurement y_k sampled at t_k; the input is held over [t_k, t_{k+1}) for the dynamics. Step k
    predicts x_{k+1} with u_k and updates with y_{k+1} = h(x_{k+1}, u_{k+1}); a record whose
    ``alignment`` is ``"held"`` (the compositional-inference paper's code) is read as
    y_{k+1} = h(x_{k+1}, u_k). y_0 is not used (the prior describes t_0).

    Noise levels are standard deviations, as a user states them (not covariances, not factors); the
    filters run on their square-root factors (:mod:`twinfer.infer.gaussian`).

    Args:
        model: a continuous-time twinfer model.
        data: a :class:`twinfer.data.Dataset` with uniform times and the model's outputs (masked entries
            are skipped).
        **options: keywords, every one optional (:class:`EstimateOptions`):

            - ``x0`` (0.0): prior mean of the state (a scalar, broadcast, or one value per state).
            - ``state_sd`` (1.0): prior standard deviation of each state, > 0 (scalar or one per state).
            - ``process_sd`` (1e-6): per-step process-noise standard deviation of each state, >= 0;
              or ``"auto"``: ``state_sd`` times the multiplier in [1e-10, 1] that maximises the
              record's log-likelihood (:mod:`twinfer.infer.filters._tune`; the unknowns' random walks
              are not tuned).
            - ``noise_sd`` (1.0): measurement-noise standard deviation of each output, > 0 (a
              noise-free sensor makes the innovation covariance singular and is refused); or
              ``"auto"``: each output's noise floor (its second differences) times the multiplier in
              [1e-3, 10] that maximises the log-likelihood. Both may be ``"auto"``; the result's ``tuning``
              (:class:`~twinfer.infer.filters.NoiseTuning`) holds the chosen values, the
              log-likelihood around them and the time taken.
            - ``unknown`` (None): ``{name: (initial value, prior sd > 0, random-walk sd per step >= 0)}``
              of scalar parameters of the model to estimate; the initial value must be one the model
              accepts. A parameter the model declares in ``[0, inf)`` (``param_bounds``: a mass, a
              stiffness, a damping) is estimated as ``log(theta)`` (the prior keeps its median and
              relative sd, the random walk is relative: docs/tuning.md) and reported in its own units
              (``Estimate.log_scale``); a 4th element ``"linear"`` keeps the linear scale, ``"log"``
              asks for the log scale on any parameter with a positive initial value.
            - ``estimator`` (``"ukf"``): ``"ukf"`` (unscented), ``"ekf"`` (extended: Taylor
              linearisation) or ``"kf"`` (Kalman, for a linear model and no unknown parameters; exact
              Jacobians). All square-root.
            - ``linearisation`` (None: the estimator's first): for ``"ukf"``, ``"propagated"`` (the
              measurement is read at the sigma points propagated through the transition, the paper's
              Alg. 6: :func:`run_ukf`) or ``"redrawn"`` (sigma points drawn again from the predicted
              Gaussian for the measurement: statistical linear regression,
              :func:`gaussian_filter` with :func:`~twinfer.infer.gaussian.unscented`; the KF on a
              linear model); ``"taylor"`` for ``"ekf"``, ``"linear"`` for ``"kf"``.
            - ``integrator`` (``"rk4"``): ``"euler"``, ``"heun"``, ``"rk4"`` or ``"exact"`` (a linear
              model's matrix exponential): how the continuous-time model becomes a transition
              (:func:`twinfer.sim.discretise`).
            - ``substeps`` (1): integrator steps per record step (1 with ``"exact"``). Before the run the
              step is checked against the model linearised at the prior, and after it at the estimate's
              largest state (:func:`twinfer.sim.check_step`): a step the integrator cannot take is a
              :class:`~twinfer.sim.StepSizeError` naming the fastest mode and the ``substeps`` that fix it.
            - ``weights`` (None: Merwe alpha=1, beta=2, kappa=0): sigma-point weights of the UKF.
            - ``kernel`` (``"qr"``): a step's algebra on stacked factors; ``"gram"`` on covariances by
              products and Cholesky factors, faster (about 1.5 times for a 24-state EKF) where every
              covariance is positive-definite (:data:`~twinfer.infer.filters.Kernel`).
            - ``method``, ``discretisation``: deprecated names (a ``DeprecationWarning``): ``method``
              ``"ukf"``, ``"ukf-sqrt"``, ``"ekf"`` is ``estimator="ukf"`` (``"propagated"``),
              ``estimator="ukf", linearisation="redrawn"``, ``estimator="ekf"``; ``discretisation`` is
              ``integrator``.

    Returns:
        :class:`~twinfer.infer.Estimate`, with ``nis`` the mean normalised innovation squared (about 1 when
        the model and noise levels fit the data); with an ``"auto"`` level, also the attribute ``tuning``
        (:class:`~twinfer.infer.filters.NoiseTuning`; :func:`~twinfer.infer.filters.tuning_of`).

    Raises:
        ValueError: naming the argument, the expected and the received value, for a model/dataset
            mismatch (outputs, input count or names), wrong lengths, non-finite or out-of-range sds, a
            malformed ``unknown``, an unknown ``estimator``, ``linearisation`` or ``integrator``, a
            linearisation or ``weights`` that is not the estimator's, ``"kf"`` on a nonlinear model.
        TypeError: when ``model``, ``data``, ``unknown`` or ``weights`` has the wrong type, or for a
            keyword that is not an option.
        StepSizeError: (a ``ValueError``) when the integrator at this step (and ``substeps``) would grow
            the state more than 1000-fold over the record where the model does not (an explicit method
            beyond its stability region: a stiff model, or a time column in milliseconds); a 10- to
            1000-fold growth warns :class:`~twinfer.sim.StepSizeWarning`.
        DivergenceError: (a ``ValueError``) when the filter's state becomes non-finite or its
            covariance stops being positive semi-definite, naming the step and time, and a likely unit
            mistake when the record's step is far from the model's fastest time scale (a time column
            in milliseconds: :func:`twinfer.sim.unit_hint`).

    Warns:
        ParameterBoundWarning: when an unknown's final 95 % interval crosses a bound the model declares
            (``param_bounds``: a linear-scale stiffness below 0), naming the parameter, bound, interval.
        FilterConsistencyWarning: when ``nis`` is outside the two-sided chi-square band of a consistent
            filter over the observed values (false-alarm rate ``NIS_ALPHA``, 1e-4: :func:`nis_band`), or
            above ``NIS_WARN`` (10): the innovations are wider or narrower than the filter predicts, so
            the model or the noise levels do not fit the data.

    References:
        compositional-inference paper, Alg. 4-6 (KF, EKF, UKF) and S13-S15 (sigma points); Särkkä &
        Svensson, Bayesian Filtering and Smoothing (2nd ed.), Sec. 9.4 (statistical linear regression).

    """
    ensure("run_filter", model=model)
    return _run(model, data, "filter", options)


def smooth(model: AbstractModel, data: Dataset, **options: Unpack[EstimateOptions]) -> Estimate:
    """As :func:`run_filter` (the same keywords), then the RTS smoother: each estimate uses all the data.

    References:
        Särkkä & Svensson, Bayesian Filtering and Smoothing (2nd ed.), Alg. 9.3 (:func:`rts_smooth`).

    """
    ensure("smooth", model=model)
    return _run(model, data, "smooth", options)
