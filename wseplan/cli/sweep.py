"""`wseplan sweep SWEEP.yaml`: fit, time and cost of every configuration of a design space, as numpy arrays.

The rows stream, task by task, into a Parquet (recommended) or CSV file in ``--out``; the terminal gets a summary
per model x target. The file and the record are documented in docs/cli-output.md. numpy/pandas/pyarrow (and
dask, for ``--engine dask``) load only inside the command.
"""
from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from ..errors import InputError
from ..report import formats as F
from . import options as O
from .output import check_format, emit, json_out, print_table, rich_table, to_markdown

FMT_HELP = "Summary output: table | json | csv | md (the rows themselves go to the output file)."


def sweep_cmd(
    sweep_file: str = typer.Argument(..., help="Sweep YAML: name, phase, models, targets, precisions, batches, contexts, "
                                               "output_tokens, layouts, set, output (NAME.parquet or NAME.csv)."),
    out: str = typer.Option("reports/sweeps", "--out", "-o", help="Folder for the output file (created if missing)."),
    engine: str = typer.Option("local", "--engine", help="local (this process) | dask (a Dask distributed cluster)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Dask scheduler address (tcp://HOST:8786); "
                                            "default: a local cluster of worker processes on 127.0.0.1."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Worker processes of the local Dask cluster "
                                          "(default: one per usable core)."),
    dashboard: Optional[str] = typer.Option(None, "--dashboard", help="Serve the local Dask cluster's dashboard at "
                                            "HOST:PORT or PORT (on 127.0.0.1); default: none."),
    chunk: Optional[int] = typer.Option(None, "--chunk", help="Configurations per task, the unit of work and of "
                                        "output (a Parquet row group); default 131072 for GPU groups, 16384 for "
                                        "wafer groups."),
    force: bool = typer.Option(False, "--force", help="Replace an output file that exists (refused otherwise)."),
    fmt: str = O.format_opt(FMT_HELP),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Evaluate the cartesian product models x targets x precisions x batches x contexts x layouts: per-device
    memory and fit, step/TTFT/TPOT/tokens/s and bottleneck, $/hour, $/M tokens or $/run, J/token.

    Example: wseplan sweep studies/sweep-example.yaml ; wseplan sweep big.yaml --engine dask --scheduler tcp://10.0.0.5:8786
    (an output file that exists is refused unless --force)
    """
    from .. import sweep as S

    check_format(fmt)
    O.check_out(out)
    if engine not in ("local", "dask"):
        raise InputError(f"--engine: unknown {engine!r}; use local or dask")
    if scheduler and engine != "dask":
        raise InputError("--scheduler: applies to --engine dask only")
    if chunk is not None and chunk < 1:
        raise InputError(f"--chunk: must be a positive integer, got {chunk}")
    if dashboard and (engine != "dask" or scheduler):
        raise InputError("--dashboard: applies to --engine dask without --scheduler (a local cluster) only")
    spec = S.load_sweep(sweep_file)
    name = spec.output_name()
    target = os.path.join(out, name)
    if not force and os.path.lexists(target):  # a file of the user's is never replaced unasked (audit30a H1)
        raise InputError(f"output: {target} exists; give --force to replace it, or another --out or output name")
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
        res = S.sweep_to_file(plan, out, name, engine=engine, scheduler=scheduler, chunk=chunk, workers=workers,
                              dashboard=dashboard, progress=progress)
    finally:
        if bar is not None:
            bar.stop()
    for note in plan.skipped:
        sys.stderr.write(f"note: {note}\n")
    lo = spec.layouts
    fixed = [f"{what} {val}" for what, val, given in (("micro-batch", 1, lo.micro_batch), ("recompute", "selective", lo.recompute),
                                                      ("ZeRO", 1, lo.zero_stage), ("virtual pipeline", 1, lo.virtual_pipeline))
             if not given]
    if spec.phase == "train" and fixed and any(g.target.kind == "gpu" for g in plan.groups):
        sys.stderr.write(f"note: GPU training rows hold {', '.join(fixed)} (layouts: micro_batch, recompute, zero_stage, "
                         "virtual_pipeline widen the grid): 'best' is over those rows; `wseplan time` also "
                         "searches these knobs and may find a faster layout\n")
    rows = res.groups
    uncounted = {g.target.key for g in plan.groups if g.target.kind == "gpu" and not g.target.count}
    for r in rows:  # a GPU target without a count takes one node's TP layouts alone (audit37a F6: "0 fitting" read as
        # "cannot run", where `fit` finds a multi-node layout)
        if r["fitting"] == 0 and r["target"] in uncounted:
            sys.stderr.write(f"note: {r['model']} x {r['target']}: no row fits; a GPU target without a count tries the "
                             f"tensor_parallel values with pp = dp = 1 on one node: give a count (e.g. "
                             f"{r['target']}x16) for multi-node layouts, or `wseplan fit {r['model']} --target "
                             f"{r['target']}` for the fewest GPUs that hold it\n")
    record = {"schema_version": S.SCHEMA_VERSION, "sweep": spec.name, "phase": spec.phase,
              "configurations": res.configurations, "fitting": res.fitting, "engine": engine,
              "output": str(res.path), "output_bytes": res.output_bytes, "tasks": res.tasks,
              "skipped": list(plan.skipped), "groups": rows}
    if fmt == "json":
        json_out(record, prices=[])
    elif fmt == "csv":
        emit(F.to_csv(rows))
    elif fmt == "md":
        emit(f"## Sweep {spec.name}: {res.configurations:,} configurations -> {res.path}\n\n" + to_markdown(rows))
    else:
        print_table(rich_table(rows, title=f"sweep {spec.name}: {res.configurations:,} configurations "
                                           f"({res.fitting:,} fit) -> {res.path}"))


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
