"""Held-out predictions of every validation row, and the model-error file built from them.

:func:`held_out` predicts each row of a validation file as if its source had never been seen: GPU rows with the
constants refitted without their source (:func:`~.cv.cross_validate` with :data:`~.cv.CV_METHOD`), wafer rows with
the kernel constants refitted without it (:func:`wseplan.analytic.wse_fit.held_out_by_source`).
:func:`write_model_error` turns the held-out residuals of the bundled files into
``catalogs/calibration/model_error.yaml`` (read by :mod:`wseplan.model_error`). This module is not imported by
``wseplan.validate`` (the wafer refit imports that package): ``from wseplan.validate.intervals import
write_model_error``.
"""
from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path

import numpy as np
import yaml

from ..analytic import wse_fit
from ..calibration_data import calibration_path
from ..catalog.load import default_catalog_dir, load_catalog
from ..errors import InputError
from ..model_error import (MIN_SOFTWARE_ROWS, QUANTILES, RESIDUAL_DECIMALS, _load, architecture_class,
                           model_error_path, precision_class)
from ..workload import total_params
from .cases import CAPACITY_METRICS, TIME_METRICS, SkipRow, case_model, read_cases, source_key
from .common import wafer_profile_for
from .cv import CV_METHOD, committed_choice, cross_validate
from .defaults import fill_defaults
from .gpu import gpu_profile_for
from .run import predict_case

BUNDLED = ("validation-public.csv", "validation-extra.csv")


def held_out(paths, *, catalog=None, max_nfev: int = 5, method: str = CV_METHOD) -> dict:
    """``{"rows": {id: {"in_sample": v, "held_out": v}}, "seconds": s}`` for every row of ``paths`` (one file or
    several) that predicts: GPU rows refitted without their source (the committed model choice, its files plus
    ``paths``; ``method`` and ``max_nfev`` as :func:`~.cv.cross_validate`), wafer rows likewise; a row whose source
    no fit used keeps its in-sample prediction."""
    t0 = time.perf_counter()
    cat = catalog or load_catalog()
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    choice = committed_choice()
    fit_paths = list(choice.paths())
    fit_paths += [p for p in paths if p.resolve() not in {q.resolve() for q in fit_paths}]
    cv = cross_validate(fit_paths, catalog=cat, choice=choice, max_nfev=max_nfev, method=method)
    by_id = {r["id"]: r for r in cv["rows"]}
    cases = [c for p in paths for c in read_cases(p)]
    wafer = wse_fit.held_out_by_source(cases, catalog=cat)
    out = {}
    for c in cases:
        try:
            v = float(predict_case(c, cat))
        except (SkipRow, InputError):
            continue
        if c.hardware.startswith("wse"):  # wafer rows, kernels included: the wafer constants refitted without the source
            h = wafer.get(c.id, v)
        elif c.id in by_id:
            h = by_id[c.id]["held_out"]
        elif source_key(c) in cv["trials"]:
            try:
                h = float(predict_case(c, cat, cv["trials"][source_key(c)]))
            except (SkipRow, InputError):
                h = v
        else:
            h = v
        out[c.id] = {"in_sample": v, "held_out": h}
    return {"rows": out, "seconds": time.perf_counter() - t0}


def _profile_of(case) -> str:
    """The software profile (calibrated name) an inference row is predicted with (the validator's own choice)."""
    return wafer_profile_for(case) if case.hardware.startswith("wse") else gpu_profile_for(case)


def speed_residual(case, predicted: float) -> float:
    """``log(predicted speed / measured speed)``: a time metric counts as an inverse speed."""
    r = math.log(predicted / case.value)
    return -r if case.metric in TIME_METRICS else r


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _row_devices(category: str, filled) -> int:
    """A row's device count for the envelope, as queries count theirs (:func:`wseplan.model_error.engine_devices`): a
    training job's every device; in inference one engine's, ``tp x pp`` where the row gives them, else its devices
    over its data-parallel replicas (review33 M2: MLPerf systems of up to 18 replicas counted whole)."""
    n = float(filled.get("n_devices") or filled.get("tp") or 1)
    if category.endswith("-train"):
        return int(n)
    tp, pp, dp = (filled.get(k) for k in ("tp", "pp", "dp"))
    if tp:
        return int(float(tp) * float(pp or 1))
    return max(1, int(round(n / float(dp or 1))))


def model_error_inputs() -> dict[str, str]:
    """The files the model-error file is computed from, with their SHA-256 (what makes it current): the validation
    rows and their datasets, the calibrations and priors, the software profiles, and the hardware, model and default
    catalogs the predictions read (audit33d M5: a hardware edit moved 11 predictions and the file still passed as
    current). The code is not hashed: a change to the time models is regenerated by hand (the test names how)."""
    base = default_catalog_dir()
    files = [base / "validation" / f for f in BUNDLED] + [calibration_path(), base / "calibration" / "fabric.yaml",
                                                        base / "calibration" / "gpu_priors.yaml",
                                                        base / "software" / "profiles.yaml"]
    files += [base / "validation" / "datasets.yaml", base / "validation" / "training_benchmarks.yaml",
              base / "calibration" / "wafer_priors.yaml", base / "calibration" / "fabric_sim_fit.yaml",
              base / "defaults.yaml", *sorted((base / "hardware").glob("*.yaml")), *sorted((base / "models").glob("*.yaml"))]
    return {str(p.relative_to(base.parent)): _sha(p) for p in files if p.exists()}


