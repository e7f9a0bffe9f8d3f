"""`wseplan validate CASES.csv` — predict every published measurement in a validation file, with errors."""
from __future__ import annotations

from typing import Optional

import typer


def register(app) -> None:
    @app.command("validate")
    def validate_cmd(
        cases: Optional[str] = typer.Argument(None, help="Validation CSV (default: catalogs/validation/validation-public.csv)."),
        fmt: str = typer.Option("table", "--format", "-f", help="Output: table | json | csv | md."),
        catalog: Optional[list[str]] = typer.Option(None, "--catalog", help="Extra catalog folder(s)."),
    ) -> None:
        """Predict each row of a validation file and report predicted/measured - 1 per row and per category.

        csv: one row per case with id, category, metric, unit, measured, predicted, rel_error, status, reason.
        table/md add the median |rel_error| per category (strong+medium counted, weak reported apart).
        Example: wseplan validate catalogs/validation/validation-public.csv --format csv
        """
        from ..cli import _catalog, _check_format, _emit
        from ..report import formats as F
        from ..validate import OUTPUT_COLUMNS, default_cases_path, read_cases, summarize, validate_cases

        _check_format(fmt)
        path = cases or str(default_cases_path())
        rows = read_cases(path)
        cat = _catalog(catalog)
        recs = validate_cases(rows, cat)
        summary = summarize(recs)
        if fmt == "csv":
            _emit(F.to_csv(recs, columns=list(OUTPUT_COLUMNS)))
        elif fmt == "json":
            _emit(F.to_json({"schema_version": 1, "cases": path, "rows": recs, "summary": summary}))
        elif fmt == "md":
            _emit(f"## Validation: {path}\n\n" + F.to_markdown(recs, columns=list(OUTPUT_COLUMNS) + ["quality"])
                  + "\n### Median |rel_error| per category\n\n" + F.to_markdown(summary))
        else:
            F.print_table(F.rich_table(recs, columns=list(OUTPUT_COLUMNS) + ["quality"], title=f"validation: {path}"),
                          F.rich_table(summary, title="median |rel_error| per category (strong+medium counted; weak apart)"))
