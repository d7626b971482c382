"""Checkpoints of long runs (SMC, PINN training, hybrid training): one format, fingerprinted, verified.

A long run saves its state so an interrupted run resumes where it stopped (DESIGN.md, "Samplers and
trainers"; Conventions: "Long runs checkpoint under their own output folder, fingerprinted by case, config,
version and input data; a foreign or corrupt checkpoint is a named error; resume only on --resume").

A :class:`Checkpoint` is a file path, a fingerprint and whether to resume. The fingerprint is a mapping
of named parts to digests: the caller gives the run's parts (:func:`run_fingerprint`: case, resolved
config, package version, input-data checksums) and each algorithm adds its own (settings, PRNG key, the
arrays of the problem it is given). A checkpoint is loaded only when ``resume`` is set, and only if it

- has the magic header and a SHA-256 content hash matching its bytes (truncated or altered files fail),
- was written by the same algorithm (``kind``) with the same fingerprint, part by part,
- holds state leaves of the same count, shapes and dtypes as the run's own (float32 leaves where the
  run holds float64 are refused), and
- has progress counters the algorithm accepts (checked by the algorithm through :meth:`Snapshot.refuse`).

Anything else raises :class:`CheckpointError`, which names the file and says how to start fresh. A run
that was not asked to resume never reads, and never overwrites, an existing checkpoint file.

File layout: ``MAGIC``, an 8-byte little-endian header length, the JSON header (kind, fingerprint,
metadata, leaf shapes and dtypes, ``sha256``), then an uncompressed ``.npz`` body with the state leaves
``leaf0..`` and named arrays. ``sha256`` is the hash of the header without it, then the body.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from twinfer._atomic import write_bytes
from twinfer._version import __version__
from twinfer.errors import TwinferRuntimeError

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Snapshot",
    "array_digest",
    "as_checkpoint",
    "digest",
    "inspect",
    "run_fingerprint",
]

MAGIC = b"TWINFER-CHECKPOINT\x00v1\n"

FRESH_HINT = (
    "To start fresh, run without --resume (twinfer run starts a new checkpoint of its own) or delete "
    "the file; a library call starts fresh with resume=False and a path where no checkpoint exists."
)


class CheckpointError(TwinferRuntimeError):
    """A checkpoint that cannot be used: foreign, corrupt, of another shape or dtype, or in the way.

    The message names the file (:attr:`path`), what is wrong, and how to start fresh.
    """

    def __init__(self, path: str | Path, problem: str, fix: str = FRESH_HINT):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"checkpoint {self.path}: {problem} {fix}")


def digest(obj: Any) -> str:
    """SHA-256 of the canonical JSON of ``obj`` (sorted keys; non-JSON values by ``str``)."""
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _as_numpy(leaf: Any) -> np.ndarray | None:
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(leaf))
    if isinstance(leaf, np.ndarray | jax.Array | np.generic | bool | int | float | complex):
        return np.asarray(leaf)
    return None


def array_digest(*trees: Any) -> str:
    """SHA-256 over the dtype, shape and bytes of every array leaf of ``trees`` (others are skipped).

    The input-data checksum of a fingerprint: any changed sample, size or precision changes it.
    """
    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(trees):
        a = _as_numpy(leaf)
        if a is None:
            continue
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def package_version() -> str:
    """The installed twinfer version (recorded in every fingerprint)."""
    return str(__version__)


def run_fingerprint(case: str, config: Mapping[str, Any], data: Any = None) -> dict[str, str]:
    """The run's fingerprint parts: case name, digest of the resolved config, version, data checksum.

    Args:
        case: case (or problem) name.
        config: the resolved settings that determine the numbers (leave out paths and ``resume``).
        data: any pytree of the input arrays (None: none beyond what the algorithm hashes itself).

    """
    parts = {"case": case, "config": digest(dict(config)), "version": package_version()}
    if data is not None:
        parts["data"] = array_digest(data)
    return parts


@dataclass(frozen=True)
class Snapshot:
    """What a verified checkpoint holds: metadata, state leaves and named arrays."""

    path: Path
    meta: dict[str, Any]
    leaves: list[np.ndarray]
    arrays: dict[str, np.ndarray]

    def refuse(self, problem: str) -> CheckpointError:
        """The error for a checkpoint whose contents the algorithm cannot accept (``raise`` it)."""
        return CheckpointError(self.path, problem)

    def array(self, name: str, like: Any) -> Any:
        """The named array, which must have ``like``'s shape and dtype."""
        if name not in self.arrays:
            raise self.refuse(f"it holds no array {name!r}: it was written by another version or algorithm.")
        saved, expected = self.arrays[name], np.asarray(like)
        if saved.shape != expected.shape or saved.dtype != expected.dtype:
            raise self.refuse(
                f"array {name!r} is {saved.dtype} {saved.shape}, the run expects {expected.dtype} "
                f"{expected.shape}: it was written by another run or at another precision."
            )
        return jax.numpy.asarray(saved) if isinstance(like, jax.Array) else saved

    def state(self, template: Any) -> Any:
        """The saved state with ``template``'s structure; leaf count, shapes and dtypes must match.

        Raises:
            CheckpointError: a leaf of another shape or dtype (e.g. float32 where float64 is expected).

        """
        leaves, treedef = jax.tree_util.tree_flatten(template)
        if len(leaves) != len(self.leaves):
            raise self.refuse(
                f"it holds {len(self.leaves)} state arrays, the run has {len(leaves)}: it was written for "
                "another model or algorithm."
            )
        out = []
        for i, (saved, like) in enumerate(zip(self.leaves, leaves, strict=True)):
            expected = _as_numpy(like)
            if expected is None:
                raise TypeError(f"Snapshot.state: template leaf {i} is not an array ({type(like).__name__}).")
            if saved.shape != expected.shape or saved.dtype != expected.dtype:
                raise self.refuse(
                    f"state array {i} is {saved.dtype} {saved.shape}, the run expects {expected.dtype} "
                    f"{expected.shape}: it was written by another run or at another precision."
                )
            out.append(jax.numpy.asarray(saved) if isinstance(like, jax.Array) else saved)
        return jax.tree_util.tree_unflatten(treedef, out)


