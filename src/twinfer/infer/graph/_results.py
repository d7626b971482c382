"""A graph run's results: per-subsystem estimates, merged into one Estimate, checked for divergence and fit.

Shared by the engines: the stacked outputs of a compiled scan split by subsystem, each an
:class:`~twinfer.infer.Estimate` of its own columns (:func:`unpack` with the one-step predictions and the
per-step log-likelihoods and NIS, :func:`field_estimates`) or its bare moments on the way to the merged
estimate (:func:`unpack_moments`), the subsystems' moments merged into one
:class:`~twinfer.infer.Estimate` in the graph's state order (:func:`_merged`), the central filter's
consistency rule on the normalised innovation squared applied to the subsystems' updates
(:func:`_warn_inconsistent`), and the first diverged subsystem named (:func:`_check_divergence`).

References:
    Bar-Shalom, Li & Kirubarajan, *Estimation with Applications to Tracking and Navigation*, 2001,
    sec. 5.4 (the NIS test).

"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from twinfer.infer._estimate import Estimate, merge_estimates
from twinfer.infer.filters import DivergenceError
from twinfer.infer.filters._errors import (
    NIS_ALPHA,
    NIS_DIVERGED,
    NIS_FACTOR,
    NIS_LOW,
    NIS_WARN,
    FilterConsistencyWarning,
    first_runaway,
    inconsistency,
    nis_band,
)
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._numbers import Compiled, Numbers
from twinfer.infer.graph._parts import Subsystem

EARLY_STEPS = 10
"""A divergence before this step is blamed on the prior first (:func:`_check_divergence`)."""


NIS_ESTIMATORS = ("ukf", "kf", "ekf")
"""The local estimators whose updates give a normalised innovation squared (a predicted ``S``)."""


def _subsystem_nis(
    compiled: Compiled, numbers: Numbers, outs: Any, masks: Any
) -> dict[str, tuple[float, int]]:
    """Each updating subsystem's summed NIS over the record and the number of observed values it read.

    ``outs`` is ``compiled.scan``'s output on the record whose observation mask is ``masks`` (T, n_y);
    a subsystem counts the entries of its output columns (not -1, never measured) that the mask
    observes, as its update does (:func:`~twinfer.infer.graph._local._local_step`). Subsystems with
    another estimator (:data:`NIS_ESTIMATORS`) or no outputs are left out.
    """
    nis = [np.asarray(a) for a in outs[5]]
    masks = np.asarray(masks, dtype=bool)
    out: dict[str, tuple[float, int]] = {}
    for gi, g in enumerate(compiled.groups):
        cols = np.asarray(numbers.groups[gi]["outputs"], dtype=int)
        if g.template.estimator not in NIS_ESTIMATORS or cols.shape[-1] == 0:
            continue
        for j, i in enumerate(g.members):
            seen = cols[j][cols[j] >= 0]  # -1: an output never measured
            out[compiled.names[i]] = (float(np.sum(nis[gi][:, j])), int(masks[:, seen].sum()))
    return out


def _total_nis(per: dict[str, tuple[float, int]]) -> float | None:
    """The mean NIS per observed value over all subsystems (the central filter's ``nis``); None if none."""
    count = sum(c for _, c in per.values())
    return sum(v for v, _ in per.values()) / count if count else None


def _warn_inconsistent(
    where: str, nis: float | None, per: dict[str, tuple[float, int]], loglik: float
) -> None:
    """The central filter's :class:`FilterConsistencyWarning` rule on ``nis``, naming the worst subsystems.

    Above ``NIS_WARN`` the subsystems whose own mean NIS exceeds it (at least the largest) are named,
    largest first; below ``NIS_LOW`` (over ``NIS_MIN_COUNT`` observed values or more) those below it
    (at least the smallest), smallest first.
    """
    n_obs = sum(c for _, c in per.values())
    verdict = inconsistency(nis, n_obs, alpha=NIS_ALPHA)
    if verdict is None:
        return
    low, high_bound = nis_band(n_obs)
    low, high_bound = min(low, 1.0 / NIS_FACTOR), max(high_bound, NIS_FACTOR)
    expected = (
        f"a consistent filter gives {low:.3g}..{high_bound:.3g} over {n_obs} values (chi-square, false-alarm "
        f"rate {NIS_ALPHA:g}, and at most {NIS_FACTOR:g}x from 1)"
    )
    means = {k: v / c for k, (v, c) in per.items() if c}
    high = verdict == "high"
    ranked = sorted(means, key=lambda k: -means[k] if high else means[k])
    # beyond the fixed limits, the subsystems beyond them; otherwise those outside the chi-square band
    top = NIS_WARN if nis is not None and nis > NIS_WARN else high_bound
    bottom = NIS_LOW if nis is not None and nis < NIS_LOW else low
    named = [k for k in ranked if (means[k] > top if high else means[k] < bottom)] or ranked[:1]
    worst = ", ".join(f"{k!r} {means[k]:.3g} over {per[k][1]} values" for k in named)
    if high:
        text = (
            f"{where}: the normalised innovation squared (NIS) averages {nis:.3g} per measurement over the "
            f"subsystems' updates; {expected}. Worst subsystems: {worst}. Their models, parameters, noise "
            "levels (noise_sd, process_sd), incoming messages or the record's alignment (which instant "
            "each input column was sampled at: docs/your-data.md) do not fit the data, so the estimates "
            f"and the log-likelihood ({loglik:.4g}) are not trustworthy."
        )
    else:
        text = (
            f"{where}: the normalised innovation squared (NIS) averages {nis:.3g} per measurement; "
            f"{expected}. Lowest subsystems: {worst}. Their variances are larger than the data justify: "
            "noise levels (noise_sd, process_sd) too high, or an unstable discretisation (try a smaller "
            "time step or another integrator)."
        )
    warnings.warn(text, FilterConsistencyWarning, stacklevel=3)


def _merged(graph: Graph, result: dict[str, tuple[Any, Any, float]], dataset: Any, times: Any) -> Estimate:
    """The subsystems' ``(means, stds, loglik)`` as one :class:`Estimate` in the graph's state order."""
    subs, _ = graph.flatten()
    rows = next(iter(result.values()))[0].shape[0]
    if dataset is not None:
        times = np.asarray(dataset.times)
    elif times is None:
        times = np.arange(rows, dtype=np.float64)
    if np.shape(times) != (rows,):
        raise ValueError(
            f"estimate times: expected {rows} values (t_0..t_T); received shape {np.shape(times)}."
        )
    blocks = []
    for s in subs:
        means, stds, _ = result[s.name]
        keep = [j for j, name in enumerate(s.names[: s.n_estimated]) if not name.startswith("~")]
        blocks.append(([s.names[j] for j in keep], means[:, keep], stds[:, keep]))
    merged = merge_estimates(
        blocks,
        times,
        order=[n for n in graph.state_order if any(n in s.names for s in subs)],
        parameters=[p for s in subs for p in s.parameters],
        loglik=float(sum(r[2] for r in result.values())),
    )
    held = {p for s in subs for p in s.parameters}  # the parameters in column order
    return dataclasses.replace(merged, parameters=tuple(n for n in merged.state_names if n in held))


def _diverged_message(who: str, hint: str = "", runaway: bool = False) -> str:
    what = (
        f"an innovation exceeded {NIS_DIVERGED**0.5:.0e} predicted standard deviations (the state ran "
        "away while finite, or a measurement is wildly wrong, or R and Q are far too small for how well "
        "the model fits the data)"
        if runaway
        else "the state became non-finite or the covariance stopped being positive semi-definite"
    )
    return (
        f"graph run diverged: {who}: {what}. Likely causes: process noise Q too small (or P0 too large) "
        "for the model, a step size too large for the transition, or an interface law/gamma whose messages "
        f"grow without bound{hint}."
    )


def _check_divergence(graph: Graph, result: dict[str, tuple[Any, Any, Any]], times: Any) -> None:
    """Raise :class:`DivergenceError` for the subsystem that diverged first (ties: graph order).

    ``result`` maps each subsystem to ``(means, spread, step log-likelihoods)`` over t_0..t_T (the
    log-likelihoods over t_1..t_T), ``spread`` its covariances or standard deviations. Both come from
    square-root factors (Gram products), positive semi-definite by construction, so a diverged step is
    a non-finite one or a finite runaway (:func:`~twinfer.infer.filters._errors.first_runaway`).
    """
    first: list[tuple[int, str, bool]] = []
    for name, (means, spread, step_ll) in result.items():
        m, sp = np.asarray(means)[1:], np.asarray(spread)[1:]
        finite = np.isfinite(m).all(axis=1) & np.isfinite(sp.reshape(sp.shape[0], -1)).all(axis=1)
        bad = -1 if finite.all() else int(np.argmax(~finite))
        ran = -1 if step_ll is None else first_runaway(np.asarray(step_ll)[: None if bad < 0 else bad])
        if ran >= 0:
            first.append((ran, name, True))
        elif bad >= 0:
            first.append((bad, name, False))
    if not first:
        return
    step, name, runaway = min(first)
    _, edges = graph.flatten()
    incoming = [f"{e.kind} from {e.sender!r}" for e in edges if e.receiver == name]
    kinds = f"; its incoming messages: {', '.join(incoming)}" if incoming else ""
    when = f" (t = {float(times[step + 1]):g})" if times is not None else ""
    others = sorted(n for _, n, _ in first if n != name)
    also = f" Also diverged later: {others}." if others else ""
    early = ""
    if step < EARLY_STEPS:  # the prior's spread, before the data could narrow it
        spread0 = np.asarray(result[name][1])[0]
        sd0 = np.sqrt(np.diagonal(spread0)) if spread0.ndim == 2 else spread0
        early = (
            f" It diverged within the first {EARLY_STEPS} steps, where the prior is the usual cause: its "
            f"standard deviations reach {float(np.max(sd0)):.3g}, and sigma points that far out can reach "
            "a nonlinear connection's enormous forces. Give state_sd the size of the motion you expect "
            "(e.g. 1e-3 for millimetres)."
        )
    raise DivergenceError(
        _diverged_message(
            f"subsystem {name!r} at step {step}{when}",
            kinds + "; probabilistic messages add their covariance to Q",
            runaway,
        )
        + early
        + also
    )


def unpack_moments(compiled: Compiled, numbers: Numbers, outs: Any) -> dict[str, tuple[Any, Any, Any]]:
    """Each subsystem's means and standard deviations over t_0..t_T and step log-likelihoods (t_1..t_T).

    The standard deviations are the row norms of the square-root factors: no covariance is formed.
    """
    means, chols, _, _, ll = jax.tree_util.tree_map(np.asarray, outs[:5])  # index on the host
    out: dict[str, tuple[Any, Any, Any]] = {}
    for gi, g in enumerate(compiled.groups):
        x0, P0 = np.asarray(numbers.groups[gi]["x0"]), np.asarray(numbers.groups[gi]["P0"])
        x0 = x0[:, : P0.shape[-1]]  # without a learned node's memory
        sds = np.sqrt(np.einsum("...ij,...ij->...i", chols[gi], chols[gi]))
        for j, i in enumerate(g.members):
            sd0 = np.sqrt(np.maximum(np.diagonal(P0[j]), 0.0))
            out[compiled.names[i]] = (
                np.concatenate([x0[j][None], means[gi][:, j]]),
                np.concatenate([sd0[None], sds[:, j]]),
                ll[gi][:, j],
            )
    return out


def _subsystem_estimate(
    name: str, sub: Subsystem | None, times: Any, means: Any, stds: Any, **fields: Any
) -> Estimate:
    """One subsystem's rows t_0..t_T as an :class:`Estimate` of its own columns.

    The columns are the subsystem's ``names`` (its estimated states; ``"<name>[i]"`` without ``sub``),
    its unknown parameters among them; times are ``times`` or the step numbers 0..T.
    """
    k = np.shape(means)[1]
    names = sub.names[:k] if sub is not None else tuple(f"{name}[{i}]" for i in range(k))
    t = np.arange(np.shape(means)[0], dtype=np.float64) if times is None else np.asarray(times)
    parameters = () if sub is None else tuple(p for p in sub.parameters if p in names)
    return Estimate(t, means, stds, state_names=tuple(names), parameters=parameters, **fields)


def unpack(
    compiled: Compiled,
    numbers: Numbers,
    outs: Any,
    subs: Mapping[str, Subsystem] | None = None,
    times: Any = None,
) -> dict[str, Estimate]:
    """Split the stacked outputs of ``compiled.scan`` into one :class:`Estimate` per subsystem, by name.

    Each holds its subsystem's means, standard deviations (the row norms of the square-root factors, as
    :func:`unpack_moments`) and covariances over t_0..t_T (row 0 its prior), its one-step predicted
    ``pred_means``/``pred_covs``, its log-likelihood with its terms ``step_logliks`` and its
    ``step_nis`` over t_1..t_T. Columns are named by ``subs`` (the graph's subsystems by name;
    ``"<subsystem>[i]"`` without), times are ``times`` (t_0..t_T) or the step numbers.

    Raises:
        ValueError: for moments that are not an estimate's (a diverged run: check it first with
            :func:`_check_divergence`).

    """
    moments = unpack_moments(compiled, numbers, outs)
    _, chols, pm, pchols, _, nis = jax.tree_util.tree_map(np.asarray, outs)  # index on the host
    gram = lambda c: np.einsum("...ij,...kj->...ik", c, c)  # noqa: E731
    covs, pc = [gram(c) for c in chols], [gram(c) for c in pchols]
    out: dict[str, Estimate] = {}
    for gi, g in enumerate(compiled.groups):
        P0 = np.asarray(numbers.groups[gi]["P0"])
        for j, i in enumerate(g.members):
            name = compiled.names[i]
            means, stds, ll = moments[name]
            out[name] = _subsystem_estimate(
                name,
                None if subs is None else subs[name],
                times,
                means,
                stds,
                covs=np.concatenate([P0[j][None], covs[gi][:, j]]),
                loglik=float(np.sum(ll)),
                pred_means=pm[gi][:, j],
                pred_covs=pc[gi][:, j],
                step_logliks=ll,
                step_nis=nis[gi][:, j],
            )
    return out


def field_moments(compiled: Compiled, means: Any, stds: Any) -> dict[str, tuple[Any, Any]]:
    """Split the per-group outputs of a field graph's ``scan`` by subsystem, the prior prepended.

    Each subsystem's ``(means, stds)`` over t_0..t_T: the bare arrays that :func:`field_estimates`
    wraps and a graph's merged estimate reads (a network of thousands of subsystems need not build an
    estimate for each on the way).
    """
    means, stds = jax.tree_util.tree_map(np.asarray, (means, stds))
    out = {}
    for gi, g in enumerate(compiled.groups):
        arr = compiled.numbers.groups[gi]
        x0 = np.asarray(arr["x0"])
        sd0 = np.sqrt(np.diagonal(np.asarray(arr["P0"]), axis1=1, axis2=2))
        for j, i in enumerate(g.members):
            out[compiled.names[i]] = (
                np.concatenate([x0[j][None], means[gi][:, j]]),
                np.concatenate([sd0[j][None], stds[gi][:, j]]),
            )
    return out


def field_estimates(
    compiled: Compiled,
    means: Any,
    stds: Any,
    subs: Mapping[str, Subsystem] | None = None,
    times: Any = None,
) -> dict[str, Estimate]:
    """A field graph's filtered means and standard deviations, one :class:`Estimate` per subsystem.

    Over t_0..t_T (row 0 the prior), without covariances or a log-likelihood (the field engine keeps the
    marginals only); columns and times as :func:`unpack`.
    """
    return {
        name: _subsystem_estimate(name, None if subs is None else subs[name], times, m, sd, covs=None)
        for name, (m, sd) in field_moments(compiled, means, stds).items()
    }
