"""A wafer question asked alone gives, bit for bit, what it gets among many (issue 14 item 1).

A single evaluation takes the few-row forms (the partition walk on Python floats, the kernels once per row without
the distinct-row plans, the variants of a GEMV or a reduction stacked in one array pass, a block's GEMVs in one
pass); many rows take the distinct-row plans and the chunked partitions. Every column of
:func:`wseplan.plan.evaluate` must be the same bytes either way, for random configurations of the resident family
(decode, prefill, serve; WSE-2 and WSE-3 targets; the production and research software profiles) and of the
streamed family (training). The stacked kernel forms are also held to their variant-at-a-time loops directly.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from wseplan.analytic import fabric_kernels as K
from wseplan.plan import evaluate, setup


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _seed(*parts) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(" ".join(map(str, parts)).encode()))


_RESIDENT = [("llama-3.1-70b", "cs3x4", "decode", "wafer-production"), ("llama-3.1-70b", "cs3x4", "serve", "wafer-research"),
             ("llama-3.1-8b", "cs2x2", "prefill", "wafer-production"), ("gpt-oss-20b", "cs2x8", "serve", "wafer-production"),
             ("llama-3.1-8b", "cs3x2", "decode", "wafer-research"), ("gpt-oss-20b", "cs3x4", "prefill", "wafer-research")]


def _resident_rows(rng, n, phase, count):
    cfg = {"batch": rng.choice([1.0, 2.0, 3.0, 8.0, 17.0, 64.0], n), "context": rng.choice([128.0, 2048.0, 4096.0, 32768.0], n),
           "output_tokens": rng.choice([1.0, 64.0, 1024.0], n) if phase == "serve" else np.zeros(n)}
    cfg["num_wafers"] = np.where(rng.random(n) < 0.3, rng.integers(1, count + 1, n).astype(float), np.nan)  # given or searched
    return cfg


def _compare(s, cfg, n, min_timed):
    many = evaluate(s, cfg)
    timed = 0
    for i in range(n):
        one = evaluate(s, {k: v[i:i + 1] for k, v in cfg.items()})
        assert set(one) <= set(many) and (set(one) == set(many) or not one["fits"][0])  # nothing timed: no parts
        for k, v in one.items():
            row = many[k][i:i + 1]
            if row.ndim == 2:  # per-stage columns: as wide as the most stages among the rows, padded with -1 / -inf
                pad = row[:, v.shape[1]:]
                assert np.all(pad == (-1 if pad.dtype.kind == "i" else -np.inf)), (i, k)
                row = row[:, :v.shape[1]]
            assert _same(v, row), (i, k, v, row)
        timed += bool(np.isfinite(one["step_s"][0]))
    assert timed >= min_timed


@pytest.mark.parametrize("model,target,phase,software", _RESIDENT)
def test_one_wafer_question_equals_its_row_among_many(catalog, model, target, phase, software):
    s = setup(model, target, phase=phase, software=software, catalog=catalog)
    n = 36
    _compare(s, _resident_rows(_seed(model, target, phase, software), n, phase, s.query.target.count), n, 12)


@pytest.mark.parametrize("model,target", [("llama-3.1-8b", "cs3x2"), ("llama-3.1-70b", "cs2x4")])
def test_one_streamed_training_question_equals_its_row_among_many(catalog, model, target):
    s = setup(model, target, phase="train", catalog=catalog)
    rng = _seed(model, target, "train")
    n = 24
    cfg = {"batch": rng.choice([8.0, 64.0, 96.0, 512.0], n), "context": rng.choice([2048.0, 8192.0], n),
           "output_tokens": np.zeros(n), "num_systems": rng.choice([1.0, 2.0], n)}
    _compare(s, cfg, n, 12)


def _loop_only(monkeypatch):
    monkeypatch.setattr(K.Region, "stacked_gemv", lambda self, *a: None)
    monkeypatch.setattr(K.Region, "stacked_reduce", lambda self, *a: None)


def _regions(rng):
    sides = rng.choice([1.0, 2.0, 3.0, 32.0, 47.0, 125.0, 377.0, 755.0, 1000.0], size=rng.integers(1, 6))
    kind = rng.integers(0, 3)
    if kind == 0:
        return sides[:, None], sides[:, None]
    if kind == 1:
        return sides[None, :], sides[None, :]
    return sides, sides[::-1].copy()


@pytest.mark.parametrize("seed", range(4))
def test_stacked_gemv_variants_equal_the_loop(monkeypatch, seed):
    """The GEMV variants in one stacked pass: each the variant's own loop, bit for bit and shape for shape, over
    reduction algorithms, tree models, colour limits (the tree, the chain, the choice) and operand shapes."""
    rng = _seed("gemv", seed)
    cases = []
    for _ in range(40):
        P, Q = _regions(rng)
        m = rng.choice([1.0, 3.0, 64.0]) * np.ones((rng.integers(1, 4),) + (1,) * P.ndim) if rng.random() < 0.5 \
            else float(rng.integers(1, 50))
        kw = dict(k=float(rng.integers(1, 20000)), n=float(rng.integers(1, 20000)), m=m, flop_per_cycle=float(rng.choice([2.0, 8.0])),
                  sram_bytes_per_cycle=float(rng.choice([8.0, 16.0])), link_bytes_per_cycle=float(rng.choice([4.0, 2.0])),
                  reduce_algo=str(rng.choice(["best", "chain", "tree", "ktree"])), broadcast_overlap_frac=float(rng.random()),
                  tree_level_overlap_frac=float(rng.random()), num_colors=float(rng.choice([np.inf, 3.0, 8.0, 24.0])),
                  tree_model=str(rng.choice(["levels", "critical_path"])),
                  variants=((float(rng.integers(0, 5)), float(rng.integers(0, 3)), 50.0, float(rng.integers(0, 9)),
                             float(rng.integers(0, 9)), 0.7), (0.0, 0.0, 0.0, 0.0, 0.0, 0.7), (0.0, 0.0, 0.0, 0.0, 0.0, 1e30)))
        cases.append((P, Q, kw))
    fast = [K.gemv_variants(K.Region(P, Q), **kw) for P, Q, kw in cases]
    assert any(K.Region(P, Q).stacked_gemv is not None for P, Q, _ in cases)
    _loop_only(monkeypatch)
    for got, (P, Q, kw) in zip(fast, cases):
        want = K.gemv_variants(K.Region(P, Q), **kw)
        assert len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("seed", range(3))
def test_stacked_reductions_equal_the_loop(monkeypatch, seed):
    rng = _seed("reduce", seed)
    cases = []
    for _ in range(40):
        P, Q = _regions(rng)
        msg = rng.integers(1, 5000, size=(rng.integers(1, 4),) + (1,) * P.ndim).astype(float)
        var = [(float(rng.integers(0, 5)), float(rng.integers(0, 3)), float(rng.integers(0, 9)), float(rng.integers(0, 9)))]
        if rng.random() < 0.7:
            var.append((0.0, 0.0, 0.0, 0.0))
        kw = dict(link_bytes_per_cycle=float(rng.choice([4.0, 2.0, 1.0])), wavelet_bytes=4.0,
                  tree_level_overlap_frac=float(rng.random()), max_tree_levels=float(rng.choice([np.inf, 2.0, 7.0, 23.0])),
                  tree_model=str(rng.choice(["levels", "critical_path"])), variants=var)
        cases.append((P, Q, str(rng.choice(["P", "Q"])), msg, kw))
    fast = [K.reduce_broadcast(K.Region(P, Q), ax, msg, **kw) for P, Q, ax, msg, kw in cases]
    _loop_only(monkeypatch)
    for got, (P, Q, ax, msg, kw) in zip(fast, cases):
        want = K.reduce_broadcast(K.Region(P, Q), ax, msg, **kw)
        assert len(got) == len(want)
        assert all(_same(a, b) for g, w in zip(got, want) for a, b in zip(g, w))
