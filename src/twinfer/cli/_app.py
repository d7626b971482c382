"""The ``twinfer`` command: list, run, report, bench. The only place in twinfer that prints."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(
    name="twinfer",
    help="Uncertainty-aware inverse inference on engineered dynamical systems.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)
out = Console()


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


class _Bar:
    """Turns ``progress(stage, completed, total)`` callbacks into rich progress bars."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.tasks: dict[str, object] = {}

    def __call__(self, stage: str, completed: float, total: float) -> None:
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
def list_cases() -> None:
    """List the runnable case studies."""
    from twinfer.experiments import all_cases

    table = Table(title="twinfer cases", show_lines=False)
    table.add_column("case", style="bold")
    table.add_column("description")
    for name, case in all_cases().items():
        table.add_row(name, case.description)
    out.print(table)


def _use_compilation_cache() -> None:
    """Keep XLA's compiled programs on disk, so a repeated run of a case skips most compilation.

    The folder is ``$TWINFER_CACHE_DIR`` (default ``~/.cache/twinfer/xla``); ``TWINFER_CACHE_DIR=off``
    turns the cache off, and an explicit ``JAX_COMPILATION_CACHE_DIR`` wins. Benchmarks never use it, so
    the compile times they report are real compilations.
    """
    import os

    import jax

    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    folder = os.environ.get("TWINFER_CACHE_DIR", str(Path.home() / ".cache" / "twinfer" / "xla"))
    if folder.strip().lower() in ("", "off", "0", "none"):
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
        typer.Option("--set", help="Override one setting: key=value (repeatable)."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of every random draw.")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Parent folder of run folders.")] = Path("runs"),
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes for a smoke run.")] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the interrupted run of this case and config.")
    ] = False,
    resume_from: Annotated[
        Path | None,
        typer.Option("--resume-from", help="Like --resume, with checkpoints kept in this folder."),
    ] = None,
) -> None:
    """Run a case study and write its run folder (config, metrics, arrays, figures, report)."""
    _use_compilation_cache()
    from twinfer.experiments import ConfigError, get_case, parse_set, resolve_config
    from twinfer.report import new_run_dir, write_run

    try:
        the_case = get_case(case)
        cfg = resolve_config(the_case, config, parse_set(set_ or []), seed, quick)
    except (KeyError, ConfigError) as exc:
        _fail(str(exc.args[0]) if isinstance(exc, KeyError) else str(exc))
        return
    cfg, ckpt, managed = _with_checkpoint(cfg, the_case.name, resume_from or out_dir / ".checkpoints")
    if managed and ckpt is not None and not (resume or resume_from) and ckpt.exists():
        ckpt.unlink()  # a fresh run never continues an old one
    if (resume or resume_from) and (ckpt is None or not ckpt.exists()):
        _fail(
            f"--resume: no checkpoint of an interrupted {case!r} run with this config"
            + (f" at {ckpt}" if ckpt is not None else " (the case has no checkpoint setting)")
            + "."
        )
        return
    start = time.perf_counter()
    with _progress() as progress:
        artifacts = the_case.run(cfg, _Bar(progress))
    if managed and ckpt is not None and ckpt.exists():
        ckpt.unlink()  # the run finished: nothing left to resume
    figs = the_case.figures(artifacts.arrays, cfg)
    run_dir = new_run_dir(out_dir, the_case.name)
    write_run(
        run_dir,
        the_case.name,
        the_case.description,
        cfg.model_dump(),
        artifacts,
        figs,
        the_case.paper_values(cfg),
    )
    from twinfer.report import write_posterior

    write_posterior(run_dir, artifacts.arrays)  # posterior.nc + summary when the case sampled a posterior
    _print_metrics(the_case.name, dict(artifacts.metrics), the_case.paper_values(cfg))
    out.print(f"run folder: [bold]{run_dir}[/] ({time.perf_counter() - start:.1f} s)")


def _with_checkpoint(cfg: Any, case: str, folder: Path) -> tuple[Any, Path | None, bool]:
    """Give a case with an empty ``checkpoint`` setting a file named by the case and its config.

    The name hashes every other setting, so ``--resume`` finds the checkpoint of the same case and
    config only; such a managed file is removed when a fresh run starts and when a run finishes. A
    checkpoint set explicitly (``--set checkpoint=FILE``) is used as given and never removed.
    Returns the config, the checkpoint file (None: the case has no checkpoint setting) and whether
    the file is managed here.
    """
    import hashlib

    if "checkpoint" not in type(cfg).model_fields:
        return cfg, None, False
    if cfg.checkpoint:
        return cfg, Path(cfg.checkpoint), False
    settings = cfg.model_dump(exclude={"checkpoint"})
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = Path(folder) / f"{case}-{digest}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    return cfg.model_copy(update={"checkpoint": str(path)}), path, True


def _print_metrics(case: str, metrics: dict[str, float], paper: dict | object) -> None:
    from rich.markup import escape  # metric names such as sindy.xi[dx] are not markup

    table = Table(title=f"{case}: metrics")
    table.add_column("metric")
    table.add_column("twinfer", justify="right")
    table.add_column("paper", justify="right")
    for name in sorted(metrics):
        ref = paper.get(name) if isinstance(paper, dict) else None  # type: ignore[union-attr]
        table.add_row(escape(name), f"{metrics[name]:.4g}", f"{ref.value:.4g}" if ref else "")
    out.print(table)


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
        _fail(escape(str(exc)))
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
        )
        write_text(run_dir / "report.md", text)
    except OSError as exc:
        _fail(escape(f"{run_dir}: could not write the re-rendered report ({exc})."), code=1)
        return
    out.print(f"re-rendered {escape(str(run_dir / 'report.md'))} and {len(names)} figure(s)")


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
    figures = fn(quick, lambda msg: console.print(f"[dim]{msg}[/]"))
    write_bench_json(output, name, figures)
    out.print(json.dumps(figures, indent=2, sort_keys=True))
    out.print(f"wrote {output}")


def main() -> None:
    """Console-script entry point."""
    import jax

    jax.config.update("jax_enable_x64", True)
    try:
        app()
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)
