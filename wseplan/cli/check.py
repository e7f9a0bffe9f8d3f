"""`wseplan check CLAIMS.yaml`: performance claims against hard physical bounds and wseplan's estimates."""
from __future__ import annotations

from typing import Optional

import typer

from ..report.formats import to_csv
from . import options as O
from .output import check_format, emit, json_out, print_report_table


def check_cmd(
    claims: str = typer.Argument(..., help="A claims YAML file with a top-level 'claims:' list."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Check performance claims against hard physical bounds and wseplan's estimates.

    Verdicts: impossible (names the bound it breaks), optimistic (better than the estimate by more than the
    validated error), consistent. Example: wseplan check studies/claims-examples.yaml --format json
    """
    from ..claims import check as check_fn
    from ..report.tables import claims_table

    check_format(fmt)
    cat = O.load_catalog(catalog)
    verdicts = check_fn(claims, catalog=cat)
    records = [v.to_record() for v in verdicts]
    if fmt == "json":
        json_out(records)
    elif fmt == "csv":
        emit(to_csv(records))
    elif fmt == "md":
        emit(claims_table(verdicts).to_markdown())
    else:
        print_report_table(claims_table(verdicts), title=f"claims: {claims}")


def register(app: typer.Typer) -> None:
    app.command("check")(check_cmd)
