"""`wseplan validate`: file parsing, the CSV contract, and the accuracy reached on the public set."""
import csv
import io
import json
import shutil

import numpy as np
import pytest

from wseplan.cli import main
from wseplan.validate import NO_BAND, NOT_PREDICTED, OUTSIDE, STATUSES, WITHIN, judge
from wseplan.errors import InputError
from wseplan.validate import (OUTPUT_COLUMNS, default_cases_path, gemv_shape, note_hint, read_cases, summarize,
                              validate_cases)

PUBLIC = str(default_cases_path())


@pytest.fixture(scope="module")
def records():
    from wseplan.catalog import load_catalog

    return validate_cases(read_cases(PUBLIC), load_catalog())


def test_public_file_is_the_shared_copy():
    rows = read_cases(PUBLIC)
    assert len(rows) == 216 and rows[0].id == "R001"
    assert len({r.id for r in rows}) == len(rows)


def test_csv_has_one_row_per_case_and_the_contract_columns(capsys):
    rc = main(["validate", PUBLIC, "--format", "csv"])
    out = capsys.readouterr().out
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0].keys()) == OUTPUT_COLUMNS + ("quality", "defaulted")  # audit33d L1
    assert [r["id"] for r in rows] == [c.id for c in read_cases(PUBLIC)]
    for r in rows:
        assert r["status"] in STATUSES
        if r["status"] != NOT_PREDICTED:
            assert float(r["rel_error"]) == pytest.approx(float(r["predicted"]) / float(r["measured"]) - 1, rel=1e-9, abs=1e-12)
            assert r["reason"] == ""
        else:
            assert r["reason"] and r["predicted"] == ""


