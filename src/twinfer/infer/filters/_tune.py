"""Noise levels from the data: ``process_sd="auto"`` / ``noise_sd="auto"`` by maximum marginal likelihood.

Each ``"auto"`` quantity is a fixed per-component shape times one scalar multiplier; the multipliers
maximise the record's log-likelihood ``log p(y_1..y_N | Q, R)``, the sum of the Gaussian filter's
one-step predictive log-densities (prediction-error decomposition: Harvey, Forecasting, Structural Time
Series Models and the Kalman Filter, 1989, Sec. 3.4; for the Gaussian filters of nonlinear models,
Särkkä & Svensson, Bayesian Filtering and Smoothing, 2nd ed., Ch. 16, the filters' energy function). The
search is on log10 of the
multipliers, inside stated bounds: a coarse grid (every decade, or every two decades of the process
multiplier when both are tuned), then a bounded derivative-free refinement from the grid's best point
(Brent's bounded method in one dimension, Powell's with bounds in two; ``scipy.optimize``).

Every evaluation runs the same jitted filter program as the final estimate (the noise levels are
arguments of that program, not constants in it), so tuning compiles nothing of its own. The filters are
differentiable in the noise scales, but a gradient program costs a compilation of its own and several
forward runs per evaluation, more than a one- or two-parameter search saves with it (measured in
docs/tuning.md).

What is identifiable (docs/tuning.md, "Noise levels from the data"): one scale for Q and one for R.
The measurement noise is white at the sensors while the process noise reaches them through the
dynamics, so the two scales separate on a record long against the system's time constants. The split of
Q between states is weakly identified by one record, so its shape is fixed: ``state_sd``'s (uniform for
a scalar ``state_sd``, as a scalar ``process_sd`` is). Below the level of the model's own error the
likelihood is flat in Q (the data cannot tell two negligible process noises apart), which the reported
profile shows. The noise shape is each output's white-noise floor read from its second differences
(:func:`noise_floor`), so the sensors' relative noise levels come from the data and the multiplier, near
1 for a record sampled well above its bandwidth, corrects their common level.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from twinfer.errors import TwinferRuntimeError
from twinfer.infer.filters._gaussian_filter import gaussian_filter
from twinfer.infer.filters._ukf import ukf_scan

AUTO = "auto"
"""The value of ``process_sd`` / ``noise_sd`` that asks for the level from the data."""

PROCESS_BOUNDS = (1e-10, 1.0)
"""Bounds of the process multiplier: ``process_sd = m * state_sd`` per step, ``m`` in [1e-10, 1].

At 1 each step may move a state by its whole prior sd (the model is ignored); 1e-10 is far below any
model error a float64 filter resolves.
"""

NOISE_BOUNDS = (1e-3, 10.0)
"""Bounds of the noise multiplier: ``noise_sd = m * noise_floor(output)``, ``m`` in [1e-3, 10].

The floor (:func:`noise_floor`) is each output's white-noise level read from its second differences;
it errs high where a signal has content near the Nyquist frequency, hence the three decades below.
"""

PLATEAU = 0.5
"""Log-likelihood units within which a larger process multiplier is preferred to the maximiser.

