"""How an inference pass runs its routed experts over a tensor-parallel group (wseplan.analytic.gpu_gemm): split like
the other weights, or whole experts over the group with the slowest GPU deciding; checked against a Monte Carlo draw
of a balanced router, Blom's order-statistic table and hand calculations of the bytes each layout moves."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wseplan.analytic import gpu_gemm as GG
from wseplan.analytic.moe_train import normal_max_factor, routed_rows, routed_rows_slowest
from wseplan.calibration_data import gpu_calibration
from wseplan.timing import predict_time
from wseplan.workload import block_types, resolve_model


def _moe_block(m):
    return next(b for b in block_types(m) if b.moe)


def test_normal_max_factor_matches_the_exact_expected_maxima():
    # expected largest of n standard normals (Harter 1961 tables): 0.5642 (2), 1.0294 (4), 1.4236 (8), 1.7660 (16)
    exact = {1: 0.0, 2: 0.5642, 4: 1.0294, 8: 1.4236, 16: 1.7660}
    for n, v in exact.items():
        assert normal_max_factor(float(n)) == pytest.approx(v, abs=0.03)
    arr = normal_max_factor(np.array([1.0, 2.0, 8.0]))
    assert arr.tolist() == [normal_max_factor(1.0), normal_max_factor(2.0), normal_max_factor(8.0)]


@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_slowest_gpu_matches_a_monte_carlo_router(tokens):
    """128 experts, top-8, 8 GPUs of 16 experts: every token draws 8 distinct experts uniformly (a balanced router);
    the slowest GPU's distinct experts and routed rows, averaged over 3,000 draws, within 6% of the closed form."""
    E, k, g = 128, 8, 8
    rng = np.random.default_rng(7)
    most_experts, most_rows = [], []
    for _ in range(3000):
        picks = np.argsort(rng.random((tokens, E)), axis=1)[:, :k].ravel()
        gpu = picks // (E // g)
        most_rows.append(np.bincount(gpu, minlength=g).max())
        most_experts.append(max(len(np.unique(picks[gpu == i])) for i in range(g)))
    experts, rows = routed_rows_slowest(float(tokens), E, k, g)
    assert experts == pytest.approx(np.mean(most_experts), rel=0.06)
    assert rows == pytest.approx(np.mean(most_rows), rel=0.06)


def test_one_gpu_is_the_expectation():
    assert routed_rows_slowest(37.0, 64, 6, 1.0) == pytest.approx(
        (routed_rows(37.0, 64, 6)[0], 37.0 * 6), rel=1e-12)


def test_routed_activation_bytes_are_those_of_tokens_times_k(catalog):
    """Memory time only (infinite FLOP rate): one GPU, a pass of T tokens that touches every expert of Qwen3-30B-A3B's
    MoE block, each routed GEMM reading its E expert matrices and the T x k rows' inputs and outputs once."""
    m = resolve_model("qwen3-30b-a3b", catalog)
    b = _moe_block(m)
    cal = gpu_calibration()
    T = 1e6
    t, _ = GG.block_gemms_s(b, T, 1.0, math.inf, 1.0, "bf16", cal)
    want = 0.0
    for g in b.gemms:
        rows = T * g.active if g.num_experts > 1 else T
        want += g.n * g.k * 2.0 * g.num_experts + 2.0 * rows * (g.n + g.k)
    assert float(t) == pytest.approx(want, rel=1e-9)


def test_whole_experts_move_fewer_activation_bytes_at_large_batches(catalog):
    """At a batch that touches every expert on every GPU, both layouts read the same weights (1 / g of them each);
    the split one reads each routed row's whole input for 1 / g of the outputs: T k (N/g + K) elements per routed
    GEMM against about T k (N + K) / g whole. Memory time only, one routed GEMM pair of Qwen3-235B-A22B over 8 GPUs."""
    m = resolve_model("qwen3-235b-a22b", catalog)
    b = _moe_block(m)
    cal = gpu_calibration()
    g, T = 8.0, 4e6
    split, _ = GG.block_gemms_s(b, T, g, math.inf, 1.0, "bf16", cal, expert_layout="tp")
    whole, _ = GG.block_gemms_s(b, T, g, math.inf, 1.0, "bf16", cal, expert_layout="ep")
    best, _ = GG.block_gemms_s(b, T, g, math.inf, 1.0, "bf16", cal, expert_layout="best")
    dense = sum(GG.block_gemm_shapes(b, g)[i][0] * GG.block_gemm_shapes(b, g)[i][1] * 2.0 + 2.0 * T * sum(
        GG.block_gemm_shapes(b, g)[i][:2]) for i, x in enumerate(b.gemms) if x.num_experts == 1)
    routed = [x for x in b.gemms if x.num_experts > 1]
    weights = sum(x.n * x.k * x.num_experts / g * 2.0 for x in routed)
    want_split = weights + sum(2.0 * T * x.active * ((x.n / g if x.tp_split == "n" else x.n) +
                                                     (x.k / g if x.tp_split == "k" else x.k)) for x in routed)
    want_whole = weights + sum(2.0 * T * x.active / g * (x.n + x.k) for x in routed)
    assert float(split) - dense == pytest.approx(want_split, rel=1e-9)
    assert float(whole) - dense == pytest.approx(want_whole, rel=2e-3)  # the slowest GPU's excess rows: ~0.1%
    assert float(best) == float(whole) < float(split)


