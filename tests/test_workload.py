"""Parameter counts against published values; memory terms against hand calculations."""
import csv
from pathlib import Path

import numpy as np
import pytest

from wseplan.workload import (block_activation_bytes_per_token, embedding_params, head_params, total_params,
                              transformer_workload)

REF = list(csv.DictReader(open(Path(__file__).parent / "reference" / "param_counts.csv")))


@pytest.mark.parametrize("row", REF, ids=[r["model"] for r in REF])
def test_param_counts_match_published(catalog, row):
    m = catalog.models[row["model"]]
    assert total_params(m) == pytest.approx(float(row["expected_params"]), rel=float(row["rtol"]))


def test_llama2_7b_exact_hand_count(catalog):
    # 32 blocks x (4 d^2 attention + 3 d d_ff SwiGLU + 2 d RMSNorm) + 2 x vocab x d + d final norm
    d, ff, V, L = 4096, 11008, 32000, 32
    hand = L * (4 * d * d + 3 * d * ff + 2 * d) + 2 * V * d + d
    assert total_params(catalog.models["llama-2-7b"]) == hand == 6_738_415_616


def test_gpt3_exact_hand_count(catalog):
    # 96 x (12 d^2 + 13 d: qkv/out/mlp biases and two LayerNorms) + vocab x d + 2048 x d + 2 d (tied head)
    d, L, V = 12288, 96, 50257
    hand = L * (12 * d * d + 13 * d) + V * d + 2048 * d + 2 * d
    assert total_params(catalog.models["gpt-3-175b"]) == hand


def test_llama3_70b_memory_terms(catalog):
    m = catalog.models["llama-3-70b"]
    w = transformer_workload(m, precision="bf16", phase="decode", batch=1, context=8192)
    # weights: 2 bytes per parameter
    assert w.total_weight_bytes == pytest.approx(2 * 70_553_706_496, rel=1e-12)
    # KV: 80 layers x 2 (K,V) x 8 kv heads x 128 head dim x 2 bytes = 327,680 B per token
    assert w.kv_bytes_per_token.sum() == 80 * 2 * 8 * 128 * 2
    assert w.kv_cache_bytes == 327_680 * 8192


def test_llama2_7b_kv_is_mha(catalog):
    w = transformer_workload(catalog.models["llama-2-7b"], precision="fp16", phase="decode", batch=4, context=4096)
    # 32 layers x 2 x 32 heads x 128 x 2 B = 524,288 B per token; x 4 sequences x 4096 tokens
    assert w.kv_cache_bytes == 32 * 2 * 32 * 128 * 2 * 4 * 4096


def test_gpt3_activations_match_korthikanti(catalog):
    """Korthikanti et al. 2022 eq. 1: s b h (34 + 5 a s / h) bytes per layer (16-bit, no recompute)."""
    m = catalog.models["gpt-3-175b"]
    h, a, s = 12288, 96, 2048
    per_token = block_activation_bytes_per_token(m, 2.0, flash_attention=False, seq_len=s)
    assert per_token == pytest.approx(34 * h + 5 * a * s, rel=1e-12)
    # with flash attention the s^2 terms are not stored: 34 h
    assert block_activation_bytes_per_token(m, 2.0, flash_attention=True) == pytest.approx(34 * h, rel=1e-12)


def test_gpt3_checkpoints_per_token(catalog):
    """DESIGN.md: GPT-3 175B keeps about 2.4 MB per token across its layers (96 x 12288 x 2 B)."""
    w = transformer_workload(catalog.models["gpt-3-175b"], precision="bf16", phase="train", batch=1, context=2048)
    assert w.checkpoint_bytes_per_token.sum() == 96 * 12288 * 2 == 2_359_296


