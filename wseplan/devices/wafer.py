"""Wafer family, weights resident in SRAM: Cerebras inference (the layout of WaferLLM and of Cerebras's service).

A replica is ``num_wafers`` wafers; the model's rows (embedding, blocks, head) are cut into that many contiguous
stages, one per wafer, balanced by the exact min-max partition (:mod:`wseplan.analytic.partition_rows`). On a wafer
the stage's layers are split into *layer groups*, each on its own region of PEs (a square, or a near-square
rectangle that fills the wafer's remainder: :mod:`.wafer_regions`), every
layer of a group spread over its whole region; a token passes the groups in order, hopping between regions on
the wafer and over Ethernet between wafers. Per-block kernels are the fabric closed forms of
:mod:`wseplan.analytic.wse_time` (GEMV in decode, GEMM in prefill); the groups are the pipeline stages of the
serving engine (:mod:`wseplan.analytic.engine`).

Layout column: ``num_wafers`` (wafers per replica). Searched: without a device count the fewest wafers that fit;
with ``N`` wafers every replica size from the fewest to ``N`` (``N // k`` replicas). Regions are chosen per pass
kind (decode GEMV, prefill GEMM) to minimise that pass's per-wafer time among the regions that tile the wafer
and hold the largest layer (serving: the decode region of the shortest request, every admissible one answered), unless
given (options ``core_grid``, ``core_grid_decode``, ``core_grid_prefill``; ``layout_slots``: the slots it is laid out for).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..analytic import elementwise as X
from ..analytic import fabric as fab
from ..analytic import fabric_kernels as fkern
from ..analytic import wse_time as wt
from ..analytic.partition_rows import min_max_partition_batched
from ..analytic.rows import distinct, unique_rows
from ..catalog.schema import Model
from ..errors import InputError
from ..workload import KIND_BLOCK, block_params, build_workload, kv_bytes_rows, stage_records
from .base import Family, Hardware, Query, binding_code
from .inference import InferenceMixin
from .speculation import SPEC_OPTIONS, default_draft_refused, draft_query, speculation
from .wafer_notes import resident_notes
from .registry import register
from .wafer_regions import parse_grid, _remembered, admissible, best_prefill_side, best_serving_side, best_side, handover_cycles, region_capacity, region_shapes, region_tiles
from .wafer_row import pass_row as _pass_row
from .wafer_row import announce_row as _announce_row
from .wafer_row import MEMO_ROWS, kernels_rows, own_prefill_regions
from .wafer_groups import slowest_group
from .wafer_stages import draft_fits, fewest_stages

GRID_OPTIONS = ("core_grid", "core_grid_decode", "core_grid_prefill")


class WaferContext:
    def __init__(self, q: Query):
        #: a layer-list model fits (memory) but has no wafer time model (the kernels need a transformer's shapes)
        self.transformer = isinstance(q.model, Model)
        self.q = q
        self.m = q.model
        self.wafer = q.target.device
        cat = q.catalog
        self.system = cat.system_for_wafer(q.target.key)
        self.count = q.target.count
        d = cat.defaults
        c = fab.load_fabric_constants()
        over = {k: v for k, v in q.software.constants.items() if k in type(c).model_fields}
        self.c = c.model_copy(update=over) if over else c
        self.fk = fab.wafer_fabric_kwargs(self.wafer, q.precision, self.c)
        self.engine = q.software.engine
        self.reserve = float(q.options.get("reserve", d.wafer_sram_reserve_frac.si))
        if not 0.0 <= self.reserve < 1.0:
            raise InputError(f"reserve: must be a fraction in [0, 1), got {self.reserve!r}")
        self.cap = self.wafer.usable_sram_bytes * (1.0 - self.reserve)
        self.clock = self.wafer.clock_hz.si
        self.R, self.C = int(self.wafer.pe_rows.si), int(self.wafer.pe_cols.si)
        self.sides = wt._region_candidates(self.wafer).astype(float)  # WaferLLM's squares; then the rectangles
        self.region_rows, self.region_cols = region_shapes(self.R, self.C, self.sides)
        self.sram_pe = self.wafer.sram_per_pe_bytes.si
        self.w = build_workload(self.m, cat, precision=q.precision, phase="decode", batch=1, context=1)
        self.n_items = len(self.w.kind)
        self._weight_rows = self._prefix_tables = None  # weight_rows' and prefix_bytes' item tables, built on first use
        self.block_counter = np.concatenate([[0], np.cumsum(self.w.kind == KIND_BLOCK)])
        base = parse_grid(q.options.get("core_grid"), "core_grid", self.wafer)
        self.grids = {ph: parse_grid(q.options.get(f"core_grid_{ph}"), f"core_grid_{ph}", self.wafer) or base
                      for ph in ("decode", "prefill")}
        self.peak = self.wafer.peak_flop_per_s(q.precision)
        if not self.transformer:
            self.w = build_workload(self.m, cat, precision=q.precision, phase="decode", batch=1, context=1)
        self.spec = speculation(q) if self.transformer else None
        #: the request slots the memory (layer partition, groups) is laid out for, the passes run the batch (option
        #: ``layout_slots``: a running batch below its slots, :func:`wseplan.admission._on_regions`); None: the batch
        self.layout_slots = q.options.get("layout_slots")
        ls = self.layout_slots
        if ls is not None and (isinstance(ls, bool) or not isinstance(ls, (int, float)) or not 1 <= ls < math.inf):
            raise InputError(f"layout_slots: the request slots the replica is laid out for, a number >= 1; got {ls!r}")
        self.spec_off = default_draft_refused(q) if self.spec is None and self.transformer else None

    def weight_rows(self):
        """Item weight bytes (2, items): row 0 with every item on one wafer, row 1 spread over several wafers, where a
        tied LM head needs its own copy of the embedding [bytes]."""
        if self._weight_rows is None:
            w0 = np.asarray(self.w.weight_bytes, dtype=float)
            w1 = w0.copy()
            if self.w.tied_head_bytes:
                w1[-1] += self.w.tied_head_bytes
            self._weight_rows = np.stack([w0, w1])
        return self._weight_rows

    def weights(self, n, multi):
        """Per-configuration item weight bytes (n, items), with the tied head's own copy on multi-wafer rows."""
        return self.weight_rows()[np.broadcast_to(np.asarray(multi, dtype=np.int64), (n,))]

    def prefix_bytes(self, batch, kv_len, multi):
        """``(weights_at, kv_at, token_kv_at)``: functions of item bounds ``j`` ((N,) or (N, K) integers in [0, items])
        giving each row's weight bytes and KV-cache bytes of items ``[0, j)`` [bytes], for ``batch`` sequences of
        ``kv_len`` tokens (the KV bytes of :func:`kv_bytes_rows`, a windowed layer caching at most its window) and the
        weights of :meth:`weights` (``multi`` rows), and the KV bytes one more token of context adds to those items
        (the layers without a window) [bytes/token]. Built from prefix sums over the items, so a gather costs O(N K),
        not O(N items)."""
        if self._prefix_tables is None:
            w, cached = self.w, self.w.kv_bytes_per_cached_token
            per_window = [(np.inf, w.kv_bytes_per_token)] if cached is None else \
                [(float(c), np.where(w.kv_window_tokens == c, cached, 0.0)) for c in distinct(w.kv_window_tokens)]
            self._prefix_tables = (np.concatenate([np.zeros((2, 1)), np.cumsum(self.weight_rows(), axis=1)], axis=1),
                                   [(c, np.concatenate([[0.0], np.cumsum(v)])) for c, v in per_window])
        pre_w, classes = self._prefix_tables
        b, kv = np.asarray(batch, dtype=float), np.asarray(kv_len, dtype=float)
        variant = np.asarray(multi, dtype=np.int64)
        scale = [(b * np.minimum(kv, c), p) for c, p in classes]

        def expand(v, j):
            return v if j.ndim == 1 else v[:, None]

        def weights_at(j):
            return pre_w[expand(variant, j), j]

        def kv_at(j):
            return sum(p[j] * expand(f, j) for f, p in scale)

        unwindowed = dict(classes).get(np.inf)

        def token_kv_at(j):
            return unwindowed[j] if unwindowed is not None else np.zeros(np.shape(j))

        return weights_at, kv_at, token_kv_at


