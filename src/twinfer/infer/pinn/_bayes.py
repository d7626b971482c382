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

from twinfer.infer.pinn._physics import predicted_force
from twinfer.models import Chain, get_param, set_params


def gamma_logpdf(x: Any, concentration: Any, rate: Any) -> Any:
    """Log Gamma(x | concentration, rate) (rate parametrisation, as Pyro)."""
    return (
        concentration * jnp.log(rate) - gammaln(concentration) + (concentration - 1) * jnp.log(x) - rate * x
    )


def affine_force(chain: Chain, z: Any, dz: Any, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(J, f0)`` with ``predicted_force(theta) = f0 + J theta`` exactly (flattened time x DOF).

    With frozen states Eq 15 is affine in (c, k, kappa or mu): the Jacobian at any point is the map.
    """
    z, dz = jnp.asarray(z), jnp.asarray(dz)

    def force_of(theta: Any) -> Any:
        params = set_params(chain.params, {n: theta[i] for i, n in enumerate(names)})
        return predicted_force(chain, params, z, dz).ravel()

    theta_ref = jnp.asarray([float(get_param(chain.params, n)) for n in names])
    jac = jax.jacfwd(force_of)(theta_ref)
    return np.asarray(jac), np.asarray(force_of(theta_ref) - jac @ theta_ref)


def force_log_posterior(
    chain: Chain,
    z: Any,
    dz: Any,
    force_repeats: Any,
    names: Sequence[str],
    priors: Mapping[str, tuple[float, float]],
    sigma_prior: tuple[float, float],
) -> Callable[[Any], Any]:
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
