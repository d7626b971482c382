"""Benchmark ``filters``: UKF throughput batched over independent systems, against filterpy's UKF.

The model is a 5-DOF Duffing chain (10 states, nonlinear springs kappa r^3), RK4-discretised at 10 ms,
measuring the accelerations of DOFs 1, 3 and 5. twinfer runs 100 independent systems with ``vmap`` over
the same jitted scan; filterpy runs one system step by step with NumPy transition functions doing the
same arithmetic. Both use Merwe sigma points (alpha=1, beta=2, kappa=0) and the no-redraw measurement.
The batch runs as one vmapped call (its time loop on one core) and split over every core by
:func:`twinfer.sharding.map_cores`, with the default update kernel (QR) and with ``kernel="gram"``.
"""

from __future__ import annotations

import statistics
import time
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from twinfer.bench._harness import Progress, register, time_python
from twinfer.data import Dataset
from twinfer.infer.filters import run_filter, run_ukf, ukf_scan
from twinfer.infer.gaussian import UnscentedWeights
from twinfer.models import Chain
from twinfer.sharding import map_cores, usable_cores
from twinfer.sim import discretise, simulate_discrete
from twinfer.timing import time_jitted

N_DOF, DT, SENSED = 5, 0.01, (1, 3, 5)


def _model() -> Chain:
    return Chain(
        10.0,
        15.0,
        1.0,
        cubic_stiffness=100.0,
        n_dof=N_DOF,
        forced_dofs=[1],
        outputs=[f"a{d}" for d in SENSED],
    )


def _numpy_rhs(x: np.ndarray, u: float) -> np.ndarray:
    """The same chain in NumPy (for filterpy): connection forces, then accelerations."""
    q, v = x[:N_DOF], x[N_DOF:]
    r = q - np.concatenate([[0.0], q[:-1]])
    dr = v - np.concatenate([[0.0], v[:-1]])
    force = 15.0 * r + 1.0 * dr + 100.0 * r**3
    acc = (-force + np.concatenate([force[1:], [0.0]])) / 10.0
    acc[0] += u / 10.0
    return np.concatenate([v, acc])


def _numpy_rk4(x: np.ndarray, dt: float, u: float) -> np.ndarray:
    k1 = _numpy_rhs(x, u)
    k2 = _numpy_rhs(x + 0.5 * DT * k1, u)
    k3 = _numpy_rhs(x + 0.5 * DT * k2, u)
    k4 = _numpy_rhs(x + DT * k3, u)
    return x + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def _numpy_output(x: np.ndarray, u: float) -> np.ndarray:
    return _numpy_rhs(x, u)[[N_DOF + d - 1 for d in SENSED]]


def _data(key, n_steps: int, n_systems: int):
    model = _model()
    step = discretise(model, DT, "rk4")
    k_u, k_n = jax.random.split(key)
    us = jax.random.normal(k_u, (n_systems, n_steps, 1))
    x0 = jnp.zeros(2 * N_DOF)

    def one(u, k):
        """Noisy accelerations of one system under its forcing."""
        traj = simulate_discrete(step, x0, u)
        ys = jax.vmap(lambda x, uu: model.output(0.0, x, uu, model.params))(traj.states[1:], u)
        return ys + 0.01 * jax.random.normal(k, ys.shape)

    ys = jax.vmap(one)(us, jax.random.split(k_n, n_systems))
    return model, step, us, ys


def _api_overhead(model, step, u, y, weights) -> tuple[float, float]:
    """Median warm time of ``run_filter`` on a Dataset and of ``run_ukf`` on the same arrays (s).

    15 calls of each, interleaved (the machine's drift falls on both). The second and later calls of
    ``run_filter`` on the same structure reuse the compiled filter; what is left is its checking and
    assembly (#20: at most 1.2x ``run_ukf``).
    """
    n_steps = u.shape[0]
    data = Dataset(
        times=np.arange(n_steps + 1) * DT,
        observations=np.concatenate([np.zeros((1, y.shape[1])), np.asarray(y)]),
        inputs=np.concatenate([np.asarray(u), np.zeros((1, 1))]),
        input_names=model.input_names,
        output_names=model.output_names,
        metadata={"alignment": "held"},  # run_ukf's arrays: y_k+1 read with u_k
    )

    def api() -> None:
        result = run_filter(model, data, noise_sd=0.01, process_sd=1e-4, state_sd=1e-2, weights=weights)
        jax.block_until_ready(result.means)

    n = model.n_state
    f = lambda x, uu: step.transition(0.0, x, uu, model.params)  # noqa: E731
    h = lambda x, uu: model.output(0.0, x, uu, model.params)  # noqa: E731
    args = (f, h, jnp.zeros(n), 1e-4 * jnp.eye(n), 1e-8 * jnp.eye(n), 1e-4 * jnp.eye(y.shape[1]), u, y)
    masks = jnp.ones(y.shape, bool)

    def core() -> None:
        jax.block_until_ready(run_ukf(*args, masks, weights=weights).means)

    api()  # compile
    core()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(15):  # interleaved, so that the machine's drift does not fall on one side
        for fn, out in zip((api, core), times, strict=True):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


