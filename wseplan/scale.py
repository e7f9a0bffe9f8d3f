"""Scaling: training step time and efficiency from 1 to N systems, through the planning chain.

Each point is one evaluation of :func:`wseplan.plan.evaluate` on ``<key>x<N * devices per system>``: wafers are
N CS systems data-parallel behind SwarmX (:mod:`wseplan.devices.wafer_stream`), GPUs are N nodes with the
layout searched at that size (:mod:`wseplan.devices.gpu`), so a point of ``scale`` is the same number ``time``
gives for that target. With a fixed global batch each system's share shrinks as ``B / N``. A point where the
model does not fit keeps ``fits: false`` and no time.

A "system" is one CS system for a wafer target and one node (``gpus_per_node`` GPUs) for a GPU target.
Efficiency is ``tokens_per_s(N) / (N / N0 * tokens_per_s(N0))`` (strong scaling at a fixed global batch, from
the smallest count ``N0`` that fits), clipped to [0, 1].
"""
from __future__ import annotations

import math

import numpy as np

from .catalog import load_catalog
from .errors import InputError
from .plan import default_sizes, one_sequence_hint, plan, target_with_count
from .plan_notes import no_time_model
from .targets import MAX_GPUS, parse_target
from .workload import resolve_model
from .records import layout_label


def system_counts(max_systems: int) -> list[int]:
    """1, 2, 4, ... up to ``max_systems`` (included) [count]."""
    if isinstance(max_systems, bool) or not isinstance(max_systems, (int, np.integer)) or max_systems < 1:
        raise InputError(f"max_systems: must be a positive integer, got {max_systems!r}")
    out = [1 << i for i in range(int(math.log2(max_systems)) + 1)]
    if out[-1] != max_systems:
        out.append(int(max_systems))
    return out


def strong_scaling_efficiency(*, tokens_per_s, tokens_per_s_one, num_systems):
    """``tokens_per_s / (num_systems * tokens_per_s_one)``, at least 0 [fraction]: above 1 where a larger count runs a
    better layout than the baseline could (a memory-starved baseline), which a clip at 1 would hide."""
    t = np.asarray(tokens_per_s, dtype=float)
    ideal = np.asarray(num_systems, dtype=float) * np.asarray(tokens_per_s_one, dtype=float)
    return np.maximum(np.divide(t, ideal, out=np.zeros_like(t * ideal), where=ideal > 0), 0.0)


def cluster_limit(target, catalog) -> int:
    """The most systems of ``target``'s kind one cluster holds: a wafer system's ``max_cluster_systems``; GPU nodes up to
    wseplan's bound on a target's GPUs."""
    if target.kind == "wafer":
        sys_key = target.device.system
        return int(catalog.systems[sys_key].max_cluster_systems.si) if sys_key in catalog.systems else 1
    return MAX_GPUS // int(target.device.gpus_per_node.si)


def stop_note(target, catalog, *, global_batch: int, max_systems: int, counts_done: list[int]) -> str | None:
    """Why a target's rows stop below ``max_systems`` (its cluster's limit, or a batch of fewer sequences than
    systems), or None."""
    top = max(counts_done, default=0)
    if top >= max_systems:
        return None
    limit = cluster_limit(target, catalog)
    why = (f"the largest {target.key} cluster holds {limit:,} systems" if limit < max_systems and limit < global_batch
           else f"the global batch of {global_batch:,} sequences gives each system at least one up to {global_batch:,}"
           if global_batch < max_systems else None)
    return None if why is None else f"{target.key} stops at {top:,} systems: {why}"


