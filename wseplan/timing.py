"""Time: how long a training step, a prefill, a decoded token or a whole request takes, and why.

A view of the planning chain (:func:`wseplan.plan.plan`), reported with the time record's fields
(:class:`~wseplan.records.TimeResult`). Nothing is timed that does not fit: such a record has ``fits: false``
and no times.
"""
from __future__ import annotations

from .catalog.load import load_catalog
from .errors import InputError
from .plan import plan
from .plan_notes import no_time_model
from .records import PlanRecord, StreamResult, TimeResult, view
from .targets import parse_target

#: family options accepted by :func:`predict_time` as keyword arguments; layout keys go to ``layout``
LAYOUT_KEYS = {"tensor_parallel": "tp", "pipeline_parallel": "pp", "data_parallel": "dp", "micro_batch": "micro_batch",
               "virtual_pipeline": "vpp", "recompute": "recompute", "zero_stage": "zero_stage",
               "context_parallel": "cp", "expert_parallel": "ep", "attention_data_parallel": "adp", "num_wafers": "num_wafers",
               "num_systems": "num_systems"}


def require_time_model(s) -> None:
    """Refuse a question that needs times (serving, cost, scaling) of a model its family cannot time: a layer-list
    model fits (memory) but GPU and resident-wafer kernels need a transformer's shapes (audit31b H1/H3/M4: cost and
    scale failed with a traceback, serve and fleet said "does not fit"). ``s``: a :class:`~wseplan.plan.Setup`."""
    if getattr(s.ctx, "transformer", True) is False:
        raise InputError(f"model: {no_time_model(s.family.name, getattr(s.query.model, 'name', 'this model'))}; "
                         "`wseplan fit` gives its memory")


def time_view(r: PlanRecord) -> TimeResult:
    """The time fields of a plan record."""
    return view(TimeResult, r, layout=r.layout or None)


def predict_time(model, target, *, phase: str = "decode", precision: str = "bf16", batch: int | None = None,
                 context: int | None = None, output_tokens: int | None = None, catalog=None, software: str | None = None,
                 layout: dict | None = None, require_fit: bool = True, **options) -> TimeResult:
    """Predict time and throughput of ``model`` on ``target`` (the API behind ``wseplan time``).

    ``model``/``target``/sizes as for :func:`wseplan.plan.plan`. Layout values may be given as ``layout={...}``
    or as keywords (``tensor_parallel``, ``pipeline_parallel``, ``data_parallel``, ``micro_batch``,
    ``virtual_pipeline``, ``num_wafers``, ``num_systems``); other keywords are family options (``recompute``,
    ``zero_stage``, ``policy``, ``memoryx_option``, ``core_grid`` ...).
    """
    lay = dict(layout or {})
    # a wafer's micro-batch is a pass's sequences per system, an option of weight streaming, as `stream` takes it
    # (audit32c F5: `time --micro-batch` on a CS-3 was refused as "not a layout")
    wafer = "micro_batch" in options and (parse_target(target, catalog or load_catalog()) if isinstance(target, str)
                                          else target).kind == "wafer"
    for k in list(options):
        if k in LAYOUT_KEYS and not (wafer and k == "micro_batch"):
            v = options.pop(k)
            if v is not None:
                lay[LAYOUT_KEYS[k]] = v
    r = plan(model, target, phase=phase, precision=precision, batch=batch, context=context, output_tokens=output_tokens,
             layout=lay or None, software=software, options=options, catalog=catalog, require_fit=require_fit)
    if r.fits and r.step_s is None:
        raise InputError(f"model: {r.notes[-1]}")
    return time_view(r)


