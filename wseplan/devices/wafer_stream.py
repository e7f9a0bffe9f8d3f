"""Wafer training with weight streaming: MemoryX feeds each wafer, SwarmX joins systems in data parallel.

Activations stay on the wafer; every layer's weights stream in from MemoryX for the forward and again for the
backward pass, gradients stream back, and the optimizer runs in MemoryX (:mod:`wseplan.analytic.stream`). Fit:
MemoryX holds weights and optimizer state (its capacity option; its tier sets the stream bandwidth); the wafer
holds two streamed units of weights (a layer; an MoE layer streams its routed experts one at a time) and the
activations the policy keeps for the tokens of one pass. The same evaluation gives the streaming bounds (tokens per pass that hide the weight stream at the achieved compute rate;
tokens the wafer holds under the chosen policy) and the step time, so ``fit`` and ``stream`` cannot disagree.

Layout column: ``num_systems`` (given by the target's count; 1 without one). Options: ``policy`` (auto | store |
checkpoint | recompute | spill), ``memoryx_option``, ``micro_batch`` (sequences per pass on each system),
``reserve``.
"""
from __future__ import annotations

import math

import numpy as np

from ..analytic import gpu_time as G
from ..analytic.memory import stream_min_tokens_compute_bound, wafer_stream_buffer_bytes
from ..analytic.rows import distinct
from ..analytic.stream import (POLICIES, activation_bytes_per_token, layer_sum, load_stream_constants,
                               recompute_forward_passes, swarmx_tree_levels, training_step_time_s)
from ..errors import InputError
from ..workload import build_workload, total_params
from .base import BINDING_CODE, BOTTLENECK_CODE, Family, Hardware, Query, argmax_code
from .registry import register

POLICY_ORDER = ("store", "checkpoint", "recompute", "spill")


class StreamContext:
    def __init__(self, q: Query):
        self.q = q
        cat = q.catalog
        t = q.target
        self.wafer = t.device
        self.system = cat.system_for_wafer(t.key)
        ws = self.system.weight_streaming
        if ws is not None and not ws.si:  # audit29a L2: a CS-1 was timed streaming weights it never streamed
            raise InputError(f"target: the {self.system.name} has no weight streaming (MemoryX and SwarmX came with the "
                             "CS-2); time training on cs2 or cs3")
        self.mx = cat.memoryx[self.system.memoryx]
        self.sx = cat.swarmx[self.system.swarmx]
        self.count = t.count
        self.c = load_stream_constants()
        over = {k: v for k, v in q.software.constants.items() if k in type(self.c).model_fields}
        if over:
            self.c = self.c.model_copy(update=over)
        d = cat.defaults
        o = q.options
        self.policy = o.get("policy", "auto")
        if self.policy not in POLICIES:
            raise InputError(f"policy: unknown {self.policy!r}; use one of {', '.join(POLICIES)}")
        self.option = self._auto_option(q) if o.get("memoryx_option") is None else o["memoryx_option"]
        if self.option not in self.mx.capacity_options_bytes:
            raise InputError(f"memoryx: unknown option {self.option!r}; choose one of "
                             f"{', '.join(self.mx.capacity_options_bytes)}")
        self.micro_batch = o.get("micro_batch")
        if self.micro_batch is not None and (isinstance(self.micro_batch, bool) or int(self.micro_batch) != self.micro_batch
                                             or self.micro_batch < 1):
            raise InputError(f"micro_batch: must be a positive integer, got {self.micro_batch!r}")
        self.reserve = float(o.get("reserve", d.wafer_sram_reserve_frac.si))
        self.cap = self.wafer.usable_sram_bytes * (1.0 - self.reserve)
        self.mx_cap = self.mx.capacity_options_bytes[self.option].si
        self.io_bw = self.system.io_bandwidth_bytes_per_s.si
        self.peak = self.wafer.peak_flop_per_s(q.precision)
        self.rate = self.peak * self.c.compute_efficiency_frac.si
        self.max_systems = int(min(self.sx.max_systems.si, self.system.max_cluster_systems.si))
        self._w = {}

    def _auto_option(self, q) -> str:
        """The smallest MemoryX option that holds the model's weights and optimizer state (as ``fit`` picks the fewest
        devices); the largest where none does (MemoryX then binds); the catalog's default for a model without a
        parameter count."""
        opts = self.mx.capacity_options_bytes
        try:
            need = total_params(q.model) * self.mx.optimizer_bytes_per_param.si
        except (AttributeError, TypeError):
            return self.mx.default_capacity
        by_size = sorted(opts, key=lambda k: opts[k].si)
        return next((k for k in by_size if opts[k].si >= need), by_size[-1])

    def workload(self, seq_len: int):
        if seq_len not in self._w:
            self._w[seq_len] = build_workload(self.q.model, self.q.catalog, precision=self.q.precision, phase="train",
                                              batch=1, context=int(seq_len))
        return self._w[seq_len]


