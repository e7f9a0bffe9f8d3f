"""The planning chain: model x target x workload -> fit -> layout -> time -> cost, one implementation.

Every command and API function that answers "does it fit, how fast, what does it cost" goes through
:func:`evaluate` (arrays: one row per configuration, the sweep path) or :func:`plan` (one configuration, the
scalar path: an array of size one). The chain:

1. **resolve** the model, the target and the device family (from the catalog entry's kind and the phase), the
   software profile (``--software``; the family's default otherwise) and the defaults (``catalogs/defaults.yaml``);
2. **candidates**: a configuration whose layout is not given is expanded into the family's layouts;
3. **fit** every candidate; only candidates that fit go on;
4. **choose** per configuration: without a device count the fewest devices that fit, then the phase objective
   (training and prefill: the shortest step; decode and serving: the shortest time per output token, and among
   the layouts within ``defaults.layout_near_tie_frac`` (20%) of it the one giving the whole target the
   most tokens/s, so that a target with a count serves with all its devices rather than leave them idle for a
   per-user speed a user cannot tell apart); with a count, the objective alone. Ties go to the first candidate
   (fewer devices, smaller TP/PP);
5. **time** the chosen layouts; a configuration with no fitting layout keeps ``fits=False``, its shortfall and
   no time and no cost (NaN in arrays, None in records);
6. **cost** (when prices are given) from the family's hardware figures and the times.

Records say which batch, context, layout and software profile they used and why (``given``, ``default``,
``searched``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np

from .analytic.memory import RECOMPUTE
from .catalog.load import Catalog, load_catalog
from .catalog.precision import device_rates, training_refusal
from .catalog.schema import Model
from .catalog.software import calibrated_name, resolve_software
from .devices import family_for
from .devices.base import BINDINGS, BOTTLENECKS, PHASES, Family, Query
from .devices.speculation import SPEC_OPTIONS
from .errors import InputError
from .model_error import architecture_class, engine_devices, plan_interval
from .plan_sizes import check_positions, default_sizes, positions_note, positions_of  # noqa: F401 (the chain's API)
from .plan_notes import (STREAM_UNIT_HINT, FLOOR_TEXT, _datapath_note, _speculation_note, fit_fix, layout_note,  # noqa: F401
                         floor_s, floor_text, no_time_model, one_sequence_hint)
from .records import PlanRecord, bounded_tokens
from .targets import Target, parse_target
from .workload import check_precision, resolve_model, total_params

#: fields of the fit part of a result (arrays in :func:`evaluate`)
FIT_FIELDS = ("num_devices", "num_replicas", "per_device_bytes", "capacity_bytes", "fits", "weights_bytes",
              "kv_cache_bytes", "activation_bytes", "optimizer_bytes", "total_bytes", "binding", "max_tokens_in_flight")
#: fields of the time part (NaN where the configuration does not fit)
TIME_FIELDS = ("step_s", "ttft_s", "tpot_s", "tokens_per_s", "tokens_per_s_per_user", "request_s", "requests_per_s",
               "model_flop_per_s", "model_flop_utilization_frac", "bottleneck")


@dataclass(frozen=True)
class Setup:
    """A resolved question (scalar part) with its family and the family's prepared context."""

    query: Query
    family: Family
    ctx: object

    @property
    def layout_columns(self) -> tuple[str, ...]:
        cols = getattr(self.family, "columns", None)
        return tuple(cols(self.query.phase)) if cols else tuple(self.family.layout_columns)


def normalise_phase(phase: str, output_tokens) -> str:
    """``serve``/``e2e`` are whole requests; ``decode`` with output tokens is a whole request too."""
    p = {"e2e": "serve", "e2e-infer": "serve", "inference": "serve"}.get(phase, phase)
    if p not in PHASES:
        raise InputError(f"phase: unknown {phase!r}; use one of {', '.join(PHASES)}")
    if p == "decode" and output_tokens:
        return "serve"
    if output_tokens and p in ("prefill", "train"):
        raise InputError(f"output_tokens: a {p} has no generated tokens (got {output_tokens}); remove it, or use phase "
                         "serve for whole requests")
    return p