def stream_view(r: PlanRecord):
    """The weight-streaming fields of a wafer training plan record (``wseplan stream``)."""
    if r.family != "wafer_streaming":
        raise InputError(f"target: weight streaming runs on wafers in training (cs2, cs3, cs3x4 ...), got {r.target!r} "
                         f"({r.family}, {r.phase}); use `wseplan time --phase train` for GPUs")
    f = r.details["stream"]
    st = r.details["streaming"]
    # the step of every activation policy that fits, each at the passes its activations allow (none for a misfit)
    alt = {p: f[k] for p in ("store", "checkpoint", "recompute", "spill")
           if r.fits and (k := f"alt_{p}_step_s") in f and f[k] is not None and f[k] == f[k]}
    alt = alt if len(alt) > 1 else {}
    t = (lambda k: f[k]) if r.fits else (lambda k: None)  # noqa: E731  (no time for what does not fit)
    return StreamResult(model=r.model, target=r.target, hardware=r.hardware, precision=r.precision, batch=r.batch,
                        context=r.context, num_systems=int(r.layout["num_systems"]), per_system_batch=f["per_system_batch"],
                        tokens_per_step=float(r.batch * r.context), fits=r.fits, activation_policy=f["activation_policy"],
                        step_s=r.step_s, tokens_per_s=r.tokens_per_s, compute_s=t("compute_s"), recompute_s=t("recompute_s"),
                        exposed_load_s=t("exposed_load_s"), exposed_spill_s=t("exposed_spill_s"),
                        optimizer_exposed_s=t("optimizer_exposed_s"), utilization_frac=t("utilization_frac"),
                        model_flop_per_s=t("model_flop_per_s"), model_flop_utilization_frac=t("model_flop_utilization_frac"),
                        stream_bandwidth_bytes_per_s=f["stream_bandwidth_bytes_per_s"],
                        io_bandwidth_bytes_per_s=f["io_bandwidth_bytes_per_s"], transfer_latency_s=f["transfer_latency_s"],
                        memoryx_tier=f["memoryx_tier"], min_tokens_compute_bound=st["min_tokens_compute_bound"],
                        max_tokens_on_wafer=st["max_tokens_on_wafer"],
                        min_batch_compute_bound=st["min_batch_compute_bound"], max_batch_on_wafer=st["max_batch_on_wafer"],
                        feasible_compute_bound=st["feasible_compute_bound"], spill_bytes=f["spill_bytes"],
                        stream_floor_s=t("stream_floor_s"), compute_floor_s=t("compute_floor_s"),
                        bottleneck=r.bottleneck or ("memoryx_capacity" if r.binding == "memoryx" else "sram"),
                        alternatives_step_s=alt, notes=r.notes, interval_metric=r.interval_metric,
                        interval_low=r.interval_low, interval_high=r.interval_high, interval_note=r.interval_note)


def stream(model, target, *, precision: str = "bf16", batch: int | None = None, context: int | None = None,
           policy: str = "auto", memoryx_option: str | None = None, num_systems: int | None = None,
           micro_batch: int | None = None, reserve: float | None = None, software: str | None = None, catalog=None):
    """Weight-streaming training of ``model`` on wafer ``target`` (the API behind ``wseplan stream``): the same
    evaluation as ``fit``/``time --phase train`` on a wafer, with the streaming fields."""
    cat = catalog or load_catalog()
    t = parse_target(target, cat) if isinstance(target, str) else target
    if t.kind != "wafer":
        raise InputError(f"target: {t.text} is not a wafer; weight streaming is a CS-2/CS-3 question (cs3, cs3x16); for "
                         "GPU training use `wseplan time MODEL --target ... --phase train`")
    if num_systems is not None and t.count is not None and num_systems != t.count:
        raise InputError(f"systems: {num_systems} contradicts the target's count {t.count} ({t.text}); give one of "
                         f"them (e.g. --target {t.key}x{num_systems})")
    opts = {"policy": policy, "memoryx_option": memoryx_option, "micro_batch": micro_batch, "reserve": reserve}
    lay = {"num_systems": num_systems} if num_systems is not None else None
    return stream_view(plan(model, t, phase="train", precision=precision, batch=batch, context=context,
                            layout=lay, software=software, options=opts, catalog=cat))
