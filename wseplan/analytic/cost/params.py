"""The named, overridable cost inputs of one target (:class:`Param`, ``--set NAME=VALUE``), resolved from the
prices catalog and the hardware catalog."""
from __future__ import annotations

import math

from ...catalog.schema import Frozen, Quantity
from ...errors import CatalogError, InputError, suggest
from .prices import HardwarePrice, Prices, SitePrices, _check_value


class Param(Frozen):
    """One named, overridable cost input with its range and provenance (``value`` in the name's unit)."""

    name: str
    value: float
    low: float
    high: float
    source: list[str]
    basis: str
    note: str | None = None
    #: sampled triangular in the logarithm (a ratio such as the model's time error: symmetric factors, median near
    #: the value), else triangular in the value
    log_scale: bool = False
    #: samples below this are raised to it (a hard bound inside the triangle's support: the model's time error cannot
    #: run the model faster than its compute roof or its weight stream allow); None: no bound
    clip_low: float | None = None

    @property
    def least(self) -> float:
        """The lowest value a sample takes: ``low``, or the hard bound above it."""
        return self.low if self.clip_low is None else max(self.low, self.clip_low)

    @classmethod
    def from_quantity(cls, name: str, q: Quantity) -> "Param":
        lo, hi = q.bound("low"), q.bound("high")
        return cls(name=name, value=q.si, low=min(lo, q.si), high=max(hi, q.si), source=q.source_ids,
                   basis=q.basis, note=q.note)

    @property
    def uncertain(self) -> bool:
        return self.high > self.low



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
    ``memoryx_flash_usd_per_tb``, and where the catalog gives them the cluster's CPU servers:
    ``cluster_node_power_w``, ``cluster_node_rack_units``, ``memoryx_min_nodes``, ``memoryx_node_dram_bytes``,
    ``memoryx_node_flash_bytes``,
    ``cluster_nodes_per_system``.
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
        # the cluster's CPU servers (MemoryX, SwarmX, input workers, activation servers): their power, where given
        node_w = sysm.cluster_node_power_w
        if node_w is not None and mx.node_dram_bytes is not None and mx.node_flash_bytes is not None:
            out["cluster_node_power_w"] = Param.from_quantity("cluster_node_power_w", node_w)
            if sysm.cluster_node_rack_units is not None:
                out["cluster_node_rack_units"] = Param.from_quantity("cluster_node_rack_units",
                                                                     sysm.cluster_node_rack_units)
            out["memoryx_min_nodes"] = Param.from_quantity("memoryx_min_nodes", mx.update_nodes)
            out["memoryx_node_dram_bytes"] = Param.from_quantity("memoryx_node_dram_bytes", mx.node_dram_bytes)
            out["memoryx_node_flash_bytes"] = Param.from_quantity("memoryx_node_flash_bytes", mx.node_flash_bytes)
            if sysm.cluster_nodes_per_system is not None:
                out["cluster_nodes_per_system"] = Param.from_quantity("cluster_nodes_per_system",
                                                                      sysm.cluster_nodes_per_system)
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


#: the per-hardware cost inputs (``HW.NAME``) some target has: a name outside these and the site inputs is refused
#: under any hardware prefix, so a typo under another target's prefix is not silently skipped
HARDWARE_INPUTS = ("capex_usd", "network_frac", "peak_power_w", "rack_units", "cloud_usd_per_device_hour",
                   "memoryx_capacity_bytes", "memoryx_dram_capacity_bytes", "memoryx_dram_usd_per_tb",
                   "memoryx_flash_usd_per_tb", "cluster_node_power_w", "cluster_node_rack_units", "memoryx_min_nodes",
                   "memoryx_node_dram_bytes",
                   "memoryx_node_flash_bytes", "cluster_nodes_per_system", "model_time_factor")


#: inputs shown with the costs that the plan's fit and time also read: not pinnable with ``--set``
FIT_INPUTS = {"memoryx_capacity_bytes": "the MemoryX option's capacity",
              "memoryx_dram_capacity_bytes": "the MemoryX DRAM tier's capacity (the stream's rate)",
              "memoryx_min_nodes": "the MemoryX servers sharing the optimizer update (update_nodes)"}


