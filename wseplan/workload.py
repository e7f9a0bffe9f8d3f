"""Per-layer workload tables: params, weight bytes, FLOPs, activation and KV bytes, as numpy arrays.

A workload is a model at a precision, phase, batch and context. Its rows are the model's layers in order:
the embedding (kind 0), the transformer blocks (kind 1) and the final norm + LM head (kind 2). Generic
(non-transformer) models have only kind-1 rows. Everything is held in numpy arrays so that the CLI's fit
path never imports pandas; :meth:`Workload.to_frame` builds a DataFrame on demand.

Units: bytes, FLOP, tokens. FLOPs count 2 per multiply-accumulate.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import ValidationError
from pathlib import Path

import numpy as np

from .catalog.schema import PRECISIONS, GenericModel, LayerSpec, Model
from .errors import InputError, validation_detail

KIND_EMBEDDING, KIND_BLOCK, KIND_HEAD = 0, 1, 2
PHASES = ("train", "prefill", "decode")

#: bytes per element of each numeric format
BYTES_PER_ELEMENT = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5}


def weight_bytes_per_param(precision: str, phase: str) -> float:
    """Bytes per stored weight [bytes]. Training keeps 16-bit working weights even for fp8/int/fp4 compute."""
    b = BYTES_PER_ELEMENT[precision]
    return max(b, 2.0) if phase == "train" and b < 2 else b


def kv_bytes_per_element(precision: str) -> float:
    """KV-cache element size [bytes]: fp8 serving keeps an fp8 cache; weight-only int8/int4/fp4 keep 16-bit."""
    if precision in ("fp32", "tf32"):
        return 4.0
    return 1.0 if precision == "fp8" else 2.0


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
        from .errors import suggest

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

    Attention: Q and O are d x (heads*head_dim); K and V are d x (kv_heads*head_dim). MLP: 3 d*d_ff when
    gated (SwiGLU), else 2 d*d_ff; an MoE block has ``num_experts`` MLPs plus a d x E router, of which
    ``experts_per_token`` are active. Norms: d (RMSNorm) or 2d (LayerNorm) each, two per block.
    """
    d, hd = m.d_model, m.head_dim_
    q = m.num_heads * hd
    kvd = m.num_kv_heads * hd
    attn = d * q + 2 * d * kvd + q * d
    if m.qkv_bias or m.linear_bias:
        attn += q + 2 * kvd
    if m.linear_bias:
        attn += d
    mlp_one = (3 if m.gated_mlp else 2) * d * m.d_ff
    if m.linear_bias:
        mlp_one += m.d_ff + d
    norms = 2 * (2 * d if m.norm == "layernorm" else d)
    router = d * m.num_experts if m.num_experts > 1 else 0
    total = attn + m.num_experts * mlp_one + router + norms
    active = attn + m.experts_per_token * mlp_one + router + norms
    return float(total), float(active)


def embedding_params(m: Model) -> float:
    return float(m.vocab_size * m.d_model + m.learned_pos_embeddings * m.d_model)


def head_params(m: Model) -> float:
    """Final norm + LM head (0 head weights when tied to the embedding)."""
    norm = 2 * m.d_model if m.norm == "layernorm" else m.d_model
    return float(norm + (0 if m.tied_embeddings else m.vocab_size * m.d_model))


def total_params(m: Model) -> float:
    """Exact parameter count [count] from the architecture."""
    return embedding_params(m) + m.num_layers * block_params(m)[0] + head_params(m)


