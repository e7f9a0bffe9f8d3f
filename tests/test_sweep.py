"""`wseplan sweep`: schema errors, agreement with the scalar APIs, determinism, Dask equality, atomic writes and
path sanitising.

Agreement: the sweep is the planning chain on arrays (``wseplan.plan.evaluate``); sampled rows are recomputed one
by one through the scalar APIs (``wseplan.timing.predict_time``, ``wseplan.fit.fit``, ``wseplan.costing.cost``)
and must agree within a relative 1e-9.
"""
from __future__ import annotations

import io
import json
import math
import os

import numpy as np
import pandas as pd
import pytest

from wseplan import sweep as S
from wseplan.errors import InputError
from wseplan.cli import main

RTOL = 1e-9


def _sweep(**kw):
    base = dict(name="t", phase="decode", models=["llama-3.1-8b"], targets=["h100-sxmx8"], batches=[1, 8],
                contexts=[1024])
    base.update(kw)
    return S.parse_sweep(base)


def _close(a, b, rtol=RTOL):
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or pd.isna(b)
    return b is not None and not pd.isna(b) and abs(float(a) - float(b)) <= rtol * max(abs(float(a)), abs(float(b)))


# ---------------------------------------------------------------------------------------------
# schema
# ---------------------------------------------------------------------------------------------
BAD = [
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\nbogus: 1\n", "bogus"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\n", "contexts"),
    ("name: x\nphase: serve\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\n", "phase"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [0]\ncontexts: [1]\n", "batches"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [one]\ncontexts: [1]\n", "batches"),
    ("name: x\nphase: train\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\noutput_tokens: [4]\n",
     "output_tokens"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\n"
     "layouts: {tensor_parallel: [3, -1]}\n", "layouts.tensor_parallel"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\n"
     "layouts: {recompute: [full]}\n", "recompute"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\nset: {pue: .nan}\n", "set"),
    ("name: x\nphase: decode\nmodels: [nosuchmodel]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\n", "models"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h999]\nbatches: [1]\ncontexts: [1]\n", "targets"),
    ("name: x\nphase: train\nmodels: [llama-3.1-8b]\ntargets: [h100-sxm]\nbatches: [1]\ncontexts: [1]\n", "targets"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nprecisions: [fp7]\nbatches: [1]\ncontexts: [1]\n",
     "precisions"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\nset: {nonsense_usd: 1}\n", "set"),
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\n"
     "layouts: {tensor_parallel: [16], pipeline_parallel: [1], data_parallel: [1]}\n", "layouts"),
    # Llama-3.1-8B has 32 heads: no tp of [3, 5] divides them
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [1]\n"
     "layouts: {tensor_parallel: [3, 5]}\n", "layouts.tensor_parallel"),
    # one target under two spellings: every row would be written twice (audit31b M6)
    ("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [cs3x4, wse3x4]\nbatches: [1]\ncontexts: [1]\n",
     "wse3x4 is cs3x4 again"),
    ("- just\n- a list\n", "top level"),
    ("name: [unclosed\n", "sweep"),
]


@pytest.mark.parametrize("text,field", BAD)
def test_malformed_sweep_is_one_line_exit_2(tmp_path, capsys, text, field):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    rc = main(["sweep", str(f), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert field in err
    assert not (tmp_path / "out").exists()


def test_a_gpu_target_without_a_count_that_fits_nothing_says_what_to_give(tmp_path, capsys):
    """audit37a F6: a GPU target without a count takes one node's TP layouts (pp = dp = 1), so DeepSeek-V3 in fp8
    (671 GB) fits no row on H100 (8 x 80 GB) while `fit` finds 10 GPUs: the summary's "0 fitting" now comes with a
    note naming a count and `fit`; a model that fits gets none, nor does a counted target."""
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: decode\nmodels: [deepseek-v3, llama-3.1-8b]\ntargets: [h100, h100x16]\n"
                 "precisions: [fp8]\nbatches: [1]\ncontexts: [2048]\n")
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "-f", "json", "--force"]) == 0
    out, err = capsys.readouterr()
    groups = {(g["model"], g["target"]): g["fitting"] for g in json.loads(out)["groups"]}
    assert groups[("deepseek-v3", "h100-sxm")] == 0 and groups[("llama-3.1-8b", "h100-sxm")] > 0
    notes = [n for n in err.splitlines() if "no row fits" in n]
    assert notes == ["note: deepseek-v3 x h100-sxm: no row fits; a GPU target without a count tries the tensor_parallel "
                     "values with pp = dp = 1 on one node: give a count (e.g. h100-sxmx16) for multi-node layouts, or "
                     "`wseplan fit deepseek-v3 --target h100-sxm` for the fewest GPUs that hold it"]


def test_training_sweep_names_the_knobs_it_holds(tmp_path, capsys):
    """audit26 F7: a GPU training sweep holds micro-batch 1, selective recompute, ZeRO-1 and no interleaving unless the
    spec lists them, so its 'best' can be slower than `time`'s searched layout: a note says which; listing every knob
    (virtual_pipeline too, audit32d F2) leaves no note."""
    base = ("name: x\nphase: train\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [64]\ncontexts: [2048]\n"
            "train_tokens: 1e9\n")
    for extra, held in (("", "micro-batch 1, recompute selective, ZeRO 1, virtual pipeline 1 ("),
                        ("layouts: {micro_batch: [1, 2], zero_stage: [1]}\n", "recompute selective, virtual pipeline 1 ("),
                        ("layouts: {micro_batch: [1], zero_stage: [1], recompute: [full], virtual_pipeline: [1, 2]}\n",
                         None)):
        f = tmp_path / "s.yaml"
        f.write_text(base + extra)
        assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "-f", "json", "--force"]) == 0
        err = capsys.readouterr().err
        if held is None:
            assert "GPU training rows hold" not in err, err
        else:
            assert "GPU training rows hold " + held in err, err


def test_virtual_pipeline_axis_rows_equal_time(catalog):
    """audit32d F2: a training sweep row says its virtual pipeline degree (``virtual_pipeline``) and equals `time`
    asked with the row's whole layout, the degree included; a degree above 1 is a row only of layouts that can
    interleave it (pp > 1, pp x vpp at most the layers), as `time` refuses the others."""
    from wseplan.plan import plan

    df = S.run_sweep(S.parse_sweep(dict(name="v", phase="train", models=["llama-3.1-8b"], targets=["h100-sxmx16"],
                                        batches=[64], contexts=[2048],
                                        layouts=dict(tensor_parallel=[2], pipeline_parallel=[1, 2, 8],
                                                     virtual_pipeline=[1, 2, 4]))), catalog=catalog)
    got = sorted(zip(df["pipeline_parallel"], df["virtual_pipeline"]))
    # pp 1 only without interleaving; pp 8 x vpp 4 = 32 virtual stages on 32 layers is a row
    assert got == [(1, 1), (2, 1), (2, 2), (2, 4), (8, 1), (8, 2), (8, 4)]
    steps = {}
    for _, r in df.iterrows():
        lay = dict(tp=int(r["tensor_parallel"]), pp=int(r["pipeline_parallel"]), dp=int(r["data_parallel"]),
                   micro_batch=int(r["micro_batch"]), vpp=int(r["virtual_pipeline"]), recompute=1,
                   zero_stage=int(r["zero_stage"]))
        p = plan("llama-3.1-8b", "h100-sxmx16", phase="train", batch=64, context=2048, layout=lay, catalog=catalog)
        assert p.fits == bool(r["fits"])
        if r["fits"]:
            assert _close(p.step_s, r["step_s"], 1e-9)
            steps[(int(r["pipeline_parallel"]), int(r["virtual_pipeline"]))] = r["step_s"]
    # interleaving shortens the pipeline bubble of the same layout (Narayanan et al., SC21: bubble / vpp)
    assert steps[(8, 4)] < steps[(8, 1)]
    with pytest.raises(InputError, match="virtual_pipeline"):
        S.plan_sweep(S.parse_sweep(dict(name="v", phase="train", models=["llama-3.1-8b"], targets=["h100-sxmx16"],
                                        batches=[64], contexts=[2048],
                                        layouts=dict(pipeline_parallel=[1], virtual_pipeline=[2]))), catalog)
    with pytest.raises(InputError, match="virtual_pipeline and expert_parallel apply to phase train only"):
        S.parse_sweep(dict(name="v", phase="decode", models=["llama-3.1-8b"], targets=["h100-sxmx16"], batches=[1],
                           contexts=[2048], layouts=dict(virtual_pipeline=[2])))


