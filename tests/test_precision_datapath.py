"""A format a device has no datapath for (audit21 F3): a float format runs at a wider float rate only, never an
integer one; inference keeps its weights' bytes (weight-only, as vLLM's FP8 Marlin on an A100); training in fp8 or
fp4 without that datapath, and int4 training anywhere, is refused (one line naming --precision, exit 2)."""
from __future__ import annotations

import pytest

from wseplan.analytic import gpu_pass as P
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog import load_catalog
from wseplan.catalog.precision import datapath_format, training_refusal
from wseplan.cli import main
from wseplan.devices.gpu import weight_only_calibration
from wseplan.errors import InputError
from wseplan.plan import plan, setup
from wseplan.workload import resolve_model


@pytest.mark.parametrize("gpu, precision, runs_at, bound_at", [
    ("a100-80gb", "fp8", "fp16", "fp16"),  # no FP8 tensor cores: the 16-bit rate, never int8's 624 TFLOP/s
    ("a100-80gb", "fp4", "bf16", "bf16"),
    # 4-bit weights without a 4-bit datapath: weight-only (W4A16, vLLM's Marlin, TensorRT-LLM's int4_awq) at the
    # 16-bit rate (audit28d M2: they ran at the 8-bit rate, which needs the activations quantized too); the hard bound
    # of a claim allows that faster recipe (W4A8)
    ("h100-sxm", "fp4", "bf16", "fp8"),
    ("h100-sxm", "int4", "bf16", "int8"),  # int8 and fp8 tie at 1,978.9 TFLOP/s: the first listed
    ("b300", "int4", "bf16", "fp8"),  # int8 150 TFLOP/s, fp8 4,500: the faster format that holds -8..7
    ("a100-80gb", "int8", "int8", "int8"),
    ("v100", "fp8", "fp16", "fp16"),
    ("tpu-v4", "fp16", "bf16", "bf16"),
])
def test_a_format_runs_at_a_wider_format_that_holds_its_values(gpu, precision, runs_at, bound_at):
    g = load_catalog().gpus[gpu]
    assert datapath_format(g.dense_peak_flop_per_s, precision) == runs_at
    assert g.peak_flop_per_s(precision) == g.dense_peak_flop_per_s[runs_at].si
    assert datapath_format(g.dense_peak_flop_per_s, precision, bound=True) == bound_at
    assert g.peak_flop_per_s(precision, bound=True) == g.dense_peak_flop_per_s[bound_at].si


def test_fp8_on_an_a100_is_the_16_bit_rate():
    g = load_catalog().gpus["a100-80gb"]
    assert g.peak_flop_per_s("fp8") == pytest.approx(312e12, rel=1e-12)  # was 624e12, the int8 rate


def test_a_wafer_runs_8_and_4_bit_formats_at_its_16_bit_rate():
    w = load_catalog().wafers["wse3"]
    for p in ("fp8", "int8", "fp4", "int4"):
        assert w.flop_per_cycle(p) == 16.0
    assert w.flop_per_cycle("tf32") == 2.0  # tf32's range needs fp32, not the fp16 SIMD


@pytest.mark.parametrize("target, precision, fix", [
    ("a100x8", "fp8", "--precision bf16"),
    ("h100x8", "fp4", "--precision fp8"),
    ("mi300xx8", "fp4", "--precision fp8"),
    ("b200x8", "int4", "--precision bf16"),
    ("h100x8", "int4", "--precision bf16"),
    ("cs3x4", "fp8", "--precision bf16"),
    ("cs3x4", "fp4", "--precision bf16"),
])
def test_training_without_the_datapath_is_refused(target, precision, fix):
    with pytest.raises(InputError) as e:
        plan("llama-3-8b", target, phase="train", precision=precision, batch=64, context=4096)
    msg = str(e.value)
    assert msg.startswith("precision: ") and fix in msg and "\n" not in msg


@pytest.mark.parametrize("target, precision", [("b200x8", "fp4"), ("h100x8", "fp8"), ("mi300xx8", "fp8"),
                                               ("a100x8", "bf16"), ("cs3x4", "bf16")])
def test_training_with_the_datapath_is_timed(target, precision):
    r = plan("llama-3-8b", target, phase="train", precision=precision, batch=64, context=4096)
    assert r.step_s > 0
    assert not any("datapath" in n for n in r.notes)


