"""Wafer time (wseplan/analytic/wse_time.py): inference closed forms, the public WSE validation rows, dispatch."""
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.analytic import fabric as F
from wseplan.analytic import wse_time as W
from wseplan.catalog import load_catalog
from wseplan.errors import InputError
from wseplan.timing import predict_time

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = [ROOT / "catalogs/validation/validation-public.csv"]
MODELS = {"LLaMA3-8B": "llama-3-8b", "LLaMA2-13B": "llama-2-13b"}


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _grid(notes, key):
    m = re.search(rf"\b{key}=(\d+)x(\d+)", notes)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _wse_rows():
    import pandas as pd

    path = next((p for p in CANDIDATES if p.is_file()), None)
    if path is None:
        pytest.skip("validation-public.csv not available")
    df = pd.read_csv(path)
    return df[df.hardware == "wse2"]


def _predict_row(r, cat):
    """Predict one public WSE-2 row from its columns and wse_core_grid hints (the rule validate applies)."""
    if r.metric == "latency_ms":
        k = int(re.search(r"\[1,(\d+)K\]", r.model).group(1)) * 1024
        return W.gemv_latency_s(k=k, n=k, wafer=cat.wafers["wse2"], precision=r.precision) * 1e3
    opts = {}
    if _grid(r.notes, "wse_core_grid"):
        opts["core_grid"] = _grid(r.notes, "wse_core_grid")
    if _grid(r.notes, "wse_core_grid_prefill"):
        opts["core_grid_prefill"] = _grid(r.notes, "wse_core_grid_prefill")
        opts["core_grid_decode"] = _grid(r.notes, "wse_core_grid_decode")
    phase = {"e2e-infer": "e2e"}.get(r.phase, r.phase)
    res = predict_time(MODELS[r.model], "wse2", phase=phase, precision=r.precision, batch=int(r.concurrency),
                       context=int(r.input_len), output_tokens=int(r.output_len) if phase == "e2e" else None,
                       catalog=cat, software="wafer-research", **opts)
    if r.metric == "tokens_per_s_per_user":  # e2e rows: output tokens over the whole request
        return r.output_len / res.request_s if phase == "e2e" else res.tokens_per_s_per_user
    return r.input_len / res.ttft_s


def test_public_wse_rows_within_bounds(cat):
    """Targets of the brief: median |rel_error| <= 10% on wse-infer time rows, Llama-3-8B rows and GEMV within 2x."""
    rows = _wse_rows()
    timed = rows[rows.metric.isin(["tokens_per_s_per_user", "prefill_tokens_per_s", "latency_ms"])]
    errs = {}
    for r in timed.itertuples():
        errs[r.id] = (r, _predict_row(r, cat) / r.value - 1.0)
    infer = [e for r, e in errs.values() if r.category == "wse-infer"]
    assert len(infer) >= 20
    assert np.median(np.abs(infer)) <= 0.10
    for r, e in errs.values():
        if r.model == "LLaMA3-8B" or r.category == "micro":
            assert 0.5 <= 1 + e <= 2.0, (r.id, e)


def test_decode_block_parts_hand(cat):
    """One decode block = six GEMVs (QKV, scores, context, O, up+gate, down) + three line all-reduces."""
    m = cat.models["llama-3-8b"]
    w = cat.wafers["wse2"]
    c = F.load_fabric_constants()
    fk = F.wafer_fabric_kwargs(w, "fp16", c)
    parts = W.decode_block_cycles(arch=m, batch=1, context=4096, rows=420, cols=420, fk=fk, gemv_mac_efficiency_frac=1.0)
    q, kv, d, ff = 4096, 1024, 4096, 14336
    mats = [(4096, q + 2 * kv), (q, 4096), (4096, q), (q, d), (d, 2 * ff), (ff, d)]
    want = sum(float(F.gemv_cycles(k=k, n=n, rows=420, cols=420, mac_efficiency_frac=1.0, **fk)) for k, n in mats)
    lk = dict(length_pes=420, link_bytes_per_cycle=4.0, wavelet_bytes=4.0, hop_latency_cycles=1.0)
    # the statistic's reduction uses the simulator-fitted constants; the broadcast of the result holds one of
    # WSE-2's 21 free colours, so the tree may use 20 levels (a 420-PE line needs 9)
    rk = {k: fk[k] for k in ("reduce_stage_cycles", "tree_level_cycles", "tree_level_overlap_frac", "tree_model")}
    assert fk["num_colors"] == 21 and fk["tree_model"] == "critical_path"
    for nbytes in (4.0, 4.0, 8.0 * 32):
        want += fk["per_kernel_overhead_cycles"] + float(F.line_reduce_cycles(message_bytes=nbytes, ramp_latency_cycles=2.0,
                                                                             max_tree_levels=20, **rk, **lk)) \
            + float(F.line_broadcast_cycles(message_bytes=nbytes, **lk))
    assert sum(float(v) for v in parts.values()) == pytest.approx(want, rel=1e-9)