def model_error_doc(ho: dict, *, catalog=None, level: float = 0.8) -> dict:
    """The model-error document from :func:`held_out` of the bundled files (strong and medium rows only)."""
    cat = catalog or load_catalog()
    cases = {c.id: c for f in BUNDLED for c in read_cases(default_catalog_dir() / "validation" / f)}
    cats: dict[str, dict] = {}
    weak: dict[str, dict] = {}
    for rid, r in sorted(ho["rows"].items()):
        c = cases[rid]
        if c.quality == "weak" and c.metric not in CAPACITY_METRICS and r.get("held_out") is not None:
            weak.setdefault(c.category, {})[rid] = round(speed_residual(c, r["held_out"]), RESIDUAL_DECIMALS)
        if c.quality not in ("strong", "medium") or c.metric in CAPACITY_METRICS:  # the time models' errors only
            continue
        g = cats.setdefault(c.category, {"res": {}, "params": [], "devices": [], "hardware": set(), "software": set(),
                                         "precisions": set(), "architectures": set()})
        g["res"][rid] = round(speed_residual(c, r["held_out"]), RESIDUAL_DECIMALS)
        filled, _ = fill_defaults(c, cat)
        try:
            m = case_model(filled, cat)
            g["params"].append(total_params(m) / 1e9)
            g["architectures"].add(architecture_class(m))
        except (SkipRow, InputError):
            pass
        g["devices"].append(_row_devices(c.category, filled))
        g["hardware"].add(c.hardware)
        pc = precision_class(filled.get("precision"))
        if pc:
            g["precisions"].add(pc)
        if c.category.endswith("-infer"):  # the serving profile the row ran (training times do not depend on one)
            g["software"].add(_profile_of(c))
            g.setdefault("by_sw", {}).setdefault(_profile_of(c), []).append(g["res"][rid])
    out = {}
    for name, g in sorted(cats.items()):
        res = np.array(list(g["res"].values()))
        q = {f"p{k:02d}": round(float(np.percentile(res, k)), 5) for k in QUANTILES}
        out[name] = {"rows": int(len(res)), "median_abs_rel_error": round(float(np.median(np.abs(np.expm1(res)))), 5),
                     "quantiles": q,
                     "envelope": {"params_b": [round(min(g["params"]), 4), round(max(g["params"]), 4)] if g["params"]
                                  else [0.0, 0.0],
                                  "devices": [min(g["devices"]), max(g["devices"])],
                                  "hardware": sorted(g["hardware"]), "software": sorted(g["software"]),
                                  "precisions": sorted(g["precisions"]),
                                  "architectures": sorted(a for a in g["architectures"] if a)},
                     "residuals": g["res"]}
        subs = {sw: v for sw, v in sorted(g.get("by_sw", {}).items()) if len(v) >= MIN_SOFTWARE_ROWS}
        if len(g.get("by_sw", {})) > 1 and subs:  # a band per profile where the rows ran with several (audit33d M1)
            out[name]["by_software"] = {sw: {"rows": len(v), "quantiles": {
                f"p{k:02d}": round(float(np.percentile(np.array(v), k)), 5) for k in QUANTILES}} for sw, v in subs.items()}
    return {"description": "Cross-validated (leave-one-source-out) errors of the time models per validation category "
                           "and the envelope of what was validated; read by wseplan.model_error for prediction "
                           "intervals and the cost Monte Carlo.",
            "method": "wseplan.validate.intervals.write_model_error: held-out predictions of the strong/medium rows of "
                      "catalogs/validation/validation-public.csv and validation-extra.csv (GPU constants refitted "
                      "without each source by a few trust-region steps of the penalised fit (chord), wafer kernel "
                      "constants refitted likewise); residual = "
                      "log(predicted speed / measured speed), a time metric counted as an inverse speed; quantiles by "
                      "numpy.percentile (linear)",
            "level": level, "inputs_sha256": model_error_inputs(), "categories": out,
            "unvalidated": {k: v for k, v in sorted(weak.items()) if k not in out}}


def write_model_error(path: str | Path | None = None, *, log=print) -> Path:
    """Recompute ``catalogs/calibration/model_error.yaml`` from the bundled validation files (chord refits)."""
    cat = load_catalog()
    ho = held_out([default_catalog_dir() / "validation" / f for f in BUNDLED], catalog=cat)
    log(f"held-out predictions of {len(ho['rows'])} rows in {ho['seconds']:.0f} s")
    doc = model_error_doc(ho, catalog=cat)
    p = Path(path) if path is not None else model_error_path()
    p.write_text("# Generated by wseplan.validate.intervals.write_model_error; regenerate, do not edit.\n"
                 + yaml.safe_dump({"model_error": doc}, sort_keys=False, width=110), encoding="utf-8")
    _load.cache_clear()
    return p
