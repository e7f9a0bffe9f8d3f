"""Prediction of the GPU rows of a validation file: training steps, inference (static batches or an in-flight engine,
per the row's source), and GEMV kernels."""
from __future__ import annotations

import dataclasses
import math
import re
from functools import lru_cache

import numpy as np

from ..analytic import gpu_time as G
from ..catalog.load import load_catalog
from ..catalog.schema import Quantity
from ..catalog.software import calibrated_name, resolve_software
from ..plan import evaluate, setup
from ..pricing import job_devices, run_goodput
from ..serving import serve
from ..timing import predict_time
from .cases import SkipRow, case_model, note_hint
from .common import (GPU_INFER_PROFILE, GPU_PROFILE, _is_lora, _need_fit, _recompute, _target, _train_metric,
                     attention_dp_of, attention_kernel_of, dp_comm_overlap_of, file_constants, gemv_shape, moe_dispatch_of, pipeline_split_of,
                     sequence_parallel_of, speculation_of,
                     tp_comm_overlap_of, trial_of, wafer_profile_for)


@lru_cache(maxsize=512)
def _software(cal, base: str = GPU_PROFILE, scheduling: str | None = None):
    """The GPU profile ``base`` (by default that of the training and kernel rows) as a row runs it.

    With a trial calibration ``cal`` (a :class:`GpuCalibration` or :class:`Trial`) its file constants stand in for the
    calibration file's, the profile's own constants keep the values the profile states unless the trial sets them, as
    at run time (the device reads the calibration file, then the profile's constants over it). ``scheduling="static"``
    runs the profile's mechanisms as static batches (one batch prefilled together, then decoded together)."""
    prof = resolve_software(base, "gpu", load_catalog())
    trial = trial_of(cal)
    if trial is not None:
        consts = {f.name: _quantity(getattr(trial.cal, f.name)) for f in dataclasses.fields(trial.cal)}
        consts.update({k: _quantity(q.si) for k, q in prof.constants.items()})  # as stated (its prior), not fitted
        consts.update({k: _quantity(v) for k, v in trial.overrides(calibrated_name(prof)).items()})
        prof = prof.model_copy(update={"constants": consts})
    if scheduling == "static" and prof.engine.scheduling != "static":
        eng = prof.engine.model_copy(update={"scheduling": "static", "prefill_pass": "batch", "speculative": None})
        prof = prof.model_copy(update={"name": f"{prof.name}/static", "engine": eng})
    return prof


def _quantity(v: float) -> Quantity:
    return Quantity(value=float(v), source="wseplan-estimate", basis="estimate", note="calibration trial")


def _hint_int(case, key: str):
    """An integer ``key=N`` hint of the row's notes (a layout detail without a column, e.g. ``micro_batch``), or
    None."""
    v = note_hint(case.notes, key)
    return int(float(v)) if v else None


