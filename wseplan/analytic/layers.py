"""Per-layer-type quantities of the time models, from the block types the fit's workload is built from.

The GPU and wafer time models time each of a model's block types (:func:`wseplan.workload.block_types`: dense or
MoE MLP with its shared experts, full, sliding or chunked attention, standard or MLA) as what it is and add the
types by their layer counts, so that ``time`` and ``fit`` read one description of the architecture. A uniform model
has one block type and takes the arithmetic of a single block, unchanged.

Functions here work on numpy arrays and on Python floats (:mod:`.elementwise`). Units: tokens, layers.
"""
from __future__ import annotations

import numpy as np

from ..architecture import Attention, BlockType, mean_attended_tokens
from . import elementwise as X
from .rows import distinct


def attended_per_token(att: Attention, prior, new, *, decode: bool):
    """Keys each of ``new`` tokens of a sequence attends to, on average, after ``prior`` cached tokens [tokens].

    Full attention: ``prior + (new + 1) / 2`` (causal). A sliding or chunked layer caps each query's keys at its
    window: in a decode step ``min(prior + (new + 1) / 2, window)`` (for a chunked layer the chunk's largest span,
    the workload's decode convention, :func:`~wseplan.architecture.mean_attended_tokens`); over a prompt chunk the
    mean over its positions ``prior + 1 .. prior + new`` of the keys each sees (the same function's causal sums).
    """
    if att.window is None:
        return prior + (new + 1.0) / 2.0
    if decode:
        return X.minimum(prior + (new + 1.0) / 2.0, float(att.window))
    end = prior + new
    pairs = (end * mean_attended_tokens(att.span, att.window, end, phase="prefill")
             - prior * mean_attended_tokens(att.span, att.window, prior, phase="prefill"))
    return pairs / X.maximum(new, 1e-12)


def cached_tokens(att: Attention, tokens):
    """Tokens of a sequence of ``tokens`` whose K/V a layer keeps and reads: at most its window [tokens]."""
    return tokens if att.window is None else X.minimum(tokens, float(att.window))


def _type_index(types: tuple[BlockType, ...], num_layers: int) -> np.ndarray:
    idx = np.empty(num_layers, dtype=np.int64)
    for j, b in enumerate(types):
        idx[list(b.layers)] = j
    return idx


#: distinct layer counts per type of the runs of ``w`` consecutive layers, by (types object, w)
_RUNS: dict = {}


def run_counts(types: tuple[BlockType, ...], num_layers: int, w: int) -> np.ndarray:
    """Distinct per-type layer counts ``(runs, types)`` of the runs of ``min(w, L)`` consecutive layers."""
    key = (id(types), int(w))
    hit = _RUNS.get(key)
    if hit is not None and hit[0] is types:
        return hit[1]
    w = min(int(w), num_layers)
    onehot = np.zeros((num_layers + 1, len(types)))
    onehot[np.arange(1, num_layers + 1), _type_index(types, num_layers)] = 1.0
    cum = np.cumsum(onehot, axis=0)
    counts = np.unique(cum[w:] - cum[:num_layers + 1 - w], axis=0)
    if len(_RUNS) >= 256:
        _RUNS.clear()
    _RUNS[key] = (types, counts)
    return counts


def slowest_run(types: tuple[BlockType, ...], num_layers: int, pp, layer_s: list):
    """Layer counts per type of a pipeline's fullest stage: the slowest run of ``ceil(L / pp)`` consecutive layers
    by the per-type layer times ``layer_s`` [s] (arrays broadcast with ``pp``). One type: ``[ceil(L / pp)]``.

    A stage holds at most ``ceil(L / pp)`` consecutive layers; where layer types alternate (Llama 4's dense and MoE
    layers, gpt-oss's sliding and full ones) every run holds nearly the mix, and where they are grouped (DeepSeek-V3's
    three leading dense layers) the slowest run is the stage of the slower type.
    """
    w = X.ceil(num_layers / X.asfloat(pp))
    if len(types) == 1:
        return [w]
    if not isinstance(w, np.ndarray) and not any(isinstance(t, np.ndarray) for t in layer_s):
        runs = run_counts(types, num_layers, int(w))
        best, best_t = None, None
        for row in runs:
            t = 0.0
            for c, tj in zip(row, layer_s):
                t = t + float(c) * tj
            if best_t is None or t > best_t:
                best, best_t = row, t
        return [float(c) for c in best]
    shape = np.broadcast_shapes(np.shape(w), *(np.shape(t) for t in layer_s))
    wb = np.broadcast_to(w, shape)
    ts = [np.broadcast_to(np.asarray(t, dtype=float), shape) for t in layer_s]
    out = [np.zeros(shape) for _ in types]
    for wv in distinct(wb):
        sel = wb == wv
        runs = run_counts(types, num_layers, int(wv))
        stage = np.stack([sum(float(c) * t[sel] for c, t in zip(row, ts)) for row in runs])
        pick = runs[np.argmax(stage, axis=0)]
        for j in range(len(types)):
            out[j][sel] = pick[:, j]
    return out