def test_cli_refuses_fp8_training_on_an_a100_in_one_line(capsys):
    capsys.readouterr()
    rc = main(["time", "llama-3-8b", "--target", "a100x8", "--phase", "train", "--precision", "fp8", "-b", "64",
               "-c", "4096"])
    out, err = capsys.readouterr()
    assert rc == 2
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert len(lines) == 1 and "--precision bf16" in lines[0] and "fp8 datapath" in lines[0]


def test_training_refusal_names_what_the_device_lists():
    msg = training_refusal("NVIDIA A100", {"int8": 1, "fp16": 1, "bf16": 1}, "fp8")
    assert "it lists int8, fp16, bf16" in msg
    assert training_refusal("any", None, "int4") is not None  # no recipe on any kind
    assert training_refusal("any", None, "fp8") is None  # a kind without per-format rates: not judged


def test_fp8_inference_on_an_a100_is_weight_only_w8a16():
    """vLLM (docs, "FP8 W8A8"): FP8 models run on Ampere as weight-only W8A16 with FP8 Marlin. The GEMMs are 16-bit
    kernels (the 16-bit rate and its fitted ceiling) reading 1-byte weights."""
    s = setup("llama-3-8b", "a100x1", phase="decode", precision="fp8")
    base = setup("llama-3-8b", "a100x1", phase="decode", precision="bf16").ctx.cal
    assert s.ctx.cal.gemm_max_frac_8bit == base.gemm_max_frac_16bit
    assert s.ctx.cal.gemm_max_frac_16bit == base.gemm_max_frac_16bit
    # an H100 has FP8 tensor cores: its own fitted fp8 ceiling
    h = setup("llama-3-8b", "h100x1", phase="decode", precision="fp8")
    assert h.ctx.cal.gemm_max_frac_8bit == base.gemm_max_frac_8bit
    r = plan("llama-3-8b", "a100x1", phase="decode", precision="fp8", batch=8, context=4096)
    assert any("no fp8 datapath" in n and "weight-only" in n and "fp16 rate" in n for n in r.notes)


def test_w8a16_decode_gemms_read_one_byte_per_weight_by_hand():
    """Batch-1 decode of Llama-3-8B on one A100 (plain roofline, so each GEMM is memory-bound): one block's GEMMs read
    QKV 4096 x 6144, O 4096 x 4096, gate+up 4096 x 28672 and down 14336 x 4096 weights, 218,103,808 of them, at
    1 byte (fp8 weights) and 1 x (n + k) 16-bit activations each, over the calibrated HBM bandwidth."""
    cat = load_catalog()
    g = cat.gpus["a100-80gb"]
    m = resolve_model("llama-3-8b", cat)
    cal = weight_only_calibration(gpu_calibration(), "fp8", "fp16").replace(gemm_ridge_exponent=0.0)
    hbm = g.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac
    weights = 4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096
    assert weights == 218_103_808
    acts = 2.0 * ((6144 + 4096) + (4096 + 4096) + (28672 + 4096) + (4096 + 14336))
    _, _, parts = P.pass_time_s(m, g, precision="fp8", sequences=(P.Sequences(seqs=1.0, tokens=1.0, new=1.0, prior=1.0),),
                                logits_rows=1.0, tp=1.0, cal=cal)
    assert float(parts["gemm"]) == pytest.approx(m.num_layers * (weights * 1.0 + acts) / hbm, rel=1e-9)
    _, _, p16 = P.pass_time_s(m, g, precision="bf16", sequences=(P.Sequences(seqs=1.0, tokens=1.0, new=1.0, prior=1.0),),
                              logits_rows=1.0, tp=1.0, cal=cal)
    assert float(p16["gemm"]) == pytest.approx(m.num_layers * (weights * 2.0 + acts) / hbm, rel=1e-9)


def test_fp8_prefill_on_an_a100_is_no_faster_than_bf16():
    """Compute-bound: W8A16 runs at the 16-bit rate (the audit saw 2.088 s against bf16's 2.873 s at the int8 rate)."""
    kw = dict(phase="prefill", batch=64, context=4096)
    f8 = plan("llama-3-8b", "a100x8", precision="fp8", **kw).step_s
    b16 = plan("llama-3-8b", "a100x8", precision="bf16", **kw).step_s
    assert f8 == pytest.approx(b16, rel=0.02)


