"""Same question, same number (issue 10): every command and API path that answers "does it fit, how fast, what
does it cost" gives the planning chain's number, for random catalog models, targets, phases, batches and contexts.

Paths checked against :func:`wseplan.plan.plan` (relative difference <= 1e-9, None for None):

* :func:`wseplan.timing.predict_time` and ``wseplan time --format json``; :func:`wseplan.fit.fit` (``wseplan fit``);
* :func:`wseplan.compare.compare_case` (a ``wseplan compare`` row: times and prices);
* a one-row sweep: :func:`wseplan.sweep.evaluate_task` on :func:`wseplan.sweep.plan_sweep` of a sweep file
  holding just that configuration (GPU layouts given as the plan chose them);
* :func:`wseplan.costing.cost` and ``wseplan cost --format json``: the time inputs and headline, and
  :func:`wseplan.costing.cost_columns` (the array cost of sweeps, fleet and reports) on the same arrays;
* training: :func:`wseplan.scale.scaling_rows` (a ``wseplan scale`` point);
* serving: :func:`wseplan.operating.replica_options` (the replica model of ``fleet`` and reports) and the
  ``batch_sweep`` table of a serving study (:func:`wseplan.report.study.run_study`);
* wafer training: :func:`wseplan.fit.fit`'s streaming window equals :func:`wseplan.timing.stream`'s.

And nothing that does not fit carries a time or a price on any path (the cost API refuses it in one line).

Each property runs 200 deterministic examples (``derandomize=True``) over small and medium catalog models so
that the suite stays fast; big models on few devices make the "does not fit" cases.
"""
from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from wseplan import sweep as S
from wseplan.analytic import cost as C
from wseplan.catalog import load_catalog
from wseplan.catalog.precision import device_rates, training_refusal
from wseplan.cli import main
from wseplan.compare import compare_case
from wseplan.costing import HEADLINE, cost, cost_columns, params_for
from wseplan.errors import InputError
from wseplan.fit import fit
from wseplan.plan import default_sizes, evaluate, normalise_phase, plan, setup
from wseplan.report.study import CostSpec, ServingSpec, Study, run_study
from wseplan.scale import scaling_rows
from wseplan.plan import layout_columns
from wseplan.operating import replica_options
from wseplan.serving import DEFAULT_UTILIZATION
from wseplan.targets import parse_target
from wseplan.timing import predict_time, stream

CAT = load_catalog()
PRICES = C.load_prices(catalog=CAT)
REL = 1e-9
EXAMPLES = 200
PROPS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

#: small and medium catalog models (dense, grouped-query and mixture-of-experts)
MODELS = ("llama-3.1-8b", "llama-2-7b", "llama-2-13b", "mixtral-8x7b", "qwen3-30b-a3b",
          "gpt-oss-20b", "codellama-34b")
#: models too large for one device (the "does not fit" property)
BIG = ("llama-3.1-70b", "llama-3.1-405b", "gpt-3-175b", "qwen2-72b")
GPU_TARGETS = ("h100-sxm", "h200-sxm", "mi300x", "h100-sxmx8", "a100-80gbx8", "h200-sxmx4", "b200x8", "mi300xx8", "h100-sxmx16")
WAFER_TARGETS = ("cs3", "cs3x2", "cs3x4", "cs2x2")
TIME_FIELDS = ("step_s", "ttft_s", "tpot_s", "tokens_per_s", "tokens_per_s_per_user", "request_s", "requests_per_s",
               "model_flop_per_s", "model_flop_utilization_frac")
ROW_TIMES = ("step_s", "ttft_s", "tpot_s", "tokens_per_s", "tokens_per_s_per_user")


def same(a, b, what: str = "") -> None:
    """``a`` and ``b`` are both None/NaN, or equal within a relative :data:`REL`."""
    na = a is None or (isinstance(a, float) and math.isnan(a))
    nb = b is None or (isinstance(b, (float, np.floating)) and math.isnan(b))
    assert na == nb, f"{what}: {a!r} vs {b!r}"
    if not na:
        a, b = float(a), float(b)
        assert abs(a - b) <= REL * max(abs(a), abs(b)), f"{what}: {a!r} vs {b!r} (rel {abs(a - b) / max(abs(a), abs(b)):.3g})"


