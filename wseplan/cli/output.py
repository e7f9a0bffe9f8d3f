"""The one output writer of the ``wseplan`` commands: table (rich), json, csv and md.

Every command renders through here. Machine formats (json, csv) keep SI numbers at full precision; the human
formats (table, md) use the one formatter of :mod:`wseplan.report.formats`: units in headers (one display unit
per column, chosen from its values), thousands separators, durations in ms … days, money in $ with k/M, yes/no,
and no e-notation. Text from the user (model names, file names, notes) is shown with control characters
escaped, and rich markup in it is never interpreted. rich loads only when a table is printed.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ..errors import InputError
from ..report.formats import (column_format, field_unit, fmt_field, fmt_num, humanize_text, safe_text, to_csv,
                              to_json)
from .options import loaded_catalog

FORMATS = ("table", "json", "csv", "md")
CONSOLE_WIDTH = 160  # fixed, so the same result prints the same text on any terminal
SKIP_IN_TABLES = ("schema_version",)


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of :data:`FORMATS`; else an :class:`InputError` naming the choices."""
    if fmt not in FORMATS:
        raise InputError(f"--format: unknown {safe_text(str(fmt))!r}; use one of {', '.join(FORMATS)}")
    return fmt


def emit(text: str) -> None:
    """Write ``text`` to standard output and flush."""
    sys.stdout.write(text)
    sys.stdout.flush()


def stamp(obj, prov: dict):
    """``obj`` with a ``provenance`` entry (tool version, catalog and prices dates): added to a record, or to
    each record of a list, so the documented shape of every record stays as it was; a record without a
    ``schema_version`` gets version 1 first (every record carries one, docs/cli-output.md; audit33c L7: `scale` and
    `check` rows had none)."""
    if isinstance(obj, dict):
        return {**({} if "schema_version" in obj else {"schema_version": 1}), **obj, "provenance": prov}
    if isinstance(obj, list):
        return [({**({} if "schema_version" in r else {"schema_version": 1}), **r, "provenance": prov}
                 if isinstance(r, dict) else r) for r in obj]
    return obj


def json_out(obj, prices: list[str] | None = None) -> None:
    """Print ``obj`` as JSON with its provenance; ``prices`` (the ``--prices`` files, ``[]`` for the bundled
    prices) is given by the commands that price something, so the record states the prices date."""
    from ..report.provenance import prices_date, provenance

    cat = loaded_catalog()
    emit(to_json(stamp(obj, provenance(cat, prices_date(prices, cat) if prices is not None else None))))


def _columns(rows: list[dict], columns: list[str] | None):
    cols = columns or list(dict.fromkeys(k for r in rows for k in r if k not in SKIP_IN_TABLES))
    return [column_format(c, [r.get(c) for r in rows]) for c in cols]


def to_markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    """A Markdown table of ``rows`` for a reader: headers with units, one display unit per column."""
    cfs = _columns(rows, columns)
    lines = ["| " + " | ".join(c.header.replace("|", "\\|") for c in cfs) + " |",
             "|" + "|".join("---:" if _numeric(rows, c.key) else "---" for c in cfs) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(c.cell(r.get(c.key)).replace("|", "\\|") for c in cfs) + " |")
    return "\n".join(lines) + "\n"


def rich_table(rows: list[dict], columns: list[str] | None = None, title: str | None = None):
    """A rich Table of ``rows`` for a reader (as :func:`to_markdown`); nothing in it is read as markup (headers,
    cells and the title are rich ``Text``, never markup strings)."""
    from rich.table import Table
    from rich.text import Text

    cfs = _columns(rows, columns)
    cells = [[c.cell(r.get(c.key)) for c in cfs] for r in rows]
    t = Table(title=Text(humanize_text(title)) if title else None)
    for c, w in zip(cfs, _widths([c.header for c in cfs], cells)):
        t.add_column(Text(c.header), overflow="fold", justify="right" if _numeric(rows, c.key) else "left", width=w)
    for row in cells:
        t.add_row(*[Text(v) for v in row])
    return t


