"""Devices and hosts: one-axis device meshes, joining several processes, results back as numpy.

The same program runs on one CPU, several devices of one machine, or several processes on several
machines. On one machine ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` makes N CPU devices.
Across processes every process calls :func:`init_distributed` first (before any JAX computation); then
``jax.devices()`` lists the devices of every process, :func:`device_mesh` with ``devices=0`` spans them
all, and :func:`to_numpy` brings a result that is split over processes back whole to each of them.
:func:`map_cores` runs a batched program on every core of one CPU device, from one thread per core.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["check_distributed", "device_mesh", "init_distributed", "map_cores", "to_numpy", "usable_cores"]

_DEVICE_HINT = "on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N devices"


def device_mesh(devices: int, axis: str, field: str = "devices") -> jax.sharding.Mesh | None:
    """A one-axis mesh named ``axis`` over the first ``devices`` devices (0: all); None for one device.

    After :func:`init_distributed` the devices are those of every process (``jax.devices()``), so
    ``devices=0`` splits the axis over all processes. ``field`` names the setting in the error raised
    when more devices are asked for than exist.

    Raises:
        ValueError: ``devices`` is negative or more than the devices there are.

    """
    available = jax.devices()
    if devices < 0:
        raise ValueError(f"{field}: expected 0 (all devices) or a positive count; received {devices}.")
    count = len(available) if devices == 0 else devices
    if count > len(available):
        where = f" over {jax.process_count()} processes" if jax.process_count() > 1 else ""
        raise ValueError(
            f"{field}: expected at most the {len(available)} visible device(s){where}; received {devices} "
            f"({_DEVICE_HINT})."
        )
    if count == 1:
        return None
    return jax.sharding.Mesh(np.array(available[:count]), (axis,))


def init_distributed(coordinator: str, num_processes: int, process_id: int, timeout_s: int = 300) -> None:
    """Join this process to ``num_processes`` processes through JAX's distributed runtime.

    Call it in every process, before any JAX computation: process 0 serves as coordinator at
    ``coordinator`` (``HOST:PORT``, reachable from every process); CPU devices talk through gloo
    collectives over TCP. ``timeout_s`` bounds the wait for the other processes to join.

    Raises:
        ValueError: a malformed ``coordinator``, ``num_processes`` below 1 or ``process_id`` outside
            ``0 .. num_processes - 1``.
        RuntimeError: JAX already started its devices or joined a cluster, the coordinator could not
            be served (process 0) or reached within ``timeout_s`` (the others). Other processes that do
            not join within ``timeout_s`` make JAX's runtime abort the process.

    """
    check_distributed(coordinator, num_processes, process_id)
    from jax._src import xla_bridge

    if jax.distributed.is_initialized():
        raise RuntimeError("init_distributed: this process already joined a distributed runtime.")
    if xla_bridge.backends_are_initialized():
        raise RuntimeError(
            "init_distributed: JAX already started its devices in this process; join the distributed "
            "runtime before any JAX computation."
        )
    if process_id != 0:  # JAX's runtime aborts the process when the coordinator never answers
        _wait_for_coordinator(coordinator, process_id, num_processes, timeout_s)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=timeout_s,
        )
    except Exception as exc:  # the runtime raises JaxRuntimeError with a long status
        raise RuntimeError(
            f"init_distributed: process {process_id} of {num_processes} could not join through the "
            f"coordinator at {coordinator} ({type(exc).__name__}: {str(exc).splitlines()[0]}). Process 0 "
            "serves it: its port must be free on process 0's machine and reachable from the others."
        ) from exc


def _wait_for_coordinator(coordinator: str, process_id: int, num_processes: int, timeout_s: float) -> None:
    """Until a TCP connection to ``coordinator`` opens; RuntimeError naming it after ``timeout_s``."""
    host, port = coordinator.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"init_distributed: process {process_id} of {num_processes} could not reach the "
                    f"coordinator at {coordinator} within {timeout_s:g} s ({exc.strerror or exc}). Start "
                    "process 0 with the same coordinator; HOST:PORT must be process 0's machine, reachable "
                    "from this one."
                ) from None
        time.sleep(0.5)


def check_distributed(
    coordinator: str,
    num_processes: int,
    process_id: int,
    names: tuple[str, str, str] = ("coordinator", "num_processes", "process_id"),
) -> None:
    """Refuse arguments :func:`init_distributed` cannot join with; ``names`` name them in the messages.

    Raises:
        ValueError: ``coordinator`` is not ``HOST:PORT`` (port 1..65535), ``num_processes`` is below 1,
            or ``process_id`` is outside ``0 .. num_processes - 1``.

    """
    match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]/]+):(\d+)", coordinator)
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ValueError(
            f"{names[0]}: expected HOST:PORT (e.g. 10.0.0.1:1234) with a port 1..65535; received "
            f"{coordinator!r}."
        )
    if num_processes < 1:
        raise ValueError(f"{names[1]}: expected at least 1; received {num_processes}.")
    if not 0 <= process_id < num_processes:
        raise ValueError(
            f"{names[2]}: expected 0 .. {num_processes - 1} ({names[1]} - 1); received {process_id}."
        )


def to_numpy(value: Any) -> Any:
    """``value`` (an array or a pytree of arrays) as numpy, whole in every process.

    An array split over devices of several processes is gathered from all of them
    (``multihost_utils.process_allgather``), a collective: every process must call this together.
    Arrays held whole by this process (one process, or replicated) are converted without communication.
    """

    def one(x: Any) -> np.ndarray:
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree_util.tree_map(one, value)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; all of the machine's where it has none)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_PROGRAMS: dict[Any, Any] = {}
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _compiled(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn`` (jitted here if it is not) compiled for ``args``' shapes and dtypes, kept (the last 8)."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    key = (fn, tree, tuple((jnp.shape(x), jnp.result_type(x)) for x in leaves))
    if key not in _PROGRAMS:
        jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
        _PROGRAMS[key] = jitted.lower(*args).compile()
        while len(_PROGRAMS) > 8:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
    return _PROGRAMS[key]


def map_cores(fn: Callable[..., Any], *args: Any, workers: int = 0, shared: tuple[Any, ...] = ()) -> Any:
    """``fn(*shared, *args)`` for a batched ``fn``, ``args``' leading axis split into one chunk per core.

    For many independent problems under ``vmap`` (a bank of small filters, a Monte Carlo study, the
    tangents of a forward-mode gradient): one call of a vmapped program runs its time loop on one
    core, since its operations are too small for XLA to split, while calls made from several threads
    run at once on one CPU device. Each of ``workers`` threads (0: every core this process may use)
    calls one compiled program on its chunk, with ``shared`` passed whole to every chunk; chunks are
    padded to one size by repeating the last row (one compilation, kept for later calls on the same
    shapes), the padding dropped after. Rows must be independent (as under ``vmap``); the result equals
    ``fn(*shared, *args)`` row for row.

    Args:
        fn: a function whose ``args`` are batched along axis 0 (jitted here if it is not), returning a
            pytree of arrays batched along axis 0.
        *args: pytrees of arrays, every leaf with the same leading size B.
        workers: threads (and chunks); 0 for every usable core; at most B are used.
        shared: arguments before ``args``, the same for every chunk (not split).

    Raises:
        ValueError: ``workers`` is negative, there is no array argument, or the leaves' leading sizes
            differ (naming the sizes).

    """
    if workers < 0:
        raise ValueError(
            f"map_cores workers: expected 0 (every core) or a positive count; received {workers}."
        )
    leaves = jax.tree_util.tree_leaves(args)
    sizes = sorted({int(np.shape(x)[0]) if np.ndim(x) else -1 for x in leaves})
    if not leaves or len(sizes) != 1 or sizes[0] < 1:
        raise ValueError(
            f"map_cores args: expected arrays with one common leading (batch) size; received leading sizes "
            f"{sizes if leaves else 'none (no array argument)'} (-1: a scalar)."
        )
    batch = sizes[0]
    count = min(batch, workers or usable_cores())
    if count == 1:
        return _compiled(fn, (*shared, *args))(*shared, *args)
    chunks = [(*shared, *c) for c in _chunks(args, count, -(-batch // count))]
    program = _compiled(fn, chunks[0])  # compiled once, before the threads start
    if count not in _POOLS:
        _POOLS[count] = ThreadPoolExecutor(count, thread_name_prefix="twinfer-map-cores")
    return _joined(list(_POOLS[count].map(lambda c: jax.block_until_ready(program(*c)), chunks)), batch)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _chunks(args: tuple[Any, ...], count: int, size: int) -> tuple[Any, ...]:
    """``count`` chunks of ``size`` rows of every leaf, the last padded by repeating the last row."""
    batch = jax.tree_util.tree_leaves(args)[0].shape[0]
    rows = jnp.minimum(jnp.arange(count * size), batch - 1)
    take = lambda i: jax.tree_util.tree_map(lambda x: x[rows[i * size : (i + 1) * size]], args)  # noqa: E731
    return tuple(take(i) for i in range(count))


@functools.partial(jax.jit, static_argnums=(1,))
def _joined(outs: list[Any], batch: int) -> Any:
    """The chunks' outputs joined along axis 0, the padding rows dropped."""
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, axis=0)[:batch], *outs)