def test_small_batches_keep_the_split_layout(catalog):
    """At one token the slowest of 8 GPUs holds ~2.4 of the 8 experts picked (a split GPU reads 1/8 of each of the 8):
    the whole-expert layout reads ~2.4x the routed weights, so the pass keeps the split one."""
    m = resolve_model("qwen3-235b-a22b", catalog)
    b = _moe_block(m)
    cal = gpu_calibration()
    kw = dict(peak_flop_per_s=1e15, hbm_bytes_per_s=4e12, precision="fp8", cal=cal)
    split, _ = GG.block_gemms_s(b, 1.0, 8.0, expert_layout="tp", **kw)
    whole, _ = GG.block_gemms_s(b, 1.0, 8.0, expert_layout="ep", **kw)
    best, _ = GG.block_gemms_s(b, 1.0, 8.0, expert_layout="best", **kw)
    assert best == split < whole
    # one GPU: the two layouts are one
    one = [GG.block_gemms_s(b, 300.0, 1.0, expert_layout=lay, **kw)[0] for lay in ("tp", "ep", "best")]
    assert one[0] == pytest.approx(one[1], rel=1e-12) and one[2] == pytest.approx(one[0], rel=1e-12)


def test_serving_throughput_gains_from_whole_experts_at_large_batch(catalog, monkeypatch):
    """The engine's pass takes the faster layout: a large decode batch of Qwen3-235B-A22B on 8 H200 is faster than the
    split layout alone would make it, batch 1 is unchanged (its pass keeps the split layout)."""
    import wseplan.analytic.gpu_pass as gp

    kw = dict(phase="decode", context=2048, precision="fp8", catalog=catalog)
    fast = {b: predict_time("qwen3-235b-a22b", "h200x8", batch=b, **kw).tpot_s for b in (1, 256)}
    orig = GG.block_gemms_s
    monkeypatch.setattr(gp, "block_gemms_s", lambda *a, **k: orig(*a, **dict(k, expert_layout="tp")))
    slow = {b: predict_time("qwen3-235b-a22b", "h200x8", batch=b, **kw).tpot_s for b in (1, 256)}
    assert fast[1] == pytest.approx(slow[1], rel=1e-12)
    assert fast[256] < slow[256]


@pytest.mark.parametrize("model,target,precision,batch", [("deepseek-v3", "h200x8", "fp8", 64),
                                                          ("qwen3-235b-a22b", "h200x8", "fp8", 8)])
def test_an_engine_runs_one_expert_layout_for_all_its_passes(catalog, monkeypatch, model, target, precision, batch):
    """A serving answer's prefill and decode passes share the engine's one expert layout: the answer is one of the two
    single-layout answers (the one whose plain decode step is shorter), never a mix faster than both (review35 M1: a
    layout per pass was 1.4-3.5% faster than the better single one); a prefill of the same configuration takes the
    same layout (its time to first token is the serving request's at one request)."""
    from wseplan.devices.gpu import GpuFamily

    kw = dict(phase="serve", batch=batch, context=4096, output_tokens=512, precision=precision, catalog=catalog)
    both = predict_time(model, target, **kw)
    alone = {}
    for lay in ("tp", "ep"):
        monkeypatch.setattr(GpuFamily, "engine_variants", lambda self, ctx, cfg, lay=lay: ("expert_layout", (lay,)))
        alone[lay] = predict_time(model, target, **kw)
    assert any(both.step_s == r.step_s and both.tpot_s == r.tpot_s and both.ttft_s == r.ttft_s for r in alone.values())
    assert both.step_s >= min(r.step_s for r in alone.values())
    assert alone["tp"].step_s != alone["ep"].step_s  # the two layouts differ here


def test_the_record_names_the_expert_layout(catalog):
    """A configuration that runs whole experts over its TP group says so in its layout (expert_parallel = the TP
    degree); one that splits them shows no expert_parallel."""
    from wseplan.plan import plan

    kw = dict(phase="decode", context=2048, precision="fp8", catalog=catalog)
    big = plan("qwen3-235b-a22b", "h200x8", batch=256, layout={"tp": 8, "pp": 1, "dp": 1}, **kw)
    one = plan("qwen3-235b-a22b", "h200x8", batch=1, layout={"tp": 8, "pp": 1, "dp": 1}, **kw)
    assert big.layout["expert_parallel"] == 8 and "expert_parallel" not in one.layout
    dense = plan("llama-3.1-70b", "h200x8", batch=256, **kw)
    assert "expert_parallel" not in dense.layout
