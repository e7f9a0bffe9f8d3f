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
  a share of the prompt tokens of new requests, ``P = (B - 1) * input / output`` per step on average (the other
  requests' prompts: a request's own is prefilled before it decodes) so that prefill work keeps pace with
  completions (times the tokens a speculative step emits), capped by the step's token budget
  (``max_num_batched_tokens``); TPOT is
  the mixed step (prefill interference included), a request's own TTFT is its prompt's chunks at the step's
  spare budget, and the replica's capacity counts both prefill and decode work;
* **speculative decoding** (Leviathan et al., ICML 2023; Chen et al. 2023): a draft proposes ``k`` tokens, the
  target verifies ``k + 1`` positions per sequence in one pass, and
  ``E[accepted] = (1 - alpha^(k+1)) / (1 - alpha)`` tokens are emitted per step at per-token acceptance
  ``alpha``; the step costs the verification pass plus ``k`` draft passes (without the engine's per-step host work,
  paid once with the verification).

All functions are pure and vectorized over configurations (numpy arrays broadcast). :func:`decode_round`,
:func:`pipelined_passes_s`, :func:`prefill_passes`, :func:`steady_state_prefill_tokens` and
:func:`closed_loop_prefill_wait` also take one configuration as Python floats (written with the helpers of
:mod:`wseplan.analytic.elementwise`: the same IEEE operations, no numpy call per operation); where the floats cannot
give numpy's answer they raise one of :data:`~wseplan.analytic.elementwise.SCALAR_ERRORS` and the caller evaluates
the arrays instead.
"""
from __future__ import annotations

import math

import numpy as np

from . import elementwise as X

#: what :func:`phase_objective` minimises per phase when a layout is searched
OBJECTIVES = {"train": "step_s", "prefill": "step_s", "decode": "tpot_s", "serve": "request_s"}


def phase_objective(phase: str, tim: dict[str, np.ndarray]) -> np.ndarray:
    """Smaller is better: training and prefill minimise the step (a prefill on an in-flight engine is laid out as its
    serving replica instead: :func:`wseplan.plan._serving_choice`), decode the time per output token, serving a
    request's time in the engine (TTFT + (answer tokens - 1) x TPOT: at the given concurrency per replica also the
    most requests/s; for a long answer it is TPOT's choice, for a short one it weighs the prompt) (the replica search
    of :mod:`wseplan.serving` weighs cost instead)."""
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


#: the powers of two of :func:`micro_batch_choices` (its default ``max_choices``)
_POWERS = 2.0 ** np.arange(0, 11)
_POWERS_LIST = _POWERS.tolist()


def _micro_batch_rows(b: np.ndarray, stages) -> tuple[np.ndarray, np.ndarray]:
    """The finite candidates of :func:`micro_batch_choices` as (row, n) pairs, rows ascending and ``n`` ascending
    within a row, each value once: the bound ``min(stages, batch)`` is a power of two in most rows (pipelines of
    2^k stages), and a repeated ``n`` is the same pass again (same ``mb``, same time), so dropping it changes no
    result of :func:`decode_round` (it keeps the first of equal rounds) and saves up to half its passes."""
    top = np.maximum(np.minimum(np.asarray(stages, dtype=float), b), 1.0)
    if top.ndim != 1 or not np.isfinite(top).all():  # the general form (no row has a non-finite bound in practice)
        cand = micro_batch_choices(b, stages)
        rows = np.repeat(np.arange(len(b)), cand.shape[1])
        n = cand.ravel()
        ok = np.isfinite(n)
        return rows[ok], n[ok]
    c = np.searchsorted(_POWERS, top, side="right")  # powers of two <= top (at least 1: top >= 1)
    count = c + (_POWERS[c - 1] != top)  # and top itself unless it is the last of them
    rows = np.repeat(np.arange(len(top)), count)
    j = np.arange(len(rows)) - (np.cumsum(count) - count)[rows]
    n = np.where(j < c[rows], _POWERS[np.minimum(j, len(_POWERS) - 1)], top[rows])
    return rows, n


def decode_round(pass_fn, *, batch, stages, counts=None, **pass_kw):
    """Time of one decode round (one token for each of ``batch`` sequences) [s], with micro-batching on pipelines.

    ``pass_fn(idx, seqs, **kw)`` evaluates passes for rows ``idx`` of micro-batches of ``seqs`` sequences and
    returns ``(latency_s, stage_s, parts)``; ``pass_kw`` arrays (per row) are passed through, indexed.
    Returns ``(tpot_s, parts_s, micro_batches)``, parts scaled to the round. A candidate count ``n`` runs micro-batches
    of ``ceil(batch / n)`` sequences, as many as the batch fills (``ceil(batch / ceil(batch / n))``: 16 sequences in
    micro-batches of 3 are 6 of them, not 7). ``counts`` (per row) fixes the number of micro-batches instead of
    choosing the fastest of the candidates (the same round run as another round chose).

    A Python float ``batch`` is one configuration (``stages`` and ``pass_kw`` floats too): its candidates are
    passed one at a time as ``pass_fn(None, seqs, **kw)``, which returns floats, and the round is floats (the
    candidates: :func:`round_counts`).
    """
    if type(batch) is float:
        return _decode_round_row(pass_fn, batch, stages, pass_kw, counts)
    b = np.asarray(batch, dtype=float)
    n_rows = len(b)
    if counts is None:
        rows, n = _micro_batch_rows(b, stages)
    else:
        rows, n = np.arange(n_rows), np.broadcast_to(np.asarray(counts, dtype=float), (n_rows,))
    mb = np.ceil(b[rows] / n)
    n = np.ceil(b[rows] / mb)  # the micro-batches of mb sequences the batch fills (7 of 3 for 16 are 6)
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


def round_counts(b: float, stages: float) -> list[float]:
    """The micro-batch counts a decode round of one configuration tries (:func:`_micro_batch_rows` of its row, in
    Python floats): the powers of two up to ``max(min(stages, b), 1)`` and that bound. Raises ValueError on a
    non-finite bound (the arrays' general form decides)."""
    top = X.maximum(X.minimum(stages, b), 1.0)
    if not math.isfinite(top):  # the general form of the arrays
        raise ValueError("decode_round: a non-finite micro-batch bound")
    cand = [p for p in _POWERS_LIST if p <= top]
    if cand[-1] != top:
        cand.append(top)
    return cand


def _decode_round_row(pass_fn, b: float, stages: float, kw: dict, counts=None):
    """:func:`decode_round` of one configuration in Python floats: the candidates of :func:`_micro_batch_rows` in the
    same order (or the one ``counts`` fixes), the same minimum (NaN-propagating, as ``np.minimum.at``) and the same
    first candidate reaching it."""
    cand = round_counts(b, stages) if counts is None else [float(counts)]
    best = math.inf
    rounds = []
    for n in cand:
        mb = X.ceil(b / n)
        n = X.ceil(b / mb)  # the micro-batches of mb sequences the batch fills
        lat, stage, parts = pass_fn(None, mb, **kw)
        rnd = X.maximum(lat, n * stage)
        best = X.minimum(best, rnd)
        rounds.append((rnd, lat, parts, n))
    for rnd, lat, parts, n in rounds:
        if rnd <= best:  # first candidate reaching the minimum (fewest micro-batches on a tie)
            scale = rnd / (lat if lat > 0 else 1.0)
            return best, {k: v * scale for k, v in parts.items()}, n
    raise ValueError("decode_round: a NaN round")  # no candidate reaches a NaN minimum: the arrays decide


def pipelined_passes_s(*, latency_s, stage_s, passes):
    """Time for ``passes`` passes that follow each other through a pipeline [s]: ``lat + (passes - 1) * stage``."""
    if type(latency_s) is float:
        return latency_s + (X.asfloat(passes) - 1.0) * stage_s
    return np.asarray(latency_s) + (np.asarray(passes, dtype=float) - 1.0) * np.asarray(stage_s)


def prefill_chunk_budgets(token_budget: float, pass_mode: str, min_chunk_tokens: float | None = None) -> list[float]:
    """Chunk sizes a chunked prefill may cut prompts into [tokens]: the token budget, then halves of it down to
    ``min_chunk_tokens`` (the engine's; None: the budget alone). Through ``S`` pipeline stages ``n`` chunks take
    ``S + n - 1`` stage times, so a prompt shorter than the budget finishes sooner in several smaller chunks that fill
    the stages (Li et al., "TeraPipe: token-level pipeline parallelism", ICML 2021; Cerebras' inference release:
    prompt chunks follow each other through the wafers); on one stage a smaller chunk is never faster."""
    if pass_mode != "chunk" or min_chunk_tokens is None:
        return [float(token_budget)]
    out, c = [float(token_budget)], float(token_budget) / 2.0
    while c >= float(min_chunk_tokens):
        out.append(c)
        c /= 2.0
    return out


def cut_passes(tokens, cut):
    """A finer cut of ``tokens`` prompt tokens: chunks of ``cut`` tokens (all of them if fewer), the last short but timed
    whole, so one more token never makes the prefill faster [(tokens per chunk, chunks)]."""
    chunk = X.minimum(cut, tokens)
    return chunk, X.ceil(tokens / chunk - 1e-9)


def prefill_passes(*, prompt_tokens, batch, pass_mode: str, token_budget):
    """How a batch of prompts is cut into passes [tokens per pass, passes, prior tokens attended on average].

    ``pass_mode``: ``batch`` (every prompt of the batch in one pass: static batching), ``prompt`` (one whole
    prompt per pass, prompts pipelined: the WaferLLM research code), ``chunk`` (chunked prefill: the batch's
    ``b p`` prompt tokens in ``ceil(b p / budget)`` equal passes, short prompts packed several to a pass, long
    ones cut into chunks). A chunk of ``c`` tokens of a prompt ``p`` tokens long that starts at offset ``o``
    attends to ``o`` earlier tokens plus its own causal half; averaged over a prompt's chunks ``o = (p - c) / 2``.
    """
    if type(prompt_tokens) is float and type(batch) is float:  # one configuration: Python floats
        p, b, budget = prompt_tokens, batch, float(token_budget)
    else:
        p = np.asarray(prompt_tokens, dtype=float)
        b = np.asarray(batch, dtype=float)
        budget = np.asarray(token_budget, dtype=float)
    if pass_mode == "batch":
        return b * p, X.ones_like(p), X.zeros_like(p), b
    if pass_mode == "prompt":
        return p, b, X.zeros_like(p), X.ones_like(b)
    total = b * p
    passes = X.maximum(X.ceil(total / budget), 1.0)
    c = total / passes  # tokens per pass (equal passes: no pass pays for tokens that are not there)
    seqs = X.maximum(c / X.maximum(p, 1.0), 1.0)  # prompts sharing a pass (1 while a prompt spans passes)
    span = X.minimum(c, p)
    return c, passes, (p - span) / 2.0, seqs


def steady_state_prefill_tokens(*, batch, input_tokens, output_tokens, accepted_per_step=1.0):
    """Prompt tokens per engine step that keep prefill in step with completions [tokens]:
    ``B * input / output`` (one request finishes every ``output / B`` steps per slot), times the tokens a step emits
    per sequence (speculative decoding finishes requests in fewer steps). The serving model passes ``B`` as the
    share of the *other* requests, ``(B - 1) / B`` per decoding sequence: a request's own prompt is prefilled before
    it decodes (its TTFT), so it never rides on its own decode steps."""
    if type(input_tokens) is float and type(output_tokens) is float:  # one configuration: Python floats
        return float(batch) * input_tokens / X.maximum(output_tokens, 1.0) * float(accepted_per_step)
    o = np.maximum(np.asarray(output_tokens, dtype=float), 1.0)
    return np.asarray(batch, dtype=float) * np.asarray(input_tokens, dtype=float) / o * np.asarray(accepted_per_step)


def riding_prompt_tokens(*, batch, input_tokens, output_tokens):
    """Prompt tokens per decoding sequence per engine step in the steady state of in-flight batching [tokens]: the
    other ``B - 1`` requests' share, :func:`steady_state_prefill_tokens` at ``(B - 1) / B`` (a request's own prompt is
    prefilled before it decodes). Floats for one configuration, arrays otherwise."""
    return steady_state_prefill_tokens(batch=X.maximum(batch - 1.0, 0.0) / batch, input_tokens=input_tokens,
                                       output_tokens=output_tokens)


def closed_loop_prefill_wait(*, concurrency, own_ttft_s, decode_s, prefill_busy_s):
    """Closed loop of ``concurrency`` requests on an in-flight engine: requests/s and the mean wait for prefill [s].

    Each slot's request lives ``own_ttft + W + decode_s``; new prompts arrive at ``lambda = B / that`` and queue
    for the engine's prefill token budget, a single server busy ``u = prefill_busy_s`` per prompt (fixed-size work:
    M/D/1, Pollaczek-Khinchine mean wait ``W = rho u / (2 (1 - rho))``). A request meets the prompts of the other
    ``B - 1`` requests only (the arrival theorem of closed queueing networks, Reiser and Lavenberg, J. ACM 27(2),
    1980: an arriving customer sees the network in equilibrium without itself), so ``rho = lambda u (B - 1) / B``: one
    request never waits for its own prompt. This is the queueing
    NVIDIA's NIM tables show for long prompts: TTFT doubles from concurrency 1 to 50 at 5,000-token prompts while the
    own prefill stays the same.

    The fixed point ``lambda (a + W(lambda)) = B`` (``a = own_ttft + decode_s``) is a quadratic in lambda; its root in
    ``[0, 1/u)`` (unique: the wait rises with lambda, the arrival rate falls with it), in the form without
    cancellation, is ``lambda = 2 B / (a + B' u + sqrt((a - B' u)^2 + 2 B' u^2))`` with ``B' = B - 1`` (``B / a`` at
    ``u = 0`` or ``B = 1``), capped at ``(1 - 1e-12) / u``, where the prefill server saturates and the requests it
    cannot take queue for it (``W = B / lambda - a``). Inputs that are not finite or negative are bisected on the same
    equation instead.

    Returns (requests_per_s, mean_wait_s); Python floats for Python float inputs (one configuration).
    """
    if all(type(v) is float for v in (concurrency, own_ttft_s, decode_s, prefill_busy_s)):
        return _closed_loop_row(concurrency, own_ttft_s, decode_s, prefill_busy_s)
    B = np.asarray(concurrency, dtype=float)
    own = np.asarray(own_ttft_s, dtype=float)
    dec = np.asarray(decode_s, dtype=float)
    busy = np.maximum(np.asarray(prefill_busy_s, dtype=float), 0.0)
    B, own, dec, busy = np.broadcast_arrays(B, own, dec, busy)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lam = _root(B, own + dec, busy, np.sqrt)
        plain = np.isfinite(B) & np.isfinite(own) & np.isfinite(dec) & np.isfinite(busy) & (B >= 0) & (own >= 0) & \
            (dec >= 0) & (own + dec + 1e13 * busy < 1e300)
        if not plain.all():  # rows outside the closed form's domain: bisected
            odd = ~plain
            lam = np.array(lam, dtype=float)
            lam[odd] = _bisection(B[odd], own[odd], dec[odd], busy[odd])
        return lam, _settle(lam, _wait(lam, busy, B), B, own + dec)


def _root(B, a, u, sqrt):
    """The fixed point's root (arrays or Python floats; ``sqrt`` of the matching kind): the same IEEE operations in the
    same order for both, so one configuration gets the array answer."""
    s = X.maximum(B - 1.0, 0.0) * u  # the other requests' prompts (arrival theorem)
    d = a - s
    root = 2.0 * B / ((a + s) + sqrt(d * d + 2.0 * s * u))
    cap = X.minimum(B / X.maximum(a, 1e-300), X.where(u > 0, (1.0 - 1e-12) / X.where(u > 0, u, 1.0), np.inf))
    return X.where(B > 0, X.minimum(root, cap), 0.0)


def admission_wait_s(*, users, slots, request_s):
    """Closed loop of ``users`` on an engine that runs at most ``slots`` requests at once (the most its KV cache
    holds): the mean wait in its admission queue [s], 0 while the users fit the slots.

    Each user sends the next request when the last one ends (no think time), so the slots stay full: requests end
    at ``slots / request_s`` (Little's law over the slots, ``request_s`` a request's time in its slot, TTFT and
    decode), a user's cycle is ``users / that`` and its wait the cycle less its own request,
    ``(users / slots - 1) * request_s``. An engine's queued requests take no KV cache (vLLM, TensorRT-LLM and NIM
    admit a request when its cache fits), so the throughput stays that of the full slots however many users wait."""
    return X.maximum(users / slots - 1.0, 0.0) * request_s


def others_arrival_rate(lam, B):
    """The prompt arrival rate a request meets at the prefill server: the other ``B - 1`` requests' share of ``lam``
    (a closed loop's arrival theorem; no queue at all for one request)."""
    return lam * (X.maximum(B - 1.0, 0.0) / X.maximum(B, 1e-300))


def _settle(lam, w, B, a):
    """The wait where the prefill server saturates (the rate capped at ``1/u``, the others' wait formula finite):
    the requests the server cannot take in queue for it, ``W = B / lambda - a`` (Little's law over the B slots)."""
    short = lam * (a + w) < B * (1.0 - 1e-9)
    return X.where(short, B / X.where(short, lam, 1.0) - a, w)


def _wait(lam, busy, B):
    rho = others_arrival_rate(lam, B) * busy
    w = np.where(rho < 1.0, rho * busy / (2.0 * (1.0 - rho)), np.inf)
    return np.where(busy > 0, w, 0.0)


def _bisection(B, own, dec, busy, iterations: int = 60):
    """The fixed point by bisection on lambda, for inputs outside the closed form's domain (NaN, inf, negative)."""
    hi = B / np.maximum(own + dec, 1e-300)  # no wait at all
    hi = np.where(busy > 0, np.minimum(hi, (1.0 - 1e-12) / np.where(busy > 0, busy, 1.0)), hi)
    lo = np.zeros_like(hi)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        too_fast = mid * (own + _wait(mid, busy, B) + dec) > B
        hi = np.where(too_fast, mid, hi)
        lo = np.where(too_fast, lo, mid)
    return lo


def _closed_loop_row(B: float, own: float, dec: float, busy: float):
    """:func:`closed_loop_prefill_wait` of one configuration in Python floats (the array answer's operations)."""
    busy = X.maximum(busy, 0.0)
    if not (all(math.isfinite(v) for v in (B, own, dec, busy)) and B >= 0 and own >= 0 and dec >= 0
            and max(own, 0.0) + max(dec, 0.0) + 1e13 * max(busy, 0.0) < 1e300):
        lam, w = closed_loop_prefill_wait(concurrency=np.array([B]), own_ttft_s=np.array([own]),
                                          decode_s=np.array([dec]), prefill_busy_s=np.array([busy]))
        return float(lam[0]), float(w[0])
    try:
        lam = _root(B, own + dec, busy, math.sqrt)
    except X.SCALAR_ERRORS:  # a zero denominator (no work at all): numpy's inf/NaN answer through the arrays
        lam, w = closed_loop_prefill_wait(concurrency=np.array([B]), own_ttft_s=np.array([own]),
                                          decode_s=np.array([dec]), prefill_busy_s=np.array([busy]))
        return float(lam[0]), float(w[0])
    if not busy > 0:
        return lam, 0.0
    rho = others_arrival_rate(lam, B) * busy
    return lam, _settle(lam, rho * busy / (2.0 * (1.0 - rho)), B, own + dec)  # rho < 1 (lam <= (1 - 1e-12) / busy)
