"""Fit: does a model fit a target, on how many devices, what binds, and how much headroom is left.

A view of the planning chain (:func:`wseplan.plan.plan`): the same evaluation as ``time`` and ``cost`` (the
layout is searched the same way), reported with the fit record's fields (:class:`~wseplan.records.FitResult`).
"""
from __future__ import annotations

from .analytic.memory import RECOMPUTE
from .catalog.load import load_catalog
from .devices import family_for
from .devices.speculation import SPEC_OPTIONS
from .errors import InputError
from .plan import normalise_phase, plan
from .records import FitResult, PlanRecord, view
from .targets import parse_target
from .workload import build_workload, resolve_model  # noqa: F401  (public names of this module)


def fit_view(r: PlanRecord) -> FitResult:
    """The fit fields of a plan record."""
    extra = r.details
    return view(FitResult, r, stages=extra.get("stages", []), layout=r.layout or None, memoryx=extra.get("memoryx"),
                streaming=extra.get("streaming"))


def fit(model, target, *, precision: str = "bf16", phase: str = "decode", batch: int | None = None,
        context: int | None = None, output_tokens: int | None = None, reserve: float | None = None, catalog=None,
        zero_stage: int | None = None, recompute: str | None = None, memoryx_option: str | None = None,
        layout: dict | None = None, software: str | None = None, speculative: str | None = None,
        kv_precision: str | None = None, trainable: str | None = None) -> FitResult:
    """Does ``model`` fit ``target``? The Python API behind ``wseplan fit``.

    Parameters
    ----------
    model : str or Model
        Catalog name/alias, a Hugging Face ``config.json`` path, a layer-list YAML path, or a Model.
    target : str
        ``<hardware key>[x<N>]``; without a count, the fewest devices that fit.
    precision : str
        Weight/compute format (fp32, tf32, bf16, fp16, fp8, int8, int4, fp4).
    phase : str
        ``train`` (wafer: weight streaming with MemoryX), ``prefill``, ``decode`` or ``serve`` (weights resident).
    batch, context, output_tokens : int
        Sequences, tokens per sequence (KV length for decode), generated tokens (serve). Defaults from
        ``catalogs/defaults.yaml``.
    reserve : float
        Share of SRAM/HBM kept back [fraction, 0-1); default from the catalog.
    zero_stage, recompute : GPU training options (searched with the layout when not given).
    memoryx_option : wafer training: MemoryX capacity option.
    layout : dict
        A layout to use instead of searching one (see :func:`wseplan.plan.plan`).
    software : str
        Software profile (default: the family's production profile).
    speculative : str
        Inference: the draft model for speculative decoding, or ``"none"`` (default: the software profile's, e.g.
        wafer-production's Llama-3.2-1B); the record's notes say whether it runs. The memory figures are the target's.
    kv_precision : str
        GPU inference: the KV cache's own format (``fp8``, ``int8``, ``bf16`` ...; default: fp8 with fp8 weights,
        else 16-bit).
    trainable : str
        GPU training: ``full`` (default), ``lora`` or ``lora-all`` (frozen base weights: no weight gradients or
        optimizer state for them), as ``wseplan time --trainable`` (audit33e M2: fit could not answer a LoRA question).
    """
    if zero_stage is not None and (isinstance(zero_stage, bool) or zero_stage not in (0, 1, 2, 3)):
        raise InputError(f"zero: ZeRO stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if recompute is not None and recompute not in RECOMPUTE:
        raise InputError(f"recompute: must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    if memoryx_option is not None and phase != "train":
        raise InputError(f"memoryx: a MemoryX option applies to wafer training only (phase {phase!r}); drop --memoryx "
                         "or use --phase train")
    opts = {"reserve": reserve, "memoryx_option": memoryx_option, "speculative": speculative,
            "kv_precision": kv_precision, "trainable": trainable}
    lay = dict(layout or {})
    if zero_stage is not None:
        lay["zero_stage"] = zero_stage
    if recompute is not None:
        lay["recompute"] = recompute
    opts, cols = _family_options(target, phase, opts, catalog)
    for k, flag in (("zero_stage", "--zero"), ("recompute", "--recompute")):  # not ignored where it does not apply
        if k in lay and k not in cols:  # (audit30a M5: fit printed the same bytes with and without it; time refuses it)
            raise InputError(f"{flag}: applies to GPU training (--phase train on a GPU target), not phase {phase} on "
                             f"{target if isinstance(target, str) else target.key}; drop {flag}")
    return fit_view(plan(model, target, phase=phase, precision=precision, batch=batch, context=context,
                         output_tokens=output_tokens, layout=lay or None, software=software, options=opts,
                         catalog=catalog))


def _family_options(target, phase: str, opts: dict, catalog) -> tuple[dict, tuple[str, ...]]:
    """The options the target's family takes (a GPU option given for a wafer target is not an error here) and the
    family's layout columns for the phase."""
    cat = catalog or load_catalog()
    t = parse_target(target, cat) if isinstance(target, str) else target
    ph = normalise_phase(phase, None)
    fam = family_for(t.kind, ph)
    cols = tuple(fam.columns(ph)) if hasattr(fam, "columns") else tuple(fam.layout_columns)
    # the speculative options and the KV format always reach plan.setup, which refuses them where they do not apply
    # (review28b #1: a wafer's fit dropped --kv-precision, even an unknown one)
    return {k: v for k, v in opts.items()
            if v is not None and (k in fam.options or k in SPEC_OPTIONS or k in ("kv_precision", "trainable"))}, cols
