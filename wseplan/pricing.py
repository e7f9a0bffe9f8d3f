"""Cost arrays through the planning chain: the named cost inputs of a setup (:func:`params_for`) and the cost
metrics of :func:`wseplan.plan.evaluate`'s arrays (:func:`cost_columns`), used by ``cost``, compare, sweep,
serve, fleet and reports alike.

A configuration that does not fit has no time and therefore no cost (NaN in arrays). Inputs come from the dated
prices catalog (:mod:`wseplan.analytic.cost`) and the family's hardware figures (devices per system, power, rack
space); the pure functions of :mod:`wseplan.analytic.cost` do the arithmetic, vectorized over configurations,
Monte Carlo samples or tornado cases alike.

Serving cost splits the deployment's busy time between input and output tokens by what the engine spends on
each: with static batches the prefill of the batch versus its decode steps; with in-flight batching the decode
round alone versus the extra time the prompt chunks add to it. (Split out of :mod:`wseplan.costing` so that
:mod:`wseplan.serving` prices its points without importing the ``cost`` API, which searches the operating point
with :func:`wseplan.serving.serve`.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .analytic import cost as C
from .analytic.cost.params import price_key_of
from .catalog.schema import Quantity
from .errors import InputError
from .plan import Setup
from .workload import total_params as transformer_params

#: the headline metric of each phase
HEADLINE = {"train": "usd_per_run", "prefill": "input_usd_per_mtok", "decode": "output_usd_per_mtok",
            "serve": "all_in_usd_per_mtok"}


@dataclass(frozen=True)
class ArrayTimes:
    """Time inputs of the cost functions, as arrays over configurations (see :class:`~wseplan.analytic.cost.TimeInputs`)."""

    phase: str
    num_devices: np.ndarray
    num_systems: np.ndarray
    prefill_s: np.ndarray | None = None
    prompt_tokens: np.ndarray | None = None
    decode_step_s: np.ndarray | None = None
    output_tokens_per_step: np.ndarray | None = None
    step_s: np.ndarray | None = None
    tokens_per_step: np.ndarray | None = None
    train_tokens: np.ndarray | float | None = None
    goodput_frac: np.ndarray | float = 1.0
    output_tokens_per_s: np.ndarray | None = None


def params_for(s: Setup, prices, *, overrides: dict | None = None) -> dict:
    """The named cost inputs of the setup's target (site, capex, network share, power, rack space, and MemoryX for
    wafer training): :func:`wseplan.analytic.cost.cost_params` for the built-in kinds, the family's
    :class:`~wseplan.devices.base.Hardware` figures for plug-in kinds."""
    hw = s.family.hardware(s.ctx)
    q = s.query
    stream = s.family.name == "wafer_streaming"
    if overrides and pins_capex(overrides, hw.price_key, q.catalog) and unpriced(s, prices):
        # the user's --set HW.capex_usd prices hardware the catalogs leave unpriced (audit31b M2: refused first)
        # (a network share as a GPU node's without prices of its own, review31 L5: not 0)
        prices = with_placeholder_price(s, prices, network_frac=prices.hardware["h100-sxm"].network_frac
                                        if "h100-sxm" in prices.hardware else None)
    if q.target.kind in ("gpu", "wafer"):
        out = C.cost_params(prices, q.catalog, q.target, include_memoryx=stream,
                            memoryx_option=getattr(s.ctx, "option", None) if stream else None)
    else:
        out = {name: C.Param.from_quantity(name, getattr(prices.site, name)) for name in C.SitePrices.model_fields}
        hp = prices.hardware.get(hw.price_key)
        if hp is None:
            raise InputError(f"prices: no capex for {hw.price_key!r} ({hw.system_name}); add hardware.{hw.price_key}."
                             "capex_usd and network_frac to a prices file (--prices FILE)")
        for name, value in (("peak_power_w", hw.system_power_w), ("rack_units", hw.system_rack_units)):
            out[name] = C.Param(name=name, value=value, low=value, high=value, source=["catalog"], basis="estimate",
                                note=f"{hw.system_name}: from its catalog entry")
        out["capex_usd"] = C.Param.from_quantity("capex_usd", hp.capex_usd)
        out["network_frac"] = C.Param.from_quantity("network_frac", hp.network_frac)
    return C.apply_overrides(out, overrides or {}, hardware_key=hw.price_key, catalog=s.query.catalog)


def pins_capex(overrides: dict, price_key: str, catalog) -> bool:
    """Whether ``overrides`` (``--set``) pins the capex of the hardware of ``price_key`` (``capex_usd`` or
    ``HW.capex_usd`` with HW that hardware)."""
    for k in overrides:
        hw, _, name = k.rpartition(".")
        if name == "capex_usd" and (not hw or price_key_of(hw, catalog) == price_key):
            return True
    return False


def unpriced(s: Setup, prices) -> bool:
    """Whether the setup's hardware has no capex in the prices or the hardware catalog (a rental-only part such as a
    TPU): its run time, power and energy are still given, its dollars are not."""
    hp = prices.hardware.get(s.family.hardware(s.ctx).price_key)
    if hp is not None:
        return not hp.capex_usd.si > 0
    node = getattr(s.query.target.device, "node_price_usd", None) if s.query.target.kind == "gpu" else None
    return node is None or not node.si > 0


def with_placeholder_price(s: Setup, prices, network_frac=None):
    """``prices`` with a $1 capex for the setup's unpriced hardware (:func:`unpriced`), so the cost model can give
    its time-, power- and energy-only figures; every dollar figure of the result is meaningless and must be dropped
    (unless a ``--set`` capex replaces it: then ``network_frac``, a Quantity, is the network share beside it)."""
    key = s.family.hardware(s.ctx).price_key
    q = Quantity(value=1.0, source="wseplan-estimate", basis="estimate", note="placeholder: the hardware has no price")
    z = network_frac or Quantity(value=0.0, source="wseplan-estimate", basis="estimate",
                                 note="placeholder: the hardware has no price")
    return prices.model_copy(update={"hardware": {**prices.hardware, key: C.HardwarePrice(capex_usd=q, network_frac=z)}})


def num_systems(s: Setup, num_devices) -> np.ndarray:
    """Whole systems (CS-3s, GPU nodes) a device count occupies [count]."""
    per = s.family.hardware(s.ctx).devices_per_system
    return np.ceil(np.asarray(num_devices, dtype=float) / per - 1e-9)


def charged_systems(s: Setup, num_devices) -> np.ndarray:
    """Systems a device count is charged for [count]: whole systems for training (a job reserves its nodes); for
    serving the replica's share of a system, since replicas smaller than a node are packed several to a node
    (8 one-GPU replicas share one 8-GPU node, as ``fleet`` packs them)."""
    if s.query.phase == "train":
        return num_systems(s, num_devices)
    return np.asarray(num_devices, dtype=float) / s.family.hardware(s.ctx).devices_per_system


def no_wafer_interruptions_note(catalog) -> str:
    """What a wafer training run's wall time assumes of interruptions (``time --train-tokens``, ``cost --phase
    train``): none, as no rate is published for CS-3 clusters, beside the GPU clusters' catalog rate."""
    per_1e5 = catalog.defaults.gpu_job_interruptions_per_gpu_hour.si * 1e5
    return ("the run's wall time counts no interruptions: no rate is published for CS-3 clusters (a GPU cluster's "
            f"counts {per_1e5:.3g} per 100,000 GPU-hours, Llama 3 sec. 3.3.4); weigh a side-by-side run time with that "
            "in mind")