def _widths(headers: list[str], cells: list[list[str]]) -> list[int]:
    """Column widths that fit :data:`CONSOLE_WIDTH`: each column as wide as its longest line (at most 40), then
    the widest shrunk one character at a time, never below its longest word while any column can still give
    way, so headers and cells wrap between words rather than inside them."""
    n = len(headers)
    avail = max(n, CONSOLE_WIDTH - (3 * n + 1))  # one space of padding each side and one border per column
    natural = [min(40, max([len(h)] + [len(r[i]) for r in cells])) for i, h in enumerate(headers)]
    words = [min(24, max([len(x) for x in h.split()] + [len(x) for r in cells for x in r[i].split()] + [1]))
             for i, h in enumerate(headers)]
    w = list(natural)
    while sum(w) > avail:
        slack = [(w[i] - words[i], w[i], -i) for i in range(n)]
        best = max(slack)
        i = -best[2]
        if best[0] <= 0:  # every column at its longest word: fold the widest
            i = max(range(n), key=lambda j: (w[j], -j))
        if w[i] <= 1:
            break
        w[i] -= 1
    return w


def _numeric(rows: list[dict], key: str) -> bool:
    vals = [r.get(key) for r in rows if r.get(key) is not None]
    return bool(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)


def print_table(*tables) -> None:
    """Print rich tables on a 160-column console."""
    from rich.console import Console

    con = Console(width=CONSOLE_WIDTH)
    for t in tables:
        con.print(t)


def table_out(rows: list[dict], fmt: str, title: str = "", prices: list[str] | None = None) -> None:
    """One list of rows in ``fmt``."""
    if fmt == "json":
        json_out(rows, prices)
    elif fmt == "csv":
        emit(to_csv(rows))
    elif fmt == "md":
        emit(to_markdown(rows))
    else:
        print_table(rich_table(rows, title=title))


def quantities(row: dict) -> list[dict]:
    """A one-record row as ``{quantity, value}`` rows (a vertical table), each value with its unit."""
    out = []
    # a prediction interval's bounds are in the unit of the metric it brackets (``interval_metric``)
    like = {"interval_low": row.get("interval_metric"), "interval_high": row.get("interval_metric")}
    for k, v in row.items():
        if k in SKIP_IN_TABLES:
            continue
        shown = fmt_field(like.get(k) or k, v)
        out.append({"quantity": field_unit(k).label if isinstance(v, (int, float)) and not isinstance(v, bool)
                    else k.replace("_", " "), "value": shown})
    return out


def notes_out(notes) -> None:
    """``note: ...`` lines after a table (numbers in human form, control characters escaped)."""
    for n in notes:
        emit(f"note: {humanize_text(str(n))}\n")


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
    prices: list[str] | None = None  # the --prices files when the result is priced ([] = bundled prices)


def render(r: Rendered, fmt: str) -> None:
    """Write ``r`` in ``fmt``: json the record, csv the rows, md a heading, one table per section and the notes
    as a list; table: rich tables then ``note:`` lines."""
    if fmt == "json":
        json_out(r.record, r.prices)
    elif fmt == "csv":
        rows = r.csv_rows
        if len(rows) == 1 and r.notes and "notes" not in rows[0]:  # one record: its notes as a column, not lost
            rows = [dict(rows[0], notes=" | ".join(str(n) for n in r.notes))]
        emit(to_csv(rows))
    elif fmt == "md":
        parts = [f"## {humanize_text(r.heading)}\n\n"]
        for i, s in enumerate(r.sections):
            if i:
                parts.append(f"\n### {humanize_text(s.title)}\n\n")
            parts.append(to_markdown(s.rows, columns=s.columns) if s.rows else "(none)\n")
        parts.extend(f"\n- {humanize_text(str(n))}" for n in r.notes)
        emit("".join(parts) + ("\n" if r.notes else ""))
    else:
        print_table(*[rich_table(s.rows, columns=s.columns, title=s.title) for s in r.sections])
        notes_out(r.notes)


def print_report_table(table, title: str) -> None:
    """Print a :class:`wseplan.report.markdown.Table` (headers with units) as a rich table."""
    from rich.table import Table as RichTable
    from rich.text import Text

    t = RichTable(title=Text(humanize_text(title)))
    for c in table.columns:
        t.add_column(Text(c.header), overflow="fold")
    for r in table.rows:
        t.add_row(*[Text(fmt_num(table._value(r, c))) for c in table.columns])
    print_table(t)


#: record fields that hold a solver's wall-clock time: they differ run to run, so a command's output is byte-identical
#: for the same inputs only without them (``--timings`` keeps them)
TIMING_KEYS = ("solve_s", "analysis_s")


def without_timings(obj):
    """``obj`` (a record: dicts and lists) with every :data:`TIMING_KEYS` value set to None (the field names stay)."""
    if isinstance(obj, dict):
        return {k: (None if k in TIMING_KEYS or k.endswith(tuple("_" + t for t in TIMING_KEYS)) else without_timings(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj
