"""`wseplan validate CASES.csv` — predict every published measurement in a validation file, with errors.

The bundled file is judged by its own tolerance bands (all its records are needed first; it has a few hundred
rows). Any other file is judged by the bundled bands and streamed (:mod:`wseplan.validate_stream`): rows are
read, predicted and written one at a time, csv and json as they come, so memory stays bounded for a file of any
length; a progress line is shown on stderr when it is a terminal.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Optional

import typer

from . import options as O
from .output import Rendered, Section, check_format, emit, render

MAX_TABLE_ROWS = 1_000
"""Most rows the human formats (table, md) list one by one; a longer file shows the per-category summary and a
note (csv and json always carry every row)."""


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
    tolerance_frac. table/md add the median |rel_error| per category (strong+medium counted, weak apart); above
    1,000 rows they show only the per-category summary (csv and json list every row). Large files are streamed
    (bounded memory; rows whose inputs repeat reuse the prediction, see docs/validation.md).
    Example: wseplan validate catalogs/validation/validation-public.csv --format csv
    """
    from ..validate import default_cases_path, read_cases, reference_bands, validate_cases
    from ..validate_stream import Progress, Summary, iter_records

    check_format(fmt)
    path = cases or str(default_cases_path())
    cat = O.load_catalog(catalog)
    if os.path.realpath(path) == os.path.realpath(default_cases_path()):  # its own bands: all rows first
        _write(path, iter(validate_cases(read_cases(path), cat)), Summary(), fmt)
        return
    bands = reference_bands(cat)
    progress = Progress("validate")
    summary = Summary()
    n = _write(path, iter_records(path, cat, bands, progress=progress), summary, fmt)
    progress.done(n)


def _write(path: str, records, summary, fmt: str) -> int:
    """Write ``records`` (an iterator) in ``fmt`` while ``summary`` accumulates them; returns the row count."""
    from ..validate import OUTPUT_COLUMNS

    counted = _Counted(records, summary)
    if fmt == "csv":
        _stream_csv(counted, list(OUTPUT_COLUMNS))
    elif fmt == "json":
        _stream_json(path, counted, summary)
    else:
        kept = [r for r in counted if counted.n <= MAX_TABLE_ROWS]
        title = f"validation: {path}"
        sections = [Section("Median |rel_error| per category (strong+medium counted; weak apart)", summary.rows())]
        notes = []
        if counted.n <= MAX_TABLE_ROWS:
            sections.insert(0, Section(title, kept, columns=list(OUTPUT_COLUMNS) + ["quality"]))
        else:
            sections[0].title = f"{title}: {counted.n:,} rows; median |rel_error| per category (strong+medium " \
                                "counted; weak apart)"
            notes.append(f"{counted.n:,} rows: the per-row table is shown up to {MAX_TABLE_ROWS:,} rows; use "
                         "--format csv or --format json for every row")
        render(Rendered(record=None, csv_rows=[], heading=f"Validation: {path}", sections=sections, notes=notes), fmt)
    return counted.n


class _Counted:
    """``records``, each added to ``summary`` and counted (``n``) as it passes."""

    def __init__(self, records, summary):
        self.records, self.summary, self.n = records, summary, 0

    def __iter__(self):
        for r in self.records:
            self.summary.add(r)
            self.n += 1
            yield r


def _stream_csv(records, columns: list[str]) -> None:
    import csv

    from ..report.formats import _csv_cell

    out = sys.stdout
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for r in records:
        w.writerow([_csv_cell(r.get(c)) for c in columns])
    out.flush()


def _indented(text: str, pad: str) -> str:
    return text.replace("\n", "\n" + pad)


def _stream_json(path: str, records, summary) -> None:
    """The record ``{"schema_version", "cases", "rows", "summary", "provenance"}`` written as
    :func:`wseplan.report.formats.to_json` would write it (same bytes), with the rows streamed one by one."""
    from ..report.provenance import provenance
    from .options import loaded_catalog

    def dump(obj) -> str:
        return json.dumps(obj, indent=2, allow_nan=False, default=str)

    out = sys.stdout
    out.write("{\n  " + '"schema_version": 1,\n  "cases": ' + dump(path) + ',\n  "rows": [')
    first = True
    for r in records:
        out.write(("\n    " if first else ",\n    ") + _indented(dump(r), "    "))
        first = False
    out.write("]" if first else "\n  ]")
    out.write(',\n  "summary": ' + _indented(dump(summary.rows()), "  "))
    out.write(',\n  "provenance": ' + _indented(dump(provenance(loaded_catalog(), None)), "  ") + "\n}\n")
    out.flush()


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
