"""The closed forms in wseplan.sim._fabric against brute-force evaluation of their recurrences."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.sim import _fabric as fb


def brute_multicast(t0, ready, a, m, h, s, depth):
    """Per-wavelet evaluation of the recurrence in multicast_line's Notes (iterated to a fixed point)."""
    length = len(ready)
    d = np.arange(length) * h + s
    t = np.full(m, -np.inf)
    st_ = np.full((length, m), -np.inf)
    for _ in range(4 * m + 4):
        old = t.copy(), st_.copy()
        for j in range(m):
            v = t0 + j * s
            if j:
                v = max(v, t[j - 1] + s)
            if j >= depth:
                v = max(v, (st_[:, j - depth] - d).max())
            t[j] = v
            for i in range(length):
                w = max(t[j] + d[i], ready[i])
                if j:
                    w = max(w, st_[i, j - 1] + a[i])
                st_[i, j] = w
        if np.array_equal(old[0], t) and np.array_equal(old[1], st_):
            break
    return t[-1] + d, st_[:, -1] + a


def brute_chain(ready, g, a0, a, m, c):
    length = len(ready)
    r = np.full((length, m), -np.inf)
    for k in range(length):
        ak = a0 if k == 0 else a
        for j in range(m):
            v = ready[k] + j * g
            if k:
                v = max(v, r[k - 1, j] + c)
            if j:
                v = max(v, r[k, j - 1])
            r[k, j] = v + ak
    return r[:, -1]


small = st.integers(0, 9)


@settings(max_examples=150, deadline=None)
@given(
    length=st.integers(1, 6), m=st.integers(1, 12), depth=st.integers(1, 5),
    h=st.integers(0, 3), s=st.integers(1, 3), t0=small,
    ready=st.lists(st.integers(0, 60), min_size=6, max_size=6),
    a=st.lists(st.integers(0, 6), min_size=6, max_size=6),
)
def test_multicast_matches_recurrence(length, m, depth, h, s, t0, ready, a):
    ready = np.array(ready[:length], float)
    a = np.array(a[:length], float)
    arrive, finish = fb.multicast_line(t0=np.array(float(t0)), ready=ready, consume_cycles=a, num_wavelets=m,
                                       hop_cycles=h, wavelet_cycles=s, queue_depth=depth)
    ref_arrive, ref_finish = brute_multicast(t0, ready, a, m, h, s, depth)
    np.testing.assert_allclose(arrive, ref_arrive, rtol=1e-12)
    np.testing.assert_allclose(finish, ref_finish, rtol=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    length=st.integers(1, 7), m=st.integers(1, 10), g=st.integers(0, 4), a0=st.integers(1, 4),
    a=st.integers(1, 4), c=st.integers(0, 4), ready=st.lists(st.integers(0, 40), min_size=7, max_size=7),
)
def test_chain_reduce_matches_recurrence(length, m, g, a0, a, c, ready):
    ready = np.array(ready[:length], float)
    got = fb.chain_reduce_line(ready=ready, ready_step=g, first_cycles=a0, stage_service_cycles=a,
                               num_wavelets=m, stage_cycles=c)
    np.testing.assert_allclose(got, brute_chain(ready, g, a0, a, m, c), rtol=1e-12)


@pytest.mark.parametrize("line", [fb.tree_reduce_line, fb.ktree_reduce_line])
def test_two_stage_tree_and_ktree_equal_chain(line):
    ready = np.array([[3.0, 10.0]])
    done, _ = line(ready=ready, ready_step=0, first_cycles=1, stage_service_cycles=2,
                   num_wavelets=5, hop_cycles=1, ramp_cycles=2)
    chain = fb.chain_reduce_line(ready=ready[:, ::-1], ready_step=0, first_cycles=1, stage_service_cycles=2,
                                 num_wavelets=5, stage_cycles=3)
    assert done[0, 0] == chain[0, -1]


