"""The ``training`` study kind: a model trained on a token budget by a deadline; each target's size is swept
(systems or GPU nodes) and the answer is the cheapest size that meets the deadline, with scaling efficiency, cost
bands and weight streaming."""
from __future__ import annotations

import math

import numpy as np

from ..analytic import cost as C
from ..compare import compare_case
from ..errors import InputError
from ..scale import strong_scaling_efficiency
from ..pricing import no_wafer_interruptions_note
from ..targets import parse_target
from ..timing import stream
from ..workload import build_workload, resolve_model
from .markdown import Column, Table, fmt_num
from .plots import Marker, Plot, Series
from .study_plots import cost_vs_util, roofline
from .study_schema import Study
from .study_sources import prices_of
from .why import bisect, interval_text


def _baseline_label(sweep: list, tgt: str) -> str:
    """A scaling curve's legend: the target and the size its efficiency is relative to (each target's smallest size
    that ran: the curves do not share a baseline)."""
    rs = [r for r in sweep if r["family"] == tgt and r.get("scaling_efficiency_frac")]
    return f"{tgt} (vs {rs[0]['num_devices']:,} devices)" if rs else tgt


def _size_target(tgt: str, n: int, cat) -> tuple[str, int]:
    """``cs3`` + 4 -> ``cs3x4`` (systems); ``h100`` + 4 -> ``h100x32`` (4 nodes of 8 GPUs)."""
    t = parse_target(tgt, cat)
    if t.count is not None:
        raise InputError(f"training study target {tgt!r}: give the hardware without a count; the study sweeps "
                         "'training.sizes'")
    per = 1 if t.kind == "wafer" else int(t.device.gpus_per_node.si)
    return f"{tgt}x{n * per}", n * per