def scaling_rows(model, target, catalog, *, precision: str, global_batch: int, context: int, counts: list[int],
                 software: str | None = None, options: dict | None = None) -> list[dict]:
    """One row per system count (``plan`` on ``<key>x<N x devices per system>``)."""
    rows = []
    mb = (options or {}).get("micro_batch")
    per = 1 if target.kind == "wafer" else int(target.device.gpus_per_node.si)
    for n in counts:
        if global_batch < n or (mb is not None and mb > -(-global_batch // n)):  # a pass beyond a system's share
            break
        if n > cluster_limit(target, catalog):  # the sweep stops where the target's cluster does (audit32c F6)
            break
        t = target_with_count(target, n * per)
        r = plan(model, t, phase="train", precision=precision, batch=global_batch, context=context, software=software,
                 options=options, catalog=catalog)
        if r.fits and r.step_s is None:  # audit31b H3: a layer-list model on GPUs (a traceback before)
            raise InputError(f"targets: {target.key}: {no_time_model(r.family, r.model)}; scale it on wafers "
                             "(--targets wse3)")
        st = r.details.get("streaming") or {}
        rows.append(dict(target=target.key, num_systems=n, num_devices=r.num_devices, fits=r.fits, step_s=r.step_s,
                         tokens_per_s=r.tokens_per_s, per_system_batch=float(-(-global_batch // n)),
                         min_batch_compute_bound=st.get("min_batch_compute_bound"),
                         model_flop_utilization_frac=r.model_flop_utilization_frac, bottleneck=r.bottleneck,
                         layout=layout_label(r.layout), binding=r.binding, max_tokens_on_wafer=st.get("max_tokens_on_wafer"),
                         # the step's interval, as `time --phase train` gives it (audit33d H2)
                         step_low_s=r.interval_low if r.interval_metric == "step_s" else None,
                         step_high_s=r.interval_high if r.interval_metric == "step_s" else None))
    return rows


def scaling_frame(model, targets, catalog=None, *, precision: str = "bf16", global_batch: int | None = None,
                  context: int | None = None, max_systems: int = 64, policy: str = "auto", micro_batch: int | None = None,
                  software: str | None = None):
    """Efficiency versus system count for each target, as a plot-ready pandas DataFrame (the API behind ``wseplan
    scale``).

    ``model``: a name, path or model; ``targets``: hardware keys without a count (``["wse3", "h100"]``) or parsed
    targets; ``catalog``: the bundled one when None; ``global_batch`` and ``context``: the training defaults of
    ``catalogs/defaults.yaml`` when None (as ``time --phase train`` takes them). Columns ``target, num_systems,
    num_devices, fits, step_s, tokens_per_s, efficiency_frac, per_system_batch, min_batch_compute_bound,
    model_flop_utilization_frac, bottleneck, layout, efficiency_baseline_systems`` (the target's smallest count that
    fits, which its efficiency is relative to); ``attrs`` holds the model, batch and context. ``policy``/
    ``micro_batch`` are wafer training options.
    """
    import pandas as pd

    catalog = catalog or load_catalog()
    model = resolve_model(model, catalog) if isinstance(model, str) else model
    if isinstance(targets, str):  # 'wse3,h100' as the CLI takes it (review28 #10: iterated letter by letter)
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    targets = [parse_target(t, catalog) if isinstance(t, str) else t for t in targets]
    if not targets:
        raise InputError("targets: give at least one hardware key (e.g. 'wse3,h100')")
    if global_batch is None or context is None:
        b, c, _, _ = default_sizes(catalog, "train", global_batch, context, 0, model=model)
        global_batch, context = b, c
    counts = system_counts(max_systems)
    for name, v in (("global_batch", global_batch), ("context", context)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}: must be a positive integer, got {v!r}")
    frames, notes = [], []
    for t in targets:
        opts = {"policy": policy, "micro_batch": micro_batch} if t.kind == "wafer" else {}
        rows = scaling_rows(model, t, catalog, precision=precision, global_batch=global_batch, context=context,
                            counts=counts, software=software, options=opts)
        df = pd.DataFrame(rows)
        ok = df["fits"].to_numpy(dtype=bool)
        if not ok.any():
            binds = df["binding"].iloc[-1]  # what binds at the largest count: more systems do not lift MemoryX or a policy
            one = df["max_tokens_on_wafer"].iloc[-1]
            fix = ("MemoryX binds: the weights and optimizer state exceed its largest option" if binds == "memoryx" else
                   f"the activations bind at every count under --policy {policy}: try --policy auto"
                   if t.kind == "wafer" and policy != "auto" else
                   one_sequence_hint(context, one) if one is not None and one == one and one < context else
                   "raise --max-systems or lower --batch")
            raise InputError(f"targets: no system count up to {max_systems} can train {getattr(model, 'name', model)} "
                             f"on {t.key} with global batch {global_batch}; {fix}")
        df = df.drop(columns=["binding", "max_tokens_on_wafer"])
        i0 = int(np.argmax(ok))
        base = df["tokens_per_s"].iloc[i0] / df["num_systems"].iloc[i0]
        tps = df["tokens_per_s"].to_numpy(dtype=float)
        eff = strong_scaling_efficiency(tokens_per_s=np.nan_to_num(tps), tokens_per_s_one=base,
                                        num_systems=df["num_systems"].to_numpy())
        df["efficiency_frac"] = np.where(ok, eff, np.nan)
        df["efficiency_baseline_systems"] = int(df["num_systems"].iloc[i0])  # N0: each target's own smallest fit
        frames.append(df)
        note = stop_note(t, catalog, global_batch=global_batch, max_systems=max_systems,
                         counts_done=[int(x) for x in df["num_systems"]])
        if note:
            notes.append(note)
    out = pd.concat(frames, ignore_index=True)
    cols = ["target", "num_systems", "num_devices", "fits", "step_s", "tokens_per_s", "efficiency_frac",
            "per_system_batch", "min_batch_compute_bound", "model_flop_utilization_frac", "bottleneck", "layout",
            "efficiency_baseline_systems", "step_low_s", "step_high_s"]
    out = out[cols]
    out.attrs.update(model=getattr(model, "name", str(model)), global_batch=global_batch, context=context,
                     precision=precision, notes=notes)
    return out
