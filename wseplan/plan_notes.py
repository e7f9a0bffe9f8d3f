"""The notes and hints a plan record carries (split from :mod:`wseplan.plan`): a format run without its own datapath,
speculative decoding on or off and why, the fix for a configuration that does not fit, and a training step's hard
floors (the interval's and the cost error's fast end)."""
from __future__ import annotations

from .catalog.precision import datapath_format, device_rates


def _si(v) -> float:
    return float(v.si) if hasattr(v, "si") else float(v)


def _datapath_note(t, precision: str, phase: str) -> list[str]:
    """A note when the target's catalog entry has no rate for ``precision`` and its math runs at a wider format's
    (:func:`~wseplan.catalog.precision.datapath_format`): inference keeps the weights in ``precision`` in memory and
    widens them in the kernel (weight-only, as vLLM's FP8 Marlin runs fp8 on Ampere)."""
    rates = device_rates(getattr(t, "device", None))
    if phase == "train" and precision == "int8" and getattr(t, "kind", None) == "gpu" and rates is not None \
            and precision in rates:  # audit37b F9: priced as a mainstream run at the 8-bit rate, without a word
        return [f"int8 training is timed at {t.key}'s int8 tensor-core rate with fp8 training's scaling costs: no "
                "published large-scale int8 pre-training recipe is validated (fp8, Transformer Engine, is the "
                "production 8-bit recipe: --precision fp8)"]
    if rates is not None and precision in rates:
        # a 16-bit format the device runs far below its other 16-bit format (audit32a F4: bf16 on a V100 runs at its
        # fp32 rate, 7.3x slower than fp16, and said nothing)
        other = {"bf16": "fp16", "fp16": "bf16"}.get(precision)
        if getattr(t, "kind", None) == "gpu" and other in rates and _si(rates[other]) > 2.0 * _si(rates[precision]):
            return [f"{t.key} runs {precision} at {_si(rates[precision]) / 1e12:.3g} TFLOP/s against "
                    f"{_si(rates[other]) / 1e12:.3g} for {other} (--precision {other} uses its faster datapath)"]
        return []
    if rates is None:
        return []
    wider = datapath_format(rates, precision)
    if wider is None:
        return []
    if phase == "train":
        return [f"{t.key} has no {precision} datapath in the catalog: its math runs at the {wider} rate"]
    return [f"{t.key} has no {precision} datapath in the catalog: its {precision} weights are read as {precision} and "
            f"widened to {wider} in the kernel (weight-only: {wider} activations), so its math runs at the {wider} "
            "rate"]


def layout_note(s: Setup, r: dict, require_fit: bool = True) -> list[str]:
    """A searched prefill on an in-flight engine runs on its serving replica (:func:`wseplan.plan._serving_choice`): the
    layout ``serve`` chooses for whole requests, not the fastest prefill (audit32a F5: "searched" read as the
    prefill's own optimum, 14-35% slower than layouts the user can give). A measured run (``require_fit=False``) keeps
    the prefill's own layout: no note."""
    q = s.query
    if not require_fit or q.phase != "prefill" or q.software.engine.scheduling != "inflight" or q.target.kind != "gpu" or \
            not bool(r.get("layout_searched", False)):
        return []
    n = int(q.catalog.defaults.default_output_tokens.si)
    return [f"layout: the serving replica's (an in-flight engine prefills where it serves: the layout serve chooses "
            f"for whole requests of {n} answer tokens), not the fastest prefill; give the layout (--tp, --pp) to "
            "time another"]


def _speculation_note(s: Setup, r: dict) -> list[str]:
    """Whether speculative decoding is on at this point, with which draft, and if off why: the profile's draft cannot
    draft for this model (another tokenizer, or no smaller), does not fit beside the target in the memory the batch
    leaves, or a speculative step is no faster (a compute-bound batch)."""
    q = s.query
    if q.phase not in ("decode", "serve", "prefill"):
        return []
    spec = getattr(s.ctx, "spec", None)
    if q.phase == "prefill":  # a prompt's pass drafts nothing, but the draft builds its cache of the prompt
        acc = r.get("time.accepted_tokens_per_step")
        if spec is None or acc is None or not acc > 1.0:
            return []
        draft = getattr(spec["draft_model"], "name", spec["draft_model"])
        given = "as asked" if "speculative" in q.options else f"the {q.software.name} profile's default"
        return [f"the time to first token includes the draft model's prefill of the prompt ({draft}, {given}: the "
                "replica speculates when it decodes; --speculative none times a replica without a draft, its layout "
                "searched again)"]
    if spec is None:
        why = getattr(s.ctx, "spec_off", None)  # the profile's default draft refused for this model (set up once)
        return [] if why is None else [f"speculative decoding off: {why} (the {q.software.name} profile's default "
                                       "draft; --speculative names another)"]
    fits, acc = r.get("time.draft_fits"), r.get("time.accepted_tokens_per_step")
    draft = getattr(spec["draft_model"], "name", spec["draft_model"])
    if acc is not None and acc > 1.0:
        given = "as asked" if "speculative" in q.options else f"the {q.software.name} profile's default"
        return [f"speculative decoding on ({given}): {draft} drafts {spec['draft_tokens']:g} tokens a step, {acc:.3g} "
                "accepted per target pass (--speculative none for plain decoding); the draft's weights and KV cache "
                "use memory the target leaves free and are not in the memory figures"]
    if fits is None or acc is None:
        return []
    if fits < 0.5:
        return [f"speculative decoding off: the draft ({draft}) does not fit beside the target in the memory left at "
                "this batch and context (a smaller batch or more devices keep it)"]
    return [f"speculative decoding off: at this batch a speculative step with {draft} is no faster than a plain one"]


