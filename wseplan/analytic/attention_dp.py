"""Data-parallel attention in an inference replica of an MoE model: the replica's tensor-parallel group of ``g`` GPUs
runs its attention as ``adp`` data-parallel ranks (each GPU its own requests, with the whole attention weights and
its requests' KV cache alone) and its MLP (routed experts, shared experts, dense layers) over all ``g`` GPUs as before.

Why engines offer it: a multi-head latent attention (MLA) cache is one latent vector per token, the same on every
tensor-parallel rank (DeepSeek-V3 report, sec. 2.1.1), so an attention split over ``g`` GPUs stores and reads every
request's cache ``g`` times; split into ``g`` data-parallel ranks it stores and reads each request's cache once, for
``g`` times the requests in the same memory and ``1 / g`` of the cache read per GPU a step. The price is the
attention weights whole on every GPU (DeepSeek-V3: 187 M parameters a layer, 11.4 G in all) and an all-gather of the
tokens before the MLP and a reduce-scatter after it, in place of the two all-reduces of a split layer (a ring
all-reduce is a reduce-scatter then an all-gather: the same bytes as one all-reduce). Production engines offer it for
DeepSeek-V3/R1, Qwen3-MoE and similar models: SGLang ``--enable-dp-attention`` ("DP attention ... reduces the KV cache
duplication of MLA", LMSYS blog "SGLang v0.4", 2024-12-04, and SGLang's DeepSeek usage guide), TensorRT-LLM
``enable_attention_dp`` (its DeepSeek-R1 throughput recipes), vLLM ``--data-parallel-size`` with
``--enable-expert-parallel`` (vLLM docs, "Data Parallel Deployment"; in wseplan that is ``tp = adp``, not ``dp``,
which counts whole replicas).

The layout column ``adp`` is 1 (attention split over the group, as the other weights) or the group's TP degree. The
slowest rank decides a pass: it holds ``ceil(s / adp)`` of a pass's ``s`` requests (:func:`rank_share`).
"""
from __future__ import annotations

from ..architecture import _attention_parts
from . import elementwise as X

#: the GEMMs of a block's attention (:class:`~wseplan.architecture.Gemm` names): QKV or MLA's projections and the
#: output projection; the others are the MLP's
ATTENTION_GEMMS = frozenset({"qkv", "q", "q_a", "q_b", "kv_a", "kv_b", "attn_out"})


def rank_share(seqs, adp):
    """The share of a pass's ``seqs`` requests that the busiest of ``adp`` attention ranks holds [fraction]:
    ``ceil(seqs / adp) / seqs``, at most 1 (1 where ``adp`` is 1 or there are no requests)."""
    s, a = X.asfloat(seqs), X.asfloat(adp)
    safe = X.maximum(s, 1e-12)
    return X.where(s > 0, X.minimum(X.ceil(safe / a - 1e-9) / safe, 1.0), 1.0)


def kv_head_shards(m) -> int:
    """Pieces a tensor-parallel group can split model ``m``'s KV cache into [count]: its KV heads; one for a
    multi-head latent attention (its latent is one vector per token: DeepSeek-V3 report, sec. 2.1.1) and for a model
    without heads (a layer list)."""
    if m is None or getattr(m, "attention", "standard") == "mla":
        return 1
    return int(getattr(m, "num_kv_heads", 1) or 1)


def attention_params_per_block(m) -> float:
    """Attention parameters of one transformer block of model ``m`` [count] (projections, their biases, the latent
    and QK norms; the same in every block)."""
    return float(_attention_parts(m)[1])


__all__ = ["ATTENTION_GEMMS", "attention_params_per_block", "kv_head_shards", "rank_share"]
