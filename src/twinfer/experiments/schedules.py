"""Case ``schedules``: Jacobi, Gauss-Seidel and AB2 on the forward 4-DOF chain (specs section 3.2, Fig. S1).

The chain of section 3.1 with known coupling is simulated as two subsystems (masses {1, 2} and {3, 4})
exchanging the spring-damper force (S22) under each schedule, and compared with the monolithic chain.
As in the authors' script 04 ([REPO]): subsystems take Heun steps with the interface force held over the
step; Gauss-Seidel steps S1 first and gives S2 the new x2, v2; AB2 extrapolates the *neighbour's*
interface state, 1.5 s^n - 0.5 s^{n-1}, while each side keeps its own current state in the law, with a
Jacobi first step; the reference is a semi-implicit Euler monolith. ``--set reference=same`` uses the
monolith with the subsystems' own integrator (coupling inside every stage) instead, which isolates the
schedule's error from the integrator's. (:meth:`Graph.monolithic` would not do as the reference: it
holds the messages over the step, exactly like Jacobi with K = 1.)

Jacobi hands both sides the same force F(s_1^n, s_2^n), equal and opposite, so it conserves the
momentum exchanged across the interface; Gauss-Seidel and AB2 hand the two sides forces evaluated at
different states. That is why Jacobi gives the lowest displacement error at DOFs 3 and 4 with either
reference.

References:
    Ghorbani & Hackl, SI Alg. 1-3 (S3-S10), Fig. S1; authors' script 04 ([REPO] settings of the spec).

"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np
import pydantic

from twinfer.experiments._case import Case, CaseConfig, Progress, register
from twinfer.experiments.chain4 import segment_node
from twinfer.infer.graph import Graph, Port, Schedule, Subsystem
from twinfer.infer.graph._messages import SCHEDULES
from twinfer.infer.graph._parts import two_way
from twinfer.infer.graph._run import run as run_graph
from twinfer.learn import library_law, library_reaction, linear_coefficients
from twinfer.metrics import dof_errors
from twinfer.models import Chain
from twinfer.report import PaperValue, RunArtifacts, within
from twinfer.report.figures.chains import schedule_errors_figure
from twinfer.sim import discretise, simulate_discrete

Positive = pydantic.PositiveFloat


class SchedulesConfig(CaseConfig):
    """Configuration of ``schedules``; defaults are the authors' script 04 settings."""

    seed: int = pydantic.Field(123, ge=0, description="numpy default_rng seed of the forcing.")
    horizon: Positive = pydantic.Field(5.0, description="Simulated time T [s].")
    dt: Positive = pydantic.Field(1e-3, description="Step [s].")
    force_sd: float = pydantic.Field(50.0, ge=0, description="Sd of the random force at each DOF [N].")
    inner: int = pydantic.Field(1, ge=1, description="Inner iterations K per step.")
    method: Literal["euler", "heun", "rk4"] = pydantic.Field("heun", description="Subsystem integrator.")
    reference: Literal["semi-implicit-euler", "same"] = pydantic.Field(
        "semi-implicit-euler",
        description="Monolith: authors' semi-implicit Euler ([REPO] script 04) or the subsystems' method.",
    )

    @property
    def n_steps(self) -> int:
        return int(round(self.horizon / self.dt))


def build_chain() -> Chain:
    """The 4-DOF chain of section 3.2 (m = 500, k = 5e4, c = 300), nothing measured."""
    return Chain([500.0] * 4, [5e4] * 4, [300.0] * 4, outputs=())


def build_graph(config: SchedulesConfig) -> Graph:
    """Two 2-mass subsystems of the 4-DOF chain (:meth:`Chain.segment`), no measurements."""
    k, c = 5e4, 300.0
    chain = build_chain()
    node = segment_node(config.method, config.dt, ())

    def sub(
        name: str, dofs: tuple[int, int], x0: list[float], inputs: tuple[int, int], port: Port
    ) -> Subsystem:
        return Subsystem(
            name=name,
            transition=node.transition,
            output=node.output,
            params=chain.segment(*dofs).params,
            x0=jnp.asarray(x0),
            P0=jnp.zeros((4, 4)),
            Q=jnp.zeros((4, 4)),
            R=jnp.zeros((0, 0)),
            inputs=inputs,
            outputs=(),
            ports={"port": port},
            n_msg=2,
            estimator="none",
        )

    s1 = sub("S1", (1, 2), [0.01, 0.0, 0.01, 0.0], (0, 1), Port(state=(1, 3), slots=(1,)))
    s2 = sub("S2", (3, 4), [0.0, 0.0, 0.0, 0.0], (2, 3), Port(state=(0, 2), slots=(0,)))
    xi = jnp.asarray(linear_coefficients(k, c))
    forward, backward = two_way("S1", "port", "S2", "port", library_law, xi)
    backward = type(backward)("S2", "port", "S1", "port", library_reaction, xi)
    return Graph("chain4-forward", [s1, s2], [forward, backward])


