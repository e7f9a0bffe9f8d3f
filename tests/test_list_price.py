"""Computed $/M tokens against a vendor's list price (issue 12.7): one function flags a gap of more than 3x, and
`wseplan cost`, compare and reports all show it. List prices: catalogs/prices (service_prices, Cerebras' per-token
prices: Llama 3.1 70B $0.60/M in and out, Llama 3.3 70B later $0.85 in / $1.20 out; cerebras-price-registry)."""
from __future__ import annotations

import json

import pytest

from wseplan import costing
from wseplan.analytic import cost as C
from wseplan.catalog.schema import Quantity


def _listed(low: float, value: float, high: float):
    q = Quantity(value=value, low=low, high=high, source="cerebras-price-registry", basis="third-party")
    return "llama-3.1-70b", C.ServicePrice(hardware="cs3", input_usd_per_mtok=q, output_usd_per_mtok=q)


KW = dict(batch=1, utilization_frac=0.7, software="wafer-production", precision="bf16", speculative=True)


def test_flag_above_the_list_price_by_hand():
    """$176/M computed against a $0.60-$1.20 list price: 176 / 1.20 = 147x above (more than 3x)."""
    (note,) = costing.list_price_flags({"output_usd_per_mtok": 176.0}, _listed(0.6, 0.6, 1.2), **KW)
    assert note.startswith("list price: computed output $176/M tokens is 147x above")
    assert "service_prices.llama-3.1-70b" in note and "cerebras-price-registry" in note
    for reason in ("batch and utilisation", "1 concurrent request", "70% busy hours", "subsidised",
                   "precision: computed at bf16"):
        assert reason in note
    # drafting lowers the computed cost, so it is no reason for a computed price above the list (audit28b L1); its
    # absence is
    assert "speculative" not in note
    (plain,) = costing.list_price_flags({"output_usd_per_mtok": 176.0}, _listed(0.6, 0.6, 1.2),
                                        **dict(KW, speculative=False))
    assert "no speculative decoding in this computation" in plain


def test_flag_below_the_list_price_names_margin():
    """$0.10/M computed against $0.60: 6x below; the likely reasons are the vendor's margin and load."""
    (note,) = costing.list_price_flags({"input_usd_per_mtok": 0.10}, _listed(0.6, 0.6, 0.6),
                                       **dict(KW, precision="fp8", speculative=False))
    assert "6x below" in note and "margin" in note and "16-bit" in note and "speculative" not in note


@pytest.mark.parametrize("computed", [3.6, 0.2, 1.0, 0.25])
def test_no_flag_within_3x_of_the_list_price_range(computed):
    """Within [low / 3, high x 3] = [$0.20, $3.60] nothing is flagged (the ends included)."""
    assert costing.list_price_flags({"output_usd_per_mtok": computed}, _listed(0.6, 0.6, 1.2), **KW) == []


def test_no_list_price_no_flag():
    assert costing.list_price_flags({"output_usd_per_mtok": 100.0}, None, **KW) == []


def test_cost_notes_flag_the_gap(catalog):
    """wseplan cost of Llama-3.1-70B on four CS-3 at batch 1 is far above Cerebras' list price; the note carries the
    computed value and the ratio to the high end of the list price."""
    res = costing.cost("llama-3.1-70b", "cs3x4", batch=1, context=2048, output_tokens=256, catalog=catalog)
    out = res.metric("output_usd_per_mtok")
    assert out > 3 * 1.2
    notes = [n for n in res.notes if n.startswith("list price: computed output")]
    assert len(notes) == 1 and f"{out / 1.2:.3g}x above" in notes[0]
    # the same function behind compare's row notes
    from wseplan.compare import compare

    row = compare("llama-3.1-70b", ["cs3x4"], phase="decode", batch=1, context=2048, output_tokens=256,
                  catalog=catalog).rows[0]
    assert any(n.startswith("list price: computed output") for n in row.notes)
    # no per-token list price for GPUs in the catalog: nothing to flag
    gpu = costing.cost("llama-3.1-70b", "h100-sxmx8", batch=1, context=2048, output_tokens=256, catalog=catalog)
    assert not any(n.startswith("list price") for n in gpu.notes)


def test_cli_cost_json_notes(capsys):
    from wseplan.cli import main

    assert main(["cost", "llama-3.1-70b", "--target", "cs3x4", "--context", "2048", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert any(n.startswith("list price: computed output") for n in rec["notes"])


def test_serving_report_flags_the_gap(tmp_path, catalog):
    from wseplan.report.study import run_study

    (tmp_path / "s.yaml").write_text(
        "name: s\ntitle: t\nkind: serving\nquestion: q\nmodel: llama-3.1-70b\nprecision: bf16\ntargets: [cs3x4]\n"
        "serving: {prompt_tokens: 2048, output_tokens: 256, demand_tokens_per_s: 10000, min_tokens_per_s_per_user: 10,"
        " batches: [1]}\ncost: {uncertainty: 0}\n")
    res = run_study(tmp_path / "s.yaml", catalog=catalog)
    (fleet,) = [t for t in res.tables if t.name == "fleet"]
    # both sides are checked, as `wseplan cost` checks them (the fleet row's note may hold the input side first)
    assert "list price: computed output" in fleet.rows[0]["note"]


def test_a_served_request_is_compared_whole_first(catalog):
    """audit33a M3: `cost` (and `compare`, through it) leads with the whole request against what the list prices charge
    for it, as the report does; one side's marginal $/M against its list price follows. Hand calculation: Cerebras
    lists Llama-3.1-70B at $0.60/M input and output (prices catalog, service_prices), so a request of 2,048 prompt and
    256 answer tokens is billed 0.60 + 0.60 x 2048 / 256 = $5.40 per million output tokens."""
    from wseplan.costing import request_list_price, service_price_for
    from wseplan.plan import setup

    res = costing.cost("llama-3.1-70b", "cs3x4", batch=8, context=2048, output_tokens=256, catalog=catalog)
    a = res.metric("all_in_usd_per_mtok")
    lead = [i for i, n in enumerate(res.notes) if n.startswith("list price: a request of 2,048 prompt and 256 answer")]
    side = [i for i, n in enumerate(res.notes) if n.startswith("list price: computed output")]
    assert len(lead) == 1 and side and lead[0] < side[0]
    assert f"{a / 5.40:.3g}x above the $5.4 " in res.notes[lead[0]]
    # the report's finding is the same sentence (one implementation)
    s = setup("llama-3.1-70b", "cs3x4", phase="serve", catalog=catalog)
    listed = service_price_for(s.query.model, s.query.target, C.load_prices(catalog=catalog), catalog)
    ratio, text = request_list_price(a, 2048, 256, listed)
    assert ratio == pytest.approx(a / 5.40, rel=1e-12) and text == res.notes[lead[0]]
    # decode prices one side: no request to compare
    dec = costing.cost("llama-3.1-70b", "cs3x4", phase="decode", batch=8, context=2048, catalog=catalog)
    assert not any(n.startswith("list price: a request") for n in dec.notes)
