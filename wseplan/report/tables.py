"""Report tables shared by the CLI and the study reports (one definition each)."""
from __future__ import annotations

from .markdown import Column, Table, fmt_quantity


def claims_table(verdicts, texts: list[str] | None = None) -> Table:
    """Claim verdicts as a table with readable units; ``texts`` (the claims' own words) adds a text column."""
    rows = []
    for i, v in enumerate(verdicts):
        unit = v.bound_unit or v.unit
        row = {"id": v.id}
        if texts is not None:
            row["text"] = texts[i]
        row.update({"verdict": v.verdict, "bound": v.bound or "",
                    "bound_value": fmt_quantity(v.bound_value, unit) if v.bound_value is not None else "",
                    "claimed": show_claim_value(v.claimed_value, v.unit), "estimate": show_claim_value(v.estimate, v.unit),
                    "margin": v.margin, "reason": v.reason})
        rows.append(row)
    cols = [Column("id", "claim")] + ([Column("text", "text")] if texts is not None else []) + [
        Column("verdict", "verdict"), Column("bound", "bound broken"), Column("bound_value", "bound value"),
        Column("claimed", "claimed"), Column("estimate", "wseplan estimate"), Column("margin", "margin [x]"),
        Column("reason", "reason")]
    return Table(name="claims", title="Claims and verdicts", columns=cols, rows=rows,
                 note="Claims of different kinds share the value columns, so each value carries its own unit (text, "
                      "not a number); `wseplan check --format json` (or csv) gives them in SI numbers.")


def show_claim_value(v, unit: str) -> str:
    """A claimed or estimated value with its unit; a fit claim shows as fits / does not fit."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "fits" if v else "does not fit"
    return fmt_quantity(v, unit)


# Bases and source kinds a reader should weigh with care; report and CLI tables mark them.
WEAK_BASES = ("unverified", "estimate")
WEAK_SOURCE_KINDS = ("forum",)


def weakness(basis: str, source_ids, sources: dict | None = None) -> str:
    """Why a number is weak, or ``''``: its basis (``unverified``, ``estimate``) or a ``forum`` source among
    its sources (``sources`` is the catalog's source table; unknown ids are ignored here, the catalog test
    rejects them)."""
    why = []
    if basis in WEAK_BASES:
        why.append(basis)
    for sid in source_ids or ():
        src = (sources or {}).get(sid)
        if src is not None and getattr(src, "kind", None) in WEAK_SOURCE_KINDS and "forum" not in why:
            why.append("forum")
    return ", ".join(why)


def basis_label(basis: str, source_ids, sources: dict | None = None) -> str:
    """The basis as a table shows it: ``third-party``, or ``estimate (weak)``, ``third-party (weak: forum)``."""
    why = weakness(basis, source_ids, sources)
    if not why:
        return basis
    return f"{basis} (weak)" if why == basis else f"{basis} (weak: {why})"
