"""Benchmark ``pn``: PN ODE filter steps vmapped over particles, against probdiffeq's fixed-grid solver.

Problem: a 2-state Duffing oscillator (``Chain`` with one DOF and a cubic spring), IWP prior with q = 2,
zeroth-order linearisation (EK0, the paper's; probdiffeq's ``constraint_ode_ts0``), unit diffusion, an
exactly known initial state, a fixed grid, one stiffness per particle. twinfer runs
:func:`twinfer.infer.pn.pn_solve` under ``vmap``; probdiffeq runs ``solve_fixed_grid`` with a filter
strategy under the same ``vmap``. Throughput = particles x steps / median run time (compile timed
apart); all variants are compiled first and then timed in turn, seven rounds, in one process.

What is compared (the same factorisation on both sides):

- ``dense``: one Cholesky factor of the whole stacked state ``d(q+1) x d(q+1)``: twinfer
  ``PNFilter(structure="dense")`` against ``state_space_model_dense``;
- ``blockdiag``: one ``(q+1) x (q+1)`` factor per ODE dimension (exact for EK0 with a diagonal
  diffusion): twinfer ``PNFilter(structure="blockdiag")`` against ``state_space_model_blockdiag``;
- ``isotropic`` (probdiffeq only): one ``(q+1) x (q+1)`` factor shared by all dimensions, exact only
  with one scalar diffusion and the same initial covariance in every dimension (true here, not with the
  per-dimension calibration or the single-dimension data update of the PN-SMC cases); twinfer has no
  such mode, so it is reported apart (``pn.speedup_vs_probdiffeq_isotropic``).

``pn.speedup_vs_probdiffeq`` is twinfer's best (dense or block-diagonal) over probdiffeq's best of the
comparable factorisations (dense or block-diagonal); the per-factorisation ratios are written beside it.

A second problem times the hot path of the PN-SMC cases, twinfer only: the 3-state Bouc-Wen filter of
``twinfer run boucwen`` (EK0, q = 2, per-dimension calibration, the measured acceleration ``C-dot X``
of the velocity dimension updated at every 4096 Hz step), 500 particles with perturbed stiffness,
dense against block-diagonal: ``pn.boucwen_{dense,blockdiag}_step_s`` is the wall time of one step
of all particles.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from twinfer.bench._harness import Progress, register
from twinfer.infer.pn import PNFilter, pn_solve
from twinfer.models import BoucWen, Chain
from twinfer.sim import discretise, simulate_discrete
from twinfer.timing import BenchResult, time_jitted

_OURS = ("dense", "blockdiag")
_THEIRS = ("dense", "blockdiag", "isotropic")


@register("pn", "PN ODE filter (EK0, q=2, 2 states) vmapped over particles vs probdiffeq's fixed-grid solver")
def bench_pn(quick: bool, progress: Progress) -> dict[str, float]:
    """Steps per second of the vmapped PN filter and of probdiffeq, per covariance factorisation."""
    from probdiffeq import ivpsolve
    from probdiffeq import probdiffeq as pdx

    n_particles, n_steps = (100, 50) if quick else (1000, 500)
    model = Chain([1.0], [4.0], [0.1], cubic_stiffness=[1.0], outputs=["x1"])
    t_end = 5.0
    h = t_end / n_steps
    x0 = jnp.array([0.5, 0.0])
    ks = 4.0 + jax.random.uniform(jax.random.key(0), (n_particles,))
    us = jnp.zeros((n_steps + 1, 1))
    grid = jnp.linspace(0.0, t_end, n_steps + 1)
    ssms = {
        "dense": pdx.state_space_model_dense(),
        "blockdiag": pdx.state_space_model_blockdiag(),
        "isotropic": pdx.state_space_model_isotropic(),
    }

    def ours(structure):
        pn = PNFilter(model, q=2, method="ek0", calibrate=False, structure=structure)

        def one(k):
            params = {**model.params, "k": jnp.array([k])}
            return pn_solve(pn, params, x0, jnp.zeros(2), h, us).mean

        return one

    def theirs(ssm):
        def one(k):
            params = {**model.params, "k": jnp.array([k])}

            def vf(y, *, t):
                return model.vector_field(t, y, jnp.zeros(1), params)

            ode = pdx.ode(vf)
            tcoeffs, _ = pdx.jetexpand_ode_via_jvp(num=2)(ode, [x0], t=0.0)
            solver = pdx.solver(constraint=ssm.constraint_ode_ts0(ode), strategy=pdx.strategy_filter())
            solve = ivpsolve.solve_fixed_grid(solver=solver)  # pyright: ignore[reportArgumentType]
            return solve(ssm.prior_wiener_integrated(tcoeffs), grid=grid).u.mean[0]

        return one

    fns = {f"ours_{s}": ours(s) for s in _OURS} | {f"probdiffeq_{s}": theirs(ssms[s]) for s in _THEIRS}
    progress(f"{len(fns)} solvers: {n_particles} particles x {n_steps} steps, timed in turn")
    timings = _interleaved({k: jax.jit(jax.vmap(fn)) for k, fn in fns.items()}, ks, repeats=7)
    rate = {k: n_particles * n_steps / t.median_s for k, t in timings.items()}
    out = {f"pn.{k}_compile_s": t.compile_s for k, t in timings.items()}
    best_ours = max(rate[f"ours_{s}"] for s in _OURS)
    best_theirs = max(rate[f"probdiffeq_{s}"] for s in _OURS)
    out.update({f"pn.{label}_steps_per_s": r for label, r in rate.items()})
    out.update(
        {
            "pn.steps_per_s": best_ours,
            "pn.probdiffeq_steps_per_s": best_theirs,
            "pn.speedup_vs_probdiffeq": best_ours / best_theirs,
            "pn.speedup_dense_vs_probdiffeq_dense": rate["ours_dense"] / rate["probdiffeq_dense"],
            "pn.speedup_blockdiag_vs_probdiffeq_blockdiag": rate["ours_blockdiag"]
            / rate["probdiffeq_blockdiag"],
            "pn.speedup_vs_probdiffeq_isotropic": best_ours / rate["probdiffeq_isotropic"],
            "pn.blockdiag_vs_dense": rate["ours_blockdiag"] / rate["ours_dense"],
            "config.n_particles": float(n_particles),
            "config.n_steps": float(n_steps),
        }
    )
    out.update(_boucwen(quick, progress))
    return out


def _boucwen(quick: bool, progress: Progress) -> dict[str, float]:
    """One Bouc-Wen PN-SMC filter step for all particles, dense against block-diagonal."""
    n_particles, n_steps, fs = (32, 50, 4096.0) if quick else (500, 200, 4096.0)
    model = BoucWen()
    ts = jnp.arange(n_steps) / fs
    us = (100.0 * jnp.sin(2 * jnp.pi * 20.0 * ts) * jnp.sin(2 * jnp.pi * 3.0 * ts))[:, None]
    traj = simulate_discrete(discretise(model, 1.0 / fs, "rk4"), jnp.zeros(3), us)
    acc = jax.vmap(lambda x, u: model.acceleration(x, u, model.params))(traj.states[:-1], us)[:, None]
    std = 0.05 * jnp.sqrt(jnp.mean(acc**2))
    ys = acc + std * jax.random.normal(jax.random.key(1), acc.shape)
    ks = model.params["k"] * (0.95 + 0.1 * jax.random.uniform(jax.random.key(2), (n_particles,)))
    fns = {}
    for structure in _OURS:
        pn = PNFilter(model, q=2, method="ek0", structure=structure, measure=lambda X, u, p: X[4:5])

        def one(k, pn=pn):
            params = {**model.params, "k": k}
            return pn_solve(pn, params, jnp.zeros(3), jnp.zeros(3), 1.0 / fs, us, ys, chol_R=std * jnp.eye(1))

        fns[structure] = jax.jit(jax.vmap(lambda k, one=one: one(k).loglik))
    progress(f"Bouc-Wen PN filter, dense and blockdiag: {n_particles} particles x {n_steps} steps")
    timings = _interleaved(fns, ks, repeats=5)
    out = {f"pn.boucwen_{k}_step_s": t.median_s / (n_steps - 1) for k, t in timings.items()}
    out["pn.boucwen_blockdiag_vs_dense"] = out["pn.boucwen_dense_step_s"] / out["pn.boucwen_blockdiag_step_s"]
    out["config.boucwen_particles"] = float(n_particles)
    return out


def _interleaved(fns: dict[str, Callable[[Any], Any]], arg: Any, repeats: int) -> dict[str, BenchResult]:
    """Compile every function, then time them in turn ``repeats`` times.

    A change of machine load during the benchmark then reaches every variant alike.
    """
    compile_s = {k: time_jitted(f, arg, repeats=1).compile_s for k, f in fns.items()}
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(f(arg))
            runs[k].append(time.perf_counter() - start)
    return {k: BenchResult(compile_s=compile_s[k], run_s=runs[k]) for k in fns}
