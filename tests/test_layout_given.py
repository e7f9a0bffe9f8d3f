"""Layouts a user gives: tensor parallelism must divide the attention heads (every framework splits heads over TP
ranks), and a context-parallel run's completed layout uses the target's GPUs once."""
import pytest

from wseplan.errors import InputError
from wseplan.plan import plan


def test_tp_that_does_not_divide_the_heads_is_refused():
    # Llama-3-8B has 32 query heads: tp 64 would give half a head per GPU
    with pytest.raises(InputError, match="tp: 64 does not divide .*32 attention heads"):
        plan("llama-3-8b", "h100x64", phase="train", layout={"tp": 64, "pp": 1, "dp": 1})
    r = plan("llama-3-8b", "h100x64", phase="train", layout={"tp": 8, "pp": 1, "dp": 8})
    assert r.fits and r.layout["tensor_parallel"] == 8


def test_completed_layout_counts_context_parallel_once():
    # 64 GPUs, cp 2, tp 8 and pp 1 given: dp = 64 / (8 x 1 x 2) = 4 (it was 64 / 8 = 8, then refused as 128 GPUs)
    r = plan("llama-3-8b", "h100x64", phase="train", layout={"tp": 8, "pp": 1}, options={"context_parallel": 2})
    assert r.layout["data_parallel"] == 4 and r.num_devices == 64