def training_body(st: Study, cat) -> dict:
    tr = st.training
    m = resolve_model(st.model_ref, cat)
    prices = prices_of(cat)
    sweep, cases, params_used = [], {}, {}
    for tgt in st.target_names:
        for n in tr.sizes:
            label, ndev = _size_target(tgt, n, cat)
            row, times, params = compare_case(m, label, phase="train", precision=st.precision_for(tgt),
                                              batch=tr.global_batch, context=tr.seq_len, output_tokens=None,
                                              train_tokens=tr.tokens, catalog=cat, prices=prices,
                                              uncertainty=st.cost.uncertainty, seed=st.cost.seed,
                                              overrides=st.cost.set)
            rec = row.to_row()
            idle = [x for x in row.notes if "left idle" in x]  # idle systems are priced: say why a row costs more
            rec.update(family=tgt, size=n, target=label,
                       notes=row.notes[-1] if row.run_s is None and row.notes else "; ".join(idle))
            rec["meets_deadline"] = bool(rec["run_s"] is not None and rec["run_s"] <= tr.deadline_days * 86400)
            rec["energy_j_per_run"] = (rec["energy_j_per_token"] * tr.tokens
                                       if rec["energy_j_per_token"] is not None else None)
            if times is not None:
                cases[(tgt, n)] = (times, params)
                params_used.setdefault(tgt, params)
                band = _run_band(times, params, st)
                rec.update(band)
            sweep.append(rec)
    # scaling efficiency: per-device throughput relative to the smallest size that ran, as `wseplan scale` computes it
    for tgt in st.target_names:
        rs = [r for r in sweep if r["family"] == tgt and r["tokens_per_s"]]
        if rs:
            ref = rs[0]["tokens_per_s"] / rs[0]["num_devices"]
            for r in rs:
                r["scaling_efficiency_frac"] = float(strong_scaling_efficiency(
                    tokens_per_s=r["tokens_per_s"], tokens_per_s_one=ref, num_systems=r["num_devices"]))
    plan = []
    for tgt in st.target_names:
        rs = [r for r in sweep if r["family"] == tgt and r["meets_deadline"]]
        priced = [r for r in rs if r["usd_per_run"] is not None]
        if priced:
            best = min(priced, key=lambda r: (r["usd_per_run"], r["num_devices"]))
            plan.append(dict(best, note=""))
        elif rs:  # no price (a rental-only part): the fewest devices that meet the deadline, without dollars
            best = min(rs, key=lambda r: r["num_devices"])
            plan.append(dict(best, note="meets the deadline, but has no price in the catalogs (fill its capex to rank "
                                        "it by cost)"))
        else:
            ran = [r for r in sweep if r["family"] == tgt and r["run_s"]]
            fastest = min(ran, key=lambda r: r["run_s"]) if ran else None
            plan.append({"family": tgt, "target": tgt, "meets_deadline": False,
                         "note": (f"misses the deadline at every swept size (fastest: {fastest['target']}, "
                                  f"{fmt_num(fastest['run_s'] / 86400)} days)") if fastest
                         else "no swept size runs (fit or time model)"})
    cols_run = [Column("target", "cluster"), Column("num_devices", "devices [count]"),
                Column("run_s", "time to train [days]", 86400.0), Column("tokens_per_s", "throughput [tokens/s]"),
                Column("model_flop_utilization_frac", "MFU [fraction]"), Column("power_w", "busy IT power [kW]", 1e3),
                Column("usd_per_run", "run cost [$M]", 1e6), Column("usd_per_run_p10", "P10 [$M]", 1e6),
                Column("usd_per_run_p90", "P90 [$M]", 1e6), Column("energy_j_per_run", "energy [MWh]", 3.6e9),
                Column("bottleneck", "bottleneck")]
    plan_t = Table(name="plan", title=f"Cheapest cluster per hardware that trains {fmt_num(tr.tokens / 1e9)}B tokens "
                                      f"within {fmt_num(tr.deadline_days)} days",
                   columns=cols_run + [Column("note", "note")], rows=plan)
    sweep_t = Table(name="size_sweep", title="Time, cost and scaling versus cluster size",
                    columns=cols_run[:3] + [Column("scaling_efficiency_frac", "scaling efficiency [fraction]")]
                    + cols_run[3:] + [Column("meets_deadline", "meets deadline (predicted)"), Column("notes", "notes")],
                    rows=sweep)
    plots = {}
    plots["scaling_efficiency"] = Plot(
        title=f"{m.name}: scaling efficiency vs cluster size (global batch {tr.global_batch} x {tr.seq_len} tokens)",
        xlabel="systems or 8-GPU nodes [count]", ylabel="per-device throughput vs smallest size [fraction]",
        logx=True, ylim_zero=True,
        series=[Series(label=_baseline_label(sweep, t),
                       x=[r["size"] for r in sweep if r["family"] == t and r.get("scaling_efficiency_frac")],
                       y=[r["scaling_efficiency_frac"] for r in sweep
                          if r["family"] == t and r.get("scaling_efficiency_frac")]) for t in st.target_names])
    plots["time_to_train"] = Plot(
        title=f"Time to train {fmt_num(tr.tokens / 1e9)}B tokens vs cluster size", logx=True, logy=True,
        xlabel="systems or 8-GPU nodes [count]", ylabel="time to train [days]",
        series=[Series(label=t, x=[r["size"] for r in sweep if r["family"] == t and r["run_s"]],
                       y=[r["run_s"] / 86400 for r in sweep if r["family"] == t and r["run_s"]]) for t in st.target_names],
        markers=[Marker(tr.deadline_days, f"deadline {fmt_num(tr.deadline_days)} days", axis="y")])
    plots["cost_bands"] = Plot(
        title="Monte Carlo run cost (P10-P90 shaded, median line) vs cluster size", logx=True, logy=True,
        xlabel="systems or 8-GPU nodes [count]", ylabel="cost of the run [$M]",
        series=[Series(label=t, x=[r["size"] for r in sweep if r["family"] == t and r.get("usd_per_run_p50")],
                       y=[r["usd_per_run_p50"] / 1e6 for r in sweep if r["family"] == t and r.get("usd_per_run_p50")],
                       low=[r["usd_per_run_p10"] / 1e6 for r in sweep if r["family"] == t and r.get("usd_per_run_p50")],
                       high=[r["usd_per_run_p90"] / 1e6 for r in sweep
                             if r["family"] == t and r.get("usd_per_run_p50")]) for t in st.target_names])
    if not st.cost.uncertainty:  # no Monte Carlo (cost.uncertainty 0): the nominal run cost, no band
        plots["cost_bands"] = Plot(
            title="Run cost (nominal inputs; cost.uncertainty is 0) vs cluster size", logx=True, logy=True,
            xlabel="systems or 8-GPU nodes [count]", ylabel="cost of the run [$M]",
            series=[Series(label=t, x=[r["size"] for r in sweep if r["family"] == t and r.get("usd_per_run")],
                           y=[r["usd_per_run"] / 1e6 for r in sweep if r["family"] == t and r.get("usd_per_run")])
                    for t in st.target_names])
    chosen = {p["family"]: (p.get("size"), p["target"]) for p in plan if p.get("size")}
    plots["cost_vs_utilization"], util_rows = cost_vs_util(st, cases, chosen, "usd_per_run", "run cost [$M]",
                                                            scale=1e6)
    stream_rows = []
    wafer_targets = [t for t in st.target_names if _is_wafer(t, cat)]
    if wafer_targets:
        plots["weight_streaming"], stream_rows = _stream_plot(st, m, cat, wafer_targets[0])
    achieved = {}
    for tgt in st.target_names:  # the predicted MFU at the size the plan picks (else the smallest size that ran)
        pick = next((p for p in plan if p.get("family") == tgt and p.get("model_flop_utilization_frac")), None)
        pick = pick or next((r for r in sweep if r["family"] == tgt and r.get("model_flop_utilization_frac")), None)
        if pick:
            lay = pick.get("layout") or {}  # each data-parallel replica (GPUs) or system (wafers) steps its share
            achieved[(tgt, tr.global_batch)] = {"mfu": pick["model_flop_utilization_frac"], "label": pick["target"],
                                                "replicas": lay.get("data_parallel") or lay.get("num_systems") or 1}
    plots["roofline"] = roofline(st, m, cat, phase="train", batches=[1, tr.global_batch], context=tr.seq_len,
                                  achieved=achieved)
    util_t = Table(name="cost_vs_utilization", title="Run cost versus utilisation (at each plan's cluster size)",
                   columns=[Column("target", "cluster"), Column("utilization_frac", "utilisation [fraction]"),
                            Column("value", "run cost [$M]", 1e6)], rows=util_rows)
    tables = [plan_t, sweep_t, util_t]
    if stream_rows:
        tables.append(Table(name="weight_streaming", title=f"Weight streaming on one {wafer_targets[0]} versus batch",
                            columns=[Column("batch", "batch [sequences]"), Column("tokens", "tokens per step [tokens]"),
                                     Column("forward_compute_s", "forward compute [s]"),
                                     Column("weight_load_s", "weights in, forward only [s] (a step streams them twice)"),
                                     Column("compute_s", "compute incl. recompute [s]"),
                                     Column("exposed_load_s", "exposed load [s]"), Column("step_s", "step [s]"),
                                     Column("activation_policy", "activations"), Column("bottleneck", "bottleneck")],
                            rows=stream_rows))
    answer = _training_answer(st, m, plan)
    # a side-by-side run time counts interruptions on GPU clusters only (audit28a M4: time, cost and compare say so)
    extra = ["Run times count job interruptions on GPU clusters (time to train = steps / goodput) and the throughput "
             "columns the steps alone; for the wafer rows " + no_wafer_interruptions_note(cat) + "."] \
        if wafer_targets and len(wafer_targets) < len(st.target_names) else []
    return {"answer": answer, "tables": tables, "plots": plots, "params": params_used, "assumption_notes": extra,
            "plot_captions": _TRAINING_CAPTIONS, "why": training_why(st, cat, sweep, plan, cases)}


