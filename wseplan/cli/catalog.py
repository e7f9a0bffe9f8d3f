"""`wseplan catalog list|show`: inspect the bundled catalogs (hardware, models, sources)."""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import check_format, table_out

catalog_app = typer.Typer(help="Inspect the bundled catalogs (hardware, models, sources).", no_args_is_help=True)


@catalog_app.command("list")
def catalog_list(
    section: str = typer.Argument("all", help="all | hardware | models | sources"),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """List catalog entries. Example: wseplan catalog list hardware"""
    from ..errors import InputError

    check_format(fmt)
    cat = O.load_catalog(catalog)
    rows = []
    if section not in ("all", "hardware", "models", "sources"):
        raise InputError(f"section: unknown {section!r}; use all, hardware, models or sources")
    if section in ("all", "hardware"):
        for k, w in cat.wafers.items():
            rows.append({"section": "wafer", "key": k, "name": w.name, "aliases": ", ".join(w.aliases + [w.system])})
        for k, s in cat.systems.items():
            rows.append({"section": "system", "key": k, "name": s.name, "aliases": ", ".join(s.aliases)})
        for k, g in cat.gpus.items():
            rows.append({"section": "gpu", "key": k, "name": g.name, "aliases": ", ".join(g.aliases)})
    if section in ("all", "models"):
        for k, m in cat.models.items():
            rows.append({"section": "model", "key": k, "name": m.name, "aliases": ", ".join(m.aliases)})
        for k, m in cat.generic_models.items():
            rows.append({"section": "generic_model", "key": k, "name": m.name, "aliases": ", ".join(m.aliases)})
    if section in ("all", "sources"):
        for k, s in cat.sources.items():
            rows.append({"section": "source", "key": k, "name": s.title, "aliases": s.url or ""})
    table_out(rows, fmt, title=f"catalog: {section}")


@catalog_app.command("show")
def catalog_show(
    name: str = typer.Argument(..., help="A hardware key, model name or alias, or a source id."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Show one entry with every number's value, SI value, source and basis. Example: wseplan catalog show h100"""
    from ..catalog.schema import Quantity
    from ..errors import InputError, suggest

    check_format(fmt)
    cat = O.load_catalog(catalog)
    key = name.lower()
    entry = None
    hw = cat.hardware_keys()
    if key in hw:
        sec, k = hw[key]
        entry = getattr(cat, sec)[k]
    elif key in cat.sources:
        entry = cat.sources[key]
    else:
        try:
            sec, k = cat.resolve_model_name(name)
            entry = getattr(cat, sec)[k]
        except InputError:
            names = list(hw) + list(cat.sources) + list(cat._aliases(("models",)))
            raise InputError(f"name: unknown catalog entry {name!r}{suggest(name, names)}; see `wseplan catalog list`") from None
    rows = []
    for fname in type(entry).model_fields:
        v = getattr(entry, fname)
        items = [(fname, v)] if not isinstance(v, dict) else [(f"{fname}.{a}", b) for a, b in v.items()]
        for label, q in items:
            if isinstance(q, Quantity):
                rows.append({"field": label, "value": str(q.value), "si": q.si, "basis": q.basis,
                             "source": ", ".join(q.source_ids), "note": q.note or ""})
            elif not isinstance(q, (list, dict)) or label == "aliases":
                rows.append({"field": label, "value": str(q), "si": None, "basis": "", "source": "", "note": ""})
    table_out(rows, fmt, title=name)


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
