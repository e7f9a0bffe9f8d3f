"""The "Why this answer" section (issue 13, item 5): list-price gaps, the capex and speed flips found with the same
serve/cost functions, the prediction interval, and the MLPerf-style highest rate."""
from __future__ import annotations

from pathlib import Path

import pytest

from wseplan.analytic import cost as C
from wseplan.catalog import load_catalog
from wseplan.report.study import CostSpec, ServerSpec, ServingSpec, Study, TargetSpec, load_study
from wseplan.report.study_server import max_rate
from wseplan.report.markdown import fmt_num
from wseplan.report.study_serving_why import (all_in, capex_flips, capex_lines, cheapest_at, crossovers,
                                              list_price_finding)
from wseplan.report.why import bisect, interval_text
from wseplan.serving import serve, tpot_for_limit

CAT = load_catalog()
PRICES = C.load_prices(catalog=CAT)
ROOT = Path(__file__).resolve().parents[1]
LABELS = ("Binding constraints", "What would", "Prediction interval", "List prices")


def test_list_price_finding_compares_the_whole_request():
    """Cerebras lists Llama 3.1 70B at $0.60 per million input and output tokens (prices catalog, service_prices):
    a request of 2,048 prompt and 256 answer tokens is billed 0.60 + 0.60 x 2048 / 256 = $5.40 per million output
    tokens; the chosen point's all-in cost is compared with that, and each side is flagged by
    wseplan.costing.list_price_notes (H7's one implementation)."""
    st, _ = load_study(ROOT / "studies" / "serve-llama3-70b.yaml")
    m = CAT.models["llama-3.1-70b"]
    res = serve(m, "cs3", input_tokens=2048, output_tokens=256, batches=[64], catalog=CAT, prices=PRICES)
    c = res.points[0]
    util = PRICES.site.utilization_frac.si
    text = list_price_finding(st, m, "cs3", c, util, CAT, PRICES)
    mine = all_in(c, util)
    assert f"costs ${mine:.4g} per million output tokens all-in" in text  # the sentence of `wseplan cost` (audit33a M3)
    assert "the $5.4 the vendor's list prices charge for it" in text
    assert f"{mine / 5.4 if mine >= 5.4 else 5.4 / mine:.3g}x" in text
    assert ("Per side: list price: computed output" in text) == (c.output_usd_per_mtok > 3 * 1.2)  # list $0.6-1.2
    assert list_price_finding(st, m, "h200", c, util, CAT, PRICES) is None  # no GPU list price


def test_cost_is_affine_in_capex():
    """The capex flips extrapolate each point's $/M from two capex values: a third must lie on the line."""
    kw = dict(precision="fp8", input_tokens=1024, output_tokens=256, batches=[8, 64], catalog=CAT, prices=PRICES)
    cap = PRICES.hardware["h200-sxm"].capex_usd.si
    one, two, half = (serve("llama-3.1-8b", "h200x8", overrides={"capex_usd": f * cap}, **kw) for f in (1, 2, 0.5))
    for a, b, c in zip(one.points, two.points, half.points):
        line = 2 * a.output_usd_per_mtok - b.output_usd_per_mtok + (b.output_usd_per_mtok - a.output_usd_per_mtok) * 0.5
        assert c.output_usd_per_mtok == pytest.approx(line, rel=1e-9)


def _study(targets, speed=40):
    return Study(name="w", title="t", kind="serving", question="q", model="llama-3.1-8b",
                 targets=[TargetSpec(target=t, precision=p) for t, p in targets],
                 serving=ServingSpec(prompt_tokens=1024, output_tokens=256, demand_tokens_per_s=1e5,
                                     min_tokens_per_s_per_user=speed, batches=[1, 4, 16, 64, 256]),
                 cost=CostSpec(uncertainty=0))


def _curves(st):
    sv = st.serving
    return {t: serve("llama-3.1-8b", t, precision=st.precision_for(t), input_tokens=sv.prompt_tokens,
                     output_tokens=sv.output_tokens, batches=sv.batches, catalog=CAT, prices=PRICES)
            for t in st.target_names}


