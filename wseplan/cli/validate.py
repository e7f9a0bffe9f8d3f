"""`wseplan validate CASES.csv` — predict every published measurement in a validation file, with errors."""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import check_format, emit, print_table, rich_table, to_markdown


def validate_cmd(
    cases: Optional[str] = typer.Argument(None, help="Validation CSV (default: catalogs/validation/validation-public.csv)."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Predict each row of a validation file and report predicted/measured - 1 per row and per category.

    csv: one row per case with id, category, metric, unit, measured, predicted, rel_error, status, reason.
    table/md add the median |rel_error| per category (strong+medium counted, weak reported apart).
    Example: wseplan validate catalogs/validation/validation-public.csv --format csv
    """
    from ..report import formats as F
    from ..validate import OUTPUT_COLUMNS, default_cases_path, read_cases, summarize, validate_cases

    check_format(fmt)
    path = cases or str(default_cases_path())
    rows = read_cases(path)
    cat = O.load_catalog(catalog)
    recs = validate_cases(rows, cat)
    summary = summarize(recs)
    if fmt == "csv":
        emit(F.to_csv(recs, columns=list(OUTPUT_COLUMNS)))
    elif fmt == "json":
        emit(F.to_json({"schema_version": 1, "cases": path, "rows": recs, "summary": summary}))
    elif fmt == "md":
        emit(f"## Validation: {path}\n\n" + to_markdown(recs, columns=list(OUTPUT_COLUMNS) + ["quality"])
              + "\n### Median |rel_error| per category\n\n" + to_markdown(summary))
    else:
        print_table(rich_table(recs, columns=list(OUTPUT_COLUMNS) + ["quality"], title=f"validation: {path}"),
                      rich_table(summary, title="median |rel_error| per category (strong+medium counted; weak apart)"))


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
