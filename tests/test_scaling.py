"""Scaling sweeps (wseplan/analytic/scaling.py) and the `wseplan stream` / `wseplan scale` commands."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.analytic import scaling as SC
from wseplan.analytic.stream import load_stream_constants
from wseplan.catalog import load_catalog
from wseplan.cli import main
from wseplan.errors import InputError
from wseplan.fit import resolve_model
from wseplan.targets import parse_target


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_system_counts():
    assert SC.system_counts(1) == [1]
    assert SC.system_counts(10) == [1, 2, 4, 8, 10]
    assert SC.system_counts(16) == [1, 2, 4, 8, 16]
    with pytest.raises(InputError):
        SC.system_counts(0)


def test_efficiency_and_dp_step_hand():
    # 4 systems reaching 3.2x one system's rate: 80%
    assert SC.strong_scaling_efficiency(tokens_per_s=320.0, tokens_per_s_one=100.0, num_systems=4) == pytest.approx(0.8)
    assert SC.strong_scaling_efficiency(tokens_per_s=500.0, tokens_per_s_one=100.0, num_systems=4) == 1.0  # clipped
    # all-reduce 2 s, 80% overlappable but only 1 s of backward to hide it in: 3 + 2 - 1
    assert SC.gpu_dp_step_s(compute_s=3.0, backward_s=1.0, allreduce_s=2.0, overlap_frac=0.8) == pytest.approx(4.0)
    assert SC.gpu_dp_step_s(compute_s=3.0, backward_s=5.0, allreduce_s=2.0, overlap_frac=0.8) == pytest.approx(3.4)
    # 4 stages, 12 micro-batches: 3 / 15
    assert SC.pipeline_bubble_frac(num_stages=4, num_micro_batches=12) == pytest.approx(0.2)
    assert SC.pipeline_bubble_frac(num_stages=1, num_micro_batches=3) == 0.0


@settings(max_examples=50, deadline=None)
@given(t=st.floats(min_value=0, max_value=1e9), one=st.floats(min_value=1e-3, max_value=1e9), n=st.integers(1, 4096))
def test_efficiency_is_a_fraction(t, one, n):
    e = float(SC.strong_scaling_efficiency(tokens_per_s=t, tokens_per_s_one=one, num_systems=n))
    assert 0.0 <= e <= 1.0


def test_scaling_frame_wse_and_gpu(cat):
    m = resolve_model("llama-3-8b", cat)
    df = SC.scaling_frame(m, [parse_target("cs3", cat), parse_target("h100", cat)], cat, global_batch=256, context=2048,
                          max_systems=16)
    for col in ("target", "num_systems", "step_s", "efficiency_frac", "per_system_batch", "bottleneck"):
        assert col in df.columns
    assert df["efficiency_frac"].between(0, 1).all()
    w = df[df.target == "wse3"]
    assert list(w.num_systems) == [1, 2, 4, 8, 16]
    assert w.efficiency_frac.iloc[0] == 1.0
    np.testing.assert_allclose(w.per_system_batch, 256 / w.num_systems)
    # fixed global batch: once each system's share drops below the streaming minimum, efficiency falls
    tail = w[w.per_system_batch < w.min_batch_compute_bound]
    assert len(tail) and tail.efficiency_frac.iloc[-1] < 0.9
    g = df[df.target == "h100-sxm"]
    assert (g.num_devices <= g.num_systems * 8).all() and (g.num_devices >= 1).all()
    assert df.attrs["global_batch"] == 256


def test_gpu_rows_hand_one_node(cat):
    """One node: dp = 8 / R replicas of the R-GPU layout fit() picks; step = compute + exposed all-reduce, with
    compute = 3 x forward FLOPs x tokens per replica / (R x peak x eff) and the hierarchical ring all-reduce of
    the 2-byte gradients (split over the replica's R GPUs)."""
    from wseplan.analytic import collectives as coll
    from wseplan.fit import build_workload, fit

    m = resolve_model("llama-2-7b", cat)
    t = parse_target("h100", cat)
    rows = SC.gpu_rows(m, t, cat, precision="bf16", global_batch=64, context=2048, counts=[1])
    c = load_stream_constants()
    f = fit(m, "h100", precision="bf16", phase="train", batch=1, context=2048, catalog=cat)
    R = f.layout.tensor_parallel * f.layout.pipeline_parallel
    R = 1 << (R - 1).bit_length()  # rounded up to a power of two so that replicas tile the node
    assert R <= 8
    tp = min(f.layout.tensor_parallel, R)
    pp = R // tp
    dp = 8 // R
    w = build_workload(m, cat, precision="bf16", phase="train", batch=1, context=2048)
    gpu = t.device
    rate = gpu.peak_flop_per_s("bf16") * c.gpu_dp_compute_efficiency_frac.si
    m_b = 64 / dp  # one-sequence micro-batches per replica
    compute = 3 * float(w.flop_per_token.sum()) * 64 * 2048 / dp / (R * rate) / (1 - (pp - 1) / (m_b + pp - 1))
    ar = float(coll.hierarchical_allreduce_time_s(
        message_bytes=w.total_params * 2 / R, num_ranks=dp, ranks_per_node=8 // R,
        intra_bandwidth_bytes_per_s=gpu.scale_up_bandwidth_bytes_per_s.si, intra_latency_s=c.gpu_dp_link_latency_s.si,
        inter_bandwidth_bytes_per_s=gpu.scale_out_bandwidth_bytes_per_s.si, inter_latency_s=c.gpu_dp_link_latency_s.si))
    want = compute + ar - min(c.gpu_dp_overlap_frac.si * ar, compute * 2 / 3)
    assert rows[0]["step_s"] == pytest.approx(want, rel=1e-9)


def test_scaling_frame_errors(cat):
    m = resolve_model("llama-3-8b", cat)
    with pytest.raises(InputError):
        SC.scaling_frame(m, [parse_target("cs3", cat)], cat, global_batch=0, context=2048, max_systems=4)


# --------------------------------------------------------------------------------------------- CLI
def test_cli_stream_json_and_csv(capsys):
    rc = main(["stream", "llama-3-8b", "--target", "cs3x4", "--batch", "128", "--context", "2048", "--format", "json"])
    out = capsys.readouterr().out
    assert rc == 0
    rec = json.loads(out)
    assert rec["num_systems"] == 4 and rec["step_s"] > 0 and 0 <= rec["utilization_frac"] <= 1
    assert rec["tokens_per_s"] == pytest.approx(128 * 2048 / rec["step_s"])
    rc = main(["stream", "llama-3-8b", "--target", "cs3", "--batch", "8", "--format", "csv"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(lines) == 2 and "bottleneck" in lines[0]


def test_cli_stream_table_and_md(capsys):
    assert main(["stream", "llama-3-8b", "--target", "cs3", "--batch", "64"]) == 0
    out = capsys.readouterr().out
    assert "│ step " in out and "activation policy" in out  # human labels; the unit sits in the value
    assert main(["stream", "llama-3-8b", "--target", "cs3", "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("## Weight streaming") and "| step [" in md  # the unit sits in the header


@pytest.mark.parametrize("args", [
    ["stream", "llama-3-8b", "--target", "h100"],
    ["stream", "llama-3-8b", "--target", "cs3", "--policy", "magic"],
    ["stream", "llama-3-8b", "--target", "cs3", "--batch", "0"],
    ["stream", "no-such-model", "--target", "cs3"],
    ["stream", "llama-3-8b", "--target", "cs3", "--format", "xml"],
    ["scale", "llama-3-8b", "--targets", "wse3,nope"],
    ["scale", "llama-3-8b", "--targets", "wse3", "--max-systems", "0"],
    ["scale", "llama-3-8b", "--targets", "cs3x4"],
    ["scale", "llama-3-8b", "--targets", ","],
])
def test_cli_bad_input_one_line_exit_2(args, capsys):
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("error")


def test_cli_scale_csv(capsys):
    rc = main(["scale", "llama-3-8b", "--targets", "wse3,h100", "--max-systems", "4", "--batch", "256", "--format", "csv"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert lines[0].startswith("target,num_systems,num_devices,step_s,tokens_per_s,efficiency_frac,per_system_batch")
    assert len(lines) == 1 + 3 + 3  # 1, 2, 4 systems for each target
    rc = main(["scale", "llama-3-8b", "--targets", "wse3", "--max-systems", "2", "--format", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["num_systems"] for r in rows] == [1, 2]
