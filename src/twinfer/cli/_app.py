"""The ``twinfer`` command (list, run, estimate, report, reproduce, bench): the only place that prints."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(
    name="twinfer",
    help="Uncertainty-aware inverse inference on engineered dynamical systems.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Emoji codes off: a path such as runs/:x: must print as written (a user's text never becomes an emoji);
# markup stays on for our own styling, and every user string in it goes through escape().
console = Console(stderr=True, emoji=False)
out = Console(emoji=False)


def _fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _failed(what: str, exc: BaseException) -> NoReturn:
    """Exit 1 with one line naming the command, the error's type and its first line."""
    line = escape(f"{what} failed: {type(exc).__name__}: {exc}".splitlines()[0])
    console.print(
        f"[bold red]error:[/] {line} (--debug shows the traceback)", highlight=False, soft_wrap=True
    )
    raise typer.Exit(1) from None


class _Interrupts:
    """Ctrl-C that cannot be lost: a SIGINT is remembered as well as raised.

    Python raises KeyboardInterrupt wherever the main thread is when the signal arrives; inside a
    garbage-collection or finaliser callback (JAX registers one) it is printed as "Exception ignored"
    and swallowed, and the run would go on as if nothing had been pressed. The remembered flag is
    checked again at every progress report and after the computation, so the run still stops there.
    Used as ``with _INTERRUPTS:`` around a long command's work; the previous handler is put back after.
    """

    def __init__(self) -> None:
        self.seen = False
        self._previous: Any = None

    def __enter__(self) -> _Interrupts:
        import signal

        self.seen = False
        self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handler(self, signum: int, frame: object) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt


_INTERRUPTS = _Interrupts()


class _Bar:
    """Turns ``progress(stage, completed, total)`` callbacks into rich progress bars."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.tasks: dict[str, object] = {}

    def __call__(self, stage: str, completed: float, total: float) -> None:
        _INTERRUPTS.check()  # a Ctrl-C swallowed inside a callback stops the run here
        if stage not in self.tasks:
            self.tasks[stage] = self.progress.add_task(stage, total=total)
        self.progress.update(self.tasks[stage], completed=completed, total=total)  # type: ignore[arg-type]


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        disable=not console.is_terminal,
    )


@app.command("list")
def list_cases(
    case: Annotated[
        str | None, typer.Argument(help="A case: list its settings (the keys of --set) instead.")
    ] = None,
) -> None:
    """List the runnable case studies, or one case's settings with their defaults and --quick values."""
    from twinfer.experiments import all_cases

    cases = all_cases()
    if case is None:
        table = Table(title="twinfer cases", show_lines=False)
        table.add_column("case", style="bold")
        table.add_column("description")
        for name, the_case in cases.items():
            table.add_row(name, the_case.description)
        out.print(table)
        return
    if case not in cases:
        _fail(f"list case: expected one of {', '.join(cases)}; received {case!r}.")
    the_case = cases[case]
    table = Table(title=f"{case} settings (twinfer run {case} --set KEY=VALUE)", show_lines=False)
    for column in ("key", "default", "--quick", "description"):
        table.add_column(column, style="bold" if column == "key" else None)
    defaults = the_case.config_type.model_validate({})
    for key, field in type(defaults).model_fields.items():
        quick = the_case.quick.get(key)
        table.add_row(
            key,
            escape(repr(getattr(defaults, key))),
            "" if quick is None else escape(repr(quick)),
            escape(field.description or ""),
        )
    out.print(table)


def _preload_plotting() -> None:
    """Import matplotlib's PNG stack in a daemon thread while the case runs (it is needed at the end).

    The import (0.5-1.8 s) is Python work; a case spends much of its run in XLA (compiling, running),
    which leaves the interpreter free, so the figures find it loaded. ``import`` is thread-safe, and the
    figures' own import waits for this one if it is not done.
    """
    import threading

    def load() -> None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401
        except Exception:  # the figures report their own import error, as warnings
            pass

    threading.Thread(target=load, name="twinfer-preload-matplotlib", daemon=True).start()


def _use_compilation_cache() -> None:
    """Keep XLA's compiled programs on disk, so a repeated run of a case skips most compilation.

    The folder is ``$TWINFER_CACHE_DIR`` (default ``~/.cache/twinfer/xla``); ``TWINFER_CACHE_DIR=off``
    turns the cache off, and an explicit ``JAX_COMPILATION_CACHE_DIR`` wins. Benchmarks never use it, so
    the compile times they report are real compilations.
    """
    import os

    import jax

    from twinfer.programs import folder_problem

    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    folder = os.environ.get("TWINFER_CACHE_DIR", str(Path.home() / ".cache" / "twinfer" / "xla"))
    if folder.strip().lower() in ("", "off", "0", "none"):
        return
    problem = folder_problem(folder)  # a compiled program planted in the cache would run
    if problem is not None:
        _warn(
            f"compilation cache {folder}: {problem}, so a program planted there could run; compiling "
            f"without the cache (chmod go-w {folder}, or set TWINFER_CACHE_DIR to a folder of your own)."
        )
        return
    try:
        Path(folder).mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@app.command()