def test_mixtral_fp8_weights_and_active_params(catalog):
    m = catalog.models["mixtral-8x7b"]
    w = transformer_workload(m, precision="fp8", phase="decode", batch=1, context=1024)
    # the blocks' linear layers at 1 byte, the embedding and the LM head at 2 (a quantized checkpoint keeps them bf16)
    edge = embedding_params(m) + head_params(m)  # (the head's row holds the final norm too)
    assert w.total_weight_bytes == pytest.approx((total_params(m) - edge) * 1.0 + edge * 2.0, rel=1e-12)
    # active per token: attention + 2 of 8 experts (12.9B total active per Jiang et al. 2024)
    active = w.active_params.sum() - w.params[0] + 0  # embedding rows are lookups, still counted in params
    assert 12.5e9 < w.active_params.sum() < 13.2e9, active


def test_flops_per_token_6n_rule(catalog):
    """Forward matmul FLOPs ~ 2 x non-embedding params (+ LM head)."""
    m = catalog.models["llama-3-8b"]
    w = transformer_workload(m, precision="bf16", phase="prefill", batch=1, context=1)
    non_emb = total_params(m) - m.vocab_size * m.d_model
    assert w.matmul_flop_per_token.sum() == pytest.approx(2 * non_emb, rel=1e-3)
    # attention: 4 x heads x head_dim x attended tokens per block; causal prefill attends (s+1)/2 on average
    w2 = transformer_workload(m, precision="bf16", phase="prefill", batch=1, context=4095)
    assert w2.attention_flop_per_token.sum() == pytest.approx(32 * 4 * 32 * 128 * 2048, rel=1e-12)


def test_fp8_training_keeps_16bit_weights(catalog):
    m = catalog.models["llama-3-8b"]
    w = transformer_workload(m, precision="fp8", phase="train", batch=1, context=128)
    assert np.allclose(w.weight_bytes, w.params * 2.0)


def test_to_frame_totals(catalog):
    w = transformer_workload(catalog.models["llama-2-13b"], precision="bf16", phase="decode", batch=2, context=512)
    df = w.to_frame()
    assert len(df) == 40 + 2
    assert df["params"].sum() == pytest.approx(w.total_params, rel=1e-12)
    assert df["kv_bytes_per_token"].sum() * 2 * 512 == pytest.approx(w.kv_cache_bytes, rel=1e-12)


def test_a_routed_mlp_keeps_its_tokens_permuted_copies(catalog):
    """audit32a F7: a routed MLP's expert GEMMs take the k permuted copies of each token, which the backward keeps for
    their weight gradients (Megatron-Core's token dispatcher). Mixtral-8x7B by hand, 16-bit activations (h 4,096, 32
    query and 8 KV heads of 128, top-2 of width 14,336, no dropout): attention 2 (h + h + (q + 2 kv) + q) = 36,864;
    MLP 2 (h + h + 2 h + 3 x 2 x 14,336) = 204,800. DeepSeek-V3's MoE layers keep 8 x 7,168 x 2 bytes more than its
    dense layers would with the same MLP width."""
    m = catalog.models["mixtral-8x7b"]
    h, q, kv, f = 4096, 4096, 1024, 14336
    attn = 2 * (h + h + (q + 2 * kv) + q)
    mlp = 2 * (h + h + 2 * h + 3 * 2 * f)
    assert block_activation_bytes_per_token(m, 2.0, layer=0) == attn + mlp
    d = catalog.models["deepseek-v3"]
    dense, moe = (block_activation_bytes_per_token(d, 2.0, layer=i) for i in (0, 3))
    assert moe - dense == 2 * 8 * 7168 + 2 * 3 * (8 * 2048 + 2048 - 18432)  # k copies; the widths a token uses differ
    # frozen experts (LoRA on the attention) keep no permuted copies (review32: Mixtral's LoRA activations +10%): the
    # MLP keeps its norm input and the activation function's inputs, 2 (h + 2 x 2 x 14,336)
    from wseplan.workload import frozen_mlp_bytes_per_token

    assert block_activation_bytes_per_token(m, 2.0, layer=0) - frozen_mlp_bytes_per_token(m, 2.0, layer=0) == \
        attn + 2 * (h + 2 * 2 * f)
