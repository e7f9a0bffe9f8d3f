"""`wseplan validate CASES.csv` — predict every published measurement in a validation file, with errors."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError
from ..report import formats as F
from ..validate import (OUTPUT_COLUMNS, cross_validated_summary, default_cases_path, read_cases, reference_bands,
                        summarize, validate_cases)
from ..validate.intervals import held_out
from . import options as O
from .output import Rendered, Section, check_format, emit, render

CV_COLUMNS = ("held_out_predicted", "held_out_rel_error")


def validate_cmd(
    cases: Optional[str] = typer.Argument(None, help="Validation CSV (default: catalogs/validation/validation-public.csv)."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
    cv: Optional[str] = typer.Option(None, "--cv", help="Cross-validation: 'source' predicts every row with the "
                                     "constants refitted without its source (leave one source out) and prints the "
                                     "held-out median |error| beside the in-sample one (about 20 s)."),
) -> None:
    """Predict each row of a validation file and report predicted/measured - 1 per row and per category.

    Status per row: within tolerance (|rel_error| at most its category's band), outside tolerance, not
    predicted (with the reason), or no tolerance band. A band is the 80th percentile of |rel_error| over the
    strong and medium rows of that category in the bundled validation set. A row whose empty inputs a documented
    default filled names them in `defaulted`.
    csv: one row per case with id, category, metric, unit, measured, predicted, rel_error, status, reason,
    tolerance_frac (and held_out_predicted, held_out_rel_error with --cv source). table/md add the median |rel_error|
    per category (strong+medium counted, weak apart); with --cv source the held-out medians and the coverage.
    Example: wseplan validate catalogs/validation/validation-public.csv --cv source
    """
    check_format(fmt)
    if cv is not None and cv != "source":
        raise InputError(f"--cv: {cv!r} is not a cross-validation; use --cv source (leave one source out)")
    path = cases or str(default_cases_path())
    rows = read_cases(path)
    cat = O.load_catalog(catalog)
    bundled = Path(path).resolve() == default_cases_path().resolve()
    recs = validate_cases(rows, cat, bands=None if bundled else reference_bands(cat))
    summary = summarize(recs)
    columns = list(OUTPUT_COLUMNS)
    record = {"schema_version": 1, "cases": path, "rows": recs, "summary": summary}
    sections = []
    if cv is not None:
        ho = held_out(path, catalog=cat)
        for r in recs:
            h = ho["rows"].get(r["id"])
            r["held_out_predicted"] = h["held_out"] if h and r["predicted"] is not None else None
            r["held_out_rel_error"] = h["held_out"] / r["measured"] - 1.0 if r["held_out_predicted"] else None
        columns += list(CV_COLUMNS)
        cv_sum = cross_validated_summary(recs)
        record["cross_validation"] = {"method": "leave one source out", "seconds": round(ho["seconds"], 1),
                                      "categories": cv_sum}
        sections.append(Section(f"In-sample and held-out (leave one source out) median |rel_error|, strong+medium rows "
                                f"({ho['seconds']:.0f} s)", cv_sum))
    if fmt == "csv":
        emit(F.to_csv(recs, columns=columns))
        return
    title = f"validation: {path}"
    render(Rendered(record=record, csv_rows=recs, heading=f"Validation: {path}",
                    sections=[Section(title, recs, columns=columns + ["quality"]),
                              Section("Median |rel_error| per category (strong+medium counted; weak apart)", summary)]
                    + sections),
           fmt)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
