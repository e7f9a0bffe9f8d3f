"""A user's validation file (audit20 F1, F5): the Python API judges it by the bundled bands as the CLI does (it had
used the file's own rows, so one row was always within), and rows its format forbids are refused with one line:
a unit other than the metric's, an unknown category or quality, a device count the layout contradicts."""
from __future__ import annotations

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
    (ROW.format(value=150, unit="ms", quality="strong").replace(",1,1,1,1,ttft", ",3,2,1,1,ttft"),
     ["n_devices 3", "tp x pp x dp x cp = 2"]),
])
def test_rows_the_format_forbids_are_refused(tmp_path, row, words):
    p = write(tmp_path, row)
    with pytest.raises(InputError) as e:
        read_cases(p)
    assert all(w in str(e.value) for w in words), str(e.value)
