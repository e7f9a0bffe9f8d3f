"""Commands ``compare``, ``report`` and ``check`` (records documented in docs/cli-output.md)."""
from __future__ import annotations

from typing import Optional

import typer

_CHECK_COLUMNS = ["id", "verdict", "bound", "bound_value", "claimed_value", "estimate", "margin", "reason"]


def register(app: typer.Typer) -> None:
    from wseplan.cli import CatalogOpt, FormatOpt

    @app.command()
    def compare(
        model: str = typer.Argument(..., help="Catalog model name/alias, e.g. llama-3-70b."),
        targets: str = typer.Option("wse3,cs3x4,h100x8,h200x8,b200x8", "--targets", "-t",
                                    help="Comma-separated targets <hardware key>[x<N>]."),
        phase: str = typer.Option("decode", "--phase", help="train | prefill | decode"),
        precision: str = typer.Option("bf16", "--precision", "-p", help="Weight/compute format."),
        batch: Optional[int] = typer.Option(None, "--batch", "-b", help="Sequences in flight (default 1)."),
        context: Optional[int] = typer.Option(None, "--context", "-c", help="Tokens per sequence / KV length."),
        output_tokens: Optional[int] = typer.Option(None, "--output-tokens", help="Inference: tokens generated per request."),
        train_tokens: Optional[float] = typer.Option(None, "--train-tokens", help="Train: tokens of the whole run (for $/run)."),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="Pin a cost input, NAME=VALUE (repeatable), as `wseplan cost --set`."),
        uncertainty: int = typer.Option(0, "--uncertainty", help="Monte Carlo samples of the cost inputs (adds P10/P50/P90 $/M tokens)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the Monte Carlo."),
        fmt: str = FormatOpt,
        catalog: Optional[list[str]] = CatalogOpt,
    ) -> None:
        """Side by side: fit, time, throughput, bottleneck, power, $/hour, $/M tokens or $/run, J/token.

        Example: wseplan compare llama-3-70b --targets wse3,cs3x4,h100x8,h200x8,b200x8 --phase decode
        """
        from wseplan.analytic.cost import parse_overrides
        from wseplan.cli import _catalog, _check_format, _emit
        from wseplan.compare import compare as compare_fn
        from wseplan.errors import InputError

        _check_format(fmt)
        if uncertainty < 0 or uncertainty == 1:
            raise InputError(f"--uncertainty: sample count must be 0 or an integer >= 2, got {uncertainty}")
        cat = _catalog(catalog)
        names = [t.strip() for t in targets.split(",") if t.strip()]
        res = compare_fn(model, names, phase=phase, precision=precision, batch=batch, context=context,
                         output_tokens=output_tokens, train_tokens=train_tokens, catalog=cat,
                         overrides=parse_overrides(set_), uncertainty=uncertainty, seed=seed)
        if fmt == "json":
            from wseplan.report.formats import to_json

            _emit(to_json(res.to_record()))
        elif fmt == "csv":
            _emit(res.table().to_csv())
        notes = list(res.notes) + [f"{r.target}: {n}" for r in res.rows for n in r.notes]
        if fmt == "md":
            _emit(f"## {res.model}: {res.phase}, {res.precision}\n\n" + res.table().to_markdown()
                  + "".join(f"\n- {n}" for n in notes) + ("\n" if notes else ""))
        elif fmt == "table":
            _print_table(res.table(), title=f"{res.model}: {res.phase}, {res.precision}, batch {res.batch}, "
                                            f"context {res.context}")
            for n in notes:
                _emit(f"note: {n}\n")

    @app.command()
    def report(
        study: str = typer.Argument(..., help="A study YAML file (see studies/)."),
        out: Optional[str] = typer.Option(None, "--out", "-o", help="Output folder (default reports/<study name>/)."),
        fmt: str = FormatOpt,
        catalog: Optional[list[str]] = CatalogOpt,
    ) -> None:
        """Write a Markdown report with tables, CSVs and PNG plots for STUDY (atomically).

        Example: wseplan report studies/serve-llama3-70b.yaml --out reports/serve-llama3-70b
        """
        from wseplan.cli import _catalog, _check_format, _emit
        from wseplan.report.study import run_study, write_report

        _check_format(fmt)
        cat = _catalog(catalog)
        result = run_study(study, catalog=cat)
        path = write_report(result, out)
        rows = [{"file": name, "bytes": len(data)} for name, data in sorted(result.files().items())]
        if fmt == "json":
            from wseplan.report.formats import to_json

            _emit(to_json({"study": result.study.name, "out": str(path), "answer": result.answer, "files": rows}))
        elif fmt in ("csv", "md"):
            from wseplan.report.formats import to_csv, to_markdown

            _emit(to_csv(rows) if fmt == "csv" else to_markdown(rows))
        else:
            _emit(f"{result.answer}\n\nwrote {len(rows)} files to {path}\n")

    @app.command()
    def check(
        claims: str = typer.Argument(..., help="A claims YAML file with a top-level 'claims:' list."),
        fmt: str = FormatOpt,
        catalog: Optional[list[str]] = CatalogOpt,
    ) -> None:
        """Check performance claims against hard physical bounds and wseplan's estimates.

        Verdicts: impossible (names the bound it breaks), optimistic (better than the estimate by more than the
        validated error), consistent. Example: wseplan check studies/claims-examples.yaml --format json
        """
        from wseplan.claims import check as check_fn
        from wseplan.cli import _catalog, _check_format, _emit

        _check_format(fmt)
        cat = _catalog(catalog)
        verdicts = check_fn(claims, catalog=cat)
        records = [v.to_record() for v in verdicts]
        if fmt == "json":
            from wseplan.report.formats import to_json

            _emit(to_json(records))
            return
        table = claims_table(verdicts)
        if fmt == "csv":
            from wseplan.report.formats import to_csv

            _emit(to_csv(records))
        elif fmt == "md":
            _emit(table.to_markdown())
        else:
            _print_table(table, title=f"claims: {claims}")


def claims_table(verdicts):
    """Verdicts as a report table (values shown with readable units)."""
    from wseplan.report.markdown import Column, Table, fmt_quantity

    rows = []
    for v in verdicts:
        unit = v.bound_unit or v.unit
        rows.append({
            "id": v.id, "verdict": v.verdict, "bound": v.bound or "",
            "bound_value": fmt_quantity(v.bound_value, unit) if v.bound_value is not None else "",
            "claimed": _show(v.claimed_value, v.unit), "estimate": _show(v.estimate, v.unit),
            "margin": v.margin, "reason": v.reason,
        })
    cols = [Column("id", "claim"), Column("verdict", "verdict"), Column("bound", "bound broken"),
            Column("bound_value", "bound value"), Column("claimed", "claimed"), Column("estimate", "wseplan estimate"),
            Column("margin", "margin [x]"), Column("reason", "reason")]
    return Table(name="claims", title="Claims and verdicts", columns=cols, rows=rows)


def _show(v, unit: str) -> str:
    from wseplan.report.markdown import fmt_quantity

    if v is None:
        return ""
    if isinstance(v, bool):
        return "fits" if v else "does not fit"
    return fmt_quantity(v, unit)


def _print_table(table, title: str) -> None:
    from rich.markup import escape
    from rich.table import Table as RichTable

    from wseplan.report.formats import print_table
    from wseplan.report.markdown import fmt_num

    t = RichTable(title=escape(title))
    for c in table.columns:
        t.add_column(escape(c.header), overflow="fold")
    for r in table.rows:
        t.add_row(*[escape(fmt_num(table._value(r, c))) for c in table.columns])
    print_table(t)
