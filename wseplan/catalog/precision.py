"""Number formats and the datapath a format runs on where the hardware has none of its own.

A device's catalog entry lists a rate per format it computes in (``dense_peak_flop_per_s`` of a GPU,
``flop_per_cycle_per_pe`` of a wafer). A format without an entry is converted to a format that holds its values
exactly, and its math runs at that format's rate:

* a float format goes only to a wider float format (fp4 -> fp8 -> fp16/bf16 -> tf32 -> fp32): an integer datapath has
  no exponent, so fp8 values cannot run on int8 multipliers;
* an integer format goes to a float format that holds its values exactly (int4 and int8 -> fp16/bf16, which hold
  every integer of -128..127).

Of the candidates the device has, the fastest is taken (the first in the order below on a tie): an engine chooses its
kernel. For inference this is the weight-only scheme of the serving engines: the weights stay in their format in
memory (read at its bytes per element) and are widened in the kernel to the activations' 16-bit format, so the math
runs at the 16-bit rate: vLLM runs fp8 checkpoints on Ampere (A100, no FP8 tensor cores) as W8A16 with its FP8 Marlin
kernel, and 4-bit checkpoints (AWQ/GPTQ int4, MXFP4) without a 4-bit datapath as W4A16 with its Marlin kernels;
TensorRT-LLM's ``int4_awq`` is W4A16 too. Running 4-bit weights at the 8-bit rate needs the activations quantized as
well (W4A8), a separate recipe, not the default (audit28d M2: int4 and fp4 once went to int8/fp8).

Training computes its GEMMs in the format itself (Transformer Engine's fp8 needs FP8 tensor cores, NVFP4 pretraining
Blackwell's FP4 ones), so :func:`training_refusal` refuses fp8 and fp4 training on a device without that datapath,
and int4 training everywhere (no recipe trains in 4-bit integers).

References
----------
vLLM documentation, "FP8 W8A8" (docs.vllm.ai/en/stable/features/quantization/fp8): "FP8 computation is supported on
NVIDIA GPUs with compute capability >= 8.9 ... FP8 models will run on compute capability >= 7.5 (Turing) as
weight-only W8A16, utilizing FP8 Marlin"; vLLM pull request 5975, "Expand FP8 support to Ampere GPUs using FP8
Marlin" (2024); vLLM documentation, "AutoAWQ" / "GPTQModel" (Marlin W4A16 kernels). NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv:2509.25149 (2025).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

#: formats whose values a format converts to exactly, in the order tried on a tie (fp16 -> bf16: the other 16-bit
#: format, as a device with bf16 tensor cores and no fp16 ones runs fp16 models)
WIDER_FORMATS: dict[str, tuple[str, ...]] = {
    "fp4": ("bf16", "fp16", "tf32", "fp32"),
    "fp8": ("fp16", "bf16", "tf32", "fp32"),
    "int4": ("bf16", "fp16", "tf32", "fp32"),
    "int8": ("fp16", "bf16", "tf32", "fp32"),
    "fp16": ("bf16", "tf32", "fp32"),
    "bf16": ("tf32", "fp32"),
    "tf32": ("fp32",),
    "fp32": (),
}

#: the formats a 4-bit format's values also fit exactly with 8-bit multipliers (int4 -> int8, or fp8: e4m3 holds
#: every integer of -8..7; fp4 -> fp8): the fastest a recipe that quantizes the activations too (W4A8) could run,
#: used for hard bounds only (:func:`datapath_format` with ``bound=True``), never for an estimate
BOUND_FORMATS: dict[str, tuple[str, ...]] = {"fp4": ("fp8",), "int4": ("int8", "fp8")}

#: training precisions that need their own datapath: fp8 (Transformer Engine, FP8 tensor cores) and fp4 (NVFP4)
TRAINING_NEEDS_DATAPATH = ("fp8", "fp4")


def device_rates(device) -> dict | None:
    """A device's rates per number format: a wafer's FLOP/cycle per PE, a GPU's dense peaks; None for a kind with
    neither."""
    rates = getattr(device, "flop_per_cycle_per_pe", None) or getattr(device, "dense_peak_flop_per_s", None)
    return rates if isinstance(rates, dict) else None


def _si(v) -> float:
    return float(v.si) if hasattr(v, "si") else float(v)


def datapath_format(rates: Mapping[str, object], precision: str, rate: Callable[[object], float] = _si, *,
                    bound: bool = False) -> str | None:
    """The format whose rate ``precision`` runs at on a device with these ``rates`` (format -> rate): its own where
    listed, else the fastest of :data:`WIDER_FORMATS` the device lists (``bound``: of :data:`BOUND_FORMATS` too, the
    fastest any recipe could run it at); None when it lists none of them."""
    if precision in rates:
        return precision
    best = None
    for p in (BOUND_FORMATS.get(precision, ()) if bound else ()) + WIDER_FORMATS.get(precision, ()):
        if p in rates and (best is None or rate(rates[p]) > rate(rates[best])):
            best = p
    return best


def training_refusal(name: str, rates: Mapping[str, object] | None, precision: str) -> str | None:
    """Why ``precision`` cannot train on a device named ``name`` with these ``rates`` (one line for an InputError), or
    None when it can. ``rates`` None (a device kind without per-format rates): only int4 is refused."""
    if precision == "int4":
        return ("precision: int4 training has no published recipe on any hardware (4-bit training recipes such as NVFP4 "
                "are float formats); give --precision bf16, fp8 or, on hardware with an fp4 datapath, fp4")
    if rates is not None and precision in TRAINING_NEEDS_DATAPATH and precision not in rates:
        have = ", ".join(p for p in WIDER_FORMATS if p in rates)
        alt = "fp8" if precision == "fp4" and "fp8" in rates else "bf16"
        return (f"precision: {precision} training needs an {precision} datapath and {name} has none in the catalog "
                f"(it lists {have}); give --precision {alt} or choose hardware with {precision}")
    return None
