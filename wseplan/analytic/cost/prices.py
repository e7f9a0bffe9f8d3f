"""The prices catalog: ``catalogs/prices/*.yaml`` (dated, cited, low/value/high) read into a frozen :class:`Prices`,
user ``--prices`` files merged on top, and the ranges every cost input keeps."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from ...catalog.load import default_catalog_dir, read_yaml
from ...catalog.schema import Frozen, Quantity
from ...errors import CatalogError, InputError, suggest, validation_detail
from ...units import MAX_ABS_SI


class SitePrices(Frozen):
    electricity_usd_per_kwh: Quantity
    pue: Quantity
    amortization_years: Quantity
    installation_frac: Quantity
    maintenance_frac_per_year: Quantity
    facility_usd_per_kw_month: Quantity
    utilization_frac: Quantity
    busy_power_frac: Quantity
    idle_power_frac: Quantity
    rack_units_per_rack: Quantity
    train_tokens_per_param: Quantity
    #: the buyer's cost of capital [fraction/year]; 0: straight-line depreciation, no financing (the bundled value)
    cost_of_capital_frac_per_year: Quantity


class HardwarePrice(Frozen):
    capex_usd: Quantity
    network_frac: Quantity
    cloud_usd_per_device_hour: Quantity | None = None


class MemoryXPrice(Frozen):
    dram_usd_per_tb: Quantity
    flash_usd_per_tb: Quantity


class ServicePrice(Frozen):
    hardware: str
    input_usd_per_mtok: Quantity
    output_usd_per_mtok: Quantity


class Prices(Frozen):
    """All cost inputs of one dated prices catalog."""

    date: str
    site: SitePrices
    hardware: dict[str, HardwarePrice]
    memoryx: MemoryXPrice
    service_prices: dict[str, ServicePrice] = {}
    files: list[str] = []


def default_prices_dir() -> Path:
    return default_catalog_dir() / "prices"


def _deep_merge(base: dict, extra: dict, *, user: str | None = None) -> dict:
    """``extra`` over ``base``, mapping by mapping. ``user`` (a user's file): a number it gives a new ``value`` is
    the user's alone, with the file's range, source, basis and note or none (audit28b M2: a quote kept the bundled
    entry's source, note and range, so 15 c/kWh read as EIA's 8.32 c and a quote below the bundled low was refused);
    an entry without a ``value`` (a range, say) still updates the bundled one field by field."""
    out = dict(base)
    for k, v in extra.items():
        if user and isinstance(v, dict) and "value" in v and isinstance(out.get(k), dict) and "value" in out[k]:
            out[k] = {"source": f"--prices {user}", "basis": "user", **v}
        elif isinstance(v, dict) and isinstance(out.get(k), dict) and k != "value":
            out[k] = _deep_merge(out[k], v, user=user)
        else:
            out[k] = v
    return out


def load_prices(files: list[str | Path] | tuple = (), *, catalog=None) -> Prices:
    """Read the bundled ``catalogs/prices/*.yaml`` (newest date last wins) and merge ``files`` on top.

    A user file has the same layout and may hold any subset of it. A number it gives a ``value`` is its own: the
    range, source, basis and note are the file's (without them: no range, source ``--prices FILE``, basis ``user``),
    never the bundled entry's; an entry without a value updates the bundled one field by field. Source ids are
    checked against ``catalog.sources`` when a catalog is given.
    """
    paths = sorted(default_prices_dir().glob("*.y*ml"))
    raw: dict = {}
    used = []
    bundled = len(paths)
    for i, p in enumerate([*paths, *[Path(f) for f in files]]):
        if not os.path.lexists(p):
            raise InputError(f"--prices: file {p} not found; check the path")
        data = read_yaml(p)
        if data is None:
            continue
        if not isinstance(data, dict):
            raise CatalogError(f"{p}: top level must be a mapping with keys date, site, hardware, memoryx, service_prices")
        raw = _deep_merge(raw, data, user=None if i < bundled else Path(p).name)
        used.append(str(p))
    if not raw:
        raise CatalogError(f"no prices catalog found in {default_prices_dir()}; add a prices YAML file")
    raw["files"] = used
    try:
        prices = Prices.model_validate(raw)
    except (ValidationError, InputError) as exc:
        if isinstance(exc, ValidationError):
            loc, msg = validation_detail(exc)
            raise CatalogError(f"prices ({used[-1]}): {loc}: {msg}") from None
        raise CatalogError(f"prices ({used[-1]}): {exc}") from None
    for where, q in _iter_quantities(prices):  # a file's numbers keep the ranges --set keeps (no negative price)
        for bound in ("value", "low", "high"):
            v = q.si if bound == "value" else (q.bound(bound) if getattr(q, bound) is not None else None)
            if v is not None:
                try:
                    _check_value(where.rsplit(".", 1)[-1], v, where=f"prices ({used[-1]})", label=f"{where}.{bound}")
                except InputError as exc:
                    raise CatalogError(str(exc)) from None
    if catalog is not None:
        known = catalog.all_source_ids()
        for where, q in _iter_quantities(prices):
            for sid in (q.source_ids if q.cites_ids else ()):  # basis user/quote: a free-text source
                if sid not in known:
                    raise CatalogError(f"prices: {where}: unknown source id {sid!r}{suggest(sid, known)}; add it to "
                                       "sources.yaml, or give basis user or quote with a free-text source")
    return prices


def _iter_quantities(prices: Prices):
    for name in SitePrices.model_fields:
        yield f"site.{name}", getattr(prices.site, name)
    for hw, hp in prices.hardware.items():
        for name in HardwarePrice.model_fields:
            q = getattr(hp, name)
            if q is not None:
                yield f"hardware.{hw}.{name}", q
    for name in MemoryXPrice.model_fields:
        yield f"memoryx.{name}", getattr(prices.memoryx, name)
    for m, sp in prices.service_prices.items():
        yield f"service_prices.{m}.input_usd_per_mtok", sp.input_usd_per_mtok
        yield f"service_prices.{m}.output_usd_per_mtok", sp.output_usd_per_mtok



def _check_value(name: str, val: float, where: str = "--set", label: str | None = None) -> None:
    """The ranges every cost input keeps, from ``--set`` or from a prices file (``where`` names it, ``label`` the
    field)."""
    what = label or name
    if isinstance(val, bool) or not isinstance(val, (int, float, np.integer, np.floating)) or not math.isfinite(val):
        raise InputError(f"{where}: {what} must be a finite number, got {val!r}")
    if name.endswith("_frac") and not (0.0 <= val <= 1.0) and name != "network_frac":
        raise InputError(f"{where}: {what} is a fraction and must be in [0, 1], got {val}")
    if name in ("cost_of_capital_frac_per_year", "maintenance_frac_per_year") and val > 1.0:
        raise InputError(f"{where}: {what} is a yearly rate and must be in [0, 1] (0.08 for 8%), got {val}")
    if name in ("utilization_frac", "amortization_years", "pue", "rack_units_per_rack") and val <= 0:
        raise InputError(f"{where}: {what} must be positive, got {val}")
    if name in ("capex_usd", "train_tokens_per_param") and val <= 0:  # hardware is never priced at $0, a run never
        # trains no tokens (--train-tokens 0 is refused as well; audit33a L3)
        raise InputError(f"{where}: {what} must be positive, got {val}"
                         + ("; hardware without a price is left unpriced, not free" if name == "capex_usd" else ""))
    if name == "pue" and val < 1.0:
        raise InputError(f"{where}: {what} must be >= 1 (facility power / IT power), got {val}")
    # physical upper ends (audit37b F6: pue 1e9 and 1e9 years were priced): the worst data centres report a PUE near
    # 2.5 (Uptime Institute surveys: industry average 1.5-1.6), and no hardware is written off over a century
    if name == "pue" and val > 5.0:
        raise InputError(f"{where}: {what} must be at most 5 (facility power / IT power; typical 1.1-1.6), got {val:g}")
    if name == "amortization_years" and val > 100.0:
        raise InputError(f"{where}: {what} must be at most 100 years (typical 3-6), got {val:g}")
    if val < 0:
        raise InputError(f"{where}: {what} must not be negative, got {val}")
    if name in ("memoryx_node_dram_bytes", "memoryx_node_flash_bytes") and val < 1e9:
        raise InputError(f"{where}: {what} is the memory of one MemoryX server and must be at least 1e9 B, got {val:g}")
    if val > MAX_ABS_SI:  # beyond it the costs overflow to infinity
        raise InputError(f"{where}: {what} must be at most {MAX_ABS_SI:g}, got {val:g}")
