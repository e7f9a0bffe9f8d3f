"""`wseplan stream MODEL --target T`: a weight-streaming training step on wafers + MemoryX."""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import Rendered, Section, check_format, quantities, render


def stream_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-3-70b), a config.json or a layer-list YAML."),
    target: str = O.target_opt("A wafer target: cs3, wse3, cs2, cs3x16 (x N = data-parallel systems)."),
    batch: Optional[int] = O.batch_opt("Global batch [sequences per optimizer step] (default: catalog)."),
    context: Optional[int] = O.context_opt("Sequence length [tokens] (default: catalog)."),
    precision: str = O.precision_opt(),
    policy: str = O.policy_opt(),
    memoryx: Optional[str] = O.memoryx_opt("MemoryX capacity option (e.g. 12tb; default: the smallest that holds the weights and optimizer "
                                            "state)."),
    systems: Optional[int] = typer.Option(None, "--systems", "-n", help="Data-parallel systems behind SwarmX (default: the target's count or 1)."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Sequences per pass per system (default: as many as fit)."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Weight-streaming training step on wafers + MemoryX: step time, tokens/s, exposed load, utilisation, the
    batch window (streaming minimum vs SRAM maximum) and whether recompute or spill binds.

    Example: wseplan stream llama-3-70b --target cs3x4 --batch 512 --context 2048
    """
    from ..timing import stream as stream_fn

    check_format(fmt)
    cat = O.load_catalog(catalog)
    res = stream_fn(model, target, precision=precision, batch=batch, context=context, policy=policy,
                    memoryx_option=memoryx, num_systems=systems, micro_batch=micro_batch, catalog=cat)
    row = res.to_row()
    title = f"{res.model} on {res.num_systems} x {res.hardware}"
    rows = [row] if fmt == "md" else quantities(row)  # md: one wide row; table: quantity/value
    if res.max_tokens_on_wafer is None and fmt != "md":  # unbounded: said, not left out (review31 L3)
        rows.append({"quantity": "max tokens on wafer", "value": "unbounded (no activations to hold)"})
    render(Rendered(record=res.to_record(), csv_rows=[row], heading=f"Weight streaming: {title}",
                    sections=[Section(f"weight streaming: {title}", rows)], notes=list(res.notes)), fmt)

def register(app: typer.Typer) -> None:
    app.command("stream")(stream_cmd)
