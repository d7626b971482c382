"""Compiled programs kept on disk whole, so a repeated run skips tracing and lowering as well as compiling.

JAX's persistent compilation cache (which ``twinfer run`` switches on) keys a program by its lowered
HLO, so every run still traces and lowers it first. For the graph engine that is most of a warm start:
the two scans of ``twinfer run chain4`` took 2.7 s each to trace and lower, against 0.3 s to load the
finished executable. :func:`load_or_compile` keeps the executable itself
(``jax.experimental.serialize_executable``) under a key that names everything the program depends on,
and loads it instead of tracing when the key matches.

The key (SHA-256) is made of:

* the twinfer source: every ``.py`` file of the installed package, path and bytes, so any change to the
  library is a new key;
* the versions of Python, jax, jaxlib, equinox and numpy; the backend, its devices' kind and count;
  float64 on or off; ``XLA_FLAGS``; whether the batch-safe CPU lowerings are registered
  (:func:`twinfer.configure`, :mod:`twinfer.linalg`);
* the caller's ``key``: whatever else determines the program (for a case: its name, the resolved
  config and which program of the case), which the caller must make complete. The program must be a
  function of the source and this key alone, never of data values: pass data as arguments;
* the arguments' tree structure, shapes and dtypes.

A file that cannot be read or loaded is compiled anew and replaced; nothing is ever read where no
folder is given. Only programs whose custom calls are all jaxlib's LAPACK kernels are kept (those are
bound to their routines before a load, :func:`_prepare_lapack`); one with a host callback
(``eqx.error_if``, ``jax.debug``) is compiled each time, as a callback lives in its process. The
folder holds at most :data:`KEEP` programs (the least recently used go).

Loading a file unpickles it, and runs the program it holds, so nobody else may write one:

* the folder is created private (``0o700``); one that another user owns, or that group or others can
  write to, is neither read nor written (:class:`ProgramCacheWarning` names it and the fix), and every
  program is compiled anew;
* every file carries an HMAC-SHA256 of its name and contents under a per-user key, :data:`KEY_FILE` in
  the folder (32 random bytes, mode ``0o600``, created once with ``O_EXCL``); a file whose MAC does not
  match is never unpickled: it is removed and the program compiled anew.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import pickle
import re
import secrets
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from twinfer._atomic import write_bytes
from twinfer.checkpoint import digest
from twinfer.errors import TwinferWarning
from twinfer.linalg import batch_safe_lowerings_applied

__all__ = [
    "KEEP",
    "KEY_FILE",
    "ProgramCacheWarning",
    "folder_problem",
    "keep",
    "load",
    "load_or_compile",
    "program_folder",
    "program_key",
    "twinfer_command",
]

KEEP = 32
"""Most programs kept in one folder."""

KEY_FILE = ".hmac-key"
"""The per-user key of the folder's MACs (32 random bytes, mode ``0o600``)."""

_MAC = 32
"""Bytes of an HMAC-SHA256, the head of every kept file."""


class ProgramCacheWarning(TwinferWarning):
    """A folder of compiled programs that others could write to: it is not used (programs are compiled)."""


def twinfer_command(*args: str) -> list[str]:
    """The argv that runs ``twinfer ARGS`` in a child process of this Python.

    ``-P`` keeps the working folder off the child's module path, so a ``twinfer.py`` (or ``jax.py``, ...)
    lying there is never imported in place of the library; the environment (``PYTHONPATH``, ``XLA_FLAGS``,
    ...) is the caller's, as given.
    """
    return [sys.executable, "-P", "-c", "from twinfer.cli import main; main()", *args]