@st.composite
def questions(draw, models=MODELS, targets=GPU_TARGETS + WAFER_TARGETS, phases=("train", "prefill", "decode", "serve")):
    """(model, target, phase, batch, context, output_tokens, precision)."""
    target = draw(st.sampled_from(targets))
    phase = draw(st.sampled_from(phases))
    precision = draw(st.sampled_from([p for p in ("bf16", "fp8", "fp16") if _has_rate(target, p, phase)]))
    wafer = target.startswith(("cs", "wse"))
    model = draw(st.sampled_from(models))
    if phase == "train":
        batch = draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128] if wafer else [8, 16, 32, 64, 128]))
        context = draw(st.sampled_from([512, 1024, 2048, 4096]))
    else:
        batch = draw(st.sampled_from([1, 2, 3, 8, 16, 32, 64, 100]))
        context = draw(st.sampled_from([128, 512, 1000, 2048, 4096, 8192]))
    out = draw(st.sampled_from([1, 16, 128, 500])) if phase == "serve" else None
    return model, target, phase, batch, context, out, precision


def _has_rate(target: str, precision: str, phase: str = "decode") -> bool:
    """Whether the target's device has a dense rate for ``precision`` (the chain refuses one it cannot time) and, for
    training, that precision's datapath (the chain refuses fp8 training without FP8 hardware)."""
    dev = parse_target(target, CAT).device
    try:
        dev.peak_flop_per_s(precision)
    except (ValueError, KeyError):
        return False
    return phase != "train" or training_refusal(target, device_rates(dev), precision) is None


def _ask(q):
    model, target, phase, batch, context, out, precision = q
    return dict(phase=phase, batch=batch, context=context, output_tokens=out, precision=precision, catalog=CAT)


def _cli(command: str, q) -> dict | None:
    """``wseplan COMMAND ... --format json`` in this process: the record, or None when it exits with status 2."""
    model, target, phase, batch, context, out, precision = q
    argv = [command, model, "--target", target, "--phase", phase, "--batch", str(batch), "--context", str(context),
            "--precision", precision, "--format", "json"] + (["--output-tokens", str(out)] if out is not None else [])
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc in (0, 2) and (rc == 0 or err.getvalue().count("\n") == 1), (argv, rc, err.getvalue())
    return json.loads(buf.getvalue()) if rc == 0 else None


def _one_row_sweep(q, rec):
    """The sweep row of the configuration ``rec`` answers (GPU layouts as the plan chose them)."""
    model, target, phase, batch, context, out, precision = q
    t = parse_target(target, CAT)
    spec = dict(name="one", phase="decode" if phase == "serve" else phase, models=[model], targets=[target],
                precisions=[precision], batches=[batch], contexts=[context])
    if out is not None:
        spec["output_tokens"] = [out]
    if t.kind == "gpu":
        lay = rec.layout
        spec["layouts"] = dict(tensor_parallel=[lay["tensor_parallel"]], pipeline_parallel=[lay["pipeline_parallel"]],
                               data_parallel=[lay["data_parallel"]])
        if phase == "train":
            spec["layouts"].update(micro_batch=[lay["micro_batch"]], recompute=[lay["recompute"]],
                                   zero_stage=[lay["zero_stage"]])
            if t.count is None:  # a GPU training sweep names its GPU count: the count the plan chose
                spec["targets"] = [f"{t.key}x{rec.num_devices}"]
    p = S.plan_sweep(S.parse_sweep(spec), CAT, prices=PRICES)
    assert p.size == 1
    cols = S.evaluate_task(p.groups[0], 0, 1)
    return {k: (v[0] if np.ndim(v) else v) for k, v in cols.items()}


def _sweep_comparable(q, rec) -> bool:
    """A sweep file has no virtual-pipeline or context-parallel axis (its GPU training rows run one stage per device
    and whole sequences per rank) and no partial recomputation (its recompute axis is none, selective or full); a plan
    that interleaves, splits sequences or recomputes some of its layers is a question the sweep cannot pose, as is a
    GPU layout that leaves some of a counted target's GPUs idle (a sweep's layouts use exactly the target's GPUs)."""
    lay = rec.layout
    used = lay.get("tensor_parallel", 1) * lay.get("pipeline_parallel", 1) * lay.get("data_parallel", 1)
    return (lay.get("virtual_pipeline", 1) == 1 and lay.get("context_parallel", 1) == 1
            and lay.get("recompute") != "partial" and ("tensor_parallel" not in lay or used == rec.num_devices))


