"""One subsystem's step inside a graph: its estimator on its own model, with its incoming messages.

A subsystem's transition and output read the aggregated (summed) message vector ``m``. A probabilistic
message under the paper's rule enters as extra process noise ``G cm G^T``, ``G = d x_{n+1} / d m``
(S40-S44), ``cm`` the positive increment of the law's variance (S46). A ``"split"`` interface is
evaluated by the receiver itself, at each of its sigma points and integrator stages, the sender read on
a line from its mean to its predicted mean; a probabilistic one makes the sender's error a consider
state of the receiver (Schmidt 1966), reset after every update (:func:`_schmidt`). The rules, their
derivation and the measurements that chose them are in ``docs/design-messages.md``.

References:
    Ghorbani & Hackl, SI (S30)-(S46) (probabilistic messages), Alg. 4-6 (the local KF, EKF and UKF).
    S. F. Schmidt, "Application of state-space methods to navigation problems", Adv. Control Syst. 3,
    1966; Brown & Hwang, *Introduction to Random Signals and Applied Kalman Filtering*, 4th ed., sec. 9.4
    (consider states).

"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from twinfer.infer.filters import gaussian_filter, ukf_step
from twinfer.infer.filters._wls import STATIC_STEPS
from twinfer.infer.gaussian import UnscentedWeights, cholesky, linear, predict, taylor, tria
from twinfer.infer.graph._numbers import _columns, _Template
from twinfer.sim import integrator_step, substep_loop

_UT = UnscentedWeights.merwe(1.0, 2.0, 0.0)


def _psd_part(a: Any) -> Any:
    """Positive part of a symmetric matrix (max(0, .) for scalars): the incremental rule S46."""
    if a.shape[-1] == 1:
        return jnp.maximum(a, 0.0)
    w, v = jnp.linalg.eigh(0.5 * (a + a.T))
    return (v * jnp.maximum(w, 0.0)) @ v.T


def _psd_root(a: Any) -> Any:
    """A square factor ``F F^T = a`` of a positive semi-definite matrix (sqrt for scalars)."""
    if a.shape[-1] == 1:
        return jnp.sqrt(jnp.maximum(a, 0.0))
    w, v = jnp.linalg.eigh(0.5 * (a + a.T))
    return v * jnp.sqrt(jnp.maximum(w, 0.0))[None, :]


def _psd_root_pinv(a: Any) -> Any:
    """The pseudo-inverse of :func:`_psd_root`'s factor: ``F^+`` with ``F^+ F`` the projector on its range."""
    if a.shape[-1] == 1:
        return jnp.where(a > 0, 1.0 / jnp.sqrt(jnp.where(a > 0, a, 1.0)), 0.0)
    w, v = jnp.linalg.eigh(0.5 * (a + a.T))
    keep = w > 1e-12 * jnp.max(jnp.abs(w))
    inv = jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, w, 1.0)), 0.0)
    return (v * inv[None, :]).T