def folder_problem(folder: Path | str) -> str | None:
    """Why ``folder`` may not hold compiled programs, or None: it must be this user's, writable by no other.

    A folder that does not exist has no problem (it will be created private).
    """
    try:
        info = os.stat(folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be inspected ({exc.strerror or exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != os.getuid():
        return f"another user (uid {info.st_uid}) owns it"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write to it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _refuse(folder: Path, problem: str) -> None:
    warnings.warn(
        f"compiled programs folder {folder}: {problem}, so a program planted there could run; it is not "
        f"used (every program is compiled anew). Make it private (chmod go-w {folder}, owned by you) or "
        "set TWINFER_CACHE_DIR to a folder of your own.",
        ProgramCacheWarning,
        stacklevel=3,
    )


def _read_key(path: Path) -> bytes:
    """The key file's 32 bytes; ValueError if it is not this user's private regular file of 32 bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise ValueError(f"{path}: expected this user's private file (mode 600)")
        key = os.read(fd, _MAC + 1)
    finally:
        os.close(fd)
    if len(key) != _MAC:
        raise ValueError(f"{path}: expected {_MAC} bytes; received {len(key)}")
    return key


def _folder_key(folder: Path, create: bool) -> bytes | None:
    """The folder's MAC key (made with the folder where ``create``), None where the folder is not to be used.

    A folder others can write to, or a key file that is not private, gives a :class:`ProgramCacheWarning`.
    """
    problem = folder_problem(folder)
    if problem is None and create:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return None
        problem = folder_problem(folder)
    if problem is not None:
        _refuse(folder, problem)
        return None
    path = folder / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    except (OSError, ValueError) as exc:
        _refuse(folder, f"its key file is not private or damaged ({exc})")
        return None
    try:  # first use: written whole under a private temporary name, then linked (O_EXCL) into place
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{KEY_FILE}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(_MAC))
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:  # another process made it first: its key is the folder's
                pass
        finally:
            os.unlink(tmp)
        return _read_key(path)
    except (OSError, ValueError):
        return None


def _mac(key: bytes, name: str, payload: bytes) -> bytes:
    return hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).digest()


def program_folder() -> Path | None:
    """The folder of kept programs: ``programs/`` in JAX's compilation cache folder, or None if it is off.

    ``twinfer run`` sets that folder (``$TWINFER_CACHE_DIR``, default ``~/.cache/twinfer/xla``); in a
    library session it is unset unless the user sets ``jax_compilation_cache_dir``.
    """
    folder = jax.config.jax_compilation_cache_dir  # pyright: ignore[reportAttributeAccessIssue]
    return Path(folder) / "programs" if folder else None


@functools.cache
def _source_digest() -> str:
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _environment() -> dict[str, Any]:
    import equinox
    import jaxlib
    import numpy

    devices = jax.devices()
    return {
        "python": sys.version,
        "versions": [jax.__version__, jaxlib.__version__, equinox.__version__, numpy.__version__],
        "backend": jax.default_backend(),
        "devices": [devices[0].device_kind, len(devices)],
        "x64": str(jnp.zeros(()).dtype),  # float64 or float32
        "env": [os.environ.get("XLA_FLAGS", ""), batch_safe_lowerings_applied()],
    }


def _signature(args: tuple[Any, ...]) -> list[Any]:
    leaves, tree = jax.tree_util.tree_flatten(args)
    return [str(tree), [(tuple(jnp.shape(x)), str(jnp.result_type(x))) for x in leaves]]


def _prepare_lapack() -> None:
    """Give jaxlib's LAPACK kernels their routines, as lowering a factorisation would.

    jaxlib binds its LAPACK custom calls to scipy's routines when it first lowers one
    (``jaxlib.lapack.prepare_lapack_call``); a program loaded without lowering would call unbound
    pointers (a segmentation fault, seen on ``twinfer run chain4``'s ``lapack_dsyevd_ffi``).
    """
    import numpy as np
    from jaxlib import lapack

    lapack.prepare_lapack_call("potrf_ffi", np.dtype(np.float64))


def _keepable(compiled: Any) -> bool:
    """Whether a program calls nothing but XLA and jaxlib's LAPACK kernels (no host callbacks)."""
    targets = set(re.findall(r'custom_call_target="([^"]+)"', compiled.as_text() or ""))
    return all(t.startswith("lapack_") for t in targets)


def program_key(key: Any, args: tuple[Any, ...]) -> str:
    """The file name a program of ``key`` on ``args`` is kept under (hex SHA-256, see the module)."""
    return digest([_source_digest(), _environment(), key, _signature(args)])


def _path(key: Any, args: tuple[Any, ...], folder: Path | str | None) -> Path | None:
    where = Path(folder) if folder is not None else program_folder()
    return None if where is None else where / f"{program_key(key, args)}.jaxexe"


def load(*args: Any, key: Any, folder: Path | str | None = None) -> Any | None:
    """The program kept under ``key`` for arguments like ``args``, loaded; None where there is none.

    A missing, damaged or unloadable file is None (compile anew and :func:`keep` it); so is every
    call without a folder (see :func:`load_or_compile`), and a folder others can write to (a
    :class:`ProgramCacheWarning`). A file whose MAC does not match is removed unread.
    """
    from jax.experimental.serialize_executable import deserialize_and_load

    path = _path(key, args, folder)
    if path is None or not path.parent.is_dir():
        return None
    secret = _folder_key(path.parent, create=False)
    if secret is None or not path.is_file():
        return None
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    mac, payload = blob[:_MAC], blob[_MAC:]
    if not hmac.compare_digest(mac, _mac(secret, path.name, payload)):
        path.unlink(missing_ok=True)  # not written by this user's twinfer: never unpickled
        return None
    in_tree = jax.tree_util.tree_structure((args, {}))  # rebuilt here: an eqx.Module's does not pickle
    try:
        _prepare_lapack()
        payload, out_tree = pickle.loads(payload)
        compiled = deserialize_and_load(payload, in_tree, out_tree)
        os.utime(path)  # recently used
    except Exception:  # noqa: BLE001 - a file from a broken write or another build: compile anew
        return None
    return compiled


def keep(compiled: Any, *args: Any, key: Any, folder: Path | str | None = None) -> bool:
    """Keep ``compiled`` (compiled for ``args``) under ``key``; whether it was kept.

    Not kept: no folder; a program with host callbacks or closed-over constants; a folder that cannot
    be written, or that others can write to (a :class:`ProgramCacheWarning`). The folder is created
    private (``0o700``) and then holds the :data:`KEEP` most recently used programs, each with its MAC.
    """
    from jax.experimental.serialize_executable import serialize

    path = _path(key, args, folder)
    if path is None or not _keepable(compiled):
        return False
    secret = _folder_key(path.parent, create=True)
    if secret is None:
        return False
    try:
        payload, _, out_tree = serialize(compiled)
        blob = pickle.dumps((payload, out_tree))
        write_bytes(path, _mac(secret, path.name, blob) + blob)
        kept = sorted(path.parent.glob("*.jaxexe"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEEP:]:
            old.unlink(missing_ok=True)
    except (OSError, ValueError, NotImplementedError, pickle.PicklingError):
        return False
    return True


def load_or_compile(jitted: Any, *args: Any, key: Any, folder: Path | str | None = None) -> tuple[Any, bool]:
    """``jitted.lower(*args).compile()``, or the same program loaded from ``folder``: ``(compiled, loaded)``.

    :func:`load`, else compile and :func:`keep`.

    Args:
        jitted: a ``jax.jit`` function.
        *args: its arguments (the compiled program is called with arguments of the same structure,
            shapes and dtypes).
        key: JSON-able description of everything else the program depends on (see the module); two
            programs under one key and signature must be the same program.
        folder: where programs are kept; default :func:`program_folder`. None there: compile only.

    Returns:
        The compiled program (a ``jax.stages.Compiled``) and whether it was loaded from disk.

    """
    compiled = load(*args, key=key, folder=folder)
    if compiled is not None:
        return compiled, True
    compiled = jitted.lower(*args).compile()
    keep(compiled, *args, key=key, folder=folder)
    return compiled, False


@dataclass(frozen=True)
class Job:
    """A program to have ready, and the calls to start as soon as it is.

    ``jitted`` (a ``jax.jit`` function) for arguments like ``args``, kept under ``key`` (see
    :func:`load_or_compile`); ``runs`` are the argument tuples it is called with once compiled.
    """

    jitted: Any
    args: tuple[Any, ...]
    key: Any
    runs: Sequence[tuple[Any, ...]]


@contextmanager
def compiling(
    jobs: Sequence[Job], *, folder: Path | str | None = None, thread_name: str = "twinfer-compile"
) -> Iterator[list[Future[tuple[Any, list[Any], float]]]]:
    """Programs loaded where kept, else compiled in a background thread, each started once ready.

    Every program is :func:`load`-ed where an earlier run kept it; the others are traced and lowered
    here, in the caller's thread, then compiled one after the other in one background thread (XLA
    compiles without holding Python's lock and already spreads one compilation over the cores: two at
    once were no faster on 2 cores for chain4's two scans) and :func:`keep`-ed. Each job's ``runs`` start
    as soon as its program is ready (they go on in XLA's threads), so the caller's own work inside the
    ``with`` block overlaps compilation and runs. The numbers are those of running everything one after
    another: the same programs on the same inputs.

    Yields:
        One future per job: ``(program, outputs of its runs, time.perf_counter() when it was ready)``.
        An exception inside the block (an interrupt included) cancels what has not started and does
        not wait for XLA.

    """
    kept = [load(*job.args, key=job.key, folder=folder) for job in jobs]
    lowered = [
        exe if exe is not None else job.jitted.lower(*job.args) for job, exe in zip(jobs, kept, strict=True)
    ]

    def ready(i: int) -> tuple[Any, list[Any], float]:
        exe, job = kept[i], jobs[i]
        if exe is None:
            exe = lowered[i].compile()
            keep(exe, *job.args, key=job.key, folder=folder)
        done = time.perf_counter()
        try:
            outs = [exe(*call) for call in job.runs]
            if kept[i] is not None:  # a kept program's failure shows when it runs, not when it is called
                jax.block_until_ready(outs)
            return exe, outs, done
        except jax.errors.JaxRuntimeError:
            if kept[i] is None:
                raise
        # a kept program that loaded but cannot run (seen on a warm `twinfer run chain4`: "NOT_FOUND:
        # Function iota_compare_fusion not found"): dropped, compiled anew, kept again
        path = _path(job.key, job.args, folder)
        if path is not None:
            path.unlink(missing_ok=True)
        exe = job.jitted.lower(*job.args).compile()
        keep(exe, *job.args, key=job.key, folder=folder)
        return exe, [exe(*call) for call in job.runs], time.perf_counter()

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
    try:
        yield [pool.submit(ready, i) for i in range(len(jobs))]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # an interrupt does not wait for XLA
        raise
    pool.shutdown()
