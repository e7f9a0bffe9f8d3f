"""The array chain's fast paths give the numbers of the plain forms, bit for bit (issue 14, branch h18-speed).

Each fast path skips work (a repeated micro-batch count, a repeated (tokens, TP) pair, a run of equal KV rows, the
per-configuration layout choice when every layout is given, the iterations of a converged bisection) or does the
same operations without branches or temporaries. Every test runs the fast path and the plain form on the same
inputs (the plain form by switching the shortcut off, or, for the closed loop, the bisection as it was written
before) and compares the bytes of the results: equal-looking is not enough, the sweep files must not change.
"""
from __future__ import annotations

import zlib

import math

import numpy as np
import pytest

from wseplan import sweep as S
from wseplan.analytic import engine as E
from wseplan.analytic import gpu_pass as P
from wseplan.analytic import gpu_time as G
from wseplan.analytic import memory as M
from wseplan.analytic import rows as R
from wseplan.plan import evaluate, setup
from wseplan.sweep import evaluate as SE


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------------------------
# closed loop
# ---------------------------------------------------------------------------------------------
def _closed_loop_as_written(*, concurrency, own_ttft_s, decode_s, prefill_busy_s, iterations=60):
    """The bisection of :func:`wseplan.analytic.engine.closed_loop_prefill_wait` before it was made fast."""
    B = np.asarray(concurrency, dtype=float)
    own = np.asarray(own_ttft_s, dtype=float)
    dec = np.asarray(decode_s, dtype=float)
    busy = np.maximum(np.asarray(prefill_busy_s, dtype=float), 0.0)
    B, own, dec, busy = np.broadcast_arrays(B, own, dec, busy)
    hi = B / np.maximum(own + dec, 1e-300)
    hi = np.where(busy > 0, np.minimum(hi, (1.0 - 1e-12) / np.where(busy > 0, busy, 1.0)), hi)
    lo = np.zeros_like(hi)

    def wait(lam):
        rho = lam * (np.maximum(B - 1.0, 0.0) / np.maximum(B, 1e-300)) * busy  # the other B - 1 clients' prompts
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(rho < 1.0, rho * busy / (2.0 * (1.0 - rho)), np.inf)
        return np.where(busy > 0, w, 0.0)

    with np.errstate(invalid="ignore", over="ignore"):
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            too_fast = mid * (own + wait(mid) + dec) > B
            hi = np.where(too_fast, mid, hi)
            lo = np.where(too_fast, lo, mid)
        w = wait(lo)
        # a saturated prefill server (the rate at its cap): the rest of the B requests queue for it (Little's law)
        short = lo * (own + w + dec) < B * (1.0 - 1e-9)
        w = np.where(short, B / np.where(short, lo, 1.0) - (own + dec), w)
    return lo, w


def _loop_inputs(seed: int, n: int = 4000):
    rng = np.random.default_rng(seed)
    B = rng.choice([1.0, 2.0, 7.0, 64.0, 512.0, 1024.0], n)
    own = rng.uniform(0.0, 3.0, n) * (rng.uniform(size=n) > 0.1)  # some rows with no own prefill
    dec = rng.uniform(0.0, 80.0, n) ** 2 / 80.0
    busy = rng.uniform(-0.01, 0.5, n) * (rng.uniform(size=n) > 0.2)  # busy 0 and below 0 (clipped) too
    return B, own, dec, busy


def _close(got, ref, rtol):
    """Equal within ``rtol`` where finite, and the same NaNs and infinities elsewhere."""
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    fin = np.isfinite(ref)
    return np.array_equal(np.isfinite(got), fin) and np.array_equal(got[~fin], ref[~fin], equal_nan=True) and \
        bool(np.all(np.abs(got[fin] - ref[fin]) <= rtol * np.abs(ref[fin])))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_loop_root_is_the_bisections_fixed_point(seed):
    """The closed-form root of the fixed point equals the 60-step bisection it replaced to the bisection's own
    resolution (lambda to ~1 ulp; the wait, steep as rho nears 1, to ~1e-12), and satisfies Little's law."""
    B, own, dec, busy = _loop_inputs(seed)
    got = E.closed_loop_prefill_wait(concurrency=B, own_ttft_s=own, decode_s=dec, prefill_busy_s=busy)
    ref = _closed_loop_as_written(concurrency=B, own_ttft_s=own, decode_s=dec, prefill_busy_s=busy)
    assert _close(got[0], ref[0], 4e-15) and _close(got[1], ref[1], 1e-11)
    pos = B > 0
    np.testing.assert_allclose((got[0] * (own + got[1] + dec))[pos], B[pos], rtol=1e-11)


def test_closed_loop_root_by_hand():
    """B = 10 slots, a = own + decode = 2 s, u = 0.1 s of prefill per prompt; a request meets the other 9 requests'
    prompts, c = 9/10 of the rate: lambda (2 + 0.9 lambda 0.01 / (2 (1 - 0.09 lambda))) = 10; times
    2 (1 - 0.09 lambda): -0.351 lambda^2 + 5.8 lambda - 20 = 0, lambda = 4.9032 (the root below 1/u = 10 and
    B/a = 5: the queue takes 1.9% of the requests' rate)."""
    lam, w = E.closed_loop_prefill_wait(concurrency=10.0, own_ttft_s=0.5, decode_s=1.5, prefill_busy_s=0.1)
    A, Bq, C = 0.9 * 0.1 * (0.1 - 4.0), 2.0 * (2.0 + 10 * 0.9 * 0.1), -20.0  # c u (u - 2a), 2 (a + B c u), -2 B
    ref = (-Bq + math.sqrt(Bq * Bq - 4 * A * C)) / (2 * A)
    assert lam == pytest.approx(ref, rel=1e-14) and 4.90 < lam < 4.91
    assert w == pytest.approx(0.9 * lam * 0.01 / (2 * (1 - 0.09 * lam)), rel=1e-14)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 9, 40])
