"""Machine and human formats keep the whole answer (audit20 F8): `place -f csv` carries the stages (which layers on
which device) as a JSON cell, a one-record csv carries its notes (the idle-GPU warning of `time`), and md/table give
the prediction interval and the placement bounds in their units."""
from __future__ import annotations

import csv
import io
import json

from wseplan.cli import main


def run(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def test_place_csv_carries_the_stages_as_json_equal_to_json_output(capsys):
    (row,) = csv.DictReader(io.StringIO(run(capsys, ["place", "llama-3-70b", "--target", "cs3x4", "-f", "csv"])))
    rec = json.loads(run(capsys, ["place", "llama-3-70b", "--target", "cs3x4", "-f", "json"]))
    stages = json.loads(row["stages_json"])
    assert [{k: s[k] for k in rec["stages"][0]} for s in stages] == rec["stages"]
    assert {s["hardware"] for s in stages} == {"wse3"}


def test_one_record_csv_keeps_the_notes(capsys):
    argv = ["time", "mixtral-8x7b", "--target", "h100x12288", "--phase", "train", "--batch", "256", "--context", "8192"]
    (row,) = csv.DictReader(io.StringIO(run(capsys, argv + ["-f", "csv"])))
    rec = json.loads(run(capsys, argv + ["-f", "json"]))
    assert row["notes"] == " | ".join(rec["notes"]) and "left idle" in row["notes"]


def test_intervals_and_bounds_print_with_units(capsys):
    md = run(capsys, ["time", "llama-3-70b", "--target", "h100x8", "--batch", "8", "-f", "md"])
    low = next(line for line in md.splitlines() if line.startswith("| interval low"))
    assert "tokens/s" in low
    md = run(capsys, ["place", "llama-3-70b", "--target", "cs3x4", "-f", "md"])
    bound = next(line for line in md.splitlines() if line.startswith("| best bound"))
    assert bound.rstrip(" |").endswith("GB")
