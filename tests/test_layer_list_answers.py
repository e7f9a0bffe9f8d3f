"""Layer-list models (a model given as its layers: the bundled 3D U-Net, or a user's ``name:/layers:`` YAML) fit and
train on weight-streaming wafers, but GPU and resident-wafer kernels need a transformer's shapes. Every command that
needs times of such a model says so in one line, exit 2 (audit31b H1-H4, M4: cost, compare and scale failed with a
traceback, serve, check and fleet said "does not fit", a layer-list draft crashed every command, and a layer list
without activations overflowed `fit` and leaked 1e+300 into `stream`'s JSON)."""
from __future__ import annotations

import json

import pytest

from wseplan.cli import main

NO_TIME = "layer-list model has no transformer shapes"


@pytest.mark.parametrize("argv", [
    ["cost", "unet3d", "-t", "cs3"],
    ["cost", "unet3d", "-t", "cs3", "--phase", "prefill"],
    ["cost", "unet3d", "-t", "h100x8", "--phase", "decode"],
    ["compare", "unet3d"],
    ["serve", "unet3d", "-t", "cs3"],
    ["scale", "unet3d", "--targets", "wse3,h100", "-n", "2"],
])
def test_commands_that_need_times_refuse_a_layer_list_model(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and NO_TIME in err[0] and "does not fit" not in err[0]


def test_weight_streaming_still_times_a_layer_list_model(capsys):
    assert main(["cost", "unet3d", "-t", "cs3", "--phase", "train", "-f", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["metrics"] and rec["plan"]["step_s"] > 0
    assert main(["scale", "unet3d", "--targets", "wse3", "-n", "2", "-f", "json"]) == 0


@pytest.mark.parametrize("cmd", [["time", "llama-3-8b", "-t", "h100x1"], ["fit", "llama-3-8b", "-t", "cs3"],
                                 ["serve", "llama-3-8b", "-t", "cs3"], ["cost", "llama-3-8b", "-t", "h100x1"]])
def test_a_layer_list_draft_is_refused(cmd, capsys):
    assert main(cmd + ["--speculative", "unet3d"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--speculative" in err[0] and "layer-list" in err[0]


def test_a_claim_on_a_layer_list_model_says_why_it_is_not_timed():
    from wseplan.catalog import load_catalog
    from wseplan.claims import Claim, check_claim

    c = Claim(id="u1", text="3D U-Net at 100 tokens/s per user", kind="tokens_per_s_per_user", value=100,
              unit="tokens/s", model="unet3d", target="h100x8", batch=1)
    v = check_claim(c, load_catalog())
    assert NO_TIME in v.reason and "fits" not in v.reason.split(";")[0]


def test_a_layer_list_without_activations_holds_any_batch(tmp_path, capsys):
    """Activation bytes 0 (the schema allows it): the wafer holds any batch; `fit` prints its record (it overflowed
    converting infinity to an integer) and the JSON says null, not 1e+300 or 2^62."""
    f = tmp_path / "noact.yaml"
    f.write_text("name: x\nlayers: [{name: a, params: 1.0e+6, flop_per_sample: 1.0e+9, activation_bytes_per_sample: 0}]\n")
    assert main(["fit", str(f), "-t", "wse3", "--phase", "train"]) == 0
    assert "unbounded" in capsys.readouterr().out
    assert main(["fit", str(f), "-t", "wse3", "--phase", "train", "-f", "json"]) == 0
    st = json.loads(capsys.readouterr().out)["streaming"]
    assert st["max_tokens_on_wafer"] is None and st["max_batch_on_wafer"] is None
    assert main(["stream", str(f), "-t", "cs3", "-f", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["max_tokens_on_wafer"] is None and rec["max_batch_on_wafer"] is None
    assert main(["stream", str(f), "-t", "cs3"]) == 0  # the table says so (review31 L3: the row was left out)
    assert "unbounded" in capsys.readouterr().out
    assert main(["fit", str(f), "-t", "wse3", "--phase", "train", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_tokens_in_flight"] is None  # not 2^62