# --------------------------------------------------------------------------------------------- sparse peaks (F5), fp32 (F8)
@pytest.mark.parametrize("target, precision, expected", [
    ("b200x1", "fp4", 18e15),  # NVIDIA HGX B200: 144 PFLOPS FP4 sparse / 8 (was 9e15: the fp8 sparse figure)
    ("mi300xx1", "fp8", 5229.8e12),  # AMD MI300X data sheet (was 2.6149e15: the bf16 sparse figure)
    ("b200x8", "fp8", 8 * 9e15),
    ("h100x1", "fp4", 2 * 1978.9e12),  # no fp4 sparse figure: 2:4 sparsity doubles the dense (fp8-rate) peak
    ("a100x1", "fp8", 2 * 312e12),  # an A100 has no fp8 sparse figure: twice its fp8 (16-bit) dense peak
    ("mi300xx1", "tf32", 2 * 653.7e12),  # no tf32 sparse figure: twice the tf32 dense, never bf16's sparse 2,614.9
])
def test_the_sparse_peak_is_the_formats_own_or_twice_its_dense(target, precision, expected):
    from wseplan.claims.physics import peak
    from wseplan.targets import parse_target

    assert peak(parse_target(target, load_catalog()), precision, "sparse") == pytest.approx(expected, rel=1e-12)


def test_official_sparse_peaks_are_consistent_claims(tmp_path):
    from wseplan.claims import check

    f = tmp_path / "claims.yaml"
    f.write_text("""claims:
  - {id: b200-fp4-sparse, text: "HGX B200: 18 PFLOPS FP4 with sparsity per GPU.", kind: peak_flop_per_s, target: b200,
     precision: fp4, scope: sparse, value: 18, unit: PFLOP/s}
  - {id: mi300x-fp8-sparse, text: "MI300X: 5,229.8 TFLOPS FP8 with sparsity.", kind: peak_flop_per_s, target: mi300x,
     precision: fp8, scope: sparse, value: 5229.8, unit: TFLOP/s}
  - {id: mi300x-fp8-sparse-high, text: "MI300X: 5.5 PFLOPS FP8 with sparsity.", kind: peak_flop_per_s,
     target: mi300x, precision: fp8, scope: sparse, value: 5.5, unit: PFLOP/s}
""")
    v = {r.id: r.verdict for r in check(str(f))}
    assert v == {"b200-fp4-sparse": "consistent", "mi300x-fp8-sparse": "consistent",
                 "mi300x-fp8-sparse-high": "impossible"}


@pytest.mark.parametrize("gpu, tflops", [("b200", 75.0), ("mi300x", 163.4)])
def test_fp32_rates_come_from_the_datasheets(gpu, tflops):
    g = load_catalog().gpus[gpu]
    assert g.peak_flop_per_s("fp32") == pytest.approx(tflops * 1e12, rel=1e-12)
    r = plan("llama-3-8b", f"{gpu}x8", phase="prefill", precision="fp32", batch=1, context=2048)
    assert r.step_s > 0


def test_a_gpu_without_an_fp32_figure_says_the_catalog_has_none():
    with pytest.raises(InputError) as e:
        plan("llama-3-8b", "b300x1", phase="prefill", precision="fp32", batch=1, context=2048)
    assert "the catalog has no fp32 rate" in str(e.value) and "--catalog" in str(e.value)


def test_a_slow_16_bit_format_is_named_with_the_fast_one(catalog):
    """audit32a F4: the default bf16 on a V100 (no bf16 tensor cores: the fp32 rate, 15.7 TFLOP/s) trained 7.3x slower
    than fp16 (125 TFLOP/s) with no note; the record now says so and names the flag. fp16 on V100 and bf16 on H100 run
    at their format's full rate: no note."""
    from wseplan.timing import predict_time

    kw = dict(phase="train", batch=256, context=2048, catalog=catalog)
    slow = predict_time("llama-3.1-8b", "v100x64", **kw)
    fast = predict_time("llama-3.1-8b", "v100x64", precision="fp16", **kw)
    assert slow.step_s > 5 * fast.step_s
    assert any("runs bf16 at 15.7 TFLOP/s against 125 for fp16" in n and "--precision fp16" in n for n in slow.notes)
    assert not any("datapath" in n for n in fast.notes)
    assert not any("datapath" in n for n in predict_time("llama-3.1-8b", "h100x8", **kw).notes)
