"""Markdown building blocks for reports: tables with units in every header, readable numbers, a sources list.

Numbers are shown by the one human formatter (:mod:`wseplan.report.formats`: 4 significant digits, thousands
separated, no e-notation); the CSV behind a table keeps 6 significant digits in the table's display units.
Output is deterministic: same rows, same bytes.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from .formats import csv_num, fmt_num, fmt_quantity  # noqa: F401  (re-exported: the one formatter lives in formats)


def md_cell(v) -> str:
    """A Markdown table cell: :func:`fmt_num` with ``|`` escaped."""
    return fmt_num(v).replace("|", "\\|")


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
        body = ["| " + " | ".join(md_cell(self._value(r, c)) for c in self.columns) + " |" for r in self.rows]
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
