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
