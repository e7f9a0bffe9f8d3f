"""`wseplan serve MODEL --target T`: one serving operating point (TTFT, TPOT, tokens/s, $/M tokens) and the frontier.

Calls :func:`wseplan.serving.serve` (the same function as ``wseplan.serve``), so the JSON record is
``ServeResult.to_record()`` plus the provenance. The record is documented in docs/cli-output.md.
"""
from __future__ import annotations

import math
from typing import Optional

import typer

from ..errors import InputError, percentile_problem
from ..records import layout_label
from ..report.formats import fmt_bool, fmt_field, fmt_num
from . import options as O
from .output import Rendered, Section, check_format, render



def serve_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b) or a config.json path."),
    target: str = O.target_opt("<hardware key>[x<N>]: cs3, h200, cs3x4, h100x8 … (no count: the replica is sized by "
                               "searching replica sizes)."),
    precision: str = O.precision_opt(),
    software: Optional[str] = O.software_opt(),
    input_len: Optional[int] = typer.Option(None, "--input-len", "--input-tokens", help="Prompt tokens per request "
                                            "(mean; default 2,048, the catalog's serving request, as time/cost/compare)."),
    output_len: Optional[int] = typer.Option(None, "--output-len", "--output-tokens", help="Answer tokens per request "
                                             "(mean; default 256)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Requests one replica runs at once (its batch "
                                              "slots); default: every power of two up to the engine's largest "
                                              "batch, the concurrency that fills the KV cache, and the chosen one "
                                              "refined by bisection to the next power of two. Without --rate "
                                              "or --utilization: N users in a closed loop, each sending the next "
                                              "request as the last ends (the point `wseplan time --phase serve "
                                              "--batch N` gives, its layout included, on a target with a count). "
                                              "Above what the KV cache holds, the engine runs the "
                                              "largest batch that fits and the other requests queue for it (there `time` and `cost` "
                                              "--batch N say the batch does not fit: they ask for N in flight)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Offered load of the whole target [requests/s]; default: "
                                         "each point at --utilization of its capacity. May be given with --concurrency."),
    ttft_limit: Optional[float] = typer.Option(None, "--ttft-limit", help="Time to first token limit at --percentile [s]."),
    tpot_limit: Optional[float] = typer.Option(None, "--tpot-limit", help="Time per output token limit at --percentile "
                                               "of the requests [s]."),
    min_speed: Optional[float] = O.min_speed_opt("Without --rate, --concurrency and limits: the per-user speed the "
                                                 "chosen point keeps at its load [tokens/s per user] (default: the "
                                                 "catalog's default_min_tokens_per_s_per_user, 20, the floor of cost "
                                                 "and compare, which judge it with the slots full and so may take a "
                                                 "smaller batch)."),
    percentile: float = typer.Option(95.0, "--percentile", help="Percentile of the TTFT and TPOT limits, in percent (95 for p95; from 1 to below 100)."),
    speculative: Optional[str] = O.speculative_opt(),
    kv_precision: Optional[str] = O.kv_precision_opt(),
    draft_tokens: Optional[int] = O.draft_tokens_opt(),
    acceptance: Optional[float] = O.acceptance_opt(),
    utilization: Optional[float] = typer.Option(None, "--utilization", help="Without --rate: the load of each point as "
                                                "a share of its capacity, in (0, 1) (default 0.9; with --concurrency "
                                                "it turns the closed loop into random arrivals at that load)."),
    set_: Optional[list[str]] = O.set_opt(),
    prices: Optional[list[str]] = O.prices_opt(),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """One serving operating point: TTFT percentiles, TPOT, tokens/s per user and per replica, $/M tokens, and the
    Pareto frontier of all-in $/M output tokens vs tokens/s per user.

    Without --concurrency, --rate or limits it reports the highest-throughput point (per device) that gives every
    user at least --min-speed tokens/s at its load (default 20, the floor of cost and compare, which judge it with the
    slots full); with limits or a rate, the cheapest point
    that carries the rate and meets the limits.

    Example: wseplan serve llama-70b --target cs3 --tpot-limit 0.01 ;
    wseplan serve llama-3-8b --target h200x1 --concurrency 1 --speculative llama-3.2-1b --draft-tokens 4 --acceptance 0.8 ;
    wseplan serve llama-70b --target h200x8 --precision fp8 --rate 5 --ttft-limit 2 --percentile 99 --format json
    """
    from ..analytic.cost import load_prices, parse_overrides
    from ..serving import serve

    check_format(fmt)
    _check_inputs(input_len, output_len, concurrency, rate, ttft_limit, tpot_limit, percentile, draft_tokens,
                  acceptance, utilization)
    cat = O.load_catalog(catalog)
    opts = O.with_kv(O.spec_options(speculative, draft_tokens, acceptance, cat), kv_precision)
    with O.spec_flag_errors():
        res = serve(model, target, precision=precision, software=software, input_tokens=input_len,
                    output_tokens=output_len, concurrency=concurrency, rate=rate, ttft_limit_s=ttft_limit,
                    tpot_limit_s=tpot_limit, percentile=percentile, utilization=utilization, options=opts or None,
                    catalog=cat, prices=load_prices(list(prices or []), catalog=cat), overrides=parse_overrides(set_),
                    min_tokens_per_s_per_user=min_speed)
    render_serve(res, fmt, list(prices or []))


