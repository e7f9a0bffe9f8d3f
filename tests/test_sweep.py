"""`wseplan sweep`: schema errors, agreement with the scalar APIs, determinism, Dask equality, atomic writes and
path sanitising.

Agreement: the sweep is the planning chain on arrays (``wseplan.plan.evaluate``); sampled rows are recomputed one
by one through the scalar APIs (``wseplan.timing.predict_time``, ``wseplan.fit.fit``, ``wseplan.costing.cost``)
and must agree within a relative 1e-9.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest

from wseplan import sweep as S
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
            key = {"train": "usd_per_mtok_trained", "prefill": "input_usd_per_mtok"}.get(sw.phase, "output_usd_per_mtok")
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
    from wseplan.analytic.partition import min_max_partition_batched

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
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
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

    monkeypatch.setattr(S, "evaluate_task", boom)
    assert main(["sweep", str(f), "--out", str(out)]) == 2
    assert "boom" in capsys.readouterr().err and calls
    assert (out / "keep.csv").read_text() == "previous\n"
    monkeypatch.undo()
    # a failure while writing leaves no temporary file and the old file whole
    real_fsync = os.fsync

    def bad_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", bad_fsync)
    with pytest.raises(OSError):
        S.write_output(pd.DataFrame({"a": [1.0]}), out, "keep.csv")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert sorted(os.listdir(out)) == ["keep.csv"] and (out / "keep.csv").read_text() == "previous\n"
    assert main(["sweep", str(f), "--out", str(out)]) == 0
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
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        assert rc == 2 and "pyarrow" in capsys.readouterr().err
        assert not (tmp_path / "o" / "r.parquet").exists()
        return
    assert rc == 0
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
    real = S.evaluate_columns

    def spy(plan, *, chunk, progress):
        seen.append(progress)
        return real(plan, chunk=chunk, progress=progress)

    monkeypatch.setattr(S, "evaluate_columns", spy)
    assert main(["sweep", str(f), "--out", str(tmp_path / "b"), "--format", "csv", "--chunk", "5"]) == 0
    assert seen and seen[0] is not None
    assert (tmp_path / "a" / "x.csv").read_bytes() == (tmp_path / "b" / "x.csv").read_bytes()
