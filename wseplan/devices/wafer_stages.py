"""The fewest wafers of a replica for many configuration rows (the wafer family's candidates), with the greedy
packing skipped where a cheap bound already settles the answer.

:meth:`WaferFamily.candidates <wseplan.devices.wafer.WaferFamily.candidates>` takes, with a device count ``N``, every
replica size from ``min(fewest, N)`` to ``N``; the fewest (:func:`~wseplan.analytic.partition_rows.greedy_stage_counts`:
a pass over every item on rows x items arrays) matters there only up to ``N``. A row whose items and one stage
constant exceed ``N - 1`` wafers' capacity needs ``N`` or more stages (every greedy stage holds at most the
capacity, constant included: ``s`` stages hold at most ``s`` capacities), and more than one wafer: its answer is
``N`` whatever the packing gives. The totals come from the setup's prefix tables (another summation order than the
packing's running sums, so the bound keeps a relative margin of 1e-9, far above their rounding); the other rows are
packed as before, so every row's count is the one the packing gives, or a count at least ``N`` where only
``min(count, N)`` is used.
"""
from __future__ import annotations

import numpy as np

from ..analytic import wse_time as wt
from ..analytic.partition_rows import greedy_stage_counts
from ..workload import kv_bytes_rows

#: relative margin of the bound over the packing's rounding
MARGIN = 1e-9
#: fewest rows for which the bound pays (a question's few rows are packed: no prefix tables to build)
MIN_ROWS = 64


def fewest_stages(ctx, B, kv, a, search) -> np.ndarray:
    """Per row the greedy packing's stage count, or ``ctx.count`` where the bound proves the count at least that
    (rows not ``search``-ed: 1, unused). ``B`` sequences of ``kv`` KV tokens, ``a`` bytes every stage holds."""
    B, kv, a = (np.asarray(v, dtype=float) for v in (B, kv, a))
    n = len(B)
    N = ctx.count
    out = np.ones(n, dtype=np.int64)
    todo = np.asarray(search, dtype=bool).copy()
    if N is not None and n >= MIN_ROWS and todo.any():
        ends = np.full(n, ctx.n_items)
        w1, kv_at, _ = ctx.prefix_bytes(B, kv, np.ones(n, dtype=bool))
        w0, _, _ = ctx.prefix_bytes(B, kv, np.zeros(n, dtype=bool))
        kv_total = kv_at(ends)
        over = (w1(ends) + kv_total + a > (N - 1) * ctx.cap * (1.0 + MARGIN)) & \
            (w0(ends) + kv_total + a > ctx.cap * (1.0 + MARGIN))
        out[todo & over] = N
        todo &= ~over
    rows = np.nonzero(todo)[0]
    if len(rows):
        m = len(rows)
        kvr = kv_bytes_rows(ctx.w, B[rows], kv[rows])  # the items' KV bytes, once for both weight variants
        out[rows] = greedy_stage_counts(ctx.weights(m, np.ones(m, dtype=bool)) + kvr,
                                        ctx.weights(m, np.zeros(m, dtype=bool)) + kvr, a[rows], ctx.cap)
    return out


def draft_fits(fam, ctx, cfg, rows, dctx, dcfg):
    """Whether the draft model fits in the SRAM the target leaves free on the replica's wafers (``rows`` of ``cfg``,
    the target's layout; ``dcfg`` the draft's, laid out on wafers of its own): its bytes within the free bytes of
    all the wafers, and its largest layer (weights and KV cache; layers are placed whole, an MoE layer's experts on
    one wafer) within the free bytes of one wafer. DeepSeek-V3's MTP block in bf16 (23 GB) fits no wafer of its
    58-wafer layout (at most 18 GB free on one) though the wafers' free bytes add up to far more (audit37a F4)."""
    valid = np.asarray(cfg["_valid"][rows], dtype=bool)
    free_w = np.where(valid, ctx.cap - cfg["_sb"][rows], 0.0)
    need = np.sum(dcfg["_sb"][rows], axis=-1)
    B, C, O = (np.asarray(dcfg[k][rows], dtype=float) for k in ("batch", "context", "output_tokens"))
    kv, _ = fam.kv_and_working_tokens(dctx, B, C, O)
    unit = wt.largest_layer_bytes_array(dctx.m, precision=dctx.q.precision, batch=B, context=kv)
    ok = (need <= np.sum(free_w, axis=-1)) & (unit <= np.max(free_w, axis=-1))
    return bool(ok) if np.ndim(ok) == 0 else ok
