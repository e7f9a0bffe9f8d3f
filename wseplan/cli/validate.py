"""`wseplan validate CASES.csv` — predict every published measurement in a validation file, with errors.

The bundled file is judged by its own tolerance bands (all its records are needed first; it has a few hundred
rows), and so is any file with ``--cv source`` (the held-out refit needs every row). Any other file is judged by the
bundled bands and streamed (:mod:`wseplan.validate_stream`): rows are read, predicted and written one at a time, csv
and json as they come, so memory stays bounded for a file of any length; a progress line is shown on stderr when it
is a terminal.
"""
from __future__ import annotations

import csv
import json
import os
import sys
from typing import Optional

import typer

from ..errors import InputError
from ..report import formats as F
from ..report.formats import _csv_cell
from . import options as O
from .options import loaded_catalog
from .output import Rendered, Section, check_format, emit, render

CV_COLUMNS = ("held_out_predicted", "held_out_rel_error")
#: per-row columns the csv and tables add after the others (json has them in every record): the row's quality and the
#: inputs a documented default filled, ';'-joined (audit33d L1: only json told a defaulted row's error from another)
ROW_COLUMNS = ("quality", "defaulted")


def _flat(r: dict) -> dict:
    """A record for csv and tables: ``defaulted`` (a list) joined with ';'."""
    return {**r, "defaulted": ";".join(r.get("defaulted") or [])}

MAX_TABLE_ROWS = 1_000
"""Most rows the human formats (table, md) list one by one when a file is streamed; a longer file shows the
per-category summary and a note (csv and json always carry every row)."""


def validate_cmd(
    cases: Optional[str] = typer.Argument(None, help="Validation CSV (default: catalogs/validation/validation-public.csv)."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
    cv: Optional[str] = typer.Option(None, "--cv", help="Cross-validation: 'source' predicts every row with the "
                                     "constants refitted without its source (leave one source out) and prints the "
                                     "held-out median |error| beside the in-sample one (5-8 minutes on 2 cores)."),
) -> None:
    """Predict each row of a validation file and report predicted/measured - 1 per row and per category.

    Status per row: within tolerance (|rel_error| at most its category's band), outside tolerance, not
    predicted (with the reason), or no tolerance band. A band is the 80th percentile of |rel_error| over the
    strong and medium rows of that category in the bundled validation set. A row whose empty inputs a documented
    default filled names them in `defaulted`.
    csv: one row per case with id, category, metric, unit, measured, predicted, rel_error, status, reason,
    tolerance_frac (and held_out_predicted, held_out_rel_error with --cv source), quality and defaulted
    (';'-joined). table/md add the median |rel_error|
    per category (strong+medium counted, weak apart); with --cv source the held-out medians and the coverage.
    Files other than the bundled one are streamed without --cv (bounded memory; rows whose inputs repeat reuse the
    prediction); above 1,000 rows table/md then show only the per-category summary (csv and json list every row).
    Example: wseplan validate catalogs/validation/validation-public.csv --cv source
    """
    # the validation package (~0.3 s to import) is loaded when the command runs, not when the CLI starts
    from ..validate import (OUTPUT_COLUMNS, cross_validated_summary, default_cases_path, read_cases, reference_bands,
                            summarize, validate_cases)
    from ..validate.intervals import held_out

    check_format(fmt)
    if cv is not None and cv != "source":
        raise InputError(f"--cv: {cv!r} is not a cross-validation; use --cv source (leave one source out)")
    path = cases or str(default_cases_path())
    cat = O.load_catalog(catalog)
    bundled = os.path.realpath(path) == os.path.realpath(default_cases_path())
    if cv is None and not bundled:
        _validate_streamed(path, cat, fmt)
        return
    rows = read_cases(path)
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
        emit(F.to_csv([_flat(r) for r in recs], columns=columns + list(ROW_COLUMNS)))
        return
    title = f"validation: {path}"
    render(Rendered(record=record, csv_rows=recs, heading=f"Validation: {path}",
                    sections=[Section(title, [_flat(r) for r in recs], columns=columns + list(ROW_COLUMNS)),
                              Section("Median |rel_error| per category (strong+medium counted; weak apart)", summary)]
                    + sections),
           fmt)


def _validate_streamed(path: str, cat, fmt: str) -> None:
    """Validate a file other than the bundled one row by row against the bundled bands (bounded memory)."""
    from ..validate import iter_cases, reference_bands
    from ..validate.cases import no_rows_error
    from ..validate_stream import Progress, Summary, iter_records

    rows = 0
    for _ in iter_cases(path):  # a malformed row is refused before the bundled bands take their seconds
        rows += 1
    if not rows:  # a header alone (audit30a L7)
        raise no_rows_error(path)
    progress = Progress("validate")
    n = _write(path, iter_records(path, cat, reference_bands(cat), progress=progress), Summary(), fmt)
    progress.done(n)


def _write(path: str, records, summary, fmt: str) -> int:
    """Write ``records`` (an iterator) in ``fmt`` while ``summary`` accumulates them; returns the row count."""
    from ..validate import OUTPUT_COLUMNS

    counted = _Counted(records, summary)
    if fmt == "csv":
        _stream_csv(counted, list(OUTPUT_COLUMNS) + list(ROW_COLUMNS))
    elif fmt == "json":
        _stream_json(path, counted, summary)
    else:
        kept = [r for r in counted if counted.n <= MAX_TABLE_ROWS]
        title = f"validation: {path}"
        sections = [Section("Median |rel_error| per category (strong+medium counted; weak apart)", summary.rows())]
        notes = []
        if counted.n <= MAX_TABLE_ROWS:
            sections.insert(0, Section(title, [_flat(r) for r in kept], columns=list(OUTPUT_COLUMNS) + list(ROW_COLUMNS)))
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
    out = sys.stdout
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for r in records:
        r = _flat(r)
        w.writerow([_csv_cell(r.get(c)) for c in columns])
    out.flush()


def _indented(text: str, pad: str) -> str:
    return text.replace("\n", "\n" + pad)


def _stream_json(path: str, records, summary) -> None:
    """The record ``{"schema_version", "cases", "rows", "summary", "provenance"}`` written as
    :func:`wseplan.report.formats.to_json` would write it (same bytes), with the rows streamed one by one."""
    from ..report.provenance import provenance

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
