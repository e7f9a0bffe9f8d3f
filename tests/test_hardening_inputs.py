"""Hostile input (issue 15, items 2 and 6): special files, numbers of any size or kind, hostile names, catalog
overrides that are nonsense or shadow the target grammar, bounded target counts, Excel-style CSV, claims behind
symlinks. Every case runs ``wseplan.cli.main`` in-process under a SIGALRM guard (a hang fails in seconds) and
must give exit 2 with one line on stderr, no traceback, nothing on stdout, nothing written.
"""
from __future__ import annotations

import copy
import json
import math
import os
import signal
import socket
import sys
from pathlib import Path

import pytest
import yaml

from wseplan.catalog import default_catalog_dir, load_catalog, read_yaml
from wseplan.catalog.load import MAX_INT_DIGITS, MAX_NESTING, read_json
from wseplan.cli import main
from wseplan.errors import CatalogError, InputError
from wseplan.targets import MAX_GPUS, parse_target
from wseplan.validate import MAX_CELL_CHARS, read_cases, summarize

ROOT = Path(__file__).resolve().parents[1]
CAT = load_catalog()
GPUS = read_yaml(default_catalog_dir() / "hardware" / "gpus.yaml")["gpus"]
WAFERS = read_yaml(default_catalog_dir() / "hardware" / "wafers.yaml")["wafers"]
MODELS = read_yaml(default_catalog_dir() / "models" / "transformers.yaml")["models"]
HF = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, "intermediate_size": 128,
      "vocab_size": 1000, "model_type": "llama"}
CSV_HEAD = "id,category,phase,model,metric,value,unit,hardware,quality,notes\n"
CSV_ROW = "R1,micro,kernel,x,hbm_bandwidth,3000,GB/s,h100-sxm,strong,plain note\n"
HOSTILE = ["[/bold]", "[red]x[/red]", "\x1b[31mred\x1b[0m", "a" * 10_000, "bidi\u202eevil", "nul\x00byte",
           "line\nbreak"]


class Timeout(Exception):
    pass


@pytest.fixture(autouse=True)
def guard():
    def alarm(signum, frame):
        raise Timeout("a command ran past its 20 s guard (a hang)")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def work(tmp_path, monkeypatch):
    w = tmp_path / "work"
    w.mkdir()
    monkeypatch.chdir(w)
    return w


def one_line(capsys, argv, work: Path) -> str:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, f"exit {rc} for {argv!r}: {err[-500:]!r}"
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(("error: ", "\x1b[31merror: ")), err
    assert out == "" and os.listdir(work) == [], (out[:200], os.listdir(work))
    return err


def write(path: Path, text) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------- special files
def _special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "device":
        os.symlink("/dev/zero", path)
    elif kind == "loop":
        os.symlink(path.name, path)
    elif kind == "dangling":
        os.symlink("missing.yaml", path)
    elif kind == "folder":
        path.mkdir()


SPECIAL = ["fifo", "socket", "device", "loop", "dangling", "folder"]


@pytest.mark.parametrize("kind", SPECIAL)
def test_special_file_in_catalog_folder(capsys, work, tmp_path, kind):
    cat = tmp_path / "cat"
    cat.mkdir()
    _special(kind, cat / "x.yaml")
    if kind == "folder":  # a folder named *.yaml is walked into, not opened: put a FIFO inside
        os.mkfifo(cat / "x.yaml" / "inner.yml")
    err = one_line(capsys, ["fit", "llama-70b", "--target", "h100x8", "--catalog", cat], work)
    assert "x.yaml" in err


