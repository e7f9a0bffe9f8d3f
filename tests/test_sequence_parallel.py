"""Sequence parallelism in the training step: without it a block's norms, dropouts and residual adds run whole on every
tensor-parallel GPU (Korthikanti et al. 2022). The rule that gives a validation row its framework's choice is tested
with the other framework rules in tests/test_attention_kernel.py."""
import pytest

from wseplan.analytic import gpu_time as G
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog.load import load_catalog
from wseplan.workload import resolve_model


def test_replicated_share_hand_calculation():
    cat = load_catalog()
    m = resolve_model("gpt-3-175b", cat)
    cal = gpu_calibration()
    # Korthikanti et al. 2022, eq. 2: a layer stores sbh(10 + 24/t) bytes without sequence parallelism, 34 sbh / t
    # with it: 10 of the 34 are the norms' and dropouts' tensors on the whole hidden state
    assert G.REPLICATED_ELEMENTWISE_SHARE == pytest.approx(10 / 34, rel=1e-15)
    tokens, tp, hbm = 2048.0, 8.0, 1e12
    total = cal.elementwise_vectors_per_token * 2.0 * m.d_model * tokens / hbm
    sp = float(G._elementwise_s(m, tokens, tp, hbm, cal, True))
    nosp = float(G._elementwise_s(m, tokens, tp, hbm, cal, False))
    assert sp == pytest.approx(total / 8.0, rel=1e-12)
    assert nosp == pytest.approx(total * (24 / 34 / 8.0 + 10 / 34), rel=1e-12)
    # one GPU: nothing to split, the same time either way
    assert float(G._elementwise_s(m, tokens, 1.0, hbm, cal, False)) == pytest.approx(total, rel=1e-12)


def test_without_sequence_parallelism_the_forward_passes_pay_the_replicated_operators():
    cat = load_catalog()
    m, g = resolve_model("gpt-3-175b", cat), cat.gpus["a100-80gb"]
    cal = gpu_calibration()
    hbm = g.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac
    kw = dict(precision="bf16", seq_len=2048, global_batch=1536, tp=8, pp=8, dp=24, micro_batch=1, cal=cal,
              single_layer=True)
    for recompute, fwd_passes in (("none", 1), ("full", 2)):
        on = G.train_step(m, g, sequence_parallel=True, recompute=recompute, **kw)
        off = G.train_step(m, g, sequence_parallel=False, recompute=recompute, **kw)
        extra = float(G._elementwise_s(m, 2048.0, 8.0, hbm, cal, False) - G._elementwise_s(m, 2048.0, 8.0, hbm, cal, True))
        # the forward (and a recomputed forward) carry it; the backward is counted split (Korthikanti et al. 2022,
        # Table 4: sequence parallelism saves 0.5 ms of the forward, 0.1 ms of the backward)
        assert float(off["compute_s"]) - float(on["compute_s"]) == pytest.approx(fwd_passes * extra, rel=1e-9)
