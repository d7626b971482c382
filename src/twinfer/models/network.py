"""Masses joined by linear springs and dampers in any topology, to each other or to the ground.

Mass ``i`` has displacement ``x_i`` and velocity ``v_i``; a link joins mass ``i`` to mass ``j`` (or to the
ground, ``j = 0`` with ``x_0 = v_0 = 0``) and carries the force

    F_l = k_l (x_i - x_j) + c_l (v_i - v_j),

which pulls mass ``i`` by ``-F_l`` and mass ``j`` by ``+F_l``. Every mass, stiffness and damping
coefficient is a *sum of named scalar parameters*, so a structure can carry an unknown added mass on one
floor (``m3 + mstar``) or an unknown spring in parallel with a known one (``k5 + kstar``) under the names
the engineer uses, and any of them can be estimated by name. The equations of motion are

    M x'' = f - K x - C x',    M = diag(m_i),  K = sum_l k_l b_l b_l^T,  C = sum_l c_l b_l b_l^T,

with ``b_l = e_i - e_j`` (``e_0 = 0``). The 6-DOF chain of the compositional-inference paper (SI eq.
S51-S59, with the authors' script 02 values) is one such network: ground springs on masses 1, 2, 4 and 5,
and the added mass ``m*`` on mass 3.

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource", SI section 3.4, eq. (S51)-(S59);
    specs/compositional-inference.md 3.4.

"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from twinfer.models._base import Connection, Input, Output, Params, State
from twinfer.models._params import get_param, set_params
from twinfer.models.chain import (
    MechanicalModel,
    kinematic_output_rows,
    kinematic_outputs,
    parse_kinematic_outputs,
)

_NUMBERED = re.compile(r"^(?P<group>.*?[^0-9])(?P<index>[1-9][0-9]*)$")


class Link(NamedTuple):
    """A spring-damper between mass ``i`` and mass ``j`` (``j = 0``: the ground), 1-based.

    ``k`` and ``c`` name the scalar parameters whose sum is the link's stiffness and damping (one name or
    several in parallel; an empty tuple: none).
    """

    i: int
    j: int
    k: tuple[str, ...] = ()
    c: tuple[str, ...] = ()


def _names(value: str | Sequence[str], field: str) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"SpringNetwork {field}: expected parameter names (str); received {value!r}.")
    return names


def _selection(n: int, dofs: tuple[int, ...]) -> np.ndarray:
    """``S`` (n x len(dofs)) placing the input forces on their masses."""
    select = np.zeros((n, len(dofs)))
    select[np.asarray(dofs, int) - 1, np.arange(len(dofs))] = 1.0
    return select


def _grouped(values: dict[str, float]) -> Params:
    """Scalar names into parameter groups: ``k1..k9`` become the vector ``k``, ``kstar`` stays a scalar.

    Raises:
        ValueError: when the numbered names of a group do not run 1..n without a gap.

    """
    groups: dict[str, dict[int, float]] = {}
    params: Params = {}
    for name, value in values.items():
        match = _NUMBERED.match(name)
        if match:
            groups.setdefault(match["group"], {})[int(match["index"])] = value
        else:
            params[name] = np.float64(value)
    for group, entries in groups.items():
        if sorted(entries) != list(range(1, len(entries) + 1)) or group in params:
            raise ValueError(
                f"SpringNetwork values: expected the numbered names of '{group}' to run {group}1..{group}n "
                f"without a gap (and no scalar '{group}'); received "
                f"{[f'{group}{i}' for i in sorted(entries)]}."
            )
        params[group] = np.asarray([entries[i] for i in range(1, len(entries) + 1)])
    return params


class SpringNetwork(MechanicalModel):
    """Masses, springs and dampers in any topology, every coefficient a sum of named parameters.

    State ``[x_1..x_n, v_1..v_n]``; inputs the forces at ``forced_dofs``; outputs named like
    :class:`~twinfer.models.Chain`'s (``a4``: acceleration of mass 4, ``v2``, ``x1``). Linear, so
    :func:`twinfer.sim.simulate_dataset` simulates it exactly. Each link between two masses is a declared
    :class:`~twinfer.models.Connection`, so :meth:`twinfer.infer.graph.Graph.from_model` cuts it along any
    partition of its masses.

    Args:
        masses: per mass, the name of its mass parameter or the names whose sum is its mass.
        links: the spring-dampers (:class:`Link` or ``(i, j, k_names, c_names)``).
        values: every named parameter's value (masses > 0, stiffnesses and damping >= 0). Numbered
            names form a vector group (``k1..k9`` are ``params["k"]``) and must run from 1 without a gap.
        forced_dofs: 1-based masses where an external force acts (default: every mass).
        outputs: measured quantities, e.g. ``("a2", "a3")`` (default: every acceleration).

    Raises:
        ValueError: naming the field for a link to an unknown mass or to itself, a name without a value,
            a value without a use, or a non-physical value.

    """

    params: Params
    masses: tuple[tuple[str, ...], ...] = eqx.field(static=True)
    links: tuple[Link, ...] = eqx.field(static=True)
    forced_dofs: tuple[int, ...] = eqx.field(static=True)
    outputs: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        masses: Sequence[str | Sequence[str]],
        links: Sequence[Link | tuple[Any, ...]],
        values: Mapping[str, float],
        *,
        forced_dofs: Sequence[int] | None = None,
        outputs: Sequence[str] | None = None,
    ):
        self.masses = tuple(_names(m, f"masses[{i}]") for i, m in enumerate(masses))
        n = len(self.masses)
        if n < 1:
            raise ValueError("SpringNetwork masses: expected at least one mass; received none.")
        parsed = []
        for index, raw in enumerate(links):
            link = Link(int(raw[0]), int(raw[1]), *(_names(v, f"links[{index}]") for v in raw[2:]))
            if not (1 <= link.i <= n and 0 <= link.j <= n and link.i != link.j):
                raise ValueError(
                    f"SpringNetwork links[{index}]: expected masses i in 1..{n} and j in 0..{n} (0: ground), "
                    f"i != j; received i={link.i}, j={link.j}."
                )
            parsed.append(link)
        self.links = tuple(parsed)
        used = [n_ for m in self.masses for n_ in m] + [n_ for lk in self.links for n_ in (*lk.k, *lk.c)]
        missing = sorted({u for u in used if u not in values})
        unused = sorted(set(values) - set(used))
        if missing or unused:
            raise ValueError(
                "SpringNetwork values: expected a value for every parameter the masses and links name and "
                f"nothing else; missing {missing}, unused {unused}."
            )
        params = _grouped({name: float(values[name]) for name in dict.fromkeys(used)})
        self.check_params(params)
        self.params = {name: jnp.asarray(v) for name, v in params.items()}
        dofs = tuple(range(1, n + 1)) if forced_dofs is None else tuple(int(d) for d in forced_dofs)
        if any(not 1 <= d <= n for d in dofs):
            raise ValueError(f"SpringNetwork forced_dofs: expected masses in 1..{n}; received {list(dofs)}.")
        self.forced_dofs = dofs
        self.outputs = parse_kinematic_outputs(
            tuple(f"a{i}" for i in range(1, n + 1)) if outputs is None else tuple(outputs), n, "SpringNetwork"
        )

    @property
    def n_dof(self) -> int:
        return len(self.masses)

    def check_params(self, params: Params) -> None:
        """Masses (as summed) > 0; every stiffness and damping parameter >= 0.

        Raises:
            ValueError: naming the parameter, what is allowed and the value received.

        """
        for i, names in enumerate(self.masses):
            total = sum(float(get_param(params, n)) for n in names)
            if not total > 0:
                raise ValueError(
                    f"SpringNetwork mass {i + 1} ({' + '.join(names)}): expected > 0; received {total!r}."
                )
        for link in self.links:
            for name in (*link.k, *link.c):
                if not float(get_param(params, name)) >= 0:
                    raise ValueError(
                        f"SpringNetwork {name}: expected a stiffness or damping >= 0; received "
                        f"{float(get_param(params, name))!r} (link {link.i}-{link.j}). Check the sign and "
                        "units."
                    )

    @property
    def param_bounds(self) -> dict[str, tuple[float, float]]:
        """``[0, inf)`` for a mass named alone and every stiffness and damping (:meth:`check_params`).

        A part of a summed mass (``m3 + mstar``) has no bound of its own: only the sum must be > 0.
        """
        alone = [names[0] for names in self.masses if len(names) == 1]
        links = [name for link in self.links for name in (*link.k, *link.c)]
        return dict.fromkeys((*alone, *links), (0.0, float("inf")))

    @property
    def connections(self) -> tuple[Connection, ...]:
        """Every link between two masses couples their displacements and velocities."""
        return tuple(
            Connection((f"x{lk.i}", f"v{lk.i}"), (f"x{lk.j}", f"v{lk.j}")) for lk in self.links if lk.j
        )

    def _sum(self, names: tuple[str, ...], params: Params) -> Any:
        return sum((get_param(params, n) for n in names), jnp.zeros(()))

    @property
    def incidence(self) -> np.ndarray:
        """``D`` (links x masses): row ``l`` is ``b_l^T = e_i - e_j``, so ``D x`` are the links' stretches."""
        d = np.zeros((len(self.links), self.n_dof))
        for row, lk in enumerate(self.links):
            d[row, lk.i - 1] = 1.0
            if lk.j:
                d[row, lk.j - 1] = -1.0
        return d

    def mass_vector(self, params: Params) -> Array:
        """Each mass as the sum of its parameters."""
        return jnp.stack([self._sum(m, params) for m in self.masses])

    def link_coefficients(self, params: Params) -> tuple[Array, Array]:
        """Each link's stiffness and damping, as the sums of their parameters."""
        k = jnp.stack([self._sum(lk.k, params) for lk in self.links])
        return k, jnp.stack([self._sum(lk.c, params) for lk in self.links])

    def link_forces(self, x: State, params: Params) -> Array:
        """Force ``F_l = k_l (x_i - x_j) + c_l (v_i - v_j)`` of every link (positive in tension)."""
        n, d = self.n_dof, jnp.asarray(self.incidence)
        k, c = self.link_coefficients(params)
        return k * (d @ x[:n]) + c * (d @ x[n:])

    def acceleration(self, x: State, u: Input, params: Params) -> Array:
        """``M^{-1} (f - D^T F)``: a link pulls its first mass by ``-F``, its second by ``+F``."""
        net = -(jnp.asarray(self.incidence).T @ self.link_forces(x, params))
        external = jnp.asarray(_selection(self.n_dof, self.forced_dofs)) @ u
        return (external + net) / self.mass_vector(params)

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        return jnp.concatenate([x[self.n_dof :], self.acceleration(x, u, params)])

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        return kinematic_outputs(self.outputs, x, self.acceleration(x, u, params))

    def parameter_forces(self, name: str, x: State, u: Input, params: Params) -> Array:
        """The force that the terms of parameter ``name`` exert on each mass: the defect of removing it.

        A stiffness or damping term of link ``(i, j)`` pulls mass ``i`` by ``-k (x_i - x_j)`` (or
        ``-c (v_i - v_j)``) and mass ``j`` by the opposite; a mass term is the inertial force
        ``-m a_i`` at the accelerations of ``(x, u)``. These are the defects ``delta f`` of SI eq.
        (S60)-(S61): ``-k* (x3 - x4)`` on mass 3 for the removed spring, ``-m* a3`` for the removed mass.

        Raises:
            ValueError: for a name that is none of this network's parameters.

        """
        if not any(name in m for m in self.masses) and not any(name in (*lk.k, *lk.c) for lk in self.links):
            raise ValueError(
                f"SpringNetwork.parameter_forces name: expected one of {self.param_names}; received {name!r}."
            )
        n, d = self.n_dof, jnp.asarray(self.incidence)
        in_k = jnp.asarray([float(lk.k.count(name)) for lk in self.links])
        in_c = jnp.asarray([float(lk.c.count(name)) for lk in self.links])
        value = get_param(params, name)
        part = value * (in_k * (d @ x[:n]) + in_c * (d @ x[n:]))
        forces = -(d.T @ part)
        in_m = [float(m.count(name)) for m in self.masses]
        if not any(in_m):  # a stiffness or damping parameter: no inertial term to evaluate
            return forces
        return forces - jnp.asarray(in_m) * value * self.acceleration(x, u, params)

    def matrices(self, params: Params) -> tuple[Array, Array, Array]:
        """``(M, K, C)``: the diagonal mass matrix and ``K = D^T diag(k) D``, ``C = D^T diag(c) D``."""
        d = jnp.asarray(self.incidence)
        k, c = self.link_coefficients(params)
        return jnp.diag(self.mass_vector(params)), d.T @ (k[:, None] * d), d.T @ (c[:, None] * d)

    def linear_matrices(self, params: Params) -> tuple[Array, Array, Array, Array] | None:
        n = self.n_dof
        mass, stiff, damp = self.matrices(params)
        m_inv = jnp.diag(1.0 / jnp.diag(mass))
        a_mat = jnp.block([[jnp.zeros((n, n)), jnp.eye(n)], [-m_inv @ stiff, -m_inv @ damp]])
        select = jnp.asarray(_selection(n, self.forced_dofs))
        b_mat = jnp.concatenate([jnp.zeros((n, len(self.forced_dofs))), m_inv @ select])
        c_mat, d_mat = kinematic_output_rows(self.outputs, a_mat, b_mat)
        return a_mat, b_mat, c_mat, d_mat


