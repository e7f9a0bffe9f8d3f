"""`wseplan serve` and `wseplan.serve` (issue 11, item 8): the record, the human tables, bad input, speculative
decoding, software profiles, and a rate beyond capacity.

Small models (Llama-3-8B on one H200 or one CS-3) keep every case well under a second.
"""
from __future__ import annotations

import csv
import math
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import wseplan
from wseplan.catalog import load_catalog
from wseplan.cli import main
from wseplan.report.formats import has_e_notation, to_json

ROOT = Path(__file__).resolve().parents[1]
CAT = load_catalog()

#: the fields issue 11 item 8 asks of the record
FIELDS = ("fits", "num_devices", "batch", "ttft_p50_s", "ttft_p95_s", "tpot_s", "tokens_per_s_per_user", "tokens_per_s",
          "requests_per_s", "bottleneck", "software", "speculative", "output_usd_per_mtok", "input_usd_per_mtok")


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main(["serve", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_json(capsys, *args) -> dict:
    rc, out, err = run(capsys, *args, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


def accepted_closed_form(a: float, k: int) -> float:
    """Expected tokens per verification step with k drafted tokens of per-token acceptance a (Leviathan et al.
    2023, eq. 1): 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a)."""
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def test_json_record_has_the_issue_fields_and_provenance(capsys):
    rec = run_json(capsys, "llama-3-8b", "--target", "h200x1", "--concurrency", "4")
    missing = [f for f in FIELDS if f not in rec]
    assert not missing
    assert rec["fits"] is True and rec["batch"] == 4 and rec["num_devices"] == 1
    assert rec["tokens_per_s_per_user"] == pytest.approx(1.0 / rec["tpot_s"])
    assert rec["ttft_p50_s"] <= rec["ttft_p95_s"] <= rec["ttft_p99_s"]
    assert rec["software"] == "gpu-production" and rec["speculative"] is None
    assert rec["output_usd_per_mtok"] > 0 and rec["input_usd_per_mtok"] > 0
    assert set(rec["provenance"]) == {"tool", "version", "catalog_date", "prices_date"}
    assert rec["provenance"]["prices_date"] is not None  # the record is priced


@pytest.mark.parametrize("args, kw", [
    (["llama-3-8b", "--target", "h200x1", "--concurrency", "8"], dict(concurrency=8)),
    (["llama-3-8b", "--target", "h200", "--tpot-limit", "0.01", "--ttft-limit", "5", "--percentile", "99"],
     dict(tpot_limit_s=0.01, ttft_limit_s=5.0, percentile=99.0)),
    (["llama-3-8b", "--target", "cs3x1", "--concurrency", "16", "--software", "wafer-research", "--rate", "3",
      "--input-len", "1024", "--output-len", "128"],
     dict(concurrency=16, software="wafer-research", rate=3.0, input_tokens=1024, output_tokens=128)),
    (["llama-3-8b", "--target", "h200x1", "--concurrency", "1", "--speculative", "llama-3.2-1b", "--draft-tokens", "3",
      "--acceptance", "0.6"], dict(concurrency=1, options={"speculative": "llama-3.2-1b", "draft_tokens": 3,
                                                           "acceptance": 0.6})),
])
def test_cli_json_equals_the_api_record(capsys, args, kw):
    rec = run_json(capsys, *args)
    prov = rec.pop("provenance")
    assert prov["tool"] == "wseplan"
    api = wseplan.serve(args[0], args[2], catalog=CAT, **kw).to_record()
    assert rec == json.loads(to_json(api))


@pytest.mark.parametrize("args", [
    ["llama-3-8b", "--target", "h200x1", "--concurrency", "4"],
    ["llama-3-8b", "--target", "h200", "--tpot-limit", "0.02"],
    ["llama-3-8b", "--target", "cs3x1", "--software", "wafer-research", "--percentile", "99.9"],
    ["llama-3-8b", "--target", "h200x1", "--rate", "1e6"],  # fits: false
])
@pytest.mark.parametrize("fmt", ["table", "md"])
def test_human_formats_have_no_e_notation(capsys, args, fmt):
    rc, out, err = run(capsys, *args, "--format", fmt)
    assert rc == 0, err
    assert out.strip()
    hits = [line for line in out.splitlines() if has_e_notation(line)]
    assert not hits, hits[:3]


def test_table_shows_the_chosen_point_and_the_frontier(capsys):
    rc, out, _ = run(capsys, "llama-3-8b", "--target", "h200", "--tpot-limit", "0.02", "--percentile", "90")
    assert rc == 0
    for label in ("TTFT p50", "TTFT p90", "TPOT", "tokens/s per user", "output tokens/s", "requests/s", "bottleneck",
                  "software", "speculative", "$/M output tokens", "$/M input tokens", "Pareto frontier", "ttft p90"):
        assert label in out, label


def test_without_concurrency_or_rate_the_highest_throughput_point_is_chosen(capsys):
    """Among the points that give every user the catalog's default speed (20 tokens/s, cost's and compare's floor;
    audit28e L3: DeepSeek-V3 on 8 H200 was shown at 3.2 tokens/s per user and $1.32/M where cost gives $4.64/M)."""
    floor = CAT.defaults.default_min_tokens_per_s_per_user.si
    rec = run_json(capsys, "llama-3-8b", "--target", "h200x1")
    fast = [p for p in rec["points"] if p["tokens_per_s_per_user"] >= floor]
    best = max(fast, key=lambda p: p["tokens_per_s"] / p["num_devices"])
    assert (rec["batch"], rec["num_devices"]) == (best["batch"], best["num_devices"])
    assert rec["min_tokens_per_s_per_user"] == floor
    assert len({p["batch"] for p in rec["points"]}) > 3  # every power of two that fits was tried
    # a floor below every point: the highest throughput overall; a floor no point reaches: the fastest per user, said
    # in a note, the point cost prices (audit30b H1: serve showed the highest-throughput point, 31x cheaper than cost)
    low = run_json(capsys, "llama-3-8b", "--target", "h200x1", "--min-speed", "0.001")
    top = max(low["points"], key=lambda p: p["tokens_per_s"] / p["num_devices"])
    assert (low["batch"], low["num_devices"]) == (top["batch"], top["num_devices"])
    high = run_json(capsys, "llama-3-8b", "--target", "h200x1", "--min-speed", "1e8")
    # (the most throughput per device within 20% of the fastest per user: audit31c M3, the near-tie rule)
    quick = max(p["tokens_per_s_per_user"] for p in high["points"])
    near = max((p for p in high["points"] if p["tokens_per_s_per_user"] * 1.2 >= quick),
               key=lambda p: p["tokens_per_s"] / p["num_devices"])
    assert (high["batch"], high["num_devices"]) == (near["batch"], near["num_devices"]) != (top["batch"], top["num_devices"])
    assert any("no point gives every user" in n for n in high["notes"])
    # the note names the fastest point (audit37a F3)
    fastest = max(high["points"], key=lambda p: p["tokens_per_s_per_user"])
    assert any(f"the fastest is {fastest['tokens_per_s_per_user']:.4g} tokens/s per user (batch {fastest['batch']})"
               in n for n in high["notes"])
    assert main(["cost", "llama-3-8b", "--target", "h200x1", "--min-speed", "1e8", "--format", "json"]) == 0
    priced = json.loads(capsys.readouterr().out)
    assert priced["batch"] == high["batch"]


def test_the_default_point_keeps_the_speed_cost_prices_at(capsys):
    """DeepSeek-V3 fp8 on 8 H200: the default point gives every user at least the default speed, at the batch cost's
    operating point prices (cost at full slots, serve at 90% of them), and says which faster-throughput point it left."""
    rec = run_json(capsys, "deepseek-v3", "--target", "h200x8", "--precision", "fp8")
    assert rec["tokens_per_s_per_user"] >= CAT.defaults.default_min_tokens_per_s_per_user.si
    (note,) = [n for n in rec["notes"] if "highest-throughput point giving every user >= 20 tokens/s" in n]
    # the note quotes the chosen point first, then the faster-throughput one left (audit30a H2: it read as if the
    # point at 5.64 tokens/s per user were the one meeting the 20 tokens/s floor)
    chosen_part, left_part = note.split("not chosen")
    assert f"{rec['tokens_per_s'] / rec['num_devices']:.4g} tokens/s per device" in chosen_part
    assert "tokens/s per user" in left_part
    from wseplan.operating import operating_point
    op = operating_point("deepseek-v3", "h200x8", precision="fp8", input_tokens=2048, output_tokens=256, catalog=CAT)
    # both refine their batch to where the floor binds (audit31a M1): cost at full slots, serve at 90% of its slots,
    # so the requests each steps agree within a request or two (cost's batch, serve's running batch)
    assert op.meets and abs(op.batch - rec["running_batch"]) <= 2.0 and op.batch <= rec["batch"]


def test_min_speed_with_a_limit_is_refused(capsys):
    assert main(["serve", "llama-3-8b", "--target", "h200x1", "--min-speed", "30", "--tpot-limit", "0.02"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--min-speed" in err[0]


def test_a_target_without_a_count_searches_replica_sizes(capsys):
    rec = run_json(capsys, "llama-3-8b", "--target", "h200")
    assert len({p["devices_per_replica"] for p in rec["points"]}) >= 3  # 1, 2, 4, 8 GPUs per replica
    assert rec["frontier"] and all(p["meets_sla"] for p in rec["frontier"])


def test_concurrency_and_rate_together(capsys):
    """--concurrency fixes the replica's batch slots; --rate is the offered load (documented as allowed)."""
    rec = run_json(capsys, "llama-3-8b", "--target", "h200x1", "--concurrency", "16", "--rate", "2")
    assert rec["batch"] == 16 and len(rec["points"]) == 1
    assert rec["requests_per_s"] == pytest.approx(2.0)
    assert rec["utilization_frac"] == pytest.approx(2.0 / rec["capacity_requests_per_s"])


def test_a_rate_beyond_capacity_is_a_record_with_fits_false_and_a_note(capsys):
    free = wseplan.serve("llama-3-8b", "h200x1", catalog=CAT, prices=False)
    cap = max(p.capacity_requests_per_s for p in free.points)
    ok = run_json(capsys, "llama-3-8b", "--target", "h200x1", "--rate", f"{0.5 * cap!r}")
    assert ok["fits"] is True and ok["requests_per_s"] == pytest.approx(0.5 * cap)
    rc, out, err = run(capsys, "llama-3-8b", "--target", "h200x1", "--rate", f"{7.5 * cap!r}", "--format", "json")
    assert rc == 0 and not err  # a valid answer, not an error: exit 0 (docs/cli-output.md)
    rec = json.loads(out)
    assert rec["fits"] is False and "batch" not in rec and rec["points"] == []
    note = next(n for n in rec["notes"] if "exceeds capacity" in n)
    assert f"{cap:.4g} requests/s" in note
    # the replicas it names carry the rate at full load, one fewer does not: per replica = cap / 1 replica here
    per = max(p.capacity_requests_per_s / p.num_devices for p in free.points)
    reps = int(note.split("at least ")[1].split(" replicas")[0])
    assert (reps - 1) * per <= 7.5 * cap < reps * per
    rc, out, _ = run(capsys, "llama-3-8b", "--target", "h200x1", "--rate", f"{7.5 * cap!r}")
    assert rc == 0 and "fits" in out and "no" in out and "exceeds capacity" in out


@pytest.mark.parametrize("model, target", [("llama-3-8b", "h200x1"), ("llama-70b", "h200x8")])
@pytest.mark.parametrize("k, a", [(4, 0.8), (2, 0.5)])
def test_speculative_decoding_on_a_gpu_raises_speed_per_user_at_batch_1(capsys, model, target, k, a):
    base = run_json(capsys, model, "--target", target, "--concurrency", "1")
    spec = run_json(capsys, model, "--target", target, "--concurrency", "1", "--speculative", "llama-3.2-1b",
                    "--draft-tokens", str(k), "--acceptance", str(a))
    assert base["software"] == spec["software"] == "gpu-production"
    assert base["speculative"] is None and base["accepted_tokens_per_step"] == 1.0
    assert spec["speculative"] == {"draft_model": "Llama-3.2-1B", "draft_tokens": float(k), "acceptance_frac": a}
    # hand values: k=4, a=0.8 -> 1 + .8 + .64 + .512 + .4096 = 3.3616; k=2, a=0.5 -> 1 + .5 + .25 = 1.75
    assert spec["accepted_tokens_per_step"] == pytest.approx(accepted_closed_form(a, k), rel=1e-12)
    assert spec["accepted_tokens_per_step"] == pytest.approx({(4, 0.8): 3.3616, (2, 0.5): 1.75}[(k, a)])
    # faster per user, but by less than the accepted tokens per step (the draft and the (k+1)-token check cost time)
    gain = spec["tokens_per_s_per_user"] / base["tokens_per_s_per_user"]
    assert 1.05 < gain < spec["accepted_tokens_per_step"]


def test_speculative_none_turns_off_a_profiles_default(capsys):
    # one request at a time with a long answer: no other prompt rides on its steps, and speculation pays (on a
    # short answer the draft's own prefill of the prompt, on its decode regions, costs more than its faster steps save)
    args = ("llama-3-8b", "--target", "cs3x1", "--concurrency", "1", "--output-tokens", "1024")
    on = run_json(capsys, *args)
    off = run_json(capsys, *args, "--speculative", "none")
    assert on["software"] == off["software"] == "wafer-production"
    assert on["speculative"]["draft_tokens"] == 4.0 and on["accepted_tokens_per_step"] > 1.0
    assert off["speculative"] is None and off["accepted_tokens_per_step"] == 1.0
    assert on["tpot_s"] != off["tpot_s"]


@pytest.mark.parametrize("target, other, default", [("cs3x1", "wafer-research", "wafer-production"),
                                                     ("h200x1", "gpu-fitted-2026-11", "gpu-production")])
def test_software_profiles_differ(capsys, target, other, default):
    d = run_json(capsys, "llama-3-8b", "--target", target, "--concurrency", "8")
    r = run_json(capsys, "llama-3-8b", "--target", target, "--concurrency", "8", "--software", other)
    assert (d["software"], r["software"]) == (default, other)
    assert d["tpot_s"] != pytest.approx(r["tpot_s"], rel=0.01)
    assert d["ttft_s"] != pytest.approx(r["ttft_s"], rel=0.01)


def test_csv_has_one_row_per_point_with_the_chosen_and_frontier_flags(capsys):
    rec = run_json(capsys, "llama-3-8b", "--target", "h200x1")
    rc, out, _ = run(capsys, "llama-3-8b", "--target", "h200x1", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and len(rows) == len(rec["points"])
    chosen = [r for r in rows if r["chosen"] == "true"]
    assert len(chosen) == 1 and int(chosen[0]["batch"]) == rec["batch"]
    assert sum(r["on_frontier"] == "true" for r in rows) == len(rec["frontier"])
    assert float(chosen[0]["tpot_s"]) == rec["tpot_s"]  # full precision


@pytest.mark.parametrize("args, flag", [
    (["--input-len", "0"], "--input-len"),
    (["--output-len", "-5"], "--output-len"),
    (["--concurrency", "0"], "--concurrency"),
    (["--rate", "0"], "--rate"),
    (["--rate", "-2"], "--rate"),
    (["--rate", "nan"], "--rate"),
    (["--ttft-limit", "0"], "--ttft-limit"),
    (["--tpot-limit", "-1"], "--tpot-limit"),
    (["--percentile", "0"], "--percentile"),
    (["--percentile", "100"], "--percentile"),
    (["--percentile", "150"], "--percentile"),
    (["--speculative", "no-such-draft"], "--speculative"),
    (["--speculative", "llama-3.2-1b", "--draft-tokens", "0"], "--draft-tokens"),
    (["--speculative", "llama-3.2-1b", "--draft-tokens", "17"], "--draft-tokens"),
    (["--speculative", "llama-3.2-1b", "--acceptance", "1"], "--acceptance"),
    (["--draft-tokens", "3"], "--draft-tokens"),  # gpu-production has no draft model
    (["--utilization", "1"], "--utilization"),
    (["--utilization", "0.5", "--rate", "1"], "--utilization"),
    (["--software", "wafer-research"], "software"),
    (["--format", "xml"], "--format"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, flag):
    rc, out, err = run(capsys, "llama-3-8b", "--target", "h200x1", *args)
    assert rc == 2 and not out
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {flag}"), err


def test_help_has_an_example(capsys):
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Example: wseplan serve" in out and "--speculative" in out and "--input-len" in out


def test_wseplan_serve_is_exported_lazily():
    code = ("import sys, wseplan; assert 'wseplan.serving' not in sys.modules and 'numpy' not in sys.modules; "
            "from wseplan.serving import serve; assert wseplan.serve is serve; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "ok", out.stderr
    assert "serve" in dir(wseplan)
    with pytest.raises(AttributeError):
        wseplan.no_such_name  # noqa: B018


@pytest.mark.parametrize("target, kind", [("cs3x4", "wafer"), ("h100x8", "gpu")])
def test_train_tokens_report_device_hours_and_gpu_hours_only_on_gpus(capsys, target, kind):
    """`time --train-tokens`: device-hours = time to train x devices / 3,600 on every target; `gpu_hours` only where
    the devices are GPUs (second audit: wafer system-hours were labelled GPU-hours)."""
    from wseplan.cli import main

    capsys.readouterr()
    assert main(["time", "llama-3.1-8b", "--target", target, "--phase", "train", "--train-tokens", "1e9",
                 "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["device_hours"] == pytest.approx(d["time_to_train_s"] * d["num_devices"] / 3600.0, rel=1e-12)
    assert ("gpu_hours" in d) == (kind == "gpu")


def test_closed_loop_text_says_queueing_only_when_users_exceed_the_kv_cache():
    """audit25 F8: every closed loop was labelled 'more users than the KV cache holds queue for it', even 64 users on
    a replica whose KV cache holds over a thousand requests."""
    from wseplan.cli.serve import summary_rows
    from wseplan.serving import serve

    def load_text(n):
        res = serve("llama-70b", "h200x8", concurrency=n, prices=False)
        return next(r["value"] for r in summary_rows(res) if r["quantity"] == "load and limits")
    assert "more users than the KV cache" not in load_text(64) and "closed loop" in load_text(64)
    assert "more users than the KV cache holds" in load_text(4000)


def test_the_table_does_not_show_a_draft_at_a_point_that_decodes_plainly(capsys):
    """audit28c M2: at a point where the draft does not fit beside the target (1 token per step), the table said
    'Llama-3.2-1B drafts 4 tokens, per-token acceptance 80%' beside a note saying speculation is off."""
    assert main(["serve", "llama-70b", "--target", "cs3", "--tpot-limit", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "speculative decoding off" in out and "drafts 4 tokens" not in out
    assert "off at this point" in " ".join(out.split())


def test_a_draft_named_for_a_prefill_counts_its_prompt_pass(capsys):
    """audit28e: `time --phase prefill --speculative DRAFT` was taken and ignored. A speculating replica's draft builds
    its cache of the prompt before the first token is out (serve's TTFT counts it), so the prefill counts it too, and
    says so; --speculative none leaves it out. The difference is the draft's own prefill of the same prompt (the
    draft model's prefill on the same device, timed alone)."""
    ask = ["time", "llama-3-8b", "--target", "h100", "--phase", "prefill", "-c", "2048", "--format", "json"]
    assert main(ask + ["--speculative", "llama-3.2-1b"]) == 0
    drafted = json.loads(capsys.readouterr().out)
    assert main(ask + ["--speculative", "none"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["time", "llama-3.2-1b", "--target", "h100", "--phase", "prefill", "-c", "2048", "--format", "json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert drafted["ttft_s"] == pytest.approx(plain["ttft_s"] + alone["ttft_s"], rel=1e-9)
    assert any("includes the draft model's prefill" in n for n in drafted["notes"])
    assert not any("draft" in n for n in plain["notes"])


def test_a_point_below_its_slots_says_whether_its_running_batch_speculates(capsys):
    """audit29a M1: Llama-3-70B on CS-3 with 16 slots at half load runs 8 requests with or without the draft, but the
    point said 'speculative decoding off' and 1 token per step: the full slots' decision. The acceptance and the note
    are now the running batch's. The running batch runs on the layout laid out for the slots (review29b #1), so it is
    no faster than `time --batch 8`, whose replica is laid out for 8 requests alone."""
    rec = run_json(capsys, "llama-70b", "--target", "cs3", "--tpot-limit", "0.001")
    (p,) = [p for p in rec["points"] if p["batch"] == rec["batch"] and p["num_devices"] == rec["num_devices"]
            and p["layout"] == rec["layout"]]
    if p["running_batch"] < p["batch"]:
        held = math.ceil(p["running_batch"] - 1e-9)
        assert main(["time", "llama-70b", "--target", f"cs3x{rec['num_devices']}", "--phase", "serve", "--batch",
                     str(held), "--output-tokens", "256", "--format", "json"]) == 0
        t = json.loads(capsys.readouterr().out)
        assert p["tpot_s"] >= t["tpot_s"] * (1 - 1e-12)
        on = p["accepted_tokens_per_step"] > 1.0
        assert any(n.startswith("speculative decoding on" if on else "speculative decoding off") for n in p["notes"])
        assert not any(n.startswith("speculative decoding off" if on else "speculative decoding on") for n in p["notes"])
    else:
        pytest.fail("the chosen point should run below its slots")


def test_a_load_given_with_a_concurrency_keeps_the_replica_of_that_concurrency(capsys):
    """audit30b M1: `--concurrency 16` on 8 H200 ran the plan chain's layout (TP8, 74.6 tokens/s per user) but adding
    `--utilization 0.9` searched replica sizes by throughput per device and showed TP2 x DP4 at 29 tokens/s per user
    and a 10.8 s p95 TTFT. A load changes the load, not the layout: both run `time --phase serve --batch 16`'s."""
    closed = run_json(capsys, "llama-3.1-70b", "--target", "h200x8", "--concurrency", "16")
    loaded = run_json(capsys, "llama-3.1-70b", "--target", "h200x8", "--concurrency", "16", "--utilization", "0.9")
    assert main(["time", "llama-3.1-70b", "--target", "h200x8", "--phase", "serve", "--batch", "16", "--format",
                 "json"]) == 0
    t = json.loads(capsys.readouterr().out)
    assert closed["layout"] == loaded["layout"] == t["layout"]
    assert loaded["utilization_frac"] < closed["utilization_frac"]


def test_users_near_the_memory_limit_may_queue_on_a_layout_that_carries_more(capsys):
    """audit30b M3: 630 users of Llama-3.1-70B on 8 H100 ran TP8 at 2,430 tokens/s (every user in flight), while 631
    ran 618 on TP2 x PP4 at 3,178 tokens/s and queued 13: one more user made everything better. A layout that holds
    fewer and queues the rest is now weighed for any number of users; the more users, the no less throughput."""
    got = {n: run_json(capsys, "llama-3.1-70b", "--target", "h100x8", "--concurrency", str(n)) for n in (600, 630, 631)}
    assert got[630]["tokens_per_s"] >= got[600]["tokens_per_s"] * (1 - 1e-9)
    assert got[630]["tokens_per_s"] == pytest.approx(got[631]["tokens_per_s"], rel=1e-9)
    assert got[630]["batch"] < 630 and any("admission queue" in n for n in got[630]["notes"])
    small = run_json(capsys, "llama-3.1-70b", "--target", "h100x8", "--concurrency", "16")
    assert small["batch"] == 16 and len(small["points"]) == 1


def test_an_unreachable_speed_floor_runs_each_batch_on_its_fastest_layout(capsys):
    """audit37a F3: DeepSeek-V3 fp8 on 8 B200 with --min-speed 500: at batch 1 the layout near-tie kept TP4 x 2
    (173.7 tokens/s per user) over TP8 (197.7), and the fallback's own 20% near-tie then showed 150.8, 24% below the
    fastest the tool computes. With the floor given and out of reach, each batch runs its fastest layout: the fastest
    point is `time`'s TP8 batch 1, and the point shown is within 20% of it."""
    from wseplan.timing import predict_time

    d = run_json(capsys, "deepseek-v3", "--target", "b200x8", "-p", "fp8", "--min-speed", "500")
    one = predict_time("deepseek-v3", "b200x8", phase="serve", precision="fp8", batch=1, context=d["input_tokens"],
                       output_tokens=d["output_tokens"], layout={"tp": 8, "pp": 1, "dp": 1})
    fastest = max(p["tokens_per_s_per_user"] for p in d["points"])
    assert fastest == pytest.approx(one.tokens_per_s_per_user, rel=1e-9)
    assert d["tokens_per_s_per_user"] * 1.2 >= fastest
    # without a floor of its own the search keeps the near-tie's layouts (cost's operating point unchanged)
    plain = run_json(capsys, "deepseek-v3", "--target", "b200x8", "-p", "fp8")
    assert max(p["tokens_per_s_per_user"] for p in plain["points"]) < fastest