def test_capex_flip_is_where_the_ranking_flips():
    st = _study([("h100x8", "bf16"), ("h200x8", "fp8")])
    curves = _curves(st)
    lines = capex_lines(st, CAT.models["llama-3.1-8b"], CAT, PRICES, curves, 40)
    flips = {f["target"]: f for f in capex_flips(st, curves, lines, 40)}
    win = cheapest_at(curves, 40, None)[0]
    loser = next(t for t in flips if t != win)
    f = flips[loser]
    assert f["direction"] in ("becomes cheapest below", "never cheapest")
    if f["mult"] is None:
        return
    sv = st.serving
    for m, wins in ((f["mult"] * 0.99, True), (f["mult"] * 1.01, False)):  # re-priced with serve itself
        res = serve("llama-3.1-8b", loser, precision=st.precision_for(loser), input_tokens=sv.prompt_tokens,
                    output_tokens=sv.output_tokens, batches=sv.batches, catalog=CAT, prices=PRICES,
                    overrides={"capex_usd": m * f["capex_usd"]})
        trial = dict(curves, **{loser: res})
        assert (cheapest_at(trial, 40, None)[0] == loser) is wins


def test_crossovers_match_a_brute_force_scan():
    """At a fixed load (the points of the scan; without one a point may also be judged at a lower load that meets a
    TPOT limit, which the scan below does not enumerate)."""
    st = _study([("h100x8", "bf16"), ("cs3", "bf16")])
    sv = st.serving
    curves = {t: serve("llama-3.1-8b", t, precision=st.precision_for(t), input_tokens=sv.prompt_tokens,
                       output_tokens=sv.output_tokens, batches=sv.batches, catalog=CAT, prices=PRICES, utilization=0.9)
              for t in st.target_names}
    cross = crossovers(curves, None)

    def brute(x):  # the cheapest point (TCO per hour / output tokens per hour) of any platform whose TPOT at the
        # percentile (what a TPOT limit of 1/x applies to) is within 1/x
        best = min(((p.usd_per_hour / p.tokens_per_s, t) for t, r in curves.items() for p in r.points
                    if 1.0 / tpot_for_limit(p) >= x), default=None)
        return best[1] if best else None

    speeds = sorted({1.0 / tpot_for_limit(p) for r in curves.values() for p in r.points})
    for c in cross:
        x = c["above_tokens_per_s_per_user"]
        assert brute(x) == c["from"] and brute(x * (1 + 1e-9)) == c["to"]
    winners = [brute(x) for x in speeds]
    changes = sum(1 for a, b in zip(winners, winners[1:]) if a != b and b is not None)
    assert changes == len(cross)


def test_mlperf_highest_rate_is_the_edge_of_the_limits():
    st, _ = load_study(ROOT / "studies" / "mlperf-server-llama2-70b.yaml")
    m = CAT.models["llama-2-70b"]
    r = max_rate(m, "h200-sxmx8", st, CAT, layout={"tp": 1, "pp": 1, "dp": 8})
    sv = st.server
    assert r["point"].meets_sla and r["point"].ttft_p99_s <= sv.ttft_limit_s and r["point"].tpot_s <= sv.tpot_limit_s
    above = serve(m, "h200-sxmx8", rate=r["rate_per_s"] * 1.001, ttft_limit_s=sv.ttft_limit_s,
                  tpot_limit_s=sv.tpot_limit_s, **{k: v for k, v in r["kw"].items()})
    assert not any(p.meets_sla for p in above.points)
    assert 0 < r["rate_per_s"] < r["capacity_per_s"]


def test_interval_uses_a_records_own_interval_when_it_has_one():
    txt = interval_text("x", 2.0, {"interval_low": 1.5, "interval_high": 3.0}, device_kind="gpu", cat=CAT, prefix="$")
    assert "prediction interval is $1.5 to $3" in txt
    # without one, the validated error e of GPU inference applies: a cost lies in [v / (1 + e), v / (1 - e)]
    from wseplan.report.why import validated_band

    e, _ = validated_band(CAT, "gpu")
    txt = interval_text("x", 1.0, None, device_kind="gpu", cat=CAT)
    assert f"between {1 / (1 + e):.4g}"[:12] in txt.replace(",", "")


def test_bisect_finds_a_root():
    assert bisect(lambda x: x * x - 2.0, 0.0, 2.0, rel_tol=1e-12) == pytest.approx(2 ** 0.5, rel=1e-10)


@pytest.mark.parametrize("name", ["serve-llama3-70b", "mlperf-server-llama2-70b", "train-175b", "claims-audit"])
def test_every_committed_report_explains_its_answer(name):
    md = (ROOT / "reports" / name / "report.md").read_text()
    why = md.split("## Why this answer", 1)[1].split("## Assumptions", 1)[0]
    for label in LABELS:
        assert f"- **{label}" in why, (name, label)