def _local_step(
    tmpl: _Template,
    arr: dict[str, Any],
    x: Any,
    chol: Any,
    u_all: Any,
    y_all: Any,
    mask_all: Any,
    m: Any,
    cm: Any,
    laws: tuple[tuple[Callable[..., Any], int, bool], ...] = (),
    split: tuple[Any, ...] = (),
    n_z: int = 0,
):
    """One predict/update of one subsystem with message mean ``m`` and message covariance ``cm``.

    The probabilistic messages enter as extra process noise ``G cm G^T`` (G = d x_next / d m, S40-S44),
    appended to the factor of Q as ``G F`` with ``F F^T = cm``. ``split`` edges (rule ``"split"``, one
    table per law in ``laws``: senders' interface means, gammas, the port's local state indices and
    slots, validity, the sender's port factor) add ``law(s_j, x[port])`` to ``m`` at every sigma point
    and integrator stage. The last ``n_z`` entries of ``x`` are the consider states of probabilistic
    split edges, which read the sender at ``s_j + L_j z``: after the
    update their mean is reset to 0 and their covariance to I, keeping their cross-covariance with the
    state (:func:`_schmidt`).
    Returns filtered and predicted means and lower factors, the log-likelihood increment and the
    normalised innovation squared of the update (:func:`_estimator_step`).
    """
    half = u_all.shape[0] // 2  # the step's input pair: held over the step, read with y (step_inputs)
    u, u_meas = _columns(u_all[:half], arr["inputs"]), _columns(u_all[half:], arr["inputs"])
    seen = arr["outputs"] >= 0  # -1: an output never measured (not the data's last column)
    safe = jnp.where(seen, arr["outputs"], 0)
    y, mask = y_all[safe], seen & mask_all[safe]
    params = arr["params"]

    fm, hm = _split_model(tmpl, params, m, laws, split, n_z)
    f = lambda xx, uu: fm(xx, uu, m)  # noqa: E731
    h = lambda xx, uu: hm(xx, u_meas, m)  # noqa: E731  (the measurement's own input)
    chol_q, chol_r = arr["chol_Q"], arr["chol_R"]
    if n_z:  # no process noise on the consider states
        chol_q = jnp.concatenate([chol_q, jnp.zeros((n_z, chol_q.shape[1]), chol_q.dtype)], axis=0)
    n_est = x.shape[0] - tmpl.memory
    if tmpl.n_msg:
        gain = jax.jacfwd(lambda mm: fm(x, u, mm)[:n_est])(m)  # d x_next / d m (S40-S44)
        chol_q = jnp.concatenate([chol_q, gain @ _psd_root(cm)], axis=1)
    if tmpl.estimator == "learned":  # the prediction; its own error Q (and injected message noise)
        mean = f(x, u)
        chol_p = tria(chol_q)
        zero = jnp.zeros((), x.dtype)
        return mean, chol_p, mean, chol_p, zero, zero
    res = _estimator_step(tmpl, f, h, x, chol, chol_q, chol_r, u, y, mask)
    if not n_z:
        return res
    return (*_schmidt(res[0], res[1], n_z, tmpl.estimator == "ukf"), *res[2:])


def _estimator_step(tmpl: _Template, f, h, x, chol, chol_q, chol_r, u, y, mask) -> tuple[Any, ...]:
    """The subsystem's estimator on ``f``, ``h``: filtered and predicted means and factors, loglik, NIS.

    The NIS is the update's own ``v^T S^-1 v`` over the observed outputs (the filters compute it with
    the log-likelihood); 0 for the estimators without a predicted innovation covariance (``"none"``,
    the static ``"wls"``/``"wnls"``), which :data:`~twinfer.infer.graph._results.NIS_ESTIMATORS` leaves
    out of the consistency check.
    """
    zero = jnp.zeros((), x.dtype)
    if tmpl.estimator == "none":
        jac = jax.jacfwd(lambda xx: f(xx, u))(x)
        mean, chol_p = predict(x, chol, jac, f(x, u) - jac @ x, chol_q)
        return mean, chol_p, mean, chol_p, zero, zero
    if tmpl.estimator == "ukf":
        out = ukf_step(
            f, h, x, chol, chol_q, chol_r, u, y, mask, weights=tmpl.weights, innovation=tmpl.innovation
        )
        return out.mean, out.chol, out.pred_mean, out.pred_chol, out.loglik, _nis_of(out.nis, zero)
    if tmpl.estimator in STATIC_STEPS:  # the static baselines: no covariance carried, P kept
        step = STATIC_STEPS[tmpl.estimator]
        w = step(f, h, x, chol_q @ chol_q.T, chol_r @ chol_r.T, u, y, mask, innovation=tmpl.innovation)
        jac = jax.jacfwd(lambda xx: f(xx, u))(x)
        mean_p, chol_p = predict(x, chol, jac, f(x, u) - jac @ x, chol_q)
        return w.mean, cholesky(w.cov), mean_p, chol_p, zero, zero
    lin = linear if tmpl.estimator == "kf" else taylor
    observed = (mask & jnp.isfinite(y))[None]
    out = gaussian_filter(f, h, x, chol, chol_q, chol_r, u[None], y[None], observed, linearisation=lin)
    # the scan's NIS is its mean over the observed values; one step's sum is that times their count
    nis = _nis_of(out.nis, zero) * jnp.sum(mask.astype(x.dtype))
    pred_means, pred_chols = out.pred_means, out.pred_chols
    if pred_means is None or pred_chols is None:  # gaussian_filter always keeps them
        raise ValueError("local step: expected gaussian_filter's predicted moments; received None.")
    return out.means[0], out.chols[0], pred_means[0], pred_chols[0], out.loglik, nis


