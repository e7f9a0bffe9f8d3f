"""`wseplan stream` (weight-streaming training on wafers) and `wseplan scale` (efficiency vs system count)."""
from __future__ import annotations

from typing import Optional

import typer

_FMT = typer.Option("table", "--format", "-f", help="Output: table | json | csv | md.")
_CAT = typer.Option(None, "--catalog", help="Folder of YAML files that override or add catalog entries (repeatable).")
_PREC = typer.Option("bf16", "--precision", "-p", help="fp32 | tf32 | bf16 | fp16 | fp8 | int8 | int4 | fp4")
_POLICY = typer.Option("auto", "--policy", help="Activations for the backward pass: auto | store | checkpoint | recompute | spill.")


def stream(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-3-70b), a config.json or a layer-list YAML."),
    target: str = typer.Option(..., "--target", "-t", help="A wafer target: cs3, wse3, cs2, cs3x16 (x N = data-parallel systems)."),
    batch: Optional[int] = typer.Option(None, "--batch", "-b", help="Global batch [sequences per optimizer step] (default: catalog)."),
    context: Optional[int] = typer.Option(None, "--context", "-c", help="Sequence length [tokens] (default: catalog)."),
    precision: str = _PREC,
    policy: str = _POLICY,
    memoryx: Optional[str] = typer.Option(None, "--memoryx", help="MemoryX capacity option (e.g. 12tb); sets the DRAM/flash tier."),
    systems: Optional[int] = typer.Option(None, "--systems", "-n", help="Data-parallel systems behind SwarmX (default: the target's count or 1)."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Sequences per pass per system (default: as many as fit)."),
    fmt: str = _FMT,
    catalog: Optional[list[str]] = _CAT,
) -> None:
    """Weight-streaming training step on wafers + MemoryX: step time, tokens/s, exposed load, utilisation, the
    batch window (streaming minimum vs SRAM maximum) and whether recompute or spill binds.

    Example: wseplan stream llama-3-70b --target cs3x4 --batch 512 --context 2048
    """
    from ..cli import _catalog, _check_format, _emit
    from ..report import formats as F
    from ..timing import stream as stream_fn

    _check_format(fmt)
    cat = _catalog(catalog)
    res = stream_fn(model, target, precision=precision, batch=batch, context=context, policy=policy,
                    memoryx_option=memoryx, num_systems=systems, micro_batch=micro_batch, catalog=cat)
    if fmt == "json":
        _emit(F.to_json(res.to_record()))
    elif fmt == "csv":
        _emit(F.to_csv([res.to_row()]))
    elif fmt == "md":
        _emit(f"## Weight streaming: {res.model} on {res.num_systems} x {res.hardware}\n\n" + F.to_markdown([res.to_row()]))
    else:
        rows = [{"quantity": k, "value": v} for k, v in res.to_row().items()]
        F.print_table(F.rich_table(rows, title=f"weight streaming: {res.model} on {res.num_systems} x {res.hardware}"))
        for n in res.notes:
            _emit(f"note: {n}\n")


def scale(
    model: str = typer.Argument(..., help="Catalog model name/alias, a config.json or a layer-list YAML."),
    targets: str = typer.Option("wse3,h100", "--targets", "-t", help="Comma-separated hardware keys: wse3,h100 ..."),
    max_systems: int = typer.Option(64, "--max-systems", "-n", help="Largest count of CS systems / GPU nodes in the sweep."),
    batch: int = typer.Option(1024, "--batch", "-b", help="Global batch [sequences], fixed across the sweep."),
    context: int = typer.Option(2048, "--context", "-c", help="Sequence length [tokens]."),
    precision: str = _PREC,
    policy: str = _POLICY,
    fmt: str = _FMT,
    catalog: Optional[list[str]] = _CAT,
) -> None:
    """Training efficiency from 1 to N systems: WSE behind SwarmX vs GPU data parallel (one row per count).

    Example: wseplan scale llama-3-8b --targets wse3,h100 --max-systems 64 --batch 1024 --format csv
    """
    from ..scale import scaling_frame
    from ..cli import _catalog, _check_format, _table_out
    from ..errors import InputError
    from ..fit import resolve_model
    from ..targets import parse_target

    _check_format(fmt)
    if max_systems < 1 or max_systems > 4096:
        raise InputError(f"--max-systems: must be between 1 and 4096, got {max_systems}")
    cat = _catalog(catalog)
    m = resolve_model(model, cat)
    keys = [k.strip() for k in targets.split(",") if k.strip()]
    if not keys:
        raise InputError("--targets: give at least one hardware key, e.g. wse3,h100")
    ts = []
    for k in keys:
        t = parse_target(k, cat)
        if t.count is not None:
            raise InputError(f"--targets: give hardware keys without a count ({k!r}); the sweep sets the count via --max-systems")
        ts.append(t)
    df = scaling_frame(m, ts, cat, precision=precision, global_batch=batch, context=context, max_systems=max_systems,
                       policy=policy)
    rows = [{k: (None if v != v else v) if isinstance(v, float) else v for k, v in r.items()}
            for r in df.to_dict(orient="records")]
    _table_out(rows, fmt, title=f"scaling: {df.attrs['model']}, global batch {batch} x {context} tokens")


def register(app) -> None:
    app.command("stream")(stream)
    app.command("scale")(scale)
