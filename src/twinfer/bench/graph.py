"""Benchmark ``graph``: compile and run time of the four chain4 estimators on the graph engine.

The estimators of case ``chain4`` (specs/compositional-inference.md section 3.1) on its default data:
``central`` (the UKF on the monolithic model, its own compiled scan) and the distributed
``deterministic``, ``probabilistic`` and ``sindy`` Jacobi filters, which share one compiled scan and
differ only in numbers. Each is timed with :func:`time_jitted`: the first call (trace + compile + run)
apart from the median of repeated runs; a variant that reuses the shared compilation shows a compile
time close to its run time.

Benchmark ``chain4-process``: wall time of whole ``twinfer run chain4`` processes, cold and warm.

Benchmark ``chain6``: the 6-DOF case's T9, a distributed UKF pass against graph-diffusion propagation.
"""

from __future__ import annotations

import numpy as np

from twinfer.bench._harness import Progress, register
from twinfer.timing import time_jitted


@register("graph", "chain4's four estimators on the graph engine: compile and run time of each")
def bench_graph(quick: bool, progress: Progress) -> dict[str, float]:
    """Compile and median run time of central, deterministic, probabilistic and SINDy estimators."""
    from twinfer.experiments.chain4 import (
        CASE,
        Chain4Config,
        build_central,
        build_graph,
        learn_interface_law,
        simulate,
    )
    from twinfer.infer.graph import compile_graph, with_numbers

    config = Chain4Config.model_validate(dict(CASE.quick) if quick else {})  # the case's --quick size
    repeats = 3 if quick else 5
    progress(f"simulate chain4 ({config.n_steps} steps) and fit the SINDy law")
    data = simulate(config)
    assert data.inputs is not None
    us = np.asarray(data.inputs[:-1])
    ys = np.asarray(data.observations[1:])
    masks = np.isfinite(ys)
    xi = learn_interface_law(config).xi
    comp_c = compile_graph(build_central(config), "jacobi")
    comp = compile_graph(build_graph(config, "deterministic"), "jacobi")
    runs = {
        "central": (comp_c, comp_c.numbers),
        "deterministic": (comp, comp.numbers),
        "probabilistic": (comp, with_numbers(comp, build_graph(config, "probabilistic"))),
        "sindy": (comp, with_numbers(comp, build_graph(config, "learned", xi))),
    }
    out: dict[str, float] = {"graph.steps": float(config.n_steps)}
    for name, (c, numbers) in runs.items():
        progress(f"{name}: compile + {repeats} runs")
        res = time_jitted(c.scan, numbers, us, ys, masks, repeats=repeats)
        out[f"graph.{name}.compile_s"] = res.compile_s
        out[f"graph.{name}.run_s"] = res.median_s
    out["graph.all.run_s"] = sum(out[f"graph.{n}.run_s"] for n in runs)
    out["graph.all.compile_s"] = out["graph.central.compile_s"] + out["graph.deterministic.compile_s"]
    return out


@register("chain4-process", "whole `twinfer run chain4` processes: cold (empty compilation cache), warm")
def bench_chain4_process(quick: bool, progress: Progress) -> dict[str, float]:
    """Median wall seconds of a whole ``twinfer run chain4`` process (quick: ``--quick``), cold and warm.

    Each repeat gets a fresh, empty compilation cache (``TWINFER_CACHE_DIR``): its first run is cold
    (imports, tracing, every compilation), the second warm (the compiled programs read from that
    cache), as a user's first and later runs. The processes inherit this one's cores (``--cores``); they
    never import modules from the working folder (:func:`twinfer.programs.twinfer_command`).
    """
    import os
    import statistics
    import subprocess
    import tempfile
    import time

    from twinfer.programs import twinfer_command

    repeats = 1 if quick else 3
    cmd = twinfer_command("run", "chain4")
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    for i in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
            env["TWINFER_CACHE_DIR"] = os.path.join(tmp, "xla")
            for kind in ("cold", "warm"):
                progress(f"chain4 process {i + 1}/{repeats}, {kind}")
                start = time.perf_counter()
                done = subprocess.run(
                    [*cmd, *(["--quick"] if quick else []), "--out", tmp], env=env, capture_output=True
                )
                times[kind].append(time.perf_counter() - start)
                if done.returncode:
                    raise RuntimeError(f"twinfer run chain4 failed: {done.stderr.decode()[-2000:]}")
    out = {f"chain4_process.{kind}_s": statistics.median(v) for kind, v in times.items()}
    return out | {"chain4_process.repeats": float(repeats)}


