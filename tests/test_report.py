"""Report building blocks: atomic writes, path sanitising, readable numbers, deterministic PNGs, study schema."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.cli import main
from wseplan.errors import InputError
from wseplan.report.atomic import MARKER, safe_filename, write_files_atomically
from wseplan.report.markdown import Column, Table, csv_num, fmt_num, fmt_quantity
from wseplan.report.plots import Marker, Plot, Series, render, roofline_plot
from wseplan.report.study import Study, load_study, run_study


# ------------------------------------------------------------------------------------------------ atomic
def test_atomic_write_replaces_whole_folder(tmp_path):
    out = tmp_path / "rep"
    write_files_atomically(out, {"report.md": "old", "b.csv": "x\n"})
    write_files_atomically(out, {"report.md": "new"})
    assert sorted(os.listdir(out)) == [MARKER, "report.md"] and (out / "report.md").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["rep"]  # no temp or old folders left behind


def test_failure_mid_write_leaves_previous_report_intact(tmp_path):
    out = tmp_path / "rep"
    write_files_atomically(out, {"report.md": "v1", "t.csv": "1\n"})
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def boom(name):
        if name == "report.md":  # the second of three files (sorted): fail mid-write
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        write_files_atomically(out, {"a.png": b"\x89PNG", "report.md": "v2", "t.csv": "2\n"}, _after_each=boom)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["rep"]


def test_failure_on_first_report_leaves_nothing(tmp_path):
    out = tmp_path / "new"

    def boom(name):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_files_atomically(out, {"report.md": "v1"}, _after_each=boom)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_refuses_to_replace_folders_that_are_not_reports(tmp_path, monkeypatch):
    keep = tmp_path / "studies"
    keep.mkdir()
    (keep / "study.yaml").write_text("precious")
    with pytest.raises(InputError, match="not a folder wseplan wrote"):
        write_files_atomically(keep, {"report.md": "x"})
    assert (keep / "study.yaml").read_text() == "precious"
    sub = tmp_path / "rep"
    write_files_atomically(sub, {"report.md": "x"})
    (sub / "nested").mkdir()  # a user's folder inside a report folder is kept, not refused
    write_files_atomically(sub, {"report.md": "y"})
    assert (sub / "nested").is_dir() and (sub / "report.md").read_text() == "y"
    monkeypatch.chdir(keep)
    for out in (".", "..", "/"):
        with pytest.raises(InputError, match="current folder"):
            write_files_atomically(out, {"report.md": "x"})
    assert (keep / "study.yaml").read_text() == "precious"
    empty = tmp_path / "empty"
    empty.mkdir()
    write_files_atomically(empty, {"report.md": "ok"})
    assert (empty / "report.md").read_text() == "ok"


@pytest.mark.parametrize("name", ["../escape.md", "/etc/passwd", "a/../../b", "..", "", "a\\b"])
def test_names_cannot_escape(tmp_path, name):
    with pytest.raises(InputError):
        write_files_atomically(tmp_path / "rep", {name: "x"})
    assert not (tmp_path / "escape.md").exists()


@given(st.text(max_size=60))
@settings(max_examples=200, deadline=None)
def test_safe_filename_is_one_plain_component(name):
    s = safe_filename(name)
    assert s and "/" not in s and "\\" not in s and s not in (".", "..") and not s.startswith(".")
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in s)


def test_safe_filename_examples():
    assert safe_filename("../../etc/passwd") == "etc_passwd"
    assert safe_filename("serve llama-3 70B") == "serve_llama-3_70B"
    assert safe_filename("...") == "item"


def test_study_name_with_path_is_sanitised(tmp_path):
    st_ = Study(name="../../outside", title="t", kind="claims", question="q", claims="c.yaml")
    assert st_.slug == "outside"


# ------------------------------------------------------------------------------------------------ numbers
@pytest.mark.parametrize("v, text", [
    (1234567.8, "1,235,000"), (16384.0, "16,384"), (12.3456, "12.35"), (0.00123456, "0.001235"), (1.5e13, "15,000,000,000,000"),
    (1.5e16, "1.5×10¹⁶"), (-2.345e-9, "-2.345×10⁻⁹"), (9.9996e15, "1×10¹⁶"),
    (999.96, "1,000"), (0.5, "0.5"), (100.0, "100"), (3, "3"), (True, "yes"), (None, "–"), (-45.678, "-45.68"),
])
def test_fmt_num(v, text):
    assert fmt_num(v) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_fmt_num_never_long(v):
    text = fmt_num(v)
    digits = [c for c in text.split("×")[0] if c.isdigit()]
    assert len(digits) <= 15  # at most 4 significant digits (plus zeros of magnitude below 10^15), never 17
    assert len(text) <= 21 and "e" not in text.lower()  # never e-notation


def test_fmt_quantity():
    assert fmt_quantity(1.27e8, "s") == "4.024 years"
    assert fmt_quantity(5.2e-3, "s") == "5.2 ms"
    assert fmt_quantity(41.25e9, "bytes") == "41.25 GB"
    assert fmt_quantity(15.55e15, "FLOP/s") == "15.55 PFLOP/s"


def test_csv_cells_rounded():
    assert csv_num(0.1 + 0.2) == "0.3"
    assert csv_num(1 / 3) == "0.333333"
    assert csv_num(True) == "true" and csv_num(None) == ""


def test_table_units_and_scale():
    t = Table(name="t", title="T", columns=[Column("step_s", "step [ms]", 1e-3), Column("name", "name")],
              rows=[{"step_s": 0.0123456, "name": "a|b"}])
    md = t.to_markdown()
    assert "| step [ms] | name |" in md and "12.35" in md and "a\\|b" in md
    assert t.to_csv() == "step [ms],name\n12.3456,a|b\n"


# ------------------------------------------------------------------------------------------------ plots
def _plot():
    return Plot(title="t", xlabel="x [s]", ylabel="y [W]", logx=True, logy=True,
                series=[Series("a", [1, 2, 4], [3, 2, 1], low=[2, 1, 0.5], high=[4, 3, 2])],
                markers=[Marker(2.0, "m"), Marker(1.5, "h", axis="y")])


def test_png_is_deterministic_and_metadata_free():
    a, b = render(_plot()), render(_plot())
    assert a == b and a[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"Software" not in a and b"matplotlib" not in a.lower() and b"tIME" not in a


def test_png_ignores_user_rcparams():
    import matplotlib

    a = render(_plot())
    with matplotlib.rc_context({"lines.linewidth": 9, "font.size": 20, "figure.facecolor": "red"}):
        b = render(_plot())
    assert a == b


def test_roofline_attainable_is_min_of_roofs():
    p = roofline_plot(targets=[{"label": "g", "peak_flop_per_s": 1e15, "bandwidth_bytes_per_s": 2e12}],
                      points=[{"label": "decode", "intensity_flop_per_byte": 1.0}])
    s = p.series[0]
    for x, y in zip(s.x, s.y):
        assert y == pytest.approx(min(1e15, x * 2e12) / 1e12)
    assert p.xlabel.endswith("[FLOP/byte]") and p.ylabel.endswith("[TFLOP/s]")
    assert p.markers[0].value == 1.0


# ------------------------------------------------------------------------------------------------ study files
BAD_STUDIES = {
    "extra_key": "name: a\ntitle: t\nkind: claims\nquestion: q\nclaims: c.yaml\ncolour: red\n",
    "missing_section": "name: a\ntitle: t\nkind: serving\nquestion: q\nmodel: llama-3-8b\ntargets: [h100x1]\n",
    "bad_kind": "name: a\ntitle: t\nkind: party\nquestion: q\n",
    "bad_batches": "name: a\ntitle: t\nkind: serving\nquestion: q\nmodel: m\ntargets: [h100x1]\nserving: {prompt_tokens: 1, "
                   "output_tokens: 1, demand_tokens_per_s: 1, min_tokens_per_s_per_user: 1, batches: [0]}\n",
    "not_mapping": "- a\n- b\n",
    "bad_yaml": "name: [\n",
    "util_out_of_range": "name: a\ntitle: t\nkind: claims\nquestion: q\nclaims: c.yaml\ncost: {utilizations: [1.5]}\n",
}


@pytest.mark.parametrize("key", sorted(BAD_STUDIES))
def test_bad_study_files(tmp_path, key, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(BAD_STUDIES[key])
    with pytest.raises(InputError):
        load_study(p)
    assert main(["report", str(p), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_claims_path_cannot_escape(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text("name: a\ntitle: t\nkind: claims\nquestion: q\nclaims: ../../etc/claims.yaml\n")
    assert main(["report", str(p), "--out", str(tmp_path / "out")]) == 2
    assert "inside the study" in capsys.readouterr().err


def test_report_cli_writes_files(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(
        "claims:\n  - {id: peak, text: 'WSE-3 does 125 PF dense', kind: peak_flop_per_s, target: wse3, "
        "precision: fp16, value: 125, unit: PFLOP/s}\n")
    (tmp_path / "s.yaml").write_text("name: ../../evil name\ntitle: Mini audit\nkind: claims\nquestion: q?\n"
                                     "claims: c.yaml\n")
    out = tmp_path / "out"
    assert main(["report", str(tmp_path / "s.yaml"), "--out", str(out), "-f", "json"]) == 0
    files = sorted(os.listdir(out))
    assert files == [MARKER, "assumptions.csv", "claims.csv", "claims_margin.png", "report.md", "report.xlsx"]
    md = (out / "report.md").read_text()
    assert md.startswith("# Mini audit\n\n**Answer.** Of 1 claims, 1 are impossible")
    assert "## Sources used" in md and "](claims_margin.png)" in md
    assert main(["report", str(tmp_path / "s.yaml"), "--out", str(out)]) == 0  # overwrite in place
    assert sorted(os.listdir(out)) == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "out", "s.yaml"]


def test_default_out_dir_uses_slug(tmp_path, monkeypatch):
    (tmp_path / "c.yaml").write_text("claims:\n  - {id: p, text: t, kind: peak_flop_per_s, target: wse3, value: 1}\n")
    (tmp_path / "s.yaml").write_text("name: ../up\ntitle: T\nkind: claims\nquestion: q\nclaims: c.yaml\n")
    monkeypatch.chdir(tmp_path)
    assert main(["report", "s.yaml"]) == 0
    assert (tmp_path / "reports" / "up" / "report.md").is_file()
    assert not (tmp_path.parent / "up").exists()


def test_study_files_parse():
    root = Path(__file__).resolve().parents[1] / "studies"
    for name in ("serve-llama3-70b.yaml", "train-175b.yaml", "claims-audit.yaml"):
        st_, _ = load_study(root / name)
        assert st_.slug == name.removesuffix(".yaml")


def test_report_date_rule(monkeypatch):
    """The study's date wins, then SOURCE_DATE_EPOCH (UTC), then the newest input date; never the clock."""
    from wseplan.report.provenance import report_date

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01T00:00:00Z
    assert report_date("2026-12-03", "2026-11", "2026-10") == ("2026-12-03", "study")
    assert report_date(None, "2026-11", "2026-10") == ("2026-01-01", "SOURCE_DATE_EPOCH")
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert report_date(None, "2025-07", "2026-11") == ("2026-11", "inputs")
    assert report_date(None, None, None) == ("undated", "inputs")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(InputError):
        report_date(None, "2026-11", None)