Below the model's own error the likelihood is flat in Q, and its maximiser there is set by rounding
(1e-13 or 1e-9 fit a record equally); the choice is then the largest multiplier whose log-likelihood is
within 0.5 of the maximum (inside the likelihood-ratio interval of about one sd: Pawitan, In All
Likelihood, 2001, Sec. 2.6), the most cautious setting the data do not reject.
"""

_PENALTY = 1e300
"""The objective (minus the log-likelihood) of a setting whose filter diverged."""


@dataclasses.dataclass(frozen=True, eq=False)
class NoiseTuning:
    """The noise levels ``"auto"`` chose, how they were found and the log-likelihood around them.

    Attributes:
        process_sd: the chosen per-step process sd of each model state (the unknowns' random walks are
            not tuned), or None when ``process_sd`` was given.
        noise_sd: the chosen measurement sd of each output, or None when ``noise_sd`` was given.
        state_names: the names of ``process_sd``'s entries.
        output_names: the names of ``noise_sd``'s entries.
        scales: ``{"process_sd" | "noise_sd": multiplier}`` of each tuned quantity's shape.
        shapes: ``{quantity: per-component shape}`` (``state_sd``; each output's :func:`noise_floor`).
        bounds: ``{quantity: (lowest, highest multiplier)}`` searched.
        loglik: the log-likelihood at the chosen levels.
        profile: ``{quantity: (multipliers, logliks)}``: the log-likelihood at the chosen multiplier
            times 10^-1, 10^-0.5, 1, 10^0.5, 10 (clipped to the bounds), the others held at their choice.
        grid: ``(points, logliks)``: the coarse grid, points (k, number of tuned quantities) as
            multipliers in the order of ``scales``; a diverged setting has loglik -inf.
        evaluations: filter runs made (grid, refinement and profile).
        seconds: wall time of the tuning (the filter runs and the search; not the final estimate).

    """

    process_sd: np.ndarray | None
    noise_sd: np.ndarray | None
    state_names: tuple[str, ...]
    output_names: tuple[str, ...]
    scales: dict[str, float]
    shapes: dict[str, np.ndarray]
    bounds: dict[str, tuple[float, float]]
    loglik: float
    profile: dict[str, tuple[np.ndarray, np.ndarray]]
    grid: tuple[np.ndarray, np.ndarray]
    evaluations: int
    seconds: float

    def metrics(self) -> dict[str, float]:
        """Flat ``{"tuning.<name>": number}`` for a run folder's metrics.

        ``tuning.process_sd`` (one number when every state has the same) or ``tuning.process_sd.<state>``,
        ``tuning.noise_sd.<output>``, ``tuning.<quantity>_scale``, ``tuning.loglik``, ``tuning.seconds``,
        ``tuning.evaluations``.
        """
        out: dict[str, float] = {}
        if self.process_sd is not None:
            if np.all(self.process_sd == self.process_sd[0]):
                out["tuning.process_sd"] = float(self.process_sd[0])
            else:
                out |= {
                    f"tuning.process_sd.{n}": float(v)
                    for n, v in zip(self.state_names, self.process_sd, strict=True)
                }
        if self.noise_sd is not None:
            out |= {
                f"tuning.noise_sd.{n}": float(v)
                for n, v in zip(self.output_names, self.noise_sd, strict=True)
            }
        out |= {f"tuning.{k}_scale": float(v) for k, v in self.scales.items()}
        return out | {
            "tuning.loglik": self.loglik,
            "tuning.seconds": self.seconds,
            "tuning.evaluations": float(self.evaluations),
        }

    def __str__(self) -> str:
        parts = []
        for name, scale in self.scales.items():
            values = self.process_sd if name == "process_sd" else self.noise_sd
            if values is None:  # a tuned scale comes with its chosen values
                raise TwinferRuntimeError(f"internal: Tuning.{name} has a scale but no values.")
            shown = (
                f"{values[0]:.3g}" if np.all(values == values[0]) else np.array2string(values, precision=3)
            )
            mults, lls = self.profile[name]
            around = ", ".join(
                f"{m / scale:.3g}x: {ll - self.loglik:+.1f}" for m, ll in zip(mults, lls, strict=True)
            )
            parts.append(f"{name} {shown} (multiplier {scale:.3g}; loglik change at {around})")
        return (
            f"noise levels from the data: {'; '.join(parts)}; loglik {self.loglik:.6g}; "
            f"{self.evaluations} filter runs in {self.seconds:.2f} s"
        )


def is_auto(where: str, name: str, value: Any) -> bool:
    """True for ``"auto"``; False for anything but a string; a ValueError for any other string."""
    if not isinstance(value, str):
        return False
    if value != AUTO:
        raise ValueError(
            f"{where} {name}: expected {AUTO!r} (the level from the data) or standard deviations (a scalar "
            f"or one per component); received {value!r}."
        )
    return True


def noise_floor(ys: Any, masks: Any) -> np.ndarray:
    """Each output's white-noise sd read from its record: ``sd(second differences) / sqrt(6)``.

    For a signal sampled well above its bandwidth the second difference ``y_{k+1} - 2 y_k + y_{k-1}``
    of the signal is small and that of white noise of sd ``s`` has sd ``sqrt(6) s``: the difference-based
    noise estimate of nonparametric regression (Gasser, Sroka & Jennen-Steinmetz, Biometrika 73, 1986,
    625-633, with equal spacing; von Neumann's successive differences one order up). Only runs of
    three observed rows count. Capped at the output's own sd (the noise cannot exceed its record);
    1.0 where fewer than three such runs or a zero spread leave nothing to read.
    """
    y, m = np.asarray(ys, dtype=np.float64), np.asarray(masks, dtype=bool)
    floor = np.ones(y.shape[1])
    for j in range(y.shape[1]):
        obs = y[m[:, j], j]
        runs = m[:-2, j] & m[1:-1, j] & m[2:, j]
        d2 = (y[2:, j] - 2.0 * y[1:-1, j] + y[:-2, j])[runs]
        if d2.size >= 3 and obs.size >= 2:
            level = min(float(np.sqrt(np.mean(d2**2) / 6.0)), float(np.std(obs, ddof=1)))
            floor[j] = level if np.isfinite(level) and level > 0 else 1.0
    return floor


def tune_noise(
    loglik: Callable[[np.ndarray, np.ndarray], float],
    *,
    process_shape: np.ndarray | None,
    noise_shape: np.ndarray | None,
    process_sd: np.ndarray,
    noise_sd: np.ndarray,
    state_names: tuple[str, ...],
    output_names: tuple[str, ...],
) -> NoiseTuning:
    """Maximise ``loglik(process_sd, noise_sd)`` over one multiplier of each shape that is not None.

    Args:
        loglik: the filter's log-likelihood of the record at per-state process sds and per-output noise
            sds (non-finite for a diverged filter).
        process_shape: the shape of ``process_sd`` (per model state) to scale, or None to keep
            ``process_sd``.
        noise_shape: the shape of ``noise_sd`` (per output), or None to keep ``noise_sd``.
        process_sd: the fixed process sds (used when ``process_shape`` is None).
        noise_sd: the fixed noise sds (used when ``noise_shape`` is None).
        state_names: names of the states (for the result).
        output_names: names of the outputs.

    Returns:
        :class:`NoiseTuning`.

    Raises:
        ValueError: when the filter diverged at every point of the coarse grid.

    """
    start = time.perf_counter()
    tuned: dict[str, tuple[np.ndarray, tuple[float, float]]] = {}
    if process_shape is not None:
        tuned["process_sd"] = (np.asarray(process_shape, dtype=np.float64), PROCESS_BOUNDS)
    if noise_shape is not None:
        tuned["noise_sd"] = (np.asarray(noise_shape, dtype=np.float64), NOISE_BOUNDS)
    names = list(tuned)
    lo = np.log10([tuned[k][1][0] for k in names])
    hi = np.log10([tuned[k][1][1] for k in names])
    count = 0

    def levels(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q, r = process_sd, noise_sd
        for k, zk in zip(names, z, strict=True):
            if k == "process_sd":
                q = tuned[k][0] * 10.0**zk
            else:
                r = tuned[k][0] * 10.0**zk
        return q, r

    def value(z: Any) -> float:
        nonlocal count
        count += 1
        ll = float(loglik(*levels(np.clip(np.atleast_1d(z), lo, hi))))
        return ll if np.isfinite(ll) else -np.inf

    # coarse grid: every decade (every two of the process multiplier when both are tuned)
    steps = [2.0 if (k == "process_sd" and len(names) == 2) else 1.0 for k in names]
    axes = [np.arange(a, b + 1e-9, s) for a, b, s in zip(lo, hi, steps, strict=True)]
    points = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(names))
    grid_ll = np.array([value(p) for p in points])
    if not np.isfinite(grid_ll).any():
        raise ValueError(
            f"filter {' and '.join(names)}='auto': the filter diverged at every level searched "
            f"({', '.join(f'{k} multiplier {b[0]:g}..{b[1]:g}' for k, (_, b) in tuned.items())}); check the "
            "model and state_sd, or give the levels."
        )
    best = points[int(np.argmax(grid_ll))]
    best_ll = float(np.max(grid_ll))

    def objective(z: Any) -> float:
        ll = value(z)
        return -ll if np.isfinite(ll) else _PENALTY

    import scipy.optimize  # here, not at import: 0.18 s of every process that never tunes

    # refinement inside one grid step of the best point
    low = np.maximum(best - np.asarray(steps), lo)
    high = np.minimum(best + np.asarray(steps), hi)
    if len(names) == 1:
        res = scipy.optimize.minimize_scalar(
            objective, bounds=(low[0], high[0]), method="bounded", options={"xatol": 1e-2}
        )
        z_new, ll_new = np.atleast_1d(res.x), -float(res.fun)
    else:
        res = scipy.optimize.minimize(
            objective,
            best,
            method="Powell",
            bounds=list(zip(low, high, strict=True)),
            options={"xtol": 1e-2, "ftol": 1e-6, "maxfev": 40},
        )
        z_new, ll_new = np.asarray(res.x), -float(res.fun)
    if ll_new > best_ll:
        best, best_ll = z_new, ll_new
    if "process_sd" in tuned:  # on a plateau: the largest process multiplier within PLATEAU of the maximum
        i = names.index("process_sd")
        best, best_ll = _upper_plateau(value, best, best_ll, i, hi[i], points, grid_ll)

    profile: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, k in enumerate(names):
        zs = np.unique(np.clip(best[i] + np.array([-1.0, -0.5, 0.0, 0.5, 1.0]), lo[i], hi[i]))
        lls = []
        for zi in zs:
            z = best.copy()
            z[i] = zi
            lls.append(best_ll if zi == best[i] else value(z))
        profile[k] = (10.0**zs, np.asarray(lls))
    q, r = levels(best)
    return NoiseTuning(
        process_sd=np.asarray(q) if "process_sd" in tuned else None,
        noise_sd=np.asarray(r) if "noise_sd" in tuned else None,
        state_names=state_names,
        output_names=output_names,
        scales={k: float(10.0 ** best[i]) for i, k in enumerate(names)},
        shapes={k: tuned[k][0] for k in names},
        bounds={k: tuned[k][1] for k in names},
        loglik=best_ll,
        profile=profile,
        grid=(10.0**points, grid_ll),
        evaluations=count,
        seconds=time.perf_counter() - start,
    )


_JIT_UKF = eqx.filter_jit(ukf_scan)
"""The jitted UKF of :func:`~twinfer.infer.filters.run_ukf` (equinox caches by function: one program)."""

_JIT_GAUSSIAN = eqx.filter_jit(gaussian_filter)
"""The jitted driver of :func:`~twinfer.infer.filters.run_filter`'s other linearisations."""


def _upper_plateau(
    value: Callable[[np.ndarray], float],
    best: np.ndarray,
    best_ll: float,
    i: int,
    upper: float,
    points: np.ndarray,
    grid_ll: np.ndarray,
) -> tuple[np.ndarray, float]:
    """The point with coordinate ``i`` raised to where the log-likelihood falls :data:`PLATEAU` below.

    The coarse grid's values of coordinate ``i`` above ``best`` (and the bound) are tried upwards, from
    the first whose grid log-likelihood is lower by more than :data:`PLATEAU` (the grid's other
    coordinates differ from ``best``'s, so each is evaluated at ``best``'s); the crossing is then found
    by Brent's root finder to 0.01 decade.
    """
    import scipy.optimize

    level = best_ll - PLATEAU

    def at(z: float) -> np.ndarray:
        out = best.copy()
        out[i] = z
        return out

    axis = np.unique(points[:, i])
    candidates = [*axis[axis > best[i]], upper] if upper > best[i] else []
    below = points[:, i] > best[i]
    drops = {z for z, ll in zip(points[below, i], grid_ll[below], strict=True) if not ll >= level}
    first = next((k for k, z in enumerate(candidates) if z in drops), len(candidates) - 1)
    z_ok, ll_ok = best[i], best_ll
    for z in candidates[max(first, 0) :]:
        ll = value(at(z))
        if not ll >= level:
            crossing = scipy.optimize.brentq(lambda x: _finite(value(at(x))) - level, z_ok, z, xtol=1e-2)
            root = float(crossing)  # pyright: ignore[reportArgumentType]  (a float without full_output)
            for side in (root, root - 2e-2):  # the root within xtol may lie just past the crossing
                if side > z_ok and (ll_side := value(at(side))) >= level:
                    return at(side), ll_side
            return at(z_ok), ll_ok
        z_ok, ll_ok = z, ll
    return at(z_ok), ll_ok


def _finite(ll: float) -> float:
    return ll if np.isfinite(ll) else -_PENALTY


def filter_loglik(
    f: Any,
    h: Any,
    x0: np.ndarray,
    state_sd: np.ndarray,
    walk_sd: np.ndarray,
    us: Any,
    ys: Any,
    masks: Any,
    *,
    linearisation: Any,
    weights: Any,
) -> Callable[[np.ndarray, np.ndarray], float]:
    """``(process_sd of the model states, noise_sd) -> log-likelihood`` of the filter ``run_filter`` runs.

    The same jitted program and argument types as the final estimate's (``linearisation`` None: the
    propagated-sigma-point UKF of :func:`~twinfer.infer.filters.run_ukf`; otherwise
    :func:`~twinfer.infer.filters.gaussian_filter` with it), so a search compiles nothing of its own.
    ``walk_sd`` are the unknowns' random-walk sds, appended to the process sds untuned. A diverged run
    gives -inf.
    """
    x0_, chol_P0 = jnp.asarray(x0), jnp.diag(jnp.asarray(state_sd))
    us_, ys_, masks_ = jnp.asarray(us), jnp.asarray(ys), jnp.asarray(masks)

    def loglik(process_sd: np.ndarray, noise_sd: np.ndarray) -> float:
        chol_Q = jnp.diag(jnp.asarray(np.concatenate([process_sd, walk_sd])))
        chol_R = jnp.diag(jnp.asarray(noise_sd))
        if linearisation is None:
            out = _JIT_UKF(
                f,
                h,
                x0_,
                chol_P0,
                chol_Q,
                chol_R,
                us_,
                ys_,
                masks_,
                weights=weights,
                redraw=False,
                innovation=None,
            )
        else:
            out = _JIT_GAUSSIAN(
                f, h, x0_, chol_P0, chol_Q, chol_R, us_, ys_, masks_, linearisation=linearisation
            )
        return float(out.loglik) if int(out.first_bad_step) < 0 else -np.inf

    return loglik


def tuning_of(estimate: Any) -> NoiseTuning | None:
    """The :class:`NoiseTuning` an estimate carries (``estimate.tuning``), or None without ``"auto"``."""
    return getattr(estimate, "tuning", None)


def attach(estimate: Any, tuning: NoiseTuning | None) -> Any:
    """``estimate`` with ``tuning`` set as its ``tuning`` attribute (a frozen dataclass: set directly).

    An attribute of the object, not a field: a JAX tree transformation of the estimate rebuilds it
    without ``tuning`` (:func:`tuning_of` then gives None).
    """
    object.__setattr__(estimate, "tuning", tuning)
    return estimate
