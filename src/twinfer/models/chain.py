"""N-degree-of-freedom mass-spring-damper chain, optionally with Duffing springs and Van der Pol dampers.

Masses m_1..m_n in series; connection i joins mass i-1 to mass i, connection 1 joins the wall to mass 1,
mass n is free. With relative displacement r_i = x_i - x_{i-1} (x_0 = 0) the force carried by
connection i is

    F_i = k_i r_i + c_i dr_i + kappa_i r_i^3 + mu_i (r_i^2 - 1) dr_i,

and mass i feels f_i - F_i + F_{i+1} (F_{n+1} = 0). This is M x'' + C x' + K x + K_n g_k + C_n g_c = f of
the PINN paper (specs/pinn.md 1.2, Eq 2-3) and, without nonlinear terms, eq. (S20-S21) of the
compositional-inference paper (specs/compositional-inference.md 3.1).

A partitioned chain's subsystems are :meth:`Chain.segment` slices of it: the connections between
segments are cut and their force ``F = k (x_s - x_r) + c (v_s - v_r)`` (:func:`spring_damper_law`, eq.
S24) arrives as a message added to the forces on the segment's masses.

Base excitation (an earthquake, a shaking table): the wall moves. With ``base="acceleration"`` its
acceleration ``ag`` is an input and the states are relative to it (x_0 = 0 stays), so every mass feels
the inertia force ``-m_i ag``: ``M x'' + C x' + K x = -M 1 ag + f`` (Chopra section 1.7 for one storey,
section 9.4 for several). With ``base="displacement"`` the wall's displacement ``xg`` and velocity ``vg``
are inputs, the states absolute (total), and connection 1 stretches by ``r_1 = x_1 - xg`` at
``dr_1 = v_1 - vg`` (support motion in total displacements, Chopra section 9.7).

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource", SI eq. (S20-S21).
    Haywood-Alexander et al., PINNs for MDOF oscillators, Eq. 1-7 and App. A.
    A. K. Chopra, *Dynamics of Structures*, 4th ed., sections 1.7, 9.4 and 9.7 (ground motion).

"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from twinfer.models._base import AbstractModel, Connection, Input, Output, Params, State

_OUTPUT = re.compile(r"^(?P<kind>[xva])(?P<dof>[0-9]+)$")
_ABSOLUTE = re.compile(r"^A(?P<dof>[0-9]+)$")

BASES = ("acceleration", "displacement")
"""What moves a chain's ground (:class:`Chain` ``base``): its acceleration, or displacement and velocity."""

GROUND_INPUTS = {None: (), "acceleration": ("ag",), "displacement": ("xg", "vg")}
"""The inputs each ``base`` adds before the forces: ground acceleration; ground displacement, velocity."""


def spring_damper_force(k: Any, c: Any, dx: Any, dv: Any) -> Any:
    """Force ``k dx + c dv`` of a linear spring-damper stretched by ``dx`` at rate ``dv`` (eq. S20, S24)."""
    return k * dx + c * dv


def connection_force(k: Any, c: Any, kappa: Any, mu: Any, r: Any, dr: Any) -> Any:
    """Force of one connection stretched by ``r`` at rate ``dr`` (eq. S20 with the nonlinear terms).

    ``F = k r + c dr + kappa r^3 + mu (r^2 - 1) dr``: linear spring and damper, Duffing spring, Van der Pol
    damper. Odd in ``(r, dr)``, so the force on either end is the same expression of the other end's
    displacement relative to it.
    """
    return spring_damper_force(k, c, r, dr) + kappa * r**3 + mu * (r**2 - 1.0) * dr


def connection_law(s_send: Any, s_recv: Any, gamma: Any) -> Any:
    """Interface law of a cut connection: ``[F(x_s - x_r, v_s - v_r)]``, ``gamma = [k, c, kappa, mu]``.

    The force the sender's mass exerts on the receiver's (:func:`connection_force`), the same expression
    in both directions; with ``kappa = mu = 0`` it is :func:`spring_damper_law`.
    """
    d = s_send - s_recv
    return jnp.atleast_1d(connection_force(gamma[0], gamma[1], gamma[2], gamma[3], d[0], d[1]))