class WaferStreamFamily(Family):
    name = "wafer_streaming"
    kinds = ("wafer",)
    phases = ("train",)
    layout_columns = ("num_systems",)
    options = ("policy", "memoryx_option", "micro_batch", "reserve")
    software_family = "wafer"

    def prepare(self, q: Query) -> StreamContext:
        return StreamContext(q)

    def hardware(self, ctx: StreamContext) -> Hardware:
        s = ctx.system
        return Hardware(devices_per_system=1.0, system_power_w=s.power_w.si, system_rack_units=s.rack_units.si,
                        price_key=ctx.wafer.system, system_name=s.name)

    def candidates(self, ctx: StreamContext, cfg: dict):
        out = {k: np.asarray(v, dtype=float) for k, v in cfg.items()}
        n = len(out["batch"])
        out["num_systems"] = np.where(np.isnan(out["num_systems"]), float(ctx.count or 1), out["num_systems"])
        if (out["num_systems"] > ctx.max_systems).any():
            raise InputError(f"num_systems: {int(out['num_systems'].max())} exceeds the largest {ctx.system.name} "
                             f"cluster ({ctx.max_systems}); use fewer systems")
        return out, np.arange(n)

    def fit(self, ctx: StreamContext, cfg: dict) -> dict:
        """Memory fit and the whole streaming evaluation (the step is part of the same arithmetic)."""
        B, C, N = (np.asarray(cfg[k], dtype=float) for k in ("batch", "context", "num_systems"))
        n = len(B)
        out = {k: np.empty(n) for k in STREAM_FIELDS}
        for s in distinct(C):
            sel = C == s
            r = self._evaluate(ctx, int(s), B[sel], N[sel])
            for k in STREAM_FIELDS:
                out[k][sel] = r[k]
        fits = (out["memoryx_fits"] > 0) & (out["wafer_fits"] > 0)
        cap = np.full(n, ctx.cap)
        load = out["buffer_bytes"] + out["activation_bytes"]
        binding = np.where(out["memoryx_fits"] > 0,
                           np.where(fits & (load < 0.5 * cap), BINDING_CODE["none"],
                                    np.where(out["activation_bytes"] >= out["buffer_bytes"], BINDING_CODE["activations"],
                                             BINDING_CODE["weights"])), BINDING_CODE["memoryx"])
        res = dict(num_devices=N, num_replicas=np.ones(n), per_device_bytes=load, capacity_bytes=cap, fits=fits,
                   weights_bytes=out["buffer_bytes"] * N, kv_cache_bytes=np.zeros(n),
                   activation_bytes=out["activation_bytes"] * N, optimizer_bytes=np.zeros(n), total_bytes=load * N,
                   binding=binding,
                   max_tokens_in_flight=np.floor(np.minimum(out["max_tokens_on_wafer"], 2.0 ** 62)))
        # the streaming fields, the per-system activation bytes among them, under their own names (audit29a H2:
        # ``activation_bytes`` of the record is every system's, as its other memory terms)
        res.update({k: out[k] for k in STREAM_FIELDS if k != "activation_bytes"})
        res["activation_bytes_per_system"] = out["activation_bytes"]
        return res

    def _evaluate(self, ctx: StreamContext, s: int, B: np.ndarray, N: np.ndarray) -> dict:
        c, mx, sx = ctx.c, ctx.mx, ctx.sx
        w = ctx.workload(s)
        mx_need = w.total_params * mx.optimizer_bytes_per_param.si
        dram = mx_need <= mx.dram_capacity_bytes.si
        bw_tier = (mx.dram_stream_bandwidth_bytes_per_s if dram else mx.flash_stream_bandwidth_bytes_per_s).si
        stream_bw = np.where(N > 1, np.minimum(min(bw_tier, ctx.io_bw), sx.per_system_bandwidth_bytes_per_s.si),
                             min(bw_tier, ctx.io_bw))
        levels = swarmx_tree_levels(num_systems=N, fanout=sx.fanout.si)
        lat = mx.link_latency_s.si + levels * sx.per_level_latency_s.si
        # whole sequences: the busiest system holds ceil(B / N) of them (a sequence is not split across systems), and
        # the step waits for it; a batch smaller than the systems leaves the rest idle
        per_sys = np.ceil(B / N)
        buf = wafer_stream_buffer_bytes(w.stream_units)
        avail = ctx.cap - buf
        ck, act = w.checkpoint_bytes_per_token, w.activation_bytes_per_token
        act_max = float(act.max(initial=0.0))
        per_tok = {p: activation_bytes_per_token(policy=p, checkpoint_bytes_per_token=ck, activation_bytes_per_token=act)
                   for p in ("store", "checkpoint", "recompute")}
        per_tok["spill"] = act_max

        def pass_plan(need):
            """(passes, tokens per pass) of a policy keeping ``need`` bytes per token on the wafer: the given
            micro-batch, else the whole share in one pass where it fits, else the largest number of sequences that
            fits (one at the least)."""
            if ctx.micro_batch is not None:
                mb = np.full_like(B, float(ctx.micro_batch))
            else:
                fit_seqs = math.floor(max(avail, 0.0) / (need * s)) if need > 0 else math.inf
                mb = np.where(fit_seqs >= per_sys, per_sys, max(1.0, fit_seqs) if math.isfinite(fit_seqs) else per_sys)
            k = np.where(mb >= per_sys, 1.0, np.ceil(per_sys / mb))
            return k, per_sys * s / k

        # each policy at the passes its own activations allow (spill keeps one layer's working set: the most sequences)
        plans = {p: pass_plan(float(np.max(per_tok[p], initial=0.0)) if p != "spill" else act_max) for p in POLICY_ORDER}
        passes, tokens = plans["spill"]
        opt_s = w.params * mx.optimizer_bytes_per_param.si * 2.0 / mx.update_bytes_per_s(dram=dram)
        common = dict(weight_bytes=w.weight_bytes, flop_per_token=w.flop_per_token,
                      compute_flop_per_s=ctx.rate, stream_bandwidth_bytes_per_s=stream_bw,
                      io_bandwidth_bytes_per_s=ctx.io_bw, latency_s=lat, prefetch_layers=int(c.prefetch_layers.si),
                      overlap_efficiency_frac=c.overlap_efficiency_frac.si, optimizer_s=opt_s,
                      latency_exposed_frac=1.0 if c.latency_exposed_frac is None else c.latency_exposed_frac.si)
        over = np.maximum(0.0, tokens * per_tok["checkpoint"] - max(avail, 0.0))
        total_ck = tokens * float(ck.sum())
        spill_frac = np.where(total_ck > 0, np.minimum(over, total_ck) / np.where(total_ck > 0, total_ck, 1.0), 0.0)
        spill = spill_frac[None, :] * tokens[None, :] * ck[:, None]

        def run(p, plan=None):
            k_p, tok_p = plans[p] if plan is None else plan
            r = training_step_time_s(spill_bytes=spill if p == "spill" else None, tokens=tok_p,
                                     extra_forward_passes=recompute_forward_passes(p), **common)
            opt = np.asarray(r["optimizer_exposed_s"], dtype=float) * np.ones_like(tok_p)
            res = {"optimizer_exposed_s": opt}
            for k in ("step_s", "compute_s", "exposed_load_s", "recompute_s", "utilization_frac"):
                v = np.asarray(r[k], dtype=float) * np.ones_like(tok_p)
                if k == "step_s":  # every pass streams the weights again; the optimizer runs once, after the last
                    v = (v - opt) * k_p + opt
                elif k != "utilization_frac":
                    v = v * k_p
                res[k] = v
            return res

        runs = {p: run(p) for p in POLICY_ORDER}
        fitp = {p: plans[p][1] * per_tok[p] <= avail for p in POLICY_ORDER}
        if ctx.policy == "auto":  # the fastest policy that fits, each at its own passes (ties: the leaner-free first)
            steps = np.stack([np.where(fitp[p], runs[p]["step_s"], np.inf) for p in POLICY_ORDER])
            chosen = np.where(np.isfinite(steps).any(axis=0), np.argmin(steps, axis=0), POLICY_ORDER.index("spill"))
        else:
            chosen = np.full(len(B), POLICY_ORDER.index(ctx.policy))
        passes = np.choose(chosen, [plans[p][0] for p in POLICY_ORDER])
        tokens_chosen = np.choose(chosen, [plans[p][1] for p in POLICY_ORDER])

        def sel(key, table=runs):
            return np.choose(chosen, [table[p][key] for p in POLICY_ORDER])

        step, compute, exposed = sel("step_s"), sel("compute_s"), sel("exposed_load_s")
        recomp, opt = sel("recompute_s"), sel("optimizer_exposed_s")
        ok = np.choose(chosen, [fitp[p] for p in POLICY_ORDER]) & (avail > 0)
        is_spill = chosen == 3
        # the spill's exposed I/O: its step less the same passes keeping the checkpoints on the wafer
        exposed_spill = np.where(is_spill, np.maximum(0.0, step - run("checkpoint", plans["spill"])["step_s"]), 0.0)
        stream_floor = passes * float((w.weight_bytes / 1.0).sum()) * 2.0 / stream_bw  # weights in, forward and backward
        link_busy = stream_floor + passes * np.where(is_spill, 2.0 * layer_sum(spill) / ctx.io_bw, 0.0)
        parts = {"compute": compute - recomp, "recompute": recomp, "weight_stream": exposed - exposed_spill,
                 "spill_io": exposed_spill, "optimizer": opt}
        bn = argmax_code(parts, len(B))
        bn = np.where((link_busy > compute) & (link_busy >= opt), np.where(exposed_spill > exposed - exposed_spill, BOTTLENECK_CODE["spill_io"],
                                                    BOTTLENECK_CODE["weight_stream"]), bn)
        bn = np.where(ok, bn, BOTTLENECK_CODE["sram"])
        bn = np.where(mx_need <= ctx.mx_cap, bn, BOTTLENECK_CODE["memoryx_capacity"])  # audit29a L1: not "sram"
        t_min = np.asarray([stream_min_tokens_compute_bound(layer_weight_bytes=w.weight_bytes,
                                                            layer_flop_per_token=w.flop_per_token, peak_flop_per_s=ctx.rate,
                                                            stream_bandwidth_bytes_per_s=float(b)) for b in distinct(stream_bw)])
        t_min = t_min[np.searchsorted(distinct(stream_bw), stream_bw)]
        max_tok = np.choose(chosen, [max(0.0, avail / per_tok[p]) if per_tok[p] > 0 else np.inf for p in POLICY_ORDER])
        # model FLOPs as the GPU family counts them (attention without the causal mask, PaLM's and Megatron's MFU
        # convention: :func:`~wseplan.analytic.gpu_time.model_flop_per_token`), so the two MFUs compare (audit28a M1);
        # the step itself computes the causal FLOPs it runs
        m = ctx.q.model
        flop_tok = (G.model_flop_per_token(m, seq_len=float(s)) if hasattr(m, "num_layers")
                    else 3.0 * float(w.flop_per_token.sum()))
        model_flop = flop_tok * B * s
        # the least time the FLOPs the wafer executes (causal attention, no recompute) take at the dense peak of the
        # systems that hold sequences (a sequence is not split): a hard floor of the step, apart from MFU's convention
        used = np.ceil(B / per_sys)
        compute_floor = 3.0 * float(w.flop_per_token.sum()) * B * s / (ctx.peak * used)
        # the activation bytes the wafer holds: a spilling step keeps every checkpoint it does not spill beside one
        # layer's working set (the wafer full where it spills; audit29a H2: the working set alone was counted)
        held = {p: plans[p][1] * per_tok[p] for p in POLICY_ORDER}
        held["spill"] = tokens * per_tok["checkpoint"] - np.minimum(over, total_ck)
        acts = np.choose(chosen, [held[p] for p in POLICY_ORDER])
        return dict(step_s=step, tokens_per_s=B * s / step, compute_s=compute, recompute_s=recomp, exposed_load_s=exposed,
                    exposed_spill_s=exposed_spill, optimizer_exposed_s=opt, utilization_frac=sel("utilization_frac"),
                    model_flop_per_s=model_flop / step,
                    model_flop_utilization_frac=np.minimum(1.0, model_flop / step / (ctx.peak * N)), bottleneck=bn,
                    policy=chosen.astype(float), passes=passes, per_system_batch=per_sys, tokens_per_pass=tokens_chosen,
                    stream_bandwidth_bytes_per_s=stream_bw, transfer_latency_s=lat + 0.0 * B,
                    memoryx_tier=np.full(len(B), 0.0 if dram else 1.0), memoryx_required_bytes=np.full(len(B), mx_need),
                    memoryx_capacity_bytes=np.full(len(B), ctx.mx_cap), memoryx_fits=np.full(len(B), float(mx_need <= ctx.mx_cap)),
                    wafer_fits=ok.astype(float), buffer_bytes=np.full(len(B), buf), activation_bytes=acts,
                    min_tokens_compute_bound=t_min, max_tokens_on_wafer=max_tok,
                    min_batch_compute_bound=np.maximum(1.0, np.ceil(t_min / s)),
                    max_batch_on_wafer=np.where(np.isfinite(max_tok), np.floor(np.minimum(max_tok, 2.0 ** 62) / s), 2.0 ** 62),
                    spill_bytes=np.where(is_spill, 2.0 * passes * layer_sum(spill), 0.0), stream_floor_s=stream_floor,
                    compute_floor_s=compute_floor,
                    **{f"alt_{p}_step_s": np.where(fitp[p], runs[p]["step_s"], np.nan) for p in POLICY_ORDER},
                    **{f"alt_{p}_passes": plans[p][0] for p in POLICY_ORDER})

    def default_layout(self, ctx: StreamContext, given: dict, batch: int) -> dict:
        return given

    def describe(self, ctx: StreamContext, r: dict):
        f = {k[4:]: v for k, v in r.items() if k.startswith("fit.")}
        policy = POLICY_ORDER[int(f["policy"])]
        tier = "dram" if f["memoryx_tier"] == 0 else "flash"
        lay = {"num_systems": int(r["num_systems"]), "activation_policy": policy, "memoryx_tier": tier,
               "passes": int(f["passes"])}
        mx = {"option": ctx.option, "capacity_bytes": f["memoryx_capacity_bytes"],
              "required_bytes": f["memoryx_required_bytes"], "fits": bool(f["memoryx_fits"])}
        st = {"stream_bandwidth_bytes_per_s": f["stream_bandwidth_bytes_per_s"],
              # None: unbounded (a layer list without activations holds any batch; audit31b H4: 1e+300 and 2^62 in JSON)
              "min_tokens_compute_bound": f["min_tokens_compute_bound"],
              "max_tokens_on_wafer": f["max_tokens_on_wafer"] if np.isfinite(f["max_tokens_on_wafer"]) else None,
              "min_batch_compute_bound": int(f["min_batch_compute_bound"]),
              "max_batch_on_wafer": int(f["max_batch_on_wafer"]) if np.isfinite(f["max_tokens_on_wafer"]) else None,
              # the token window is not empty and the wafer holds a whole sequence (one is not split across passes)
              "feasible_compute_bound": bool(f["min_tokens_compute_bound"] <= f["max_tokens_on_wafer"]
                                             and f["max_batch_on_wafer"] >= 1) if np.isfinite(f["min_tokens_compute_bound"])
              else False}
        notes = []
        n_sys, seqs = int(r["num_systems"]), int(r["batch"])
        if n_sys > seqs:  # a sequence is not split across systems
            notes.append(f"{n_sys - seqs:,} of {n_sys:,} systems left idle: the batch has {seqs:,} sequences and a "
                         "sequence is not split across systems (the target is priced whole)")
        if not mx["fits"]:
            notes.append(f"MemoryX option {ctx.option} holds {mx['capacity_bytes']:,.0f} B; weights + optimizer state "
                         f"need {mx['required_bytes']:,.0f} B; choose a larger option")
        prov = ctx.mx.provisioned_bytes_per_param
        per_param = mx["capacity_bytes"] / max(mx["required_bytes"] / ctx.mx.optimizer_bytes_per_param.si, 1.0)
        if mx["fits"] and prov is not None and per_param < prov.bound("low"):  # audit28a M2
            notes.append(f"MemoryX option {ctx.option} holds {per_param:.0f} B per parameter: enough for the weights and "
                         f"Adam state ({ctx.mx.optimizer_bytes_per_param.si:g} B), below the "
                         f"{prov.bound('low'):g}-{prov.bound('high'):g} B per parameter published deployments provision "
                         "(Sandia's 55 TB for 1T, ALCF's ~14.5 TB for models up to ~200B): read it as the bare minimum")
        if f["passes"] > 1:
            per, k = int(f["per_system_batch"]), int(f["passes"])
            sizes = f"{per // k}" if per % k == 0 else f"{per // k}-{per // k + 1}"
            hide = st.get("min_batch_compute_bound")
            below = hide is not None and np.isfinite(hide) and per / k < hide
            # (audit32c F4: a step 20% slower from batch 40 to 41 said nothing of why)
            notes.append(f"{k} passes of {sizes} sequences per system (gradient accumulation)" + (
                f"; each pass streams every weight again, and passes below the {hide:,.0f} sequences whose forward "
                "hides the stream wait for it: a batch that fits one pass fewer runs faster per sequence"
                if below else ""))
        if not st["feasible_compute_bound"]:
            notes.append(f"no pass both hides the weight stream (>= {st['min_tokens_compute_bound']:,.0f} tokens) and "
                         f"fits the wafer under policy {policy} (<= {st['max_tokens_on_wafer']:,.0f} tokens)")
        others = [(p, f[f"alt_{p}_step_s"], int(f[f"alt_{p}_passes"])) for p in POLICY_ORDER
                  if p != policy and f.get(f"alt_{p}_step_s") is not None and np.isfinite(f[f"alt_{p}_step_s"])]
        if ctx.policy == "auto" and bool(r["fits"]) and others:  # no times for a misfit
            alts = ", ".join(f"{p} {t:.4g} s in {k} pass{'es' if k > 1 else ''}" for p, t, k in others)
            notes.append(f"activation policy {policy}, the fastest that fits the wafer ({r['step_s']:.4g} s per step; "
                         f"{alts}; each policy at the passes its activations allow)")
        nb = int((ctx.workload(int(r["context"])).kind == 1).sum())
        stages = [dict(device=i, first_layer=0, last_layer=nb - 1, embedding=True, lm_head=True,
                       bytes=float(r["per_device_bytes"])) for i in range(int(r["num_systems"]))]
        raw = {k: f[k] for k in STREAM_FIELDS if k in f and k != "activation_bytes"}
        raw["activation_bytes"] = f["activation_bytes_per_system"]
        raw.update(io_bandwidth_bytes_per_s=ctx.io_bw, activation_policy=policy, memoryx_tier=tier)
        return lay, {"memoryx": mx, "streaming": st, "stream": raw, "stages": stages}, notes

    def time(self, ctx: StreamContext, cfg: dict, fit: dict | None = None) -> dict:
        f = fit if fit is not None else self.fit(ctx, cfg)
        n = len(cfg["batch"])
        bd = {"compute": f["compute_s"] - f["recompute_s"], "recompute": f["recompute_s"],
              "weight_stream": f["exposed_load_s"] - f["exposed_spill_s"], "spill_io": f["exposed_spill_s"],
              "optimizer": f["optimizer_exposed_s"]}
        return dict(step_s=f["step_s"], tokens_per_s=f["tokens_per_s"], model_flop_per_s=f["model_flop_per_s"],
                    model_flop_utilization_frac=f["model_flop_utilization_frac"], bottleneck=f["bottleneck"].astype(int),
                    compute_floor_s=f["compute_floor_s"],
                    breakdown={k: np.broadcast_to(v, (n,)) for k, v in bd.items()})


STREAM_FIELDS = ("step_s", "tokens_per_s", "compute_s", "recompute_s", "exposed_load_s", "exposed_spill_s",
                 "optimizer_exposed_s", "utilization_frac", "model_flop_per_s", "model_flop_utilization_frac", "bottleneck",
                 "policy", "passes", "per_system_batch", "tokens_per_pass", "stream_bandwidth_bytes_per_s",
                 "transfer_latency_s", "memoryx_tier", "memoryx_required_bytes", "memoryx_capacity_bytes", "memoryx_fits",
                 "wafer_fits", "buffer_bytes", "activation_bytes", "min_tokens_compute_bound", "max_tokens_on_wafer",
                 "min_batch_compute_bound", "max_batch_on_wafer", "spill_bytes", "stream_floor_s", "compute_floor_s",
                 *(f"alt_{p}_{k}" for p in POLICY_ORDER for k in ("step_s", "passes")))

register(WaferStreamFamily())