def run(config: SchedulesConfig, progress: Progress) -> RunArtifacts:
    """Run every schedule and the monolith; per-DOF displacement and velocity errors."""
    rng = np.random.default_rng(config.seed)
    us = rng.normal(0.0, config.force_sd, size=(config.n_steps, 4))
    ys = np.zeros((config.n_steps, 0))
    graph = build_graph(config)
    total = len(SCHEDULES) + 1
    progress("monolithic reference", 0, total)
    x0 = jnp.array([0.01, 0.0, 0.0, 0.0, 0.01, 0.0, 0.0, 0.0])
    # the authors' monolith ([REPO] script 04) is semi-implicit Euler: v += dt a(q, v), then q += dt v
    method = config.method if config.reference == "same" else "semi-implicit-euler"
    ref = np.asarray(
        simulate_discrete(discretise(build_chain(), config.dt, method), x0, jnp.asarray(us)).states
    )
    out: dict[str, float] = {}
    arrays: dict[str, Any] = {"times": config.dt * np.arange(config.n_steps + 1), "monolithic": ref}
    start = time.perf_counter()
    for i, kind in enumerate(SCHEDULES):
        progress(kind, i + 1, total)
        res = run_graph(graph, us=us, ys=ys, schedule=Schedule(kind, config.inner))
        both = np.concatenate([res["S1"].means, res["S2"].means], axis=1)[:, [0, 1, 4, 5, 2, 3, 6, 7]]
        arrays[kind] = both
        out.update(dof_errors(kind, both, ref))
    progress("done", total, total)
    out["timing.run_s"] = time.perf_counter() - start
    best = {d: min(SCHEDULES, key=lambda k: out[f"{k}.disp_rmse_dof{d}"]) for d in (3, 4)}
    notes = [
        f"Lowest displacement RMSE at DOF 3: {best[3]}; at DOF 4: {best[4]} (paper Fig. S1: Jacobi).",
        "Reference: the authors' semi-implicit Euler monolith ([REPO] script 04)."
        if config.reference == "semi-implicit-euler"
        else "Reference: the monolithic chain with the subsystems' integrator (coupling inside every stage).",
    ]
    return RunArtifacts(metrics=out, arrays=arrays, notes=notes)


def figures(arrays: Mapping[str, Any], config: SchedulesConfig) -> dict[str, Any]:
    """Box plots of absolute displacement errors per DOF and schedule (Fig. S1)."""
    return schedule_errors_figure(arrays, SCHEDULES, dofs=4)


_SRC = "authors' script 04 run by the spec (section 3.2 [REPO]); Fig. S1 itself gives no numbers"
_SCRIPT04 = {
    f"{kind}.{metric}": PaperValue(
        value,
        _SRC,
        within(
            1.25,
            "the spec's own run of script 04 with the same settings and integrators; it prints two or "
            "three digits and its forcing draws are the script's, not ours",
        ),
    )
    for kind, values in {
        "jacobi": (9.6e-5, 2.7e-5, 9.7e-6, 2.29e-5),
        "gauss_seidel": (1.52e-4, 4.1e-5, 2.71e-5, 3.84e-5),
        "ab2": (1.54e-4, 4.2e-5, 3.24e-5, 4.25e-5),
    }.items()
    for metric, value in zip(
        ("disp_max_norm", "disp_rmse", "disp_median_abs_dof3", "disp_median_abs_dof4"), values, strict=True
    )
}


def memory_estimate(config: SchedulesConfig) -> int:
    """Peak bytes of a run, for :func:`~twinfer.experiments.resolve_config` to refuse one that cannot fit.

    About 1 kB per time step (measured: peak RSS 425 MB at 5 000 steps, 446 MB at 25 000; forcing, the
    four trajectories and their errors grow with the steps), taken as 2 KiB, above a 512 MiB floor (the
    numerical stack itself).
    """
    return 512 * 2**20 + 2 * 2**10 * (config.n_steps + 1)


CASE = register(
    Case(
        name="schedules",
        description="Jacobi vs Gauss-Seidel vs AB2 on the forward 4-DOF chain (compositional, Fig. S1).",
        config_type=SchedulesConfig,
        run=run,
        figures=figures,
        # 4 s, not 1 s: over the first ~2 s the error is the monolith's integrator (semi-implicit Euler
        # against the subsystems' Heun), the same for every schedule, and Jacobi is not yet lowest at DOFs
        # 3 and 4; by 4 s the schedules' own error dominates and Fig. S1's ordering shows (the run is
        # compile-bound: 4 000 steps cost about what 1 000 do).
        quick={"horizon": 4.0},
        paper=_SCRIPT04,
        memory_estimate=memory_estimate,
        size_keys=("horizon", "dt"),
    )
)