def test_e2e_is_ttft_plus_decode(cat):
    r = predict_time("llama-3-8b", "wse2", phase="e2e", precision="fp16", batch=1, context=2048, output_tokens=128,
                     catalog=cat, software="wafer-research", core_grid_prefill=(660, 660), core_grid_decode=(360, 360))
    assert r.request_s == pytest.approx(r.ttft_s + 127 * r.tpot_s, rel=1e-12)  # the first token comes with the prefill
    assert r.tokens_per_s_per_user == pytest.approx(1 / r.tpot_s, rel=1e-12)
    p = predict_time("llama-3-8b", "wse2", phase="prefill", precision="fp16", batch=1, context=2048, catalog=cat, software="wafer-research",
                     core_grid=(660, 660))
    assert p.ttft_s == pytest.approx(r.ttft_s, rel=1e-12)
    assert 0.0 <= r.model_flop_utilization_frac <= 1.0
    assert r.layout["core_grid_prefill"] == "660x660" and r.layout["core_grid_decode"] == "360x360"


def test_decode_grid_trend_matches_measurement(cat):
    """WaferLLM Table 4: decode slows as the region grows (420 > 540 > 660 tok/s); prefill speeds up (Table 3)."""
    dec = [predict_time("llama-3-8b", "wse2", phase="decode", precision="fp16", context=4096, catalog=cat, software="wafer-research",
                        core_grid=(s, s)).tokens_per_s_per_user for s in (420, 540, 660)]
    assert dec[0] > dec[1] > dec[2]
    pre = [predict_time("llama-3-8b", "wse2", phase="prefill", precision="fp16", context=4096, catalog=cat, software="wafer-research",
                        core_grid=(s, s)).tokens_per_s for s in (480, 600, 720)]
    assert pre[0] < pre[1] < pre[2]


def test_multi_wafer_pipeline_in_flight_batches(cat):
    one = predict_time("llama-3.1-70b", "cs3x4", phase="decode", precision="fp16", batch=1, context=4096, catalog=cat, software="wafer-research")
    many = predict_time("llama-3.1-70b", "cs3x4", phase="decode", precision="fp16", batch=8, context=4096, catalog=cat, software="wafer-research")
    assert one.num_devices == 4 and many.num_devices == 4
    assert many.tokens_per_s > 4 * one.tokens_per_s  # micro-batches fill the pipeline stages
    assert many.tokens_per_s_per_user <= one.tokens_per_s_per_user
    assert one.breakdown_s["cross_region_link"] > 0  # hand-overs between regions and wafers


def test_default_grid_is_feasible_and_fast(cat):
    """Without core_grid the mapping picks the square region that minimises latency among those that fit."""
    r = predict_time("llama-3-8b", "wse3", phase="decode", precision="fp16", context=4096, catalog=cat, software="wafer-research")
    side = int(r.layout["core_grid_decode"].split("x")[0])
    w = cat.wafers["wse3"]
    assert side <= min(w.pe_rows.si, w.pe_cols.si)
    fixed = predict_time("llama-3-8b", "wse3", phase="decode", precision="fp16", context=4096, catalog=cat, software="wafer-research",
                         core_grid=(700, 700))
    assert r.tpot_s <= fixed.tpot_s


def test_train_dispatches_to_stream(cat):
    r = predict_time("llama-3-8b", "cs3x4", phase="train", precision="bf16", batch=256, context=2048, catalog=cat)
    assert r.phase == "train" and r.num_devices == 4
    assert r.tokens_per_s == pytest.approx(256 * 2048 / r.step_s)
    assert r.layout["activation_policy"] in ("store", "checkpoint", "recompute", "spill")


