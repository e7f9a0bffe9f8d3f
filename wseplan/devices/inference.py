"""Inference time of any family that supplies a forward pass: the engine of :mod:`wseplan.analytic.engine`
applied to a family's :meth:`pass_time`, the same for GPUs, wafers and plug-ins.

A family using :class:`InferenceMixin` implements

* ``pass_time(ctx, cfg, rows, *, decode_seqs, decode_kv, prefill_tokens, prefill_span, prefill_kv,
  prefill_seqs, new_per_seq=1)`` -> ``(latency_s, stage_s, parts)`` for configuration rows ``rows``: a pass
  of ``decode_seqs`` sequences adding ``new_per_seq`` tokens each over ``decode_kv`` cached tokens, plus
  ``prefill_tokens`` prompt tokens from ``prefill_seqs`` prompts, each prompt contributing ``prefill_span``
  tokens that follow ``prefill_kv`` earlier tokens of it; ``parts`` are named [s] by bottleneck name;
* ``pipeline_stages(ctx, cfg)`` (stages a pass walks through), ``replicas(ctx, cfg)`` (independent engine
  replicas in the configuration), ``flop_per_token(ctx, context)`` (forward model FLOPs per token at a
  context) and ``peak_flop_per_s(ctx)`` (dense peak of one device).

Phases: ``decode`` (one token for each of ``batch`` sequences at KV length ``context``), ``prefill`` (``batch``
prompts of ``context`` tokens, cut into passes by the software profile's ``prefill_pass``), ``serve``
(requests of ``context`` prompt and ``output_tokens`` generated tokens at ``batch`` concurrent requests per
replica, scheduled by the profile: ``static`` batches or ``inflight`` batching with chunked prefill).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..analytic import engine as E
from ..errors import InputError
from ..workload import resolve_model
from .base import argmax_code


class InferenceMixin:
    """Inference phases from a family's forward pass (see the module docstring)."""

    def _decode(self, ctx, cfg, rows, batch, kv, prefill_per_seq=None, budget=None, new_per_seq=1.0):
        """Decode round over rows: (tpot, parts, micro_batches). ``prefill_per_seq`` prompt tokens ride along per
        decoding sequence (in-flight batching), at most ``budget - seqs x new_per_seq`` per pass;
        ``new_per_seq`` > 1 is a speculative verification step (k + 1 positions per sequence)."""
        stages = self.pipeline_stages(ctx, cfg)[rows]

        def pass_fn(idx, mb, kv_, pre_, bud_):
            pre = np.minimum(pre_ * mb, np.maximum(bud_ - mb * new_per_seq, 0.0))
            return self.pass_time(ctx, cfg, rows[idx], decode_seqs=mb, decode_kv=kv_, prefill_tokens=pre,
                                  prefill_span=pre, prefill_kv=np.zeros_like(pre), prefill_seqs=np.minimum(pre, 1.0),
                                  new_per_seq=new_per_seq)

        pre = np.zeros_like(batch) if prefill_per_seq is None else prefill_per_seq
        bud = np.full_like(batch, np.inf) if budget is None else budget
        return E.decode_round(pass_fn, batch=batch, stages=stages, kv_=kv, pre_=pre, bud_=bud)

    def _decode_tpot(self, ctx, cfg, rows, batch, kv, prefill_per_seq=None, budget=None):
        """Time per output token of a decode round, with speculative decoding where the software profile (or the
        ``speculative`` options) turns it on and it is faster: ``(verify + k x draft) / E[accepted]``.

        Returns (tpot, parts, micro_batches, accepted tokens per step [1 without speculation])."""
        tpot, parts, nmb = self._decode(ctx, cfg, rows, batch, kv, prefill_per_seq, budget)
        spec = getattr(ctx, "spec", None)
        if spec is None:
            return tpot, parts, nmb, np.ones_like(tpot)
        k, a = spec["draft_tokens"], spec["acceptance_frac"]
        verify, vparts, vnmb = self._decode(ctx, cfg, rows, batch, kv, prefill_per_seq, budget, new_per_seq=k + 1.0)
        dctx, dcfg = self.draft_setup(ctx, cfg)
        draft, _, _ = self._decode(dctx, dcfg, rows, batch, kv)
        g = float(E.accepted_tokens_per_step(draft_tokens=k, acceptance_frac=a))
        spec_tpot = (verify + k * draft) / g
        use = spec_tpot < tpot  # the engine speculates where it pays (not at compute-bound batches)
        scale = np.where(verify > 0, spec_tpot / np.where(verify > 0, verify, 1.0), 1.0)
        out_parts = {name: np.where(use, np.asarray(vparts.get(name, 0.0)) * scale, np.asarray(v))
                     for name, v in parts.items()}
        return np.where(use, spec_tpot, tpot), out_parts, np.where(use, vnmb, nmb), np.where(use, g, 1.0)

    def _prefill(self, ctx, cfg, rows, batch, prompt):
        eng = ctx.engine
        chunk, passes, offset, seqs = E.prefill_passes(prompt_tokens=prompt, batch=batch, pass_mode=eng.prefill_pass,
                                                       token_budget=eng.token_budget.si)
        span = np.minimum(chunk / seqs, prompt)
        lat, stage, parts = self.pass_time(ctx, cfg, rows, decode_seqs=np.zeros_like(chunk), decode_kv=np.zeros_like(chunk),
                                           prefill_tokens=chunk, prefill_span=span, prefill_kv=offset, prefill_seqs=seqs)
        total = E.pipelined_passes_s(latency_s=lat, stage_s=stage, passes=passes)
        scale = total / np.where(lat > 0, lat, 1.0)
        return total, {k: np.asarray(v) * scale for k, v in parts.items()}

    def infer_time(self, ctx, cfg: dict) -> dict:
        phase = ctx.q.phase
        B = np.asarray(cfg["batch"], dtype=float)
        C = np.asarray(cfg["context"], dtype=float)
        O = np.asarray(cfg["output_tokens"], dtype=float)
        n = len(B)
        rows = np.arange(n)
        R = self.replicas(ctx, cfg)
        ndev = np.asarray(self.devices_per_replica(ctx, cfg), dtype=float) * R
        peak = self.peak_flop_per_s(ctx)
        out: dict = {}
        if phase == "decode":
            tpot, parts, nmb, acc = self._decode_tpot(ctx, cfg, rows, B, C)
            out.update(step_s=tpot, tpot_s=tpot, tokens_per_s=R * B / tpot, tokens_per_s_per_user=1.0 / tpot,
                       micro_batches=nmb, accepted_tokens_per_step=acc, cost_prefill_s=np.zeros(n),
                       cost_prompt_tokens=np.zeros(n), cost_decode_s=tpot, cost_output_tokens=R * B)
            flop_rate = out["tokens_per_s"] * self.flop_per_token(ctx, C)
        elif phase == "prefill":
            t, parts = self._prefill(ctx, cfg, rows, B, C)
            out.update(step_s=t, ttft_s=t, tokens_per_s=R * B * C / t, cost_prefill_s=t, cost_prompt_tokens=R * B * C,
                       cost_decode_s=np.zeros(n), cost_output_tokens=np.zeros(n))
            flop_rate = out["tokens_per_s"] * self.flop_per_token(ctx, C / 2.0)
        else:
            eng = ctx.engine
            steps = np.maximum(O - 1.0, 0.0)
            if eng.scheduling == "static":
                ttft, p_parts = self._prefill(ctx, cfg, rows, B, C)
                tpot, d_parts, nmb, acc = self._decode_tpot(ctx, cfg, rows, B, C + O / 2.0)
                request = ttft + steps * tpot
                parts = {k: p_parts.get(k, 0.0) + steps * d_parts.get(k, 0.0) for k in dict.fromkeys([*p_parts, *d_parts])}  # ordered: sums must not depend on hashing
                tokens_per_s = R * B * O / request
                acct = dict(cost_prefill_s=ttft, cost_prompt_tokens=R * B * C, cost_decode_s=tpot, cost_output_tokens=R * B)
            else:
                budget = np.full(n, eng.token_budget.si)
                pre_per_seq = E.steady_state_prefill_tokens(batch=1.0, input_tokens=C, output_tokens=O)
                tpot, parts, nmb, acc = self._decode_tpot(ctx, cfg, rows, B, C + O / 2.0, prefill_per_seq=pre_per_seq,
                                                          budget=budget)
                # own prompt: chunks of the pass's spare budget, one chunk per micro-batch slot of the round
                spare = np.maximum(budget - np.ceil(B / nmb), 1.0)
                passes = np.ceil(C / spare)
                chunk = C / passes  # equal chunks: the last pass does not pay for a full budget
                lat, _, _ = self.pass_time(ctx, cfg, rows, decode_seqs=np.ceil(B / nmb), decode_kv=C + O / 2.0,
                                           prefill_tokens=chunk, prefill_span=chunk, prefill_kv=(C - chunk) / 2.0,
                                           prefill_seqs=np.ones(n))
                nst = np.maximum(self.pipeline_stages(ctx, cfg), 1.0)
                own = E.pipelined_passes_s(latency_s=lat, stage_s=np.maximum(tpot / nmb, lat / nst), passes=passes)
                # the engine's prefill server: a full spare budget of prompt tokens per step (per stage when pipelined)
                full, _, _ = self.pass_time(ctx, cfg, rows, decode_seqs=np.ceil(B / nmb), decode_kv=C + O / 2.0,
                                            prefill_tokens=spare, prefill_span=spare, prefill_kv=(C - chunk) / 2.0,
                                            prefill_seqs=np.ones(n))
                busy = C / spare * np.maximum(tpot / nmb, full / nst)
                # closed loop at B: prompts queue for the prefill budget (M/D/1); Little's law gives the throughput
                lam, wait = E.closed_loop_prefill_wait(concurrency=B, own_ttft_s=own, decode_s=steps * tpot,
                                                       prefill_busy_s=busy)
                ttft = own + wait
                request = ttft + steps * tpot
                tokens_per_s = R * lam * np.maximum(O, 1.0)
                out.update(ttft_own_s=own, prefill_busy_s=busy)
                alone, _, _, _ = self._decode_tpot(ctx, cfg, rows, B, C + O / 2.0)  # the same round without prompt chunks
                pre_tok = np.minimum(pre_per_seq * B, np.maximum(budget - B / nmb, 0.0) * nmb)
                acct = dict(cost_prefill_s=np.maximum(tpot - alone, 0.0), cost_prompt_tokens=R * pre_tok,
                            cost_decode_s=np.minimum(alone, tpot), cost_output_tokens=R * B)
            out.update(step_s=request, ttft_s=ttft, tpot_s=tpot, tokens_per_s=tokens_per_s,
                       tokens_per_s_per_user=1.0 / tpot, request_s=request, requests_per_s=tokens_per_s / np.maximum(O, 1.0),
                       micro_batches=nmb, accepted_tokens_per_step=acc, **acct)
            flop_rate = tokens_per_s * (self.flop_per_token(ctx, C + O / 2.0) + C / np.maximum(O, 1.0)
                                        * self.flop_per_token(ctx, C / 2.0))
        out["model_flop_per_s"] = flop_rate
        out["model_flop_utilization_frac"] = np.minimum(flop_rate / (ndev * peak), 1.0)
        out["bottleneck"] = argmax_code(parts, n)
        out["breakdown"] = {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in parts.items()}
        return out


