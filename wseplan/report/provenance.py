"""What produced a number: the tool version and the dates of the catalog and prices it used.

Every JSON record the CLI prints and every study report states these, so that a memo can cite them:

- ``version``: the wseplan version (``wseplan --version``).
- ``catalog_date``: the newest ``date`` among the catalog's sources (``catalogs/sources.yaml`` plus any
  ``--catalog`` folder): the catalog is as current as the newest source it cites.
- ``prices_date``: the ``date:`` of the prices catalog in force (a ``--prices`` file with its own ``date:``
  replaces the bundled one's), or ``None`` when no price was used.

Report date (deterministic, so that the same study gives the same bytes): the study file's ``date:`` when it
has one; else the UTC date of ``SOURCE_DATE_EPOCH`` when that is set (the reproducible-builds convention);
else the newest of the catalog and prices dates, shown as "inputs as of". Never the wall clock.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone

from .. import __version__
from ..errors import InputError


def _date_key(d: str) -> tuple[int, ...]:
    parts = []
    for p in str(d).split("-")[:3]:
        try:
            parts.append(int(p))
        except ValueError:
            return (0,)
    return tuple(parts)


def catalog_date(catalog) -> str | None:
    """The newest source date of ``catalog`` (``'2026-11'``), or None when no source carries a date."""
    dates = [s.date for s in getattr(catalog, "sources", {}).values() if getattr(s, "date", None)]
    return max(dates, key=_date_key) if dates else None


def prices_date(files=(), catalog=None) -> str:
    """The date of the prices catalog in force with the ``--prices`` ``files`` merged on top."""
    from ..analytic.cost import load_prices

    return load_prices(list(files), catalog=catalog).date


def provenance(catalog=None, prices: str | None = None) -> dict:
    """``{tool, version, catalog_date, prices_date}`` for a record."""
    return {"tool": "wseplan", "version": __version__,
            "catalog_date": catalog_date(catalog) if catalog is not None else None, "prices_date": prices}


def source_date_epoch() -> str | None:
    """The UTC date (``YYYY-MM-DD``) of ``$SOURCE_DATE_EPOCH``, or None when unset."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None or raw == "":
        return None
    try:
        secs = int(raw)
        return datetime.fromtimestamp(secs, tz=timezone.utc).strftime("%Y-%m-%d")
    except (ValueError, OverflowError, OSError):
        raise InputError(f"SOURCE_DATE_EPOCH: must be whole seconds since 1970-01-01 UTC, got {raw[:40]!r}") from None


def report_date(study_date: str | None, catalog_date_: str | None, prices_date_: str | None) -> tuple[str, str]:
    """The report's date and where it came from (``study``, ``SOURCE_DATE_EPOCH`` or ``inputs``); see the
    module docstring for the rule."""
    if study_date:
        return study_date, "study"
    env = source_date_epoch()
    if env:
        return env, "SOURCE_DATE_EPOCH"
    dates = [d for d in (catalog_date_, prices_date_) if d]
    return (max(dates, key=_date_key) if dates else "undated"), "inputs"
