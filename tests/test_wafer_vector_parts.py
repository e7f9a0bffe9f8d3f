"""The building blocks of the vectorized wafer path give, bit for bit, what the one-at-a-time forms give (issue 14).

Each fast form is checked against the plain form it replaces, on inputs chosen to make ties and edge cases
likely: the batched min-max partition (bisection, pointer walk, and the walk on Python floats for a few rows) against the scalar dynamic program, the tree
critical path from its table against the unrolled evaluation, the one-pass GEMV parts against three calls of the
GEMV, the few-rows greedy stage count against the vectorized one, and the distinct-row helper.
"""
from __future__ import annotations

import numpy as np
import pytest

from wseplan.analytic import fabric as F
from wseplan.analytic import fabric_kernels as K
from wseplan.analytic import partition as P
from wseplan.analytic import partition_rows as PR
from wseplan.analytic import rows as R


def _items(rng, kind, N, n):
    if kind == 0:  # small integers with zeros: equal loads and plateaus everywhere
        return rng.integers(0, 5, size=(N, n)).astype(float)
    if kind == 1:  # identical blocks between two odd ends (a transformer's embedding, blocks, head)
        x = np.full((N, n), 3.0)
        x[:, 0] = rng.integers(0, 9, N)
        x[:, -1] = rng.integers(0, 9, N)
        return x
    if kind == 2:
        return rng.random((N, n)) * 1e9
    return np.full((N, n), 1e9 + 0.1) + rng.integers(0, 3, size=(N, n)) * 1e-7  # ties up to rounding


@pytest.mark.parametrize("walk_min_rows,rows_max", [(1, 0), (10**9, 0), (10**9, 10**9)],
                         ids=["walk", "bisection", "python-rows"])
def test_batched_partition_equals_scalar_dp(monkeypatch, walk_min_rows, rows_max):
    monkeypatch.setattr(PR, "WALK_MIN_ROWS", walk_min_rows)
    monkeypatch.setattr(PR, "ROWS_MAX", rows_max)
    rng = np.random.default_rng(11)
    for trial in range(24):
        n = int(rng.integers(2, 30))
        N = 60
        x = _items(rng, trial % 4, N, n)
        k = rng.integers(1, n + 1, size=N)
        a = rng.integers(0, 5, size=N).astype(float) * (1e8 if trial % 4 == 2 else 1.0)
        start, end, loads = PR.min_max_partition_batched(x, k, a)
        for i in range(N):
            best, ref = P.min_max_partition(x[i], int(k[i]), float(a[i]))
            got = [(int(s), int(e)) for s, e in zip(start[i], end[i]) if s >= 0]
            assert got == ref, (trial, i)
            assert loads[i][start[i] >= 0].max() == best


@pytest.mark.parametrize("stride", [1, 3, 32])
def test_neighbour_partition_equals_dynamic_program(monkeypatch, stride):
    """The sampled program plus proved neighbours' answers (:func:`_neighbour_chunk`) gives the program's own answer
    on every row: ties, plateaus, rounding-level differences, and a family of rows whose answer changes along it."""
    monkeypatch.setattr(PR, "NEIGHBOUR_STRIDE", stride)
    rng = np.random.default_rng(7)
    for trial in range(60):
        n = int(rng.integers(2, 40))
        N = int(rng.integers(1, 200))
        if trial % 5 == 4:  # an embedding, identical blocks growing with a per-row KV term, a head
            x = np.full((N, n), 3.0) + (rng.random(N) * 10)[:, None]
            x[:, 0], x[:, -1] = 7.0, 5.0
        else:
            x = _items(rng, trial % 4, N, n)
        k = int(rng.integers(2, n + 1))
        a = rng.integers(0, 5, size=N).astype(float) * (1e8 if trial % 4 == 2 else 1.0)
        K = k + int(rng.integers(0, 3))
        us, ue = PR._neighbour_chunk(x, k, a, K)
        rs, re = PR._dp_chunk(x, k, a, K)
        assert np.array_equal(us, rs) and np.array_equal(ue, re), trial


def test_partition_proof_accepts_only_the_programs_answer():
    """:func:`_verify_partition` accepts a proposal iff it is the program's answer: the answer itself passes; a
    boundary moved by one (often an equally good partition: a tie the program breaks its own way) fails."""
    rng = np.random.default_rng(9)
    for trial in range(80):
        n, N = int(rng.integers(3, 25)), 100
        x = _items(rng, trial % 4, N, n)
        k = int(rng.integers(2, n + 1))
        a = rng.integers(0, 5, size=N).astype(float)
        rs, _ = PR._dp_chunk(x, k, a, k)
        truth = PR._bounds(rs, k, n)
        move = rng.integers(-1, 2, size=(N, k + 1))
        move[:, 0] = move[:, -1] = 0
        prop = truth + move
        pre = np.concatenate([np.zeros((N, 1)), np.cumsum(x, axis=1)], axis=1)
        ok = PR._verify_partition(pre, a, prop)
        assert np.array_equal(ok, np.all(prop == truth, axis=1)), trial


