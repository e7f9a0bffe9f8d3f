"""Cost model: hand-checked TCO cases, named overrides, Monte Carlo and tornado, the `wseplan cost` command."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan import costing
from wseplan.analytic import cost as C
from wseplan.catalog import load_catalog
from wseplan.errors import CatalogError, InputError
from wseplan.targets import parse_target

H = 8766.0  # hours in a Julian year


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


@pytest.fixture(scope="module")
def prices(cat):
    return C.load_prices(catalog=cat)


def _hand_hourly(p, n_sys, extra=0.0, extra_w=0.0):
    """The TCO arithmetic written out independently of the module (same formula as the docs)."""
    hardware = n_sys * p["capex_usd"] * (1 + p["network_frac"]) + extra
    capex = hardware * (1 + p["installation_frac"])
    per_year = capex / p["amortization_years"] + hardware * p["maintenance_frac_per_year"]
    peak = n_sys * p["peak_power_w"] + extra_w
    u = p["utilization_frac"]
    avg = peak * (u * p["busy_power_frac"] + (1 - u) * p["idle_power_frac"])
    per_year += avg * p["pue"] / 1000 * H * p["electricity_usd_per_kwh"]
    per_year += peak / 1000 * p["facility_usd_per_kw_month"] * 12
    return per_year, per_year / H / u, peak * p["busy_power_frac"]


def test_cs3_cluster_serving_hand_check(cat, prices):
    """4 CS-3 serving a 70B model: every metric equals the hand arithmetic to 1e-9."""
    t = parse_target("cs3x4", cat)
    params = C.cost_params(prices, cat, t)
    p = C.nominal(params)
    # inputs trace to the catalogs: CS-3 capex from prices, power from the hardware catalog
    assert p["capex_usd"] == prices.hardware["cs3"].capex_usd.si == 2.5e6
    assert p["peak_power_w"] == cat.systems["cs3"].power_w.si == 23e3
    times = C.TimeInputs(phase="serve", num_devices=4, num_systems=4, prefill_s=0.8, prompt_tokens=8 * 2048,
                         decode_step_s=0.0015, output_tokens_per_step=8)
    res = C.cost_from_times(params, times, model="m", target="cs3x4", hardware="wse3", price_key="cs3", batch=8,
                            context=2048, prices_date=prices.date)
    per_year, busy_hour, busy_w = _hand_hourly(p, 4)
    facility_w = busy_w * p["pue"]
    expect = {
        "total_usd_per_year": per_year,
        "usd_per_busy_hour": busy_hour,
        "usd_per_system_hour": per_year / H / 4,
        "input_usd_per_mtok": busy_hour / 3600 * 0.8 / (8 * 2048) * 1e6,
        "output_usd_per_mtok": busy_hour / 3600 * 0.0015 / 8 * 1e6,
        "energy_j_per_output_token": facility_w * 0.0015 / 8,
        "energy_j_per_input_token": facility_w * 0.8 / (8 * 2048),
        "peak_facility_power_w": 4 * 23e3 * p["pue"],
        "rack_units": 4 * 15,
    }
    for k, v in expect.items():
        assert res.metric(k) == pytest.approx(v, rel=1e-9), k
    assert res.headline_metric == "output_usd_per_mtok"


def test_h100_cluster_serving_and_rental_hand_check(cat, prices):
    """16 H100 (2 DGX nodes): owned TCO and the rental alternative equal the hand arithmetic to 1e-9."""
    t = parse_target("h100-sxmx16", cat)
    params = C.cost_params(prices, cat, t)
    p = C.nominal(params)
    assert p["peak_power_w"] == cat.gpus["h100-sxm"].node_power_w.si == 10.2e3
    # prices-2026-11 hardware.h100-sxm.cloud_usd_per_device_hour: Lambda H100 on-demand $2.99/GPU-h (March 2026,
    # costnimbus-gpu-pricing-2026; was Lambda's $3.49 of 2024-01, epoch-cloud-prices)
    assert p["cloud_usd_per_device_hour"] == 2.99
    times = C.TimeInputs(phase="serve", num_devices=16, num_systems=2, prefill_s=0.3, prompt_tokens=32 * 1024,
                         decode_step_s=0.025, output_tokens_per_step=32)
    res = C.cost_from_times(params, times, model="m", target="h100-sxmx16", hardware="h100-sxm", price_key="h100-sxm",
                            batch=32, context=1024, prices_date=prices.date)
    per_year, busy_hour, _ = _hand_hourly(p, 2)
    assert res.metric("total_usd_per_year") == pytest.approx(per_year, rel=1e-9)
    assert res.metric("usd_per_device_hour") == pytest.approx(per_year / H / 16, rel=1e-9)
    assert res.metric("output_usd_per_mtok") == pytest.approx(busy_hour / 3600 * 0.025 / 32 * 1e6, rel=1e-9)
    rent = 2.99 * 16  # $2.99 per GPU-hour x 16 GPUs
    assert res.metric("rental_usd_per_hour") == pytest.approx(rent, rel=1e-9)
    assert res.metric("rental_output_usd_per_mtok") == pytest.approx(rent / 3600 * 0.025 / 32 * 1e6, rel=1e-9)
    assert res.metric("rental_input_usd_per_mtok") == pytest.approx(rent / 3600 * 0.3 / (32 * 1024) * 1e6, rel=1e-9)


def test_training_run_with_memoryx_hand_check(cat, prices):
    t = parse_target("cs3x16", cat)
    params = C.cost_params(prices, cat, t, include_memoryx=True)
    p = C.nominal(params)
    mx = cat.memoryx["memoryx-cs3"]
    cap = mx.capacity_options_bytes[mx.default_capacity].si
    dram = min(cap, mx.dram_capacity_bytes.si)
    extra = dram / 1e12 * p["memoryx_dram_usd_per_tb"] + (cap - dram) / 1e12 * p["memoryx_flash_usd_per_tb"]
    times = C.TimeInputs(phase="train", num_devices=16, num_systems=16, step_s=2.0, tokens_per_step=1024 * 2048,
                         train_tokens=3e11)
    res = C.cost_from_times(params, times, model="m", target="cs3x16", hardware="wse3", price_key="cs3", batch=1024,
                            context=2048, prices_date=prices.date)
    # the cluster's CPU servers (ALCF's CS-3 cluster: 12 MemoryX nodes of 1128 GiB, and 8 SwarmX + 4 worker + 4
    # activation servers for 4 systems): the 12 TB option needs ceil(12e12 / (1128 x 2^30)) = 10 < 12 DRAM servers,
    # so 12; 16 systems x 4 = 64 more; 76 servers at the catalog's 800 W each
    assert p["memoryx_node_dram_bytes"] == 1128 * 2**30 and p["cluster_nodes_per_system"] == 4 and cap == 12e12
    nodes = 12 + 16 * 4
    assert res.metric("cluster_nodes") == nodes
    assert p["cluster_node_power_w"] == 800.0
    per_year, busy_hour, busy_w = _hand_hourly(p, 16, extra, extra_w=nodes * 800.0)
    run_s = 3e11 / (1024 * 2048) * 2.0
    assert res.metric("cluster_peak_power_w") == pytest.approx(nodes * 800.0, rel=1e-12)
    assert res.metric("memoryx_capex_usd") == pytest.approx(extra, rel=1e-9)
    assert res.metric("run_s") == pytest.approx(run_s, rel=1e-9)
    assert res.metric("usd_per_run") == pytest.approx(run_s / 3600 * busy_hour, rel=1e-9)
    assert res.metric("energy_j_per_run") == pytest.approx(busy_w * p["pue"] * run_s, rel=1e-9)
    # their rack space too (audit28b H3: 16 x 15 U was reported, the 76 1U servers left out)
    assert p["rack_units"] == 15 and p["cluster_node_rack_units"] == 1
    assert res.metric("rack_units") == 16 * 15 + nodes * 1
    assert res.headline_metric == "usd_per_run"


def test_a_run_longer_than_the_amortisation_is_flagged(cat):
    """audit26 F4: GPT-3 175B on the fewest CS-3 that hold it (one) for 20 tokens per parameter runs for decades; the
    cost says the run outlasts the 4-year amortisation and names the fix; 1,024 H100 (days) get no such note."""
    one = costing.cost("gpt-3-175b", "cs3", phase="train", catalog=cat)
    run_years = one.metric("run_s") / (365.25 * 86400)
    assert run_years > 4
    note = [n for n in one.notes if "amortisation" in n]
    assert len(note) == 1 and "give a count (--target cs3xN)" in note[0] and f"{run_years:,.3g} years" in note[0]
    big = costing.cost("gpt-3-175b", "h100x1024", phase="train", catalog=cat, train_tokens=300e9)
    assert big.metric("run_s") < 86400 * 365 and not [n for n in big.notes if "amortisation" in n]


def test_training_run_time_is_the_time_commands(cat, capsys):
    """A GPU training run's wall time in `cost` is `time --train-tokens`'s: tokens over throughput over the goodput of
    the cluster's interruptions (one implementation, wseplan.analytic.cost.time_to_train)."""
    import json as _json

    from wseplan.cli import main

    res = costing.cost("gpt-3-175b", "h100x1024", phase="train", batch=1536, context=2048, train_tokens=300e9,
                       catalog=cat)
    assert main(["time", "gpt-3-175b", "--target", "h100x1024", "--phase", "train", "--batch", "1536", "--context",
                 "2048", "--train-tokens", "300e9", "-f", "json"]) == 0
    rec = _json.loads(capsys.readouterr().out)
    assert rec["goodput_frac"] < 1.0
    assert res.metric("run_s") == pytest.approx(rec["time_to_train_s"], rel=1e-9)


