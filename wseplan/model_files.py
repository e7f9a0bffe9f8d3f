"""Models from files: a Hugging Face ``config.json`` (read locally, never downloaded) into a
:class:`~wseplan.catalog.schema.Model`, and a layer-list YAML into a :class:`~wseplan.catalog.schema.GenericModel`
(:func:`wseplan.workload.resolve_model` picks the reader by the file's suffix). Malformed input is one line naming
the field."""
from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from .architecture import is_moe_layer
from .catalog.load import read_json, read_yaml
from .catalog.schema import GenericModel, Model
from .errors import CatalogError, InputError, validation_detail

_HF_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
#: model types whose MLP is gated (SwiGLU / GeGLU) whatever ``hidden_act`` says
#: class defaults of transformers' config classes that published config.json files omit (GemmaConfig, Gemma2Config,
#: Gemma3TextConfig: vocab_size, head_dim, tie_word_embeddings, max_position_embeddings, the head counts)
_GEMMA3 = {"vocab_size": 262208, "head_dim": 256, "tie_word_embeddings": True, "max_position_embeddings": 131072,
           "num_attention_heads": 8, "num_key_value_heads": 4}
_HF_TYPE_DEFAULTS = {
    "gemma": {"vocab_size": 256000, "head_dim": 256, "tie_word_embeddings": True, "max_position_embeddings": 8192,
              "num_attention_heads": 16, "num_key_value_heads": 16},
    "gemma2": {"vocab_size": 256000, "head_dim": 256, "tie_word_embeddings": True, "max_position_embeddings": 8192,
               "num_attention_heads": 8, "num_key_value_heads": 4},
    "gemma3_text": _GEMMA3, "gemma3": _GEMMA3,
}
_HF_GATED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
             "gemma3_text", "llama4", "llama4_text", "deepseek_v2", "deepseek_v3", "gpt_oss")
