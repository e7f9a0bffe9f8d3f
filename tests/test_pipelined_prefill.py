"""Chunked prefill through a pipeline of stages: a prompt shorter than the token budget is cut into smaller chunks that
follow each other through the stages (TeraPipe's token pipelining; Cerebras: prompt chunks follow each other through the
wafers). Before, one 1,024-token prompt of Llama-3.1-405B crossed 22 wafers' layer groups as a single chunk, one group
busy at a time: 0.746 s to the first token, where the 240 ms Cerebras announces includes the network."""
import pytest
import yaml

from wseplan.analytic import engine as E
from wseplan.catalog.load import default_catalog_dir, load_catalog
from wseplan.timing import predict_time


def test_chunk_budgets_halve_down_to_the_engines_floor():
    assert E.prefill_chunk_budgets(2048, "chunk", 64) == [2048, 1024, 512, 256, 128, 64]
    assert E.prefill_chunk_budgets(2048, "chunk", 100) == [2048, 1024, 512, 256, 128]
    assert E.prefill_chunk_budgets(2048, "chunk", None) == [2048]  # an engine that does not cut finer
    assert E.prefill_chunk_budgets(8192, "prompt", 64) == [8192]  # whole prompts (research code)
    assert E.prefill_chunk_budgets(8192, "batch", 64) == [8192]


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """The production wafer profile without the finer cut: every prompt in chunks of the 2,048-token budget."""
    d = tmp_path_factory.mktemp("sw")
    (d / "software").mkdir()
    prof = yaml.safe_load(open(default_catalog_dir() / "software" / "profiles.yaml"))["software"]["wafer-production"]
    prof = dict(prof, default=False, calibrated_as="wafer-production")
    prof["engine"] = {k: v for k, v in prof["engine"].items() if k != "min_chunk_tokens"}
    (d / "software" / "fixed.yaml").write_text(yaml.safe_dump({"software": {"wafer-fixed-chunk": prof}}))
    return load_catalog([d])


def test_a_deep_pipeline_fills_with_small_chunks(fixed):
    """405B on 22 CS-3: 1,024 prompt tokens in one chunk wait for every layer group in turn; cut finer they overlap.
    The cut is never slower than the budget's chunk (it is one of the candidates), and here over 5x faster."""
    kw = dict(phase="prefill", batch=1, catalog=fixed)
    for ctx in (1024, 8192):
        cut = predict_time("llama-3.1-405b", "cs3", context=ctx, **kw)
        one = predict_time("llama-3.1-405b", "cs3", context=ctx, software="wafer-fixed-chunk", **kw)
        assert cut.num_devices == one.num_devices == 22
        assert cut.ttft_s <= one.ttft_s
    cut = predict_time("llama-3.1-405b", "cs3", context=1024, **kw)
    one = predict_time("llama-3.1-405b", "cs3", context=1024, software="wafer-fixed-chunk", **kw)
    assert cut.ttft_s < one.ttft_s / 5
    # a lower bound the cut cannot beat: the prompt's FLOPs at the dense peak of all 22 wafers
    flop = 2 * 405e9 * 1024
    assert cut.ttft_s > flop / (22 * 15.5e15)


def test_serving_cuts_the_own_prompt_as_the_prefill_does(fixed):
    """One request at a time (B = 1) on 4 CS-3: its own prompt is its TTFT, cut as in the prefill phase, whose chunks
    follow each other at the slowest layer group's pace (no decode round beside a lone request). The prefill phase runs
    on the serving layout (audit28e H2), so the two are one number; the budget's single chunk waits for every group in
    turn and is over 2.5x slower. Plain decoding: a draft model's own prefill of the prompt would add to both."""
    pre = predict_time("llama-3-70b", "cs3x4", phase="prefill", batch=1, context=1024, speculative="none", catalog=fixed)
    kw = dict(phase="serve", batch=1, context=1024, output_tokens=256, catalog=fixed, speculative="none")
    side = predict_time("llama-3-70b", "cs3x4", **kw).layout["core_grid_decode"]
    assert pre.layout["core_grid_decode"] == side
    srv = predict_time("llama-3-70b", "cs3x4", core_grid_decode=side, **kw)
    one = predict_time("llama-3-70b", "cs3x4", software="wafer-fixed-chunk", core_grid_decode=side, **kw)
    assert srv.ttft_s < one.ttft_s / 2.5
    assert srv.ttft_s == pytest.approx(pre.ttft_s, rel=1e-9)
    assert srv.tpot_s == one.tpot_s  # decoding is not touched


def test_one_stage_keeps_the_budget():
    """On one GPU node (one pipeline stage) a smaller chunk is never faster: the GPU profiles do not cut finer."""
    a = predict_time("llama-3-70b", "h100x8", phase="prefill", batch=1, context=1024)
    assert a.layout["pipeline_parallel"] == 1
    prof = a.software
    cat = load_catalog()
    from wseplan.catalog.software import resolve_software

    assert resolve_software(prof, "gpu", cat).engine.min_chunk_tokens is None


def test_time_to_first_token_never_falls_as_the_prompt_grows():
    """Chunks of a finer cut have the cut's size (the last short but timed whole), so one more prompt token never
    shortens the prefill (fourth audit: equal chunks went below the floor, 65 tokens in 5.5 ms against 9.4 ms for 64)."""
    lens = [32, 63, 64, 65, 100, 127, 128, 129, 200, 256, 257, 1023, 1024, 1025, 2048, 2049]
    ttft = [predict_time("llama-3-70b", "cs3x4", phase="prefill", batch=1, context=n, speculative="none").ttft_s
            for n in lens]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(ttft, ttft[1:])), list(zip(lens, ttft))
    # with the default draft, its prefill runs on the regions chosen for its decode rounds at that context (117 x 117
    # up to 100 tokens, 130 x 125 from 120): a shorter prompt may prefill up to a few % slower there
    spec = [predict_time("llama-3-70b", "cs3x4", phase="prefill", batch=1, context=n).ttft_s for n in lens]
    assert all(b >= a * 0.95 for a, b in zip(spec, spec[1:])), list(zip(lens, spec))
