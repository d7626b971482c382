"""Power-grid cases from pandapower's bundled networks: coupling strengths and generator buses.

The compositional-inference paper (specs/compositional-inference.md section 3.5) couples a second-order
Kuramoto network with ``K_ij = |Y_ij|`` (S71), the magnitude of the off-diagonal entries of the bus
admittance matrix built by the standard nodal (MATPOWER/PYPOWER ``makeYbus``) formulation. pandapower
ships the IEEE cases the paper used and the large European networks (PEGASE, RTE) as files inside the
package, so nothing is downloaded. Buses are numbered 0..N-1 in bus-table order; generator buses are the
unique generator-table buses in table order (the authors' code, [REPO]).

References:
    compositional-inference paper, SI (S71)-(S77); Zimmerman et al., MATPOWER manual, section 3.2
    (branch model: y_s = 1/(r + jx), tap t = tau e^{j theta_shift}, Y_ft = -y_s / conj(t),
    Y_tf = -y_s / t).

"""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from twinfer.data._checks import open_regular, regular_file

if TYPE_CHECKING:
    import scipy.sparse as sp

GRID_CASES: dict[str, str] = {
    "ieee9": "case9",
    "ieee14": "case14",
    "ieee30": "case30",
    "ieee39": "case39",
    "ieee57": "case57",
    "ieee118": "case118",
    "ieee300": "case300",
    "pegase1354": "case1354pegase",
    "pegase2869": "case2869pegase",
    "rte6470": "case6470rte",
    "pegase9241": "case9241pegase",
}
"""twinfer case name -> pandapower network function."""

# Column indices of the MATPOWER/PYPOWER branch table.
_F_BUS, _T_BUS, _BR_R, _BR_X, _TAP, _SHIFT, _BR_STATUS = 0, 1, 2, 3, 8, 9, 10


def branch_coupling(n_bus: int, branch: np.ndarray) -> sp.csr_matrix:
    """``K_ij = |Y_ij|`` (i != j) of the nodal admittance matrix, from a MATPOWER branch table.

    Args:
        n_bus: number of buses (0-based consecutive numbering in ``branch``).
        branch: MATPOWER branch table (at least 11 columns); out-of-service branches are skipped.

    Returns:
        Symmetric-pattern sparse matrix with zero diagonal. Parallel branches add as complex
        admittances before the magnitude is taken, as in Y_bus.

    """
    import scipy.sparse as sp  # grid cases only: not imported with twinfer.data (0.1 s)

    branch = np.real(np.asarray(branch))
    live = branch[:, _BR_STATUS] > 0
    br = branch[live]
    f = br[:, _F_BUS].astype(int)
    t = br[:, _T_BUS].astype(int)
    if f.size and (min(f.min(), t.min()) < 0 or max(f.max(), t.max()) >= n_bus):
        raise ValueError(f"branch table: bus numbers must lie in 0..{n_bus - 1}.")
    z = br[:, _BR_R] + 1j * br[:, _BR_X]
    if np.any(z == 0):
        raise ValueError("branch table: a branch with r = x = 0 has no finite admittance.")
    ys = 1.0 / z
    ratio = np.where(br[:, _TAP] == 0, 1.0, br[:, _TAP])
    tap = ratio * np.exp(1j * np.pi / 180.0 * br[:, _SHIFT])
    y_ft, y_tf = -ys / np.conj(tap), -ys / tap
    keep = f != t
    rows = np.concatenate([f[keep], t[keep]])
    cols = np.concatenate([t[keep], f[keep]])
    vals = np.concatenate([y_ft[keep], y_tf[keep]])
    y_off = sp.coo_matrix((vals, (rows, cols)), shape=(n_bus, n_bus)).tocsr()  # sums parallel branches
    y_off.sum_duplicates()
    coupling = sp.csr_matrix((np.abs(y_off.data), y_off.indices, y_off.indptr), shape=(n_bus, n_bus))
    coupling.eliminate_zeros()
    return coupling