@register("chain6", "T9: the 6-DOF chain's distributed UKF pass against 1-hop and heat-kernel propagation")
def bench_chain6(quick: bool, progress: Progress) -> dict[str, float]:
    """The paper's T9 (SI section 3.4): a distributed UKF pass against the two propagations, medians.

    One pass over the El Centro record against the 1-hop and heat-kernel envelopes (weights and defects
    included). The UKF pass is the compiled scan without its compilation
    (:func:`twinfer.infer.graph.timed_estimate`); each propagation is
    :func:`twinfer.experiments.chain6.propagation` at the pass's estimate, timed as a plain call after a
    first, compiling one.
    """
    from twinfer.bench._harness import time_python
    from twinfer.experiments.chain6 import (
        CASE,
        UNKNOWN,
        Chain6Config,
        build_graph,
        build_network,
        propagation,
        simulate,
    )
    from twinfer.infer.graph import timed_estimate

    config = Chain6Config.model_validate(dict(CASE.quick) if quick else {})
    model = build_network()
    progress(f"simulate the 6-DOF chain ({int(round(config.t_end / config.dt))} steps)")
    data = simulate(config, model)
    steps = data.n_steps - 1  # intervals
    progress("distributed UKF: compile + 3 runs")
    est, ukf = timed_estimate(build_graph(config, model), data, repeats=3)
    means = np.asarray(est.means)
    final = {p: float(means[-1, est.state_names.index(p)]) for p in UNKNOWN}
    out = {
        "chain6.steps": float(steps),
        "chain6.ukf.run_s": ukf.median_s,
        "chain6.ukf.compile_s": ukf.compile_s,
    }
    for method in ("one_hop", "heat"):
        progress(f"{method} propagation: 51 runs")
        propagation(model, means[:, :12], np.asarray(data.inputs), final, method, config)
        res = time_python(
            lambda m=method: propagation(model, means[:, :12], np.asarray(data.inputs), final, m, config), 51
        )
        out[f"chain6.{method}.run_s"] = res.median_s
        out[f"chain6.{method}.speedup"] = ukf.median_s / res.median_s
    return out


@register(
    "turbine", "the Pelton turbine: five heterogeneous subsystems against the central UKF, one pass each"
)
def bench_turbine(quick: bool, progress: Progress) -> dict[str, float]:
    """Run times of the distributed estimators (none, learned, EKF, KF, UKF) and the central UKF, medians.

    The NARX is trained once at the case's size (not timed here; ``twinfer run turbine`` reports it);
    each pass is the compiled scan without its compilation (:func:`twinfer.infer.graph.timed_estimate`).
    """
    from twinfer.experiments._case import no_progress
    from twinfer.experiments.turbine import (
        CASE,
        PeltonParams,
        TurbineConfig,
        build_graph,
        central,
        simulate,
        train_narx,
    )
    from twinfer.infer.graph import timed_estimate

    config = TurbineConfig.model_validate(dict(CASE.quick) if quick else {})
    params = PeltonParams()
    progress("NARX training")
    fit = train_narx(config, no_progress)
    progress(f"simulate the turbine ({int(round(config.t_end / config.dt))} steps)")
    data = simulate(config, params)
    out = {"turbine.steps": float(data.n_steps - 1)}
    graphs = {
        "distributed": build_graph(config, params, fit.model, data, float(fit.test["rmse"])),
        "central": central(config, params),
    }
    for label, graph in graphs.items():
        progress(f"{label}: compile + 3 runs")
        _, timed = timed_estimate(graph, data, repeats=3)
        out[f"turbine.{label}.run_s"] = timed.median_s
        out[f"turbine.{label}.compile_s"] = timed.compile_s
    out["turbine.central_over_distributed"] = out["turbine.central.run_s"] / out["turbine.distributed.run_s"]
    return out
