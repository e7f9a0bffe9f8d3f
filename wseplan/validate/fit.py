"""Calibration of the GPU efficiency constants (``catalogs/calibration/gpu_efficiency.yaml``) on the validation rows."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from ..calibration_data import CALIBRATION_KEYS, GpuCalibration, _cached, calibration_path, gpu_calibration
from ..catalog.load import load_catalog
from ..errors import InputError
from .cases import NON_PERFORMANCE, Case, SkipRow, default_cases_path, read_cases, source_key
from .run import predict_case, validate_cases

#: constants fitted, with (low, high) bounds; the rest keep their documented values
FIT_BOUNDS = {
    "gemm_max_frac_16bit": (0.3, 0.98),
    "gemm_max_frac_8bit": (0.2, 0.98),
    "gemm_max_frac_4bit": (0.1, 0.98),
    "gemm_half_intensity": (1.0, 2000.0),
    "attention_frac": (0.1, 0.95),
    "hbm_frac": (0.4, 0.98),
    "elementwise_vectors_per_token": (1.0, 200.0),
    "network_frac": (0.05, 0.98),
    "nvlink_latency_s": (1e-6, 2e-4),
    "dp_overlap_frac": (0.01, 0.99),
    "tp_overlap_frac": (0.001, 0.9),
    "layer_overhead_s": (1e-7, 2e-4),
    "step_overhead_s": (1e-5, 2e-2),
    "train_step_overhead_s": (1e-3, 5.0),
    "benchmark_eval_overhead_frac": (0.001, 0.5),
}
GPU_CATEGORIES = ("gpu-train", "gpu-infer", "micro")
#: why each constant that is not fitted has the value it has
UNFITTED_NOTES = {
    "nvlink_frac": "not fitted: NCCL all-reduce bus bandwidth inside DGX A100/H100 nodes reaches about three quarters "
                   "of the per-direction NVLink bandwidth for large messages (nccl-tests); fitting it let a few "
                   "inconsistent tensor-parallel rows drag it to ~0.2, which broke the TTFT rows",
    "network_latency_s": "not fitted: typical InfiniBand/RoCE collective step latency (a few to tens of microseconds); "
                         "no public row constrains it",
    "engine_max_batch": "not fitted: a serving engine's default maximum batch (vLLM max_num_seqs 256); used only when a "
                        "row or the user gives no concurrency",
}


def fit_cases(cases: list[Case]) -> list[Case]:
    """Rows a GPU calibration may use: strong or medium GPU rows (not wafers)."""
    return [c for c in cases if c.category in GPU_CATEGORIES and not c.hardware.startswith("wse")
            and c.quality in ("strong", "medium") and c.metric not in NON_PERFORMANCE]


def fit_gpu_efficiency(cases_path: str | Path | None = None, *, exclude_sources: tuple[str, ...] = (), catalog=None,
                       max_nfev: int = 60, start=None):
    """Fit the GPU efficiency constants to the validation rows with ``scipy.optimize.least_squares``.

    Residuals are ``log(predicted / measured)`` of every strong/medium GPU row that predicts (rows from
    ``exclude_sources`` left out), with a soft-L1 loss (scale 0.1) so that a few rows the model cannot
    represent do not drag the rest. Parameters are fitted in log space within :data:`FIT_BOUNDS`, starting
    from ``start`` (default: the current catalog values). Deterministic: same inputs, same result.

    Returns
    -------
    (GpuCalibration, list[str], float)
        The fitted constants, the ids fitted on, and the median |rel_error| over those rows.
    """
    from scipy.optimize import least_squares

    cat = catalog or load_catalog()
    cases = fit_cases(read_cases(cases_path or default_cases_path()))
    cases = [c for c in cases if source_key(c) not in exclude_sources]
    base = start or gpu_calibration()
    keys = list(FIT_BOUNDS)
    lo = np.log([FIT_BOUNDS[k][0] for k in keys])
    hi = np.log([FIT_BOUNDS[k][1] for k in keys])
    x0 = np.clip(np.log([getattr(base, k) for k in keys]), lo + 1e-9, hi - 1e-9)
    usable = []
    for c in cases:
        try:
            predict_case(c, cat, base)
            usable.append(c)
        except (SkipRow, InputError):
            continue

    def cal_of(x):
        return base.replace(**{k: float(np.exp(v)) for k, v in zip(keys, x)})

    def resid(x):
        cal = cal_of(x)
        out = np.empty(len(usable))
        for i, c in enumerate(usable):
            try:
                v = predict_case(c, cat, cal)
                out[i] = math.log(max(v, 1e-30) / c.value)
            except (SkipRow, InputError):
                out[i] = 0.0
        return out

    res = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, max_nfev=max_nfev, diff_step=1e-3)
    cal = cal_of(res.x)
    err = np.abs(np.exp(resid(res.x)) - 1.0)
    return cal, [c.id for c in usable], float(np.median(err)) if len(err) else float("nan")


def write_gpu_efficiency(cal, fitted_on: list[str], path: str | Path | None = None, residuals: dict | None = None) -> Path:
    """Write fitted constants to ``catalogs/calibration/gpu_efficiency.yaml`` (source: wseplan-gpu-calibration)."""
    p = Path(path) if path is not None else calibration_path()
    constants = {}
    for k in CALIBRATION_KEYS:
        v = float(getattr(cal, k))
        fitted = k in FIT_BOUNDS
        constants[k] = {"value": float(f"{v:.6g}"), "source": "wseplan-gpu-calibration", "basis": "estimate",
                        "note": ("fitted by wseplan.validate.fit_gpu_efficiency on the rows in fitted_on" if fitted
                                 else UNFITTED_NOTES.get(k, "planning default, not fitted"))}
    doc = {"gpu_efficiency": {
        "description": "Achievable-efficiency constants of the GPU time models (wseplan.analytic.gpu_time).",
        "method": "scipy.optimize.least_squares, log(predicted/measured) residuals, soft_l1 loss (f_scale 0.1), "
                  "log-space parameters within wseplan.validate.FIT_BOUNDS; reproduce with "
                  "`python -c 'from wseplan.validate import refit_and_write; refit_and_write()'`",
        "fitted_on": list(fitted_on),
        "residuals": residuals or {},
        "constants": constants}}
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("# Generated by wseplan.validate.write_gpu_efficiency; edit by refitting, not by hand.\n"
                 + yaml.safe_dump(doc, sort_keys=False, width=110), encoding="utf-8")
    _cached.cache_clear()
    return p


def refit_and_write(max_nfev: int = 200) -> Path:
    """Refit on the public set from the documented defaults of :class:`GpuCalibration` and write the
    calibration file (the reproducible calibration step: same file in, same constants out)."""
    cal, ids, med = fit_gpu_efficiency(max_nfev=max_nfev, start=GpuCalibration())
    return write_gpu_efficiency(cal, ids, residuals={"median_abs_rel_error": round(med, 4)})


def leave_one_source_out(cases_path: str | Path | None = None, *, catalog=None, max_nfev: int = 30) -> list[dict]:
    """For each source, fit without its rows and predict them: median |rel_error| in-sample vs held out."""
    cat = catalog or load_catalog()
    path = cases_path or default_cases_path()
    cases = fit_cases(read_cases(path))
    full = gpu_calibration()
    out = []
    for src in sorted({source_key(c) for c in cases}):
        rows = [c for c in cases if source_key(c) == src]
        ins = validate_cases(rows, cat, full)
        e_in = [abs(r["rel_error"]) for r in ins if r["predicted"] is not None]
        if not e_in:
            continue
        cal, _, _ = fit_gpu_efficiency(path, exclude_sources=(src,), catalog=cat, max_nfev=max_nfev, start=full)
        held = validate_cases(rows, cat, cal)
        e_out = [abs(r["rel_error"]) for r in held if r["predicted"] is not None]
        out.append({"source": src, "category": ",".join(sorted({c.category for c in rows})), "rows": len(e_in),
                    "median_abs_rel_error_in_sample": float(np.median(e_in)),
                    "median_abs_rel_error_held_out": float(np.median(e_out)) if e_out else None})
    return out