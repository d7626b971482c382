"""Benchmark ``pn``: PN ODE filter steps vmapped over particles, against probdiffeq's fixed-grid solver.

Problem: a 2-state Duffing oscillator (``Chain`` with one DOF and a cubic spring), IWP prior with q = 2,
zeroth-order linearisation (EK0, the paper's; probdiffeq's ``constraint_ode_ts0``), dense covariances,
unit diffusion, a fixed grid, one stiffness per particle. twinfer runs :func:`twinfer.infer.pn.pn_solve`
under ``vmap``; probdiffeq runs ``solve_fixed_grid`` with a filter strategy under the same ``vmap``.
Throughput = particles x steps / median run time (compile timed apart).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from twinfer.bench._harness import Progress, register, time_jitted
from twinfer.infer.pn import PNFilter, pn_solve
from twinfer.models import Chain


@register("pn", "PN ODE filter (EK0, q=2, 2 states) vmapped over particles vs probdiffeq's fixed-grid solver")
def bench_pn(quick: bool, progress: Progress) -> dict[str, float]:
    """Steps per second of the vmapped PN filter and of probdiffeq on the same problem and prior."""
    from probdiffeq import ivpsolve
    from probdiffeq import probdiffeq as pdx

    n_particles, n_steps = (100, 50) if quick else (1000, 500)
    model = Chain([1.0], [4.0], [0.1], cubic_stiffness=[1.0], outputs=["x1"])
    t_end = 5.0
    h = t_end / n_steps
    x0 = jnp.array([0.5, 0.0])
    ks = 4.0 + jax.random.uniform(jax.random.key(0), (n_particles,))
    pn = PNFilter(model, q=2, method="ek0", calibrate=False)
    us = jnp.zeros((n_steps + 1, 1))

    def ours(k):
        params = {**model.params, "k": jnp.array([k])}
        return pn_solve(pn, params, x0, jnp.zeros(2), h, us).mean

    ssm = pdx.state_space_model_dense()
    grid = jnp.linspace(0.0, t_end, n_steps + 1)

    def theirs(k):
        params = {**model.params, "k": jnp.array([k])}

        def vf(y, *, t):
            return model.vector_field(t, y, jnp.zeros(1), params)

        ode = pdx.ode(vf)
        tcoeffs, _ = pdx.jetexpand_ode_via_jvp(num=2)(ode, [x0], t=0.0)
        solver = pdx.solver(constraint=ssm.constraint_ode_ts0(ode), strategy=pdx.strategy_filter())
        solve = ivpsolve.solve_fixed_grid(solver=solver)  # pyright: ignore[reportArgumentType]
        return solve(ssm.prior_wiener_integrated(tcoeffs), grid=grid).u.mean[0]

    progress(f"twinfer PN filter: {n_particles} particles x {n_steps} steps")
    t_ours = time_jitted(jax.jit(jax.vmap(ours)), ks, repeats=5)
    progress(f"probdiffeq fixed grid: {n_particles} particles x {n_steps} steps")
    t_ref = time_jitted(jax.jit(jax.vmap(theirs)), ks, repeats=5)
    rate = n_particles * n_steps / t_ours.median_s
    ref_rate = n_particles * n_steps / t_ref.median_s
    return {
        "pn.steps_per_s": rate,
        "pn.probdiffeq_steps_per_s": ref_rate,
        "pn.speedup_vs_probdiffeq": rate / ref_rate,
        "pn.compile_s": t_ours.compile_s,
        "pn.probdiffeq_compile_s": t_ref.compile_s,
        "config.n_particles": float(n_particles),
        "config.n_steps": float(n_steps),
    }