def run_goodput(kind: str, catalog, num_devices):
    """The share of a training run's wall time spent training on ``num_devices`` devices of ``kind``
    (:func:`wseplan.analytic.cost.goodput_frac` with the catalog's interruption rate; 1 for targets other than GPU
    clusters, whose interruption rates are unpublished) [fraction]."""
    if kind != "gpu":
        return np.ones(np.shape(num_devices)) if np.ndim(num_devices) else 1.0
    d = catalog.defaults
    return C.goodput_frac(num_devices, interruptions_per_device_hour=d.gpu_job_interruptions_per_gpu_hour.si,
                          loss_per_interruption_s=d.job_interruption_loss_s.si)


def job_devices(arr: dict, num_devices=None):
    """The devices a training job runs on: a GPU layout's tp x pp x dp x cp (``arr``'s layout columns, or a record's
    ``layout`` dict), else ``num_devices`` (``arr["num_devices"]``). Interruptions strike the GPUs a job uses: GPUs a
    layout leaves idle do not stop it (audit31a H1: 100,000 H100 ran 405B on 32,768 of them and took 37% longer than
    32,768 H100, their failures charged to the run) [devices]."""
    lay = arr if "tp" in arr else {k: arr.get(f) for k, f in (("tp", "tensor_parallel"), ("pp", "pipeline_parallel"),
                                                                ("dp", "data_parallel"), ("cp", "context_parallel"))}
    n = arr.get("num_devices") if num_devices is None else num_devices
    if any(lay.get(k) is None for k in ("tp", "pp", "dp")):
        return n
    used = np.asarray(lay["tp"], dtype=float) * np.asarray(lay["pp"], dtype=float) * np.asarray(lay["dp"], dtype=float)
    used = used * np.asarray(lay["cp"] if lay.get("cp") is not None else 1.0, dtype=float)
    used = np.where(np.isfinite(used) & (used > 0), np.minimum(used, np.asarray(n, dtype=float)), n)
    return used if np.ndim(used) else float(used)


