"""The ``server`` study kind: an MLPerf-style server scenario. Requests arrive as a Poisson process at a rate;
every request's TTFT at a percentile and its TPOT must stay within limits. The answer is the highest rate that
meets them, found by bisection over the rate with :func:`wseplan.serving.serve` (``rate``, ``ttft_limit_s``,
``tpot_limit_s``, ``percentile``): at a rate, the cheapest point of the replica search that carries it and meets
both limits exists or not, and the TTFT percentiles grow with the rate. Each target is evaluated with the layout
the study gives (as the published run used it) and with the best layout the search finds. A ``reference``
validation row (catalogs/validation/*.csv) holds the published figure to compare with.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..catalog.load import default_catalog_dir
from ..errors import InputError
from ..serving import serve, tpot_for_limit
from ..targets import parse_target
from ..validate import read_cases
from ..workload import resolve_model
from .markdown import Column, Table, fmt_num
from .plots import Marker, Plot, Series
from .study_schema import Study
from .study_sources import prices_of
from .why import envelope_of, interval_text, validated_band


#: the loads (share of the highest rate) at which the TTFT-versus-rate curve is drawn
_CURVE_FRACS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)
_REL_TOL = 1e-4  # the highest rate is found to 0.01%


def reference_row(row_id: str, cat=None):
    """The validation row ``row_id`` from the bundled validation CSVs (a :class:`wseplan.validate.Case`): a measured
    serving throughput (an inference row whose metric is ``tokens_per_s``), the quantity the study's replica is set
    against; another row (a training FLOP rate, a per-user speed) is refused with its metric named."""
    folder = Path(default_catalog_dir()) / "validation"
    for path in sorted(folder.glob("*.csv")):
        for case in read_cases(path):
            if case.id == row_id:
                if not case.category.endswith("-infer") or case.metric != "tokens_per_s":
                    raise InputError(f"server.reference: row {row_id} is a {case.category} {case.metric} figure ({case.value:g} "
                                     f"{case.unit}); name an inference row whose metric is tokens_per_s (a server's output "
                                     "tokens/s)")
                return case
    raise InputError(f"server.reference: no validation row {row_id!r} in {folder}; name a row id of its CSVs")


def max_rate(m, tgt: str, st: Study, cat, *, layout: dict | None = None) -> dict:
    """The highest request rate [requests/s] at which some point of ``tgt`` meets the study's limits, and the point
    there: ``{rate_per_s, point, capacity_per_s, evaluations}`` (``rate_per_s`` 0 when no rate meets them)."""
    sv = st.server
    kw = dict(precision=st.precision_for(tgt), input_tokens=sv.prompt_tokens, output_tokens=sv.output_tokens,
              batches=sv.batches, percentile=sv.percentile, catalog=cat, prices=False, layout=layout)
    base = serve(m, tgt, **kw)
    cap = max((p.capacity_requests_per_s for p in base.points if tpot_for_limit(p) <= sv.tpot_limit_s), default=0.0)
    n = 1

    def meets(rate: float):
        nonlocal n
        n += 1
        res = serve(m, tgt, rate=rate, ttft_limit_s=sv.ttft_limit_s, tpot_limit_s=sv.tpot_limit_s, **kw)
        return res.chosen if res.chosen is not None and res.chosen.meets_sla else None

    lo, hi = cap * 1e-6, cap
    if cap <= 0 or meets(lo) is None:
        return {"rate_per_s": 0.0, "point": None, "capacity_per_s": cap, "evaluations": n, "kw": kw}
    while hi - lo > _REL_TOL * hi:  # lo meets the limits, hi does not (the rate must stay below the capacity)
        mid = 0.5 * (lo + hi)
        if meets(mid) is not None:
            lo = mid
        else:
            hi = mid
    return {"rate_per_s": lo, "point": meets(lo), "capacity_per_s": cap, "evaluations": n, "kw": kw}


def server_body(st: Study, cat) -> dict:
    sv = st.server
    m = resolve_model(st.model_ref, cat)
    prices_of(cat)  # the report states the prices date; nothing here is priced
    ref = reference_row(sv.reference, cat) if sv.reference else None
    unknown = [k for k in sv.reference_sources if k not in cat.sources]
    if unknown:
        raise InputError(f"server.reference_sources: unknown source id {unknown[0]!r}; add it to catalogs/sources.yaml "
                         "or name a source of the catalog")
    out_tok = sv.output_tokens
    rows, curve_series, found = [], [], {}
    for tgt in st.target_names:
        variants = [("as given", sv.layout)] if sv.layout else []
        variants.append(("best layout searched", None))
        for how, lay in variants:
            r = max_rate(m, tgt, st, cat, layout=lay)
            p = r["point"]
            found[(tgt, how)] = r
            row = {"target": tgt, "precision": st.precision_for(tgt), "layout_source": how,
                   "layout": _layout_text(p.layout) if p else "", "batch": p.batch if p else None,
                   "rate_per_s": r["rate_per_s"], "tokens_per_s": r["rate_per_s"] * out_tok,
                   "ttft_s": p.ttft_at_percentile_s if p else None, "tpot_s": p.tpot_s if p else None, "tpot_at_percentile_s": tpot_for_limit(p) if p else None,
                   "utilization_frac": p.utilization_frac if p else None, "bottleneck": p.bottleneck if p else None,
                   "published_tokens_per_s": ref.value if ref is not None else None}
            if ref is not None and r["rate_per_s"] > 0:
                row["ratio"] = row["tokens_per_s"] / ref.value
            rows.append(row)
            if p is not None:
                xs, ys = [], []
                for f in _CURVE_FRACS:  # the best TTFT among the points that carry the load within the TPOT limit
                    res = serve(m, tgt, rate=f * r["rate_per_s"], **r["kw"])
                    ok = [q.ttft_at_percentile_s for q in res.points if tpot_for_limit(q) <= sv.tpot_limit_s]
                    if ok:
                        xs.append(f * r["rate_per_s"] * out_tok)
                        ys.append(min(ok))
                curve_series.append(Series(label=f"{tgt}, {how}", x=xs, y=ys))
    pct = fmt_num(sv.percentile)
    table = Table(
        name="capacity", title=f"Highest rate meeting TTFT p{pct} <= {fmt_num(sv.ttft_limit_s)} s and TPOT <= "
                               f"{fmt_num(sv.tpot_limit_s * 1e3)} ms (Poisson arrivals)",
        note=f"Bisection over the offered rate to {fmt_num(_REL_TOL * 100)}%; at each rate the replica search's "
             "cheapest point that carries it and meets both limits. TPOT is the model's per-token time of the running "
             "batch: its mean, and at the percentile (the requests held vary with the random arrivals; the limit applies to the "
             "percentile).",
        columns=[Column("target", "target"), Column("precision", "precision"), Column("layout_source", "layout from"),
                 Column("layout", "layout"), Column("batch", "batch [requests per engine]"),
                 Column("rate_per_s", "rate [requests/s]"), Column("tokens_per_s", "output [tokens/s]"),
                 Column("published_tokens_per_s", "published [tokens/s]"), Column("ratio", "predicted / published [x]"),
                 Column("ttft_s", f"TTFT p{pct} [ms]", 1e-3), Column("tpot_s", "TPOT mean [ms]", 1e-3),
                 Column("tpot_at_percentile_s", f"TPOT p{pct} [ms]", 1e-3),
                 Column("utilization_frac", "load [fraction of capacity]"), Column("bottleneck", "bottleneck")],
        rows=rows)
    markers = [Marker(sv.ttft_limit_s, f"TTFT limit {fmt_num(sv.ttft_limit_s)} s", axis="y")]
    if ref is not None:
        markers.append(Marker(ref.value, f"published {fmt_num(ref.value)} tokens/s ({ref.id})"))
    plot = Plot(title=f"{m.name}: TTFT p{pct} versus offered load", xlabel="offered load [output tokens/s]",
                ylabel=f"TTFT p{pct} [s]", series=curve_series, markers=markers, logy=True)
    extra = list(sv.reference_sources) + ["mlperf-loadgen-conf" if "mlperf-loadgen-conf" in cat.sources else ""]
    return {"answer": _answer(st, m, rows, ref), "tables": [table], "plots": {"ttft_vs_load": plot}, "params": {},
            "plot_captions": {"ttft_vs_load": "TTFT at the percentile of the scenario for offered loads up to the "
                                              "highest rate that meets the limits (the replica search's point at each "
                                              "load, TPOT limit kept). The vertical line is the published figure."},
            "extra_sources": [s for s in extra if s], "why": _why(st, m, cat, rows, found, ref)}


def _layout_text(layout: dict) -> str:
    if "num_wafers" in layout:
        return f"{layout['num_wafers']} wafers"
    n = layout.get("data_parallel", 1)
    return (f"TP{layout.get('tensor_parallel', 1)} x PP{layout.get('pipeline_parallel', 1)} x "
            f"{n} engine{'s' if n != 1 else ''}")


def _answer(st: Study, m, rows: list[dict], ref) -> str:
    sv = st.server
    head = (f"Serving {m.name} with Poisson arrivals, {sv.prompt_tokens}-token prompts and {sv.output_tokens}-token "
            f"answers under TTFT p{fmt_num(sv.percentile)} <= {fmt_num(sv.ttft_limit_s)} s and TPOT <= "
            f"{fmt_num(sv.tpot_limit_s * 1e3)} ms: ")
    parts = []
    for r in rows:
        if not r["rate_per_s"]:
            parts.append(f"{r['target']} ({r['layout_source']}) meets the limits at no rate")
            continue
        parts.append(f"{r['target']} ({r['precision']}, {r['layout']}, {r['layout_source']}) carries at most "
                     f"{fmt_num(r['rate_per_s'])} requests/s = {fmt_num(r['tokens_per_s'])} output tokens/s "
                     f"(TTFT p{fmt_num(sv.percentile)} {fmt_num(r['ttft_s'] * 1e3)} ms, TPOT p{fmt_num(sv.percentile)} "
                     f"{fmt_num(r['tpot_at_percentile_s'] * 1e3)} ms)"
                     + (f", {fmt_num(r['ratio'])}x the published {fmt_num(ref.value)} tokens/s ({ref.id})"
                        if ref is not None and r.get("ratio") else ""))
    return head + "; ".join(parts) + "."


def _why(st: Study, m, cat, rows, found, ref) -> list[tuple[str, str]]:
    sv = st.server
    binds, flips = [], []
    for (tgt, how), r in found.items():
        p = r["point"]
        if p is None:
            binds.append(f"{tgt} ({how}): no point meets TPOT <= {fmt_num(sv.tpot_limit_s * 1e3)} ms with its own "
                         "prefill inside the TTFT limit")
            continue
        above = serve(m, tgt, rate=r["rate_per_s"] * (1 + 10 * _REL_TOL), **r["kw"])
        carries = [q for q in above.points if tpot_for_limit(q) <= sv.tpot_limit_s]
        what = ("the TTFT limit binds: above this rate the queue wait pushes TTFT p"
                f"{fmt_num(sv.percentile)} past {fmt_num(sv.ttft_limit_s)} s" if carries else
                "the TPOT limit binds: above this rate no point that keeps TPOT within the limit has capacity left")
        binds.append(f"{tgt} ({how}): {what}; the step is {p.bottleneck}-bound at batch {p.batch}")
        if how == "best layout searched":
            for name, limits in (("without the TTFT limit", dict(ttft_limit_s=None)),
                                 ("with twice the TTFT limit", dict(ttft_limit_s=2 * sv.ttft_limit_s))):
                alt = max_rate(m, tgt, st.model_copy(update={"server": sv.model_copy(update=limits)}), cat)
                flips.append(f"{tgt} {name}: {fmt_num(alt['rate_per_s'] * sv.output_tokens)} output tokens/s "
                             f"({fmt_num(alt['rate_per_s'] / r['rate_per_s'])}x)")
    out = [("Binding constraints", "; ".join(binds) + ".")]
    out.append(("What would move the answer", "; ".join(flips) + "." if flips else
                "One target: there is no ranking to flip."))
    best = max(rows, key=lambda r: r["tokens_per_s"])
    if best["tokens_per_s"]:
        kind = parse_target(best["target"], cat).kind
        p = found[(best["target"], best["layout_source"])]["point"]
        env = envelope_of(m, best["target"], phase="serve", precision=best["precision"], software=None, catalog=cat,
                          devices=p.devices_per_replica if p is not None else None)
        text = interval_text(f"{best['target']}'s highest rate", best["tokens_per_s"], None, device_kind=kind, cat=cat,
                             inverse=False, unit=" output tokens/s", envelope=env)
        if ref is not None:
            gap = best["tokens_per_s"] / ref.value
            cite = f"; source {', '.join(sv.reference_sources[:1])}" if sv.reference_sources else ""
            text += (f" The published figure ({ref.id}: {fmt_num(ref.value)} {ref.unit}, {ref.source.split(';')[0]}"
                     f"{cite}) "
                     f"is {fmt_num(1 / gap)}x the prediction" + (" — outside that band: the model is pessimistic "
                                                                  "for this engine" if not _inside(gap, kind, cat)
                                                                  else ", inside that band") + ".")
        out.append(("Prediction interval", text))
    out.append(("List prices", "Not a cost question: this study prices nothing, so no list price is compared."))
    return out


def _inside(ratio: float, kind: str, cat) -> bool:
    band = validated_band(cat, kind)
    return band is not None and abs(ratio - 1.0) <= band[0] and math.isfinite(ratio)
