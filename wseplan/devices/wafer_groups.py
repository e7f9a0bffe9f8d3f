"""The layer-group bookkeeping of a many-row wafer pass, per configuration row instead of per pass row.

:meth:`WaferFamily.pass_time <wseplan.devices.wafer.WaferFamily.pass_time>` lays each pass row's layers out over the
replica's wafers (rows x wafers arrays: the layer groups of each wafer on the pass's region, the blocks of its first
and last group) and takes the slowest group. Those arrays depend on the configuration row and the pass kind's region
alone, while a sweep's decode rounds ask for several passes of every row (one per micro-batch candidate, with and
without prompt chunks, the verification round): :func:`slowest_group` builds them once per configuration row and
pass kind (:func:`_table`, kept per setup while the row columns are the same objects) and reduces each pass to a
few gathers.

The slowest group is the same number, bit for bit: a wafer's group time is ``(q x block + c) / clock + d`` with
``q`` its blocks and ``c``, ``d`` the same for every wafer of its kind (the last wafer: ``c`` the LM head; the
others: ``d`` the link to the next wafer; a wafer's first group: ``c = 0``, ``d`` the hand-over), and a rounded
product, sum or quotient never decreases when an operand grows (IEEE-754 rounding is monotone), so with a finite
non-negative block time the largest ``q`` of a kind gives that kind's largest time. Otherwise (a NaN or infinite
block, whose product with 0 blocks is NaN) the pass keeps the per-wafer form.
"""
from __future__ import annotations

import weakref

import numpy as np

#: fewest pass rows for which the table pays (a question's few rows keep the per-wafer form)
MIN_ROWS = 256
#: tables kept per setup (each only while its configuration columns live: a sweep task's go with it)
TABLES_MAX = 4


def _table(fam, ctx, cfg, sides: tuple):
    """Per configuration row, for the regions of each pass kind of ``sides`` (``"d"``, ``"p"``), the columns
    ``(layer groups on the replica, blocks on the replica, q of the last wafer, q of the other wafers (max), q + 1 of
    a first group with a remainder (max))``, -1 where a wafer of that kind is not there: (5, sides x rows), the
    second kind's rows after the first's."""
    arrays = (cfg["_nl"], cfg["_valid"], cfg["_nw"], cfg["_sb"]) + tuple(cfg[f"_{k}_{s}"] for s in sides for k in ("rows", "cols"))
    kept = ctx.__dict__.setdefault("_group_tables", [])
    for t in list(kept):
        kind, refs, table = t if len(t) == 3 else (None, (), None)
        if kind == sides and all(r() is a for r, a in zip(refs, arrays)):
            return table
    nl, valid, nw = cfg["_nl"], cfg["_valid"], cfg["_nw"]
    last = np.arange(nl.shape[1])[None, :] == (nw - 1)[:, None]
    blocks = nl.sum(axis=1)
    parts = []
    for s in sides:
        G = fam._groups(ctx, cfg, cfg[f"_rows_{s}"], cfg[f"_cols_{s}"])
        gs = np.maximum(G, 1.0)
        q = np.floor_divide(nl, gs)  # as pass_time computes them
        r = nl - q * gs
        qf = q + (r > 0)
        parts.append(np.stack([G.sum(axis=1), blocks, np.where(valid & last, q, -1.0).max(axis=1),
                               np.where(valid & ~last, q, -1.0).max(axis=1), np.where(valid & (G > 1), qf, -1.0).max(axis=1)]))
    table = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
    entry: list = []

    def drop(_, kept=kept, entry=entry):  # a column of the rows is gone: so is their table
        for i, e in enumerate(kept):
            if e is entry:
                del kept[i]
                break
        entry.clear()

    entry += [sides, tuple(weakref.ref(a, drop) for a in arrays), table]
    if len(kept) >= TABLES_MAX:
        kept.pop(0).clear()
    kept.append(entry)
    return table


def slowest_group(fam, ctx, cfg, rows, has_d, bt, ht, hp, xx):
    """``(slowest group's time [s], layer groups, blocks on the replica)`` of each pass row (rows of ``cfg`` at ``rows``; a
    pass with decode sequences ``has_d`` on the decode regions, else on the prefill regions, as ``pass_time`` picks
    them) with block, LM-head and hand-over cycles ``bt``, ``ht``, ``hp`` and link seconds ``xx`` per pass row; None
    where the per-wafer form must answer (few rows, or a block time that is not finite and non-negative)."""
    n = len(rows)
    if n < MIN_ROWS or 2 * n < len(cfg["_nw"]) or not bool(np.all((bt >= 0.0) & (bt < np.inf))):
        return None
    sides = ("p",) if "_rows_d" not in cfg else (("d", "p") if "_rows_p" in cfg else ("d",))
    table = _table(fam, ctx, cfg, sides)
    at = rows if len(sides) == 1 else np.where(has_d, rows, rows + len(cfg["_nw"]))
    sumG, L, q_last, q_link, q_first = np.take(table, at, axis=1)
    clock = ctx.clock
    neg = -np.inf
    t_last = np.where(q_last >= 0, (np.maximum(q_last, 0.0) * bt + ht) / clock + 0.0, neg)
    t_link = np.where(q_link >= 0, (np.maximum(q_link, 0.0) * bt + 0.0) / clock + xx, neg)
    t_first = np.where(q_first >= 0, (np.maximum(q_first, 0.0) * bt) / clock + hp / clock, neg)
    return np.maximum(np.maximum(t_last, t_link), t_first), sumG, L