def block_activation_bytes_per_token(m: Model, act_bytes: float, *, flash_attention: bool = True, seq_len: int = 0) -> float:
    """Bytes kept for the backward pass per token in one block, no recomputation [bytes].

    Generalises Korthikanti et al. (2022), eq. 1 (``sbh(34 + 5as/h)`` for GPT with 16-bit activations) to
    grouped-query attention and gated MLPs: norm inputs and outputs, Q/K/V, attention output, MLP
    intermediates (3 d_ff gated, 2 d_ff otherwise), 1-byte dropout masks where the model uses dropout
    (GPT-style biases), and the ``5 a s`` score/softmax terms only without flash attention.
    """
    h, hd = m.d_model, m.head_dim_
    q = m.num_heads * hd
    kvd = m.num_kv_heads * hd
    attn = act_bytes * (h + h + (q + 2 * kvd) + q)
    ff = m.d_ff * m.experts_per_token
    mlp = act_bytes * (h + h + (3 * ff if m.gated_mlp else 2 * ff))
    masks = 2 * h if m.linear_bias else 0
    scores = 0.0 if flash_attention else (2 * act_bytes + 1) * m.num_heads * seq_len
    return attn + mlp + masks + scores


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
    kv_bytes_per_token : KV-cache bytes per token of context [bytes]
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
                         model_name: str | None = None) -> Workload:
    """Build the per-layer workload of a transformer.

    Attention FLOPs per token per block are ``4 * heads * head_dim * c`` (QK^T and AV, 2 FLOP per MAC),
    with ``c`` the attended tokens: the KV length in decode, and ``(context + 1) / 2`` on average for causal
    prefill/training (``context`` when ``causal=False``, the convention of Narayanan et al. 2021).
    """
    check_precision(precision)
    check_phase(phase)
    batch = check_positive_int(batch, "batch")
    context = check_positive_int(context, "context")
    L = m.num_layers
    wbp = weight_bytes_per_param(precision, phase)
    ab = activation_bytes_per_element(precision)
    kvb = kv_bytes_per_element(precision)
    blk_total, blk_active = block_params(m)
    emb, head = embedding_params(m), head_params(m)
    n = L + 2
    kind = np.full(n, KIND_BLOCK, dtype=np.int8)
    kind[0], kind[-1] = KIND_EMBEDDING, KIND_HEAD
    params = np.full(n, blk_total)
    params[0], params[-1] = emb, head
    active = np.full(n, blk_active)
    active[0], active[-1] = emb, head
    weight_bytes = params * wbp
    hd = m.head_dim_
    # matmul FLOPs: 2 per active weight of the block's matrices (norm and bias params are negligible)
    norms = 2 * (2 * m.d_model if m.norm == "layernorm" else m.d_model)
    mm = np.full(n, 2.0 * (blk_active - norms))
    mm[0] = 0.0  # embedding is a lookup
    mm[-1] = 2.0 * m.vocab_size * m.d_model  # LM head (computed even when tied)
    if phase == "decode":
        attended = float(context)
    else:
        attended = (context + 1) / 2 if causal else float(context)
    attn = np.zeros(n)
    attn[1:-1] = 4.0 * m.num_heads * hd * attended
    act = np.zeros(n)
    act[1:-1] = block_activation_bytes_per_token(m, ab, flash_attention=flash_attention, seq_len=context)
    ckpt = np.zeros(n)
    ckpt[1:-1] = ab * m.d_model
    kv = np.zeros(n)
    kv[1:-1] = 2.0 * m.num_kv_heads * hd * kvb
    ws = ab * (working_set_factor * m.d_model + 2.0 * m.d_ff * m.experts_per_token)
    tied_bytes = m.vocab_size * m.d_model * wbp if m.tied_embeddings else 0.0
    return Workload(model_name=model_name or m.name, precision=precision, phase=phase, batch=batch, context=context,
                    kind=kind, params=params, active_params=active, weight_bytes=weight_bytes,
                    matmul_flop_per_token=mm, attention_flop_per_token=attn, activation_bytes_per_token=act,
                    checkpoint_bytes_per_token=ckpt, kv_bytes_per_token=kv, working_set_bytes_per_token=ws,
                    arch=m, tied_head_bytes=tied_bytes)


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
# Hugging Face config.json and layer-list files
# ---------------------------------------------------------------------------------------------
_HF_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def model_from_hf_config(path: str | Path) -> Model:
    """Parse a Hugging Face ``config.json`` (read locally, never downloaded) into a :class:`Model`."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"model: cannot read {p} ({exc.__class__.__name__}); check the path") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"model: {p} is not valid JSON (line {exc.lineno}: {exc.msg}); fix the file") from None
    if not isinstance(cfg, dict):
        raise InputError(f"model: {p} must hold a JSON object of model settings")
    # GPT-2 style names
    alias = {"n_layer": "num_hidden_layers", "n_embd": "hidden_size", "n_head": "num_attention_heads"}
    for a, b in alias.items():
        if a in cfg and b not in cfg:
            cfg[b] = cfg[a]
    if "intermediate_size" not in cfg and "n_inner" in cfg:
        cfg["intermediate_size"] = cfg["n_inner"] or 4 * cfg.get("hidden_size", 0)
    missing = [k for k in _HF_REQUIRED if k not in cfg]
    if missing:
        raise InputError(f"model: {p} is missing {', '.join(missing)}; a config.json needs {', '.join(_HF_REQUIRED)}")
    for k in _HF_REQUIRED:
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InputError(f"model: {p}: {k} must be a positive integer, got {v!r}")
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "silu"))).lower()
    mtype = str(cfg.get("model_type", "")).lower()
    gated = act in ("silu", "swiglu", "swish") or mtype in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma")

    def opt_int(key: str, default: int) -> int:
        v = cfg.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InputError(f"model: {p}: {key} must be a positive integer, got {v!r}")
        return v

    def opt_bool(key: str, default: bool) -> bool:
        v = cfg.get(key, default)
        if not isinstance(v, bool):
            raise InputError(f"model: {p}: {key} must be true or false, got {v!r}")
        return v

    experts = opt_int("num_local_experts", opt_int("num_experts", 1))
    topk = opt_int("num_experts_per_tok", 1) if experts > 1 else 1
    kv = opt_int("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim")
    if head_dim is not None:
        head_dim = opt_int("head_dim", 1)
    try:
        return Model(
            name=str(cfg.get("_name_or_path") or p.parent.name or p.stem),
            source="wseplan-estimate", basis="official", note=f"parsed from {p.name}",
            num_layers=cfg["num_hidden_layers"], d_model=cfg["hidden_size"], num_heads=cfg["num_attention_heads"],
            num_kv_heads=kv, head_dim=head_dim, d_ff=cfg["intermediate_size"], gated_mlp=gated,
            vocab_size=cfg["vocab_size"], tied_embeddings=opt_bool("tie_word_embeddings", False),
            num_experts=experts, experts_per_token=topk,
            norm="layernorm" if "layer_norm_epsilon" in cfg or mtype in ("gpt2", "gpt_neox", "opt") else "rmsnorm",
            qkv_bias=opt_bool("attention_bias", mtype.startswith("qwen2")),
            max_context=opt_int("max_position_embeddings", 8192),
        )
    except ValidationError as exc:  # -> one line naming the field
        loc, msg = validation_detail(exc)
        raise InputError(f"model: {p}: {loc or 'config'}: {msg}") from None


def generic_model_from_file(path: str | Path) -> GenericModel:
    """Read a layer-list YAML (``name:`` and ``layers: [{name, params, flop_per_sample, activation_bytes_per_sample}]``)."""
    from pydantic import ValidationError

    from .catalog.load import read_yaml
    from .errors import CatalogError

    p = Path(path)
    try:
        data = read_yaml(p)
    except CatalogError as exc:
        raise InputError(f"model: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"model: {p} must be a mapping with 'name' and 'layers'")
    data = {"source": "wseplan-estimate", "basis": "estimate", "note": f"layer list from {p.name}", **data}
    try:
        return GenericModel.model_validate(data)
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        raise InputError(f"model: {p}: {loc}: {msg}") from None


# ---------------------------------------------------------------------------------------------
# Model names and workloads
# ---------------------------------------------------------------------------------------------
def resolve_model(name: str, catalog) -> Model | GenericModel:
    """A catalog name or alias, a Hugging Face ``config.json`` path, or a layer-list YAML path."""
    if not isinstance(name, str) or not name.strip():
        raise InputError("model: empty; give a catalog name such as llama-70b, or a config.json path")
    p = Path(name)
    if name.endswith(".json") or (p.is_file() and p.suffix == ".json"):
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
            from .errors import suggest

            raise InputError(f"model: {p}: unknown source id {unknown[0]!r}{suggest(unknown[0], catalog.sources)}; "
                             "use an id from catalogs/sources.yaml or add one with --catalog")
        return g
    sec, key = catalog.resolve_model_name(name)
    return getattr(catalog, sec)[key]


def build_workload(model: Model | GenericModel, catalog, *, precision: str, phase: str, batch: int,
                   context: int) -> Workload:
    """The per-layer workload of ``model`` (a transformer or a layer list) at a precision, phase, batch, context."""
    d = catalog.defaults
    if isinstance(model, GenericModel):
        return generic_workload(model, precision=precision, phase=phase, batch=batch, context=context)
    return transformer_workload(model, precision=precision, phase=phase, batch=batch, context=context,
                                working_set_factor=d.wafer_activation_working_set_factor.si)


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
