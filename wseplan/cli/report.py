"""`wseplan report STUDY.yaml`: a Markdown report with tables, CSVs and PNG plots, written atomically."""
from __future__ import annotations

import os
from typing import Optional

import typer

from ..errors import InputError

from . import options as O
from .output import check_format, emit, json_out, table_out


def report_cmd(
    study: str = typer.Argument(..., help="A study YAML file (see studies/)."),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Output folder (default reports/<study name>/; a "
                                      "given folder's parent must exist)."),
    force: bool = typer.Option(False, "--force", help="Replace a folder wseplan did not write, and overwrite files in it "
                                                      "that the report also writes (other files are kept)."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Write a Markdown report with tables, CSVs and PNG plots for STUDY (atomically).

    Example: wseplan report studies/serve-llama3-70b.yaml --out reports/serve-llama3-70b
    """
    from ..report.study import run_study, write_report

    check_format(fmt)
    O.check_out(out)
    if out is not None:  # a typo in a given folder's parent is not a new tree (audit30a M7); the default makes reports/
        parent = os.path.dirname(os.path.normpath(out)) or "."
        if os.path.exists(parent) and not os.path.isdir(parent):  # audit37b F8: "does not exist" for a file
            raise InputError(f"--out: {parent} is a file, not a folder; give another --out")
        if not os.path.isdir(parent):
            raise InputError(f"--out: the folder {parent} does not exist; create it first or give another --out")
    cat = O.load_catalog(catalog)
    result = run_study(study, catalog=cat)
    path = write_report(result, out, force=force)
    rows = [{"file": name, "bytes": len(data)} for name, data in sorted(result.files().items())]
    if fmt == "json":
        json_out({"study": result.study.name, "out": str(path), "answer": result.answer, "files": rows}, prices=[])
    elif fmt == "table":
        emit(f"{result.answer}\n\nwrote {len(rows)} files to {path}\n")
    else:  # a file's size, not a memory load (audit37b F8: the `bytes` key's label is "memory")
        table_out([{"file": r["file"], "size_bytes": r["bytes"]} for r in rows], fmt)


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