def test_cluster_servers_scale_with_the_memoryx_option(cat):
    """The largest MemoryX option (1.2 PB, its flash tier beyond 55 TB of DRAM: Sandia's DDR5 MemoryX, audit32c F1) adds
    one flash server per 100 TB (the catalog's estimate): ceil(55 TB / 1128 GiB) = 46 DRAM + ceil(1145 / 100) = 12 flash
    servers; a serving target counts none."""
    t = parse_target("cs3", cat)
    prices = C.load_prices(catalog=cat)
    p = C.nominal(C.cost_params(prices, cat, t, include_memoryx=True, memoryx_option="1200tb"))
    assert p["memoryx_node_flash_bytes"] == 100e12
    times = C.TimeInputs(phase="train", num_devices=1, num_systems=1, step_s=1.0, tokens_per_step=1.0, train_tokens=1.0)
    r = C.evaluate(p, times)
    assert math.ceil(55e12 / (1128 * 2**30)) == 46 and math.ceil((1200 - 55) / 100) == 12
    assert float(r["cluster_nodes"]) == 46 + 12 + 4
    assert float(r["peak_it_power_w"]) == pytest.approx(23e3 + 62 * 800.0, rel=1e-12)
    serve = C.evaluate(C.nominal(C.cost_params(prices, cat, t)), C.TimeInputs(
        phase="serve", num_devices=1, num_systems=1, prefill_s=1.0, prompt_tokens=1.0, decode_step_s=1.0,
        output_tokens_per_step=1.0))
    assert float(serve["cluster_nodes"]) == 0 and float(serve["peak_it_power_w"]) == 23e3
    assert float(r["rack_units"]) == 15 + 62 and float(serve["rack_units"]) == 15


def test_every_price_has_a_known_source_and_a_range(cat, prices):
    for where, q in C._iter_quantities(prices):
        assert set(q.source_ids) <= cat.all_source_ids(), where
        assert q.bound("low") <= q.si <= q.bound("high"), where


def test_overrides_pin_inputs_and_reject_bad_names(cat, prices):
    t = parse_target("cs3x4", cat)
    params = C.cost_params(prices, cat, t)
    out = C.apply_overrides(params, C.parse_overrides(["electricity_usd_per_kwh=0.12", "cs3.capex_usd=2e6",
                                                       "h100-sxm.capex_usd=1"]), hardware_key="cs3")
    assert out["electricity_usd_per_kwh"].value == 0.12 and not out["electricity_usd_per_kwh"].uncertain
    assert out["capex_usd"].value == 2e6  # the h100-only override does not touch a CS-3
    with pytest.raises(InputError, match="electricity_usd_per_kwh"):
        C.apply_overrides(params, {"electricity_usd_per_kw": 0.1})
    with pytest.raises(InputError, match="fraction"):
        C.apply_overrides(params, {"utilization_frac": 1.5})
    with pytest.raises(InputError, match="NAME=VALUE"):
        C.parse_overrides(["pue"])
    with pytest.raises(InputError, match="number"):
        C.parse_overrides(["pue=abc"])


def test_override_prefix_may_be_any_alias_of_the_hardware(cat, prices):
    """``h100.capex_usd`` pins an H100 node as ``h100-sxm.capex_usd`` does, ``wse3``/``cs-3`` pin a CS-3 (audit18 F1: an
    alias prefix was compared raw with the prices key and silently skipped); a typo under another target's prefix and
    an unknown prefix are refused."""
    gpu = C.cost_params(prices, cat, parse_target("h100x8", cat))
    wafer = C.cost_params(prices, cat, parse_target("cs3x4", cat))
    for alias in ("h100", "H100", "h100-sxm"):
        out = C.apply_overrides(gpu, {f"{alias}.capex_usd": 1.0}, hardware_key="h100-sxm", catalog=cat)
        assert out["capex_usd"].value == 1.0, alias
    for alias in ("wse3", "cs-3", "cs3"):
        assert C.apply_overrides(wafer, {f"{alias}.capex_usd": 7.0}, hardware_key="cs3", catalog=cat)["capex_usd"].value == 7.0
    kept = C.apply_overrides(wafer, {"h100.capex_usd": 1.0}, hardware_key="cs3", catalog=cat)
    assert kept["capex_usd"].value == wafer["capex_usd"].value  # another hardware's input leaves a CS-3 alone
    with pytest.raises(InputError, match="capex"):
        C.apply_overrides(wafer, {"h100.capex": 1.0}, hardware_key="cs3", catalog=cat)
    with pytest.raises(InputError, match="not a hardware key"):
        C.apply_overrides(gpu, {"nonsense.capex_usd": 1.0}, hardware_key="h100-sxm", catalog=cat)
    # through the API: the alias changes the price as the prices key does
    a = costing.cost("llama-3-70b", "h100x8", phase="decode", batch=8, context=2048, overrides={"h100.capex_usd": 1.0})
    b = costing.cost("llama-3-70b", "h100x8", phase="decode", batch=8, context=2048, overrides={"h100-sxm.capex_usd": 1.0})
    c = costing.cost("llama-3-70b", "h100x8", phase="decode", batch=8, context=2048)
    assert a.headline_value == b.headline_value < c.headline_value