#: the software profile of GPU training without one named: the calibration's own constants (no serving engine's
#: overrides), the profile the validation predicts its training rows with
GPU_TRAIN_PROFILE = "gpu-fitted-2026-11"


def setup(model, target, *, phase: str, precision: str = "bf16", software: str | None = None,
          options: dict | None = None, catalog: Catalog | None = None, speed_floor: float | None = None) -> Setup:
    """Resolve model, target, family, software profile and options (one-line InputError on anything bad)."""
    cat = catalog or load_catalog()
    check_precision(precision)
    m = resolve_model(model, cat) if isinstance(model, str) else model
    t = parse_target(target, cat) if isinstance(target, str) else target
    fam = family_for(t.kind, phase)
    why = training_refusal(getattr(t.device, "name", t.key), device_rates(getattr(t, "device", None)),
                           precision) if phase == "train" else None
    if why:
        raise InputError(why)
    opts = {k: v for k, v in (options or {}).items() if v is not None}
    r = opts.get("reserve")
    if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r < 1.0):
        raise InputError(f"reserve: must be a fraction in [0, 1), got {r!r}")
    spec = [k for k in SPEC_OPTIONS if k in opts] if phase == "train" else []
    if spec:
        raise InputError(f"{spec[0]}: speculative decoding applies to inference (prefill, decode, serve), not phase {phase}")
    if phase == "train" and t.kind == "gpu" and software is None:
        # GPU training runs the calibration's own constants by default, as its validation rows are predicted (review28
        # #5: the serving engine's launch gaps and HBM share were applied to training steps); a named profile's
        # constants still apply (the GPU families read the calibration, then the profile's constants over it)
        software = GPU_TRAIN_PROFILE
    train_only = () if phase == "train" else getattr(fam, "train_only_options", ())
    allowed = [o for o in fam.options if o not in train_only]
    bad = sorted(set(opts) - set(allowed))
    if "kv_precision" in bad:  # a GPU engine's KV-cache format: name the flag and the fix (review28b #5)
        raise InputError(f"--kv-precision: a GPU serving engine's KV-cache format; {t.key} ({fam.name}) keeps its own: "
                         "drop --kv-precision for this target")
    if bad:
        raise InputError(f"options: {', '.join(bad)} not used by the {fam.name} family for phase {phase}; "
                         f"allowed: {', '.join(allowed) or 'none'}")
    sw = software if not hasattr(software, "engine") else software
    prof = sw if hasattr(sw, "engine") else resolve_software(sw, getattr(fam, "software_family", t.kind), cat)
    q = Query(model=m, target=t, phase=phase, precision=precision, catalog=cat, software=prof, options=opts,
              speed_floor=speed_floor)
    return Setup(query=q, family=fam, ctx=fam.prepare(q))


