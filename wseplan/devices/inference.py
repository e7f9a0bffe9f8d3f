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

import contextlib

import numpy as np

from ..analytic import elementwise as X
from ..analytic import engine as E
from ..analytic.rows import pick_rows, unique_rows
from .base import argmax_code


class InferenceMixin:
    """Inference phases from a family's forward pass (see the module docstring).

    A family that can also run its pass on one configuration in Python floats supplies ``pass_row(ctx, cfg, i,
    **pass_kw)`` -> ``(latency_s, stage_s, parts)`` of row ``i`` (floats; raising one of
    :data:`~wseplan.analytic.elementwise.SCALAR_ERRORS` where numpy would give inf or NaN). Then a question of a few
    rows (one configuration) is composed row by row in Python floats by the same code below (written with
    :mod:`wseplan.analytic.elementwise`; ``rows`` is then the row's index, an ``int``), and stacked back into
    arrays: the same IEEE operations, without numpy's per-call cost on one-element arrays. A row the floats cannot do
    as numpy does sends the whole question to the arrays.
    """

    #: whether prompts ride on this family's decode steps as whole arrivals for every model (not only MoE)
    arrivals_whole = False

    def _pass(self, ctx, cfg, rows, **kw):
        """The family's pass of ``rows`` (an index array), or of one row in Python floats (an ``int``)."""
        if type(rows) is int:
            return self.pass_row(ctx, cfg, rows, **kw)
        return self.pass_time(ctx, cfg, rows, **kw)

    def _decode(self, ctx, cfg, rows, batch, kv, prefill_per_seq=None, budget=None, new_per_seq=1.0, counts=None,
                chunk=None, prompt=None):
        """Decode round over rows: (tpot, parts, micro_batches). ``prefill_per_seq`` prompt tokens ride along per
        decoding sequence (in-flight batching), at most ``budget - seqs x new_per_seq`` per pass;
        ``new_per_seq`` > 1 is a speculative verification step (k + 1 positions per sequence); ``counts`` fixes the
        micro-batches in flight (default: the fastest candidate). ``chunk`` (the prompt length): prompts arrive
        whole, so a pass carrying fewer prompt tokens on average than one arrival (a prompt, or the pass's spare
        budget of a longer one) is the mixture of passes with that chunk and passes with none (:func:`_mixed_pass`), or on a
        family whose passes run through a pipeline of stages (``arrivals_whole``) rides in slots of its own
        (:func:`_slot_pass`). ``prompt``: the length of the prompts the riding tokens are chunks of (:func:`_round_pass`;
        None: each pass's prompt tokens one chunk at its prompt's start)."""
        stages = _at(self.pipeline_stages(ctx, cfg), rows)

        def pass_fn(idx, mb, kv_, pre_, bud_, chunk_=None, prompt_=None):
            at = rows if idx is None else rows[idx]
            kw = _round_pass(mb, kv_, pre_, bud_, new_per_seq, prompt_)
            if chunk_ is None:
                return self._pass(ctx, cfg, at, **kw)
            form = _slot_pass if self.arrivals_whole else _mixed_pass
            return form(lambda k: self._pass(ctx, cfg, at, **k), kw, mb, kv_, bud_, new_per_seq, chunk_)

        pre, bud = _round_prompts(batch, prefill_per_seq, budget)
        extra = {} if chunk is None or prefill_per_seq is None else {"chunk_": chunk}
        if prompt is not None and prefill_per_seq is not None:
            extra["prompt_"] = prompt
        at_prompt = extra.get("prompt_")
        announce = getattr(self, "announce_row", None)
        if type(rows) is int and announce is not None:
            # one configuration: the round's candidates announced, with the verification round's under speculative
            # decoding (the same sizes at k + 1 tokens per sequence, asked right after the plain round)
            cand = E.round_counts(batch, stages) if counts is None else [counts]

            def passes():
                out = []
                for t in _per_seq(ctx, new_per_seq):
                    for n in cand:
                        mb = X.ceil(batch / n)
                        out.append(_round_pass(mb, kv, pre if t == new_per_seq else _spec_prompts(ctx, pre, t), bud, t,
                                               at_prompt))
                        if "chunk_" in extra and pre > 0:  # the arrival form's two passes
                            out += [_round_pass(mb, kv, c / mb, bud, t, at_prompt) for c in (0.0, chunk)]
                return out
            with announce(ctx, cfg, rows, passes):
                return E.decode_round(pass_fn, batch=batch, stages=stages, counts=counts, kv_=kv, pre_=pre, bud_=bud,
                                      **extra)
        return E.decode_round(pass_fn, batch=batch, stages=stages, counts=counts, kv_=kv, pre_=pre, bud_=bud, **extra)

    def step_host_s(self, ctx) -> float:
        """Host time of one engine step outside the device passes [s] (none unless the family models one)."""
        return 0.0

    def draft_fits(self, ctx, cfg, rows, dctx, dcfg):
        """Whether the draft model of speculative decoding fits beside the target on the rows' devices (the family
        decides where a draft lives; by default it always does)."""
        return True

    def _decode_tpot(self, ctx, cfg, rows, batch, kv, prefill_per_seq=None, budget=None, counts=None, chunk=None,
                     use=None, prompt=None):
        """Time per output token of a decode round, with speculative decoding where the software profile (or the
        ``speculative`` options) turns it on and it is faster: ``(verify + k x draft) / E[accepted]``, the draft passes
        without the step's host work (:meth:`step_host_s`, paid once with the verification). ``counts`` fixes the
        target's micro-batches in flight (the plain and the verification round; the draft model's round chooses its
        own). ``use`` (where given) fixes where the round speculates instead of choosing the faster form (the same
        round priced without its prompt chunks runs as the round it prices).

        Returns (tpot, parts, micro_batches, accepted tokens per step [1 without speculation], whether the draft fits
        beside the target [1/0; None without speculation])."""
        tpot, parts, nmb = self._decode(ctx, cfg, rows, batch, kv, prefill_per_seq, budget, counts=counts, chunk=chunk,
                                        prompt=prompt)
        spec = getattr(ctx, "spec", None)
        if spec is None:
            return tpot, parts, nmb, X.ones_like(tpot), None
        k = spec["draft_tokens"]
        # a speculative step finishes requests E[accepted] times faster, so it carries that many more prompt tokens
        vpre = None if prefill_per_seq is None else _spec_prompts(ctx, prefill_per_seq, k + 1.0)
        verify, vparts, vnmb = self._decode(ctx, cfg, rows, batch, kv, vpre, budget, new_per_seq=k + 1.0, counts=counts,
                                            chunk=chunk, prompt=prompt)
        dctx, dcfg = self.draft_setup(ctx, cfg)
        draft, _, _ = self._decode(dctx, dcfg, rows, batch, kv)
        # the engine's per-step host work (scheduling, input preparation, sampling) is done once per speculative step,
        # with the verification pass; the k draft passes run back to back on the device
        draft = draft - self.step_host_s(dctx)
        g = spec["accepted_per_step"]
        spec_tpot = (verify + k * draft) / g
        # the engine speculates where it pays (not at compute-bound batches) and where the draft fits beside the target
        fits = self.draft_fits(ctx, cfg, rows, dctx, dcfg)
        use = (spec_tpot < tpot) & fits if use is None else use & fits
        scale = X.where(verify > 0, spec_tpot / X.where(verify > 0, verify, 1.0), 1.0)
        out_parts = {name: X.where(use, _arr(vparts.get(name, 0.0)) * scale, _arr(v)) for name, v in parts.items()}
        return (X.where(use, spec_tpot, tpot), out_parts, X.where(use, vnmb, nmb), X.where(use, g, 1.0),
                X.where(fits, 1.0, 0.0) + X.zeros_like(tpot))

    def _draft_prefill(self, ctx, cfg, rows, batch, prompt, accepted):
        """The draft model's prefill of ``batch`` prompts [s] where the round speculates (``accepted`` > 1), else 0:
        the draft builds its own KV cache of a prompt before it proposes (vLLM and TensorRT-LLM run it on the same
        devices, after the target's prefill)."""
        if getattr(ctx, "spec", None) is None:
            return 0.0 * accepted
        use = accepted > 1.0
        if type(rows) is int:
            if not use:
                return 0.0
            dctx, dcfg = self.draft_setup(ctx, cfg)
            return self._prefill(dctx, dcfg, rows, batch, prompt)[0]
        out = np.zeros(np.shape(accepted))
        if use.any():  # only the rows that speculate (large batches mostly do not)
            dctx, dcfg = self.draft_setup(ctx, cfg)
            sel = np.nonzero(use)[0]
            b = np.broadcast_to(np.asarray(batch, dtype=float), out.shape)[sel]
            p = np.broadcast_to(np.asarray(prompt, dtype=float), out.shape)[sel]
            # the draft's layout follows the row's sizes alone: rows of equal sizes (a region search's candidates of
            # one question) have one draft prefill, answered once
            keys = ("batch", "context", "output_tokens", *getattr(self, "layout_columns", ()))  # (a GPU draft: its TP)
            first, inv = unique_rows(*(np.asarray(cfg[k], dtype=float)[rows[sel]] for k in keys if k in cfg), b, p)
            r1, b1, p1 = rows[sel][first], b[first], p[first]
            got = self._few_prefills(dctx, dcfg, r1, b1, p1) if len(first) <= X.SCALAR_ROWS else None
            out[sel] = (self._prefill(dctx, dcfg, r1, b1, p1)[0] if got is None else got)[inv]
        return out

    def _few_prefills(self, ctx, cfg, rows, batch, prompt):
        """:meth:`_prefill` of a few rows in Python floats, every row's cuts announced first (one array pass of their
        kernels at the first miss); None where the family has no float form or a float overflows."""
        announce = getattr(self, "announce_row", None)
        if announce is None or getattr(self, "pass_row", None) is None:
            return None
        try:
            rows_cuts = [(i, self._prefill_cuts(ctx, b, p)) for i, b, p in zip(rows.tolist(), batch.tolist(), prompt.tolist())]
            with contextlib.ExitStack() as stack:
                for i, cuts in rows_cuts:
                    stack.enter_context(announce(ctx, cfg, i, lambda c=cuts: [kw for _, kw in c]))
                return np.array([self._best_cut(ctx, cfg, i, cuts)[0] for i, cuts in rows_cuts])
        except X.SCALAR_ERRORS:
            return None

    def _prefill(self, ctx, cfg, rows, batch, prompt):
        """Prefill of ``batch`` prompts [s] and its parts. Chunked prefill through a pipeline of stages cuts the
        prompt tokens into the chunk (of the token budget or a smaller one, :func:`E.prefill_chunk_budgets`) whose
        chunks, following each other through the stages, finish soonest (TeraPipe's token pipelining)."""
        cuts = self._prefill_cuts(ctx, batch, prompt)
        announce = getattr(self, "announce_row", None)
        if type(rows) is int and announce is not None and len(cuts) > 1:  # one configuration: the cuts in one array pass
            with announce(ctx, cfg, rows, lambda: [kw for _, kw in cuts]):
                return self._best_cut(ctx, cfg, rows, cuts)
        return self._best_cut(ctx, cfg, rows, cuts)

    def _prefill_cuts(self, ctx, batch, prompt) -> list:
        """The cuts a prefill of ``batch`` prompts may take: ``(passes, pass keywords)`` per candidate chunk."""
        eng = ctx.engine
        cuts = []
        for i, budget in enumerate(E.prefill_chunk_budgets(eng.token_budget.si, eng.prefill_pass,
                                                            _si(eng.min_chunk_tokens))):
            chunk, passes, offset, seqs = E.prefill_passes(prompt_tokens=prompt, batch=batch, pass_mode=eng.prefill_pass,
                                                           token_budget=budget)
            if i > 0:  # a finer cut (never below the engine's floor: 65 tokens are not two chunks of 32.5)
                chunk, passes = E.cut_passes(X.asfloat(prompt) * batch, budget)
                offset = X.maximum(prompt - chunk, 0.0) / 2.0
                seqs = X.maximum(chunk / X.maximum(prompt, 1.0), 1.0)
            cuts.append((passes, dict(decode_seqs=X.zeros_like(chunk), decode_kv=X.zeros_like(chunk), prefill_tokens=chunk,
                                      prefill_span=X.minimum(chunk / seqs, prompt), prefill_kv=offset, prefill_seqs=seqs)))
        return cuts

    def _best_cut(self, ctx, cfg, rows, cuts):
        best = best_parts = None
        for passes, kw in cuts:
            lat, stage, parts = self._pass(ctx, cfg, rows, **kw)
            total = E.pipelined_passes_s(latency_s=lat, stage_s=stage, passes=passes)
            scale = total / X.where(lat > 0, lat, 1.0)
            parts = {k: _arr(v) * scale for k, v in parts.items()}
            if best is None:
                best, best_parts = total, parts
                continue
            take = total < best
            best = X.where(take, total, best)
            best_parts = {k: X.where(take, parts.get(k, 0.0), best_parts.get(k, 0.0))
                          for k in dict.fromkeys([*best_parts, *parts])}
        return best, best_parts

    def engine_variants(self, ctx, cfg: dict):
        """``(context attribute, values)`` of an engine setting fixed at its start that :meth:`infer_time` tries, or None."""
        return None

    def infer_time(self, ctx, cfg: dict, arrays: bool = False) -> dict:
        """The phase's times of every row of ``cfg`` (:meth:`_infer_time`) under the :meth:`engine_variants` setting whose
        plain decode step is shorter (the first on a tie): one choice for a configuration's prefill (its prompt then
        decoding the default answer), decode and serving questions."""
        variants = self.engine_variants(ctx, cfg)
        if variants is None:
            return self._infer_time(ctx, cfg, arrays)
        name, values = variants
        B, C = np.asarray(cfg["batch"], dtype=float), np.asarray(cfg["context"], dtype=float)
        O = (np.full_like(B, ctx.q.catalog.defaults.default_output_tokens.si) if ctx.q.phase == "prefill" else
             np.asarray(cfg["output_tokens"], dtype=float))
        best = step = None
        try:
            for i, v in enumerate(values):
                setattr(ctx, name, v)
                out = dict(self._infer_time(ctx, cfg, arrays), **{f"{name}_choice": np.full(len(B), float(i))})
                tpot = np.asarray(self._decode_tpot(ctx, cfg, np.arange(len(B)), B, C + O / 2.0)[0], dtype=float)
                if best is None:
                    best, step = out, tpot
                else:
                    best, step = pick_rows(tpot < step, out, best), np.minimum(tpot, step)
        finally:
            setattr(ctx, name, None)
        return best

    def _infer_time(self, ctx, cfg: dict, arrays: bool = False) -> dict:
        """The phase's times of every row of ``cfg``: a few rows (one configuration) in Python floats where the family
        can, unless ``arrays`` (many candidates of a few rows: one array pass is cheaper than a float pass each)."""
        B = np.asarray(cfg["batch"], dtype=float)
        n = len(B)
        cols = dict(B=B, C=np.asarray(cfg["context"], dtype=float), O=np.asarray(cfg["output_tokens"], dtype=float),
                    R=np.asarray(self.replicas(ctx, cfg), dtype=float))
        # MFU over every device of the target, idle ones included (they are paid for), as training counts them
        cols["ndev"] = np.maximum(np.asarray(self.devices_per_replica(ctx, cfg), dtype=float) * cols["R"],
                                  float(getattr(ctx, "count", None) or 0))
        out = None
        if n <= X.SCALAR_ROWS and not arrays and getattr(self, "pass_row", None) is not None:
            vals = [(v if v.shape == (n,) else np.broadcast_to(v, (n,))).tolist() for v in cols.values()]
            try:
                out = _columns([self._infer(ctx, cfg, i, *row) for i, row in enumerate(zip(*vals))])
            except X.SCALAR_ERRORS:
                out = None
        if out is None:
            out = self._infer(ctx, cfg, np.arange(n), *cols.values())
        parts = out.pop("_parts")
        out["bottleneck"] = argmax_code(parts, n)
        out["breakdown"] = {k: _as_n(v, n) for k, v in parts.items()}
        return out

    def serving_passes(self, ctx, B: float, C: float, O: float, counts) -> list:
        """The pass keywords (:meth:`pass_time`) of every pass of the target an in-flight serving answer of one row
        (floats; ``counts``: the micro-batch counts its decode round tries, :func:`E.round_counts`) may ask for: the rounds with and without prompt chunks, with their verification rounds under
        speculative decoding, the arrival form's passes, and the own-prompt passes of each micro-batch count the round
        may choose and each chunk."""
        eng = ctx.engine
        budget = float(eng.token_budget.si)
        pre = E.riding_prompt_tokens(batch=B, input_tokens=C, output_tokens=O)
        out = [_round_pass(X.ceil(B / n), C + O / 2.0, _spec_prompts(ctx, p, t), b, t, q) for p, b, q in
               ((pre, budget, C), (*_round_prompts(B, None, None), None)) for t in _per_seq(ctx, 1.0) for n in counts]
        if _routed(ctx) or self.arrivals_whole:  # the arrival form's passes (with a chunk, none; arrays ask for them at B = 1)
            out += [_round_pass(X.ceil(B / n), C + O / 2.0, c / X.ceil(B / n), budget, t, C)
                    for c in (0.0, C) for t in _per_seq(ctx, 1.0) for n in counts]
        chunks = E.prefill_chunk_budgets(eng.token_budget.si, eng.prefill_pass, _si(eng.min_chunk_tokens))
        return out + [kw for t in _per_seq(ctx, 1.0) for n in counts for kw in _prompt_passes(B, C, O, budget, n, nps=t)[3:]] + [
            _prompt_passes(B, C, O, budget, n, c, nps=t)[3] for t in _per_seq(ctx, 1.0) for n in counts for c in chunks[1:]]

    def _inflight(self, ctx, cfg, rows, B, C, O, R, budget, pre_per_seq, chunks, tpot, parts, nmb, acc) -> dict:
        """An in-flight engine's answer at ``B`` requests from its decode round (``tpot`` per output token, ``nmb``
        micro-batches, ``acc`` tokens accepted per step): a request's own prefill, the engine's prefill server and its
        queue, the request time, the throughput and the cost split. A step is a plain round or a speculative one (the
        verification pass of k + 1 rows per sequence and the k draft passes) emitting ``acc`` tokens per sequence:
        prompts ride on the steps, so the prefill server and a prompt's own chunks go at a step's pace, ``acc x tpot``,
        not an output token's (audit30c H1: a draft made a 4-wafer replica's prompts 3-4x faster)."""
        steps = X.maximum(O - 1.0, 0.0)
        # (one value for the rows: where some speculate, k + 1; a row that does not is answered by the plain call)
        nps = _per_seq(ctx, 1.0)[-1] if bool(np.any(np.asarray(acc) > 1.0)) else 1.0
        step = tpot * acc
        spare, _, _, _, full_kw = _prompt_passes(B, C, O, budget, nmb, None, nps)
        nst = X.maximum(_at(self.pipeline_stages(ctx, cfg), rows), 1.0)
        own = None
        for cap in [None, *chunks[1:]]:  # the own prompt in the chunk that finishes it soonest
            _, n_own, _, kw, _ = _prompt_passes(B, C, O, budget, nmb, cap, nps)
            lat, stage, _ = self._pass(ctx, cfg, rows, **kw)
            # its chunks follow each other through the stages at the slowest stage's pace, or the round's beside them
            # (none for a lone request), as a prefill's (:meth:`_best_cut`)
            pace = X.where(B > 1.0, step / nmb, 0.0)
            t_own = E.pipelined_passes_s(latency_s=lat, stage_s=X.maximum(pace, stage), passes=n_own)
            own = t_own if own is None else X.minimum(own, t_own)
        own = own + self._draft_prefill(ctx, cfg, rows, B * 0.0 + 1.0, C, acc)
        # the engine's prefill server: a full spare budget of prompt tokens per step (per stage when pipelined)
        full, _, _ = self._pass(ctx, cfg, rows, **full_kw)
        busy = C / spare * X.maximum(step / nmb, full / nst)
        # closed loop at B: prompts queue for the prefill budget (M/D/1); Little's law gives the throughput
        lam, wait = E.closed_loop_prefill_wait(concurrency=B, own_ttft_s=own, decode_s=steps * tpot, prefill_busy_s=busy)
        ttft = own + wait
        request = ttft + steps * tpot
        # the same round without its prompt chunks, at the micro-batches the round runs: what the prompts add
        alone, _, _, _, _ = self._decode_tpot(ctx, cfg, rows, B, C + O / 2.0, counts=nmb, use=acc > 1.0)
        pre_tok = X.minimum(pre_per_seq * B, X.maximum(budget - B / nmb, 0.0) * nmb)
        # one request at a time (B = 1): no prompt rides on a decode step; its prompt costs its own prefill
        lone = pre_tok <= 0.0
        acct = dict(cost_prefill_s=X.where(lone, own, X.maximum(tpot - alone, 0.0)),
                    cost_prompt_tokens=R * X.where(lone, C, pre_tok),
                    cost_decode_s=X.minimum(alone, tpot), cost_output_tokens=R * B)
        return dict(tpot=tpot, parts=parts, nmb=nmb, acc=acc, own=own, busy=busy, ttft=ttft, request=request,
                    tokens_per_s=R * lam * X.maximum(O, 1.0), acct=acct)

    def _infer(self, ctx, cfg, rows, B, C, O, R, ndev) -> dict:
        """The phase's times of ``rows`` (an index array, the columns arrays; or one row's index and floats)."""
        phase = ctx.q.phase
        peak = self.peak_flop_per_s(ctx)
        zero = X.zeros_like(B)
        out: dict = {}
        dfit = None  # whether the draft of speculative decoding fits beside the target (None: no speculation)
        if phase == "decode":
            tpot, parts, nmb, acc, dfit = self._decode_tpot(ctx, cfg, rows, B, C)
            out.update(step_s=tpot, tpot_s=tpot, tokens_per_s=R * B / tpot, tokens_per_s_per_user=1.0 / tpot,
                       micro_batches=nmb, accepted_tokens_per_step=acc, cost_prefill_s=zero,
                       cost_prompt_tokens=zero, cost_decode_s=tpot, cost_output_tokens=R * B)
            flop_rate = out["tokens_per_s"] * self.flop_per_token(ctx, C)
        elif phase == "prefill":
            t, parts = self._prefill(ctx, cfg, rows, B, C)
            if getattr(ctx, "spec", None) is not None:  # a speculating replica's draft builds its cache of the prompts
                # before the first token is out, where its decode round speculates at this batch (as serve's TTFT)
                acc = self._decode_tpot(ctx, cfg, rows, B, C)[3]
                t = t + self._draft_prefill(ctx, cfg, rows, B, C, acc)
                out.update(accepted_tokens_per_step=acc)
            out.update(step_s=t, ttft_s=t, tokens_per_s=R * B * C / t, cost_prefill_s=t, cost_prompt_tokens=R * B * C,
                       cost_decode_s=zero, cost_output_tokens=zero)
            flop_rate = out["tokens_per_s"] * self.flop_per_token(ctx, C / 2.0)
        else:
            eng = ctx.engine
            steps = X.maximum(O - 1.0, 0.0)
            if eng.scheduling == "static":
                ttft, p_parts = self._prefill(ctx, cfg, rows, B, C)
                tpot, d_parts, nmb, acc, dfit = self._decode_tpot(ctx, cfg, rows, B, C + O / 2.0)
                ttft = ttft + self._draft_prefill(ctx, cfg, rows, B, C, acc)
                request = ttft + steps * tpot
                parts = {k: p_parts.get(k, 0.0) + steps * d_parts.get(k, 0.0) for k in dict.fromkeys([*p_parts, *d_parts])}  # ordered: sums must not depend on hashing
                tokens_per_s = R * B * O / request
                acct = dict(cost_prefill_s=ttft, cost_prompt_tokens=R * B * C, cost_decode_s=tpot, cost_output_tokens=R * B)
            else:
                budget = _full(B, eng.token_budget.si)
                # prompts arrive whole on the steps of a model with routed experts, whose step reads every expert some
                # token picks (not additive in the tokens), and on a pipeline of wafers' layer groups, where every step
                # carries its prompt tokens through each stage in turn; a dense GPU step's cost is taken at the mean
                # prompt load, the form that validates better held out on GPU serving (docs/software-profiles.md)
                arrivals = C if _routed(ctx) or self.arrivals_whole else None
                # the prompts that ride on a request's decode steps are the other B - 1 requests' (its own is prefilled
                # before it decodes, in its TTFT): per decoding sequence (B - 1) / B of the engine's prompt share
                pre_per_seq = E.riding_prompt_tokens(batch=B, input_tokens=C, output_tokens=O)

                chunks = E.prefill_chunk_budgets(eng.token_budget.si, eng.prefill_pass, _si(eng.min_chunk_tokens))
                stages = _at(self.pipeline_stages(ctx, cfg), rows)
                announce = getattr(self, "announce_row", None)

                def engine(use=None):
                    """The in-flight answer whose decode round speculates as ``use`` says (None: where it is faster)
                    at the round's fastest micro-batch count, or with every stage filled where that lowers request x
                    TPOT, and whether the draft fits."""
                    kw = dict(prefill_per_seq=pre_per_seq, budget=budget, chunk=arrivals, prompt=C)
                    rnd = self._decode_tpot(ctx, cfg, rows, B, C + O / 2.0, use=use, **kw)
                    ans = self._inflight(ctx, cfg, rows, B, C, O, R, budget, pre_per_seq, chunks, *rnd[:4])
                    # the round's fastest count may leave stages idle while prompts wait: the engine's prefill server
                    # goes at a micro-batch's pace, so a pipeline filled with micro-batches can finish requests sooner
                    # although its round is slower (audit31c M1: a 4-token answer 8x slower than a 5-token one on PP8).
                    # Neither count is better for every buyer (a TPOT limit wants the fast round: review32 H1, a 0.5%
                    # shorter request at 8x the TPOT priced 4-token answers 54% dearer under a 10 ms limit): the
                    # engine fills its stages where the requests gain more than the tokens lose, request x TPOT
                    top = X.maximum(X.minimum(stages, B), 1.0)
                    more = rnd[2] < top
                    if bool(np.any(more)):
                        full = self._decode_tpot(ctx, cfg, rows, B, C + O / 2.0, counts=X.where(more, top, rnd[2]),
                                                 use=rnd[3] > 1.0, **kw)
                        alt = self._inflight(ctx, cfg, rows, B, C, O, R, budget, pre_per_seq, chunks, *full[:4])
                        ans = _pick(more & (alt["request"] * alt["tpot"] < ans["request"] * ans["tpot"]), alt, ans)
                    return ans, rnd[4]

                if type(rows) is int and announce is not None:
                    # one configuration: every pass of the target the answer may ask for, announced
                    with announce(ctx, cfg, rows, lambda: self.serving_passes(ctx, B, C, O, E.round_counts(B, stages))):
                        ans, dfit = engine()
                else:
                    ans, dfit = engine()
                acc = ans["acc"]
                if getattr(ctx, "spec", None) is not None and bool(np.any(np.asarray(acc) > 1.0)):
                    # the engine speculates where the requests finish sooner:
                    # a verification pass spends k + 1 rows of the budget per sequence and its step is longer, so at
                    # long prompts the prompts may go slower than the tokens gain (audit30c H1)
                    alt, _ = engine(X.zeros_like(B) > 1.0)
                    # (a row whose round does not speculate is the plain answer: the call above gave it k + 1 rows)
                    ans = _pick((acc > 1.0) & (ans["request"] <= alt["request"]), ans, alt)
                tpot, parts, nmb, acc = ans["tpot"], ans["parts"], ans["nmb"], ans["acc"]
                ttft, request, tokens_per_s, acct = ans["ttft"], ans["request"], ans["tokens_per_s"], ans["acct"]
                out.update(ttft_own_s=ans["own"], prefill_busy_s=ans["busy"])
            out.update(step_s=request, ttft_s=ttft, tpot_s=tpot, tokens_per_s=tokens_per_s,
                       tokens_per_s_per_user=1.0 / tpot, request_s=request, requests_per_s=tokens_per_s / X.maximum(O, 1.0),
                       micro_batches=nmb, accepted_tokens_per_step=acc, **acct)
            flop_rate = tokens_per_s * (self.flop_per_token(ctx, C + O / 2.0) + C / X.maximum(O, 1.0)
                                        * self.flop_per_token(ctx, C / 2.0))
        out["model_flop_per_s"] = flop_rate
        out["model_flop_utilization_frac"] = X.minimum(flop_rate / (ndev * peak), 1.0)
        if dfit is not None:
            out["draft_fits"] = dfit
        out["_parts"] = parts
        return out