def _check_inputs(input_len, output_len, concurrency, rate, ttft_limit, tpot_limit, percentile, draft_tokens,
                  acceptance, utilization) -> None:
    """One-line errors naming the flag (before any catalog is read)."""
    from ..workload import MAX_BATCH, MAX_CONTEXT, check_positive_int

    for flag, v in (("--input-len", input_len), ("--output-len", output_len)):
        if v is not None:
            check_positive_int(v, flag, MAX_CONTEXT)
    if concurrency is not None:
        check_positive_int(concurrency, "--concurrency", MAX_BATCH)
    for flag, v in (("--rate", rate), ("--ttft-limit", ttft_limit), ("--tpot-limit", tpot_limit)):
        if v is not None and not (math.isfinite(v) and 0 < v < 1e12):
            raise InputError(f"{flag}: must be a positive number below 1e12, got {v!r}")
    if percentile_problem(percentile):
        raise InputError(f"--percentile: {percentile_problem(percentile)}")
    O.check_spec_flags(draft_tokens, acceptance)
    if utilization is not None:
        if rate is not None:
            raise InputError("--utilization: applies only without --rate (the rate sets the load)")
        if not (math.isfinite(utilization) and 0 < utilization < 1):
            raise InputError(f"--utilization: must be in (0, 1), got {utilization!r}")


def _pct(res) -> str:
    return f"p{res.percentile:g}"


def _speculative_text(res) -> str:
    sp = res.speculative
    if not sp:
        return "off"
    acc = res.chosen.accepted_tokens_per_step if res.chosen else None
    if acc is not None and acc <= 1.0:  # the chosen point decodes plainly (the draft does not fit beside it, say)
        return f"off at this point ({sp['draft_model']} does not draft here: see the note)"
    text = (f"{sp['draft_model']} drafts {fmt_num(sp['draft_tokens'])} tokens, per-token acceptance "
            f"{fmt_num(100 * sp['acceptance_frac'])}%")
    return text + (f": {fmt_num(acc)} tokens per step" if acc is not None else "")


def _demand_text(res) -> str:
    from ..serving import occupancy

    c = res.chosen
    load = (f"{fmt_num(res.rate_per_s)} requests/s offered" if res.rate_per_s is not None else
            ("every slot busy: more users than the KV cache holds queue for it (see the note)"
             if any("more than the KV cache holds" in n for n in res.notes) else "every slot busy: the users in a closed loop")
            if c is not None and occupancy(c) >= 1.0 else
            f"{fmt_field('utilization_frac', occupancy(c))} of each point's slots held" if c is not None else
            "no rate given")
    lim = [f"TTFT {_pct(res)} <= {fmt_field('ttft_s', res.ttft_limit_s)}"] if res.ttft_limit_s is not None else []
    lim += [f"TPOT {_pct(res)} <= {fmt_field('tpot_s', res.tpot_limit_s)}"] if res.tpot_limit_s is not None else []
    return f"{load}; " + (", ".join(lim) if lim else "no limits")


def _choice(res) -> str:
    if not res.chosen.meets_sla:
        return "no point meets the limits: the closest to them"
    if res.rate_per_s is not None or res.ttft_limit_s is not None or res.tpot_limit_s is not None:
        return "the cheapest point that carries the load and meets the limits"
    return "the highest throughput per device"


