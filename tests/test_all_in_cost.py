"""Serving's headline $/M output tokens is all in: the deployment's busy hour over the output tokens it delivers at
its load, the prompts' prefill and the requests' waits included (third audit: compare showed only the decode side of
the time split, $4.15/M on 8 x H200 against $4.34/M on 8 x H100, while a request costs 11% more on the H200)."""
import pytest

from wseplan.compare import compare
from wseplan.costing import cost
from wseplan.errors import InputError
from wseplan.timing import predict_time


def test_all_in_is_the_busy_hour_over_delivered_output_tokens():
    kw = dict(phase="serve", batch=16, context=8192, output_tokens=256)
    c = cost("llama-3-70b", "h100x8", **kw)
    t = predict_time("llama-3-70b", "h100x8", **kw)
    busy_hour = c.metric("usd_per_busy_hour")
    assert c.headline_metric == "all_in_usd_per_mtok"
    assert c.metric("all_in_usd_per_mtok") == pytest.approx(busy_hour / 3600 / t.tokens_per_s * 1e6, rel=1e-9)
    # a request's prompt and answer at the split prices come to about the same (the split is a time share)
    per_req = (8192 * c.metric("input_usd_per_mtok") + 256 * c.metric("output_usd_per_mtok")) / 256
    assert c.metric("all_in_usd_per_mtok") > c.metric("output_usd_per_mtok")
    assert c.metric("all_in_usd_per_mtok") == pytest.approx(per_req, rel=0.5)
    pue = next(p.value for p in c.params if p.name == "pue")
    e = c.metric("energy_j_per_output_token_all_in")
    assert e == pytest.approx(c.metric("busy_it_power_w") * pue / t.tokens_per_s, rel=1e-9)
    assert e > c.metric("energy_j_per_output_token")


def test_compare_ranks_by_what_a_request_costs():
    r = compare("llama-3-70b", ["h100x8", "h200x8"], phase="serve", batch=16, context=8192, output_tokens=256)
    by = {row.target: row for row in r.rows}
    for tgt in ("h100x8", "h200x8"):
        c = cost("llama-3-70b", tgt, phase="serve", batch=16, context=8192, output_tokens=256)
        assert by[tgt].usd_per_mtok == pytest.approx(c.metric("all_in_usd_per_mtok"), rel=1e-9)
        assert by[tgt].energy_j_per_token == pytest.approx(c.metric("energy_j_per_output_token_all_in"), rel=1e-9)


def test_min_speed_message_names_the_limit():
    with pytest.raises(InputError, match="below 1e9"):
        cost("llama-3-70b", "h100x8", phase="serve", min_tokens_per_s_per_user=1e9)


def test_serve_points_carry_the_same_all_in_cost():
    """A serve point's all-in $/M is cost's headline for its layout and batch, at the point's load (closed loop: full;
    open loop: the tokens carried with 90% of the slots held)."""
    from wseplan.analytic.cost import load_prices
    from wseplan.catalog import load_catalog
    from wseplan.serving import DEFAULT_UTILIZATION, all_in_usd_per_mtok, serve

    cat = load_catalog()
    pr = load_prices(catalog=cat)
    p = serve("llama-3-70b", "h100x8", concurrency=16, catalog=cat, prices=pr).chosen
    assert p.all_in_usd_per_mtok == pytest.approx(all_in_usd_per_mtok(p, pr.site.utilization_frac.si), rel=1e-12)
    lay = {"tp": p.layout["tensor_parallel"], "pp": p.layout["pipeline_parallel"], "dp": p.layout["data_parallel"]}
    c = cost("llama-3-70b", "h100x8", phase="serve", batch=16, context=2048, output_tokens=256, layout=lay)
    # 16 users in a closed loop keep the slots full: cost's headline itself
    assert p.utilization_frac == pytest.approx(1.0)
    assert p.all_in_usd_per_mtok == pytest.approx(c.headline_value, rel=1e-9)
    # random arrivals holding 90% of the 16 slots: the same hours over the tokens carried at that load, 14.4 requests
    # at the pace of the 15-request batch the engine steps (Little's law; hand: 14.4 / 15 of batch 15's tokens/s)
    # (the open loop searches replica sizes, so its layout is its own: cost is asked at that layout)
    q = serve("llama-3-70b", "h100x8", concurrency=16, utilization=DEFAULT_UTILIZATION, catalog=cat, prices=pr).chosen
    lay_q = {"tp": q.layout["tensor_parallel"], "pp": q.layout["pipeline_parallel"], "dp": q.layout["data_parallel"]}
    c_q = cost("llama-3-70b", "h100x8", phase="serve", batch=16, context=2048, output_tokens=256, layout=lay_q)
    t15 = predict_time("llama-3-70b", "h100x8", phase="serve", batch=15, context=2048, output_tokens=256, catalog=cat,
                       layout=lay_q)
    assert q.running_batch == pytest.approx(0.9 * 16) and q.tokens_per_s == pytest.approx(14.4 / 15 * t15.tokens_per_s)
    assert q.all_in_usd_per_mtok == pytest.approx(c_q.headline_value / q.utilization_frac, rel=1e-9)
    assert q.utilization_frac == pytest.approx(q.tokens_per_s / c_q.plan["tokens_per_s"], rel=1e-9)