def _nis_of(nis: Any, zero: Any) -> Any:
    """A step's NIS (``None`` from an atom that does not compute it reads as 0)."""
    return zero if nis is None else jnp.asarray(nis, zero.dtype)


def _schmidt(mean: Any, chol: Any, n_z: int, triangular: bool) -> tuple[Any, Any]:
    """The Schmidt (consider) posterior from the optimal one: the last ``n_z`` states keep their prior.

    The consider states z ~ N(0, I) are never estimated: the gain's rows for them are zero, so the
    state's mean and covariance and its cross-covariance with z are the optimal update's, and z keeps
    mean 0 and covariance I. With the lower factor ``[[L_x, 0], [C, L_z]]`` of the optimal posterior
    (``P_zx = C L_x^T``) that is the factor ``[[L_x, 0], [C, F]]`` with ``F F^T = I - C C^T``, positive
    semi-definite because the Schmidt covariance is (Schmidt 1966; Brown & Hwang, *Introduction to
    Random Signals and Applied Kalman Filtering*, 4th ed., sec. 9.4).
    """
    n = mean.shape[0] - n_z
    low = chol if triangular else tria(chol)
    c = low[n:, :n]
    rest = _psd_root(jnp.eye(n_z, dtype=low.dtype) - c @ c.T)
    return mean.at[n:].set(0.0), low.at[n:, n:].set(rest)


