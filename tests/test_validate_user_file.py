"""A user's validation file (audit20 F1, F5): the Python API judges it by the bundled bands as the CLI does (it had
used the file's own rows, so one row was always within), and rows its format forbids are refused with one line:
a unit other than the metric's, an unknown category or quality, a device count the layout contradicts."""
from __future__ import annotations

import copy
import json

import pytest

from wseplan.catalog import load_catalog
from wseplan.cli import main
from wseplan.errors import InputError
from wseplan.validate import read_cases, reference_bands, validate_file

HEAD = ("id,category,phase,model,input_len,output_len,concurrency,precision,hardware,n_devices,tp,pp,dp,metric,value,"
        "unit,quality,source,notes\n")
ROW = "U1,gpu-infer,prefill,llama-3-8b,2048,,1,bf16,h100-sxm,1,1,1,1,ttft_ms,{value},{unit},{quality},my bench,\n"
CAT = load_catalog()


def write(tmp_path, text):
    p = tmp_path / "cases.csv"
    p.write_text(HEAD + text)
    return p


def test_api_judges_a_user_file_by_the_bundled_bands(tmp_path, capsys):
    p = write(tmp_path, ROW.format(value=150000, unit="ms", quality="strong"))  # 1000x off: outside any honest band
    (api,) = validate_file(p, CAT)
    assert api["tolerance_frac"] == pytest.approx(reference_bands(CAT)["gpu-infer"], rel=1e-12)
    assert api["status"] == "outside tolerance"
    assert main(["validate", str(p), "-f", "json"]) == 0
    (cli,) = json.loads(capsys.readouterr().out)["rows"]
    assert cli["status"] == api["status"] and cli["tolerance_frac"] == pytest.approx(api["tolerance_frac"], rel=1e-12)


@pytest.mark.parametrize("row, words", [
    (ROW.format(value=0.15, unit="s", quality="strong"), ["unit 's'", "ttft_ms", "ms"]),
    (ROW.format(value=150, unit="ms", quality="excellent"), ["quality", "excellent"]),
    (ROW.format(value=150, unit="ms", quality="strong").replace("gpu-infer", "gpu-inferx"), ["category", "gpu-inferx"]),
    # audit31b L1: an unknown phase read as "input_len not given"
    (ROW.format(value=150, unit="ms", quality="strong").replace(",prefill,", ",bogus,"), ["phase", "bogus", "e2e-infer"]),
    (ROW.format(value=150, unit="ms", quality="strong").replace(",1,1,1,1,ttft", ",3,2,1,1,ttft"),
     ["n_devices 3", "tp x pp x dp x cp = 2"]),
])
def test_rows_the_format_forbids_are_refused(tmp_path, row, words):
    p = write(tmp_path, row)
    with pytest.raises(InputError) as e:
        read_cases(p)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_reference_bands_are_kept_per_catalog_and_calibration(monkeypatch):
    """The bundled set is validated once per catalog object and calibration state; a different catalog or a
    changed calibration file validates it again (a refit in the process must not judge by stale bands)."""
    import wseplan.validate.run as R

    calls = []
    monkeypatch.setattr(R, "validate_cases", lambda cases, cat, *a, **k: calls.append(cat) or
                        [{"category": "gpu-infer", "rel_error": 0.1 * len(calls), "status": "x", "quality": "strong"}])
    monkeypatch.setattr(R, "category_bands", lambda recs: {"gpu-infer": recs[0]["rel_error"]})
    monkeypatch.setattr(R, "_BANDS", [])
    stamp = [("gpu_efficiency.yaml", 1, 1)]
    monkeypatch.setattr(R, "_calibration_stamp", lambda: tuple(stamp))
    first = R.reference_bands(CAT)
    first["gpu-infer"] = -1.0  # a caller's change does not reach the kept bands
    assert R.reference_bands(CAT) == {"gpu-infer": pytest.approx(0.1)} and len(calls) == 1
    stamp[0] = ("gpu_efficiency.yaml", 1, 2)  # the file rewritten
    assert R.reference_bands(CAT) == {"gpu-infer": pytest.approx(0.2)} and len(calls) == 2
    other = copy.copy(CAT)
    assert R.reference_bands(other) == {"gpu-infer": pytest.approx(0.3)} and calls[-1] is other


def test_a_malformed_user_file_is_refused_before_the_bands_are_computed(tmp_path, monkeypatch, capsys):
    """The bundled set's validation (seconds in a fresh process) waits until the user's file has been read whole."""
    import wseplan.validate as V

    def never(cat):
        raise AssertionError("bands computed before the file was read")

    monkeypatch.setattr(V, "reference_bands", never)
    p = write(tmp_path, ROW.format(value=150, unit="ms", quality="strong") + ROW.replace("U1", "U2").format(
        value="nan", unit="ms", quality="strong"))
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "U2" in err and "not a finite number" in err and err.count("\n") == 1


def test_csv_and_tables_say_which_rows_are_defaulted(tmp_path, capsys):
    """audit33d L1: a row whose empty inputs a documented default filled says so in csv and the tables too (only json
    did), with its quality: U2 leaves input_len empty (the ttft metric's prompt default fills it)."""
    import csv
    import io

    p = write(tmp_path, ROW.format(value=150, unit="ms", quality="strong")
              + ROW.format(value=150, unit="ms", quality="weak").replace("U1,", "U2,").replace(",2048,", ",,"))
    (j1, j2) = validate_file(p, CAT)
    assert main(["validate", str(p), "-f", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["id"] for r in rows] == ["U1", "U2"]
    assert (rows[0]["quality"], rows[1]["quality"]) == ("strong", "weak")
    assert rows[0]["defaulted"] == ";".join(j1["defaulted"] or []) and rows[1]["defaulted"] == ";".join(j2["defaulted"])
    assert "input_len" in rows[1]["defaulted"].split(";")
    assert main(["validate", str(p), "-f", "md"]) == 0
    assert "defaulted" in capsys.readouterr().out
