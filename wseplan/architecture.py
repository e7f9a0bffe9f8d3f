"""Transformer structure: which layers are MoE, what each attends to, and the GEMMs of each block type.

:func:`block_types` groups a :class:`~wseplan.catalog.schema.Model`'s layers by identical structure
(dense or MoE MLP, full / sliding / chunked attention) and gives each group its :class:`Gemm` shapes, its
:class:`Attention` core and its parameter counts. :mod:`wseplan.workload` builds the per-layer tables from it
and re-exports the public names. Units: elements, parameters [count], FLOP, tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .catalog.schema import Model

# ---------------------------------------------------------------------------------------------
# Transformer structure: which layers are MoE, what each attends to, the GEMMs of each block type
# ---------------------------------------------------------------------------------------------
_SPAN_OF = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}


@dataclass(frozen=True)
class Gemm:
    """One weight matrix of a block, as the time models see it.

    Attributes
    ----------
    name : str
        ``qkv``, ``attn_out``, ``mlp_up`` (gate and up fused when gated), ``mlp_down``; MLA adds ``q_a``,
        ``q_b`` (or ``q`` without a Q latent), ``kv_a``, ``kv_b``; shared experts ``shared_up``/``shared_down``.
    n : int
        Output features of one copy, before any tensor-parallel split [elements].
    k : int
        Input features (the reduction dimension) [elements].
    num_experts : int
        Weight copies in the layer: the routed experts of an MoE MLP, 1 otherwise.
    active : int
        Copies one token uses: ``experts_per_token`` for routed experts, 1 otherwise.
    tp_split : str
        ``"n"`` column-parallel (output features split over tensor parallel), ``"k"`` row-parallel (input
        features split, partial sums reduced), ``"none"`` replicated on every rank (MLA's small latent
        down-projections ``q_a`` and ``kv_a``, as in DeepSeek's and vLLM's implementations).

    Notes
    -----
    The router (a ``d x num_experts`` product per token) is counted in the block's parameters and FLOPs but not
    listed here: it is small and replicated, so that a uniform model's list is exactly its four classic
    GEMMs.
    """

    name: str
    n: int
    k: int
    num_experts: int = 1
    active: int = 1
    tp_split: str = "n"

    @property
    def params(self) -> int:
        """Weights of every copy [count] (no bias)."""
        return self.n * self.k * self.num_experts

    @property
    def active_params(self) -> int:
        """Weights one token multiplies [count]."""
        return self.n * self.k * self.active


@dataclass(frozen=True)
class Attention:
    """The attention core of a block.

    Attributes
    ----------
    num_heads, num_kv_heads : int
        Query heads and key/value heads (MLA: every head has its own K and V after the latent up-projection).
    qk_head_dim, v_head_dim : int
        Width of each query/key head and each value head [elements].
    kv_elems_per_token : int
        Elements cached per token per layer: ``2 * num_kv_heads * head_dim`` for standard attention; for MLA
        the KV latent plus the shared RoPE key, ``kv_lora_rank + qk_rope_head_dim`` (DeepSeek-V2, sec. 2.1.2).
    window : int or None
        Tokens a query may attend to: None for full attention, the window of a sliding layer, the chunk of a
        chunked layer.
    flop_per_pair : float
        Forward FLOPs per (query, key) pair over all heads: ``2 * heads * (qk_head_dim + v_head_dim)`` (QK^T
        and AV, 2 FLOP per MAC). For MLA this counts the non-absorbed form, in which K and V are expanded from
        the latent by the ``kv_b`` GEMM (counted with the GEMMs) and the score uses the full
        ``qk_nope + qk_rope`` width: it is the arithmetic of training and prefill and the convention of
        DeepSeek-V3's FLOP counts. Serving engines that absorb ``kv_b`` into Q and the output projection
        for decode do ``2 * heads * (2 * kv_lora_rank + qk_rope_head_dim)`` per pair instead, with no
        per-token ``kv_b`` product; a decode time model may use that figure.
    span : str
        ``full``, ``sliding`` (each query sees the last ``window`` tokens, itself included) or ``chunked``
        (each query sees the tokens of its own ``window``-token chunk up to itself; Llama 4).
    latent_dim : int
        MLA's KV latent width ``kv_lora_rank`` [elements]; 0 for standard attention.
    """

    num_heads: int
    num_kv_heads: int
    qk_head_dim: int
    v_head_dim: int
    kv_elems_per_token: int
    window: int | None
    flop_per_pair: float
    span: str = "full"
    latent_dim: int = 0

    @property
    def kv_shards(self) -> int:
        """Ways the KV cache splits over tensor-parallel ranks (at most): the KV heads of standard attention; 1 for
        MLA, whose latent every rank keeps and reads whole (DeepSeek's and vLLM's MLA kernels)."""
        return 1 if self.latent_dim else self.num_kv_heads

    @property
    def decode_flop_per_pair(self) -> float:
        """Forward FLOPs per (query, key) pair of a decode step [FLOP]: :attr:`flop_per_pair`, except MLA's absorbed
        form, ``2 * heads * (kv_elems_per_token + latent_dim)`` (scores over the latent and the RoPE key, context
        over the latent; DeepSeek-V2, sec. 2.1.3: ``W_UK`` and ``W_UV`` absorbed into the query and output
        projections, whose per-token product the ``kv_b`` GEMM stands for)."""
        if not self.latent_dim:
            return self.flop_per_pair
        return 2.0 * self.num_heads * (self.kv_elems_per_token + self.latent_dim)

    @property
    def plain(self) -> bool:
        """Standard attention over the whole context (every uniform dense and MoE model before these fields)."""
        return self.window is None and not self.latent_dim


@dataclass(frozen=True)
class BlockType:
    """Layers of one structure: ``count`` of them, at 0-based indices ``layers``.

    ``params`` and ``active_params`` are per layer [count] (weights, biases and norms; active: top-k of the
    routed experts); ``gemms`` and ``attention`` are the shapes the time models need. ``moe`` marks a routed
    MLP.
    """

    count: int
    gemms: tuple[Gemm, ...]
    attention: Attention
    params: float
    active_params: float
    layers: tuple[int, ...] = ()
    moe: bool = False


def is_moe_layer(m: Model, i: int) -> bool:
    """Whether layer ``i`` (0-based) has a routed MoE MLP (see :class:`Model` for the rule)."""
    return (m.num_experts > 1 and i >= m.first_dense_layers and i % m.moe_layer_step == m.moe_layer_offset
            and i not in m.dense_layers)


def layer_span(m: Model, i: int) -> tuple[str, int | None]:
    """Attention span of layer ``i``: (``full`` | ``sliding`` | ``chunked``, window in tokens or None)."""
    if m.layer_types is None:
        return "full", None
    span = _SPAN_OF[m.layer_types[i]]
    return span, {"full": None, "sliding": m.sliding_window, "chunked": m.attention_chunk}[span]


def _norm_size(m: Model, width: int) -> int:
    """Parameters of one norm over ``width`` features: a scale (RMSNorm), scale and shift (LayerNorm)."""
    return 2 * width if m.norm == "layernorm" else width


def _mlp_params(m: Model, width: int) -> int:
    """One MLP of hidden ``width``: up (and gate) d x width, down width x d, biases with ``linear_bias``."""
    d = m.d_model
    p = (3 if m.gated_mlp else 2) * d * width
    if m.linear_bias:
        p += (2 if m.gated_mlp else 1) * width + d
    return p


def _dense_width(m: Model) -> int:
    return (m.dense_d_ff or m.d_ff) if m.num_experts > 1 else m.d_ff


def _shared_width(m: Model) -> int:
    """Total hidden width of the shared experts of an MoE layer (0 without them)."""
    return m.num_shared_experts * (m.shared_expert_d_ff or m.d_ff)


def _attention_parts(m: Model) -> tuple[tuple[Gemm, ...], int, int]:
    """(GEMMs, all attention parameters, the non-matmul ones among them: latent/QK norms and sinks)."""
    d, H = m.d_model, m.num_heads
    extra = 0
    if m.attention == "mla":
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        kv_in = m.kv_lora_rank + m.qk_rope_head_dim
        if m.q_lora_rank:
            gemms = [Gemm("q_a", m.q_lora_rank, d, tp_split="none"), Gemm("q_b", H * qk, m.q_lora_rank)]
            extra += _norm_size(m, m.q_lora_rank)
        else:
            gemms = [Gemm("q", H * qk, d)]
        gemms += [Gemm("kv_a", kv_in, d, tp_split="none"),
                  Gemm("kv_b", H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
                  Gemm("attn_out", d, H * m.v_head_dim, tp_split="k")]
        extra += _norm_size(m, m.kv_lora_rank)
        bias = 0
        if m.qkv_bias or m.linear_bias:  # biases on the down-projections (HF DeepseekV3 ``attention_bias``)
            bias += (m.q_lora_rank or H * qk) + kv_in
    else:
        hd = m.head_dim_
        q, kvd = H * hd, m.num_kv_heads * hd
        gemms = [Gemm("qkv", q + 2 * kvd, d), Gemm("attn_out", d, q, tp_split="k")]
        bias = q + 2 * kvd if (m.qkv_bias or m.linear_bias) else 0
    if m.linear_bias:
        bias += d
    if m.qk_norm:
        extra += 2 * m.head_dim_
    if m.attention_sinks:
        extra += H
    total = sum(g.params for g in gemms) + bias + extra
    return tuple(gemms), total, extra


def _attention_core(m: Model, span: str, window: int | None) -> Attention:
    H = m.num_heads
    if m.attention == "mla":
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        v = m.v_head_dim
        kv, kvh, latent = m.kv_lora_rank + m.qk_rope_head_dim, H, m.kv_lora_rank
    else:
        qk = v = m.head_dim_
        kv, kvh, latent = 2 * m.num_kv_heads * qk, m.num_kv_heads, 0
    return Attention(num_heads=H, num_kv_heads=kvh, qk_head_dim=qk, v_head_dim=v, kv_elems_per_token=kv,
                     window=window, flop_per_pair=2.0 * H * (qk + v), span=span, latent_dim=latent)


def _mlp_parts(m: Model, moe: bool) -> tuple[tuple[Gemm, ...], int, int, int]:
    """(GEMMs, MLP parameters, active MLP parameters, hidden width one token uses) of a dense or MoE layer."""
    d, up = m.d_model, (2 if m.gated_mlp else 1)
    if not moe:
        f = _dense_width(m)
        p = _mlp_params(m, f)
        return (Gemm("mlp_up", up * f, d), Gemm("mlp_down", d, f, tp_split="k")), p, p, f
    E, k, f = m.num_experts, m.experts_per_token, m.d_ff
    gemms = [Gemm("mlp_up", up * f, d, E, k), Gemm("mlp_down", d, f, E, k, tp_split="k")]
    one = _mlp_params(m, f)
    router = d * E + (E if m.router_bias else 0)
    shared = sum(_mlp_params(m, m.shared_expert_d_ff or f) for _ in range(m.num_shared_experts))
    if m.shared_expert_gate and m.num_shared_experts:
        shared += d
    sw = _shared_width(m)
    if sw:
        gemms += [Gemm("shared_up", up * sw, d), Gemm("shared_down", d, sw, tp_split="k")]
    return tuple(gemms), E * one + router + shared, k * one + router + shared, k * f + sw


def _layer_key(m: Model, i: int) -> tuple:
    return (is_moe_layer(m, i), *layer_span(m, i))


def _layer_groups(m: Model) -> dict[tuple, range | list[int]]:
    """Layer indices grouped by (MoE, span, window), in order of first appearance."""
    L = m.num_layers
    same_mlp = m.num_experts == 1 or (m.first_dense_layers == 0 and m.moe_layer_step == 1 and not m.dense_layers)
    if m.layer_types is None and same_mlp:  # a uniform model: no per-layer loop
        return {(m.num_experts > 1, "full", None): range(L)}
    groups: dict[tuple, list[int]] = {}
    for i in range(L):
        groups.setdefault(_layer_key(m, i), []).append(i)
    return groups


def _group_table(m: Model) -> list[tuple]:
    """Per group: (layer indices, params, active params, non-matmul params, MLP width a token uses, Attention).

    Non-matmul parameters are the norms, MLA latent norms, QK norms and attention sinks."""
    _, a_params, a_extra = _attention_parts(m)
    norms = m.norms_per_block * _norm_size(m, m.d_model)
    rows = []
    for (moe, span, window), idx in _layer_groups(m).items():
        _, m_params, m_active, width = _mlp_parts(m, moe)
        rows.append((idx, a_params + m_params + norms, a_params + m_active + norms, norms + a_extra, width,
                     _attention_core(m, span, window)))
    return rows


def stream_unit_params(m: Model) -> list[tuple]:
    """Per layer group: (layer indices, the largest set of the block's weights streamed as one unit) [params].

    Weight streaming buffers a unit while the previous one computes. A dense block is one unit (Cerebras: a
    layer's weights must fit on the wafer); the routed experts of an MoE block are independent matmuls over the
    tokens routed to each, so each expert is streamed as its own unit, after the rest of the block (attention,
    router, shared experts, norms)."""
    _, a_params, _ = _attention_parts(m)
    norms = m.norms_per_block * _norm_size(m, m.d_model)
    rows = []
    for (moe, _span, _window), idx in _layer_groups(m).items():
        _, m_params, _, _ = _mlp_parts(m, moe)
        total = a_params + m_params + norms
        if moe:
            one = _mlp_params(m, m.d_ff)
            total = max(total - m.num_experts * one, one)
        rows.append((idx, float(total)))
    return rows


def block_types(m: Model) -> tuple[BlockType, ...]:
    """The model's transformer layers grouped by identical structure, in order of first appearance.

    Counts sum to ``num_layers``; ``sum(count * params) + embedding_params + head_params == total_params``.
    A uniform model (every entry of the catalog before the optional fields) has one block type whose
    GEMMs are QKV, attention output, MLP up (gate + up) and down. Remembered per model object (models are frozen):
    the fit and the time models ask for it on every evaluation.
    """
    hit = _BLOCK_TYPES.get(id(m))
    if hit is not None and hit[0] is m:
        return hit[1]
    a_gemms, a_params, _ = _attention_parts(m)
    norms = m.norms_per_block * _norm_size(m, m.d_model)
    out = []
    for (moe, span, window), idx in _layer_groups(m).items():
        m_gemms, m_params, m_active, _ = _mlp_parts(m, moe)
        out.append(BlockType(count=len(idx), gemms=a_gemms + m_gemms, attention=_attention_core(m, span, window),
                             params=float(a_params + m_params + norms), active_params=float(a_params + m_active + norms),
                             layers=tuple(idx), moe=moe))
    out = tuple(out)
    if len(_BLOCK_TYPES) >= 256:
        _BLOCK_TYPES.clear()
    _BLOCK_TYPES[id(m)] = (m, out)  # the model is kept: its id is not reused while it is here
    return out


#: :func:`block_types` by model object
_BLOCK_TYPES: dict = {}


def mean_attended_tokens(span: str, window: int | None, context, *, phase: str, causal: bool = True):
    """Keys each query attends to, on average [tokens]; ``context`` may be an array.

    Decode: the new token attends to the ``context`` cached tokens, at most ``window`` in a sliding or chunked
    layer (for a chunked layer this is the chunk's largest span, an upper bound that never falls as the
    context grows; the token at position c sees ``(c - 1) mod window + 1``). Causal prefill/training over
    ``s = context`` tokens: the mean over positions 1..s of the keys each sees, ``(s + 1) / 2`` for full
    attention; ``min(i, W)`` summed for a sliding window W; ``(i - 1) mod C + 1`` summed for chunks of C.
    ``causal=False`` attends to ``min(context, window)`` (Narayanan et al. 2021 count the full context).
    """
    c = np.asarray(context, dtype=float)
    if span == "full" or window is None:
        out = c if (phase == "decode" or not causal) else (c + 1.0) / 2.0
    elif phase == "decode" or not causal:
        out = np.minimum(c, float(window))
    elif span == "sliding":
        w = float(window)
        beyond = (w * (w + 1.0) / 2.0 + (c - w) * w) / np.maximum(c, 1.0)
        out = np.where(c <= w, (c + 1.0) / 2.0, beyond)
    else:
        w = float(window)
        q, r = np.floor(c / w), np.mod(c, w)
        out = (q * w * (w + 1.0) / 2.0 + r * (r + 1.0) / 2.0) / np.maximum(c, 1.0)
    return float(out) if out.ndim == 0 else out
