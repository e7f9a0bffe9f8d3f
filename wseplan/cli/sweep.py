"""`wseplan sweep SWEEP.yaml`: fit, time and cost of every configuration of a design space, as numpy arrays.

The rows go to a CSV (or Parquet) file in ``--out``; the terminal gets a summary per model x target. The file
and the record are documented in docs/cli-output.md. numpy/pandas (and dask, for ``--engine dask``) load
only inside the command.
"""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import check_format, emit, json_out, print_table, rich_table, to_markdown

FMT_HELP = "Summary output: table | json | csv | md (the rows themselves go to the output file)."


def sweep_cmd(
    sweep_file: str = typer.Argument(..., help="Sweep YAML: name, phase, models, targets, precisions, batches, contexts, "
                                               "output_tokens, layouts, set, output."),
    out: str = typer.Option("reports/sweeps", "--out", "-o", help="Folder for the output file (created if missing)."),
    engine: str = typer.Option("local", "--engine", help="local (this process) | dask (a Dask distributed cluster)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Dask scheduler address (tcp://HOST:8786); "
                                            "default: a local in-process cluster."),
    chunk: int = typer.Option(1 << 17, "--chunk", help="Configurations per task (the unit of work of an engine)."),
    fmt: str = O.format_opt(FMT_HELP),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Evaluate the cartesian product models x targets x precisions x batches x contexts x layouts: per-device
    memory and fit, step/TTFT/TPOT/tokens/s and bottleneck, $/hour, $/M tokens or $/run, J/token.

    Example: wseplan sweep studies/sweep-example.yaml ; wseplan sweep big.yaml --engine dask --scheduler tcp://10.0.0.5:8786
    """
    import sys

    from .. import sweep as S
    from ..errors import InputError

    check_format(fmt)
    if engine not in ("local", "dask"):
        raise InputError(f"--engine: unknown {engine!r}; use local or dask")
    if scheduler and engine != "dask":
        raise InputError("--scheduler: applies to --engine dask only")
    if chunk < 1:
        raise InputError(f"--chunk: must be a positive integer, got {chunk}")
    spec = S.load_sweep(sweep_file)
    name = spec.output_name()
    cat = O.load_catalog(catalog)
    plan = S.plan_sweep(spec, cat)
    show = sys.stderr.isatty() and plan.size >= S.PROGRESS_MIN_CONFIGURATIONS
    progress = None
    bar = None
    if show:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        bar = Progress("sweep", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                       console=Console(stderr=True), transient=True)
        bar.start()
        task = bar.add_task("sweep", total=plan.size)

        def progress(n):
            bar.advance(task, n)
    try:
        if engine == "dask":
            parts = S.evaluate_dask(plan, scheduler=scheduler, chunk=chunk, progress=progress)
        else:
            parts = S.evaluate_columns(plan, chunk=chunk, progress=progress)
    finally:
        if bar is not None:
            bar.stop()
    df = S.to_frame(plan, parts)
    path = S.write_output(df, out, name)
    for note in plan.skipped:
        sys.stderr.write(f"note: {note}\n")
    rows = S.summary_rows(df)
    record = {"schema_version": S.SCHEMA_VERSION, "sweep": spec.name, "phase": spec.phase,
              "configurations": int(len(df)), "fitting": int(df["fits"].sum()), "engine": engine,
              "output": str(path), "skipped": list(plan.skipped), "groups": rows}
    from ..report import formats as F

    if fmt == "json":
        json_out(record, prices=[])
    elif fmt == "csv":
        emit(F.to_csv(rows))
    elif fmt == "md":
        emit(f"## Sweep {spec.name}: {len(df):,} configurations -> {path}\n\n" + to_markdown(rows))
    else:
        print_table(rich_table(rows, title=f"sweep {spec.name}: {len(df):,} configurations ({int(df['fits'].sum()):,} fit) -> {path}"))


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