@dataclass(frozen=True, eq=False)
class GridNetwork:
    """A power network reduced to what the Kuramoto model needs.

    Attributes:
        name: twinfer case name (``ieee300``, ``pegase9241``, ...).
        coupling: sparse ``K`` (N, N), ``K_ij = |Y_ij|``, zero diagonal.
        gen_buses: unique generator buses in generator-table order (0-based).
        bus_ids: the case's own bus numbers, in twinfer's 0..N-1 order (for labels).
        injection: each bus's scheduled net active power ``(P_gen - P_load) / baseMVA`` [p.u.] from the
            case's dispatch (in-service generators' PG less the bus's PD), or None where the case gives
            no dispatch (a MATPOWER file is read for its bus, generator-bus and branch columns only).

    """

    name: str
    coupling: sp.csr_matrix
    gen_buses: np.ndarray
    bus_ids: np.ndarray
    injection: np.ndarray | None = None

    @property
    def n_bus(self) -> int:
        return len(self.coupling.indptr) - 1

    @cached_property
    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """Padded neighbour lists ``(index (N, D), weight (N, D))``.

        Padding points at the bus itself with weight 0, so a gather-and-sum over the last axis needs no
        mask.
        """
        k = self.coupling
        degree = np.diff(k.indptr)
        width = max(int(degree.max(initial=0)), 1)
        index = np.repeat(np.arange(self.n_bus)[:, None], width, axis=1)
        weight = np.zeros((self.n_bus, width))
        for i in range(self.n_bus):
            lo, hi = k.indptr[i], k.indptr[i + 1]
            index[i, : hi - lo] = k.indices[lo:hi]
            weight[i, : hi - lo] = k.data[lo:hi]
        return index, weight


def _networks() -> Any:
    import pandapower.networks as pn

    return pn


def pandapower_networks() -> tuple[str, ...]:
    """Names of the network functions pandapower ships that take no argument (``case1888rte``, ...)."""
    import inspect

    pn = _networks()
    names = []
    for name in dir(pn):
        fn = getattr(pn, name)
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        params = inspect.signature(fn).parameters.values()
        if all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            names.append(name)
    return tuple(sorted(names))


def check_grid_case(case: str) -> str:
    """``case`` if :func:`load_grid` can load it, else a ValueError naming what is accepted.

    Accepted: a twinfer name (:data:`GRID_CASES`), the name of a pandapower network function
    (``case1888rte``, ``case_illinois200``, ...) or the path of a pandapower JSON file (``.json``) or a
    MATPOWER case file (``.m`` text or a ``.mat`` file as MATLAB's ``save`` or pandapower's ``to_mpc``
    writes one).
    """
    if case in GRID_CASES:
        return case
    path = Path(case)
    if path.suffix.lower() in (".json", ".m", ".mat"):
        if not path.exists():
            raise ValueError(
                f"grid case: expected an existing pandapower JSON or MATPOWER file; received {case!r} "
                "(no such file)."
            )
        regular_file(path, "grid case")
        return case
    known = pandapower_networks()
    if case not in known:
        cases = ", ".join(repr(n) for n in known if n.startswith("case"))
        raise ValueError(
            f"grid case: expected a twinfer name ({', '.join(map(repr, GRID_CASES))}), a pandapower "
            f"network (e.g. {cases}) or a .json / .m / .mat file; received {case!r}."
        )
    return case


def pandapower_case(case: str) -> tuple[Any, dict[str, Any]]:
    """The pandapower network ``case`` and its PYPOWER case tables (``to_ppc``, pi transformers).

    ``case`` is a twinfer name, a pandapower network function or a pandapower JSON file
    (:func:`check_grid_case`).

    Raises:
        ValueError: for a case that is none of these, listing what is accepted.

    """
    check_grid_case(case)
    from pandapower.converter.pypower.to_ppc import to_ppc

    logger = logging.getLogger("pandapower")
    level = logger.level
    logger.setLevel(logging.ERROR)  # notes on generator voltage limits, irrelevant to |Y|
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecation notes from pandapower's own dependencies
            if case.lower().endswith(".json"):
                net = _network_json(case)
            else:
                net = getattr(_networks(), GRID_CASES.get(case, case))()
            ppc: dict[str, Any] = to_ppc(net, init="flat", calculate_voltage_angles=True, trafo_model="pi")
    finally:
        logger.setLevel(level)
    return net, ppc


