"""A wafer question's decode rounds announce their micro-batch candidates (``announce_row``) and the resident family
evaluates their kernels in one array pass at the first miss (:func:`wseplan.devices.wafer_row.prefetch_row`), the
verification round's sizes with the plain round's under speculative decoding, every target pass of a serving question
at once. The kernels are the same numbers whether evaluated
together, one at a time or among many rows: every field of a question asked first (empty memos) equals the field
with the announcement turned off and the row among many (bytes compared)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from wseplan.devices import wafer_row as WR
from wseplan.devices.wafer import WaferFamily
from wseplan.plan import evaluate, setup

_MEMOS = ("_kernel_memo", "_fit_memo", "_side_memo", "_serve_memo", "_last_round", "_draft_for", "_pass_row_memo")


def _cold(s) -> None:
    """Empty every memo of the setup and of its draft model's context: the next question is a first ask."""
    for c in (s.ctx, getattr(s.ctx, "_draft", None)):
        if c is not None:
            for k in _MEMOS:
                c.__dict__.pop(k, None)


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("model,target,phase,software", [("llama-3.1-70b", "cs3x4", "decode", "wafer-production"),
                                                         ("llama-3.1-70b", "cs3x4", "serve", "wafer-production"),
                                                         ("llama-3.1-8b", "cs3x2", "serve", "wafer-research"),
                                                         ("llama-3.1-8b", "cs3", "decode", "wafer-research")])
def test_first_asks_with_announced_rounds_equal_the_arrays(catalog, monkeypatch, model, target, phase, software):
    s = setup(model, target, phase=phase, software=software, catalog=catalog)
    rng = np.random.default_rng(zlib.crc32(f"{model} {target} {phase} {software}".encode()))
    n = 60
    big = "70b" in model  # fewer sequences and shorter ones fit its four wafers
    cfg = {"batch": rng.integers(1, 17 if big else 65, n).astype(float),
           "context": rng.choice([64.0, 512.0, 2048.0] if big else [64.0, 512.0, 2048.0, 8192.0, 30000.0], n)
           + rng.integers(0, 3, n),
           "output_tokens": rng.integers(1, 1025 if big else 2049, n).astype(float) if phase == "serve" else np.zeros(n)}
    many = evaluate(s, cfg)
    assert np.isfinite(many["step_s"]).sum() >= n // 2
    calls = {"prefetch": 0, "kernels": 0}
    real_pre, real_k = WR.prefetch_rows, WaferFamily._pass_kernels

    def pre(*a, **kw):
        calls["prefetch"] += 1
        return real_pre(*a, **kw)

    def kern(self, *a, **kw):
        calls["kernels"] += 1
        return real_k(self, *a, **kw)

    monkeypatch.setattr(WR, "prefetch_rows", pre)
    monkeypatch.setattr(WaferFamily, "_pass_kernels", kern)
    first = []
    for i in range(n):
        _cold(s)
        first.append(evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()}))
    assert calls["prefetch"] > 0
    with_prefetch = calls["kernels"]
    monkeypatch.setattr(WaferFamily, "announce_row", None)  # no announcements: each pass's kernels when asked for
    calls["kernels"] = 0
    for i in range(n):
        _cold(s)
        alone = evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()})
        assert set(alone) == set(first[i])
        for k, v in first[i].items():
            assert _same(v, alone[k]), (i, k)
            ref = many[k][i:i + 1]
            if np.ndim(v) == 2:  # per-stage columns: the rows among many are as wide as the most stages of any
                assert (ref[:, v.shape[1]:] < 0).all()
                ref = ref[:, :v.shape[1]]
            assert _same(v, ref), (i, k)
    # fewer array passes when the rounds are announced (none either way where the region search's decode tables hold
    # every round's kernels: Llama-3.1-8B on one CS-3, whose searched regions are all table entries)
    assert with_prefetch < calls["kernels"] or calls["kernels"] == 0


@pytest.mark.parametrize("phase", ["decode", "serve"])
def test_a_first_question_evaluates_each_models_kernels_once(catalog, monkeypatch, phase):
    """Llama-3.1-70B on four CS-3 with the production profile's speculative decoding (and in-flight batching): the
    target's passes in one array pass (decode: the plain round's and the verification round's candidates; serve: those
    of the rounds with and without prompt chunks, and the own-prompt passes of every micro-batch count, on every
    admissible decode region the serving search answers), the draft model's round in another (and, serving, its prefill
    of the own prompt in a third), or none where a region
    search's tables hold the round's kernels (decode rows alone: :func:`wseplan.devices.wafer_row.keep_decode_table`).
    The target is answered once (a serving search answers every candidate region in one evaluation)."""
    s = setup("llama-3.1-70b", "cs3x4", phase=phase, software="wafer-production", catalog=catalog)
    assert s.ctx.spec is not None and (phase == "decode" or s.query.software.engine.scheduling == "inflight")
    calls, weighed = [], []
    real, real_infer = WaferFamily._pass_kernels, WaferFamily.infer_time

    def kern(self, ctx, *cols):
        calls.append(len(cols[0]))
        return real(self, ctx, *cols)

    def infer(self, ctx, cfg, **kw):
        weighed.append(ctx is s.ctx)
        return real_infer(self, ctx, cfg, **kw)

    monkeypatch.setattr(WaferFamily, "_pass_kernels", kern)
    monkeypatch.setattr(WaferFamily, "infer_time", infer)
    for b in (1.0, 7.0, 24.0):
        _cold(s)
        calls.clear()
        weighed.clear()
        out = evaluate(s, {"batch": np.array([b]), "context": np.array([2048.0]), "output_tokens": np.array([256.0 if phase == "serve" else 0.0])})
        assert bool(out["fits"][0]) and np.isfinite(out["tpot_s"][0]), (b, out["fits"], out["num_wafers"])
        # serving: the draft model's prefill of the own prompt (in TTFT) is one more array pass of the draft's
        assert len(calls) <= (3 if phase == "serve" else 2), (b, calls, weighed)
        assert sum(weighed) == 1
        if phase == "decode" and b == 1.0:  # every pass a decode pass on a searched side: all from the tables
            assert not calls, calls
