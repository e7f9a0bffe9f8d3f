"""One question, one answer (audit24): compare rows carry the time record's interval and the training report scales
it to the run; every command takes one default serving request."""
from __future__ import annotations

import pytest

from wseplan.timing import predict_time


def test_compare_rows_carry_the_time_interval_and_the_report_scales_it_to_the_run():
    """audit24 F5: the training report said "no interval is attached to the records" and applied a symmetric band;
    compare's rows now carry the time record's interval, and the report's run-cost interval is that step-time
    interval times the run cost per second of step."""
    from wseplan.catalog import load_catalog
    from wseplan.compare import compare_case
    from wseplan.report.study_sources import prices_of
    from wseplan.report.study_training import _run_cost_interval

    kw = dict(phase="train", batch=1536, context=2048)
    t = predict_time("gpt-3-175b", "b200x128", **kw)
    row, _, _ = compare_case("gpt-3-175b", "b200x128", precision="bf16", output_tokens=None, train_tokens=3e11,
                             prices=prices_of(load_catalog()), **kw)
    assert (row.interval_metric, row.interval_low, row.interval_high) == ("step_s", t.interval_low, t.interval_high)
    iv = _run_cost_interval(row.to_row())
    assert iv["interval_low"] == pytest.approx(row.usd_per_run * t.interval_low / t.step_s, rel=1e-12)
    assert iv["interval_high"] == pytest.approx(row.usd_per_run * t.interval_high / t.step_s, rel=1e-12)
    assert _run_cost_interval(dict(row.to_row(), interval_low=None)) is None


def test_every_command_takes_one_default_serving_request():
    """audit24 F3: `serve` defaulted to a 2,048-token prompt and `time --phase serve`/`cost`/`compare` to 7,936, so
    the same question got 2.6x different TPOTs and 3.8x different $/M tokens; the catalog's default_prompt_tokens is
    the one default now."""
    from wseplan.catalog import load_catalog
    from wseplan.compare import compare
    from wseplan.costing import cost
    from wseplan.serving import serve

    cat = load_catalog()
    assert cat.defaults.default_prompt_tokens.si == 2048
    s = serve("llama-70b", "h200x2", concurrency=32, catalog=cat, prices=False)
    t = predict_time("llama-70b", "h200x2", phase="serve", batch=32)
    assert s.input_tokens == 2048 and t.sources["context"] == "default"
    assert s.chosen.tokens_per_s == pytest.approx(t.tokens_per_s, rel=1e-9)
    assert s.chosen.tpot_s == pytest.approx(t.tpot_s, rel=1e-9)
    c = cost("llama-70b", "h200x8", phase="serve", catalog=cat)
    (row,) = compare("llama-70b", ["h200x8"], phase="serve", catalog=cat).rows
    assert row.usd_per_mtok == pytest.approx(c.metric("all_in_usd_per_mtok"), rel=1e-9)
    d = cost("llama-70b", "h200x8", phase="decode", catalog=cat)  # the same point's decode steps alone (audit30b M4)
    (row,) = compare("llama-70b", ["h200x8"], phase="decode", catalog=cat).rows
    assert row.usd_per_mtok == pytest.approx(d.headline_value, rel=1e-9) and row.batch == d.batch == c.batch


def test_closed_loop_on_a_count_takes_times_layout():
    """audit24 F4: on h200x8, `serve --concurrency 32` took the replica search's TP2 x 4 (most tokens/s per device)
    and `time --phase serve --batch 32` TP8 x 1 (fastest per user): the closed loop on a target with a count is now the
    plan chain's own point, layout included."""
    from wseplan.serving import serve

    s = serve("llama-70b", "h200x8", concurrency=32, prices=False)
    t = predict_time("llama-70b", "h200x8", phase="serve", batch=32)
    assert s.chosen.layout == t.layout
    for k in ("tokens_per_s", "ttft_s", "tpot_s"):
        assert getattr(s.chosen, k) == pytest.approx(getattr(t, k), rel=1e-9), k
