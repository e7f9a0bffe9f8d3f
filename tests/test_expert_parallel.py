"""Expert parallelism and the token dispatch of MoE training on GPUs (wseplan.analytic.moe_train): hand calculations of
the all-to-all and the permutation, the memory an expert split saves, the layouts searched, and one answer from
`time`, `cost` and `sweep` for the same layout."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wseplan.analytic import gpu_time as G
from wseplan.analytic.gpu_links import Links
from wseplan.analytic.moe_train import expert_dispatch_s, routed_rows, stage_routed_params
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog.load import default_catalog_dir as catalog_dir
from wseplan.errors import InputError
from wseplan.timing import predict_time
from wseplan.workload import block_types, resolve_model, routed_params


@pytest.fixture(scope="module")
def qwen(catalog):
    return resolve_model("qwen3-30b-a3b", catalog)


def _moe_block(m):
    return next(b for b in block_types(m) if b.moe)


def _h100_links(catalog):
    """The H100's calibration, its links and their NVLink and network bandwidths per GPU [bytes/s]."""
    cal = gpu_calibration()
    gpu = catalog.gpus["h100-sxm"]
    return (cal, Links(gpu, cal), gpu.scale_up_bandwidth_bytes_per_s.si * cal.nvlink_frac,
            gpu.scale_out_bandwidth_bytes_per_s.si * cal.network_frac, gpu.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac)


def _dispatch(m, links, ep, **kw):
    """Qwen3-30B-A3B's dispatch of 4,096 bf16 tokens at tp 1 (:func:`expert_dispatch_s`)."""
    return expert_dispatch_s(_moe_block(m), m.d_model, tokens=4096.0, tp=1.0, ep=float(ep), ab=2.0, links=links,
                             **kw)


def test_routed_rows_without_expert_parallelism_is_the_expected_experts_picked():
    # E (1 - (1 - k/E)^T) experts of the T x k rows, by hand for E 8, k 2, T 3
    experts, rows = routed_rows(3.0, 8, 2, 1.0)
    want = 8 * (1 - (1 - 2 / 8) ** 3)
    assert experts == pytest.approx(want) and rows == pytest.approx(3 * 2 / want)


def test_expert_parallelism_gives_a_gpu_fewer_taller_expert_gemms():
    # training-size token counts pick every expert: E / ep experts of T k ep / E rows each, the same FLOPs
    T, E, k = 8192.0, 128, 8
    for ep in (1, 2, 8, 32):
        experts, rows = routed_rows(T, E, k, float(ep))
        assert experts == pytest.approx(E / ep, rel=1e-9)
        assert rows == pytest.approx(T * k * ep / E, rel=1e-9)
        assert experts * rows == pytest.approx(T * k)


def test_all_to_all_inside_a_node_by_hand(catalog, qwen):
    """Qwen3-30B-A3B (d 2,048, top-8) on H100, 4,096 tokens, tp 1, ep 8 (one node): each GPU sends 7/8 of its
    4,096 x 8 rows of 2,048 bf16 elements, dispatch and combine, over NVLink; the permutation moves (2 + 2k) d elements
    per token through HBM."""
    cal, links, nvl, _, hbm = _h100_links(catalog)
    permute, a2a = _dispatch(qwen, links, 8)
    sent = 4096 * 8 * 2048 * 2 * 7 / 8
    assert a2a == pytest.approx(2 * (sent / nvl + cal.nvlink_latency_s))
    assert permute == pytest.approx((2 + 2 * 8) * 4096 * 2048 * 2 / hbm)


def test_all_to_all_across_nodes_is_bound_by_the_network_share(catalog, qwen):
    """ep 16 on 8-GPU nodes: 7 of the 15 peers on NVLink, 8 across the network; the slower share binds."""
    cal, links, nvl, net, _ = _h100_links(catalog)
    _, a2a = _dispatch(qwen, links, 16)
    sent = 4096 * 8 * 2048 * 2 * 15 / 16
    want = 2 * (max(sent * 7 / 15 / nvl, sent * 8 / 15 / net) + cal.network_latency_s)
    assert a2a == pytest.approx(want)
    assert a2a > 3 * _dispatch(qwen, links, 8)[1]


