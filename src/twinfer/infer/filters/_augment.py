"""Joint state-parameter estimation by state augmentation (specs/compositional-inference.md 2.4).

Chosen named parameters are appended to the state with zero drift (d theta / dt = 0), so any
discretisation keeps them constant and only the filter's process noise moves them: a random walk whose
per-parameter variance is set in the filter's ``Q``. One helper serves every model.

A parameter that must be positive (a mass, a stiffness: the model's
:attr:`~twinfer.models.AbstractModel.param_bounds` say ``(0, inf)``) can ride in the state as
``z = log(theta)`` instead: the filter's Gaussian on ``z`` is a log-normal on ``theta``, which can never
cross zero, and a random walk on ``z`` is a relative one on ``theta``. :func:`log_prior` maps a prior
given in the parameter's own units to ``z``; :func:`natural_estimate` reports the filtered ``z`` back in
those units (log-normal moments, intervals from the log space, :class:`~twinfer.infer.Estimate`);
:func:`warn_if_out_of_bounds` flags a posterior that crosses a declared bound.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from twinfer.infer._estimate import Estimate
from twinfer.infer.filters._errors import DivergenceError, ParameterBoundWarning
from twinfer.models import AbstractModel, Params, get_param, locate, set_param_vector

Scale = Literal["log", "linear"]
SCALES: tuple[str, ...] = ("log", "linear")
"""The scales an unknown parameter can be estimated on: ``z = log(theta)`` or ``theta`` itself."""


def _from_base(name: str, doc: str) -> Any:
    """A read-only property that returns the attribute ``name`` of the wrapped ``base`` model."""
    return property(lambda self: getattr(self.base, name), doc=doc)


class Augmented(AbstractModel):
    """``base`` with the parameters named in ``unknown`` moved into the state (after the base state).

    The state entry of a parameter flagged in ``log_scale`` is ``z = log(theta)``; the others are
    ``theta``.
    """

    base: AbstractModel
    params: Params
    unknown: tuple[str, ...] = eqx.field(static=True)
    log_scale: tuple[bool, ...] = eqx.field(static=True)

    def __init__(self, base: AbstractModel, unknown: Sequence[str], log_scale: Sequence[bool] = ()):
        unknown = tuple(unknown)
        if not unknown:
            raise ValueError("augment unknown: expected at least one parameter name; received none.")
        for name in unknown:
            locate(base.params, name)  # KeyError naming the allowed names
        if len(set(unknown)) != len(unknown):
            raise ValueError(f"augment unknown: expected distinct names; received {unknown}.")
        flags = tuple(bool(v) for v in log_scale) or (False,) * len(unknown)
        if len(flags) != len(unknown):
            raise ValueError(
                f"augment log_scale: expected one flag per unknown {unknown}; received {tuple(log_scale)}."
            )
        self.base = base
        self.params = base.params
        self.unknown = unknown
        self.log_scale = flags

    def split(self, z: Any, params: Params) -> tuple[Any, Params]:
        """``(base state, params)``: the augmented state ``z`` apart, the unknowns' values in ``params``."""
        n = self.base.n_state
        theta = z[n:]
        logged = [i for i, log in enumerate(self.log_scale) if log]
        if len(logged) == len(theta):
            theta = jnp.exp(theta)
        elif logged:
            at = np.asarray(logged)
            theta = theta.at[at].set(jnp.exp(theta[at]))
        return z[:n], set_param_vector(params, self.unknown, theta)

    def vector_field(self, t: Any, x: Any, u: Any, params: Params) -> Any:
        base_x, p = self.split(x, params)
        return jnp.concatenate([self.base.vector_field(t, base_x, u, p), jnp.zeros(len(self.unknown))])

    def output(self, t: Any, x: Any, u: Any, params: Params) -> Any:
        base_x, p = self.split(x, params)
        return self.base.output(t, base_x, u, p)

    def host_step(self, step: Any, t: Any, x: Any, u: Any, params: Params, h: float, substeps: int) -> Any:
        """The base model's whole step where it takes one (the unknowns do not move within a step)."""
        base_x, p = self.split(x, params)
        stepped = self.base.host_step(step, t, base_x, u, p, h, substeps)
        return None if stepped is None else jnp.concatenate([stepped, x[self.base.n_state :]])

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.base.state_names + self.unknown

    input_names = _from_base("input_names", "The base model's inputs (augmentation adds none).")
    output_names = _from_base("output_names", "The base model's outputs (augmentation adds none).")

    def initial_state(
        self, x0: Float[ArrayLike, " n"], values: dict[str, float] | None = None
    ) -> Float[Array, " n+p"]:
        """Augmented initial state: ``x0`` then each unknown (from ``values`` or the model's params).

        A log-scale unknown enters as ``log(theta)``.
        """
        values = values or {}
        theta: list[Any] = [values.get(name, get_param(self.params, name)) for name in self.unknown]
        z = [jnp.log(v) if log else v for v, log in zip(theta, self.log_scale, strict=True)]
        return jnp.concatenate([jnp.asarray(x0, dtype=jnp.float64), jnp.asarray(z, dtype=jnp.float64)])

    def named_params(
        self, means: Float[Array, "T n+p"], stds: Float[Array, "T n+p"]
    ) -> dict[str, tuple[Float[Array, " T"], Float[Array, " T"]]]:
        """Map augmented-state trajectories (T, n) back to ``{name: (mean (T,), sd (T,))}``.

        A log-scale unknown's ``(mean, sd)`` in the state are its log's; it is reported as the
        log-normal's mean and sd (:func:`lognormal_moments`).
        """
        n = self.base.n_state
        out = {}
        for i, (name, log) in enumerate(zip(self.unknown, self.log_scale, strict=True)):
            mean, sd = means[:, n + i], stds[:, n + i]
            out[name] = lognormal_moments(mean, sd) if log else (mean, sd)
        return out


