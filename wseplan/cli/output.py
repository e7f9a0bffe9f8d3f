"""The one output writer of the ``wseplan`` commands: table (rich), json, csv and md.

Every command renders through here. Machine formats (json, csv) keep SI numbers; the human formats
(table, md) format numbers with :func:`wseplan.report.formats.fmt_value`. Output is deterministic: the same
records give the same bytes. rich loads only when a table is printed.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ..errors import InputError
from ..report.formats import fmt_value, to_csv, to_json

FORMATS = ("table", "json", "csv", "md")


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of :data:`FORMATS`; else an :class:`InputError` naming the choices."""
    if fmt not in FORMATS:
        raise InputError(f"--format: unknown {fmt!r}; use one of {', '.join(FORMATS)}")
    return fmt


def emit(text: str) -> None:
    """Write ``text`` to standard output and flush."""
    sys.stdout.write(text)
    sys.stdout.flush()


def to_markdown(rows: list[dict], columns: list[str] | None = None, headers: dict[str, str] | None = None) -> str:
    """A Markdown table of ``rows`` (one column per key, in first-seen order unless ``columns`` is given)."""
    cols = columns or list(dict.fromkeys(k for r in rows for k in r))
    hdr = [(headers or {}).get(c, c) for c in cols]
    lines = ["| " + " | ".join(hdr) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(fmt_value(r.get(c)).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines) + "\n"


def rich_table(rows: list[dict], columns: list[str] | None = None, title: str | None = None,
               headers: dict[str, str] | None = None):
    """A rich Table of ``rows``; every cell is formatted by :func:`fmt_value`."""
    from rich.table import Table

    cols = columns or list(dict.fromkeys(k for r in rows for k in r))
    t = Table(title=title)
    for c in cols:
        t.add_column((headers or {}).get(c, c), overflow="fold")
    for r in rows:
        t.add_row(*[fmt_value(r.get(c)) for c in cols])
    return t


def print_table(*tables) -> None:
    """Print rich tables on a 160-column console."""
    from rich.console import Console

    con = Console(width=160)
    for t in tables:
        con.print(t)


def table_out(rows: list[dict], fmt: str, title: str = "") -> None:
    """One list of rows in ``fmt``."""
    if fmt == "json":
        emit(to_json(rows))
    elif fmt == "csv":
        emit(to_csv(rows))
    elif fmt == "md":
        emit(to_markdown(rows))
    else:
        print_table(rich_table(rows, title=title))


def quantities(row: dict) -> list[dict]:
    """A one-record row as ``{quantity, value}`` rows (a vertical table)."""
    return [{"quantity": k, "value": v} for k, v in row.items()]


def notes_out(notes) -> None:
    """``note: ...`` lines after a table."""
    for n in notes:
        emit(f"note: {n}\n")


@dataclass
class Section:
    """One table of a rendered result: its rows and the title shown above it."""

    title: str
    rows: list[dict]
    columns: list[str] | None = None


@dataclass
class Rendered:
    """A command's result in every format: the JSON record, the CSV rows, and the human sections."""

    record: object
    csv_rows: list[dict]
    heading: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def render(r: Rendered, fmt: str) -> None:
    """Write ``r`` in ``fmt``: json the record, csv the rows, md a heading and one table per section, table
    rich tables then ``note:`` lines."""
    if fmt == "json":
        emit(to_json(r.record))
    elif fmt == "csv":
        emit(to_csv(r.csv_rows))
    elif fmt == "md":
        parts = [f"## {r.heading}\n\n"]
        for i, s in enumerate(r.sections):
            if i:
                parts.append(f"\n### {s.title}\n\n")
            parts.append(to_markdown(s.rows, columns=s.columns) if s.rows else "(none)\n")
        emit("".join(parts))
    else:
        print_table(*[rich_table(s.rows, columns=s.columns, title=s.title) for s in r.sections])
        notes_out(r.notes)


def print_report_table(table, title: str) -> None:
    """Print a :class:`wseplan.report.markdown.Table` (headers with units) as a rich table."""
    from rich.markup import escape
    from rich.table import Table as RichTable

    from ..report.markdown import fmt_num

    t = RichTable(title=escape(title))
    for c in table.columns:
        t.add_column(escape(c.header), overflow="fold")
    for r in table.rows:
        t.add_row(*[escape(fmt_num(table._value(r, c))) for c in table.columns])
    print_table(t)