def run(
    case: Annotated[str, typer.Argument(help="Case name (see `twinfer list`).")],
    config: Annotated[Path | None, typer.Option("--config", help="TOML file of settings.")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override one setting: key=value (repeatable; `twinfer list CASE` shows the keys)."
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of every random draw.")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Parent folder of run folders.")] = Path("runs"),
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes for a smoke run.")] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue the latest interrupted run of this case and config."),
    ] = False,
    resume_from: Annotated[
        Path | None,
        typer.Option("--resume-from", help="Like --resume, from this checkpoint folder."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error.")] = False,
    coordinator: Annotated[
        str | None,
        typer.Option(
            "--coordinator",
            help="HOST:PORT of process 0, to run as one of several processes (with --num-processes and "
            "--process-id).",
            rich_help_panel="Several processes",
        ),
    ] = None,
    num_processes: Annotated[
        int | None,
        typer.Option("--num-processes", help="How many processes join.", rich_help_panel="Several processes"),
    ] = None,
    process_id: Annotated[
        int | None,
        typer.Option(
            "--process-id",
            help="This process's number, 0 .. N-1; process 0 writes the run folder.",
            rich_help_panel="Several processes",
        ),
    ] = None,
) -> None:
    """Run a case study and write its run folder (config, metrics, arrays, figures, report).

    Cases with long runs checkpoint into a folder of their own, ``OUT/.checkpoints/<case>-<time>/``:
    a fresh run never reads or removes another run's checkpoints; ``--resume`` continues the latest
    interrupted run of the same case and config; the folder is removed once the run folder is complete.
    ``--set checkpoint_dir=DIR`` keeps the checkpoints in DIR instead (never removed). Exit status: 0,
    1 for an error during the run, 2 for a bad command line or config, 130 when interrupted.

    Several processes (on one or several machines) run one case together when each is started with the
    same command plus ``--coordinator HOST:PORT --num-processes N --process-id I`` (I = 0 .. N-1; HOST is
    process 0's machine): they join JAX's distributed runtime before the case runs, so a case's
    ``devices=0`` spans the devices of every process. Every process computes; only process 0 writes the
    run folder. ``--resume`` is not available with several processes.
    """
    joined = _distributed_options(coordinator, num_processes, process_id, resume or resume_from is not None)
    _use_compilation_cache()
    from twinfer.checkpoint import CheckpointError
    from twinfer.experiments import ConfigError, get_case, parse_set, resolve_config
    from twinfer.report import check_output_folder, new_run_dir, write_posterior, write_run

    try:
        the_case = get_case(case)
        cfg = resolve_config(the_case, config, parse_set(set_ or []), seed, quick)
    except (KeyError, ConfigError) as exc:
        _fail(str(exc.args[0]) if isinstance(exc, KeyError) else str(exc))
        return
    writer = joined is None or joined[2] == 0  # with several processes, process 0 writes
    if writer:
        try:
            check_output_folder(out_dir)
        except OSError as exc:
            _fail(f"--out: {exc}")
    if "resume" in type(cfg).model_fields:
        cfg = cfg.model_copy(update={"resume": False})  # resuming is --resume's job, never the config's
    if writer:
        _preload_plotting()
        run_cfg, folder, managed = _with_checkpoint(cfg, the_case.name, out_dir, resume, resume_from)
    else:  # checkpoints, like the run folder, are process 0's
        run_cfg, folder, managed = cfg, None, False
    if joined is not None:
        _join(*joined)
    again = shlex.join(
        ["twinfer", "run", case, *(["--config", str(config)] if config else [])]
        + [arg for item in set_ or [] for arg in ("--set", item)]
        + ([] if seed is None else ["--seed", str(seed)])
        + (["--quick"] if quick else [])
        + ["--out", str(out_dir)]
        + (["--resume-from", str(resume_from)] if resume_from else ["--resume"])
    )
    start = time.perf_counter()
    try:
        with _INTERRUPTS, _progress() as progress:
            artifacts = the_case.run(run_cfg, _Bar(progress))
            _INTERRUPTS.check()
        artifacts = dataclasses.replace(artifacts, quick=quick)  # meta.json and report.md say so
        paper = the_case.paper_values(cfg)
        if not writer:
            out.print(
                f"process {process_id} of {num_processes}: {the_case.name} done "
                f"({time.perf_counter() - start:.1f} s); process 0 writes the run folder.",
                soft_wrap=True,
            )
            return

        def posterior(folder: Path) -> object:  # posterior.nc + summary when the case sampled a posterior
            return write_posterior(folder, artifacts.arrays)

        run_dir = write_run(
            new_run_dir(out_dir, the_case.name),
            the_case.name,
            the_case.description,
            cfg.model_dump(),
            artifacts,
            lambda: the_case.figures(artifacts.arrays, cfg),
            paper,
            extras=(posterior,),
            on_warning=_warn,
        )
    except KeyboardInterrupt:
        _stopped("", folder, again)
        raise typer.Exit(130) from None
    except Exception as exc:
        if debug:
            raise
        if isinstance(exc, CheckpointError):  # names the file and how to start fresh
            console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        else:
            _stopped(f"{the_case.name} failed: {type(exc).__name__}: {exc}", folder, again, error=True)
        raise typer.Exit(1) from None
    if managed and folder is not None:
        _remove_checkpoints(folder)  # the run folder is complete: nothing left to resume
    _print_metrics(the_case.name, dict(artifacts.metrics), paper)
    _print_run_folder(run_dir, start)


def _print_run_folder(run_dir: Path, start: float) -> None:
    out.print(
        f"run folder: [bold]{escape(str(run_dir))}[/] ({time.perf_counter() - start:.1f} s)",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def estimate(
    spec: Annotated[Path, typer.Argument(help="A spec file (TOML): model, data, unknowns, estimator.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Parent folder of run folders.")] = Path("runs"),
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error.")] = False,
) -> None:
    """Estimate a user's own system from a spec file and write a run folder.

    The spec names a library model (a chain or a grid) or an FMU with its known parameters, a CSV data
    file with its column mapping or a simulation, the unknown parameters with priors, and the estimator
    (central, or distributed with a partition); see :mod:`twinfer.spec`. The run folder holds
    ``estimate.nc`` (the :class:`twinfer.infer.Estimate`), metrics (the truth's where known), figures
    and ``report.md``.
    Exit status: 0, 1 for an error during the run, 2 for a bad spec.
    """
    _use_compilation_cache()
    from twinfer.report import check_output_folder, new_run_dir, write_run
    from twinfer.spec import SpecError, load_spec, run_spec

    try:
        parsed, base = load_spec(spec)
    except SpecError as exc:
        _fail(str(exc))
        return
    try:
        check_output_folder(out_dir)
    except OSError as exc:
        _fail(f"--out: {exc}")
    start = time.perf_counter()
    try:
        with _INTERRUPTS:
            est, _, artifacts, figures = run_spec(parsed, base)
            _INTERRUPTS.check()  # a Ctrl-C swallowed inside a callback stops the estimate here

        def netcdf(folder: Path) -> object:
            return est.to_netcdf(folder / "estimate.nc")

        run_dir = write_run(
            new_run_dir(out_dir, parsed.name),
            parsed.name,
            f"twinfer estimate {spec.name}: {parsed.estimator.description} on "
            + ("an FMU" if parsed.model.kind == "fmu" else f"a {parsed.model.kind}"),
            parsed.model_dump(mode="json"),
            artifacts,
            figures,
            {},
            extras=(netcdf,),
            on_warning=_warn,
        )
    except KeyboardInterrupt:
        console.print(
            "[bold yellow]interrupted.[/] The estimate stopped; nothing was written (the run folder is "
            "written whole or not at all). Run the same command to start again.",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    except SpecError as exc:
        _fail(str(exc))
        return
    except Exception as exc:
        if debug:
            raise
        _failed(f"estimate {spec}", exc)
    _print_metrics(parsed.name, dict(artifacts.metrics), {})
    _print_run_folder(run_dir, start)


def _distributed_options(
    coordinator: str | None, num_processes: int | None, process_id: int | None, resuming: bool
) -> tuple[str, int, int] | None:
    """The checked ``--coordinator --num-processes --process-id`` (all three or none); None for none."""
    from twinfer.sharding import check_distributed

    given = {"--coordinator": coordinator, "--num-processes": num_processes, "--process-id": process_id}
    if all(v is None for v in given.values()):
        return None
    missing = [name for name, v in given.items() if v is None]
    if coordinator is None or num_processes is None or process_id is None:
        _fail(
            f"{', '.join(missing)}: several processes need all of --coordinator HOST:PORT, --num-processes N "
            "and --process-id I; give all three or none."
        )
    try:
        check_distributed(
            coordinator, num_processes, process_id, ("--coordinator", "--num-processes", "--process-id")
        )
    except ValueError as exc:
        _fail(str(exc))
    if resuming:
        _fail("--resume: not available with several processes (--coordinator); run without it.")
    return coordinator, num_processes, process_id


def _join(coordinator: str, num_processes: int, process_id: int) -> None:
    """Join the other processes (exit 1 naming the coordinator when they do not all join)."""
    from twinfer.sharding import init_distributed

    console.print(
        f"[dim]process {process_id} of {num_processes}: joining the coordinator at {escape(coordinator)}[/]",
        highlight=False,
        soft_wrap=True,
    )
    try:
        init_distributed(coordinator, num_processes, process_id)
    except RuntimeError as exc:
        _fail(str(exc), code=1)


def _warn(line: str) -> None:
    console.print(f"[bold yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)


def _stopped(what: str, folder: Path | None, again: str, error: bool = False) -> None:
    """Say why the run stopped, what it saved and the exact command that continues it."""
    from twinfer.checkpoint import CheckpointError, inspect

    saved = []
    for file in sorted(folder.glob("*.ckpt")) if folder is not None else []:
        try:
            saved.append(f"{file.name} ({_progress_of(inspect(file))})")
        except CheckpointError:
            continue
    head = "[bold red]error:[/]" if error else "[bold yellow]interrupted.[/]"
    line = escape(what.splitlines()[0]) if error else ""
    if saved:
        tail = f" Saved in {folder}: {', '.join(saved)}. Continue with: {again}"
    elif folder is not None:
        tail = " Nothing was saved yet (no checkpoint had been written). Run the same command to start again."
        _remove_checkpoints(folder, only_empty=True)
    else:
        tail = " This case keeps no checkpoints. Run the same command to start again."
    hint = " (--debug shows the traceback)" if error else ""
    console.print(f"{head} {line}{escape(tail)}{hint}".replace("  ", " "), highlight=False, soft_wrap=True)


def _progress_of(header: dict[str, Any]) -> str:
    """A few words on how far a checkpointed computation got."""
    meta, kind = header.get("meta", {}), header.get("kind", "?")
    if kind == "ibis":
        return f"IBIS, {meta.get('t')} observations assimilated"
    if kind == "tempering":
        lams = meta.get("lambdas") or [0.0]
        return f"tempering, stage {len(meta.get('lambdas', []))}, lambda {lams[-1]:.3g}"
    if kind == "pinn-train":
        return f"PINN training, epoch {meta.get('epoch')}"
    if kind == "learn-train":
        return f"training, step {meta.get('step')}"
    return kind


def _remove_checkpoints(folder: Path, only_empty: bool = False) -> None:
    """Remove a managed checkpoint folder: its checkpoint files, their partial writes and run.json.

    A partial write (``.NAME.ckpt.*.tmp``) is what a run killed while saving a checkpoint leaves; once the
    run folder is complete nothing reads it. Nothing else in the folder is removed.
    """
    files = [] if only_empty else [*folder.glob("*.ckpt"), *folder.glob(".*.ckpt.*.tmp")]
    if only_empty and any(folder.glob("*.ckpt")):
        return
    for file in [*files, folder / "run.json"]:
        file.unlink(missing_ok=True)
    for empty in (folder, folder.parent):
        try:
            empty.rmdir()
        except OSError:
            break


def _with_checkpoint(
    cfg: Any, case: str, out_dir: Path, resume: bool, resume_from: Path | None
) -> tuple[Any, Path | None, bool]:
    """Give a case with a ``checkpoint_dir`` setting its checkpoint folder and ``resume``.

    A fresh run gets a new folder ``OUT/.checkpoints/<case>-<time>/`` holding ``run.json`` (case and the
    digest of its config): it never reads, overwrites or removes another run's checkpoints, and says
    when an interrupted run of the same case and config is waiting for ``--resume``. ``--resume`` picks
    the newest such folder; ``--resume-from DIR`` names one. ``--set checkpoint_dir=DIR`` is used as
    given, resumed only with ``--resume`` and never removed. Returns the config to run, the checkpoint
    folder (None: the case keeps no checkpoints) and whether the folder is managed (removed here once
    the run folder is complete).
    """
    from twinfer._atomic import owner_record
    from twinfer.experiments._checkpointing import config_digest
    from twinfer.report import check_output_folder, new_run_dir

    asked = resume or resume_from is not None
    if "checkpoint_dir" not in type(cfg).model_fields:
        if asked:
            _fail(f"--resume: case {case!r} keeps no checkpoints; run it without --resume.")
        return cfg, None, False
    if cfg.checkpoint_dir:
        if resume_from is not None:
            _fail("--resume-from and --set checkpoint_dir both name a checkpoint folder; give only one.")
        try:
            check_output_folder(Path(cfg.checkpoint_dir), "checkpoint_dir")
        except OSError as exc:
            _fail(f"checkpoint_dir: {exc}")
        if resume and not any(Path(cfg.checkpoint_dir).glob("*.ckpt")):
            _fail(f"--resume: no checkpoint files (*.ckpt) in {cfg.checkpoint_dir}; run without --resume.")
        return cfg.model_copy(update={"resume": resume}), Path(cfg.checkpoint_dir), False
    root = out_dir / ".checkpoints"
    wanted = {"case": case, "config": config_digest(cfg)}
    waiting = [d for d in sorted(root.glob(f"{case}-*"), reverse=True) if _belongs(d, wanted)]
    if resume_from is not None:
        if not any(resume_from.glob("*.ckpt")):
            _fail(
                f"--resume-from {resume_from}: no checkpoint files (*.ckpt) there; run without it to start "
                "fresh."
            )
        folder = resume_from
    elif resume:
        if not waiting:
            _fail(
                f"--resume: no checkpoint of an interrupted {case!r} run with this config under {root}; "
                "run without --resume to start fresh."
            )
        folder = waiting[0]
    else:
        _remove_abandoned_checkpoint_folders(root)
        folder = new_run_dir(root, case)  # OUT/.checkpoints/<case>-<time>[-n], like a run folder
        info = {**wanted, "owner": owner_record()}  # a folder whose owner died before a checkpoint goes
        (folder / "run.json").write_text(json.dumps(info, indent=2) + "\n")
        if waiting:
            console.print(
                f"[dim]note: an interrupted {case} run with this config is kept in "
                f"{escape(str(waiting[0]))}; this fresh run leaves it alone (pass --resume to continue it "
                "instead).[/]",
                highlight=False,
                soft_wrap=True,
            )
    return cfg.model_copy(update={"checkpoint_dir": str(folder), "resume": asked}), folder, True


def _belongs(folder: Path, wanted: dict[str, str]) -> bool:
    """Whether a checkpoint folder holds checkpoints of this case and config."""
    try:
        info = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return False
    same = isinstance(info, dict) and all(info.get(k) == v for k, v in wanted.items())
    return same and any(folder.glob("*.ckpt"))


def _remove_abandoned_checkpoint_folders(root: Path) -> None:
    """Remove the checkpoint folders under ``root`` that a run killed before its first checkpoint left.

    Only a folder holding no checkpoint (``*.ckpt``) whose ``run.json`` names an owner that has provably
    ended (:func:`twinfer._atomic.owner_gone`): its ``run.json`` and the hidden partial writes of the dead
    process go, then the empty folder. A checkpoint is never removed.
    """
    from twinfer._atomic import owner_gone

    for folder in root.glob("*-*"):
        if not folder.is_dir() or folder.is_symlink() or any(folder.glob("*.ckpt")):
            continue
        try:
            info = json.loads((folder / "run.json").read_text())
        except (OSError, ValueError):
            continue
        if not (isinstance(info, dict) and owner_gone(info.get("owner"))):
            continue
        for file in [folder / "run.json", *folder.glob(".*.tmp")]:
            file.unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError:  # something else is in it: left as it is
            pass


def _print_metrics(case: str, metrics: dict[str, float], paper: dict | object) -> None:
    from rich.markup import escape  # metric names such as sindy.xi[dx] are not markup

    refs = paper if isinstance(paper, dict) else {}
    with_paper = any(name in refs for name in metrics)  # a user's own estimate has no paper column
    table = Table(title=f"{case}: metrics")
    table.add_column("metric")
    table.add_column("twinfer", justify="right")
    if with_paper:
        table.add_column("paper", justify="right")
    for name in sorted(metrics):
        ref = refs.get(name)
        row = [escape(name), f"{metrics[name]:.4g}"]
        table.add_row(*row, *([f"{ref.value:.4g}" if ref else ""] if with_paper else []))
    out.print(table)


def _live_source(
    text: str, columns: list[str], time_key: str, name: str, fmt: str | None, start: Any = None
) -> Any:
    """A source from ``--source``: ``-`` (standard input), an MQTT address, or a file path."""
    from twinfer.live._sources import FileSource, MqttSource, StreamSource

    if fmt not in (None, "csv", "jsonl"):
        _fail(f"--format: expected csv or jsonl; received {fmt!r}.")
    if text == "-":
        return StreamSource(sys.stdin.buffer, columns, time_key=time_key, format=fmt or "csv")  # type: ignore[arg-type]
    if text.startswith("mqtt://"):
        where = _mqtt_address(text, "--source")
        return MqttSource(
            where["host"], where["port"], where["topic"], columns, client_id=f"twinfer-live-{name}",
            time_key=time_key, start=start, username=where["user"], password=where["password"],
            protocol=where["protocol"],
        )  # fmt: skip
    fmt = fmt or ("jsonl" if Path(text).suffix.lower() in (".jsonl", ".ndjson") else "csv")
    return FileSource(text, columns, time_key=time_key, format=fmt, start=start)  # type: ignore[arg-type]


def _mqtt_address(text: str, option: str) -> dict[str, Any]:
    """``mqtt://[USER[:PASSWORD]@]HOST:PORT/TOPIC[?protocol=3.1.1]`` as its parts."""
    match = re.fullmatch(
        r"mqtt://(?:([^:@/]+)(?::([^@/]*))?@)?([^:/@]+):(\d+)/([^?]+)(?:\?protocol=(5|3\.1\.1))?", text
    )
    if match is None:
        _fail(
            f"{option}: expected mqtt://[USER[:PASSWORD]@]HOST:PORT/TOPIC[?protocol=3.1.1]; "
            f"received {text!r}."
        )
    user, password, host, port, topic, protocol = match.groups()
    return {"user": user, "password": password, "host": host, "port": int(port), "topic": topic,
            "protocol": protocol or "5"}  # fmt: skip


@app.command()
def live(
    spec: Annotated[
        Path | None, typer.Argument(help="A spec file (TOML): model, estimator, unknowns, [live].")
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="A CSV/JSON-lines file being written, - (standard input), or mqtt://[USER@]HOST:PORT/TOPIC.",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Folder of the rows, events and snapshot.")
    ] = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Stream a simulated 8-mass chain with a stiffness loss into a file and run the twin on it "
            "(no SPEC or --source; --out default twinfer-live-demo).",
        ),
    ] = False,
    speed: Annotated[
        float,
        typer.Option("--speed", help="--demo: how many times faster than real time the file is written."),
    ] = 10.0,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the snapshot in --out.")] = False,
    fmt: Annotated[
        str | None, typer.Option("--format", help="csv or jsonl (default: csv, jsonl for a .jsonl file).")
    ] = None,
    to_stdout: Annotated[bool, typer.Option("--stdout", help="Also print each row as a JSON line.")] = False,
    publish: Annotated[
        str | None, typer.Option("--publish", help="Also publish each row to mqtt://HOST:PORT/TOPIC.")
    ] = None,
    idle_exit: Annotated[
        float | None,
        typer.Option(
            "--idle-exit",
            help="Stop after this many seconds without a frame (an MQTT source: connected seconds only).",
        ),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error.")] = False,
) -> None:
    """Run a live twin of a spec on a stream: estimates as frames arrive, alarms, snapshots (docs/live.md).

    Rows go to Parquet parts under --out (and standard output with --stdout); alarms to events parts and
    the terminal. Every [live] snapshot_every seconds, and on Ctrl-C, the twin snapshots itself under
    --out; --resume continues from there with nothing lost or counted twice. Exit status: 0 when the
    stream ends or is stopped, 1 for an error while running, 2 for a bad spec or option.
    """
    import signal

    _use_compilation_cache()
    from twinfer.live import DriftAlarm, Twin, innovation_alarms
    from twinfer.live._run import run_live
    from twinfer.live._sinks import JsonLinesSink, MqttSink
    from twinfer.spec import SpecError, live_setup, load_spec

    staged = None
    if demo:
        if spec is not None or source is not None or resume:
            _fail("live --demo: expected no SPEC, --source or --resume (the demo writes its own).")
            return
        if not (math.isfinite(speed) and speed > 0):
            _fail(f"live --speed: expected a number > 0; received {speed!r}.")
            return
        staged, out_dir, spec, source, idle_exit = _stage_demo(out_dir, speed, idle_exit)
    elif spec is None or source is None or out_dir is None:
        missing = [n for n, v in (("SPEC", spec), ("--source", source), ("--out", out_dir)) if v is None]
        _fail(f"live: expected SPEC, --source and --out (or --demo); missing {', '.join(missing)}.")
        return
    try:
        parsed, base = load_spec(spec)
        setup = live_setup(parsed, base)
    except SpecError as exc:
        _fail(str(exc))
        return
    cfg = parsed.live
    alarms = (
        DriftAlarm(
            learning=cfg.learning,
            level=cfg.drift_level,
            persistence=cfg.persistence,
            relative=cfg.drift_relative,
        ),
        *innovation_alarms(
            cfg.innovation_test,
            window=cfg.innovation_window,
            p=cfg.innovation_p,
            learning=cfg.learning,
            groups=setup.groups,
        ),
    )
    columns = list(setup.columns)
    stop = {"now": False}

    def _stop(signum: int, frame: Any) -> None:
        stop["now"] = True

    def _status(st: Any) -> None:
        drops = sum(st.drops.values()) + sum(twin.counts[k] for k in ("duplicate", "late", "off-grid"))
        console.print(
            f"[dim]live[/] frames {st.frames}  steps {st.rows}  dropped {drops}  lag {1e3 * st.lag:.1f} ms  "
            f"real time x{st.realtime:.1f}  alarms {st.alarms}  snapshots {st.snapshots}",
            highlight=False,
        )

    def _events(events: list[dict[str, Any]]) -> None:
        for e in events:
            where = "" if e["t"] is None else f" at t = {e['t']:.6g} s"
            console.print(
                f"[bold yellow]alarm[/] {escape(str(e['alarm']))} {escape(str(e['name']))} "
                f"{escape(str(e['state']))}{where}",
                highlight=False,
            )

    try:
        twin = Twin(
            setup.program,
            dt=setup.dt,
            tolerance=cfg.tolerance,
            window=cfg.window,
            alarms=alarms,
            measured=setup.measured,
        )
        src = _live_source(source, columns, setup.time, parsed.name, fmt)
        sinks: list[Any] = [JsonLinesSink(sys.stdout)] if to_stdout else []
        if publish is not None:
            where = _mqtt_address(publish, "--publish")
            sinks.append(
                MqttSink(
                    where["host"], where["port"], where["topic"], client_id=f"twinfer-live-{parsed.name}-out",
                    username=where["user"], password=where["password"], protocol=where["protocol"],
                )
            )  # fmt: skip

        def again(position: Any) -> Any:
            return _live_source(source, columns, setup.time, parsed.name, fmt, position)

        previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            status = run_live(
                twin, src, out_dir, columns=setup.columns, sinks=sinks, snapshot_every=cfg.snapshot_every,
                resume=resume, idle_exit=idle_exit, should_stop=lambda: stop["now"], on_status=_status,
                on_events=_events,
                make_source=again,
            )  # fmt: skip
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    except Exception as exc:
        if debug:
            raise
        _failed(f"live {spec}", exc)
    counts = twin.counts
    console.print(
        f"live: {status.frames} frames, {counts['applied']} steps ({counts['predicted']} prediction-only), "
        f"dropped: {dict(status.drops) or 'none'} from the source, {counts['duplicate']} duplicate, "
        f"{counts['late']} late, {counts['off-grid']} off-grid; {status.alarms} alarms; "
        f"snapshot {escape(str(out_dir / 'twin.snapshot'))}",
        highlight=False,
        soft_wrap=True,
    )
    if staged is not None:
        from twinfer.cli import _live_demo

        path, alarm = _live_demo.figure(staged, out_dir)
        console.print(f"{_live_demo.summary(staged, alarm)} Figure: {escape(str(path))}", highlight=False)


def _stage_demo(
    out: Path | None, speed: float, idle_exit: float | None
) -> tuple[Any, Path, Path, str, float]:
    """``live --demo``: the spec and the stream being written in ``out`` (new or empty), the twin's folder."""
    from twinfer.cli import _live_demo

    folder = Path("twinfer-live-demo") if out is None else out
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        _fail(f"live --demo --out {folder}: expected a new or empty folder; it holds files already.")
    folder.mkdir(parents=True, exist_ok=True)
    console.print(f"demo: simulating the record into {escape(str(folder))} ...", highlight=False)
    staged = _live_demo.prepare(folder)
    _live_demo.start_writer(staged, speed)
    console.print(
        f"demo: writing {escape(str(staged.stream))} at {speed:g}x real time; a spring loses stiffness at "
        f"t = {staged.onset:.1f} s.",
        highlight=False,
    )
    return staged, folder / "twin", staged.spec, str(staged.stream), 3.0 if idle_exit is None else idle_exit


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run folder written by `twinfer run`.")]):
    """Re-render report.md and the figures of an existing run folder from its saved arrays.

    A run folder that breaks its contract (a file missing or unparsable, a config that no longer
    validates, a metric that is not a finite number) is refused with one line naming the file and the
    fault, exit status 2; nothing is rewritten.
    """
    from rich.markup import escape

    from twinfer.experiments import ConfigError, get_case
    from twinfer.experiments._case import validate_config
    from twinfer.report import RunArtifacts, write_figure, write_text
    from twinfer.report._files import to_toml
    from twinfer.report._report import render_report
    from twinfer.report._run import RunFolderError, read_arrays, read_run

    try:
        case_name, config, metrics, meta = read_run(run_dir)
        try:
            the_case = get_case(case_name)
        except KeyError as exc:
            raise RunFolderError(f"{run_dir / 'meta.json'}: {exc.args[0]}") from None
        try:
            cfg = validate_config(the_case, config)
        except ConfigError as exc:
            raise RunFolderError(f"{run_dir / 'config.toml'}: {exc}".replace("\n  ", " ")) from None
        arrays = read_arrays(run_dir)
        try:
            figures = the_case.figures(arrays, cfg)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise RunFolderError(
                f"{run_dir / 'arrays.npz'}: the saved arrays do not fit the figures of case "
                f"{case_name!r} ({type(exc).__name__}: {exc})."
            ) from None
    except RunFolderError as exc:
        _fail(str(exc))
        return
    names = []
    artifacts = RunArtifacts(metrics=metrics, arrays=arrays, notes=meta.get("notes", []))
    try:
        for name, fig in figures.items():
            write_figure(run_dir / "figures" / f"{name}.png", fig)
            names.append(f"{name}.png")
        text = render_report(
            case_name,
            the_case.description,
            metrics,
            the_case.paper_values(cfg),
            to_toml(config),
            artifacts.notes,
            names,
            quick=bool(meta.get("quick", False)),
        )
        write_text(run_dir / "report.md", text)
    except OSError as exc:
        _fail(f"{run_dir}: could not write the re-rendered report ({exc}).", code=1)
        return
    out.print(
        f"re-rendered {escape(str(run_dir / 'report.md'))} and {len(names)} figure(s)",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def reproduce(
    cases: Annotated[
        list[str] | None, typer.Argument(help="Cases to run (default: every case, `twinfer list`).")
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Folder of the table and of the runs (OUT/runs).")
    ] = Path("reproduction"),
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes for a smoke run.")] = False,
) -> None:
    """Run cases at full size (or --quick) and check every paper value under its written tolerance.

    Each case runs as its own ``twinfer run CASE --out OUT/runs`` process (its progress shown). After
    each case ``OUT/REPRODUCTION.md`` and ``OUT/reproduction.json`` are rewritten: per paper value the
    case, metric, paper and our value, ratio, tolerance with its reason, and pass / FAIL / reported (no
    tolerance) / missing; per case the run time and run folder. Running the same command again resumes:
    a case already finished with the same size, config, twinfer version and source code (a digest of
    every file of the package) is not run again, and an
    interrupted case continues from its checkpoints (``--resume``). Exit status 1 when a case failed
    to run or (at full size) a check failed; ``--quick`` compares smoke-size runs with full-size tables,
    so its verdicts are written but do not fail the command.
    """
    import subprocess

    import twinfer
    from twinfer.experiments import all_cases, get_case, resolve_config
    from twinfer.experiments._checkpointing import config_digest
    from twinfer.programs import _source_digest, twinfer_command
    from twinfer.report import check_output_folder

    try:
        check_output_folder(out_dir)
        chosen = [get_case(c) for c in cases] if cases else list(all_cases().values())
    except OSError as exc:
        _fail(f"--out: {exc}")
        return
    except KeyError as exc:
        _fail(str(exc.args[0]))
        return
    source = _source_digest()[:16]  # a run of other code never stands in for this code's result
    state_path = out_dir / "reproduction.json"
    try:
        runs: dict[str, dict[str, Any]] = json.loads(state_path.read_text())["runs"]
    except (OSError, ValueError, KeyError):
        runs = {}
    runs_dir = out_dir / "runs"
    failed = False
    checks = None
    for i, the_case in enumerate(chosen):
        cfg = resolve_config(the_case, None, {}, None, quick)
        if "resume" in type(cfg).model_fields:
            cfg = cfg.model_copy(update={"resume": False})
        wanted = {
            "quick": quick,
            "version": twinfer.__version__,
            "config": config_digest(cfg),
            "source": source,
        }
        done = runs.get(the_case.name, {})
        if done.get("status") == "done" and all(done.get(k) == v for k, v in wanted.items()):
            if (Path(done["run_dir"]) / "metrics.json").is_file():
                out.print(
                    f"[{i + 1}/{len(chosen)}] {the_case.name}: finished earlier ({escape(done['run_dir'])})",
                    highlight=False,
                    soft_wrap=True,
                )
                continue
        ckpt = {"case": the_case.name, "config": wanted["config"]}
        waiting = "checkpoint_dir" in type(cfg).model_fields and any(
            _belongs(d, ckpt) for d in (runs_dir / ".checkpoints").glob(f"{the_case.name}-*")
        )
        cmd = twinfer_command("run", the_case.name, *(["--quick"] if quick else []), "--out", str(runs_dir))
        cmd += ["--resume"] if waiting else []
        out.print(
            f"[{i + 1}/{len(chosen)}] {the_case.name}: {'resuming' if waiting else 'running'} "
            f"({'quick' if quick else 'full size'})",
            highlight=False,
        )
        before = set(runs_dir.glob(f"{the_case.name}-*")) if runs_dir.is_dir() else set()
        start = time.perf_counter()
        code = subprocess.run(cmd).returncode
        seconds = time.perf_counter() - start
        new = sorted(p for p in runs_dir.glob(f"{the_case.name}-*") if p not in before and p.is_dir())
        if code == 130:
            raise typer.Exit(130)
        if code or not new:
            failed = True
            runs[the_case.name] = wanted | {"status": f"failed (exit {code})", "seconds": seconds}
        else:
            runs[the_case.name] = wanted | {"status": "done", "seconds": seconds, "run_dir": str(new[-1])}
        checks = _write_reproduction(out_dir, runs, quick)
    if checks is None:  # every case had finished earlier: the table of those runs
        checks = _write_reproduction(out_dir, runs, quick)
    bad = [c for c in checks if c.status == "FAIL"]
    out.print(
        f"{sum(c.status == 'pass' for c in checks)} pass, {len(bad)} fail, "
        f"{sum(c.status == 'reported' for c in checks)} reported, "
        f"{sum(c.status == 'missing' for c in checks)} missing: {escape(str(out_dir / 'REPRODUCTION.md'))}",
        highlight=False,
        soft_wrap=True,
    )
    if quick:
        out.print(
            "quick sizes: the verdicts compare smoke-size runs with full-size tables (not a reproduction)"
        )
    if failed or (bad and not quick):
        raise typer.Exit(1)


def _write_reproduction(out_dir: Path, runs: dict[str, dict[str, Any]], quick: bool) -> list[Any]:
    """Check every finished run against its case's paper values and rewrite the table."""
    import os
    import platform

    import twinfer
    from twinfer.experiments import get_case
    from twinfer.experiments._case import validate_config
    from twinfer.programs import _source_digest
    from twinfer.report import read_run
    from twinfer.report._reproduce import check_run, write_reproduction

    checks = []
    for name, info in runs.items():
        if info.get("status") != "done":
            continue
        _, config, metrics, _ = read_run(Path(info["run_dir"]))
        the_case = get_case(name)
        checks += check_run(name, metrics, the_case.paper_values(validate_config(the_case, config)))
    header = {
        "written": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "twinfer": twinfer.__version__,
        "source": _source_digest()[:16],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "command": "twinfer reproduce" + (" --quick" if quick else ""),
        "sizes": "quick (smoke): verdicts are not a reproduction" if quick else "full (the papers' settings)",
    }
    write_reproduction(out_dir, checks, runs, header)
    return checks


@app.command()
def bench(
    name: Annotated[str, typer.Argument(help="Benchmark name (`twinfer bench --list`).")] = "",
    output: Annotated[Path, typer.Option("--output", help="Where to write bench.json.")] = Path("bench.json"),
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes for a smoke run.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the benchmarks.")] = False,
    cores: Annotated[
        int,
        typer.Option(
            "--cores",
            min=0,
            help="Pin the process to this many cores before JAX starts (0: every usable core, as a "
            "user runs). Report both: twinfer bench NAME and twinfer bench NAME --cores 1.",
        ),
    ] = 0,
) -> None:
    """Run a benchmark: compile and run timed apart, medians of repeats, written to bench.json."""
    import os

    if cores:
        usable = sorted(os.sched_getaffinity(0))
        if cores > len(usable):
            _fail(f"--cores: expected at most the {len(usable)} usable core(s); received {cores}.")
        os.sched_setaffinity(0, usable[:cores])  # before JAX sizes its thread pools from the affinity
    from twinfer.bench import REGISTRY, load_benchmarks, write_bench_json

    load_benchmarks()

    if list_ or not name:
        for key in sorted(REGISTRY):
            out.print(f"{key}: {REGISTRY[key][0]}")
        return
    if name not in REGISTRY:
        _fail(f"Unknown benchmark {name!r}; expected one of: {', '.join(sorted(REGISTRY))}.")
    _, fn = REGISTRY[name]
    with _INTERRUPTS:  # a Ctrl-C swallowed inside a callback still stops the benchmark
        figures = fn(quick, lambda msg: console.print(f"[dim]{escape(msg)}[/]", highlight=False))
        _INTERRUPTS.check()
    write_bench_json(output, name, figures)
    out.print(json.dumps(figures, indent=2, sort_keys=True))
    out.print(f"wrote {escape(str(output))}", highlight=False, soft_wrap=True)


_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")


def _role_name(match: re.Match[str]) -> str:
    """A Sphinx cross-reference as its target's name (the last part only after a tilde)."""
    return match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)


def plain_help(doc: str | None) -> str | None:
    """A docstring as terminal help: roles and double backticks as plain names, paragraphs unwrapped.

    ``:class:`~a.b.C``` becomes ``C`` (``a.b.C`` without the tilde), ````x```` becomes ``x``; the hard
    line breaks inside a paragraph are joined, so the terminal wraps it to its own width.
    """
    if not doc:
        return doc
    text = _ROLE.sub(_role_name, inspect.cleandoc(doc))
    text = text.replace("``", "")
    paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(paragraphs)


for _command in app.registered_commands:  # help from the docstrings, as plain text
    if _command.help is None and _command.callback is not None:
        _command.help = plain_help(_command.callback.__doc__)


def main() -> None:
    """Console-script entry point."""
    from twinfer import configure

    configure()  # float64 and the CPU lowerings that cannot deadlock (twinfer.configure)
    try:
        app()
    except KeyboardInterrupt:  # outside a command (e.g. while importing)
        console.print("[bold yellow]interrupted[/] before a run started; nothing was saved.")
        _exit_now(130)
    except SystemExit as exc:
        if exc.code == 130:
            _exit_now(130)
        raise


def _exit_now(code: int) -> None:
    """Exit at once after an interrupt, output flushed.

    XLA's threads may still run the interrupted computation; tearing the interpreter down under them
    can crash (exit 139) instead of exiting with ``code``.
    """
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
