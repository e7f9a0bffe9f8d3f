"""Prompts ride on decode steps as they arrive, whole (or a budget's worth of a long one), not as an even trickle: a
share w = P / c of the steps carries a chunk of c tokens and the rest none. The step cost is not linear in its prompt
tokens (an MoE step reads every expert some token picks; a dense step turns compute-bound), so the mean step is
w t(c) + (1 - w) t(0), not t(P) (third audit: MoE serving on 8 x B200 carried less at 2 concurrent requests than at
1 -- DeepSeek-V3 0.551 -> 0.317 requests/s -- because 32 prompt tokens on every step read nearly every expert)."""
import math

import pytest

from wseplan.devices.inference import _mixed_pass, _round_pass
from wseplan.timing import predict_time


def _run(kw):
    """A toy pass: latency 1 + sqrt(prompt tokens) (concave, like expert reads), stage half of it."""
    t = 1.0 + math.sqrt(kw["prefill_tokens"])
    return t, t / 2, {"compute": t}


def test_mixture_by_hand():
    # 8 sequences, 100 prompt tokens per sequence -> 800 per pass on average; prompts of 2,048 with 8,192 budget
    kw = _round_pass(8.0, 1000.0, 100.0, 8192.0, 1.0)
    assert kw["prefill_tokens"] == 800.0
    lat, stage, parts = _mixed_pass(_run, kw, 8.0, 1000.0, 8192.0, 1.0, 2048.0)
    w = 800.0 / 2048.0  # c = min(prompt 2,048, spare 8,192 - 8)
    assert lat == pytest.approx(w * (1 + math.sqrt(2048)) + (1 - w) * 1.0, rel=1e-12)
    assert stage == pytest.approx(lat / 2, rel=1e-12) and parts["compute"] == pytest.approx(lat, rel=1e-12)
    assert lat < _run(kw)[0]  # concave: the even trickle overstates the cost
    # a prompt longer than the spare budget arrives a budget's worth at a time: c = 8,192 - 8
    lat2, _, _ = _mixed_pass(_run, kw, 8.0, 1000.0, 8192.0, 1.0, 100000.0)
    w2 = 800.0 / 8184.0
    assert lat2 == pytest.approx(w2 * (1 + math.sqrt(8184)) + (1 - w2) * 1.0, rel=1e-12)
    # a pass carrying a whole chunk or more on average is left as it is
    kw3 = _round_pass(8.0, 1000.0, 300.0, 8192.0, 1.0)
    assert _mixed_pass(_run, kw3, 8.0, 1000.0, 8192.0, 1.0, 2048.0) == _run(kw3)


@pytest.mark.parametrize("model", ["deepseek-v3", "qwen3-235b-a22b", "gpt-oss-120b"])
def test_moe_serving_carries_more_at_higher_concurrency(model):
    """8,192-token prompts, 256-token answers on 8 x B200: requests/s rise with the concurrency (they fell from 1 to 2).
    (Between two concurrencies the layout may change: gpt-oss-120b at 2 requests per replica runs two TP4 replicas,
    at 4 one TP8 replica, 0.1% below; the layout rule takes a request within 20% of the fastest, then throughput.)"""
    rates = [predict_time(model, "b200x8", phase="serve", batch=b, context=8192, output_tokens=256).requests_per_s
             for b in (1, 2, 4, 8)]
    assert all(b > a * 0.99 for a, b in zip(rates, rates[1:])) and rates[-1] > 2 * rates[0], rates


def test_slot_form_by_hand():
    """On a pipeline, a chunk follows the decode micro-batches in a slot of its own: it adds w (stage(c) - stage(0))
    to the pass's stage time and nothing to its latency."""
    from wseplan.devices.inference import _slot_pass

    kw = _round_pass(2.0, 1000.0, 8.0, 2048.0, 1.0)  # 16 prompt tokens per pass; prompts of 8,192: c = 2,046
    lat, stage, _ = _slot_pass(_run, kw, 2.0, 1000.0, 2048.0, 1.0, 8192.0)
    w = 16.0 / 2046.0
    assert lat == pytest.approx(1.0, rel=1e-12)  # the zero-prompt pass's latency
    assert stage == pytest.approx(0.5 + w * (1 + math.sqrt(2046)) / 2 - w * 0.5, rel=1e-12)


def test_wafer_serving_carries_more_with_more_clients():
    """Llama-3-70B on 4 CS-3 with 8,192-token prompts (fourth audit: 2 clients carried 641 tokens/s against 1,076 at
    one, TPOT 2.79 ms against 0.66, as each step pushed 32 prompt tokens through 24 layer groups in turn). An engine can
    always leave a slot empty, so capacity never falls with the concurrency; at 2 clients the other's prompt chunks fill
    the stages the two decode micro-batches leave idle."""
    recs = [predict_time("llama-3-70b", "cs3x4", phase="serve", batch=b, context=8192, output_tokens=256)
            for b in (1, 2, 3, 4, 5, 6)]
    tps = [r.tokens_per_s for r in recs]
    assert all(b >= a for a, b in zip(tps, tps[1:])), tps
    assert recs[1].tokens_per_s > 1.6 * recs[0].tokens_per_s
    assert recs[1].tpot_s < 1.6e-3


