"""The sweep file schema: what it refuses rather than silently changing."""
from __future__ import annotations


def test_an_output_of_another_file_type_is_refused(tmp_path):
    """audit27 (open question): `output: t.xlsx` was written as t.xlsx.csv without a word."""
    import pytest

    from wseplan.errors import InputError
    from wseplan.sweep.schema import load_sweep

    f = tmp_path / "s.yaml"
    for name, ok in (("t.xlsx", False), ("t.json", False), ("t.parquet", True), ("run.v2", True), ("t", True),
                     ("T.Parquet", True)):
        f.write_text("name: t\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x1]\nbatches: [1]\n"
                     f"contexts: [1024]\noutput: {name}\n")
        if ok:
            out = load_sweep(f).output_name()
            assert out.lower().endswith((".csv", ".parquet")) and (out == name or not name.lower().endswith(".parquet"))
        else:
            with pytest.raises(InputError, match=r"output: writes \.csv or \.parquet"):
                load_sweep(f)
