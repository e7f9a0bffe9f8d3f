"""`wseplan catalog list|show`: inspect the bundled catalogs (hardware, models, sources)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError, suggest
from ..report.formats import fmt_field, safe_text, to_json
from . import options as O
from .output import check_format, emit, table_out

catalog_app = typer.Typer(help="Inspect the catalogs (hardware, models, sources, prices) and the schemas of the files "
                               "you can write. Example: wseplan catalog list hardware ; wseplan catalog show cs3",
                          no_args_is_help=True)
SECTIONS = ("all", "hardware", "models", "sources", "software", "prices")


@catalog_app.command("list")
def catalog_list(
    section: str = typer.Argument("all", help="all | hardware | models | sources | software | prices"),
    prices: Optional[list[str]] = O.prices_opt(),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """List catalog entries. Example: wseplan catalog list hardware ; wseplan catalog list software ; wseplan catalog
    list prices --prices my-quotes.yaml (your own quotes file; docs/catalogs.md shows one)"""
    check_format(fmt)
    if section not in SECTIONS:
        raise InputError(f"section: unknown {safe_text(section)!r}; use {', '.join(SECTIONS[:-1])} or {SECTIONS[-1]}")
    cat = O.load_catalog(catalog)
    if section == "prices":
        _list_prices(cat, list(prices or []), fmt)
        return
    if prices:
        raise InputError("--prices: applies to `wseplan catalog list prices`")
    rows = []
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
    if section in ("all", "software"):  # the profiles `--software NAME` takes (docs/software-profiles.md)
        from ..catalog.software import load_software

        for k, p in sorted(load_software(cat).items()):
            tags = [f"family {p.family}"] + (["default"] * p.default) + ([f"calibrated as {p.calibrated_as}"]
                                                                          if p.calibrated_as else [])
            rows.append({"section": "software", "key": k, "name": " ".join(p.description.split()), "aliases": ", ".join(tags)})
    table_out(rows, fmt, title=f"catalog: {section}")


@catalog_app.command("show")
def catalog_show(
    name: str = typer.Argument(..., help="A hardware key or alias (a system key shows the system), a MemoryX, SwarmX or "
                                         "software profile key, a model name or alias, or a source id."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Show one entry with every number's value, SI value, source and basis. Example: wseplan catalog show h100 ;
    wseplan catalog show cs3 ; wseplan catalog show memoryx-cs3 ; wseplan catalog show wafer-production"""
    from ..catalog.software import load_software

    check_format(fmt)
    cat = O.load_catalog(catalog)
    key = name.lower()
    hw = cat.hardware_keys()
    systems = {a.lower(): k for k, sysm in cat.systems.items() for a in [k, *sysm.aliases]}
    entry = None
    for section in (cat.memoryx, cat.swarmx, load_software(cat)):
        if key in section:
            entry = section[key]
    if entry is not None:
        pass
    elif key in systems:  # a system's own names show the system (power, rack space, I/O); its wafer is `wse3` ...
        entry = cat.systems[systems[key]]
    elif key in hw:
        sec, k = hw[key]
        entry = getattr(cat, sec)[k]
    elif key in cat.sources:
        entry = cat.sources[key]
    else:
        try:
            sec, k = cat.resolve_model_name(name)
            entry = getattr(cat, sec)[k]
        except InputError:
            names = (list(hw) + list(cat.sources) + list(cat._aliases(("models",))) + list(cat.memoryx)
                     + list(cat.swarmx) + list(load_software(cat)))
            raise InputError(f"name: unknown catalog entry {name!r}{suggest(name, names)}; see `wseplan catalog list`") from None
    table_out(_show_rows(entry), fmt, title=name)


def _show_rows(entry, prefix: str = "") -> list[dict]:
    """One row per field of ``entry``: a number with its SI value, basis and source; nested entries (a software
    profile's engine, a MemoryX's capacity options) flattened as ``outer.inner``."""
    from pydantic import BaseModel

    from ..catalog.schema import Quantity

    rows = []
    for fname in type(entry).model_fields:
        v = getattr(entry, fname)
        items = [(prefix + fname, v)] if not isinstance(v, dict) else [(f"{prefix}{fname}.{a}", b) for a, b in v.items()]
        for label, q in items:
            if isinstance(q, Quantity):
                rows.append({"field": label, "value": str(q.value), "si": q.si, "basis": q.basis,
                             "source": ", ".join(q.source_ids), "note": q.note or ""})
            elif isinstance(q, BaseModel):
                rows += _show_rows(q, label + ".")
            elif q is None:  # an unset field: null in JSON, empty in CSV, a dash in the table (audit31b L2: "None")
                rows.append({"field": label, "value": None, "si": None, "basis": "", "source": "", "note": ""})
            elif not isinstance(q, (list, dict)) or label.endswith("aliases") or label.endswith("source"):
                shown = ", ".join(map(str, q)) if isinstance(q, list) else str(q)
                rows.append({"field": label, "value": shown, "si": None, "basis": "", "source": "", "note": ""})
    return rows


def _list_prices(cat, files: list[str], fmt: str) -> None:
    """One row per cost input of the prices in force (bundled, with the --prices files merged on top)."""
    from ..analytic.cost import _iter_quantities, load_prices
    from ..report.tables import basis_label

    pr = load_prices(files, catalog=cat)
    rows = []
    for where, q in _iter_quantities(pr):
        name = where.rsplit(".", 1)[-1]
        human = fmt != "json" and fmt != "csv"
        show = (lambda v: fmt_field(name, v)) if human else (lambda v: v)
        rows.append({"key": where, "value": show(q.si), "low": show(q.bound("low")), "high": show(q.bound("high")),
                     "basis": basis_label(q.basis, q.source_ids if q.cites_ids else (), cat.sources) if human else q.basis,
                     "source": ", ".join(q.source_ids), "note": q.note or ""})
    table_out(rows, fmt, title=f"prices dated {pr.date} ({', '.join(Path(f).name for f in pr.files)})", prices=files)


@catalog_app.command("schema")
def catalog_schema(
    kind: str = typer.Argument(..., help="hardware | model | sources | defaults | catalog | price | study | demand | "
                                         "sweep | claims"),
) -> None:
    """Print the JSON Schema of a file you can write (from the pydantic models that read it).

    Example: wseplan catalog schema price > price.schema.json ; wseplan catalog schema hardware
    """
    from ..report.schemas import json_schema

    emit(to_json(json_schema(kind)))


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