def test_closed_loop_of_a_few_rows_equals_the_arrays(n):
    """One configuration in Python floats does the array answer's IEEE operations: the same bits."""
    for seed in range(20):
        B, own, dec, busy = (a[:n] for a in _loop_inputs(seed, 64))
        got = E.closed_loop_prefill_wait(concurrency=B, own_ttft_s=own, decode_s=dec, prefill_busy_s=busy)
        for i in range(n):
            one = E.closed_loop_prefill_wait(concurrency=float(B[i]), own_ttft_s=float(own[i]), decode_s=float(dec[i]),
                                             prefill_busy_s=float(busy[i]))
            assert (one[0], one[1]) == (float(got[0][i]), float(got[1][i]))


@pytest.mark.parametrize("case", ["nan", "inf", "negative", "all-idle", "scalars", "zero-concurrency", "huge"])
def test_closed_loop_edge_inputs_agree_with_the_bisection(case):
    """Inputs outside the closed form's domain (NaN, inf, negative times, overflowing sums) take the bisection and
    give its bits; degenerate plain ones (no prefill work, no requests) the root."""
    B, own, dec, busy = _loop_inputs(7, 300)
    if case == "nan":
        own[::9] = np.nan
    elif case == "inf":
        dec[::11] = np.inf
        busy[::13] = np.inf
    elif case == "negative":
        dec[::5] = -1.0
    elif case == "all-idle":
        busy[:] = 0.0
    elif case == "scalars":
        B, own, dec, busy = 16.0, 0.3, 12.0, 0.25
    elif case == "zero-concurrency":
        B[::3] = 0.0
    elif case == "huge":
        busy[::17] = 1e300
    with np.errstate(all="ignore"):
        got = E.closed_loop_prefill_wait(concurrency=B, own_ttft_s=own, decode_s=dec, prefill_busy_s=busy)
        ref = _closed_loop_as_written(concurrency=B, own_ttft_s=own, decode_s=dec, prefill_busy_s=busy)
    B, own, dec, busy = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (B, own, dec, busy)))
    with np.errstate(all="ignore"):
        odd = ~(np.isfinite(B) & np.isfinite(own) & np.isfinite(dec) & np.isfinite(busy) & (B >= 0) & (own >= 0)
                & (dec >= 0) & (own + dec + 1e13 * np.maximum(busy, 0.0) < 1e300))
    assert odd.any() == (case in ("nan", "inf", "negative", "huge"))
    lam, w, rl, rw = (np.atleast_1d(v) for v in (*got, *ref))
    assert _same(lam[odd], rl[odd]) and _same(w[odd], rw[odd])  # bisected: the bisection's bits
    assert _close(lam[~odd], rl[~odd], 4e-15) and _close(w[~odd], rw[~odd], 1e-11)  # the root: its resolution


# ---------------------------------------------------------------------------------------------
# decode rounds: each micro-batch count once
# ---------------------------------------------------------------------------------------------
def test_micro_batch_rows_are_the_choices_without_repeats():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        b = rng.choice([1, 2, 3, 5, 8, 16, 33, 64, 100, 1024, 2000, 5000], n).astype(float)
        st = rng.choice([1, 2, 3, 4, 6, 8, 16, 32, 64, 80, 1500, 3000], n).astype(float)
        cand = E.micro_batch_choices(b, st)
        rows = np.repeat(np.arange(n), cand.shape[1])
        vals = cand.ravel()
        ok = np.isfinite(vals)
        rows, vals = rows[ok], vals[ok]
        keep = np.ones(len(rows), dtype=bool)
        keep[1:] = ~((rows[1:] == rows[:-1]) & (vals[1:] == vals[:-1]))
        got_rows, got_n = E._micro_batch_rows(b, st)
        assert _same(got_rows, rows[keep]) and _same(got_n, vals[keep])


def test_decode_round_without_repeats_equals_every_choice():
    """A repeated micro-batch count is the same pass; the round's time, parts and count do not change."""
    rng = np.random.default_rng(4)
    b = rng.choice([1.0, 3.0, 8.0, 64.0, 700.0], 500)
    stages = rng.choice([1.0, 2.0, 4.0, 8.0, 5.0, 64.0], 500)

    def pass_fn(idx, mb):
        lat = 1e-3 + 2e-5 * mb * (1.0 + idx % 3)
        return lat, lat / stages[idx] + 1e-6, {"a": 0.25 * lat, "b": 0.75 * lat}

    def every_choice(b, stages):
        cand = E.micro_batch_choices(b, stages)
        rows = np.repeat(np.arange(len(b)), cand.shape[1])
        vals = cand.ravel()
        ok = np.isfinite(vals)
        return rows[ok], vals[ok]

    got = E.decode_round(pass_fn, batch=b, stages=stages)
    fast = E._micro_batch_rows
    try:
        E._micro_batch_rows = every_choice
        ref = E.decode_round(pass_fn, batch=b, stages=stages)
    finally:
        E._micro_batch_rows = fast
    assert _same(got[0], ref[0]) and _same(got[2], ref[2])
    assert all(_same(got[1][k], ref[1][k]) for k in ref[1])


