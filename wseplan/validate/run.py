"""Predict every row of a validation file and judge it (``wseplan validate CASES.csv``).

Every row is predicted (:func:`predict_case`) and the prediction converted to the row's own metric and unit;
``rel_error = predicted / measured - 1``. A row is skipped only when its metric is not a performance quantity (power
fractions, ratios to other hardware, goodput percentages) or when an input it needs is missing and no documented
default defines it; every skip carries its reason. A capacity row (:data:`~.cases.CAPACITY_METRICS`: the longest
generation a system holds) is predicted by the memory model, the fit (:func:`predict_capacity`).

Status of a row (the tolerance rule): ``within tolerance`` when ``|rel_error|`` is at most its category's band,
``outside tolerance`` when above, ``not predicted`` when skipped, ``no tolerance band`` when its category has no
band, ``physically inconsistent`` when the measurement is faster than its configuration's ideal run
(:mod:`.bounds`: every efficiency 1, no overhead); such a row is predicted but left out of the bands, the medians
and the fits. A category's band is the 80th percentile of ``|rel_error|`` over the strong and medium rows of that category in
the bundled validation set (:data:`TOLERANCE_PERCENTILE`; the same validated error that ``wseplan check`` allows a
claim): four in five published measurements fall inside it.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..calibration_data import calibration_path
from ..catalog.load import load_catalog
from ..errors import InputError
from ..fit import fit
from .bounds import bound_message, checkable, ideal_trial
from .cases import CAPACITY_METRICS, INCONSISTENT, NON_PERFORMANCE, NOT_PREDICTED, NO_BAND, OUTSIDE, TOLERANCE_PERCENTILE, \
    WITHIN, Case, \
    SkipRow, case_model, default_cases_path, read_cases, source_key
from .common import _target, wafer_profile_for
from .defaults import fill_defaults
from .gpu import _infer_layout, _predict_gpu_infer, _predict_gpu_kernel, _predict_gpu_train, gpu_engine_profile_for
from .wafer import _predict_wafer


def predict_case(case: Case, catalog, cal=None) -> float:
    """Predicted value of one row in its own unit, its empty inputs filled by the documented defaults
    (:func:`~.defaults.fill_defaults`); raises :class:`SkipRow` with the reason."""
    if case.metric in NON_PERFORMANCE:
        raise SkipRow(NON_PERFORMANCE[case.metric])
    case, _ = fill_defaults(case, catalog)
    if case.metric in CAPACITY_METRICS:
        return predict_capacity(case, catalog)
    if case.hardware.startswith("wse"):
        return _predict_wafer(case, catalog)
    if case.phase == "kernel":
        return _predict_gpu_kernel(case, catalog, cal)
    if case.phase == "train":
        return _predict_gpu_train(case, catalog, cal)
    return _predict_gpu_infer(case, catalog, cal)


_BOUNDS: dict = {}  # configuration -> its physical bound (a fit reads its rows many times; files repeat configurations)


def physical_bound(case: Case, catalog) -> float | None:
    """The row's metric at the ideal calibration (:func:`~.bounds.ideal_trial`: the largest speed or shortest time
    its configuration allows), or None where no bound is defined: :func:`~.bounds.checkable`, a row with an input
    filled by a documented default (the bound holds for the configuration the row states; a tensor-parallel degree
    read from the device count may not be the one the source ran) or a row that cannot be predicted."""
    if not checkable(case, catalog):
        return None
    key = (id(catalog), case.category, case.phase, case.model, case.metric, case.hardware, case.source, case.notes,
           tuple(sorted(case.fields.items())))
    if key not in _BOUNDS:
        try:
            bound = None if fill_defaults(case, catalog)[1] else float(predict_case(case, catalog, ideal_trial()))
        except (SkipRow, InputError, ArithmeticError, TypeError, ValueError):
            bound = None
        if len(_BOUNDS) > 100_000:
            _BOUNDS.clear()
        _BOUNDS[key] = bound
    return _BOUNDS[key]


def inconsistency(case: Case, catalog) -> str | None:
    """Why the row is physically inconsistent (measured beyond :func:`physical_bound`, :mod:`.bounds`), else None."""
    return bound_message(case, physical_bound(case, catalog))


def predict_capacity(case: Case, catalog) -> float:
    """A capacity row (``max_decode_output_tokens``): the tokens of KV cache one sequence can hold in decode beside
    the row's other sequences (``concurrency``, default 1) on the layout the fit chooses (a wafer: the resident
    weights' stages; GPUs: the row's tensor/pipeline degrees and its engine's KV-cache rule), i.e. ``max_tokens_in_flight`` of
    :func:`wseplan.fit.fit` per sequence [tokens]. The whole KV length counts (prompt and generated tokens)."""
    f = case.fields
    batch = int(f.get("concurrency") or f.get("global_batch") or 1)
    precision = f.get("precision") or ("fp16" if case.hardware.startswith("wse") else "bf16")
    model = case_model(case, catalog)
    if case.hardware.startswith("wse"):
        target, layout, software = _target(case, catalog, f.get("n_devices")), None, wafer_profile_for(case)
    else:
        tp, pp, dp = _infer_layout(case)
        target, layout = _target(case, catalog, tp * pp * dp), {"tp": tp, "pp": pp, "dp": dp}
        software = gpu_engine_profile_for(case)  # the engine's own KV-cache rule
    r = fit(model, target, precision=precision, phase="decode", batch=batch, context=int(f.get("input_len") or 1),
            layout=layout, software=software, catalog=catalog)
    if not r.fits or not r.max_tokens_in_flight:
        raise SkipRow("the model does not fit the row's system: no generation length")
    return r.max_tokens_in_flight / batch


def validate_cases(cases: list[Case], catalog, cal=None, bands: dict[str, float] | None = None) -> list[dict]:
    """One record per case: the OUTPUT_COLUMNS plus quality, source and ``defaulted`` (the inputs the row left empty
    that a documented default filled, see :mod:`.defaults`).

    ``bands`` (category -> tolerance fraction) judge each predicted row (see the module docstring); without
    them the bands come from these rows themselves (:func:`category_bands`), which for the bundled set is the
    reference.
    """
    out = []
    for c in cases:
        rec = {"id": c.id, "category": c.category, "metric": c.metric, "unit": c.unit, "measured": c.value,
               "predicted": None, "rel_error": None, "status": NOT_PREDICTED, "reason": "", "tolerance_frac": None,
               "quality": c.quality, "source": source_key(c), "defaulted": []}
        try:
            if c.metric not in NON_PERFORMANCE:
                rec["defaulted"] = list(fill_defaults(c, catalog)[1])
            v = float(predict_case(c, catalog, cal))
            if not math.isfinite(v) or v <= 0:
                raise SkipRow(f"prediction is not a positive number ({v})")
            rec.update(predicted=v, rel_error=v / c.value - 1.0 if c.value else None)
            why = inconsistency(c, catalog)
            if why:
                rec.update(status=INCONSISTENT, reason=why)
        except SkipRow as exc:
            rec["reason"] = str(exc)
        except InputError as exc:
            rec["reason"] = f"input: {exc}"
        except (ArithmeticError, TypeError, ValueError) as exc:  # one row the models cannot take: recorded, not fatal
            rec["reason"] = f"model error: {type(exc).__name__}: {exc}"
        out.append(rec)
    return judge(out, category_bands(out) if bands is None else bands)


def category_bands(records: list[dict]) -> dict[str, float]:
    """Per category, the :data:`TOLERANCE_PERCENTILE` th percentile of ``|rel_error|`` over its predicted strong
    and medium rows that needed no documented default (a defaulted row's error is partly the default's; categories
    without such rows have no band). Capacity rows (:data:`~.cases.CAPACITY_METRICS`) are judged by the band but do
    not set it: it is the time models' validated error, the one ``wseplan check`` allows a claim."""
    out = {}
    for cat_name in sorted({r["category"] for r in records}):
        errs = [abs(r["rel_error"]) for r in records if r["category"] == cat_name and r.get("rel_error") is not None
                and r.get("status") != INCONSISTENT
                and math.isfinite(r["rel_error"]) and r.get("quality") in ("strong", "medium") and not r.get("defaulted")
                and r.get("metric") not in CAPACITY_METRICS]
        if errs:
            out[cat_name] = float(np.percentile(errs, TOLERANCE_PERCENTILE))
    return out