_NET = ("pandapower.auxiliary", "pandapowerNet")
_FRAME_KEYS = frozenset(
    {"orient", "dtype", "typ", "is_multiindex", "is_multicolumn", "index_name", "index_names", "column_name",
     "column_names"}
)  # fmt: skip
_JSON_TYPES: dict[tuple[str, str], frozenset[str]] = {
    _NET: frozenset(),
    ("pandas.core.frame", "DataFrame"): _FRAME_KEYS,
    ("pandas", "DataFrame"): _FRAME_KEYS,
    ("pandas.core.series", "Series"): _FRAME_KEYS,
    ("pandas", "Series"): _FRAME_KEYS,
    **{("pandas", name): frozenset({"dtype", "name"}) for name in ("Index", "RangeIndex", "MultiIndex")},
    **{("builtins", name): frozenset() for name in ("complex", "tuple", "set", "frozenset")},
    **{("shapely", name): frozenset() for name in ("Point", "LineString", "LinearRing", "Polygon",
                                                  "MultiPoint", "MultiLineString", "MultiPolygon")},
}  # fmt: skip
"""The ``(_module, _class)`` pairs a pandapower network file may hold, with the keys each may carry
besides ``_module``, ``_class`` and ``_object``: the network, its tables (pandas frames as
``pandapower.to_json`` writes them, their ``_object`` a JSON string), pandas indexes, the builtin and
numpy values pandapower's encoder writes (numpy: ``array`` and the scalar types) and shapely geometries.
pandapower imports the module any object names before its own check refuses the class (#52), so
:func:`check_network_json` walks the file first and refuses everything else."""
_JSON_TEXT = {_NET, *((m, c) for m, c in _JSON_TYPES if c in ("DataFrame", "Series"))}
"""Objects whose ``_object`` pandapower parses as JSON again (walked too)."""


def _numpy_scalar(module: str, name: str) -> bool:
    """``numpy.<name>`` is ``array`` or a numpy scalar type (what pandapower writes for numpy values)."""
    if module != "numpy":
        return False
    kind = getattr(np, name, None) if name.isidentifier() else None
    return name == "array" or (isinstance(kind, type) and issubclass(kind, np.generic))


def check_network_json(text: str, where: str) -> Any:
    """The parsed pandapower network JSON ``text``, every object in it checked against :data:`_JSON_TYPES`.

    Walks the document, and the JSON strings pandapower parses again (a table's ``_object``), before
    pandapower sees it: an object naming another module or class (``"_module": "os"``) is refused, so no
    module named by a data file is imported.

    Raises:
        ValueError: naming ``where``, the JSON location and the module and class, for a foreign object; for
            text that is not JSON, or JSON that is not a network ``pandapower.to_json`` wrote.

    """
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(
            f"{where}: expected a pandapower network in JSON; the file is not JSON ({error})."
        ) from None
    if not isinstance(document, dict) or (document.get("_module"), document.get("_class")) != _NET:
        keys = sorted(document)[:8] if isinstance(document, dict) else type(document).__name__
        raise ValueError(
            f"{where}: expected a pandapower network as pandapower.to_json writes it (an object with "
            f"_module {_NET[0]!r}, _class {_NET[1]!r}); received {keys}."
        )
    stack: list[tuple[str, Any]] = [("$", document)]
    while stack:
        at, value = stack.pop()
        if isinstance(value, list):
            stack.extend((f"{at}[{i}]", v) for i, v in enumerate(value))
            continue
        if not isinstance(value, dict):
            continue
        if "_module" in value or "_class" in value:
            kind = (value.get("_module"), value.get("_class"))
            extra = set(value) - {"_module", "_class", "_object"}
            allowed = _JSON_TYPES.get(kind) if all(isinstance(k, str) for k in kind) else None  # type: ignore[arg-type]
            if allowed is None and _numpy_scalar(*kind):  # type: ignore[arg-type]
                allowed = frozenset()
            if allowed is None or extra - allowed:
                what = f"_module {kind[0]!r}, _class {kind[1]!r}"
                if allowed is not None:
                    what += f" with keys {sorted(extra - allowed)}"
                raise ValueError(
                    f"{where}: expected only the objects a pandapower network holds (pandapower's network, "
                    f"pandas tables, numpy and builtin values, shapely geometries); received {what} at "
                    f"{at}. Nothing was imported; re-save the network with pandapower.to_json."
                )
            inner = value.get("_object")
            if kind in _JSON_TEXT and isinstance(inner, str):
                try:
                    value = {**value, "_object": json.loads(inner)}
                except (ValueError, RecursionError):
                    raise ValueError(
                        f"{where}: expected JSON text in {at}._object ({kind[1]}); received {inner[:40]!r}."
                    ) from None
        stack.extend((f"{at}.{k}", v) for k, v in value.items())
    return document


