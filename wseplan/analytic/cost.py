"""Cost: TCO per system-hour, $/M tokens, $/training run, energy per token, power and rack space.

Three layers, top to bottom:

1. Pure keyword-only numpy functions (:func:`deployment_cost`, :func:`serving_cost`, :func:`training_cost`,
   :func:`rental_serving_cost`). They take time numbers as inputs, never call a time model, and accept
   scalars or arrays alike, so the same code evaluates the nominal case, a Monte Carlo sample or a tornado.
2. Inputs: :func:`load_prices` reads ``catalogs/prices/*.yaml`` (dated, cited, low/value/high) into a
   frozen :class:`Prices`; :func:`cost_params` resolves the named, overridable inputs of one target into
   :class:`Param` objects (``--set NAME=VALUE``).
3. Uncertainty: :func:`monte_carlo` (seeded, vectorized triangular sampling with scipy.stats) and
   :func:`tornado` (swing of an answer when each input moves from low to high).

The composition that calls the time model (``wseplan.timing.predict_time``) lives in :func:`cost`, the
Python API behind ``wseplan cost``.

Units: USD, W, J, s, h (hours only inside ``*_per_hour`` names), kWh only in ``electricity_usd_per_kwh``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from ..catalog.schema import Quantity
from ..errors import CatalogError, InputError, suggest, validation_detail
from ..units import MAX_ABS_SI

#: hours in a Julian year (365.25 d) [h]; a unit definition, not a catalog input
HOURS_PER_YEAR = 8766.0
#: seconds per hour [s]
S_PER_HOUR = 3600.0
#: metrics where a lower value is better (all of them are costs or energies)
SCHEMA_VERSION = 1
#: most Monte Carlo samples of the cost inputs (the cap study files have, wseplan.report.study.CostSpec): each
#: sample holds every input and output, ~1 KB, so the cap bounds memory at ~100 MB
MAX_UNCERTAINTY_SAMPLES = 100_000


# =============================================================================================
# 1. Pure functions
# =============================================================================================
def deployment_cost(*, num_systems, capex_per_system_usd, network_frac, extra_capex_usd, installation_frac,
                    amortization_years, maintenance_frac_per_year, peak_power_per_system_w, busy_power_frac,
                    idle_power_frac, utilization_frac, pue, electricity_usd_per_kwh, facility_usd_per_kw_month):
    """Annual and hourly cost of owning ``num_systems`` systems of one type.

    Parameters
    ----------
    num_systems : array_like
        Systems (CS-3) or nodes (8-GPU servers) [count].
    capex_per_system_usd : array_like
        Purchase price of one system or node [USD].
    network_frac : array_like
        Scale-out fabric (InfiniBand, SwarmX/Ethernet) as a share of system capex [fraction].
    extra_capex_usd : array_like
        Capex shared by the deployment (MemoryX) [USD].
    installation_frac : array_like
        One-time installation as a share of hardware capex, amortised with it [fraction].
    amortization_years : array_like
        Straight-line depreciation period [years].
    maintenance_frac_per_year : array_like
        Annual maintenance as a share of hardware capex [fraction/year].
    peak_power_per_system_w : array_like
        Peak IT power of one system or node [W].
    busy_power_frac, idle_power_frac : array_like
        Average draw while busy / idle as a share of peak [fraction].
    utilization_frac : array_like
        Share of hours the deployment does paid work [fraction, (0, 1]].
    pue : array_like
        Power usage effectiveness (facility power / IT power) [-].
    electricity_usd_per_kwh : array_like
        Electricity price [USD/kWh].
    facility_usd_per_kw_month : array_like
        Facility (colocation) charge per kW of provisioned peak IT power [USD/(kW month)].

    Returns
    -------
    dict of arrays
        ``hardware_capex_usd``, ``capex_usd`` (incl. installation), ``capex_usd_per_year``,
        ``maintenance_usd_per_year``, ``electricity_usd_per_year``, ``facility_usd_per_year``,
        ``total_usd_per_year``, ``usd_per_hour`` (per wall-clock hour owned), ``usd_per_busy_hour``,
        ``peak_it_power_w``, ``average_it_power_w``, ``busy_it_power_w``, ``peak_facility_power_w``.

    Notes
    -----
    hardware = n capex (1 + network) + extra;  capex = hardware (1 + installation);
    per year: capex / years + hardware maintenance + P_avg PUE 8766 h price + P_peak facility 12;
    P_avg = P_peak (u busy + (1 - u) idle). The cost of an hour of paid work is the yearly total over
    8766 u hours.

    References
    ----------
    Epoch AI, training-cost-trends (energy.py: PUE and average draw at 75% of server TDP), 2024.
    """
    n = np.asarray(num_systems, dtype=float)
    hardware = n * capex_per_system_usd * (1.0 + network_frac) + extra_capex_usd
    capex = hardware * (1.0 + installation_frac)
    capex_per_year = capex / amortization_years
    maintenance = hardware * maintenance_frac_per_year
    peak_w = n * peak_power_per_system_w
    avg_w = peak_w * (utilization_frac * busy_power_frac + (1.0 - utilization_frac) * idle_power_frac)
    electricity = avg_w * pue / 1000.0 * HOURS_PER_YEAR * electricity_usd_per_kwh
    facility = peak_w / 1000.0 * facility_usd_per_kw_month * 12.0
    total = capex_per_year + maintenance + electricity + facility
    per_hour = total / HOURS_PER_YEAR
    return {
        "hardware_capex_usd": hardware,
        "capex_usd": capex,
        "capex_usd_per_year": capex_per_year,
        "maintenance_usd_per_year": maintenance,
        "electricity_usd_per_year": electricity,
        "facility_usd_per_year": facility,
        "total_usd_per_year": total,
        "usd_per_hour": per_hour,
        "usd_per_busy_hour": per_hour / utilization_frac,
        "peak_it_power_w": peak_w,
        "average_it_power_w": avg_w,
        "busy_it_power_w": peak_w * busy_power_frac,
        "peak_facility_power_w": peak_w * pue,
    }


def serving_cost(*, usd_per_busy_hour, busy_it_power_w, pue, prefill_s, prompt_tokens, decode_step_s,
                 output_tokens_per_step):
    """$/M tokens and J/token for serving, input and output split by the time each takes.

    Parameters
    ----------
    usd_per_busy_hour : array_like
        Cost of one busy hour of the whole serving deployment [USD/h].
    busy_it_power_w : array_like
        IT power drawn while busy [W].
    pue : array_like
        Power usage effectiveness [-].
    prefill_s : array_like
        Time to prefill ``prompt_tokens`` prompt tokens (the whole batch) [s].
    prompt_tokens : array_like
        Prompt tokens processed in ``prefill_s`` [tokens].
    decode_step_s : array_like
        Time of one decode step of the batch [s].
    output_tokens_per_step : array_like
        Output tokens one decode step emits (the batch) [tokens].

    Returns
    -------
    dict of arrays
        ``input_usd_per_mtok``, ``output_usd_per_mtok`` [USD per 1e6 tokens];
        ``energy_j_per_input_token``, ``energy_j_per_output_token`` [J, at the facility meter, incl. PUE].

    Notes
    -----
    cost per token = (USD/h / 3600) x seconds the deployment spends on that token; energy = P_busy PUE t.
    """
    usd_per_s = np.asarray(usd_per_busy_hour, dtype=float) / S_PER_HOUR
    s_in = np.asarray(prefill_s, dtype=float) / prompt_tokens
    s_out = np.asarray(decode_step_s, dtype=float) / output_tokens_per_step
    facility_w = busy_it_power_w * pue
    return {
        "input_usd_per_mtok": usd_per_s * s_in * 1e6,
        "output_usd_per_mtok": usd_per_s * s_out * 1e6,
        "energy_j_per_input_token": facility_w * s_in,
        "energy_j_per_output_token": facility_w * s_out,
    }


def training_cost(*, usd_per_busy_hour, busy_it_power_w, pue, step_s, tokens_per_step, train_tokens):
    """$ and J for one training run of ``train_tokens`` tokens.

    Parameters
    ----------
    usd_per_busy_hour : array_like
        Cost of one busy hour of the training deployment [USD/h].
    busy_it_power_w : array_like
        IT power while training [W].
    pue : array_like
        Power usage effectiveness [-].
    step_s : array_like
        Time of one optimizer step [s].
    tokens_per_step : array_like
        Tokens per step (global batch x sequence) [tokens].
    train_tokens : array_like
        Tokens in the run [tokens].

    Returns
    -------
    dict of arrays
        ``run_s`` [s], ``usd_per_run`` [USD], ``energy_j_per_run`` [J, incl. PUE],
        ``energy_j_per_train_token`` [J], ``usd_per_mtok_trained`` [USD per 1e6 tokens].

    Notes
    -----
    run_s = train_tokens / tokens_per_step x step_s; usd = run_s / 3600 x USD/h; J = P_busy PUE run_s.
    """
    run_s = np.asarray(train_tokens, dtype=float) / tokens_per_step * step_s
    usd = run_s / S_PER_HOUR * usd_per_busy_hour
    energy = busy_it_power_w * pue * run_s
    return {
        "run_s": run_s,
        "usd_per_run": usd,
        "energy_j_per_run": energy,
        "energy_j_per_train_token": energy / train_tokens,
        "usd_per_mtok_trained": usd / train_tokens * 1e6,
    }


def rental_serving_cost(*, cloud_usd_per_device_hour, num_devices, prefill_s, prompt_tokens, decode_step_s,
                        output_tokens_per_step):
    """$/M tokens when the same devices are rented by the hour (paid only while busy).

    Parameters
    ----------
    cloud_usd_per_device_hour : array_like
        Rental price per device (GPU) hour [USD/h].
    num_devices : array_like
        Devices the deployment uses [count].
    prefill_s, prompt_tokens, decode_step_s, output_tokens_per_step
        As for :func:`serving_cost`.

    Returns
    -------
    dict of arrays
        ``rental_usd_per_hour``, ``rental_input_usd_per_mtok``, ``rental_output_usd_per_mtok``.
    """
    per_hour = np.asarray(cloud_usd_per_device_hour, dtype=float) * num_devices
    usd_per_s = per_hour / S_PER_HOUR
    return {
        "rental_usd_per_hour": per_hour,
        "rental_input_usd_per_mtok": usd_per_s * np.asarray(prefill_s, dtype=float) / prompt_tokens * 1e6,
        "rental_output_usd_per_mtok": usd_per_s * np.asarray(decode_step_s, dtype=float) / output_tokens_per_step * 1e6,
    }


def memoryx_capex_usd(*, capacity_bytes, dram_capacity_bytes, dram_usd_per_tb, flash_usd_per_tb):
    """Capex of a MemoryX option: its DRAM tier (up to ``dram_capacity_bytes``) and the flash beyond [USD]."""
    cap = np.asarray(capacity_bytes, dtype=float)
    dram = np.minimum(cap, dram_capacity_bytes)
    return dram / 1e12 * dram_usd_per_tb + (cap - dram) / 1e12 * flash_usd_per_tb


# =============================================================================================
# 2. Inputs: prices catalog and named parameters
# =============================================================================================
class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SitePrices(_Frozen):
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


class HardwarePrice(_Frozen):
    capex_usd: Quantity
    network_frac: Quantity
    cloud_usd_per_device_hour: Quantity | None = None


class MemoryXPrice(_Frozen):
    dram_usd_per_tb: Quantity
    flash_usd_per_tb: Quantity


class ServicePrice(_Frozen):
    hardware: str
    input_usd_per_mtok: Quantity
    output_usd_per_mtok: Quantity


class Prices(_Frozen):
    """All cost inputs of one dated prices catalog."""

    date: str
    site: SitePrices
    hardware: dict[str, HardwarePrice]
    memoryx: MemoryXPrice
    service_prices: dict[str, ServicePrice] = {}
    files: list[str] = []


class Param(_Frozen):
    """One named, overridable cost input with its range and provenance (``value`` in the name's unit)."""

    name: str
    value: float
    low: float
    high: float
    source: list[str]
    basis: str
    note: str | None = None

    @classmethod
    def from_quantity(cls, name: str, q: Quantity) -> "Param":
        lo, hi = q.bound("low"), q.bound("high")
        return cls(name=name, value=q.si, low=min(lo, q.si), high=max(hi, q.si), source=q.source_ids,
                   basis=q.basis, note=q.note)

    @property
    def uncertain(self) -> bool:
        return self.high > self.low


def default_prices_dir() -> Path:
    from ..catalog.load import default_catalog_dir

    return default_catalog_dir() / "prices"


def _deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "value":
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def load_prices(files: list[str | Path] | tuple = (), *, catalog=None) -> Prices:
    """Read the bundled ``catalogs/prices/*.yaml`` (newest date last wins) and merge ``files`` on top.

    A user file has the same layout and may hold any subset of it; its entries replace the bundled ones
    field by field. Source ids are checked against ``catalog.sources`` when a catalog is given.
    """
    from ..catalog.load import read_yaml

    paths = sorted(default_prices_dir().glob("*.y*ml"))
    raw: dict = {}
    used = []
    for p in [*paths, *[Path(f) for f in files]]:
        if not p.is_file():
            raise InputError(f"--prices: file {p} not found; check the path")
        data = read_yaml(p)
        if data is None:
            continue
        if not isinstance(data, dict):
            raise CatalogError(f"{p}: top level must be a mapping with keys date, site, hardware, memoryx, service_prices")
        raw = _deep_merge(raw, data)
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


def hardware_price_key(target) -> str:
    """The prices key of a resolved target: the system key for wafers (cs3), the GPU key for GPUs."""
    return target.device.system if target.kind == "wafer" else target.key


def cost_params(prices: Prices, catalog, target, *, memoryx_option: str | None = None,
                include_memoryx: bool = False) -> dict[str, Param]:
    """The named inputs for one target: site inputs, the system's capex, network share, power and space.

    Names: the site fields of :class:`SitePrices`, plus ``capex_usd`` (per system or GPU node),
    ``network_frac``, ``peak_power_w`` (per system or node, from the hardware catalog with its range),
    ``rack_units`` (per system or node), ``cloud_usd_per_device_hour`` (GPUs with a rental price), and for
    wafer training ``memoryx_capacity_bytes``, ``memoryx_dram_capacity_bytes``, ``memoryx_dram_usd_per_tb``,
    ``memoryx_flash_usd_per_tb``.
    """
    out: dict[str, Param] = {}
    for name in SitePrices.model_fields:
        out[name] = Param.from_quantity(name, getattr(prices.site, name))
    key = hardware_price_key(target)
    hp = prices.hardware.get(key)
    if target.kind == "wafer":
        sysm = catalog.systems[target.device.system]
        if hp is None:
            raise CatalogError(f"prices: no capex for system {key!r}; add hardware.{key} to a prices file (--prices)")
        out["peak_power_w"] = Param.from_quantity("peak_power_w", sysm.power_w)
        out["rack_units"] = Param.from_quantity("rack_units", sysm.rack_units)
    else:
        gpu = target.device
        if hp is None:  # fall back on the hardware catalog's node price
            hp = HardwarePrice(capex_usd=gpu.node_price_usd,
                               network_frac=prices.hardware["h100-sxm"].network_frac if "h100-sxm" in prices.hardware
                               else Quantity(value=0.15, source="techtalkcto-h100", basis="estimate", note="fabric share"))
        out["peak_power_w"] = Param.from_quantity("peak_power_w", gpu.node_power_w)
        out["rack_units"] = Param.from_quantity("rack_units", gpu.node_rack_units)
    if not hp.capex_usd.si > 0:  # never cost hardware at $0: a missing price is a refusal naming the field
        field = (f"gpus.{key}.node_price_usd in a --catalog file or hardware.{key}.capex_usd in a --prices file"
                 if target.kind == "gpu" else f"hardware.{key}.capex_usd in a --prices file")
        why = f" ({hp.capex_usd.note})" if hp.capex_usd.note else ""
        raise InputError(f"cost: {key} has no price (capex ${hp.capex_usd.si:g}, basis {hp.capex_usd.basis}{why}); "
                         f"fill {field}")
    out["capex_usd"] = Param.from_quantity("capex_usd", hp.capex_usd)
    out["network_frac"] = Param.from_quantity("network_frac", hp.network_frac)
    if hp.cloud_usd_per_device_hour is not None:
        out["cloud_usd_per_device_hour"] = Param.from_quantity("cloud_usd_per_device_hour", hp.cloud_usd_per_device_hour)
    if include_memoryx and target.kind == "wafer":
        sysm = catalog.systems[target.device.system]
        mx = catalog.memoryx[sysm.memoryx]
        opt = memoryx_option or mx.default_capacity
        if opt not in mx.capacity_options_bytes:
            raise InputError(f"memoryx: unknown option {opt!r}; choose one of {', '.join(mx.capacity_options_bytes)}")
        out["memoryx_capacity_bytes"] = Param.from_quantity("memoryx_capacity_bytes", mx.capacity_options_bytes[opt])
        out["memoryx_dram_capacity_bytes"] = Param.from_quantity("memoryx_dram_capacity_bytes", mx.dram_capacity_bytes)
        out["memoryx_dram_usd_per_tb"] = Param.from_quantity("memoryx_dram_usd_per_tb", prices.memoryx.dram_usd_per_tb)
        out["memoryx_flash_usd_per_tb"] = Param.from_quantity("memoryx_flash_usd_per_tb", prices.memoryx.flash_usd_per_tb)
    return out


def parse_overrides(items: list[str] | None) -> dict[str, float]:
    """``["electricity_usd_per_kwh=0.12", "cs3.capex_usd=2e6"]`` -> dict; one-line InputError otherwise."""
    out: dict[str, float] = {}
    for it in items or []:
        if "=" not in it:
            raise InputError(f"--set: expected NAME=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            val = float(v)
        except ValueError:
            raise InputError(f"--set: value of {k.strip()!r} must be a number, got {v!r}") from None
        if not math.isfinite(val):
            raise InputError(f"--set: value of {k.strip()!r} must be finite, got {v!r}")
        out[k.strip()] = val
    return out


def apply_overrides(params: dict[str, Param], overrides: dict[str, float], *, hardware_key: str | None = None) -> dict[str, Param]:
    """Pin named inputs to a value (its range collapses to that value). ``HW.name`` applies to hardware HW only.

    Raises
    ------
    InputError
        For a name that is not an input of this case (with suggestions), or a value out of range
        (fractions outside [0, 1], non-positive years/PUE/utilisation, negative prices).
    """
    out = dict(params)
    for key, val in overrides.items():
        name = key
        if "." in key:
            hw, name = key.split(".", 1)
            if hardware_key is not None and hw.lower() != hardware_key:
                continue
        if name not in out:
            raise InputError(f"--set: unknown cost input {key!r}{suggest(name, out)}; inputs here: {', '.join(out)}")
        _check_value(name, val)
        out[name] = Param(name=name, value=val, low=val, high=val, source=["--set on the command line"],
                          basis="user", note="set by the user (--set)")
    return out


def _check_value(name: str, val: float, where: str = "--set", label: str | None = None) -> None:
    """The ranges every cost input keeps, from ``--set`` or from a prices file (``where`` names it, ``label`` the
    field)."""
    what = label or name
    if name.endswith("_frac") and not (0.0 <= val <= 1.0) and name != "network_frac":
        raise InputError(f"{where}: {what} is a fraction and must be in [0, 1], got {val}")
    if name in ("utilization_frac", "amortization_years", "pue", "rack_units_per_rack") and val <= 0:
        raise InputError(f"{where}: {what} must be positive, got {val}")
    if name == "pue" and val < 1.0:
        raise InputError(f"{where}: {what} must be >= 1 (facility power / IT power), got {val}")
    if val < 0:
        raise InputError(f"{where}: {what} must not be negative, got {val}")
    if val > MAX_ABS_SI:  # beyond it the costs overflow to infinity
        raise InputError(f"{where}: {what} must be at most {MAX_ABS_SI:g}, got {val:g}")


def nominal(params: dict[str, Param]) -> dict[str, float]:
    return {k: p.value for k, p in params.items()}


# =============================================================================================
# 3. Uncertainty
# =============================================================================================
def _check_samples(n: int) -> None:
    if n > MAX_UNCERTAINTY_SAMPLES:
        raise InputError(f"--uncertainty: {n:,} samples exceed the limit of {MAX_UNCERTAINTY_SAMPLES:,} (as in study "
                         "files); use fewer samples")


def sample_params(params: dict[str, Param], n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` samples of every input: triangular(low, value, high) via scipy.stats; fixed inputs repeat.

    Inputs are drawn independently, in the order of ``params``, from one ``numpy`` generator seeded with
    ``seed``, so the same seed gives the same samples.
    """
    from scipy import stats

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise InputError(f"--uncertainty: sample count must be an integer >= 2, got {n!r}")
    _check_samples(n)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for k, p in params.items():
        if not p.uncertain:
            out[k] = np.full(n, p.value)
            continue
        scale = p.high - p.low
        c = (p.value - p.low) / scale
        out[k] = stats.triang.rvs(c, loc=p.low, scale=scale, size=n, random_state=rng)
    return out


class Percentiles(_Frozen):
    metric: str
    nominal: float
    p10: float
    p50: float
    p90: float
    mean: float


class TornadoRow(_Frozen):
    """Swing of ``metric`` when ``param`` moves from its low to its high value, the rest at nominal."""

    metric: str
    param: str
    low: float
    high: float
    metric_at_low: float
    metric_at_high: float
    swing: float


def monte_carlo(params: dict[str, Param], fn: Callable[[dict], dict], *, n: int, seed: int = 0,
                metrics: list[str] | None = None) -> list[Percentiles]:
    """P10/P50/P90 of each metric of ``fn`` over ``n`` seeded samples of ``params`` (one vectorized call)."""
    samples = sample_params(params, n, seed)
    res = fn(samples)
    nom = fn(nominal(params))
    rows = []
    for k in metrics or list(res):
        v = np.broadcast_to(np.asarray(res[k], dtype=float), (n,))
        p10, p50, p90 = np.percentile(v, [10, 50, 90])
        rows.append(Percentiles(metric=k, nominal=float(nom[k]), p10=float(p10), p50=float(p50), p90=float(p90),
                                mean=float(v.mean())))
    return rows


def tornado(params: dict[str, Param], fn: Callable[[dict], dict], metric: str) -> list[TornadoRow]:
    """One-at-a-time sensitivity of ``metric``: rows sorted by |swing|, largest first (uncertain inputs only).

    All low and high cases are evaluated in one vectorized call: column 2i holds input i at its low value,
    column 2i+1 at its high value, every other input at nominal.
    """
    names = [k for k, p in params.items() if p.uncertain]
    if not names:
        return []
    m = 2 * len(names)
    cols = {k: np.full(m, p.value) for k, p in params.items()}
    for i, k in enumerate(names):
        cols[k][2 * i] = params[k].low
        cols[k][2 * i + 1] = params[k].high
    v = np.broadcast_to(np.asarray(fn(cols)[metric], dtype=float), (m,))
    rows = [TornadoRow(metric=metric, param=k, low=params[k].low, high=params[k].high, metric_at_low=float(v[2 * i]),
                       metric_at_high=float(v[2 * i + 1]), swing=float(v[2 * i + 1] - v[2 * i]))
            for i, k in enumerate(names)]
    rows.sort(key=lambda r: (-abs(r.swing), r.param))
    return rows


# =============================================================================================
# 4. Composition: the cost of one model on one target
# =============================================================================================
class TimeInputs(_Frozen):
    """Time numbers the cost model consumes (from the time model, or given by hand)."""

    phase: str  # "serve" | "train"
    num_devices: int
    num_systems: float  # systems charged: whole for training, a replica's share of a node for serving
    prefill_s: float | None = None
    prompt_tokens: float | None = None
    decode_step_s: float | None = None
    output_tokens_per_step: float | None = None
    step_s: float | None = None
    tokens_per_step: float | None = None
    train_tokens: float | None = None


def evaluate(p: dict, t: TimeInputs) -> dict:
    """All cost metrics for inputs ``p`` (scalars or equal-length arrays) and times ``t``."""
    extra = 0.0
    if "memoryx_capacity_bytes" in p:
        extra = memoryx_capex_usd(capacity_bytes=p["memoryx_capacity_bytes"],
                                  dram_capacity_bytes=p["memoryx_dram_capacity_bytes"],
                                  dram_usd_per_tb=p["memoryx_dram_usd_per_tb"],
                                  flash_usd_per_tb=p["memoryx_flash_usd_per_tb"])
    d = deployment_cost(num_systems=t.num_systems, capex_per_system_usd=p["capex_usd"], network_frac=p["network_frac"],
                        extra_capex_usd=extra, installation_frac=p["installation_frac"],
                        amortization_years=p["amortization_years"], maintenance_frac_per_year=p["maintenance_frac_per_year"],
                        peak_power_per_system_w=p["peak_power_w"], busy_power_frac=p["busy_power_frac"],
                        idle_power_frac=p["idle_power_frac"], utilization_frac=p["utilization_frac"], pue=p["pue"],
                        electricity_usd_per_kwh=p["electricity_usd_per_kwh"],
                        facility_usd_per_kw_month=p["facility_usd_per_kw_month"])
    out = dict(d)
    out["memoryx_capex_usd"] = np.asarray(extra, dtype=float) + 0.0 * d["capex_usd"]
    out["usd_per_system_hour"] = d["usd_per_hour"] / t.num_systems
    out["usd_per_device_hour"] = d["usd_per_hour"] / t.num_devices
    out["rack_units"] = t.num_systems * np.asarray(p["rack_units"], dtype=float)
    out["racks"] = out["rack_units"] / p["rack_units_per_rack"]
    # the model error of the predicted times (true / predicted; 1 = as predicted), sampled with the prices
    f = np.asarray(p.get("model_time_factor", 1.0), dtype=float)
    scaled = lambda x: None if x is None else np.asarray(x, dtype=float) * f  # noqa: E731
    if t.phase == "serve":
        out.update(serving_cost(usd_per_busy_hour=d["usd_per_busy_hour"], busy_it_power_w=d["busy_it_power_w"],
                                pue=p["pue"], prefill_s=scaled(t.prefill_s), prompt_tokens=t.prompt_tokens,
                                decode_step_s=scaled(t.decode_step_s), output_tokens_per_step=t.output_tokens_per_step))
        if "cloud_usd_per_device_hour" in p:
            out.update(rental_serving_cost(cloud_usd_per_device_hour=p["cloud_usd_per_device_hour"],
                                           num_devices=t.num_devices, prefill_s=scaled(t.prefill_s),
                                           prompt_tokens=t.prompt_tokens, decode_step_s=scaled(t.decode_step_s),
                                           output_tokens_per_step=t.output_tokens_per_step))
    else:
        out.update(training_cost(usd_per_busy_hour=d["usd_per_busy_hour"], busy_it_power_w=d["busy_it_power_w"],
                                 pue=p["pue"], step_s=scaled(t.step_s), tokens_per_step=t.tokens_per_step,
                                 train_tokens=t.train_tokens))
        if "cloud_usd_per_device_hour" in p:
            run_h = out["run_s"] / S_PER_HOUR
            out["rental_usd_per_hour"] = np.asarray(p["cloud_usd_per_device_hour"], dtype=float) * t.num_devices
            out["rental_usd_per_run"] = out["rental_usd_per_hour"] * run_h
    return out


#: unit of each reported metric
UNITS = {
    "hardware_capex_usd": "USD", "capex_usd": "USD", "memoryx_capex_usd": "USD", "capex_usd_per_year": "USD/yr",
    "maintenance_usd_per_year": "USD/yr", "electricity_usd_per_year": "USD/yr", "facility_usd_per_year": "USD/yr",
    "total_usd_per_year": "USD/yr", "usd_per_hour": "USD/h", "usd_per_busy_hour": "USD/h",
    "usd_per_system_hour": "USD/h", "usd_per_device_hour": "USD/h", "peak_it_power_w": "W",
    "average_it_power_w": "W", "busy_it_power_w": "W", "peak_facility_power_w": "W", "rack_units": "U", "racks": "-",
    "input_usd_per_mtok": "USD/Mtok", "output_usd_per_mtok": "USD/Mtok", "energy_j_per_input_token": "J",
    "energy_j_per_output_token": "J", "rental_usd_per_hour": "USD/h", "rental_input_usd_per_mtok": "USD/Mtok",
    "rental_output_usd_per_mtok": "USD/Mtok", "run_s": "s", "usd_per_run": "USD", "energy_j_per_run": "J",
    "energy_j_per_train_token": "J", "usd_per_mtok_trained": "USD/Mtok", "rental_usd_per_run": "USD",
    "service_input_usd_per_mtok": "USD/Mtok", "service_output_usd_per_mtok": "USD/Mtok",
}


class MetricRow(_Frozen):
    metric: str
    unit: str
    value: float
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None


class CostResult(_Frozen):
    """The cost record (``wseplan cost --format json``); documented in docs/cli-output.md."""

    schema_version: int = SCHEMA_VERSION
    model: str
    target: str
    hardware: str
    price_key: str
    phase: str
    batch: int
    context: int
    output_tokens: int | None = None
    num_devices: int
    num_systems: int
    headline_metric: str
    headline_value: float
    times: TimeInputs
    metrics: list[MetricRow]
    params: list[Param]
    tornado: list[TornadoRow] = []
    samples: int = 0
    seed: int | None = None
    prices_date: str
    notes: list[str] = []
    plan: dict | None = None
    operating_point: dict | None = None  # serving without a batch: the searched point (wseplan.serving.operating_point)

    def to_record(self) -> dict:
        return self.model_dump(mode="json")

    def metric(self, name: str) -> float:
        for m in self.metrics:
            if m.metric == name:
                return m.value
        raise KeyError(name)

    def to_row(self) -> dict:
        """Flat scalars: the case and every metric's nominal value (and P10/P50/P90 when sampled)."""
        row = {k: getattr(self, k) for k in ("model", "target", "hardware", "phase", "batch", "context",
                                              "num_devices", "num_systems", "headline_metric", "headline_value")}
        for m in self.metrics:
            row[m.metric] = m.value
            if m.p50 is not None:
                row[f"{m.metric}_p10"], row[f"{m.metric}_p50"], row[f"{m.metric}_p90"] = m.p10, m.p50, m.p90
        return row

    def to_frame(self):
        """Metrics as a DataFrame (one row per metric)."""
        import pandas as pd

        df = pd.DataFrame([m.model_dump() for m in self.metrics])
        df.attrs["prices_date"] = self.prices_date
        return df

    def params_frame(self):
        import pandas as pd

        return pd.DataFrame([p.model_dump() for p in self.params])

    def tornado_frame(self):
        import pandas as pd

        return pd.DataFrame([r.model_dump() for r in self.tornado])


def cost_from_times(params: dict[str, Param], times: TimeInputs, *, model: str, target: str, hardware: str,
                    price_key: str, batch: int, context: int, output_tokens: int | None = None,
                    uncertainty: int = 0, seed: int = 0, prices_date: str = "", service: ServicePrice | None = None,
                    notes: list[str] | None = None, headline_metric: str | None = None, plan: dict | None = None) -> CostResult:
    """Cost of a case whose times are known (pure apart from scipy sampling): metrics, P10/P50/P90, tornado."""
    def fn(p):
        with np.errstate(divide="ignore", invalid="ignore"):
            return evaluate(p, times)

    nom = fn(nominal(params))
    headline = headline_metric or ("output_usd_per_mtok" if times.phase == "serve" else "usd_per_run")
    pct = {}
    if uncertainty:
        pct = {r.metric: r for r in monte_carlo(params, fn, n=uncertainty, seed=seed)}
    rows = []
    for k, v in nom.items():
        if not math.isfinite(float(v)):  # a metric that does not apply to this phase (e.g. input cost of decode)
            continue
        r = pct.get(k)
        rows.append(MetricRow(metric=k, unit=UNITS.get(k, ""), value=float(v), p10=r.p10 if r else None,
                              p50=r.p50 if r else None, p90=r.p90 if r else None))
    if service is not None and times.phase == "serve":
        for k, q in (("service_input_usd_per_mtok", service.input_usd_per_mtok),
                     ("service_output_usd_per_mtok", service.output_usd_per_mtok)):
            rows.append(MetricRow(metric=k, unit="USD/Mtok", value=q.si, p10=None, p50=None, p90=None))
    return CostResult(model=model, target=target, hardware=hardware, price_key=price_key, phase=times.phase,
                      batch=batch, context=context, output_tokens=output_tokens, num_devices=times.num_devices,
                      num_systems=math.ceil(times.num_systems - 1e-9), headline_metric=headline, headline_value=float(nom[headline]),
                      times=times, metrics=rows, params=list(params.values()), tornado=tornado(params, fn, headline),
                      samples=int(uncertainty), seed=seed if uncertainty else None, prices_date=prices_date,
                      notes=list(notes or []), plan=plan)