# =============================================================================================
# time and cost: plan == time == compare == sweep == cost
# =============================================================================================
@PROPS
@given(q=questions())
def test_every_path_gives_the_plan_number(q):
    model, target, phase, batch, context, out, precision = q
    kw = _ask(q)
    rec = plan(model, target, **kw)
    event(f"{rec.phase} {rec.device_kind} fits={rec.fits}")
    # time (the `time` command) and fit (the `fit` command)
    tr = predict_time(model, target, **kw)
    assert tr.fits == rec.fits and tr.num_devices == rec.num_devices and tr.bottleneck == rec.bottleneck
    for k in TIME_FIELDS:
        same(getattr(rec, k), getattr(tr, k), f"time.{k}")
    cli = _cli("time", q)  # a configuration that does not fit is refused (exit 2), as cost refuses it
    assert (cli is None) == (not rec.fits)
    if cli is not None:
        assert cli["fits"] and cli["num_devices"] == rec.num_devices and cli["bottleneck"] == rec.bottleneck
        for k in TIME_FIELDS:
            same(getattr(rec, k), cli[k], f"cli time.{k}")
    fr = fit(model, target, **kw)
    assert fr.fits == rec.fits and fr.num_devices == rec.num_devices and fr.binding == rec.binding
    same(fr.capacity_bytes - fr.headroom_bytes, rec.per_device_bytes, "fit.per_device_bytes")
    # compare (a `compare` row)
    row, times, params = compare_case(model, target, prices=PRICES, **kw)
    assert row.fits == rec.fits and row.num_devices == rec.num_devices and row.bottleneck == rec.bottleneck
    for k in ROW_TIMES:
        same(getattr(rec, k), getattr(row, k), f"compare.{k}")
    same(rec.model_flop_utilization_frac, row.model_flop_utilization_frac, "compare.mfu")
    # a one-row sweep
    sw = _one_row_sweep(q, rec) if _sweep_comparable(q, rec) else None
    event("one-row sweep" if sw is not None else "no sweep: interleaved pipeline")
    if sw is not None:
        assert bool(sw["fits"]) == rec.fits and int(sw["num_devices"]) == rec.num_devices, (sw, rec.layout)
        for k in ROW_TIMES:
            same(getattr(rec, k), sw[k], f"sweep.{k}")
        assert (S.BOTTLENECKS[int(sw["bottleneck"])] if sw["bottleneck"] >= 0 else None) == rec.bottleneck
    if not rec.fits:
        assert times is None and row.usd_per_mtok is None and row.usd_per_hour is None
        return
    # cost (the `cost` command) and the array cost (sweeps, fleet, reports)
    cr = cost(model, target, prices=PRICES, **kw)
    assert cr.num_devices == rec.num_devices and cr.headline_metric == HEADLINE[rec.phase]
    assert cr.plan["layout"] == rec.layout
    for k in TIME_FIELDS:
        same(rec.__getattribute__(k), cr.plan[k], f"cost.plan.{k}")
    assert cr.times == times
    cli = _cli("cost", q)
    same(cli["headline_value"], cr.headline_value, "cli cost.headline_value")
    assert cli["headline_metric"] == cr.headline_metric and cli["num_systems"] == cr.num_systems
    if rec.phase == "train":
        same(cr.times.step_s, rec.step_s, "cost.times.step_s")
        same(cr.times.tokens_per_step, rec.batch * rec.context, "cost.times.tokens_per_step")
    elif rec.phase == "decode":
        same(cr.times.decode_step_s, rec.tpot_s, "cost.times.decode_step_s")
    elif rec.phase == "prefill":
        same(cr.times.prefill_s, rec.ttft_s, "cost.times.prefill_s")
    s = setup(model, target, phase=rec.phase, precision=precision, catalog=CAT)
    b, c, o, _ = default_sizes(CAT, rec.phase, batch, context, out)
    arr = evaluate(s, {"batch": np.array([float(b)]), "context": np.array([float(c)]), "output_tokens": np.array([float(o)])})
    cols = cost_columns(s, arr, C.nominal(params_for(s, PRICES)))
    for m in cr.metrics:
        if m.metric in cols and not m.metric.startswith("service_"):
            same(m.value, float(np.asarray(cols[m.metric]).ravel()[0]), f"cost_columns.{m.metric}")
    headline = "usd_per_mtok_trained" if rec.phase == "train" else cr.headline_metric
    energy = {"train": "energy_j_per_train_token", "prefill": "energy_j_per_input_token",
              "serve": "energy_j_per_output_token_all_in"}.get(rec.phase, "energy_j_per_output_token")
    same(row.usd_per_mtok, cr.metric(headline), "compare.usd_per_mtok")
    same(row.usd_per_hour, cr.metric("usd_per_hour"), "compare.usd_per_hour")
    same(row.energy_j_per_token, cr.metric(energy), "compare.energy_j_per_token")
    if rec.phase == "train":
        same(row.usd_per_run, cr.headline_value, "compare.usd_per_run")
    if sw is not None:
        same(sw["usd_per_hour"], cr.metric("usd_per_hour"), "sweep.usd_per_hour")
        same(sw["usd_per_mtok"], cr.metric(headline), "sweep.usd_per_mtok")
        same(sw["energy_j_per_token"], cr.metric(energy), "sweep.energy_j_per_token")
        assert int(sw["num_systems"]) == cr.num_systems
        if rec.phase == "train":
            same(sw["usd_per_run"], cr.metric("usd_per_run"), "sweep.usd_per_run")