def test_table_md_json_formats(capsys):
    assert main(["validate", PUBLIC, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "Median |rel_error| per category" in md and "| gpu-train | strong+medium |" in md
    assert main(["validate", PUBLIC, "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert len(rec["rows"]) == 216 and rec["summary"]


@pytest.mark.parametrize("content, why", [
    ("id,category\nR001,gpu-train\n", "missing columns"),
    ("id,category,phase,model,metric,value,unit,hardware,quality\nR001,gpu-train,train,x,mfu,abc,fraction,h100-sxm,strong\n", "value"),
    ("id,category,phase,model,metric,value,unit,hardware,quality\nR001,gpu-train,train,x,mfu,0.4,fraction,h100-sxm,strong\n"
     "R001,gpu-train,train,x,mfu,0.4,fraction,h100-sxm,strong\n", "duplicate"),
    ("id,category,phase,model,metric,value,unit,hardware,quality,tp\nR001,gpu-train,train,x,mfu,0.4,fraction,h100-sxm,strong,two\n", "integer"),
])
def test_malformed_file_exits_2(tmp_path, capsys, content, why):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    assert main(["validate", str(p), "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(InputError):
        read_cases(p)


def test_missing_file_exits_2(tmp_path):
    assert main(["validate", str(tmp_path / "nope.csv")]) == 2


def test_skips_have_reasons_and_only_allowed_kinds(records):
    for r in records:
        if r["status"] == NOT_PREDICTED:
            assert r["reason"]
            assert any(w in r["reason"] for w in ("not a performance quantity", "not given", "unavailable", "no model"))


def test_hints_and_shapes():
    assert note_hint("a | train_tokens=2264924160 | b", "train_tokens") == "2264924160"
    assert note_hint("wse_core_grid=600x595.", "wse_core_grid") == "600x595"
    assert note_hint("nothing here", "train_tokens") is None
    assert gemv_shape("GEMV [1,16K]x[16K,16K]") == (1, 16384, 16384)


def test_a_user_file_with_one_row(tmp_path, capsys):
    """A row given only by catalog name: the architecture comes from the catalog."""
    src = read_cases(PUBLIC)
    p = tmp_path / "one.csv"
    with open(PUBLIC, newline="") as fh:
        rows = list(csv.DictReader(fh))
    row = next(r for r in rows if r["id"] == "R338")
    for k in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab"):
        row[k] = ""
    row["model"] = "llama-3-8b"
    with open(p, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerow(row)
    assert main(["validate", str(p), "--format", "csv"]) == 0
    out = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(out) == 1 and out[0]["status"] in (WITHIN, OUTSIDE)
    assert src  # the public file is untouched


def test_narayanan_row_within_10pct(records):
    r = next(r for r in records if r["id"] == "R013")
    assert r["status"] == WITHIN and abs(r["rel_error"]) <= 0.10


def test_public_set_accuracy_bounds(records):
    """Regression guard on the in-sample accuracy reached (strong+medium rows, defaulted rows included) and the
    coverage; the held-out (leave-one-source-out) medians are `wseplan validate --cv source` (docs/validation.md)."""
    s = {(r["category"], r["quality"]): r for r in summarize(records)}
    assert s[("gpu-train", "strong+medium")]["median_abs_rel_error"] <= 0.11
    assert s[("gpu-infer", "strong+medium")]["median_abs_rel_error"] <= 0.16
    assert s[("gpu-infer", "strong+medium")]["predicted_frac"] >= 0.95
    assert s[("gpu-train", "strong+medium")]["predicted_frac"] >= 0.95
    # micro in sample 10.05% since the twelfth session's refit (held out it improved, 7.1% -> 6.9%: models are chosen
    # by held-out error, docs/validation.md), so the in-sample guard sits half a point above it
    assert s[("micro", "strong+medium")]["median_abs_rel_error"] <= 0.105
    gpu = [r for r in records if r["category"] in ("gpu-train", "gpu-infer") and r["quality"] != "weak"]
    assert np.mean([r["status"] != NOT_PREDICTED for r in gpu]) >= 0.95


def _write_rows(path, rows):
    with open(PUBLIC, newline="") as fh:
        header = next(csv.reader(fh))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in header})


def test_row_without_layout_uses_the_layout_search(tmp_path, capsys):
    p = tmp_path / "nolayout.csv"
    base = dict(category="gpu-train", phase="train", model="llama-2-7b", seq_len=4096, global_batch=256, precision="bf16",
                hardware="a100-80gb", n_devices=64, metric="tokens_per_s", value=200000, unit="tok/s", quality="medium")
    _write_rows(p, [dict(base, id="R900"), dict(base, id="R901", metric="mfu", value=0.5, unit="fraction",
                                                flops_convention="model")])
    assert main(["validate", str(p), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert all(r["status"] in (WITHIN, OUTSIDE) for r in rows) and len(rows) == 2
    # two views of one prediction: tokens/s and MFU agree through 6N + attention FLOPs per token
    from wseplan.analytic.gpu_time import model_flop_per_token
    from wseplan.catalog import load_catalog
    from wseplan.fit import resolve_model

    cat = load_catalog()
    m = resolve_model("llama-2-7b", cat)
    mfu = rows[0]["predicted"] * model_flop_per_token(m, seq_len=4096) / (64 * cat.gpus["a100-80gb"].peak_flop_per_s("bf16"))
    assert rows[1]["predicted"] == pytest.approx(mfu, rel=1e-9)


@pytest.mark.parametrize("gpu", ["a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h800", "h200-sxm", "b200", "gb200",
                                 "mi300x", "tpu-v4"])
def test_every_gpu_predicts_inference_and_training(gpu, tmp_path, capsys):
    p = tmp_path / "g.csv"
    inf = dict(category="gpu-infer", phase="e2e-infer", model="mixtral-8x7b", input_len=512, output_len=128, concurrency=16,
               precision="bf16", hardware=gpu, n_devices=8, tp=8, metric="tokens_per_s_per_gpu", value=100, unit="tok/s/GPU",
               quality="medium")
    tr = dict(category="gpu-train", phase="train", model="llama-3-8b", seq_len=8192, global_batch=64, precision="bf16",
              hardware=gpu, n_devices=16, tp=2, pp=2, dp=4, recompute="selective", zero_stage=1, metric="tflops_per_gpu",
              value=100, unit="TFLOP/s", quality="medium", flops_convention="model")
    _write_rows(p, [dict(inf, id="R901"), dict(tr, id="R902")])
    assert main(["validate", str(p), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    for r in rows:
        assert r["status"] in (WITHIN, OUTSIDE), r["reason"]
        assert np.isfinite(r["predicted"]) and r["predicted"] > 0


def test_status_follows_the_category_band(records):
    """within / outside tolerance follow |rel_error| against the category's P80 band (hand-checked rule), and a
    row far off (like -50%) is never within tolerance."""
    from wseplan.validate import category_bands

    bands = category_bands(records)
    for cat in ("gpu-train", "gpu-infer"):
        errs = sorted(abs(r["rel_error"]) for r in records if r["category"] == cat and r["rel_error"] is not None
                      and r["quality"] in ("strong", "medium") and not r["defaulted"])
        assert bands[cat] == pytest.approx(float(np.percentile(errs, 80)), rel=1e-12)
    for r in records:
        if r["rel_error"] is None:
            assert r["status"] == NOT_PREDICTED and r["reason"]
            continue
        band = bands.get(r["category"])
        want = NO_BAND if band is None else (WITHIN if abs(r["rel_error"]) <= band else OUTSIDE)
        assert r["status"] == want and r["tolerance_frac"] == band
    judged = judge([{"category": "gpu-train", "predicted": 50.0, "rel_error": -0.5},
                    {"category": "gpu-train", "predicted": 99.0, "rel_error": -0.01},
                    {"category": "new", "predicted": 1.0, "rel_error": 0.0},
                    {"category": "gpu-train", "predicted": None, "rel_error": None}], {"gpu-train": 0.12})
    assert [r["status"] for r in judged] == [OUTSIDE, WITHIN, NO_BAND, NOT_PREDICTED]


def test_a_user_file_is_judged_by_the_bundled_bands(tmp_path, capsys):
    """A one-row file far off its measurement is outside tolerance (its own rows do not set its band)."""
    p = tmp_path / "far.csv"
    base = dict(category="gpu-train", phase="train", model="llama-2-7b", seq_len=4096, global_batch=256,
                precision="bf16", hardware="a100-80gb", n_devices=64, metric="tokens_per_s", value=1.0, unit="tok/s",
                quality="medium")
    _write_rows(p, [dict(base, id="R950")])
    assert main(["validate", str(p), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["rel_error"] > 1 and row["status"] == OUTSIDE and 0 < row["tolerance_frac"] < 1


def test_rows_stating_speculative_decoding_run_it(tmp_path, capsys):
    """A serving row's `speculative=yes|no` note turns speculative decoding on or off for that row: the wafer
    production profile speculates by default, so `speculative=no` must predict a lower single-user speed; a GPU row
    with `speculative=yes` runs the gpu-production-specdec draft and must predict a higher one."""
    from wseplan.validate.common import speculation_of
    from wseplan.catalog import load_catalog
    from wseplan.validate.cases import Case

    p = tmp_path / "spec.csv"
    wafer = dict(category="wse-infer", phase="decode", model="llama-3.1-70b", input_len=1024, output_len=256,
                 precision="bf16", hardware="wse3", n_devices=4, metric="tokens_per_s_per_user", value=1000,
                 unit="tok/s/user", quality="medium", source="Cerebras service figure")
    gpu = dict(category="gpu-infer", phase="decode", model="llama-3.1-70b", input_len=1024, output_len=256,
               concurrency=1, precision="fp8", hardware="h200-sxm", n_devices=8, tp=8, metric="tokens_per_s_per_user",
               value=100, unit="tok/s/user", quality="medium", source="engine benchmark")
    _write_rows(p, [dict(wafer, id="W1", notes="as published"), dict(wafer, id="W2", notes="speculative=no"),
                    dict(gpu, id="G1", notes="speculative=no"),
                    dict(gpu, id="G2", notes="speculative=yes draft=llama-3.2-1b")])
    assert main(["validate", str(p), "--format", "json"]) == 0
    pred = {r["id"]: r["predicted"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert pred["W2"] < pred["W1"] / 1.2  # the profile's default speculation, turned off
    assert pred["G2"] > pred["G1"] * 1.2
    case = Case("X", "gpu-infer", "decode", "m", "tokens_per_s", 1.0, "tok/s", "h100", "medium", {}, "s",
                "speculative=yes draft=not named by the vendor")
    assert speculation_of(case, load_catalog()) == (True, None)  # an unknown draft: the profile's default


def test_capacity_rows_are_predicted_by_the_fit(records):
    """WaferLLM's longest generations (Table 5) are a memory bound: the SRAM the fit leaves beside the resident
    weights over the KV bytes of one token, by hand from the architecture, not a time model."""
    from wseplan.catalog import load_catalog
    from wseplan.fit import fit
    from wseplan.validate import CAPACITY_METRICS

    by_id = {r["id"]: r for r in records}
    cat = load_catalog()
    for rid, name, layers, kv_heads, head_dim in (("R366", "llama-3-8b", 32, 8, 128), ("R367", "llama-2-13b", 40, 40, 128)):
        r = by_id[rid]
        assert r["metric"] in CAPACITY_METRICS and r["predicted"] is not None
        f = fit(name, "wse2", precision="fp16", phase="decode", batch=1, context=1, catalog=cat, software="wafer-research")
        kv_per_token = layers * 2 * kv_heads * head_dim * 2  # K and V, fp16
        room = f.capacity_bytes - f.weights_bytes - f.activation_bytes
        assert r["predicted"] == pytest.approx(np.floor(room / kv_per_token), abs=1.0)
    assert abs(by_id["R366"]["rel_error"]) < 0.1  # Llama-3-8B: 137,548 tokens measured (GQA: 128 KiB per token)
