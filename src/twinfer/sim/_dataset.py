"""Simulated records made the way a data acquisition system makes them, with their truth.

The one time convention of twinfer (:class:`twinfer.data.Dataset`, every estimator):

* row k of a :class:`~twinfer.data.Dataset` holds the time ``t_k`` and the input ``u_k`` and the
  output ``y_k`` sampled at that same instant: ``y_k = h(x_k, u_k) + v_k``;
* for the dynamics the input is held over ``[t_k, t_{k+1})``: step k of a filter predicts ``x_{k+1}``
  from ``x_k`` with ``u_k`` and updates with ``y_{k+1} = h(x_{k+1}, u_{k+1}) + v_{k+1}``;
* ``y_0`` is recorded but not used (the prior describes ``t_0``).

The compositional-inference paper's code reads ``y_{k+1} = h(x_{k+1}, u_k)`` instead (the output at the
end of an interval with the input held over it): ``alignment="held"`` makes such a record, and the
estimators read a record the way its :attr:`~twinfer.data.Dataset.alignment` says. The two differ only
where an output depends directly on an input (an accelerometer on a forced mass).

A continuous input (a callable ``u(t)``) is simulated as it acts, between the samples too (an adaptive
solve, or ``oversample`` fine steps per interval), and read at the sample instants, so a filter that
holds each sample over its interval meets the model error real data carry.

References:
    compositional-inference paper, S1-S4 (the step convention of Alg. 1 and 4-6).

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from twinfer._config import ensure
from twinfer.data import Dataset
from twinfer.linalg import psd_factor
from twinfer.models import AbstractModel
from twinfer.sim._discretise import METHODS, DiscreteModel, discretise
from twinfer.sim._simulate import _scan_discrete, simulate
from twinfer.sim._timescale import check_step
from twinfer.sim._trajectory import check_key

Truth = Literal["exact", "euler", "semi-implicit-euler", "heun", "rk4"]


def simulate_dataset(
    model: AbstractModel,
    inputs: Any,
    dt: float,
    noise_sd: Any,
    key: Any,
    *,
    x0: Any = None,
    n_steps: int | None = None,
    truth: Truth = "exact",
    substeps: int = 1,
    input_noise_sd: Any = None,
    process_cov: Any = None,
    metadata: Mapping[str, Any] | None = None,
    alignment: Literal["sampled", "held"] = "sampled",
    oversample: int = 20,
) -> Dataset:
    """Simulate ``model`` and measure it with noise: a :class:`~twinfer.data.Dataset` with its truth.

    Args:
        model: a continuous-time twinfer model (its own ``params`` are the truth).
        inputs: (T + 1, n_input) samples, row k held over ``[t_k, t_{k+1})`` (the last row is only
            recorded); or a callable ``u(t) -> (n_input,)`` written in JAX, a continuous input signal
            (then give ``n_steps``), which drives the truth between the samples too and is recorded at
            ``t_k``; or None for an autonomous model (then give ``n_steps``).
        dt: sample interval, finite and > 0.
        noise_sd: measurement-noise standard deviation, a scalar or one value per output, >= 0.
        key: a JAX PRNG key (the noise; the same key gives the same record).
        x0: initial state (default zeros).
        n_steps: T, the number of intervals, when ``inputs`` is None.
        truth: ``"exact"`` (the matrix exponential of a linear model, an adaptive Dopri8 solve at
            tolerance 1e-10 of a nonlinear one: free of any filter's integrator error) or a fixed-step
            method of :func:`twinfer.sim.discretise` with ``substeps`` steps per interval (a filter on the
            same discretisation then has no model error).
        substeps: steps per interval of a fixed-step ``truth``.
        input_noise_sd: standard deviation of the inputs' measurement noise, a scalar or one value per
            input, >= 0 (default None: none). The truth is driven by ``inputs``; the record holds them as
            a sensor reads them (a load cell's force), plus N(0, input_noise_sd^2) per sample, drawn from
            ``jax.random.fold_in(key, 1)``. A filter fed the record then meets a process noise that is
            really in the data (the held input's error ``B w``: for a force on a mass m over a step
            dt, ``dt^2 / (2 m) w`` on the position and ``dt / m w`` on the velocity), which is what a
            random-walk Q on a noise-free truth is not (docs/tuning.md).
        process_cov: covariance (n_state, n_state) of a process noise added to the truth's state at the
            end of every interval, ``x_{k+1} = step(x_k, u_k) + w_k``, ``w_k ~ N(0, process_cov)``
            drawn from ``jax.random.fold_in(key, 2)`` (default None: none). A filter whose Q is this
            covariance then meets exactly the process noise it assumes: the set-up in which its 95 %
            bands can be checked to hold 95 % of the truth. Needs a stepped truth: a fixed-step
            ``truth`` or a linear model's exact one.
        metadata: extra entries for the record's metadata. ``input_hold`` is ``"linear"`` for a
            callable input (a continuous signal), ``"zoh"`` for samples (held, as they drove the truth).
        alignment: ``"sampled"`` (default): ``y_k = h(x_k, u_k)``, inputs and outputs read at the same
            instants, as an acquisition system reads them; ``"held"``: ``y_{k+1} = h(x_{k+1}, u_k)``,
            the compositional-inference paper's alignment (its cases name it to reproduce its tables).
            Recorded as ``metadata["alignment"]``, which the estimators read.
        oversample: fine steps per interval for a callable input with a fixed-step or a linear model's
            exact truth (the input at the middle of each fine step of ``dt / oversample``, held over it:
            second-order accurate); a nonlinear model's exact truth follows the callable itself (an
            adaptive solve).

    Returns:
        A :class:`~twinfer.data.Dataset` over ``t_0..t_T`` with the model's input, output and state names,
        ``truth_states`` (T + 1, n_state), ``truth_params`` (every scalar parameter) and metadata naming
        the truth, noise and ``alignment``.

    Raises:
        ValueError: naming the argument, the expected and the received value.

    """
    ensure("simulate_dataset", model=model, x0=x0)  # inputs: checked below, by name
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"simulate_dataset dt: expected a finite step > 0; received {dt}.")
    check_key("simulate_dataset key", key)
    allowed = ("exact", *(m for m in METHODS if m != "exact"))
    if truth not in allowed:
        raise ValueError(f"simulate_dataset truth: expected one of {allowed}; received {truth!r}.")
    if alignment not in ("sampled", "held"):
        raise ValueError(
            f"simulate_dataset alignment: expected 'sampled' (y_k = h(x_k, u_k)) or 'held' "
            f"(y_k+1 = h(x_k+1, u_k)); received {alignment!r}."
        )
    if isinstance(oversample, bool) or not isinstance(oversample, int | np.integer) or oversample < 1:
        raise ValueError(f"simulate_dataset oversample: expected an integer >= 1; received {oversample!r}.")
    signal = inputs if callable(inputs) else None
    if signal is not None:
        if n_steps is None or int(n_steps) < 1:
            raise ValueError(
                f"simulate_dataset n_steps: expected T >= 1 with a callable input; received {n_steps}."
            )
        grid = np.arange(int(n_steps) + 1) * float(dt)
        try:
            sampled = np.asarray(jax.vmap(signal)(jnp.asarray(grid)), dtype=np.float64)
        except Exception as error:  # a user's callable: say which argument failed
            raise ValueError(
                f"simulate_dataset inputs: the callable u(t) failed on the sample times ({error}); expected "
                f"a JAX function of t returning {model.n_input} values ({', '.join(model.input_names)})."
            ) from None
        inputs, n_steps = sampled.reshape(grid.size, -1), None
    if inputs is None:
        if model.n_input:
            raise ValueError(
                f"simulate_dataset inputs: {type(model).__name__} has {model.n_input} inputs "
                f"({', '.join(model.input_names)}); received None."
            )
        if n_steps is None or int(n_steps) < 1:
            raise ValueError(
                f"simulate_dataset n_steps: expected T >= 1 with inputs=None; received {n_steps}."
            )
        us = np.zeros((int(n_steps) + 1, 0))
    else:
        raw = np.asarray(inputs)
        if raw.dtype.kind == "f" and raw.dtype != np.float64:
            raise ValueError(
                f"simulate_dataset inputs: expected a float64 array; received dtype {raw.dtype} (its lost "
                "digits cannot be recovered: produce the inputs in float64, or convert with "
                "np.asarray(u, dtype=np.float64) if the loss is acceptable)."
            )
        us = np.asarray(raw, dtype=np.float64)
        if us.ndim != 2 or us.shape[1] != model.n_input or us.shape[0] < 2:
            raise ValueError(
                f"simulate_dataset inputs: expected shape (T + 1, {model.n_input}) with T >= 1 (columns "
                f"{', '.join(model.input_names) or 'none'}); received {us.shape}."
            )
        if n_steps is not None and int(n_steps) != us.shape[0] - 1:
            raise ValueError(
                f"simulate_dataset n_steps: expected {us.shape[0] - 1} (the rows of inputs minus one); "
                f"received {n_steps}."
            )
        if not np.all(np.isfinite(us)):
            raise ValueError("simulate_dataset inputs: expected finite values; received a non-finite one.")
    n = us.shape[0] - 1
    in_sd = np.asarray(0.0 if input_noise_sd is None else input_noise_sd, dtype=np.float64)
    if (
        in_sd.ndim > 1
        or (in_sd.ndim == 1 and in_sd.shape != (model.n_input,))
        or not np.all(np.isfinite(in_sd) & (in_sd >= 0))
        or (model.n_input == 0 and np.any(in_sd > 0))
    ):
        raise ValueError(
            f"simulate_dataset input_noise_sd: expected finite values >= 0, one or one per input "
            f"({', '.join(model.input_names) or 'none'}); received {np.asarray(input_noise_sd).tolist()}."
        )
    sd = np.broadcast_to(np.asarray(noise_sd, dtype=np.float64), (len(model.output_names),))
    if not np.all(np.isfinite(sd) & (sd >= 0)):
        raise ValueError(
            f"simulate_dataset noise_sd: expected finite values >= 0, one or one per output "
            f"({', '.join(model.output_names)}); received {np.asarray(noise_sd).tolist()}."
        )
    start = jnp.zeros(model.n_state) if x0 is None else jnp.asarray(x0, dtype=jnp.float64)
    if start.shape != (model.n_state,):
        raise ValueError(
            f"simulate_dataset x0: expected shape ({model.n_state},) ({', '.join(model.state_names)}); "
            f"received {tuple(start.shape)}."
        )
    times = np.arange(n + 1) * float(dt)
    fine = 1 if signal is None else int(oversample)
    if signal is None:
        u_fine = us[:-1]
    else:  # the signal at the middle of each fine step, held over it (second order: no lag of h / 2)
        t_fine = ((np.arange(n * fine) + 0.5) / fine) * float(dt)
        u_fine = np.reshape(np.asarray(jax.vmap(signal)(jnp.asarray(t_fine))), (n * fine, -1))
    if process_cov is not None:
        if truth != "exact":  # the stepped path below checks its own step (_stepped)
            u0 = None if not model.n_input else us[0]
            check_step(
                "simulate_dataset", model, dt / fine, truth, start, u0, substeps=substeps, n_steps=n * fine
            )
        states = _with_process_noise(model, dt, truth, substeps, start, u_fine, process_cov, key, fine)
    elif truth == "exact" and not model.is_linear:
        states = simulate(model, times, start, us if signal is None else signal, interpolation="zoh").states
    else:
        step = discretise(model, dt / fine, truth, substeps) if truth != "exact" else None
        step = discretise(model, dt / fine, "exact") if step is None else step
        states = _stepped(step, start, u_fine)[::fine]
    states = np.asarray(states)
    # the input each output is read with: its own sample (sampled), or the interval's before it (held)
    read = us if alignment == "sampled" else np.concatenate([us[:1], us[:-1]])
    clean = _outputs(model, times, states, read)
    noisy = clean + sd[None, :] * np.asarray(jax.random.normal(key, clean.shape))
    if not np.all(np.isfinite(np.asarray(states))):
        raise ValueError(
            f"simulate_dataset: the {truth} simulation of {type(model).__name__} became non-finite; check "
            "the parameters, the inputs and (for a fixed-step truth) the step dt / substeps."
        )
    recorded, noted = us, {}
    if model.n_input and np.any(in_sd > 0):
        draw = np.asarray(jax.random.normal(jax.random.fold_in(key, 1), us.shape))
        recorded = us + np.broadcast_to(in_sd, (model.n_input,))[None, :] * draw
        noted = {"input_noise_sd": np.broadcast_to(in_sd, (model.n_input,)).tolist()}
    meta = {
        "source": "twinfer.sim.simulate_dataset",
        "truth": truth
        if truth != "exact"
        else ("exact (matrix exponential)" if model.is_linear else "exact (Dopri8)"),
        "substeps": substeps,
        "noise_sd": sd.tolist(),
        **noted,
        **(
            {"process_cov": np.asarray(process_cov, dtype=np.float64).tolist()}
            if process_cov is not None
            else {}
        ),
        **({"input": f"continuous u(t), truth with {fine} steps per interval"} if signal is not None else {}),
        "alignment": alignment,
        "input_hold": "linear" if signal is not None else "zoh",
        **dict(metadata or {}),
    }
    return Dataset(
        times=times,
        observations=noisy,
        inputs=recorded if model.n_input else None,
        truth_states=np.asarray(states),
        truth_params={name: float(v) for name, v in _scalars(model).items()},
        input_names=model.input_names if model.n_input else None,
        output_names=model.output_names,
        state_names=model.state_names,
        metadata=meta,
    )


CHUNK = 1024
"""Rows per compiled call of the stepped truth and of the outputs (:func:`_stepped`, :func:`_outputs`)."""


def _stepped(step: DiscreteModel, x0: Any, us: np.ndarray) -> np.ndarray:
    """The states (T + 1, n_state) of ``step`` from ``x0`` with ``us[k]`` (T, n_input) held over step k.

    The steps of :func:`twinfer.sim.simulate_discrete` (its compiled scan, times and step checks: at ``x0``
    and, for a fixed-step method, at the largest state reached; a non-finite truth is
    :func:`simulate_dataset`'s error), :data:`CHUNK` steps per compiled call, the last chunk padded with
    its final input and the padding's states dropped, so that records of every length share one program
    per model structure, bitwise equal to one scan over the record. (A scan of the record's own length
    compiled anew for each length: ~2-5 s of CPU a record; the live-damage case's records, 16 s -> 6 s.)
    """
    n = us.shape[0]
    model, h, method, sub = step.model, step.dt, step.method, step.substeps
    u_first = None if not n else us[0]
    check_step("simulate_dataset", model, h, method, x0, u_first, substeps=sub, n_steps=n)
    pad = -n % CHUNK
    held = np.concatenate([us, np.repeat(us[-1:], pad, axis=0)])
    ts = np.arange(n + pad + 1) * h  # t_k = k h, as simulate_discrete's ts
    x, parts = jnp.asarray(x0), [np.asarray(x0)[None]]
    for s in range(0, n + pad, CHUNK):  # simulate_discrete's compiled scan, its last time unused
        xs, _ = _scan_discrete(step, x, ts[s : s + CHUNK + 1], held[s : s + CHUNK], step.params)
        x = xs[-1]
        parts.append(np.asarray(xs[1:]))
    states = np.concatenate(parts)[: n + 1]
    if method != "exact" and np.isfinite(states).all():  # the runaway check (non-finite: the caller's error)
        k = int(np.argmax(np.linalg.norm(states, axis=1)))
        at = f"the simulated state at t = {k * h:g}"
        check_step("simulate_dataset", model, h, method, states[k], us[min(k, n - 1)], substeps=sub,
                   n_steps=n, at=at)  # fmt: skip
    return states


def _outputs(model: AbstractModel, ts: np.ndarray, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
    """``model.output`` at each row ``(t_k, x_k, u_k)``, :data:`CHUNK` rows at a time.

    The last chunk is padded and its padding dropped, so every record evaluates the same shapes; eager, as
    before (a jitted output rounds otherwise).
    """
    n = ts.shape[0]
    pad = -n % CHUNK
    rows = [np.concatenate([r, np.repeat(r[-1:], pad, axis=0)]) for r in (ts, xs, us)]
    out = jax.vmap(lambda t, x, u: model.output(t, x, u, model.params))
    parts = [np.asarray(out(*(r[s : s + CHUNK] for r in rows))) for s in range(0, n + pad, CHUNK)]
    return np.concatenate(parts)[:n]


def _with_process_noise(
    model: AbstractModel,
    dt: float,
    truth: str,
    substeps: int,
    x0: Any,
    us: Any,
    cov: Any,
    key: Any,
    fine: int = 1,
) -> Any:
    """The truth stepped interval by interval with ``N(0, cov)`` added after each step (T + 1, n).

    ``us``: (T fine, n_input) inputs, ``fine`` steps of ``dt / fine`` per interval.
    """
    q = np.asarray(cov, dtype=np.float64)
    n = model.n_state
    if q.shape != (n, n) or not np.all(np.isfinite(q)) or not np.allclose(q, q.T, rtol=1e-12, atol=0.0):
        raise ValueError(
            f"simulate_dataset process_cov: expected a finite symmetric ({n}, {n}) matrix (one row and "
            f"column per state: {', '.join(model.state_names)}); received shape {q.shape}."
        )
    if truth == "exact" and not model.is_linear:
        raise ValueError(
            "simulate_dataset process_cov: the noise is added after each interval, which needs a stepped "
            "truth; expected truth = a fixed-step method (e.g. 'rk4' with substeps) for the nonlinear "
            f"{type(model).__name__}; received truth='exact'."
        )
    h = dt / fine
    step = discretise(model, h, "exact" if truth == "exact" else truth, substeps)
    root = jnp.asarray(psd_factor(q, "simulate_dataset process_cov"))
    n_int = us.shape[0] // fine
    ws = jax.random.normal(jax.random.fold_in(key, 2), (n_int, n)) @ root.T
    ts = (dt * jnp.arange(n_int))[:, None] + h * jnp.arange(fine)[None, :]
    us_int = jnp.reshape(us, (n_int, fine, -1))

    def body(x: Any, inp: Any) -> tuple[Any, Any]:
        t, u, w = inp
        nxt, _ = jax.lax.scan(lambda z, tu: (step.transition(tu[0], z, tu[1], step.params), None), x, (t, u))
        nxt = nxt + w
        return nxt, nxt

    _, xs = jax.lax.scan(body, jnp.asarray(x0), (ts, us_int, ws))
    return jnp.concatenate([jnp.asarray(x0)[None], xs])


def _scalars(model: AbstractModel) -> dict[str, Any]:
    from twinfer.models import get_param

    return {name: np.asarray(get_param(model.params, name)) for name in model.param_names}
