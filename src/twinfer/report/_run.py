"""Run folders: ``runs/<case>-<timestamp>/`` with config, metrics, arrays, figures and the report."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import secrets
import shutil
import tomllib
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from twinfer._atomic import OWNER, mark_owner, marked_gone, write_bytes
from twinfer.errors import TwinferValueError
from twinfer.report._files import to_toml, write_figure, write_json, write_npz, write_text
from twinfer.report._report import PaperValue, render_report


def versions() -> dict[str, str]:
    """Versions of the numerical stack, recorded in every run folder."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("twinfer", "jax", "jaxlib", "equinox", "diffrax", "numpy", "scipy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def check_output_folder(root: Path, option: str = "--out") -> Path:
    """Make sure files can be written under ``root`` (created if missing), before any computing.

    ``option`` names the setting that gave the folder, in the messages.

    Raises:
        NotADirectoryError: ``root`` (or a parent) is a file.
        PermissionError: ``root`` cannot be created or written to (checked by writing a probe file).

    """
    root = Path(root)
    for parent in (root, *root.parents):
        if parent.exists() and not parent.is_dir():
            raise NotADirectoryError(f"{parent} is a file, not a folder; give {option} a folder.")
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".twinfer-write-probe-{secrets.token_hex(4)}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PermissionError(
            f"{root} cannot be written to ({exc.strerror or exc}); give {option} a writable folder."
        ) from None
    return root


_STAMP = "-YYYYmmdd-HHMMSS-999-999"
"""What :func:`new_run_dir` and then :func:`write_run` (a name taken meanwhile) append, at the longest."""

_TMP = ".{name}.{token}.tmp"
"""The temporary folder :func:`write_run` writes into, beside the run folder."""

RUN_NAME_MAX = 255 - len(_STAMP) - len(_TMP.format(name="", token="01234567"))
"""Longest run name (bytes): the run folder and its temporary folder then fit a 255-byte file name."""


