"""GPU layout search and training helpers of the GPU family (:mod:`wseplan.devices.gpu`): the layouts searched
(:func:`layout_grid`), the memory of training layouts with the context's accounting, partial recomputation's layer
count, and the GPU counts a training search lays out."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..analytic.attention_dp import kv_head_shards
from ..analytic.memory import PARTIAL, RECOMPUTE, gpu_layout_memory
from ..analytic.moe_train import routed_param_rows
from ..errors import InputError
from ..workload import num_experts

#: context-parallel degrees the training search tries (each rank keeps >= ``defaults.gpu_cp_min_tokens_per_rank`` tokens)
CP_VALUES = (1, 2, 4, 8, 16, 32)
#: virtual pipeline stages the training search tries: the published recipes use 1-20 (NeMo 24.07 performance summary:
#: GPT-3 175B vpp 6, Llama 3 70B vpp 5, Llama 2 70B vpp 20; Meta's Llama 3 405B and NVIDIA's MLPerf 405B runs 4-8)
VPP_VALUES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20)
#: expert-parallel degrees the training search tries for an MoE model (those dividing its experts and the data-parallel
#: ranks): NVIDIA's Megatron-Bridge pre-training recipes use EP 8-64 (Qwen3, DeepSeek-V3, gpt-oss; 2025)
EP_VALUES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def train_memory(ctx, cfg: dict, rf) -> dict:
    """Per-GPU training memory of layout rows [bytes] by part (:func:`gpu_layout_memory` with this context's training
    accounting: context parallelism splits activations over tp x cp and weights over tp, ZeRO over dp x cp; LoRA's
    frozen base and MLP; ``rf`` the partial-recompute fractions)."""
    B, C, tp, pp, dp = cfg["batch"], cfg["context"], cfg["tp"], cfg["pp"], cfg["dp"]
    cp = np.asarray(cfg["cp"], dtype=float)
    kw = dict(zero_stage=cfg["zero_stage"], recompute=cfg["recompute"], micro_batch=cfg["micro_batch"],
              virtual_stages=cfg["vpp"], batch=B, context=C, gradient_bytes_per_param=ctx.grad_bytes,
              adam_state_bytes_per_param=ctx.adam_bytes, prefill_chunk_tokens=ctx.chunk, frozen_mlp=ctx.frozen_mlp,
              recompute_frac=rf, logits_bytes_per_token=ctx.logits_bytes)
    mem = gpu_layout_memory(ctx.w, tp=tp * cp, pp=pp, dp=dp, **kw)
    if (cp > 1).any():  # weights and optimizer split over TP only (ZeRO over dp*cp); activations over tp*cp
        mw = gpu_layout_memory(ctx.w, tp=tp, pp=pp, dp=dp * cp, **kw)
        mem = dict(mem, weights=mw["weights"], optimizer=mw["optimizer"])
    ep = np.asarray(cfg.get("ep", 1.0), dtype=float) * np.ones(np.shape(cp))
    if num_experts(ctx.m) > 1 and (ep != np.asarray(tp, dtype=float)).any():
        mem = _expert_parallel_memory(ctx, mem, ep, tp=tp, pp=pp, dp=dp * cp, kw=kw)
    if (cp > 1).any() or ctx.weight_frac != 1.0:
        mem = dict(mem, weights=mem["weights"] * ctx.weight_frac)
        mem["total"] = mem["weights"] + mem["optimizer"] + mem["kv_cache"] + mem["activations"]
    return mem


def _expert_parallel_memory(ctx, mem: dict, ep: np.ndarray, *, tp, pp, dp, kw) -> dict:
    """``mem`` (computed with the routed experts split over TP like the other weights) with each GPU holding ``1 /
    ep`` of them whole instead (expert tensor parallelism 1, :mod:`~wseplan.analytic.moe_train`): their weights and,
    below ZeRO-2, their gradients (ZeRO shards the experts' gradients and Adam state over the ``tp dp cp / ep`` ranks
    holding the same experts: per GPU as the other weights'). The stage's heaviest run of blocks is found again
    (:func:`gpu_layout_memory` on the workload with ``tp / ep`` of each row's routed weights, which it splits over
    ``tp``)."""
    routed = routed_param_rows(ctx.w)
    tpa = np.asarray(tp, dtype=float) * np.ones(np.shape(ep))
    out = {k: np.array(v, dtype=float, copy=True) * np.ones(np.shape(ep)) for k, v in mem.items()}
    zs = np.asarray(kw["zero_stage"], dtype=float) * np.ones(np.shape(ep))
    g, a = float(ctx.grad_bytes), float(ctx.adam_bytes)
    per_param = ctx.w.weight_bytes / np.maximum(ctx.w.params, 1.0)
    for e, t in sorted({(float(x), float(y)) for x, y in zip(ep, tpa) if x != y}):
        rows = (ep == e) & (tpa == t)
        cut = routed * (1.0 - t / e)
        w_e = dataclasses.replace(ctx.w, params=ctx.w.params - cut, weight_bytes=ctx.w.weight_bytes - cut * per_param)
        sub = {k: (np.asarray(v)[rows] if np.ndim(v) else v) for k, v in kw.items()}
        pick = (lambda v: np.asarray(v, dtype=float) * np.ones(np.shape(ep)))
        m_e = gpu_layout_memory(w_e, tp=pick(tp)[rows], pp=pick(pp)[rows], dp=pick(dp)[rows], **sub)
        z = zs[rows]
        d_ = pick(dp)[rows]
        # optimizer = gradients + Adam state: the gradients split (ZeRO < 2) and the Adam state (always) as before
        grad_share = np.where(z >= 1, g / np.maximum(g + a / d_, 1e-30), g / max(g + a, 1e-30)) if g + a > 0 else 0.0
        opt = np.where(z >= 2, out["optimizer"][rows],
                       m_e["optimizer"] * grad_share + out["optimizer"][rows] * (1.0 - grad_share))
        opt = np.where(z >= 1, opt, m_e["optimizer"])
        out["weights"][rows] = np.where(z >= 3, out["weights"][rows], m_e["weights"])
        out["optimizer"][rows] = opt
    out["total"] = out["weights"] + out["optimizer"] + out["kv_cache"] + out["activations"]
    return out


def partial_frac(ctx, cfg: dict, none_total) -> np.ndarray:
    """The fewest whole layers of a stage recomputed (``partial``) with which each row fits, as a fraction of the
    stage's ``ceil(L / pp)`` layers: 0 where the layout fits without recomputation (then partial is none), 1 where
    only recomputing every layer could (partial is full). A stage's memory falls by the same bytes per recomputed
    layer, so between one layer and all of them it is a straight line (the fullest of the stages, a maximum of such
    lines, lies on or below it): the layer count read off that line always fits."""
    n_st = np.ceil(ctx.num_layers / np.asarray(cfg["pp"], dtype=float))
    one = train_memory(ctx, cfg, 1.0 / n_st)["total"]
    every = train_memory(ctx, cfg, np.ones(len(n_st)))["total"]
    per_layer = (one - every) / np.maximum(n_st - 1.0, 1.0)
    need = np.where(per_layer > 0, 1.0 + np.ceil((one - ctx.capacity) / np.where(per_layer > 0, per_layer, 1.0) - 1e-9),
                    n_st)
    k = np.where(none_total <= ctx.capacity, 0.0, np.where(one <= ctx.capacity, 1.0, np.clip(need, 1.0, n_st)))
    return k / n_st


def train_counts(n: int | None) -> list:
    """The GPU counts a training search lays out on ``n`` GPUs: ``n`` itself and, where ``n`` is neither a power of
    two nor three times one, the largest of each below it (1,000 GPUs: also 512 and 768), whose layouts leave the rest
    idle. A layout must divide the GPUs it uses, so an awkward count (1,000 = 8 x 125) has few; without these, 1,000
    H100 trained GPT-3 slower than 768 (audit24 F2)."""
    if n is None:
        return [None]
    out = [n]
    if n & (n - 1) and not (n % 3 == 0 and (n // 3) & (n // 3 - 1) == 0):
        p2 = 1 << (n.bit_length() - 1)
        out += [c for c in (p2, 3 * p2 // 2 if 3 * p2 // 2 <= n else 3 * p2 // 4) if 1 <= c < n and c not in out]
    return out


def layout_grid(ctx, batch: float, context: float = 1.0, *, micro_batch: int | None = None, vpp: int | None = None,
                given_cp: int | None = None, given_ep: int | None = None) -> dict:
    """The layouts searched for one batch and context (training: with micro-batches, virtual stages, recompute,
    ZeRO and, for an MoE model, expert parallelism; a given ``micro_batch``, ``vpp``, ``given_cp`` or ``given_ep``
    outside the usual values is searched too)."""
    L = ctx.num_layers
    N0 = ctx.count
    train = ctx.q.phase == "train"
    # context parallelism (training, a device count): cp ranks share a sequence, each keeping at least
    # defaults.gpu_cp_min_tokens_per_rank of it; the given option fixes it
    cp_min = ctx.q.catalog.defaults.gpu_cp_min_tokens_per_rank.si
    rep_min = ctx.q.catalog.defaults.gpu_train_min_replica_frac.si
    pp_idle = int(ctx.q.catalog.defaults.gpu_infer_idle_max_pipeline.si)
    cpg = ctx.cp_given if ctx.cp_given is not None else given_cp
    if train and cpg is not None and N0 is not None and N0 % int(cpg):
        raise InputError(f"context_parallel: {cpg:g} does not divide the target's {N0} GPUs; give a "
                         "count that is a multiple of it")
    T, P, D, K = [], [], [], []
    seen: set = set()
    for Nc in train_counts(N0) if train else [N0]:
        if not train:
            cps = [1]
        elif ctx.cp_given is not None or given_cp is not None:
            c0 = int(ctx.cp_given if ctx.cp_given is not None else given_cp)
            cps = [c0] if Nc is None or Nc % c0 == 0 else []
        else:
            cps = [c for c in CP_VALUES if c == 1 or (Nc is not None and Nc % c == 0 and context / c >= cp_min)]
        for cp in cps:
            N = None if Nc is None else Nc // cp  # the cp groups take cp of the GPUs; the layout splits the rest
            # inference with a count: also replicas of a power-of-two size that does not divide it (the rest idle)
            tps = [t for t in ctx.tp_values if N is None or (N % t == 0) or (not train and t <= N)]
            for t in tps:
                if N is None:
                    pps = range(1, L + 1)
                else:
                    pps = [p for p in range(1, L + 1) if (N // t) % p == 0 and N % t == 0]
                    if not train:  # a replica of t x p GPUs fewer than the count (a documented pipeline bound)
                        pps = sorted(set(pps) | set(range(1, min(L, N // t, pp_idle) + 1)))
                for p in pps:
                    if N is None:
                        dps = [1] if not train else [2 ** i for i in range(15) if 2 ** i <= batch and batch % 2 ** i == 0]
                    elif train:  # all the GPUs, or fewer replicas (a documented share) where the batch splits better
                        full = N // (t * p)
                        dps = [full] + [2 ** i for i in range(15) if full * rep_min <= 2 ** i < full and batch % 2 ** i == 0]
                    else:
                        dps = [N // (t * p)]  # inference: as many whole replicas as the count holds
                    for d_ in dps:
                        if (t, p, d_, cp) not in seen:
                            seen.add((t, p, d_, cp))
                            T.append(t), P.append(p), D.append(d_), K.append(cp)
    N = N0
    T, P, D, K = (np.asarray(a, dtype=float) for a in (T, P, D, K))
    if len(T) == 0:
        raise InputError(f"target: no tensor x pipeline x data layout of {ctx.m.name} uses {N} GPUs; "
                         "choose a count that is a multiple of a power of two")
    if ctx.q.phase != "train":
        return with_attention_dp({"tp": T, "pp": P, "dp": D}, getattr(ctx, "adp_offered", False))
    fixed = N is None  # the fewest GPUs that fit: the plainest schedule
    mbs = [1] if fixed else [b for b in (1, 2, 4, 8, 16, 32) if b <= batch]
    vps = [1] if fixed else list(VPP_VALUES)
    if micro_batch is not None and micro_batch not in mbs and micro_batch <= batch:
        mbs.append(micro_batch)
    if vpp is not None and vpp not in vps:
        vps.append(vpp)
    rcs = [RECOMPUTE.index("selective")] if fixed else [0, 1, 2, PARTIAL]
    zss = [1] if fixed else [0, 1, 2, 3]
    # the rules below do not look at recompute or ZeRO: filter the (layout, micro-batch, virtual stages) triples,
    # then give each kept one every recompute x ZeRO pair (the same rows, in the same order, as filtering them all)
    i, mb, v = (a.ravel() for a in np.meshgrid(np.arange(len(T)), mbs, vps, indexing="ij"))
    T, P, D, K = T[i], P[i], D[i], K[i]
    per_replica = batch / D
    ok = (np.abs(per_replica / mb - np.round(per_replica / mb)) < 1e-9) & (per_replica >= mb)
    # interleaving needs a layer in every virtual stage; frameworks that split only evenly also need the layers to
    # divide pp x vpp (see PIPELINE_SPLITS)
    even = np.mod(L, P * v) == 0 if ctx.pipeline_split == "even" else L >= P * v
    ok &= (v == 1) | ((P > 1) & even)
    # Megatron-LM's interleaved schedule runs the micro-batches in groups of pp (it refuses a count that pp does not
    # divide: megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving, core
    # v0.7): with fewer micro-batches than stages the pipeline has no steady state to interleave
    nmb = np.round(per_replica / mb)
    ok &= (v == 1) | (np.mod(nmb, P) == 0)
    pairs = len(rcs) * len(zss)
    rc = np.tile(np.repeat(np.asarray(rcs, dtype=float), len(zss)), int(ok.sum()))
    zs = np.tile(np.asarray(zss, dtype=float), len(rcs) * int(ok.sum()))
    out = {"tp": np.repeat(T[ok], pairs), "pp": np.repeat(P[ok], pairs), "dp": np.repeat(D[ok], pairs),
           "micro_batch": np.repeat(mb[ok].astype(float), pairs), "vpp": np.repeat(v[ok].astype(float), pairs),
           "recompute": rc, "zero_stage": zs, "cp": np.repeat(K[ok], pairs)}
    return with_expert_parallel(out, num_experts(ctx.m), given=given_ep)


def with_expert_parallel(grid: dict, experts: int, given: int | None = None) -> dict:
    """The training ``grid`` with an ``ep`` column: every row once per expert-parallel degree of :data:`EP_VALUES`
    (or the ``given`` one) that divides the model's ``experts`` and the row's ``tp x dp x cp`` ranks (the expert
    groups are made of them, expert tensor parallelism 1); a dense model's rows take ``ep = 1`` alone."""
    n = len(grid["tp"])
    values = [given] if given is not None else [e for e in EP_VALUES if experts > 1 and experts % e == 0] or [1]
    if values == [1]:
        return dict(grid, ep=np.ones(n))
    ranks = grid["tp"] * grid["dp"] * grid["cp"]
    idx, eps = [], []
    for e in values:
        keep = np.nonzero(np.mod(ranks, e) == 0)[0]
        idx.append(keep), eps.append(np.full(len(keep), float(e)))
    order = np.argsort(np.concatenate(idx), kind="stable")  # each layout's degrees together, layouts in order
    i = np.concatenate(idx)[order]
    return dict({k: v[i] for k, v in grid.items()}, ep=np.concatenate(eps)[order])


def check_expert_parallel(model, given: dict, cp) -> None:
    """Refuse a given training ``ep`` the model cannot run: a dense model's above 1, one not dividing the routed
    experts, or one not dividing the tp x dp x cp GPUs of a stage (one line naming the field)."""
    e = given.get("ep")
    if e is None or int(e) <= 1:
        return
    E = num_experts(model)
    if E <= 1:
        raise InputError(f"ep: {model.name} has no routed experts (a dense model); give ep 1, or none")
    if E % int(e):
        raise InputError(f"ep: {int(e)} does not divide {model.name}'s {E} routed experts; give a divisor of {E}, or no "
                         "ep to search one")
    if "dp" in given and "tp" in given and (int(given["tp"]) * int(given["dp"]) * int(cp)) % int(e):
        n_r = int(given["tp"]) * int(given["dp"]) * int(cp)
        raise InputError(f"ep: {int(e)} expert-parallel ranks must divide the {n_r} ranks of a pipeline stage (tp x dp "
                         "x cp); give a divisor of them, or no ep to search one")


def with_attention_dp(grid: dict, offered: bool) -> dict:
    """Inference layouts ``grid`` with their data-parallel attention degree ``adp`` (:mod:`wseplan.analytic.attention_dp`):
    1 for every row and, where the model's engines offer it (``offered``: an MoE model), also the TP degree for each
    row with ``tp > 1``, those rows repeated after the others (other columns the same)."""
    tp = np.asarray(grid["tp"], dtype=float)
    out = dict(grid, adp=np.ones_like(tp))
    twin = np.nonzero(tp > 1)[0] if offered else np.zeros(0, dtype=np.int64)
    if not len(twin):
        return out
    return {k: np.concatenate([v, (tp if k == "adp" else np.asarray(v))[twin]]) for k, v in out.items()}


def check_attention_dp(ctx, given: dict) -> None:
    """Refuse a given data-parallel attention degree no engine runs: above 1 for a model without routed experts (the
    engines offer it for MoE models), or other than 1 and the replica's tp (given or completed from the count)."""
    a = given.get("adp")
    if a is None or int(a) <= 1:
        return
    if not getattr(ctx, "adp_offered", False):
        raise InputError(f"adp: {ctx.m.name} has no routed experts; engines run data-parallel attention for MoE models "
                         "(SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp): give adp 1 or drop it")
    tp = given.get("tp")
    if tp is not None and int(a) != int(tp):
        raise InputError(f"adp: {int(a)} attention ranks must equal the replica's tp ({int(tp)}: given, or the count over "
                         f"pp and dp) or be 1; give --tp {int(a)} with it, adp 1, or no adp to search it")


def attention_dp_notes(ctx, r: dict, tp: int, fit) -> list[str]:
    """Where an MoE model's inference layout does not fit with its attention split over ``tp`` GPUs that each keep
    KV heads they cannot split (MLA's one latent; fewer KV heads than ``tp``), and the same layout with data-parallel
    attention fits (``fit``: the family's), that layout."""
    if getattr(ctx, "adp_offered", False) and int(r.get("adp", 1)) > 1 and ctx.q.phase == "serve":
        return _prompt_bound_note(ctx, r)
    if not getattr(ctx, "adp_offered", False) or int(r.get("adp", 1)) != 1 or bool(r.get("fits", True)):
        return []
    heads = kv_head_shards(ctx.m)
    if tp <= heads:
        return []
    one = {k: np.array([float(r[k])]) for k in ("batch", "context", "output_tokens", "pp", "dp")}
    if not bool(fit(ctx, dict(one, tp=np.array([float(tp)]), adp=np.array([float(tp)])))["fits"][0]):
        return []
    what = f"every request's KV latent on all {tp}" if heads == 1 else f"each of its {heads} KV heads on {tp // heads}"
    return [f"the attention split over TP {tp} keeps {what} GPUs: data-parallel attention (--adp {tp}) keeps a "
            "request's KV cache on one GPU"]


def _prompt_bound_note(ctx, r: dict) -> list[str]:
    """A serving point of data-parallel attention whose requests bring more prompt tokens per decode step than the
    engine's token budget (``batch x context / output tokens``): prompts bind it, and the budget is taken per replica
    here where SGLang and TensorRT-LLM give each attention rank its own, so its prompt rate may be underestimated up
    to ``adp`` times (audit37a F5: DeepSeek-V3, 256 x 32k prompts at adp 8, an 18-minute TTFT with no caveat)."""
    adp = int(r["adp"])
    b = float(r["batch"])
    acc = float(r.get("time.accepted_tokens_per_step") or 1.0)  # speculative decoding: fewer steps a request
    spec = getattr(ctx, "spec", None) if acc > 1.0 else None
    steps = max(float(r["output_tokens"]) / acc, 1.0)
    per_step = b * float(r["context"]) / steps + b * (1.0 + (spec["draft_tokens"] if spec else 0.0))  # + the decode rows
    budget = float(ctx.engine.token_budget.si)
    if not per_step > budget:
        return []
    return [f"prompts bind this point ({per_step:,.0f} tokens per decode step, prompts and decode rows, against the "
            f"engine's token budget of {budget:,.0f}): the budget is the replica's here, where SGLang and TensorRT-LLM "
            f"give each of the {adp} attention ranks its own, so TTFT and throughput may be up to {adp}x pessimistic; "
            "`--adp 1` prices the split attention"]


def implied_attention_dp(ctx, given: dict) -> dict:
    """A given inference layout of a model whose engines run no data-parallel attention holds ``adp`` 1 (so that
    ``--tp --pp --dp`` is the whole layout, as before the column existed)."""
    if given and "adp" not in given and ctx.q.phase != "train" and not getattr(ctx, "adp_offered", False):
        return dict(given, adp=1)
    return given


def expand_missing_column(col: str, widen, cfg: dict, cols, vals, known, full, parts: list, parent: list) -> np.ndarray:
    """The candidate rows of the configurations that give every layout column but ``col`` (a sweep's rows, `time` with
    the rest given): each once per value ``widen(rows)`` gives it (:func:`with_expert_parallel` for ``ep``,
    :func:`with_attention_dp` for ``adp``), in one array pass, appended to ``parts``/``parent``; returns ``full`` with
    those rows marked done."""
    c_col = cols.index(col)
    only = ~full & np.delete(known, c_col, axis=1).all(axis=1)
    if not only.any():
        return full
    rows = np.nonzero(only)[0]
    sub = {k: np.asarray(v, dtype=float)[rows] for k, v in cfg.items() if k not in cols}
    sub.update({c: vals[rows, j] for j, c in enumerate(cols) if c != col}, _row=rows.astype(float))
    ex = widen(sub)
    parent.append(ex.pop("_row").astype(np.int64))
    parts.append(ex)
    return full | only
