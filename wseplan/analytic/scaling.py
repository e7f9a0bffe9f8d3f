"""Scaling: training step time and efficiency from 1 to N systems.

* **WSE**: N CS systems data-parallel behind SwarmX. MemoryX weights are broadcast by the SwarmX tree at line
  rate and gradients are sum-reduced in it, so each system keeps its full stream bandwidth and every transfer
  waits ``ceil(log_fanout N)`` tree levels (:func:`wseplan.analytic.stream.plan_stream`). With a fixed global
  batch each system's share shrinks as ``B / N``; scaling is near-linear while that share stays above the
  streaming minimum (``min_batch_compute_bound``) and falls off below it, where the weight stream is exposed.
* **GPU**: data-parallel replicas of the smallest tensor x pipeline layout that fits (:func:`wseplan.fit.fit`),
  rounded up to a power of two GPUs (or of nodes) so that replicas tile the nodes, with the pipeline bubble
  ``(p - 1)/(m + p - 1)`` of one-sequence micro-batches,
  compute at an achievable fraction of peak, and the gradient all-reduce (ring, hierarchical NVLink/InfiniBand,
  :mod:`wseplan.analytic.collectives`) partly overlapped with the backward pass.

A "system" is one CS system for a wafer target and one node (``gpus_per_node`` GPUs) for a GPU target.
Efficiency is ``tokens_per_s(N) / (N * tokens_per_s(1))`` (strong scaling at a fixed global batch), clipped
to [0, 1]; where a point needs fewer sequences per system than one the sweep stops.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from . import collectives as coll


def system_counts(max_systems: int) -> list[int]:
    """1, 2, 4, ... up to ``max_systems`` (included) [count]."""
    if isinstance(max_systems, bool) or not isinstance(max_systems, (int, np.integer)) or max_systems < 1:
        raise InputError(f"max_systems: must be a positive integer, got {max_systems!r}")
    out = [1 << i for i in range(int(math.log2(max_systems)) + 1)]
    if out[-1] != max_systems:
        out.append(int(max_systems))
    return out


def strong_scaling_efficiency(*, tokens_per_s, tokens_per_s_one, num_systems):
    """``tokens_per_s / (num_systems * tokens_per_s_one)`` clipped to [0, 1] [fraction]."""
    t = np.asarray(tokens_per_s, dtype=float)
    ideal = np.asarray(num_systems, dtype=float) * np.asarray(tokens_per_s_one, dtype=float)
    return np.clip(np.divide(t, ideal, out=np.zeros_like(t * ideal), where=ideal > 0), 0.0, 1.0)


def gpu_dp_step_s(*, compute_s, backward_s, allreduce_s, overlap_frac):
    """Data-parallel GPU step [s]: compute plus the part of the gradient all-reduce not hidden in the backward.

    Notes
    -----
    ``exposed = allreduce - min(overlap_frac * allreduce, backward)``; ``step = compute + exposed``.
    """
    ar = np.asarray(allreduce_s, dtype=float)
    hidden = np.minimum(np.asarray(overlap_frac, dtype=float) * ar, np.asarray(backward_s, dtype=float))
    return np.asarray(compute_s, dtype=float) + ar - hidden


def pipeline_bubble_frac(*, num_stages, num_micro_batches):
    """Idle share of a synchronous pipeline (GPipe/1F1B): ``(p - 1) / (m + p - 1)`` [fraction]."""
    p = np.asarray(num_stages, dtype=float)
    m = np.asarray(num_micro_batches, dtype=float)
    return (p - 1.0) / (m + p - 1.0)


def _gpu_bottleneck(step_s: float, *, bubble_s: float, exposed_allreduce_s: float) -> str:
    """``pipeline_bubble`` or ``dp_allreduce`` when that loss is the larger one and exceeds 10% of the step."""
    name, loss = max((("pipeline_bubble", bubble_s), ("dp_allreduce", exposed_allreduce_s)), key=lambda x: x[1])
    return name if loss > 0.1 * step_s else "compute"


def wse_rows(model, target, catalog, *, precision: str, global_batch: int, context: int, counts: list[int],
             policy: str = "auto", micro_batch: int | None = None) -> list[dict]:
    """One row per system count for a wafer target (see module notes)."""
    from .stream import plan_stream

    rows = []
    for n in counts:
        if global_batch < n:
            break
        r = plan_stream(model, target, catalog, precision=precision, batch=global_batch, context=context, policy=policy,
                        num_systems=n, micro_batch=micro_batch)
        rows.append(dict(target=target.key, num_systems=n, num_devices=n, step_s=r.step_s, tokens_per_s=r.tokens_per_s,
                         per_system_batch=r.per_system_batch,
                        min_batch_compute_bound=r.min_batch_compute_bound,
                         utilization_frac=r.utilization_frac, bottleneck=r.bottleneck))
    return rows


def gpu_rows(model, target, catalog, *, precision: str, global_batch: int, context: int, counts: list[int]) -> list[dict]:
    """One row per node count for a GPU target: DP replicas of the smallest layout that fits."""
    from ..fit import build_workload, fit
    from .stream import load_stream_constants

    c = load_stream_constants()
    gpu = target.device
    gpn = int(gpu.gpus_per_node.si)
    f = fit(model, target.key, precision=precision, phase="train", batch=1, context=context, catalog=catalog)
    lo = f.layout
    R = lo.tensor_parallel * lo.pipeline_parallel if lo is not None else 1
    # replicas tile the nodes exactly: a power of two up to a node, whole powers of two of nodes above it
    R = 1 << max(0, math.ceil(math.log2(R)))
    R = R if R <= gpn else gpn * (1 << max(0, math.ceil(math.log2(R / gpn))))
    tp = min(lo.tensor_parallel if lo is not None else 1, R)
    pp = max(1, R // tp)
    w = build_workload(model, catalog, precision=precision, phase="train", batch=1, context=context)
    flop_tok = float(w.flop_per_token.sum())
    peak = gpu.peak_flop_per_s(precision) * c.gpu_dp_compute_efficiency_frac.si
    grad_bytes = w.total_params * catalog.defaults.gradient_bytes_per_param.si / R
    rows = []
    for n in counts:
        gpus = n * gpn
        dp = gpus // R
        if dp < 1 or global_batch < dp:
            continue
        tokens = global_batch * context / dp
        bubble = pipeline_bubble_frac(num_stages=pp, num_micro_batches=global_batch / dp)
        ideal = 3.0 * flop_tok * tokens / (R * peak)
        compute = ideal / (1.0 - bubble)
        backward = compute * 2.0 / 3.0
        ar = float(coll.hierarchical_allreduce_time_s(
            message_bytes=grad_bytes, num_ranks=dp, ranks_per_node=max(1, gpn // R),
            intra_bandwidth_bytes_per_s=gpu.scale_up_bandwidth_bytes_per_s.si, intra_latency_s=c.gpu_dp_link_latency_s.si,
            inter_bandwidth_bytes_per_s=gpu.scale_out_bandwidth_bytes_per_s.si, inter_latency_s=c.gpu_dp_link_latency_s.si))
        step = float(gpu_dp_step_s(compute_s=compute, backward_s=backward, allreduce_s=ar, overlap_frac=c.gpu_dp_overlap_frac.si))
        rows.append(dict(target=target.key, num_systems=n, num_devices=dp * R, step_s=step,
                         tokens_per_s=global_batch * context / step, per_system_batch=global_batch / n,
                         min_batch_compute_bound=None, utilization_frac=compute / step,
                         bottleneck=_gpu_bottleneck(step, bubble_s=compute - ideal, exposed_allreduce_s=step - compute)))
    return rows


def scaling_frame(model, targets, catalog, *, precision: str = "bf16", global_batch: int, context: int,
                  max_systems: int, policy: str = "auto", micro_batch: int | None = None):
    """Efficiency versus system count for each target, as a plot-ready pandas DataFrame.

    Parameters
    ----------
    model : Model or GenericModel
    targets : list of Target
        Wafer and/or GPU targets (their counts are ignored; the sweep sets them).
    global_batch : int
        Sequences per optimizer step, fixed across the sweep [sequences].
    context : int
        Sequence length [tokens].
    max_systems : int
        Largest system (CS system or GPU node) count [count].

    Returns
    -------
    pandas.DataFrame
        Columns ``target, num_systems, num_devices, step_s, tokens_per_s, efficiency_frac, per_system_batch,
        min_batch_compute_bound, utilization_frac, bottleneck``; ``attrs`` holds the model, batch and context.
    """
    import pandas as pd

    counts = system_counts(max_systems)
    for name, v in (("global_batch", global_batch), ("context", context)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}: must be a positive integer, got {v!r}")
    frames = []
    for t in targets:
        if t.kind == "wafer":
            rows = wse_rows(model, t, catalog, precision=precision, global_batch=global_batch, context=context,
                            counts=counts, policy=policy, micro_batch=micro_batch)
        else:
            rows = gpu_rows(model, t, catalog, precision=precision, global_batch=global_batch, context=context,
                            counts=counts)
        if not rows:
            raise InputError(f"targets: no system count up to {max_systems} can train {getattr(model, 'name', model)} "
                             f"on {t.key} with global batch {global_batch}; raise --max-systems or --batch")
        df = pd.DataFrame(rows)
        base = df["tokens_per_s"].iloc[0] / df["num_systems"].iloc[0]
        df["efficiency_frac"] = strong_scaling_efficiency(tokens_per_s=df["tokens_per_s"].to_numpy(),
                                                          tokens_per_s_one=base, num_systems=df["num_systems"].to_numpy())
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    cols = ["target", "num_systems", "num_devices", "step_s", "tokens_per_s", "efficiency_frac", "per_system_batch",
            "min_batch_compute_bound", "utilization_frac", "bottleneck"]
    out = out[cols]
    out.attrs.update(model=getattr(model, "name", str(model)), global_batch=global_batch, context=context,
                     precision=precision)
    return out
