"""Markdown building blocks for reports: tables with units in every header, readable numbers, a sources list.

Numbers are shown with 4 significant digits (thousands separated, no 17-digit floats); the CSV behind a table
keeps 6 significant digits in the table's display units. Output is deterministic: same rows, same bytes.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field


def fmt_num(v, sig: int = 4) -> str:
    """A number for a reader: ``1,235,000``, ``12.35``, ``0.001235``, ``1.235e+12``; text passes through."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        if v == 0:
            return "0"
        a = abs(v)
        if v.is_integer() and a < 1e9:  # a whole number (a count held as float) is shown exactly
            return f"{int(v):,}"
        if a >= 1e12 or a < 1e-4:
            return f"{v:.{sig - 1}e}"
        digits = sig - 1 - int(math.floor(math.log10(a)))
        r = round(v, digits)
        if digits <= 0:
            return f"{int(r):,}"
        text = f"{r:,.{digits}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(v).replace("|", "\\|").replace("\n", " ")


def csv_num(v, sig: int = 6):
    """A CSV cell: floats rounded to ``sig`` significant digits, booleans as true/false, None as empty."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{sig}g}"
    return v


@dataclass(frozen=True)
class Column:
    """A table column: the record key, its header (with the unit in brackets) and a display scale.

    The shown value is ``record[key] / scale`` for numbers (``scale=1e-3`` would not be used: divide SI by
    ``1e-3`` to show ms, i.e. ``scale=1e-3`` shows seconds as milliseconds).
    """

    key: str
    header: str
    scale: float = 1.0


@dataclass
class Table:
    """A named table: ``name`` is the CSV file stem, ``title`` the heading shown above it."""

    name: str
    title: str
    columns: list[Column]
    rows: list[dict]
    note: str = ""

    def _value(self, row: dict, col: Column):
        v = row.get(col.key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and col.scale != 1.0:
            return float(v) / col.scale
        return v

    def to_markdown(self) -> str:
        hdr = "| " + " | ".join(c.header for c in self.columns) + " |"
        align = "|" + "|".join("---" if _is_text(self.rows, c.key) else "---:" for c in self.columns) + "|"
        body = ["| " + " | ".join(fmt_num(self._value(r, c)) for c in self.columns) + " |" for r in self.rows]
        return "\n".join([hdr, align, *body]) + "\n"

    def to_csv(self) -> str:
        buf = io.StringIO()
        wr = csv.writer(buf, lineterminator="\n")
        wr.writerow([c.header for c in self.columns])
        for r in self.rows:
            wr.writerow([csv_num(self._value(r, c)) for c in self.columns])
        return buf.getvalue()

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{c.header: self._value(r, c) for c in self.columns} for r in self.rows])


def _is_text(rows: list[dict], key: str) -> bool:
    vals = [r.get(key) for r in rows if r.get(key) is not None]
    return bool(vals) and all(isinstance(v, (str, bool)) for v in vals)


@dataclass
class Document:
    """An ordered Markdown document."""

    parts: list[str] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append("#" * level + " " + text.strip() + "\n")

    def para(self, text: str) -> None:
        self.parts.append(" ".join(text.split()) + "\n")

    def bullets(self, items: list[str]) -> None:
        if items:
            self.parts.append("".join(f"- {' '.join(i.split())}\n" for i in items))

    def table(self, t: Table, csv_name: str | None = None) -> None:
        self.heading(t.title, 3)
        if t.note:
            self.para(t.note)
        self.parts.append(t.to_markdown())
        if csv_name:
            self.parts.append(f"Data: [`{csv_name}`]({csv_name})\n")

    def image(self, path: str, alt: str, caption: str = "") -> None:
        self.parts.append(f"![{alt}]({path})\n" + (f"\n*{' '.join(caption.split())}*\n" if caption else ""))

    def render(self) -> str:
        return "\n".join(p.rstrip("\n") + "\n" for p in self.parts)


_SCALES = {
    "s": [(365.25 * 86400, "years"), (86400, "days"), (3600, "h"), (1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")],
    "bytes": [(1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B")],
    "bytes/s": [(1e15, "PB/s"), (1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1, "B/s")],
    "FLOP/s": [(1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1, "FLOP/s")],
    "W": [(1e6, "MW"), (1e3, "kW"), (1, "W")],
    "J": [(1e6, "MJ"), (1e3, "kJ"), (1, "J"), (1e-3, "mJ")],
}


def fmt_quantity(v: float, unit: str) -> str:
    """A value in SI ``unit`` shown with a readable prefix: ``fmt_quantity(1.27e8, 's') == '4.045 years'``."""
    if v is None:
        return "–"
    scales = _SCALES.get(unit)
    if not scales or not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v == 0:
        return f"{fmt_num(v)} {unit}".strip()
    a = abs(float(v))
    for f, name in scales:
        if a >= f:
            return f"{fmt_num(float(v) / f)} {name}"
    f, name = scales[-1]
    return f"{fmt_num(float(v) / f)} {name}"
