"""The ``wseplan`` command line. Heavy libraries (pandas, scipy, pulp, matplotlib) load only inside the
commands that need them, so ``wseplan --help`` and ``wseplan fit`` start fast.

Errors: any :class:`~wseplan.errors.WseplanError` or usage error prints one red line and exits 2;
``--debug`` (or ``WSEPLAN_DEBUG=1``) shows the traceback instead.
"""
from __future__ import annotations

import os
import sys
from typing import Optional

# The CLI's numpy work is elementwise; OpenBLAS's thread pool only costs start-up time (~40 ms measured).
# Users can still set the variable themselves.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer

from .errors import InputError, WseplanError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Plan AI compute: does a model fit, how fast, how many systems, what cost — Cerebras WSE vs GPU clusters.\n\n"
    "Example: wseplan fit llama-70b --target wse3",
)
catalog_app = typer.Typer(help="Inspect the bundled catalogs (hardware, models, sources).", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")

_STATE = {"debug": False, "catalog_dirs": []}

FormatOpt = typer.Option("table", "--format", "-f", help="Output: table | json | csv | md.")
CatalogOpt = typer.Option(None, "--catalog", help="Folder of YAML files that override or add catalog entries (repeatable).")


def _check_format(fmt: str) -> str:
    from .report.formats import FORMATS

    if fmt not in FORMATS:
        raise InputError(f"--format: unknown {fmt!r}; use one of {', '.join(FORMATS)}")
    return fmt


def _catalog(dirs: Optional[list[str]]):
    from .catalog import load_catalog

    return load_catalog(list(dirs or []))


def _emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors.")) -> None:
    _STATE["debug"] = debug


# ---------------------------------------------------------------------------------------------
@app.command()
def fit(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b), a config.json path, or a layer-list YAML."),
    target: str = typer.Option(..., "--target", "-t", help="<hardware key>[x<N>]: wse3, cs3x4, h100x8, h200-sxmx16 …"),
    precision: str = typer.Option("bf16", "--precision", "-p", help="fp32 | tf32 | bf16 | fp16 | fp8 | int8 | int4 | fp4"),
    phase: str = typer.Option("decode", "--phase", help="train | prefill | decode | serve"),
    batch: Optional[int] = typer.Option(None, "--batch", "-b", help="Sequences (default: catalogs/defaults.yaml)."),
    context: Optional[int] = typer.Option(None, "--context", "-c", help="Tokens per sequence / KV length (default: catalogs/defaults.yaml)."),
    reserve: Optional[float] = typer.Option(None, "--reserve", help="Fraction of SRAM/HBM kept back (default: catalog)."),
    zero: Optional[int] = typer.Option(None, "--zero", help="GPU training: ZeRO stage 0-3 (default: searched)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="GPU training: none | selective | full (default: searched)."),
    memoryx: Optional[str] = typer.Option(None, "--memoryx", help="Wafer training: MemoryX capacity option (e.g. 12tb)."),
    fmt: str = FormatOpt,
    catalog: Optional[list[str]] = CatalogOpt,
) -> None:
    """Does MODEL fit TARGET? Devices needed, what binds, headroom, and the layer stages.

    Example: wseplan fit llama-70b --target wse3 ; wseplan fit llama-405b --target h100x16 --format json
    """
    from .fit import fit as fit_fn

    _check_format(fmt)
    cat = _catalog(catalog)
    res = fit_fn(model, target, precision=precision, phase=phase, batch=batch, context=context, reserve=reserve,
                 catalog=cat, zero_stage=zero, recompute=recompute, memoryx_option=memoryx)
    _render_fit(res, fmt)


def _render_fit(res, fmt: str) -> None:
    from .report import formats as F

    if fmt == "json":
        _emit(F.to_json(res.to_record()))
        return
    stage_rows = [s.model_dump() for s in res.stages]
    if fmt == "csv":
        _emit(F.to_csv([res.to_row()]))
        return
    summary = res.to_row()
    if fmt == "md":
        _emit(f"## Fit: {res.model} on {res.target}\n\n" + F.to_markdown([summary]) + "\n### Stages\n\n" + F.to_markdown(stage_rows))
        return
    from rich.table import Table

    t = Table(title=f"{res.model} on {res.target}", caption=f"{res.precision}, {res.phase}, batch {res.batch}, context {res.context}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    verdict = "[green]yes[/green]" if res.fits else "[red]no[/red]"
    t.add_row("fits", verdict)
    t.add_row("devices", str(res.num_devices))
    for k in ("capacity_bytes", "weights_bytes", "kv_cache_bytes", "activation_bytes", "optimizer_bytes", "total_bytes",
              "headroom_bytes", "shortfall_bytes"):
        label = k.replace("_bytes", "") + (" (per device)" if k in ("capacity_bytes", "headroom_bytes", "shortfall_bytes") else "")
        t.add_row(label, F.fmt_bytes(getattr(res, k)))
    t.add_row("binding", res.binding)
    t.add_row("max tokens in flight", f"{res.max_tokens_in_flight:,}")
    if res.layout:
        t.add_row("layout", " ".join(f"{k}={v}" for k, v in res.layout.items()))
    if res.memoryx:
        mx = res.memoryx
        t.add_row("MemoryX", f"{mx.option}: needs {F.fmt_bytes(mx.required_bytes)} of {F.fmt_bytes(mx.capacity_bytes)}")
    if res.streaming:
        s = res.streaming
        t.add_row("batch for compute-bound streaming", f">= {s.min_batch_compute_bound} ({s.min_tokens_compute_bound:,.0f} tokens)")
        t.add_row("batch the wafer holds", f"<= {s.max_batch_on_wafer} ({s.max_tokens_on_wafer:,.0f} tokens)")
    st = Table(title="stages (0-based inclusive transformer blocks)")
    for c in ("device", "layers", "embedding", "lm_head", "bytes"):
        st.add_column(c)
    for s in res.stages[:64]:
        st.add_row(str(s.device), f"{s.first_layer}-{s.last_layer}", "yes" if s.embedding else "", "yes" if s.lm_head else "", F.fmt_bytes(s.bytes))
    if len(res.stages) > 64:
        st.add_row("…", f"{len(res.stages) - 64} more", "", "", "")
    F.print_table(t, st)
    for n in res.notes:
        _emit(f"note: {n}\n")


# ---------------------------------------------------------------------------------------------
@catalog_app.command("list")
def catalog_list(
    section: str = typer.Argument("all", help="all | hardware | models | sources"),
    fmt: str = FormatOpt,
    catalog: Optional[list[str]] = CatalogOpt,
) -> None:
    """List catalog entries. Example: wseplan catalog list hardware"""
    from .report import formats as F

    _check_format(fmt)
    cat = _catalog(catalog)
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
    _table_out(rows, fmt, title=f"catalog: {section}")


@catalog_app.command("show")
def catalog_show(
    name: str = typer.Argument(..., help="A hardware key, model name or alias, or a source id."),
    fmt: str = FormatOpt,
    catalog: Optional[list[str]] = CatalogOpt,
) -> None:
    """Show one entry with every number's value, SI value, source and basis. Example: wseplan catalog show h100"""
    from .catalog.schema import Quantity
    from .errors import suggest

    _check_format(fmt)
    cat = _catalog(catalog)
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
    _table_out(rows, fmt, title=name)


def _table_out(rows: list[dict], fmt: str, title: str = "") -> None:
    from .report import formats as F

    if fmt == "json":
        _emit(F.to_json(rows))
    elif fmt == "csv":
        _emit(F.to_csv(rows))
    elif fmt == "md":
        _emit(F.to_markdown(rows))
    else:
        F.print_table(F.rich_table(rows, title=title))


# ---------------------------------------------------------------------------------------------
def _register_commands() -> None:
    from .commands import register_all

    register_all(app)


_register_commands()


def _one_line(msg: str) -> str:
    return " ".join(str(msg).split())


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app, turning errors into one line and exit status 2."""
    Exit, Abort, ClickException, NoArgsIsHelp = _click_exceptions()
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("WSEPLAN_DEBUG") == "1"
    try:
        rv = app(args=args, prog_name="wseplan", standalone_mode=False)
        if isinstance(rv, int) and not isinstance(rv, bool):  # typer.Exit(code) is returned, not raised
            return rv
    except Exit as exc:
        return getattr(exc, "exit_code", 0)
    except Abort:
        sys.stderr.write("error: aborted\n")
        return 2
    except NoArgsIsHelp as exc:  # `wseplan` or a group alone: show help, as --help does
        sys.stdout.write(str(getattr(exc, "ctx", None) and exc.ctx.get_help() or exc) + "\n")
        return 0
    except ClickException as exc:  # usage errors: bad option, missing argument
        if debug:
            raise
        sys.stderr.write(f"error: {_one_line(exc.format_message())} (see `wseplan {' '.join(a for a in args[:1] if not a.startswith('-'))} --help`)\n")
        return 2
    except WseplanError as exc:
        if debug:
            raise
        sys.stderr.write(_red(f"error: {_one_line(str(exc))}") + "\n")
        return 2
    return 0


def _click_exceptions():
    """Exit/Abort/ClickException/NoArgsIsHelpError from typer's vendored click (>= 0.20) or click itself."""
    try:
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
        from typer.exceptions import Abort, Exit
    except ImportError:  # older typer on top of click
        from click.exceptions import Abort, ClickException, Exit

        try:
            from click.exceptions import NoArgsIsHelpError
        except ImportError:
            NoArgsIsHelpError = type("NoArgsIsHelpError", (Exception,), {})
    return Exit, Abort, ClickException, NoArgsIsHelpError


def _red(text: str) -> str:
    return f"\x1b[31m{text}\x1b[0m" if sys.stderr.isatty() else text


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def console() -> None:  # pragma: no cover - the installed console script
    sys.exit(main())