def test_a_dense_block_has_no_dispatch(catalog):
    m = resolve_model("llama-3-8b", catalog)
    links = Links(catalog.gpus["h100-sxm"], gpu_calibration())
    assert expert_dispatch_s(block_types(m)[0], m.d_model, tokens=4096.0, tp=1.0, ep=8.0, ab=2.0,
                             links=links) == (0.0, 0.0)
    assert float(stage_routed_params(m, 1.0)) == 0.0


def test_dense_training_does_not_depend_on_ep(catalog):
    m = resolve_model("llama-3-8b", catalog)
    kw = dict(precision="bf16", seq_len=4096, global_batch=64, tp=2, pp=1, dp=8, micro_batch=1, recompute="selective",
              zero_stage=1, cal=gpu_calibration())
    a = G.train_step(m, catalog.gpus["h100-sxm"], **kw)
    b = G.train_step(m, catalog.gpus["h100-sxm"], ep=8, **kw)
    assert float(a["step_s"]) == float(b["step_s"]) and float(b["expert_a2a_s"]) == 0.0


def test_expert_parallel_gradients_and_optimizer_by_hand(catalog, qwen):
    """The data-parallel gradient bytes lose (1 - 1/ep) of the stage's routed experts; ZeRO-1's optimizer shard does
    not change (the experts' Adam state is sharded over the dp / ep ranks that hold them)."""
    routed = sum(routed_params(b) * b.count for b in block_types(qwen))
    assert float(stage_routed_params(qwen, 1.0)) == pytest.approx(routed)
    assert float(stage_routed_params(qwen, 4.0)) == pytest.approx(math.ceil(qwen.num_layers / 4) * routed / qwen.num_layers)
    kw = dict(precision="bf16", seq_len=4096, global_batch=64, tp=1, pp=1, dp=16, micro_batch=1, recompute="selective",
              zero_stage=1, cal=gpu_calibration())
    one = G.train_step(qwen, catalog.gpus["h100-sxm"], ep=1, **kw)
    eight = G.train_step(qwen, catalog.gpus["h100-sxm"], ep=8, **kw)
    assert float(one["optimizer_s"]) == pytest.approx(float(eight["optimizer_s"]))
    assert float(eight["dp_comm_s"]) < float(one["dp_comm_s"])
    assert float(eight["expert_a2a_s"]) > 0.0 == float(one["expert_a2a_s"])


def test_expert_parallel_weights_per_gpu_by_hand(catalog):
    """Weights per GPU at ZeRO-1: the routed experts' 16-bit copies shrink by 1 - 1/ep; at ZeRO-3 they are sharded
    over all the ranks already and stay."""
    m = resolve_model("qwen3-30b-a3b", catalog)
    routed = sum(routed_params(b) * b.count for b in block_types(m))
    from wseplan.plan import plan

    lay = dict(tp=1, pp=1, dp=16, micro_batch=1, recompute="full", vpp=1, cp=1)
    kw = dict(phase="train", batch=64, context=4096, catalog=catalog, require_fit=False)
    w = {(e, z): plan("qwen3-30b-a3b", "h100x16", layout=dict(lay, ep=e, zero_stage=z), **kw)
         for e in (1, 8) for z in (1, 3)}
    per_gpu = {k: r.weights_bytes / 16 for k, r in w.items()}
    assert per_gpu[1, 1] - per_gpu[8, 1] == pytest.approx(routed * 2.0 * (1 - 1 / 8), rel=1e-6)
    assert per_gpu[1, 3] == pytest.approx(per_gpu[8, 3])


def test_search_tries_expert_parallel_degrees_that_divide_experts_and_ranks(catalog):
    from wseplan.devices.gpu_train import with_expert_parallel

    grid = {"tp": np.array([1.0, 2.0]), "dp": np.array([16.0, 4.0]), "cp": np.array([1.0, 2.0])}
    out = with_expert_parallel(grid, 128)
    pairs = sorted(zip(out["tp"], out["ep"]))  # ranks tp x dp x cp: 16 and 16 (whole experts over TP ranks too)
    assert pairs == [(1.0, 1.0), (1.0, 2.0), (1.0, 4.0), (1.0, 8.0), (1.0, 16.0), (2.0, 1.0), (2.0, 2.0), (2.0, 4.0),
                     (2.0, 8.0), (2.0, 16.0)]
    assert list(with_expert_parallel(grid, 1)["ep"]) == [1.0, 1.0]
    assert list(with_expert_parallel(grid, 8, given=4)["ep"]) == [4.0, 4.0]