@register("filters", "UKF on a 10-state Duffing chain: batched throughput and speed-up over filterpy")
def bench_filters(quick: bool, progress: Progress) -> dict[str, float]:
    """Throughput of the UKF, batched with vmap and single, against filterpy on one system."""
    n_steps, n_systems, n_ref = (200, 10, 50) if quick else (2000, 100, 400)
    model, step, us, ys = _data(jax.random.key(0), n_steps, n_systems)
    params = model.params
    n = 2 * N_DOF
    x0, cov0 = jnp.zeros(n), 1e-4 * jnp.eye(n)
    q, r = 1e-8 * jnp.eye(n), 1e-4 * jnp.eye(len(SENSED))
    weights = UnscentedWeights.merwe(1.0, 2.0, 0.0)
    f = lambda x, u: step.transition(0.0, x, u, params)
    h = lambda x, u: model.output(0.0, x, u, params)

    def one(u, y, kernel: Literal["qr", "gram"] = "qr"):
        chols = (jnp.linalg.cholesky(cov0), jnp.linalg.cholesky(q), jnp.linalg.cholesky(r))
        return ukf_scan(f, h, x0, *chols, u, y, weights=weights, redraw=False, kernel=kernel).loglik

    batched = jax.jit(jax.vmap(one))
    gram = jax.jit(jax.vmap(lambda u, y: one(u, y, "gram")))
    single = jax.jit(one)
    progress(f"twinfer UKF: {n_systems} systems x {n_steps} steps (vmap, one call)")
    t_batch = time_jitted(batched, us, ys, repeats=5)
    t_single = time_jitted(single, us[0], ys[0], repeats=5)
    progress("the same batch split over every core (map_cores), QR and Gram kernels")
    t_cores = time_jitted(lambda u, y: map_cores(batched, u, y), us, ys, repeats=5)
    t_gram = time_jitted(lambda u, y: map_cores(gram, u, y), us, ys, repeats=5)
    gap = float(jnp.max(jnp.abs(t_gram.value - t_batch.value)) / jnp.max(jnp.abs(t_batch.value)))

    progress(f"filterpy UKF: 1 system x {n_ref} steps")
    from filterpy.kalman import MerweScaledSigmaPoints, UnscentedKalmanFilter

    u_ref, y_ref = np.asarray(us[0, :n_ref, 0]), np.asarray(ys[0, :n_ref])

    def run_filterpy():
        points = MerweScaledSigmaPoints(n, alpha=1.0, beta=2.0, kappa=0.0)
        ukf = UnscentedKalmanFilter(n, len(SENSED), DT, _numpy_output, _numpy_rk4, points)
        ukf.x, ukf.P, ukf.Q, ukf.R = np.zeros(n), 1e-4 * np.eye(n), 1e-8 * np.eye(n), 1e-4 * np.eye(3)
        for k in range(n_ref):
            ukf.predict(u=u_ref[k])
            ukf.update(y_ref[k], u=u_ref[k])

    t_ref = time_python(run_filterpy, repeats=3)

    progress("the user's call: run_filter(model, dataset) against run_ukf, warm")
    api_s, core_s = _api_overhead(model, step, us[0], ys[0], weights)
    batch_rate = n_systems * n_steps / t_batch.median_s
    single_rate = n_steps / t_single.median_s
    ref_rate = n_ref / t_ref.median_s
    steps = n_systems * n_steps
    return {
        "ukf.system_steps_per_s": batch_rate,
        "ukf.all_cores_system_steps_per_s": steps / t_cores.median_s,
        "ukf_gram.all_cores_system_steps_per_s": steps / t_gram.median_s,
        "ukf_gram.loglik_rel_gap": gap,
        "ukf.single_system_steps_per_s": single_rate,
        "ukf.compile_s": t_batch.compile_s,
        "ukf.batch_run_s": t_batch.median_s,
        "filterpy.steps_per_s": ref_rate,
        "ukf.speedup_vs_filterpy": single_rate / ref_rate,
        "ukf.batched_speedup_vs_filterpy": batch_rate / ref_rate,
        "api.run_filter_warm_s": api_s,
        "api.run_ukf_warm_s": core_s,
        "api.run_filter_over_run_ukf": api_s / core_s,
        "config.n_systems": float(n_systems),
        "config.n_steps": float(n_steps),
        "config.n_state": float(n),
        "config.cores": float(usable_cores()),
    }