def test_batched_partition_row_keys_solve_each_distinct_row_once(monkeypatch):
    """Rows named equal by their keys are solved once; the answer is the one of their own rows."""
    rng = np.random.default_rng(5)
    base = rng.random((3, 12)) * 100
    pick = rng.integers(0, 3, size=40)
    x, k, a = base[pick], np.full(40, 3), np.zeros(40)
    calls = []
    orig = PR._dp_chunk

    def spy(xs, kc, aa, KK, pre=None):
        calls.append(len(xs))
        return orig(xs, kc, aa, KK, pre)

    monkeypatch.setattr(PR, "_dp_chunk", spy)
    start, end, _ = PR.min_max_partition_batched(x, k, a, row_keys=(pick.astype(float), k, a))
    assert sum(calls) == 3
    ref_s, ref_e, _ = PR.min_max_partition_batched(x, k, a)
    assert np.array_equal(start, ref_s) and np.array_equal(end, ref_e)


def test_greedy_stage_counts_few_rows_equal_vectorized(monkeypatch):
    rng = np.random.default_rng(3)
    xm = rng.random((4, 40)) * 10
    xs = xm * 0.9
    a = rng.random(4) * 3
    for cap in (5.0, 12.0, 50.0, 500.0, 1e9):
        few = PR.greedy_stage_counts(xm, xs, a, cap)
        monkeypatch.setattr(PR, "_FEW_ROWS", 0)
        many = PR.greedy_stage_counts(xm, xs, a, cap)
        monkeypatch.setattr(PR, "_FEW_ROWS", 4)
        assert np.array_equal(few, many) and few.dtype == many.dtype


def test_unique_rows_by_bit_pattern():
    a = np.array([1.0, 2.0, 1.0, 0.0, -0.0, 1.0, np.nan, np.nan])
    b = np.array([5.0, 5.0, 5.0, 1.0, 1.0, 6.0, 2.0, 2.0])
    first, inv = R.unique_rows(a, b)
    assert len(first) == 6  # (1,5) (2,5) (0,1) (-0,1) (1,6) (nan,2): signed zeros stay apart, equal NaN bits merge
    for col in (a, b):
        assert np.array_equal(col[first][inv].view(np.int64), col.view(np.int64))


@pytest.mark.parametrize("h,send,skip", [(1.0, 2.0, 1.0), (1.0, 3.713, 1.25), (0.0, 0.0, 2.0), (2.5, 0.0, 0.0)])
def test_tree_path_table_equals_unrolled(h, send, skip):
    L = np.arange(0.0, 3000.0)
    table = K.tree_path_cycles(L, h, send, skip)
    assert np.array_equal(table, K.tree_path_unrolled(L, h, send, skip))
    # shapes and the fallbacks (fractional lengths, array constants) as the unrolled form
    L2 = np.array([[1.0, 7.0], [33.0, 1000.0]])
    assert K.tree_path_cycles(L2, h, send, skip).shape == (2, 2)
    frac = np.array([2.5, 17.25])
    assert np.array_equal(K.tree_path_cycles(frac, h, send, skip), K.tree_path_unrolled(frac, h, send, skip))
    sends = np.array([1.0, 2.0])
    assert np.array_equal(K.tree_path_cycles(np.array([9.0, 9.0]), h, sends, skip),
                          K.tree_path_unrolled(np.array([9.0, 9.0]), h, sends, skip))


def _gemv_parts_three_calls(**kw):
    """The GEMV parts as defined before the one-pass form: three calls of gemv_cycles, split by difference."""
    zero_lat = dict(kw, hop_latency_cycles=0.0, ramp_latency_cycles=0.0, per_kernel_overhead_cycles=0.0,
                    reduce_stage_cycles=0.0, tree_level_cycles=0.0)
    no_comp = dict(zero_lat, mac_efficiency_frac=1e30)
    total = F.gemv_cycles(**kw)
    overhead = np.full_like(np.asarray(total, dtype=float), kw.get("per_kernel_overhead_cycles", 0.0))
    serial = F.gemv_cycles(**no_comp)
    compute = F.gemv_cycles(**zero_lat) - serial
    return {"overhead": overhead, "latency": total - overhead - serial - compute, "serialization": serial,
            "compute": compute}


@pytest.mark.parametrize("tree_model", ["levels", "critical_path"])
@pytest.mark.parametrize("algo", ["best", "chain", "tree"])
def test_gemv_parts_one_pass_equal_three_calls(catalog, tree_model, algo):
    fk = F.wafer_fabric_kwargs(catalog.wafers["wse3"], "bf16", F.load_fabric_constants())
    fk = dict(fk, tree_model=tree_model, reduce_algo=algo)
    rng = np.random.default_rng(2)
    P_ = rng.integers(1, 400, size=(50, 1)).astype(float)
    kw = dict(fk, k=rng.integers(1, 30000, size=(1, 7)).astype(float), n=4096.0, m=rng.integers(1, 65, size=(1, 7)),
              rows=P_, cols=P_[::-1], mac_efficiency_frac=0.8)
    one = F.gemv_parts_cycles(**kw)
    three = _gemv_parts_three_calls(**kw)
    for key in three:
        assert np.array_equal(one[key], three[key]), key


