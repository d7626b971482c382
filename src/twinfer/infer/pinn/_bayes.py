"""Second stage of the Bayesian scheme: the posterior of system parameters given frozen PINN states.

With the network frozen, the force it implies (Eq 15) is affine in (c, k, kappa or mu), and the measured
forces give the Gaussian likelihood of Eq 22b; independent Gamma priors (the repository's, specs 3.2) on
the parameters and the noise scale sigma_f complete the posterior of Eq 24. The density is written on
``phi = log(theta)`` (with the log-Jacobian) so NUTS moves on an unconstrained space.

References:
    Haywood-Alexander et al., arXiv:2410.01340, Eq 20-24 and section 4.3.

"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from jaxtyping import Array, ArrayLike, Float

from twinfer.infer.pinn._physics import predicted_force
from twinfer.models import Chain, get_param, set_param_vector

Basis = tuple[Float[ArrayLike, "T p"], Float[ArrayLike, "T p"], Float[ArrayLike, " 2n"]]
"""``(H, dH/dt, offset)`` of :meth:`~twinfer.infer.pinn.StateNetwork.basis` at some times."""


def gamma_logpdf(
    x: Float[Array, "..."] | float,
    concentration: Float[Array, "..."] | float,
    rate: Float[Array, "..."] | float,
) -> Float[Array, "..."]:
    """Log Gamma(x | concentration, rate) (rate parametrisation, as Pyro)."""
    return (
        concentration * jnp.log(rate) - gammaln(concentration) + (concentration - 1) * jnp.log(x) - rate * x
    )


def affine_force(
    chain: Chain, z: Float[ArrayLike, "T 2n"], dz: Float[ArrayLike, "T 2n"], names: Sequence[str]
) -> tuple[Float[np.ndarray, "Tn p"], Float[np.ndarray, " Tn"]]:
    """``(J, f0)`` with ``predicted_force(theta) = f0 + J theta`` exactly (flattened time x DOF).

    With frozen states Eq 15 is affine in (c, k, kappa or mu): the Jacobian at any point is the map.
    """
    z, dz = jnp.asarray(z), jnp.asarray(dz)

    def force_of(theta: Any) -> Any:
        params = set_param_vector(chain.params, names, theta)
        return predicted_force(chain, params, z, dz).ravel()

    theta_ref = jnp.asarray([float(get_param(chain.params, n)) for n in names])
    jac = jax.jacfwd(force_of)(theta_ref)
    return np.asarray(jac), np.asarray(force_of(theta_ref) - jac @ theta_ref)


def force_log_posterior(
    chain: Chain,
    z: Float[ArrayLike, "T 2n"],
    dz: Float[ArrayLike, "T 2n"],
    force_repeats: Float[ArrayLike, "R T n_in"],
    names: Sequence[str],
    priors: Mapping[str, tuple[float, float]],
    sigma_prior: tuple[float, float],
) -> Callable[[Float[Array, " p+1"]], Float[Array, ""]]:
    """``log p(phi | f*)`` up to a constant, with ``phi = log([theta_1..theta_p, sigma_f])``.

    Args:
        chain: the model; parameters not in ``names`` keep its values (the masses, for instance).
        z: (T, 2n) frozen network states at the collocation times.
        dz: (T, 2n) their time derivatives.
        force_repeats: (R, T, n_forced) measured forces of R noisy repeats.
        names: scalar parameter names sampled (``c1``, ``k2``, ``kappa1`` ...).
        priors: ``{name: (concentration, rate)}`` Gamma priors in physical units.
        sigma_prior: Gamma prior of sigma_f [N].

    Returns:
        A pure, jittable function of ``phi`` (p + 1,).

    """
    reps = np.asarray(force_repeats, dtype=np.float64)
    want = (np.shape(z)[0], len(chain.forced_dofs))
    if reps.ndim != 3 or reps.shape[1:] != want:
        raise ValueError(f"force_repeats: expected shape (R, {want[0]}, {want[1]}); received {reps.shape}.")
    missing = [n for n in names if n not in priors]
    if missing:
        raise ValueError(f"priors: expected a Gamma prior for every sampled name; missing {missing}.")
    full = np.asarray(jax.vmap(jax.vmap(chain.external_force))(jnp.asarray(reps)))  # (R, T, n)
    n_rep, n_obs = full.shape[0], full.shape[1] * full.shape[2]
    mean_force = full.mean(axis=0)
    scatter = float(np.sum((full - full.mean(axis=0)) ** 2))
    conc = jnp.asarray([priors[n][0] for n in names] + [sigma_prior[0]])
    rate = jnp.asarray([priors[n][1] for n in names] + [sigma_prior[1]])
    # Eq 15 is affine in (c, k, kappa or mu) once the states are frozen: f(theta) = f0 + J theta exactly,
    # so the Gaussian likelihood reduces to p x p sufficient statistics (no pass over the data per step).
    jac, offset = affine_force(chain, z, dz, names)
    target = mean_force.ravel() - offset
    gram, cross, base = jnp.asarray(jac.T @ jac), jnp.asarray(jac.T @ target), float(target @ target)

    def logdensity(phi: Any) -> Any:
        values = jnp.exp(phi)
        theta, sigma = values[:-1], values[-1]
        resid_sq = base - 2.0 * theta @ cross + theta @ gram @ theta
        # sum over repeats of ||f_r - mu||^2 = R ||mean f - mu||^2 + scatter (Eq 22b)
        sq = n_rep * resid_sq + scatter
        loglik = -0.5 * sq / sigma**2 - n_rep * n_obs * jnp.log(sigma)
        return loglik + jnp.sum(gamma_logpdf(values, conc, rate)) + jnp.sum(phi)

    return logdensity


def layer_log_posterior(
    chain: Chain,
    obs_basis: Basis,
    z_obs: Float[ArrayLike, "To 2n"],
    z_scale: Float[ArrayLike, " 2n"],
    col_basis: Basis,
    force_obs: Float[ArrayLike, "Tc n_in"],
    names: Sequence[str],
    priors: Mapping[str, tuple[float, float]],
    sigma_prior: tuple[float, float],
) -> tuple[Callable[[Float[Array, " q"]], Float[Array, ""]], tuple[int, int]]:
    """``log p(W, phi | z*, f*)`` with the network's output layer ``W`` sampled beside the parameters.

    The network is linear in its output layer (:meth:`StateNetwork.basis`), so with the hidden layers of
    stage 1 frozen, ``z(t) = H(t) W^T + offset`` and ``dz/dt = dH/dt W^T``. The posterior is Eq 24 with the
    states' uncertainty in it (errors in variables, instead of conditioning on the stage-1 states): the
    state likelihood of Eq 23 (measured u, v, Gaussian with the known per-channel scales), the continuity
    ``du/dt = v`` at the collocation times on the velocity scale (the Eq 23 term of stage 1), and the
    force likelihood of Eq 22b with sigma_f free; a flat prior on ``W`` (the data fix it) and the Gamma
    priors on the parameters and sigma_f.

    Args:
        chain: the model; parameters not in ``names`` keep its values (the masses, for instance).
        obs_basis: ``(H, dH, offset)`` of the network at the state-observation times (``dH`` unused).
        z_obs: (To, 2n) measured ``[u, v]`` (mean of the repeats).
        z_scale: (2n,) noise standard deviation of each column of ``z_obs``.
        col_basis: ``(H, dH, offset)`` at the force (collocation) times.
        force_obs: (Tc, n_forced) measured forces (mean of the repeats).
        names: scalar parameter names sampled.
        priors: ``{name: (concentration, rate)}`` Gamma priors in physical units.
        sigma_prior: Gamma prior of sigma_f [N].

    Returns:
        ``(logdensity, (n_state, p))``: a pure, jittable function of ``q = [vec(W), log theta, log
        sigma_f]`` (``W`` row-major, ``n_state * p`` entries) and the shape of ``W``.

    References:
        Haywood-Alexander et al., arXiv:2410.01340, Eq 22-24 (with the last layer free: beyond the paper).

    """
    h_o, off_o = jnp.asarray(obs_basis[0]), jnp.asarray(obs_basis[2])  # its rate is not used
    h_c, dh_c, off_c = (jnp.asarray(a) for a in col_basis)
    z = np.asarray(z_obs, dtype=np.float64)
    n_state, p = 2 * chain.n_dof, int(h_o.shape[1])
    scale = np.asarray(z_scale, dtype=np.float64)
    if z.shape != (h_o.shape[0], n_state):
        raise ValueError(f"z_obs: expected shape {(h_o.shape[0], n_state)}; received {z.shape}.")
    if scale.shape != (n_state,) or not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError(f"z_scale: expected {n_state} finite values > 0; received {scale.tolist()}.")
    if h_c.shape[1] != p or dh_c.shape != h_c.shape:
        raise ValueError(
            f"col_basis: expected H and dH of shape (Tc, {p}); received {h_c.shape}, {dh_c.shape}."
        )
    f = np.asarray(force_obs, dtype=np.float64)
    if f.shape != (h_c.shape[0], len(chain.forced_dofs)):
        raise ValueError(
            f"force_obs: expected shape {(h_c.shape[0], len(chain.forced_dofs))}; received {f.shape}."
        )
    missing = [n for n in names if n not in priors]
    if missing:
        raise ValueError(f"priors: expected a Gamma prior for every sampled name; missing {missing}.")
    full = jnp.asarray(jax.vmap(chain.external_force)(jnp.asarray(f)))  # (Tc, n)
    # the state term is an exact quadratic in W: Gram matrix and cross products, no pass over the data
    target = (z - np.asarray(off_o)) / scale
    gram = jnp.asarray(np.asarray(h_o).T @ np.asarray(h_o))
    cross = jnp.asarray(np.asarray(h_o).T @ target)  # (p, n_state)
    base = float(np.sum(target**2))
    inv_scale = jnp.asarray(1.0 / scale)
    conc = jnp.asarray([priors[n][0] for n in names] + [sigma_prior[0]])
    rate = jnp.asarray([priors[n][1] for n in names] + [sigma_prior[1]])
    n, n_w, n_obs = chain.n_dof, n_state * p, full.size

    def logdensity(q: Any) -> Any:
        w = jnp.reshape(q[:n_w], (n_state, p))
        values = jnp.exp(q[n_w:])
        theta, sigma = values[:-1], values[-1]
        ws = w * inv_scale[:, None]
        sq_obs = base - 2.0 * jnp.sum(ws.T * cross) + jnp.sum((ws @ gram) * ws)
        zc, dzc = h_c @ w.T + off_c, dh_c @ w.T
        sq_cc = jnp.sum(((dzc[:, :n] - zc[:, n:]) * inv_scale[None, n:]) ** 2)
        params = set_param_vector(chain.params, names, theta)
        resid = full - predicted_force(chain, params, zc, dzc)
        loglik = -0.5 * (sq_obs + sq_cc) - 0.5 * jnp.sum(resid**2) / sigma**2 - n_obs * jnp.log(sigma)
        return loglik + jnp.sum(gamma_logpdf(values, conc, rate)) + jnp.sum(q[n_w:])

    return logdensity, (n_state, p)


def layer_estimate(
    basis: Basis,
    times: Float[ArrayLike, " T"],
    layer_samples: Float[ArrayLike, "S q"],
    state_names: Sequence[str],
    parameter_samples: Mapping[str, Float[ArrayLike, " S"]] | None = None,
) -> Any:
    """The posterior of the states (and parameters) from samples of the network's output layer.

    With the hidden layers frozen the state is linear in the output layer, ``z(t) = H(t) W^T + offset``
    (:meth:`~twinfer.infer.pinn.StateNetwork.basis`), so the posterior moments over the samples are
    exact without forming a trajectory per sample: the mean is ``H(t) E[W_i]^T + offset_i`` and the
    variance of state ``i`` is ``H(t) Cov[W_i] H(t)^T`` with ``W_i`` the ``i``-th row of ``W``.

    Args:
        basis: ``(H, dH/dt, offset)`` at ``times`` (T, p).
        times: (T,) times [s] of the rows.
        layer_samples: (S, n_state * p) samples of ``W`` row-major (the ``vec(W)`` part of the
            positions of :func:`layer_log_posterior`), any number of chains flattened.
        state_names: the n_state state names.
        parameter_samples: ``{name: (S,) samples}`` of the parameters, appended as constant columns.

    Returns:
        :class:`twinfer.infer.Estimate` with the states then the parameters as columns (no
        covariances kept).

    Raises:
        ValueError: for shapes that do not agree, naming the argument, the expected and the received.

    """
    from twinfer.infer._estimate import Estimate

    h, off = np.asarray(basis[0], dtype=np.float64), np.asarray(basis[2], dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    n_state, (n_t, p) = len(state_names), h.shape
    w = np.asarray(layer_samples, dtype=np.float64)
    if t.shape != (n_t,):
        raise ValueError(
            f"layer_estimate times: expected shape {(n_t,)} (the basis rows); received {t.shape}."
        )
    if w.ndim != 2 or w.shape[1] != n_state * p or w.shape[0] < 2:
        raise ValueError(
            f"layer_estimate layer_samples: expected shape (S >= 2, {n_state * p}) for {n_state} states "
            f"and a basis of width {p}; received {w.shape}."
        )
    w = w.reshape(-1, n_state, p)
    w_mean = w.mean(axis=0)
    means = h @ w_mean.T + off
    dev = w - w_mean
    cov = np.einsum("sip,siq->ipq", dev, dev) / (w.shape[0] - 1)  # Cov[W_i], (n_state, p, p)
    var = np.einsum("tp,ipq,tq->ti", h, cov, h)
    stds = np.sqrt(np.maximum(var, 0.0))
    names, params = list(state_names), []
    for name, values in (parameter_samples or {}).items():
        v = np.asarray(values, dtype=np.float64).ravel()
        if v.shape != (w.shape[0],):
            raise ValueError(
                f"layer_estimate parameter_samples[{name!r}]: expected {w.shape[0]} samples (one per layer "
                f"sample); received {v.shape[0]}."
            )
        means = np.concatenate([means, np.full((n_t, 1), v.mean())], axis=1)
        stds = np.concatenate([stds, np.full((n_t, 1), v.std(ddof=1))], axis=1)
        names.append(name)
        params.append(name)
    return Estimate(t, means, stds, None, tuple(names), tuple(params))
