"""What a person reads has no e-notation (issue 13, item 3).

Every `wseplan ...` example in the README is run with its default table output and scanned; so is every
Markdown file under reports/. Machine formats (json, csv) keep full-precision numbers and are not scanned.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from wseplan.cli import main
from wseplan.validate import intervals
from wseplan.report.formats import fmt_field, fmt_num, has_e_notation, humanize_text, safe_text

ROOT = Path(__file__).resolve().parents[1]


def readme_examples() -> list[str]:
    """The `wseplan ...` commands quoted in the README (optional parts in [brackets] dropped)."""
    text = (ROOT / "README.md").read_text()
    out = []
    for m in re.finditer(r"`(wseplan [^`]+)`", text):
        cmd = m.group(1)
        while re.search(r"\[[^\[\]]*\]", cmd):  # drop optional parts, innermost first ([--a [--b]])
            cmd = re.sub(r"\s*\[[^\[\]]*\]", "", cmd)
        cmd = cmd.strip()
        if "<" in cmd or "…" in cmd or "..." in cmd or cmd in out or cmd.split()[1:2] in ([], ["--help"]):
            continue
        if len(cmd.split()) < 3 and cmd.split()[1] not in ("calibrate", "validate", "--version"):
            continue  # a bare `wseplan report` in prose
        out.append(cmd)
    return out


EXAMPLES = readme_examples()


def _held_out_stub(path, catalog=None, max_nfev=5):
    """:func:`wseplan.validate.intervals.held_out`'s record shape, each held-out value 1.1x the in-sample one."""
    from wseplan.validate import validate_file

    return {"rows": {r["id"]: {"in_sample": r["predicted"], "held_out": r["predicted"] * 1.1}
                     for r in validate_file(path, catalog) if r["predicted"] is not None}, "seconds": 0.0}


def test_readme_has_examples_of_every_command():
    verbs = {c.split()[1] for c in EXAMPLES}
    assert verbs >= {"fit", "time", "serve", "stream", "scale", "cost", "place", "fleet", "compare", "report", "check", "sweep",
                     "validate", "simulate", "calibrate", "catalog"}


@pytest.mark.parametrize("cmd", EXAMPLES)
def test_readme_example_prints_no_e_notation(cmd, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # calibrate writes here, not into the checkout
    argv = shlex.split(cmd)[1:]
    if argv[0] in ("report", "sweep"):  # keep the committed reports/ untouched
        argv += ["--out", str(tmp_path / "out")]
    if "--cv" in argv:  # the scan is of the printed numbers: the refits (minutes; tests/test_validate_cv.py) are
        monkeypatch.setattr(intervals, "held_out", _held_out_stub)  # replaced by held-out values 10% off in-sample
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, out.err
    text = out.out + out.err
    assert text.strip()
    hits = [line for line in text.splitlines() if has_e_notation(line)]
    assert not hits, f"{cmd}: e-notation in {hits[:3]}"


@pytest.mark.parametrize("path", sorted((ROOT / "reports").rglob("*.md")), ids=lambda p: p.parent.name)
def test_committed_reports_have_no_e_notation(path):
    hits = [line for line in path.read_text().splitlines() if has_e_notation(line)]
    assert not hits, f"{path}: {hits[:3]}"


def test_the_scan_can_fail():
    assert has_e_notation("| 3.91e+05 USD |") and has_e_notation("run_s 2.524e+06") and has_e_notation("1E-7")
    assert not has_e_notation("@162e0f3 sweep.py") and not has_e_notation("1.5×10¹⁶ and 2,524,000")


@pytest.mark.parametrize("key, value, text", [
    ("step_s", 0.001526, "1.526 ms"), ("run_s", 2.524e6, "29.21 days"), ("time_to_train_s", 1.27e8, "4.024 years"),
    ("solve_s", 90.0, "90 s"), ("wait_s", 600.0, "10 min"), ("run_s", 36000.0, "10 h"),
    ("capex_usd", 3.91e5, "$391k"), ("total_usd_per_year", 1.196e7, "$11.96M/yr"), ("usd_per_hour", 19.9, "$19.9/h"),
    ("output_usd_per_mtok", 0.3872, "$0.3872/M tokens"), ("budget_usd", 2.5e9, "$2.5B"),
    ("tokens_per_s", 4.381e5, "438,100 tokens/s"), ("model_flop_per_s", 1.051e14, "105.1 TFLOP/s"),
    ("utilization_frac", 0.6379, "63.79%"), ("maintenance_frac_per_year", 0.1, "10%/yr"),
    ("peak_it_power_w", 1.02e4, "10.2 kW"), ("hbm_bandwidth_bytes_per_s", 3.35e12, "3.35 TB/s"),
    ("capacity_bytes", 4.125e10, "41.25 GB"), ("energy_j_per_token", 0.4689, "468.9 mJ per token"),
    ("fits", True, "yes"), ("fits", False, "no"), ("num_devices", 1024, "1,024"), ("rel_error", -0.5, "-50%"),
])
def test_fmt_field_reads_like_a_person_writes(key, value, text):
    """Values hand-converted: 2.524e6 s / 86,400 s/day = 29.21 days; 1.27e8 s / 3.15576e7 s/yr = 4.024 years."""
    assert fmt_field(key, value) == text


def test_free_text_is_humanised_and_made_safe():
    assert humanize_text("hidden from >= 1.02e+05 tokens/step") == "hidden from >= 102,000 tokens/step"
    assert safe_text("evil\x1b[31m\u2028name") == "evil\\x1b[31m\\u2028name"
    assert fmt_num(float("nan")) == "–" and fmt_num(float("inf")) == "∞"


def test_markup_and_escapes_in_user_text_are_shown_not_obeyed(tmp_path, capsys):
    """A file path with rich markup, an ANSI escape and a bell prints literally: the markup as text, the control
    characters as visible escapes; nothing reaches the terminal raw (catalog names with them are refused on
    load, so file names are what a user can still bring in)."""
    import shutil

    folder = tmp_path / "[bold][red]x\x1b[2J\x07"  # no "/" in a folder name, so no closing tags here
    folder.mkdir()
    claims = folder / "claims.yaml"
    shutil.copy(ROOT / "studies" / "claims-examples.yaml", claims)
    assert main(["check", str(claims)]) == 0
    out = capsys.readouterr().out
    assert "[bold][red]x\\x1b[2J\\x07" in out and "\x1b" not in out and "\x07" not in out
    assert main(["check", str(tmp_path / "nope[/bold]\x1b[31m.yaml")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b" in err and err.count("\n") == 1


def test_data_parallel_inference_says_how_many_requests_are_in_flight(catalog):
    """audit28d H2: `--batch 1` on 8 GPUs searched 8 data-parallel replicas of one GPU and showed 8 requests'
    throughput (8 x the per-user speed) beside 'batch 1'; the record now says the batch is each replica's and how many
    requests are in flight together."""
    from wseplan.timing import predict_time

    r = predict_time("gpt-oss-20b", "b200x8", phase="decode", precision="fp4", batch=1, context=2048, catalog=catalog)
    dp = r.layout["data_parallel"]
    assert dp > 1 and r.tokens_per_s == pytest.approx(dp * r.tokens_per_s_per_user, rel=1e-9)
    assert any(f"{dp} requests in flight together (1 per replica)" in n for n in r.notes)


def test_the_all_in_price_says_it_is_per_output_token():
    """audit28b L2: `cost` printed the all-in price as '$21.39/M tokens'; it is per million output tokens (the
    prompts' cost is in it), which a buyer could read as per token processed (a 9x error at 2,048 in, 256 out)."""
    from wseplan.report.formats import field_unit, fmt_field

    assert fmt_field("all_in_usd_per_mtok", 21.39) == "$21.39/M output tokens"
    assert field_unit("output_usd_per_mtok").unit == "$/M tokens"  # the split prices stay per token of their side


def test_a_gpu_pipeline_fit_does_not_show_the_fullest_stage_as_every_stage(capsys):
    """audit28d L1, audit28a L2: `fit deepseek-r1 --target h200` (TP4 x PP3) showed 'weights (all devices) 1.45 TB'
    (the fullest stage's per GPU x 12; the model's own weights are 671e9 x 2 B = 1.342 TB) and the same memory on every
    stage row, under a 'device' column that counts stages. The totals now say they are an upper bound, the rows are
    stages, and the fullest stage's per-GPU memory is a note."""
    from wseplan.cli import main

    assert main(["fit", "deepseek-r1", "--target", "h200", "-f", "md"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "weights (all devices, at most: the fullest stage's x devices)" in out
    assert "| stage |" in out and "each stage is 4 GPUs (tensor parallel)" in out and "memory [" not in out


def test_stream_parts_say_what_they_hold():
    """audit28a L1: `stream`'s 'compute' held the recompute and its 'exposed load' the spill, so its rows added to 17%
    more than the step; their labels say so."""
    from wseplan.report.formats import field_unit

    assert field_unit("compute_s").label == "compute incl. recompute"
    assert field_unit("exposed_load_s").label == "exposed load incl. spill"
