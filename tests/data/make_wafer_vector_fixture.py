"""The wafer-evaluation equality fixture: every number the wafer path gives on a fixed grid, recorded from the code
as it stood before the wafer evaluation was vectorized (issue 14 item 1), so that the faster code can be held to it.

What is recorded (:func:`compute`):

* ``kernels``: the fabric closed forms the wafer path is made of, on fixed inputs: :func:`tree_path_cycles` for
  every line length 1..1,600 under three (hop, send, skip) sets, and the per-block part dictionaries of
  :mod:`wseplan.analytic.wse_time` (decode, head, prefill) over batches x contexts x every region side of WSE-3,
  with the calibrated constants;
* ``evaluate``: :func:`wseplan.plan.evaluate` arrays for models x wafer targets x phases x software profiles x
  options, each call on the whole batch x context grid at once (one row per configuration);
* ``plan``: :func:`wseplan.plan.plan` records (layout, stages, breakdown, notes) at one point of each;
* ``serve``: two replica searches (:func:`wseplan.serving.serve`), every point.

Regenerate (only when a change of the model's numbers is intended; the equality test then holds the new code to
the new numbers, so say why in the commit)::

    PYTHONPATH=$PWD python tests/data/make_wafer_vector_fixture.py

It writes ``tests/data/wafer_vector_fixture.json``. ``tests/test_wafer_vector_equality.py`` recomputes the same
dictionary and compares every number within a relative 1e-12.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "wafer_vector_fixture.json"

MODELS = ["llama-3.1-70b", "llama-3.1-8b", "mixtral-8x7b", "gpt-oss-20b", "llama-3.2-1b"]
TARGETS = ["cs3", "cs3x4", "cs2x8"]
PHASES = ["decode", "prefill", "serve", "train"]
BATCHES = [1, 8, 64]
CONTEXTS = [512, 4096]
OUTPUT_TOKENS = 256
#: (software profile or None for the default, options) variants, on the first model and the inference phases
VARIANTS = [("wafer-research", {}), (None, {"core_grid": "300x300"}), (None, {"speculative": "none"}),
            (None, {"core_grid_decode": "250x200", "reserve": 0.2})]
#: a long model on many wafers (the partition's larger dynamic programs)
EXTRA = [("llama-3.1-405b", "cs3", "decode"), ("llama-3.1-405b", "cs3", "serve"), ("llama-3.1-405b", "cs3x24", "decode")]
SERVE = [("llama-70b", "cs3"), ("llama-3.1-8b", "cs3x2")]


def _clean(v):
    """JSON-safe, exact: floats stay floats (repr round-trips), NaN/inf become strings, arrays lists."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.ndarray):
        return _clean(v.tolist())
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        x = float(v)
        return x if math.isfinite(x) else repr(x)
    return v