def test_kernel_inputs_checked():
    from wseplan.errors import InputError

    kw = dict(k=8, n=8, rows=2, cols=2, flop_per_cycle=8.0, sram_bytes_per_cycle=24.0, hop_latency_cycles=1.0,
              link_bytes_per_cycle=4.0)
    with pytest.raises(InputError):
        F.gemv_cycles(reduce_algo="ring", **kw)
    with pytest.raises(InputError):
        F.gemv_parts_cycles(tree_model="spiral", **kw)


def test_block_kernels_once_per_distinct_row_equal_row_by_row(catalog):
    """Decode blocks and LM heads evaluated once per distinct row (batch against region sides, and one region per
    row as in a pass) equal the same rows evaluated one at a time."""
    from wseplan.analytic import wse_time as wt

    m = catalog.models["llama-3.1-8b"]
    c = F.load_fabric_constants()
    fk = F.wafer_fabric_kwargs(catalog.wafers["wse3"], "bf16", c)
    eff = c.gemv_mac_efficiency_frac.si
    rng = np.random.default_rng(9)
    b = rng.choice([1.0, 4.0, 9.0, 64.0], size=(120, 1))
    ctx = rng.choice([100.0, 4096.0], size=(120, 1))
    sides = np.array([[64.0, 151.0, 377.0]])
    whole = wt.decode_block_cycles_array(arch=m, batch=b, context=ctx, rows=sides, cols=sides, fk=fk,
                                         gemv_mac_efficiency_frac=eff)
    head = wt.head_decode_cycles_array(arch=m, batch=b, rows=sides, cols=sides, fk=fk, gemv_mac_efficiency_frac=eff)
    r = rng.choice([64.0, 377.0], size=120)
    per_row = wt.decode_block_cycles_array(arch=m, batch=b[:, 0], context=ctx[:, 0], rows=r, cols=r[::-1], fk=fk,
                                           gemv_mac_efficiency_frac=eff)
    for i in range(0, 120, 7):
        one = wt.decode_block_cycles_array(arch=m, batch=b[i:i + 1], context=ctx[i:i + 1], rows=sides, cols=sides,
                                           fk=fk, gemv_mac_efficiency_frac=eff)
        one_h = wt.head_decode_cycles_array(arch=m, batch=b[i:i + 1], rows=sides, cols=sides, fk=fk,
                                            gemv_mac_efficiency_frac=eff)
        one_r = wt.decode_block_cycles_array(arch=m, batch=b[i, 0], context=ctx[i, 0], rows=r[i], cols=r[::-1][i], fk=fk,
                                             gemv_mac_efficiency_frac=eff)
        for key in whole:
            assert np.array_equal(whole[key][i], one[key][0]), key
            assert np.array_equal(per_row[key][i], one_r[key]), key
        for key in head:
            assert np.array_equal(head[key][i], one_h[key][0]), key


def test_kept_regions_give_the_numbers_of_new_ones():
    """:meth:`Region.of` hands back one kept region per small side array (its line terms computed once) and a new
    region for large arrays; the GEMV on a kept region, used again, equals the GEMV on a fresh region bit for bit."""
    sides = np.array([[33.0, 64.0, 377.0, 1000.0]])
    kept = K.Region.of(sides, sides)
    assert K.Region.of(sides.copy(), sides.copy()) is kept and not kept.P.flags.writeable
    assert K.Region.of(sides.T, sides.T) is not kept  # another shape, another region
    big = np.full(K.KEEP_MAX_SIZE + 1, 64.0)
    assert K.Region.of(big, big) is not K.Region.of(big, big)
    kw = dict(k=np.array([[8192.0], [28672.0]]), n=np.array([[10240.0], [8192.0]]), m=np.array([[3.0], [17.0]]),
              flop_per_cycle=8.0, sram_bytes_per_cycle=24.0, link_bytes_per_cycle=4.0, tree_model="critical_path",
              variants=((1.0, 2.0, 30.0, 1.5, 2.5, 0.8), (0.0, 0.0, 0.0, 0.0, 0.0, 0.8)))
    for _ in range(2):  # the second time from the kept line terms
        again = K.gemv_variants(K.Region.of(sides, sides), **kw)
        fresh = K.gemv_variants(K.Region(sides, sides), **kw)
        for x, y in zip(again, fresh):
            assert np.array_equal(x, y)


def test_mac_cycles_scalar_constants_equal_the_array_form():
    for args in ((8.0, 24.0, 2.0, 0.8), (8, 24.0, 1, 1.0), (np.float64(4.0), 12.0, 2.0, 1e30)):
        a = K.mac_cycles(flop_per_cycle=args[0], sram_bytes_per_cycle=args[1], dtype_bytes=args[2], efficiency_frac=args[3])
        b = K.mac_cycles(flop_per_cycle=np.array([args[0]]), sram_bytes_per_cycle=args[1], dtype_bytes=args[2],
                         efficiency_frac=args[3])
        assert np.array_equal(np.atleast_1d(a), b)