def judge(records: list[dict], bands: dict[str, float]) -> list[dict]:
    """Set each record's ``status`` and ``tolerance_frac`` from the category ``bands`` (in place; returned)."""
    for r in records:
        if r.get("status") == INCONSISTENT:  # flagged: judged by no band
            r["tolerance_frac"] = None
            continue
        if r.get("predicted") is None or r.get("rel_error") is None or not math.isfinite(r["rel_error"]):
            r["status"] = NOT_PREDICTED
            continue
        band = bands.get(r["category"])
        r["tolerance_frac"] = band
        r["status"] = NO_BAND if band is None else (WITHIN if abs(r["rel_error"]) <= band * (1 + 1e-12) else OUTSIDE)
    return records


_BANDS: list = []  # the last (catalog, calibration files, bands): one process judging many files pays the set once


def _calibration_stamp() -> tuple:
    """Name, size and modification time of each calibration file (a refit in this process changes it)."""
    folder = calibration_path().parent
    return tuple((p.name, st.st_size, st.st_mtime_ns) for p in sorted(folder.glob("*.yaml")) for st in [p.stat()])


def reference_bands(catalog) -> dict[str, float]:
    """The tolerance bands of the bundled validation set (what ``wseplan validate`` judges any file by).

    They take a validation of the whole bundled set (seconds), so the last ones are kept: asked again with the same
    catalog object and unchanged calibration files, the same bands come back without re-predicting the set."""
    key = _calibration_stamp()
    if _BANDS and _BANDS[0] is catalog and _BANDS[1] == key:
        return dict(_BANDS[2])
    bands = category_bands(validate_cases(read_cases(default_cases_path()), catalog))
    _BANDS[:] = [catalog, key, bands]
    return dict(bands)