CONNECTION_PARAMS = ("k", "c", "kappa", "mu")
"""The parameters of one connection, in the order of :func:`connection_law`'s ``gamma``."""


@dataclasses.dataclass(frozen=True)
class EstimatedConnectionLaw:
    """:func:`connection_law` with some of the connection's parameters read from a port, not ``gamma``.

    A cut connection whose parameters are unknown: one end holds them as states after its port's
    ``[x, v]`` (``holder`` ``"send"`` or ``"recv"``, in the order of ``names``, each one of
    :data:`CONNECTION_PARAMS`); the others come from ``gamma = [k, c, kappa, mu]``. Frozen, so laws of the
    same structure compare equal and share a compiled program.
    """

    names: tuple[str, ...]
    holder: str

    def __post_init__(self) -> None:
        if self.holder not in ("send", "recv") or any(n not in CONNECTION_PARAMS for n in self.names):
            raise ValueError(
                "EstimatedConnectionLaw: expected holder 'send' or 'recv' and names from "
                f"{CONNECTION_PARAMS}; received holder {self.holder!r}, names {self.names}."
            )

    def __call__(self, s_send: Any, s_recv: Any, gamma: Any) -> Any:
        held = (s_send if self.holder == "send" else s_recv)[2:]
        k, c, kappa, mu = (
            held[self.names.index(name)] if name in self.names else gamma[j]
            for j, name in enumerate(CONNECTION_PARAMS)
        )
        d = s_send[:2] - s_recv[:2]
        return jnp.atleast_1d(connection_force(k, c, kappa, mu, d[0], d[1]))


def spring_damper_law(s_send: Any, s_recv: Any, gamma: Any) -> Any:
    """Interface law ``F = k (x_s - x_r) + c (v_s - v_r)``, ``gamma = [k, c]``, ports ``[x, v]`` (eq. S24).

    The force the sender's mass exerts on the receiver's through the connection between them, the same
    expression in both directions (eq. S24-S26).

    Args:
        s_send: sender port ``[x_s, v_s]``.
        s_recv: receiver port ``[x_r, v_r]``.
        gamma: ``[k, c]`` of the connection.

    Returns:
        ``[F]`` (1,).

    """
    d = s_send - s_recv
    return jnp.atleast_1d(spring_damper_force(gamma[0], gamma[1], d[0], d[1]))


def parse_kinematic_outputs(names: tuple[str, ...], n_dof: int, owner: str) -> tuple[str, ...]:
    """Check output names like ``a1``, ``v2``, ``x3`` (acceleration, velocity, displacement of a DOF).

    Raises:
        ValueError: naming the model (``owner``), the expected form and the name received.

    """
    for name in names:
        match = _OUTPUT.match(name)
        if not match or not 1 <= int(match["dof"]) <= n_dof:
            raise ValueError(
                f"{owner} outputs: expected names like 'a1', 'v2', 'x3' with DOF in 1..{n_dof}; "
                f"received {name!r}."
            )
    return names


def kinematic_outputs(names: tuple[str, ...], x: Any, acc: Any, ground: Any = 0.0) -> Any:
    """The outputs ``names`` of a mechanical state ``x = [q, v]`` with accelerations ``acc``.

    ``A<d>`` (absolute acceleration of a base-excited chain) is ``acc[d - 1] + ground``, the relative
    acceleration plus the ground's.
    """
    n = acc.shape[0]
    return jnp.stack(
        [
            {"x": x[int(s[1:]) - 1], "v": x[n + int(s[1:]) - 1], "a": acc[int(s[1:]) - 1]}[s[0]]
            if s[0] != "A"
            else acc[int(s[1:]) - 1] + ground
            for s in names
        ]
    )