# =============================================================================================
# training: a `scale` point is the plan of that many systems
# =============================================================================================
@PROPS
@given(q=questions(targets=("h100-sxmx8", "h100-sxmx16", "a100-80gbx8", "b200x8", "cs3", "cs3x2", "cs3x4", "cs2x2"),
                   phases=("train",)))
def test_scale_point_is_the_plan(q):
    model, target, phase, batch, context, out, precision = q
    t = parse_target(target, CAT)
    per = 1 if t.kind == "wafer" else int(t.device.gpus_per_node.si)
    n = (t.count or 1) // per
    assert n * per == (t.count or 1)
    rows = scaling_rows(CAT.models[model], t, CAT, precision=precision, global_batch=batch, context=context, counts=[n],
                        options={"policy": "auto", "micro_batch": None} if t.kind == "wafer" else {})
    rec = plan(model, f"{t.key}x{n * per}", phase="train", batch=batch, context=context, precision=precision, catalog=CAT)
    event(f"{t.kind} fits={rec.fits}")
    if batch < n:
        assert rows == []
        return
    (r,) = rows
    assert r["fits"] == rec.fits and r["num_devices"] == rec.num_devices and r["bottleneck"] == rec.bottleneck
    for k in ("step_s", "tokens_per_s", "model_flop_utilization_frac"):
        same(r[k], getattr(rec, k), f"scale.{k}")