def test_decode_round_with_fixed_counts_runs_that_round():
    """``counts`` fixes the micro-batches in flight: the round is that candidate's (``max(lat, n x stage)``, by hand
    below), the count is returned as given, and it is never faster than the free choice; one row in floats agrees."""
    rng = np.random.default_rng(6)
    b = rng.choice([1.0, 3.0, 8.0, 64.0, 700.0], 400)
    stages = rng.choice([1.0, 2.0, 4.0, 8.0, 64.0], 400)

    def pass_fn(idx, mb):
        lat = 1e-3 + 2e-5 * mb * (1.0 + idx % 3)
        return lat, lat / stages[idx] + 1e-6, {"a": lat}

    free = E.decode_round(pass_fn, batch=b, stages=stages)
    counts = np.maximum(np.minimum(stages, b), 1.0)  # every row at its largest count
    fixed = E.decode_round(pass_fn, batch=b, stages=stages, counts=counts)
    idx = np.arange(len(b))
    lat = 1e-3 + 2e-5 * np.ceil(b / counts) * (1.0 + idx % 3)
    hand = np.maximum(lat, counts * (lat / stages + 1e-6))
    assert np.allclose(fixed[0], hand, rtol=1e-15) and _same(fixed[2], counts)
    assert (fixed[0] >= free[0]).all()
    # at the free round's own counts the fixed round is the free round
    again = E.decode_round(pass_fn, batch=b, stages=stages, counts=free[2])
    assert _same(again[0], free[0]) and _same(again[2], free[2])
    i = 17

    def row_fn(_, mb):
        lat_, st_, parts = pass_fn(np.array([i]), np.array([mb]))
        return float(lat_[0]), float(st_[0]), {"a": float(parts["a"][0])}

    t, _, n = E.decode_round(row_fn, batch=float(b[i]), stages=float(stages[i]), counts=float(counts[i]))
    assert t == fixed[0][i] and n == counts[i]


# ---------------------------------------------------------------------------------------------
# (tokens, TP) pairs and runs of rows
# ---------------------------------------------------------------------------------------------
def test_pair_groups_cover_every_row_and_refuse_what_they_cannot_pack():
    rng = np.random.default_rng(5)
    tok = rng.choice([1.0, 2.0, 3.25, 17.5, 4096.0, 1e5], 5000)
    tp = rng.choice([1.0, 2.0, 4.0, 8.0, 64.0], 5000)
    first, inv = R.pair_groups(tok, tp)
    assert _same(tok[first][inv], tok) and _same(tp[first][inv], tp)
    assert len(first) == len({(a, b) for a, b in zip(tok, tp)})
    assert R.pair_groups(tok[:100], tp[:100]) is None  # too few rows to pay
    assert R.pair_groups(np.float64(3.0), np.float64(2.0)) is None and R.pair_groups(tok, 2.0) is None  # scalars
    assert R.pair_groups(tok / 3.0, tp) is None  # not multiples of 1/256
    assert R.pair_groups(np.where(tok > 100, np.nan, tok), tp) is None
    assert R.pair_groups(tok, tp + 0.5) is None and R.pair_groups(tok, tp * 8.0) is None  # TP 512 > 255
    assert R.pair_groups(np.where(tok > 100, -0.0, tok), tp) is None
    assert R.pair_groups(rng.integers(1, 10**6, 5000).astype(float), tp) is None  # mostly distinct: no gain
    assert _same(R.run_starts(np.array([1.0, 1, 2, 2, 2, 1]), np.array([0.0, 0, 0, 1, 1, 1])), np.array([0, 2, 3, 5]))


def _pass_inputs(seed: int, n: int = 6000, *, fractional: bool = False):
    rng = np.random.default_rng(seed)
    mb = rng.choice([1.0, 2.0, 4.0, 7.0, 64.0, 250.0, 1024.0], n)
    pre = rng.choice([0.0, 0.25, 1.0, 16.0], n) * mb
    if fractional:
        pre = pre + rng.uniform(0, 1, n)
    kv = rng.choice([255.5, 1024.0, 4352.0, 33280.0], n)
    seqs = (P.Sequences(seqs=mb, tokens=mb, new=1.0, prior=kv),
            P.Sequences(seqs=np.minimum(pre, 1.0), tokens=pre, new=pre, prior=0.0 * pre, decode=False))
    return dict(sequences=seqs, logits_rows=mb + np.minimum(pre, 1.0), tp=rng.choice([1.0, 2.0, 4.0, 8.0, 16.0], n),
                pp=rng.choice([1.0, 2.0, 4.0, 8.0], n))


@pytest.mark.parametrize("model,gpu", [("llama-3.1-70b", "h100-sxm"), ("mixtral-8x7b", "h200-sxm"),
                                       ("gpt-oss-20b", "b200"), ("qwen3-30b-a3b", "mi300x")])
@pytest.mark.parametrize("fractional", [False, True])
def test_pass_time_grouped_equals_row_by_row(catalog, monkeypatch, model, gpu, fractional):
    from wseplan.calibration_data import gpu_calibration
    from wseplan.workload import resolve_model

    m = resolve_model(model, catalog)
    dev = catalog.gpus[gpu]
    kw = _pass_inputs(11, fractional=fractional)
    kw["logits_rows"] = np.where(np.arange(len(kw["tp"])) % 97 == 0, kw["logits_rows"] + 1.0, kw["logits_rows"]) \
        if fractional else kw["logits_rows"]
    cal = gpu_calibration()
    tokens = kw["sequences"][0].tokens + kw["sequences"][1].tokens
    assert (R.pair_groups(tokens, kw["tp"]) is None) == fractional  # dyadic token counts are grouped
    got = P.pass_time_s(m, dev, precision="bf16", cal=cal, **kw)
    monkeypatch.setattr(P, "pair_groups", lambda a, b: None)
    ref = P.pass_time_s(m, dev, precision="bf16", cal=cal, **kw)
    assert _same(got[0], ref[0]) and _same(got[1], ref[1])
    assert list(got[2]) == list(ref[2]) and all(_same(got[2][k], ref[2][k]) for k in ref[2])