def _run_cost(cases: dict, sweep: list[dict], tgt: str, deadline_s: float, mult: float = 1.0) -> float:
    """The cheapest run cost of ``tgt`` among its sizes that meet ``deadline_s``, with its capex x ``mult``: the
    cost model re-evaluated on the same time inputs (no time re-runs). inf when no size meets the deadline."""
    best = math.inf
    for r in sweep:
        if r["family"] != tgt or r["run_s"] is None or r["run_s"] > deadline_s or (tgt, r["size"]) not in cases:
            continue
        times, params = cases[(tgt, r["size"])]
        p = C.nominal(params)
        p["capex_usd"] = p["capex_usd"] * mult
        best = min(best, float(np.asarray(C.evaluate(p, times)["usd_per_run"]).ravel()[0]))
    return best


def training_why(st: Study, cat, sweep: list[dict], plan: list[dict], cases: dict) -> list[tuple[str, str]]:
    """Binding constraints, the deadline and capex at which the cheapest cluster changes, the prediction interval
    on the headline run cost (see :mod:`wseplan.report.why`)."""
    tr = st.training
    dl = tr.deadline_days * 86400.0
    binds = []
    for p in plan:
        if not p["meets_deadline"]:
            binds.append(f"{p['family']}: {p['note']}")
            continue
        smaller = [r for r in sweep if r["family"] == p["family"] and r["size"] < p["size"]]
        why = ("the deadline binds: the next smaller size takes "
               f"{fmt_num(smaller[-1]['run_s'] / 86400)} days" if smaller and smaller[-1]["run_s"] else
               "smaller sizes do not run (memory)" if smaller else "it is the smallest size swept")
        if smaller and smaller[-1]["run_s"] and smaller[-1]["run_s"] <= dl:
            why = "a smaller size meets the deadline but costs more per run"
        binds.append(f"{p['target']}: {why}; its step is {p['bottleneck']}-bound")
    out = [("Binding constraints", "; ".join(binds) + ".")]
    names = [t for t in st.target_names if _run_cost(cases, sweep, t, dl) < math.inf]
    flips = []
    if len(names) > 1:
        now = {t: _run_cost(cases, sweep, t, dl) for t in names}
        win = min(now, key=now.get)
        for t in names:
            other = min(v for u, v in now.items() if u != t)
            cap = _capex_of(cases, t)
            f = (lambda tt: lambda x: _run_cost(cases, sweep, tt, dl, x) - other)(t)
            if t == win:
                hi = 2.0
                while f(hi) < 0 and hi < 1e4:
                    hi *= 2
                if f(hi) >= 0:
                    x = bisect(f, 1.0, hi)
                    flips.append(f"{t} stays the cheapest up to ${fmt_num(x * cap / 1e6)}M per system "
                                 f"({fmt_num(x)}x the ${fmt_num(cap / 1e6)}M assumed).")
            elif f(0.0) < 0:
                x = bisect(f, 0.0, 1.0)
                flips.append(f"{t} becomes the cheapest below ${fmt_num(x * cap / 1e6)}M per system "
                             f"({fmt_num(100 * x)}% of the ${fmt_num(cap / 1e6)}M assumed).")
            else:
                flips.append(f"No capex makes {t} the cheapest: even free systems cost "
                             f"${fmt_num(f(0.0) + other)} per run in power, facility and site costs against "
                             f"{win}'s ${fmt_num(other)}.")
        days = sorted({r["run_s"] for r in sweep if r["run_s"] and r["family"] in names})
        prev, n_flips, changes = None, len(flips), []
        for d in days:  # the winner for deadlines in [d, next d)
            costs = {t: _run_cost(cases, sweep, t, d) for t in names}
            w = min(costs, key=costs.get)
            if costs[w] < math.inf and prev is not None and w != prev:
                changes.append((d, w, costs[w], prev))
            if costs[w] < math.inf:
                prev = w
        for i, (d, w, c, before) in enumerate(changes):  # each change holds until the next one
            upto = (f"from {fmt_num(d / 86400)} to {fmt_num(changes[i + 1][0] / 86400)} days" if i + 1 < len(changes)
                    else f"of {fmt_num(d / 86400)} days or more")
            flips.append(f"With a deadline {upto}, {w} is the cheapest (${fmt_num(c / 1e6)}M per run); "
                         f"just below {fmt_num(d / 86400)} days, {before}.")
        if len(flips) == n_flips and prev is not None:
            first = next(d for d in days if _run_cost(cases, sweep, prev, d) < math.inf)
            flips.append(f"No deadline changes the cheapest platform: {prev} is the cheapest for every deadline from "
                         f"{fmt_num(first / 86400)} days (its fastest swept size) up.")
    elif names:
        flips.append(f"Only {names[0]} meets the deadline: there is no ranking to flip.")
    else:
        flips.append("No target meets the deadline: there is no ranking to flip (a later deadline or larger sizes "
                     "would give one).")
    out.append(("What would flip the ranking", " ".join(flips)))
    ok = _ranked(plan)
    if ok:  # every ranked option's: the answer compares them, and a wafer's rests on no validated training row
        out.append(("Prediction interval", " ".join(interval_text(
            f"{b['target']}'s run cost", b["usd_per_run"], _run_cost_interval(b), device_kind="wafer"
            if _is_wafer(b["family"], cat) else "gpu", cat=cat, kind="train", inverse=False, prefix="$",
            source="from the step time's 80% interval as `wseplan time` prints it, cost inputs held; the Monte "
                   "Carlo's P10-P90 samples the same time error (its P10 and P90 at that interval) with the cost "
                   "inputs' ranges") for b in ok)))
    out.append(("List prices", "No vendor publishes a list price per training run for these systems; nothing to "
                               "compare."))
    return out


