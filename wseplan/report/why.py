"""The "Why this answer" section of a study report (issue 13, item 5): what binds, what would flip the ranking
and at what value, how far the headline can be trusted, and where a computed cost disagrees with a vendor's list
price.

The study kinds compute their own findings with wseplan's chain (the serving study re-judges
:func:`wseplan.serving.serve` results at other per-user speeds with :func:`wseplan.serving.with_limits` and
re-prices them at other capex; the training study re-evaluates the cost model on the same time inputs); this
module holds the shared pieces: a bisection and the prediction interval (from the records' ``interval_low`` /
``interval_high`` where a record carries them, else the time model's held-out error band). List prices are
flagged by :func:`wseplan.costing.list_price_flags` (one implementation for ``cost``, ``compare`` and reports). A finding is a ``(label, text)`` pair; :func:`render` turns them into Markdown bullets.
"""
from __future__ import annotations

import math

from ..claims import validated_errors
from .markdown import fmt_num

#: the validated error bands of the bundled validation set, per catalog object (computed once: ~1 s)
_BANDS: dict[int, tuple[object, dict]] = {}


def bisect(f, lo: float, hi: float, *, rel_tol: float = 1e-6, iters: int = 200) -> float:
    """The ``x`` in ``[lo, hi]`` where the monotone ``f`` changes sign (``f(lo)`` and ``f(hi)`` of opposite sign),
    to ``rel_tol`` of ``hi``; the midpoint of the last bracket."""
    flo = f(lo)
    for _ in range(iters):
        if hi - lo <= rel_tol * max(abs(hi), 1e-300):
            break
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0) and fm != 0:
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def validated_band(cat, device_kind: str, kind: str = "infer") -> tuple[float, str] | None:
    """(error band, where it comes from) of the time model's ``gpu-infer`` / ``wse-infer`` / ``gpu-train`` /
    ``wse-train`` predictions (:func:`wseplan.claims.validated_errors`: held out from the bundled validation set),
    or None where none are validated."""
    hit = _BANDS.get(id(cat))
    if hit is None or hit[0] is not cat:
        hit = (cat, validated_errors(cat))
        _BANDS[id(cat)] = hit
    return hit[1].get(f"{'wse' if device_kind == 'wafer' else 'gpu'}-{kind}")


def interval_text(what: str, value: float | None, record: dict | None, *, device_kind: str, cat, kind: str = "infer",
                  inverse: bool = True, unit: str = "", prefix: str = "", source: str = "") -> str:
    """The prediction interval on a headline ``value`` (e.g. $/M tokens of the chosen point).

    A record with ``interval_low``/``interval_high`` gives its own; otherwise the time model's validated error
    ``e`` is applied to the throughput: a cost per token (``inverse``) then lies between ``value / (1 + e)`` and
    ``value / (1 - e)``, a speed or a time between ``value (1 - e)`` and ``value (1 + e)``. Values are written
    ``{prefix}{value}{unit}`` (``$0.645/M output tokens``); ``source`` says where a record's interval comes from.
    """

    def q(v: float) -> str:
        return f"{prefix}{fmt_num(v)}{unit}" if math.isfinite(v) else "unbounded"

    if value is None or not math.isfinite(value):
        return f"{what}: no value to bound."
    rec = record or {}
    lo, hi = rec.get("interval_low"), rec.get("interval_high")
    if lo is not None and hi is not None:
        return f"{what} {q(value)}: the model's prediction interval is {q(lo)} to {q(hi)}{f' ({source})' if source else ''}."
    band = validated_band(cat, device_kind, kind)
    if band is None:
        return (f"{what} {q(value)}: the records carry no prediction interval and no "
                f"{device_kind} {kind} predictions are validated; treat it as unbounded by measurement.")
    e, src = band
    if inverse:
        low, high = value / (1 + e), (value / (1 - e) if e < 1 else math.inf)
    else:
        low, high = value * max(0.0, 1 - e), value * (1 + e)
    return (f"{what} {q(value)}: no interval is attached to the records, so the time model's held-out error is "
            f"applied: +-{fmt_num(100 * e)}% on throughput ({src}) puts it between {q(low)} and {q(high)}.")


def render(findings: list[tuple[str, str]]) -> list[str]:
    """Markdown bullets ``**label.** text`` (labels repeated for several findings of one kind are kept)."""
    return [f"**{label}.** {text}" for label, text in findings if text]