@eqx.filter_jit
def defects_along(
    model: SpringNetwork,
    states: Any,
    inputs: Any,
    names: tuple[str, ...],
    values: Any,
    interfaces: tuple[tuple[int, int], ...],
    removed: tuple[str, ...],
    mass: int,
) -> tuple[Array, Array]:
    """Interface forces and the defects of removed parameters on one mass, along a trajectory.

    With the parameters ``names`` set to ``values`` (substituted inside the program, so estimates change
    nothing that is compiled), at every row ``(x_k, u_k)``: the forces of the links joining the mass pairs
    ``interfaces`` (:meth:`SpringNetwork.link_forces`, the interface weights of SI eq. (S62)) and the
    force that each parameter in ``removed`` exerts on mass ``mass`` (:meth:`SpringNetwork.parameter_forces`,
    the defects ``delta f`` of eq. (S60)-(S61)).

    Args:
        model: the network.
        states: (T, 2 n) states.
        inputs: (T, n_input) inputs.
        names: the parameters to substitute.
        values: (len(names),) their values.
        interfaces: ``(i, j)`` mass pairs (1-based, as the links are declared) of the interface links.
        removed: the parameters whose terms are the defects.
        mass: the 1-based mass the defects act on.

    Returns:
        ``(forces (T, len(interfaces)), defects (T, len(removed)))``.

    References:
        Ghorbani & Hackl, SI section 3.4, eq. (S60)-(S62).

    """
    params = set_params(model.params, dict(zip(names, values, strict=True)))
    pairs = [(lk.i, lk.j) for lk in model.links]
    links = jnp.asarray([pairs.index(pair) for pair in interfaces])

    def one(x: Any, u: Any) -> tuple[Any, Any]:
        parts = [model.parameter_forces(p, x, u, params)[mass - 1] for p in removed]
        return model.link_forces(x, params)[links], jnp.stack(parts)

    return jax.vmap(one)(states, inputs)
