"""Validation of large files, streamed: ``wseplan validate FILE`` over any number of rows in bounded memory.

Rows are read one at a time (:func:`wseplan.validate.iter_cases`), predicted, judged against fixed tolerance
bands and handed on one by one (:func:`iter_records`); the per-category summary is accumulated as they pass
(:class:`Summary`, equal to :func:`wseplan.validate.summarize` over the same records).

Memoised predictions
    A prediction is a deterministic function of the row's cells other than ``id`` and the measured ``value``
    (category, phase, model, metric, unit, hardware, quality, source, notes and every other column) and of the
    catalog, which is fixed for a run. :class:`PredictionMemo` therefore keys each row on exactly those cells (a
    tuple, compared whole: no digest, no collision), and a row whose inputs repeat an earlier row's reuses that
    row's prediction (or its reason for not predicting); only its relative error (predicted / measured - 1) and
    status are computed anew.
    The id and the value never enter the key, so they never change a prediction. The memo holds at most
    :data:`MAX_MEMO` entries (then it starts afresh): a file of distinct rows costs one prediction per row, as
    without it.

Memory
    Constant per row, except 8 bytes per predicted row kept for the exact median of the summary, the set of ids
    :func:`~wseplan.validate.iter_cases` keeps to refuse duplicates, and the memo (at most :data:`MAX_MEMO`
    records and the iterator's at most 4,096 parsed rows).
"""
from __future__ import annotations

import math
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from .validate import INCONSISTENT, NOT_PREDICTED, WITHIN, Case, inconsistency, iter_cases, judge, validate_cases

MAX_MEMO = 16_384
"""Most distinct prediction inputs remembered (each a key of the row's cells and one record)."""

_NOT_INPUTS = frozenset(("id", "value"))


def prediction_key(case: Case) -> tuple:
    """Every cell that enters the prediction of ``case`` (all but ``id`` and ``value``), as a hashable tuple."""
    return (case.category, case.phase, case.model, case.metric, case.unit, case.hardware, case.quality, case.source,
            case.notes, tuple((k, v) for k, v in case.fields.items() if k not in _NOT_INPUTS))


class PredictionMemo:
    """Records of rows, with predictions memoised on :func:`prediction_key` (see the module docstring)."""

    def __init__(self, catalog, bands: dict[str, float], cal=None, max_entries: int = MAX_MEMO):
        self.catalog, self.bands, self.cal, self.max_entries = catalog, bands, cal, max_entries
        self.memo: dict[tuple, dict] = {}
        self.hits = self.misses = 0

    def record(self, case: Case) -> dict:
        """The judged record of ``case`` (as :func:`wseplan.validate.validate_cases` with these bands)."""
        key = prediction_key(case)
        t = self.memo.get(key)
        if t is None:
            self.misses += 1
            rec = validate_cases([case], self.catalog, self.cal, bands=self.bands)[0]
            if len(self.memo) >= self.max_entries:
                self.memo.clear()
            self.memo[key] = dict(rec)
            return rec
        self.hits += 1
        rec = dict(t)
        rec["id"], rec["measured"] = case.id, case.value
        v = t["predicted"]
        if v is not None:
            rec["rel_error"] = v / case.value - 1.0 if case.value else None
            why = inconsistency(case, self.catalog)  # the bound is the configuration's; the value is this row's
            rec["status"], rec["reason"] = (INCONSISTENT, why) if why else (None, "")
        return judge([rec], self.bands)[0]


def iter_records(path, catalog, bands: dict[str, float], cal=None, *,
                 progress: Callable[[int], None] | None = None, memo: PredictionMemo | None = None) -> Iterator[dict]:
    """The judged record of each row of ``path`` in file order, one at a time; ``progress(rows)`` is called
    after every row."""
    m = memo or PredictionMemo(catalog, bands, cal)
    n = 0
    for case in iter_cases(path):
        rec = m.record(case)
        n += 1
        if progress is not None:
            progress(n)
        yield rec


class Summary:
    """:func:`wseplan.validate.summarize` accumulated one record at a time."""

    _LABELS = {"strong": "strong+medium", "medium": "strong+medium", "weak": "weak"}

    def __init__(self):
        self.groups: dict[str, dict[str, list]] = {}

    def add(self, r: dict) -> None:
        label = self._LABELS.get(r.get("quality"))
        if label is None or r.get("status") == INCONSISTENT:  # flagged rows are not counted (as summarize)
            return
        g = self.groups.setdefault(r["category"], {}).get(label)
        if g is None:
            g = self.groups[r["category"]][label] = [0, array("d"), 0, None]  # rows, |rel_error|, within, band
        g[0] += 1
        rel = r.get("rel_error")
        if r.get("status") != NOT_PREDICTED and rel is not None and math.isfinite(rel):
            g[1].append(abs(rel))
        g[2] += r.get("status") == WITHIN
        if g[3] is None and r.get("tolerance_frac") is not None:
            g[3] = r["tolerance_frac"]

    def extend(self, records: Iterable[dict]) -> None:
        for r in records:
            self.add(r)

    def rows(self) -> list[dict]:
        out = []
        for cat in sorted(self.groups):
            for label in ("strong+medium", "weak"):
                g = self.groups[cat].get(label)
                if g is None:
                    continue
                ok = np.frombuffer(g[1], dtype=np.float64) if len(g[1]) else None
                out.append({"category": cat, "quality": label, "rows": g[0], "predicted": len(g[1]),
                            "predicted_frac": len(g[1]) / g[0], "within_tolerance": g[2], "tolerance_frac": g[3],
                            "median_abs_rel_error": float(np.median(ok)) if ok is not None else None,
                            "max_abs_rel_error": float(np.max(ok)) if ok is not None else None})
        return out


class Progress:
    """A one-line progress report (rows, seconds, rows/s) rewritten in place on ``stream`` at most every
    ``every_s`` seconds, only when ``stream`` is a terminal; :meth:`done` ends the line."""

    def __init__(self, what: str, stream=None, every_s: float = 0.5):
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.on = bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            self.on = False
        self.what, self.every_s = what, every_s
        self.t0 = self.last = time.monotonic()
        self.shown = False

    def __call__(self, n: int) -> None:
        if not self.on or n & 1023:
            return
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self._write(n, now)

    def _write(self, n: int, now: float) -> None:
        dt = now - self.t0
        try:
            self.stream.write(f"\r{self.what}: {n:,} rows, {dt:,.1f} s ({n / dt if dt > 0 else 0:,.0f} rows/s)\x1b[K")
            self.stream.flush()
            self.shown = True
        except (OSError, ValueError):
            self.on = False

    def done(self, n: int) -> None:
        if self.on and self.shown:
            self._write(n, time.monotonic())
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass
