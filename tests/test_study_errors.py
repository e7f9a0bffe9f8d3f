"""A study's errors name the study's fields, not the command-line options the planning chain's messages name
(audit31b L1: a training study was told to "drop --context" and "--set: unknown cost input" that it never gave)."""
from __future__ import annotations

from wseplan.cli import main
from wseplan.report.study import study_wording


def test_study_wording_maps_options_to_fields():
    assert study_wording("drop --context or give 1, and set the samples with --batch", "training") == \
        "drop training.seq_len or give 1, and set the samples with training.global_batch"
    assert study_wording("--set: unknown cost input 'x'", "serving") == "cost.set: unknown cost input 'x'"
    assert study_wording("give --context 2048", "serving") == "give serving.prompt_tokens 2048"
    # an option a study has no field for, and longer options that merely start alike, stay as they are
    assert study_wording("--context-parallel 2 and --batch-size", "training") == "--context-parallel 2 and --batch-size"


def test_a_study_error_names_the_study_field(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("name: cs\ntitle: t\nquestion: q\nkind: training\nmodel: llama-3.1-8b\ntargets: [cs3]\n"
                 "training: {tokens: 1.0e+9, deadline_days: 30, seq_len: 2048, global_batch: 64, sizes: [1]}\n"
                 "cost: {set: {electricty_usd_per_kwh: 0.1}}\n")
    assert main(["report", str(f), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cost.set: unknown cost input") and "--set" not in err[0]
    assert not (tmp_path / "out").exists()


def test_one_target_under_two_spellings_is_refused(tmp_path, capsys):
    """audit37b F2: ``[wse3, cs3]`` named one system twice (the report compared CS-3 with itself and printed a price
    that would flip the ranking between them); refused as ``compare --targets`` refuses it, nothing written."""
    f = tmp_path / "s.yaml"
    f.write_text("name: cs\ntitle: t\nquestion: q\nkind: training\nmodel: llama-3.1-8b\ntargets: [wse3, cs3]\n"
                 "training: {tokens: 1.0e+9, deadline_days: 30, seq_len: 2048, global_batch: 64, sizes: [1]}\n")
    assert main(["report", str(f), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: targets: cs3 is wse3 again; name each target once"]
    assert not (tmp_path / "out").exists()


def test_a_percentile_given_as_a_fraction_is_refused_with_the_fix(tmp_path, capsys):
    """audit37b F4: ``percentile: 0.95`` was read as the 0.95th percentile (the limits judged at the fastest 1% of
    requests; a serving fleet two B200 nodes short of the SLA meant). Refused with the value in percent, in a study, a
    demand file and ``serve --percentile``; 95 and 99.9 are kept."""
    from wseplan.errors import percentile_problem

    assert percentile_problem(95) is None and percentile_problem(99.9) is None and percentile_problem(1) is None
    assert "give 95 for p95" in percentile_problem(0.95) and "give 50 for p50" in percentile_problem(0.5)
    for bad in (0, 100, -5, float("nan"), True):
        assert "at least 1 and below 100" in percentile_problem(bad)
    assert main(["serve", "llama-3.1-8b", "--target", "h100", "--percentile", "0.95", "--ttft-limit", "2"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --percentile: is in percent: 0.95 would be the 0.95th "
                                               "percentile; give 95 for p95")
    d = tmp_path / "d.yaml"
    d.write_text("name: t\nsystems:\n  - hardware: h100-sxm\nworkloads:\n  - name: chat\n    model: llama-3.1-8b\n"
                 "    kind: serve\n    output_tokens_per_s: 1000\n    prompt_tokens: 512\n    output_tokens: 128\n"
                 "    sla: {ttft_s: 2.0, percentile: 0.99}\n")
    assert main(["fleet", str(d)]) == 2
    assert "workloads.0.sla.percentile: is in percent: 0.99 would be the 0.99th percentile; give 99 for p99" in \
        capsys.readouterr().err


def test_messages_name_what_the_user_gave(tmp_path, capsys):
    """audit37b F8: `--out` under a file said the folder "does not exist"; `check` on a claims study said "claims: Input
    should be a valid list"; `report -f md` headed the files' sizes "memory"."""
    f = tmp_path / "afile.txt"
    f.write_text("hi\n")
    assert main(["report", "studies/claims-audit.yaml", "--out", str(f / "sub")]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out: {f} is a file, not a folder; give another --out"
    assert main(["check", "studies/claims-audit.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "a claims study" in err and "run `wseplan report studies/claims-audit.yaml`" in err
    s = tmp_path / "s.yaml"
    s.write_text("name: cs\ntitle: t\nquestion: q\nkind: training\nmodel: llama-3.1-8b\ntargets: [cs3]\n"
                 "training: {tokens: 1.0e+9, deadline_days: 30, seq_len: 2048, global_batch: 64, sizes: [1]}\n")
    assert main(["report", str(s), "--out", str(tmp_path / "out"), "-f", "md"]) == 0
    out = capsys.readouterr().out
    assert "| file | size [" in out and "memory" not in out


def test_study_sizes_have_the_command_lines_bounds(tmp_path, capsys):
    """audit37b F6: a study's 1e300 training tokens ran a 13-file report of 1e289-day runs (the CLI refuses above 1e30),
    and a 1e300-day deadline leaked a matplotlib overflow warning; both are refused in one line, the bound written as
    a person writes it."""
    base = ("name: cs\ntitle: t\nquestion: q\nkind: training\nmodel: llama-3.1-8b\ntargets: [cs3]\n"
            "training: {{tokens: {t}, deadline_days: {d}, seq_len: 2048, global_batch: 64, sizes: [1]}}\n")
    for t, d, msg in (("1.0e+300", "30", "training.tokens: Input should be less than or equal to 1e+30"),
                      ("1.0e+9", "1.0e+300", "training.deadline_days: Input should be less than or equal to 1e+06")):
        f = tmp_path / "s.yaml"
        f.write_text(base.format(t=t, d=d))
        assert main(["report", str(f), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith(msg) and len(err.splitlines()) == 1, err
