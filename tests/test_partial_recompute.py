"""Partial activation recomputation (Megatron-LM ``--recompute-method block``): a number of whole layers of each
pipeline stage recomputed, the rest keeping their activations. The layout search takes the fewest layers that fit,
so a layout that does not fit without recomputation no longer has to pay a recomputed forward in every layer."""
from __future__ import annotations

import numpy as np
import pytest

from wseplan.plan import plan
from wseplan.timing import predict_time

# Llama 3 8B, bf16, 32,768-token sequences, one per GPU (tp 1, pp 1, dp 8, ZeRO-3) on 8 x H100 80 GB
LAY = {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "zero_stage": 3, "micro_batch": 1, "vpp": 1}
KW = dict(phase="train", batch=8, context=32768, precision="bf16")
# hand count of the activations a layer keeps per token (16-bit, flash attention, h 4,096, 32 heads of 128, 8 KV
# heads, gated MLP 14,336): attention 2 x (4,096 + 4,096 + 6,144 + 4,096) = 36,864 B; MLP 2 x (8,192 + 43,008) =
# 102,400 B; a fully recomputed layer keeps its 16-bit input, 2 x 4,096 = 8,192 B
KEPT, INPUT, LAYERS, TOKENS = 139_264.0, 8_192.0, 32, 32_768.0
# and the loss's fp32 logits of the sequence (Korthikanti et al. 2022 sec. 4.1): 32,768 x 128,256 x 4 B
LOGITS = TOKENS * 128_256 * 4.0


def test_partial_recompute_takes_the_fewest_layers_that_fit():
    none = plan("llama-3-8b", "h100x8", layout=dict(LAY, recompute="none"), **KW)
    part = plan("llama-3-8b", "h100x8", layout=dict(LAY, recompute="partial"), **KW)
    full = plan("llama-3-8b", "h100x8", layout=dict(LAY, recompute="full"), **KW)
    assert not none.fits and part.fits and full.fits
    k = part.layout["recompute_layers"]
    assert 0 < k < LAYERS and part.layout["recompute"] == "partial"
    # per GPU: k layers keep their input, the rest their activations, and the layer being recomputed its activations
    assert part.activation_bytes / 8 == pytest.approx(((LAYERS - k) * KEPT + k * INPUT + KEPT) * TOKENS + LOGITS,
                                                      rel=1e-12)
    assert none.activation_bytes / 8 == pytest.approx(LAYERS * KEPT * TOKENS + LOGITS, rel=1e-12)
    # the fewest: one layer fewer recomputed would not fit
    assert part.per_device_bytes <= part.capacity_bytes < part.per_device_bytes + (KEPT - INPUT) * TOKENS


def test_partial_recompute_pays_the_recomputed_forward_of_its_layers_only():
    t = {rc: predict_time("llama-3-8b", "h100x8", layout=dict(LAY, recompute=rc), require_fit=False, **KW).step_s
         for rc in ("none", "partial", "full")}
    k = plan("llama-3-8b", "h100x8", layout=dict(LAY, recompute="partial"), **KW).layout["recompute_layers"]
    assert t["none"] < t["partial"] < t["full"]
    # one node, nothing exposed: the step is linear in the share of layers recomputed
    assert t["partial"] == pytest.approx(t["none"] + k / LAYERS * (t["full"] - t["none"]), rel=1e-9)


def test_the_search_finds_partial_recompute_where_it_beats_full():
    """Llama 3.1 405B at Megatron-Bridge's GB200 layout (tp 4, pp 16, vpp 4, 256 GPUs, batch 1,536 x 8,192, fp8):
    without recomputation it does not fit; recomputing one layer per stage is faster than recomputing all."""
    lay = {"tp": 4, "pp": 16, "dp": 4, "vpp": 4, "cp": 1}
    kw = dict(phase="train", batch=1536, context=8192, precision="fp8")
    searched = plan("llama-3.1-405b", "gb200x256", layout=lay, **kw)
    full = plan("llama-3.1-405b", "gb200x256", layout=dict(lay, recompute="full"), **kw)
    none = plan("llama-3.1-405b", "gb200x256", layout=dict(lay, recompute="none", zero_stage=searched.layout["zero_stage"]),
                **kw)
    assert searched.fits and not none.fits
    assert searched.layout["recompute"] == "partial" and searched.layout["recompute_layers"] >= 1
    assert searched.step_s < full.step_s


def test_partial_that_needs_no_layer_is_none_and_the_search_keeps_none():
    """Where the layout fits without recomputation, partial recomputes no layer (the same step as none) and the
    search, on a tie, keeps none (the earlier code)."""
    kw = dict(phase="train", batch=64, context=4096, precision="bf16")
    lay = {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "zero_stage": 3, "micro_batch": 1, "vpp": 1}
    a = plan("llama-3-8b", "h100x8", layout=dict(lay, recompute="partial"), **kw)
    b = plan("llama-3-8b", "h100x8", layout=dict(lay, recompute="none"), **kw)
    assert a.layout["recompute_layers"] == 0 and a.step_s == pytest.approx(b.step_s, rel=1e-12)
    s = plan("llama-3-8b", "h100x8", layout=lay, **kw)
    assert s.layout["recompute"] != "partial"
    assert np.isfinite(s.step_s)