def _pick(keep, a: dict, b: dict) -> dict:
    """The in-flight answer ``a`` where ``keep``, else ``b`` (their nested part and cost dictionaries alike)."""
    return {k: (X.where(keep, v, b[k]) if k not in ("acct", "parts") else
                {n: X.where(keep, v.get(n, 0.0), b[k].get(n, 0.0)) for n in dict.fromkeys([*v, *b[k]])})
            for k, v in a.items()}


def _prompt_passes(B, C, O, budget, nmb, cap=None, nps=1.0):
    """A request's own prompt in in-flight serving: chunks of the pass's spare budget (at most ``cap`` tokens), one
    chunk per micro-batch slot of the round of ``nmb`` micro-batches, beside the other ``B - 1`` requests' decoding
    sequences (a lone request's prompt has the whole budget and no decode beside it): ``(spare, passes, chunk, own
    chunk's pass, a full spare budget's pass)``; ``spare`` and the last are the engine's prefill server's (a pass of
    the round's whole micro-batch and a full spare budget of prompt tokens). ``nps``: tokens a decoding sequence adds
    per pass (``k + 1`` on a speculative verification pass: that many rows of the budget each)."""
    others = X.ceil(X.maximum(B - 1.0, 0.0) / nmb)
    room = X.maximum(budget - others * nps, 1.0)
    spare = X.maximum(budget - X.ceil(B / nmb) * nps, 1.0)
    if cap is None:
        passes = X.ceil(C / room)
        chunk = C / passes  # equal chunks: the last pass does not pay for a full budget
    else:  # a finer cut, as the prefill's
        chunk, passes = E.cut_passes(C, X.minimum(room, cap))
    common = dict(decode_kv=C + O / 2.0, prefill_kv=(C - chunk) / 2.0, prefill_seqs=X.ones_like(B), new_per_seq=nps)
    return (spare, passes, chunk, dict(common, decode_seqs=others, prefill_tokens=chunk, prefill_span=chunk),
            dict(common, decode_seqs=X.ceil(B / nmb), prefill_tokens=spare, prefill_span=spare))


