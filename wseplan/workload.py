"""Per-layer workload tables: params, weight bytes, FLOPs, activation and KV bytes, as numpy arrays.

A workload is a model at a precision, phase, batch and context. Its rows are the model's layers in order:
the embedding (kind 0), the transformer blocks (kind 1) and the final norm + LM head (kind 2). Generic
(non-transformer) models have only kind-1 rows. Everything is held in numpy arrays so that the CLI's fit
path never imports pandas; :meth:`Workload.to_frame` builds a DataFrame on demand.

Blocks may differ (interleaved dense/MoE layers, sliding-window or chunked attention layers): each block row
holds its own layer's numbers, from :func:`block_types` (:mod:`wseplan.architecture`, re-exported here with
:class:`Gemm`, :class:`Attention` and :class:`BlockType`), the interface the time models consume.

Units: bytes, FLOP, tokens. FLOPs count 2 per multiply-accumulate.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# the structure of a transformer (block types, their GEMMs and attention) lives in .architecture; re-exported here
from .architecture import (Attention, BlockType, Gemm, _group_table, _layer_groups, _mlp_parts,  # noqa: F401
                           block_types, is_moe_layer, layer_span, mean_attended_tokens, stream_unit_params)
from .catalog.schema import PRECISIONS, GenericModel, Model
from .errors import InputError, suggest
# readers of config.json and layer-list files; re-exported here
from .model_files import generic_model_from_file, model_from_hf_config  # noqa: F401

KIND_EMBEDDING, KIND_BLOCK, KIND_HEAD = 0, 1, 2
PHASES = ("train", "prefill", "decode")

#: bytes per element of each numeric format
BYTES_PER_ELEMENT = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5}


#: bits per stored weight of an inference checkpoint in a sub-16-bit format, its block scales included: NVFP4 (the fp4
#: checkpoints NVIDIA publishes and TensorRT-LLM runs) an FP8 E4M3 scale per 16 values (4.5 bits; NVIDIA, "Introducing
#: NVFP4 for Efficient and Accurate Low-Precision Inference", 2025; an MXFP4 checkpoint's 8-bit scale per 32 is 4.25,
#: a model's ``native_bits_per_weight``); int4 weight-only checkpoints (AWQ, GPTQ) an FP16 scale and a 4-bit zero point
#: per group of 128 (4 + 20/128 bits; Lin et al., "AWQ", MLSys 2024, sec. 5); fp8 and int8 per-tensor or per-channel
#: scales (8 bits: a scale per row of thousands is negligible)
STORED_BITS = {"fp8": 8.0, "int8": 8.0, "fp4": 4.5, "int4": 4.0 + 20.0 / 128.0}


def weight_bytes_per_param(precision: str, phase: str) -> float:
    """Bytes per stored weight [bytes]: the format's, its block scales included in inference (:data:`STORED_BITS`).
    Training keeps 16-bit working weights even for fp8/int/fp4 compute."""
    b = BYTES_PER_ELEMENT[precision]
    if b < 2 and phase == "train":
        return 2.0
    return STORED_BITS[precision] / 8.0 if precision in STORED_BITS else b


def edge_weight_bytes(m, precision: str, phase: str) -> float:
    """Bytes per weight of the embedding and the LM head [bytes]: 16 bits in an inference checkpoint of a sub-16-bit
    format, whose quantizers convert the linear layers of the transformer blocks alone (NVIDIA's FP8 and FP4 model
    cards: "only the weights and activations of the linear operators within transformer blocks are quantized"; TensorRT
    Model Optimizer leaves ``*lm_head*`` unquantized by default; DeepSeek-V3's and gpt-oss' checkpoints keep both in
    bf16), else the other weights' (:func:`weight_bytes_split`)."""
    other = weight_bytes_split(m, precision, phase)[1]
    return max(other, BYTES_PER_ELEMENT["bf16"]) if phase != "train" and BYTES_PER_ELEMENT[precision] < 2 else other