# =============================================================================================
# The array chain
# =============================================================================================
def evaluate(s: Setup, cfg: dict[str, np.ndarray], *, require_fit: bool = True) -> dict[str, np.ndarray]:
    """Fit, choose a layout, and time every configuration row of ``cfg`` (equal-length arrays).

    ``cfg`` holds ``batch``, ``context``, ``output_tokens`` and optionally the family's layout columns (NaN or
    absent: searched). Returns arrays, one row per configuration: the layout columns chosen, the fit fields
    (:data:`FIT_FIELDS`), the time fields (:data:`TIME_FIELDS`, NaN where nothing fits), ``breakdown.<part>``
    columns and ``layout_searched`` (bool).

    ``require_fit=False`` is for validating measured runs only (the run happened, so it fitted): where no
    candidate of a configuration fits the (conservative) memory model, the candidates are timed anyway and
    the best is kept with ``fits=False`` and its times. Every planning path keeps the default.
    """
    fam, ctx, q = s.family, s.ctx, s.query
    n = len(cfg["batch"])
    cols = s.layout_columns
    base = {k: np.asarray(cfg[k], dtype=float) for k in ("batch", "context", "output_tokens")}
    check_positions(q.model, base["context"], base["output_tokens"] if q.phase == "serve" else np.zeros(n))
    for c in cols:
        base[c] = np.asarray(cfg[c], dtype=float) if c in cfg else np.full(n, np.nan)
    searched = np.isnan(base[cols[0]]) if cols else np.zeros(n, dtype=bool)
    cand, parent = fam.candidates(ctx, base)
    f = fam.fit(ctx, cand)
    fits = np.asarray(f["fits"], dtype=bool)
    ndev = np.asarray(f["num_devices"], dtype=float)
    # contenders: fitting candidates, and without a device count only those with the fewest devices
    contend = fits.copy()
    if not require_fit:  # configurations with no fitting candidate: every candidate contends
        any_fit = np.zeros(n, dtype=bool)
        np.logical_or.at(any_fit, parent, fits)
        contend |= ~any_fit[parent]
    if q.target.count is None and fits.any():
        least = np.full(n, np.inf)
        np.minimum.at(least, parent[fits], ndev[fits])
        contend &= ndev <= least[parent]
    idx = np.nonzero(contend)[0]
    # every layout given: no choice to make (and no objective to weigh)
    one_each = len(parent) == n and bool((parent == np.arange(n)).all())
    # an in-flight engine's prefill runs on its serving replica: its layout is the one serve chooses (audit28e H2,
    # review29 #1: a counted target's replica size was chosen by the prefill alone); only the chosen are timed
    # (a measured run, require_fit=False, keeps the prefill's own objective: review29b #3)
    served = _serving_choice(s, cand, idx) if len(idx) and not one_each and require_fit else None
    if served is not None:
        t = {}
    elif len(idx) == len(parent):  # every candidate contends: the columns as they are
        t = fam.time(ctx, dict(cand), {k: np.asarray(v) for k, v in f.items()})
    else:
        t = fam.time(ctx, {k: v[idx] for k, v in cand.items()}, {k: np.asarray(v)[idx] for k, v in f.items()}) if len(idx) else {}
    obj = np.full(len(parent), np.inf)
    if len(idx) and not one_each:
        o = np.asarray(fam.objective(q, t) if served is None else served["request_s"], dtype=float)
        obj[idx] = np.where(np.isnan(o), np.inf, o)  # no time model (a layer-list model): no objective
    # the chosen candidate per configuration: best objective, first on ties; serving and decode: among the layouts
    # as fast per user as the fastest (within defaults.layout_near_tie_frac) the one giving the target the most
    # tokens/s; else the least shortfall
    if one_each:
        chosen = np.arange(n)
    else:
        thr = np.full(len(parent), np.inf)
        if (q.phase in ("decode", "serve") or served is not None) and len(idx):
            best_obj = np.full(n, np.inf)
            np.minimum.at(best_obj, parent, obj)
            near = np.isfinite(obj) & (obj <= best_obj[parent] * (1.0 + q.catalog.defaults.layout_near_tie_frac.si))
            if q.speed_floor is not None and served is None:  # no layout reaches the floor: the fastest (audit37a F3)
                spd = np.zeros(len(parent))
                spd[idx] = np.nan_to_num(np.asarray(t.get("tokens_per_s_per_user", np.zeros(len(idx))), dtype=float))
                reach = np.zeros(n, dtype=bool)
                np.logical_or.at(reach, parent, spd >= q.speed_floor)
                near &= reach[parent] | (obj <= best_obj[parent])
            tps = np.full(len(parent), np.nan)
            tps[idx] = np.asarray((t if served is None else served).get("tokens_per_s", np.full(len(idx), np.nan)),
                                  dtype=float)
            thr = np.where(near & np.isfinite(tps), -tps, np.where(near, 0.0, np.inf))
        order = np.lexsort((np.arange(len(parent)), obj, thr, parent))
        first = np.ones(len(order), dtype=bool)
        first[1:] = parent[order][1:] != parent[order][:-1]
        best = order[first]
        chosen = np.full(n, -1)
        chosen[parent[best]] = best
    if not one_each and (none_fit := ~np.isfinite(obj[chosen])).any():
        short = np.asarray(f["per_device_bytes"], dtype=float) - np.asarray(f["capacity_bytes"], dtype=float)
        # the contenders first (the fewest devices that fit, where any fit), then the least shortfall (audit28c H2:
        # a layer-list model, untimed, took the most headroom: 23 GPUs for 6 GB)
        has = np.zeros(n, dtype=bool)
        np.logical_or.at(has, parent, contend)
        short = np.where(has[parent] & ~contend, np.inf, short)
        order = np.lexsort((np.arange(len(parent)), short, parent))
        first = np.ones(len(order), dtype=bool)
        first[1:] = parent[order][1:] != parent[order][:-1]
        least = np.full(n, -1)
        least[parent[order[first]]] = order[first]
        chosen = np.where(none_fit, least, chosen)
    if served is not None:  # the prefill of the chosen layouts (the others were weighed by their serving answers)
        idx = np.intersect1d(chosen, idx)
        t = fam.time(ctx, {k: v[idx] for k, v in cand.items()}, {k: np.asarray(v)[idx] for k, v in f.items()})
    pick = (lambda a: np.array(a)) if one_each else (lambda a: np.asarray(a)[chosen])  # noqa: E731
    out = {k: v for k, v in base.items() if k not in cols}
    for c in cols:
        out[c] = pick(cand[c])
    for k in FIT_FIELDS:
        out[k] = pick(f[k])
    for k, v in f.items():
        if k not in FIT_FIELDS:
            out[f"fit.{k}"] = pick(v)
    if one_each:  # the timed candidates are the chosen rows idx, in order
        timed = contend
        src = slice(None)
    else:
        pos = np.full(len(parent), -1)
        pos[idx] = np.arange(len(idx))
        tp = pos[chosen]
        timed = tp >= 0
        src = tp[timed]

    every = one_each and bool(timed.all())  # one question that fits: the timed rows are the rows, in order

    def column(v):
        if every and np.shape(v) == (n,):
            return np.array(v, dtype=float)
        col = np.full(n, np.nan)
        col[timed] = np.asarray(v, dtype=float)[src]
        return col

    for k in TIME_FIELDS:
        v = t.get(k)
        out[k] = np.full(n, np.nan) if v is None else column(v)
    out["bottleneck"] = np.where(timed, out["bottleneck"], -1)
    for k, v in (t.get("breakdown") or {}).items():
        out[f"breakdown.{k}"] = column(v)
    for k, v in t.items():
        if k not in TIME_FIELDS and k != "breakdown":
            out[f"time.{k}"] = column(v)
    out["fits"] = np.asarray(out["fits"], dtype=bool)
    out["layout_searched"] = searched
    return out