def kernels(cat) -> dict:
    from wseplan.analytic import fabric as fab
    from wseplan.analytic import wse_time as wt

    out: dict = {}
    L = np.arange(1.0, 1601.0)
    for i, (h, send, skip) in enumerate([(1.0, 2.0, 1.0), (1.0, 7.25, 1.5), (0.0, 0.0, 2.0)]):
        out[f"tree_path_{i}"] = fab.tree_path_cycles(length_pes=L, hop_latency_cycles=h, send_cycles=send, skip_cycles=skip)
    wafer = cat.wafers["wse3"]
    c = fab.load_fabric_constants()
    fk = fab.wafer_fabric_kwargs(wafer, "bf16", c)
    # single kernels on a grid, with the simulator-fitted constants (critical-path trees, colour limit) and without
    plain = fab.wafer_fabric_kwargs(cat.wafers["wse2"], "bf16")
    side = np.array([1.0, 2.0, 3.0, 31.0, 32.0, 33.0, 100.0, 377.0, 755.0])
    P, Q = (a.ravel()[:, None] for a in np.meshgrid(side, side, indexing="ij"))
    kk = np.array([1.0, 1000.0, 4096.0, 28672.0])[None, :, None]
    nn = np.array([1.0, 700.0, 8192.0])[None, None, :]
    P3, Q3 = P[:, :, None], Q[:, :, None]
    for name, kw in (("fit", fk), ("plain", plain)):
        for algo in ("best", "chain", "tree"):
            for m in (1.0, 64.0):
                g = dict(kw, k=kk, n=nn, m=m, rows=P3, cols=Q3, reduce_algo=algo)
                out[f"gemv_{name}_{algo}_{m:g}"] = fab.gemv_cycles(mac_efficiency_frac=0.7, **g)
                out[f"gemv_parts_{name}_{algo}_{m:g}"] = fab.gemv_parts_cycles(mac_efficiency_frac=0.7, **g)
        msg = np.array([2.0, 64.0, 1e5])[:, None]
        for tm in ("levels", "critical_path"):
            for algo in ("best", "chain", "tree"):
                out[f"reduce_{name}_{tm}_{algo}"] = fab.line_reduce_cycles(
                    length_pes=L[None, :400], message_bytes=msg, hop_latency_cycles=kw["hop_latency_cycles"],
                    link_bytes_per_cycle=kw["link_bytes_per_cycle"], wavelet_bytes=kw["wavelet_bytes"],
                    ramp_latency_cycles=kw["ramp_latency_cycles"], add_cycles_per_wavelet=1.25, algo=algo,
                    reduce_stage_cycles=kw["reduce_stage_cycles"], tree_level_cycles=kw["tree_level_cycles"],
                    tree_level_overlap_frac=kw["tree_level_overlap_frac"], max_tree_levels=5.0, tree_model=tm)
            for algo in ("chain", "store_forward", "tree"):
                out[f"bcast_{name}_{tm}_{algo}"] = fab.line_broadcast_cycles(
                    length_pes=L[None, :400], message_bytes=msg, hop_latency_cycles=kw["hop_latency_cycles"],
                    link_bytes_per_cycle=kw["link_bytes_per_cycle"], wavelet_bytes=kw["wavelet_bytes"],
                    ramp_latency_cycles=kw["ramp_latency_cycles"], algo=algo, tree_model=tm)
        out[f"allreduce_{name}"] = fab.allreduce_cycles(
            rows=P, cols=Q.T, message_bytes=256.0, **{k: v for k, v in kw.items() if k in (
                "hop_latency_cycles", "link_bytes_per_cycle", "wavelet_bytes", "ramp_latency_cycles", "reduce_stage_cycles",
                "tree_level_cycles", "tree_level_overlap_frac", "num_colors", "tree_model")})
    sides = wt._region_candidates(wafer).astype(float)[None, :]
    b = np.array([1.0, 3.0, 8.0, 40.0, 512.0])[:, None]
    ctx = np.array([1.0, 700.0, 4096.0, 32768.0, 100.0, 200.0])[:5, None] + 0.0 * b
    for name in ("llama-3.1-70b", "mixtral-8x7b"):
        m = cat.models[name]
        out[f"decode_{name}"] = wt.decode_block_cycles_array(arch=m, batch=b, context=ctx, rows=sides, cols=sides, fk=fk,
                                                             gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si)
        out[f"decode_rect_{name}"] = wt.decode_block_cycles_array(arch=m, batch=b, context=ctx, rows=sides, cols=sides[:, ::-1],
                                                                  fk=fk, gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si)
        out[f"head_{name}"] = wt.head_decode_cycles_array(arch=m, batch=b, rows=sides, cols=sides, fk=fk,
                                                          gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si)
        out[f"prefill_{name}"] = wt.prefill_block_cycles_array(
            arch=m, tokens=ctx, batch=b, rows=sides, cols=sides, fk=fk, gemm_mac_efficiency_frac=c.gemm_mac_efficiency_frac.si,
            gemm_step_overhead_cycles=c.gemm_step_overhead_cycles.si, prior_tokens=ctx / 3.0)
    return _clean(out)


def _grid(phase):
    b, c = np.meshgrid(np.array(BATCHES, dtype=float), np.array(CONTEXTS, dtype=float), indexing="ij")
    o = np.full(b.size, float(OUTPUT_TOKENS) if phase == "serve" else 0.0)
    return {"batch": b.ravel(), "context": c.ravel(), "output_tokens": o}


def cases():
    """(key, model, target, phase, software, options) of every evaluate/plan case."""
    out = []
    for m in MODELS:
        for t in TARGETS:
            for ph in PHASES:
                out.append((f"{m}|{t}|{ph}", m, t, ph, None, {}))
    for m, t, ph in EXTRA:
        out.append((f"{m}|{t}|{ph}", m, t, ph, None, {}))
    for sw, opts in VARIANTS:
        for t in TARGETS:
            for ph in ("decode", "prefill", "serve"):
                tag = f"{sw or 'default'}:{','.join(f'{k}={v}' for k, v in sorted(opts.items()))}"
                out.append((f"{MODELS[0]}|{t}|{ph}|{tag}", MODELS[0], t, ph, sw, opts))
    return out


def evaluations(cat) -> tuple[dict, dict]:
    from wseplan.plan import evaluate, plan, setup

    ev, pl = {}, {}
    for key, m, t, ph, sw, opts in cases():
        s = setup(m, t, phase=ph, software=sw, options=opts, catalog=cat)
        ev[key] = _clean(evaluate(s, _grid(ph)))
        r = plan(m, t, phase=ph, batch=8, context=4096, output_tokens=OUTPUT_TOKENS if ph == "serve" else None,
                 software=sw, options=opts, catalog=cat)
        pl[key] = _clean(r.model_dump(mode="json"))
    return ev, pl


def serves(cat) -> dict:
    from wseplan.serving import serve

    return {f"{m}|{t}": _clean(serve(m, t, catalog=cat).model_dump(mode="json")) for m, t in SERVE}


def compute(cat=None) -> dict:
    from wseplan.catalog.load import load_catalog

    cat = cat or load_catalog()
    ev, pl = evaluations(cat)
    return {"kernels": kernels(cat), "evaluate": ev, "plan": pl, "serve": serves(cat)}


def main() -> None:
    data = compute()
    tmp = FIXTURE.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    tmp.replace(FIXTURE)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    sys.exit(main())