def _predict_gpu_train(case, catalog, cal):
    model = case_model(case, catalog)
    f = case.fields
    precision = f.get("precision") or "bf16"
    seq = f.get("seq_len")
    if not seq:
        raise SkipRow("seq_len not given")
    n = f.get("n_devices")
    cp, vpp = f.get("cp") or 1, f.get("vpp")
    single = case.metric == "layer_fwd_bwd_ms"
    gb = f.get("global_batch")
    if not gb:
        raise SkipRow("global_batch not given")
    if single:  # one layer on the row's GPUs, tensor-parallel over all of them unless tp is stated
        tp, pp, dp = f.get("tp") or n or 1, 1, 1
        n = tp
    else:
        if not n:
            raise SkipRow("n_devices not given")
        tp, pp, dp = train_degrees(f.get("tp"), f.get("pp"), f.get("dp"), n=n, cp=cp)
    layout = {"tp": tp, "pp": pp, "dp": dp, "vpp": vpp, "recompute": f.get("recompute") or _recompute(case),
              "zero_stage": f.get("zero_stage"), "micro_batch": gb if single else _hint_int(case, "micro_batch"), "ep": f.get("ep")}
    if single:
        layout.update(vpp=1, zero_stage=layout["zero_stage"] or 1, dp=1)
    elif f.get("tp") is None and f.get("pp") is None and f.get("dp") is None and n > 1:
        # layout not stated: the fastest layout that fits, as the team that ran it would have tuned it
        layout = {"recompute": f.get("recompute"), "zero_stage": f.get("zero_stage"), "ep": f.get("ep")}
        if layout["recompute"] is None and f.get("flops_convention") == "hardware":
            layout["recompute"] = "full"
    elif f.get("zero_stage") is None:
        layout["zero_stage"] = 1
    trainable = "lora" if _is_lora(case) else "full"
    count = tp if single else n
    target = _target(case, catalog, count)
    kw = dict(phase="train", precision=precision, batch=gb, context=seq, catalog=catalog, context_parallel=cp,
              trainable=trainable, single_layer=single or None, attention_kernel=attention_kernel_of(case),
              tp_comm_overlap=tp_comm_overlap_of(case), dp_comm_overlap=dp_comm_overlap_of(case),
              sequence_parallel=sequence_parallel_of(case),
              pipeline_split=pipeline_split_of(case), software=_software(cal))
    kw.update(moe_dispatch_of(case))
    if getattr(cal, "ideal", False):  # the bound: the fastest MoE dispatch a run may have used, on any schedule
        kw.update(expert_dispatch="hierarchical", expert_comm_overlap="dualpipe")
    res = predict_time(model, target, require_fit=False, layout={k: v for k, v in layout.items() if v is not None}, **kw)
    if not res.fits and not f.get("recompute") and not single:
        # the default recompute does not fit the stated layout: the run used what fits (the planner's fastest
        # recompute and, for the columns the row leaves out, the rest), never a layout the memory model refuses
        fit = predict_time(model, target, layout={k: v for k, v in layout.items() if v is not None and k != "recompute"},
                           **kw)
        if fit.fits and fit.step_s is not None:
            res = fit
    _need_fit(res)
    step = res.step_s
    if single:
        return step * 1e3
    lay = res.layout or {}
    rec = lay.get("recompute", _recompute(case))
    if rec == "partial":  # the share of a stage's layers recomputed whole
        rec = lay.get("recompute_layers", 0) / math.ceil(model.num_layers / lay.get("pipeline_parallel", 1))
    return _train_metric(case, model, step_s=step, tokens_per_step=gb * seq, num_devices=res.num_devices,
                         peak_flop_per_s=target.device.peak_flop_per_s(precision), recompute=rec,
                         cal=file_constants(cal), goodput=float(run_goodput("gpu", catalog, job_devices(lay, res.num_devices))))


def train_degrees(tp, pp, dp, *, n: int, cp: int = 1) -> tuple[int | None, int | None, int | None]:
    """A training row's tensor, pipeline and data-parallel degrees with the empty ones the device count decides
    (the file's rule: an empty degree is 1 only where the count makes that the only option). Given degrees stay; with
    one empty it is ``n / (cp x the other two)``, and with two or three empty the ones the count leaves no choice
    for are 1 when the given degrees already use every device. The rest stay None, and the planner searches them
    with the given ones held. Raises SkipRow when the given degrees do not divide the count."""
    given = [v for v in (tp, pp, dp) if v]
    prod = cp
    for v in given:
        prod *= v
    if n % prod:
        raise SkipRow(f"the stated parallel degrees (product {prod}) do not divide n_devices {n}")
    rest = n // prod
    empty = [v is None or v == 0 for v in (tp, pp, dp)]
    if sum(empty) == 1 or rest == 1:
        tp, pp, dp = (rest if e else v for v, e in zip((tp, pp, dp), empty))
    return tp, pp, dp


