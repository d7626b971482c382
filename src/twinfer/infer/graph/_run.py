"""A graph compiled for its engine and run over a record: per subsystem, or merged into one Estimate.

:func:`compile` picks the engine (local message passing for a graph of interfaces, the field engine for
a graph coupled by a :class:`~twinfer.infer.graph.Field`); :func:`compiled_for` reuses one compiled
program for every graph of one structure; :func:`run` and :func:`run_field` scan it over a record and
return each subsystem's :class:`~twinfer.infer.Estimate`; :func:`estimate` merges them into one in the
graph's state order. The scan is marked as the run's kernel (:func:`twinfer.timing.kernel`), so
:func:`twinfer.timing.timed` times it apart from the host-side work around it.

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource for coupled engineered systems",
    section 1, Alg. 1-3 (specs/compositional-inference.md sections 1-2).

"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.infer._estimate import Estimate
from twinfer.infer.graph._cache import COMPILED
from twinfer.infer.graph._field import FieldEngine, check_field_run, compile_field
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._messages import Schedule, _group_key, compile_messages
from twinfer.infer.graph._numbers import Compiled, Numbers, numbers_of
from twinfer.infer.graph._parts import Subsystem
from twinfer.infer.graph._record import _prepare_record
from twinfer.infer.graph._results import (
    _check_divergence,
    _merged,
    _subsystem_nis,
    _total_nis,
    _warn_inconsistent,
    field_estimates,
    field_moments,
    unpack,
    unpack_moments,
)
from twinfer.timing import kernel


def compile(  # noqa: A001
    graph: Graph, schedule: Schedule | str = "jacobi", *, mesh: jax.sharding.Mesh | None = None
) -> Compiled:
    """Build the stacked arrays and index maps of ``graph`` and jit one time step for ``schedule``.

    Args:
        graph: the graph (nested graphs are flattened).
        schedule: a :class:`Schedule` or the name of one with K = 1.
        mesh: a one-axis device mesh for a graph coupled by a :class:`Field`: each group's member axis
            is padded with inert members to a multiple of its size and split over its devices
            (``jax.sharding``). On several hosts, build it from ``jax.devices()`` after
            :func:`twinfer.sharding.init_distributed`.

    Returns:
        :class:`Compiled` with ``numbers`` (the graph's arrays), ``step(numbers, carry, (u, y, mask))``
        and ``scan(numbers, us, ys, masks, check=False)``, both jitted; numbers can be swapped without
        retracing. ``check=True`` makes the scan raise inside ``jit`` when a subsystem diverges.

    Raises:
        ValueError: naming the schedule option when it is unknown.

    """
    if isinstance(schedule, str):
        schedule = Schedule(kind=schedule)
    if mesh is not None and len(mesh.axis_names) != 1:
        raise ValueError(f"compile mesh: expected a mesh with one axis; received axes {mesh.axis_names}.")
    if graph.fields:
        return compile_field(graph, schedule, mesh)
    if mesh is not None:
        raise ValueError("compile mesh: only a graph coupled by a field shards its members; received a mesh.")
    return compile_messages(graph, schedule)


def with_numbers(compiled: Compiled, graph: Graph) -> Numbers:
    """The numbers of another graph with the same structure as the compiled one (no recompilation)."""
    subs, edges = graph.flatten()
    if tuple(s.name for s in subs) != compiled.names:
        raise ValueError(
            f"with_numbers: expected subsystems {compiled.names}; received {tuple(s.name for s in subs)}."
        )
    return numbers_of(subs, edges, list(compiled.groups), list(compiled.edge_groups))


def _structure(graph: Graph, schedule: Schedule) -> Any:
    """What a compiled program depends on, not the numbers it runs on.

    Every subsystem's functions, shapes, ports and data-column counts; every interface's law, ends, kind
    and gamma shapes; the schedule.
    """
    subs, edges = graph.flatten()
    return (
        schedule,
        tuple((s.name, _group_key(s)) for s in subs),
        tuple(
            (e.law, e.sender, e.sender_port, e.receiver, e.receiver_port, e.kind, e.rule,
             tuple(jnp.shape(leaf) for leaf in jax.tree_util.tree_leaves(e.gamma)))
            for e in edges
        ),
    )  # fmt: skip


def compiled_for(graph: Graph, schedule: Schedule | str = "jacobi") -> Compiled:
    """The compiled program of ``graph``'s structure: compiled once, then reused (least recently used of 16).

    Graphs that differ only in numbers (parameters, initial values, noise, data columns) share one
    program, so repeated :func:`run` calls on new numbers do not recompile; :func:`run` passes each
    graph's own numbers. A graph coupled by a field is compiled anew (its mesh is part of it).
    """
    if isinstance(schedule, str):
        schedule = Schedule(kind=schedule)
    if graph.fields:
        return compile(graph, schedule)
    chosen = schedule
    return COMPILED.get(lambda: _structure(graph, chosen), lambda: compile(graph, chosen))


def run(
    graph: Graph,
    dataset: Any = None,
    schedule: Schedule | str = "jacobi",
    *,
    us: Any = None,
    ys: Any = None,
    compiled: Compiled | None = None,
    numbers: Numbers | None = None,
) -> dict[str, Estimate]:
    """Run the compiled graph over a record and return each subsystem's :class:`Estimate` by name.

    Each holds the subsystem's own columns (its ``state_names``, ``"<subsystem>[i]"`` where unnamed, its
    padding states included) over the record's times (the step numbers 0..T with arrays): means,
    standard deviations and covariances, the one-step predictions ``pred_means``/``pred_covs``, the
    log-likelihood and its terms ``step_logliks``, and ``step_nis`` (:func:`~._results.unpack`).

    The record is a :class:`twinfer.data.Dataset` (step k applies ``inputs[k]`` over [t_k, t_{k+1}) and
    updates with ``observations[k+1]``, read with the input its ``alignment`` says:
    :meth:`~twinfer.data.Dataset.step_inputs`) or arrays ``us`` (T, n_u) and ``ys`` (T, n_y), row k
    ``u_k`` and ``y_{k+1} = h(x_{k+1}, u_k)``.
    Missing values: a NaN observation is missing and skipped (the Dataset's masked entries are NaN);
    an infinite one is an error, as is any non-finite input. Without ``compiled``, the program of the
    graph's structure is compiled once and reused (:func:`compiled_for`).

    Raises:
        ValueError: for a dataset whose output or input names are not the graph's
            (:meth:`~twinfer.infer.graph.Graph.check_dataset`, before anything is compiled), when the
            graph references data columns the record does not have, when ``us``/``ys``
            have the wrong shape or dtype (float64 required) or hold an infinite observation or a
            non-finite input, and when a subsystem's x0, P0, Q or R is non-finite or not positive
            semi-definite, naming the field, the expected and the received value.
        DivergenceError: (a ``ValueError``) when a subsystem's state becomes non-finite, its
            covariance stops being positive semi-definite, or an innovation exceeds 1e4 predicted
            standard deviations (a finite runaway, ``NIS_DIVERGED``), naming the subsystem, the first
            such step (and its time with a dataset) and the likely causes.

    """
    graph.check_dataset(dataset, "run")
    compiled, chosen, outs, times, _ = _scan_record(graph, dataset, schedule, us, ys, compiled, numbers)
    _check_divergence(graph, unpack_moments(compiled, chosen, outs), times)
    return unpack(compiled, chosen, outs, _subsystems(graph), times)


def _subsystems(graph: Graph) -> dict[str, Subsystem]:
    """The graph's subsystems (nested graphs flattened) by name."""
    return {s.name: s for s in graph.flatten()[0]}


def _scan_record(
    graph: Graph, dataset: Any, schedule: Schedule | str, us: Any, ys: Any, compiled: Any, numbers: Any
) -> tuple[Compiled, Numbers, Any, Any, np.ndarray]:
    """The checked record through the (cached) compiled scan: ``(compiled, numbers, outs, times, masks)``."""
    if compiled is None:
        compiled = compiled_for(graph, schedule)
        if numbers is None and not isinstance(compiled.engine, FieldEngine):
            numbers = with_numbers(compiled, graph)  # this graph's numbers in the cached program
    if isinstance(compiled.engine, FieldEngine):
        raise ValueError(
            f"run: graph {graph.name!r} is coupled by a field; run it with twinfer.estimate (the field "
            "engine, run_field), which keeps the marginal standard deviations only."
        )
    chosen: Numbers = compiled.numbers if numbers is None else numbers
    us, ys, masks, times, us_meas = _prepare_record(compiled, chosen, dataset, us, ys)
    outs = kernel(
        compiled.scan, chosen, jnp.asarray(us), jnp.asarray(ys), jnp.asarray(masks), us_meas=us_meas
    )
    return compiled, chosen, outs, times, masks


def estimate(
    graph: Graph,
    dataset: Any = None,
    schedule: Schedule | str = "jacobi",
    *,
    us: Any = None,
    ys: Any = None,
    times: Any = None,
) -> Estimate:
    """Run ``graph`` over a record (as :func:`run`) and merge the subsystems into one :class:`Estimate`.

    Columns are the subsystems' ``state_names`` (``"<subsystem>[i]"`` where unnamed; padding states,
    named ``"~..."``, are left out), those in the graph's ``state_order`` first (a chain's
    ``x1..xn, v1..vn``, then its unknowns; a power grid's ``theta``, ``omega``, ``Omega`` per bus); the
    means and standard deviations are each subsystem's own (a distributed estimate keeps no
    cross-covariances, so ``covs`` is None; where the subsystems' errors are correlated, as along a
    chain of accelerometers, its bands are too narrow: :func:`banded_estimate` keeps those
    correlations); the log-likelihood is the sum of the subsystems' (NaN for a graph coupled by a
    field, run by :func:`run_field`, which keeps none). Times are the dataset's, or ``times`` (T + 1,)
    with arrays, or the step numbers 0..T.

    ``nis`` is the central filter's consistency statistic over the subsystems that update (``"ukf"``,
    ``"kf"``, ``"ekf"``): each one's normalised innovation squared ``v^T S^-1 v`` per step over its
    observed outputs, summed over the subsystems and the steps and divided by the number of observed
    values they read, so about 1 for consistent local filters (per step, the sum over the subsystems
    is then about chi-square with the number of observed outputs). None for a graph coupled by a field
    or without such a subsystem or observed value.

    Raises:
        ValueError: as :func:`run`, and when two subsystems name the same column or ``times`` has the
            wrong length.

    Warns:
        FilterConsistencyWarning: by the central filter's rule (:func:`twinfer.infer.filters.run_filter`):
            when ``nis`` exceeds ``NIS_WARN`` (10), or, over at least ``NIS_MIN_COUNT`` observed values,
            is below ``NIS_LOW`` (0.1), naming the subsystems whose own average is furthest off.

    """
    return estimate_with(graph, dataset, schedule, us=us, ys=ys, times=times)


def estimate_with(
    graph: Graph,
    dataset: Any,
    schedule: Schedule | str | None,
    *,
    us: Any = None,
    ys: Any = None,
    times: Any = None,
    compiled: Compiled | None = None,
    numbers: Numbers | None = None,
) -> Estimate:
    """:func:`estimate` on a given compiled program and numbers (a Program's run), or the cached ones."""
    graph.check_dataset(dataset, "estimate")
    nis = None
    if graph.fields:
        fields, _ = _field_scan(graph, dataset, us, ys, compiled, None)
        result = {k: (means, stds, float("nan")) for k, (means, stds) in field_moments(*fields).items()}
    else:  # the marginals straight from the factors: no (T, n, n) covariance formed, O(T n^2) on the host
        compiled, chosen, outs, times_, masks = _scan_record(
            graph, dataset, schedule or "jacobi", us, ys, compiled, numbers
        )
        result = _checked_moments(graph, compiled, chosen, outs, times_)
        per = _subsystem_nis(compiled, chosen, outs, masks)
        nis = _total_nis(per)
        loglik = float(sum(r[2] for r in result.values()))
        _warn_inconsistent("graph estimate", nis, per, loglik)
    return dataclasses.replace(_merged(graph, result, dataset, times), nis=nis)


def _checked_moments(graph: Graph, compiled: Compiled, chosen: Numbers, outs: Any, times: Any) -> dict:
    moments = unpack_moments(compiled, chosen, outs)
    _check_divergence(graph, moments, times)
    return {k: (m, sd, float(np.sum(ll))) for k, (m, sd, ll) in moments.items()}


def run_field(
    graph: Graph,
    dataset: Any = None,
    *,
    us: Any = None,
    ys: Any = None,
    compiled: Compiled | None = None,
    mesh: jax.sharding.Mesh | None = None,
) -> dict[str, Estimate]:
    """Run a field graph over a record; each subsystem's filtered means and standard deviations by name.

    Each subsystem's :class:`Estimate` holds its own columns (as :func:`run`'s) over the record's times
    (the step numbers 0..T with arrays), without covariances or a log-likelihood.

    The record is a :class:`twinfer.data.Dataset` or arrays ``us`` (T, n_u) and ``ys`` (T, n_y), aligned
    as in :func:`twinfer.infer.graph._run.run` (NaN observations are missing). Only marginal standard
    deviations are kept: a network of thousands of subsystems would not hold every covariance over time.

    Raises:
        ValueError: as :func:`twinfer.infer.graph._run.run` for the record and the numbers, and for a
            coupling too stiff for ``MAX_SUBSTEPS`` sub-steps (the field engine's compile).
        DivergenceError: (a ``ValueError``) when a subsystem diverges, naming it, the step and time
            (:func:`check_field_run`).

    """
    graph.check_dataset(dataset, "run_field")
    fields, times = _field_scan(graph, dataset, us, ys, compiled, mesh)
    return field_estimates(*fields, _subsystems(graph), times)


def _field_scan(
    graph: Graph, dataset: Any, us: Any, ys: Any, compiled: Compiled | None, mesh: Any
) -> tuple[tuple[Compiled, Any, Any], Any]:
    """The field engine's checked scan over a record: ``((compiled, means, stds), times)``.

    Raises:
        DivergenceError: as :func:`run_field` (:func:`check_field_run`).

    """
    compiled = compile(graph, mesh=mesh) if compiled is None else compiled
    us, ys, masks, times, us_meas = _prepare_record(compiled, compiled.numbers, dataset, us, ys)
    means, stds, ok = kernel(
        compiled.scan, compiled.numbers, jnp.asarray(us), jnp.asarray(ys), jnp.asarray(masks), us_meas=us_meas
    )
    check_field_run(compiled, jax.tree_util.tree_map(np.asarray, ok), times)
    return (compiled, means, stds), times
