"""``report.xlsx``: the report's tables as an Excel workbook, for analysts who work in spreadsheets.

Sheets: ``About`` (question, answer, tool version, report, catalog and prices dates), one sheet per result
table (the same columns and display units as the Markdown and the CSV), ``Assumptions`` and ``Sources``.
Numbers are stored as numbers (not text) so they can be summed and charted, with the CSV's 6 significant digits.

Deterministic bytes: the workbook's created/modified properties are the report date, and every entry of the
zip container gets the same fixed timestamp, so the same study gives the same file (with the same openpyxl).
"""
from __future__ import annotations

import io
import math
import re
import zipfile
from datetime import datetime

ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
_BAD_SHEET_CHARS = re.compile(r"[\[\]:*?/\\]")


def _sheet_name(name: str, used: set[str]) -> str:
    base = _BAD_SHEET_CHARS.sub("_", name).strip("'") or "table"
    base = base[:31]
    out, i = base, 2
    while out.lower() in used:
        suffix = f" ({i})"
        out = base[: 31 - len(suffix)] + suffix
        i += 1
    used.add(out.lower())
    return out


def _cell(v):
    """A cell value: numbers stay numbers, floats at the CSV's 6 significant digits (the same data, and bytes that
    do not move with the last bits of a float); NaN/inf and None are empty; text is kept (without control chars)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return float(f"{v:.6g}") if math.isfinite(v) else None
    text = str(v)
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", "", text)


def _date(text: str) -> datetime:
    parts = [int(p) for p in re.findall(r"\d+", str(text))[:3]]
    if not parts or not 1900 <= parts[0] <= 9999:
        return datetime(2000, 1, 1)
    y, m, d = (parts + [1, 1])[:3]
    try:
        return datetime(y, max(1, min(m, 12)), max(1, min(d, 28 if m == 2 else 30)))
    except ValueError:
        return datetime(y, 1, 1)


def workbook_bytes(*, tables, assumptions, sources: list[dict], about: list[tuple[str, str]], date: str) -> bytes:
    """The workbook as bytes. ``tables`` and ``assumptions`` are :class:`~wseplan.report.markdown.Table`;
    ``sources`` rows ``{id, title, url, date}``; ``about`` (label, text) pairs; ``date`` the report date."""
    from openpyxl import Workbook
    from openpyxl.styles import Font
    from openpyxl.writer.excel import ExcelWriter

    wb = Workbook()
    bold = Font(bold=True)
    used: set[str] = set()
    ws = wb.active
    ws.title = _sheet_name("About", used)
    for label, text in about:
        ws.append([_cell(label), _cell(text)])
        ws.cell(row=ws.max_row, column=1).font = bold
    ws.column_dimensions["A"].width = 22
    ws.column_dimensions["B"].width = 100
    for t in [*tables, assumptions]:
        sheet = wb.create_sheet(_sheet_name("Assumptions" if t is assumptions else t.name, used))
        sheet.append([c.header for c in t.columns])
        for cell in sheet[1]:
            cell.font = bold
        for r in t.rows:
            sheet.append([_cell(t._value(r, c)) for c in t.columns])
        for i, c in enumerate(t.columns, start=1):
            sheet.column_dimensions[sheet.cell(row=1, column=i).column_letter].width = max(10, min(60, len(c.header) + 2))
        sheet.freeze_panes = "A2"
    src = wb.create_sheet(_sheet_name("Sources", used))
    src.append(["id", "title", "url", "date"])
    for cell in src[1]:
        cell.font = bold
    for s in sources:
        src.append([_cell(s.get(k, "")) for k in ("id", "title", "url", "date")])
    when = _date(date)
    wb.properties.creator = "wseplan"
    wb.properties.lastModifiedBy = "wseplan"
    wb.properties.created = when
    wb.properties.modified = when
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
        ExcelWriter(wb, archive).save()
    return _fixed_times(raw.getvalue())


def _fixed_times(data: bytes) -> bytes:
    """The same zip with every entry stamped :data:`ZIP_TIME` (openpyxl stamps the wall clock)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=ZIP_TIME)
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = 0o600 << 16
            dst.writestr(fixed, src.read(info.filename))
    return out.getvalue()