def summarize(records: list[dict]) -> list[dict]:
    """Median |rel_error| per category: strong+medium rows counted, weak reported separately."""
    rows = []
    cats = sorted({r["category"] for r in records})
    for cat in cats:
        rs = [r for r in records if r["category"] == cat]
        for label, qual in (("strong+medium", ("strong", "medium")), ("weak", ("weak",))):
            sel = [r for r in rs if r.get("quality") in qual and r.get("status") != INCONSISTENT]
            if not sel:
                continue
            ok = [abs(r["rel_error"]) for r in sel if r.get("status") != NOT_PREDICTED and r.get("rel_error") is not None
                  and math.isfinite(r["rel_error"])]  # a NaN would turn the median into NaN
            within = sum(r.get("status") == WITHIN for r in sel)
            rows.append({"category": cat, "quality": label, "rows": len(sel), "predicted": len(ok),
                         "predicted_frac": len(ok) / len(sel), "within_tolerance": within,
                         "tolerance_frac": next((r["tolerance_frac"] for r in sel if r.get("tolerance_frac") is not None), None),
                         "median_abs_rel_error": float(np.median(ok)) if ok else None,
                         "max_abs_rel_error": float(np.max(ok)) if ok else None})
    return rows


def validate_file(path: str | Path, catalog=None, cal=None, bands: dict[str, float] | None = None) -> list[dict]:
    """:func:`validate_cases` of the rows of ``path``, judged as ``wseplan validate`` judges them: the bundled set by
    its own bands, any other file by the bundled set's (:func:`reference_bands`) unless ``bands`` are given."""
    cat = catalog or load_catalog()
    if bands is None and Path(path).resolve() != default_cases_path().resolve():
        bands = reference_bands(cat)
    return validate_cases(read_cases(path), cat, cal, bands=bands)



def cross_validated_summary(records: list[dict]) -> list[dict]:
    """Per category, over its strong and medium rows: how many, how many predicted (coverage), and the median
    |rel_error| in-sample and held out (records carrying ``held_out_rel_error``, see
    :func:`wseplan.validate.intervals.held_out`)."""
    out = []
    for cat in sorted({r["category"] for r in records}):
        sel = [r for r in records if r["category"] == cat and r.get("quality") in ("strong", "medium")
               and r.get("status") != INCONSISTENT]
        if not sel:
            continue
        pred = [r for r in sel if r.get("rel_error") is not None and math.isfinite(r["rel_error"])]
        held = [r for r in pred if r.get("held_out_rel_error") is not None]
        out.append({"category": cat, "rows": len(sel), "predicted": len(pred), "coverage_frac": len(pred) / len(sel),
                    "median_abs_rel_error_in_sample": float(np.median([abs(r["rel_error"]) for r in pred])) if pred
                    else None,
                    "median_abs_rel_error_held_out": float(np.median([abs(r["held_out_rel_error"]) for r in held]))
                    if held else None,
                    "defaulted": sum(bool(r.get("defaulted")) for r in pred)})
    return out