def test_tp_all_reduce_inside_the_domain_equals_the_two_level_choice(catalog):
    from wseplan.analytic.collectives import hierarchical_allreduce_time_s
    from wseplan.calibration_data import gpu_calibration

    cal = gpu_calibration()
    for latency in (0.0, cal.allreduce_latency_s or 5e-6):
        links = G._Links(catalog.gpus["h100-sxm"], cal)
        links.allreduce_latency = latency
        tp = np.array([1.0, 2.0, 4.0, 8.0, 8.0, 2.0])
        msg = np.array([1e3, 1e5, 3e6, 8e6, 16.0, 0.0])
        got = links.tp_allreduce(msg, tp)
        both = links.tp_allreduce(np.append(msg, 1e6), np.append(tp, 16.0))  # one group leaves the domain
        out = hierarchical_allreduce_time_s(message_bytes=1e6, num_ranks=16.0, ranks_per_node=links.domain,
                                            intra_bandwidth_bytes_per_s=links.nvlink_bw, intra_latency_s=links.nvlink_lat,
                                            inter_bandwidth_bytes_per_s=links.net_bw, inter_latency_s=links.net_lat,
                                            algorithm="tree")
        assert _same(both[:-1], got) and _same(both[-1:], np.atleast_1d(out))


def test_kv_runs_equal_row_by_row(catalog, monkeypatch):
    from wseplan.workload import build_workload, resolve_model

    for name in ("llama-3.1-8b", "gpt-oss-20b"):  # gpt-oss: sliding-window layers cache a window only
        w = build_workload(resolve_model(name, catalog), catalog, precision="bf16", phase="decode", batch=1, context=1)
        b = np.repeat([1.0, 1.0, 8.0, 64.0, 64.0, 3.0], 7)
        c = np.repeat([256.0, 300.0, 300.0, 131072.0, 257.0, 4096.0], 7)
        blocks = w.kind == M.KIND_BLOCK
        got = M._kv_block_mean(w, b, c, blocks)
        monkeypatch.setattr(M, "run_starts", lambda *cols: np.arange(len(cols[0])))
        assert _same(got, M._kv_block_mean(w, b, c, blocks))
        monkeypatch.undo()


# ---------------------------------------------------------------------------------------------
# the chain: given layouts, blocks of a task
# ---------------------------------------------------------------------------------------------
def test_given_layouts_skip_the_choice_and_agree_with_the_search_path(catalog):
    """Rows whose layout is given map to themselves; with one searched row in the table the general choice runs
    for every row, and the given rows come out the same."""
    s = setup("llama-3.1-70b", "h100-sxmx16", phase="serve", catalog=catalog)
    rng = np.random.default_rng(8)
    n = 300
    lay = [(1, 1, 16), (2, 2, 4), (4, 1, 4), (4, 4, 1), (8, 1, 2), (8, 2, 1), (16, 1, 1)]
    pick = rng.integers(0, len(lay), n)
    cfg = {"batch": rng.choice([1.0, 8.0, 64.0, 256.0], n), "context": rng.choice([512.0, 4096.0, 32768.0], n),
           "output_tokens": rng.choice([16.0, 256.0], n)}
    for j, k in enumerate(("tp", "pp", "dp")):
        cfg[k] = np.array([float(lay[i][j]) for i in pick])
    fast = evaluate(s, cfg)
    mixed = {k: np.append(v, np.nan if k in ("tp", "pp", "dp") else v[:1]) for k, v in cfg.items()}
    general = evaluate(s, mixed)
    assert fast["fits"].any() and not fast["fits"].all()
    for k, v in fast.items():
        assert _same(v, general[k][:n]), k


@pytest.mark.parametrize("phase,outputs", [("decode", [64, 1024]), ("decode", None), ("prefill", None), ("train", None)])
def test_task_blocks_equal_one_call(catalog, monkeypatch, phase, outputs):
    spec = dict(name="blocks", phase=phase, models=["llama-3.1-8b"], targets=["h100-sxmx16"], batches=[1, 7, 64, 512],
                contexts=[512, 8192], output_tokens=outputs)
    if phase == "train":
        spec["layouts"] = {"micro_batch": [1, 2], "recompute": ["selective", "full"]}
    spec = {k: v for k, v in spec.items() if v is not None}
    g = S.plan_sweep(S.parse_sweep(spec), catalog).groups[0]
    monkeypatch.setattr(SE, "GPU_BLOCK_ROWS", 37)
    blocks = SE.evaluate_task(g, 3, g.size)
    monkeypatch.setattr(SE, "GPU_BLOCK_ROWS", 1 << 30)
    whole = SE.evaluate_task(g, 3, g.size)
    assert list(blocks) == list(whole)
    for k, v in whole.items():
        assert _same(blocks[k], v) if isinstance(v, np.ndarray) else blocks[k] == v, k


# ---------------------------------------------------------------------------------------------
# one configuration: the GPU model in Python floats (wseplan.analytic.elementwise)
# ---------------------------------------------------------------------------------------------
_GPU_CASES = [("llama-3.1-70b", "h100-sxmx16", "serve"), ("llama-3.1-8b", "h100-sxmx8", "decode"),
              ("mixtral-8x7b", "h200-sxmx16", "serve"), ("gpt-oss-20b", "b200x8", "prefill"),
              ("qwen3-30b-a3b", "mi300xx8", "decode"), ("llama-3.1-70b", "h100-sxmx64", "train"),
              ("mixtral-8x7b", "a100-sxm-80gbx32", "train"), ("gpt-3-175b", "h100-sxmx1024", "train")]