def array_times(s: Setup, arr: dict, *, train_tokens=None) -> ArrayTimes:
    """The cost model's time inputs from :func:`wseplan.plan.evaluate`'s arrays (NaN where nothing fits)."""
    ph = s.query.phase
    ndev = np.asarray(arr["num_devices"], dtype=float)
    nsys = charged_systems(s, ndev)
    if ph == "train":
        return ArrayTimes(phase="train", num_devices=ndev, num_systems=nsys, step_s=arr["step_s"],
                          tokens_per_step=arr["batch"] * arr["context"], train_tokens=train_tokens,
                          goodput_frac=run_goodput(s.query.target.kind, s.query.catalog, job_devices(arr, ndev)))
    g = lambda k: arr.get(f"time.{k}", np.full(len(ndev), np.nan))  # noqa: E731
    return ArrayTimes(phase="serve", num_devices=ndev, num_systems=nsys, prefill_s=g("cost_prefill_s"),
                      prompt_tokens=g("cost_prompt_tokens"), decode_step_s=g("cost_decode_s"),
                      output_tokens_per_step=g("cost_output_tokens"),
                      output_tokens_per_s=None if ph == "prefill" else np.asarray(arr["tokens_per_s"], dtype=float))


def cost_columns(s: Setup, arr: dict, p: dict, *, train_tokens=None) -> dict:
    """Cost metrics per configuration (arrays; NaN where the configuration does not fit) at inputs ``p``
    (nominal values or sampled arrays)."""
    ph = s.query.phase
    if ph == "train" and train_tokens is None:
        train_tokens = p["train_tokens_per_param"] * total_params(s.query.model)
    t = array_times(s, arr, train_tokens=train_tokens)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN times of rows that do not fit stay NaN
        out = C.evaluate(p, t)
        if ph in ("prefill", "decode"):  # one side of serving only
            for k in list(out):
                if (ph == "prefill" and "output" in k) or (ph == "decode" and "input" in k):
                    out[k] = np.full(np.shape(out[k]) or (1,), np.nan)
    return out


def total_params(model) -> float:
    return transformer_params(model) if hasattr(model, "num_layers") else float(sum(layer.params for layer in model.layers))