def weight_bytes_split(m, precision: str, phase: str) -> tuple[float, float]:
    """Bytes per stored weight of the routed experts and of every other weight [bytes]: the format's
    (:func:`weight_bytes_per_param`) for both, except for the published checkpoint of a model that states its own
    layout (inference at its ``native_precision``): its quantized tensors at ``native_bits_per_weight`` (block scales
    included), and with ``native_quantized: experts`` everything but the routed experts in bf16 (gpt-oss-120b: 65.2 GB
    of weights, not the 58.4 GB of 4 bits each; audit32a F1)."""
    wbp = weight_bytes_per_param(precision, phase)
    if phase == "train" or getattr(m, "native_precision", None) != precision:
        return wbp, wbp
    bits = getattr(m, "native_bits_per_weight", None)
    q = bits / 8.0 if bits else wbp
    return q, (BYTES_PER_ELEMENT["bf16"] if getattr(m, "native_quantized", "all") == "experts" else q)


def routed_params(bt) -> float:
    """Weights of a block type's routed experts [count] (their matrices; biases and norms are not quantized)."""
    return float(sum(g.n * g.k * g.num_experts for g in bt.gemms if g.num_experts > 1))


def num_experts(m) -> int:
    """Routed experts per MoE layer of model ``m`` (1: a dense model, or a layer list)."""
    return int(getattr(m, "num_experts", 1) or 1)


def kv_bytes_per_element(precision: str) -> float:
    """KV-cache element size [bytes]: fp8 serving keeps an fp8 cache; int8/int4/fp4 keep 16-bit. NVIDIA's NVFP4
    checkpoints carry an fp8 cache (Model Optimizer's default ``--kv_cache_qformat fp8``), but with it the calibrated
    model scores worse held out on both validation files (docs/validation.md), so fp4 keeps the 16-bit cache."""
    if precision in ("fp32", "tf32"):
        return 4.0
    return 1.0 if precision == "fp8" else 2.0


#: KV-cache formats an engine may keep whatever the weights' precision (``kv_precision``: vLLM ``--kv-cache-dtype``,
#: TensorRT-LLM ``kv_cache_quant_algo``) and their bytes per element
KV_FORMATS = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}


def kv_bytes(precision: str, kv_precision: str | None = None) -> float:
    """KV-cache element size [bytes]: the given ``kv_precision``'s, else the weights' rule
    (:func:`kv_bytes_per_element`)."""
    if kv_precision is None:
        return kv_bytes_per_element(precision)
    if kv_precision not in KV_FORMATS:
        raise InputError(f"--kv-precision: {kv_precision!r} is not a KV-cache format; give one of {', '.join(KV_FORMATS)}")
    return KV_FORMATS[kv_precision]


def activation_bytes_per_element(precision: str) -> float:
    """Activation element size [bytes]: 4 for fp32/tf32, else 2 (16-bit activations)."""
    return 4.0 if precision in ("fp32", "tf32") else 2.0


#: largest batch [sequences] and context [tokens] accepted, so every byte count stays finite and exact
MAX_BATCH = 10_000_000
MAX_CONTEXT = 100_000_000


def check_positive_int(value, name: str, maximum: int | None = None) -> int:
    """Return ``value`` as int if it is an integer in [1, maximum]; else raise InputError naming ``name``."""
    if maximum is None:
        maximum = {"batch": MAX_BATCH, "context": MAX_CONTEXT}.get(name, 2**53)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 < value <= maximum:
        raise InputError(f"{name}: must be an integer from 1 to {maximum:,}, got {value!r}")
    return int(value)


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise InputError(f"precision: unknown {precision!r}{suggest(precision, PRECISIONS)}; use one of {', '.join(PRECISIONS)}")
    return precision


def check_phase(phase: str) -> str:
    if phase not in PHASES:
        raise InputError(f"phase: unknown {phase!r}; use one of {', '.join(PHASES)}")
    return phase