def _routed(ctx) -> bool:
    """Whether the context's model has routed experts (an MoE)."""
    m = getattr(ctx, "m", None) or getattr(getattr(ctx, "q", None), "model", None)
    return getattr(m, "num_experts", 1) > 1


def _si(q):
    """A quantity's SI value, or None."""
    return None if q is None else q.si


def _round_pass(mb, kv_, pre_, bud_, nps, prompt=None) -> dict:
    """The pass keywords of a decode round's micro-batch of ``mb`` sequences adding ``nps`` tokens each over ``kv_``
    cached tokens, with ``pre_`` prompt tokens per sequence riding along, at most ``bud_ - mb x nps`` per pass.

    The riding tokens are chunks of prompts of ``prompt`` tokens: a chunk is what one prompt puts on a pass
    (``c = min(prompt, spare budget)``, :func:`_arrival_chunk`), at a uniformly spread offset in its prompt, so on
    average it follows ``(prompt - c) / 2`` earlier tokens of it (as :func:`_prompt_passes`' own chunks): its queries
    attend to ``(prompt + 1) / 2`` keys on average whatever the chunking, and the pass reads ``pre / c`` chunks'
    caches. Without ``prompt`` the pass's prompt tokens are one chunk at the start of its prompt."""
    pre = X.minimum(pre_ * mb, X.maximum(bud_ - mb * nps, 0.0))
    if prompt is None:
        return dict(decode_seqs=mb, decode_kv=kv_, prefill_tokens=pre, prefill_span=pre, prefill_kv=X.zeros_like(pre),
                    prefill_seqs=X.minimum(pre, 1.0), new_per_seq=nps)
    c = _arrival_chunk(prompt, bud_, mb, nps)
    c, some = X.where(c > 0.0, c, 1.0), pre > 0.0  # a pass without prompt tokens keys as the plain round's (its memos)
    return dict(decode_seqs=mb, decode_kv=kv_, prefill_tokens=pre, prefill_span=X.where(some, c, 0.0),
                prefill_kv=X.where(some, (prompt - c) / 2.0, 0.0), prefill_seqs=pre / c, new_per_seq=nps)


