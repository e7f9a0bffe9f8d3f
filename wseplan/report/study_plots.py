"""Plots shared by the study kinds: cost versus utilisation (the cost model re-evaluated, no time re-runs) and the
roofline with the FLOP/s the model predicts."""
from __future__ import annotations

import numpy as np

from ..analytic import cost as C
from ..targets import parse_target
from ..workload import build_workload
from .plots import Plot, Series, roofline_plot
from .study_schema import Study


def cost_vs_util(st: Study, cases: dict, chosen: dict, metric: str, ylabel: str, scale: float = 1.0,
                 loads: dict | None = None):
    """Re-evaluate ``metric`` of each target's chosen case over the study's utilisations (no time re-runs); ``loads``:
    per target, the share of its case's capacity its replica delivers (its slots held less than full), which a
    per-token cost is divided by."""
    utils = np.asarray(st.cost.utilizations, dtype=float)
    series, rows = [], []
    for tgt in st.target_names:
        if tgt not in chosen or (tgt, chosen[tgt][0]) not in cases:
            continue
        times, params = cases[(tgt, chosen[tgt][0])]
        p = C.nominal(params)
        p["utilization_frac"] = utils
        vals = np.broadcast_to(np.asarray(C.evaluate(p, times)[metric], dtype=float), utils.shape) / \
            max((loads or {}).get(tgt, 1.0), 1e-12)
        label = chosen[tgt][1]
        series.append(Series(label=label, x=list(utils), y=[float(v) / scale for v in vals]))
        rows += [{"target": label, "utilization_frac": float(u), "value": float(v)} for u, v in zip(utils, vals)]
    plot = Plot(title="Cost versus utilisation (share of hours the fleet does paid work)",
                xlabel="utilisation [fraction of hours]", ylabel=ylabel, series=series, logy=True)
    return plot, rows


def roofline(st: Study, m, cat, *, phase: str, batches: list[int], context: int, achieved: dict) -> Plot:
    """Each target's roof for one device (peak and the memory that feeds it; an upper bound, drawn apart) and the
    FLOP/s per device the model predicts there: predicted tokens/s x FLOPs per token / devices at each swept batch
    (serving), or MFU x peak at the chosen size (training). ``achieved``: (target, batch) ->
    ``{tokens_per_s, num_devices}`` or ``{mfu, label}``. The batch lines use the study's default precision."""
    roofs, points, predicted = [], [], []
    lo_b, hi_b = min(batches), max(batches)

    def workload(b: int, prec: str):
        return build_workload(m, cat, precision=prec, phase=phase, batch=b, context=context)

    def intensity(b: int, prec: str = st.precision) -> float:
        w = workload(b, prec)
        if phase == "decode":
            return float(w.flop_per_token.sum()) * b / (w.total_weight_bytes + w.kv_cache_bytes)
        # a training step reads each weight for forward and backward: FLOPs per weight byte read
        return 3.0 * float(w.flop_per_token.sum()) * b * context / (2.0 * w.total_weight_bytes)

    for tgt in st.target_names:
        t = parse_target(tgt, cat)
        n = 1  # one device: the predicted FLOP/s are per device (replica sizes may differ by batch)
        prec = st.precision_for(tgt)
        peak = t.device.peak_flop_per_s(prec) * n
        if t.kind == "wafer":
            bw, mem = t.device.sram_bandwidth_bytes_per_s.si * n, "SRAM"
        else:
            bw, mem = t.device.hbm_bandwidth_bytes_per_s.si * n, "HBM"
        label = tgt if st.kind != "training" else t.key
        roofs.append({"label": f"{label} roof (peak, {mem})", "peak_flop_per_s": peak, "bandwidth_bytes_per_s": bw})
        if t.kind == "wafer" and phase == "train":  # weights stream in from MemoryX over the system I/O
            sysm = cat.systems[t.device.system]
            mx = cat.memoryx[sysm.memoryx]
            roofs.append({"label": f"{t.key} roof (MemoryX weight stream)", "peak_flop_per_s": peak,
                          "bandwidth_bytes_per_s": mx.dram_stream_bandwidth_bytes_per_s.si * n})
        xs, ys, what = [], [], ""
        for b in sorted(batches):
            hit = achieved.get((tgt, b))
            if hit is None:
                continue
            what = hit.get("label", "")
            # a device reads its weights once per step for the sequences of its own replica (or system)
            xs.append(intensity(max(1, round(b / hit.get("replicas", 1))), prec))
            ys.append(hit["mfu"] * peak if "mfu" in hit else
                      hit["tokens_per_s"] * float(workload(b, prec).flop_per_token.sum()) / hit.get("num_devices", 1))
        if xs:
            predicted.append({"label": f"{label} predicted" + (f" ({what}, per device)" if what else " (per device)"),
                              "intensity_flop_per_byte": xs, "flop_per_s": ys})
    for b in sorted({lo_b, hi_b}):
        points.append({"label": f"{phase}, batch {b}", "intensity_flop_per_byte": intensity(b)})
    precs = sorted({st.precision_for(t) for t in st.target_names})
    title = f"Roofline: {m.name} {phase} ({', '.join(precs)})"
    return roofline_plot(targets=roofs, points=points, predicted=predicted, title=title)
