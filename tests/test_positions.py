"""A sequence longer than the model can represent (audit18 F3): a learned position table (GPT-3's 2,048 rows) refuses
longer sequences in every command (one line, exit 2); a rotary model past its stated ``max_position_embeddings`` is
planned with a note (it can be context-extended); a defaulted context is cut to what the model holds."""
from __future__ import annotations

import json
import os

import pytest

from wseplan.catalog import load_catalog
from wseplan.cli import main
from wseplan.errors import InputError
from wseplan.plan import plan

CAT = load_catalog()


def run(capsys, argv):
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv, longest", [
    (["time", "gpt-3-175b", "--target", "cs3x4", "--phase", "train", "--batch", "64", "--context", "32768"], "2,048"),
    (["fit", "gpt-3-175b", "--target", "h100x8", "--context", "2049"], "2,048"),
    # a request's answer tokens need positions too: 2,000 + 100 > 2,048, so at most 1,948 prompt tokens
    (["time", "gpt-3-175b", "--target", "h100x8", "--phase", "serve", "--batch", "8", "--context", "2000", "-o", "100"],
     "1,948"),
    # cost prices whole requests (the default 256 answer tokens): 2,048 - 256 prompt tokens at most
    (["cost", "gpt-3-175b", "--target", "h100x8", "--batch", "8", "--context", "4096"], "1,792"),
])
def test_learned_positions_refuse_longer_sequences(capsys, tmp_path, monkeypatch, argv, longest):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, argv)
    assert rc == 2 and out == "" and "Traceback" not in err and err.count("\n") == 1, err
    assert "context" in err and "learned positions" in err and f"at most {longest}" in err
    assert os.listdir(tmp_path) == []


def test_sweep_over_a_context_past_the_positions_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nphase: decode\nmodels: [gpt-3-175b]\ntargets: [h100x8]\nbatches: [1]\n"
                    "contexts: [1024, 4096]\noutput: s.csv\n")
    rc, out, err = run(capsys, ["sweep", spec, "--out", tmp_path / "out"])
    assert rc == 2 and "learned positions" in err and not (tmp_path / "out" / "s.csv").exists()


def test_default_context_is_cut_to_the_positions():
    r = plan("gpt-3-175b", "h100x8", phase="decode", catalog=CAT)
    assert r.context == 2048 == CAT.models["gpt-3-175b"].learned_pos_embeddings
    assert r.sources["context"].startswith("default")
    s = plan("gpt-3-175b", "h100x8", phase="serve", batch=4, catalog=CAT)  # prompt + default 256 answer tokens
    assert s.context + s.output_tokens == 2048 and s.output_tokens == int(CAT.defaults.default_output_tokens.si)
    # a model whose positions exceed the default keeps the catalog default
    assert plan("llama-3.1-70b", "h100x8", phase="decode", catalog=CAT).context == int(CAT.defaults.default_context_tokens.si)


def test_serve_cuts_its_default_prompt_as_time_does(capsys):
    """`serve` with the default request answers GPT-3 175B for the prompt `time --phase serve` takes (2,048 positions
    less the 256-token answer), and says so; it refused before while time, cost and compare answered (audit35a L2)."""
    from wseplan.serving import serve

    res = serve("gpt-3-175b", "h100x8", concurrency=4, catalog=CAT)
    p = plan("gpt-3-175b", "h100x8", phase="serve", batch=4, catalog=CAT)
    assert res.input_tokens == p.context == 2048 - 256 and res.points
    assert any(n.startswith("input_tokens: the default prompt of 2,048 tokens is cut to 1,792") for n in res.notes)
    # a given prompt is never cut: too long, it is refused
    with pytest.raises(InputError, match="learned positions"):
        serve("gpt-3-175b", "h100x8", input_tokens=2048, concurrency=4, catalog=CAT)


def test_rotary_model_past_its_stated_context_is_planned_with_a_note():
    past = plan("llama-3-70b", "h100x8", phase="decode", batch=1, context=16384, catalog=CAT)
    assert past.fits and past.tpot_s is not None
    assert any("8,192 (max_position_embeddings)" in n for n in past.notes), past.notes
    within = plan("llama-3.1-70b", "h100x8", phase="decode", batch=1, context=16384, catalog=CAT)
    assert not any("max_position_embeddings" in n for n in within.notes)
    # the same physics either way: the note does not change the time (Llama 3 and 3.1 70B share their shapes)
    assert past.tpot_s == pytest.approx(within.tpot_s, rel=1e-12)


def test_config_without_a_stated_context_gets_no_note(tmp_path):
    cfg = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 512,
           "vocab_size": 1000, "model_type": "llama"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = plan(str(p), "h100x1", phase="decode", batch=1, context=1_000_000, catalog=CAT)
    assert not any("max_position_embeddings" in n for n in r.notes)
    cfg["max_position_embeddings"] = 4096
    p.write_text(json.dumps(cfg))
    assert any("4,096" in n for n in plan(str(p), "h100x1", phase="decode", batch=1, context=8192, catalog=CAT).notes)


def test_api_refusal_is_an_input_error():
    with pytest.raises(InputError, match="learned positions"):
        plan("gpt-3-175b", "cs3x4", phase="train", batch=64, context=32768, catalog=CAT)
