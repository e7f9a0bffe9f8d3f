"""Sequence parallelism in the training step: without it a block's norms, dropouts and residual adds run whole on every
tensor-parallel GPU (Korthikanti et al. 2022), and the rule that gives a validation row its framework's choice."""
from pathlib import Path

import pytest

from wseplan.analytic import gpu_time as G
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog.load import load_catalog
from wseplan.validate.cases import Case, read_cases
from wseplan.validate.common import sequence_parallel_of
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


def _case(source, notes=""):
    return Case(id="R1", category="gpu-train", phase="train", model="m", metric="step_s", value=1.0, unit="s",
                hardware="a100-80gb", quality="strong", source=source, notes=notes, fields={})


@pytest.mark.parametrize("source, notes, sp", [
    ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training'", "", False),
    ("Chowdhery et al. 2022, 'PaLM'", "", False),
    ("MLCommons training_results_v5.0 (NVIDIA/results/eos)", "", True),
    ("Llama Team, 'The Llama 3 Herd of Models' (arXiv:2407.21783)", "", True),
    ("Korthikanti et al. 2022 (arXiv:2205.05198), Table 4", "x; sequence_parallel=yes: the row", True),
    ("MLCommons training_results_v5.0", "sequence_parallel=no", False),
])
def test_row_sequence_parallel_rule(source, notes, sp):
    assert sequence_parallel_of(_case(source, notes)) is sp


def test_korthikanti_table4_rows_state_their_sequence_parallelism():
    rows = {c.id: c for c in read_cases(Path(__file__).parents[1] / "catalogs/validation/validation-public.csv")}
    assert [sequence_parallel_of(rows[i]) for i in ("R047", "R048", "R049", "R050", "R051")] == \
        [False, True, False, False, True]