def _random_rows(s, rng, n):
    """n random configurations of a setup with given layouts (inference: tp x pp x dp = the count)."""
    q = s.query
    N = q.target.count
    lays = [(t, p, N // (t * p)) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8) if N % (t * p) == 0]
    pick = rng.integers(0, len(lays), n)
    cfg = {"batch": rng.choice([1.0, 2.0, 7.0, 64.0, 256.0, 1536.0], n),
           "context": rng.choice([128.0, 2048.0, 4096.0, 32768.0], n),
           "output_tokens": rng.choice([1.0, 64.0, 1024.0], n) if q.phase == "serve" else np.zeros(n)}
    if q.model.learned_pos_embeddings:  # a learned position table refuses longer sequences (GPT-3: 2,048)
        cfg["context"] = np.minimum(cfg["context"], q.model.learned_pos_embeddings - cfg["output_tokens"])
    for j, k in enumerate(("tp", "pp", "dp")):
        cfg[k] = np.array([float(lays[i][j]) for i in pick])
    if q.phase != "train":  # an MoE model's attention data-parallel in some rows (adp = tp), split in the others
        moe = getattr(q.model, "num_experts", 1) > 1
        cfg["adp"] = np.where(moe & (rng.random(n) < 0.5), cfg["tp"], 1.0)
    if q.phase == "train":
        cfg["dp"] = np.array([float(N // (t * p)) for t, p, _ in (lays[i] for i in pick)])
        cfg["micro_batch"] = rng.choice([1.0, 2.0], n)
        cfg["vpp"] = np.where(cfg["pp"] > 1, rng.choice([1.0, 2.0], n), 1.0)
        cfg["cp"] = np.ones(n)
        cfg["ep"] = np.ones(n)  # (dense models: no experts to split)
        cfg["recompute"] = rng.choice([0.0, 1.0, 2.0], n)
        cfg["zero_stage"] = rng.choice([0.0, 1.0, 2.0, 3.0], n)
        # most rows give every data-parallel replica whole micro-batches; the rest keep the drawn batch, which may give
        # a replica fewer sequences than a micro-batch (not timed: fits is false)
        whole = cfg["dp"] * cfg["micro_batch"] * rng.choice([1.0, 4.0, 16.0], n)
        cfg["batch"] = np.where(rng.random(n) < 0.75, whole, cfg["batch"])
    return cfg


@pytest.mark.parametrize("model,target,phase", _GPU_CASES)
def test_one_row_in_python_floats_equals_the_array_rows(catalog, model, target, phase):
    """A configuration evaluated alone (a few rows: the GPU passes and steps run in Python floats) gives the bytes
    it gets among 40 rows (the numpy arrays), for every column of the chain."""
    from wseplan.analytic import elementwise as X

    s = setup(model, target, phase=phase, catalog=catalog)
    cfg = _random_rows(s, np.random.default_rng(zlib.crc32(f"{model} {target} {phase}".encode())), 40)
    many = evaluate(s, cfg)
    assert many["fits"].any()
    timed = 0
    for i in range(40):
        one = evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()})
        assert set(one) <= set(many) and (set(one) == set(many) or not one["fits"][0])  # nothing timed: no parts
        for k, v in one.items():
            assert _same(v, many[k][i:i + 1]), (i, k)
        timed += bool(np.isfinite(one["step_s"][0]))
    assert timed >= 10
    assert X.SCALAR_ROWS >= 1  # the rows above ran the float path (see the next test)


def test_the_float_path_runs_and_falls_back(catalog, monkeypatch):
    """The few-row path is taken for one configuration, and a row the floats cannot do as numpy does (a division by
    zero) is evaluated as arrays instead."""
    from wseplan.analytic import elementwise as X

    calls = []
    real = X.by_rows

    def spy(fn, n, cols, limit=None):
        out = real(fn, n, cols, limit)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(X, "by_rows", spy)
    s = setup("llama-3.1-8b", "h100-sxmx8", phase="train", catalog=catalog)
    cfg = {"batch": np.array([64.0]), "context": np.array([1024.0]), "output_tokens": np.array([0.0]),
           "tp": np.array([8.0]), "pp": np.array([1.0]), "dp": np.array([1.0]), "micro_batch": np.array([1.0]),
           "vpp": np.array([1.0]), "recompute": np.array([1.0]), "zero_stage": np.array([1.0])}
    evaluate(s, cfg)
    assert calls and all(calls)
    assert X.by_rows(lambda a: 1.0 / a, 2, {"a": np.array([1.0, 0.0])}) is None
    assert _same(X.by_rows(lambda a: (a * 3.0, {"x": X.maximum(a, np.nan)}), 2, {"a": np.array([1.0, 2.0])})[0],
                 np.array([3.0, 6.0]))
    assert X.by_rows(lambda a: a, 9, {"a": np.ones(9)}) is None  # more rows than SCALAR_ROWS: arrays


def test_elementwise_helpers_give_numpys_answers():
    from wseplan.analytic import elementwise as X

    vals = [0.0, -0.0, 1.0, -2.5, 3.0, 1e-300, 1e300, np.inf, -np.inf, np.nan]
    for a in vals:
        for b in vals:
            for f, g in ((X.maximum, np.maximum), (X.minimum, np.minimum)):
                got, ref = f(a, b), g(np.array([a]), np.array([b]))[0]
                assert (np.isnan(got) and np.isnan(ref)) or got == ref, (f, a, b)
            assert X.where(a > b, a, b) == np.where(a > b, a, b) or np.isnan(b)
        if np.isfinite(a):
            assert X.ceil(a) == np.ceil(a) and X.floor(a) == np.floor(a) and type(X.ceil(a)) is float
        got = X.clip(a, 0.0, 1.0)
        assert (np.isnan(got) and np.isnan(a)) or got == np.clip(a, 0.0, 1.0)
    for n in (1.0, 2.0, 3.0, 8.0, 1000.0, 1024.0, 4097.0):
        assert X.ceil(X.log2(n)) == np.ceil(np.log2(np.array([n])))[0]


# ---------------------------------------------------------------------------------------------
# one configuration: the serving engine in Python floats (branch h23-engine-float)
# ---------------------------------------------------------------------------------------------
def _same_rows(one: dict, many: dict, i: int, n: int = 1, where=""):
    assert set(one) <= set(many) and (set(one) == set(many) or not one["fits"].any()), where
    for k, v in one.items():
        assert _same(v, many[k][i:i + n]), (where, i, k)


_ENGINE_CASES = [("llama-3.1-70b", "h100-sxmx16", "serve", None), ("llama-3.1-8b", "h100-sxmx8", "decode", None),
                 ("mixtral-8x7b", "h200-sxmx16", "serve", None), ("qwen3-30b-a3b", "mi300xx8", "prefill", None),
                 ("llama-3.1-70b", "h100-sxmx16", "serve", "gpu-production-specdec"),
                 ("llama-3.1-70b", "h100-sxmx16", "decode", "gpu-production-specdec"),
                 ("gpt-oss-20b", "b200x8", "serve", "gpu-fitted-2026-11"),
                 ("mixtral-8x7b", "h100-sxmx16", "prefill", "gpu-fitted-2026-11")]


@pytest.mark.parametrize("model,target,phase,software", _ENGINE_CASES)
def test_engine_in_python_floats_equals_the_array_rows(catalog, model, target, phase, software):
    """Decode rounds (pipelined micro-batches, speculative verification and drafts), prefill passes, static and
    in-flight serving with the closed loop: one question (and a few: 3 rows) composed in Python floats gives the
    bytes of the same rows among 40 (the arrays), every column."""
    s = setup(model, target, phase=phase, software=software, catalog=catalog)
    cfg = _random_rows(s, np.random.default_rng(zlib.crc32(f"{model} {target} {phase} {software}".encode())), 40)
    many = evaluate(s, cfg)
    assert np.isfinite(many["step_s"]).sum() >= 10
    if software == "gpu-production-specdec":
        assert (many["time.accepted_tokens_per_step"] > 1.0).sum() >= 10  # the speculative rounds are taken
    for i in range(40):
        _same_rows(evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()}), many, i, where="one")
    for i in range(0, 39, 3):
        _same_rows(evaluate(s, {k: v[i:i + 3] for k, v in cfg.items()}), many, i, 3, where="three")


def test_the_engine_takes_the_float_path_and_falls_back(catalog, monkeypatch):
    """One question is composed from ``pass_row`` (no array pass at all); a pass the floats cannot do as numpy does
    sends the whole question to the arrays, with the same numbers."""
    from wseplan.devices.gpu import GpuFamily

    s = setup("llama-3.1-70b", "h100-sxmx16", phase="serve", software="gpu-production-specdec", catalog=catalog)
    cfg = _random_rows(s, np.random.default_rng(21), 12)
    many = evaluate(s, cfg)
    calls = _count_passes(monkeypatch, GpuFamily)
    for i in range(12):
        _same_rows(evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()}), many, i)
    assert calls["row"] > 0 and calls["array"] == 0

    def refuse(self, *a, **kw):
        raise ZeroDivisionError
    monkeypatch.setattr(GpuFamily, "pass_row", refuse)
    for i in range(12):
        _same_rows(evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()}), many, i)
    assert calls["array"] > 0