def _network_json(case: str) -> Any:
    """A pandapower network read from the JSON file ``case``, checked (:func:`check_network_json`) first."""
    import pandapower

    where = f"grid network {case!r}"
    with open_regular(case, where) as handle:
        raw = handle.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{where}: expected UTF-8 JSON; byte {error.start} is {raw[error.start]:#04x}."
        ) from None
    check_network_json(text, where)
    try:
        net = pandapower.from_json_string(text, convert=True)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, UserWarning) as error:
        raise ValueError(
            f"{where}: expected a pandapower network pandapower can read; it failed: {type(error).__name__}: "
            f"{error}."
        ) from None
    if not isinstance(net, pandapower.pandapowerNet) or "bus" not in net:
        raise ValueError(
            f"{where}: expected a pandapower network with a bus table; received {type(net).__name__}."
        )
    return net


_MATPOWER_TABLES = ("bus", "gen", "branch")


def read_matpower(path: str | Path) -> dict[str, np.ndarray]:
    """The ``bus``, ``gen`` and ``branch`` tables of a MATPOWER case file.

    A ``.m`` file is MATPOWER's text format (``mpc.bus = [ ... ];``). A ``.mat`` file is read with
    :func:`scipy.io.loadmat`: a struct ``mpc`` with fields ``bus``, ``gen`` and ``branch`` (what MATLAB's
    ``save('case.mat', 'mpc')`` and pandapower's ``converter.matpower.to_mpc`` write), or the tables as
    top-level variables (MATPOWER's version 1 layout). Both pass the same checks. Bus numbers are kept as
    in the file; :func:`load_grid` renumbers them 0..N-1 in bus-table order.

    Raises:
        ValueError: naming the file and the table that is missing or malformed.

    """
    where = f"MATPOWER file {str(path)!r}"
    if Path(path).suffix.lower() == ".mat":
        return _checked_tables(where, _mat_tables(regular_file(path, where), where))
    with open_regular(path, where) as handle:
        raw = handle.read()
    try:
        text = re.sub(r"%[^\n]*", "", raw.decode("utf-8"))  # comments
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{where}: expected UTF-8 text; line {line} holds the byte {raw[error.start]:#04x}."
        ) from None
    out = {}
    for table in _MATPOWER_TABLES:
        found = re.search(rf"mpc\.{table}\s*=\s*\[(.*?)\]\s*;", text, flags=re.S)
        if found is None:
            raise ValueError(f"{where}: expected a table mpc.{table} = [ ... ]; found none.")
        rows = [r.strip() for r in re.split(r"[;\n]", found.group(1)) if r.strip()]
        try:
            values = [[float(v) for v in row.replace(",", " ").split()] for row in rows]
        except ValueError as error:
            raise ValueError(f"{where} mpc.{table}: expected numbers; {error}.") from None
        widths = sorted({len(v) for v in values})
        if len(widths) != 1:
            raise ValueError(f"{where} mpc.{table}: expected rows of one width; received widths {widths}.")
        out[table] = np.asarray(values)
    return _checked_tables(where, out)


def _mat_tables(path: str | Path, where: str) -> dict[str, Any]:
    """The raw ``bus``, ``gen`` and ``branch`` arrays of a ``.mat`` file (struct ``mpc`` or variables)."""
    import scipy.io  # MATPOWER .mat files only

    try:
        contents = scipy.io.loadmat(str(path), squeeze_me=False)
    except NotImplementedError:  # scipy reads MAT versions 4 to 7.2, not the HDF5-based 7.3
        raise ValueError(
            f"{where}: expected a MAT file of version 4 to 7.2 (scipy.io.loadmat); received a version 7.3 "
            "(HDF5) file. Save it with save(..., '-v7') or as a .m case file."
        ) from None
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{where}: expected a MAT file (scipy.io.loadmat); could not read it ({error})."
        ) from None
    mpc = contents.get("mpc")
    if mpc is not None:
        names = getattr(getattr(mpc, "dtype", None), "names", None) or ()
        if np.size(mpc) != 1 or not names:
            raise ValueError(
                f"{where}: expected mpc to be one MATLAB struct with fields bus, gen and branch; received "
                f"{type(mpc).__name__} of shape {np.shape(mpc)}."
            )
        missing = [t for t in _MATPOWER_TABLES if t not in names]
        if missing:
            raise ValueError(
                f"{where}: expected the struct mpc to hold fields {', '.join(_MATPOWER_TABLES)}; it lacks "
                f"{', '.join(missing)} (fields: {', '.join(names)})."
            )
        return {t: mpc[t].flat[0] for t in _MATPOWER_TABLES}
    if all(t in contents for t in _MATPOWER_TABLES):  # version 1 layout: the tables as variables
        return {t: contents[t] for t in _MATPOWER_TABLES}
    variables = sorted(k for k in contents if not k.startswith("__"))
    raise ValueError(
        f"{where}: expected a struct mpc (or variables bus, gen, branch); received variables {variables}."
    )


