"""Combination of two algebraic systems by linear connection equations (generic topology, PSD family).

Two systems gamma_a = s_a(upsilon_a) and gamma_b = s_b(upsilon_b) are closed by (eqs. 9-11)

    upsilon_a = W_aa gamma_a + W_ab gamma_b + W_az upsilon_z + b_a
    upsilon_b = W_ba gamma_a + W_bb gamma_b + W_bz upsilon_z + b_b
    gamma_z   = W_za gamma_a + W_zb gamma_b + W_zz upsilon_z + b_z

with "W_ij connects to i from j". Each block is ``zero``, ``identity``, ``frozen`` (a fixed matrix) or
``trainable`` (a parameter group ``W_ij``, row-major, initialised as noisy identity or noisy zero, specs
3.4). The unknowns (upsilon_a, gamma_a, upsilon_b, gamma_b) form a dependency graph (the incidence matrix
of eq. 13 at block level, with the submodels' own feed-through found from their Jacobians); its strongly
connected components are the algebraic loops. Components are evaluated in topological order: by
substitution where there is no loop (the BLT forms of eqs. 15 and 19 come out automatically for PSDa and
PSDb), by Newton iteration on the loop's unknowns where there is one; a loop without solution raises an
error naming it.

References:
    Thummerer & Mikelsons, model-combination paper, eqs. (7)-(15), (18)-(19), Tabs. 1-2; Tarjan (1972)
    via ``scipy.sparse.csgraph.connected_components``.

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from twinfer.models._base import AbstractModel, Params

BLOCKS = ("W_aa", "W_ab", "W_az", "W_ba", "W_bb", "W_bz", "W_za", "W_zb", "W_zz")
BIASES = ("b_a", "b_b", "b_z")
Mode = Literal["zero", "identity", "frozen", "trainable"]
# unknown nodes of eq. (13) and the blocks feeding each: node <- (block, source)
_NODES = ("ua", "ga", "ub", "gb")
_LABEL = {"ua": "upsilon_a", "ga": "gamma_a", "ub": "upsilon_b", "gb": "gamma_b"}


class System(eqx.Module):
    """One algebraic system of a combination, taken from a model (specs 2.0 simplification 1).

    ``role="vector_field"``: upsilon is the model's state and gamma its derivative (an FPM's f_c).
    ``role="output"``: upsilon is the model's input and gamma its output (an FFNN, a static map).
    ``trainable`` says whether the model's own parameters are learned inside the combination.
    """

    model: AbstractModel
    role: str = eqx.field(static=True)
    trainable: bool = eqx.field(static=True)

    def __init__(self, model: AbstractModel, role: str = "output", trainable: bool = True):
        if role not in ("vector_field", "output"):
            raise ValueError(f"System role: expected 'vector_field' or 'output'; received {role!r}.")
        self.model, self.role, self.trainable = model, role, trainable

    @property
    def n_in(self) -> int:
        return self.model.n_state if self.role == "vector_field" else self.model.n_input

    @property
    def n_out(self) -> int:
        return self.model.n_state if self.role == "vector_field" else self.model.n_output

    @property
    def in_names(self) -> tuple[str, ...]:
        return self.model.state_names if self.role == "vector_field" else self.model.input_names

    @property
    def out_names(self) -> tuple[str, ...]:
        m = self.model
        return tuple(f"d{n}" for n in m.state_names) if self.role == "vector_field" else m.output_names

    def __call__(self, t: Any, v: Any, z: Any, params: Params) -> Any:
        m = self.model
        if self.role == "vector_field":
            return m.hybrid_vector_field(t, v, z, jnp.zeros(m.n_input), params)
        return m.hybrid_output(t, jnp.zeros(m.n_state), z, v, params)

    def feedthrough(self) -> bool:
        """Whether gamma depends on upsilon (D_a / D_b of eq. 13), from the Jacobian at a random point."""
        v = jax.random.normal(jax.random.key(17), (self.n_in,))
        z = self.model.initial_discrete_state(self.model.params)
        # compiled as one program: taken op by op, each operation is dispatched and compiled on its own
        jac = jax.jit(jax.jacfwd(lambda v: self(0.0, v, z, self.model.params)))(v)
        return bool(np.any(np.asarray(jac) != 0))


def noisy(key: Any, shape: tuple[int, int], identity: bool, scale: float = 1e-4) -> Any:
    """Noisy identity I^ or noisy zero 0^ of specs 3.4: U(-scale, scale), then the diagonal set to 1."""
    w = jax.random.uniform(key, shape, minval=-scale, maxval=scale)
    if identity:
        n = min(shape)
        w = w.at[jnp.arange(n), jnp.arange(n)].set(1.0)
    return w


class Combination(eqx.Module):
    """The combined algebraic system s_z of eqs. (9)-(12), itself usable as a system (recursion).

    Args:
        a: the first system.
        b: the second system.
        n_z_in: size of the combination's input upsilon_z.
        n_z_out: size of the combination's output gamma_z.
        modes: block name (``W_az``, ..., ``b_z``) to its mode; missing blocks are ``zero``.
        values: matrices of ``frozen`` blocks and initial values of ``trainable`` ones.

    """

    a: System
    b: System
    n_z_in: int = eqx.field(static=True)
    n_z_out: int = eqx.field(static=True)
    modes: tuple[tuple[str, str], ...] = eqx.field(static=True)
    frozen: dict[str, Any]
    init: dict[str, Any]
    order: tuple[tuple[str, ...], ...] = eqx.field(static=True)
    loops: tuple[tuple[str, ...], ...] = eqx.field(static=True)

    def __init__(
        self,
        a: System,
        b: System,
        n_z_in: int,
        n_z_out: int,
        modes: Mapping[str, Mode],
        values: Mapping[str, Any] | None = None,
    ):
        values = dict(values or {})
        for name, mode in modes.items():
            if name not in BLOCKS + BIASES:
                raise ValueError(f"Combination block {name!r}: expected one of {BLOCKS + BIASES}.")
            if mode not in ("zero", "identity", "frozen", "trainable"):
                raise ValueError(
                    f"Combination {name} mode: expected zero, identity, frozen or trainable; "
                    f"received {mode!r}."
                )
        self.a, self.b, self.n_z_in, self.n_z_out = a, b, n_z_in, n_z_out
        self.modes = tuple((n, modes.get(n, "zero")) for n in BLOCKS + BIASES)
        self.frozen, self.init = {}, {}
        for name, mode in self.modes:
            shape = self.shape(name)
            if mode == "identity":
                if shape[0] != shape[1]:
                    raise ValueError(f"Combination {name}: identity needs a square block; shape is {shape}.")
                self.frozen[name] = jnp.eye(shape[0])
            elif mode in ("frozen", "trainable"):
                default = jnp.zeros(shape) if mode == "trainable" else None
                value = values.get(name, default)
                if value is None:
                    raise ValueError(f"Combination {name}: a frozen block needs its matrix in values.")
                value = jnp.asarray(value, dtype=float)
                if value.shape != shape:
                    raise ValueError(f"Combination {name}: expected shape {shape}; received {value.shape}.")
                (self.frozen if mode == "frozen" else self.init)[name] = value
        deps = self._edges()
        self.order = self._evaluation_order(deps)
        # algebraic loops: components of more than one node, or a node depending on itself
        comps: tuple[tuple[str, ...], ...] = self.order
        self.loops = tuple(c for c in comps if len(c) > 1 or any(n in deps[n] for n in c))

    # -- structure --------------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        rows = {"a": self.a.n_in, "b": self.b.n_in, "z": self.n_z_out}
        cols = {"a": self.a.n_out, "b": self.b.n_out, "z": self.n_z_in}
        if name.startswith("b_"):
            return (rows[name[2]],)
        return (rows[name[2]], cols[name[3]])

    def mode(self, name: str) -> str:
        return dict(self.modes)[name]

    def _edges(self) -> dict[str, set[str]]:
        """Node -> the unknown nodes it depends on (block-level incidence of eq. 13)."""
        active = {n for n, m in self.modes if m != "zero"}
        deps: dict[str, set[str]] = {n: set() for n in _NODES}
        for target in ("a", "b"):
            for source in ("a", "b"):
                if f"W_{target}{source}" in active:
                    deps[f"u{target}"].add(f"g{source}")
        if self.a.feedthrough():
            deps["ga"].add("ua")
        if self.b.feedthrough():
            deps["gb"].add("ub")
        return deps

    @staticmethod
    def _evaluation_order(deps: Mapping[str, set[str]]) -> tuple[tuple[str, ...], ...]:
        """Strongly connected components of the dependency graph in topological order."""
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        index = {n: i for i, n in enumerate(_NODES)}
        adj = np.zeros((4, 4))
        for node, sources in deps.items():
            for s in sources:
                adj[index[s], index[node]] = 1.0
        n_comp, labels = connected_components(csr_matrix(adj), directed=True, connection="strong")
        comps = [tuple(n for n in _NODES if labels[index[n]] == c) for c in range(n_comp)]
        ordered: list[tuple[str, ...]] = []
        done: set[str] = set()
        while len(ordered) < n_comp:
            for comp in comps:
                if comp in ordered:
                    continue
                outside = set().union(*(deps[n] for n in comp)) - set(comp)
                if outside <= done:
                    ordered.append(comp)
                    done |= set(comp)
        return tuple(ordered)

    # -- parameters -------------------------------------------------------------------------------
    def initial_params(self) -> Params:
        """Submodel parameters prefixed ``a_``/``b_`` plus every trainable block (row-major)."""
        out: dict[str, Any] = {}
        for prefix, sysm in (("a", self.a), ("b", self.b)):
            out.update({f"{prefix}_{k}": v for k, v in sysm.model.params.items()})
        out.update({name: jnp.ravel(v) for name, v in self.init.items()})
        return out

    def trainable_groups(self) -> tuple[str, ...]:
        groups = [name for name, mode in self.modes if mode == "trainable"]
        for prefix, sysm in (("a", self.a), ("b", self.b)):
            if sysm.trainable:
                groups += [f"{prefix}_{k}" for k in sysm.model.params]
        return tuple(groups)

    def matrix(self, name: str, params: Params) -> Any:
        """The current value of block ``name`` (zeros for a zero block)."""
        mode = self.mode(name)
        if mode == "trainable":
            return jnp.reshape(params[name], self.shape(name))
        if mode in ("identity", "frozen"):
            return self.frozen[name]
        return jnp.zeros(self.shape(name))

    @staticmethod
    def sub_params(params: Params, prefix: str) -> Params:
        return {k[2:]: v for k, v in params.items() if k.startswith(prefix + "_")}

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self, t: Any, v_z: Any, params: Params, z_a: Any = None, z_b: Any = None) -> dict[str, Any]:
        """All signals of the combination for input ``v_z``: ``ua, ga, ub, gb, gz``.

        Loop-free components are evaluated by substitution, algebraic loops by Newton's method.
        """
        pa, pb = self.sub_params(params, "a"), self.sub_params(params, "b")
        z_a = self.a.model.initial_discrete_state(self.a.model.params) if z_a is None else z_a
        z_b = self.b.model.initial_discrete_state(self.b.model.params) if z_b is None else z_b
        W = {n: self.matrix(n, params) for n in BLOCKS}
        bias = {n: (self.matrix(n, params) if self.mode(n) != "zero" else None) for n in BIASES}
        sizes = {"ua": self.a.n_in, "ga": self.a.n_out, "ub": self.b.n_in, "gb": self.b.n_out}

        def equation(node: str, val: Mapping[str, Any]) -> Any:
            if node == "ga":
                return self.a(t, val["ua"], z_a, pa)
            if node == "gb":
                return self.b(t, val["ub"], z_b, pb)
            i = node[1]
            return self._linear(i, v_z, val, W, bias[f"b_{i}"], sizes[node])

        val: dict[str, Any] = {}
        for comp in self.order:
            if comp not in self.loops:
                val[comp[0]] = equation(comp[0], val)
                continue
            splits = np.cumsum([sizes[n] for n in comp])[:-1].tolist()

            def residual(y, known, comp=comp, splits=splits):
                trial = dict(known, **dict(zip(comp, jnp.split(y, splits), strict=True)))
                return y - jnp.concatenate([equation(n, trial) for n in comp])

            import optimistix as optx  # only for algebraic loops (0.1 s to import)

            n_unknown = sum(sizes[n] for n in comp)
            sol = optx.root_find(
                residual,
                optx.Newton(rtol=1e-10, atol=1e-10),
                jnp.zeros(n_unknown),
                args=dict(val),
                throw=False,
                max_steps=64,
            )
            res = jnp.max(jnp.abs(residual(sol.value, dict(val))))
            bad = (sol.result != optx.RESULTS.successful) | ~(res < 1e-8)
            names = ", ".join(_LABEL[n] for n in comp)
            y = eqx.error_if(
                sol.value,
                bad,
                f"Combination: the algebraic loop ({names}) has no solution: Newton's method did not "
                "converge. Check the connection blocks on this loop.",
            )
            val.update(dict(zip(comp, jnp.split(y, splits), strict=True)))
        gz = self._linear("z", v_z, val, W, bias["b_z"], self.n_z_out)
        return dict(val, gz=gz)

    def _linear(self, i: str, v_z: Any, val: Mapping[str, Any], W: Mapping[str, Any], b: Any, n: int) -> Any:
        """Row ``i`` of the connection equations (eq. 11) without its zero blocks (fewer ops per step)."""
        out = None
        for j, source in (("z", v_z), ("a", val.get("ga")), ("b", val.get("gb"))):
            if self.mode(f"W_{i}{j}") != "zero":
                term = W[f"W_{i}{j}"] @ source
                out = term if out is None else out + term
        if b is not None:
            out = b if out is None else out + b
        return jnp.zeros(n, dtype=v_z.dtype) if out is None else out


TOPOLOGIES = ("PSD", "PS", "PD", "P", "SD", "S", "D")


def psd(
    a: System,
    b: System,
    topology: str = "PSD",
    order: Literal["a", "b"] = "a",
    *,
    key: Any,
    noise: float = 1e-4,
    bias: bool = False,
) -> Combination:
    """A PSD-family combination with the trainable blocks and initialisation of Tab. 2 (specs 3.4).

    With state-sized blocks (upsilon_z = x, gamma_z = dx/dt). Case a (s_a first): P -> W_az, W_bz, W_za,
    W_zb; S -> W_az, W_ba, W_zb; D -> W_zz. Case b mirrors a and b (S -> W_bz, W_ab, W_za). Intended-path
    blocks start as noisy identity, the other trainable blocks as noisy zero, the rest are static zero.

    Args:
        a: the system evaluated first in case a (e.g. the FPM).
        b: the other system (e.g. the MLM).
        topology: a name made of the letters P, S, D (``PSD``, ``PS``, ``PD``, ``P``, ``SD``, ``S``, ``D``).
        order: ``"a"`` (PSDa, eq. 14) or ``"b"`` (PSDb, eq. 18).
        key: PRNG key of the noise.
        noise: half-width of the uniform noise.
        bias: also train the biases b_a, b_b, b_z (initialised at zero).

    """
    if topology not in TOPOLOGIES:
        raise ValueError(f"psd topology: expected one of {TOPOLOGIES}; received {topology!r}.")
    if order not in ("a", "b"):
        raise ValueError(f"psd order: expected 'a' or 'b'; received {order!r}.")
    first, second = ("a", "b") if order == "a" else ("b", "a")
    n_z = a.n_in
    identity: set[str] = set()
    noisy_zero: set[str] = set()
    if "P" in topology:
        identity |= {f"W_{first}z", f"W_z{first}"}
        noisy_zero |= {f"W_{second}z", f"W_z{second}"}
    if "S" in topology:
        identity |= {f"W_{first}z", f"W_{second}{first}"}
        if "P" not in topology:
            identity.add(f"W_z{second}")
    if "D" in topology:
        noisy_zero.add("W_zz")
    noisy_zero -= identity
    combo = Combination(a, b, n_z, n_z, {})
    keys = jax.random.split(key, len(BLOCKS))
    values = {
        name: noisy(k, combo.shape(name), name in identity, noise)  # type: ignore[arg-type]
        for name, k in zip(BLOCKS, keys, strict=True)
        if name in identity | noisy_zero
    }
    modes: dict[str, Mode] = {name: "trainable" for name in values}
    if bias:
        modes.update({name: "trainable" for name in BIASES})
    return Combination(a, b, n_z, n_z, modes, values)