def _run_cost_interval(b: dict) -> dict | None:
    """The run cost's interval from the time record's step-time interval (a run's cost is its time x the hourly
    cost), or None where the record carries none."""
    lo, hi, step = b.get("interval_low"), b.get("interval_high"), b.get("step_s")
    if b.get("interval_metric") != "step_s" or lo is None or hi is None or not step:
        return None
    return {"interval_low": b["usd_per_run"] * lo / step, "interval_high": b["usd_per_run"] * hi / step}


def _ranked(plan: list[dict]) -> list[dict]:
    """The plan's priced targets that meet the deadline, cheapest run first (unpriced ones are named apart)."""
    return sorted([p for p in plan if p["meets_deadline"] and p["usd_per_run"] is not None], key=lambda p: p["usd_per_run"])


def _capex_of(cases: dict, tgt: str) -> float:
    """The capex per system the cost inputs of ``tgt`` assume [USD]."""
    params = next(v[1] for (t, _n), v in cases.items() if t == tgt)
    return params["capex_usd"].value


_TRAINING_CAPTIONS = {
    "scaling_efficiency": "Per-device throughput at each size divided by that at the smallest size, with the "
                          "global batch held fixed (strong scaling).",
    "time_to_train": "Wall-clock time for the whole token budget; the dashed line is the deadline.",
    "cost_bands": "P10-P90 of the Monte Carlo over the cost inputs' ranges and the model's time error (its P10 and "
                  "P90 at the 80% interval `wseplan time` prints); the line is the median (the tables' run cost is "
                  "the prediction, the error's most likely value).",
    "cost_vs_utilization": "Amortised run cost when the cluster is busy for this share of its life.",
    "weight_streaming": "One system: a pass's compute grows with the batch while its weight stream from MemoryX "
                        "does not; above the dotted line each layer's compute hides its load. The step adds the "
                        "backward pass, recompute or activation spill, and the exposed optimizer update.",
    "roofline": "Markers: the FLOP/s per device wseplan predicts (MFU x peak) at the cluster size the plan picks. "
                "Dashed: the roofs of one device, an upper bound (FLOPs per weight byte read); the lines mark a "
                "training step at batch 1 and at the global batch on one device. A wafer's weights arrive over "
                "the MemoryX stream, whose roof sets the batch a system needs.",
}


