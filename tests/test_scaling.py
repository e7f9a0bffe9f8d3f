"""Scaling sweeps (wseplan/scale.py) and the `wseplan stream` / `wseplan scale` commands."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan import scale as SC
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


def test_efficiency_hand():
    # 4 systems reaching 3.2x one system's rate: 80%
    assert SC.strong_scaling_efficiency(tokens_per_s=320.0, tokens_per_s_one=100.0, num_systems=4) == pytest.approx(0.8)
    # 4 systems at 5x one system's rate (a better layout than the baseline's): 125%, not clipped (audit26 F9)
    assert SC.strong_scaling_efficiency(tokens_per_s=500.0, tokens_per_s_one=100.0, num_systems=4) == pytest.approx(1.25)


@settings(max_examples=50, deadline=None)
@given(t=st.floats(min_value=0, max_value=1e9), one=st.floats(min_value=1e-3, max_value=1e9), n=st.integers(1, 4096))
def test_efficiency_is_the_ratio(t, one, n):
    e = float(SC.strong_scaling_efficiency(tokens_per_s=t, tokens_per_s_one=one, num_systems=n))
    assert e >= 0.0 and e == pytest.approx(t / (n * one), rel=1e-12, abs=1e-300)


def test_scaling_frame_wse_and_gpu(cat):
    m = resolve_model("llama-3-8b", cat)
    df = SC.scaling_frame(m, [parse_target("cs3", cat), parse_target("h100", cat)], cat, global_batch=256, context=2048,
                          max_systems=16)
    for col in ("target", "num_systems", "step_s", "efficiency_frac", "per_system_batch", "bottleneck"):
        assert col in df.columns
    assert (df["efficiency_frac"].dropna() >= 0).all()
    # unclipped (audit26 F9): tokens_per_s(N) / (N / N0 x tokens_per_s(N0)), N0 the target's smallest fitting count,
    # named in efficiency_baseline_systems
    for _, sub in df[df.fits].groupby("target"):
        n0 = int(sub.efficiency_baseline_systems.iloc[0])
        base = sub[sub.num_systems == n0].tokens_per_s.iloc[0] / n0
        np.testing.assert_allclose(sub.efficiency_frac, sub.tokens_per_s / (sub.num_systems * base), rtol=1e-12)
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


@pytest.mark.parametrize("key,n", [("h100", 4), ("cs3", 4), ("h100", 1), ("cs3", 1)])
def test_scale_point_equals_plan(cat, key, n):
    """One implementation: a point of the scaling frame is plan() on <key>x<n x devices per system>."""
    from wseplan.plan import plan

    m = resolve_model("llama-3-8b", cat)
    t = parse_target(key, cat)
    df = SC.scaling_frame(m, [t], cat, global_batch=256, context=2048, max_systems=n)
    row = df[df.num_systems == n].iloc[0]
    per = 1 if t.kind == "wafer" else 8
    r = plan(m, f"{key}x{n * per}", phase="train", batch=256, context=2048, catalog=cat)
    assert bool(row.fits) == r.fits and row.num_devices == r.num_devices
    assert row.step_s == pytest.approx(r.step_s, rel=1e-12) and row.tokens_per_s == pytest.approx(r.tokens_per_s, rel=1e-12)


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
    assert lines[0].startswith("target,num_systems,num_devices,fits,step_s,tokens_per_s,efficiency_frac,per_system_batch")
    assert len(lines) == 1 + 3 + 3  # 1, 2, 4 systems for each target
    rc = main(["scale", "llama-3-8b", "--targets", "wse3", "--max-systems", "2", "--format", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["num_systems"] for r in rows] == [1, 2]


def test_training_report_scaling_efficiency_is_scales():
    """The training study's size sweep gives each cluster's scaling efficiency as `wseplan scale` does (one
    implementation: per-device throughput over the family's smallest size, clipped to [0, 1]); the report printed
    1.012-1.019 where `scale` gave 1.0 for the same rows (second audit)."""
    import csv
    from pathlib import Path

    rows = list(csv.DictReader(open(Path(__file__).resolve().parents[1] / "reports/train-175b/size_sweep.csv")))
    fam = {}
    for r in rows:
        if not r["throughput [tokens/s]"]:
            continue
        key = r["cluster"].rstrip("0123456789").rstrip("x")
        tps, n = float(r["throughput [tokens/s]"]), float(r["devices [count]"])
        ref = fam.setdefault(key, tps / n)
        want = float(SC.strong_scaling_efficiency(tokens_per_s=tps, tokens_per_s_one=ref, num_systems=n))
        assert float(r["scaling efficiency [fraction]"]) == pytest.approx(want, rel=1e-5, abs=1e-6)
        assert 0.0 <= float(r["scaling efficiency [fraction]"]) <= 1.0
    assert len(fam) >= 2


def test_scale_defaults_are_time_trains_and_names_are_taken():
    """audit28a L3, audit28c L7: `scale` took 2,048 tokens where `time --phase train` takes 4,096 by default, and
    `scaling_frame` refused names ('str' object has no attribute 'kind'). Both now: names, the bundled catalog and
    the training defaults (a model with fewer positions gets its own, as time does)."""
    from wseplan.plan import plan

    df = SC.scaling_frame("llama-3-8b", ["h100"], max_systems=1)
    r = plan("llama-3-8b", "h100x8", phase="train")
    assert (df.attrs["global_batch"], df.attrs["context"]) == (r.batch, r.context) == (1024, 4096)
    assert df["step_s"].iloc[0] == pytest.approx(r.step_s, rel=1e-12)
    g = SC.scaling_frame("gpt-3-175b", ["wse3"], max_systems=1)
    assert g.attrs["context"] == 2048  # its learned positions