def test_special_files_with_other_names_are_ignored(capsys, work, tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    os.mkfifo(cat / "pipe")
    os.symlink("loop.txt", cat / "loop.txt")
    os.symlink(".", cat / "self")  # a symlinked folder is not followed (no endless walk)
    assert main(["fit", "llama-70b", "--target", "h100x8", "--catalog", str(cat), "-f", "json"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("kind", ["fifo", "device", "loop"])
@pytest.mark.parametrize("command", ["study", "claims", "config", "layers", "cases"])
def test_special_file_as_any_input(capsys, work, tmp_path, kind, command):
    name = {"config": "m.json", "cases": "c.csv"}.get(command, "x.yaml")
    p = tmp_path / name
    _special(kind, p)
    argv = {"study": ["report", p, "--out", tmp_path / "out"], "claims": ["check", p],
            "config": ["fit", p, "--target", "wse3"], "layers": ["fit", p, "--target", "wse3"],
            "cases": ["validate", p]}[command]
    one_line(capsys, argv, work)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------- numbers
BIG = "9" * (MAX_INT_DIGITS + 700)


@pytest.mark.parametrize("value,words", [(BIG, "5,000 digits"), (".inf", "not a finite"), (".nan", "not a finite"),
                                         ("-.inf", "not a finite"), ("1.0e+999", "overflows"),
                                         ("1.0e+300", "larger than 1e+30"), ("0", "must be positive"),
                                         ("-1", "negative"), ("'0 GB'", "must be positive")])
def test_numbers_in_catalog_yaml_name_the_field(capsys, work, tmp_path, value, words):
    cat = tmp_path / "cat"
    cat.mkdir()
    entry = copy.deepcopy(GPUS["h100-sxm"])
    text = yaml.safe_dump({"gpus": {"h100-sxm": entry}}).replace(
        f"value: {entry['hbm_bytes']['value']}", f"value: {value}", 1)
    write(cat / "g.yaml", text)
    err = one_line(capsys, ["fit", "llama-70b", "--target", "h100x8", "--catalog", cat], work)
    assert "hbm_bytes" in err and words in err, err


@pytest.mark.parametrize("field", ["pe_rows", "clock_hz", "sram_per_pe_bytes", "fabric_bandwidth_bytes_per_s"])
def test_zero_capacity_bandwidth_clock_refused(capsys, work, tmp_path, field):
    cat = tmp_path / "cat"
    cat.mkdir()
    entry = copy.deepcopy(WAFERS["wse3"])
    entry[field] = dict(entry[field], value=0)
    write(cat / "w.yaml", yaml.safe_dump({"wafers": {"wse3": entry}}))
    err = one_line(capsys, ["fit", "llama-70b", "--target", "wse3", "--catalog", cat], work)
    assert field in err and "positive" in err


def test_fractional_count_and_full_reserve_refused(capsys, work, tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    entry = copy.deepcopy(WAFERS["wse3"])
    entry["pe_rows"] = dict(entry["pe_rows"], value=10.5)
    write(cat / "w.yaml", yaml.safe_dump({"wafers": {"wse3": entry}}))
    assert "whole number" in one_line(capsys, ["fit", "llama-70b", "--target", "wse3", "--catalog", cat], work)
    write(cat / "w.yaml", "defaults: {gpu_hbm_reserve_frac: {value: 1, source: vllm-docs, basis: estimate, "
                          "note: x}}\n")
    assert "below 1" in one_line(capsys, ["fit", "llama-70b", "--target", "h100x8", "--catalog", cat], work)


@pytest.mark.parametrize("doc,words", [
    ({**HF, "num_hidden_layers": None}, "num_hidden_layers"), ({**HF, "hidden_size": "64"}, "hidden_size"),
    ({**HF, "hidden_size": None, "intermediate_size": None}, "hidden_size"),
    ({"n_layer": 2, "n_embd": None, "n_head": 8, "n_inner": None, "vocab_size": 100}, "hidden_size"),
    ({**HF, "num_key_value_heads": None, "head_dim": [1]}, "head_dim"), ({**HF, "tie_word_embeddings": None}, "tie"),
    ({**HF, "num_local_experts": {"a": 1}}, "num_local_experts"), ({**HF, "max_position_embeddings": 1.5}, "max_pos"),
    ({**HF, "vocab_size": True}, "vocab_size"), ([HF], "JSON object"),
])
def test_null_and_wrong_typed_config_json(capsys, work, tmp_path, doc, words):
    p = write(tmp_path / "config.json", json.dumps(doc))
    assert words in one_line(capsys, ["fit", p, "--target", "wse3"], work)


@pytest.mark.parametrize("text,words", [
    ('{"num_hidden_layers": ' + BIG + "}", "num_hidden_layers: an integer of"),
    ('{"hidden_size": NaN}', "hidden_size: NaN"), ('{"a": {"b": [1, Infinity]}}', "a.b[1]: Infinity"),
    ('{"x": -Infinity}', "x: -Infinity"), ('{"v": 1e999}', "v: 1e999 overflows"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper"), ('{"a": ' * 5000 + "1" + "}" * 5000, "nested deeper"),
    ("\ufeff" + json.dumps({**HF, "hidden_size": 0}), "hidden_size"),
])
def test_json_numbers_and_nesting(capsys, work, tmp_path, text, words):
    p = write(tmp_path / "config.json", text)
    assert words in one_line(capsys, ["fit", p, "--target", "wse3"], work)


@pytest.mark.parametrize("text,words", [
    ("name: n\nlayers: [{name: l, params: " + BIG + ", flop_per_sample: 1, activation_bytes_per_sample: 1}]\n",
     "layers[0].params: an integer of"),
    ("name: n\nlayers: [{name: l, params: .nan, flop_per_sample: 1, activation_bytes_per_sample: 1}]\n", "params"),
    ("name: n\nlayers: " + "[" * (MAX_NESTING + 5) + "]" * (MAX_NESTING + 5) + "\n", "nested deeper"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdef", "bcdefg")), "aliases"),
])
def test_yaml_numbers_nesting_and_alias_bombs(capsys, work, tmp_path, text, words):
    p = write(tmp_path / "layers.yaml", text)
    assert words in one_line(capsys, ["fit", p, "--target", "wse3"], work)


def test_huge_numbers_in_study_and_claims(capsys, work, tmp_path):
    study = yaml.safe_load((ROOT / "studies" / "serve-llama3-70b.yaml").read_text())
    text = yaml.safe_dump(study).replace("output_tokens: ", f"output_tokens: {BIG} #", 1)
    p = write(tmp_path / "s.yaml", text)
    assert "output_tokens" in one_line(capsys, ["report", p, "--out", tmp_path / "o"], work)
    for value, words in ((BIG, "value: an integer"), (".inf", "not a finite"), ("1.0e+400", "overflows")):
        c = write(tmp_path / "c.yaml", "claims:\n  - {id: a, text: t, kind: peak_flop_per_s, target: wse3, value: "
                                       f"{value}}}\n")
        assert words in one_line(capsys, ["check", c], work)
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------- targets
@pytest.mark.parametrize("target,words", [
    ("cs3x1000000", "at most 2,048"), ("wse3x2049", "at most 2,048"), ("cs2x193", "at most 192"),
    (f"h100x{MAX_GPUS + 1}", f"at most {MAX_GPUS:,}"), ("h100x" + BIG, "not a target"),
    ("h100x" + "9" * 30, "more than 10^12"), ("cs3x0", "at least 1"),
])
def test_target_counts_bounded(capsys, work, target, words):
    assert words in one_line(capsys, ["fit", "llama-70b", "--target", target], work)


def test_target_bounds_follow_the_catalog():
    assert parse_target("cs3x2048", CAT).count == int(CAT.systems["cs3"].max_cluster_systems.si) == 2048
    assert parse_target(f"h100x{MAX_GPUS}", CAT).count == MAX_GPUS


@pytest.mark.parametrize("section,key,words", [
    ("gpus", "h100x8", "ends in x<N>"), ("gpus", "foox16", "ends in x<N>"), ("gpus", "a b", "not a key"),
    ("gpus", "[/bold]", "not a key"), ("gpus", "\x1b[31m", "not a key"), ("models", "m" * 100, "not a key"),
    ("wafers", "wse9x2", "ends in x<N>"),
])
def test_catalog_keys_that_shadow_targets_or_are_hostile(capsys, work, tmp_path, section, key, words):
    cat = tmp_path / "cat"
    cat.mkdir()
    base = {"gpus": GPUS["h100-sxm"], "wafers": WAFERS["wse3"], "models": MODELS["llama-3-70b"]}[section]
    write(cat / "k.yaml", yaml.safe_dump({section: {key: base}}))
    assert words in one_line(capsys, ["fit", "llama-70b", "--target", "h100x8", "--catalog", cat], work)


def test_alias_that_shadows_a_target_is_refused(capsys, work, tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    write(cat / "k.yaml", yaml.safe_dump({"gpus": {"h100-sxm": dict(GPUS["h100-sxm"], aliases=["h100x4"])}}))
    assert "ends in x<N>" in one_line(capsys, ["fit", "llama-70b", "--target", "h100x8", "--catalog", cat], work)


# --------------------------------------------------------------------------------------------- hostile names
@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("where", ["catalog-model", "config-json", "layer-yaml", "claim-id", "study-name", "csv"])
def test_hostile_names_refused_at_input(capsys, work, tmp_path, name, where):
    if where == "catalog-model":
        cat = tmp_path / "cat"
        cat.mkdir()
        write(cat / "m.yaml", yaml.safe_dump({"models": {"llama-3-70b": dict(MODELS["llama-3-70b"], name=name)}}))
        argv = ["fit", "llama-70b", "--target", "wse3", "--catalog", cat]
    elif where == "config-json":
        argv = ["fit", write(tmp_path / "c.json", json.dumps({**HF, "_name_or_path": name})), "--target", "wse3"]
    elif where == "layer-yaml":
        argv = ["fit", write(tmp_path / "l.yaml", yaml.safe_dump({"name": name, "layers": [
            {"name": "l", "params": 1, "flop_per_sample": 1, "activation_bytes_per_sample": 1}]})), "--target", "wse3"]
    elif where == "claim-id":
        argv = ["check", write(tmp_path / "c.yaml", yaml.safe_dump({"claims": [
            {"id": name, "text": "t", "kind": "peak_flop_per_s", "target": "wse3", "value": 1}]}))]
    elif where == "study-name":
        (tmp_path / "c.yaml").write_text("claims:\n  - {id: p, text: t, kind: peak_flop_per_s, target: wse3, value: 1}\n")
        argv = ["report", write(tmp_path / "s.yaml", yaml.safe_dump({"name": name, "title": "T", "kind": "claims",
                                                                     "question": "q", "claims": "c.yaml"})),
                "--out", tmp_path / "o"]
    else:
        cell = '"' + name.replace('"', '""') + '"'
        argv = ["validate", write(tmp_path / "c.csv", CSV_HEAD + f"R1,micro,kernel,{cell},hbm_bandwidth,3000,GB/s,"
                                                                 "h100-sxm,strong,n\n")]
    one_line(capsys, argv, work)
    assert not (tmp_path / "o").exists()


def test_hostile_model_argument(capsys, work):
    for name in HOSTILE[:4]:
        err = one_line(capsys, ["fit", name, "--target", "wse3"], work)
        assert "\x1b[31mred" not in err[1:]  # the escape is shown quoted, never sent raw to the terminal


# --------------------------------------------------------------------------------------------- CSV
def test_csv_with_bom_crlf_and_u2028_parses(tmp_path):
    text = "\ufeff" + CSV_HEAD.replace("\n", "\r\n") + \
        'R1,micro,kernel,x,hbm_bandwidth,3000,GB/s,h100-sxm,strong,"line one\u2028line two\r\nthree"\r\n'
    p = write(tmp_path / "excel.csv", text)
    (case,) = read_cases(p)
    assert case.id == "R1" and case.value == 3000 and case.notes == "line one\nline two\r\nthree"


def test_csv_cell_too_large_names_row_and_column(capsys, work, tmp_path):
    p = write(tmp_path / "c.csv", CSV_HEAD + 'R7,micro,kernel,x,hbm_bandwidth,3000,GB/s,h100-sxm,strong,"'
              + "a" * (MAX_CELL_CHARS + 1) + '"\n')
    err = one_line(capsys, ["validate", p], work)
    assert "line 2" in err and "R7" in err and "column notes" in err
    p = write(tmp_path / "d.csv", CSV_HEAD + 'R8,micro,kernel,x,hbm_bandwidth,3000,GB/s,h100-sxm,strong,"'
              + "a" * (17 * 2**20) + '"\n')
    assert "line 2" in one_line(capsys, ["validate", p], work)


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999", "0", "-5", "1e31"])
def test_csv_non_finite_or_non_positive_value_refused(capsys, work, tmp_path, value):
    p = write(tmp_path / "c.csv", CSV_HEAD + CSV_ROW.replace(",3000,", f",{value},"))
    assert "R1" in one_line(capsys, ["validate", p], work)


@pytest.mark.parametrize("cell,words", [(BIG, "outside"), ("-1", "outside"), ("1e3", "not an integer"),
                                        ("\u0663", "not an integer"), ("99999999999", "outside")])
def test_csv_integer_cells_bounded(capsys, work, tmp_path, cell, words):
    p = write(tmp_path / "c.csv", CSV_HEAD.replace(",notes", ",notes,tp") + CSV_ROW.replace("\n", f",{cell}\n"))
    assert words in one_line(capsys, ["validate", p], work)


def test_summary_never_nan():
    recs = [{"category": "micro", "quality": "strong", "status": "ok", "rel_error": v}
            for v in (0.1, -0.2, math.nan, math.inf)]
    (row,) = summarize(recs)
    assert row["median_abs_rel_error"] == pytest.approx(0.15) and row["predicted"] == 2
    assert math.isfinite(row["max_abs_rel_error"])


def test_csv_not_utf8_and_malformed(capsys, work, tmp_path):
    p = write(tmp_path / "c.csv", (CSV_HEAD + CSV_ROW).encode("utf-8") + b"R2,\xff\xfe\n")
    assert "UTF-8" in one_line(capsys, ["validate", p], work)
    p = write(tmp_path / "d.csv", CSV_HEAD + 'R1,micro,kernel,x,"unclosed\n')
    one_line(capsys, ["validate", p], work)


# --------------------------------------------------------------------------------------------- claims symlinks
def test_claims_symlinked_from_outside_the_study_folder_refused(capsys, work, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    write(outside / "c.yaml", "claims:\n  - {id: p, text: t, kind: peak_flop_per_s, target: wse3, value: 1}\n")
    study = tmp_path / "study"
    study.mkdir()
    os.symlink(outside / "c.yaml", study / "c.yaml")
    s = write(study / "s.yaml", "name: n\ntitle: T\nkind: claims\nquestion: q\nclaims: c.yaml\n")
    assert "outside the study's folder" in one_line(capsys, ["report", s, "--out", tmp_path / "o"], work)
    os.unlink(study / "c.yaml")  # a symlinked folder leading out is refused too
    os.symlink(outside, study / "sub")
    write(s, "name: n\ntitle: T\nkind: claims\nquestion: q\nclaims: sub/c.yaml\n")
    assert "outside" in one_line(capsys, ["report", s, "--out", tmp_path / "o"], work)
    os.unlink(study / "sub")  # a symlink that stays inside the folder is fine
    write(study / "real.yaml", (outside / "c.yaml").read_text())
    os.symlink("real.yaml", study / "c.yaml")
    write(s, "name: n\ntitle: T\nkind: claims\nquestion: q\nclaims: c.yaml\n")
    assert main(["report", str(s), "--out", str(tmp_path / "o"), "-f", "json"]) == 0
    capsys.readouterr()


# --------------------------------------------------------------------------------------------- readers directly
def test_readers_raise_typed_errors(tmp_path):
    os.mkfifo(tmp_path / "f")
    with pytest.raises(CatalogError, match="FIFO"):
        read_yaml(tmp_path / "f")
    with pytest.raises(InputError, match="FIFO"):
        read_json(tmp_path / "f")
    write(tmp_path / "big.yaml", "a: " + "x" * 10)
    from wseplan.catalog import load as L

    with pytest.raises(InputError, match="more than"):
        L.read_regular_bytes(tmp_path / "big.yaml", max_bytes=5)


@pytest.mark.skipif(sys.platform != "linux", reason="/dev/zero")
def test_device_is_never_read(tmp_path):
    with pytest.raises(CatalogError, match="character device"):
        read_yaml(Path("/dev/zero"))


@pytest.mark.parametrize("argv", [["fleet", "{p}"], ["sweep", "{p}"], ["cost", "llama-70b", "--target", "h100x8", "--prices", "{p}"]])
def test_a_folder_given_as_input_file_is_named_as_such(tmp_path, capsys, argv):
    """An input path that exists but is a folder is refused as a folder (not "not found"), in one line, status 2."""
    from wseplan.cli import main

    rc = main([a.format(p=tmp_path) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "is a folder" in err and "not found" not in err


@pytest.mark.parametrize("targets", ["h100x8,,wse3", ",wse3", "wse3,"])
def test_compare_refuses_an_empty_target_entry(capsys, work, targets):
    """An empty entry in --targets is a typo, not a target to drop silently (audit finding F7)."""
    err = one_line(capsys, ["compare", "llama-3-8b", "--targets", targets], work)
    assert "--targets" in err and "empty entry" in err


def test_cost_names_the_memoryx_shortfall(capsys, work):
    """GPT-3 175B's weights and Adam state (16 B per parameter, 2.8 TB) do not fit a 1.5 TB MemoryX: the error names
    the store's shortfall and the fix (a larger option), not "0 B short per device ... add devices" (second audit)."""
    err = one_line(capsys, ["cost", "gpt-3-175b", "--target", "cs3x4", "--phase", "train", "--memoryx", "1.5tb"], work)
    assert "MemoryX option 1.5tb" in err and "larger MemoryX option" in err and "0 B short" not in err
    short = int(err.split("(")[1].split(" B short")[0].replace(",", ""))
    assert 1.2e12 < short < 1.4e12  # 175e9 x 16 B = 2.8e12 B needed, 1.5e12 B held


@pytest.mark.parametrize("encoding", ["ascii", "cp1252"])
def test_an_output_in_a_legacy_encoding_is_written_not_a_traceback(tmp_path, encoding):
    """audit30a M1: with standard output in cp1252 (Windows, redirected) or ascii, a character it cannot show (the
    box lines of a table, x, superscripts) raised UnicodeEncodeError with a 50-line traceback; it becomes '?'."""
    import subprocess

    env = dict(os.environ, PYTHONIOENCODING=encoding)
    got = subprocess.run([sys.executable, "-m", "wseplan.cli", "catalog", "show", "h100"], capture_output=True, env=env,
                         cwd=tmp_path, timeout=60)
    assert got.returncode == 0, got.stderr[-300:]
    assert b"Traceback" not in got.stderr and b"H100" in got.stdout
    got.stdout.decode(encoding)  # what was written is in the stream's encoding


@pytest.mark.parametrize("argv", [["fleet", "{p}"], ["sweep", "{p}"], ["report", "{p}"]])
def test_a_key_given_twice_is_refused_with_both_lines(capsys, work, tmp_path, argv):
    """audit30a M3: PyYAML keeps the last of two equal keys silently: a fleet file with `batches` twice planned the
    second and blamed the budget. Any YAML input now names the key and both lines (the bundled sources.yaml had a
    source given twice)."""
    p = write(tmp_path / "dup.yaml", "name: a\nphase: decode\nname: b\n")
    err = one_line(capsys, [a.replace("{p}", str(p)) for a in argv], work)
    assert "line 3" in err and "name: given twice (also line 1); keep one" in err


def test_true_for_a_number_is_refused_in_every_input_schema():
    """audit30a M4: `prompt_tokens: true` in a study became a 1-token prompt (pydantic reads true as 1). Study, sweep,
    fleet and claims schemas refuse a boolean for a number, alone or in a list; a number written as text is read."""
    from pydantic import ValidationError

    from wseplan.claims.schema import Claim
    from wseplan.optimize.fleet_schema import Sla
    from wseplan.report.study_schema import ServingSpec
    from wseplan.sweep.schema import Sweep

    serving = dict(prompt_tokens=2048, output_tokens=256, demand_tokens_per_s=1e4, min_tokens_per_s_per_user=20.0,
                   batches=[1, 8])
    assert ServingSpec(**{**serving, "prompt_tokens": "2048"}).prompt_tokens == 2048
    for bad in ({"prompt_tokens": True}, {"batches": [1, False]}):
        with pytest.raises(ValidationError, match="expected a number|expected numbers"):
            ServingSpec(**{**serving, **bad})
    with pytest.raises(ValidationError, match="expected numbers"):
        Sweep(name="s", phase="decode", models=["llama-3.1-8b"], targets=["h100x8"], batches=[True], contexts=[1024])
    with pytest.raises(ValidationError, match="expected a number"):
        Sla(ttft_s=True)
    # in a mapping of names to numbers (review30 #3: `set: {pue: true}` read as 1)
    with pytest.raises(ValidationError, match="expected numbers|expected a number"):
        Sweep(name="s", phase="decode", models=["llama-3.1-8b"], targets=["h100x8"], batches=[1], contexts=[1024],
              set={"pue": True})
    from wseplan.optimize.fleet_schema import WorkloadSpec
    with pytest.raises(ValidationError, match="expected"):
        WorkloadSpec.model_validate({"name": "w", "model": "llama-3.1-8b", "phase": "serve", "device_counts": {"cs3": [True, 8]}})
    claim = {"id": "c", "text": "fast", "kind": "tokens_per_s", "value": 100.0, "model": "llama-3.1-8b",
             "target": "h100x8"}
    assert Claim.model_validate(claim).value == 100.0
    with pytest.raises(ValidationError, match="expected a number"):
        Claim.model_validate({**claim, "batch": True})
    assert Claim.model_validate({**claim, "kind": "fits", "value": True}).value is True  # a yes/no claim keeps it


@pytest.mark.parametrize("argv", [["fit", "llama-3-8b", "--target", "h100x8", "--zero", "2"],
                                  ["fit", "llama-3-8b", "--target", "wse3", "--recompute", "full"],
                                  ["fit", "llama-3-8b", "--target", "cs3x2", "--phase", "train", "--zero", "3"]])
def test_fit_refuses_gpu_training_options_where_they_do_not_apply(capsys, work, argv):
    """audit30a M5: fit printed the same bytes with and without --zero/--recompute on decode and on wafers, where
    `time` refuses them; both refuse now, naming the flag."""
    err = one_line(capsys, argv, work)
    assert ("--zero" in err or "--recompute" in err) and "GPU training" in err


def test_a_report_folder_whose_parent_is_missing_is_refused(capsys, work):
    """audit30a M7: `report --out deep/missing/dir` made the whole tree (a typo in --out left stray folders)."""
    study = default_catalog_dir().parent / "studies" / "claims-audit.yaml"
    if not study.exists():
        pytest.skip("studies/ ships with the source checkout")
    err = one_line(capsys, ["report", str(study), "--out", "deep/missing/dir"], work)
    assert "--out" in err and "deep/missing" in err


def test_a_validation_file_of_a_header_alone_is_refused(capsys, work, tmp_path):
    """audit30a L7: a validation CSV with its header and no row gave exit 0 and an empty table."""
    head = (default_catalog_dir() / "validation" / "validation-public.csv").read_text(encoding="utf-8").splitlines()[0]
    p = write(tmp_path / "header.csv", head + "\n")
    err = one_line(capsys, ["validate", str(p)], work)
    assert "no rows" in err
    with pytest.raises(InputError, match="no rows"):
        read_cases(p)


def test_a_misfit_names_every_cause_it_has(capsys, work):
    """audit30a M8: batch 7 on 8 data-parallel replicas named only the memory ('activations binds'), and a reserve of
    99.9999% of the SRAM was told to lower the batch or context: each names its own cause now."""
    err = one_line(capsys, ["time", "llama-3-8b", "--target", "h100x8", "--phase", "train", "--batch", "7", "--dp", "8"],
                   work)
    assert "8 data-parallel replicas" in err and "the batch is 7" in err and "binds" in err
    capsys.readouterr()
    assert main(["fit", "llama-70b", "--target", "wse3", "--reserve", "0.999999", "-f", "json"]) == 0
    notes = " ".join(json.loads(capsys.readouterr().out)["notes"])
    assert "--reserve (it keeps back 99.9999% of the SRAM)" in notes