def price_key_of(name: str, catalog) -> str:
    """The prices key a hardware name or alias stands for (``h100`` -> ``h100-sxm``, ``wse3``/``cs-3`` -> ``cs3``).

    Raises
    ------
    InputError
        For a name that is no hardware of the catalog.
    """
    hit = catalog.hardware_keys().get(name.lower())
    if hit is None:
        raise InputError(f"--set: {name!r} is not a hardware key; use HW.NAME=VALUE with a key or alias of "
                         "`wseplan catalog list hardware`")
    section, key = hit
    return catalog.wafers[key].system if section == "wafers" else key


def apply_overrides(params: dict[str, Param], overrides: dict[str, float], *, hardware_key: str | None = None,
                    catalog=None) -> dict[str, Param]:
    """Pin named inputs to a value (its range collapses to that value). ``HW.name`` applies to hardware HW only:
    with ``catalog`` HW may be any name or alias of the hardware (resolved to its prices key, as ``hardware_key``).

    Raises
    ------
    InputError
        For a name that is not an input of this case (with suggestions), a hardware prefix the catalog does not
        know, or a value out of range (fractions outside [0, 1], non-positive years/PUE/utilisation, negative prices).
    """
    out = dict(params)
    for key, val in overrides.items():
        name = key
        if "." in key:
            hw, name = key.split(".", 1)
            hw_key = price_key_of(hw, catalog) if catalog is not None else hw.lower()
            if hardware_key is not None and hw_key != hardware_key:
                if name not in HARDWARE_INPUTS and name not in SitePrices.model_fields:
                    raise InputError(f"--set: unknown cost input {key!r}{suggest(name, HARDWARE_INPUTS)}; hardware "
                                     f"inputs: {', '.join(HARDWARE_INPUTS)}")
                continue
        if name not in out:
            raise InputError(f"--set: unknown cost input {key!r}{suggest(name, out)}; inputs here: {', '.join(out)}")
        if name in FIT_INPUTS:  # the plan's fit and time read these from the catalog: pinning the price alone would split them
            raise InputError(f"--set: {key} is {FIT_INPUTS[name]}, which the fit and the time model also use; "
                             + ("choose the option with --memoryx" if name == "memoryx_capacity_bytes" else
                                "change it in a --catalog file"))
        _check_value(name, val)
        out[name] = Param(name=name, value=val, low=val, high=val, source=["--set on the command line"],
                          basis="user", note="set by the user (--set)")
    idle, busy = out.get("idle_power_frac"), out.get("busy_power_frac")
    if idle is not None and busy is not None and idle.value > busy.value:  # audit28b L4
        where = "--set" if {"idle_power_frac", "busy_power_frac"} & {k.split(".", 1)[-1] for k in overrides} else "prices"
        raise InputError(f"{where}: idle_power_frac {idle.value:g} is above busy_power_frac {busy.value:g}: an idle "
                         "system draws less than a busy one; set idle_power_frac <= busy_power_frac")
    return out


def nominal(params: dict[str, Param]) -> dict[str, float]:
    return {k: p.value for k, p in params.items()}


#: cost inputs that each hardware has its own value of (its price entry, its catalog power and rack space): without a
#: ``<hardware>.`` prefix ``--set`` pins every priced target's to one number
PER_HARDWARE_PRICES = ("capex_usd", "network_frac", "peak_power_w", "rack_units", "cloud_usd_per_device_hour")


def unscoped_hardware_inputs(overrides, price_keys, *, prices=None, where: str = "--set") -> None:
    """Refuse a per-hardware input without its hardware prefix where several of the priced hardware have it (audit37b
    F7: ``capex_usd=500000`` priced a $2.5M CS-3 and a $270k H100 node alike, without a word). A hardware has an input
    of its price entry where ``prices`` lists one (a cloud rate only some have: review37b M1), power and rack space
    always; the fix names one that has it."""
    keys = sorted(set(price_keys))
    for name in (k for k in overrides or {} if k in PER_HARDWARE_PRICES):
        holders = [k for k in keys if prices is None or _has_input(prices, k, name)]
        if len(holders) > 1:
            raise InputError(f"{where}: {name} is per hardware and {len(holders)} of these targets' hardware have it "
                             f"({', '.join(holders)}); prefix it, e.g. {holders[0]}.{name}=...")


def _has_input(prices, key: str, name: str) -> bool:
    """Whether hardware ``key`` has the per-hardware cost input ``name`` in ``prices`` (power and rack space: always)."""
    if name in ("peak_power_w", "rack_units"):
        return True
    hp = prices.hardware.get(key)
    return hp is not None and getattr(hp, name, None) is not None
