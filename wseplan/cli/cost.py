"""`wseplan cost MODEL --target T`: TCO per system-hour, $/M tokens, $/training run, J/token, power, space.

The record is documented in docs/cli-output.md. scipy loads only inside the command (the Monte Carlo).
"""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import check_format, emit, notes_out, print_table, rich_table, to_markdown


def cost_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b) or a config.json path."),
    target: str = O.target_opt("<hardware key>[x<N>]: cs3x4, h100-sxmx8 … (no count: the fewest that fit)."),
    phase: str = O.phase_opt("serve", "serve (prefill + decode) | train."),
    precision: str = O.precision_opt(),
    batch: Optional[int] = O.batch_opt("Serve: concurrent requests; train: sequences per step."),
    context: Optional[int] = O.context_opt("Serve: prompt tokens; train: sequence length."),
    output_tokens: Optional[int] = O.output_tokens_opt(),
    train_tokens: Optional[float] = O.train_tokens_opt(),
    memoryx: Optional[str] = O.memoryx_opt(),
    set_: Optional[list[str]] = O.set_opt(),
    prices: Optional[list[str]] = O.prices_opt(),
    uncertainty: int = O.uncertainty_opt(),
    seed: int = O.seed_opt(),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """TCO per system-hour, $/M tokens (input and output), $/training run, J/token, power and rack space.

    Example: wseplan cost llama-3.1-70b --target cs3x4 --batch 8 --context 2048 --uncertainty 2000 ;
    wseplan cost llama-3.1-70b --target h100-sxmx8 --set electricity_usd_per_kwh=0.12 --format json
    """
    from ..analytic.cost import cost, parse_overrides

    check_format(fmt)
    cat = O.load_catalog(catalog)
    res = cost(model, target, phase=phase, precision=precision, batch=batch, context=context,
               output_tokens=output_tokens, train_tokens=train_tokens, overrides=parse_overrides(set_),
               prices_files=list(prices or []), uncertainty=uncertainty, seed=seed, memoryx_option=memoryx, catalog=cat)
    render_cost(res, fmt)


def render_cost(res, fmt: str) -> None:
    from ..report import formats as F

    if fmt == "json":
        emit(F.to_json(res.to_record()))
        return
    if fmt == "csv":
        emit(F.to_csv([res.to_row()]))
        return
    rows = [{k: v for k, v in m.model_dump().items() if v is not None} for m in res.metrics]
    params = [{"input": p.name, "value": p.value, "low": p.low, "high": p.high, "basis": p.basis,
               "source": ", ".join(p.source)} for p in res.params]
    torn = [{"input": r.param, "low": r.low, "high": r.high, f"{r.metric} at low": r.metric_at_low,
             f"{r.metric} at high": r.metric_at_high, "swing": r.swing} for r in res.tornado]
    title = f"Cost: {res.model} on {res.target} ({res.phase}, batch {res.batch}, context {res.context}, prices {res.prices_date})"
    if fmt == "md":
        text = f"## {title}\n\n" + to_markdown(rows) + "\n### Inputs\n\n" + to_markdown(params)
        if torn:
            text += f"\n### Sensitivity of {res.headline_metric} (tornado)\n\n" + to_markdown(torn)
        emit(text)
    else:
        tables = [rich_table(rows, title=title), rich_table(params, title="inputs (low / value / high)")]
        if torn:
            tables.append(rich_table(torn[:12], title=f"sensitivity of {res.headline_metric} (tornado)"))
        print_table(*tables)
    notes_out(res.notes)


def register(app: typer.Typer) -> None:
    app.command("cost")(cost_cmd)
