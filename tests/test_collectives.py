"""Alpha-beta collectives: hand calculations, identities and hypothesis properties."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.analytic.collectives import (allreduce_time_s, hierarchical_allreduce_time_s,
                                          reduce_scatter_time_s, send_recv_time_s)
from wseplan.errors import InputError


def test_ring_allreduce_hand_calculation():
    # 8 ranks, 1 GB, 100 GB/s, 10 us: 2*7 steps of alpha + 2*7/8 * 1e9 / 1e11
    t = allreduce_time_s(message_bytes=1e9, num_ranks=8, link_bandwidth_bytes_per_s=1e11, link_latency_s=1e-5)
    assert t == pytest.approx(14 * 1e-5 + 2 * 7 / 8 * 1e-2, rel=1e-12)


def test_tree_allreduce_has_log_latency_and_same_bandwidth_term():
    t = allreduce_time_s(message_bytes=0.0, num_ranks=1024, link_bandwidth_bytes_per_s=1e11, link_latency_s=1e-5,
                         algorithm="tree")
    assert t == pytest.approx(2 * 10 * 1e-5, rel=1e-12)
    big = dict(message_bytes=1e10, num_ranks=16, link_bandwidth_bytes_per_s=1e11, link_latency_s=0.0)
    assert allreduce_time_s(**big, algorithm="tree") == pytest.approx(allreduce_time_s(**big), rel=1e-12)


def test_one_rank_costs_nothing_and_vectorizes():
    t = allreduce_time_s(message_bytes=np.array([1e6, 1e6]), num_ranks=np.array([1, 2]), link_bandwidth_bytes_per_s=1e9,
                         link_latency_s=1e-6)
    assert t.shape == (2,)
    assert t[0] == 0.0
    assert t[1] == pytest.approx(2e-6 + 1e-3, rel=1e-12)


def test_ring_allreduce_is_reduce_scatter_then_its_mirror_allgather():
    kw = dict(message_bytes=3e8, num_ranks=12, link_bandwidth_bytes_per_s=2e10, link_latency_s=3e-6)
    assert 2 * reduce_scatter_time_s(**kw) == pytest.approx(allreduce_time_s(**kw), rel=1e-12)


def test_send_recv():
    assert send_recv_time_s(message_bytes=1e6, link_bandwidth_bytes_per_s=1e9, link_latency_s=5e-6) == pytest.approx(1.005e-3)


def test_hierarchical_reduces_to_flat_inside_one_node():
    kw = dict(message_bytes=1e9, num_ranks=8, link_bandwidth_bytes_per_s=2e11, link_latency_s=2e-6)
    h = hierarchical_allreduce_time_s(message_bytes=1e9, num_ranks=8, ranks_per_node=8, intra_bandwidth_bytes_per_s=2e11,
                                      intra_latency_s=2e-6, inter_bandwidth_bytes_per_s=2.5e10, inter_latency_s=5e-6)
    assert h == pytest.approx(allreduce_time_s(**kw), rel=1e-12)


def test_hierarchical_hand_calculation_two_nodes():
    # 16 ranks, 8 per node: 2 x RS over 8 on NVLink + AR of m/8 over 2 nodes on IB
    m, nv, ib = 8e9, 2e11, 2.5e10
    rs = 7 * 1e-6 + 7 / 8 * m / nv
    ar = 2 * 1 * 1e-5 + 2 * 1 / 2 * (m / 8) / ib
    h = hierarchical_allreduce_time_s(message_bytes=m, num_ranks=16, ranks_per_node=8, intra_bandwidth_bytes_per_s=nv,
                                      intra_latency_s=1e-6, inter_bandwidth_bytes_per_s=ib, inter_latency_s=1e-5)
    assert h == pytest.approx(2 * rs + ar, rel=1e-12)


def test_bad_inputs_raise():
    with pytest.raises(InputError):
        allreduce_time_s(message_bytes=1, num_ranks=0, link_bandwidth_bytes_per_s=1, link_latency_s=0)
    with pytest.raises(InputError):
        allreduce_time_s(message_bytes=1, num_ranks=2, link_bandwidth_bytes_per_s=0, link_latency_s=0)
    with pytest.raises(InputError):
        allreduce_time_s(message_bytes=1, num_ranks=2, link_bandwidth_bytes_per_s=1, link_latency_s=0, algorithm="mesh")


@settings(max_examples=60, deadline=None)
@given(m=st.floats(1.0, 1e11), n=st.integers(1, 4096), bw=st.floats(1e8, 1e12), a=st.floats(0.0, 1e-4),
       k=st.floats(1.0, 100.0), alg=st.sampled_from(["ring", "tree"]))
def test_time_never_rises_with_more_bandwidth(m, n, bw, a, k, alg):
    t1 = allreduce_time_s(message_bytes=m, num_ranks=n, link_bandwidth_bytes_per_s=bw, link_latency_s=a, algorithm=alg)
    t2 = allreduce_time_s(message_bytes=m, num_ranks=n, link_bandwidth_bytes_per_s=bw * k, link_latency_s=a, algorithm=alg)
    assert t2 <= t1 * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(m=st.floats(1.0, 1e11), n=st.integers(2, 4096), bw=st.floats(1e8, 1e12), k=st.floats(0.01, 100.0))
def test_bandwidth_bound_time_scales_as_one_over_k(m, n, bw, k):
    for fn in (allreduce_time_s, reduce_scatter_time_s):
        t1 = fn(message_bytes=m, num_ranks=n, link_bandwidth_bytes_per_s=bw, link_latency_s=0.0)
        tk = fn(message_bytes=m, num_ranks=n, link_bandwidth_bytes_per_s=bw * k, link_latency_s=0.0)
        assert tk == pytest.approx(t1 / k, rel=1e-9)
