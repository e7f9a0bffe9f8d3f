"""The serving engine: how an inference engine turns forward passes into TTFT, TPOT and throughput.

One implementation for every device family. A family supplies one primitive, the *pass*: a forward pass of
``decode_seqs`` sequences that each add one token on top of ``decode_kv`` cached tokens, plus
``prefill_tokens`` prompt tokens that attend to ``prefill_kv`` earlier tokens of their prompt on average.
It returns the pass's latency (first layer in to last layer out) and the time its slowest pipeline stage is
busy (equal to the latency when there is one stage). This module composes passes into:

* a **decode round** (one output token for every running sequence): on a pipeline of ``S`` stages the batch is
  cut into ``n <= S`` micro-batches in flight, ``TPOT = max(latency(B/n), n * slowest_stage(B/n))``, minimised
  over ``n`` (GPipe/WaferLLM-style pipelining of independent sequences);
* a **prefill** of prompts in passes of ``chunk`` tokens that follow each other through the pipeline:
  ``latency(chunk) + (passes - 1) * slowest_stage(chunk)``;
* the **steady state of in-flight batching with chunked prefill** (Orca, Yu et al. OSDI 2022; Sarathi-Serve,
  Agrawal et al. OSDI 2024): every engine step runs one decode token for each of the ``B`` running requests and
  a share of the prompt tokens of new requests, ``P = B * input / output`` per step on average so that prefill
  work keeps pace with completions, capped by the step's token budget (``max_num_batched_tokens``); TPOT is
  the mixed step (prefill interference included), a request's own TTFT is its prompt's chunks at the step's
  spare budget, and the replica's capacity counts both prefill and decode work;
* **speculative decoding** (Leviathan et al., ICML 2023; Chen et al. 2023): a draft proposes ``k`` tokens, the
  target verifies ``k + 1`` positions per sequence in one pass, and
  ``E[accepted] = (1 - alpha^(k+1)) / (1 - alpha)`` tokens are emitted per step at per-token acceptance
  ``alpha``; the step costs the verification pass plus ``k`` draft passes.

All functions are pure and vectorized over configurations (numpy arrays broadcast).
"""
from __future__ import annotations

import numpy as np

#: what :func:`phase_objective` minimises per phase when a layout is searched
OBJECTIVES = {"train": "step_s", "prefill": "step_s", "decode": "tpot_s", "serve": "tpot_s"}


def phase_objective(phase: str, tim: dict[str, np.ndarray]) -> np.ndarray:
    """Smaller is better: training and prefill minimise the step, decode and serving the time per output token
    at the given concurrency per replica (the replica search of :mod:`wseplan.serving` weighs cost instead)."""
    key = OBJECTIVES[phase]
    n = len(tim["step_s"])
    if key == "neg_tokens_per_s":
        return -np.asarray(tim.get("tokens_per_s", np.full(n, np.nan)), dtype=float)
    return np.asarray(tim.get(key, np.full(n, np.nan)), dtype=float)


def accepted_tokens_per_step(*, draft_tokens, acceptance_frac):
    """Expected tokens emitted per verification step [tokens]: ``(1 - a^(k+1)) / (1 - a)``, ``k + 1`` at ``a = 1``
    and 1 without speculation (``k = 0``). Leviathan, Kalman and Matias, "Fast Inference from Transformers via
    Speculative Decoding", ICML 2023, eq. 1 (i.i.d. per-token acceptance)."""
    k = np.asarray(draft_tokens, dtype=float)
    a = np.clip(np.asarray(acceptance_frac, dtype=float), 0.0, 1.0)
    safe = np.where(a < 1.0, a, 0.5)
    out = (1.0 - safe ** (k + 1.0)) / (1.0 - safe)
    return np.where(a < 1.0, out, k + 1.0)


def micro_batch_choices(batch, stages, max_choices: int = 12):
    """Candidate micro-batch counts ``n`` per row: powers of two up to ``min(stages, batch)`` and that bound itself.

    Returns an (N, K) float array with ``inf`` where a candidate does not apply (K <= ``max_choices``)."""
    b = np.asarray(batch, dtype=float)
    s = np.asarray(stages, dtype=float)
    top = np.maximum(np.minimum(s, b), 1.0)
    pw = 2.0 ** np.arange(0, max_choices - 1)
    cand = np.concatenate([np.broadcast_to(pw, (len(top), len(pw))), top[:, None]], axis=1)
    cand = np.where(cand <= top[:, None], cand, np.inf)
    return np.sort(cand, axis=1)