def _split_model(
    tmpl: _Template,
    params: Any,
    m: Any,
    laws: tuple[tuple[Callable[..., Any], int, bool], ...],
    split: tuple[Any, ...],
    n_z: int = 0,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``fm(x, u, mm)`` and ``hm(x, u, mm)``: the subsystem with the ``"split"`` edges' laws inside.

    A split edge's sender enters through its interface means at the step's start ``a0`` and predicted at
    its end ``a1``, read at the fraction ``tau`` of the step as ``a0 + tau (a1 - a0)``; the law is
    evaluated with the receiver's own state at each integrator stage (``tau`` the stage's time) when the
    subsystem carries its :class:`~twinfer.sim.Dynamics`, else once at the start and held; the output
    reads it at ``tau = 1``. A probabilistic split edge's sender is read at ``a + L_s z`` with ``L_s``
    the factor of the sender's port covariance and ``z`` its consider states, the last ``n_z`` entries
    of ``xx`` (carried unchanged by ``fm``).
    """

    def own(xx: Any, zz: Any, tau: Any) -> Any:
        out = jnp.zeros_like(m)
        for (law, z0, shared), (a0, a1, gamma, ridx, slots, valid, chol_s, reg, r0, r1) in zip(
            laws, split, strict=True
        ):
            a = a0 + tau * (a1 - a0)
            if shared:  # the part of the sender's error correlated with the receiver's (rule "shared")
                own_dev = xx[ridx] - (r0 + tau * (r1 - r0))  # (J, p_r) this sigma point off the mean path
                a = a + jnp.einsum("jpq,jq->jp", reg, own_dev)
            if z0 >= 0:  # the sender's error (the rest of it with rule "shared")
                a = a + jnp.einsum("jpq,jq->jp", chol_s, zz[z0 : z0 + a.size].reshape(a.shape))
            vals = jax.vmap(lambda aa, g, ri, law=law: jnp.atleast_1d(law(aa, xx[ri], g)))(a, gamma, ridx)
            out = out.at[slots].add(vals * valid[:, None])
        return out

    dyn = tmpl.dynamics
    if not laws:
        return (
            lambda xx, uu, mm: tmpl.transition(xx, uu, mm, params),
            lambda xx, uu, mm: tmpl.output(xx, uu, mm, params),
        )

    def parts(xx: Any) -> tuple[Any, Any]:
        n = xx.shape[0] - n_z
        return xx[:n], xx[n:]

    def fm(xx: Any, uu: Any, mm: Any) -> Any:
        x, zz = parts(xx)
        if dyn is None:  # the law at the state the step starts from, held over the step
            x = tmpl.transition(x, uu, mm + own(x, zz, 0.0), params)
        else:  # the law at every stage of the subsystem's own integrator
            d = dyn
            rhs = lambda t, w: d.vector_field(w, uu, mm + own(w, zz, t / d.dt), params)  # noqa: E731
            step, h = integrator_step(d.method), d.dt / d.substeps
            x = substep_loop(lambda j, w, step=step, rhs=rhs, h=h: step(rhs, j * h, w, h), x, d.substeps)
        return jnp.concatenate([x, zz]) if n_z else x

    def hm(xx: Any, uu: Any, mm: Any) -> Any:
        x, zz = parts(xx)
        return tmpl.output(x, uu, mm + own(x, zz, 1.0), params)

    return fm, hm


def _predict_mean(
    tmpl: _Template, arr: dict[str, Any], x: Any, u_all: Any, m: Any, laws: Any, split: Any, n_z: int
):
    """The mean stepped once with the messages held (split senders held at their start): ``a1``'s source."""
    fm, _ = _split_model(tmpl, arr["params"], m, laws, split, n_z)
    return fm(x, _columns(u_all, arr["inputs"]), m)


def law_moments(law: Callable[..., Any], gamma: Any, mean: Any, cov: Any, n_send: int) -> tuple[Any, Any]:
    """Mean and covariance of an interface message ``law(s_send, s_recv, gamma)`` under a Gaussian.

    ``mean`` and ``cov`` are those of the concatenated ports ``[s_send, s_recv]`` (the first ``n_send``
    entries the sender's), so a joint posterior's cross-covariance between the two ports is used where
    an estimator keeps it; a distributed one gives the block-diagonal of its subsystems' (the
    probabilistic message's own assumption, S33). Unscented (Merwe alpha 1, beta 2, kappa 0): exact for
    a linear law, where the variance is ``a^T P a`` (S33). Batch over time with ``jax.vmap``.
    """
    fn = lambda zz: jnp.atleast_1d(law(zz[:n_send], zz[n_send:], gamma))  # noqa: E731
    pts, wm, wc = _UT.sigma_points(mean, cholesky(0.5 * (cov + cov.T)))
    vals = jax.vmap(fn)(pts)
    centre = wm @ vals
    d = vals - centre
    return centre, (d.T * wc) @ d


@functools.partial(jax.jit, static_argnames=("law", "n_send"))
def law_moments_series(
    law: Callable[..., Any], gamma: Any, means: Any, covs: Any, n_send: int
) -> tuple[Any, Any]:
    """:func:`law_moments` at every row of ``means`` (T, p) and ``covs`` (T, p, p), compiled once.

    One program per law and shape: run op by op, the batch cost 2 s of dispatch on a cold start.
    """
    return jax.vmap(lambda m, c: law_moments(law, gamma, m, c, n_send))(means, covs)
