"""MemoryX stream simulator: bounds, monotonicity, and vectorized == scalar loop."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.sim import simulate_stream
from wseplan.sim._errors import InputError


def scalar_reference(w, f, b, bw, lat, n, duplex):
    """Plain event loop for one configuration (independent re-implementation of the Notes)."""
    slots = [(w[i], f[i], 0.0) for i in range(len(w))] + [(w[i], b[i], w[i]) for i in reversed(range(len(w)))]
    S = len(slots)
    load_end = [None] * S
    link = 0.0
    events = []

    def load(j, req):
        nonlocal link
        if j < S:
            start = max(link, req)
            link = start + slots[j][0] / bw
            load_end[j] = link + lat

    for j in range(n + 1):
        load(j, 0.0)
    t = 0.0
    gfree = 0.0
    gend = 0.0
    for i, (_, c, g) in enumerate(slots):
        t = max(t, load_end[i]) + c
        load(i + n + 1, t)
        if i >= len(w):
            if duplex:
                gfree = max(gfree, t) + g / bw
            else:
                link = max(link, t) + g / bw
                gfree = link
            gend = gfree + lat
    return max(t, gend)


def test_by_hand_no_prefetch():
    # Two layers, 100 B each at 100 B/s (1 s per load), 0.5 s compute fwd, 1 s bwd, no overlap (N = 0):
    # fwd: load 1, compute .5, load 1, compute .5 -> 3; bwd (layer 1 first): load 1, compute 1, load 1,
    # compute 1 -> 7; the last gradient (100 B) leaves at 7 and ends at 8 (duplex).
    r = simulate_stream(layer_weight_bytes=[100, 100], fwd_compute_s=[0.5, 0.5], bwd_compute_s=[1.0, 1.0],
                        link_bandwidth_bytes_per_s=100.0, prefetch_layers=0)
    assert float(r.step_time_s) == pytest.approx(8.0, rel=1e-12)
    assert float(r.compute_time_s) == pytest.approx(3.0)
    assert str(r.bound) == "stream"


def test_compute_bound_hides_stream():
    r = simulate_stream(layer_weight_bytes=np.full(10, 1.0), fwd_compute_s=np.full(10, 1.0),
                        link_bandwidth_bytes_per_s=100.0, prefetch_layers=2)
    # Only the first load (0.01 s) and the last gradient (0.01 s) are exposed.
    assert float(r.step_time_s) == pytest.approx(30.0 + 0.02, rel=1e-12)
    assert str(r.bound) == "compute"


cfg = dict(
    n_layers=st.integers(1, 8), seed=st.integers(0, 2**31 - 1), bw=st.floats(1.0, 1e3),
    lat=st.floats(0.0, 0.5), n=st.integers(0, 4), duplex=st.booleans(),
)


def layers(n_layers, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(1, 100, n_layers), rng.uniform(0.01, 1, n_layers), rng.uniform(0.01, 2, n_layers)


@settings(max_examples=150, deadline=None)
@given(**cfg)
def test_bounds_and_fracs(n_layers, seed, bw, lat, n, duplex):
    w, f, b = layers(n_layers, seed)
    r = simulate_stream(layer_weight_bytes=w, fwd_compute_s=f, bwd_compute_s=b, link_bandwidth_bytes_per_s=bw,
                        link_latency_s=lat, prefetch_layers=n, duplex=duplex)
    total_load = 2 * w.sum() / bw
    assert r.step_time_s >= f.sum() + b.sum() - 1e-9
    assert r.step_time_s >= total_load + (0 if duplex else w.sum() / bw) - 1e-9
    assert r.step_time_s >= w[0] / bw + lat + f[0] - 1e-9
    assert 0.0 <= r.utilization_frac <= 1.0
    assert r.stall_time_s >= 0


@settings(max_examples=150, deadline=None)
@given(**cfg)
def test_vectorized_equals_scalar_loop(n_layers, seed, bw, lat, n, duplex):
    w, f, b = layers(n_layers, seed)
    bws = np.array([bw, 2 * bw, 0.5 * bw])[:, None]
    ns = np.array([0, n, n + 2])[None, :]
    r = simulate_stream(layer_weight_bytes=w, fwd_compute_s=f, bwd_compute_s=b, link_bandwidth_bytes_per_s=bws,
                        link_latency_s=lat, prefetch_layers=ns, duplex=duplex)
    assert r.step_time_s.shape == (3, 3)
    for i in range(3):
        for j in range(3):
            ref = scalar_reference(w, f, b, bws[i, 0], lat, int(ns[0, j]), duplex)
            assert r.step_time_s[i, j] == pytest.approx(ref, rel=1e-12, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(**cfg)
def test_more_bandwidth_or_prefetch_never_slower(n_layers, seed, bw, lat, n, duplex):
    w, f, b = layers(n_layers, seed)
    kw = dict(layer_weight_bytes=w, fwd_compute_s=f, bwd_compute_s=b, link_latency_s=lat, duplex=duplex)
    base = simulate_stream(link_bandwidth_bytes_per_s=bw, prefetch_layers=n, **kw).step_time_s
    assert simulate_stream(link_bandwidth_bytes_per_s=2 * bw, prefetch_layers=n, **kw).step_time_s <= base + 1e-9
    assert simulate_stream(link_bandwidth_bytes_per_s=bw, prefetch_layers=n + 1, **kw).step_time_s <= base + 1e-9


def test_batch_scaling_and_swarmx_sharing():
    w = np.full(24, 2e9)
    tok = np.array([1e3, 1e4, 1e5, 1e6])
    r = simulate_stream(layer_weight_bytes=w, fwd_flop_per_token=np.full(24, 2e9), tokens_per_step=tok,
                        compute_flop_per_s=1.5e16, link_bandwidth_bytes_per_s=150e9, prefetch_layers=1)
    assert np.all(np.diff(r.utilization_frac) >= -1e-12)
    shared = simulate_stream(layer_weight_bytes=w, fwd_compute_s=np.full(24, 1e-3),
                             link_bandwidth_bytes_per_s=150e9, num_systems=np.array([1, 4, 16]),
                             swarmx_bandwidth_bytes_per_s=600e9, prefetch_layers=1)
    assert shared.step_time_s[0] == pytest.approx(shared.step_time_s[1])
    assert shared.step_time_s[2] > shared.step_time_s[1]


def test_bad_inputs():
    with pytest.raises(InputError):
        simulate_stream(layer_weight_bytes=[1.0], fwd_compute_s=[1.0], link_bandwidth_bytes_per_s=0.0)
    with pytest.raises(InputError):
        simulate_stream(layer_weight_bytes=[1.0], fwd_compute_s=[1.0], link_bandwidth_bytes_per_s=1.0,
                        prefetch_layers=1.5)
    with pytest.raises(InputError):
        simulate_stream(layer_weight_bytes=[1.0], link_bandwidth_bytes_per_s=1.0)
