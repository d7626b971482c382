"""Results of the chain graphs: the 4-DOF chain's estimators and Table S1, the 6-DOF chain's defects.

The 4-DOF chain (section 3.1) is cut into S1 = masses {1, 2} (state ``[x1, x2, v1, v2]``) and S2 = masses
{3, 4} with k4 augmented (``[x3, x4, v3, v4, k4]``); its central filter runs the monolithic model, the two
states one after the other. :func:`chain4_estimates` reorders either into the truth's ``[x1..x4, v1..v4,
k4]``, :func:`chain4_interface_force` pushes the interface ports' moments through the estimator's law
(Fig. 2e) and :func:`chain4_scores` gives Table S1's row. For the 6-DOF chain (section 3.4),
:func:`score_parameters` scores the states and the unknown parameters of an estimate and
:func:`defect_shares` gives the interface weights and the defects' shares per subsystem (S60-S70).

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource for coupled engineered systems",
    SI eq. (S20)-(S24), (S33), Table S1, Fig. 2; section 3.4, eq. (S51)-(S70);
    specs/compositional-inference.md 3.1, 3.4 and section 5 [REPO].

"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np

from twinfer import metrics
from twinfer.infer.graph._diffusion import diffuse
from twinfer.infer.graph._local import law_moments_series
from twinfer.learn import library_law
from twinfer.models import SpringNetwork, defects_along
from twinfer.models.chain import spring_damper_force

CHAIN4_TRUTH_ORDER = np.array([0, 1, 4, 5, 2, 3, 6, 7])
"""``[x1, x2, v1, v2, x3, x4, v3, v4]`` (the graph's order) -> the truth's ``x1..x4, v1..v4``."""
NLL_JITTER = 1e-12
"""Added to every predictive covariance before the NLL: the authors' ``gaussian_nll_vector`` starts its
Cholesky retries at ``cov + 1e-12 I``, not at ``cov`` (section 5 [REPO]). It matters only for the
deterministic filter, whose predictive variances (Q = 1e-18) are far below 1e-12."""


def chain4_estimates(name: str, res: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """One estimator's ``mean``/``var``/``pred_mean``/``pred_cov`` in the truth's state order.

    Args:
        name: ``"central"`` (one subsystem ``central`` with the monolithic state) or a distributed
            estimator (subsystems ``S1`` and ``S2``).
        res: the unpacked per-subsystem results (``means``, ``covs``, ``pred_means``, ``pred_covs``).

    Returns:
        ``mean``/``var`` (N+1, 9) in the order [x1..x4, v1..v4, k4], ``pred_mean`` (N, 8) and
        ``pred_cov`` (N, 8, 8); a distributed estimator's predictive covariance is block-diagonal
        (section 5 [REPO]).

    """
    parts = [res["central"]] if name == "central" else [res["S1"], res["S2"]]
    mean = np.concatenate([p.means for p in parts], axis=1)
    var = np.concatenate([np.diagonal(p.covs, axis1=1, axis2=2) for p in parts], axis=1)
    pm = np.concatenate([p.pred_means for p in parts], axis=1)
    if name == "central":
        pc = parts[0].pred_covs
    else:
        pc = np.zeros(pm.shape + (9,))
        pc[:, :4, :4] = parts[0].pred_covs
        pc[:, 4:, 4:] = parts[1].pred_covs  # block-diagonal assembly (section 5 [REPO])
    order = np.concatenate([CHAIN4_TRUTH_ORDER, [8]])
    return {
        "mean": mean[:, order],
        "var": var[:, order],
        "pred_mean": pm[:, CHAIN4_TRUTH_ORDER],
        "pred_cov": pc[:, CHAIN4_TRUTH_ORDER][:, :, CHAIN4_TRUTH_ORDER],
    }


def chain4_interface_force(name: str, res: Mapping[str, Any], xi: Any) -> tuple[np.ndarray, np.ndarray]:
    """The message F_msg = F(x2 - x3, v2 - v3) with its sd over t_0..t_T under one estimator (Fig. 2e).

    The ports ``[x2, v2]`` (sender S1) and ``[x3, v3]`` (receiver S2) with the estimator's joint covariance:
    the central filter's cross-covariances, the distributed filters' block-diagonal (S33); the estimator's
    own law ``xi`` over the SINDy library (:func:`twinfer.learn.library_law`) through
    :func:`twinfer.infer.graph._local.law_moments_series`.

    Returns:
        The message's mean and sd, each (N+1,).

    """
    if name == "central":  # the monolithic state is S1's [x1, x2, v1, v2] then S2's [x3, x4, v3, v4, k4]
        whole = res["central"]
        idx = [1, 3, 4, 6]
        mean, cov = whole.means[:, idx], whole.covs[:, idx][:, :, idx]
    else:
        s1, s2 = res["S1"], res["S2"]
        mean = np.concatenate([s1.means[:, [1, 3]], s2.means[:, [0, 2]]], axis=1)
        cov = np.zeros(mean.shape + (4,))
        cov[:, :2, :2] = s1.covs[:, [1, 3]][:, :, [1, 3]]
        cov[:, 2:, 2:] = s2.covs[:, [0, 2]][:, :, [0, 2]]
    xi = jnp.asarray(xi)
    m, v = law_moments_series(library_law, xi, jnp.asarray(mean), jnp.asarray(cov), 2)
    return np.asarray(m[:, 0]), np.sqrt(np.maximum(np.asarray(v[:, 0, 0]), 0.0))


def chain4_scores(
    name: str,
    times: np.ndarray,
    truth: np.ndarray,
    force_truth: np.ndarray,
    est: Mapping[str, np.ndarray],
    stiffness: float,
    state_window_start: float,
    param_window_start: float,
) -> dict[str, float]:
    """Table S1's row of one estimator: state RMSE, k4 NRMSE, coverage and NLL (section 5 [REPO]).

    The keys are ``<name>.state_rmse``, ``k4_nrmse``, ``coverage95``, ``coverage68``, ``nll`` and the
    interface message's ``fmsg_rmse``, ``fmsg_coverage95`` and ``fmsg_sd_mean`` (Fig. 2e). States
    are scored over ``t >= state_window_start``, k4 (truth ``stiffness``) over ``t >=
    param_window_start``; the NLL is of the truth under the one-step predictive densities, each
    covariance with :data:`NLL_JITTER` added.

    Args:
        name: the metrics' prefix.
        times: the record's times (N+1,).
        truth: the true states (N+1, 8) in the order x1..x4, v1..v4.
        force_truth: the true interface force (N+1,) (eq. S24), scored over the states' window.
        est: :func:`chain4_estimates`' arrays with :func:`chain4_interface_force`'s ``fmsg_mean`` and
            ``fmsg_sd``.
        stiffness: the true k4.
        state_window_start: the states' window start [s].
        param_window_start: k4's window start [s].

    """
    win, pwin = times >= state_window_start, times >= param_window_start
    mean, std = est["mean"][:, :8], np.sqrt(np.maximum(est["var"][:, :8], 1e-300))
    f_mean, f_sd = est["fmsg_mean"][win], np.maximum(est["fmsg_sd"][win], 1e-300)
    return {
        f"{name}.state_rmse": float(metrics.rmse(mean[win], truth[win])),
        f"{name}.k4_nrmse": float(metrics.nrmse_constant(est["mean"][pwin, 8], stiffness)),
        f"{name}.coverage95": metrics.coverage(mean[win], std[win], truth[win], z=1.959963984540054),
        f"{name}.coverage68": metrics.coverage(mean[win], std[win], truth[win], z=1.0),
        f"{name}.nll": metrics.gaussian_nll(
            est["pred_mean"][win[1:]],
            est["pred_cov"][win[1:]] + NLL_JITTER * np.eye(8),
            truth[1:][win[1:]],
            jitter=True,
        ),
        f"{name}.fmsg_rmse": float(metrics.rmse(f_mean, force_truth[win])),
        f"{name}.fmsg_coverage95": metrics.coverage(f_mean, f_sd, force_truth[win], 0.95),
        f"{name}.fmsg_sd_mean": float(np.mean(f_sd)),
    }


def score_parameters(
    label: str,
    est: Any,
    truth: np.ndarray,
    values: Mapping[str, float],
    tracked: Sequence[str],
    out: dict[str, float],
) -> None:
    """States and unknown parameters of an estimate against the truth: ``{label}.*`` into ``out``.

    The RMSE and 95 % coverage over the first ``truth.shape[1]`` states (the coverage from the first step
    on), the RMSE of each ``tracked`` state, and per parameter of ``values`` (its truth) the final value,
    sd, relative error, trajectory NRMSE and whether the final 95 % interval holds the truth, with the
    fraction of parameters that it holds (``params_in95``).

    Args:
        label: the metrics' prefix.
        est: the estimate (``means``, ``stds``, ``state_names``, ``interval``).
        truth: the true states (T, n), the estimate's first n columns.
        values: each unknown parameter's truth.
        tracked: the states whose own RMSE is reported.
        out: where the scores go.

    References:
        Ghorbani & Hackl, SI section 3.4, Figs S5-S6; specs/compositional-inference.md 3.4.

    """
    means, stds = np.asarray(est.means), np.asarray(est.stds)
    states = slice(0, truth.shape[1])
    out[f"{label}.state_rmse"] = float(metrics.rmse(means[:, states], truth))
    out[f"{label}.coverage95"] = metrics.coverage(means[1:, states], stds[1:, states], truth[1:])
    for s in tracked:
        j = est.state_names.index(s)
        out[f"{label}.rmse_{s}"] = float(metrics.rmse(means[:, j], truth[:, j]))
    inside = []
    for p, value in values.items():
        j = est.state_names.index(p)
        lo, hi = est.interval(p, 0.95)
        out[f"{label}.{p}"] = float(means[-1, j])
        out[f"{label}.{p}.sd"] = float(stds[-1, j])
        out[f"{label}.{p}.rel_err"] = float(means[-1, j] / value - 1.0)
        out[f"{label}.{p}.nrmse"] = float(metrics.nrmse_constant(means[:, j], value))
        inside.append(lo <= value <= hi)
        out[f"{label}.{p}.in95"] = float(inside[-1])
    out[f"{label}.params_in95"] = float(np.mean(inside))


def defect_shares(
    model: SpringNetwork,
    states: np.ndarray,
    inputs: np.ndarray,
    unknown: Sequence[str],
    final: Mapping[str, float],
    links: Sequence[tuple[int, int]],
    defects: Sequence[str],
    mass: int,
    labels: Sequence[str],
    method: Literal["one_hop", "heat"],
    alpha: float,
    beta: float,
) -> dict[str, Any]:
    """Interface weights, the defects and their shares at every subsystem (S60-S70), from estimates.

    The interface forces of ``links`` (:meth:`~twinfer.models.SpringNetwork.link_forces`) at the
    estimated ``states`` give the weights (their RMS) between consecutive ``labels``; the removed terms of
    ``defects`` at the estimated states with the terminal parameters ``final``
    (:meth:`~twinfer.models.SpringNetwork.parameter_forces`, on ``mass``) the defects, each spread from the
    middle subsystem ``labels[1]`` by :func:`twinfer.infer.graph._diffusion.diffuse` (``method``, with
    ``alpha`` and ``beta``).

    Returns:
        ``{"weights": {(a, b): rms force}, "shares": {defect: {label: share (T,)}}}``.

    """
    estimates = jnp.asarray([final[p] for p in unknown])
    forces, removed = defects_along(
        model, jnp.asarray(states), jnp.asarray(inputs), tuple(unknown), estimates, tuple(links),
        tuple(defects), mass,
    )  # fmt: skip
    forces, removed = np.asarray(forces), np.asarray(removed)
    weights = {(labels[0], labels[1]): float(np.sqrt(np.mean(forces[:, 0] ** 2)))}
    weights[(labels[1], labels[2])] = float(np.sqrt(np.mean(forces[:, 1] ** 2)))
    shares = {
        d: diffuse(tuple(labels), weights, labels[1], removed[:, i], method, alpha=alpha, beta=beta)
        for i, d in enumerate(defects)
    }
    return {"weights": weights, "shares": shares}


def envelope_scores(
    results: Mapping[str, Mapping[str, Any]],
    est: Any,
    truth: np.ndarray,
    watched: Mapping[str, str],
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The diffusion envelopes ``x +- s_V sigma_x`` around a distributed estimate, scored (S60-S70).

    For every propagation method and defect of ``results`` (:func:`defect_shares`' values by method) and
    every watched state (``watched``: state -> the subsystem whose share widens it), the envelope's
    half-width is the subsystem's share times the state's final posterior sd ``sigma_x``.

    Args:
        results: :func:`defect_shares` per method (``one_hop``, ``heat``).
        est: the distributed estimate (``means``, ``stds``, ``state_names``).
        truth: the true states (T, n), in the estimate's first columns' order.
        watched: the watched states and their subsystems (``{"x1": "V1", "x6": "V2"}``).

    Returns:
        The metrics ``sigma_<x>`` and ``diffusion.<method>.<defect>.<x>.halfwidth_median``,
        ``halfwidth_over_sd`` (over the state's median sd) and ``truth_inside`` (the fraction of steps
        whose error lies inside the envelope); and the half-widths as arrays
        ``envelope.<method>.<defect>.<x>``.

    References:
        Ghorbani & Hackl, SI section 3.4, eq. (S60)-(S70), Fig. S7.

    """
    means, stds = np.asarray(est.means), np.asarray(est.stds)
    names = list(est.state_names)
    sigma = {s: float(stds[-1, names.index(s)]) for s in watched}
    metrics = {f"sigma_{s}": v for s, v in sigma.items()}
    arrays = {}
    for method, res in results.items():
        for defect, shares in res["shares"].items():
            for s, sub in watched.items():
                j = names.index(s)
                half = shares[sub] * sigma[s]
                key = f"{method}.{defect}.{s}"
                arrays[f"envelope.{key}"] = half
                metrics[f"diffusion.{key}.halfwidth_median"] = float(np.median(half))
                metrics[f"diffusion.{key}.halfwidth_over_sd"] = float(
                    np.median(half) / np.median(stds[1:, j])
                )
                metrics[f"diffusion.{key}.truth_inside"] = float(
                    np.mean(np.abs(truth[1:, j] - means[1:, j]) <= half[1:])
                )
    return metrics, arrays


def scaling_scores(
    prefix: str, est: Any, truth: np.ndarray, unknown: Iterable[str], truth_k: np.ndarray
) -> dict[str, float]:
    """A chain estimate's state RMSE, coverage (all, positions, velocities) and stiffness scores.

    ``{prefix}.rmse`` and ``coverage95`` over the first ``truth.shape[1]`` states (positions then
    velocities), ``coverage95_x`` and ``coverage95_v`` over each half, ``k_nrmse`` (the mean over the
    ``unknown`` stiffnesses of their trajectory NRMSE against ``truth_k``) and ``k_in95`` (the fraction
    whose final 95 % interval holds the truth).

    References:
        Ghorbani & Hackl, SI section 3.3 and Fig. S4; issue #22 (calibration at every size).

    """
    means, stds = np.asarray(est.means), np.asarray(est.stds)
    half = truth.shape[1] // 2
    states = slice(0, 2 * half)
    out = {
        f"{prefix}.rmse": float(metrics.rmse(means[:, states], truth)),
        f"{prefix}.coverage95": metrics.coverage(means[1:, states], stds[1:, states], truth[1:]),
    }
    for part, cols_part in (("x", slice(0, half)), ("v", slice(half, 2 * half))):
        out[f"{prefix}.coverage95_{part}"] = metrics.coverage(
            means[1:, cols_part], stds[1:, cols_part], truth[1:, cols_part]
        )
    cols = [est.state_names.index(k) for k in unknown]
    out[f"{prefix}.k_nrmse"] = float(np.mean(metrics.nrmse_constant(means[:, cols], truth_k)))
    out[f"{prefix}.k_in95"] = metrics.coverage(means[-1:, cols], stds[-1:, cols], truth_k[None, :])
    return out


def diffusion_weights(heat: Mapping[str, Any], labels: Sequence[str], defect: str) -> dict[str, float]:
    """The interface weights' shares and one defect's heat-kernel column (S60-S70).

    ``heat`` is :func:`defect_shares`' value for the heat kernel. ``diffusion.eta<ab>`` is each interface's
    share of the total weight (``eta13`` between ``labels[0]`` and ``labels[1]``, ``eta23`` between
    ``labels[1]`` and ``labels[2]``); ``diffusion.heat_column.<label>`` each subsystem's share of the
    defect's magnitude ``|delta f|`` (the sum of the shares), the same fraction at every step.
    """
    weights = heat["weights"]
    total = sum(weights.values())
    out = {
        "diffusion.eta13": weights[(labels[0], labels[1])] / total,
        "diffusion.eta23": weights[(labels[1], labels[2])] / total,
    }
    shares = heat["shares"][defect]
    q = np.sum(np.sum([v for v in shares.values()], axis=0))
    for name in labels:
        out[f"diffusion.heat_column.{name}"] = float(np.sum(shares[name]) / q)
    return out


def chain4_interface_force_truth(states: np.ndarray, stiffness: float, damping: float) -> np.ndarray:
    """The true interface force F = k3 (x2 - x3) + c3 (v2 - v3) over t_0..t_T (eq. S24).

    ``states`` (T, 8) are the 4-DOF chain's ``[x1..x4, v1..v4]``; ``stiffness`` and ``damping`` are k3, c3.
    """
    x = np.asarray(states)
    return np.asarray(spring_damper_force(stiffness, damping, x[:, 1] - x[:, 2], x[:, 5] - x[:, 6]))