# =============================================================================================
# serving: fleet's replica model and the serving report's batch sweep are the plan
# =============================================================================================
@PROPS
@given(q=questions(targets=("h100-sxm", "h200-sxm", "a100-80gb", "mi300x", "cs3", "cs2"), phases=("serve",)))
def test_replica_and_report_rows_are_the_plan(q):
    model, target, phase, batch, context, out, precision = q
    rec = plan(model, target, **_ask(q))
    event(f"{rec.device_kind} fits={rec.fits}")
    opts = replica_options(model, target, precision=precision, input_tokens=context, output_tokens=out, batches=[batch],
                           catalog=CAT)
    if not rec.fits or rec.num_replicas != 1:
        assert opts == [] or rec.num_replicas != 1
    else:
        (o,) = opts
        assert o["num_devices"] == rec.num_devices and o["batch"] == batch and o["layout"] == rec.layout
        # the replica at full load is the plan; fleet sizes it at the default load (queueing headroom), where an
        # in-flight engine steps the requests it holds on average, ceil(0.9 x batch), on the same layout: the plan there
        for k, v in (("capacity_tokens_per_s", "tokens_per_s"), ("capacity_requests_per_s", "requests_per_s")):
            same(o[k], getattr(rec, v), f"replica.{k}")
        run_b = math.ceil(DEFAULT_UTILIZATION * batch - 1e-9)
        # (a wafer replica keeps the decode region chosen for its slots, audit29b H1, and the memory laid out for
        # them, review29b #1)
        grid = {"core_grid_decode": rec.layout["core_grid_decode"], "layout_slots": batch} \
            if "core_grid_decode" in rec.layout else None
        held = rec if run_b >= batch else plan(
            model, target, **{**_ask(q), "batch": run_b}, options=grid,
            layout=layout_columns(setup(model, target, phase="serve", precision=precision, catalog=CAT), rec.layout))
        for k in ("tpot_s", "tokens_per_s_per_user"):
            same(o[k], getattr(held, k), f"replica.{k}")
        same(o["running_batch"], DEFAULT_UTILIZATION * batch, "replica.running_batch")  # L = lambda W
        same(o["tokens_per_s"], o["utilization_frac"] * rec.tokens_per_s, "replica.tokens_per_s at its load")
        # own prefill <= the running batch's plan TTFT (its closed loop: + the prefill-budget wait)
        assert o["ttft_own_s"] <= held.ttft_s * (1 + 1e-9)
    study = Study(name="c", title="consistency", kind="serving", question="same number?", model=model, targets=[target],
                  precision=precision,
                  serving=ServingSpec(prompt_tokens=context, output_tokens=out, demand_tokens_per_s=1e4,
                                      min_tokens_per_s_per_user=1.0, batches=[batch]),
                  cost=CostSpec(uncertainty=0))
    res = run_study(study, catalog=CAT)
    (row,) = next(t for t in res.tables if t.name == "batch_sweep").rows
    assert row["fits"] == rec.fits and row["num_devices"] == rec.num_devices and row["bottleneck"] == rec.bottleneck
    for k in ROW_TIMES:
        same(row[k], getattr(rec, k), f"study.{k}")
    if rec.fits:
        cr = cost(model, target, prices=PRICES, **_ask(q))
        same(row["usd_per_mtok"], cr.headline_value, "study.usd_per_mtok")
        same(row["usd_per_hour"], cr.metric("usd_per_hour"), "study.usd_per_hour")
    else:
        assert row["usd_per_mtok"] is None and row["tokens_per_s"] is None


# =============================================================================================
# wafer training: fit and stream report the same batch window
# =============================================================================================
@PROPS
@given(model=st.sampled_from(MODELS + ("llama-3.1-70b", "gpt-3-175b")), target=st.sampled_from(WAFER_TARGETS + ("wse3",)),
       batch=st.sampled_from([1, 2, 3, 4, 8, 16, 64, 256, 1024]), context=st.sampled_from([256, 1024, 2048, 4096, 8192]))
def test_fit_and_stream_agree_on_the_batch_window(model, target, batch, context):
    assume(context <= (CAT.models[model].learned_pos_embeddings or context))  # GPT-3: 2,048 positions
    f = fit(model, target, phase="train", batch=batch, context=context, catalog=CAT)
    s = stream(model, target, batch=batch, context=context, catalog=CAT)
    event(f"fits={s.fits} feasible={s.feasible_compute_bound}")
    assert f.fits == s.fits and f.num_devices == s.num_systems
    w = f.streaming
    for k in ("min_tokens_compute_bound", "max_tokens_on_wafer", "stream_bandwidth_bytes_per_s"):
        same(getattr(w, k), getattr(s, k), f"window.{k}")
    assert (w.min_batch_compute_bound, w.max_batch_on_wafer, w.feasible_compute_bound) == \
        (s.min_batch_compute_bound, s.max_batch_on_wafer, s.feasible_compute_bound)
    t = predict_time(model, target, phase="train", batch=batch, context=context, catalog=CAT)
    same(t.step_s, s.step_s, "stream.step_s")
    same(t.tokens_per_s, s.tokens_per_s, "stream.tokens_per_s")


