"""One library's side of ``twinfer bench peers``, run as its own process.

Run as a script (``python _peer_worker.py LIBRARY CASE.npz OUT_DIR``) by :mod:`twinfer.bench.peers`, one
process per library: dynamax sets JAX's default matmul precision for the whole process on import, and
each library's compiled programs must not share a process's caches or thread pools with another's. This
module imports only JAX and NumPy at the top, so that it runs in the peers' environment (``make peers``),
where twinfer is not installed; a library's own module is imported only by that library's worker.

Every library filters the same problems with the same arithmetic:

- ``ekf``/``ukf`` on a Duffing chain (:func:`chain_functions`): ``n_dof`` unit masses joined by linear and
  cubic springs and dampers, free (no input), RK4 over ``dt``, measured by the accelerations of every
  other mass. The UKF's sigma points are Merwe's with alpha = 1, beta = 2, kappa = 0, redrawn for the
  measurement in every library.
- ``kf`` on a linear chain: ``x_{k+1} = F x_k + w``, ``y = H x + v`` with ``F`` and ``H`` from the case file.

The time convention is twinfer's: step k predicts ``x_{k+1}`` and reads ``ys[k]`` of it. dynamax updates
before it predicts, so its initial moments are those of ``x_1`` (the case file's ``first_*``, computed by
the parent with twinfer's first prediction); cuthbert predicts first, as twinfer does.

Protocol: after compiling every task the worker prints one JSON line ``{"ready": ..., "compile_s": {...}}``
and writes each single-system task's filtered means to ``OUT_DIR/LIBRARY.TASK.npy``; then, for each line
``TASK REPEATS`` read from standard input, it runs the task that many times and prints
``{"task": ..., "seconds": [...]}``. An empty line or end of input ends it.
"""

# pyright: reportMissingImports=false
# (dynamax is imported only by its worker, in the peers' environment)
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

Task = tuple[Callable[..., Any], tuple[Any, ...]]


def chain_functions(case: dict[str, np.ndarray], prefix: str) -> tuple[Callable, Callable]:
    """The Duffing chain's RK4 transition ``f(x)`` and its acceleration measurement ``h(x)``.

    Masses 1; spring ``k`` and cubic spring ``kappa`` and damper ``c`` between neighbours and from the
    first mass to the ground. The same two functions are handed to every library.
    """
    n_dof = int(case[f"{prefix}.n_dof"])
    dt, k, c, kappa = (float(case[f"{prefix}.{name}"]) for name in ("dt", "k", "c", "kappa"))
    sensed = np.asarray(case[f"{prefix}.sensed"], dtype=int)

    def acceleration(x):
        q, v = x[:n_dof], x[n_dof:]
        r = q - jnp.concatenate([jnp.zeros(1, q.dtype), q[:-1]])
        dr = v - jnp.concatenate([jnp.zeros(1, v.dtype), v[:-1]])
        force = k * r + c * dr + kappa * r**3
        return -force + jnp.concatenate([force[1:], jnp.zeros(1, force.dtype)])

    def rhs(x):
        return jnp.concatenate([x[n_dof:], acceleration(x)])

    def f(x):
        k1 = rhs(x)
        k2 = rhs(x + 0.5 * dt * k1)
        k3 = rhs(x + 0.5 * dt * k2)
        k4 = rhs(x + dt * k3)
        return x + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

    def h(x):
        return acceleration(x)[sensed]

    return f, h


def linear_functions(case: dict[str, np.ndarray], prefix: str) -> tuple[Callable, Callable]:
    """``f(x) = F x`` and ``h(x) = H x`` of a linear problem."""
    F, H = jnp.asarray(case[f"{prefix}.F"]), jnp.asarray(case[f"{prefix}.H"])
    return (lambda x: F @ x), (lambda x: H @ x)


def problem(case: dict[str, np.ndarray], prefix: str) -> dict[str, Any]:
    """One problem's functions and arrays, by the prefix of its entries in the case file."""
    kind = str(case[f"{prefix}.kind"])
    f, h = (linear_functions if kind == "kf" else chain_functions)(case, prefix)
    get = lambda name: jnp.asarray(case.get(f"{prefix}.{name}", np.zeros(0)))  # noqa: E731
    return {
        "kind": kind,
        "f": f,
        "h": h,
        "m0": get("m0"),
        "chol_P0": get("chol_P0"),
        "chol_Q": get("chol_Q"),
        "chol_R": get("chol_R"),
        "first_mean": get("first_mean"),
        "first_chol": get("first_chol"),
        "ys": get("ys"),
        "batch": bool(case[f"{prefix}.batch"]),
    }


MERWE = (1.0, 2.0, 0.0)
"""alpha, beta, kappa of every library's sigma points."""


def twinfer_filter(p: dict[str, Any], kernel: str) -> Callable[[Any], Any]:
    """The problem's square-root filter in twinfer: means and log-likelihood.

    :func:`~twinfer.infer.filters.gaussian_filter` with the problem's linearisation, except the UKF with
    the QR kernel: :func:`~twinfer.infer.filters.ukf_scan` with ``redraw`` (the same moments; the Gram
    kernel's UKF stays the linearised one, since ``ukf_scan``'s Gram kernel does not redraw).
    """
    from twinfer.infer.filters import gaussian_filter
    from twinfer.infer.gaussian import UnscentedWeights, linear, taylor, unscented

    f, h = p["f"], p["h"]
    scan: Callable[..., Any]
    if p["kind"] == "ukf" and kernel == "qr":
        from twinfer.infer.filters import ukf_scan

        # sigma points redrawn for the measurement, as dynamax's and cuthbert's (the square-root form of
        # the unscented linearisation's moments, one QR a half step)
        scan, options = ukf_scan, {"weights": UnscentedWeights.merwe(*MERWE), "redraw": True}
    else:
        lin = {"kf": linear, "ekf": taylor, "ukf": unscented(UnscentedWeights.merwe(*MERWE))}[p["kind"]]
        scan, options = gaussian_filter, {"linearisation": lin}
        if kernel != "qr":  # a baseline may predate kernels
            options["kernel"] = kernel

    def run(ys):
        us = jnp.zeros((ys.shape[0], 0), ys.dtype)
        out = scan(
            lambda x, u: f(x),
            lambda x, u: h(x),
            p["m0"],
            p["chol_P0"],
            p["chol_Q"],
            p["chol_R"],
            us,
            ys,
            jnp.ones(ys.shape[-2:], bool),  # every entry observed, as dynamax assumes: not batched
            **options,
        )
        return out.means, out.loglik

    return run


