"""Activation memory of a pipeline rank under 1F1B (plain and interleaved): the micro-batches it holds, capped by
the step's (hand counts from Megatron-LM's schedule: warm-up forwards before the first backward)."""
import numpy as np
import pytest

from wseplan.analytic.memory import micro_batches_in_flight
from wseplan.plan import plan


@pytest.mark.parametrize("p, v, m, rank, held", [
    (16, 1, 32, 0, 16),                     # plain 1F1B: p - rank warm-up + 1
    (16, 1, 32, 1, 15),
    (16, 4, 32, 0, (2 * 15 + 3 * 16 + 1) / 4),  # interleaved: 2 (p - r - 1) + (v - 1) p + 1 chunks of 1/v stage
    (16, 4, 32, 1, (2 * 14 + 3 * 16 + 1) / 4),
    (16, 4, 16, 0, 16),                     # the warm-up stops at the step's 16 micro-batches
    (16, 8, 16, 1, 16),
    (4, 2, 3, 0, 3),
    (1, 1, 64, 0, 1),                       # no pipeline: one micro-batch at a time (gradient accumulation)
])
def test_micro_batches_in_flight(p, v, m, rank, held):
    assert micro_batches_in_flight(num_stages=p, virtual_stages=v, micro_batches=m, rank=rank) == pytest.approx(held)


def test_rank_zero_matches_the_interleaved_factor():
    """Uncapped, the first rank holds p (1 + (p - 1) / (p v)) micro-batches: Korthikanti et al. 2023, sec. 4.2.3."""
    p, v = np.array([4.0, 8.0, 16.0]), np.array([2.0, 3.0, 8.0])
    got = micro_batches_in_flight(num_stages=p, virtual_stages=v, micro_batches=1e9, rank=0)
    assert np.allclose(got, p * (1.0 + (p - 1.0) / (p * v)))


def test_llama3_405b_interleaves_at_sixteen_micro_batches_without_checkpointing():
    """Meta trained Llama 3 405B on 16,384 H100 at tp 8, pp 16, dp 128 (16 micro-batches per replica) with an
    interleaved schedule and without activation checkpointing (Llama Team 2024, arXiv:2407.21783, sec. 3.3.2 and
    Table 4; its FSDP shards gradients and optimizer state: ZeRO-2). With m = p the interleaved warm-up runs out of micro-batches, so interleaving holds no more than the
    plain schedule's 16 on the first stage; the layout fits (it was refused at 90.9 GB for vpp 4)."""
    lay = {"tp": 8, "pp": 16, "dp": 128, "micro_batch": 1, "recompute": "selective", "zero_stage": 2}
    kw = dict(phase="train", batch=2048, context=8192)
    r4 = plan("llama-3.1-405b", "h100x16384", layout={**lay, "vpp": 4}, **kw)
    r1 = plan("llama-3.1-405b", "h100x16384", layout={**lay, "vpp": 1}, **kw)
    assert r4.fits and r1.fits
    # the middle rank binds: 8 blocks x min(16 + 13/4, 16) = 128 block-micro-batches against 8 x 15 = 120 plain
    assert r4.activation_bytes / r1.activation_bytes == pytest.approx(128 / 120, rel=1e-6)
    assert r4.step_s < r1.step_s  # the bubble shrinks from 15 to 15/4 micro-batch times