def test_moe_training_search_picks_a_layout_with_its_expert_parallel_degree(catalog):
    r = predict_time("qwen3-30b-a3b", "h100x16", phase="train", batch=512, context=4096, precision="fp8", catalog=catalog)
    ep = r.layout["expert_parallel"]
    stage = r.layout["tensor_parallel"] * r.layout["data_parallel"] * r.layout["context_parallel"]
    assert ep >= 1 and 128 % ep == 0 and stage % ep == 0
    given = predict_time("qwen3-30b-a3b", "h100x16", phase="train", batch=512, context=4096, precision="fp8",
                         catalog=catalog, layout={"tp": r.layout["tensor_parallel"], "pp": r.layout["pipeline_parallel"],
                                                  "dp": r.layout["data_parallel"], "ep": ep,
                                                  "micro_batch": r.layout["micro_batch"],
                                                  "vpp": r.layout["virtual_pipeline"]},
                         recompute=r.layout["recompute"], zero_stage=r.layout["zero_stage"])
    assert given.step_s == pytest.approx(r.step_s, rel=1e-12)
    # a searched MoE training layout says it is validated only where it matches a published recipe; a given one not
    assert any("MoE training layout searched" in n for n in r.notes)
    assert not any("MoE training layout searched" in n for n in given.notes)


@pytest.mark.parametrize("ep, model, says", [(3, "qwen3-30b-a3b", "does not divide Qwen3-30B-A3B's 128 routed experts"),
                                             (2, "llama-3-8b", "no routed experts"),
                                             (32, "qwen3-30b-a3b", "must divide the 16 ranks of a pipeline stage")])
def test_a_given_expert_parallel_degree_that_cannot_run_is_refused(catalog, ep, model, says):
    with pytest.raises(InputError, match=says):
        predict_time(model, "h100x16", phase="train", batch=64, context=4096, catalog=catalog,
                     layout={"tp": 1, "pp": 1, "dp": 16, "ep": ep})