def test_a_sweep_pins_the_attention_data_parallel_degree(catalog):
    """layouts.attention_data_parallel: an MoE model's rows once per degree (1, or the row's tp), each the record
    `wseplan time --adp` gives; a dense model keeps 1 and the sweep says so; training refuses the key."""
    from wseplan.plan import plan

    spec = dict(name="a", phase="decode", models=["qwen3-30b-a3b", "llama-3.1-8b"], targets=["h100-sxmx8"],
                precisions=["fp8"], batches=[64], contexts=[4096],
                layouts=dict(tensor_parallel=[2], pipeline_parallel=[1], attention_data_parallel=[1, 2]))
    df = S.run_sweep(S.parse_sweep(spec), catalog=catalog)
    moe = df[df["model"] == "qwen3-30b-a3b"]
    assert sorted(moe["attention_data_parallel"].tolist()) == [1, 2]
    assert df[df["model"] == "llama-3.1-8b"]["attention_data_parallel"].tolist() == [1]
    for _, r in moe.iterrows():
        p = plan("qwen3-30b-a3b", "h100-sxmx8", phase="decode", precision="fp8", batch=64, context=4096,
                 layout=dict(tp=2, pp=1, dp=4, adp=int(r["attention_data_parallel"])), catalog=catalog)
        assert _close(p.tokens_per_s, r["tokens_per_s"], 1e-9)
        # the experts the row ran, as the record says (whole over the TP GPUs: expert_parallel = tp; split: 1;
        # audit37a F2: the column was empty on inference rows)
        assert r["expert_parallel"] == p.layout.get("expert_parallel", 1)
    assert df[df["model"] == "llama-3.1-8b"]["expert_parallel"].isna().all()
    # a degree only the MoE model takes: the dense model's rows run 1, said in a note (the sweep goes on)
    only2 = S.plan_sweep(S.parse_sweep(dict(spec, layouts=dict(tensor_parallel=[2], pipeline_parallel=[1],
                                                                  attention_data_parallel=[2]))), catalog)
    assert any("not for Llama-3.1-8B" in n for n in only2.skipped)
    with pytest.raises(InputError, match="attention_data_parallel applies to inference"):
        S.parse_sweep(dict(spec, phase="train", layouts=dict(attention_data_parallel=[1])))


