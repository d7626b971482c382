"""The state-space physics operator of the PINN paper on a :class:`~twinfer.models.Chain`.

For a network state ``z = [u; v]`` and its time derivative ``dz/dt``:

* continuity rows (Eq 15, rows 0:n): ``du/dt - v``;
* force rows (Eq 15-16, rows n:2n): ``M dv/dt + C v + K u + K_n g_k + C_n g_c`` is the predicted force, so
  the force-balance residual is ``M (dv/dt - a(z, f*))`` with ``a`` the chain's acceleration under the
  measured force ``f*`` (zero at unforced DOFs, specs D7);
* predicted measured acceleration (Eq 14 with ``S_d = S_v = 0``): ``a(z, f*)`` at the sensed DOFs.

The chain's own :meth:`~twinfer.models.Chain.acceleration` carries the Duffing and Van der Pol terms, so
the operator is the simulator's equation of motion and nothing is written twice.

References:
    Haywood-Alexander et al., arXiv:2410.01340, Eq 1-7 (model), Eq 14-17 (operator and losses).

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from twinfer.models import Chain, Params, locate, set_params


def observed_dofs(n_dof: int, unobserved: Sequence[int]) -> tuple[int, ...]:
    """1-based sensed DOFs given the 1-based unobserved ones.

    Raises:
        ValueError: naming ``unobserved_dofs`` if an index lies outside ``1..n_dof``, repeats, or leaves
            no DOF observed.

    """
    bad = [d for d in unobserved if not (isinstance(d, int | np.integer) and 1 <= d <= n_dof)]
    if bad:
        raise ValueError(
            f"unobserved_dofs: expected 1-based DOF indices in 1..{n_dof} (the chain has {n_dof} DOFs); "
            f"received {list(unobserved)} (out of range: {bad})."
        )
    if len(set(unobserved)) != len(unobserved):
        raise ValueError(f"unobserved_dofs: expected distinct DOFs; received {list(unobserved)}.")
    sensed = tuple(d for d in range(1, n_dof + 1) if d not in set(unobserved))
    if not sensed:
        raise ValueError(f"unobserved_dofs: at least one DOF must be observed; received {list(unobserved)}.")
    return sensed


class PositiveParameters(eqx.Module):
    """Trainable positive system parameters ``p = scale * exp(raw)`` (specs 2.5, constrained positive).

    The repository parametrises ``p = alpha_p * p_hat`` with ``p_hat`` starting at 1; here ``raw`` starts
    at ``log(init / scale)``, so the value starts at the initial guess and can never change sign.

    Attributes:
        raw: unconstrained values, one per name (the trainable leaves).
        names: scalar parameter names such as ``"k2"`` or ``"kappa4"``.
        scales: the scale of each parameter.

    """

    raw: Float[Array, " p"]
    names: tuple[str, ...] = eqx.field(static=True)
    scales: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, initial: Mapping[str, float], scales: Mapping[str, float] | None = None):
        names = tuple(initial)
        init = np.array([float(initial[n]) for n in names], dtype=np.float64)
        sc = np.array([float((scales or {}).get(n, initial[n])) for n in names], dtype=np.float64)
        if np.any(~np.isfinite(init)) or np.any(init <= 0) or np.any(sc <= 0):
            raise ValueError(
                f"PositiveParameters: expected finite initial values and scales > 0; received "
                f"{dict(zip(names, init.tolist(), strict=True))}, scales {sc.tolist()}."
            )
        self.names, self.scales = names, tuple(sc.tolist())
        self.raw = jnp.asarray(np.log(init / sc))

    def values(self) -> Float[Array, " p"]:
        """Positive parameter values in physical units."""
        return jnp.asarray(self.scales) * jnp.exp(self.raw)

    def as_dict(self) -> dict[str, Array]:
        """``{name: value}``."""
        vals = self.values()
        return {n: vals[i] for i, n in enumerate(self.names)}

    def with_values(self, values: Float[ArrayLike, " p"]) -> PositiveParameters:
        """The same names and scales at new positive values (traceable)."""
        return eqx.tree_at(lambda p: p.raw, self, jnp.log(jnp.asarray(values) / jnp.asarray(self.scales)))

    def apply(self, params: Params) -> Params:
        """``params`` with these names replaced by the current values."""
        return set_params(params, self.as_dict())


def check_parameter_names(chain: Chain, names: Sequence[str]) -> None:
    """Every name must be a scalar parameter of the chain (``KeyError`` listing the allowed names)."""
    for name in names:
        locate(chain.params, name)


def chain_residuals(
    chain: Chain,
    params: Params,
    z: Float[Array, "T 2n"],
    dz: Float[Array, "T 2n"],
    force: Float[Array, "T n_in"],
) -> tuple[Float[Array, "T n"], Float[Array, "T n"], Float[Array, "T n"]]:
    """Continuity residual, acceleration residual and the model acceleration at many times.

    Args:
        chain: the model the PINN prescribes (its form and any fixed values).
        params: parameter values (the chain's own with trainable ones substituted).
        z: network states ``[u, v]``.
        dz: their time derivatives.
        force: measured forces at the chain's forced DOFs.

    Returns:
        ``(du/dt - v, dv/dt - a(z, f), a(z, f))``; multiply the second by the masses for the force-unit
        residual ``f~ - f*`` of Eq 15-17.

    """
    n = chain.n_dof
    acc = jax.vmap(lambda x, f: chain.acceleration(x, f, params))(z, force)
    return dz[:, :n] - z[:, n:], dz[:, n:] - acc, acc


def predicted_force(
    chain: Chain, params: Params, z: Float[Array, "T 2n"], dz: Float[Array, "T 2n"]
) -> Float[Array, "T n"]:
    """External force at every DOF implied by the states: ``M [dz/dt - A z - A_n g_n]_{n:2n}`` (Eq 15)."""
    zero = jnp.zeros((z.shape[0], len(chain.forced_dofs)), dtype=z.dtype)
    _, res, _ = chain_residuals(chain, params, z, dz, zero)
    return params["m"] * res