def test_errors(cat):
    with pytest.raises(InputError):  # serving needs generated tokens: 0 is not a request
        predict_time("llama-3-8b", "wse2", phase="e2e", precision="fp16", context=128, output_tokens=0, catalog=cat,
                     batch=0)
    with pytest.raises(InputError):
        predict_time("llama-3-8b", "wse2", phase="think", precision="fp16", context=128, catalog=cat)
    with pytest.raises(InputError):
        predict_time("llama-3-8b", "wse2", phase="decode", precision="fp16", context=128, catalog=cat, core_grid="9999x9")
    with pytest.raises(InputError):
        predict_time("llama-3-8b", "wse2", phase="decode", precision="fp16", context=128, catalog=cat, core_grid="axb")
    with pytest.raises(InputError):
        predict_time("llama-3-8b", "wse2", phase="decode", precision="fp16", context=128, catalog=cat, tensor_parallel=2)


@settings(max_examples=25, deadline=None)
@given(side=st.integers(min_value=64, max_value=700), ctx=st.integers(min_value=1, max_value=16384),
       k=st.floats(min_value=1.1, max_value=8.0))
def test_decode_block_never_slower_with_faster_hardware(side, ctx, k):
    cat = load_catalog()
    m = cat.models["llama-2-13b"]
    fk = F.wafer_fabric_kwargs(cat.wafers["wse2"], "fp16", F.load_fabric_constants())
    def total(**over):
        parts = W.decode_block_cycles(arch=m, batch=1, context=ctx, rows=side, cols=side, fk=dict(fk, **over),
                                      gemv_mac_efficiency_frac=1.0)
        return sum(float(v) for v in parts.values())
    t0 = total()
    for key in ("flop_per_cycle", "sram_bytes_per_cycle", "link_bytes_per_cycle"):
        assert total(**{key: fk[key] * k}) <= t0 * (1 + 1e-12)
    assert total(hop_latency_cycles=fk["hop_latency_cycles"] / k) <= t0 * (1 + 1e-12)