def new_run_dir(root: Path, case: str) -> Path:
    """Reserve and return a fresh ``root/<case>-<YYYYmmdd-HHMMSS>[-n]`` folder (created empty).

    :func:`write_run` releases the reservation while it writes (a run killed then leaves no empty
    folder) and claims the name again at the end; it takes the next free name if another run took it.
    """
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        candidate = root / (f"{case}-{stamp}" if n == 0 else f"{case}-{stamp}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise RuntimeError(f"Could not create a new run folder under {root} for {case!r}.")


def check_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Metrics must be a flat mapping of dotted names to finite numbers.

    Raises:
        ValueError: a name is not a non-empty string, or a value is not a finite number; the message
            names the metric.

    """
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"metrics: expected non-empty string names; received {name!r}.")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"metrics[{name!r}]: expected a finite number; received {value!r} ({type(value).__name__})."
            ) from None
        if not math.isfinite(number):
            raise ValueError(
                f"metrics[{name!r}]: expected a finite number; received {number}. A NaN metric means "
                "the run went wrong; it is never written or reported silently."
            )
        out[name] = number
    return out


@dataclass(frozen=True)
class RunArtifacts:
    """Everything a case run produces, before it is written."""

    metrics: Mapping[str, float]
    arrays: Mapping[str, Any]
    notes: Sequence[str] = ()
    files: Mapping[str, bytes] = field(default_factory=dict)
    """Extra files by name relative to the run folder (for example an ArviZ ``posterior.nc``)."""
    quick: bool = False
    """The run used the ``--quick`` sizes: a smoke test, recorded in ``meta.json`` and said at the top of
    ``report.md`` (paper comparisons are not expected to hold at that size)."""


Figures = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


def write_run(
    run_dir: Path,
    case: str,
    description: str,
    config: Mapping[str, Any],
    artifacts: RunArtifacts,
    figures: Figures,
    paper: Mapping[str, PaperValue],
    *,
    extras: Sequence[Callable[[Path], object]] = (),
    on_warning: Callable[[str], None] | None = None,
) -> Path:
    """Write a run folder atomically: config, metrics, arrays, extra files, figures, meta and report.

    Everything is written into a temporary folder beside ``run_dir`` (same parent, so the same
    filesystem), which is then renamed onto ``run_dir`` (an empty folder reserved by
    :func:`new_run_dir`, released while writing, or absent; ``run_dir-<n>`` if another run took the
    name meanwhile): a crash, a full disk or an interrupt leaves either the complete folder or nothing
    (DESIGN.md, Conventions: "Written atomically"). A kill (which no handler sees) leaves only the
    temporary folder, marked with its owner (:func:`twinfer._atomic.mark_owner`): the next
    :func:`write_run` into the same parent removes such folders whose owner has provably ended, never a
    live run's. ``config.toml``, ``metrics.json``
    and ``arrays.npz`` come first; making or writing a figure, or an ``extras`` writer, that fails is not
    fatal: it is skipped, reported through ``on_warning`` and listed in ``meta.json`` and the report.

    Args:
        run_dir: the run folder to create.
        case: case name.
        description: one line on the case.
        config: the resolved config (written as ``config.toml``).
        artifacts: metrics, arrays, notes and extra files of the run, and whether it was ``--quick``
            (``meta.json``'s ``quick``, and the first line of ``report.md``).
        figures: name -> matplotlib figure, or a function making them (its failure is a warning too).
        paper: the paper's values beside the metrics in ``report.md``.
        extras: writers of further artefacts into the folder being written (e.g. ``posterior.nc``).
        on_warning: called with each warning line.

    Returns:
        The run folder: ``run_dir``, or ``run_dir-<n>`` when another run took that name while this one
        was written.

    """
    run_dir = Path(run_dir)
    metrics = check_metrics(artifacts.metrics)
    config_toml = to_toml(config)
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning is not None:
            on_warning(message)

    run_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = run_dir.parent / _TMP.format(name=run_dir.name, token=secrets.token_hex(4))
    tmp.mkdir()
    try:
        mark_owner(tmp)
        _release(run_dir)
        remove_stale_tmp(run_dir.parent)
        write_text(tmp / "config.toml", config_toml)
        write_json(tmp / "metrics.json", metrics)
        write_npz(tmp / "arrays.npz", artifacts.arrays)
        for name, payload in artifacts.files.items():
            write_bytes(tmp / name, payload)
        for writer in extras:
            try:
                writer(tmp)
            except Exception as exc:
                warn(f"{getattr(writer, '__name__', 'extra output')} failed and was skipped: {_why(exc)}")
        names = _write_figures(tmp, figures, warn)
        notes = [*artifacts.notes, *(f"Warning: {w}" for w in warnings)]
        meta = {
            "case": case,
            "quick": bool(artifacts.quick),
            "versions": versions(),
            "notes": list(artifacts.notes),
            "warnings": warnings,
        }
        write_json(tmp / "meta.json", meta)
        report = render_report(
            case, description, metrics, paper, config_toml, notes, names, quick=bool(artifacts.quick)
        )
        write_text(tmp / "report.md", report)
        (tmp / OWNER).unlink()
        return _claim(tmp, run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _release(run_dir)
        raise


def _release(run_dir: Path) -> None:
    """Remove ``run_dir`` if it is an empty folder (a reservation of :func:`new_run_dir`)."""
    try:
        run_dir.rmdir()
    except OSError:  # absent, or not empty (another run's folder): left as it is
        pass


def _claim(tmp: Path, run_dir: Path) -> Path:
    """Rename the written folder ``tmp`` onto ``run_dir`` (absent or empty), else the next free ``-<n>``."""
    for n in range(1000):
        target = run_dir if n == 0 else run_dir.with_name(f"{run_dir.name}-{n}")
        try:
            os.rename(tmp, target)  # atomic; fails where another run's complete folder is
        except OSError:
            if target.exists():
                continue
            raise
        return target
    raise RuntimeError(f"Could not name the run folder {run_dir}: 1000 names are taken.")


def remove_stale_tmp(root: Path) -> list[Path]:
    """Remove the temporary folders of :func:`write_run` under ``root`` whose owner has provably ended.

    A folder without an owner marker, of another host, or of a live process is kept. Returns the
    removed folders.
    """
    removed = []
    for folder in Path(root).glob(".*.tmp"):
        if folder.is_dir() and not folder.is_symlink() and marked_gone(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class RunFolderError(TwinferValueError):
    """A run folder that is missing a file, or holds one that does not parse; the message names it."""


def _read_file(run_dir: Path, name: str, parse: Any) -> Any:
    path = run_dir / name
    if not path.is_file():
        raise RunFolderError(f"{run_dir}: expected a twinfer run folder containing {name}; it is missing.")
    try:
        return parse(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RunFolderError(
            f"{path}: expected UTF-8 text; received undecodable bytes ({exc.reason} at byte {exc.start})."
        ) from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise RunFolderError(f"{path}: could not be parsed ({exc}).") from None
    except OSError as exc:
        raise RunFolderError(f"{path}: could not be read ({exc}).") from None


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _write_figures(folder: Path, figures: Figures, warn: Callable[[str], None]) -> list[str]:
    """Write each figure to ``folder/figures``; failures become warnings. Returns the file names."""
    try:
        made = figures() if callable(figures) else figures
        items = list(made.items())
    except Exception as exc:
        warn(f"the figures could not be made: {_why(exc)}; the run's numbers are complete.")
        return []
    names = []
    for name, fig in items:
        try:
            write_figure(folder / "figures" / f"{name}.png", fig)
            names.append(f"{name}.png")
        except Exception as exc:
            warn(f"figure {name!r} could not be written: {_why(exc)}")
    return names


def read_run(run_dir: Path) -> tuple[str, dict[str, Any], dict[str, float], dict[str, Any]]:
    """``(case, config, metrics, meta)`` of an existing run folder, checked against the folder contract.

    Raises:
        RunFolderError: ``config.toml``, ``metrics.json`` or ``meta.json`` is missing or does not parse,
            ``meta.json`` names no case, or a metric is not a finite number (the message names the file
            and the metric: a NaN metric is never rendered as if it were a result).

    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunFolderError(f"{run_dir}: expected a twinfer run folder; no such folder.")
    config = _read_file(run_dir, "config.toml", tomllib.loads)
    metrics = _read_file(run_dir, "metrics.json", json.loads)
    meta = _read_file(run_dir, "meta.json", json.loads)
    if not isinstance(meta, dict) or not isinstance(meta.get("case"), str):
        raise RunFolderError(
            f'{run_dir / "meta.json"}: expected a JSON object with the run\'s "case" name; received '
            f"{meta!r:.200}."
        )
    if not isinstance(meta.get("notes", []), list):
        raise RunFolderError(f'{run_dir / "meta.json"}: expected "notes" to be a list of strings.')
    if not isinstance(metrics, dict):
        raise RunFolderError(
            f"{run_dir / 'metrics.json'}: expected a JSON object of metric name -> number; received "
            f"{metrics!r:.200}."
        )
    try:
        checked = check_metrics(metrics)
    except ValueError as exc:
        raise RunFolderError(f"{run_dir / 'metrics.json'}: {exc}") from None
    return meta["case"], config, checked, meta


def read_arrays(run_dir: Path) -> dict[str, np.ndarray]:
    """The arrays of a run folder's ``arrays.npz``, loaded into memory.

    Raises:
        RunFolderError: the file is missing, is not an ``.npz`` archive, is truncated, or holds pickled
            objects (never loaded: a run folder holds plain arrays only).

    """
    path = Path(run_dir) / "arrays.npz"
    if not path.is_file():
        raise RunFolderError(
            f"{run_dir}: expected a twinfer run folder containing arrays.npz; it is missing."
        )
    try:
        with path.open("rb") as handle, np.load(handle, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}  # np.load(path) leaks its handle when the zip is bad
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, zlib.error) as exc:
        raise RunFolderError(
            f"{path}: expected an .npz archive of arrays; could not load it ({exc})."
        ) from None