def _infer_layout(case):
    f = case.fields
    n = f.get("n_devices")
    tp, pp, dp = f.get("tp"), f.get("pp"), f.get("dp")
    if pp is None:  # an empty pipeline degree is what the count leaves over a stated tp x dp, else 1
        pp = n // (tp * dp) if n and tp and dp and n % (tp * dp) == 0 else 1
    if tp is None:
        if n is None:
            raise SkipRow("n_devices and tp not given")
        tp = max(n // (pp * (dp or 1)), 1)
    if dp is None:
        dp = max((n or tp * pp) // (tp * pp), 1)
    return tp, pp, dp


#: words in a row's source or notes that name a serving engine under load (in-flight / continuous batching)
INFLIGHT_MARKERS = ("mlperf", "nim for llms", "trtllm-bench", "in-flight", "inflight", "continuous batching", "vllm",
                    "sglang", "aiperf")
_SLA = re.compile(r"TTFT p(\d+)\s*<=\s*([\d.]+)\s*s and TPOT p\d+\s*<=\s*([\d.]+)\s*ms", re.I)


#: words in a row's source or notes that name TensorRT-LLM (its own docs, trtllm-bench, NVIDIA's MLPerf harness)
TRTLLM_MARKERS = ("tensorrt-llm", "tensorrt llm", "trtllm", "trt-llm", "_trt/")
#: the production profile as TensorRT-LLM sizes its KV cache (a share of the memory the weights leave free)
GPU_TRTLLM_PROFILE = "gpu-production-trtllm"


def gpu_engine_profile_for(case) -> str:
    """The production profile an in-flight GPU row's engine runs: :data:`GPU_TRTLLM_PROFILE` when its source or notes
    name TensorRT-LLM (:data:`TRTLLM_MARKERS`), whose KV cache takes a share of the memory left after the weights;
    else :data:`~.common.GPU_INFER_PROFILE` (vLLM's rule: a share of the whole memory). Both run the same calibrated
    mechanism constants."""
    text = f"{case.source} {case.notes}".lower()
    return GPU_TRTLLM_PROFILE if any(m in text for m in TRTLLM_MARKERS) else GPU_INFER_PROFILE


#: the first TensorRT-LLM release whose decode kernels read each KV head once for its group of query heads: v0.7
#: improved the GQA generation kernels (up to 2.4x on Llama-70B over v0.5), v0.8 shipped XQA (sources
#: trtllm-blog-falcon180b-h200, trtllm-blog-xqa); earlier releases ran one thread block per query head
TRTLLM_GROUPED_DECODE = (0, 7)
_VERSION = re.compile(r"\bv(\d+)\.(\d+)")
_DECODE_ATTENTION = re.compile(r"\bdecode_attention=(grouped|per_query_head)\b")


def decode_attention_of(case) -> str:
    """How the row's engine read a grouped-query KV cache in decode (the engine's ``decode_attention``):
    ``decode_attention=grouped|per_query_head`` in its notes; else ``per_query_head`` when its source names a
    TensorRT-LLM release before :data:`TRTLLM_GROUPED_DECODE` (``v0.5.0``, ``updated for v0.6.1``); else ``grouped``
    (every current engine). Documented in docs/validation.md."""
    m = _DECODE_ATTENTION.search(case.notes or "")
    if m:
        return m.group(1)
    src = case.source or ""
    if any(k in src.lower() for k in TRTLLM_MARKERS):
        v = _VERSION.search(src)
        if v and (int(v.group(1)), int(v.group(2))) < TRTLLM_GROUPED_DECODE:
            return "per_query_head"
    return "grouped"


def gpu_scheduling_for(case) -> str:
    """How the measured engine scheduled requests: ``inflight`` when the row's source is a serving engine or load
    generator (MLPerf, NIM/AIPerf, trtllm-bench, vLLM, SGLang), ``static`` for static-batch harnesses and by default
    (research scripts, fixed-batch benchmark tables), whatever else the notes mention (a note may contrast the
    in-flight measurement with a static batch). Documented in docs/validation.md."""
    text = f"{case.source} {case.notes}".lower()
    if any(m in text for m in INFLIGHT_MARKERS):
        return "inflight"
    return "static"  # static-batch harnesses (gptSessionBenchmark tables), research scripts, fixed-batch tables


def sla_of(case) -> tuple[float, float, float] | None:
    """(percentile, TTFT limit [s], TPOT limit [s]) a server-scenario row states as its constraints, else None."""
    m = _SLA.search(case.notes or "")
    return None if not m else (float(m.group(1)), float(m.group(2)), float(m.group(3)) / 1e3)


#: the production profile with speculative decoding, for rows that state it (``speculative=yes``)
GPU_SPECDEC_PROFILE = "gpu-production-specdec"


def gpu_profile_for(case) -> str:
    """The GPU software profile (calibrated name) an inference row runs: the research profile (:data:`GPU_PROFILE`)
    for the GPU baselines of the WaferLLM paper, as its wafer rows run ``wafer-research``; else the production engine's
    (:data:`GPU_INFER_PROFILE`)."""
    return GPU_PROFILE if wafer_profile_for(case) == "wafer-research" else GPU_INFER_PROFILE


def _gpu_engine(case, cal):
    """The software profile a GPU inference row runs (:func:`gpu_profile_for`): the production mechanism constants (or
    a calibration trial's), scheduled as the row's engine was (:func:`gpu_scheduling_for`); the research profile for
    the WaferLLM GPU baselines."""
    if gpu_profile_for(case) == GPU_PROFILE:
        return _software(cal)
    sw = _software(cal, gpu_engine_profile_for(case), gpu_scheduling_for(case))
    if decode_attention_of(case) != sw.engine.decode_attention:
        eng = sw.engine.model_copy(update={"decode_attention": decode_attention_of(case)})
        sw = sw.model_copy(update={"name": f"{sw.name}/{eng.decode_attention}", "engine": eng})
    spec, draft = speculation_of(case, load_catalog())
    if spec is None:
        return sw
    if not spec:  # the row states no speculation
        return sw.model_copy(update={"engine": sw.engine.model_copy(update={"speculative": None})})
    # the row states speculative decoding: the profile that runs it (draft, length, acceptance), its named draft
    sp = resolve_software(GPU_SPECDEC_PROFILE, "gpu", load_catalog()).engine.speculative
    if draft:
        sp = sp.model_copy(update={"draft_model": draft})
    k = note_hint(case.notes, "draft_tokens")  # the row's draft length (TensorRT-LLM's MTP3: 3)
    if k:
        sp = sp.model_copy(update={"draft_tokens": sp.draft_tokens.model_copy(update={"value": int(float(k)),
                                                                                      "si": float(k)})})
    return sw.model_copy(update={"name": f"{sw.name}+speculative", "engine": sw.engine.model_copy(update={"speculative": sp})})


def _predict_gpu_infer(case, catalog, cal):
    model = case_model(case, catalog)
    f = case.fields
    precision = f.get("precision") or "bf16"
    tp, pp, dp = _infer_layout(case)
    target = _target(case, catalog, tp * pp * dp)
    inp, out, conc = f.get("input_len"), f.get("output_len"), f.get("concurrency")
    if not inp:
        raise SkipRow("input_len not given")
    sw = _gpu_engine(case, cal)
    layout = {"tp": tp, "pp": pp, "dp": dp}
    adp = attention_dp_of(case)
    if adp is not None and getattr(model, "num_experts", 1) > 1:  # stated; else searched (an MoE model's engines offer it)
        layout["adp"] = tp if adp else 1
    if conc is None and case.phase == "e2e-infer" and case.metric in ("tokens_per_s", "tokens_per_s_per_gpu"):
        if not out:
            raise SkipRow("output_len not given")
        return _max_throughput(case, model, target, sw, precision, inp, out, layout, catalog) / (
            1.0 if case.metric == "tokens_per_s" else tp * pp * dp)
    inflight = sw.engine.scheduling == "inflight"
    prefill_only = case.metric in ("ttft_ms", "prefill_tokens_per_s") or case.phase == "prefill"
    if inflight and out and out > 1 or not prefill_only and case.phase != "decode":
        phase = "serve"  # a request's life in the engine: TTFT, TPOT with the other requests' prompt chunks
        if not out:
            raise SkipRow("output_len not given")
    else:
        phase = "prefill" if prefill_only else "decode"
    s = setup(model, target, phase=phase, precision=precision, software=sw, catalog=catalog)
    n1 = np.ones(1)
    cfg = {"batch": n1 * (conc or 1), "context": n1 * inp, "output_tokens": n1 * (out or 1),
           **{k: n1 * v for k, v in layout.items()}}
    arr = evaluate(s, cfg, require_fit=False)
    if not np.isfinite(arr["step_s"][0]):
        raise SkipRow("no time: the layout does not run")
    g = {k: float(np.asarray(v)[0]) for k, v in arr.items() if k in ("step_s", "ttft_s", "tpot_s", "tokens_per_s",
                                                                      "request_s")}
    if phase == "serve" and (conc or 1) > 1 and not bool(np.asarray(arr["fits"])[0]):
        # more users than the KV cache holds: the engine runs the largest batch that fits and queues the others, the
        # answer `wseplan serve --concurrency` gives (one implementation: :mod:`wseplan.admission`)
        res = serve(model, target, precision=precision, software=sw, input_tokens=int(inp), output_tokens=int(out),
                    concurrency=int(conc), layout=layout, catalog=catalog, prices=False)
        if res.points:
            p = res.chosen
            req = p.ttft_s + (out - 1) * p.tpot_s
            g = {"ttft_s": p.ttft_s, "tpot_s": p.tpot_s, "tokens_per_s": p.tokens_per_s, "request_s": req, "step_s": req}
    if case.metric == "ttft_ms":
        return g["ttft_s"] * 1e3
    if case.metric == "prefill_tokens_per_s":
        return inp / g["ttft_s"]
    if phase == "prefill":
        if case.metric in ("tokens_per_s", "tokens_per_s_per_gpu"):
            sys_tok = g["tokens_per_s"]  # prompt tokens/s of all replicas
            return sys_tok if case.metric == "tokens_per_s" else sys_tok / (tp * pp * dp)
        if case.metric == "latency_ms":
            return g["ttft_s"] * 1e3
        raise SkipRow(f"metric {case.metric} is not predicted for prefill rows")
    if case.metric == "tokens_per_s_per_user":
        # decode rows: 1/TPOT; end-to-end rows: output tokens over the request's prefill and decode
        return 1.0 / g["tpot_s"] if case.phase == "decode" else out / g["request_s"]
    if case.metric == "tokens_per_s_per_gpu":
        return g["tokens_per_s"] / (tp * pp * dp)
    if case.metric == "tokens_per_s":
        return g["tokens_per_s"]
    if case.metric == "latency_ms":  # decode: one output token; e2e: the whole request
        return (g["tpot_s"] if case.phase == "decode" else g["step_s"]) * 1e3
    raise SkipRow(f"metric {case.metric} is not predicted for inference rows")


#: loads (share of capacity) tried for a server-scenario row: the highest whose TTFT meets the limit is reported
_SERVER_LOADS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98)


def _max_throughput(case, model, target, sw, precision, inp, out, layout, catalog) -> float:
    """Output tokens/s of the whole target at the engine's best operating point: offline (no concurrency, no limits)
    the largest batch that fits at full load; a server scenario (limits in the notes) the highest load and batch
    whose TTFT and TPOT percentiles meet them."""
    sla = sla_of(case)
    kw = dict(precision=precision, software=sw, input_tokens=int(inp), output_tokens=int(out), layout=layout,
              catalog=catalog, prices=False)
    if sla is None:
        res = serve(model, target, **kw)
        if not res.points:
            raise SkipRow("no time: the model does not fit the layout at any concurrency")
        return max(p.capacity_requests_per_s for p in res.points) * out
    pct, ttft, tpot = sla
    best = 0.0
    for u in _SERVER_LOADS:
        res = serve(model, target, utilization=u, ttft_limit_s=ttft, tpot_limit_s=tpot, percentile=pct, **kw)
        best = max([best] + [p.tokens_per_s for p in res.points if p.meets_sla])
    if best <= 0:
        raise SkipRow("no operating point meets the row's stated TTFT/TPOT limits")
    return best


def _predict_gpu_kernel(case, catalog, cal):
    shape = gemv_shape(case.model)
    if shape is None or case.metric != "latency_ms":
        raise SkipRow("kernel is not a GEMV latency; no model for it")
    tp = case.get("tp") or case.get("n_devices") or 1
    target = _target(case, catalog, tp)
    precision = case.get("precision") or "fp16"
    t = G.gemv_time_s(target.device, m=shape[0], k=shape[1], n=shape[2], tp=tp, precision=precision,
                      cal=file_constants(cal))
    return float(t) * 1e3