def _serving_choice(s: Setup, cand: dict, idx: np.ndarray) -> dict | None:
    """For a prefill on an in-flight engine, the serving answers (``request_s``, ``tokens_per_s``) of the candidates
    ``idx`` as whole requests of the catalog's default answer length: the layout ``serve`` would run them on, which
    the prefill takes; None for other questions (a static engine lays its prompts out on their own)."""
    q = s.query
    if q.phase != "prefill" or q.software.engine.scheduling != "inflight" or not isinstance(q.model, Model):
        return None
    ss = getattr(s.ctx, "_serving_setup", None)
    if ss is None:  # the same question as whole requests, its software profile as given (review29b #2: not by name)
        qs = replace(q, phase="serve")
        fam = family_for(q.target.kind, "serve")
        sctx = getattr(s.ctx, "_serving", None)  # the family's own serving context (its region search remembered)
        ss = Setup(qs, fam, sctx if sctx is not None and fam is s.family else fam.prepare(qs))
        s.ctx._serving_setup = ss
        if fam is s.family:  # one serving context for the choice and the prefill's own regions (not two searches)
            s.ctx._serving = ss.ctx
    sub = {k: np.asarray(v)[idx] for k, v in cand.items()}
    sub["output_tokens"] = np.full(len(idx), float(q.catalog.defaults.default_output_tokens.si))
    f = ss.family.fit(ss.ctx, sub)
    t = ss.family.time(ss.ctx, dict(sub), {k: np.asarray(v) for k, v in f.items()})
    ok = np.asarray(f["fits"], dtype=bool)
    return {"request_s": np.where(ok, np.asarray(t["request_s"], dtype=float), np.inf),
            "tokens_per_s": np.where(ok, np.asarray(t["tokens_per_s"], dtype=float), np.nan)}