def augment(model: AbstractModel, unknown: Sequence[str], log_scale: Sequence[bool] = ()) -> Augmented:
    """Augment ``model``'s state with the named parameters as random walks.

    Args:
        model: any twinfer model.
        unknown: scalar parameter names (``"k4"``) to estimate.
        log_scale: per unknown, whether the state holds ``log(theta)`` (default: none; every unknown
            on its own linear scale).

    Returns:
        An :class:`Augmented` model with state ``[x, theta]`` (``log(theta)`` where flagged).

    """
    return Augmented(model, unknown, log_scale)


def lognormal_moments(mu: Any, sd: Any) -> tuple[Any, Any]:
    """Mean and standard deviation of ``exp(z)`` for ``z ~ N(mu, sd^2)``.

    ``E = exp(mu + sd^2 / 2)``, ``SD = E sqrt(exp(sd^2) - 1)`` (Johnson, Kotz & Balakrishnan, Continuous
    Univariate Distributions vol. 1, 2nd ed., eq. 14.8a-b).
    """
    mu, sd = np.asarray(mu, dtype=np.float64), np.asarray(sd, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = np.exp(mu + 0.5 * sd**2)
        return mean, mean * np.sqrt(np.expm1(sd**2))


def log_prior(initial: float, sd: float, walk_sd: float) -> tuple[float, float, float]:
    """A prior given in the parameter's units, ``(initial > 0, sd, random-walk sd)``, as one on its log.

    The log-normal keeps the median at ``initial`` and the coefficient of variation ``sd / initial``:
    ``z ~ N(log(initial), sd_z^2)`` with ``sd_z = sqrt(log(1 + (sd / initial)^2))`` (the cv of a
    log-normal is ``sqrt(exp(sd_z^2) - 1)``; Johnson, Kotz & Balakrishnan, eq. 14.8b); the random walk's
    per-step sd maps the same way, relative to ``initial``. For small ratios ``sd_z ~ sd / initial``.

    Returns:
        ``(log(initial), sd_z, walk_sd_z)``.

    """
    with np.errstate(over="ignore"):
        sd_z = math.sqrt(math.log1p(float(np.float64(sd / initial) ** 2)))
        walk_z = math.sqrt(math.log1p(float(np.float64(walk_sd / initial) ** 2)))
    return math.log(initial), sd_z, walk_z


def scaled_prior(
    where: str,
    model: AbstractModel,
    name: str,
    prior: tuple[float, float, float],
    scale: str | None,
    *,
    log_default: bool = True,
) -> tuple[float, float, float, str]:
    """A checked unknown's prior ``(initial, sd, random-walk sd)`` in the filter's coordinates, and its scale.

    ``scale`` None picks ``"log"`` when ``log_default`` and the model declares ``name`` in ``[0, inf)``
    (:attr:`~twinfer.models.AbstractModel.param_bounds`), else ``"linear"``. On the log scale the prior
    is :func:`log_prior`'s; on the linear scale it is returned as given.

    Returns:
        ``(mean, sd, random-walk sd, scale)``: of ``log(theta)`` on the log scale, of ``theta`` else.

    Raises:
        ValueError: naming ``unknown[name]`` for a scale not in :data:`SCALES`, or, on the log scale, an
            initial value <= 0 or a relative sd whose log-space sd is not a finite positive variance.

    """
    if scale is not None and (not isinstance(scale, str) or scale not in SCALES):
        raise ValueError(
            f"{where} unknown[{name!r}]: expected a 4th element 'log' or 'linear' (the scale it is "
            f"estimated on); received {scale!r}."
        )
    bound = model.param_bounds.get(name)
    positive = log_default and bound is not None and bound[0] == 0.0 and bound[1] == math.inf
    if not (scale == "log" or (scale is None and positive)):
        return (*prior, "linear")
    initial, sd, walk_sd = prior
    linear_hint = f"unknown={{{name!r}: ({initial!r}, {sd!r}, {walk_sd!r}, 'linear')}}"
    if not initial > 0:
        why = "it is declared >= 0, so the log scale is its default" if scale is None else "asked for"
        raise ValueError(
            f"{where} unknown[{name!r}]: expected an initial value > 0 on the log scale ({why}); received "
            f"{initial!r}. Give a positive initial value, or keep the linear scale: {linear_hint}."
        )
    mean, sd_z, walk_z = log_prior(initial, sd, walk_sd)
    if not (math.isfinite(sd_z) and sd_z**2 > 0 and math.isfinite(walk_z)):
        raise ValueError(
            f"{where} unknown[{name!r}]: on the log scale the relative sds sd / initial = {sd / initial:.6g} "
            f"and random-walk sd / initial = {walk_sd / initial:.6g} give log-space sds ({sd_z:.6g}, "
            f"{walk_z:.6g}); expected a finite prior variance > 0 in float64. Give sds in the parameter's "
            f"units, or keep the linear scale: {linear_hint}."
        )
    return mean, sd_z, walk_z, "log"


def natural_estimate(est: Estimate, aug: AbstractModel, where: str) -> Estimate:
    """``est`` of ``aug``'s state with its log-scale unknowns reported in their own units.

    The filter's Gaussian over ``(x, z)`` with ``theta = exp(z)`` on the log-scale columns gives exact
    first and second moments of ``(x, theta)``: ``E theta_i = a_i = exp(mu_i + P_ii / 2)``,
    ``Cov(theta_i, theta_j) = a_i a_j (exp(P_ij) - 1)`` (the multivariate log-normal; Johnson, Kotz &
    Balakrishnan, Continuous Multivariate Distributions vol. 1, 2nd ed., sec. 45.4) and
    ``Cov(x_k, theta_i) = P_ki a_i`` (Stein's lemma: ``Cov(x, g(z)) = Cov(x, z) E g'(z)`` for jointly
    Gaussian ``x, z``). ``means``, ``stds`` and ``covs`` are these moments; ``log_means``, ``log_stds``
    keep the Gaussian on ``z``, from which :meth:`Estimate.interval` draws the intervals.

    Raises:
        DivergenceError: naming ``unknown[name]`` when the log-normal's moments overflow float64.

    """
    if not isinstance(aug, Augmented) or not any(aug.log_scale):
        return est
    n = aug.base.n_state
    return log_scaled(est, tuple(n + i for i, log in enumerate(aug.log_scale) if log), where)


def log_scaled(est: Estimate, log_cols: tuple[int, ...], where: str) -> Estimate:
    """``est`` with the columns ``log_cols`` (a Gaussian on ``log theta``) as theta's moments.

    The body of :func:`natural_estimate`, for an estimate whose log-scale columns are known by index.
    """
    if not log_cols:
        return est
    cols = list(log_cols)
    names = tuple(est.state_names[c] for c in cols)
    mu = np.asarray(est.means)[:, cols]
    covs = None if est.covs is None else np.asarray(est.covs)
    var_z = covs[:, cols, cols] if covs is not None else np.asarray(est.stds)[:, cols] ** 2
    sd_z = np.sqrt(np.maximum(var_z, 0.0))
    a, sd = lognormal_moments(mu, sd_z)
    bad = ~(np.isfinite(a) & np.isfinite(sd))
    if bad.any():
        row, j = (int(v[0]) for v in np.nonzero(bad))
        raise DivergenceError(
            f"{where} unknown[{names[j]!r}]: its log-normal moments overflow float64 at row {row} (log-space "
            f"mean {float(mu[row, j]):.6g}, sd {float(sd_z[row, j]):.6g}): the estimate ran away. Give a "
            "smaller prior sd or random-walk sd, or check the model."
        )
    means = np.array(est.means, dtype=np.float64)
    means[:, cols] = a
    stds = np.array(est.stds, dtype=np.float64)
    stds[:, cols] = sd
    if covs is not None:
        covs = covs.copy()
        covs[:, cols, :] *= a[:, :, None]
        covs[:, :, cols] *= a[:, None, :]
        block = np.asarray(est.covs)[:, cols][:, :, cols]
        with np.errstate(over="ignore"):
            covs[:, np.ix_(cols, cols)[0], np.ix_(cols, cols)[1]] = (
                a[:, :, None] * a[:, None, :] * np.expm1(block)
            )
    return dataclasses.replace(
        est, means=means, stds=stds, covs=covs, log_scale=names, log_means=mu, log_stds=sd_z
    )


def warn_if_out_of_bounds(
    where: str, model: AbstractModel, est: Estimate, scales: Mapping[str, str], level: float = 0.95
) -> None:
    """Warn (:class:`ParameterBoundWarning`) for each unknown whose last ``level`` interval leaves its bounds.

    The bounds are ``model``'s :attr:`~twinfer.models.AbstractModel.param_bounds`; ``scales`` names each
    unknown's scale (for the advice). The interval is :meth:`Estimate.interval`'s (from the log space on a
    log-scale column), so a mean beyond the bound is caught too.
    """
    bounds = model.param_bounds
    for name in est.parameters:
        if name not in bounds:
            continue
        lower, upper = bounds[name]
        low, high = est.interval(name, level)
        if lower <= low and high <= upper:
            continue
        mean = float(np.asarray(est.means)[-1, est.state_names.index(name)])
        side = f"{name} >= {lower:g}" if low < lower else f"{name} <= {upper:g}"
        advice = (
            f" Estimate it on the log scale (drop 'linear' from unknown[{name!r}]): it cannot cross 0 there."
            if scales.get(name) == "linear" and lower == 0.0 and upper == math.inf
            else ""
        )
        warnings.warn(
            f"{where}: the {100 * level:g} % interval of {name} at the last time, [{low:.6g}, {high:.6g}] "
            f"(mean {mean:.6g}), crosses its declared bound {side} ({type(model).__name__}.param_bounds): "
            f"a physically impossible value.{advice} Check its prior (initial value and sd: an initial value "
            "far off, e.g. in the wrong units, drives it there) and whether the data inform it.",
            ParameterBoundWarning,
            stacklevel=4,
        )
