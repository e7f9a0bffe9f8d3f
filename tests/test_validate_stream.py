"""Streamed validation (issue 15, item 2): ``wseplan validate`` over a large file in bounded memory.

The streamed records, summary and JSON must equal what the whole-file functions give for the same rows; the
prediction memo may only reuse a prediction for rows whose every input cell (all but ``id`` and ``value``) is
equal; the case memo of ``iter_cases`` still checks every row's id and value. The speed figure (1e6 rows) is in
``benchmarks/bench_validate.py``, not here.
"""
from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path

import pytest

from wseplan import validate as V
from wseplan import validate_stream as VS
from wseplan.validate import cases as VC
from wseplan.catalog import load_catalog
from wseplan.cli import main
from wseplan.errors import InputError
from wseplan.report.formats import to_json

CAT = load_catalog()


@pytest.fixture(scope="module")
def bands():
    return V.reference_bands(CAT)


def _public() -> tuple[list[str], list[list[str]]]:
    with open(V.default_cases_path(), encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], [r for r in rows[1:] if r]


def _repeated(tmp_path: Path, copies: int, take: int, seed: int = 3) -> Path:
    """``take`` public rows repeated ``copies`` times, each copy with new ids and values scaled by [0.5, 2]."""
    header, rows = _public()
    rng = random.Random(seed)
    i_id, i_v = header.index("id"), header.index("value")
    out = tmp_path / "big.csv"
    with open(out, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for k in range(copies):
            for r in rows[:take]:
                r2 = list(r)
                r2[i_id] = f"{r[i_id]}-{k}"
                r2[i_v] = repr(float(r[i_v]) * rng.uniform(0.5, 2.0))
                w.writerow(r2)
    return out


def test_streamed_records_equal_whole_file_records(tmp_path, bands):
    path = _repeated(tmp_path, copies=3, take=90)
    whole = V.validate_cases(V.read_cases(path), CAT, bands=bands)
    memo = VS.PredictionMemo(CAT, bands)
    streamed = list(VS.iter_records(path, CAT, bands, memo=memo))
    assert streamed == whole
    assert memo.misses == 90 and memo.hits == 180  # each distinct input predicted once
    s = VS.Summary()
    s.extend(streamed)
    assert s.rows() == V.summarize(whole)


def test_summary_equals_summarize_on_the_bundled_set():
    recs = V.validate_file(V.default_cases_path(), CAT)
    s = VS.Summary()
    s.extend(recs)
    assert s.rows() == V.summarize(recs)


FIELDS = ["category", "phase", "model", "metric", "unit", "hardware", "quality", "source", "notes", "global_batch",
          "seq_len", "n_devices", "tp", "precision", "input_len", "output_len"]


@pytest.mark.parametrize("column", FIELDS)
def test_prediction_key_holds_every_input_but_not_id_or_value(tmp_path, column):
    header, rows = _public()
    base = list(rows[0])
    if column in ("unit", "metric"):  # a predicted metric has one unit (read_cases refuses another): a free-unit metric
        base[header.index("metric")], base[header.index("unit")] = "decode_power_frac_tdp", "fraction"
    layout = ("n_devices", "tp", "pp", "dp", "cp")
    if column in layout:  # n_devices must equal tp x pp x dp x cp where all are given: leave the others empty
        for c in layout:
            if c != column and c in header:
                base[header.index(c)] = ""
    changed = list(base)
    i = header.index(column)
    changed[i] = {"category": "micro", "phase": "kernel", "hardware": "h100-sxm", "quality": "weak",
                  "unit": "TFLOP/s", "metric": "idle_power_frac_tdp", "precision": "fp8"}.get(
        column, "7" if column not in ("model", "source", "notes") else "other")
    if changed[i] == base[i]:
        changed[i] = "8"
    renamed = list(base)
    renamed[header.index("id")] = "another-id"
    renamed[header.index("value")] = "12345"
    p = tmp_path / "k.csv"
    with open(p, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerows([header, base, renamed, [*changed[:header.index("id")], "third", *changed[header.index("id") + 1:]]])
    a, b, c = V.read_cases(p)
    assert VS.prediction_key(a) == VS.prediction_key(b)  # id and value are not inputs
    assert VS.prediction_key(a) != VS.prediction_key(c)  # every other cell is


def test_memo_limit_starts_afresh_with_equal_results(tmp_path, bands):
    path = _repeated(tmp_path, copies=2, take=20)
    small = VS.PredictionMemo(CAT, bands, max_entries=3)
    assert list(VS.iter_records(path, CAT, bands, memo=small)) == list(VS.iter_records(path, CAT, bands))
    assert len(small.memo) <= 3


def test_case_memo_still_checks_every_id_and_value(tmp_path, monkeypatch):
    header, rows = _public()
    i_id, i_v = header.index("id"), header.index("value")

    def write(cells_list):
        p = tmp_path / "m.csv"
        with open(p, "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerows([header, *cells_list])
        return p

    r = rows[0]
    dup = list(r)  # same content, same id: a memo hit that must still be a duplicate
    with pytest.raises(InputError, match="duplicate id"):
        V.read_cases(write([r, dup]))
    for bad, words in (("nan", "not a finite number"), ("-3", "positive measurement"), ("x", "not a number")):
        r2 = list(r)
        r2[i_id], r2[i_v] = "other", bad
        with pytest.raises(InputError, match=words):
            V.read_cases(write([r, r2]))
    r3 = list(r)
    r3[i_id] = "[/bold]"
    with pytest.raises(InputError, match="column id"):
        V.read_cases(write([r, r3]))
    # with the memo cut to nothing the cases are the same
    ok = [r, *[[*x[:i_id], f"{x[i_id]}-b", *x[i_id + 1:]] for x in rows[:30]]]
    p = write(ok)
    with_memo = V.read_cases(p)
    monkeypatch.setattr(VC._CaseMemo, "MAX_ENTRIES", 0)
    monkeypatch.setattr(VC._CaseMemo, "case", lambda self, *a: None)
    assert V.read_cases(p) == with_memo


def test_cli_json_is_the_same_bytes_as_the_whole_record(tmp_path, capsys, bands):
    from wseplan.cli.output import stamp
    from wseplan.report.provenance import provenance

    path = _repeated(tmp_path, copies=1, take=12)
    assert main(["validate", str(path), "-f", "json"]) == 0
    out = capsys.readouterr().out
    recs = V.validate_cases(V.read_cases(path), CAT, bands=bands)
    expected = to_json(stamp({"schema_version": 1, "cases": str(path), "rows": recs, "summary": V.summarize(recs)},
                             provenance(CAT, None)))
    assert out == expected
    json.loads(out)


def test_cli_csv_streams_every_row(tmp_path, capsys):
    path = _repeated(tmp_path, copies=2, take=40)
    assert main(["validate", str(path), "-f", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 80 and rows[0]["id"].endswith("-0") and rows[-1]["id"].endswith("-1")
    assert list(rows[0]) == list(V.OUTPUT_COLUMNS) + ["quality", "defaulted"]  # audit33d L1


def test_cli_table_of_a_long_file_shows_the_summary(tmp_path, capsys, monkeypatch):
    import wseplan.cli.validate as CV

    monkeypatch.setattr(CV, "MAX_TABLE_ROWS", 10)
    path = _repeated(tmp_path, copies=1, take=25)
    assert main(["validate", str(path), "-f", "md"]) == 0
    out = capsys.readouterr().out
    assert "25 rows: the per-row table is shown up to 10 rows" in out
    assert "| id |" not in out and "strong+medium" in out
    monkeypatch.setattr(CV, "MAX_TABLE_ROWS", 1000)
    assert main(["validate", str(path), "-f", "md"]) == 0
    assert "| id |" in capsys.readouterr().out


class _Tty(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_only_on_a_terminal(tty):
    s = _Tty(tty)
    p = VS.Progress("validate", stream=s, every_s=0.0)
    for n in range(1, 5000):
        p(n)
    p.done(4999)
    text = s.getvalue()
    if tty:
        assert text.startswith("\rvalidate: 1,024 rows") and text.endswith("validate: " + text.rsplit("validate: ", 1)[1])
        assert "4,999 rows" in text and text.endswith("\n")
    else:
        assert text == ""