class WaferFamily(InferenceMixin, Family):
    name = "wafer"
    kinds = ("wafer",)
    phases = ("prefill", "decode", "serve")
    layout_columns = ("num_wafers",)
    options = ("reserve", "layout_slots") + GRID_OPTIONS + SPEC_OPTIONS
    arrivals_whole = True  # a step carries its prompt tokens through every layer group in turn

    def prepare(self, q: Query) -> WaferContext:
        return WaferContext(q)

    def hardware(self, ctx: WaferContext) -> Hardware:
        s = ctx.system
        return Hardware(devices_per_system=1.0, system_power_w=s.power_w.si, system_rack_units=s.rack_units.si,
                        price_key=ctx.wafer.system, system_name=s.name)

    # -- sizes by phase ---------------------------------------------------------------------------------
    def kv_and_working_tokens(self, ctx: WaferContext, B, C, O):
        ph = ctx.q.phase
        mode = ctx.engine.prefill_pass
        budget = ctx.engine.token_budget.si
        prefill_work = {"batch": B * C, "prompt": C + 0.0 * B}.get(mode, np.minimum(B * C, budget))
        if ph == "prefill":
            return C, prefill_work
        if ph == "decode":
            return C, B
        work = np.maximum(B, prefill_work if ctx.engine.scheduling == "static" else np.minimum(budget, B * C + B))
        return C + O, work

    @staticmethod
    def memory_batch(ctx: WaferContext, B):
        """The sequences the memory is laid out for: ``B``, or at least the replica's slots (``layout_slots``: a
        replica keeps its layer partition and groups when fewer requests are in flight, review29b #1)."""
        return B if ctx.layout_slots is None else np.maximum(np.asarray(B, dtype=float), float(ctx.layout_slots))

    # -- layouts -------------------------------------------------------------------------------------------
    def candidates(self, ctx: WaferContext, cfg: dict):
        n = len(cfg["batch"])
        search = np.isnan(cfg["num_wafers"])
        B, C, O = self.memory_batch(ctx, cfg["batch"]), cfg["context"], cfg["output_tokens"]
        kv, work = self.kv_and_working_tokens(ctx, B, C, O)
        a = ctx.w.working_set_bytes_per_token * work
        kmin = fewest_stages(ctx, B, kv, a, search)  # the greedy packing's count (at least N where only that matters)
        N = ctx.count
        # per row: the given replica size; without a count the fewest wafers that fit; with N wafers every size from
        # the fewest to N (one candidate row each, in increasing order)
        given = np.asarray(cfg["num_wafers"], dtype=float)
        if N is None:
            first = np.where(search, np.minimum(kmin, ctx.n_items), given)
            reps = np.ones(n, dtype=np.int64)
        else:
            hi = min(N, ctx.n_items)
            first = np.where(search, np.minimum(np.minimum(kmin, N), ctx.n_items), given)
            reps = np.where(search, hi - first + 1, 1).astype(np.int64)
        parent = np.repeat(np.arange(n), reps)
        out = {k: np.asarray(v, dtype=float)[parent] for k, v in cfg.items()}
        start = np.cumsum(reps) - reps
        out["num_wafers"] = first[parent] + (np.arange(len(parent)) - start[parent])
        return out, parent

    # -- fit -------------------------------------------------------------------------------------------------
    def _stages(self, ctx: WaferContext, cfg: dict):
        B, C, O = self.memory_batch(ctx, cfg["batch"]), cfg["context"], cfg["output_tokens"]
        kv, work = self.kv_and_working_tokens(ctx, B, C, O)
        k = np.minimum(cfg["num_wafers"], ctx.n_items).astype(np.int64)
        a = ctx.w.working_set_bytes_per_token * np.asarray(work, dtype=float)
        multi = k > 1
        x = ctx.weights(len(B), multi) + kv_bytes_rows(ctx.w, B, kv)
        # a row's items, stage constant and stage count follow from (batch, KV tokens, working bytes, stages)
        start, end, loads = min_max_partition_batched(x, k, a, row_keys=(B, kv, a, k))
        return multi, kv, a, start, end, loads

    def fit(self, ctx: WaferContext, cfg: dict) -> dict:
        """The fit of the rows; one question's remembered per setup by its four columns (copies handed out)."""
        if len(cfg["batch"]) != 1:
            return self._fit(ctx, cfg)
        key = b"".join(np.asarray(cfg[k], dtype=float).tobytes() for k in ("batch", "context", "output_tokens", "num_wafers"))
        hit = _remembered(ctx, "_fit_memo", key, lambda: self._fit(ctx, cfg))
        return {k: v.copy() for k, v in hit.items()}

    def _fit(self, ctx: WaferContext, cfg: dict) -> dict:
        B = self.memory_batch(ctx, cfg["batch"])
        n = len(B)
        multi, kv_len, a, start, end, loads = self._stages(ctx, cfg)
        valid = start >= 0
        maxload = np.where(valid, loads, -np.inf).max(axis=1)
        fullest = np.argmax(np.where(valid, loads, -np.inf), axis=1)
        fits = maxload <= ctx.cap
        rows = np.arange(n)
        B_ = np.asarray(B, dtype=float)
        # the weight and KV bytes of item ranges, from prefix sums over the items (weights: two variants; KV: per
        # window class, scaled per row), gathered at the stages' bounds only (no configurations x items array)
        weights_at, kv_at, token_kv_at = ctx.prefix_bytes(B_, kv_len, multi)
        lo, hi = np.maximum(start, 0), np.maximum(end, 0) + 1
        s0, e0 = start[rows, fullest], end[rows, fullest]
        w_full = weights_at(e0 + 1) - weights_at(s0)
        kv_full = kv_at(e0 + 1) - kv_at(s0)
        parts = {"weights": w_full, "kv_cache": kv_full, "activations": a, "optimizer": np.zeros(n)}
        # tokens of KV per sequence the same stages could hold: the tightest wafer's room over its KV bytes per
        # token (windowed layers count in full: an upper bound on what more context adds)
        w_stage = np.where(valid, weights_at(hi) - weights_at(lo), 0.0)
        kv_now = np.where(valid, kv_at(hi) - kv_at(lo), 0.0)
        pt_stage = np.where(valid, token_kv_at(hi) - token_kv_at(lo), 0.0)
        room = np.where(valid & (pt_stage > 0), (ctx.cap - w_stage - kv_now - a[:, None]) / np.where(pt_stage > 0, pt_stage, 1.0),
                        np.inf)
        mt = room.min(axis=1)
        max_tok = np.where(np.isfinite(mt), np.maximum(np.floor(B_ * kv_len + mt), 0.0), 0.0)
        k = np.asarray(cfg["num_wafers"], dtype=float)
        replicas = np.maximum(np.floor((ctx.count or k) / k), 1.0) if ctx.count else np.ones(n)
        nst = valid.sum(axis=1)
        last = np.full(n, ctx.n_items)
        w_all, kv_all, a_all = weights_at(last) * replicas, kv_at(last) * replicas, a * nst * replicas
        # a target with a count is all its wafers, the idle remainder too (priced whole, as GPUs)
        held = np.maximum(k * replicas, ctx.count) if ctx.count else k * replicas
        return dict(num_devices=held, num_replicas=replicas, per_device_bytes=maxload,
                    capacity_bytes=np.full(n, ctx.cap), fits=fits, weights_bytes=w_all, kv_cache_bytes=kv_all,
                    activation_bytes=a_all, optimizer_bytes=np.zeros(n), total_bytes=w_all + kv_all + a_all,
                    binding=binding_code(parts, maxload, ctx.cap, fits), max_tokens_in_flight=max_tok,
                    stage_start=start, stage_end=end, stage_loads=loads)

    def no_count_holds(self, ctx: WaferContext, r: dict) -> bool:
        """Whether one item (a layer, the embedding or the head) with the row's KV cache and working set overflows a
        wafer alone: a layer is not split across wafers, so no wafer count holds the row (audit29a L4)."""
        B, C, O = (np.array([float(r[k])]) for k in ("batch", "context", "output_tokens"))
        kv, work = self.kv_and_working_tokens(ctx, B, C, O)
        items = ctx.weight_rows()[1] + kv_bytes_rows(ctx.w, B, kv)[0]
        return bool(items.max(initial=0.0) + ctx.w.working_set_bytes_per_token * float(np.ravel(work)[0]) > ctx.cap)

    def default_layout(self, ctx: WaferContext, given: dict, batch: int) -> dict:
        k = int(given["num_wafers"])
        if ctx.count is not None and k > ctx.count:
            raise InputError(f"num_wafers: {k} wafers per replica exceed the target's {ctx.count}")
        return given

    def describe(self, ctx: WaferContext, r: dict):
        """Layout, stage records (0-based inclusive transformer blocks per wafer) and notes of one row."""
        st = [(a, b, load) for a, b, load in zip(r["fit.stage_start"], r["fit.stage_end"], r["fit.stage_loads"]) if a >= 0]
        stages = stage_records(ctx.w, [(a, b) for a, b, _ in st], [load for _, _, load in st])
        k = int(r["num_wafers"])
        lay = {"num_wafers": k, "num_replicas": int(r["num_replicas"])}
        for ph in ("decode", "prefill"):
            rr, cc = r.get(f"time.region_{ph}_rows"), r.get(f"time.region_{ph}_cols")
            if rr is not None:
                lay[f"core_grid_{ph}"] = f"{int(rr)}x{int(cc)}"
                lay[f"pipeline_stages_{ph}"] = int(r[f"time.pipeline_stages_{ph}"])
        if r.get("time.micro_batches") is not None:
            lay["micro_batches_in_flight"] = int(r["time.micro_batches"])
        return lay, {"stages": stages}, resident_notes(ctx, r, k)

    # -- time --------------------------------------------------------------------------------------------------
    def pipeline_stages(self, ctx, cfg):
        return cfg["_groups_d"]

    def replicas(self, ctx, cfg):
        return cfg["_replicas"]

    def devices_per_replica(self, ctx, cfg):
        return np.asarray(cfg["num_wafers"], dtype=float)

    def peak_flop_per_s(self, ctx):
        return ctx.peak

    def flop_per_token(self, ctx, context):
        m = ctx.m
        active = m.num_layers * block_params(m)[1] + m.vocab_size * m.d_model
        return 2.0 * active + 4.0 * m.num_layers * m.num_heads * m.head_dim_ * np.asarray(context, dtype=float)

    def time(self, ctx: WaferContext, cfg: dict, fit: dict | None = None) -> dict:
        if not ctx.transformer:  # no time model: NaN times, the chain reports the fit alone
            n = len(cfg["batch"])
            return {"step_s": np.full(n, np.nan), "tokens_per_s": np.full(n, np.nan), "bottleneck": np.full(n, -1)}
        own = own_prefill_regions(ctx)
        cfg = self._with_stages(ctx, cfg, fit if fit is not None else self.fit(ctx, cfg),
                                kinds=("decode", "prefill") if own else ("decode",))
        served = cfg.pop("_served", None)  # a serving search's answers on the regions it chose
        out = self.infer_time(ctx, cfg) if served is None else served
        out["region_fallback"] = np.asarray(cfg.get("_fallback", np.zeros(len(cfg["batch"]), dtype=bool)), dtype=float)
        for ph in ("decode", "prefill") if own else ("decode",):
            if f"_rows_{ph[0]}" in cfg:
                out[f"region_{ph}_rows"] = cfg[f"_rows_{ph[0]}"]
                out[f"region_{ph}_cols"] = cfg[f"_cols_{ph[0]}"]
                out[f"pipeline_stages_{ph}"] = cfg[f"_groups_{ph[0]}"]
        return out

    def _with_stages(self, ctx: WaferContext, cfg: dict, fit: dict, kinds=("decode", "prefill")) -> dict:
        """``cfg`` plus the per-wafer layer counts and bytes of the fit's partition, and the region and layer
        groups chosen for each pass kind of ``kinds`` (decode GEMV, prefill GEMM; a kind left out is chosen when a
        pass first needs it, :meth:`_regions`)."""
        cfg = dict(cfg)
        start, end, loads = fit["stage_start"], fit["stage_end"], fit["stage_loads"]
        valid = start >= 0
        bc = ctx.block_counter
        cfg["_nl"] = np.where(valid, bc[np.maximum(end, 0) + 1] - bc[np.maximum(start, 0)], 0).astype(float)
        cfg["_sb"] = np.where(valid, loads, 0.0)
        cfg["_valid"] = valid
        cfg["_nw"] = valid.sum(axis=1).astype(float)
        cfg["_replicas"] = np.asarray(fit["num_replicas"], dtype=float)
        self._regions(ctx, cfg, kinds)
        return cfg

    def _regions(self, ctx: WaferContext, cfg: dict, kinds) -> None:
        """The region (``_rows_<k>``, ``_cols_<k>``) and layer groups (``_groups_<k>``) of each pass kind of
        ``kinds`` into ``cfg``; a serving search also leaves the answers on its regions (``_served``)."""
        B, C, O = cfg["batch"], cfg["context"], cfg["output_tokens"]
        n = len(B)
        kv, _ = self.kv_and_working_tokens(ctx, B, C, O)
        layer_bytes = wt.largest_layer_bytes_array(ctx.m, precision=ctx.q.precision, batch=B, context=kv)
        ok = admissible(ctx, cfg, layer_bytes) if any(ctx.grids[ph] is None for ph in kinds) else None
        for ph in sorted(kinds, reverse=True):  # prefill first: a serving search times whole answers, prompts included
            g = ctx.grids[ph]
            if g is not None:
                cfg[f"_rows_{ph[0]}"], cfg[f"_cols_{ph[0]}"] = np.full(n, float(g[0])), np.full(n, float(g[1]))
            elif ph == "prefill":
                cfg["_rows_p"], cfg["_cols_p"] = best_prefill_side(self, ctx, cfg, layer_bytes, ok)
            elif ctx.q.phase == "serve":  # the region of the shortest request, every admissible one answered
                cfg["_rows_d"], cfg["_cols_d"], cfg["_served"] = best_serving_side(self, ctx, cfg, ok)
            elif ctx.q.phase == "prefill":  # an in-flight replica's layout: the region its requests are shortest on
                # (requests of the catalog's default output length: a prefill has none of its own)
                whole = dict(cfg, output_tokens=np.full(n, float(ctx.q.catalog.defaults.default_output_tokens.si)))
                cfg["_rows_d"], cfg["_cols_d"], _ = best_serving_side(self, serving_context(ctx), whole, ok)
            else:
                cfg["_rows_d"], cfg["_cols_d"] = best_side(ctx, cfg, *self._spec_rounds(ctx, cfg), layer_bytes, ok)
            if g is None:
                cfg["_fallback"] = cfg.get("_fallback", False) | ~ok.any(axis=1)
            cfg[f"_groups_{ph[0]}"] = self._groups(ctx, cfg, cfg[f"_rows_{ph[0]}"], cfg[f"_cols_{ph[0]}"]).sum(axis=1)
        if ctx.q.phase == "prefill" and "prefill" not in kinds:  # its prompts run where its weights stay
            for k in ("rows", "cols", "groups"):
                cfg[f"_{k}_p"] = cfg[f"_{k}_d"].copy()

    def _spec_rounds(self, ctx: WaferContext, cfg: dict):
        """The decode search's ``(KV tokens, spec)``: under speculative decoding the search weighs the plain round and
        the verification round (k + 1 rows per sequence) with the draft's round (:func:`.wafer_regions.best_side`)."""
        B = np.asarray(cfg["batch"], dtype=float)
        c_ = np.asarray(cfg["context"], dtype=float) + (0.0 if ctx.q.phase == "decode" else cfg["output_tokens"] / 2.0)
        if not getattr(ctx, "spec", None):
            return c_, None
        dctx, dcfg = self.draft_setup(ctx, cfg)
        fits = self.draft_fits(ctx, cfg, np.arange(len(B)), dctx, dcfg)
        draft = self._draft_round(dctx, dcfg, B, c_) - self.step_host_s(dctx)
        k = ctx.spec["draft_tokens"]
        return c_, (k, ctx.spec["accepted_per_step"], draft * ctx.clock, fits)

    def _decode(self, ctx, cfg, rows, batch, kv, prefill_per_seq=None, budget=None, new_per_seq=1.0, counts=None,
                chunk=None, prompt=None):
        """:meth:`InferenceMixin._decode`; a plain round (no prompt tokens) of the same rows as the context's previous
        one is that round again: a serving evaluation asks for the draft model's round twice (with and without the
        prompt chunks on the target's passes), on the same rows, batch and KV lengths (compared bit for bit)."""
        if prefill_per_seq is not None or budget is not None:
            return super()._decode(ctx, cfg, rows, batch, kv, prefill_per_seq, budget, new_per_seq, counts, chunk, prompt)
        key = (type(rows) is int, np.asarray(rows).tobytes(), np.asarray(batch, dtype=float).tobytes(),
               np.asarray(kv, dtype=float).tobytes(),
               float(new_per_seq), None if counts is None else np.asarray(counts, dtype=float).tobytes())
        last = getattr(ctx, "_last_round", None)
        if last is not None and last[0] is cfg and last[1] == key:
            return last[2]
        out = super()._decode(ctx, cfg, rows, batch, kv, prefill_per_seq, budget, new_per_seq, counts)
        ctx._last_round = (cfg, key, out)
        return out

    def _draft_round(self, dctx, dcfg, B, kv):
        """The draft model's decode round of every row [s], as :meth:`_decode_tpot` will ask for it (a question's few
        rows in Python floats, row by row, so that its own asks find them remembered)."""
        n = len(B)
        if n <= X.SCALAR_ROWS:
            try:
                return np.array([self._decode(dctx, dcfg, i, float(B[i]), float(kv[i]))[0] for i in range(n)])
            except X.SCALAR_ERRORS:
                pass
        return self._decode(dctx, dcfg, np.arange(n), B, kv)[0]

    def draft_fits(self, ctx: WaferContext, cfg: dict, rows, dctx: WaferContext, dcfg: dict):
        """The draft lives in the SRAM the target leaves free on the replica's wafers (it runs between the target's
        verification passes, on PEs the target is not using then): its weights and KV cache must fit in the free
        bytes, its largest layer on one wafer (:func:`.wafer_stages.draft_fits`), else the engine does not
        speculate. No wafer is added for it."""
        return draft_fits(self, ctx, cfg, rows, dctx, dcfg)

    def draft_setup(self, ctx: WaferContext, cfg: dict):
        """The draft model's regions and stages, laid out as on wafers of its own (the fewest that hold it); it is
        placed in the SRAM the target's wafers leave free (:meth:`draft_fits`), so the replica counts no wafer for
        it; its regions are sized by whole PEs' SRAM (an approximation: the free share per PE is smaller). Its
        prefill of a prompt (:meth:`_draft_prefill`) runs on its decode regions: resident weights are not laid out
        again between a request's phases (as the target's prompt chunks ride on its decode passes). Rows align
        with ``cfg``'s."""
        if getattr(ctx, "_draft", None) is None:
            ctx._draft = WaferContext(draft_query(ctx.q, ctx.spec["draft_model"]))
        dctx = ctx._draft
        last = getattr(ctx, "_draft_for", None)
        if last is not None and last[0] is cfg:  # the same rows again (a serving round with and without prompts)
            return dctx, last[1]
        n = len(cfg["batch"])
        base = {k: np.asarray(cfg[k], dtype=float) for k in ("batch", "context", "output_tokens")}
        # one question: its draft layout remembered per setup by the three columns it depends on (copies handed out)
        key = b"".join(v.tobytes() for v in base.values()) if n == 1 else None

        def layout():
            cand, parent = self.candidates(dctx, dict(base, num_wafers=np.full(n, np.nan)))
            first = np.unique(parent, return_index=True)[1]
            rows = {k: v[first] for k, v in cand.items()}
            out = self._with_stages(dctx, rows, self.fit(dctx, rows), kinds=("decode",))
            for k in ("rows", "cols", "groups"):  # its prompts run where its weights stay: on its decode regions
                out[f"_{k}_p"] = out[f"_{k}_d"].copy()
            return out

        hit = _remembered(ctx, "_draft_memo", key, layout)
        dcfg = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in hit.items()} if key is not None else hit
        ctx._draft_for = (cfg, dcfg)
        return dctx, dcfg

    def _groups(self, ctx, cfg, rows_, cols_, idx=None):
        sel = slice(None) if idx is None else idx
        capr = region_capacity(ctx, np.asarray(rows_, dtype=float), cols_)
        g = np.maximum(1.0, np.ceil(cfg["_sb"][sel] / capr[:, None]))
        if ctx.engine.layer_groups == "fill":  # every region the wafer tiles into carries a group: no PE left idle
            g = np.maximum(g, region_tiles(ctx, rows_, cols_)[:, None])
        g = np.minimum(g, np.maximum(cfg["_nl"][sel], 1.0))
        return np.where(cfg["_valid"][sel], g, 0.0)

    def _pass_kernels(self, ctx: WaferContext, r_, c_, dseq, ptok, decode_kv, prefill_span, prefill_kv, prefill_seqs,
                      new_per_seq):
        """Per-block and head kernel parts [cycles] of passes (one per entry of the equal-length arrays) on regions
        ``r_`` x ``c_``: ``(block parts, head parts)``, each an array per entry."""
        n = len(r_)
        has_d = dseq > 0
        fk, c = ctx.fk, ctx.c
        dtok = dseq * new_per_seq
        # kernel choice per pass (the library picks the cheaper): (a) every token of the pass as a row of the GEMV
        # kernels (MeshGEMV with m = decode + prompt tokens; prompt rows attend their prefix), or (b) the decode rows
        # on GEMV and the prompt tokens on the GEMM kernels (MeshGEMM: shift steps that only pay off for long chunks)
        span = np.maximum(prefill_span, 1.0)
        pkv = prefill_kv + (span + 1.0) / 2.0
        dkv = decode_kv
        rows_all = dtok + ptok
        kv_all = (dtok * dkv + ptok * pkv) / np.maximum(rows_all, 1e-12)
        one = bool((r_ == r_[0]).all() and (c_ == c_[0]).all())  # one side: a region of one entry, kept across questions
        region = fkern.Region.of(r_[:1] if one else r_, c_[:1] if one else c_)  # line terms shared by the pass's kernels
        any_d = has_d.any()
        emit = np.maximum(dtok + prefill_seqs, 1.0)
        # (a), the decode rows of (b) and the LM head as one array pass: n entries every token (and the head), n decode
        reg2 = fkern.Region.of(np.concatenate([r_, r_]), np.concatenate([c_, c_])) if any_d and not one else region
        both, head = wt.decode_block_and_head_cycles_array(
            arch=ctx.m, batch=np.concatenate([np.maximum(rows_all, 1.0), np.maximum(dtok, 1.0)]) if any_d else
            np.maximum(rows_all, 1.0), context=np.concatenate([kv_all, dkv]) if any_d else kv_all, rows=reg2.P,
            head_batch=np.concatenate([emit, emit]) if any_d else emit, cols=reg2.Q, fk=fk,
            gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si, region=reg2)
        gemv_all = {k: v[:n] for k, v in both.items()} if any_d else both
        split = {k: np.where(has_d, 0.0, 0.0) for k in ("overhead", "latency", "serialization", "compute", "fabric")}
        if any_d:
            d = {k: v[n:] for k, v in both.items()}
            for k, v in d.items():
                split[k] = split[k] + np.where(has_d, v, 0.0)
        has_p = ptok > 0
        if has_p.any():
            pseq = np.maximum(prefill_seqs, 1.0)
            p = wt.prefill_block_cycles_array(arch=ctx.m, tokens=span, batch=pseq, rows=r_, cols=c_, fk=fk,
                                              gemm_mac_efficiency_frac=c.gemm_mac_efficiency_frac.si,
                                              gemm_step_overhead_cycles=c.gemm_step_overhead_cycles.si,
                                              prior_tokens=prefill_kv, region=region)
            for k, v in p.items():
                split[k] = split[k] + np.where(has_p, v, 0.0)
        tot_a = sum(_as_n(v, n) for v in gemv_all.values())
        tot_b = sum(_as_n(v, n) for v in split.values())
        use_a = (tot_a <= tot_b) & ((ctx.engine.prefill_kernel == "auto") | ~has_p)
        blk = {k: np.where(use_a, np.asarray(gemv_all.get(k, 0.0), dtype=float), np.asarray(split.get(k, 0.0), dtype=float))
               for k in dict.fromkeys([*gemv_all, *split])}  # ordered: sums must not depend on hashing
        return blk, {k: _as_n(v[:n], n) for k, v in head.items()}

    def pass_row(self, ctx: WaferContext, cfg: dict, i: int, **kw):
        """:meth:`pass_time` of row ``i`` in Python floats, the kernels remembered per setup (:mod:`.wafer_row`)."""
        return _pass_row(self, ctx, cfg, i, **kw)

    def announce_row(self, ctx: WaferContext, cfg: dict, i: int, passes):
        """A context in which the passes ``passes()`` (:meth:`pass_row` keywords) of row ``i`` are announced: their
        kernels are evaluated in one array pass at the first miss (:func:`.wafer_row.announce_row`)."""
        return _announce_row(self, ctx, cfg, i, passes)

    def pass_time(self, ctx: WaferContext, cfg: dict, rows, *, decode_seqs, decode_kv, prefill_tokens, prefill_span,
                  prefill_kv, prefill_seqs, new_per_seq=1.0):
        """A pass through the replica's layer groups: (latency_s, slowest group's busy time, parts)."""
        rows = np.asarray(rows)
        n = len(rows)
        dseq = _as_n(decode_seqs, n)
        ptok = _as_n(prefill_tokens, n)
        has_d = dseq > 0
        # a pass with decode sequences runs on the decode regions; a prefill-only pass on the prefill regions where
        # prompts have regions of their own (:func:`own_prefill_regions`), else on the decode regions too
        own = own_prefill_regions(ctx)
        if own and "_rows_p" not in cfg and not has_d.all():
            self._regions(ctx, cfg, ("prefill",))
        def side(k):  # (the prefill regions are chosen first: no decode regions yet)
            if "_rows_d" not in cfg:
                return cfg[f"_{k}_p"][rows]
            return np.where(has_d, cfg[f"_{k}_d"][rows], cfg[f"_{k}_p"][rows]) if own and "_rows_p" in cfg else cfg[f"_{k}_d"][rows]
        r_, c_ = side("rows"), side("cols")
        fk, c = ctx.fk, ctx.c
        dtok = dseq * new_per_seq
        # the kernels depend on the region and the pass's sizes alone: evaluated once per distinct combination
        kcols = [r_, c_, dseq, ptok] + [_as_n(v, n) for v in (decode_kv, prefill_span, prefill_kv, prefill_seqs, new_per_seq)]
        # a few entries: from the setup's kernel memo (a serving search announces every pass of its candidates)
        got = kernels_rows(self, ctx, list(zip(*(v.tolist() for v in kcols)))) if n <= MEMO_ROWS else None
        if got is not None:
            blk, head = got
        else:
            first, inv = unique_rows(*kcols) if n > 8 else (None, None)
            blk, head = self._pass_kernels(ctx, *(kcols if first is None else [v[first] for v in kcols]))
            if first is not None:
                blk = {k: v[inv] for k, v in blk.items()}
                head = {k: v[inv] for k, v in head.items()}
        blk_total = sum(_as_n(v, n) for v in blk.values())
        head_total = sum(_as_n(v, n) for v in head.values())
        act_bytes = (dtok + ptok) * ctx.m.d_model * fk["dtype_bytes"]
        hop = handover_cycles(fk, r_, c_, act_bytes)
        x = fab.cross_system_transfer_s(message_bytes=act_bytes, bandwidth_bytes_per_s=ctx.system.io_bandwidth_bytes_per_s.si,
                                        latency_s=c.cross_system_latency_s.si)
        clock = ctx.clock
        nw = cfg["_nw"][rows]
        fast = slowest_group(self, ctx, cfg, rows, has_d, blk_total, head_total, hop, x)  # per configuration row
        if fast is not None:
            mx, sumG, L = fast
        else:
            nl, valid = cfg["_nl"][rows], cfg["_valid"][rows]
            G = self._groups(ctx, cfg, r_, c_, rows)
            last = np.arange(nl.shape[1])[None, :] == (nw - 1)[:, None]
            q = np.floor_divide(nl, np.maximum(G, 1.0))
            r = nl - q * np.maximum(G, 1.0)
            bt, ht, hp, xx = blk_total[:, None], head_total[:, None], hop[:, None], x[:, None]
            t_last = (q * bt + np.where(last, ht, 0.0)) / clock + np.where(last, 0.0, xx)
            t_first = ((q + (r > 0)) * bt) / clock + hp / clock
            stage_max = np.where(G > 1, np.maximum(t_first, t_last), t_last)
            mx = np.where(valid, stage_max, -np.inf).max(axis=1)
            sumG = G.sum(axis=1)
            L = nl.sum(axis=1)
        lat = L * blk_total / clock + (sumG - nw) * hop / clock + head_total / clock + (nw - 1) * x
        parts = {}
        for key in list(blk) + [k for k in head if k not in blk]:
            name = wt._PART_NAMES[key]
            parts[name] = parts.get(name, 0.0) + (L * np.asarray(blk.get(key, 0.0)) + np.asarray(head.get(key, 0.0))) / clock
        parts["cross_region_link"] = (hop * (sumG - nw) + x * clock * (nw - 1)) / clock
        return lat, mx, parts


def serving_context(ctx: WaferContext) -> WaferContext:
    """The context of ``ctx``'s question asked as whole requests (phase ``serve``): the serving layout's search."""
    if getattr(ctx, "_serving", None) is None:
        ctx._serving = WaferContext(replace(ctx.q, phase="serve"))
    return ctx._serving


def _as_n(v, n: int) -> np.ndarray:
    """``v`` as a float array of shape (n,) (a broadcast view unless it already is one)."""
    if type(v) is np.ndarray and v.shape == (n,) and v.dtype == np.float64:
        return v
    return np.broadcast_to(np.asarray(v, dtype=float), (n,))


register(WaferFamily())
