"""GPU family: nodes and clusters of GPUs (and TPU chips) with tensor, pipeline and data parallelism.

Layout columns: ``tp``, ``pp``, ``dp`` (data-parallel replicas: engine replicas in inference), and for training
``micro_batch``, ``vpp`` (virtual pipeline stages), ``recompute`` (0 none, 1 selective, 2 full, 3 partial),
``zero_stage``. Memory: :func:`wseplan.analytic.memory.gpu_layout_memory`; time: :mod:`wseplan.analytic.gpu_time`'s
per-operator roofline (training steps, inference passes composed by :mod:`wseplan.analytic.engine`). Search space (no layout given): ``tp`` powers of two in the scale-up domain dividing the heads, ``pp`` up to the
blocks, ``dp`` = devices / (tp pp) (else one replica); training adds micro-batches 1-32 dividing a replica's batch,
1-20 virtual stages (:data:`~wseplan.devices.gpu_train.VPP_VALUES`), the four recompute policies and ZeRO 0-3 (2-3 without a pipeline, as
DeepSpeed and Megatron-LM run them), each unless given; an awkward count also lays out smaller ones (:func:`~wseplan.
devices.gpu_train.train_counts`).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ..analytic import elementwise as X
from ..analytic import gpu_pass as P
from ..analytic import gpu_time as G
from ..analytic.attention_dp import rank_share
from ..analytic.memory import PARTIAL, RECOMPUTE, gpu_layout_memory
from ..analytic.moe_train import DISPATCHES
from ..calibration_data import GpuCalibration, gpu_calibration, profile_constants
from ..catalog.precision import datapath_format
from ..catalog.schema import Model
from ..errors import InputError
from ..workload import BYTES_PER_ELEMENT, build_workload, kv_bytes_per_element, num_experts, weight_bytes_per_param
from .base import BINDING_CODE, Family, Hardware, Query, argmax_code, binding_code
from .gpu_train import (CP_VALUES, EP_VALUES, VPP_VALUES, attention_dp_notes, check_attention_dp,  # noqa: F401
                        check_expert_parallel, expand_missing_column, implied_attention_dp, layout_grid, partial_frac,
                        train_memory, with_attention_dp, with_expert_parallel)
from .gpu_pass_row import adp_of as _adp, infer_pass as _pass
from .inference import InferenceMixin
from .speculation import SPEC_OPTIONS, default_draft_refused, draft_query, speculation
from .registry import register

TRAIN_COLUMNS = ("tp", "pp", "dp", "micro_batch", "vpp", "recompute", "zero_stage", "cp", "ep")

#: how a training framework may split the layers over pipeline stages (option ``pipeline_split``). ``uneven``
#: (default, current frameworks): any count per stage, so interleaving needs only a layer in each of the ``pp x vpp``
#: virtual stages (Megatron-core: ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``;
#: NVIDIA's MLPerf Training v5.0 Llama 3.1 405B layouts interleave its 126 layers on pp 8 x vpp 8, validation rows
#: R120-R137; Meta's own Llama 3 405B training, Llama Team 2024, arXiv:2407.21783, sec. 3.3.2: one layer fewer on the
#: first and last of 16 stages, with an interleaved schedule; DeepSpeed's pipeline partitions by parameters). ``even``: the layers divide ``pp x vpp`` for interleaving, as Megatron-LM required in its 2021-2022
#: releases (Narayanan et al. 2021). The stage time counts ``ceil(L / pp)`` layers either way (the fullest stage).
PIPELINE_SPLITS = ("uneven", "even")
INFER_COLUMNS = ("tp", "pp", "dp", "adp")  # adp: data-parallel attention ranks of a replica (gpu_train.with_attention_dp)


#: what a training run updates: ``full`` every weight; ``lora`` adapters on the attention projections, the base frozen
#: (MLPerf's Llama 2 70B LoRA reference: ``qkv_proj``, ``o_proj``; Hu et al. 2021); ``lora-all`` on every linear layer
TRAINABLE = ("full", "lora", "lora-all")


def tp_divides_heads(model, tp: int) -> bool:
    """Whether ``tp`` tensor-parallel ranks can split ``model``'s attention heads (every framework gives each rank whole
    heads); a model without heads (a layer list) takes any degree."""
    heads = getattr(model, "num_heads", None)
    return not heads or heads % int(tp) == 0


def layout_memory(w, catalog, *, tp, pp, dp, zero_stage=1, recompute="selective", micro_batch=1, vpp=1, batch=None,
                  context=None, working_tokens=None, reserve=None) -> dict:
    """Per-GPU memory of layouts (arrays broadcast) with the catalog's defaults: :func:`~wseplan.analytic.memory.
    gpu_layout_memory` with the gradient and Adam bytes per parameter and the prefill chunk from
    ``catalogs/defaults.yaml``; ``batch``/``context`` default to the workload's. [bytes]"""
    d = catalog.defaults
    return gpu_layout_memory(w, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, recompute=recompute, micro_batch=micro_batch,
                             virtual_stages=vpp, batch=w.batch if batch is None else batch,
                             context=w.context if context is None else context,
                             gradient_bytes_per_param=d.gradient_bytes_per_param.si,
                             adam_state_bytes_per_param=d.adam_state_bytes_per_param.si,
                             prefill_chunk_tokens=d.prefill_chunk_tokens.si, working_tokens=working_tokens,
                             logits_bytes_per_token=float(getattr(w.arch, "vocab_size", 0) or 0)
                             * d.training_logits_bytes_per_element.si if w.phase == "train" else 0.0)


#: memo of what a context derives from immutable inputs (the workload of a model, a profile's calibration), keyed by
#: the inputs' identities; each entry keeps its inputs alive, so an id is not reused while its entry stands
_MEMO: dict = {}
_MEMO_SIZE = 64


def _memo(key: tuple, inputs: tuple, make):
    hit = _MEMO.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], inputs)):
        return hit[1]
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    value = make()
    _MEMO[key] = (inputs, value)
    return value


def _gemm_ceiling_field(precision: str) -> str:
    """The calibration field of a format's GEMM ceiling (by its width, as :func:`~wseplan.analytic.gpu_gemm.gemm_max`)."""
    b = BYTES_PER_ELEMENT[precision]
    return "gemm_max_frac_4bit" if b <= 0.5 else "gemm_max_frac_8bit" if b <= 1.0 else "gemm_max_frac_16bit"


def weight_only_calibration(cal: GpuCalibration, precision: str, math: str) -> GpuCalibration:
    """The calibration of a ``precision`` model on a GPU that runs its math in the wider format ``math`` (no datapath of
    its own: :func:`~wseplan.catalog.precision.datapath_format`). Its weights keep ``precision``'s bytes, but its GEMMs
    are ``math`` kernels that widen them as they load (vLLM's FP8 Marlin on an A100: W8A16 on the 16-bit tensor
    cores), so they reach ``math``'s fitted ceiling rather than the ceiling fitted on ``precision``'s own tensor cores."""
    src, dst = _gemm_ceiling_field(precision), _gemm_ceiling_field(math)
    return cal if src == dst else cal.replace(**{src: getattr(cal, dst)})


def _profile_calibration(cal: GpuCalibration, profile) -> GpuCalibration:
    """The calibration with a software profile's constants (:func:`~wseplan.calibration_data.profile_constants`)."""
    over = {k: v for k, v in profile_constants(profile).items() if hasattr(cal, k)}
    return cal.replace(**over) if over else cal


class GpuContext:
    """Everything a GPU query needs, computed once."""

    def __init__(self, q: Query):
        #: a layer-list model fits (memory) but has no GPU time model (the kernels need a transformer's shapes)
        self.transformer = isinstance(q.model, Model)
        self.q, self.m = q, q.model
        self.num_layers = q.model.num_layers if self.transformer else len(q.model.layers)
        heads = q.model.num_heads if self.transformer else 1
        self.gpu = q.target.device
        self.count = q.target.count
        cat = q.catalog
        d = cat.defaults
        try:
            self.peak = self.gpu.peak_flop_per_s(q.precision)
        except ValueError:
            have = ", ".join(self.gpu.dense_peak_flop_per_s)
            raise InputError(f"precision: the catalog has no {q.precision} rate for {self.gpu.name} (nor for a wider "
                             f"format it could run at; it lists {have}); choose one of those, or give the figure "
                             "in a --catalog folder") from None
        cal = gpu_calibration()
        self.cal: GpuCalibration = _memo(("cal", id(cal), id(q.software)), (cal, q.software),
                                         lambda: _profile_calibration(cal, q.software))
        math = datapath_format(self.gpu.dense_peak_flop_per_s, q.precision)
        if math != q.precision:  # weight-only: the GEMMs run the wider format's kernels
            prof = self.cal
            self.cal = _memo(("wo", id(prof), q.precision, math), (prof,),
                             lambda: weight_only_calibration(prof, q.precision, math))
        self.engine = q.software.engine
        self.grouped_kv = self.engine.decode_attention == "grouped"  # the decode kernel shares a KV head's reads
        # the engine's KV-cache rule (inference): a share of the whole memory (vLLM: the reserve) or of what the
        # weights leave (TensorRT-LLM: kv_free_frac); a reserve given as an option always wins
        km = q.software.engine.kv_memory if q.phase != "train" and "reserve" not in q.options else None
        total_rule = km is not None and km.rule == "total"
        self.reserve = float(q.options.get("reserve", km.frac.si if total_rule else d.gpu_hbm_reserve_frac.si))
        self.capacity = self.gpu.hbm_bytes.si * (1.0 - self.reserve)
        free_rule = km is not None and km.rule == "free"
        self.kv_free_frac = float(km.frac.si) if free_rule else None
        self.runtime_bytes = float(km.runtime_bytes.si if km.runtime_bytes is not None else 0.0) if free_rule else None
        wphase = "train" if q.phase == "train" else "decode"
        # the KV cache's own format where the engine is told one (vLLM --kv-cache-dtype; audit28d M5)
        if q.phase == "train" and q.options.get("kv_precision") is not None:
            raise InputError("--kv-precision: a KV cache is inference's (prefill, decode, serve); training keeps none: "
                             "drop --kv-precision")
        self.kv_precision = q.options.get("kv_precision")
        self.w = _memo(("w", id(self.m), id(cat), q.precision, wphase, self.kv_precision), (self.m, cat),
                       lambda: build_workload(self.m, cat, precision=q.precision, phase=wphase, batch=1, context=1,
                                              kv_precision=self.kv_precision))
        self.chunk = d.prefill_chunk_tokens.si
        self.sequence_parallel = bool(q.options.get("sequence_parallel", True))
        trainable = q.options.get("trainable", "full")
        if trainable not in TRAINABLE:
            raise InputError(f"trainable: {trainable!r} is not a training kind; give 'full' (every weight), 'lora' (frozen "
                             "base, adapters on the attention projections) or 'lora-all' (adapters on every linear layer)")
        self.trainable = "lora" if trainable.startswith("lora") else "full"  # the step's compute is the same
        self.frozen_mlp = trainable == "lora"  # keeps no inputs of its linear layers (workload.frozen_mlp_bytes_per_token)
        # frozen weights need no 16-bit copy: fp8 runs store them in fp8 (NeMo's fp8_params, on with FP8 in NVIDIA's MLPerf
        # Llama 2 70B LoRA config: training_results_v4.0 .../llama2_70b_lora/implementations/nemo/conf/*peft*.yaml)
        self.weight_frac = (weight_bytes_per_param(q.precision, "decode") / weight_bytes_per_param(q.precision, "train")
                            if self.trainable == "lora" and q.precision == "fp8" else 1.0)
        # LoRA freezes the base weights: no gradients, master copies or Adam moments for them (Hu et al. 2021, sec. 4.2);
        # the adapters' own state (rank 16 on every linear layer of a 70B model: ~0.3% of its parameters) is in the reserve
        lora = self.trainable == "lora"
        self.grad_dtype_bytes = (d.fp16_gradient_bytes_per_param if q.precision == "fp16" else d.gradient_bytes_per_param).si
        self.grad_bytes, self.adam_bytes = (0.0, 0.0) if lora else (self.grad_dtype_bytes, d.adam_state_bytes_per_param.si)
        # the loss's logits on the last stage, per token (vocabulary x bytes per element; a layer list has none)
        self.logits_bytes = (float(q.model.vocab_size) * d.training_logits_bytes_per_element.si
                             if self.transformer and q.phase == "train" else 0.0)
        cp = q.options.get("context_parallel")
        self.cp_given = None if cp is None else float(cp)  # the option fixes the layout column
        self.single_layer = bool(q.options.get("single_layer", False))
        self.attention_kernel = q.options.get("attention_kernel", "flash")
        if self.attention_kernel not in G.ATTENTION_KERNELS:
            raise InputError(f"attention_kernel: {self.attention_kernel!r} is not an attention implementation; choose "
                             f"one of {', '.join(G.ATTENTION_KERNELS)}")
        for k, what, default in (("tp_comm_overlap", "overlap tensor-parallel collectives with GEMMs, 2023 on", True),
                                 ("dp_comm_overlap", "overlap the gradient reduction with the backward", True),
                                 ("expert_comm_overlap", "run one micro-batch's expert all-to-all under another's "
                                  "compute: Megatron-Core's --overlap-moe-expert-parallel-comm; 'dualpipe' on any "
                                  "pipeline, as DeepSeek's DualPipe", False)):
            if not isinstance(q.options.get(k, default), bool) and not (k == "expert_comm_overlap" and
                                                                         q.options.get(k) == "dualpipe"):
                raise InputError(f"{k}: {q.options[k]!r} is not true or false; give true (frameworks that {what}) or false")
            setattr(self, k, q.options.get(k, default))
        self.expert_dispatch = q.options.get("expert_dispatch", "flat")
        if self.expert_dispatch not in DISPATCHES:
            raise InputError(f"expert_dispatch: {self.expert_dispatch!r} is not an MoE dispatcher; give 'flat' (NCCL "
                             "all-to-all, Megatron-Core's alltoall dispatcher) or 'hierarchical' (once per other node, "
                             "then NVLink: DeepEP, HybridEP)")
        self.pipeline_split = q.options.get("pipeline_split", "uneven")
        if self.pipeline_split not in PIPELINE_SPLITS:
            raise InputError(f"pipeline_split: {self.pipeline_split!r} is not a pipeline split; give 'uneven' (current "
                             "frameworks: any number of layers per stage) or 'even' (layers divide pp x vpp)")
        domain = int(self.gpu.scale_up_domain_gpus.si)
        limit = domain if domain > 8 else min(domain, int(d.gpu_max_tensor_parallel.si))
        self.tp_values = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= min(limit, 64) and heads % t == 0]
        self.spec = speculation(q) if q.phase != "train" and self.transformer else None
        self.moe_tp, self.expert_layout = q.phase != "train" and self.transformer and num_experts(self.m) > 1, None
        self.adp_offered = self.moe_tp  # engines run an MoE model's attention data-parallel (.analytic.attention_dp)
        self.spec_off = default_draft_refused(q) if self.spec is None and q.phase != "train" and self.transformer else None


class GpuFamily(InferenceMixin, Family):
    name = "gpu"
    kinds = ("gpu",)
    phases = ("train", "prefill", "decode", "serve")
    train_only_options = ("sequence_parallel", "trainable", "context_parallel", "single_layer", "attention_kernel",
                          "tp_comm_overlap", "dp_comm_overlap", "pipeline_split", "expert_dispatch",
                          "expert_comm_overlap")  # inference refuses them
    options = ("reserve", "kv_precision") + train_only_options + SPEC_OPTIONS

    layout_columns = TRAIN_COLUMNS  # both sets; a query uses one

    def columns(self, phase: str) -> tuple[str, ...]:
        return TRAIN_COLUMNS if phase == "train" else INFER_COLUMNS

    def prepare(self, q: Query) -> GpuContext:
        return GpuContext(q)

    def hardware(self, ctx: GpuContext) -> Hardware:
        g = ctx.gpu
        return Hardware(devices_per_system=g.gpus_per_node.si, system_power_w=g.node_power_w.si,
                        system_rack_units=g.node_rack_units.si, price_key=ctx.q.target.key, system_name=f"{g.name} node")

    # -- layouts ------------------------------------------------------------------------------------
    def check_layout(self, ctx: GpuContext, given: dict) -> None:
        """Refuse a given layout no framework can run: a ``tp`` not dividing the heads; tp x pp x dp (x cp) above the
        target's count (fewer leave GPUs idle, as searched layouts may); virtual stages without a layer each (``pp x
        vpp`` above the layers; ``even`` splits not dividing them) or on one pipeline stage (the search's rule)."""
        tp = given.get("tp")
        if tp is not None and not tp_divides_heads(ctx.m, tp):
            raise InputError(f"tp: {tp} does not divide {ctx.m.name}'s {ctx.m.num_heads} attention heads; give a divisor of "
                             f"{ctx.m.num_heads}, or no tp to search one")
        n, cp = ctx.count, float(given.get("cp", ctx.cp_given or 1)) if ctx.q.phase == "train" else 1.0
        if n is not None and all(k in given for k in ("tp", "pp", "dp")) and int(given["tp"]) * int(given["pp"]) * int(given["dp"]) * cp > n:
            raise InputError(f"layout: tp {int(given['tp'])} x pp {int(given['pp'])} x dp {int(given['dp'])}{f' x cp {cp:g}' if cp > 1 else ''} "
                             f"needs more GPUs than the target's {n}; give a layout within the count, or a target without a count")
        if ctx.q.phase == "train":
            check_expert_parallel(ctx.m, given, cp)
        check_attention_dp(ctx, given)
        v, pp, L = given.get("vpp"), given.get("pp"), ctx.num_layers
        if v is None or int(v) <= 1 or ctx.q.phase != "train":
            return
        if pp is not None and int(pp) <= 1:
            raise InputError(f"vpp: {int(v)} virtual stages need a pipeline (pp > 1, given {int(pp)}); give vpp 1 or a "
                             "pipeline degree")
        if pp is not None and (L < int(pp) * int(v) or (ctx.pipeline_split == "even" and L % (int(pp) * int(v)))):
            need = "divide" if ctx.pipeline_split == "even" else "be at least"
            raise InputError(f"vpp: pp {int(pp)} x vpp {int(v)} = {int(pp) * int(v)} virtual stages for {ctx.m.name}'s "
                             f"{L} layers (they must {need} pp x vpp, one layer or more per virtual stage); give a "
                             "smaller vpp")

    def implied_layout(self, ctx: GpuContext, given: dict) -> dict:
        return implied_attention_dp(ctx, given)

    def default_layout(self, ctx: GpuContext, given: dict, batch: int) -> dict:
        """Complete a partly given layout outside the search grid: pp 1, dp the rest of the device count (1 without a
        count), tp the rest after pp and dp; training micro-batch 1, no interleaving, selective recompute, ZeRO-1 and,
        for an MoE model, the largest expert-parallel degree dividing its experts and the stage's GPUs."""
        out = dict(given)
        n = ctx.count
        if ctx.q.phase == "train":
            out.setdefault("cp", ctx.cp_given or 1)
        cp = int(out.get("cp", 1))
        out.setdefault("pp", 1)
        if ctx.q.phase != "train":
            out.setdefault("adp", 1)
        if "tp" not in out:
            out["tp"] = max(1, (n or 1) // (out["pp"] * out.get("dp", 1) * cp)) if n else 1
        if "dp" not in out:
            group = out["tp"] * out["pp"] * cp
            out["dp"] = n // group if n and n % group == 0 else 1
        if n is not None and out["tp"] * out["pp"] * out["dp"] * cp != n:  # a completion uses the whole count
            raise InputError(f"layout: tp {out['tp']} x pp {out['pp']} x dp {out['dp']}{f' x cp {cp:g}' if cp > 1 else ''} does "
                             f"not use the target's {n} GPUs; give a layout whose product is the count, or a target without a count")
        if ctx.q.phase == "train":
            out.setdefault("micro_batch", 1)
            out.setdefault("vpp", 1)
            out.setdefault("recompute", RECOMPUTE.index("selective"))
            out.setdefault("zero_stage", 1)
            # an MoE model's experts over the most GPUs of a stage that divide them (the fewest per GPU: a completion
            # that fits where any does); a dense model's 1
            E, gpus = num_experts(ctx.m), int(out["tp"]) * int(out["dp"]) * cp
            out.setdefault("ep", max(e for e in EP_VALUES if E % e == 0 and gpus % e == 0))
        self.check_layout(ctx, out)  # the completed layout too: its product, and a vpp given without a pp (now pp 1)
        return out

    def describe(self, ctx: GpuContext, r: dict):
        tp, pp, dp = (int(r[k]) for k in ("tp", "pp", "dp"))
        lay = {"tensor_parallel": tp, "pipeline_parallel": pp, "data_parallel": dp}
        if ctx.q.phase == "train":
            lay.update(micro_batch=int(r["micro_batch"]), virtual_pipeline=int(r["vpp"]),
                       recompute=RECOMPUTE[int(r["recompute"])], zero_stage=int(r["zero_stage"]),
                       context_parallel=int(r["cp"]), expert_parallel=int(r.get("ep", 1)))
            if int(r["recompute"]) == PARTIAL and r.get("fit.recompute_frac") is not None:
                # Megatron-LM's recompute_num_layers: whole layers of each stage recomputed
                lay["recompute_layers"] = int(round(r["fit.recompute_frac"] * np.ceil(ctx.num_layers / pp)))
            if r.get("time.num_microbatches") is not None:
                lay["num_microbatches"] = int(round(r["time.num_microbatches"]))
        elif r.get("time.micro_batches") is not None:
            lay["micro_batches_in_flight"] = int(r["time.micro_batches"])
        if r.get("time.expert_layout_choice") == 1.0:  # whole experts over the TP group (engine_variants' "ep")
            lay["expert_parallel"] = tp
        if ctx.adp_offered:
            lay["attention_data_parallel"] = int(r.get("adp", 1))
        L = ctx.num_layers
        step = L / pp  # np.linspace(0, L, pp + 1) rounded, in Python floats: i * step, the last edge L itself
        edges = [round(i * step) for i in range(pp)] + [L]
        stages = [dict(device=s, first_layer=int(edges[s]), last_layer=int(edges[s + 1] - 1), embedding=s == 0,
                       lm_head=s == pp - 1, bytes=float(r["per_device_bytes"])) for s in range(pp)]
        notes = attention_dp_notes(ctx, r, tp, self.fit)  # a misfit data-parallel attention holds (an MoE model)
        used = tp * pp * dp * int(r.get("cp", 1) if ctx.q.phase == "train" else 1)
        if ctx.count and used < ctx.count and not bool(r.get("layout_searched", True)):  # audit32a F6: not a choice
            notes.append(f"{ctx.count - used:,} of {ctx.count:,} GPUs left idle: the given layout uses {used:,} of "
                         "them (the target's GPUs are all priced)")
        elif ctx.count and used < ctx.count and ctx.q.phase == "train":
            notes.append(f"{ctx.count - used:,} of {ctx.count:,} GPUs left idle: {used:,} train faster than any layout "
                         f"using all of them (a layout divides the GPUs it uses, and each replica's share of the batch "
                         f"into whole micro-batches)")
        elif ctx.count and used < ctx.count:
            notes.append(f"{ctx.count - used:,} of {ctx.count:,} GPUs left idle ({dp} replica{'s' if dp != 1 else ''} "
                         f"of {tp * pp}: a faster "
                         f"replica size than any that divides the count)")
        if ctx.q.phase == "train" and num_experts(ctx.m) > 1 and bool(r.get("layout_searched", True)):
            notes.append("MoE training layout searched: such layouts are validated only where they match a published "
                         "recipe (`wseplan validate catalogs/validation/validation-moe-train.csv`; searched layouts "
                         "run faster than the published ones, the README's MoE section says by how much); give the "
                         "recipe's --tp/--pp/--dp/--ep to compare")
        if ctx.q.phase != "train" and dp > 1:  # the batch is each replica's (audit28d H2)
            b = int(r["batch"]) if "batch" in r else None
            what = "request slots" if ctx.q.phase == "serve" else "requests in flight together"  # serve: slots
            held = f"{b * dp:,} {what} ({b:,} per replica)" if b else "one batch each"
            notes.append(f"{dp} data-parallel replicas of {tp * pp} GPU{'s' if tp * pp > 1 else ''}: {held}; throughput "
                         f"counts every replica, "
                         f"the per-user speed is one request's")
        return lay, {"stages": stages}, notes

    def candidates(self, ctx: GpuContext, cfg: dict) -> tuple[dict, np.ndarray]:
        """Rows with every layout column given stay as they are; in other rows the missing columns are searched
        over :meth:`_grid` with the given ones held (a given combination outside the grid is completed with
        :meth:`default_layout` and may not fit)."""
        cols = self.columns(ctx.q.phase)
        n = len(cfg["batch"])
        if ctx.q.phase == "train" and ctx.cp_given is not None and "cp" not in cfg:  # the option fixes the column
            cfg = dict(cfg, cp=np.full(n, ctx.cp_given))
        if ctx.q.phase == "train" and num_experts(ctx.m) <= 1:
            # a dense model has no experts to split: a layout given without ep is whole
            cfg = dict(cfg, ep=np.where(np.isnan(np.asarray(cfg.get("ep", np.nan), dtype=float)), 1.0,
                                        np.asarray(cfg.get("ep", np.nan), dtype=float)) * np.ones(n))
        if all(c in cfg for c in cols) and not any(np.isnan(cfg[c]).any() for c in cols):  # every layout given
            return {k: np.asarray(v, dtype=float) for k, v in cfg.items()}, np.arange(n, dtype=np.int64)
        vals = np.stack([np.asarray(cfg[c], dtype=float) if c in cfg else np.full(n, np.nan) for c in cols], axis=1)
        known = ~np.isnan(vals)
        full = known.all(axis=1)
        parts, parent = [], []
        if full.any():
            parts.append({k: np.asarray(v, dtype=float)[full] for k, v in cfg.items()} | {c: vals[full, j] for j, c in enumerate(cols)})
            parent.append(np.nonzero(full)[0])
        if "ep" in cols:  # an MoE model's rows that give all but ep: each expands over its degrees, vectorized
            full = expand_missing_column("ep", lambda sub: with_expert_parallel(sub, num_experts(ctx.m)), cfg, cols,
                                         vals, known, full, parts, parent)
        if "adp" in cols:  # inference rows that give all but adp: the same
            full = expand_missing_column("adp", lambda sub: with_attention_dp(sub, ctx.adp_offered), cfg, cols, vals,
                                         known, full, parts, parent)
        grids: dict = {}
        for i in np.nonzero(~full)[0]:
            b, c_ = float(cfg["batch"][i]), float(cfg["context"][i])
            # a given micro-batch or virtual-stage count outside the searched values is searched too (audit28a H2:
            # micro-batch 3 fell back to the default completion, all GPUs in tensor parallelism)
            extra = tuple(int(vals[i, cols.index(c)]) if c in cols and known[i, cols.index(c)] else None
                          for c in ("micro_batch", "vpp", "cp", "ep"))
            if (b, c_, extra) not in grids:
                grids[b, c_, extra] = layout_grid(ctx, b, c_, micro_batch=extra[0], vpp=extra[1], given_cp=extra[2],
                                                  given_ep=extra[3])
            grid = grids[b, c_, extra]
            keep = np.ones(len(grid["tp"]), dtype=bool)
            for j, c in enumerate(cols):
                if known[i, j]:
                    keep &= grid[c] == vals[i, j]
            if "zero_stage" in cols and not known[i, cols.index("zero_stage")]:  # no searched ZeRO-2/3 with a pipeline
                keep &= (grid["zero_stage"] < 2) | (grid["pp"] <= 1)  # (DeepSpeed refuses it; a given one is held)
            if keep.any():
                cand = {c: grid[c][keep] for c in cols}
            else:
                given = {c: int(vals[i, j]) for j, c in enumerate(cols) if known[i, j]}
                try:
                    filled = self.default_layout(ctx, given, b)
                except InputError as exc:  # name what was given, not a completion the user never asked for
                    said = ", ".join(f"{k} {v}" for k, v in given.items())
                    if str(exc).split(":", 1)[0] in given:  # about a part the user gave: as it is
                        raise
                    where = f"the target's {ctx.count} GPUs" if ctx.count else "the GPUs searched"
                    raise InputError(f"layout: no layout of {where} has {said}; change the given parts, or give none "
                                     "to search them") from None
                cand = {c: np.asarray([float(filled[c])]) for c in cols}
            g = len(cand["tp"])
            row = {k: np.full(g, float(np.asarray(v)[i])) for k, v in cfg.items() if k not in cols}
            row.update(cand)
            parts.append(row)
            parent.append(np.full(g, i))
        keys = set().union(*(p.keys() for p in parts))
        out = {k: np.concatenate([np.asarray(p[k], dtype=float) for p in parts]) for k in keys}
        return out, np.concatenate(parent).astype(np.int64)

    # -- fit ------------------------------------------------------------------------------------------
    def fit(self, ctx: GpuContext, cfg: dict) -> dict:
        ph = ctx.q.phase
        B, C, O = cfg["batch"], cfg["context"], cfg["output_tokens"]
        tp, pp, dp = cfg["tp"], cfg["pp"], cfg["dp"]
        rf, adp = None, _adp(ctx, cfg, np.arange(len(B)))  # data-parallel attention ranks (1 where not offered)
        if ph == "train":
            cp = np.asarray(cfg["cp"], dtype=float)
            rf = np.zeros(len(B))
            mem = train_memory(ctx, cfg, rf)
            part = np.nonzero(np.asarray(cfg["recompute"]) == PARTIAL)[0]
            if len(part):
                rf[part] = partial_frac(ctx, {k: np.asarray(v)[part] for k, v in cfg.items()}, mem["total"][part])
                mp = train_memory(ctx, {k: np.asarray(v)[part] for k, v in cfg.items()}, rf[part])
                mem = {k: v.copy() for k, v in mem.items()}
                for k in mem:
                    mem[k][part] = mp[k]
            devices = tp * pp * dp * cp
            replicas = np.ones_like(B)
        else:
            kv_len, work = self.kv_and_working_tokens(ctx, B, C, O)
            mem = gpu_layout_memory(ctx.w, tp=tp, pp=pp, dp=np.ones_like(tp), zero_stage=1, recompute=1,
                                    micro_batch=1, virtual_stages=1, batch=B, context=kv_len,
                                    gradient_bytes_per_param=ctx.grad_bytes, adam_state_bytes_per_param=ctx.adam_bytes,
                                    prefill_chunk_tokens=ctx.chunk, working_tokens=work,
                                    adp=adp)
            devices = tp * pp * dp
            replicas = dp
        total = mem["total"]
        cap = np.full_like(total, ctx.capacity)
        if ctx.kv_free_frac is not None and ph != "train":
            # the KV cache gets kv_free_frac of what the weights, activation buffers and runtime leave free
            usable = ctx.gpu.hbm_bytes.si - ctx.runtime_bytes
            free = usable - (total - mem["kv_cache"])
            cap = np.where(free > 0, usable - (1.0 - ctx.kv_free_frac) * np.maximum(free, 0.0), usable)
        fits = total <= cap
        if ph == "train":  # a replica given fewer sequences than one micro-batch runs nothing (`time` refuses it)
            fits &= dp * cfg["micro_batch"] <= B
        parts = {k: mem[k] for k in ("weights", "kv_cache", "activations", "optimizer")}
        kv_room = cap - total + mem["kv_cache"]
        kv_tok = np.where(B * C > 0, mem["kv_cache"] / np.maximum(B * C, 1.0), 0.0)
        # data-parallel attention: the busiest GPU holds its rank's share of the requests, each rank its own
        ranks_held = rank_share(B, adp) * adp  # the busiest GPU's requests x ranks / requests (1 without it)
        if ph != "train":
            kv_tok = mem["kv_cache"] / np.maximum(B * (C + O), 1.0) / ranks_held
        max_tok = np.where(kv_tok > 0, np.maximum(kv_room, 0.0) / np.where(kv_tok > 0, kv_tok, 1.0), 0.0)
        # a layout may leave GPUs of a count idle (:meth:`_grid`); the target is still all of them
        held = np.maximum(devices, ctx.count) if ctx.count else devices
        out = dict(num_devices=held, num_replicas=replicas, per_device_bytes=total, capacity_bytes=cap, fits=fits,
                   weights_bytes=mem["weights"] * devices, kv_cache_bytes=mem["kv_cache"] * devices / ranks_held,
                   activation_bytes=mem["activations"] * devices, optimizer_bytes=mem["optimizer"] * devices,
                   total_bytes=(total - mem["kv_cache"] * (1.0 - 1.0 / ranks_held)) * devices, binding=binding_code(parts, total, cap, fits),
                   max_tokens_in_flight=np.floor(max_tok))
        if rf is not None:
            out["recompute_frac"] = rf
        return out

    def kv_and_working_tokens(self, ctx, B, C, O):
        """KV length held per sequence and activation tokens in flight per pass, by phase and engine."""
        ph = ctx.q.phase
        budget = ctx.engine.token_budget.si
        mode = ctx.engine.prefill_pass
        if ph == "prefill":
            kv = C
            work = {"batch": B * C, "prompt": C + 0.0 * B}.get(mode, np.minimum(B * C, budget))
        elif ph == "decode":
            kv, work = C, B
        else:  # serve: the whole request's KV; a step's budget of tokens in flight (static: the batch's prompts)
            kv = C + O
            work = B * C if mode == "batch" else np.maximum(B, np.minimum(budget, B * C + B))
        return kv, work

    # -- time -------------------------------------------------------------------------------------------
    def time(self, ctx: GpuContext, cfg: dict, fit: dict | None = None) -> dict:
        if not ctx.transformer:  # no time model: NaN times, the chain reports the fit alone
            n = len(cfg["batch"])
            return {"step_s": np.full(n, np.nan), "tokens_per_s": np.full(n, np.nan), "bottleneck": np.full(n, -1)}
        if ctx.q.phase == "train":
            rf = None if fit is None else fit.get("recompute_frac")
            return self._train_time(ctx, cfg, np.zeros(len(cfg["batch"])) if rf is None else np.asarray(rf, dtype=float))
        return self.infer_time(ctx, cfg)

    def engine_variants(self, ctx: GpuContext, cfg: dict):  # routed experts split over TP or whole (.analytic.gpu_gemm)
        return ("expert_layout", ("tp", "ep") if np.any(np.asarray(cfg["tp"]) > 1) else ("tp",)) if ctx.moe_tp else None

    def draft_fits(self, ctx: GpuContext, cfg: dict, rows, dctx: GpuContext, dcfg: dict):
        """The draft's weights and KV cache (same TP/PP) must fit in the memory the target leaves free on each GPU
        (the two alternate, so they share the activation workspace); else the engine does not speculate."""
        one = np.ndim(rows) == 0
        idx = np.atleast_1d(rows)
        sub = {k: np.asarray(cfg[k], dtype=float)[idx] for k in ("batch", "context", "output_tokens", "tp", "pp", "dp", "adp")
               if k in cfg}
        t, d = self.fit(ctx, sub), self.fit(dctx, sub)
        need = (d["weights_bytes"] + d["kv_cache_bytes"]) / d["num_devices"]
        ok = need <= t["capacity_bytes"] - t["per_device_bytes"]
        return bool(ok[0]) if one else ok

    def draft_setup(self, ctx: GpuContext, cfg: dict):
        """The draft model on the same GPUs with the same TP/PP (draft and target alternate on one engine); its memory
        is checked by :meth:`draft_fits`."""
        if getattr(ctx, "_draft", None) is None:
            ctx._draft = GpuContext(draft_query(ctx.q, ctx.spec["draft_model"]))
        return ctx._draft, cfg

    def pipeline_stages(self, ctx: GpuContext, cfg: dict) -> np.ndarray:
        return np.asarray(cfg["pp"], dtype=float)

    def replicas(self, ctx: GpuContext, cfg: dict) -> np.ndarray:
        return np.asarray(cfg["dp"], dtype=float)

    def devices_per_replica(self, ctx: GpuContext, cfg: dict) -> np.ndarray:
        return np.asarray(cfg["tp"], dtype=float) * cfg["pp"]

    def pass_time(self, ctx: GpuContext, cfg: dict, rows, *, decode_seqs, decode_kv, prefill_tokens, prefill_span,
                  prefill_kv, prefill_seqs, new_per_seq=1.0):
        cols = dict(tp=cfg["tp"][rows], pp=cfg["pp"][rows], adp=_adp(ctx, cfg, rows), decode_seqs=decode_seqs, decode_kv=decode_kv,
                    prefill_tokens=prefill_tokens, prefill_span=prefill_span, prefill_kv=prefill_kv,
                    prefill_seqs=prefill_seqs)
        pass_fn = partial(_pass, ctx, new_per_seq=new_per_seq)
        out = X.by_rows(pass_fn, len(cols["tp"]), cols)  # a few rows (one question): Python floats, same numbers
        return out if out is not None else pass_fn(**cols)

    def pass_row(self, ctx: GpuContext, cfg: dict, i: int, *, new_per_seq=1.0, **kw):
        """:meth:`pass_time` of row ``i`` in Python floats (the same function; raises one of
        :data:`~wseplan.analytic.elementwise.SCALAR_ERRORS` where numpy would give inf or NaN)."""
        return _pass(ctx, tp=float(cfg["tp"][i]), pp=float(cfg["pp"][i]), adp=float(_adp(ctx, cfg, i)),
                     new_per_seq=new_per_seq, **kw)

    def flop_per_token(self, ctx: GpuContext, context) -> np.ndarray:
        return G.model_flop_per_token(ctx.m, seq_len=X.asfloat(context)) / 3.0

    def step_host_s(self, ctx: GpuContext) -> float:
        """The per-pass host costs of the GPU pass (``step_overhead_s + step_host_s`` of :func:`gpu_pass.pass_time_s`)."""
        return ctx.cal.step_overhead_s + ctx.cal.step_host_s

    def peak_flop_per_s(self, ctx: GpuContext) -> float:
        return ctx.peak

    def _train_time(self, ctx: GpuContext, cfg: dict, rf) -> dict:
        B, C = cfg["batch"], cfg["context"]
        step_fn = partial(G.train_step, ctx.m, ctx.gpu, precision=ctx.q.precision,
                          sequence_parallel=ctx.sequence_parallel, trainable=ctx.trainable, single_layer=ctx.single_layer,
                          attention_kernel=ctx.attention_kernel, tp_comm_overlap=ctx.tp_comm_overlap, cal=ctx.cal,
                          fp4_high_precision_frac=ctx.q.catalog.defaults.fp4_training_high_precision_frac.si,
                          frozen_weight_frac=ctx.weight_frac, dp_comm_overlap=ctx.dp_comm_overlap, grad_dtype_bytes=ctx.grad_dtype_bytes,
                          expert_dispatch=ctx.expert_dispatch, expert_comm_overlap=ctx.expert_comm_overlap)
        cols = dict(seq_len=C, global_batch=B, tp=cfg["tp"], pp=cfg["pp"], dp=cfg["dp"], cp=cfg["cp"], vpp=cfg["vpp"],
                    micro_batch=cfg["micro_batch"], recompute=cfg["recompute"], zero_stage=cfg["zero_stage"],
                    recompute_frac=rf, ep=cfg.get("ep", np.ones(len(B))))
        r = X.by_rows(step_fn, len(B), cols)  # a few rows (one question): Python floats, the same numbers
        if r is None:
            r = step_fn(**cols)
        step = r["step_s"]
        tokens = B * C
        flops = G.model_flop_per_token(ctx.m, seq_len=C, trainable=ctx.trainable) * tokens
        # the FLOPs the GPUs execute (causal attention: half the unmasked count's attention, (s + 1) / 2s of it) at the
        # dense peak of the GPUs used: a hard floor of the step, apart from MFU's convention (review28 #3)
        plain = G.model_flop_per_token(ctx.m, seq_len=0.0, trainable=ctx.trainable) * tokens
        executed = plain + (flops - plain) * (C + 1.0) / (2.0 * C)
        used = cfg["tp"] * cfg["pp"] * cfg["dp"] * cfg["cp"]
        # over every GPU of the target, idle ones included (they are paid for), as a wafer target's MFU counts its
        # idle systems (audit28a M6)
        ndev = np.maximum(cfg["tp"] * cfg["pp"] * cfg["dp"] * cfg["cp"], float(ctx.count or 0))
        bd = {"compute": r["compute_s"] - r["tp_comm_s"] - r["expert_a2a_s"], "nvlink": r["tp_comm_s"],
              "expert_all_to_all": r["expert_a2a_s"], "pipeline_bubble": r["bubble_s"],
              "pipeline_p2p": r["p2p_s"], "network": r["dp_exposed_s"], "optimizer": r["optimizer_s"]}
        n = len(B)
        return dict(step_s=step, tokens_per_s=tokens / step, model_flop_per_s=flops / step,
                    model_flop_utilization_frac=np.minimum(flops / step / (ndev * ctx.peak), 1.0),
                    compute_floor_s=executed / (used * ctx.peak),
                    bottleneck=argmax_code(bd, n), breakdown={k: np.broadcast_to(v, (n,)) for k, v in bd.items()},
                    num_microbatches=r["num_microbatches"])


register(GpuFamily())

__all__ = ["GpuFamily", "GpuContext", "BINDING_CODE", "kv_bytes_per_element"]