def test_riding_chunks_attend_to_the_earlier_prompt_by_hand():
    """A pass of 3 decoding sequences carrying 240 tokens of 120,000-token prompts under an 8,192-token budget: a
    prompt puts chunks of c = 8,192 - 3 tokens on a pass, at offsets spread over the prompt, (120,000 - c) / 2 earlier
    tokens on average; the 240 tokens are 240 / c of a chunk (audit35b H1: they were timed as a prompt's first tokens)."""
    kw = _round_pass(3.0, 120500.0, 80.0, 8192.0, 1.0, 120000.0)
    c = 8192.0 - 3.0
    assert kw["prefill_tokens"] == 240.0 and kw["prefill_span"] == c
    assert kw["prefill_kv"] == pytest.approx((120000.0 - c) / 2.0, rel=1e-15)
    assert kw["prefill_seqs"] == pytest.approx(240.0 / c, rel=1e-15)
    # a query attends to (prompt + 1) / 2 keys on average, whatever the budget (causal over the whole prompt)
    for budget in (512.0, 2048.0, 8192.0, 1e6):
        k = _round_pass(3.0, 120500.0, 80.0, budget, 1.0, 120000.0)
        assert k["prefill_kv"] + (k["prefill_span"] + 1.0) / 2.0 == pytest.approx(120001.0 / 2.0, rel=1e-12)
    # prompts shorter than the spare budget arrive whole: 630 tokens of 100-token prompts are 6.3 prompts from their start
    short = _round_pass(63.0, 500.0, 10.0, 8192.0, 1.0, 100.0)
    assert (short["prefill_span"], short["prefill_kv"]) == (100.0, 0.0) and short["prefill_seqs"] == pytest.approx(6.3)
    # no prompt length given: the old convention (one chunk at its prompt's start), kept for rounds that carry none
    assert _round_pass(3.0, 100.0, 80.0, 8192.0, 1.0)["prefill_kv"] == 0.0


def test_long_prompts_riding_on_decode_steps_cost_their_attention():
    """Llama-3.1-8B on one H100: a pass of 3 decoding sequences over 120,500 cached tokens carrying 240 tokens of
    120,000-token prompts. By hand per layer: the decode queries attend to 3 x 120,501 keys, the riding ones to
    240 x 60,000.5 (16,384 FLOP a pair: 4 x 32 heads x 128); the pass reads the 3 caches and 240 / c of a chunk's
    (c + (120,000 - c) / 2 tokens, 131,072 B a token: 32 layers' share); the layer's attention is the larger of its
    compute and its cache read. With the riding tokens timed as a prompt's first tokens (the old convention) the
    attention was the decode rows' cache read alone."""
    from wseplan.analytic import gpu_pass as P
    from wseplan.calibration_data import gpu_calibration
    from wseplan.catalog.load import load_catalog
    from wseplan.workload import resolve_model

    cat = load_catalog()
    m, gpu, cal = resolve_model("llama-3.1-8b", cat), cat.gpus["h100-sxm"], gpu_calibration()
    kw = _round_pass(3.0, 120500.0, 80.0, 8192.0, 1.0, 120000.0)
    seqs = (P.Sequences(seqs=3.0, tokens=3.0, new=1.0, prior=120500.0),
            P.Sequences(seqs=kw["prefill_seqs"], tokens=240.0, new=kw["prefill_span"], prior=kw["prefill_kv"],
                        decode=False))
    _, _, parts = P.pass_time_s(m, gpu, precision="bf16", sequences=seqs, logits_rows=3.0, tp=1.0, cal=cal)
    pairs = 3.0 * 120501.0 + 240.0 * (120001.0 / 2.0)
    compute = pairs * 16384.0 / (P.attention_peak_flop_per_s(gpu, "bf16") * cal.attention_frac)
    c = 8192.0 - 3.0
    cached = 3.0 * 120501.0 + 240.0 / c * ((120000.0 - c) / 2.0 + c)
    read = cached * 8 * 128 * 2 * 2.0 / (gpu.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac)
    assert float(parts["attention"]) == pytest.approx(32 * max(compute, read), rel=1e-9)
    # the riding prompt tokens' attention binds; timed from their prompt's start it stayed under the cache read
    assert compute > 1.4 * read
    assert (3.0 * 120501.0 + 240.0 * 241.0 / 2.0) * 16384.0 / (P.attention_peak_flop_per_s(gpu, "bf16") * cal.attention_frac) < read
