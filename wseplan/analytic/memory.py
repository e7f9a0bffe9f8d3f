"""Memory accounting (no I/O): wafer SRAM for resident weights and for weight streaming; GPU HBM per layout.

All functions are pure and numpy-vectorized; inputs and outputs in bytes, tokens and FLOP/s.
"""
from __future__ import annotations

import numpy as np

RECOMPUTE = ("none", "selective", "full")


def wafer_stream_buffer_bytes(layer_weight_bytes: np.ndarray) -> float:
    """SRAM held by streamed weights during training [bytes]: the largest layer, double-buffered for prefetch."""
    return 2.0 * float(np.max(layer_weight_bytes))


def wafer_train_activation_bytes_per_token(checkpoint_bytes_per_token: np.ndarray, activation_bytes_per_token: np.ndarray) -> float:
    """On-wafer activation bytes per token in weight-streaming training [bytes/token].

    Each layer's input is kept as a checkpoint for the backward pass (``sum(checkpoint)``), and one layer at a
    time holds its full activation set while its backward runs (``max(activation)``).
    """
    return float(np.sum(checkpoint_bytes_per_token) + np.max(activation_bytes_per_token))


def stream_min_tokens_compute_bound(*, layer_weight_bytes: np.ndarray, layer_flop_per_token: np.ndarray,
                                    peak_flop_per_s: float, stream_bandwidth_bytes_per_s: float) -> float:
    """Tokens per step needed for the forward compute of every layer to hide its weight load [tokens].

    A layer is compute-bound when ``T * flop_per_token / peak >= weight_bytes / bandwidth``, i.e.
    ``T >= peak * weight_bytes / (bandwidth * flop_per_token)``; the largest such T over layers binds.
    With 16-bit weights and ``2 FLOP`` per weight per token this is ``peak / bandwidth`` (about 1e5 tokens
    for a CS-3 at 15.5 PFLOP/s fed at 150 GB/s, the 12 x 100 GbE port rate of the MemoryX glossary).
    """
    w = np.asarray(layer_weight_bytes, dtype=float)
    f = np.asarray(layer_flop_per_token, dtype=float)
    ok = (w > 0) & (f > 0)
    if not ok.any():
        return 0.0
    return float(np.max(peak_flop_per_s * w[ok] / (stream_bandwidth_bytes_per_s * f[ok])))


def gpu_activation_bytes_per_token_layer(*, activation_bytes_per_token: float, checkpoint_bytes_per_token: float,
                                         replicated_bytes_per_token: float, tp, recompute: str, sequence_parallel=True):
    """Activation bytes kept per token per layer on one GPU [bytes] (Korthikanti et al. 2022, eqs. 2-4).

    ``none``/``selective`` keep the layer's activations (flash attention already drops the score terms that
    selective recomputation targets); with sequence parallelism everything is split over ``tp``, otherwise
    the norm/dropout part (``replicated_bytes_per_token``) is replicated. ``full`` keeps only the layer
    input (split over ``tp`` with sequence parallelism).
    """
    tp = np.asarray(tp, dtype=float)
    if recompute == "full":
        return checkpoint_bytes_per_token / np.where(sequence_parallel, tp, 1.0)
    if sequence_parallel:
        return activation_bytes_per_token / tp
    return replicated_bytes_per_token + (activation_bytes_per_token - replicated_bytes_per_token) / tp


def zero_shard(value, dp, stage: int, min_stage: int):
    """Divide ``value`` by ``dp`` when ZeRO ``stage >= min_stage`` (1: optimizer, 2: +gradients, 3: +weights)."""
    return value / np.asarray(dp, dtype=float) if stage >= min_stage else value * np.ones_like(np.asarray(dp, dtype=float))
