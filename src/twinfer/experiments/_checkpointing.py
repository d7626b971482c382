"""Checkpoint settings shared by the cases with long runs (PN-SMC, PINN and hybrid training).

A case's checkpoints live in ``checkpoint_dir``: ``twinfer run`` gives each run a folder of its own under
its output folder (``OUT/.checkpoints/<case>-<time>/``) and sets ``resume`` for ``--resume``; a library
user or ``--set checkpoint_dir=DIR`` may name any folder. Every checkpoint carries the fingerprint of
the case, its resolved config (without these two settings), the twinfer version and the case's input data
(:func:`twinfer.checkpoint.run_fingerprint`), so a checkpoint of another run is refused by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pydantic

from twinfer.checkpoint import Checkpoint, digest, run_fingerprint
from twinfer.experiments._case import CaseConfig

NOT_FINGERPRINTED = ("checkpoint_dir", "resume")
"""Settings that say where checkpoints are and whether to continue, not what is computed."""


class CheckpointSettings(CaseConfig):
    """``checkpoint_dir`` and ``resume`` of a case with long runs."""

    checkpoint_dir: str = pydantic.Field(
        "",
        description="Folder of this run's checkpoints ('' = none; twinfer run: OUT/.checkpoints/<run>).",
    )
    resume: bool = pydantic.Field(
        False, description="Continue from the checkpoints in checkpoint_dir (`twinfer run --resume`)."
    )


def config_digest(config: CaseConfig, exclude: Iterable[str] = ()) -> str:
    """Digest of the settings that determine a run's numbers (the ``config`` fingerprint part)."""
    return digest(config.model_dump(exclude={*NOT_FINGERPRINTED, *exclude}))


def case_checkpoint(
    case: str, config: CheckpointSettings, name: str, data: Any = None, exclude: Iterable[str] = ()
) -> Checkpoint | None:
    """The checkpoint ``checkpoint_dir/<name>.ckpt`` of one long computation of a case (None: no folder).

    Args:
        case: the case name.
        config: its resolved config.
        name: the computation (one file per sampler run or per trained model).
        data: a pytree of the input arrays it uses (their checksum enters the fingerprint).
        exclude: settings that act only after this computation (changing them keeps the checkpoint).

    """
    if not config.checkpoint_dir:
        return None
    settings = config.model_dump(exclude={*NOT_FINGERPRINTED, *exclude})
    fingerprint = run_fingerprint(case, settings, data)
    return Checkpoint(Path(config.checkpoint_dir) / f"{name}.ckpt", fingerprint, resume=config.resume)
