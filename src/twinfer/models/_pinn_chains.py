"""The PINN paper's chains: nominal values, the value-error perturbation, and the chain of a scenario.

Every case study of the PINN paper (sparse sensing, joint state-parameter estimation, Bayesian parameter
estimation) runs a chain of equal masses with the nominal damping, stiffness and nonlinearity of
:data:`PINN_NOMINAL`, linear, Duffing (cubic stiffness kappa) or Van der Pol (damping mu), and its
value-error scenarios perturb each DOF's coefficients by a factor ``1 + sign r`` with the repository's
recipe (:func:`value_error_factors`).

References:
    Haywood-Alexander et al., "Response estimation and system identification of dynamical systems via
    physics-informed neural networks", sections 4.1-4.3; specs/pinn.md 1.4-1.6, 4.1 and D11.

"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from twinfer.errors import TwinferValueError
from twinfer.models.chain import Chain

PINN_NOMINAL = {"m": 10.0, "c": 1.0, "k": 15.0, "kappa": 100.0, "mu": 0.75}
"""The nominal mass, damping, stiffness, cubic stiffness and Van der Pol damping of every DOF (specs 1.4)."""


def value_error_factors(n_dof: int, seed_of_dof: Callable[[int], Any]) -> np.ndarray:
    """Value-error factors ``1 + sign r`` per DOF, the repository recipe of specs 4.1 (one per DOF).

    DOF ``i`` draws ``r ~ U(0.05, 0.10)`` and a sign from ``numpy.random.RandomState(seed_of_dof(i))``.
    """
    factors = []
    for i in range(n_dof):
        state = np.random.RandomState(int(seed_of_dof(i)))
        r = state.uniform(0.05, 0.10)
        sign = [-1.0, 1.0][state.randint(0, 2)]
        factors.append(1.0 + sign * r)
    return np.asarray(factors)


def pinn_chain(
    n_dof: int,
    nonlinearity: str,
    forced_dofs: Sequence[int],
    factors: Any = None,
    values: Mapping | None = None,
) -> Chain:
    """A nominal chain (``nonlinearity`` in duffing/vdp/linear), optionally perturbed.

    Every c, k, kappa, mu is multiplied by per-DOF ``factors`` (the value-error truth, with the
    nonlinear ones perturbed too, specs D11); ``values`` overrides entries of :data:`PINN_NOMINAL`.
    """
    vals = {**PINN_NOMINAL, **(values or {})}
    fac = np.ones(n_dof) if factors is None else np.asarray(factors)
    extra: dict[str, Any] = {}
    if nonlinearity == "duffing":
        extra["cubic_stiffness"] = vals["kappa"] * fac
    elif nonlinearity == "vdp":
        extra["vdp_damping"] = vals["mu"] * fac
    elif nonlinearity != "linear":
        raise TwinferValueError(
            f"nonlinearity: expected 'duffing', 'vdp' or 'linear'; received {nonlinearity!r}."
        )
    return Chain(
        [vals["m"]] * n_dof,
        vals["k"] * fac,
        vals["c"] * fac,
        forced_dofs=list(forced_dofs),
        n_dof=n_dof,
        **extra,
    )
