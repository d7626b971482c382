"""Graphs that differ only in numbers, run through one compiled scan, beside a central graph's scan.

Estimators that share a graph's structure and differ in numbers (message-kind flags, law coefficients,
noise) need one compiled program: :func:`scan_variants` compiles the first variant's scan and the central
graph's, ahead of time and in a background thread (:func:`twinfer.programs.compiling`, which loads them
whole where an earlier run kept them), and starts every variant as soon as its program is ready; one
variant, built by a function while the scans compile or run (a law fitted meanwhile), runs last. The
numbers are those of running everything one after another: the same programs on the same inputs.

References:
    Ghorbani & Hackl, "Subsystem structure as an inferential resource for coupled engineered systems",
    section 1, Alg. 1 (Jacobi message passing); specs/compositional-inference.md 3.1 and section 5.

"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from twinfer.data import Dataset
from twinfer.errors import TwinferValueError
from twinfer.infer.graph._graph import Graph
from twinfer.infer.graph._results import unpack
from twinfer.infer.graph._run import compile as compile_engine
from twinfer.infer.graph._run import with_numbers
from twinfer.programs import Job, compiling


def scan_variants(
    variants: Mapping[str, Graph],
    central: Graph,
    late: Callable[[], tuple[str, Graph]],
    data: Dataset,
    keys: Sequence[Any],
    finish: Callable[[str, Mapping[str, Any]], Any],
    thread_name: str = "twinfer-compile",
) -> tuple[dict[str, Any], dict[str, float]]:
    """Run ``central`` and every variant of one graph's structure on ``data`` (Jacobi, held record).

    The first graph of ``variants`` is compiled (:func:`twinfer.infer.graph._run.compile`), the others
    run through its scan with their own numbers (:func:`~twinfer.infer.graph._run.with_numbers`);
    ``central`` is the second compiled scan. Both are loaded whole where an earlier run kept them
    under ``keys`` (one per scan: the variants', the central's), otherwise traced and lowered here and
    compiled in a background thread. Meanwhile ``late()`` builds the last variant (its name and graph),
    which waits for nothing but itself. The record is read held: row ``k + 1``'s measurement with row
    ``k``'s input.

    Args:
        variants: the graphs of one structure, by name, in their run order.
        central: the central graph (the second program).
        late: builds the last variant while the scans compile or run.
        data: the record, with inputs.
        keys: the two programs' keys (:func:`twinfer.programs.load`).
        finish: called with each estimator's name and its unpacked per-subsystem results
            (:func:`~twinfer.infer.graph._results.unpack`); its value is that estimator's entry.
        thread_name: the compiling thread's name.

    Returns:
        ``finish``'s value per estimator (``"central"``, the variants, the late one), and the timings
        ``timing.compile_s`` (from the compilation's start until both scans are traced and compiled, or
        loaded) and ``timing.run_s`` (from the first estimator started until all are done, including the
        wait for ``late``).

    """
    if data.inputs is None:
        raise TwinferValueError("scan_variants data: expected the applied forces as inputs; received none.")
    us = np.asarray(data.inputs[:-1], dtype=np.float64)  # y_k+1 read with u_k: a held record
    ys = np.asarray(data.observations[1:], dtype=np.float64)
    masks = np.isfinite(ys)
    first, *others = variants.items()
    t0 = time.perf_counter()
    comp = compile_engine(first[1], "jacobi")
    comp_c = compile_engine(central, "jacobi")
    numbers = {first[0]: comp.numbers, **{name: with_numbers(comp, g) for name, g in others}}
    jobs = [
        Job(
            comp.scan, (comp.numbers, us, ys, masks), keys[0], [(n, us, ys, masks) for n in numbers.values()]
        ),
        Job(comp_c.scan, (comp_c.numbers, us, ys, masks), keys[1], [(comp_c.numbers, us, ys, masks)]),
    ]
    with compiling(jobs, thread_name=thread_name) as (job, job_c):
        name_late, graph_late = late()
        numbers[name_late] = with_numbers(comp, graph_late)
        _, outs_c, compiled_c = job_c.result()
        exe, outs, compiled = job.result()
    outs.append(exe(numbers[name_late], us, ys, masks))
    timings = {"timing.compile_s": max(compiled, compiled_c) - t0}
    raw = {"central": (comp_c, comp_c.numbers, outs_c[0])}
    for (name, num), res_outs in zip(numbers.items(), outs, strict=True):
        raw[name] = (comp, num, res_outs)
    out = {}
    for name, (c, num, res_outs) in raw.items():
        if name == name_late:  # the others are unpacked while it runs
            jax.block_until_ready(res_outs)
            timings["timing.run_s"] = time.perf_counter() - min(compiled, compiled_c)
        out[name] = finish(name, unpack(c, num, res_outs))
    return out, timings


def central_graph(graph: Graph, estimator: str | None = None) -> Graph:
    """The centralised counterpart of ``graph``: its monolithic model (:meth:`Graph.monolithic`) as one node.

    The same subsystems and interfaces assembled into one global model, so the central baseline always
    has the graph's physics; its estimates come in ``graph``'s global state order. ``estimator`` replaces
    the monolithic node's estimator (``"kf"``: one Kalman filter on the linearisation; default: the
    subsystems' own).
    """
    mono = graph.monolithic("central")
    if estimator is not None:
        mono = dataclasses.replace(mono, estimator=estimator)
    return Graph("central", [mono], state_order=graph.state_order)