SPEC_OPTIONS = ("speculative", "draft_tokens", "acceptance")


def speculation(q) -> dict | None:
    """Speculative decoding of a query: the software profile's default, overridden by the options ``speculative``
    (a draft model name, or ``none``), ``draft_tokens`` (k) and ``acceptance`` (per-token acceptance, 0-1).
    Returns None when off, else ``{draft_model, draft_tokens, acceptance_frac}``."""
    sp = q.software.engine.speculative
    name = q.options.get("speculative", sp.draft_model if sp else None)
    if name is None or str(name).lower() in ("none", "off", "false", "0", ""):
        return None
    k = q.options.get("draft_tokens", sp.draft_tokens.si if sp else 4)
    a = q.options.get("acceptance", sp.acceptance_frac.si if sp else 0.7)
    if isinstance(k, bool) or not float(k).is_integer() or not 1 <= k <= 16:
        raise InputError(f"draft_tokens: must be an integer from 1 to 16, got {k!r}")
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a < 1.0:
        raise InputError(f"acceptance: per-token acceptance must be in [0, 1), got {a!r}")
    if isinstance(name, str):
        try:
            draft = resolve_model(name, q.catalog)
        except InputError as e:
            raise InputError(f"speculative: unknown draft model {name!r} ({e}); name a catalog model or a config.json") from None
    else:
        draft = name
    return {"draft_model": draft, "draft_tokens": float(k), "acceptance_frac": float(a)}


def draft_query(q, draft_model):
    """The query of the draft model: same target, precision and profile, decode, no speculation of its own."""
    eng = q.software.engine.model_copy(update={"speculative": None})
    sw = q.software.model_copy(update={"engine": eng})
    opts = {k: v for k, v in q.options.items() if k not in SPEC_OPTIONS}
    return dataclasses.replace(q, model=draft_model, phase="decode", software=sw, options=opts)