def test_user_prices_file_merges_field_by_field(cat, tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("site:\n  pue: {value: 1.4, low: 1.3, high: 1.5, source: uptime-pue-2024, basis: third-party}\n")
    pr = C.load_prices([f], catalog=cat)
    assert pr.site.pue.si == 1.4
    assert pr.site.electricity_usd_per_kwh.si == 0.0832  # untouched
    bad = tmp_path / "bad.yaml"
    bad.write_text("site:\n  puee: {value: 1.4, source: uptime-pue-2024, basis: third-party}\n")
    with pytest.raises(CatalogError, match="unknown key"):
        C.load_prices([bad], catalog=cat)
    unk = tmp_path / "unk.yaml"
    unk.write_text("site:\n  pue: {value: 1.4, source: nowhere-id, basis: third-party}\n")
    with pytest.raises(CatalogError, match="unknown source id"):
        C.load_prices([unk], catalog=cat)


# --------------------------------------------------------------------------------------------- uncertainty
def _serve_case(cat, prices):
    t = parse_target("cs3x4", cat)
    params = C.cost_params(prices, cat, t)
    times = C.TimeInputs(phase="serve", num_devices=4, num_systems=4, prefill_s=0.5, prompt_tokens=4096,
                         decode_step_s=0.002, output_tokens_per_step=4)
    return params, times


def test_monte_carlo_reproducible_with_seed(cat, prices):
    params, times = _serve_case(cat, prices)
    kw = dict(model="m", target="cs3x4", hardware="wse3", price_key="cs3", batch=4, context=1024, uncertainty=400)
    a = C.cost_from_times(params, times, seed=7, **kw)
    b = C.cost_from_times(params, times, seed=7, **kw)
    c = C.cost_from_times(params, times, seed=8, **kw)
    assert a.to_record() == b.to_record()
    assert a.to_record()["metrics"] != c.to_record()["metrics"]
    m = {r.metric: r for r in a.metrics}["output_usd_per_mtok"]
    # the samples move with capex and utilisation: the band is not degenerate and holds the nominal value
    assert m.p10 < m.p50 < m.p90
    lo = C.evaluate({k: (p.low if k in ("capex_usd",) else p.value) for k, p in params.items()}, times)
    assert m.p10 > 0 and m.p90 > float(lo["output_usd_per_mtok"])


def test_sampled_inputs_stay_in_their_ranges(cat, prices):
    params, _ = _serve_case(cat, prices)
    s = C.sample_params(params, 1000, seed=1)
    for k, p in params.items():
        assert s[k].min() >= p.low - 1e-12 and s[k].max() <= p.high + 1e-12, k
    with pytest.raises(InputError):
        C.sample_params(params, 1, seed=1)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 300), prefill=st.floats(1e-3, 10.0),
       step=st.floats(1e-4, 1.0), batch=st.integers(1, 256))
def test_percentiles_are_ordered(seed, n, prefill, step, batch):
    cat = load_catalog()
    prices = C.load_prices(catalog=cat)
    params = C.cost_params(prices, cat, parse_target("h100-sxmx8", cat))
    times = C.TimeInputs(phase="serve", num_devices=8, num_systems=1, prefill_s=prefill, prompt_tokens=batch * 512,
                         decode_step_s=step, output_tokens_per_step=batch)
    rows = C.monte_carlo(params, lambda p: C.evaluate(p, times), n=n, seed=seed)
    for r in rows:
        assert r.p10 <= r.p50 <= r.p90, r.metric


def test_tornado_signs_and_order(cat, prices):
    params, times = _serve_case(cat, prices)
    rows = C.tornado(params, lambda p: C.evaluate(p, times), "output_usd_per_mtok")
    by = {r.param: r for r in rows}
    assert by["capex_usd"].swing > 0  # dearer systems, dearer tokens
    assert by["utilization_frac"].swing < 0  # busier systems, cheaper tokens
    assert by["amortization_years"].swing < 0
    swings = [abs(r.swing) for r in rows]
    assert swings == sorted(swings, reverse=True)
    assert "rack_units_per_rack" not in by  # fixed inputs have no swing
    # each end equals a direct evaluation with that one input moved
    hi = C.evaluate(dict(C.nominal(params), capex_usd=params["capex_usd"].high), times)
    assert by["capex_usd"].metric_at_high == pytest.approx(float(hi["output_usd_per_mtok"]), rel=1e-12)


# --------------------------------------------------------------------------------------------- API and CLI
def test_cost_prices_the_plan_record(cat):
    """cost is the plan chain priced: the same replica and times; output $/M tokens = busy $/s x the decode share of a
    step / tokens per step (in-flight batching: the round without its prompt chunks carries the output tokens)."""
    from wseplan.plan import plan

    res = costing.cost("llama-3.1-70b", "cs3", batch=8, context=2048, output_tokens=256, catalog=cat)
    r = plan("llama-3.1-70b", "cs3", phase="serve", batch=8, context=2048, output_tokens=256, catalog=cat)
    assert res.num_devices == r.num_devices and res.target == r.target == f"wse3x{r.num_devices}"
    assert 0 < res.times.decode_step_s <= r.tpot_s and res.times.output_tokens_per_step == 8
    assert res.times.decode_step_s + res.times.prefill_s == pytest.approx(r.tpot_s, rel=1e-9)  # the mixed step
    assert res.plan["ttft_s"] == r.ttft_s
    busy_hour = res.metric("usd_per_busy_hour")
    assert res.metric("output_usd_per_mtok") == pytest.approx(busy_hour / 3600 * res.times.decode_step_s / 8 * 1e6,
                                                              rel=1e-9)
    # static batches: the decode step of the batch is the output side
    st = costing.cost("llama-3.1-70b", "h100x4", batch=8, context=2048, output_tokens=256, catalog=cat,
                      software="gpu-fitted-2026-11")
    rs = plan("llama-3.1-70b", "h100x4", phase="serve", batch=8, context=2048, output_tokens=256, catalog=cat,
              software="gpu-fitted-2026-11")
    assert st.times.decode_step_s == pytest.approx(rs.tpot_s, rel=1e-12) and st.times.prefill_s == rs.ttft_s
    # the Cerebras per-token service price is the rental alternative for wafer serving
    assert res.metric("service_output_usd_per_mtok") == 0.60
    assert isinstance(res.to_frame().attrs["prices_date"], str)


def test_cost_train_default_tokens(cat):
    from wseplan.workload import total_params

    res = costing.cost("gpt-3-175b", "h100-sxmx256", phase="train", batch=1024, context=2048, catalog=cat)
    m = cat.models["gpt-3-175b"]
    assert res.times.train_tokens == pytest.approx(20 * total_params(m), rel=1e-12)
    # rental: $2.99 per H100 GPU-hour (prices-2026-11) x 256 GPUs x the run time
    assert res.metric("rental_usd_per_run") == pytest.approx(2.99 * 256 * res.metric("run_s") / 3600, rel=1e-9)


