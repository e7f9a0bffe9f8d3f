"""GPU training helpers of the GPU family (:mod:`wseplan.devices.gpu`): the memory of training layouts with the
context's accounting, partial recomputation's layer count, and the GPU counts a training search lays out."""
from __future__ import annotations

import numpy as np

from ..analytic.memory import gpu_layout_memory


def train_memory(ctx, cfg: dict, rf) -> dict:
    """Per-GPU training memory of layout rows [bytes] by part (:func:`gpu_layout_memory` with this context's training
    accounting: context parallelism splits activations over tp x cp and weights over tp, ZeRO over dp x cp; LoRA's
    frozen base and MLP; ``rf`` the partial-recompute fractions)."""
    B, C, tp, pp, dp = cfg["batch"], cfg["context"], cfg["tp"], cfg["pp"], cfg["dp"]
    cp = np.asarray(cfg["cp"], dtype=float)
    kw = dict(zero_stage=cfg["zero_stage"], recompute=cfg["recompute"], micro_batch=cfg["micro_batch"],
              virtual_stages=cfg["vpp"], batch=B, context=C, gradient_bytes_per_param=ctx.grad_bytes,
              adam_state_bytes_per_param=ctx.adam_bytes, prefill_chunk_tokens=ctx.chunk, frozen_mlp=ctx.frozen_mlp,
              recompute_frac=rf)
    mem = gpu_layout_memory(ctx.w, tp=tp * cp, pp=pp, dp=dp, **kw)
    if (cp > 1).any():  # weights and optimizer split over TP only (ZeRO over dp*cp); activations over tp*cp
        mw = gpu_layout_memory(ctx.w, tp=tp, pp=pp, dp=dp * cp, **kw)
        mem = dict(mem, weights=mw["weights"], optimizer=mw["optimizer"])
    if (cp > 1).any() or ctx.weight_frac != 1.0:
        mem = dict(mem, weights=mem["weights"] * ctx.weight_frac)
        mem["total"] = mem["weights"] + mem["optimizer"] + mem["kv_cache"] + mem["activations"]
    return mem


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