# =============================================================================================
# nothing that does not fit is timed or priced
# =============================================================================================
@st.composite
def tight_questions(draw):
    """Questions where many configurations do not fit: big models, few devices, long contexts, big batches."""
    q = draw(questions(models=MODELS + BIG, targets=("h100-sxmx1", "h100-sxmx2", "a100-80gbx4", "h100-sxmx8", "cs3",
                                                      "cs3x2", "wse2", "h100-sxm")))
    model, target, phase, batch, context, out, precision = q
    if draw(st.booleans()):
        batch = draw(st.sampled_from([256, 1024, 4096]))
        context = draw(st.sampled_from([16384, 65536, 131072]))
    limit = CAT.models[model].learned_pos_embeddings if model in CAT.models else 0
    if limit:  # a learned position table refuses longer sequences (tests/test_positions.py)
        context = min(context, limit - (out or 0))
    return model, target, phase, batch, context, out, precision


@PROPS
@given(q=tight_questions())
def test_nothing_that_does_not_fit_is_timed_or_priced(q):
    model, target, phase, batch, context, out, precision = q
    kw = _ask(q)
    rec = plan(model, target, **kw)
    tr = predict_time(model, target, **kw)
    row, times, _ = compare_case(model, target, prices=PRICES, **kw)
    assert tr.fits == rec.fits == row.fits
    event(f"{rec.phase} {rec.device_kind} fits={rec.fits}")
    sw = _one_row_sweep(q, rec) if (rec.layout and _sweep_comparable(q, rec)) else None
    if sw is not None:
        assert bool(sw["fits"]) == rec.fits
    if rec.fits:
        assert rec.step_s is not None and tr.step_s is not None and row.usd_per_hour is not None
        return
    assert rec.shortfall_bytes > 0 or rec.binding == "memoryx"
    for k in TIME_FIELDS:
        assert getattr(rec, k) is None and getattr(tr, k) is None, k
    assert rec.bottleneck is None and tr.bottleneck is None and not rec.breakdown_s
    for k in ("step_s", "ttft_s", "tpot_s", "tokens_per_s", "tokens_per_s_per_user", "bottleneck", "power_w",
              "usd_per_hour", "usd_per_mtok", "usd_per_run", "run_s", "energy_j_per_token"):
        assert getattr(row, k) is None, k
    assert times is None
    if sw is not None:
        for k in ("step_s", "ttft_s", "tpot_s", "tokens_per_s", "tokens_per_s_per_user", "usd_per_hour",
                  "usd_per_busy_hour", "usd_per_mtok", "input_usd_per_mtok", "output_usd_per_mtok", "usd_per_run",
                  "energy_j_per_token"):
            assert np.isnan(sw[k]), k
        assert sw["bottleneck"] < 0
    with pytest.raises(InputError, match="does not fit"):
        cost(model, target, prices=PRICES, **kw)
    assert _cli("cost", q) is None


def test_serving_fleet_table_uses_the_batch_sweep_rows():
    study = Study(name="c", title="consistency", kind="serving", question="same number?", model="llama-3.1-8b",
                  targets=["cs3"], serving=ServingSpec(prompt_tokens=1024, output_tokens=128, demand_tokens_per_s=1e5,
                                                       min_tokens_per_s_per_user=1.0, batches=[8]),
                  cost=CostSpec(uncertainty=0))
    res = run_study(study, catalog=CAT)
    (row,) = next(t for t in res.tables if t.name == "batch_sweep").rows
    (fleet,) = next(t for t in res.tables if t.name == "fleet").rows
    assert row["fits"] and row["meets_sla"]
    assert fleet["meets_sla"] and fleet["tokens_per_s_per_replica"] == row["tokens_per_s"]


def test_wafer_and_gpu_count_the_same_model_flops_for_mfu():
    """audit28a M1: the wafer's MFU counted attention with the causal mask, the GPU's without it (PaLM, Megatron), so
    Llama-3-8B at 8,192 tokens got 12.5% more model FLOPs per token on a GPU (5.79e10 against 5.15e10); both count
    them one way now. By hand: 6 x 7.50e9 matmul weights (blocks and LM head) + 3 x 4 x 32 layers x 4,096 x 8,192
    (attention without the mask) = 5.79e10."""
    from wseplan.plan import plan

    kw = dict(phase="train", batch=64, context=8192)
    w = plan("llama-3-8b", "cs3", **kw)
    g = plan("llama-3-8b", "h100x8", **kw)
    per_tok = [r.model_flop_per_s / r.tokens_per_s for r in (w, g)]
    assert per_tok[0] == pytest.approx(per_tok[1], rel=1e-12)
    assert per_tok[0] == pytest.approx(6 * 7.50e9 + 3 * 4 * 32 * 4096 * 8192, rel=0.01)