@dataclass(frozen=True)
class Checkpoint:
    """Where a long run keeps its state, what run it belongs to, and whether to resume from it.

    Attributes:
        path: the checkpoint file.
        fingerprint: named parts (for example :func:`run_fingerprint`) that a saved checkpoint must
            match exactly to be resumed.
        resume: load the file if it exists (never without it: a fresh run refuses to overwrite one).

    """

    path: Path
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    resume: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        object.__setattr__(self, "fingerprint", {str(k): str(v) for k, v in dict(self.fingerprint).items()})

    def extended(self, **parts: str) -> Checkpoint:
        """The same checkpoint with more fingerprint parts (an algorithm adds its settings)."""
        return Checkpoint(self.path, {**self.fingerprint, **parts}, self.resume)

    def begin(self) -> bool:
        """How the run starts: True to resume from the file, False to start fresh.

        Raises:
            CheckpointError: the file exists but ``resume`` is off; a fresh run does not overwrite
                another run's checkpoint.

        """
        if self.path.is_dir():
            raise CheckpointError(
                self.path, "expected a checkpoint file; this is a folder.", "Give a file path."
            )
        if not self.path.exists():
            return False
        if not self.resume:
            raise CheckpointError(
                self.path,
                "a checkpoint of an earlier run exists here and resume was not asked for; it is left as is.",
                "Pass --resume (library: resume=True) to continue that run, or delete the file or choose "
                "another path to start fresh.",
            )
        return True

    def save(
        self, kind: str, state: Any, meta: Mapping[str, Any], arrays: Mapping[str, Any] | None = None
    ) -> None:
        """Write the state (any pytree of arrays), JSON metadata and named arrays, atomically."""
        leaves = [_as_numpy(leaf) for leaf in jax.tree_util.tree_leaves(state)]
        if any(a is None for a in leaves):
            raise TypeError(f"Checkpoint.save: every state leaf must be an array ({kind}).")
        body_arrays = {f"leaf{i}": a for i, a in enumerate(leaves)}
        body_arrays.update({f"array.{k}": np.asarray(v) for k, v in (arrays or {}).items()})
        buffer = io.BytesIO()
        np.savez(buffer, allow_pickle=False, **body_arrays)  # type: ignore[arg-type]
        body = buffer.getvalue()
        header: dict[str, Any] = {
            "kind": kind,
            "fingerprint": dict(self.fingerprint),
            "meta": dict(meta),
            "leaves": [[a.dtype.str, list(a.shape)] for a in leaves if a is not None],
        }
        header["sha256"] = _content_hash(header, body)
        head = json.dumps(header, sort_keys=True).encode()
        write_bytes(self.path, MAGIC + len(head).to_bytes(8, "little") + head + body)

    def load(self, kind: str) -> Snapshot:
        """Read and verify the file: magic, content hash, kind and fingerprint.

        Raises:
            CheckpointError: unreadable, corrupt (truncated, altered), another algorithm, or another run
                (the message lists the fingerprint parts that differ).

        """
        header, body = _read(self.path)
        if header.get("kind") != kind:
            raise CheckpointError(
                self.path, f"it was written by {header.get('kind')!r}, this run is {kind!r}: another run."
            )
        saved, now = header.get("fingerprint", {}), self.fingerprint
        differ = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        if differ:
            detail = ", ".join(
                f"{k} ({_short(saved.get(k))} saved, {_short(now.get(k))} now)" for k in differ
            )
            raise CheckpointError(
                self.path, f"it belongs to another run: its fingerprint differs in {detail}; not resumed."
            )
        try:
            with np.load(io.BytesIO(body), allow_pickle=False) as npz:
                leaves = [npz[f"leaf{i}"] for i in range(len(header["leaves"]))]
                arrays = {k[len("array.") :]: npz[k] for k in npz.files if k.startswith("array.")}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            raise CheckpointError(
                self.path, "it is corrupt (unreadable arrays); it cannot be resumed."
            ) from None
        return Snapshot(self.path, header.get("meta", {}), leaves, arrays)


