"""Output that cannot be written, and inputs the library API must refuse as the CLI does (audit27 H6, H8, H13)."""
from __future__ import annotations

import errno
import io

import pytest

from wseplan.cli import main
from wseplan.errors import InputError


class _Full(io.StringIO):
    """A standard output on a full disk: every write fails with ENOSPC."""

    def write(self, s):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdout", _Full())
    assert main(["fit", "llama-70b", "--target", "wse3", "-f", "json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write the output (No space left on device)") and "Traceback" not in err


def test_a_closed_stdout_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdout", None)
    assert main(["fit", "llama-70b", "--target", "wse3"]) == 2
    assert "standard output is closed" in capsys.readouterr().err


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "x", True])
def test_api_cost_inputs_must_be_finite_numbers(catalog, value):
    """A NaN cost input passed every range check (comparisons with NaN are false) and every cost came back None; a
    string raised a raw TypeError."""
    from wseplan.costing import cost

    with pytest.raises(InputError, match="electricity_usd_per_kwh must be a finite number"):
        cost("llama-70b", "h200x8", overrides={"electricity_usd_per_kwh": value}, catalog=catalog)


def test_a_serving_demand_beyond_any_fleet_names_its_field(tmp_path, capsys):
    """1e20 output tokens/s reached the solver and ended in 'HiGHS: unexpected model status Empty'."""
    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems: [{hardware: h100-sxm}]\nworkloads:\n  - {name: chat, model: llama-3.1-70b, "
                 "kind: serve, output_tokens_per_s: 1e20, batches: [16]}\n")
    assert main(["fleet", str(f), "--no-analysis"]) == 2
    err = capsys.readouterr().err
    assert "output_tokens_per_s: a demand of 1e+20 output tokens/s is beyond 1e+12" in err and "HiGHS" not in err