def test_plan_records_equal_the_records_of_the_array_rows(catalog):
    """:func:`wseplan.plan.plan` (one question: floats, the short column and row conversions, the cached aliases and
    interval) gives the record that :func:`wseplan.plan.record` makes of the same row among many."""
    from wseplan.plan import plan, record

    rng = np.random.default_rng(5)
    for model, target, phase in [("llama-3.1-70b", "h100-sxmx16", "serve"), ("mixtral-8x7b", "h200-sxmx16", "decode"),
                                 ("gpt-oss-20b", "b200x8", "prefill"), ("llama-3.1-70b", "h100-sxmx64", "train")]:
        s = setup(model, target, phase=phase, catalog=catalog)
        cfg = _random_rows(s, rng, 12)
        many = evaluate(s, cfg)
        cols = s.layout_columns
        for i in range(12):
            lay = {c: int(cfg[c][i]) for c in cols}
            if phase == "train" and lay["dp"] * lay["micro_batch"] > cfg["batch"][i]:  # plan refuses this layout
                assert not many["fits"][i]
                continue
            one = plan(model, target, phase=phase, batch=int(cfg["batch"][i]), context=int(cfg["context"][i]),
                       output_tokens=int(cfg["output_tokens"][i]) or None, layout=lay, catalog=catalog)
            ref = record(s, many, i, sources=dict(one.sources))
            assert one.model_dump() == ref.model_dump(), (model, phase, i)


def _round_pass(idx, mb, kv_, pre_):
    """A pass of made-up costs written with the elementwise helpers (arrays or floats alike)."""
    from wseplan.analytic import elementwise as X

    lat = 1e-3 + 2e-6 * mb * X.maximum(kv_ / 1024.0, 1.0) + 3e-7 * pre_
    return lat, lat / 3.0 + 1e-6 * mb, {"a": 0.25 * lat, "b": X.minimum(lat, 2e-3), "c": 0.0}