#: the fix where a streamed wafer cannot hold the weights it streams: whole layers are the stream unit (two in flight)
STREAM_UNIT_HINT = ("the weights a wafer holds while streaming (a whole layer, two in flight) exceed its SRAM: weight "
                    "streaming here streams whole layers, so no batch, context or system count fits this model")


def no_time_model(family: str, model: str) -> str:
    """Why a model that fits has no times: the one wording of ``time``, ``cost``, ``serve``, ``scale``, ``check`` and
    ``fleet`` (review31 L2)."""
    return (f"no {family} time model for {model} (a layer-list model has no transformer shapes; weight-streaming wafer "
            "training times it)")


def fit_fix(rec) -> str:
    """What would make a configuration that does not fit fit, by what binds: weights or optimizer state alone (no
    batch or context helps: more devices, or on a streamed wafer nothing), or the batch's KV cache and activations."""
    head = rec.notes[0] if rec.notes else ""
    if rec.family == "wafer_streaming" and head.startswith("does not fit") and "no time or cost is given; " in head:
        return head.split("no time or cost is given; ", 1)[1]  # the record's own hint: one answer (review28b #3)
    if rec.family == "wafer_streaming" and (rec.weights_bytes or 0.0) / max(rec.num_devices or 1, 1) > rec.capacity_bytes:
        return STREAM_UNIT_HINT  # the streamed layers alone overflow the wafer (review28 #2: not merely 'weights binds')
    if rec.family == "wafer_streaming":  # passes split the batch, systems split it too: a sequence is what overflows
        return "lower the context: one sequence must fit a wafer's pass (more systems split the batch, not a sequence)"
    n = max(rec.num_devices or 1, 1)
    per_batch = ((rec.activation_bytes or 0.0) + (rec.kv_cache_bytes or 0.0)) / n  # the fullest device's, per device
    if rec.binding in ("weights", "optimizer") and rec.per_device_bytes - per_batch > rec.capacity_bytes:
        return ("the weights and optimizer state alone overflow each device, at any batch or context: add devices "
                "(the target without a count finds how many)")
    adp = next((n for n in rec.notes if "data-parallel attention (--adp" in n), None)  # the GPU family's note
    if adp is not None and rec.binding == "kv_cache":
        return "lower the batch or context, add devices, or run the attention data-parallel: " + adp
    return "lower the batch or context, or add devices"


def one_sequence_hint(context: int, max_tokens_on_wafer: float, policy: str | None = None) -> str:
    """The fix where one training sequence overflows a streamed wafer's pass (no system count helps); under a given
    activation ``policy`` (not ``auto``) another policy may hold it."""
    if policy in (None, "auto"):
        return (f"one sequence of {context:,} tokens needs more than the {int(max_tokens_on_wafer):,} tokens a wafer "
                "holds in a pass at any system count: lower --context")
    return (f"under --policy {policy} one sequence of {context:,} tokens needs more than the {int(max_tokens_on_wafer):,} "
            "a wafer holds in a pass at any system count: lower --context, or let the policy be chosen (--policy auto)")


#: what each floor of a training step is (``details["floors"]``)
FLOOR_TEXT = {"compute_s": "the compute roof (the FLOPs it executes at the dense peak of the devices used)",
              "stream_s": "the time the links need to stream the weights"}


def floor_s(details: dict) -> float | None:
    """The least time a training record's step can take [s]: the larger of its floors (``details["floors"]``: the
    executed FLOPs at the dense peak of the devices used; a streamed wafer's weights in and out over its passes);
    None where no family states one."""
    f = details.get("floors") if isinstance(details, dict) else None
    return max(f.values()) if f else None


def floor_text(details: dict) -> str:
    """Which floor :func:`floor_s` is."""
    f = details.get("floors") or {}
    return FLOOR_TEXT[max(f, key=f.get)] if f else ""