def test_study_date_is_stated_and_checked(tmp_path):
    claims = tmp_path / "c.yaml"
    claims.write_text("claims:\n- {id: a, text: t, kind: peak_flop_per_s, value: 1e15, target: h100}\n")
    base = "name: a\ntitle: t\nkind: claims\nquestion: q\nclaims: c.yaml\n"
    (tmp_path / "s.yaml").write_text(base + "date: 2026-12-03\n")
    res = run_study(tmp_path / "s.yaml")
    assert "2026-12-03" in res.markdown.split("## Assumptions")[0] and res.provenance["report_date_from"] == "study"
    (tmp_path / "s.yaml").write_text(base + "date: next week\n")
    with pytest.raises(InputError):
        run_study(tmp_path / "s.yaml")


def test_xlsx_bytes_do_not_depend_on_the_clock(monkeypatch):
    """Two workbooks written at different wall-clock times are byte-identical (fixed properties and zip times)."""
    import time

    from wseplan.report.markdown import Column, Table
    from wseplan.report.xlsx import workbook_bytes

    t = Table(name="t", title="T", columns=[Column("a", "a [s]"), Column("b", "b")], rows=[{"a": 1.5, "b": "x"}])
    kw = dict(tables=[t], assumptions=t, sources=[{"id": "s", "title": "S", "url": "", "date": "2026"}],
              about=[("tool", "wseplan")], date="2026-11")
    first = workbook_bytes(**kw)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86400 * 400)
    monkeypatch.setattr(time, "localtime", lambda s=None: time.gmtime(real() + 86400 * 400))
    assert workbook_bytes(**kw) == first


def test_claims_assumptions_show_each_categorys_held_out_interval():
    """A category whose held-out truth was never faster than predicted (wafer inference: every residual says the
    model is too fast) has no band above the estimate; the assumption row shows the interval itself, not "0%"."""
    from wseplan.catalog import load_catalog
    from wseplan.model_error import speed_bounds
    from wseplan.report.study_claims import _error_rows

    rows = {r["input"]: r["value"] for r in _error_rows(load_catalog())}
    assert rows, "the bundled model-error file has validated categories"
    for name, value in rows.items():
        cat = name.split(" predictions")[0].rsplit(" ", 1)[-1]
        lo, hi, _ = speed_bounds(cat)
        assert lo < hi and value == f"{lo:.2f}x to {hi:.2f}x"
        assert value != "0%"