def test_bad_cli_options(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8]\nbatches: [1]\ncontexts: [8]\n")
    for extra, word in ((["--engine", "spark"], "--engine"), (["--scheduler", "tcp://x:1"], "--scheduler"),
                        (["--chunk", "0"], "--chunk"), (["--format", "xml"], "--format")):
        assert main(["sweep", str(f), "--out", str(tmp_path / "o"), *extra]) == 2
        err = capsys.readouterr().err
        assert word in err and err.count("\n") == 1
    assert main(["sweep", str(tmp_path / "missing.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# agreement with the scalar APIs
# ---------------------------------------------------------------------------------------------
def _predict(row, catalog):
    from wseplan.timing import predict_time

    opts = {}
    if row["device_kind"] == "gpu":
        opts = dict(tensor_parallel=int(row["tensor_parallel"]), pipeline_parallel=int(row["pipeline_parallel"]),
                    data_parallel=int(row["data_parallel"]))
        if row["phase"] == "train":
            opts.update(micro_batch=int(row["micro_batch"]), recompute=str(row["recompute"]), zero_stage=int(row["zero_stage"]),
                        virtual_pipeline=1)
    ot = None if pd.isna(row["output_tokens"]) else int(row["output_tokens"])
    return predict_time(row["model"], row["target"], phase=row["phase"], precision=row["precision"], batch=int(row["batch"]),
                        context=int(row["context"]), output_tokens=ot, catalog=catalog, **opts)


def _check_time(df, catalog, n, seed):
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(df), size=min(n, len(df)), replace=False):
        row = df.iloc[int(i)]
        if row["phase"] == "train" and row["device_kind"] == "gpu" and \
                row["data_parallel"] * row["micro_batch"] > row["batch"]:  # a layout `time` refuses: nothing timed
            with pytest.raises(InputError, match="micro_batch"):
                _predict(row, catalog)
            assert not row["fits"] and pd.isna(row["step_s"]) and pd.isna(row["usd_per_mtok"])
            continue
        t = _predict(row, catalog)
        for k in ("step_s", "ttft_s", "tpot_s", "tokens_per_s", "tokens_per_s_per_user"):
            assert _close(getattr(t, k), row[k]), (k, getattr(t, k), row[k], dict(row))
        assert t.fits == row["fits"]
        if t.fits:
            assert t.bottleneck == row["bottleneck"], (t.bottleneck, dict(row), t.breakdown_s)
        else:  # nothing is timed or priced that does not fit
            assert t.bottleneck is None and pd.isna(row["bottleneck"]) and pd.isna(row["usd_per_mtok"])
        assert t.num_devices == row["num_devices"]


AGREE = [
    dict(phase="decode", models=["llama-3.1-8b", "mixtral-8x7b"], targets=["h100-sxmx8", "h200-sxm"], precisions=["bf16", "fp8"],
         batches=[1, 5, 64, 512], contexts=[128, 4096], output_tokens=[1, 100]),
    dict(phase="decode", models=["llama-3.1-8b"], targets=["h100-sxmx4"], batches=[3, 40], contexts=[2048]),
    dict(phase="prefill", models=["llama-3.1-70b"], targets=["h100-sxmx8", "a100-80gbx16"], batches=[1, 7, 300],
         contexts=[512, 8192]),
    dict(phase="train", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["h100-sxmx32"], batches=[32, 96],
         contexts=[2048, 4096], layouts=dict(micro_batch=[1, 2], recompute=["none", "full"], zero_stage=[1, 3])),
    dict(phase="decode", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["cs3", "cs3x2", "cs3x4", "wse2x4"],
         batches=[1, 3, 16], contexts=[512, 4096], output_tokens=[32]),
    dict(phase="decode", models=["llama-3.1-70b"], targets=["cs3", "cs3x8"], batches=[1, 8, 100], contexts=[2048]),
    dict(phase="prefill", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["cs3", "cs3x4"], batches=[1, 4],
         contexts=[256, 4096]),
    dict(phase="train", models=["llama-3.1-8b", "gpt-3-175b"], targets=["cs3", "cs3x4"], batches=[1, 16, 256],
         contexts=[512, 2048]),
]


@pytest.mark.parametrize("spec", AGREE, ids=lambda s: f"{s['phase']}-{s['targets'][0]}")
def test_rows_agree_with_predict_time(spec, catalog):
    df = S.run_sweep(S.parse_sweep(dict(name="a", **spec)), catalog=catalog)
    assert len(df) == S.plan_sweep(S.parse_sweep(dict(name="a", **spec)), catalog).size
    _check_time(df, catalog, n=20, seed=len(df))


def test_wafer_fit_agrees_with_fit(catalog):
    from wseplan.fit import fit

    spec = dict(name="f", phase="decode", models=["llama-3.1-70b", "llama-3.1-8b"], targets=["cs3", "cs3x4", "wse2"],
                batches=[1, 9, 64], contexts=[512, 8192], output_tokens=[16])
    df = S.run_sweep(S.parse_sweep(spec), catalog=catalog)
    for phase in ("prefill", "train"):
        sp = dict(spec, phase=phase)
        sp.pop("output_tokens")
        df = pd.concat([df, S.run_sweep(S.parse_sweep(sp), catalog=catalog)], ignore_index=True)
    rng = np.random.default_rng(1)
    for i in rng.choice(len(df), size=30, replace=False):
        r = df.iloc[int(i)]
        ot = None if pd.isna(r["output_tokens"]) else int(r["output_tokens"])
        f = fit(r["model"], r["target"], precision=r["precision"], phase=r["phase"], batch=int(r["batch"]),
                context=int(r["context"]), output_tokens=ot, catalog=catalog)
        per_dev = f.capacity_bytes - f.headroom_bytes
        assert _close(per_dev, r["per_device_bytes"]) and _close(f.capacity_bytes, r["capacity_bytes"])
        assert f.fits == r["fits"] and f.num_devices == r["num_devices"], dict(r)


def test_gpu_fit_agrees_with_layout_memory(catalog):
    from wseplan.devices.gpu import layout_memory
    from wseplan.fit import build_workload, fit

    df = S.run_sweep(S.parse_sweep(dict(name="g", phase="decode", models=["llama-3.1-70b"], targets=["h100-sxmx8"],
                                        batches=[1, 64], contexts=[1024, 32768], output_tokens=[200])), catalog=catalog)
    for _, r in df.iterrows():
        f = fit("llama-3.1-70b", "h100-sxmx8", phase="serve", batch=int(r["batch"]), context=int(r["context"]),
                output_tokens=200, catalog=catalog,
                layout={"tp": int(r["tensor_parallel"]), "pp": int(r["pipeline_parallel"]), "dp": int(r["data_parallel"])})
        assert _close(f.capacity_bytes - f.headroom_bytes, r["per_device_bytes"]) and f.fits == r["fits"]
    tr = S.run_sweep(S.parse_sweep(dict(name="g", phase="train", models=["llama-3.1-8b"], targets=["h100-sxmx16"],
                                        batches=[16, 64], contexts=[1024, 4096],
                                        layouts=dict(micro_batch=[1, 4], recompute=["none", "selective", "full"],
                                                     zero_stage=[0, 2, 3]))), catalog=catalog)
    rng = np.random.default_rng(2)
    for i in rng.choice(len(tr), size=20, replace=False):
        r = tr.iloc[int(i)]
        w = build_workload(catalog.models["llama-3.1-8b"], catalog, precision="bf16", phase="train", batch=int(r["batch"]),
                           context=int(r["context"]))
        m = layout_memory(w, catalog, tp=int(r["tensor_parallel"]), pp=int(r["pipeline_parallel"]), dp=int(r["data_parallel"]),
                          zero_stage=int(r["zero_stage"]), recompute=str(r["recompute"]), micro_batch=int(r["micro_batch"]))
        assert _close(float(m["total"]), r["per_device_bytes"])


def test_cost_agrees_with_the_cost_api(catalog):
    """A sweep row's prices equal `wseplan cost` for the same question (two callers of one cost model)."""
    from wseplan.costing import cost

    for spec in (dict(phase="decode", targets=["h100-sxmx16", "cs3x4"], output_tokens=[64]),
                 dict(phase="prefill", targets=["h200-sxmx8", "cs3"]),
                 dict(phase="train", targets=["h100-sxmx16", "cs3x2"], train_tokens=1e10)):
        sw = S.parse_sweep(dict(name="c", models=["llama-3.1-8b"], batches=[2, 32], contexts=[1024],
                                set={"electricity_usd_per_kwh": 0.2, "cs3.capex_usd": 2.5e6}, **spec))
        df = S.run_sweep(sw, catalog=catalog)
        for i in np.random.default_rng(3).choice(len(df), size=8, replace=False):
            r = df.iloc[int(i)]
            lay = None
            if r["device_kind"] == "gpu":
                lay = {"tp": int(r["tensor_parallel"]), "pp": int(r["pipeline_parallel"]), "dp": int(r["data_parallel"])}
                if sw.phase == "train":
                    lay.update(micro_batch=int(r["micro_batch"]), vpp=1, recompute=1, zero_stage=int(r["zero_stage"]))
            if not r["fits"]:
                assert pd.isna(r["usd_per_mtok"]) and pd.isna(r["usd_per_hour"])
                continue
            ot = None if pd.isna(r["output_tokens"]) else int(r["output_tokens"])
            c = cost("llama-3.1-8b", r["target"], phase=r["phase"], batch=int(r["batch"]), context=int(r["context"]),
                     output_tokens=ot, train_tokens=sw.train_tokens, overrides=sw.set, layout=lay, catalog=catalog)
            assert c.num_systems == r["num_systems"]
            assert _close(c.metric("usd_per_hour"), r["usd_per_hour"])
            key = {"train": "usd_per_mtok_trained", "prefill": "input_usd_per_mtok",
                   "serve": "all_in_usd_per_mtok"}.get(r["phase"], "output_usd_per_mtok")
            assert _close(c.metric(key), r["usd_per_mtok"], 1e-8)
            if sw.phase == "train":
                assert _close(c.metric("usd_per_run"), r["usd_per_run"])


# ---------------------------------------------------------------------------------------------
# array building blocks
# ---------------------------------------------------------------------------------------------
def test_batched_partition_equals_min_max_partition():
    from wseplan.analytic.partition import min_max_partition

    rng = np.random.default_rng(4)
    x = rng.integers(1, 50, size=(40, 12)).astype(float)
    x[:10] = 7.0  # identical items: many ties, the first minimal split point must win as in the scalar DP
    k = rng.integers(1, 12, size=40)
    a = rng.integers(0, 30, size=40).astype(float)
    from wseplan.analytic.partition_rows import min_max_partition_batched

    start, end, _ = min_max_partition_batched(x, k, a, chunk=7)
    for i in range(40):
        _, stages = min_max_partition(x[i], int(k[i]), float(a[i]))
        got = [(int(s), int(e)) for s, e in zip(start[i], end[i]) if s >= 0]
        assert got == stages


def test_wse_time_array_helpers_equal_scalar_forms(catalog):
    from wseplan.analytic import fabric as fab
    from wseplan.analytic import wse_time as wt

    m = catalog.models["llama-3.1-70b"]
    wafer = catalog.wafers["wse3"]
    c = fab.load_fabric_constants()
    fk = fab.wafer_fabric_kwargs(wafer, "bf16", c)
    B = np.array([1.0, 3.0, 17.0])
    C = np.array([100.0, 2048.0, 9000.0])
    side = np.array([64.0, 300.0, 750.0])
    arr = wt.decode_block_cycles_array(arch=m, batch=B, context=C, rows=side, cols=side, fk=fk, gemv_mac_efficiency_frac=0.7)
    hd = wt.head_decode_cycles_array(arch=m, batch=B, rows=side, cols=side, fk=fk, gemv_mac_efficiency_frac=0.7)
    pf = wt.prefill_block_cycles_array(arch=m, tokens=C, rows=side, cols=side, fk=fk, gemm_mac_efficiency_frac=0.6,
                                       gemm_step_overhead_cycles=10.0)
    lb = wt.largest_layer_bytes_array(m, precision="bf16", batch=B, context=C)
    for i in range(3):
        s = wt.decode_block_cycles(arch=m, batch=int(B[i]), context=C[i], rows=side[i], cols=side[i], fk=fk,
                                   gemv_mac_efficiency_frac=0.7)
        h = wt.head_decode_cycles(arch=m, batch=int(B[i]), rows=side[i], cols=side[i], fk=fk, gemv_mac_efficiency_frac=0.7)
        p = wt.prefill_block_cycles(arch=m, tokens=int(C[i]), rows=side[i], cols=side[i], fk=fk, gemm_mac_efficiency_frac=0.6,
                                    gemm_step_overhead_cycles=10.0)
        for got, ref in ((arr, s), (hd, h), (pf, p)):
            for k in ref:
                assert _close(float(ref[k]), float(np.asarray(got[k])[i]))
        assert lb[i] >= m.vocab_size * m.d_model * 2  # at least the LM head's 16-bit weights


def test_default_gpu_layouts_use_exactly_the_count(catalog):
    df = S.run_sweep(_sweep(targets=["h100-sxmx16"], batches=[1]), catalog=catalog)
    prod = df["tensor_parallel"] * df["pipeline_parallel"] * df["data_parallel"]
    assert (prod == 16).all() and (df["num_devices"] == 16).all()
    # every TP that divides the heads and stays in the 8-GPU NVLink domain, every PP that divides 16 / TP
    got = set(zip(df["tensor_parallel"], df["pipeline_parallel"]))
    want = {(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8, 16) if 16 % (t * p) == 0}
    assert got == want


# ---------------------------------------------------------------------------------------------
# output: determinism, engines, atomic writes, names
# ---------------------------------------------------------------------------------------------
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "studies", "sweep-example.yaml")


def test_example_runs_and_is_byte_identical_twice(tmp_path, capsys):
    assert main(["sweep", EXAMPLE, "--out", str(tmp_path / "a"), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert out.err == ""  # no progress bar when stderr is not a terminal
    assert main(["sweep", EXAMPLE, "--out", str(tmp_path / "b"), "--format", "csv", "--chunk", "97"]) == 0
    a = (tmp_path / "a" / "serve-8b-70b.csv").read_bytes()
    b = (tmp_path / "b" / "serve-8b-70b.csv").read_bytes()
    assert a == b
    df = pd.read_csv(tmp_path / "a" / "serve-8b-70b.csv")
    assert len(df) == a.count(b"\n") - 1 and list(df.columns) == list(S.COLUMNS)
    assert df["fits"].dtype == bool and df["fits"].any() and not df["fits"].all()
    ok = df[df["fits"]]
    assert ok["step_s"].gt(0).all() and ok["usd_per_mtok"].gt(0).all()
    # rows that do not fit keep fits=false with blank metrics: nothing is timed or priced that cannot run
    bad = df[~df["fits"]]
    for col in ("step_s", "tpot_s", "tokens_per_s", "usd_per_mtok", "usd_per_hour", "energy_j_per_token"):
        assert bad[col].isna().all(), col
    assert os.listdir(tmp_path / "a") == ["serve-8b-70b.csv"]


def test_dask_engine_equals_local_row_for_row(catalog):
    pytest.importorskip("distributed")
    from dask.distributed import Client, LocalCluster

    sw = S.parse_sweep(dict(name="d", phase="decode", models=["llama-3.1-8b", "llama-3.1-70b"],
                            targets=["h100-sxmx8", "cs3x4"], batches=[1, 4, 32], contexts=[512, 4096], output_tokens=[64]))
    local = S.run_sweep(sw, catalog=catalog, chunk=50)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster, \
            Client(cluster) as client:
        dist = S.run_sweep(sw, catalog=catalog, engine="dask", client=client, chunk=50)
    assert len(S.plan_sweep(sw, catalog).tasks(50)) > 4
    pd.testing.assert_frame_equal(local, dist, check_exact=True)
    assert S.frame_bytes(local, "x.csv") == S.frame_bytes(dist, "x.csv")


def test_failed_evaluation_leaves_existing_output_intact(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100-sxmx8]\nbatches: [1, 2]\ncontexts: [64]\n"
                 "output: keep.csv\n")
    (out / "keep.csv").write_text("previous\n")
    calls = []

    def boom(g, s, e):
        calls.append(1)
        raise S.InputError("boom: evaluation failed")

    monkeypatch.setattr(S.evaluate, "evaluate_task", boom)
    assert main(["sweep", str(f), "--out", str(out), "--force"]) == 2
    assert "boom" in capsys.readouterr().err and calls
    assert (out / "keep.csv").read_text() == "previous\n"
    monkeypatch.undo()
    # a failure while writing leaves no temporary file and the old file whole
    real_fsync = os.fsync

    def bad_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", bad_fsync)
    with pytest.raises(S.InputError, match="disk full"):
        S.write_output(pd.DataFrame({"a": [1.0]}), out, "keep.csv")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert sorted(os.listdir(out)) == ["keep.csv"] and (out / "keep.csv").read_text() == "previous\n"
    assert main(["sweep", str(f), "--out", str(out), "--force"]) == 0
    assert (out / "keep.csv").read_text().startswith("model,target")


@pytest.mark.parametrize("name,expect", [("../../etc/evil.csv", "evil.csv"), ("/abs/path/r.csv", "r.csv"),
                                         ("..", "x.csv"), ("a b;rm -rf.csv", "a_b_rm_-rf.csv"), (None, "x.csv"),
                                         ("report", "report.csv"), ("..\\..\\win.csv", "win.csv")])
def test_output_names_stay_inside_the_folder(tmp_path, capsys, name, expect):
    sw = _sweep(name="x", output=name, batches=[1])
    assert sw.output_name() == expect
    f = tmp_path / "s.yaml"
    import yaml

    f.write_text(yaml.safe_dump(sw.model_dump(exclude_none=True, exclude_defaults=True) | {"output": name}
                                if name is not None else sw.model_dump(exclude_none=True, exclude_defaults=True)))
    out = tmp_path / "deep" / "out"
    assert main(["sweep", str(f), "--out", str(out)]) == 0, capsys.readouterr().err
    assert os.listdir(out) == [expect]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "s.yaml"]
    with pytest.raises(S.InputError):
        S.write_output(pd.DataFrame({"a": [1]}), out, "../x.csv")


def test_parquet_output(tmp_path, capsys):
    sw = _sweep(output="r.parquet")
    f = tmp_path / "s.yaml"
    import yaml

    f.write_text(yaml.safe_dump(sw.model_dump(exclude_none=True, exclude_defaults=True) | {"output": "r.parquet"}))
    rc = main(["sweep", str(f), "--out", str(tmp_path / "o")])
    assert rc == 0  # pyarrow is a core dependency
    df = pd.read_parquet(tmp_path / "o" / "r.parquet")
    assert len(df) == S.plan_sweep(sw).size


def test_wafer_edge_cases_agree_with_fit_and_time(catalog):
    """A layer that alone outgrows a wafer (one stage per item, does not fit) and a fixed count that is too small."""
    from wseplan.fit import fit

    sw = S.parse_sweep(dict(name="e", phase="decode", models=["llama-3.1-70b"], targets=["wse2", "cs3x3"],
                            batches=[1, 1024], contexts=[1024, 65536]))
    df = S.run_sweep(sw, catalog=catalog)
    assert not df["fits"].all() and df["fits"].any()
    for _, r in df.iterrows():
        f = fit(r["model"], r["target"], phase="decode", batch=int(r["batch"]), context=int(r["context"]), catalog=catalog)
        assert f.fits == r["fits"] and f.num_devices == r["num_devices"]
        assert _close(f.capacity_bytes - f.headroom_bytes, r["per_device_bytes"])
    _check_time(df, catalog, n=len(df), seed=0)


def test_groups_survive_pickling_for_remote_workers(catalog):
    import pickle

    plan = S.plan_sweep(_sweep(targets=["h100-sxmx8", "cs3"], batches=[1, 2, 3]), catalog)
    for g in plan.groups:
        g2 = pickle.loads(pickle.dumps(g))
        a, b = S.evaluate_task(g, 0, g.size), S.evaluate_task(g2, 0, g2.size)
        for k in a:
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))


