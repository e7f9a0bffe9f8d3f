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
    assert main(["time", "llama-3-8b", "--target", "h100x8", "--phase", "train", "--batch", "8", "--context", "8192",
                 "--tp", "8", "--micro-batch", "8", "-f", "json"]) == 0


def test_wafer_training_inputs_that_contradict_are_refused_with_the_fix():
    """audit22 F9: a stream micro-batch beyond each system's share of the batch (100, or 20 x 4 systems, of 64
    sequences) is refused naming the largest that works (16), not clipped; a MemoryX option outside training is refused;
    scale names the activation policy when no count fits under it, and stops its sweep where a system would get less
    than one micro-batch."""
    from wseplan.catalog import load_catalog
    from wseplan.errors import InputError
    from wseplan.fit import fit
    from wseplan.plan import plan
    from wseplan.scale import scaling_frame
    from wseplan.targets import parse_target
    from wseplan.workload import resolve_model

    cat = load_catalog()
    for mb in (100, 20):
        with pytest.raises(InputError, match="micro_batch.*at most 16"):
            plan("gpt-3-175b", "cs3x4", phase="train", batch=64, context=2048, options={"micro_batch": mb}, catalog=cat)
    assert plan("gpt-3-175b", "cs3x4", phase="train", batch=64, context=2048, options={"micro_batch": 16},
                catalog=cat).fits
    with pytest.raises(InputError, match="memoryx.*training only"):
        fit("gpt-3-175b", "cs3x4", phase="decode", memoryx_option="12tb", catalog=cat)
    m, t = resolve_model("gpt-3-175b", cat), [parse_target("wse3", cat)]
    with pytest.raises(InputError, match="--policy store: try --policy auto"):
        scaling_frame(m, t, cat, global_batch=64, context=2048, max_systems=64, policy="store")
    df = scaling_frame(m, t, cat, global_batch=64, context=2048, max_systems=64, micro_batch=8)
    assert list(df["num_systems"]) == [1, 2, 4, 8]  # 16 systems x 8 sequences > 64
