"""The wafer sweep's fast paths give the numbers of the plain forms, bit for bit (issue 14, wafer sweep speed).

* :func:`wseplan.analytic.rows.unique_rows` of many rows codes each column by rank and joins the codes (no joint
  sort): the same ``(first, inverse)`` as the joint lexsort.
* :func:`wseplan.devices.wafer_stages.fewest_stages` skips the greedy packing where a bound proves the count at least
  the device count: ``min(count, N)`` is the packing's.
* :func:`wseplan.devices.wafer_groups.slowest_group` takes a many-row pass's layer-group bookkeeping per configuration
  row: the pass times are the per-wafer form's.
"""
from __future__ import annotations

import numpy as np
import pytest

from wseplan.analytic import rows as R
from wseplan.analytic.partition_rows import greedy_stage_counts
from wseplan.devices import wafer_groups as WG
from wseplan.plan import evaluate, setup
from wseplan.workload import kv_bytes_rows


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _columns(seed: int, n: int) -> list:
    rng = np.random.default_rng(seed)
    return [
        rng.integers(1, 40, n).astype(float),                       # small whole numbers: a flag table
        rng.choice([0.0, -0.0, 1.5, np.nan, -3.0, 1e300], n),        # signed zeros, NaN, negatives: sorted
        rng.integers(0, 3, n) / 3.0,                                 # fractions
        np.full(n, 7.0),                                             # constant: dropped
        rng.integers(0, 10 ** 7, n).astype(float),                   # a wide range: sorted
        rng.integers(1, 40, n).astype(float) * 0 + 2.0,              # constant again
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("pick", [(0,), (0, 2), (1, 2), (0, 1, 2, 3), (0, 4), (4, 0, 4), (3, 5), (2, 0, 0)])
def test_coded_unique_rows_equal_the_joint_sort(monkeypatch, seed, pick):
    cols = _columns(seed, 20_000)
    cols = [cols[i] for i in pick]
    cols = [np.concatenate([c, c[:5000]]) for c in cols]  # repeats
    monkeypatch.setattr(R, "CODED_MIN_ROWS", 10 ** 9)
    f0, i0 = R.unique_rows(*cols)
    monkeypatch.setattr(R, "CODED_MIN_ROWS", 0)
    f1, i1 = R.unique_rows(*cols)
    assert _same(f0, f1) and _same(i0, i1)


@pytest.mark.parametrize("model,target", [("llama-3.1-70b", "cs3x4"), ("llama-3.1-8b", "cs3x2"), ("llama-3.1-8b", "cs3x4"),
                                          ("llama-3.2-1b", "cs3x4"), ("llama-3.1-70b", "cs3x2")])
def test_fewest_stages_bound_keeps_the_packings_answer(catalog, model, target):
    from wseplan.devices.wafer_stages import fewest_stages

    s = setup(model, target, phase="serve", catalog=catalog)
    fam, ctx = s.family, s.ctx
    rng = np.random.default_rng(5)
    n = 4000
    B = rng.integers(1, 1025, n).astype(float)
    C = rng.choice([128.0, 512.0, 2048.0, 8192.0, 32768.0], n)
    O = rng.choice([64.0, 1024.0, 4096.0], n)
    kv, work = fam.kv_and_working_tokens(ctx, B, C, O)
    a = ctx.w.working_set_bytes_per_token * work
    kvr = kv_bytes_rows(ctx.w, B, kv)
    plain = greedy_stage_counts(ctx.weights(n, np.ones(n, dtype=bool)) + kvr,
                                ctx.weights(n, np.zeros(n, dtype=bool)) + kvr, a, ctx.cap)
    fast = fewest_stages(ctx, B, kv, a, np.ones(n, dtype=bool))
    if model == "llama-3.1-70b":  # the bound settles these rows: nothing packed
        assert (fast >= ctx.count).all()
    N = ctx.count
    assert _same(np.minimum(fast, N), np.minimum(plain, N))


@pytest.mark.parametrize("model,target,phase", [("llama-3.1-8b", "cs3x2", "serve"), ("llama-3.1-70b", "cs3x4", "serve"),
                                                ("llama-3.1-8b", "cs3", "decode"), ("llama-3.1-8b", "cs3x4", "prefill")])
def test_slowest_group_per_configuration_row_equals_the_per_wafer_form(catalog, monkeypatch, model, target, phase):
    rng = np.random.default_rng(3)
    n = 600
    cfg = {"batch": rng.integers(1, 257, n).astype(float), "context": rng.choice([512.0, 2048.0, 8192.0], n),
           "output_tokens": rng.choice([64.0, 1024.0], n) if phase == "serve" else np.zeros(n)}
    got, taken = [], []
    plain = WG.slowest_group

    def counted(*args):
        out = plain(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr("wseplan.devices.wafer.slowest_group", counted)
    for rows in (10 ** 9, 0):
        monkeypatch.setattr(WG, "MIN_ROWS", rows)
        s = setup(model, target, phase=phase, catalog=catalog)
        got.append(evaluate(s, cfg))
        taken.append(None)
    assert any(taken[:taken.index(None)]) is False and any(taken[taken.index(None) + 1:])  # off, then on
    a, b = got
    assert set(a) == set(b)
    assert np.asarray(a["fits"]).any()
    for k in a:
        assert _same(a[k], b[k]), k