def _arrival_chunk(prompt, bud_, mb, nps):
    """Prompt tokens one arrival puts on a pass: the whole prompt, or the pass's spare budget of a longer one [tokens]."""
    return X.minimum(prompt, X.maximum(bud_ - mb * nps, 0.0))


def _mixed_pass(run, kw, mb, kv_, bud_, nps, prompt):
    """A decode pass carrying on average ``kw['prefill_tokens']`` prompt tokens, where prompts of ``prompt`` tokens
    arrive whole: a share ``w = tokens / c`` of the passes carries a chunk of ``c = min(prompt, spare budget)`` tokens
    and the rest none (chunked prefill takes a waiting prompt, whole or a budget's worth; Agrawal et al., Sarathi-Serve,
    OSDI 2024), so the pass costs ``w t(c) + (1 - w) t(0)``. On average over a step's cost, which is not linear in
    its prompt tokens (an MoE pass reads every expert some token picks), this is not ``t(tokens)``. A pass carrying a
    chunk or more on average is left as it is. Returns ``run``'s (latency, stage, parts)."""
    tok = kw["prefill_tokens"]
    c = _arrival_chunk(prompt, bud_, mb, nps)
    w = X.where(c > tok, tok / X.where(c > 0, c, 1.0), 1.0)
    if bool(np.all(np.asarray(w) >= 1.0)):
        return run(kw)
    lat1, st1, p1 = run(_round_pass(mb, kv_, c / mb, bud_, nps, prompt))
    lat0, st0, p0 = run(_round_pass(mb, kv_, X.zeros_like(c), bud_, nps, prompt))
    latn, stn, pn = run(kw)
    full = w >= 1.0
    mix = lambda a1, a0, an: X.where(full, an, w * a1 + (1.0 - w) * a0)  # noqa: E731
    parts = {k: mix(_arr(p1.get(k, 0.0)), _arr(p0.get(k, 0.0)), _arr(pn.get(k, 0.0)))
             for k in dict.fromkeys([*pn, *p1, *p0])}
    return mix(lat1, lat0, latn), mix(st1, st0, stn), parts