def summary_rows(res) -> list[dict]:
    """The chosen point as ``{quantity, value}`` rows (human units)."""
    rows = [("fits", fmt_bool(res.fits)), ("load and limits", _demand_text(res))]
    c = res.chosen
    if c is not None:
        pct = _pct(res)
        rows += [
            ("chosen", _choice(res)),
            ("devices", f"{fmt_num(c.num_devices)} ({fmt_num(c.num_replicas)} replica{'s' if c.num_replicas != 1 else ''}"
                        f" of {fmt_num(c.devices_per_replica)})"),
            ("layout", " ".join(f"{k}={v}" for k, v in c.layout.items())),
            ("batch (request slots per replica)", fmt_num(c.batch)),
            ("requests held on average (running batch)", fmt_num(c.running_batch) if c.running_batch is not None else "–"),
            ("TTFT p50", fmt_field("ttft_p50_s", c.ttft_p50_s)),
            *([(f"TTFT {pct}", fmt_field("ttft_s", c.ttft_at_percentile_s))] if res.percentile != 50 else []),
            ("TTFT mean", fmt_field("ttft_s", c.ttft_s)),
            ("TTFT without queueing (own prefill)", fmt_field("ttft_s", c.ttft_own_s)),
            ("TPOT (time per output token)", fmt_field("tpot_s", c.tpot_s)),
            *([(f"TPOT {pct}", fmt_field("tpot_s", c.tpot_at_percentile_s))]
              if c.tpot_at_percentile_s is not None and c.tpot_at_percentile_s != c.tpot_s else []),
            ("tokens/s per user", fmt_num(c.tokens_per_s_per_user)),
            ("output tokens/s", fmt_num(c.tokens_per_s)),
            ("requests/s", fmt_num(c.requests_per_s)),
            ("capacity [requests/s]", fmt_num(c.capacity_requests_per_s)),
            ("utilization", fmt_field("utilization_frac", c.utilization_frac)),
            ("bottleneck", c.bottleneck or "–"),
            ("software", res.software),
            ("speculative", _speculative_text(res)),
            ("$/M output tokens, all in", fmt_field("all_in_usd_per_mtok", c.all_in_usd_per_mtok)),
            ("$/M output tokens (decode side)", fmt_field("output_usd_per_mtok", c.output_usd_per_mtok)),
            ("$/M input tokens", fmt_field("input_usd_per_mtok", c.input_usd_per_mtok)),
            ("cost per hour", fmt_field("usd_per_hour", c.usd_per_hour)),
        ]
        if res.ttft_limit_s is not None or res.tpot_limit_s is not None:
            rows.append(("meets the limits", fmt_bool(c.meets_sla)))
    return [{"quantity": q, "value": v} for q, v in rows]


def frontier_rows(res) -> list[dict]:
    """The Pareto frontier (numbers in SI; the table picks one display unit per column)."""
    key = f"ttft_{_pct(res)}_s"
    ch = res.chosen
    return [{"num_devices": p.num_devices, "num_replicas": p.num_replicas, "layout": layout_label(p.layout),
             "batch": p.batch, "tokens_per_s_per_user": p.tokens_per_s_per_user,
             "all_in_usd_per_mtok": p.all_in_usd_per_mtok, key: p.ttft_at_percentile_s, "tpot_s": p.tpot_s,
             "tokens_per_s": p.tokens_per_s, "chosen": fmt_bool(ch is not None and p == ch)} for p in res.frontier]


def csv_rows(res) -> list[dict]:
    """One row per evaluated point: the inputs, the point's fields (layout as text), ``chosen`` and ``on_frontier``."""
    spec = res.speculative or {}
    head = dict(model=res.model, target=res.target, hardware=res.hardware, software=res.software,
                precision=res.precision, input_tokens=res.input_tokens, output_tokens=res.output_tokens,
                percentile=res.percentile, rate_per_s=res.rate_per_s, ttft_limit_s=res.ttft_limit_s,
                tpot_limit_s=res.tpot_limit_s, draft_model=spec.get("draft_model"), draft_tokens=spec.get("draft_tokens"),
                acceptance_frac=spec.get("acceptance_frac"))
    if not res.points:
        return [{**head, "fits": False}]
    rows = []
    for p in res.points:
        d = p.model_dump(mode="json")
        d["layout"] = " ".join(f"{k}={v}" for k, v in p.layout.items())
        rows.append({**head, "fits": True, "chosen": p == res.chosen,
                     "on_frontier": any(p == f for f in res.frontier), **d})
    return rows


def render_serve(res, fmt: str, prices: list[str] | None = None) -> None:
    """The serve record: json ``to_record()`` + provenance, csv the points, table/md the chosen point and the
    frontier."""
    title = (f"Serve: {res.model} on {res.target} ({res.precision}, {res.software}, {res.input_tokens} prompt / "
             f"{res.output_tokens} answer tokens)")
    sections = [Section(title, summary_rows(res))]
    if res.chosen is not None:
        sections.append(Section(f"Pareto frontier: all-in $/M output tokens vs tokens/s per user (TTFT {_pct(res)})",
                                frontier_rows(res)))
    render(Rendered(record=res.to_record(), csv_rows=csv_rows(res), heading=title, sections=sections,
                    notes=list(res.notes), prices=list(prices or [])), fmt)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