def test_default_region_holds_one_layer(cat):
    """Llama-3.1-70B on 4 CS-3: the chosen region's SRAM holds a whole block (weights + KV) and the layer groups
    of each wafer fit in the regions that tile it."""
    from wseplan.workload import block_params

    r = predict_time("llama-3.1-70b", "cs3x4", phase="decode", precision="fp16", context=2048, catalog=cat, software="wafer-research")
    rows, cols = (int(v) for v in r.layout["core_grid_decode"].split("x"))  # a square or a rectangle
    w = cat.wafers["wse3"]
    m = cat.models["llama-3.1-70b"]
    block = block_params(m)[0] * 2 + 2 * m.num_kv_heads * m.head_dim_ * 2 * 2048
    cap = rows * cols * w.sram_per_pe_bytes.si * (1 - cat.defaults.wafer_sram_reserve_frac.si)
    assert cap >= block
    regions = (int(w.pe_rows.si) // rows) * (int(w.pe_cols.si) // cols)
    assert r.layout["pipeline_stages_decode"] <= 4 * regions
    assert not r.notes


def test_decode_layer_floor(cat):
    """The floor is the overhead + latency part of a block: below the block time, growing with the region side,
    and untouched by faster PEs (hand check: 9 kernels x the per-kernel overhead is part of it)."""
    m, w = cat.models["llama-3-8b"], cat.wafers["wse2"]
    c = F.load_fabric_constants()
    f420 = W.decode_layer_floor_s(m, w, rows=420, cols=420)
    f660 = W.decode_layer_floor_s(m, w, rows=660, cols=660)
    assert f660 > f420 > 9 * c.per_kernel_overhead_cycles.si / w.clock_hz.si
    fk = F.wafer_fabric_kwargs(w, "fp16", c)
    parts = W.decode_block_cycles(arch=m, batch=1, context=1, rows=420, cols=420, fk=fk, gemv_mac_efficiency_frac=1.0)
    assert f420 < sum(float(v) for v in parts.values()) / w.clock_hz.si
    fast = W.decode_block_cycles(arch=m, batch=1, context=1, rows=420, cols=420,
                                 fk=dict(fk, flop_per_cycle=64.0, sram_bytes_per_cycle=192.0), gemv_mac_efficiency_frac=1.0)
    assert float(fast["overhead"] + fast["latency"]) / w.clock_hz.si == pytest.approx(f420, rel=1e-12)


def test_decode_with_output_tokens_is_a_whole_request(cat):
    kw = dict(precision="fp16", batch=1, context=2048, output_tokens=256, catalog=cat, core_grid=(420, 420))
    d = predict_time("llama-3-8b", "wse2", phase="decode", **kw)
    e = predict_time("llama-3-8b", "wse2", phase="e2e", **kw)
    assert d.phase == "serve" and e.phase == "serve"  # decode with output tokens is a whole request
    assert d.step_s == pytest.approx(e.step_s, rel=1e-12)
    assert d.request_s == pytest.approx(d.ttft_s + 255 * d.tpot_s, rel=1e-12)
    one = predict_time("llama-3-8b", "wse2", phase="decode", precision="fp16", batch=1, context=2048 + 128,
                       catalog=cat, core_grid=(420, 420))
    # decode at the mean KV length 2048 + 256 / 2 (one request: no other prompt rides on its steps); the request's
    # layer groups are sized for its final KV cache
    assert d.tpot_s == pytest.approx(one.tpot_s, rel=0.03) and d.tpot_s >= one.tpot_s


def test_serving_versus_concurrency(cat):
    """More requests in flight fill the 4-wafer pipeline (replica throughput rises) and each waits for the others. (The
    decode region is the one of the shortest request: at one request it may trade a little speed per token for a
    shorter prompt, 585 x 755 PEs at 1,558 tokens/s per user against 1,576 at four requests on 390 x 377.)"""
    from wseplan.plan import plan

    rs = [plan("llama-3.1-70b", "cs3x4", phase="serve", batch=b, context=2048, output_tokens=256, catalog=cat)
          for b in (1, 4, 16)]
    tps = [r.tokens_per_s for r in rs]
    per_user = [r.tokens_per_s_per_user for r in rs]
    assert tps == sorted(tps) and per_user[0] > 0.98 * per_user[1] and per_user[1] > per_user[2]


# ------------------------------------------------------------------ simulator fit, colour limit, measurement refit
def test_wse_time_uses_sim_fit_and_colour_limit(cat):
    """The kernel constants of fabric.yaml declare they were fitted on top of fabric_sim_fit.yaml, so the wafer
    kwargs carry the simulator-fitted constants and the catalog colour limit (WSE-3: 6 free colours)."""
    c = F.load_fabric_constants()
    assert c.fabric_model == "sim_fit"
    sim = F.load_fabric_sim_fit()
    for key in ("wse2", "wse3"):
        w = cat.wafers[key]
        fk = F.wafer_fabric_kwargs(w, "fp16", c)
        sec = next(s for s in sim.targets.values() if s.wafer == w.name)
        for name in F.SIM_FIT_NAMES:
            assert fk[name] == getattr(sec.constants, name).si
        assert fk["tree_model"] == sec.tree_model
        assert fk["num_colors"] == w.free_routing_colors.si
    assert F.wafer_fabric_kwargs(cat.wafers["wse3"], "fp16", c)["num_colors"] == 6
    # explicit choice wins; bare call = the closed forms as written
    assert F.wafer_fabric_kwargs(cat.wafers["wse2"], "fp16", c, use_sim_fit=False)["num_colors"] == np.inf


def test_colour_limit_takes_the_ktree_on_wse3(cat):
    """WSE-3: the input broadcast holds one of 6 colours, so a binary reduction tree may have 5 levels (32 PEs); on a
    600-PE column (10 levels) the GEMV reduction is WaferLLM's two-level K-tree (4 colours): hand form
    (L-1) h + ((r-1) + (ceil(L/r)-1)) (ramp + c) + M a with r = ceil(sqrt L) = 25, i.e. 24 + 23 stages (600 = 24 x 25:
    every segment full)."""
    c = F.load_fabric_constants()
    w = cat.wafers["wse3"]
    fk = F.wafer_fabric_kwargs(w, "fp16", c)
    g = dict(k=4096, n=4096, rows=600, cols=600, mac_efficiency_frac=1.0)
    limited = float(F.gemv_cycles(**g, **fk))
    free = float(F.gemv_cycles(**g, **dict(fk, num_colors=np.inf)))
    chain = float(F.gemv_cycles(**g, **dict(fk, reduce_algo="chain")))
    assert free < limited < chain
    # the reduction part by hand: nt = ceil(4096/600) = 7 fp16 values = 4 wavelets, a = max(1, 2 * t_mac)
    tm = max(2 / w.flop_per_cycle_per_pe["fp16"].si, 3 * 2 / w.sram_bytes_per_cycle_per_pe.si)
    a = max(1.0, 2 * tm)
    hand = 599 * 1.0 + (24 + 23) * (2.0 + fk["reduce_stage_cycles"]) + 4 * a
    red = float(F.line_reduce_cycles(length_pes=600, message_bytes=7 * 2, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0,
                                     ramp_latency_cycles=2.0, add_cycles_per_wavelet=2 * tm, algo="best",
                                     reduce_stage_cycles=fk["reduce_stage_cycles"], tree_level_cycles=fk["tree_level_cycles"],
                                     tree_level_overlap_frac=fk["tree_level_overlap_frac"], max_tree_levels=5,
                                     tree_model=fk["tree_model"]))
    assert red == pytest.approx(hand, rel=1e-12)
    # and the decode model sees it: a WSE-3 decode block on 600 x 600 is slower with the limit than without
    m = cat.models["llama-3-8b"]
    lim = W.decode_block_cycles(arch=m, batch=1, context=4096, rows=600, cols=600, fk=fk, gemv_mac_efficiency_frac=1.0)
    unl = W.decode_block_cycles(arch=m, batch=1, context=4096, rows=600, cols=600, fk=dict(fk, num_colors=np.inf),
                                gemv_mac_efficiency_frac=1.0)
    assert sum(float(v) for v in lim.values()) > sum(float(v) for v in unl.values())


@pytest.mark.parametrize("L,colors", [(39, 5), (69, 6), (78, 6), (100, 6), (152, 6), (256, 6), (377, 6), (500, 6),
                                      (755, 6), (1170, 6)])
def test_ktree_closed_form_tracks_the_simulator(cat, L, colors):
    """The closed-form K-tree (line_reduce_cycles, best) within 3% of the mesh simulator's reduction on WSE-3 lines
    that cannot hold a binary tree, square and not (a partial last segment), short and long messages; and both
    count the same colours."""
    from wseplan.analytic import fabric_kernels as K
    from wseplan.sim import reduce
    from wseplan.sim import _fabric as fb
    from wseplan.sim.catalog_params import mesh_params_from_catalog

    w = cat.wafers["wse3"]
    fk = F.wafer_fabric_kwargs(w, "fp16", F.load_fabric_constants())
    p = mesh_params_from_catalog(w, num_colors=colors)
    for nbytes in (4, 64, 1024, 4096):
        res = reduce(p, nbytes=nbytes, region=(1, L), axis="row")
        assert res.fits
        sim = res.cycles
        cf = float(F.line_reduce_cycles(length_pes=L, message_bytes=nbytes, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0,
                                        ramp_latency_cycles=2.0, add_cycles_per_wavelet=2 * max(1 / 16, 2 / 24),
                                        reduce_stage_cycles=fk["reduce_stage_cycles"], tree_level_cycles=fk["tree_level_cycles"],
                                        tree_level_overlap_frac=fk["tree_level_overlap_frac"], max_tree_levels=colors,
                                        tree_model=fk["tree_model"]))
        assert cf == pytest.approx(sim, rel=0.03)
        kt = float(F.line_reduce_cycles(length_pes=L, message_bytes=nbytes, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0,
                                        ramp_latency_cycles=2.0, add_cycles_per_wavelet=2 * max(1 / 16, 2 / 24),
                                        reduce_stage_cycles=fk["reduce_stage_cycles"], algo="ktree"))
        assert kt == cf  # the choice is the K-tree
    assert all(float(K.ktree_colors(n)) == fb.ktree_colors(n) for n in range(1, 1300))


def test_measurement_refit_reproduces_fabric_yaml(tmp_path):
    """fit_wse_overheads rewrites catalogs/calibration/fabric.yaml byte for byte (deterministic scipy fit from
    the documented start, fitted rows and residuals recorded) and fits only the measurement-level constants."""
    from wseplan.analytic import wse_fit as WF

    src = ROOT / "catalogs/calibration/fabric.yaml"
    if not (ROOT / "catalogs/validation/validation-public.csv").is_file():
        pytest.skip("validation-public.csv not available")
    p = tmp_path / "fabric.yaml"
    p.write_bytes(src.read_bytes())
    res = WF.fit_wse_overheads(path=p)
    assert p.read_bytes() == src.read_bytes(), "fabric.yaml is stale; rerun wseplan.analytic.wse_fit.fit_wse_overheads()"
    assert set(WF.FIT_BOUNDS) | set(WF.FIXED) == {"per_kernel_overhead_cycles", "gemv_mac_efficiency_frac",
                                                  "gemm_mac_efficiency_frac", "gemm_step_overhead_cycles"}
    rec = res.record
    assert rec.in_sample.median_abs_rel_error <= 0.10 and set(rec.leave_one_model_out) == {"LLaMA3-8B", "LLaMA2-13B"}
    assert all(r.startswith("R") for r in rec.in_sample.rows) and len(rec.in_sample.rows) == len(rec.residuals) >= 20


def test_fit_predictions_equal_validate(cat):
    """The fit predicts each row exactly as `wseplan validate` does (same hints, same metric conversion)."""
    from wseplan.analytic import wse_fit as WF
    from wseplan.validate import default_cases_path, predict_case, read_cases

    if not default_cases_path().is_file():
        pytest.skip("validation-public.csv not available")
    c = F.load_fabric_constants()
    rows = WF.fit_rows(WF.bundled_cases())
    assert {r.category for r in rows} == {"wse-infer", "micro"} and {r.quality for r in rows} <= {"strong", "medium"}
    assert all(r.phase == "kernel" and r.hardware.startswith("wse") for r in rows if r.category == "micro")
    ids = {r.id for r in rows}
    assert "R731" in ids and not {"R358", "R362"} & ids  # GEMM rows fitted; GEMV rows check the held GEMV efficiency
    for r in rows:
        assert WF.predict_row(r, cat, c) == pytest.approx(predict_case(r, cat), rel=1e-12)


def test_gemm_latency_by_hand(cat):
    """gemm_latency_s against a hand count of the shift GEMM (fabric.gemm_cycles' formula) for the SGEMM of
    Miyajima et al. (J. Inf. Process. 34, 2026): fp32 33,000^2 on 750 x 750 WSE-2 PEs, tiles 44 x 44 x 44, one fp32 MAC
    per cycle at full rate (2 FLOP/cycle; 3 x 4 B / 24 B per cycle of SRAM = 0.5 cycle, so the FLOP limit binds),
    750 steps each max(compute, shift) plus the step overhead, one kernel overhead, 1.1 GHz."""
    c = F.load_fabric_constants()
    w = cat.wafers["wse2"]
    eff, step, pko = c.gemm_mac_efficiency_frac.si, c.gemm_step_overhead_cycles.si, c.per_kernel_overhead_cycles.si
    compute = 44 * 44 * 44 * 1.0 / eff
    shift = 2 * (1 + 2) + 44 * 44 * 4 / 4  # two hops (hop 1 + ramp 2 cycles each) + the tile's 4-byte wavelets
    hand = (pko + 750 * (step + max(compute, shift))) / 1.1e9
    got = F.gemm_latency_s(m=33000, k=33000, n=33000, region_rows=750, region_cols=750, wafer=w, precision="fp32")
    assert got == pytest.approx(hand, rel=1e-9)
    with pytest.raises(InputError, match="k: must be a positive integer"):
        F.gemm_latency_s(m=1, k=0, n=1, wafer=w)


def test_kernel_shape_parses_gemv_and_gemm():
    from wseplan.validate.common import kernel_shape

    assert kernel_shape("GEMM [33000,33000]x[33000,33000]") == ("GEMM", 33000, 33000, 33000)
    assert kernel_shape("GEMV [1,16K]x[16K,16K]") == ("GEMV", 1, 16384, 16384)
    assert kernel_shape("BiCGStab, 7-point stencil") is None


def test_wafer_fit_is_penalised_by_its_priors(cat):
    """Every fitted wafer constant has a prior with a mechanism, a physical range and sources; the fit's bounds are
    those ranges and it starts from the prior values. With the SGEMM row alone (WaferLLM held out) the data fix the
    GEMM efficiency and the priors hold the constants the row cannot see: the step overhead (750 steps of 500
    cycles are 0.2% of the kernel) stays within 5% of its prior, where an unpenalised fit let it drift 4x."""
    from wseplan.analytic import wse_fit as WF
    from wseplan.calibration_data import WAFER_FITTED_KEYS, read_wafer_priors

    pri = read_wafer_priors()
    assert tuple(pri) == WAFER_FITTED_KEYS == tuple(WF.FIT_BOUNDS)
    for k, q in pri.items():
        assert q.mechanism and q.source and q.bound("low") < q.si < q.bound("high")
        assert WF.FIT_BOUNDS[k] == (q.bound("low"), q.bound("high")) and WF.DEFAULT_START[k] == q.si
    rows = [r for r in WF.fit_rows(WF.bundled_cases()) if r.id == "R731"]
    v = WF._least_squares(rows, cat, F.load_fabric_constants(), WF.DEFAULT_START, 20)
    assert v["gemm_step_overhead_cycles"] == pytest.approx(pri["gemm_step_overhead_cycles"].si, rel=0.05)
    assert v["per_kernel_overhead_cycles"] == pytest.approx(pri["per_kernel_overhead_cycles"].si, rel=0.05)
    assert 0.2 < v["gemm_mac_efficiency_frac"] < 0.33
    # constants that end at a bound of their range are reported (fabric.yaml's fit.at_bound); the committed ones do not
    assert WF.at_bound({"per_kernel_overhead_cycles": 3000.0, "gemm_mac_efficiency_frac": 0.1,
                        "gemm_step_overhead_cycles": 600.0}) == ["per_kernel_overhead_cycles: high",
                                                                  "gemm_mac_efficiency_frac: low"]
    import yaml

    from wseplan.analytic.fabric_constants import FabricFile
    doc = FabricFile.model_validate(yaml.safe_load((ROOT / "catalogs/calibration/fabric.yaml").read_text()))
    assert doc.fit.at_bound == []


def test_wafer_priors_file_errors(tmp_path):
    from wseplan.calibration_data import read_wafer_priors
    from wseplan.errors import CatalogError

    p = tmp_path / "wafer_priors.yaml"
    p.write_text("wafer_priors:\n  per_kernel_overhead_cycles: {value: 300, low: 30, high: 3000, source: x, basis: measured, "
                 "mechanism: launch}\n")
    with pytest.raises(CatalogError, match="no prior for gemm_mac_efficiency_frac"):
        read_wafer_priors(p)
    p.write_text("wafer_priors:\n  bogus: {value: 1, low: 0.5, high: 2, source: x, basis: measured, mechanism: m}\n")
    with pytest.raises(CatalogError, match="unknown constant 'bogus'"):
        read_wafer_priors(p)


def test_wafer_draft_lives_in_the_targets_free_sram(cat):
    """wafer-production's draft (Llama-3.2-1B) adds no wafer: it lives in the SRAM the target leaves free, and where it
    does not fit there the engine does not speculate. Llama-3.1-8B on one CS-3: at batch 1 x 8,192 the draft fits and
    speculation is used (faster than without); at batch 4 x 40,000 the target holds ~37 GB of the wafer's 41.2 GB
    (5% reserve) and the draft would need 1.236e9 x 2 B of weights + 4 x 40,000 x 16 layers x 8 KV heads x 64 x 2 x 2 B
    of KV = 2.47 + 5.24 GB (hand count): it does not fit, so the step is the plain one."""
    from wseplan.plan import plan

    small = plan("llama-3.1-8b", "cs3x1", phase="decode", batch=1, context=8192, catalog=cat)
    plain = plan("llama-3.1-8b", "cs3x1", phase="decode", batch=1, context=8192, catalog=cat, options={"speculative": "none"})
    assert small.fits and small.num_devices == 1 and small.tpot_s < plain.tpot_s
    big = plan("llama-3.1-8b", "cs3x1", phase="decode", batch=4, context=40_000, catalog=cat)
    big_plain = plan("llama-3.1-8b", "cs3x1", phase="decode", batch=4, context=40_000, catalog=cat,
                     options={"speculative": "none"})
    draft_bytes = 1.236e9 * 2 + 4 * 40_000 * 16 * 8 * 64 * 2 * 2
    assert big.fits and big.num_devices == 1
    assert big.per_device_bytes + draft_bytes > 0.95 * cat.wafers["wse3"].usable_sram_bytes
    assert big.tpot_s == big_plain.tpot_s
