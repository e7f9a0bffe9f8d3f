"""Render records as rich tables, JSON, CSV or Markdown. Deterministic: same records, same bytes."""
from __future__ import annotations

import csv
import io
import json
import math

FORMATS = ("table", "json", "csv", "md")


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


def to_markdown(rows: list[dict], columns: list[str] | None = None, headers: dict[str, str] | None = None) -> str:
    cols = columns or list(dict.fromkeys(k for r in rows for k in r))
    hdr = [(headers or {}).get(c, c) for c in cols]
    lines = ["| " + " | ".join(hdr) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(fmt_value(r.get(c)).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines) + "\n"


def rich_table(rows: list[dict], columns: list[str] | None = None, title: str | None = None, headers: dict[str, str] | None = None):
    from rich.table import Table

    cols = columns or list(dict.fromkeys(k for r in rows for k in r))
    t = Table(title=title)
    for c in cols:
        t.add_column((headers or {}).get(c, c), overflow="fold")
    for r in rows:
        t.add_row(*[fmt_value(r.get(c)) for c in cols])
    return t


def print_table(*tables) -> None:
    from rich.console import Console

    con = Console(width=160)
    for t in tables:
        con.print(t)