def bottleneck_name(code) -> str | None:
    c = int(code)
    return None if c < 0 else BOTTLENECKS[c]


def binding_name(code) -> str:
    return BINDINGS[int(code)]


def row(arrays: dict[str, np.ndarray], i: int = 0) -> dict:
    """Row ``i`` of :func:`evaluate`'s arrays as plain Python values (NaN -> None)."""
    out = {}
    for k, v in arrays.items():
        if type(v) is np.ndarray and v.ndim == 1 and v.dtype.kind in "fbi":  # the usual column: one Python value
            x = v.item(i)
            out[k] = None if x != x else x  # float (NaN -> None), bool or int, as below
            continue
        x = v[i]
        if isinstance(x, np.ndarray):
            out[k] = x.tolist()
        elif isinstance(x, (np.bool_, bool)):
            out[k] = bool(x)
        elif isinstance(x, (np.integer,)):
            out[k] = int(x)
        else:
            x = float(x)
            out[k] = None if math.isnan(x) else x
    return out


def target_with_count(t: Target, count: int) -> Target:
    """``t`` with exactly ``count`` devices (``h100x16`` from ``h100``)."""
    return Target(text=f"{t.key}x{count}", kind=t.kind, key=t.key, device=t.device, count=count)


# =============================================================================================
# The scalar chain: one configuration, one record
# =============================================================================================
#: where the operating point's layout goes in the chain's configuration columns (record name -> column)
_LAYOUT_COLUMNS = {"tensor_parallel": "tp", "pipeline_parallel": "pp", "data_parallel": "dp", "num_wafers": "num_wafers",
                   "attention_data_parallel": "adp"}


def layout_columns(s, layout: dict) -> dict[str, int]:
    """A point's record layout (``tensor_parallel``, ``num_wafers``, ...) as the chain's layout columns of setup
    ``s`` (``tp``, ``num_wafers``, ...), to evaluate exactly that point again (``cost(..., layout=...)``)."""
    cols = set(s.layout_columns)
    return {_LAYOUT_COLUMNS[k]: int(v) for k, v in layout.items() if _LAYOUT_COLUMNS.get(k) in cols}


def check_given_layout(s: Setup, layout: dict | None) -> dict:
    """The layout a user gives, checked against the family of setup ``s`` (one-line :class:`InputError` naming the
    field): known columns only, positive integers (``recompute`` by name too, returned as its index), every column
    where the family has no default for the rest, and the family's own rules (``check_layout``: e.g. a GPU ``tp``
    that divides the heads, virtual stages on a pipeline). ``plan`` and ``serve`` take a given layout through here."""
    given = {k: v for k, v in (layout or {}).items() if v is not None}
    cols = s.layout_columns
    bad = sorted(set(given) - set(cols))
    if "adp" in bad and "tp" in cols:  # a GPU training layout
        raise InputError("adp: data-parallel attention is a layout of GPU inference (prefill, decode, serve) for MoE "
                         "models; drop --adp for training")
    if bad:
        hint = " (on the command line: the target's count, e.g. cs3x4)" if cols == ("num_wafers",) else ""
        raise InputError(f"layout: {', '.join(bad)} not a layout of the {s.family.name} family; use "
                         f"{', '.join(cols)}{hint}")
    if not given:
        return given
    for k, v in given.items():
        if isinstance(v, str) and k == "recompute":
            if v not in RECOMPUTE:
                raise InputError(f"recompute: must be one of {', '.join(RECOMPUTE)}, got {v!r}")
            given[k] = RECOMPUTE.index(v)
        elif isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < (0 if k in ("zero_stage", "recompute") else 1):
            raise InputError(f"{k}: must be a positive integer, got {v!r}")
    if not hasattr(s.family, "default_layout"):
        missing = [k for k in cols if k not in given]
        if missing:
            raise InputError(f"layout: give {', '.join(missing)} too, or no layout to search one")
    check = getattr(s.family, "check_layout", None)  # a family's rules for a given layout (one-line InputError)
    if check is not None:
        check(s.ctx, given)
    implied = getattr(s.family, "implied_layout", None)  # columns a given layout holds by the model's nature
    return implied(s.ctx, given) if implied is not None else given