def test_decode_round_of_one_row_in_floats_equals_the_arrays():
    rng = np.random.default_rng(9)
    b = rng.choice([1.0, 3.0, 8.0, 64.0, 700.0, 5000.0], 300)
    stages = rng.choice([1.0, 2.0, 3.0, 4.0, 8.0, 6.0, 64.0, 2000.0], 300)
    kv = rng.choice([0.0, 512.0, 4096.0], 300)
    pre = rng.choice([0.0, 16.0, 4000.0], 300)
    best, parts, nmb = E.decode_round(_round_pass, batch=b, stages=stages, kv_=kv, pre_=pre)
    for i in range(300):
        one = E.decode_round(_round_pass, batch=float(b[i]), stages=float(stages[i]), kv_=float(kv[i]), pre_=float(pre[i]))
        assert type(one[0]) is float and type(one[2]) is float
        assert _same(np.array([one[0]]), best[i:i + 1]) and _same(np.array([one[2]]), nmb[i:i + 1])
        assert list(one[1]) == list(parts) and all(_same(np.array([one[1][k]]), parts[k][i:i + 1]) for k in parts)
    with pytest.raises(ValueError):
        E.decode_round(_round_pass, batch=8.0, stages=float("nan"), kv_=0.0, pre_=0.0)
    with pytest.raises(ValueError):
        E.decode_round(_round_pass, batch=8.0, stages=4.0, kv_=float("nan"), pre_=0.0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_closed_loop_of_python_floats_equals_the_arrays(seed):
    B, own, dec, busy = _loop_inputs(seed, 300)
    if seed == 3:  # the inputs outside the closed form's domain: NaN, inf, negative, overflowing
        own[::7], dec[::11], dec[::13], busy[::17] = np.nan, np.inf, -1.0, 1e300
    with np.errstate(all="ignore"):
        ref = E.closed_loop_prefill_wait(concurrency=B, own_ttft_s=own, decode_s=dec, prefill_busy_s=busy)
    for i in range(len(B)):
        with np.errstate(all="ignore"):
            lam, w = E.closed_loop_prefill_wait(concurrency=float(B[i]), own_ttft_s=float(own[i]), decode_s=float(dec[i]),
                                                prefill_busy_s=float(busy[i]))
        assert type(lam) is float and type(w) is float
        assert _same(np.array([lam]), ref[0][i:i + 1]) and _same(np.array([w]), ref[1][i:i + 1]), i


def test_engine_helpers_of_python_floats_equal_the_arrays():
    rng = np.random.default_rng(12)
    p = rng.choice([1.0, 7.0, 1000.0, 9400.0, 131072.0], 200)
    b = rng.choice([1.0, 4.0, 64.0, 3.0], 200)
    o = rng.choice([0.0, 1.0, 256.0, 3.0], 200)
    for mode in ("batch", "prompt", "chunk"):
        for budget in (2048.0, 8192.0, 300.0):
            arr = E.prefill_passes(prompt_tokens=p, batch=b, pass_mode=mode, token_budget=budget)
            for i in range(200):
                one = E.prefill_passes(prompt_tokens=float(p[i]), batch=float(b[i]), pass_mode=mode, token_budget=budget)
                assert all(type(v) is float and _same(np.array([v]), np.broadcast_to(a, p.shape)[i:i + 1])
                           for v, a in zip(one, arr)), (mode, budget, i)
    with pytest.raises(ZeroDivisionError):  # numpy would give inf: the caller evaluates the arrays
        E.prefill_passes(prompt_tokens=10.0, batch=1.0, pass_mode="chunk", token_budget=0.0)
    arr = E.steady_state_prefill_tokens(batch=1.0, input_tokens=p, output_tokens=o)
    lat, st, n = rng.uniform(0, 1, 200), rng.uniform(0, 1, 200), rng.choice([1.0, 2.0, 7.0], 200)
    piped = E.pipelined_passes_s(latency_s=lat, stage_s=st, passes=n)
    for i in range(200):
        one = E.steady_state_prefill_tokens(batch=1.0, input_tokens=float(p[i]), output_tokens=float(o[i]))
        assert type(one) is float and _same(np.array([one]), arr[i:i + 1])
        one = E.pipelined_passes_s(latency_s=float(lat[i]), stage_s=float(st[i]), passes=float(n[i]))
        assert type(one) is float and _same(np.array([one]), piped[i:i + 1])


@pytest.mark.parametrize("target,phase", [("cs3x4", "decode"), ("cs3", "serve"), ("cs3x2", "prefill")])
def test_wafer_questions_through_the_shared_engine_equal_the_array_rows(catalog, target, phase):
    """The wafer families share the engine (the resident family with its float pass, :mod:`wseplan.devices.wafer_row`);
    a question alone and among many agree."""
    s = setup("llama-3.1-8b", target, phase=phase, catalog=catalog)
    rng = np.random.default_rng(zlib.crc32(f"{target} {phase}".encode()))
    n = 6
    cfg = {"batch": rng.choice([1.0, 4.0, 32.0], n), "context": rng.choice([512.0, 4096.0], n),
           "output_tokens": rng.choice([64.0, 512.0], n) if phase == "serve" else np.zeros(n)}
    cfg["num_wafers"] = np.full(n, float(s.query.target.count or 1))
    many = evaluate(s, cfg)
    assert np.isfinite(many["step_s"]).sum() >= 3
    for i in range(n):
        _same_rows(evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()}), many, i)


def test_alias_indexes_are_cached_and_follow_the_catalog(catalog):
    import copy
    import pickle

    cat = copy.deepcopy(catalog)
    a = cat.hardware_keys()
    assert dict(a) == cat._build_hardware_keys() and cat.hardware_keys() == a
    with pytest.raises(TypeError):
        a["x"] = ("gpus", "h100-sxm")  # read-only: a caller cannot spoil the cache
    key = next(iter(cat.models))
    m = cat.models[key]
    assert cat.resolve_model_name(key) == ("models", key)
    cat.models["my-model"] = m.model_copy(update={"aliases": ["my-alias"]})  # added
    assert cat.resolve_model_name("MY-ALIAS") == ("models", "my-model")
    cat.models["my-model"] = m.model_copy(update={"aliases": ["other-alias"]})  # replaced
    assert cat.resolve_model_name("other-alias") == ("models", "my-model")
    with pytest.raises(Exception):
        cat.resolve_model_name("my-alias")
    del cat.models["my-model"]  # removed
    with pytest.raises(Exception):
        cat.resolve_model_name("other-alias")
    gpu = next(iter(cat.gpus))
    cat.gpus["my-gpu"] = cat.gpus[gpu].model_copy(update={"aliases": ["my-gpu-alias"]})
    assert cat.hardware_keys()["my-gpu-alias"] == ("gpus", "my-gpu")
    again = pickle.loads(pickle.dumps(cat))  # the cache pickles (Dask ships catalogs)
    assert dict(again.hardware_keys()) == dict(cat.hardware_keys())


