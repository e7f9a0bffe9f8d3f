"""Model files named inside a study, a sweep or a demand file are that file's neighbours, wherever the command runs
from (audit31b M5: relative model paths were read from the current folder, so a study worked from its own folder and
failed - or silently read another file of the same name - from another, while its ``claims`` path and a demand's
``prices`` were already the file's)."""
from __future__ import annotations

import json
from pathlib import Path

from wseplan.cli import main
from wseplan.optimize.fleet_schema import read_demand
from wseplan.workload import beside

TINY = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 10, "intermediate_size": 64}
LAYERS = "name: x\nlayers:\n  - {name: a, params: 1.0e+6, flop_per_sample: 1.0e+9, activation_bytes_per_sample: 1.0e+6}\n"


def test_beside_keeps_names_and_absolute_paths(tmp_path):
    assert beside("llama-3.1-8b", tmp_path) == "llama-3.1-8b"
    assert beside(str(tmp_path / "m.json"), "/elsewhere") == str(tmp_path / "m.json")
    assert beside("m.json", tmp_path) == str(tmp_path / "m.json")


def test_a_study_and_a_sweep_read_their_neighbour_model_files(tmp_path, monkeypatch, capsys):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "layers.yaml").write_text(LAYERS)
    (sub / "tiny.json").write_text(json.dumps(TINY))
    (sub / "study.yaml").write_text("name: rel\ntitle: t\nquestion: q\nkind: training\nmodel: layers.yaml\n"
                                    "targets: [cs3]\ntraining: {tokens: 1.0e+9, deadline_days: 1, seq_len: 1, "
                                    "global_batch: 64, sizes: [1]}\n")
    (sub / "sweep.yaml").write_text("name: swrel\nphase: decode\nmodels: [tiny.json]\ntargets: [h100x8]\n"
                                    "batches: [1, 2]\ncontexts: [128]\n")
    # a same-named file in the current folder must not be read instead
    (tmp_path / "layers.yaml").write_text("not: a model\n")
    monkeypatch.chdir(tmp_path)
    assert main(["report", "sub/study.yaml", "--out", str(tmp_path / "rep")]) == 0
    assert main(["sweep", "sub/sweep.yaml", "--out", str(tmp_path / "sw"), "-f", "json"]) == 0
    capsys.readouterr()
    # the names stay as written in the reports and rows (review31 M3: the resolved path was shown)
    md = "".join(p.read_text() for p in (tmp_path / "rep").glob("*.md"))
    assert "Model: layers.yaml" in md and str(tmp_path) not in md
    rows = (tmp_path / "sw" / "swrel.csv").read_text().splitlines()
    assert rows[1].startswith("tiny.json,") and str(tmp_path) not in "".join(rows)


def test_a_demand_reads_its_neighbour_model_files(tmp_path, monkeypatch):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "tiny.json").write_text(json.dumps(TINY))
    (sub / "d.yaml").write_text(
        "name: d\nsystems: [{hardware: h100-sxm}]\nworkloads:\n"
        "  - {name: w, kind: serve, model: tiny.json, precision: bf16, prompt_tokens: 128, output_tokens: 16,\n"
        "     output_tokens_per_s: 100, sla: {ttft_s: 10, tpot_s: 1}}\n")
    monkeypatch.chdir(tmp_path)
    spec = read_demand("sub/d.yaml")
    assert Path(spec.workloads[0].model).resolve() == (sub / "tiny.json").resolve()