def test_cli_cost_json_and_overrides(capsys):
    from wseplan.cli import main

    rc = main(["cost", "llama-3.1-70b", "--target", "h100-sxmx8", "--batch", "4", "--context", "1024",
               "--set", "electricity_usd_per_kwh=0.12", "--uncertainty", "200", "--seed", "3", "--format", "json"])
    out = capsys.readouterr().out
    assert rc == 0
    rec = json.loads(out)
    params = {p["name"]: p for p in rec["params"]}
    assert params["electricity_usd_per_kwh"]["value"] == 0.12
    assert rec["samples"] == 200 and rec["seed"] == 3
    m = {r["metric"]: r for r in rec["metrics"]}
    assert m["output_usd_per_mtok"]["p10"] <= m["output_usd_per_mtok"]["p50"] <= m["output_usd_per_mtok"]["p90"]
    assert rec["tornado"] and rec["tornado"][0]["metric"] == rec["headline_metric"] == "all_in_usd_per_mtok"
    for fmt in ("table", "csv", "md"):
        assert main(["cost", "llama-3.1-70b", "--target", "h100-sxmx8", "--format", fmt]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("args,needle", [
    (["--set", "electricity=0.1"], "unknown cost input"),
    (["--uncertainty", "1"], "uncertainty"),
    (["--uncertainty", "1000000000"], "--uncertainty: Monte Carlo samples (0: off): at most 100,000, got 1,000,000,000"),
    (["--phase", "finetune"], "phase"),
    (["--prices", "/nonexistent.yaml"], "not found"),
])
def test_cli_cost_bad_input_one_line(capsys, args, needle):
    from wseplan.cli import main

    rc = main(["cost", "llama-3.1-70b", "--target", "cs3x4", *args])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_uncertainty_cap_is_the_study_cap():
    from wseplan.report.study import CostSpec

    limit = CostSpec.model_fields["uncertainty"].metadata
    assert any(getattr(m, "le", None) == C.MAX_UNCERTAINTY_SAMPLES for m in limit)
    with pytest.raises(InputError, match="limit of 100,000"):
        C.sample_params({}, C.MAX_UNCERTAINTY_SAMPLES + 1, 0)


def test_cli_cost_refuses_what_does_not_fit(capsys):
    """The issue-10 case: 70B at batch 256 x 32K on 8 H100 is ~289 GB short per GPU: no price, one line, exit 2."""
    from wseplan.cli import main

    rc = main(["cost", "llama-3.1-70b", "--target", "h100x8", "--batch", "256", "--context", "32768"])
    err = capsys.readouterr().err
    assert rc == 2 and "does not fit" in err and "no cost" in err and err.count("\n") == 1


def test_pure_functions_broadcast_over_arrays():
    d = C.deployment_cost(num_systems=np.array([1, 2, 4]), capex_per_system_usd=1e6, network_frac=0.1, extra_capex_usd=0.0,
                          installation_frac=0.0, amortization_years=4, maintenance_frac_per_year=0.0,
                          peak_power_per_system_w=1e4, busy_power_frac=1.0, idle_power_frac=1.0, utilization_frac=1.0,
                          pue=1.0, electricity_usd_per_kwh=0.1, facility_usd_per_kw_month=0.0)
    # 1.1e6/4 per system-year of capex + 10 kW all year at $0.1/kWh
    per_sys = 1.1e6 / 4 + 10 * H * 0.1
    np.testing.assert_allclose(d["total_usd_per_year"], per_sys * np.array([1, 2, 4]), rtol=1e-12)
    assert math.isclose(float(d["usd_per_hour"][0]), per_sys / H, rel_tol=1e-12)


def test_fit_inputs_are_not_pinnable_and_server_sizes_are_bounded(cat, prices):
    """The MemoryX capacity, its DRAM tier and the update servers are read by the fit and the time model too: pinning
    them in the cost alone would price one MemoryX and time another, so --set refuses them (audit22 F6); a MemoryX
    server's memory of zero (or 1e-300) would make the server count infinite: refused with the field named."""
    t = parse_target("cs3x4", cat)
    params = C.cost_params(prices, cat, t, include_memoryx=True)
    for name in ("memoryx_capacity_bytes", "memoryx_dram_capacity_bytes", "memoryx_min_nodes"):
        with pytest.raises(InputError, match=name):
            C.apply_overrides(params, {f"cs3.{name}": 2e12}, hardware_key="cs3")
    for name in ("memoryx_node_dram_bytes", "memoryx_node_flash_bytes"):
        for bad in (0.0, 1e-300):
            with pytest.raises(InputError, match=f"{name}.*at least 1e9"):
                C.apply_overrides(params, {name: bad}, hardware_key="cs3")
    out = C.apply_overrides(params, {"cs3.cluster_node_power_w": 500.0}, hardware_key="cs3")
    assert out["cluster_node_power_w"].value == 500.0


def test_training_cost_note_says_what_the_cluster_servers_add(cat):
    """The note names the servers counted (not 'not included', which the numbers contradicted: audit22 F5)."""
    from wseplan.costing import cost

    r = cost("llama-3-8b", "cs3x4", phase="train", batch=256, context=2048, catalog=cat)
    assert r.metric("cluster_nodes") == 12 + 4 * 4
    assert any("28 CPU servers" in n and "800 W" in n for n in r.notes)
    assert not any("not included" in n for n in r.notes)


def test_memoryx_outside_wafer_training_names_the_flag(capsys):
    """audit27 H12: --memoryx on a GPU decode question said 'options: memoryx_option not used ... for phase serve'."""
    from wseplan.cli import main

    for argv in (["--phase", "decode", "--target", "h200x8"], ["--phase", "train", "--target", "h200x8"]):
        assert main(["cost", "llama-70b", *argv, "--memoryx", "12tb"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --memoryx: the MemoryX weight store holds a wafer training run") and "Traceback" not in err


def test_a_free_prompt_side_is_explained(catalog):
    """audit27 F7: at batch 2 a latency-bound wafer pipeline carries the prompts' chunks in idle stage slots, so the
    input side is charged $0/M; the record says why, and all-in still carries the whole replica."""
    from wseplan.costing import cost

    r = cost("llama-3.1-70b", "cs3x5", batch=2, catalog=catalog)
    assert r.metric("input_usd_per_mtok") == 0.0  # the chunks add no time to the latency-bound rounds
    assert any(n.startswith("input $/M is 0: the prompts' prefill chunks ride") for n in r.notes)
    assert r.metric("all_in_usd_per_mtok") > r.metric("output_usd_per_mtok") > 0
    one = cost("llama-3.1-70b", "cs3x5", batch=1, catalog=catalog)
    assert one.metric("input_usd_per_mtok") > 0 and not any(n.startswith("input $/M is 0") for n in one.notes)


def test_a_wafer_training_run_says_it_counts_no_interruptions(catalog, capsys):
    """audit27b (open question): GPU clusters' run times count interruptions (goodput) and wafer clusters' none, with
    no word of it in a side-by-side comparison; both time --train-tokens and cost --phase train say so now."""
    from wseplan.cli import main
    from wseplan.costing import cost
    from wseplan.pricing import no_wafer_interruptions_note

    NO_WAFER_INTERRUPTIONS_NOTE = no_wafer_interruptions_note(catalog)

    r = cost("gpt-3-175b", "cs3x64", phase="train", batch=1536, context=2048, catalog=catalog)
    assert NO_WAFER_INTERRUPTIONS_NOTE in r.notes
    assert NO_WAFER_INTERRUPTIONS_NOTE not in cost("llama-3-8b", "h100x8", phase="train", batch=64, context=2048,
                                                   catalog=catalog).notes
    assert main(["time", "gpt-3-175b", "--target", "cs3x64", "--phase", "train", "--batch", "1536", "--context", "2048",
                 "--train-tokens", "3e11", "-f", "json"]) == 0
    import json

    rec = json.loads(capsys.readouterr().out)
    assert rec["goodput_frac"] == 1.0 and NO_WAFER_INTERRUPTIONS_NOTE in rec["notes"]


def test_a_users_price_is_the_users_alone(tmp_path, cat):
    """audit28b M2, audit28c M6: a value from --prices kept the bundled entry's source, basis, note and range, so a
    user's 15 c/kWh was labelled EIA's 8.32 c (official-secondary) and a real quote below the bundled low ($1M for a
    CS-3 against $1.36M) was refused. The user's number now carries the file's provenance (or '--prices FILE',
    'user', no note, no range); a range-only entry still updates the bundled one field by field."""
    f = tmp_path / "q.yaml"
    f.write_text("site:\n  electricity_usd_per_kwh: {value: 0.15}\n  pue: {low: 1.1}\nhardware:\n  cs3:\n"
                 "    capex_usd: {value: 1000000, source: my-quote, basis: quote}\n")
    p = C.load_prices([f], catalog=cat)
    e = p.site.electricity_usd_per_kwh
    assert e.si == 0.15 and e.basis == "user" and e.note is None and e.low is None and e.high is None
    assert e.source_ids == ["--prices q.yaml"]
    c = p.hardware["cs3"].capex_usd
    assert c.si == 1e6 and c.basis == "quote" and c.source_ids == ["my-quote"] and c.low is None
    bundled = C.load_prices(catalog=cat)
    assert p.site.pue.bound("low") == 1.1 and p.site.pue.si == bundled.site.pue.si  # field by field
    assert p.site.pue.source_ids == bundled.site.pue.source_ids


def test_a_gpu_has_one_price(cat, prices):
    """audit28b M3: `catalog show a100-80gb` said $300k while `cost` used the prices catalog's $199k. A GPU in both
    catalogs has the same node price in both."""
    both = [k for k in cat.gpus if k in prices.hardware]
    assert "a100-80gb" in both and len(both) >= 4
    for k in both:
        assert cat.gpus[k].node_price_usd.si == prices.hardware[k].capex_usd.si, k


def test_a_misfit_names_the_fix_that_would_work(tmp_path, cat):
    """audit28a M5: GPT-3 175B on 32 H100 does not fit at batch 1 x 128 tokens because weights, fp32 gradients and
    Adam state alone are 174.6e9 x 18 B / 32 = 98.2 GB per GPU against 77.3 GB usable (by hand): 'lower the batch or
    context' cannot help; a KV cache that overflows still gets that advice; a wafer whose streamed layer overflows
    its SRAM is told no count helps."""
    from wseplan.costing import cost

    assert 174.6e9 * 18 / 32 > 77.3e9
    with pytest.raises(InputError, match="alone overflow each device, at any batch or context: add devices"):
        cost("gpt-3-175b", "h100x32", phase="train", batch=1, context=128, catalog=cat)
    with pytest.raises(InputError, match="kv_cache binds.*lower the batch or context, or add devices"):
        cost("llama-3.1-70b", "h100x8", phase="decode", batch=256, context=32768, catalog=cat)
    # a gated model of ~11e9 parameters per layer (d 25,600, MLP 128,000): two bf16 layers in flight are ~45 GB, over a
    # WSE-3's 41.25 GB usable
    d, f = 25600, 128000
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d, "intermediate_size": f,
           "num_hidden_layers": 4, "num_attention_heads": 200, "num_key_value_heads": 8, "vocab_size": 32000,
           "max_position_embeddings": 4096}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert 2 * 2 * (3 * d * f + 2 * d * d) > 41.25e9
    with pytest.raises(InputError, match="no batch, context or system count fits this model"):
        cost(str(p), "cs3", phase="train", batch=8, context=2048, catalog=cat)
    # review28 #2: a model whose streamed layers fit (d 20,480, MLP 98,304: ~28 GB in flight) but whose 32k-token
    # sequence does not is told to lower the context, in the words `time` uses (review28b #3: one hint)
    cfg.update(hidden_size=20480, intermediate_size=98304, num_attention_heads=160)
    q = tmp_path / "fits" / "config.json"
    q.parent.mkdir()
    q.write_text(json.dumps(cfg))
    assert 2 * 2 * (3 * 20480 * 98304 + 2 * 20480 * 20480) < 41.25e9
    with pytest.raises(InputError, match="one sequence of 32,768 tokens needs more than .* a pass at any system count: "
                                         "lower --context"):
        cost(str(q), "cs3", phase="train", batch=1, context=32768, catalog=cat)
    assert cost(str(q), "cs3", phase="train", batch=1, context=4096, catalog=cat).metric("run_s") > 0


def test_a_cost_of_capital_pays_the_capex_back_with_interest(cat, prices):
    """audit28b M6: the TCO had no cost of capital and did not say so. By hand, 4 CS-3 (capex 4 x $2.5M x 1.10 network
    x 1.05 installation = $11.55M) at 8% over 4 years: the capital recovery factor 0.08 / (1 - 1.08^-4) = 0.30192 a
    year, $3.487M instead of $11.55M / 4 = $2.8875M; the bundled rate is 0 (straight-line) and a rate above 1 is
    refused."""
    from wseplan.errors import InputError

    t = parse_target("cs3x4", cat)
    params = C.cost_params(prices, cat, t)
    times = C.TimeInputs(phase="train", num_devices=4, num_systems=4, step_s=1.0, tokens_per_step=1.0, train_tokens=1.0)
    p0 = C.nominal(params)
    assert p0["cost_of_capital_frac_per_year"] == 0.0
    base = C.evaluate(p0, times)
    capex = 4 * 2.5e6 * 1.10 * 1.05
    assert float(base["capex_usd_per_year"]) == pytest.approx(capex / 4, rel=1e-12)
    p8 = C.nominal(C.apply_overrides(params, {"cost_of_capital_frac_per_year": 0.08}, catalog=cat))
    r8 = C.evaluate(p8, times)
    crf = 0.08 / (1 - 1.08 ** -4)
    assert crf == pytest.approx(0.30192, abs=1e-5)
    assert float(r8["capex_usd_per_year"]) == pytest.approx(capex * crf, rel=1e-12)
    assert float(r8["total_usd_per_year"]) - float(base["total_usd_per_year"]) == pytest.approx(capex * (crf - 0.25), rel=1e-9)
    with pytest.raises(InputError, match="yearly rate"):
        C.apply_overrides(params, {"cost_of_capital_frac_per_year": 8}, catalog=cat)


def test_an_idle_draw_above_the_busy_one_is_refused(cat, prices):
    """audit28b L4: --set idle_power_frac=0.9 was taken beside busy_power_frac 0.75 (idle drawing more than busy)."""
    from wseplan.errors import InputError

    params = C.cost_params(prices, cat, parse_target("h100x8", cat))
    with pytest.raises(InputError, match="idle_power_frac 0.9 is above busy_power_frac 0.75"):
        C.apply_overrides(params, {"idle_power_frac": 0.9}, catalog=cat)
    assert C.apply_overrides(params, {"idle_power_frac": 0.5}, catalog=cat)["idle_power_frac"].value == 0.5


def test_a_split_that_does_not_add_up_says_so(cat):
    """audit28b M4: on cs3x4 at batch 8 (2,048 + 256 tokens) a request priced at the input and output $/M recovers
    (2,048 x input + 256 x output) / (256 x all-in) = 85.7% of the all-in cost; the record says so (an H100 node,
    whose split recovers over 99%, does not)."""
    from wseplan.costing import cost

    r = cost("llama-3.1-70b", "cs3x4", batch=8, context=2048, catalog=cat)
    m = {x.metric: x.value for x in r.metrics}
    share = (2048 * m["input_usd_per_mtok"] + 256 * m["output_usd_per_mtok"]) / (256 * m["all_in_usd_per_mtok"])
    assert share < 0.99
    assert any(f"recover {share:.1%} of the all-in" in n for n in r.notes)
    g = cost("llama-3.1-70b", "h100x8", batch=8, context=2048, catalog=cat)
    assert not any("recover" in n for n in g.notes)


def test_cost_prices_a_given_gpu_layout_as_time_times_it(capsys):
    """audit29b L5: a sweep row's price could not be asked again with `cost` (no --tp/--pp/--dp): Llama-3.1-70B fp8 on
    16 H200 was $4.78/M at cost's own layout while the sweep's TP1 x DP16 row said $1.34/M. `cost --tp --pp --dp`
    prices the layout `time` times with the same flags."""
    import json

    from wseplan.cli import main

    ask = ["llama-3.1-70b", "--target", "h200x16", "--precision", "fp8", "--batch", "32", "--context", "4096",
           "--output-tokens", "1024", "--tp", "1", "--dp", "16", "--format", "json"]
    assert main(["cost", *ask]) == 0
    c = json.loads(capsys.readouterr().out)
    assert main(["time", *ask[:1], "--phase", "serve", *ask[1:]]) == 0
    t = json.loads(capsys.readouterr().out)
    assert c["plan"]["layout"]["tensor_parallel"] == 1 and c["plan"]["layout"]["data_parallel"] == 16
    assert c["plan"]["tokens_per_s"] == pytest.approx(t["tokens_per_s"], rel=1e-12)
    assert main(["cost", "llama-3.1-70b", "--target", "cs3x4", "--tp", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tp" in err[0]


def test_a_set_for_other_hardware_says_it_is_not_applied(cat):
    """audit30a L9: `cost --target h100x8 --set cs3.capex_usd=1` priced the H100 node as if nothing were asked; a
    hardware-prefixed input for hardware the target lacks is now named in a note (one for the target's own is not),
    and the price is the one without it."""
    from wseplan.costing import cost

    plain = cost("llama-3.1-8b", "h100x8", batch=8, context=1024, catalog=cat)
    other = cost("llama-3.1-8b", "h100x8", batch=8, context=1024, catalog=cat, overrides={"cs3.capex_usd": 1.0})
    own = cost("llama-3.1-8b", "h100x8", batch=8, context=1024, catalog=cat, overrides={"h100.capex_usd": 30000.0})
    assert any("--set cs3.capex_usd: not applied" in n for n in other.notes)
    assert not any("not applied" in n for n in own.notes)
    assert other.metric("all_in_usd_per_mtok") == plain.metric("all_in_usd_per_mtok")
    assert own.metric("all_in_usd_per_mtok") != plain.metric("all_in_usd_per_mtok")


def test_idle_gpus_do_not_interrupt_the_run(cat, capsys):
    """audit31a H1: interruptions were charged on every GPU of the target, also those the layout leaves idle, so 100,000
    H100 trained 405B in 59.7 days on the same 32,768-GPU layout that 32,768 H100 ran in 43.5. On 20 H100 Llama-3.1-8B
    (batch 256 x 4,096) trains on 16 of them (TP1 x DP16), as on 16 H100: the run's goodput and wall time are the 16
    GPUs' (goodput_frac of 16 GPUs), in cost and in `time --train-tokens`; the 20 are still all charged."""
    from wseplan.cli import main
    from wseplan.costing import cost
    from wseplan.pricing import run_goodput

    r16 = cost("llama-3.1-8b", "h100x16", phase="train", batch=256, context=4096, catalog=cat)
    r20 = cost("llama-3.1-8b", "h100x20", phase="train", batch=256, context=4096, catalog=cat)
    lay = r20.plan["layout"]
    assert lay["tensor_parallel"] * lay["pipeline_parallel"] * lay["data_parallel"] == 16  # 4 GPUs idle
    assert r20.times.goodput_frac == pytest.approx(float(run_goodput("gpu", cat, 16)), rel=1e-12)
    assert r20.times.goodput_frac > float(run_goodput("gpu", cat, 20))
    assert r20.metric("run_s") == pytest.approx(r16.metric("run_s"), rel=1e-12)
    assert r20.metric("rental_usd_per_run") == pytest.approx(r16.metric("rental_usd_per_run") * 20 / 16, rel=1e-9)
    days = []
    for n in (16, 20):
        assert main(["time", "llama-3.1-8b", "--target", f"h100x{n}", "--phase", "train", "-b", "256", "-c", "4096",
                     "--train-tokens", "1e12", "-f", "json"]) == 0
        days.append(json.loads(capsys.readouterr().out)["time_to_train_s"])
    assert days[1] == pytest.approx(days[0], rel=1e-12)


def test_a_set_capex_prices_hardware_the_catalogs_leave_unpriced(cat):
    """audit31b M2: `--set tpu-v5p.capex_usd=1e5`, the documented pin, was refused by the "no price" check before it
    applied, and `serve` refused an unpriced TPU outright though `time` answers it. Now the pin prices it (the capex
    is the user's), and serve without it gives the points' times with no $ figures and a note."""
    from wseplan.costing import cost
    from wseplan.serving import serve

    with pytest.raises(Exception, match="has no price"):
        cost("llama-3-8b", "tpu-v5px4", batch=8, context=1024, catalog=cat)
    r = cost("llama-3-8b", "tpu-v5px4", batch=8, context=1024, catalog=cat, overrides={"tpu-v5p.capex_usd": 1e5})
    assert {p.name: p for p in r.params}["capex_usd"].value == 1e5 and r.metric("all_in_usd_per_mtok") > 0
    twice = cost("llama-3-8b", "tpu-v5px4", batch=8, context=1024, catalog=cat, overrides={"tpu-v5p.capex_usd": 2e5})
    assert twice.metric("all_in_usd_per_mtok") > r.metric("all_in_usd_per_mtok")
    s = serve("llama-3-8b", "tpu-v5px4", catalog=cat)
    assert s.fits and s.chosen.tokens_per_s > 0 and s.chosen.all_in_usd_per_mtok is None
    assert any("tpu-v5p has no price" in n for n in s.notes)


def test_rental_all_in_is_the_rented_hour_over_the_tokens_delivered(cat):
    """audit33a M1: renting the same GPUs is priced all in as owning is: the rented devices' hour over the output tokens
    the deployment delivers (rental_usd_per_hour / 3600 / output tokens/s x 1e6). Owned all in is the busy hour over the
    same tokens, so the two are in the ratio of rental $/h to the owned busy $/h; a note says the rental is paid only
    while busy."""
    from wseplan.costing import cost

    res = cost("llama-3.1-70b", "h100-sxmx8", phase="serve", batch=32, context=2048, output_tokens=256, catalog=cat)
    m = {x.metric: x.value for x in res.metrics}
    rent_h = m["rental_usd_per_hour"]
    assert rent_h == pytest.approx(8 * C.nominal(C.cost_params(C.load_prices(catalog=cat), cat,
                                                               parse_target("h100-sxmx8", cat)))[
        "cloud_usd_per_device_hour"], rel=1e-12)
    assert m["rental_all_in_usd_per_mtok"] == pytest.approx(m["all_in_usd_per_mtok"] * rent_h / m["usd_per_busy_hour"],
                                                            rel=1e-9)
    assert any(n.startswith("rental $/M: the same devices rented on demand") for n in res.notes)
    # no rental price for wafers: no rental figure and no note
    w = cost("llama-3.1-70b", "cs3x4", phase="serve", batch=8, context=2048, output_tokens=256, catalog=cat)
    assert not any(x.metric.startswith("rental") for x in w.metrics) and not any(n.startswith("rental") for n in w.notes)


def test_every_price_says_what_its_tco_leaves_out(cat):
    """audit33a M5: `cost` states the TCO's scope (amortisation years and cost of capital from the prices catalog, and
    what is not in it); `compare` says it once for all its rows."""
    from wseplan.compare import compare
    from wseplan.costing import cost

    site = C.load_prices(catalog=cat).site
    res = cost("llama-3.1-70b", "cs3x4", phase="serve", batch=8, context=2048, output_tokens=256, catalog=cat)
    (note,) = [n for n in res.notes if n.startswith("TCO: ")]
    assert f"over {site.amortization_years.si:g} years at a {site.cost_of_capital_frac_per_year.si:.0%} cost" in note
    assert "leaves out staff, software licences" in note
    fin = cost("llama-3.1-70b", "cs3x4", phase="serve", batch=8, context=2048, output_tokens=256, catalog=cat,
               overrides={"cost_of_capital_frac_per_year": 0.08, "amortization_years": 5})
    assert any(n.startswith("TCO: hardware capex over 5 years at a 8% cost of capital, maintenance") for n in fin.notes)
    cmp = compare("llama-3.1-70b", ["h100-sxmx8", "cs3x4"], phase="serve", batch=8, context=2048, output_tokens=256,
                  catalog=cat)
    assert [n for n in cmp.notes if n.startswith("TCO: ")] == [note]
    assert not any(n.startswith("TCO: ") for r in cmp.rows for n in r.notes)



@pytest.mark.parametrize("override", [{"h100-sxm.capex_usd": 0.0}, {"capex_usd": 0.0}, {"train_tokens_per_param": 0.0}])
def test_a_zero_price_or_a_run_of_no_tokens_is_refused(cat, override):
    """audit33a L3: hardware is never priced at $0 (docs/cli-output.md) and a run trains tokens: --set of a zero capex
    or tokens per parameter is refused with the input's name, as --train-tokens 0 is."""
    from wseplan.costing import cost
    from wseplan.errors import InputError

    name = next(iter(override)).split(".")[-1]
    with pytest.raises(InputError, match=f"{name} must be positive"):
        cost("llama-3.1-8b", "h100-sxmx8", phase="train", batch=64, context=2048, overrides=override, catalog=cat)


@pytest.mark.parametrize("target, kw", [("cs3x4", {}), ("h100x128", {"layout": {"tp": 8, "pp": 1}})])
def test_the_cost_model_error_and_the_interval_judge_one_envelope(cat, target, kw):
    """review33 H1 (audit33d M6): the cost's model-error factor and the interval printed in the same record compare one
    engine's devices with the validated envelope (replicas of a 1-wafer engine, 16 replicas of TP8): the same widening,
    named alike, and neither counts the whole target's devices."""
    from wseplan.costing import cost

    res = cost("llama-3.1-8b", target, phase="decode", batch=16, context=2048, catalog=cat, **kw)
    mt = next(p for p in res.params if p.name == "model_time_factor")
    note = res.plan["interval_note"]

    def widened(text):
        return text.split("widened x", 1)[1].split(" ", 1)[0] if "widened x" in text else None

    assert widened(mt.note) == widened(note)
    assert "devices outside" not in mt.note and "devices outside" not in note


def test_decode_with_the_operating_points_batch_says_which_context_it_prices(cat):
    """The operating point is searched at the serving request's prompt (2,048); the batch it reports, given back with
    --batch, is priced at the decode default (8,192 cached tokens): the record says so and how to price the same point
    (audit35a L3: +64% for the copied batch). The note names the context the record used."""
    op = costing.cost("llama-3.1-70b", "h100x8", phase="decode", catalog=cat)
    again = costing.cost("llama-3.1-70b", "h100x8", phase="decode", batch=op.operating_point["batch"], catalog=cat)
    prompt = int(cat.defaults.default_prompt_tokens.si)
    note = next(n for n in again.notes if n.startswith("context: the decode default"))
    assert f"{int(cat.defaults.default_context_tokens.si):,} cached tokens" in note and f"--context {prompt}" in note
    same = costing.cost("llama-3.1-70b", "h100x8", phase="decode", batch=op.operating_point["batch"], context=prompt,
                        catalog=cat)
    assert not any(n.startswith("context: the decode default") for n in same.notes + op.notes)


def test_the_operating_point_names_the_options_that_price_it_again(capsys):
    """audit37b F5: `cost` without --batch showed its operating point as "batch 60"; `--batch 60` alone searched the
    layout again (one TP4 x PP2 replica, 67% dearer per million tokens). The note names the replica's layout and the
    options that price the same point again, and they do (to the last digit)."""
    import re

    from wseplan.cli import main

    base = ["cost", "llama-3-70b", "--target", "h200x8", "--phase", "serve", "-p", "fp8", "-f", "json"]
    assert main(base) == 0
    first = json.loads(capsys.readouterr().out)
    (note,) = [n for n in first["notes"] if n.startswith("operating point:")]
    m = re.search(r"`wseplan cost` with (--batch \d+ --tp \d+(?: --pp \d+)?(?: --dp \d+)?(?: --adp \d+)?) prices it again",
                  note)
    assert m, note
    flags = m.group(1).split()
    assert main(base + flags) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["headline_value"] == first["headline_value"]
    assert main(base + flags[:2]) == 0  # the batch alone: the layout searched again, another point here
    alone = json.loads(capsys.readouterr().out)
    assert alone["headline_value"] != first["headline_value"]


def test_cost_and_compare_price_what_time_times_in_training(capsys):
    """audit37b F3: `time` took --trainable, --cp, --pipeline-split and the wafer --policy but `cost` and `compare` did
    not, so a LoRA fine-tune of Llama-3-70B on one H100 node was timed (16.4 s a step) but could not be priced (full
    training does not fit there). Each now prices the step `time` gives."""
    from wseplan.cli import main

    args = ["llama-3-70b", "--target", "h100x8", "--phase", "train", "--trainable", "lora", "--batch", "64",
            "--context", "4096", "-f", "json"]
    assert main(["time", *args]) == 0
    t = json.loads(capsys.readouterr().out)
    assert main(["cost", *args, "--train-tokens", "1e9"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["times"]["step_s"] == pytest.approx(t["step_s"], rel=1e-12)
    assert main(["compare", "llama-3-70b", "--targets", "h100x8", *args[3:], "--train-tokens", "1e9"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["step_s"] == pytest.approx(t["step_s"], rel=1e-12)
    wafer = ["gpt3-175b", "--target", "cs3x16", "--phase", "train", "--batch", "1536", "--context", "2048", "--policy",
             "checkpoint", "-f", "json"]
    assert main(["time", *wafer]) == 0
    tw = json.loads(capsys.readouterr().out)
    assert main(["cost", *wafer]) == 0
    assert json.loads(capsys.readouterr().out)["times"]["step_s"] == pytest.approx(tw["step_s"], rel=1e-12)
    assert main(["compare", "llama-3-70b", "--targets", "h100x8", "--trainable", "lora"]) == 2
    assert capsys.readouterr().err.strip() == "error: --trainable: training options; give --phase train, or drop them"
    for cmd in (["cost", "llama-3-70b", "--target", "h100x8"], ["time", "llama-3-70b", "--target", "h100x8"]):
        assert main([*cmd, "--phase", "serve", "--trainable", "lora"]) == 2  # named by its flag (review37 M4)
        assert capsys.readouterr().err.strip() == ("error: --trainable: training options; give --phase train, or drop "
                                                   "them")
    assert main(["cost", "llama-3-70b", "--target", "h100x8", "--phase", "trian", "--trainable", "lora"]) == 2
    assert capsys.readouterr().err.startswith("error: phase: unknown 'trian'")  # the typo named first (review37b L5)
    # a compare of GPUs and wafers applies the GPU training options to the GPU rows and says so (review37 M3: the wafer
    # rows refused them and the whole compare failed)
    assert main(["compare", "llama-3-70b", "--targets", "h100x8,cs3x4", *args[3:]]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [r["step_s"] for r in got["rows"]][0] == pytest.approx(t["step_s"], rel=1e-12)
    assert any(n.startswith("--trainable lora applies to the GPU rows") for n in got["notes"])


def test_int8_gpu_training_says_no_recipe_is_validated():
    """audit37b F9: int8 training on H100 ran at the fp8 rate with no note (int4 is refused; int8 on a wafer notes its
    datapath); it now says so and names fp8 as the production 8-bit recipe. fp8 and bf16 get no such note."""
    from wseplan.timing import predict_time

    kw = dict(phase="train", batch=1536, context=2048)
    i8 = predict_time("gpt3-175b", "h100x1024", precision="int8", **kw)
    assert any(n.startswith("int8 training is timed at h100-sxm's int8 tensor-core rate") for n in i8.notes)
    for p in ("fp8", "bf16"):
        assert not any("int8 training" in n for n in predict_time("gpt3-175b", "h100x1024", precision=p, **kw).notes)


def test_a_per_hardware_input_without_its_prefix_is_refused_across_hardware(tmp_path, capsys):
    """audit37b F7: `--set capex_usd=500000` in a compare of CS-3 and H100 (or a study's cost.set, a sweep's set) priced a
    $2.5M wafer system and a $270k GPU node at one number; refused where several hardware are priced, with the prefix
    to give. One hardware (two sizes of it) keeps the plain name, as `cost` does."""
    from wseplan.cli import main

    args = ["compare", "gpt3-175b", "--targets", "cs3x16,h100x1024", "--phase", "train", "--batch", "1536", "--context",
            "2048", "--train-tokens", "3e11", "-f", "csv"]
    assert main([*args, "--set", "capex_usd=500000"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --set: capex_usd is per hardware and 2 of these targets' hardware "
                                               "have it (cs3, h100-sxm); prefix it, e.g. cs3.capex_usd=...")
    # a cloud rate only some hardware have: counted and suggested among those (review37b M1)
    assert main(["compare", "llama-3-70b", "--targets", "h100x8,h200x8", "--set", "cloud_usd_per_device_hour=2"]) == 2
    assert "(h100-sxm, h200-sxm); prefix it, e.g. h100-sxm.cloud_usd_per_device_hour" in capsys.readouterr().err
    assert main([*args, "--set", "cs3.capex_usd=500000"]) == 0
    capsys.readouterr()
    # another per-hardware input under one target's prefix prices that target alone (review37 H1: a name clash
    # refused every prefixed input but three)
    assert main([*args, "--set", "cs3.peak_power_w=30000", "--set", "h100.rack_units=8"]) == 0
    capsys.readouterr()
    assert main([*args, "--set", "peak_power_w=30000"]) == 2
    assert "peak_power_w is per hardware" in capsys.readouterr().err
    assert main(["fleet", "studies/demand-example.yaml", "--no-analysis", "--set", "capex_usd=500000"]) == 2
    assert "--set: capex_usd is per hardware" in capsys.readouterr().err
    assert main(["compare", "llama-3-70b", "--targets", "h100x8,h100x16", "--set", "capex_usd=300000", "-f", "csv"]) == 0
    capsys.readouterr()
    sw = tmp_path / "s.yaml"
    sw.write_text("name: x\nphase: decode\nmodels: [llama-3.1-8b]\ntargets: [h100x8, cs3]\nbatches: [1]\n"
                  "contexts: [1024]\nset: {network_frac: 0.2}\n")
    assert main(["sweep", str(sw), "--out", str(tmp_path / "o")]) == 2
    assert "set: network_frac is per hardware" in capsys.readouterr().err


def test_absurd_pins_are_refused_and_a_run_takes_at_least_one_step(capsys):
    """audit37b F6: `--set pue=1e9` and `amortization_years=1e9` were priced; 1,000 training tokens "trained" in 1.9 ms
    where one GPT-3 step on 1,024 H100 takes 6.0 s. PUE is at most 5 (typical 1.1-1.6) and a write-off at most 100
    years; a run shorter than one step takes one step (by hand: 6.005 s / goodput), a longer one is pro-rated."""
    from wseplan.analytic.cost import time_to_train
    from wseplan.cli import main

    for pin, msg in (("pue=1e9", "pue must be at most 5"), ("amortization_years=1e9", "at most 100 years")):
        assert main(["cost", "llama-3-70b", "--target", "h100x8", "--set", pin]) == 2
        assert msg in capsys.readouterr().err
    secs, _ = time_to_train(step_s=6.0, tokens_per_step=3_145_728.0, train_tokens=1000.0, num_gpus=1024, goodput=0.5)
    assert float(secs) == pytest.approx(12.0)  # one step, over the goodput
    secs, _ = time_to_train(step_s=6.0, tokens_per_step=3_145_728.0, train_tokens=3_145_728.0 * 2.5, num_gpus=1)
    assert float(secs) == pytest.approx(15.0)  # 2.5 steps