def test_interval_bounds_are_cached_per_file_and_question():
    from wseplan import model_error as ME

    f = ME.load_model_error()
    if f is None:
        pytest.skip("no model-error file")
    args = dict(params_b=70.6, devices=8, hardware="h100-sxm")
    first = ME.speed_bounds("gpu-infer", **args)
    assert ME.speed_bounds("gpu-infer", **args) is first
    assert ME._speed_bounds(f, "gpu-infer", 70.6, 8, "h100-sxm", None, None) == first
    assert ME.speed_bounds("gpu-infer", params_b=7000.0, devices=8, hardware="h100-sxm") != first  # widened
    ME._load.cache_clear()  # a rewritten file: a new object, answered afresh
    try:
        assert ME.load_model_error() is not f and ME.speed_bounds("gpu-infer", **args) == first
    finally:
        ME._load.cache_clear()


def test_bottleneck_and_binding_codes_of_a_few_rows_equal_the_array_rule(monkeypatch):
    """A few rows are decided in Python floats; the array rule (nan_to_num, first maximum; a NaN binds first)
    decides the same, including NaN, infinities and ties."""
    from wseplan.devices import base

    rng = np.random.default_rng(31)
    vals = np.array([0.0, -0.0, 1.0, 1.0, 2.5, -3.0, np.inf, -np.inf, np.nan, 1.7976931348623157e308, -1e308])
    names = ["compute", "hbm_bandwidth", "nvlink", "overhead"]
    for _ in range(400):
        n = int(rng.integers(1, base._FEW_ROWS + 1))
        parts = {k: rng.choice(vals, n) for k in names[:int(rng.integers(1, 5))]}
        if rng.uniform() < 0.3:
            parts[next(iter(parts))] = float(rng.choice(vals))  # a scalar part
        load, cap = rng.choice(vals, n), rng.choice([1.0, 4.0, np.nan, np.inf], n)
        fits = rng.uniform(size=n) < 0.5
        bparts = {k: v for k, v in zip(("weights", "kv_cache", "activations", "optimizer"), parts.values())}
        few = base.argmax_code(parts, n), base.binding_code(bparts, load, cap, fits)
        monkeypatch.setattr(base, "_FEW_ROWS", 0)
        ref = base.argmax_code(parts, n), base.binding_code(bparts, load, cap, fits)
        monkeypatch.undo()
        assert _same(few[0], ref[0]) and _same(few[1], ref[1]), (parts, load, cap, fits)


@pytest.mark.parametrize("model,target,phase,software", [("llama-3.1-70b", "cs3x4", "decode", "wafer-production"),
                                                         ("llama-3.1-70b", "cs3x4", "serve", "wafer-production"),
                                                         ("llama-3.1-8b", "cs2x2", "serve", "wafer-research"),
                                                         ("gpt-oss-20b", "cs3x2", "prefill", "wafer-production")])
def test_wafer_questions_take_the_float_pass_with_and_without_the_kernel_memo(catalog, monkeypatch, model, target, phase,
                                                                              software):
    """A wafer question is composed from ``pass_row`` (no array pass; a serving question, and an in-flight engine's prefill, answer
    every candidate decode region in one array pass, whose kernels come from the same memo); its kernels come from the setup's memo
    (filled by earlier questions, a decode round's candidates at once) or are evaluated afresh (memo emptied before each
    question): the same bytes as the row among many either way; a refused float pass sends it to the arrays."""
    from wseplan.devices.wafer import WaferFamily

    s = setup(model, target, phase=phase, software=software, catalog=catalog)
    rng = np.random.default_rng(zlib.crc32(f"{model} {target} {phase} {software}".encode()))
    n = 10
    cfg = {"batch": rng.choice([1.0, 2.0, 3.0, 8.0, 17.0, 32.0], n), "context": rng.choice([128.0, 2048.0, 8192.0], n),
           "output_tokens": rng.choice([1.0, 64.0, 512.0], n) if phase == "serve" else np.zeros(n)}
    cfg["num_wafers"] = np.full(n, np.nan)
    many = evaluate(s, cfg)
    assert np.isfinite(many["step_s"]).sum() >= 5
    calls = _count_passes(monkeypatch, WaferFamily)
    for cold in (True, False, False):  # a fresh memo per question; then the memo the questions filled, twice
        for i in range(n):
            if cold:
                for c in (s.ctx, getattr(s.ctx, "_draft", None), getattr(s.ctx, "_serving", None)):
                    if c is not None:
                        c.__dict__.pop("_kernel_memo", None)
                        c.__dict__.pop("_pass_row_memo", None)  # a pass's answer, remembered beside its kernels
                        c.__dict__.pop("_serve_memo", None)  # a serving question's answer, remembered
            _same_rows(evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()}), many, i)
    # a serving question, and an in-flight engine's prefill (laid out as its serving replica), search the decode
    # regions by their serving answers in one array pass
    searched = phase == "serve" or (phase == "prefill" and s.ctx.engine.scheduling != "static")
    assert (calls["row"] > 0 and calls["array"] == 0) if not searched else calls["array"] > 0
    assert s.ctx._kernel_memo  # filled

    def refuse(self, *a, **kw):
        raise ZeroDivisionError
    monkeypatch.setattr(WaferFamily, "pass_row", refuse)
    for i in range(n):
        _same_rows(evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()}), many, i)
    assert calls["array"] > 0


def _count_passes(monkeypatch, family) -> dict:
    """Count a family's float (``pass_row``) and array (``pass_time``) forward passes: ``{"row": n, "array": n}``."""
    calls = {"row": 0, "array": 0}
    real_row, real_time = family.pass_row, family.pass_time

    def row(self, *a, **kw):
        calls["row"] += 1
        return real_row(self, *a, **kw)

    def arrays(self, *a, **kw):
        calls["array"] += 1
        return real_time(self, *a, **kw)

    monkeypatch.setattr(family, "pass_row", row)
    monkeypatch.setattr(family, "pass_time", arrays)
    return calls
