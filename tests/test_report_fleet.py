"""The serving study's fleet is the fleet solver's (issue 11, item 7): `report` and `fleet` give the same fleet for
the same demand — here three demands (tokens/s, requests/s, users/day with a peak factor; different speeds, TTFT
limits and replica sizes), each written by hand as a `wseplan fleet` demand file."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from wseplan.catalog import load_catalog
from wseplan.cli import main
from wseplan.optimize.fleet_schema import WorkloadSpec
from wseplan.report.study import CostSpec, ServingSpec, Study, TargetSpec, run_study

CAT = load_catalog()
MODEL = "llama-3.1-8b"

#: (study demand fields, demand-file workload fields, targets, the per-user speed, TTFT limit, batches, sizes)
CASES = [
    pytest.param(dict(demand_tokens_per_s=60_000), {"output_tokens_per_s": 60000},
                 ["h100", {"target": "h200", "precision": "fp8"}], 20, None, [1, 8, 64, 256], "fewest", id="tokens"),
    pytest.param(dict(requests_per_s=150), {"requests_per_s": 150},
                 ["cs3", {"target": "h100", "precision": "fp8"}], 60, 1.0, [1, 4, 16, 64], "search", id="requests"),
    pytest.param(dict(users_per_day=2e6, requests_per_user_per_day=10, peak_factor=3),
                 {"users_per_day": 2e6, "requests_per_user_per_day": 10, "peak_factor": 3},
                 [{"target": "h200", "precision": "fp8"}, {"target": "b200", "precision": "fp8"}], 100, 0.5,
                 [1, 8, 32, 128], "search", id="users"),
]
HW = {"h100": "h100-sxm", "h200": "h200-sxm", "b200": "b200", "cs3": "wse3"}


def _fleet_cli(tmp_path, name, systems, wl) -> dict:
    path = tmp_path / f"{name}.yaml"
    lines = [f"name: {name}", "systems:"] + [f"  - hardware: {h}" for h in systems] + ["workloads:", "  - name: chat"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in wl.items()]
    path.write_text("\n".join(lines) + "\n")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["fleet", str(path), "--no-analysis", "--format", "json"]) == 0
    return json.loads(buf.getvalue())


def _allocs_of_record(rec) -> list[tuple]:
    return sorted((a["system"], a["replicas"], a["devices_per_replica"], a["batch"]) for a in rec["allocations"])


def _allocs_of_rows(rows) -> list[tuple]:
    return sorted((r["system"], r["replicas"], r["devices_per_replica"], r["batch"]) for r in rows)


@pytest.mark.parametrize("demand, wl_demand, targets, speed, ttft, batches, sizes", CASES)
def test_report_and_fleet_give_the_same_fleet(tmp_path, demand, wl_demand, targets, speed, ttft, batches, sizes):
    study = Study(name="same-fleet", title="t", kind="serving", question="q?", model=MODEL,
                  targets=[t if isinstance(t, str) else TargetSpec(**t) for t in targets],
                  serving=ServingSpec(prompt_tokens=1024, output_tokens=256, min_tokens_per_s_per_user=speed,
                                      ttft_limit_s=ttft, batches=batches, replica_sizes=sizes, **demand),
                  cost=CostSpec(uncertainty=0))
    rows = run_study(study, catalog=CAT).table("fleet").rows
    names = study.target_names
    precisions = {HW[n]: study.precision_for(n) for n in names}
    sla = {"tpot_s": 1.0 / speed, **({"ttft_s": ttft} if ttft else {})}
    wl = {"model": MODEL, "kind": "serve", "precision": "bf16", "precisions": precisions, "prompt_tokens": 1024,
          "output_tokens": 256, "batches": batches, "replica_sizes": sizes, "sla": sla, **wl_demand}
    alone = {}
    for n in names:  # each target alone: the report's rows of that menu are `wseplan fleet`'s plan
        rec = _fleet_cli(tmp_path, n, [HW[n]], wl)
        mine = [r for r in rows if r["menu"] == n]
        assert _allocs_of_rows(mine) == _allocs_of_record(rec), n
        assert mine[0]["plan_usd_per_year"] == pytest.approx(rec["total_usd_per_year"], rel=1e-9)
        assert mine[0]["systems"] == rec["systems"][0]["count"]
        alone[n] = rec
    # all targets: the mix row when it differs from the best single target, else that target's rows
    rec = _fleet_cli(tmp_path, "all", [HW[n] for n in names], wl)
    mix = [r for r in rows if r["menu"] == "all targets"]
    if not mix:
        best = min(names, key=lambda n: alone[n]["total_usd_per_year"])
        mix = [r for r in rows if r["menu"] == best]
    assert _allocs_of_rows(mix) == _allocs_of_record(rec)
    assert mix[0]["plan_usd_per_year"] == pytest.approx(rec["total_usd_per_year"], rel=1e-9)
    # the demand the fleet met, by hand: tokens/s as given; requests/s x 256 tokens; users/day x requests/user/day
    # / 86,400 s x peak factor x 256 tokens
    want = {"tokens": 60000.0, "requests": 150 * 256.0, "users": 2e6 * 10 / 86400 * 3 * 256}
    rate = WorkloadSpec(name="w", model=MODEL, kind="serve", **wl_demand).output_tokens_per_s_demand()
    assert rec["allocations"][0]["demand"] == pytest.approx(rate, rel=1e-12)
    assert any(rate == pytest.approx(v, rel=1e-12) for v in want.values())
    assert sum(a["supply"] for a in rec["allocations"]) >= rate
    for r in mix:  # every replica meets the per-user speed and the TTFT limit
        assert r["tokens_per_s_per_user"] >= speed * (1 - 1e-9) and (ttft is None or r["ttft_s"] <= ttft)


def test_demand_forms_are_exclusive():
    with pytest.raises(ValueError, match="one demand"):
        WorkloadSpec(name="w", model=MODEL, kind="serve", output_tokens_per_s=1, requests_per_s=1)
    with pytest.raises(ValueError, match="requests_per_user_per_day"):
        WorkloadSpec(name="w", model=MODEL, kind="serve", users_per_day=10)
    with pytest.raises(ValueError, match="peak_factor applies"):
        WorkloadSpec(name="w", model=MODEL, kind="serve", requests_per_s=1, peak_factor=2)
    with pytest.raises(ValueError, match="one demand"):
        ServingSpec(prompt_tokens=1, output_tokens=1, min_tokens_per_s_per_user=1, batches=[1])
    # 86,400 users a day sending one request each at a peak 2x the average: 2 requests/s x 100 tokens
    wl = WorkloadSpec(name="w", model=MODEL, kind="serve", users_per_day=86400, requests_per_user_per_day=1,
                      peak_factor=2, output_tokens=100)
    assert wl.output_tokens_per_s_demand() == pytest.approx(200.0, rel=1e-12)


def test_study_targets_carry_their_precision():
    st = Study(name="p", title="t", kind="serving", question="q", model=MODEL, precision="bf16",
               targets=["cs3", TargetSpec(target="h200", precision="fp8"), "b200"], precisions={"b200": "fp4"},
               serving=ServingSpec(prompt_tokens=1, output_tokens=1, demand_tokens_per_s=1,
                                   min_tokens_per_s_per_user=1, batches=[1]))
    assert st.target_names == ["cs3", "h200", "b200"]
    assert [st.precision_for(t) for t in st.target_names] == ["bf16", "fp8", "fp4"]
    with pytest.raises(ValueError, match="not among the targets"):
        Study(name="p", title="t", kind="serving", question="q", model=MODEL, targets=["cs3"], precisions={"h100": "fp8"},
              serving=st.serving)
