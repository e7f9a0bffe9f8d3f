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

from ..catalog.software import calibrated_name
from ..claims import validated_errors
from ..model_error import architecture_class, speed_bounds
from ..plan import setup
from ..workload import total_params
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


def envelope_of(model, target: str, *, phase: str, precision: str, software: str | None, catalog,
                devices: int | None) -> dict:
    """The envelope arguments of :func:`wseplan.model_error.speed_bounds` for a question the report answers without a
    plan record's interval (a serving point at a given rate): the model's size, one engine's ``devices``, the target's
    hardware, the calibrated software profile and the number format, as ``wseplan time`` asks (review33 M4)."""
    s = setup(model, target, phase=phase, precision=precision, software=software, catalog=catalog)
    m = s.query.model
    return dict(params_b=total_params(m) / 1e9 if hasattr(m, "num_layers") else None, devices=devices,
                hardware=s.query.target.key, software=calibrated_name(s.query.software), precision=precision,
                architecture=architecture_class(m))


def interval_text(what: str, value: float | None, record: dict | None, *, device_kind: str, cat, kind: str = "infer",
                  inverse: bool = True, unit: str = "", prefix: str = "", source: str = "",
                  envelope: dict | None = None) -> str:
    """The prediction interval on a headline ``value`` (e.g. $/M tokens of the chosen point).

    A record with ``interval_low``/``interval_high`` gives its own: on ``value`` itself, or, for a serving point whose
    interval is on its ``tokens_per_s`` (``interval_metric`` absent or ``tokens_per_s``) and a cost per token
    (``inverse``), the cost at the interval's ends (cost x tokens/s / each end: a faster truth is cheaper).
    Otherwise the time model's cross-validated speed bounds of the category (:func:`wseplan.model_error.speed_bounds`,
    true / predicted speed in ``[lo, hi]``, asymmetric; widened outside the validated envelope where ``envelope``
    gives the question's, :func:`envelope_of`) apply: a cost per token lies between ``value / hi`` and
    ``value / lo``, a speed between ``value lo`` and ``value hi`` (audit33d H1: a one-sided error applied as +-e gave
    a wafer headline a zero-width interval). Values are written ``{prefix}{value}{unit}`` (``$0.645/M output
    tokens``); ``source`` says where a record's interval comes from.
    """

    def q(v: float) -> str:
        return f"{prefix}{fmt_num(v)}{unit}" if math.isfinite(v) else "unbounded"

    if value is None or not math.isfinite(value):
        return f"{what}: no value to bound."
    rec = record or {}
    lo, hi = rec.get("interval_low"), rec.get("interval_high")
    tps = rec.get("tokens_per_s")
    if lo is not None and hi is not None and inverse and rec.get("interval_metric", "tokens_per_s") == "tokens_per_s" \
            and tps and lo > 0:
        return (f"{what} {q(value)}: the model's prediction interval on the point's throughput "
                f"({fmt_num(lo)} to {fmt_num(hi)} tokens/s against {fmt_num(tps)} predicted; "
                f"{rec.get('interval_note') or 'held-out errors'}) puts it between {q(value * tps / hi)} and "
                f"{q(value * tps / lo)}{f' ({source})' if source else ''}.")
    if lo is not None and hi is not None:
        return f"{what} {q(value)}: the model's prediction interval is {q(lo)} to {q(hi)}{f' ({source})' if source else ''}."
    b = speed_bounds(f"{'wse' if device_kind == 'wafer' else 'gpu'}-{kind}", **(envelope or {}))
    if b is None:
        return (f"{what} {q(value)}: the records carry no prediction interval and no "
                f"{device_kind} {kind} predictions are validated; treat it as unbounded by measurement.")
    s_lo, s_hi, note = b
    low, high = (value / s_hi, value / s_lo) if inverse else (value * s_lo, value * s_hi)
    return (f"{what} {q(value)}: no interval is attached to the records, so the time model's held-out error applies "
            f"(the true speed {fmt_num(s_lo)}x to {fmt_num(s_hi)}x the predicted; {note}): between {q(low)} and "
            f"{q(high)}.")


def render(findings: list[tuple[str, str]]) -> list[str]:
    """Markdown bullets ``**label.** text`` (labels repeated for several findings of one kind are kept)."""
    return [f"**{label}.** {text}" for label, text in findings if text]