def _slot_pass(run, kw, mb, kv_, bud_, nps, prompt):
    """A decode pass of a pipeline of stages carrying on average ``kw['prefill_tokens']`` prompt tokens, where prompts
    of ``prompt`` tokens arrive whole and their chunks (``c = min(prompt, spare budget)`` tokens) follow the decode
    micro-batches through the stages in slots of their own: they add their busy time at the slowest stage to the
    round's, ``w (stage(c) - stage(0))`` per pass with ``w = tokens / c``, and nothing to a decode pass's latency (a
    pipeline whose stages idle between the round's few micro-batches fills them; a chunk's own latency is its request's
    TTFT). Returns ``run``'s (latency, stage, parts)."""
    tok = kw["prefill_tokens"]
    if type(tok) is float and tok <= 0.0:
        return run(kw)
    c = X.maximum(_arrival_chunk(prompt, bud_, mb, nps), 1e-12)
    w = tok / c
    lat0, st0, p0 = run(_round_pass(mb, kv_, X.zeros_like(c), bud_, nps, prompt))
    _, st1, p1 = run(_round_pass(mb, kv_, c / mb, bud_, nps, prompt))
    parts = {k: _arr(p0.get(k, 0.0)) + w * X.maximum(_arr(p1.get(k, 0.0)) - _arr(p0.get(k, 0.0)), 0.0)
             for k in dict.fromkeys([*p0, *p1])}
    return lat0, st0 + w * X.maximum(st1 - st0, 0.0), parts