def kinematic_output_rows(
    names: tuple[str, ...], a_mat: Any, b_mat: Any, ground_col: int | None = None
) -> tuple[Any, Any]:
    """``(C, D)`` of the outputs ``names`` given the state-space ``A``, ``B`` of ``[q, v]``.

    An acceleration's row is the velocity block's row of ``A`` and ``B``; a displacement or velocity
    selects its state. An absolute acceleration ``A<d>`` adds 1 at the ground acceleration's input
    column ``ground_col``.
    """
    n2, m = b_mat.shape
    if not names:
        return jnp.zeros((0, n2)), jnp.zeros((0, m))
    c_rows, d_rows = [], []
    for name in names:
        dof = int(name[1:]) - 1
        if name[0] == "A":
            if ground_col is None:
                raise ValueError(f"kinematic_output_rows: {name!r} needs the ground acceleration's column.")
            c_rows.append(a_mat[n2 // 2 + dof])
            d_rows.append(b_mat[n2 // 2 + dof].at[ground_col].add(1.0))
        elif name[0] == "a":
            c_rows.append(a_mat[n2 // 2 + dof])
            d_rows.append(b_mat[n2 // 2 + dof])
        else:
            c_rows.append(jnp.zeros(n2).at[dof + (n2 // 2 if name[0] == "v" else 0)].set(1.0))
            d_rows.append(jnp.zeros(m))
    return jnp.stack(c_rows), jnp.stack(d_rows)


def _vector(name: str, value: Any, n: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"Chain {name}: expected {n} values (one per DOF); received shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"Chain {name}: expected finite values; received {arr.tolist()}.")
    return arr


class MechanicalModel(AbstractModel):
    """Masses with states ``[x_1..x_n, v_1..v_n]``: the names shared by chains and spring networks.

    Forces act at ``forced_dofs`` (inputs ``f<d>``); outputs are kinematic, named ``a4``, ``v2``, ``x1``
    (:func:`parse_kinematic_outputs`).
    """

    n_dof: eqx.AbstractVar[int]
    forced_dofs: eqx.AbstractVar[tuple[int, ...]]
    outputs: eqx.AbstractVar[tuple[str, ...]]

    @property
    def state_names(self) -> tuple[str, ...]:
        n = self.n_dof
        return tuple(f"x{i}" for i in range(1, n + 1)) + tuple(f"v{i}" for i in range(1, n + 1))

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f"f{d}" for d in self.forced_dofs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.outputs


class Chain(MechanicalModel):
    """Mass-spring-damper chain with forcing at chosen DOFs and acceleration/velocity/displacement outputs.

    State ``[x_1..x_n, v_1..v_n]``; inputs the forces at ``forced_dofs``; outputs named ``a4`` (acceleration
    of mass 4), ``v2``, ``x1`` and so on. Accelerations are evaluated from the state and the current
    input through the equation of motion (specs/compositional-inference.md 3.1, [REPO] measurement).

    A moving ground (``base``, the module docstring) adds its inputs before the forces:

    * ``base="acceleration"``: input ``ag`` (the ground's acceleration [m/s^2]); states, ``x``/``v``/``a``
      outputs relative to the ground; ``A4`` is mass 4's absolute acceleration ``a4 + ag``, what an
      accelerometer on it reads. ``forced_dofs=()`` for an earthquake alone.
    * ``base="displacement"``: inputs ``xg``, ``vg`` (the ground's displacement [m] and velocity [m/s]);
      states and every output absolute (``a4`` is absolute there; ``A4`` is refused as a duplicate).

    Lower-case names are in the states' frame, the capital ``A`` always the absolute (inertial)
    acceleration, only where the two differ (``base="acceleration"``).

    Args:
        mass: one value per DOF (a scalar is broadcast).
        stiffness: one value per DOF (a scalar is broadcast).
        damping: one value per DOF (a scalar is broadcast).
        cubic_stiffness: Duffing coefficients kappa_i of each connection, or None for linear springs.
        vdp_damping: Van der Pol coefficients mu_i of each connection, or None. Connection i (mass i - 1
            to mass i, or to the ground for i = 1) then adds ``mu_i (r^2 - 1) dr`` to its force, with
            ``r`` its stretch [m] and ``dr`` its rate [m/s] (:func:`connection_force`): with
            ``mu_i > 0`` it *feeds* energy in while ``|r| < 1 m`` (damping ``c_i - mu_i`` at small
            strokes), the self-excited oscillator, so ``mu_i`` above ``c_i`` makes small motions grow.
        forced_dofs: 1-based DOFs where an external force acts (default: every DOF).
        outputs: measured quantities, e.g. ``("a1", "a4")``, ``("A1", "A4")`` with a ground acceleration
            (default: every acceleration, in the states' frame; ``()``: none).
        n_dof: the number of DOFs, when mass, stiffness and damping are all scalars.
        base: ``None`` (default: a fixed ground), ``"acceleration"`` or ``"displacement"`` (above).

    Raises:
        ValueError: naming the argument, what it expects and what it received (an ``A`` output without
            ``base="acceleration"`` among them).

    """

    params: Params
    forced_dofs: tuple[int, ...] = eqx.field(static=True)
    outputs: tuple[str, ...] = eqx.field(static=True)
    n_dof: int = eqx.field(static=True)
    base: str | None = eqx.field(static=True)

    def __init__(
        self,
        mass: Sequence[float] | float,
        stiffness: Sequence[float] | float,
        damping: Sequence[float] | float,
        *,
        cubic_stiffness: Sequence[float] | float | None = None,
        vdp_damping: Sequence[float] | float | None = None,
        forced_dofs: Sequence[int] | None = None,
        outputs: Sequence[str] | None = None,
        n_dof: int | None = None,
        base: str | None = None,
    ):
        if base not in GROUND_INPUTS:
            raise ValueError(f"Chain base: expected None or one of {BASES}; received {base!r}.")
        self.base = base
        if n_dof is None:
            n_dof = next((len(v) for v in (mass, stiffness, damping) if np.ndim(v) == 1), None)  # type: ignore[arg-type]
        if n_dof is None or n_dof < 1:
            raise ValueError("Chain: give n_dof or at least one of mass/stiffness/damping as a list.")
        lengths = {
            name: len(v)  # type: ignore[arg-type]
            for name, v in (("mass", mass), ("stiffness", stiffness), ("damping", damping))
            if np.ndim(v) == 1
        }
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{name} {n}" for name, n in lengths.items())
            raise ValueError(
                f"Chain: expected mass, stiffness and damping of one length (one value per DOF); "
                f"received {shown}."
            )
        self.n_dof = int(n_dof)
        params: Params = {
            "m": _vector("mass", mass, n_dof),
            "k": _vector("stiffness", stiffness, n_dof),
            "c": _vector("damping", damping, n_dof),
        }
        if cubic_stiffness is not None:
            params["kappa"] = _vector("cubic_stiffness", cubic_stiffness, n_dof)
        if vdp_damping is not None:
            params["mu"] = _vector("vdp_damping", vdp_damping, n_dof)
        self.check_params(params)  # on the host values, before they become (possibly traced) JAX arrays
        self.params = {group: jnp.asarray(value) for group, value in params.items()}
        dofs = tuple(range(1, n_dof + 1)) if forced_dofs is None else tuple(int(d) for d in forced_dofs)
        for d in dofs:
            if not 1 <= d <= n_dof:
                raise ValueError(f"Chain forced_dofs: expected DOFs in 1..{n_dof}; received {d}.")
        self.forced_dofs = dofs
        outs = tuple(f"a{i}" for i in range(1, n_dof + 1)) if outputs is None else tuple(outputs)
        self.outputs = _parse_chain_outputs(outs, n_dof, base)

    def check_params(self, params: Params) -> None:
        """Masses > 0, stiffnesses and damping coefficients >= 0 (Duffing and Van der Pol terms: any sign).

        Raises:
            ValueError: naming the parameter (``k2``), what is allowed and the value received.

        """
        for group, label, cond, wrong in (
            ("m", "mass", "positive", "non-positive"),
            ("k", "stiffness", ">= 0", "negative"),
            ("c", "damping", ">= 0", "negative"),
        ):
            values = np.asarray(params[group], dtype=np.float64).reshape(-1)
            bad = values <= 0 if cond == "positive" else values < 0
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(
                    f"Chain {label}: expected {cond} values; received {values.tolist()} "
                    f"({group}{i + 1} = {float(values[i])!r}). A {wrong} {label} makes the chain "
                    "unstable or non-physical; check the sign and units."
                )

    @property
    def param_bounds(self) -> dict[str, tuple[float, float]]:
        """Every mass, stiffness and damping coefficient in ``[0, inf)`` (:meth:`check_params`)."""
        return {
            f"{group}{i + 1}": (0.0, float("inf")) for group in ("m", "k", "c") for i in range(self.n_dof)
        }

    @property
    def input_names(self) -> tuple[str, ...]:
        """The ground's inputs (``ag``, or ``xg``, ``vg``), then ``f<d>`` per forced DOF."""
        return GROUND_INPUTS[self.base] + tuple(f"f{d}" for d in self.forced_dofs)

    @property
    def n_ground(self) -> int:
        """How many of the inputs, first, move the ground (0, 1 for ``ag``, 2 for ``xg``, ``vg``)."""
        return len(GROUND_INPUTS[self.base])

    def external_force(self, u: Input) -> Array:
        """Force on every DOF from the input vector (zero at unforced DOFs; the ground's inputs skipped)."""
        idx = jnp.asarray([d - 1 for d in self.forced_dofs], dtype=int)
        return jnp.zeros(self.n_dof, dtype=jnp.result_type(u, float)).at[idx].set(u[self.n_ground :])

    def connection_forces(self, x: State, params: Params, u: Input | None = None) -> Array:
        """Force F_i carried by each connection (positive in tension), eq. (S20) / PINN Eq. 1.

        With ``base="displacement"`` connection 1 is stretched by ``x_1 - xg`` at ``v_1 - vg`` (``u`` is
        then needed); otherwise the ground sits at ``x_0 = v_0 = 0`` in the states' frame.
        """
        n = self.n_dof
        q, v = x[:n], x[n:]
        q0, v0 = jnp.zeros(1, q.dtype), jnp.zeros(1, v.dtype)
        if self.base == "displacement":
            if u is None:
                raise ValueError("Chain.connection_forces: base='displacement' needs the input u (xg, vg).")
            q0, v0 = u[0:1].astype(q.dtype), u[1:2].astype(v.dtype)
        r = q - jnp.concatenate([q0, q[:-1]])
        dr = v - jnp.concatenate([v0, v[:-1]])
        zero = jnp.zeros_like(r)
        return connection_force(
            params["k"], params["c"], params.get("kappa", zero), params.get("mu", zero), r, dr
        )

    def acceleration(self, x: State, u: Input, params: Params) -> Array:
        """Accelerations of all masses in the states' frame: M^{-1} (f - F_i + F_{i+1}), less any ``ag``.

        ``base="acceleration"``: relative to the ground (Chopra section 9.4); otherwise absolute.
        """
        f_conn = self.connection_forces(x, params, u)
        net = -f_conn + jnp.concatenate([f_conn[1:], jnp.zeros(1, f_conn.dtype)])
        acc = (self.external_force(u) + net) / params["m"]
        return acc - u[0] if self.base == "acceleration" else acc

    def vector_field(self, t: Any, x: State, u: Input, params: Params) -> State:
        return jnp.concatenate([x[self.n_dof :], self.acceleration(x, u, params)])

    def output(self, t: Any, x: State, u: Input, params: Params) -> Output:
        if not self.outputs:
            return jnp.zeros(0, dtype=jnp.result_type(x, float))
        ground = u[0] if self.base == "acceleration" else 0.0
        return kinematic_outputs(self.outputs, x, self.acceleration(x, u, params), ground)

    def stiffness_matrix(self, params: Params) -> Array:
        """Tridiagonal K of (S21) from per-connection stiffnesses."""
        return _tridiagonal(params["k"])

    def damping_matrix(self, params: Params) -> Array:
        """Tridiagonal C of (S21) from per-connection damping coefficients."""
        return _tridiagonal(params["c"])

    def linear_matrices(self, params: Params) -> tuple[Array, Array, Array, Array] | None:
        if "kappa" in params or "mu" in params:
            return None
        n = self.n_dof
        m_inv = jnp.diag(1.0 / params["m"])
        stiff, damp = self.stiffness_matrix(params), self.damping_matrix(params)
        a_mat = jnp.block([[jnp.zeros((n, n)), jnp.eye(n)], [-m_inv @ stiff, -m_inv @ damp]])
        force_sel = (
            jnp.zeros((n, len(self.forced_dofs)))
            .at[jnp.asarray([d - 1 for d in self.forced_dofs], dtype=int), jnp.arange(len(self.forced_dofs))]
            .set(1.0)
        )
        if self.base == "acceleration":  # -M 1 ag: each mass accelerates by -ag relative to the ground
            ground = -jnp.ones((n, 1))
        elif self.base == "displacement":  # connection 1 pulls mass 1 by k1 xg + c1 vg
            ground = jnp.zeros((n, 2)).at[0].set(jnp.stack([params["k"][0], params["c"][0]]) / params["m"][0])
        else:
            ground = jnp.zeros((n, 0))
        b_mat = jnp.concatenate(
            [jnp.zeros((n, self.n_input)), jnp.concatenate([ground, m_inv @ force_sel], axis=1)]
        )
        ground_col = 0 if self.base == "acceleration" else None
        return (a_mat, b_mat, *kinematic_output_rows(self.outputs, a_mat, b_mat, ground_col))

    @property
    def connections(self) -> tuple[Connection, ...]:
        """Connection ``d`` (2..n) joins masses d - 1 and d through their positions and velocities."""
        return tuple(
            Connection((f"x{d - 1}", f"v{d - 1}"), (f"x{d}", f"v{d}")) for d in range(2, self.n_dof + 1)
        )

    def segment(self, first: int, last: int) -> Chain:
        """DOFs ``first..last`` (1-based, inclusive) as a chain of their own: one subsystem of a partition.

        The segment keeps its masses and the connections inside it. Connection ``first`` (to the wall
        when ``first`` is 1) stays only for the first segment; otherwise it joins the segment to its left
        neighbour, is cut (zero stiffness, damping and nonlinear coefficients) and its force must arrive
        as a message, as must that of connection ``last + 1`` (the segment's last mass is free, as a
        chain's is). Forced DOFs and outputs are those inside the segment, renumbered from 1; the
        segment's inputs are a subset of the chain's in the same order. A ground acceleration acts on
        every mass, so every segment keeps ``base="acceleration"`` (input ``ag``); a ground displacement
        acts through connection 1 only, so only the first segment keeps ``base="displacement"`` (inputs
        ``xg``, ``vg``) and the others have a fixed ground (their connection ``first`` is cut anyway).

        Args:
            first: first DOF of the segment (1-based).
            last: last DOF (inclusive).

        Returns:
            A :class:`Chain` of ``last - first + 1`` DOFs (section 3.1's S1 = DOFs 1-2, S2 = DOFs 3-4).

        """
        if not 1 <= first <= last <= self.n_dof:
            raise ValueError(
                f"Chain.segment: expected 1 <= first <= last <= {self.n_dof}; received first={first}, "
                f"last={last}."
            )
        cut = first > 1
        values = {}
        for group, value in self.params.items():
            part = np.array(np.asarray(value)[first - 1 : last], dtype=np.float64)
            if cut and group != "m":
                part[0] = 0.0
            values[group] = part
        inside = lambda d: first <= d <= last  # noqa: E731
        return Chain(
            values["m"],
            values["k"],
            values["c"],
            cubic_stiffness=values.get("kappa"),
            vdp_damping=values.get("mu"),
            forced_dofs=[d - first + 1 for d in self.forced_dofs if inside(d)],
            outputs=[f"{o[0]}{int(o[1:]) - first + 1}" for o in self.outputs if inside(int(o[1:]))],
            n_dof=last - first + 1,
            base=self.base if self.base == "acceleration" or not cut else None,
        )


def ShearFrame(  # a constructor named as the Chain it builds reads
    masses: Sequence[float] | float,
    stiffnesses: Sequence[float] | float,
    dampings: Sequence[float] | float,
    *,
    base: str = "acceleration",
    outputs: Sequence[str] | None = None,
    forced_dofs: Sequence[int] = (),
    n_storeys: int | None = None,
) -> Chain:
    """A shear building under ground motion: a :class:`Chain` of floors, storey k joining floors k-1 and k.

    Floor 0 is the ground; floor k (mass ``masses[k-1]``) sits on storey k (``stiffnesses[k-1]``,
    ``dampings[k-1]``: the storey's lateral stiffness [N/m] and damping [N s/m]). The idealisation of
    Chopra section 9.2 (rigid floors, axially rigid columns), which is a chain with a moving ground.

    Args:
        masses: one floor mass per storey [kg] (a scalar is broadcast).
        stiffnesses: one storey stiffness per storey (a scalar is broadcast).
        dampings: one storey damping per storey (a scalar is broadcast).
        base: ``"acceleration"`` (default: input ``ag``) or ``"displacement"`` (inputs ``xg``, ``vg``).
        outputs: as :class:`Chain`'s (default: every floor's absolute acceleration, ``A1..An`` with a
            ground acceleration, ``a1..an`` with a ground displacement).
        forced_dofs: floors with an external force too (default none: the ground motion alone).
        n_storeys: the number of storeys, when the three values are scalars.

    Returns:
        The :class:`Chain` (so :meth:`twinfer.infer.graph.Graph.from_model` cuts it like any chain).

    """
    n = n_storeys
    if n is None:
        n = next((len(v) for v in (masses, stiffnesses, dampings) if np.ndim(v) == 1), None)  # type: ignore[arg-type]
    if outputs is None and n is not None:
        outputs = [f"{'A' if base == 'acceleration' else 'a'}{i}" for i in range(1, n + 1)]
    return Chain(
        masses, stiffnesses, dampings, forced_dofs=forced_dofs, outputs=outputs, n_dof=n_storeys, base=base
    )


def _parse_chain_outputs(names: tuple[str, ...], n_dof: int, base: str | None) -> tuple[str, ...]:
    """:func:`parse_kinematic_outputs` with ``A<d>``, the absolute acceleration, under a ground acceleration.

    Raises:
        ValueError: naming the output, the form expected and why an ``A`` output is refused.

    """
    for name in names:
        match = _ABSOLUTE.match(name)
        if match is None:
            continue
        if not 1 <= int(match["dof"]) <= n_dof:
            raise ValueError(
                f"Chain outputs: expected names like 'a1', 'A1', 'v2', 'x3' with DOF in 1..{n_dof}; "
                f"received {name!r}."
            )
        if base != "acceleration":
            frame = (
                "the ground is fixed, so 'a{d}' is already absolute"
                if base is None
                else "with a ground displacement the states are absolute, so 'a{d}' is already absolute"
            ).format(d=match["dof"])
            raise ValueError(
                f"Chain outputs: {name!r} is an absolute acceleration, which differs from 'a{match['dof']}' "
                f"only under a ground acceleration; expected base='acceleration' with it; received "
                f"base={base!r} ({frame}: name it 'a{match['dof']}')."
            )
    parse_kinematic_outputs(tuple(o for o in names if _ABSOLUTE.match(o) is None), n_dof, "Chain")
    return names


def _tridiagonal(per_connection: Array) -> Array:
    """K_ii = k_i + k_{i+1}, K_nn = k_n, K_{i,i+1} = K_{i+1,i} = -k_{i+1} (specs/pinn.md 1.2)."""
    k_next = jnp.concatenate([per_connection[1:], jnp.zeros(1, per_connection.dtype)])
    diag = per_connection + k_next
    off = -per_connection[1:]
    return jnp.diag(diag) + jnp.diag(off, 1) + jnp.diag(off, -1)
