"""`wseplan scale MODEL --targets wse3,h100`: training efficiency from 1 to N systems."""
from __future__ import annotations

from typing import Optional

import typer

from ..errors import InputError
from . import options as O
from .output import check_format, table_out


def scale_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias, a config.json or a layer-list YAML."),
    targets: str = O.targets_opt("wse3,h100", "Comma-separated hardware keys: wse3,h100 ..."),
    max_systems: int = typer.Option(64, "--max-systems", "-n", help="Largest count of CS systems / GPU nodes in the sweep."),
    batch: Optional[int] = O.batch_opt("Global batch [sequences], fixed across the sweep (default: the training "
                                       "default of catalogs/defaults.yaml, as time --phase train)."),
    context: Optional[int] = O.context_opt("Sequence length [tokens] (default: the training default, as time "
                                           "--phase train)."),
    precision: str = O.precision_opt(),
    policy: str = O.policy_opt(),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Training efficiency from 1 to N systems: WSE behind SwarmX vs GPU data parallel (one row per count).

    Example: wseplan scale llama-3-8b --targets wse3,h100 --max-systems 64 --batch 1024 --format csv
    """
    from ..scale import scaling_frame
    from .output import notes_out
    from ..fit import resolve_model
    from ..targets import parse_target, split_targets

    check_format(fmt)
    from .bounds import MAX_SCALE_SYSTEMS

    if max_systems < 1 or max_systems > MAX_SCALE_SYSTEMS:
        raise InputError(f"--max-systems: must be between 1 and {MAX_SCALE_SYSTEMS:,}, got {max_systems}")
    cat = O.load_catalog(catalog)
    m = resolve_model(model, cat)
    ts, named = [], {}
    for k in split_targets(targets, "wse3,h100"):
        t = parse_target(k, cat)
        if t.count is not None:
            raise InputError(f"--targets: give hardware keys without a count ({k!r}); the sweep sets the count via --max-systems")
        if t.key in named:
            raise InputError(f"--targets: {named[t.key]!r} and {k!r} name the same hardware ({t.key}); give it once")
        named[t.key] = k
        ts.append(t)
    df = scaling_frame(m, ts, cat, precision=precision, global_batch=batch, context=context, max_systems=max_systems,
                       policy=policy)
    rows = [{k: (None if v != v else v) if isinstance(v, float) else v for k, v in r.items()}
            for r in df.to_dict(orient="records")]
    table_out(rows, fmt, title=f"scaling: {df.attrs['model']}, global batch {df.attrs['global_batch']} x "
                               f"{df.attrs['context']} tokens")
    if df.attrs.get("notes") and fmt == "table":  # where a target's rows stop below --max-systems, and why
        notes_out(list(df.attrs["notes"]))
    above = sorted({r["target"] for r in rows if (r.get("efficiency_frac") or 0.0) > 1.0 + 1e-9})
    if above and fmt == "table":  # audit31a L3: read as superlinear scaling
        notes_out([f"efficiency above 100% ({', '.join(above)}): each count's speed per system against the smallest "
                     "count that fits (efficiency_baseline_systems), whose memory leaves it a slower layout; more "
                     "systems free memory for a faster one (the layout column shows which), not superlinear "
                     "communication"])


def register(app: typer.Typer) -> None:
    app.command("scale")(scale_cmd)