# ---------------------------------------------------------------------------------------------
# Transformer accounting (pure functions of the architecture)
# ---------------------------------------------------------------------------------------------
def block_params(m: Model) -> tuple[float, float]:
    """Parameters of one transformer block: (total, active per token) [count].

    Attention: Q and O are d x (heads*head_dim); K and V are d x (kv_heads*head_dim) (MLA: its latent
    projections, see :func:`block_types`). MLP: 3 d*d_ff when gated (SwiGLU), else 2 d*d_ff; an MoE block has
    ``num_experts`` MLPs plus a d x E router, of which ``experts_per_token`` are active, and its shared
    experts. Norms: d (RMSNorm) or 2d (LayerNorm) each, ``norms_per_block`` (2) per block.

    A uniform model returns its one block exactly. A model whose layers differ (interleaved dense/MoE
    layers, leading dense layers) returns the mean over its layers, so that ``num_layers * block_params``
    is still the blocks' total and active count; the largest block is ``max(b.params for b in block_types(m))``.
    """
    hit = _BLOCK_PARAMS.get(id(m))
    if hit is not None and hit[0] is m:  # models are frozen: the same object has the same blocks
        return hit[1]
    types = block_types(m)
    if len(types) == 1:
        out = types[0].params, types[0].active_params
    else:
        L = m.num_layers
        out = (sum(b.count * b.params for b in types) / L, sum(b.count * b.active_params for b in types) / L)
    if len(_BLOCK_PARAMS) >= 256:
        _BLOCK_PARAMS.clear()
    _BLOCK_PARAMS[id(m)] = (m, out)  # the model is kept: its id is not reused while it is here
    return out


#: :func:`block_params` by model object (a question asks for it several times: FLOPs per token, stage weights)
_BLOCK_PARAMS: dict = {}


def embedding_params(m: Model) -> float:
    """Token embedding, learned positions and any non-text encoder held with it (``encoder_params``)."""
    return float(m.vocab_size * m.d_model + m.learned_pos_embeddings * m.d_model + m.encoder_params)


def head_params(m: Model) -> float:
    """Final norm + LM head (0 head weights when tied to the embedding)."""
    norm = 2 * m.d_model if m.norm == "layernorm" else m.d_model
    return float(norm + (0 if m.tied_embeddings else m.vocab_size * m.d_model))


def total_params(m: Model) -> float:
    """Exact parameter count [count] from the architecture."""
    types = block_types(m)
    if len(types) == 1:
        return embedding_params(m) + m.num_layers * types[0].params + head_params(m)
    return embedding_params(m) + sum(b.count * b.params for b in types) + head_params(m)


def active_params(m: Model, *, count_embedding: bool = True) -> float:
    """Parameters one token uses [count]: every block's attention, norms, router and top-k experts, the
    final norm and LM head, and (``count_embedding``) the token's embedding table.

    Published "active" counts differ on the embedding: most (Mixtral, Llama 4, DeepSeek-V3, Qwen3) count the
    embedding and the LM head; the gpt-oss model card counts the LM head but not the embedding lookup
    (``count_embedding=False``). A non-text encoder (``encoder_params``) is never active for a text token.
    """
    emb = embedding_params(m) - m.encoder_params if count_embedding else 0.0
    return emb + sum(b.count * b.active_params for b in block_types(m)) + head_params(m)


def _mlp_width_used(m: Model, layer: int | None) -> int:
    if layer is not None:
        return _mlp_parts(m, is_moe_layer(m, layer))[3]
    return max(_mlp_parts(m, moe)[3] for moe, _, _ in _layer_groups(m))


def _routed_copies(m: Model, layer: int | None) -> int:
    """Elements per token of the k copies a routed MLP dispatches to its experts (0 in a dense layer); ``layer`` None:
    the model's largest layer (any MoE layer)."""
    moe = is_moe_layer(m, layer) if layer is not None else any(k[0] for k in _layer_groups(m))
    return m.experts_per_token * m.d_model if moe and m.num_experts > 1 else 0


