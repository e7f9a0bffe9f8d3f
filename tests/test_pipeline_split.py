"""Uneven pipeline splits (the GPU family's ``pipeline_split`` option): current frameworks put any number of layers on a
stage, so the layout search may interleave a model whose layers do not divide ``pp x vpp``; frameworks of 2021-2022
needed them to divide."""
import numpy as np
import pytest

from wseplan.devices.gpu import PIPELINE_SPLITS
from wseplan.errors import InputError
from wseplan.plan import plan, setup


def _grid(split: str) -> dict:
    s = setup("llama-3.1-405b", "h100-sxmx16384", phase="train", precision="bf16",
              options={"pipeline_split": split})
    return s.family._grid(s.ctx, 2048.0)


def test_uneven_split_admits_interleaving_where_layers_do_not_divide():
    # Llama 3.1 405B: 126 layers (hand: 126 / (16 x 2) = 3.94, 126 / (16 x 4) = 1.97: neither divides, both leave
    # every virtual stage at least one layer; 126 / (8 x 8) = 1.97 likewise, NVIDIA's MLPerf layout)
    uneven, even = _grid("uneven"), _grid("even")
    for pp, v in ((16, 2), (16, 4), (8, 4)):
        on = (uneven["pp"] == pp) & (uneven["vpp"] == v)
        assert on.any(), (pp, v)
        assert not ((even["pp"] == pp) & (even["vpp"] == v)).any(), (pp, v)
    # a virtual stage needs a layer: 126 < 64 x 2 (pp 64, vpp 2) and 126 < 128 x 1 is not interleaved at all
    assert not ((uneven["pp"] == 64) & (uneven["vpp"] == 2)).any()
    # pp 2 x vpp 2 does not divide 126 (31.5 layers per virtual stage); pp 2 without interleaving is always allowed
    assert ((uneven["pp"] == 2) & (uneven["vpp"] == 2)).any() and not ((even["pp"] == 2) & (even["vpp"] == 2)).any()
    assert ((even["pp"] == 2) & (even["vpp"] == 1)).any()
    # without interleaving the two splits search the same layouts
    for g in (uneven, even):
        g1 = {k: v[g["vpp"] == 1] for k, v in g.items()}
        g["_one"] = np.stack([g1[k] for k in sorted(g1)], axis=1)
    assert np.array_equal(uneven["_one"], even["_one"])


def test_searched_step_is_never_slower_with_uneven_splits():
    kw = dict(phase="train", batch=2048, context=8192, layout={"tp": 8, "pp": 16, "dp": 128})
    a = plan("llama-3.1-405b", "h100-sxmx16384", options={"pipeline_split": "uneven"}, **kw)
    b = plan("llama-3.1-405b", "h100-sxmx16384", options={"pipeline_split": "even"}, **kw)
    assert a.fits and b.fits
    assert b.layout["virtual_pipeline"] == 1  # 126 layers divide no interleaved 16-stage split
    assert a.step_s <= b.step_s
    assert a.layout["virtual_pipeline"] > 1 and a.step_s < b.step_s


def test_default_is_uneven_and_option_is_checked():
    assert PIPELINE_SPLITS[0] == "uneven"
    kw = dict(phase="train", batch=2048, context=8192, layout={"tp": 8, "pp": 16, "dp": 128})
    assert plan("llama-3.1-405b", "h100-sxmx16384", **kw).step_s == \
        plan("llama-3.1-405b", "h100-sxmx16384", options={"pipeline_split": "uneven"}, **kw).step_s
    with pytest.raises(InputError, match="pipeline_split"):
        plan("llama-3.1-405b", "h100-sxmx16384", options={"pipeline_split": "ragged"}, **kw)


def test_context_parallel_search_keeps_to_the_target_count():
    # 64 GPUs with cp 2: the searched tp x pp x dp splits the other 32 (it used to split all 64, a 128-GPU layout)
    r = plan("llama-3-70b", "h100x64", phase="train", batch=64, context=32768, options={"context_parallel": 2})
    lay = r.layout
    assert lay["tensor_parallel"] * lay["pipeline_parallel"] * lay["data_parallel"] * 2 == 64 == r.num_devices
    with pytest.raises(InputError, match="context_parallel"):
        plan("llama-3-70b", "h100x64", phase="train", batch=64, context=32768, options={"context_parallel": 3})


def test_cli_time_takes_the_split(capsys):
    import json

    from wseplan.cli import main

    args = ["time", "llama-3.1-405b", "--target", "h100-sxmx16384", "--phase", "train", "--batch", "2048",
            "--context", "8192", "--tp", "8", "--pp", "16", "--dp", "128", "-f", "json"]
    assert main(args) == 0
    uneven = json.loads(capsys.readouterr().out)
    assert main([*args, "--pipeline-split", "even"]) == 0
    even = json.loads(capsys.readouterr().out)
    assert even["layout"]["virtual_pipeline"] == 1 < uneven["layout"]["virtual_pipeline"]
    assert uneven["step_s"] < even["step_s"]
    assert main(["time", "llama-3.1-405b", "--target", "h100-sxmx16384", "--phase", "train",
                 "--pipeline-split", "ragged"]) == 2
    err = capsys.readouterr().err
    assert "pipeline_split" in err and "Traceback" not in err
