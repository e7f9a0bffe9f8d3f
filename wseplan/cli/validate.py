"""`wseplan validate CASES.csv` — predict every published measurement in a validation file, with errors."""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import Rendered, Section, check_format, emit, render


def validate_cmd(
    cases: Optional[str] = typer.Argument(None, help="Validation CSV (default: catalogs/validation/validation-public.csv)."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Predict each row of a validation file and report predicted/measured - 1 per row and per category.

    Status per row: within tolerance (|rel_error| at most its category's band), outside tolerance, not
    predicted (with the reason), or no tolerance band. A band is the 80th percentile of |rel_error| over the
    strong and medium rows of that category in the bundled validation set.
    csv: one row per case with id, category, metric, unit, measured, predicted, rel_error, status, reason,
    tolerance_frac. table/md add the median |rel_error| per category (strong+medium counted, weak apart).
    Example: wseplan validate catalogs/validation/validation-public.csv --format csv
    """
    from pathlib import Path

    from ..report import formats as F
    from ..validate import (OUTPUT_COLUMNS, default_cases_path, read_cases, reference_bands, summarize,
                            validate_cases)

    check_format(fmt)
    path = cases or str(default_cases_path())
    rows = read_cases(path)
    cat = O.load_catalog(catalog)
    bundled = Path(path).resolve() == default_cases_path().resolve()
    recs = validate_cases(rows, cat, bands=None if bundled else reference_bands(cat))
    summary = summarize(recs)
    if fmt == "csv":
        emit(F.to_csv(recs, columns=list(OUTPUT_COLUMNS)))
        return
    title = f"validation: {path}"
    render(Rendered(record={"schema_version": 1, "cases": path, "rows": recs, "summary": summary}, csv_rows=recs,
                    heading=f"Validation: {path}",
                    sections=[Section(title, recs, columns=list(OUTPUT_COLUMNS) + ["quality"]),
                              Section("Median |rel_error| per category (strong+medium counted; weak apart)", summary)]),
           fmt)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