def test_serving_report_states_the_crossover_and_the_list_price_gap():
    md = (ROOT / "reports" / "serve-llama3-70b" / "report.md").read_text()
    why = md.split("## Why this answer", 1)[1].split("## Assumptions", 1)[0]
    assert "only cs3 qualifies" in why or "cs3 becomes the cheapest above" in why
    assert "the $5.4 the vendor's list prices charge for it" in why and "per system" in why


def test_server_spec_is_checked():
    with pytest.raises(ValueError):
        ServerSpec(prompt_tokens=1, output_tokens=1, ttft_limit_s=0, tpot_limit_s=0.1)


def test_training_flip_text_when_no_target_meets_the_deadline(tmp_path):
    """audit22 F7: with a deadline no swept size meets, the answer says no cluster meets it and the flip bullet must
    not say that one target does."""
    from wseplan.report.study import run_study

    text = Path("studies/train-175b.yaml").read_text().replace("deadline_days: 30", "deadline_days: 0.5") \
        .replace("sizes: [4, 8, 16, 32, 64, 128, 256]", "sizes: [4, 8]").replace("uncertainty: 400", "uncertainty: 0")
    f = tmp_path / "s.yaml"
    f.write_text(text)
    res = run_study(f)
    why = dict(res.why)
    assert "No target meets the deadline" in why["What would flip the ranking"]
    assert "One target" not in why["What would flip the ranking"] and "Only " not in why["What would flip the ranking"]


def test_serving_points_carry_times_interval_and_the_report_uses_it():
    """audit33d H1/H2: a serving point's throughput interval is `time --phase serve`'s for the same replica and load
    (the same question, the same interval), and the report's headline interval on a cost per token comes from it,
    inversely: never a zero-width band (a wafer headline printed '+-0%', $11.81 to $11.81)."""
    from wseplan.plan import plan
    from wseplan.report.why import interval_text

    res = serve(CAT.models["llama-3.1-70b"], "h200x8", precision="fp8", input_tokens=2048, output_tokens=256,
                concurrency=32, catalog=CAT, prices=PRICES)
    p = res.points[0]
    t = plan("llama-3.1-70b", "h200x8", phase="serve", precision="fp8", batch=32, context=2048, output_tokens=256,
             catalog=CAT)
    assert p.tokens_per_s == pytest.approx(t.tokens_per_s, rel=1e-9)
    assert (p.interval_low, p.interval_high) == pytest.approx((t.interval_low, t.interval_high), rel=1e-9)
    text = interval_text("x", 10.0, p.model_dump(), device_kind="gpu", cat=CAT, prefix="$")
    lo, hi = 10.0 * p.tokens_per_s / p.interval_high, 10.0 * p.tokens_per_s / p.interval_low
    assert f"between ${fmt_num(lo)} and ${fmt_num(hi)}" in text and lo < 10.0 < hi
    # no record interval (a wafer): the category's asymmetric bounds, not a one-sided error applied as +-
    bare = interval_text("y", 10.0, None, device_kind="wafer", cat=CAT, prefix="$")
    low, high = (float(x.replace("$", "").replace(",", "")) for x in bare.rsplit("between ", 1)[1].rstrip(".").split(" and "))
    assert low < high and "+-" not in bare


def test_the_reports_fallback_interval_is_the_questions_envelope():
    """review33 M4: without a record's interval (a server study's highest rate) the report widens the category's band
    for the question's model size, engine, hardware, software and format as `wseplan time` does: its slow end equals
    time's for the same serving question (the fast end may differ where time holds it at the compute roof)."""
    from wseplan.plan import plan
    from wseplan.report.why import envelope_of, interval_text

    t = plan("llama-3.1-70b", "cs3x4", phase="serve", batch=8, context=2048, output_tokens=256, catalog=CAT)
    env = envelope_of("llama-3.1-70b", "cs3x4", phase="serve", precision="bf16", software=None, catalog=CAT,
                      devices=t.num_devices // t.num_replicas)
    text = interval_text("x", 1000.0, None, device_kind="wafer", cat=CAT, inverse=False, envelope=env)
    assert f"between {fmt_num(1000.0 * t.interval_low / t.tokens_per_s)} and" in text
    bare = interval_text("x", 1000.0, None, device_kind="wafer", cat=CAT, inverse=False)
    assert "widened" in text and "widened" not in bare