_HF_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def _llama4_vision_params(vc: dict, text_hidden: int) -> int | None:
    """Parameters of Llama 4's vision tower and projector from ``vision_config`` (None if a size is missing).

    Patch projection (channels x patch^2 -> h, no bias), class token, one position per patch and the class
    token, pre/post LayerNorms; per layer Q/K/V/O with biases, a GELU MLP h -> f -> h with biases and two
    LayerNorms; the pixel-shuffle MLP f -> projector_input_dim -> projector_output_dim (no biases); the
    projector vision_output_dim -> text hidden size (no bias). (Hugging Face ``Llama4VisionModel`` and
    ``Llama4MultiModalProjector``.)
    """
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "patch_size", "image_size",
            "projector_input_dim", "projector_output_dim", "vision_output_dim")
    vals = [vc.get(k) for k in keys]
    if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in vals):
        return None
    h, f, L, patch, img, pin, pout, vout = vals
    ch = vc.get("num_channels", 3)
    if isinstance(ch, bool) or not isinstance(ch, int) or ch <= 0:
        return None
    positions = (img // patch) ** 2 + 1
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    return ch * patch * patch * h + h + positions * h + 2 * 2 * h + L * layer + f * pin + pout * pout + vout * text_hidden


def model_from_hf_config(path: str | Path) -> Model:
    """Parse a Hugging Face ``config.json`` (read locally, never downloaded) into a :class:`Model`.

    Reads dense and MoE decoders: a multimodal config's ``text_config`` (Llama 4, Gemma 3); routed experts
    (``num_local_experts`` / ``num_experts`` / ``n_routed_experts``, ``num_experts_per_tok``), their width
    (``moe_intermediate_size``, else ``intermediate_size``) and the dense layers' width
    (``intermediate_size_mlp`` for Llama 4, ``intermediate_size`` beside ``moe_intermediate_size``); which
    layers are MoE (``moe_layers``, ``interleave_moe_layer_step``, ``decoder_sparse_step`` with
    ``mlp_only_layers``, ``first_k_dense_replace`` with ``moe_layer_freq``); shared experts
    (``n_shared_experts``, ``shared_expert_intermediate_size``, Llama 4's one shared expert); DeepSeek MLA
    (``kv_lora_rank``, ``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``); the
    attention span of each layer (``layer_types``; Llama 4's chunked RoPE layers from ``no_rope_layers``;
    Gemma 2/3 sliding patterns; ``sliding_window`` with ``use_sliding_window`` / ``max_window_layers``);
    gpt-oss biases, router bias and attention sinks; Qwen3/Gemma 3 QK norms; Llama 4's vision tower as
    ``encoder_params``.
    """
    p = Path(path)
    cfg = read_json(p, what="model:")  # bounded, non-blocking; NaN, huge or deeply nested input refused in one line
    if not isinstance(cfg, dict):
        raise InputError(f"model: {p} must hold a JSON object of model settings")
    top = cfg
    text = cfg.get("text_config")
    if text is not None:
        if not isinstance(text, dict):
            raise InputError(f"model: {p}: text_config must be a JSON object")
        cfg = {**{k: top[k] for k in ("tie_word_embeddings", "_name_or_path") if k in top}, **text}
    else:
        cfg = dict(cfg)
    # GPT-2 style names
    alias = {"n_layer": "num_hidden_layers", "n_embd": "hidden_size", "n_head": "num_attention_heads"}
    for a, b in alias.items():
        if a in cfg and b not in cfg:
            cfg[b] = cfg[a]
    if "intermediate_size" not in cfg and "n_inner" in cfg:
        hidden = cfg.get("hidden_size")  # a null or non-integer width is refused below, naming the field
        cfg["intermediate_size"] = cfg["n_inner"] or (4 * hidden if type(hidden) is int else hidden)
    # the fields a config.json leaves to its class's defaults (Hugging Face writes only what differs from them):
    # Gemma's tied embeddings, vocabulary and 256-wide heads (audit28d M4: a Gemma 2 config counted an untied head,
    # a Gemma 3 text_config was refused for lacking vocab_size)
    for k, v in _HF_TYPE_DEFAULTS.get(str(cfg.get("model_type") or top.get("model_type") or "").lower(), {}).items():
        cfg.setdefault(k, v)
    missing = [k for k in _HF_REQUIRED if k not in cfg]
    if missing:
        raise InputError(f"model: {p} is missing {', '.join(missing)}; a config.json needs {', '.join(_HF_REQUIRED)}")
    for k in _HF_REQUIRED:
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InputError(f"model: {p}: {k} must be a positive integer, got {v!r}")
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "silu"))).lower()
    mtype = str(cfg.get("model_type") or top.get("model_type") or "").lower()
    top_type = str(top.get("model_type") or "").lower()
    gated = act in ("silu", "swiglu", "swish") or mtype in _HF_GATED
    L = cfg["num_hidden_layers"]
    Lc = min(L, 4096)  # layers iterated below; a larger count is rejected by the Model's bound

    def opt_int(key: str, default: int | None, *, minimum: int = 1) -> int | None:
        v = cfg.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise InputError(f"model: {p}: {key} must be {what}, got {v!r}")
        return v

    def opt_bool(key: str, default: bool) -> bool:
        v = cfg.get(key, default)
        if not isinstance(v, bool):
            raise InputError(f"model: {p}: {key} must be true or false, got {v!r}")
        return v

    def opt_layers(key: str) -> list[int] | None:
        v = cfg.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in v):
            raise InputError(f"model: {p}: {key} must be a list of layer indices, got {v!r}")
        return v

    experts = opt_int("num_local_experts", None) or opt_int("num_experts", None) or opt_int("n_routed_experts", 1)
    moe = experts > 1
    topk = (opt_int("num_experts_per_tok", None) or opt_int("experts_per_token", 1)) if moe else 1
    kv = opt_int("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = opt_int("head_dim", None)
    extra: dict = {}
    notes = [f"parsed from {p.name}"]
    d_ff = cfg["intermediate_size"]
    if moe:
        moe_width = opt_int("moe_intermediate_size", None)
        dense_width = opt_int("intermediate_size_mlp", None) or (d_ff if moe_width else None)
        d_ff = moe_width or d_ff
        dense: list[int] = []
        moe_layers = opt_layers("moe_layers")
        if moe_layers is not None:
            dense = [i for i in range(Lc) if i not in set(moe_layers)]
        else:
            step = opt_int("interleave_moe_layer_step", None) or opt_int("decoder_sparse_step", None)
            if step:
                extra.update(moe_layer_step=step, moe_layer_offset=step - 1)
            freq = opt_int("moe_layer_freq", None)
            if freq and not step:
                extra.update(moe_layer_step=freq, moe_layer_offset=0)
            first = opt_int("first_k_dense_replace", 0, minimum=0)
            if first:
                extra["first_dense_layers"] = first
            dense = opt_layers("mlp_only_layers") or []
        if dense:
            extra["dense_layers"] = dense
        probe = Model.model_construct(num_layers=L, num_experts=experts, dense_layers=dense,
                                      first_dense_layers=extra.get("first_dense_layers", 0),
                                      moe_layer_step=extra.get("moe_layer_step", 1),
                                      moe_layer_offset=extra.get("moe_layer_offset", 0))
        if dense_width and any(not is_moe_layer(probe, i) for i in range(Lc)):
            extra["dense_d_ff"] = dense_width
        n_shared = opt_int("n_shared_experts", 0, minimum=0)
        shared_width = opt_int("shared_expert_intermediate_size", None)
        if n_shared:
            extra.update(num_shared_experts=n_shared, shared_expert_d_ff=d_ff)
        elif shared_width:
            extra.update(num_shared_experts=1, shared_expert_d_ff=shared_width,
                         shared_expert_gate=mtype.startswith("qwen2"))
        elif mtype.startswith("llama4"):
            extra.update(num_shared_experts=1)  # Llama 4: one shared expert as wide as a routed one
        if mtype == "gpt_oss" or cfg.get("topk_method") == "noaux_tc":
            extra["router_bias"] = True
    if opt_int("num_nextn_predict_layers", 0, minimum=0):  # DeepSeek-V3's multi-token-prediction module
        extra["mtp_layers"] = opt_int("num_nextn_predict_layers", 0, minimum=0)
    if cfg.get("kv_lora_rank") is not None:
        extra.update(attention="mla", q_lora_rank=opt_int("q_lora_rank", None), kv_lora_rank=opt_int("kv_lora_rank", 1),
                     qk_nope_head_dim=opt_int("qk_nope_head_dim", None), qk_rope_head_dim=opt_int("qk_rope_head_dim", None),
                     v_head_dim=opt_int("v_head_dim", None))
        if extra["qk_nope_head_dim"] and extra["qk_rope_head_dim"]:
            head_dim = extra["qk_nope_head_dim"] + extra["qk_rope_head_dim"]
    # attention span of each layer
    window = opt_int("sliding_window", None)
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or any(t not in _HF_LAYER_TYPES for t in types):
            bad = types if not isinstance(types, list) else next(t for t in types if t not in _HF_LAYER_TYPES)
            raise InputError(f"model: {p}: layer_types: unsupported {bad!r}; wseplan models {', '.join(_HF_LAYER_TYPES)}")
    elif mtype.startswith("llama4") and cfg.get("attention_chunk_size") is not None:
        rope = cfg.get("no_rope_layers") or None
        if rope is None:
            interval = opt_int("no_rope_layer_interval", 4)
            rope = [int((i + 1) % interval != 0) for i in range(Lc)]
        if not isinstance(rope, list) or len(rope) != Lc or any(r not in (0, 1) or isinstance(r, bool) for r in rope):
            raise InputError(f"model: {p}: no_rope_layers must list one 0/1 flag per layer ({L})")
        types = ["chunked_attention" if r else "full_attention" for r in rope]
    elif mtype == "gemma2" and window:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(Lc)]
    elif mtype in ("gemma3", "gemma3_text") and window:
        pattern = opt_int("sliding_window_pattern", 6)
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(Lc)]
    elif window and opt_bool("use_sliding_window", True):
        first_window = opt_int("max_window_layers", 0, minimum=0) if "use_sliding_window" in cfg else 0
        types = ["sliding_attention" if i >= first_window else "full_attention" for i in range(Lc)]
    if types is not None and any(t != "full_attention" for t in types):
        extra["layer_types"] = types
        if "sliding_attention" in types:
            extra["sliding_window"] = window
        if "chunked_attention" in types:
            extra["attention_chunk"] = opt_int("attention_chunk_size", None)
    if mtype == "gpt_oss":
        extra.update(linear_bias=True, dropout=False, attention_sinks=True)
    if mtype in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"):
        extra["qk_norm"] = True
    if mtype in ("gemma2", "gemma3", "gemma3_text"):
        extra["norms_per_block"] = 4
    qc = top.get("quantization_config") if isinstance(top.get("quantization_config"), dict) else {}
    method, bits = str(qc.get("quant_method") or "").lower(), qc.get("bits")
    native = ("fp8" if method in ("fp8", "fbgemm_fp8", "compressed-tensors") and "fp8" in str(qc).lower() else
              "fp4" if method in ("mxfp4", "nvfp4", "modelopt") and "fp4" in str(qc).lower() else
              "int4" if method in ("awq", "gptq") and bits == 4 else None)
    if native:  # the checkpoint's own format (a plan at another precision says so)
        extra["native_precision"] = native
    if method == "mxfp4":  # 4-bit values and an 8-bit scale per 32 (OCP Microscaling v1.0); gpt-oss leaves its
        # attention, router, embeddings and LM head unconverted (bf16): the routed experts alone are MXFP4
        extra["native_bits_per_weight"] = 4.25
        skip = " ".join(str(x) for x in qc.get("modules_to_not_convert") or [])
        if "attn" in skip and int(cfg.get("num_local_experts") or cfg.get("num_experts") or 1) > 1:
            extra["native_quantized"] = "experts"
    if top_type == "llama4" and isinstance(top.get("vision_config"), dict):
        enc = _llama4_vision_params(top["vision_config"], cfg["hidden_size"])
        if enc is None:
            notes.append("vision tower not counted (vision_config lacks a size)")
        else:
            extra["encoder_params"] = enc
    try:
        return Model(
            # a file named config.json is named after its folder (a Hugging Face checkout); any other after itself
            name=str(cfg.get("_name_or_path") or (p.parent.name if p.stem == "config" else p.stem) or p.stem),
            source="wseplan-estimate", basis="official", note="; ".join(notes),
            num_layers=L, d_model=cfg["hidden_size"], num_heads=cfg["num_attention_heads"],
            num_kv_heads=kv, head_dim=head_dim, d_ff=d_ff, gated_mlp=gated,
            vocab_size=cfg["vocab_size"], tied_embeddings=opt_bool("tie_word_embeddings", False),
            num_experts=experts, experts_per_token=topk,
            norm="layernorm" if "layer_norm_epsilon" in cfg or mtype in ("gpt2", "gpt_neox", "opt") else "rmsnorm",
            qkv_bias=opt_bool("attention_bias", mtype.startswith("qwen2")) and mtype != "gpt_oss",
            max_context=opt_int("max_position_embeddings", None),
            **extra,
        )
    except ValidationError as exc:  # -> one line naming the field
        loc, msg = validation_detail(exc)
        raise InputError(f"model: {p}: {loc or 'config'}: {msg}") from None


def generic_model_from_file(path: str | Path) -> GenericModel:
    """Read a layer-list YAML (``name:`` and ``layers: [{name, params, flop_per_sample, activation_bytes_per_sample}]``)."""
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