def block_activation_bytes_per_token(m: Model, act_bytes: float, *, flash_attention: bool = True, seq_len: int = 0,
                                     layer: int | None = None) -> float:
    """Bytes kept for the backward pass per token in one block, no recomputation [bytes].

    Generalises Korthikanti et al. (2022), eq. 1 (``sbh(34 + 5as/h)`` for GPT with 16-bit activations) to
    grouped-query attention and gated MLPs: norm inputs and outputs, Q/K/V, attention output, MLP
    intermediates (3 x the hidden width a token uses when gated, 2 x otherwise; MoE: top-k experts plus
    shared experts, and the k permuted copies of the token that the routed experts take), 1-byte dropout masks where the model uses dropout (GPT-style biases), and the ``5 a s``
    score/softmax terms only without flash attention. MLA keeps its latent inputs and outputs and the
    expanded per-head Q, K and V. ``layer`` (0-based) picks a layer; None gives the largest over the layers
    (every layer alike in a uniform model).
    """
    h = m.d_model
    if m.attention == "mla":
        H, qk, v = m.num_heads, m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        q_lat = 2 * m.q_lora_rank if m.q_lora_rank else 0
        attn = act_bytes * (h + h + q_lat + (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
                            + H * qk + H * qk + H * v + H * v)
    else:
        hd = m.head_dim_
        q = m.num_heads * hd
        kvd = m.num_kv_heads * hd
        attn = act_bytes * (h + h + (q + 2 * kvd) + q)
    ff = _mlp_width_used(m, layer)
    # a routed MLP keeps its tokens' k permuted copies, the grouped expert GEMMs' inputs for their weight gradients
    # (Megatron-Core's token dispatcher saves the permuted hidden states; audit32a F7: +34% for DeepSeek-V3)
    routed = _routed_copies(m, layer)
    mlp = act_bytes * (h + h + routed + (3 * ff if m.gated_mlp else 2 * ff))
    dropout = m.linear_bias if m.dropout is None else m.dropout
    masks = 2 * h if dropout else 0
    scores = 0.0 if flash_attention else (2 * act_bytes + 1) * m.num_heads * seq_len
    return attn + mlp + masks + scores


def frozen_mlp_bytes_per_token(m: Model, act_bytes: float, *, layer: int | None = None) -> float:
    """Bytes of :func:`block_activation_bytes_per_token` a block need not keep when its MLP weights are frozen
    (LoRA adapters on the attention projections only) [bytes per token].

    A linear layer keeps its input only to form its weight gradient (Transformer Engine's ``Linear`` saves it only
    when ``weight.requires_grad``; the input gradient needs the weight alone), so a frozen MLP drops the inputs of its
    up/gate projection (``d_model``) and of its down projection (the width a token uses), and keeps its norm input and
    the activation function's inputs. The MLPerf Training reference for Llama 2 70B LoRA adapts ``qkv_proj`` and
    ``o_proj`` only (mlcommons/training, llama2_70b_lora/run_llama_70B_scrolls_r16.sh), as Hu et al. (2021, sec. 4.2)
    adapted the attention weights.
    """
    # frozen experts keep no permuted copies either
    return act_bytes * (m.d_model + _mlp_width_used(m, layer) + _routed_copies(m, layer))


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """A model at a precision, phase, batch and context, as per-layer numpy arrays.

    Attributes (arrays have one entry per row: embedding, blocks, head)
    ------------------------------------------------------------------
    kind : int8 array — 0 embedding, 1 block, 2 head
    params : parameters stored in the row [count]
    active_params : parameters a token touches (MoE: top-k experts) [count]
    weight_bytes : bytes of the row's weights at the chosen precision [bytes]
    matmul_flop_per_token : forward matmul FLOPs per token [FLOP]
    attention_flop_per_token : forward attention score/context FLOPs per token at this context [FLOP]
    activation_bytes_per_token : bytes kept for backward per token, no recompute [bytes]
    checkpoint_bytes_per_token : bytes of the row's input kept under full recompute [bytes]
    kv_bytes_per_token : KV-cache bytes per token of this workload's context [bytes] (a windowed layer keeps
        ``min(context, window)`` tokens, so its entry is scaled by ``min(context, window) / context``)
    kv_bytes_per_cached_token : bytes of one cached token per row [bytes] (transformers only)
    frozen_mlp_bytes_per_token : activation bytes per token a block does not keep when its MLP is frozen (LoRA on
        the attention projections, :func:`frozen_mlp_bytes_per_token`) [bytes] (transformers only)
    kv_window_tokens : tokens a row caches at most (inf: the whole context) (transformers only)
    """

    model_name: str
    precision: str
    phase: str
    batch: int
    context: int
    kind: np.ndarray
    params: np.ndarray
    active_params: np.ndarray
    weight_bytes: np.ndarray
    matmul_flop_per_token: np.ndarray
    attention_flop_per_token: np.ndarray
    activation_bytes_per_token: np.ndarray
    checkpoint_bytes_per_token: np.ndarray
    kv_bytes_per_token: np.ndarray
    working_set_bytes_per_token: float
    arch: Model | None = field(default=None, repr=False)
    tied_head_bytes: float = 0.0
    kv_bytes_per_cached_token: np.ndarray | None = field(default=None, repr=False)
    kv_window_tokens: np.ndarray | None = field(default=None, repr=False)
    stream_unit_bytes: np.ndarray | None = field(default=None, repr=False)
    frozen_mlp_bytes_per_token: np.ndarray | None = field(default=None, repr=False)

    # -- derived -------------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return int((self.kind == KIND_BLOCK).sum())

    @property
    def tokens_per_step(self) -> int:
        """Tokens processed per step: batch x context for train/prefill, batch for one decode step."""
        return self.batch if self.phase == "decode" else self.batch * self.context

    @property
    def flop_per_token(self) -> np.ndarray:
        """Forward FLOPs per token per row [FLOP]."""
        return self.matmul_flop_per_token + self.attention_flop_per_token

    @property
    def stream_units(self) -> np.ndarray:
        """Per row, the largest set of weights streamed as one unit [bytes] (the row's weights unless an MoE
        block streams its routed experts one at a time, :func:`wseplan.architecture.stream_unit_params`)."""
        return self.weight_bytes if self.stream_unit_bytes is None else self.stream_unit_bytes

    @property
    def total_params(self) -> float:
        return float(self.params.sum())

    @property
    def total_weight_bytes(self) -> float:
        return float(self.weight_bytes.sum())

    @property
    def kv_cache_bytes(self) -> float:
        """KV cache for batch x context tokens [bytes] (0 in training)."""
        if self.phase == "train":
            return 0.0
        return float(self.kv_bytes_per_token.sum()) * self.batch * self.context

    def forward_flop(self) -> float:
        """Forward FLOPs of one step [FLOP]."""
        return float(self.flop_per_token.sum()) * self.tokens_per_step

    def to_frame(self):
        """Per-layer table as a pandas DataFrame (imports pandas)."""
        import pandas as pd

        names = {KIND_EMBEDDING: "embedding", KIND_BLOCK: "block", KIND_HEAD: "lm_head"}
        df = pd.DataFrame(
            {
                "kind": [names[int(k)] for k in self.kind],
                "params": self.params,
                "active_params": self.active_params,
                "weight_bytes": self.weight_bytes,
                "matmul_flop_per_token": self.matmul_flop_per_token,
                "attention_flop_per_token": self.attention_flop_per_token,
                "activation_bytes_per_token": self.activation_bytes_per_token,
                "checkpoint_bytes_per_token": self.checkpoint_bytes_per_token,
                "kv_bytes_per_token": self.kv_bytes_per_token,
            }
        )
        df.attrs.update(model=self.model_name, precision=self.precision, phase=self.phase, batch=self.batch, context=self.context)
        return df


def transformer_workload(m: Model, *, precision: str, phase: str, batch: int, context: int,
                         working_set_factor: float = 4.0, causal: bool = True, flash_attention: bool = True,
                         model_name: str | None = None, kv_precision: str | None = None) -> Workload:
    """Build the per-layer workload of a transformer; each block row has its own layer's numbers.

    Attention FLOPs per token per block are ``flop_per_pair * c`` (:class:`Attention`; ``4 * heads *
    head_dim * c`` for standard attention: QK^T and AV, 2 FLOP per MAC), with ``c`` the attended tokens of
    :func:`mean_attended_tokens`: the KV length in decode, and ``(context + 1) / 2`` on average for causal
    prefill/training (``context`` when ``causal=False``, the convention of Narayanan et al. 2021), capped
    by the window of sliding and chunked layers. KV bytes per token of context are the layer's cached
    elements times the element size, times ``min(context, window) / context`` in a windowed layer, so
    that ``kv_cache_bytes`` holds ``min(context, window)`` tokens of such a layer.
    """
    check_precision(precision)
    check_phase(phase)
    batch = check_positive_int(batch, "batch")
    context = check_positive_int(context, "context")
    L = m.num_layers
    ab = activation_bytes_per_element(precision)
    kvb = kv_bytes(precision, kv_precision)
    emb, head = embedding_params(m), head_params(m)
    n = L + 2
    kind = np.full(n, KIND_BLOCK, dtype=np.int8)
    kind[0], kind[-1] = KIND_EMBEDDING, KIND_HEAD
    params, active, mm = np.empty(n), np.empty(n), np.zeros(n)
    params[0], params[-1] = emb, head
    active[0], active[-1] = emb - m.encoder_params, head
    mm[-1] = 2.0 * m.vocab_size * m.d_model  # LM head (computed even when tied); the embedding is a lookup
    attn, act, kv, kv_cached, frozen = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    window = np.full(n, np.inf)
    for idx, p_, a_, nonmm, _, att in _group_table(m):
        rows = np.asarray(idx) + 1 if not isinstance(idx, range) else slice(idx.start + 1, idx.stop + 1)
        params[rows], active[rows] = float(p_), float(a_)
        # matmul FLOPs: 2 per active weight of the block's matrices (norms, QK norms and sinks are not
        # matmuls; biases are negligible and kept)
        mm[rows] = 2.0 * (float(a_) - nonmm)
        attn[rows] = att.flop_per_pair * mean_attended_tokens(att.span, att.window, context, phase=phase, causal=causal)
        act[rows] = block_activation_bytes_per_token(m, ab, flash_attention=flash_attention, seq_len=context,
                                                     layer=idx[0])
        frozen[rows] = frozen_mlp_bytes_per_token(m, ab, layer=idx[0])
        per_tok = kvb * att.kv_elems_per_token
        kv[rows] = per_tok if att.window is None else per_tok * min(context, att.window) / context
        kv_cached[rows] = per_tok
        if att.window is not None:
            window[rows] = att.window
    we, wo = weight_bytes_split(m, precision, phase)
    weight_bytes = params * wo
    edge = edge_weight_bytes(m, precision, phase)
    weight_bytes[0], weight_bytes[-1] = emb * edge, head * edge  # 16-bit in a quantized checkpoint
    if we != wo:  # a checkpoint that quantizes the routed experts alone
        for bt in block_types(m):
            weight_bytes[np.asarray(bt.layers) + 1] += routed_params(bt) * (we - wo)
    per_param = weight_bytes / np.maximum(params, 1.0)
    units = weight_bytes.copy()
    for idx, unit in stream_unit_params(m):
        units[np.asarray(idx) + 1] = unit * per_param[np.asarray(idx) + 1]
    ckpt = np.zeros(n)
    ckpt[1:-1] = ab * m.d_model
    ws = ab * (working_set_factor * m.d_model + 2.0 * _mlp_width_used(m, None))
    tied_bytes = m.vocab_size * m.d_model * edge if m.tied_embeddings else 0.0
    return Workload(model_name=model_name or m.name, precision=precision, phase=phase, batch=batch, context=context,
                    kind=kind, params=params, active_params=active, weight_bytes=weight_bytes,
                    matmul_flop_per_token=mm, attention_flop_per_token=attn, activation_bytes_per_token=act,
                    checkpoint_bytes_per_token=ckpt, kv_bytes_per_token=kv, working_set_bytes_per_token=ws,
                    arch=m, tied_head_bytes=tied_bytes, kv_bytes_per_cached_token=kv_cached, kv_window_tokens=window,
                    stream_unit_bytes=units, frozen_mlp_bytes_per_token=frozen)


def generic_workload(g: GenericModel, *, precision: str, phase: str, batch: int, context: int = 1) -> Workload:
    """Workload of a layer-list model. One 'token' is one sample; FLOPs and activations are per sample."""
    check_precision(precision)
    check_phase(phase)
    batch = check_positive_int(batch, "batch")
    context = check_positive_int(context, "context")
    n = len(g.layers)
    params = np.array([ly.params for ly in g.layers], dtype=float)
    flop = np.array([ly.flop_per_sample for ly in g.layers], dtype=float)
    act = np.array([ly.activation_bytes_per_sample for ly in g.layers], dtype=float)
    wbp = weight_bytes_per_param(precision, phase)
    return Workload(model_name=g.name, precision=precision, phase=phase, batch=batch, context=context,
                    kind=np.full(n, KIND_BLOCK, dtype=np.int8), params=params, active_params=params.copy(),
                    weight_bytes=params * wbp, matmul_flop_per_token=flop, attention_flop_per_token=np.zeros(n),
                    activation_bytes_per_token=act, checkpoint_bytes_per_token=act.copy(),
                    kv_bytes_per_token=np.zeros(n), working_set_bytes_per_token=float(act.max(initial=0.0)))


# ---------------------------------------------------------------------------------------------
# Model names and workloads
# ---------------------------------------------------------------------------------------------
def beside(name, base) -> str:
    """A model named inside a file (a study, a sweep, a demand): a relative ``config.json`` or layer-list YAML path
    is the file's neighbour (the path from folder ``base``), as a study's ``claims`` and a demand's ``prices`` are,
    not the current folder's (audit31b M5: the same study worked from one folder and failed, or read another file,
    from another); a catalog name or an absolute path unchanged."""
    if not isinstance(name, str) or not name.strip().endswith((".json", ".yaml", ".yml")) or Path(name).is_absolute():
        return name
    return str(Path(base) / name.strip())


def resolve_model(name: str, catalog) -> Model | GenericModel:
    """A catalog name or alias, a Hugging Face ``config.json`` path, or a layer-list YAML path."""
    if not isinstance(name, str) or not name.strip():
        raise InputError("model: empty; give a catalog name such as llama-70b, or a config.json path")
    p = Path(name)
    try:
        is_file = p.is_file()
    except (OSError, ValueError):  # a name too long for a path, or with a NUL: not a file, so a catalog name
        is_file = False
    if name.endswith(".json") or (is_file and p.suffix == ".json"):
        if not p.is_file():
            raise InputError(f"model: file {name} not found; check the path")
        return model_from_hf_config(p)
    if name.endswith((".yaml", ".yml")):
        if not p.is_file():
            raise InputError(f"model: file {name} not found; check the path")
        g = generic_model_from_file(p)
        ids = [g.source] if isinstance(g.source, str) else list(g.source)
        unknown = [i for i in ids if i not in catalog.sources]
        if unknown:
            raise InputError(f"model: {p}: unknown source id {unknown[0]!r}{suggest(unknown[0], catalog.sources)}; "
                             "use an id from catalogs/sources.yaml or add one with --catalog")
        return g
    sec, key = catalog.resolve_model_name(name)
    return getattr(catalog, sec)[key]


def build_workload(model: Model | GenericModel, catalog, *, precision: str, phase: str, batch: int,
                   context: int, kv_precision: str | None = None) -> Workload:
    """The per-layer workload of ``model`` (a transformer or a layer list) at a precision, phase, batch, context
    (``kv_precision``: the KV cache's own format, else the weights' rule)."""
    d = catalog.defaults
    if isinstance(model, GenericModel):
        return generic_workload(model, precision=precision, phase=phase, batch=batch, context=context)
    return transformer_workload(model, precision=precision, phase=phase, batch=batch, context=context,
                                working_set_factor=d.wafer_activation_working_set_factor.si, kv_precision=kv_precision)


def stage_records(w: Workload, stages, loads) -> list[dict]:
    """Item-index stages ``[(first, last), ...]`` (rows include the embedding and head) as per-device records with
    0-based inclusive transformer-block indices (-1/-1 for a device without blocks) and the stage's bytes."""
    block_idx = np.cumsum(w.kind == KIND_BLOCK) - 1
    out = []
    for dev, ((a, b), load) in enumerate(zip(stages, loads)):
        a, b = int(a), int(b)
        kinds = w.kind[a: b + 1]
        blocks = np.nonzero(kinds == KIND_BLOCK)[0] + a
        out.append(dict(device=dev, first_layer=int(block_idx[blocks[0]]) if len(blocks) else -1,
                        last_layer=int(block_idx[blocks[-1]]) if len(blocks) else -1,
                        embedding=bool((kinds == KIND_EMBEDDING).any()), lm_head=bool((kinds == KIND_HEAD).any()),
                        bytes=float(load)))
    return out


def kv_bytes_rows(w: Workload, batch, context) -> np.ndarray:
    """KV-cache bytes of every row for ``batch`` sequences of ``context`` tokens, per configuration [bytes].

    ``batch`` and ``context`` are arrays of one length N (or scalars); the result is (N, rows). A sliding- or
    chunked-window layer caches at most its window of tokens per sequence.
    """
    b = np.atleast_1d(np.asarray(batch, dtype=float))[:, None]
    c = np.atleast_1d(np.asarray(context, dtype=float))[:, None]
    if w.kv_bytes_per_cached_token is None:
        return w.kv_bytes_per_token[None, :] * b * c
    return w.kv_bytes_per_cached_token[None, :] * b * np.minimum(c, w.kv_window_tokens[None, :])