def dynamax_filter(p: dict[str, Any]) -> Callable[[Any], Any]:
    """The dynamax filter for the problem (covariance form): means and log-likelihood."""
    m1, c1 = p["first_mean"], p["first_chol"]
    Q, R = p["chol_Q"] @ p["chol_Q"].T, p["chol_R"] @ p["chol_R"].T
    if p["kind"] == "kf":
        from dynamax.linear_gaussian_ssm import lgssm_filter
        from dynamax.linear_gaussian_ssm.inference import (
            ParamsLGSSM,
            ParamsLGSSMDynamics,
            ParamsLGSSMEmissions,
            ParamsLGSSMInitial,
        )

        n, m = Q.shape[0], R.shape[0]
        F = jax.jacfwd(p["f"])(jnp.zeros(n))
        H = jax.jacfwd(p["h"])(jnp.zeros(n))
        params = ParamsLGSSM(
            initial=ParamsLGSSMInitial(mean=m1, cov=c1 @ c1.T),
            dynamics=ParamsLGSSMDynamics(
                weights=F, bias=jnp.zeros(n), input_weights=jnp.zeros((n, 0)), cov=Q
            ),
            emissions=ParamsLGSSMEmissions(
                weights=H, bias=jnp.zeros(m), input_weights=jnp.zeros((m, 0)), cov=R
            ),
        )

        def run_kf(ys):
            post = lgssm_filter(params, ys)
            return post.filtered_means, post.marginal_loglik

        return run_kf

    from dynamax.nonlinear_gaussian_ssm import ParamsNLGSSM, extended_kalman_filter, unscented_kalman_filter
    from dynamax.nonlinear_gaussian_ssm.inference_ukf import UKFHyperParams

    params = ParamsNLGSSM(
        initial_mean=m1,
        initial_covariance=c1 @ c1.T,
        dynamics_function=p["f"],
        dynamics_covariance=Q,
        emission_function=p["h"],
        emission_covariance=R,
    )
    fields = ["filtered_means"]

    if p["kind"] == "ekf":

        def run_ekf(ys):
            post = extended_kalman_filter(params, ys, output_fields=fields)
            return post.filtered_means, post.marginal_loglik

        return run_ekf

    hyper = UKFHyperParams(*MERWE)

    def run_ukf(ys):
        post = unscented_kalman_filter(params, ys, hyper, output_fields=fields)
        return post.filtered_means, post.marginal_loglik

    return run_ukf


def _beside(name: str) -> Any:
    """A module in this file's folder, loaded by path (this folder is not put on ``sys.path``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    if spec is None or spec.loader is None:
        raise ImportError(f"peer worker: cannot load {name}.py beside {__file__}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(library: str, p: dict[str, Any]) -> Callable[[Any], Any]:
    """The library's filter of one system, ``ys -> (means, loglik)``."""
    if library in ("twinfer", "baseline"):  # the baseline: another checkout's twinfer on PYTHONPATH
        return twinfer_filter(p, "qr")
    if library == "twinfer-gram":
        return twinfer_filter(p, "gram")
    if library == "dynamax":
        return dynamax_filter(p)
    if library == "cuthbert":
        return _beside("_peer_cuthbert").cuthbert_filter(p)
    raise ValueError(f"peer worker: unknown library {library!r}")


def tasks(library: str, case: dict[str, np.ndarray]) -> dict[str, Task]:
    """Every task of the case file: a jitted call and its arguments (a batch is ``vmap`` over systems)."""
    out: dict[str, Task] = {}
    for prefix in sorted(str(name) for name in case["problems"]):
        p = problem(case, prefix)
        one = build(library, p)
        if p["batch"]:
            out[prefix] = (jax.jit(jax.vmap(one)), (p["ys"],))
        else:
            out[prefix] = (jax.jit(one), (p["ys"][0],))
    return out


def _block(value: Any) -> Any:
    return jax.block_until_ready(value)


def main(argv: list[str]) -> int:
    """Compile every task, write the single systems' means, then time tasks as the parent asks."""
    library, case_path, out_dir = argv
    with np.load(case_path, allow_pickle=False) as data:
        case = {name: data[name] for name in data.files}
    out = Path(out_dir)
    todo = tasks(library, case)
    compile_s = {}
    for name, (fn, args) in todo.items():
        start = time.perf_counter()
        means, _ = _block(fn(*args))
        compile_s[name] = time.perf_counter() - start
        np.save(out / f"{library}.{name}.npy", np.asarray(means if means.ndim == 2 else means[0]))
    print(json.dumps({"ready": library, "compile_s": compile_s, "jax": jax.__version__}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            break
        name, repeats = words[0], int(words[1])
        fn, args = todo[name]
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            _block(fn(*args))
            seconds.append(time.perf_counter() - start)
        print(json.dumps({"task": name, "seconds": seconds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