def _run_band(times, params, st: Study) -> dict:
    """P10/P50/P90 of the run cost from the Monte Carlo over cost inputs."""
    if not st.cost.uncertainty:
        return {}
    pct = C.monte_carlo(params, lambda p: C.evaluate(p, times), n=st.cost.uncertainty, seed=st.cost.seed,
                        metrics=["usd_per_run"])[0]
    return {"usd_per_run_p10": pct.p10, "usd_per_run_p50": pct.p50, "usd_per_run_p90": pct.p90}


def _training_answer(st: Study, m, plan: list[dict]) -> str:
    tr = st.training
    head = (f"To train {m.name} on {fmt_num(tr.tokens / 1e9)}B tokens within {fmt_num(tr.deadline_days)} days "
            f"(global batch {tr.global_batch} x {tr.seq_len} tokens), ")
    ok = _ranked(plan)
    free = [p for p in plan if p["meets_deadline"] and p["usd_per_run"] is None]
    unpriced = [f"{p['target']} meets the deadline in {fmt_num(p['run_s'] / 86400)} days "
                f"({fmt_num(p['energy_j_per_run'] / 3.6e9)} MWh) but has no price in the catalogs." for p in free]
    if not ok:
        return " ".join([head + ("no priced cluster" if free else "no swept cluster") + " meets the deadline."]
                        + unpriced + [f"{p['family']}: {p['note']}." for p in plan if not p["meets_deadline"]])
    b = ok[0]
    band = (f" (predicted; Monte Carlo P10 ${fmt_num(b['usd_per_run_p10'] / 1e6)}M, median "
            f"${fmt_num(b['usd_per_run_p50'] / 1e6)}M, P90 ${fmt_num(b['usd_per_run_p90'] / 1e6)}M over the model's time "
            "error and the cost inputs)"
            if b.get("usd_per_run_p10") is not None else "")  # no band with cost.uncertainty 0
    parts = [head + f"the cheapest option is {b['target']} ({b['num_devices']} devices): "
             f"{fmt_num(b['run_s'] / 86400)} days, ${fmt_num(b['usd_per_run'] / 1e6)}M{band}, "
             f"{fmt_num(b['energy_j_per_run'] / 3.6e9)} MWh."]
    for p in ok[1:]:
        parts.append(f"{p['target']} takes {fmt_num(p['run_s'] / 86400)} days for ${fmt_num(p['usd_per_run'] / 1e6)}M "
                     f"({fmt_num(p['energy_j_per_run'] / 3.6e9)} MWh).")
    parts += unpriced
    for p in plan:
        if not p["meets_deadline"]:
            parts.append(f"{p['family']} {p['note']}.")
    return " ".join(parts)


