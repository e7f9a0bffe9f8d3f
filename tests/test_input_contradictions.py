"""Inputs that contradict each other or the command are refused with one line and exit 2 (audit18 F8): a ``stream``
system count against the target's, ``stream`` on a GPU, a micro-batch larger than the batch, output tokens for a
prefill or a training step."""
from __future__ import annotations

import os

import pytest

from wseplan.cli import main


@pytest.mark.parametrize("argv, words", [
    (["stream", "gpt-3-175b", "--target", "cs3x4", "--systems", "8", "--batch", "64", "--context", "2048"],
     ["systems", "contradicts", "count 4"]),
    (["stream", "gpt-3-175b", "--target", "h100x8"], ["not a wafer", "--phase train"]),
    (["time", "llama-3-70b", "--target", "h100x8", "--phase", "train", "--batch", "8", "--context", "8192", "--tp", "8",
      "--micro-batch", "16"], ["micro_batch", "at most 8"]),
    (["time", "llama-3-70b", "--target", "h100x8", "--phase", "prefill", "-o", "100"], ["output_tokens", "prefill"]),
    (["cost", "llama-3-70b", "--target", "h100x8", "--phase", "train", "-o", "100"], ["output_tokens", "train"]),
    # audit20 F9: an empty --targets entry (as compare), the same hardware twice, a TP degree on a wafer
    (["scale", "llama-3-8b", "--targets", "wse3,,h100", "--max-systems", "1"], ["empty entry"]),
    (["scale", "llama-3-8b", "--targets", "wse3,cs3", "--max-systems", "1"], ["same hardware", "wse3"]),
    (["place", "llama-3-70b", "--target", "cs3x4", "--tp", "3"], ["tensor_parallel", "GPU targets"]),
])
def test_contradictions_are_one_line_errors(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and "Traceback" not in err and err.count("\n") == 1, err
    assert all(w in err for w in words), err
    assert os.listdir(tmp_path) == []


def test_agreeing_inputs_still_run(capsys):
    assert main(["stream", "gpt-3-175b", "--target", "cs3x4", "--systems", "4", "--batch", "64", "--context", "2048",
                 "-f", "json"]) == 0
    assert main(["time", "llama-3-70b", "--target", "h100x8", "--phase", "train", "--batch", "8", "--context", "8192",
                 "--tp", "8", "--micro-batch", "8", "-f", "json"]) == 0