def test_time_cost_and_sweep_agree_on_an_moe_training_layout(catalog, tmp_path):
    """One chain: `time --ep`, `cost --ep` and a sweep row of the same layout give one step time (the sweep searches
    the expert-parallel degree as `time` does when the rest is given)."""
    import pandas as pd

    from wseplan import sweep as S
    from wseplan.costing import cost

    kw = dict(phase="train", batch=256, context=4096, precision="fp8", catalog=catalog)
    lay = {"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1}
    t = predict_time("qwen3-30b-a3b", "h100x64", layout=lay, recompute="selective", zero_stage=1, **kw)
    ep = t.layout["expert_parallel"]
    c = cost("qwen3-30b-a3b", "h100x64", layout=dict(lay, ep=ep, recompute="selective", zero_stage=1, vpp=1), **kw)
    assert c.plan["step_s"] == pytest.approx(t.step_s, rel=1e-12)
    spec = dict(name="moe", models=["qwen3-30b-a3b"], targets=["h100x64"], phase="train", precisions=["fp8"],
                batches=[256], contexts=[4096], layouts=dict(tensor_parallel=[1], pipeline_parallel=[1],
                                                            data_parallel=[64], micro_batch=[1]))
    plan = S.plan_sweep(S.parse_sweep(spec), catalog)
    S.sweep_to_file(plan, tmp_path / "out", "x.parquet", chunk=1024)
    df = pd.read_parquet(next((tmp_path / "out").glob("*.parquet")))
    row = df.iloc[0]
    assert int(row["expert_parallel"]) == ep and row["step_s"] == pytest.approx(t.step_s, rel=1e-9)


def test_hierarchical_dispatch_crosses_the_network_once_per_remote_domain(catalog, qwen):
    """DeepEP/HybridEP: ep 16 on two 8-GPU nodes sends a token once to the other node when one of its 8 experts is
    there, 1 - (1/2)^8 of the time, and every row but a GPU's own through NVLink."""
    from wseplan.analytic.moe_train import remote_domains_per_token

    cal, links, nvl, net, _ = _h100_links(catalog)
    blk = _moe_block(qwen)
    assert float(remote_domains_per_token(2.0, 8)) == pytest.approx(1 - 0.5 ** 8)
    assert float(remote_domains_per_token(1.0, 8)) == 0.0
    _, a2a = _dispatch(qwen, links, 16, dispatch="hierarchical")
    sent = 4096 * 8 * 2048 * 2 * 15 / 16
    want = 2 * (max(sent / nvl, 4096 * 2048 * 2 * (1 - 0.5 ** 8) / net) + cal.network_latency_s)
    assert a2a == pytest.approx(want)
    assert a2a < _dispatch(qwen, links, 16)[1]
    with pytest.raises(ValueError):
        expert_dispatch_s(blk, qwen.d_model, tokens=1.0, tp=1.0, ep=2.0, ab=2.0, links=links, dispatch="nccl")


def test_overlapped_all_to_all_hides_behind_the_layer_compute_where_the_schedule_allows(catalog, qwen):
    """Megatron-Core's --overlap-moe-expert-parallel-comm: a layer takes the longer of its compute and its
    all-to-alls; it needs one pipeline stage or an interleaved pipeline (plain 1F1B over stages exposes them)."""
    kw = dict(precision="bf16", seq_len=4096, global_batch=64, tp=1, dp=16, micro_batch=1, recompute="selective",
              zero_stage=1, ep=16, cal=gpu_calibration())
    g = catalog.gpus["h100-sxm"]
    off = G.train_step(qwen, g, pp=1, **kw)
    on = G.train_step(qwen, g, pp=1, expert_comm_overlap=True, **kw)
    assert float(on["expert_a2a_s"]) < float(off["expert_a2a_s"]) and float(on["step_s"]) < float(off["step_s"])
    # the hidden part is at most the compute it runs under
    assert float(off["expert_a2a_s"]) - float(on["expert_a2a_s"]) <= float(off["compute_s"]) + 1e-12
    plain = dict(kw, dp=8, global_batch=64)
    a = G.train_step(qwen, g, pp=2, vpp=1, expert_comm_overlap=True, **dict(plain, ep=8))
    b = G.train_step(qwen, g, pp=2, vpp=1, **dict(plain, ep=8))
    assert float(a["step_s"]) == float(b["step_s"])


def test_moe_options_are_checked(catalog):
    for opts, says in (({"expert_dispatch": "nccl"}, "expert_dispatch"), ({"expert_comm_overlap": "yes"},
                                                                          "expert_comm_overlap")):
        with pytest.raises(InputError, match=says):
            predict_time("qwen3-30b-a3b", "h100x16", phase="train", batch=64, context=4096, catalog=catalog, **opts)
    with pytest.raises(InputError):  # training options: inference refuses them
        predict_time("qwen3-30b-a3b", "h100x8", phase="decode", batch=8, context=1024, catalog=catalog,
                     expert_dispatch="flat")


def test_published_deepseek_runs_across_nodes_are_within_the_physical_bound(catalog):
    """NVIDIA's DeepSeek-V3 run on 256 B200 (EP 32 over four nodes, 3,328 tokens/s per GPU; Megatron-Bridge
    performance summary, R743) is faster than a flat, exposed all-to-all allows: the bound takes the deduplicated,
    overlapped dispatch the run may have used, so the row is predicted, not flagged."""
    from wseplan.validate import read_cases
    from wseplan.validate.run import inconsistency

    path = catalog_dir() / "validation" / "validation-moe-train.csv"
    case = next(c for c in read_cases(path) if c.id == "R743")
    assert inconsistency(case, catalog) is None


def test_whole_experts_on_tensor_parallel_ranks_by_hand(catalog):
    """Expert tensor parallelism 1 (NVIDIA's MoE recipes): at tp 2 without expert parallelism every GPU holds every
    expert whole (the other weights halved); at tp 2 x dp 8 an expert group of 16 spans the TP ranks and holds 1/16."""
    from wseplan.plan import plan

    m = resolve_model("qwen3-30b-a3b", catalog)
    routed = sum(routed_params(b) * b.count for b in block_types(m))
    kw = dict(phase="train", batch=64, context=4096, catalog=catalog, require_fit=False)
    lay = dict(pp=1, micro_batch=1, recompute="full", vpp=1, cp=1, zero_stage=1)
    one = plan("qwen3-30b-a3b", "h100x16", layout=dict(lay, tp=1, dp=16, ep=1), **kw).weights_bytes / 16
    two = plan("qwen3-30b-a3b", "h100x16", layout=dict(lay, tp=2, dp=8, ep=1), **kw).weights_bytes / 16
    sixteen = plan("qwen3-30b-a3b", "h100x16", layout=dict(lay, tp=2, dp=8, ep=16), **kw).weights_bytes / 16
    dense = one - routed * 2.0
    assert two == pytest.approx(dense / 2 + routed * 2.0, rel=1e-6)
    assert sixteen == pytest.approx(dense / 2 + routed * 2.0 / 16, rel=1e-6)


def test_expert_gradients_reduce_over_ranks_ep_apart_by_hand(catalog):
    """ep 8 on 8-GPU nodes: the 8 copies of a GPU's experts on 64 GPUs sit one per node, so the whole shard is
    all-reduced across the network (a hierarchical all-reduce with one rank per node); ep 2 keeps 4 copies a node."""
    from wseplan.analytic.collectives import hierarchical_allreduce_time_s
    from wseplan.analytic.moe_train import expert_grad_allreduce_s

    cal = gpu_calibration()
    links = Links(catalog.gpus["h100-sxm"], cal)
    msg = 1e9
    t8 = expert_grad_allreduce_s(msg, tp=1.0, dp=64.0, cp=1.0, ep=8.0, links=links)
    want8 = hierarchical_allreduce_time_s(message_bytes=msg, num_ranks=8.0, ranks_per_node=1.0,
                                          intra_bandwidth_bytes_per_s=links.group_bw(1.0), intra_latency_s=links.nvlink_lat,
                                          inter_bandwidth_bytes_per_s=links.net_bw, inter_latency_s=links.net_lat)
    assert t8 == pytest.approx(want8)
    t2 = expert_grad_allreduce_s(msg, tp=1.0, dp=64.0, cp=1.0, ep=2.0, links=links)
    want2 = hierarchical_allreduce_time_s(message_bytes=msg, num_ranks=32.0, ranks_per_node=4.0,
                                          intra_bandwidth_bytes_per_s=links.group_bw(4.0), intra_latency_s=links.nvlink_lat,
                                          inter_bandwidth_bytes_per_s=links.net_bw, inter_latency_s=links.net_lat)
    assert t2 == pytest.approx(want2)
    assert expert_grad_allreduce_s(0.0, tp=1.0, dp=64.0, cp=1.0, ep=8.0, links=links) == 0.0


def test_a_sweep_spans_the_expert_parallel_degrees_it_is_given(catalog, tmp_path):
    """`layouts.expert_parallel` pins each row's degree (rows it cannot divide are left out and said); each row's step
    equals `time --ep` of its layout; a degree that cannot split the model's experts is refused."""
    import pandas as pd

    from wseplan import sweep as S

    spec = dict(name="moe", models=["qwen3-30b-a3b"], targets=["h100x16"], phase="train", precisions=["fp8"],
                batches=[256], contexts=[4096], layouts=dict(tensor_parallel=[1], pipeline_parallel=[1],
                                                            data_parallel=[16], micro_batch=[1],
                                                            expert_parallel=[1, 8, 16, 32]))
    plan = S.plan_sweep(S.parse_sweep(spec), catalog)
    assert any("layouts.expert_parallel 32" in n for n in plan.skipped)
    S.sweep_to_file(plan, tmp_path / "out", "x.parquet", chunk=1024)
    df = pd.read_parquet(next((tmp_path / "out").glob("*.parquet")))
    assert sorted(df["expert_parallel"].astype(int)) == [1, 8, 16]
    for _, row in df.iterrows():
        t = predict_time("qwen3-30b-a3b", "h100x16", phase="train", batch=256, context=4096, precision="fp8",
                         catalog=catalog, layout={"tp": 1, "pp": 1, "dp": 16, "micro_batch": 1, "vpp": 1,
                                                  "ep": int(row["expert_parallel"])},
                         recompute="selective", zero_stage=1, require_fit=False)
        assert bool(row["fits"]) == t.fits  # ep 1: every expert on every GPU does not fit 80 GB (no time, no price)
        if t.fits:
            assert row["step_s"] == pytest.approx(t.step_s, rel=1e-9)
        else:
            assert math.isnan(row["step_s"])
    # several models: each takes the degrees it can (a dense model 1), the rest said
    mixed = S.plan_sweep(S.parse_sweep(dict(spec, models=["qwen3-30b-a3b", "llama-3-8b", "mixtral-8x7b"],
                                            layouts=dict(spec["layouts"], expert_parallel=[1, 8, 16]))), catalog)
    assert any("llama-3-8b" in n.lower() or "Llama-3-8B" in n for n in mixed.skipped if "dense" in n)
    assert any("16: not for Mixtral-8x7B" in n for n in mixed.skipped)
    for model, phase, says in (("qwen3-30b-a3b", "train", "divisors of 128"), ("qwen3-30b-a3b", "decode",
                                                                            "phase train only")):
        bad = dict(spec, models=[model], phase=phase, layouts=dict(expert_parallel=[3]))
        with pytest.raises(InputError, match=says):
            S.plan_sweep(S.parse_sweep(bad), catalog)


def test_moe_training_intervals_are_widened_outside_the_dense_training_rows(catalog):
    """The model-error file records the architectures its validated rows cover (gpu-train: dense only; gpu-infer:
    dense and MoE, the MLPerf Mixtral and the Llama 4 / Qwen3 rows): an MoE training answer's interval is widened
    once and says why (audit34a H1: 8 of 21 published MoE rows fell outside the dense band); an MoE inference answer
    is not."""
    from wseplan.model_error import architecture_class, load_model_error, speed_bounds, widening

    f = load_model_error()
    assert f.categories["gpu-train"].envelope.architectures == ["dense"]
    assert "moe" in f.categories["gpu-infer"].envelope.architectures
    kw = dict(params_b=30.5, devices=16, hardware="h100-sxm", precision="fp8")
    dense = speed_bounds("gpu-train", architecture="dense", **kw)
    moe = speed_bounds("gpu-train", architecture="moe", **kw)
    assert "MoE models not validated (validated: dense)" in moe[2] and "MoE" not in dense[2]
    factor = widening()[0]
    span = lambda b: math.log(b[1] / b[0])  # noqa: E731
    assert span(moe) == pytest.approx(span(dense) * factor, rel=1e-9)
    inf = speed_bounds("gpu-infer", architecture="moe", params_b=46.7, devices=8, hardware="h100-sxm")
    assert "MoE models not validated" not in inf[2]
    assert architecture_class(resolve_model("qwen3-30b-a3b", catalog)) == "moe"
    assert architecture_class(resolve_model("llama-3-8b", catalog)) == "dense"
    r = predict_time("qwen3-30b-a3b", "h100x16", phase="train", batch=512, context=4096, precision="fp8", catalog=catalog)
    assert "MoE models not validated" in r.interval_note


def test_zero_sharded_expert_shards_ring_over_the_gpus_holding_the_same_experts(catalog, qwen):
    """review34 H1: under ZeRO-2/3 a GPU's expert shard is reduce-scattered and gathered among the tp dp cp / ep GPUs
    that hold the same experts (none at ep = tp dp cp), the other weights among the dp cp ranks; by hand with the
    collectives' ring formula for tp 1, dp 16, ep 16 (one holder of each expert) and ep 4 (four)."""
    from wseplan.analytic.collectives import reduce_scatter_time_s

    cal = G.training_calibration(gpu_calibration())
    g = catalog.gpus["h100-sxm"]
    links = Links(g, cal)
    kw = dict(precision="bf16", seq_len=4096, global_batch=64, tp=1, pp=1, dp=16, micro_batch=1, recompute="full",
              zero_stage=3, cal=gpu_calibration())
    routed = float(stage_routed_params(qwen, 1.0))
    dense = float(G._stage_params(qwen, 1.0)) - routed
    ring = dict(link_bandwidth_bytes_per_s=links.net_bw, link_latency_s=cal.network_latency_s)  # 16 GPUs: two nodes
    nmb = 64 / 16
    for ep, holders in ((16, 1), (4, 4)):
        r = G.train_step(qwen, g, ep=ep, **kw)
        want = nmb * (2 * reduce_scatter_time_s(message_bytes=dense * 2.0, num_ranks=16, **ring)
                      + reduce_scatter_time_s(message_bytes=dense * 4.0, num_ranks=16, **ring))
        if holders > 1:
            want += nmb * (2 * reduce_scatter_time_s(message_bytes=routed / ep * 2.0, num_ranks=holders, **ring)
                           + reduce_scatter_time_s(message_bytes=routed / ep * 4.0, num_ranks=holders, **ring))
        assert float(r["dp_comm_s"]) == pytest.approx(want, rel=1e-9)
    # LoRA's frozen weights: gathered twice per micro-batch, the experts among their holders alone
    lo = G.train_step(qwen, g, ep=16, trainable="lora", **kw)
    frozen = (float(G._stage_params(qwen, 1.0, "full")) - routed) * 2.0
    assert float(lo["dp_comm_s"]) == pytest.approx(2 * nmb * reduce_scatter_time_s(message_bytes=frozen, num_ranks=16,
                                                                                   **ring), rel=1e-9)


def test_dualpipe_overlaps_on_any_pipeline_and_rows_state_their_dispatch(catalog, qwen):
    """DeepSeek's DualPipe (DeepSeek-V3 report sec. 3.2.1) overlaps the all-to-alls on a plain pipeline, where
    Megatron-Core's overlap needs an interleaved one; a validation row states its dispatch in its notes."""
    from wseplan.validate import read_cases
    from wseplan.validate.common import moe_dispatch_of

    kw = dict(precision="bf16", seq_len=4096, global_batch=64, tp=1, dp=8, micro_batch=1, recompute="selective",
              zero_stage=1, ep=8, cal=gpu_calibration(), pp=2, vpp=1)
    g = catalog.gpus["h100-sxm"]
    plain = G.train_step(qwen, g, **kw)
    mcore = G.train_step(qwen, g, expert_comm_overlap=True, **kw)
    dual = G.train_step(qwen, g, expert_comm_overlap="dualpipe", **kw)
    assert float(mcore["step_s"]) == float(plain["step_s"])
    assert float(dual["expert_a2a_s"]) < float(plain["expert_a2a_s"])
    with pytest.raises(InputError, match="expert_comm_overlap"):
        predict_time("qwen3-30b-a3b", "h100x16", phase="train", batch=64, context=4096, catalog=catalog,
                     expert_comm_overlap="always")
    path = catalog_dir() / "validation" / "validation-moe-train.csv"
    rows = {c.id: c for c in read_cases(path)}
    assert moe_dispatch_of(rows["R766"]) == {"expert_dispatch": "hierarchical", "expert_comm_overlap": "dualpipe"}
    assert moe_dispatch_of(rows["R741"]) == {}


def test_cli_moe_options_reach_the_model_and_bad_ones_exit_2(capsys):
    """`time --ep --expert-dispatch --expert-overlap` give the step the Python API gives; a bad value, or an MoE option
    outside training, is one line and exit 2 (no traceback)."""
    import json

    from wseplan.cli import main

    args = ["time", "deepseek-v3", "--target", "h800x2048", "--phase", "train", "--batch", "15360", "--context", "4096",
            "-p", "fp8", "--tp", "1", "--pp", "16", "--dp", "128", "--ep", "64"]
    assert main([*args, "--expert-dispatch", "hierarchical", "--expert-overlap", "dualpipe", "-f", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = predict_time("deepseek-v3", "h800x2048", phase="train", batch=15360, context=4096, precision="fp8",
                       layout={"tp": 1, "pp": 16, "dp": 128, "ep": 64}, expert_dispatch="hierarchical",
                       expert_comm_overlap="dualpipe")
    assert cli["step_s"] == pytest.approx(api.step_s, rel=1e-12)
    assert main([*args, "--expert-overlap", "off", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_s"] > api.step_s  # exposed all-to-alls, flat
    for bad in (["--expert-overlap", "yes"], ["--expert-dispatch", "nccl"]):
        assert main([*args, *bad]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") == 1
    assert main(["time", "deepseek-v3", "--target", "h800x8", "--phase", "decode", "--ep", "8"]) == 2
    assert "--ep: applies to GPU training (--phase train); inference chooses for each point" in capsys.readouterr().err