def test_incast_busy_period_by_hand():
    # Flows arrive at 0, 1 and 10 with 4, 4 and 1 cycles of work: busy 0..9, then 10..11.
    assert fb.incast_finish(arrival=np.array([0.0, 1.0, 10.0]), work_cycles=np.array([4.0, 4.0, 1.0])) == 11.0
    # All at once: total work.
    assert fb.incast_finish(arrival=np.zeros(3), work_cycles=np.array([2.0, 3.0, 4.0])) == 9.0


def test_scatter_by_hand():
    # Segments of 2 wavelets to positions 1, 2, 3 from position 0; s = 1, h = 1; farthest first.
    have = fb.scatter_line(t0=np.array(0.0), wavelets=np.array([2, 2, 2, 2]), hop_cycles=1, wavelet_cycles=1)
    np.testing.assert_allclose(have, [0.0, 4 + 1 + 2, 2 + 2 + 2, 0 + 3 + 2])


def test_tree_broadcast_by_hand():
    # L = 4, M = 3, h = 1, s = 1, ramp = 0: level 1 (stride 2): 0 -> 2 at 0+2+3 = 5;
    # level 2 (stride 1): 0 -> 1 starts at 3 (0's link free) -> 3+1+3 = 7; 2 -> 3 at 5+1+3 = 9.
    have, _ = fb.tree_broadcast_line(t0=np.array(0.0), num_wavelets=3, hop_cycles=1, wavelet_cycles=1,
                                     ramp_cycles=0, length=4)
    np.testing.assert_allclose(have, [0, 7, 5, 9])


def brute_ktree(ready, m, a0, a, h, ramp):
    """Two-level K-tree by explicit per-level, per-group chains (the recurrence of brute_chain on each group)."""
    length = len(ready)
    r = math.isqrt(length - 1) + 1 if length > 1 else 1
    first = np.array(ready, float)
    done = first.copy()
    step, st_ = 0.0, 1
    while st_ < length:
        new_step = max(step, a0, a)
        for head in range(0, length, st_ * r):
            members = [head + j * st_ for j in range(r) if head + j * st_ < length]
            if len(members) < 2:
                continue
            order = members[::-1]
            out = brute_chain(first[order], step, a0, a, m, st_ * h + ramp)
            for pos, t in zip(order, out):
                done[pos] = max(done[pos], t)
            first[head] = out[-1] - (m - 1) * new_step
        step = new_step
        st_ *= r
    return done


@settings(max_examples=150, deadline=None)
@given(length=st.integers(1, 12), m=st.integers(1, 6), a0=st.integers(1, 3), a=st.integers(1, 3),
       h=st.integers(0, 3), ramp=st.integers(0, 3), ready=st.lists(st.integers(0, 30), min_size=12, max_size=12))
def test_ktree_reduce_matches_per_group_chains(length, m, a0, a, h, ramp, ready):
    ready = np.array(ready[:length], float)
    done, levels = fb.ktree_reduce_line(ready=ready, ready_step=0, first_cycles=a0, stage_service_cycles=a,
                                        num_wavelets=m, hop_cycles=h, ramp_cycles=ramp)
    np.testing.assert_allclose(done, brute_ktree(ready, m, a0, a, h, ramp), rtol=1e-12)
    # every position but 0 sends exactly once, to the position one stride nearer to 0
    senders = np.concatenate([s for _, s in levels]) if levels else np.array([], int)
    assert sorted(senders.tolist()) == list(range(1, length))


def test_ktree_by_hand():
    """L = 9: segments of r = 3; level 1 chains of 3 (stage latency h + ramp = 3): 1 + 2 (1 + 3) = 9; level 2 over
    heads 0, 3, 6 (stage latency 3 h + ramp = 5): 9 + 1 + 2 (1 + 5) = 22 (one wavelet, a0 = a = 1)."""
    done, _ = fb.ktree_reduce_line(ready=np.zeros(9), ready_step=0, first_cycles=1, stage_service_cycles=1,
                                   num_wavelets=1, hop_cycles=1, ramp_cycles=2)
    assert done[0] == 22.0
    assert fb.ktree_radix(9) == 3 and fb.ktree_radix(10) == 4 and fb.ktree_radix(377) == 20
    assert fb.ktree_colors(9) == 4 and fb.ktree_colors(2) == 1 and fb.ktree_colors(3) == 2