def plan(model, target, *, phase: str = "decode", precision: str = "bf16", batch: int | None = None,
         context: int | None = None, output_tokens: int | None = None, layout: dict | None = None,
         software: str | None = None, options: dict | None = None, catalog: Catalog | None = None,
         require_fit: bool = True):
    """One question through the chain (the array chain at size one). Returns a :class:`~wseplan.records.PlanRecord`.

    Parameters
    ----------
    model, target : str or resolved objects
        A catalog model name/alias, config.json or layer-list path; a target ``<hardware key>[x<N>]``.
    phase : str
        ``train``, ``prefill``, ``decode`` or ``serve`` (whole requests; ``decode`` with ``output_tokens`` too).
    batch, context, output_tokens : int
        Sequences (train: per step; inference: concurrent per replica), tokens per sequence (train: sequence
        length; prefill/serve: prompt; decode: KV length), generated tokens per request (serve). Defaults:
        ``catalogs/defaults.yaml``.
    layout : dict
        Layout values to use (GPU: ``tp``, ``pp``, ``dp``, ``micro_batch``, ``vpp``, ``recompute``, ``zero_stage``;
        wafer: ``num_wafers``; streaming: ``num_systems``); a layout the user gives is used as given (reported
        with ``fits: false`` and no time when it does not fit); without one the layout is searched.
    software : str
        Software profile name (default: the family's default profile).
    options : dict
        Family options (``reserve``, ``zero_stage``, ``recompute``, ``policy``, ``memoryx_option``, ``core_grid`` ...).
    """
    cat = catalog or load_catalog()
    phase = normalise_phase(phase, output_tokens)
    s = setup(model, target, phase=phase, precision=precision, software=software, options=options, catalog=cat)
    b, c, o, src = default_sizes(cat, phase, batch, context, output_tokens, model=s.query.model)
    cfg = {"batch": np.array([float(b)]), "context": np.array([float(c)]), "output_tokens": np.array([float(o)])}
    given = check_given_layout(s, layout)
    cols = s.layout_columns
    if given:
        for k in cols:
            cfg[k] = np.array([float(given[k]) if k in given else np.nan])
    mb, dp = given.get("micro_batch"), given.get("dp") or 1
    omb = s.query.options.get("micro_batch")
    if mb is None and isinstance(omb, (int, np.integer)):  # a wafer stream's: at most a system's share, ceil(b / n)
        n = given.get("num_systems") or s.query.target.count or 1
        if omb > -(-b // n):
            share = f"each of the {n} systems' share of the batch of {b}" if n > 1 else f"the batch of {b}"
            raise InputError(f"micro_batch: {omb} sequences per pass exceed {share}; give a micro-batch of at most "
                             f"{-(-b // n)}")
    if mb is not None and mb * dp > b:
        per = f" x {dp} data-parallel replicas" if dp > 1 else ""
        raise InputError(f"micro_batch: {mb} sequences{per} exceed the batch of {b}; give a micro-batch of at most "
                         f"{max(b // dp, 1)}" + (" or fewer data-parallel replicas" if dp > 1 else ""))
    src["layout"] = "searched" if not given else "given" if set(given) >= set(cols) else "partly searched"
    arr = evaluate(s, cfg, require_fit=require_fit)
    return record(s, arr, 0, sources=src, require_fit=require_fit)


#: billions of parameters per model object (models are frozen; the object is kept, so its id is not reused)
_PARAMS_B: dict = {}


def _params_b(m: Model) -> float:
    hit = _PARAMS_B.get(id(m))
    if hit is None or hit[0] is not m:
        if len(_PARAMS_B) >= 256:
            _PARAMS_B.clear()
        hit = _PARAMS_B[id(m)] = (m, total_params(m) / 1e9)
    return hit[1]


#: a target's count suffix (``cs3x12`` -> ``cs3``)
_COUNTLESS = re.compile(r"x\d+$")


def record(s: Setup, arr: dict, i: int, *, sources: dict | None = None, require_fit: bool = True):
    """Row ``i`` of :func:`evaluate`'s arrays as a :class:`~wseplan.records.PlanRecord`."""
    q, fam = s.query, s.family
    r = row(arr, i)
    fits = bool(r["fits"])
    n_dev = int(round(r["num_devices"]))
    t = q.target
    label = t.label if t.count else f"{t.key}x{n_dev}" if n_dev > 1 else t.key
    cap, load = r["capacity_bytes"], r["per_device_bytes"]
    lay, details, notes = fam.describe(s.ctx, r) if hasattr(fam, "describe") else ({}, {}, [])
    dp_mb = lay.get("data_parallel", 0) * lay.get("micro_batch", 0) if q.phase == "train" else 0
    if not fits:
        short = (f"does not fit: the fullest device needs {load:,.0f} B of {cap:,.0f} B usable "
                 f"({binding_name(r['binding'])} binds); ")
        mx_need, mx_cap = r.get("fit.memoryx_required_bytes"), r.get("fit.memoryx_capacity_bytes")
        if binding_name(r["binding"]) == "memoryx" and mx_need is not None:  # the weight store, not the wafer
            short = (f"does not fit: the MemoryX option holds {mx_cap:,.0f} B and the model's weights and optimizer "
                     f"state need {mx_need:,.0f} B (memoryx binds); ")
        if dp_mb > int(r["batch"]):  # the batch does not fill the replicas (audit30a M8: named beside the memory too)
            held = f"memory would hold it: {load:,.0f} of {cap:,.0f} B" if load <= cap else \
                f"nor does memory hold it: {load:,.0f} of {cap:,.0f} B, {binding_name(r['binding'])} binds"
            short = (f"does not fit: {lay['data_parallel']:,} data-parallel replicas x micro-batch {lay['micro_batch']} "
                     f"need at least {dp_mb:,} sequences a step and the batch is {int(r['batch']):,} ({held}); give "
                     f"--batch {dp_mb:,} or more, or larger --tp/--pp; ")
        one_seq = r.get("fit.max_tokens_on_wafer")  # a streamed wafer holds this many tokens of one pass at most
        hint = (f"; the target without a count (--target {_COUNTLESS.sub('', t.text)}) finds the fewest devices that fit"
                if t.count else "")
        if hasattr(fam, "no_count_holds") and fam.no_count_holds(s.ctx, r):  # a layer is not split across wafers
            hint = "; no wafer count holds it (a layer is not split across wafers): lower --batch or --context" + (
                f", or --reserve (it keeps back {100 * q.options['reserve']:.6g}% of the SRAM)" if q.options.get("reserve") else "")
        if binding_name(r["binding"]) == "memoryx":  # no system count helps: the option does (its own note says so)
            hint = ""
        mb, fit_b = q.options.get("micro_batch"), r.get("fit.max_batch_on_wafer")
        auto = q.options.get("policy", "auto") == "auto"  # another policy may hold it: scale names that fix
        if one_seq is not None and q.phase == "train" and (r.get("fit.buffer_bytes") or 0.0) > cap:
            hint = "; " + STREAM_UNIT_HINT  # the streamed layers alone overflow: nothing helps (audit28a M5)
        elif one_seq is not None and one_seq < int(r["context"]):  # no count helps: one sequence overflows
            hint = "; " + one_sequence_hint(int(r["context"]), one_seq, None if auto else q.options.get("policy"))
        elif mb and fit_b is not None and fit_b < mb:  # the user's micro-batch overflows it
            hint = f"; the wafer holds {int(fit_b):,} sequences a pass, not the micro-batch {int(mb):,}: lower --micro-batch"
        notes = [short + ("no time or cost is given" if require_fit else "timed anyway (require_fit=False: a measured run)")
                 + hint] + list(notes)
    timed = (fits or not require_fit) and r.get("step_s") is not None
    if timed:
        notes = list(notes) + _datapath_note(t, q.precision, q.phase) + _speculation_note(s, r) + layout_note(s, r, require_fit)
    if q.options.get("kv_precision"):  # the record says which KV format its figures assume (review28b #6)
        notes = list(notes) + [f"KV cache kept in {q.options['kv_precision']} (--kv-precision)"]
    if isinstance(q.model, Model):
        notes = list(notes) + positions_note(q.model, int(r["context"]), int(r["output_tokens"] or 0) if q.phase == "serve" else 0)
        native = q.model.native_precision
        if native and native != q.precision and q.phase != "train":  # audit28d M3: bf16 by default sized 1.5-4x
            notes.append(f"{q.model.name} is published in {native}; planned at {q.precision} (--precision {native} "
                         "plans the published checkpoint)")
    if fits and r.get("step_s") is None:
        notes = list(notes) + [no_time_model(fam.name, getattr(q.model, "name", "this model")) + "; the fit alone is "
                               "given"]
    bd = {k.split(".", 1)[1]: v for k, v in r.items() if k.startswith("breakdown.") and v is not None} if timed else {}
    if timed and q.phase == "train":  # the step's hard floors (review28 #3: not MFU, whose FLOPs are a convention)
        fl = {"compute_s": r.get("time.compute_floor_s"), "stream_s": (details.get("stream") or {}).get("stream_floor_s")}
        fl = {k: float(v) for k, v in fl.items() if v is not None and np.isfinite(v) and v > 0}
        if fl:
            details = dict(details, floors=fl)
    iv = plan_interval({"phase": q.phase, "device_kind": t.kind, "hardware": t.key, "precision": q.precision, "architecture": architecture_class(q.model),
                        "num_devices": engine_devices(q.phase, n_dev, r["num_replicas"], r.get("tp"), r.get("pp")),
                        "software": calibrated_name(q.software),
                        "step_s": r.get("step_s") if timed else None,
                        "tokens_per_s": r.get("tokens_per_s") if timed else None,
                        "model_flop_utilization_frac": r.get("model_flop_utilization_frac") if timed else None,
                        "floor_s": floor_s(details) if timed else None,
                        "floor_text": floor_text(details) if timed else ""},
                       params_b=_params_b(q.model) if isinstance(q.model, Model) else None)
    return PlanRecord(
        model=q.model.name if hasattr(q.model, "name") else str(q.model), target=label, hardware=t.key, device_kind=t.kind,
        precision=q.precision, phase=q.phase, batch=int(r["batch"]), context=int(r["context"]),
        family=fam.name, software=q.software.name, output_tokens=int(r["output_tokens"]) or None,
        sources=dict(sources or {}), fits=fits, num_devices=n_dev, num_replicas=int(round(r["num_replicas"])),
        capacity_bytes=cap, per_device_bytes=load, weights_bytes=r["weights_bytes"], kv_cache_bytes=r["kv_cache_bytes"],
        activation_bytes=r["activation_bytes"], optimizer_bytes=r["optimizer_bytes"], total_bytes=r["total_bytes"],
        headroom_bytes=cap - load, shortfall_bytes=max(0.0, load - cap), binding=binding_name(r["binding"]),
        max_tokens_in_flight=bounded_tokens(r["max_tokens_in_flight"]), layout=lay,
        **{k: (r.get(k) if timed else None) for k in ("step_s", "ttft_s", "tpot_s", "tokens_per_s",
                                                      "tokens_per_s_per_user", "request_s", "requests_per_s",
                                                      "model_flop_per_s", "model_flop_utilization_frac")},
        bottleneck=bottleneck_name(r["bottleneck"]) if timed else None, breakdown_s=bd, details=details, notes=notes,
        **iv)
