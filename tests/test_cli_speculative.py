"""`wseplan time` takes the speculative-decoding flags `serve` takes (one shared definition in wseplan/cli/options.py):
the notes of `fit` and `time` point users to `--speculative none`, so the command they print must accept it."""
from __future__ import annotations

import json

import pytest

from wseplan.cli import main
from wseplan.timing import predict_time


def _time(capsys, *args):
    rc = main(["time", *args, "--format", "json"])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


def test_time_speculative_none_is_the_plain_decode_of_the_api(capsys):
    """The wafer-production profile drafts by default; `--speculative none` gives the API's plain decoding, and the
    default's note names the flag that turns it off."""
    rc, on, _ = _time(capsys, "llama-3.1-8b", "--target", "cs3x1", "--batch", "1", "--context", "1024")
    assert rc == 0 and any("--speculative none" in n for n in on["notes"])
    rc, off, _ = _time(capsys, "llama-3.1-8b", "--target", "cs3x1", "--batch", "1", "--context", "1024",
                       "--speculative", "none")
    api = predict_time("llama-3.1-8b", "cs3x1", phase="decode", batch=1, context=1024, speculative="none")
    assert rc == 0 and off["step_s"] == pytest.approx(api.step_s, rel=1e-12) and not off["notes"]
    assert off["tokens_per_s_per_user"] < on["tokens_per_s_per_user"]


def test_time_draft_settings_reach_the_model(capsys):
    rc, rec, _ = _time(capsys, "llama-3-8b", "--target", "h100x1", "--batch", "1", "--context", "1024",
                       "--speculative", "llama-3.2-1b", "--draft-tokens", "4", "--acceptance", "0.7")
    api = predict_time("llama-3-8b", "h100x1", phase="decode", batch=1, context=1024, speculative="llama-3.2-1b",
                       draft_tokens=4, acceptance=0.7)
    assert rc == 0 and rec["step_s"] == pytest.approx(api.step_s, rel=1e-12)
    # accepted tokens per target pass for k = 4, a = 0.7: (1 - 0.7^5) / (1 - 0.7) = 2.77
    assert any("2.77 accepted" in n for n in rec["notes"])


@pytest.mark.parametrize("args, flag", [
    (["--draft-tokens", "4"], "--draft-tokens"),                   # no draft on gpu-production
    (["--acceptance", "0.5"], "--acceptance"),
    (["--speculative", "no-such-draft"], "--speculative"),
    (["--speculative", "llama-3.2-1b", "--draft-tokens", "0"], "--draft-tokens"),
    (["--speculative", "llama-3.2-1b", "--acceptance", "1.5"], "--acceptance"),
    (["--phase", "train", "--speculative", "llama-3.2-1b"], "--speculative"),
])
def test_time_refuses_bad_speculative_flags_in_one_line(capsys, args, flag):
    rc, _, err = _time(capsys, "llama-3-8b", "--target", "h100x1", *args)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and flag in lines[0]


def test_fit_takes_the_flag_its_note_names(capsys):
    """`wseplan fit` prints the speculative note too, so it takes `--speculative` (and `--software`): `none` gives the
    API's plain answer and drops the note; a training question refuses it in one line."""
    from wseplan.fit import fit

    assert main(["fit", "llama-70b", "--target", "cs3x4", "--format", "json"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert any("--speculative none" in n for n in on["notes"])
    assert main(["fit", "llama-70b", "--target", "cs3x4", "--speculative", "none", "--format", "json"]) == 0
    off = json.loads(capsys.readouterr().out)
    api = fit("llama-70b", "cs3x4", speculative="none")
    assert not off["notes"] and off["fits"] == api.fits and off["total_bytes"] == api.total_bytes
    assert main(["fit", "llama-70b", "--target", "h100x8", "--software", "gpu-production-specdec", "--format",
                 "json"]) == 0
    assert any("gpu-production-specdec" in n for n in json.loads(capsys.readouterr().out)["notes"])
    assert main(["fit", "llama-70b", "--target", "cs3x4", "--phase", "train", "--speculative", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--speculative" in err[0]


@pytest.mark.parametrize("target", ["h100x1", "cs3x1"])
def test_api_refuses_speculative_options_for_training(target):
    """Whether speculative options apply is decided once, in plan.setup: a training question refuses them through
    every entry point (the API's fit once dropped them silently; the CLI had its own copy of the check)."""
    from wseplan.errors import InputError
    from wseplan.fit import fit

    with pytest.raises(InputError, match=r"^speculative: .*not phase train"):
        fit("llama-3-8b", target, phase="train", speculative="llama-3.2-1b")
    with pytest.raises(InputError, match=r"^draft_tokens: .*not phase train"):
        predict_time("llama-3-8b", target, phase="train", batch=8, context=2048, draft_tokens=4)


def test_api_refuses_draft_settings_without_a_draft():
    """Draft settings with speculative decoding off (the profile has no draft, `none` was asked, or the profile's
    draft cannot serve the model) are refused by the family's one decision, not silently ignored."""
    from wseplan.errors import InputError

    with pytest.raises(InputError, match=r"^draft_tokens: speculative decoding is off \(software profile gpu-production"):
        predict_time("llama-3-8b", "h100x1", phase="decode", batch=1, context=1024, draft_tokens=4)
    with pytest.raises(InputError, match=r"^acceptance: speculative decoding is off \(speculative none\)"):
        predict_time("llama-3.1-8b", "cs3x1", phase="decode", batch=1, context=1024, speculative="none",
                     acceptance=0.6)
    # Mixtral's tokenizer is not the wafer-production draft's (Llama 3.2 1B): the default draft is dropped, and a
    # draft setting given with it is refused rather than applied to nothing
    plain = predict_time("mixtral-8x7b", "cs3x4", phase="decode", batch=1, context=1024)
    assert not any("speculative decoding on" in n for n in plain.notes)
    with pytest.raises(InputError, match=r"^draft_tokens: .*cannot serve"):
        predict_time("mixtral-8x7b", "cs3x4", phase="decode", batch=1, context=1024, draft_tokens=3)