def _round_prompts(batch, prefill_per_seq, budget):
    """A round's prompt tokens per sequence and pass budget: none and no limit unless given."""
    pre = X.zeros_like(batch) if prefill_per_seq is None else prefill_per_seq
    return pre, (_full(batch, np.inf) if budget is None else budget)


def _spec_prompts(ctx, pre, new_per_seq):
    """Prompt tokens per sequence riding on a round of ``new_per_seq`` tokens per sequence: ``pre`` for a plain round,
    ``pre x E[accepted]`` for a speculative verification round (``new_per_seq`` > 1), whose steps complete requests
    that much faster (the prompts keep pace with the completions)."""
    spec = getattr(ctx, "spec", None)
    if spec is None or not new_per_seq > 1.0:
        return pre
    return pre * spec["accepted_per_step"]


def _per_seq(ctx, new_per_seq) -> list:
    """New tokens per sequence of the rounds a round announces: its own, and under speculative decoding a plain
    round's verification round (k + 1, asked right after it)."""
    spec = getattr(ctx, "spec", None)
    return [new_per_seq] + ([spec["draft_tokens"] + 1.0] if spec is not None and new_per_seq == 1.0 else [])


def _columns(res: list[dict]) -> dict:
    """Rows of :meth:`InferenceMixin._infer` (floats; ``_parts`` a dict of floats) as float64 columns: one array of
    every value, a row of it per column."""
    first = res[0]
    keys = [k for k in first if k != "_parts"]
    pkeys = list(first["_parts"])
    m = np.array([[r[k] for r in res] for k in keys] + [[r["_parts"][k] for r in res] for k in pkeys], dtype=float)
    out = dict(zip(keys, m))
    out["_parts"] = dict(zip(pkeys, m[len(keys):]))
    return out


def _as_n(v, n: int) -> np.ndarray:
    """``np.broadcast_to(np.asarray(v, dtype=float), (n,))``; an array of that shape and type as it is."""
    if type(v) is np.ndarray and v.shape == (n,) and v.dtype == np.float64:
        return v
    return np.broadcast_to(np.asarray(v, dtype=float), (n,))


def _at(col, rows):
    """``col[rows]``; for one row (an ``int``) a Python float."""
    return float(col[rows]) if type(rows) is int else col[rows]


def _full(like, value: float):
    """``np.full_like(like, value)``; ``value`` for a Python float."""
    return np.full_like(like, value) if isinstance(like, np.ndarray) else float(value)


def _arr(v):
    """``np.asarray(v)`` of a part; a Python float stays one."""
    return v if type(v) is float else np.asarray(v)
