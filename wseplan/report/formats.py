"""Human number formatting and the machine serialisers (JSON, CSV). Deterministic: same records, same bytes.

The CLI's writer (table, json, csv, md) is :mod:`wseplan.cli.output`."""
from __future__ import annotations

import csv
import io
import json
import math


def fmt_value(v) -> str:
    """Human formatting: 4 significant digits, SI-ish exponents, no 17-digit floats."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == 0:
            return "0"
        a = abs(v)
        if 1e-3 <= a < 1e6:
            return f"{v:.4g}"
        return f"{v:.3e}"
    if v is None:
        return ""
    return str(v)


def fmt_bytes(v: float) -> str:
    a = abs(v)
    for unit, f in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if a >= f:
            return f"{v / f:.3g} {unit}"
    return f"{v:.3g} B"


def to_json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, allow_nan=False, default=str) + "\n"


def to_csv(rows: list[dict], columns: list[str] | None = None) -> str:
    cols = columns or list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(cols)
    for r in rows:
        wr.writerow([_csv_cell(r.get(c)) for c in cols])
    return buf.getvalue()


def _csv_cell(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    return "" if v is None else v