def inspect(path: str | Path) -> dict[str, Any]:
    """The verified header of a checkpoint file: ``kind``, ``fingerprint``, ``meta``, ``leaves``.

    Raises:
        CheckpointError: unreadable or corrupt (the content hash is checked; the fingerprint is not).

    """
    return _read(Path(path))[0]


def _read(path: Path) -> tuple[dict[str, Any], bytes]:
    try:
        payload = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(path, f"it cannot be read ({exc.strerror or exc}).") from None
    corrupt = "it is corrupt (truncated or altered: {}); it cannot be resumed."
    if not payload.startswith(MAGIC):
        raise CheckpointError(path, corrupt.format("no twinfer checkpoint header"))
    start = len(MAGIC) + 8
    size = int.from_bytes(payload[len(MAGIC) : start], "little")
    try:
        header = json.loads(payload[start : start + size].decode())
        stored_hash = header.pop("sha256")
    except (UnicodeDecodeError, ValueError, KeyError, AttributeError, TypeError):
        raise CheckpointError(path, corrupt.format("unreadable header")) from None
    body = payload[start + size :]
    if _content_hash(header, body) != stored_hash:
        raise CheckpointError(path, corrupt.format("content hash mismatch"))
    return header, body


def _content_hash(header: Mapping[str, Any], body: bytes) -> str:
    h = hashlib.sha256(json.dumps(dict(header), sort_keys=True).encode())
    h.update(body)
    return h.hexdigest()


def _short(value: str | None) -> str:
    if value is None:
        return "none"
    return value[:12] if len(value) == 64 else repr(value)


def as_checkpoint(checkpoint: Any, where: str) -> Checkpoint | None:
    """Check the ``checkpoint`` argument of a long-running function: a :class:`Checkpoint` or None."""
    if checkpoint is None or isinstance(checkpoint, Checkpoint):
        return checkpoint
    raise TypeError(
        f"{where} checkpoint: expected a twinfer.checkpoint.Checkpoint(path, fingerprint, resume=...) or "
        f"None; received {type(checkpoint).__name__} {checkpoint!r}. A bare path carries no fingerprint, "
        "so it could resume another run's state."
    )
