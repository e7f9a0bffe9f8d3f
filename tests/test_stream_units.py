"""Weight streaming buffers one streamed unit while the previous one computes: a dense block, or for an MoE block one
routed expert at a time after the rest of the block (before: two whole MoE layers, so DeepSeek-V3's 22.5 GB layers
needed 45 GB of buffer on a 41 GB wafer and no cluster could train it)."""
import numpy as np
import pytest

from wseplan.catalog import load_catalog
from wseplan.fit import resolve_model
from wseplan.timing import stream
from wseplan.workload import build_workload


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_deepseek_v3_moe_unit_is_the_block_without_its_routed_experts(cat):
    """Hand count from DeepSeek-V3's config (d 7,168; 128 heads; q_lora 1,536; kv_lora 512; rope 64; nope 128;
    v 128; 256 routed experts and 1 shared of width 2,048; 3 dense layers of width 18,432; vocabulary 129,280)."""
    w = build_workload(resolve_model("deepseek-v3", cat), cat, precision="bf16", phase="train", batch=1, context=4096)
    d, H = 7168, 128
    mla = (d * 1536 + 1536 * H * 192 + d * (512 + 64) + 512 * H * (128 + 128) + H * 128 * d)  # 187.1M
    one_expert = 3 * d * 2048  # gate, up, down: 44.0M
    rest = mla + one_expert + 256 * d  # attention + shared expert + router (norms and biases below 0.1%)
    moe_rows = w.stream_units[4:-1]  # rows: embedding, 3 dense blocks, 58 MoE blocks, head
    assert np.allclose(moe_rows, rest * 2, rtol=0.002)
    assert (w.weight_bytes[4:-1] > 40 * moe_rows).all()  # a whole MoE layer is ~96x its unit
    dense = mla + 3 * d * 18432
    assert w.stream_units[1:4] == pytest.approx(w.weight_bytes[1:4]) and w.stream_units[1] == pytest.approx(
        dense * 2, rel=0.002)
    # the largest unit is now the embedding (129,280 x 7,168 parameters)
    assert w.stream_units.max() == pytest.approx(129280 * d * 2, rel=1e-4)  # the head adds its final norm


def test_dense_models_stream_whole_blocks(cat):
    for name in ("gpt-3-175b", "llama-3-70b"):
        w = build_workload(resolve_model(name, cat), cat, precision="bf16", phase="train", batch=1, context=2048)
        assert np.array_equal(w.stream_units, w.weight_bytes)


def test_deepseek_v3_trains_on_cs3_and_is_weight_stream_bound(cat):
    """Fits on 4 CS-3 with 64 x 4,096 tokens; each system receives all 671B weights twice per step at 150 GB/s:
    2 x 671e9 x 2 B / 150e9 = 17.9 s, and the 37B active parameters leave the stream exposed."""
    r = stream("deepseek-v3", "cs3x4", batch=64, context=4096, catalog=cat)
    assert r.fits and r.bottleneck == "weight_stream"
    floor = 2 * 671e9 * 2 / 150e9
    assert floor * 0.99 <= r.step_s <= floor * 1.05