def test_progress_bar_only_on_a_terminal(tmp_path, capsys, monkeypatch):
    import sys

    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: prefill\nmodels: [llama-3.1-8b]\ntargets: [h100-sxmx8]\nbatches: [1, 2]\ncontexts: [64]\n")
    monkeypatch.setattr(S, "PROGRESS_MIN_CONFIGURATIONS", 0)
    assert main(["sweep", str(f), "--out", str(tmp_path / "a"), "--format", "csv"]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    seen = []
    real = S.sweep_to_file

    def spy(*a, progress, **kw):
        seen.append(progress)
        return real(*a, progress=progress, **kw)

    monkeypatch.setattr(S, "sweep_to_file", spy)
    assert main(["sweep", str(f), "--out", str(tmp_path / "b"), "--format", "csv", "--chunk", "5"]) == 0
    assert seen and seen[0] is not None
    assert (tmp_path / "a" / "x.csv").read_bytes() == (tmp_path / "b" / "x.csv").read_bytes()


# ---------------------------------------------------------------------------------------------
# streaming output: parts joined into one file, constant memory, the same bytes from every engine
# ---------------------------------------------------------------------------------------------
MIXED = dict(name="m", phase="decode", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["h100-sxmx8", "cs3x2"],
             batches=[1, 3, 16, 64], contexts=[512, 4096], output_tokens=[1, 64])


def test_joined_parquet_parts_equal_pyarrow_writer_bytes():
    """Joining one-row-group files (data regions copied, one footer with shifted offsets) gives byte for byte
    the file pyarrow's own ParquetWriter writes for the same row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from wseplan.sweep import parquet_concat as PC

    def table(n, seed):
        r = np.random.default_rng(seed)
        v = r.random(n)
        v[r.random(n) < 0.1] = np.nan
        return pa.table({"a": pa.array(v, from_pandas=True), "i": pa.array(r.integers(0, 5, n)),
                         "b": pa.DictionaryArray.from_arrays(pa.array(r.integers(0, 3, n).astype(np.int8)),
                                                             pa.array(["x", "y", "z"])),
                         "f": pa.array(r.random(n) < 0.5)})

    tables = [table(n, i) for i, n in enumerate([1000, 5, 20000, 1] + [3] * 14)]  # 18 row groups: long list header
    kw = dict(compression="snappy", use_dictionary=["b"])
    c = PC.Concatenator()
    out = bytearray(PC.MAGIC)
    for t in tables:
        buf = io.BytesIO()
        pq.write_table(t, buf, **kw)
        data = buf.getvalue()
        start, footer = PC.split_footer(data, len(data))
        assert PC.encode_struct(PC.decode_struct(footer)) == footer
        c.add(PC.read_part(footer, start))
        out += data[4:start]
    out += c.footer()
    ref = io.BytesIO()
    with pq.ParquetWriter(ref, tables[0].schema, **kw) as w:
        for t in tables:
            w.write_table(t)
    assert bytes(out) == ref.getvalue()
    assert pq.read_table(io.BytesIO(bytes(out))).equals(pa.concat_tables(tables))
    with pytest.raises(PC.ParquetConcatError):
        PC.split_footer(b"PAR1junk", 8)
    other = io.BytesIO()
    pq.write_table(pa.table({"z": [1.0]}), other)
    d = other.getvalue()
    s, f = PC.split_footer(d, len(d))
    with pytest.raises(PC.ParquetConcatError, match="different Parquet schemas"):
        c.add(PC.read_part(f, s))


@pytest.mark.parametrize("chunk", [None, 7])
def test_streamed_files_equal_the_frame(tmp_path, catalog, chunk):
    import pyarrow.parquet as pq

    sw = S.parse_sweep(MIXED)
    plan = S.plan_sweep(sw, catalog)
    df = S.run_sweep(sw, catalog=catalog)
    res = S.sweep_to_file(plan, tmp_path / "p", "x.parquet", chunk=chunk)
    back = pd.read_parquet(res.path)
    pd.testing.assert_frame_equal(back, df, check_exact=True)
    assert pq.ParquetFile(res.path).num_row_groups == plan.num_tasks(chunk) == res.tasks
    assert res.output_bytes == res.path.stat().st_size and res.configurations == len(df) == plan.size
    assert res.fitting == int(df["fits"].sum()) and res.groups == S.summary_rows(df)
    meta = pq.read_schema(res.path).metadata
    assert meta[b"wseplan.schema_version"] == str(S.SCHEMA_VERSION).encode() and meta[b"wseplan.sweep"] == b"m"
    csv = S.sweep_to_file(plan, tmp_path / "c", "x.csv", chunk=chunk)
    assert csv.path.read_bytes() == S.frame_bytes(df, "x.csv")  # CSV bytes do not depend on the chunking
    assert csv.path.read_bytes().startswith(b"model,target,hardware,device_kind,precision,phase,batch,context,")
    assert pd.read_csv(csv.path)["usd_per_mtok"].equals(df["usd_per_mtok"])
    assert sorted(os.listdir(tmp_path / "p")) == ["x.parquet"] and sorted(os.listdir(tmp_path / "c")) == ["x.csv"]


def test_names_that_need_quotes_are_quoted_in_csv(tmp_path, catalog):
    from wseplan.sweep.output import OutputSpec, encode_part

    plan = S.plan_sweep(_sweep(batches=[1]), catalog)
    cols = S.evaluate_task(plan.groups[0], 0, 2)
    plain = S.output_spec(plan, "x.csv")
    assert plain.csv_quoting == "none"
    odd = OutputSpec(fmt="csv", sweep="x", categories=tuple((k, ('a,"b"',)) for k, _ in plain.categories),
                     codes=((0, (0,) * 6),), csv_quoting="needed")
    rows = pd.read_csv(io.BytesIO(S.output.CSV_HEADER + encode_part(odd, cols)))
    assert (rows["model"] == 'a,"b"').all() and len(rows) == 2


def test_streaming_memory_does_not_grow_with_the_sweep(tmp_path, catalog):
    """Peak traced memory (numpy included) of a 4x larger sweep stays that of one task: nothing accumulates."""
    import tracemalloc

    def peak(batches, out):
        plan = S.plan_sweep(_sweep(targets=["h100-sxmx64"], batches=batches, contexts=[256, 4096], output_tokens=[16]),
                            catalog)
        tracemalloc.start()
        S.sweep_to_file(plan, tmp_path / out, "x.parquet", chunk=1024)
        p = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return p, plan.num_tasks(1024)

    small, n_small = peak(list(range(1, 65)), "a")
    big, n_big = peak(list(range(1, 257)), "b")
    assert n_big > 3 * n_small
    assert big < 1.3 * small, (small, big)


@pytest.mark.parametrize("spec", [
    dict(phase="decode", targets=["h100-sxmx64"], batches=list(range(1, 65)), contexts=[256, 4096], output_tokens=[1, 64]),
    dict(phase="train", targets=["h100-sxmx64"], batches=[64, 128], contexts=[2048, 4096],
         layouts=dict(micro_batch=[1, 2], recompute=["none", "full"], zero_stage=[1, 3])),
    dict(phase="decode", targets=["cs3x4"], batches=list(range(1, 129)), contexts=[512, 4096], output_tokens=[64, 256]),
    dict(phase="train", targets=["cs3x4"], batches=list(range(8, 2049, 8)), contexts=[2048, 4096]),
], ids=["gpu-decode", "gpu-train", "wafer-decode", "wafer-train"])
def test_evaluation_memory_per_configuration_is_under_the_planned_bytes(catalog, spec):
    """The memory model of the size limits: evaluate_task's peak traced memory per configuration."""
    import tracemalloc

    plan = S.plan_sweep(S.parse_sweep(dict(name="e", models=["llama-3.1-70b"], **spec)), catalog)
    g = plan.groups[0]
    S.evaluate_task(g, 0, 64)  # imports and caches outside the measurement
    for n in (min(g.size, 256), min(g.size, 4096)):
        tracemalloc.start()
        S.evaluate_task(g, 0, n)
        p = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert p <= S.task_memory_bytes(g.target.kind, n), (p, n)


def test_frame_memory_per_configuration_is_under_the_planned_bytes(catalog):
    import tracemalloc

    sw = _sweep(targets=["h100-sxmx64"], batches=list(range(1, 257)), contexts=[256, 4096], output_tokens=[1, 64])
    S.run_sweep(_sweep(), catalog=catalog)
    tracemalloc.start()
    df = S.run_sweep(sw, catalog=catalog)
    p = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    plan = S.plan_sweep(sw, catalog)
    assert len(df) > 20_000 and p <= S.task_memory_bytes("gpu", plan.largest_task()) + len(df) * S.FRAME_BYTES_PER_CONFIGURATION


def test_limits_refuse_in_one_line(tmp_path, catalog, capsys, monkeypatch):
    import shutil

    plan = S.plan_sweep(_sweep(targets=["h100-sxmx64"], batches=list(range(1, 101))), catalog)
    avail = S.available_memory_bytes()
    assert avail is None or avail > 0
    with pytest.raises(S.InputError, match=r"configurations need ~.* as one DataFrame .* over the limit of [\d,]+ that"):
        S.check_limits(plan, in_memory=True, available=10**6)
    with pytest.raises(S.InputError, match=r"--chunk: tasks of [\d,]+ configurations need .* use a smaller --chunk"):
        S.check_limits(plan, available=10**6)
    with pytest.raises(S.InputError, match=r"x 4 at once"):
        S.check_limits(plan, parallel=4, available=S.task_memory_bytes("gpu", plan.largest_task()) * 2)
    with pytest.raises(S.InputError, match=r"exceed the limit of 32,767 row groups.*--chunk 2 or larger"):
        S.check_limits(S.plan_sweep(_sweep(targets=["h100-sxmx64"], batches=list(range(1, 2049))), catalog), chunk=1,
                       fmt="parquet", available=10**12)
    S.check_limits(plan, fmt="csv", out_dir=tmp_path / "new" / "deeper", available=10**12)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(S.InputError, match=r"of CSV .* than the 1,000 bytes free in .*a limit of 3\)"):
        S.check_limits(plan, fmt="csv", out_dir=tmp_path, available=10**12)
    monkeypatch.undo()
    monkeypatch.setattr(S.engine, "available_memory_bytes", lambda: 10**6)
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100-sxmx64]\nbatches: [1, 2, 3]\ncontexts: [64]\n")
    assert main(["sweep", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--chunk" in err and "available memory" in err
    assert not (tmp_path / "o").exists()


def test_balanced_tasks_cover_every_configuration_once(catalog):
    plan = S.plan_sweep(S.parse_sweep(MIXED), catalog)
    for chunk in (None, 1, 5, 7, 10**9):
        tasks = plan.tasks(chunk)
        assert len(tasks) == plan.num_tasks(chunk)
        for g in plan.groups:
            mine = [(s, e) for gi, s, e in tasks if gi == g.index]
            assert mine[0][0] == 0 and mine[-1][1] == g.size
            assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
            sizes = [e - s for s, e in mine]
            assert max(sizes) - min(sizes) <= 1 and max(sizes) <= (chunk or S.default_chunk(g))
        assert plan.largest_task(chunk) == max(e - s for _, s, e in tasks)
    assert S.default_chunk(plan.groups[0]) == S.DEFAULT_CHUNK and S.default_chunk(plan.groups[1]) == S.WAFER_CHUNK


def test_killed_run_leaves_no_partial_file_and_the_next_run_cleans_up(tmp_path, catalog):
    """A run that fails mid-way removes its temporary file; temporaries of a dead process are removed later."""
    import subprocess
    import sys

    plan = S.plan_sweep(S.parse_sweep(MIXED), catalog)
    out = tmp_path / "o"
    out.mkdir()
    (out / "x.parquet").write_bytes(b"previous")
    calls = []
    real = S.evaluate.evaluate_task

    def flaky(g, s, e):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(g, s, e)

    S.evaluate.evaluate_task = flaky
    try:
        with pytest.raises(KeyboardInterrupt):
            S.sweep_to_file(plan, out, "x.parquet", chunk=5)
    finally:
        S.evaluate.evaluate_task = real
    assert sorted(os.listdir(out)) == ["x.parquet"] and (out / "x.parquet").read_bytes() == b"previous"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    from wseplan.sweep.writer import _HOST

    (out / f".x.parquet.tmp-{pid}@{_HOST}.abc").write_bytes(b"stale")
    (out / f".x.parquet.parts-{pid}@{_HOST}.def").mkdir()
    (out / f".x.parquet.tmp-{os.getpid()}@{_HOST}.live").write_bytes(b"ours, alive")
    (out / ".x.parquet.tmp-1@otherhost.zz").write_bytes(b"another host")
    S.sweep_to_file(plan, out, "x.parquet")
    assert sorted(os.listdir(out)) == sorted([".x.parquet.tmp-1@otherhost.zz", f".x.parquet.tmp-{os.getpid()}@{_HOST}.live",
                                              "x.parquet"])
    pd.testing.assert_frame_equal(pd.read_parquet(out / "x.parquet"), S.run_sweep(S.parse_sweep(MIXED), catalog=catalog))


def test_unwritable_output_is_one_line(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100-sxmx8]\nbatches: [1]\ncontexts: [64]\n")
    (tmp_path / "file").write_text("x")
    assert main(["sweep", str(f), "--out", str(tmp_path / "file")]) == 2
    assert "not a folder" in capsys.readouterr().err
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # running as root: permissions do not apply
            pytest.skip("the file system lets this user write a read-only folder")
        assert main(["sweep", str(f), "--out", str(ro)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot write" in err and "Traceback" not in err
    finally:
        ro.chmod(0o700)


# ---------------------------------------------------------------------------------------------
# Dask: worker processes, part files written by the workers, failures in one line
# ---------------------------------------------------------------------------------------------
class _KillWorker:
    """Worker plugin: the worker process exits when it starts a sweep task (once overall if ``marker`` is a
    path: the first worker to create the marker file dies; always if ``marker`` is None)."""

    name = "wseplan-test-kill"

    def __init__(self, marker):
        self.marker = marker

    def setup(self, worker):
        pass

    def teardown(self, worker):
        pass

    def transition(self, key, start, finish, **kw):
        if finish != "executing" or "wseplan-sweep" not in str(key):
            return
        if self.marker is not None:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
        os._exit(1)


@pytest.fixture(scope="module")
def proc_cluster():
    """Two worker processes of the engine's own local cluster (127.0.0.1, no dashboard), one retry per task."""
    pytest.importorskip("distributed")
    import dask
    from dask.distributed import Client

    # spawned workers: these tests kill workers on purpose, and a nanny that re-forks a worker from this test process
    # (its threads and the clusters of earlier tests) is not what they test; the CLI's forked start is tested apart
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = S.local_cluster(2, start_method="spawn")
    client = Client(cluster, set_as_default=False)
    try:
        yield cluster, client
    finally:
        client.close()
        cluster.close()


def _register(client, plugin):
    import cloudpickle
    from distributed import WorkerPlugin

    cloudpickle.register_pickle_by_value(__import__(__name__))
    p = type("KillWorkerPlugin", (_KillWorker, WorkerPlugin), {})(plugin.marker)
    if hasattr(client, "register_plugin"):
        client.register_plugin(p, name=_KillWorker.name)
    else:  # older distributed
        client.register_worker_plugin(p, name=_KillWorker.name)


def test_local_cluster_is_loopback_processes_without_dashboard(proc_cluster):
    cluster, client = proc_cluster
    import urllib.error
    import urllib.request

    assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
    http = cluster.scheduler.http_server  # Dask always runs one; ours serves /health only, on loopback
    assert http.address == "127.0.0.1" and http.port != 8787
    with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/health", timeout=10) as r:
        assert r.status == 200
    for page in ("status", "info/main/workers.html", "metrics"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{http.port}/{page}", timeout=10)
        assert e.value.code == 404
    info = client.scheduler_info()
    assert all(a.startswith("tcp://127.0.0.1:") for a in info["workers"])
    pids = client.run(os.getpid)
    assert len(pids) == 2 and os.getpid() not in pids.values()
    assert set(client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_").values()) == {os.environ.get("MALLOC_TRIM_THRESHOLD_")}
    assert set(client.run(os.environ.get, "OMP_NUM_THREADS").values()) == {"1"}


def test_dashboard_without_bokeh_is_one_line():
    pytest.importorskip("distributed")
    try:
        import bokeh  # noqa: F401
        pytest.skip("bokeh is installed: the dashboard would start")
    except ImportError:
        pass
    with pytest.raises(S.InputError, match="--dashboard: the Dask dashboard needs bokeh"):
        S.local_cluster(1, dashboard="8787")


def test_a_local_cluster_that_does_not_start_is_one_line(tmp_path, catalog, monkeypatch):
    pytest.importorskip("distributed")

    def broken(*a, **k):
        raise RuntimeError("Nanny failed to start.")

    monkeypatch.setattr(S.engine, "local_cluster", broken)
    with pytest.raises(S.InputError, match=r"local cluster did not start \(RuntimeError: Nanny failed to start.\); from a"):
        S.sweep_to_file(S.plan_sweep(_sweep(), catalog), tmp_path / "o", "x.csv", engine="dask")
    assert not (tmp_path / "o").exists()


def test_dask_workers_write_parts_and_the_file_is_byte_identical(proc_cluster, tmp_path, catalog):
    _, client = proc_cluster
    plan = S.plan_sweep(S.parse_sweep(MIXED), catalog)
    for name in ("x.parquet", "x.csv"):
        local = S.sweep_to_file(plan, tmp_path / "l", name, chunk=9)
        seen = []
        dist = S.sweep_to_file(plan, tmp_path / "d", name, engine="dask", client=client, chunk=9, progress=seen.append)
        assert dist.path.read_bytes() == local.path.read_bytes()
        assert dist.groups == local.groups and sum(seen) == plan.size and len(seen) == plan.num_tasks(9) > 10
        assert sorted(os.listdir(tmp_path / "d")) == sorted(os.listdir(tmp_path / "l"))  # part folder removed
    df = S.run_sweep(S.parse_sweep(MIXED), catalog=catalog, engine="dask", client=client, chunk=9)
    pd.testing.assert_frame_equal(df, S.run_sweep(S.parse_sweep(MIXED), catalog=catalog), check_exact=True)


def test_a_lost_worker_is_retried_to_the_same_bytes(proc_cluster, tmp_path, catalog):
    _, client = proc_cluster
    plan = S.plan_sweep(S.parse_sweep(MIXED), catalog)
    local = S.sweep_to_file(plan, tmp_path / "l", "x.parquet", chunk=30)
    marker = tmp_path / "killed-once"
    _register(client, _KillWorker(str(marker)))
    try:
        dist = S.sweep_to_file(plan, tmp_path / "d", "x.parquet", engine="dask", client=client, chunk=30)
    finally:
        client.unregister_worker_plugin(_KillWorker.name)
    assert marker.exists()  # a worker did die
    assert dist.path.read_bytes() == local.path.read_bytes()
    client.wait_for_workers(2, timeout=60)


def test_a_task_that_kills_its_workers_is_one_line(proc_cluster, tmp_path, catalog):
    _, client = proc_cluster
    plan = S.plan_sweep(_sweep(batches=[1, 2]), catalog)
    _register(client, _KillWorker(None))
    try:
        with pytest.raises(S.InputError, match="lost together with the workers"):
            S.sweep_to_file(plan, tmp_path / "d", "x.parquet", engine="dask", client=client)
    finally:
        client.unregister_worker_plugin(_KillWorker.name)
    assert os.listdir(tmp_path / "d") == []
    client.wait_for_workers(2, timeout=60)


def test_cli_dask_engine_equals_local(tmp_path, capsys):
    pytest.importorskip("distributed")
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100-sxmx8, cs3]\nbatches: [1, 2, 3]\n"
                 "contexts: [64, 512]\noutput: x.parquet\n")
    assert main(["sweep", str(f), "--out", str(tmp_path / "l"), "-f", "json"]) == 0
    assert main(["sweep", str(f), "--out", str(tmp_path / "d"), "--engine", "dask", "--workers", "1", "--chunk", "5",
                 "-f", "json"]) == 0
    assert main(["sweep", str(f), "--out", str(tmp_path / "l5"), "--chunk", "5", "-f", "json"]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert (tmp_path / "d" / "x.parquet").read_bytes() == (tmp_path / "l5" / "x.parquet").read_bytes()
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "d" / "x.parquet"), pd.read_parquet(tmp_path / "l" / "x.parquet"))


def test_workers_without_the_shared_folder_send_their_parts(tmp_path, catalog, monkeypatch):
    """A worker that cannot see the part folder returns the part's bytes; parts that arrive ahead of order are
    kept on disk by the client; the file is the same."""
    pytest.importorskip("distributed")
    import time

    from dask.distributed import Client, LocalCluster

    plan = S.plan_sweep(S.parse_sweep(MIXED), catalog)
    local = S.sweep_to_file(plan, tmp_path / "l", "x.parquet", chunk=40)
    real = S.evaluate.evaluate_task

    def first_is_slow(g, s, e):
        if g.index == 0 and s == 0:
            time.sleep(1.0)  # let later tasks finish first (the result does not depend on it)
        return real(g, s, e)

    monkeypatch.setattr(S.evaluate, "evaluate_task", first_is_slow)
    monkeypatch.setattr(S.engine, "_sees", lambda parts_dir: False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster, \
            Client(cluster, set_as_default=False) as client:
        dist = S.sweep_to_file(plan, tmp_path / "d", "x.parquet", engine="dask", client=client, chunk=40)
    assert dist.path.read_bytes() == local.path.read_bytes()
    assert sorted(os.listdir(tmp_path / "d")) == ["x.parquet"]


def _silent_server(reply: bytes = b""):
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    conns = []

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            if reply:
                c.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return srv, conns


@pytest.mark.parametrize("reply,needle", [(b"", "sent no Dask handshake within 0.5 s"),
                                          (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not as a Dask scheduler"),
                                          (b"\x05\x00\x00\x00\x00\x00\x00\x00hello", "not as a Dask scheduler")])
def test_a_port_that_is_not_a_scheduler_is_one_line(reply, needle, catalog, tmp_path):
    pytest.importorskip("distributed")
    srv, conns = _silent_server(reply)
    try:
        addr = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
        with pytest.raises(S.InputError, match=needle):
            S.sweep_to_file(S.plan_sweep(_sweep(), catalog), tmp_path, "x.csv", engine="dask", scheduler=addr,
                            connect_timeout_s=0.5)
    finally:
        srv.close()
        for c in conns:
            c.close()
    assert os.listdir(tmp_path) == []


def test_scheduler_addresses_in_one_line(tmp_path, capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100-sxmx8]\nbatches: [1]\ncontexts: [64]\n")
    for addr, needle in ((f"tcp://127.0.0.1:{port}", "cannot connect"), (f"127.0.0.1:{port}", "cannot connect"),
                         ("tls://127.0.0.1:8786", "tls:// is not supported"), ("ucx://127.0.0.1:8786", "ucx:// is not"),
                         ("http://127.0.0.1:8786", "unknown protocol"), ("tcp://127.0.0.1:99999", "not a scheduler address"),
                         ("tcp://[::1", "not a scheduler address"), ("tcp://a:b:c", "not a scheduler address")):
        assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--engine", "dask", "--scheduler", addr]) == 2, addr
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err, (addr, err)
    assert not (tmp_path / "o").exists()
    assert S.parse_scheduler_address("10.0.0.5") == ("tcp://10.0.0.5:8786", "10.0.0.5", 8786)
    assert S.parse_scheduler_address("tcp://[::1]:9000") == ("tcp://[::1]:9000", "::1", 9000)
    for extra, word in ((["--workers", "2"], "--workers"), (["--dashboard", "8787"], "--dashboard")):
        assert main(["sweep", str(f), "--out", str(tmp_path / "o"), *extra]) == 2
        assert word in capsys.readouterr().err


def test_a_scheduler_without_workers_is_one_line(tmp_path, catalog):
    pytest.importorskip("distributed")
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1", dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster:
        assert S.probe_scheduler(cluster.scheduler_address, 5.0) == cluster.scheduler_address
        with pytest.raises(S.InputError, match="no workers joined the scheduler at tcp://127.0.0.1:.* within 0.5 s"):
            S.sweep_to_file(S.plan_sweep(_sweep(), catalog), tmp_path / "o", "x.csv", engine="dask",
                            scheduler=cluster.scheduler_address, worker_timeout_s=0.5)
    assert not (tmp_path / "o").exists()  # nothing is created before the engine is ready


class _KillScheduler:
    """Worker plugin: when the worker starts the second sweep task, it kills the scheduler process and stalls."""

    name = "wseplan-test-kill-scheduler"

    def __init__(self, pid):
        self.pid = pid
        self.seen = 0

    def setup(self, worker):
        pass

    def teardown(self, worker):
        pass

    def transition(self, key, start, finish, **kw):
        if finish == "executing" and "wseplan-sweep" in str(key):
            self.seen += 1
            if self.seen == 2:
                import signal
                import time

                os.kill(self.pid, signal.SIGKILL)
                time.sleep(60)


@pytest.fixture
def scheduler_pair(tmp_path):
    """A real `dask scheduler` and `dask worker` (one thread, no nanny), as separate processes on 127.0.0.1."""
    pytest.importorskip("distributed")
    import subprocess
    import sys
    import time

    sf = tmp_path / "scheduler.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(sf)], **quiet)]
    try:
        deadline = time.monotonic() + 120
        while not sf.exists() or not sf.read_text().strip().endswith("}"):
            assert time.monotonic() < deadline and procs[0].poll() is None, "dask scheduler did not start"
            time.sleep(0.1)
        import json

        addr = json.loads(sf.read_text())["address"]
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", addr, "--nthreads", "1",
                                       "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"], **quiet))
        yield addr, procs[0]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_real_scheduler_pair_then_losing_the_scheduler(scheduler_pair, tmp_path, catalog, capsys):
    """`--scheduler` with a `dask scheduler` / `dask worker` pair gives the local bytes; when the scheduler dies
    mid-run the sweep ends with one line and leaves no partial output."""
    import cloudpickle
    from dask.distributed import Client, WorkerPlugin

    addr, sched = scheduler_pair
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100-sxmx8, cs3]\nbatches: [1, 2, 3]\n"
                 "contexts: [64, 512]\noutput: x.parquet\n")
    assert main(["sweep", str(f), "--out", str(tmp_path / "l"), "--chunk", "4"]) == 0
    assert main(["sweep", str(f), "--out", str(tmp_path / "d"), "--chunk", "4", "--engine", "dask", "--scheduler", addr]) == 0
    capsys.readouterr()
    assert (tmp_path / "d" / "x.parquet").read_bytes() == (tmp_path / "l" / "x.parquet").read_bytes()
    cloudpickle.register_pickle_by_value(__import__(__name__))
    with Client(addr, set_as_default=False, timeout=30) as c:
        plugin = type("KillSchedulerPlugin", (_KillScheduler, WorkerPlugin), {})(sched.pid)
        if hasattr(c, "register_plugin"):
            c.register_plugin(plugin, name=_KillScheduler.name)
        else:
            c.register_worker_plugin(plugin, name=_KillScheduler.name)
    rc = main(["sweep", str(f), "--out", str(tmp_path / "d"), "--chunk", "4", "--engine", "dask", "--scheduler", addr,
               "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "lost the connection to the scheduler" in err, err
    assert sched.wait(timeout=30) is not None
    assert sorted(os.listdir(tmp_path / "d")) == ["x.parquet"]  # the previous output, untouched; no temporaries
    assert (tmp_path / "d" / "x.parquet").read_bytes() == (tmp_path / "l" / "x.parquet").read_bytes()


@pytest.mark.parametrize("threshold, method", [(None, "fork"), ("65536", None)])
def test_local_cluster_forks_its_workers_on_linux(monkeypatch, threshold, method):
    """The CLI's local cluster forks its workers (they start with wseplan imported: no ~1 CPU-s import each); a malloc
    trim threshold to set needs fresh processes, so Dask's own start method is kept then."""
    pytest.importorskip("distributed")
    import sys as _sys

    import dask
    import distributed

    from wseplan.sweep import dask_cluster as D

    seen = {}

    def fake(**kw):
        seen["method"] = dask.config.get("distributed.worker.multiprocessing-method", None)
        seen["threshold"] = dask.config.get("distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_", None)
        return "cluster"

    monkeypatch.setattr(distributed, "LocalCluster", fake)
    monkeypatch.setattr(_sys, "platform", "linux")
    default = dask.config.get("distributed.worker.multiprocessing-method", None)
    assert D.local_cluster(2, malloc_trim_threshold=threshold) == "cluster"
    assert seen["method"] == (method or default) and seen["threshold"] == threshold
    monkeypatch.setattr(_sys, "platform", "darwin")
    D.local_cluster(2)
    assert seen["method"] == default
    D.local_cluster(2, start_method="spawn")
    assert seen["method"] == "spawn"


def test_tp_that_does_not_divide_the_heads_is_no_row(catalog):
    # tp 3 does not divide Llama-3.1-8B's 32 heads (plan refuses it); tp 8 does: only its rows are swept
    spec = dict(name="h", phase="decode", models=["llama-3.1-8b"], targets=["h100x8"], batches=[1, 8], contexts=[2048],
                layouts={"tensor_parallel": [3, 8]})
    df = S.run_sweep(S.parse_sweep(spec), catalog=catalog)
    assert len(df) == 2 and set(df["tensor_parallel"]) == {8}


def test_a_micro_batch_larger_than_a_replicas_share_is_not_timed_or_priced(catalog):
    """8 GPUs in data parallel at batch 8 give each replica one sequence: a micro-batch of 4 runs nothing (the scalar
    chain refuses it), so the row keeps fits = false and blank metrics; micro-batch 1 is timed."""
    from wseplan.plan import plan

    df = S.run_sweep(S.parse_sweep(dict(name="m", phase="train", models=["llama-3.2-1b"], targets=["h100-sxmx8"],
                                        batches=[8], contexts=[1024],
                                        layouts=dict(tensor_parallel=[1], pipeline_parallel=[1], data_parallel=[8],
                                                     micro_batch=[1, 4]))), catalog=catalog)
    by_mb = {int(r["micro_batch"]): r for _, r in df.iterrows()}
    assert bool(by_mb[1]["fits"]) and by_mb[1]["step_s"] > 0
    assert not bool(by_mb[4]["fits"]) and pd.isna(by_mb[4]["step_s"]) and pd.isna(by_mb[4]["usd_per_mtok"])
    with pytest.raises(InputError, match="micro_batch"):
        plan("llama-3.2-1b", "h100-sxmx8", phase="train", batch=8, context=1024, catalog=catalog,
             layout={"tp": 1, "pp": 1, "dp": 8, "micro_batch": 4})


def test_an_output_file_that_exists_is_refused_unless_forced(tmp_path, capsys):
    """audit30a H1: `sweep` replaced an existing output file without being asked. It is refused (one line, exit 2,
    the file untouched) and replaced with --force."""
    import yaml

    sw = _sweep(output="r.csv", batches=[1])
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(sw.model_dump(exclude_none=True, exclude_defaults=True) | {"output": "r.csv"}))
    out = tmp_path / "o"
    out.mkdir()
    mine = out / "r.csv"
    mine.write_text("my own data\n")
    capsys.readouterr()
    assert main(["sweep", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err and "r.csv" in err
    assert mine.read_text() == "my own data\n" and os.listdir(out) == ["r.csv"]
    assert main(["sweep", str(f), "--out", str(out), "--force"]) == 0
    assert len(pd.read_csv(mine)) == S.plan_sweep(sw).size


def test_a_training_sweep_row_is_priced_by_cost_with_its_knobs(tmp_path, capsys):
    """audit30b M5: a GPU training sweep row fixes micro-batch 1, selective recompute and ZeRO-1; `cost` had no flags
    for them (only --tp/--pp/--dp, and it searched the rest), so the row could not be priced as it stands. With
    --micro-batch, --recompute and --zero, cost gives the row's step and $/run to 1e-9."""
    f = tmp_path / "s.yaml"
    f.write_text("name: tr\nphase: train\nmodels: [llama-3.1-8b]\ntargets: [h100x64]\nbatches: [512]\ncontexts: [2048]\n"
                 "train_tokens: 1e12\nlayouts: {tensor_parallel: [1], pipeline_parallel: [1], data_parallel: [64]}\n"
                 "output: tr.csv\n")
    assert main(["sweep", str(f), "--out", str(tmp_path / "o")]) == 0
    (row,) = pd.read_csv(tmp_path / "o" / "tr.csv").to_dict("records")
    capsys.readouterr()
    argv = ["cost", "llama-3.1-8b", "--target", "h100x64", "--phase", "train", "--batch", "512", "--context", "2048",
            "--tp", "1", "--pp", "1", "--dp", "64", "--micro-batch", str(int(row["micro_batch"])), "--recompute",
            str(row["recompute"]), "--zero", str(int(row["zero_stage"])), "--train-tokens", "1e12", "-f", "json"]
    assert main(argv) == 0
    import json

    rec = json.loads(capsys.readouterr().out)
    assert _close(rec["plan"]["step_s"], row["step_s"]) and _close(rec["headline_value"], row["usd_per_run"])


def test_rows_carry_the_plan_records_interval(catalog):
    """audit33d H2: a sweep row's interval of its headline (step_s in training, tokens_per_s otherwise) is the row's
    plan record's, bit for bit, on GPUs and wafers (the fast end held at the roof or the step's floors alike);
    rows that do not fit have none."""
    from wseplan.plan import plan

    for spec in (dict(phase="train", targets=["h100-sxmx16", "cs3x2"], batches=[64, 512], contexts=[2048]),
                 dict(phase="decode", targets=["h100-sxmx16", "cs3"], batches=[1, 32], contexts=[1024],
                      output_tokens=[64]),
                 dict(phase="serve", targets=["h200-sxmx8", "cs3x4"], batches=[8], contexts=[2048], output_tokens=[256]),
                 dict(phase="prefill", targets=["cs3x2", "h100x8"], batches=[8], contexts=[2048])):
        df = S.run_sweep(S.parse_sweep(dict(name="i", models=["llama-3.1-8b"], **spec)), catalog=catalog)
        assert df.loc[~df["fits"], "interval_low"].isna().all()
        ok = df[df["fits"]]
        rows = [ok.iloc[int(i)] for i in np.random.default_rng(5).choice(len(ok), size=min(6, len(ok)), replace=False)]
        rows += [ok[ok["device_kind"] == "wafer"].iloc[0]]
        for r in rows:
            lay = None
            if r["device_kind"] == "gpu":
                lay = {"tp": int(r["tensor_parallel"]), "pp": int(r["pipeline_parallel"]), "dp": int(r["data_parallel"])}
                if spec["phase"] == "train":
                    lay.update(micro_batch=int(r["micro_batch"]), vpp=int(r["virtual_pipeline"]), recompute=1,
                               zero_stage=int(r["zero_stage"]))
            ot = None if pd.isna(r["output_tokens"]) else int(r["output_tokens"])
            p = plan("llama-3.1-8b", r["target"], phase=r["phase"], batch=int(r["batch"]), context=int(r["context"]),
                     output_tokens=ot, layout=lay, catalog=catalog)
            assert (r["interval_low"], r["interval_high"]) == (p.interval_low, p.interval_high)
            v = r["step_s"] if spec["phase"] == "train" else r["tokens_per_s"]
            assert r["interval_low"] < v < r["interval_high"]


def test_a_lost_interleaving_degree_is_named_and_the_best_layout_shows_its_interleaving(catalog):
    """review33 L2/L3: a requested virtual_pipeline degree no layout of a model can interleave (Llama-3.1-8B's 32 layers
    on pp 8 x vpp 5 = 40 virtual stages) is named in a note, not dropped silently (70B's 80 layers keep it); the
    summary's best layout names the interleaving (and micro-batch) that made it best."""
    plan = S.plan_sweep(S.parse_sweep(dict(name="v", phase="train", models=["llama-3.1-8b", "llama-3.1-70b"],
                                           targets=["h100-sxmx64"], batches=[64], contexts=[2048],
                                           layouts=dict(pipeline_parallel=[8], virtual_pipeline=[2, 5]))), catalog)
    notes = [n for n in plan.skipped if "virtual_pipeline 5" in n]
    assert len(notes) == 1 and notes[0].startswith("llama-3.1-8b x h100-sxmx64")
    df = S.run_sweep(S.parse_sweep(dict(name="v", phase="train", models=["llama-3.1-8b"], targets=["h100-sxmx16"],
                                        batches=[64], contexts=[2048],
                                        layouts=dict(pipeline_parallel=[2, 4], virtual_pipeline=[1, 2]))),
                     catalog=catalog)
    (row,) = S.summary_rows(df)
    best = df[df["fits"]].sort_values("usd_per_mtok", kind="stable").iloc[0]
    v = int(best["virtual_pipeline"])
    assert row["best_layout"].startswith(f"TP{int(best['tensor_parallel'])} PP{int(best['pipeline_parallel'])}")
    assert (f" v{v}" in row["best_layout"]) == (v > 1)


def test_the_summarys_best_meets_the_speed_floor_cost_uses(catalog, tmp_path):
    """audit32d F5, audit33e M3: the summary's best serving row is the cheapest giving every user the catalog's
    per-user speed floor (as `cost` and `compare` choose a point), where any does; it says so and names its answer
    length, devices and per-user speed; the per-task summaries merged give the frame's summary."""
    floor = float(catalog.defaults.default_min_tokens_per_s_per_user.si)
    sw = S.parse_sweep(dict(name="f", phase="decode", models=["llama-3.1-70b"], targets=["h100-sxmx8"],
                            batches=[1, 8, 64, 256], contexts=[2048], output_tokens=[256],
                            layouts=dict(tensor_parallel=[8])))
    df = S.run_sweep(sw, catalog=catalog)
    (row,) = S.summary_rows(df, catalog)
    ok = df[df["fits"] & (df["tokens_per_s_per_user"] >= floor)]
    cheapest = ok.sort_values("usd_per_mtok", kind="stable").iloc[0]
    assert row["best_meets_speed_floor"] is True and row["best_tokens_per_s_per_user"] >= floor
    assert row["best_usd_per_mtok"] == cheapest["usd_per_mtok"] and row["best_batch"] == cheapest["batch"]
    assert row["best_output_tokens"] == 256 and row["best_num_devices"] == 8
    # the absolute cheapest row runs below the floor (a big batch): not the best
    assert df[df["fits"]]["usd_per_mtok"].min() < row["best_usd_per_mtok"]
    res = S.sweep_to_file(S.plan_sweep(sw, catalog), tmp_path, "f.csv")
    assert res.groups == [row]


def test_a_decode_sweep_with_answer_lengths_says_its_rows_are_whole_requests(catalog):
    """audit33e L7: `phase: decode` with `output_tokens` makes every row phase serve (a whole request); a note says so,
    and a decode sweep without answer lengths has none."""
    base = dict(name="d", phase="decode", models=["llama-3.1-8b"], targets=["h100x1"], batches=[1], contexts=[1024])
    with_o = S.plan_sweep(S.parse_sweep(dict(base, output_tokens=[64])), catalog)
    assert any(n.startswith("phase decode with output_tokens: each row is a whole request") for n in with_o.skipped)
    assert all(g.phase == "serve" for g in with_o.groups)
    plain = S.plan_sweep(S.parse_sweep(base), catalog)
    assert not any(n.startswith("phase decode with output_tokens") for n in plain.skipped)
