"""Draft-target speculative decoding needs a draft that shares the target's tokenizer and is smaller (audit21 F2, F7):
the profile's default draft is not used for another family's model (a note says so), a named draft that cannot
serve is refused, and records say when speculation is on."""
from __future__ import annotations

import pytest

from wseplan.catalog import load_catalog
from wseplan.errors import InputError
from wseplan.plan import plan
from wseplan.serving import serve
from wseplan.workload import resolve_model


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_default_draft_of_another_vocabulary_is_not_used(cat):
    """Qwen3-235B (151,936-token vocabulary) on the wafer production profile, whose draft is Llama-3.2-1B (128,256):
    no speculation, so the answer equals plain decoding, and a note names both tokenizers."""
    q, d = resolve_model("qwen3-235b-a22b", cat), resolve_model("llama-3.2-1b", cat)
    assert q.vocab_size == 151_936 and d.vocab_size == 128_256  # the published configs' vocab_size
    r = plan("qwen3-235b-a22b", "cs3x12", phase="decode", batch=1, context=4096, catalog=cat)
    plain = plan("qwen3-235b-a22b", "cs3x12", phase="decode", batch=1, context=4096, catalog=cat,
                 options={"speculative": "none"})
    assert r.tpot_s == plain.tpot_s
    assert any("speculative decoding off" in n and "llama3 tokenizer" in n and "qwen3 one" in n for n in r.notes)
    assert not any("speculative decoding" in n for n in plain.notes)


def test_same_family_default_draft_speculates_and_says_so(cat):
    """Llama-3.1-70B shares Llama-3.2-1B's vocabulary: the production profile speculates at batch 1 (faster than plain
    decoding) and the record's notes say so, with the accepted tokens per target pass."""
    r = plan("llama-3.1-70b", "cs3x4", phase="decode", batch=1, context=4096, catalog=cat)
    plain = plan("llama-3.1-70b", "cs3x4", phase="decode", batch=1, context=4096, catalog=cat,
                 options={"speculative": "none"})
    assert r.tpot_s < plain.tpot_s
    assert any(n.startswith("speculative decoding on") and "Llama-3.2-1B" in n for n in r.notes)


@pytest.mark.parametrize("target_model, draft, why", [("qwen3-235b-a22b", "llama-3.2-1b", "tokenizer"),
                                                      ("llama-3.1-8b", "llama-3.1-70b", "no smaller")])
def test_a_named_draft_that_cannot_serve_is_refused(cat, target_model, draft, why):
    with pytest.raises(InputError, match=why):
        plan(target_model, "h200x8", phase="decode", batch=1, context=4096, catalog=cat, options={"speculative": draft})
    with pytest.raises(InputError, match="speculative"):
        serve(target_model, "h200x8", concurrency=1, options={"speculative": draft}, catalog=cat, prices=False)


def test_serve_carries_the_plan_notes_of_its_chosen_point(cat):
    """A prompt beyond the model's positions is noted by serve as by time (Qwen3-235B states 40,960)."""
    res = serve("qwen3-235b-a22b", "h200x8", input_tokens=50_000, output_tokens=256, concurrency=1, catalog=cat,
                prices=False)
    assert any("beyond" in n and "40,960" in n for n in res.notes)
    assert all(any("beyond" in n for n in p.notes) for p in res.points)


def test_demand_file_with_an_unknown_precision_names_the_field(tmp_path):
    from wseplan.optimize.fleet_schema import read_demand

    f = tmp_path / "d.yaml"
    f.write_text("systems: [{hardware: h100}]\nworkloads:\n  - {name: w, kind: serve, model: llama-3.1-8b, "
                 "precision: fp3, requests_per_s: 1, prompt_tokens: 100, output_tokens: 100}\n")
    with pytest.raises(InputError, match=r"workloads\.0\.precision: unknown precision 'fp3'"):
        read_demand(f)


def test_one_vocabulary_size_is_not_one_tokenizer(cat):
    """Mixtral-8x7B and Llama-2-7B both have 32,000 tokens but different tokenizers (Mistral's and Llama 2's): the
    catalog's ``tokenizer`` refuses the pair; CodeLlama-34B uses Llama 2's tokenizer, so Llama-2-7B may draft for it."""
    mix, l2, code = (resolve_model(n, cat) for n in ("mixtral-8x7b", "llama-2-7b", "codellama-34b"))
    assert mix.vocab_size == l2.vocab_size == code.vocab_size == 32_000
    with pytest.raises(InputError, match="mistral-v1 one: draft and target need one tokenizer"):
        plan("mixtral-8x7b", "h200x8", phase="decode", batch=1, context=4096, catalog=cat,
             options={"speculative": "llama-2-7b"})
    r = plan("codellama-34b", "h200x8", phase="decode", batch=1, context=4096, catalog=cat,
             options={"speculative": "llama-2-7b"})
    assert any(n.startswith("speculative decoding on") and "Llama-2-7B" in n for n in r.notes)


def test_without_a_stated_tokenizer_the_vocabulary_decides(cat):
    """A model from a config.json states no tokenizer: the vocabulary size is the test (same size: allowed)."""
    from wseplan.devices.speculation import draft_mismatch

    l31, l32 = resolve_model("llama-3.1-70b", cat), resolve_model("llama-3.2-1b", cat)
    bare = l32.model_copy(update={"tokenizer": None})
    assert draft_mismatch(l31, bare) is None
    assert "128,000-token vocabulary" in draft_mismatch(l31, bare.model_copy(update={"vocab_size": 128_000}))
    assert "need one tokenizer" in draft_mismatch(l31, l32.model_copy(update={"tokenizer": "llama2"}))