def _is_wafer(tgt: str, cat) -> bool:
    return parse_target(tgt, cat).kind == "wafer"


def _stream_plot(st: Study, m, cat, tgt: str):
    """Weight streaming on one system versus batch, from :func:`wseplan.timing.stream` (the plan chain)."""
    tr = st.training
    t = parse_target(f"{tgt}x1", cat)
    prec = st.precision_for(tgt)
    w = build_workload(m, cat, precision=prec, phase="train", batch=1, context=tr.seq_len)
    rows = []
    threshold = None
    for b in tr.stream_batches:
        r = stream(m, t, precision=prec, batch=b, context=tr.seq_len, catalog=cat)
        load = w.total_weight_bytes / r.stream_bandwidth_bytes_per_s  # one pass over every layer's weights
        fwd = (r.compute_s - r.recompute_s) / 3.0  # forward share of forward + backward (2x forward)
        rows.append({"batch": b, "tokens": r.tokens_per_step, "forward_compute_s": fwd, "weight_load_s": load,
                     "compute_s": r.compute_s, "exposed_load_s": r.exposed_load_s, "step_s": r.step_s,
                     "activation_policy": r.activation_policy, "bottleneck": r.bottleneck})
        threshold = r.min_tokens_compute_bound / tr.seq_len
    xs = [r["batch"] for r in rows]
    series = [Series(label="forward compute, one pass", x=xs, y=[r["forward_compute_s"] for r in rows]),
              Series(label="weight load, one pass (MemoryX stream)", x=xs, y=[r["weight_load_s"] for r in rows],
                     style="--"),
              Series(label="exposed load per step", x=xs, y=[max(r["exposed_load_s"], 1e-6) for r in rows], style=":"),
              Series(label="step (fwd + bwd + recompute/spill + optimizer)", x=xs, y=[r["step_s"] for r in rows])]
    markers = [Marker(threshold, f"load hidden above batch {fmt_num(threshold)}")] if threshold else []
    plot = Plot(title=f"{m.name} on one {tgt}: weight streaming vs batch ({tr.seq_len}-token sequences)",
                xlabel="batch per system [sequences]", ylabel="time per step [s]", logx=True, logy=True,
                series=series, markers=markers, legend_loc="upper left")
    return plot, rows