def test_mfu_counts_the_idle_gpus_a_target_pays_for():
    """audit28a M6: GPT-3 175B on 1,000 H100 runs on 768 (232 idle); the GPU MFU divided by the 768 used, the wafer's
    by every system of the target. Both count the whole target now: MFU x 1,000 x peak = the achieved model FLOP/s."""
    from wseplan.catalog import load_catalog
    from wseplan.plan import plan

    r = plan("gpt-3-175b", "h100x1000", phase="train", batch=1536, context=2048)
    assert any("232 of 1,000 GPUs left idle" in n for n in r.notes)
    peak = load_catalog().gpus["h100-sxm"].peak_flop_per_s("bf16")
    assert r.model_flop_utilization_frac == pytest.approx(r.model_flop_per_s / (1000 * peak), rel=1e-12)


def test_inference_mfu_counts_the_idle_devices_too():
    """review28 #12: training MFU counted a target's idle GPUs, inference MFU did not (Llama-3-70B decode on 12 H100
    runs one 8-GPU replica and reported the 8-GPU MFU). Both count the whole target: the same work over 12 GPUs is
    8/12 of the 8-GPU figure."""
    from wseplan.plan import plan

    a = plan("llama-3-70b", "h100x8", phase="decode", batch=16)
    b = plan("llama-3-70b", "h100x12", phase="decode", batch=16)
    assert any("4 of 12 GPUs left idle" in n for n in b.notes)
    assert b.tokens_per_s == pytest.approx(a.tokens_per_s, rel=1e-12)
    assert b.model_flop_utilization_frac == pytest.approx(a.model_flop_utilization_frac * 8 / 12, rel=1e-12)


# =============================================================================================
# time to first token: a prefill is the serving replica's, on wafers as on GPUs
# =============================================================================================
@pytest.mark.parametrize("model,target,software", [
    ("llama-3.1-70b", "cs3x4", None), ("llama-3.1-70b", "cs3x4", "wafer-production"),
    ("llama-3.1-8b", "cs3", None), ("qwen3-30b-a3b", "cs3x2", None), ("llama-3.1-8b", "cs2", "wafer-research"),
    ("llama-3.1-70b", "h200-sxmx8", None), ("mixtral-8x7b", "b200x8", None),
    # more devices than the fewest: the replica size and count are serve's too (review29 #1)
    ("llama-3.1-70b", "cs3x8", None), ("llama-3.1-70b", "cs3x12", None), ("llama-3.1-70b", "h100-sxmx16", None)])
@pytest.mark.parametrize("context", [512, 2048, 8192])
def test_a_prefill_is_the_serving_replicas_time_to_first_token(model, target, software, context):
    """audit28e H2: ``time --phase prefill`` of one prompt ran a wafer's prompt on a prefill-only layout that an
    in-flight serving replica does not have (Llama-3.1-70B on four CS-3: 9.9 ms against serve's 23.7 ms at 512 tokens,
    while GPUs agreed within 2%). A prefill is now laid out as the serving replica (its decode regions, searched for
    requests of the default output length) and runs its prompt as serve runs a lone request's (the whole token budget,
    no decode beside it; the draft's prefill where the replica speculates): one prompt's TTFT is serve's at one
    request, on every family. A static engine (WaferLLM's research code) keeps a prefill layout of its own in both."""
    opts = {"software": software} if software else {}
    out = CAT.defaults.default_output_tokens.si
    served = plan(model, target, phase="serve", batch=1, context=context, output_tokens=int(out), catalog=CAT, **opts)
    pre = plan(model, target, phase="prefill", batch=1, context=context, catalog=CAT, **opts)
    assert served.fits and pre.fits
    same(pre.ttft_s, served.ttft_s, "ttft_s")
    for k in ("core_grid_decode", "core_grid_prefill", "pipeline_stages_decode", "pipeline_stages_prefill",
              "num_wafers", "num_replicas", "tensor_parallel", "pipeline_parallel", "data_parallel"):
        assert pre.layout.get(k) == served.layout.get(k), (k, pre.layout, served.layout)