def _checked_tables(where: str, tables: dict[str, Any]) -> dict[str, np.ndarray]:
    """The tables as 2-D float arrays, refused (naming the table) where MATPOWER's layout does not hold.

    Shared by the ``.m`` and ``.mat`` readers: numeric, two-dimensional, at least one bus, the branch
    table's 11 columns up to BR_STATUS (MATPOWER manual, Table B-3), and finite numbers in the columns
    twinfer reads (bus numbers, r, x, tap, shift, status; pandapower writes NaN in columns it leaves
    unset, such as a generator's MBASE).
    """
    out = {}
    for table in _MATPOWER_TABLES:
        raw = np.asarray(tables[table])
        if raw.dtype.kind == "c":  # pandapower's tables are complex with zero imaginary parts
            if np.any(np.imag(raw) != 0):
                raise ValueError(f"{where} mpc.{table}: expected real numbers; received complex values.")
            raw = np.real(raw)
        if raw.dtype.kind not in "fiub" or raw.ndim != 2:
            raise ValueError(
                f"{where} mpc.{table}: expected a two-dimensional numeric table; received dtype {raw.dtype} "
                f"of shape {raw.shape}."
            )
        out[table] = raw.astype(np.float64)
    if out["bus"].shape[0] == 0 or out["bus"].shape[1] < 1 or out["gen"].shape[1] < 1:
        raise ValueError(
            f"{where}: expected at least one bus and a bus number in column 1 of mpc.bus and mpc.gen; "
            f"received mpc.bus of shape {out['bus'].shape}, mpc.gen of shape {out['gen'].shape}."
        )
    if out["branch"].shape[1] < 11:
        raise ValueError(
            f"{where} mpc.branch: expected at least 11 columns; received {out['branch'].shape[1]}."
        )
    read = {"bus": [0], "gen": [0], "branch": [_F_BUS, _T_BUS, _BR_R, _BR_X, _TAP, _SHIFT, _BR_STATUS]}
    for table, columns in read.items():
        bad = ~np.isfinite(out[table][:, columns])
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{where} mpc.{table}: expected finite numbers in columns {[c + 1 for c in columns]}; "
                f"received {out[table][row, columns[col]]} in row {row + 1}, column {columns[col] + 1}."
            )
    return out


def _matpower_tables(case: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """A MATPOWER file's tables with buses renumbered 0..N-1, and the file's bus numbers."""
    tables = read_matpower(case)
    for table, columns in (("bus", (0,)), ("gen", (0,)), ("branch", (_F_BUS, _T_BUS))):
        values = tables[table][:, columns]
        bad = values != np.round(values)
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"MATPOWER file {case!r} mpc.{table}: expected whole bus numbers in column "
                f"{columns[col] + 1}; received {float(values[row, col])!r} in row {row + 1}."
            )
    numbers = tables["bus"][:, 0].astype(int)
    index = {int(b): i for i, b in enumerate(numbers)}
    branch = tables["branch"].copy()
    try:
        for col in (_F_BUS, _T_BUS):
            branch[:, col] = [index[int(b)] for b in branch[:, col]]
        gen_bus = np.asarray([index[int(b)] for b in tables["gen"][:, 0]], dtype=float)
    except KeyError as error:
        raise ValueError(
            f"MATPOWER file {case!r}: a branch or generator names bus {error}, not in mpc.bus."
        ) from None
    bus = np.column_stack([np.arange(len(numbers)), tables["bus"][:, 1:]])
    return {"bus": bus, "gen": gen_bus[:, None], "branch": branch}, numbers