def decode_round(pass_fn, *, batch, stages, **pass_kw):
    """Time of one decode round (one token for each of ``batch`` sequences) [s], with micro-batching on pipelines.

    ``pass_fn(idx, seqs, **kw)`` evaluates passes for rows ``idx`` of micro-batches of ``seqs`` sequences and
    returns ``(latency_s, stage_s, parts)``; ``pass_kw`` arrays (per row) are passed through, indexed.
    Returns ``(tpot_s, parts_s, micro_batches)``, parts scaled to the round.
    """
    b = np.asarray(batch, dtype=float)
    n_rows = len(b)
    cand = micro_batch_choices(b, stages)
    K = cand.shape[1]
    rows = np.repeat(np.arange(n_rows), K)
    n = cand.ravel()
    ok = np.isfinite(n)
    rows, n = rows[ok], n[ok]
    mb = np.ceil(b[rows] / n)
    kw = {k: (np.asarray(v)[rows] if np.ndim(v) else v) for k, v in pass_kw.items()}
    lat, stage, parts = pass_fn(rows, mb, **kw)
    lat = np.broadcast_to(np.asarray(lat, dtype=float), mb.shape)
    stage = np.broadcast_to(np.asarray(stage, dtype=float), mb.shape)
    rnd = np.maximum(lat, n * stage)
    best = np.full(n_rows, np.inf)
    np.minimum.at(best, rows, rnd)
    # first candidate reaching the row's minimum (fewest micro-batches on a tie)
    hit = rnd <= best[rows]
    first = np.full(n_rows, -1)
    idx = np.nonzero(hit)[0][::-1]
    first[rows[idx]] = idx
    scale = rnd[first] / np.where(lat[first] > 0, lat[first], 1.0)
    parts_s = {k: np.broadcast_to(np.asarray(v, dtype=float), lat.shape)[first] * scale for k, v in parts.items()}
    return best, parts_s, n[first]


def pipelined_passes_s(*, latency_s, stage_s, passes):
    """Time for ``passes`` passes that follow each other through a pipeline [s]: ``lat + (passes - 1) * stage``."""
    return np.asarray(latency_s) + (np.asarray(passes, dtype=float) - 1.0) * np.asarray(stage_s)


def prefill_passes(*, prompt_tokens, batch, pass_mode: str, token_budget):
    """How a batch of prompts is cut into passes [tokens per pass, passes, prior tokens attended on average].

    ``pass_mode``: ``batch`` (every prompt of the batch in one pass: static batching), ``prompt`` (one whole
    prompt per pass, prompts pipelined: the WaferLLM research code), ``chunk`` (passes of ``token_budget``
    tokens: chunked prefill). A chunk of prompt ``p`` tokens long that starts at offset ``o`` attends to ``o``
    earlier tokens plus its own causal half; averaged over a prompt's chunks ``o`` is ``(p - c) / 2``.
    """
    p = np.asarray(prompt_tokens, dtype=float)
    b = np.asarray(batch, dtype=float)
    if pass_mode == "batch":
        return b * p, np.ones_like(p), np.zeros_like(p), b
    if pass_mode == "prompt":
        return p, b, np.zeros_like(p), np.ones_like(b)
    c = np.minimum(np.asarray(token_budget, dtype=float), p)
    per_prompt = np.ceil(p / c)
    return c, b * per_prompt, (p - c) / 2.0, np.ones_like(b)


def steady_state_prefill_tokens(*, batch, input_tokens, output_tokens, accepted_per_step=1.0):
    """Prompt tokens per engine step that keep prefill in step with completions [tokens]:
    ``B * input / output`` (one request finishes every ``output / B`` steps per slot), divided by the tokens a
    step emits per sequence (speculative decoding finishes requests in fewer steps)."""
    o = np.maximum(np.asarray(output_tokens, dtype=float), 1.0)
    return np.asarray(batch, dtype=float) * np.asarray(input_tokens, dtype=float) / o * np.asarray(accepted_per_step)