def load_grid(case: str) -> GridNetwork:
    """Load a power network as a :class:`GridNetwork`.

    Args:
        case: a twinfer name (:data:`GRID_CASES`: ``ieee9`` ... ``ieee300``, ``pegase1354``,
            ``pegase2869``, ``rte6470``, ``pegase9241``), any pandapower network function that takes no
            argument (``case1888rte``, ``case_illinois200``, ...), or the path of a pandapower JSON file
            or a MATPOWER case file (``.m``, or ``.mat`` as MATLAB or pandapower's ``to_mpc`` writes).
            Nothing is downloaded.

    Raises:
        ValueError: for a case that is none of these (listing what is accepted), or a malformed file.

    """
    if case.lower().endswith((".m", ".mat")):
        check_grid_case(case)
        ppc, ids = _matpower_tables(case)
    else:
        net, ppc = pandapower_case(case)
        ids = np.asarray(net.bus.name.values if "name" in net.bus else np.arange(len(net.bus)))
    bus = np.real(np.asarray(ppc["bus"]))
    n_bus = bus.shape[0]
    if n_bus < 2 or np.asarray(ppc["branch"]).shape[0] == 0:
        raise ValueError(
            f"grid case {case!r}: expected a network of at least 2 buses joined by branches; received "
            f"{n_bus} buses and {np.asarray(ppc['branch']).shape[0]} branches."
        )
    if not np.array_equal(bus[:, 0].astype(int), np.arange(n_bus)):
        raise ValueError(
            f"grid case {case!r}: expected buses numbered 0..{n_bus - 1} in the converted table."
        )
    gen_bus = np.real(np.asarray(ppc["gen"]))[:, 0].astype(int)
    _, first = np.unique(gen_bus, return_index=True)
    gens = gen_bus[np.sort(first)]
    if ids.shape[0] != n_bus:  # pandapower dropped out-of-service buses while converting
        ids = np.arange(n_bus)
    return GridNetwork(
        name=case,
        coupling=branch_coupling(n_bus, np.asarray(ppc["branch"])),
        gen_buses=gens,
        bus_ids=ids,
        injection=_injection(ppc),
    )


_PD, _PG, _GEN_STATUS = 2, 1, 7
"""MATPOWER columns (from 0): the bus's active load, a generator's active output and its status."""


def _injection(ppc: dict[str, Any]) -> np.ndarray | None:
    """Each bus's scheduled net active power injection [p.u.] (:attr:`GridNetwork.injection`), or None."""
    bus, gen = np.real(np.asarray(ppc["bus"])), np.real(np.asarray(ppc["gen"]))
    base = float(np.real(ppc.get("baseMVA", 0.0)))
    if bus.shape[1] <= _PD or gen.shape[1] <= _GEN_STATUS or not base > 0:
        return None
    p = -bus[:, _PD].copy()
    live = gen[:, _GEN_STATUS] > 0
    np.add.at(p, gen[live, 0].astype(int), gen[live, _PG])
    return p / base if np.all(np.isfinite(p)) else None


_BUS_COLUMN = re.compile(r"^(?P<quantity>theta|omega)[ _]?(?P<bus>[0-9]+)$", re.IGNORECASE)


def grid_columns(net: GridNetwork, present: Sequence[str], where: str) -> list[str]:
    """The measurement columns among ``present``: ``theta<b>`` / ``omega<b>``, buses ``b`` = 1..N.

    Buses are counted from 1 in the network's bus order (:attr:`GridNetwork.bus_ids` gives the case's own
    numbers). A column that names a phase or frequency of a bus outside 1..N (``theta0``: numbered from
    0?), or spelt otherwise (``Theta_3``), is refused rather than left out, so no channel is shifted onto
    another bus or dropped without notice.

    Returns:
        The measured columns in the order ``theta1..thetaN, omega1..omegaN``.

    Raises:
        ValueError: naming ``where``, the columns expected and those received; for no measured column.

    """
    n = net.n_bus
    names = [f"{q}{b + 1}" for q in ("theta", "omega") for b in range(n)]
    known = set(names)
    foreign = [c for c in present if _BUS_COLUMN.match(c) and c not in known]
    measured = [c for c in names if c in set(present)]
    if foreign or not measured:
        buses = sorted({int(m["bus"]) for c in foreign if (m := _BUS_COLUMN.match(c))})
        hint = ""
        if 0 in buses:
            hint = " Buses are numbered from 1 (theta1 is the first bus): renumber the columns by one."
        elif buses and set(buses) <= {int(i) for i in net.bus_ids if float(i).is_integer()}:
            hint = (
                f" Columns count the buses 1..{n} in the network's order, not by the case's own numbers "
                f"({', '.join(map(str, net.bus_ids[:8]))}{', ...' if n > 8 else ''})."
            )
        elif any(not c.islower() or "_" in c or " " in c for c in foreign):
            hint = " Write them in lower case, without a separator: theta3, omega3."
        raise ValueError(
            f"{where}: expected measurement columns theta<bus> / omega<bus> for the buses 1..{n} of "
            f"{net.name!r} (theta1 .. theta{n}, omega1 .. omega{n}); received "
            + (f"{foreign} (no such bus)." if foreign else f"none among {sorted(present)[:10]}.")
            + hint
        )
    return measured
