"""Refit of the measurement-level wafer constants of ``catalogs/calibration/fabric.yaml`` to the measured wafer rows
of the bundled validation files, on top of the simulator-fitted fabric constants.

The calibration chain of the wafer inference model (:mod:`.wse_time`) is: catalog hardware
(``catalogs/hardware/wafers.yaml``) -> mesh simulator (:mod:`wseplan.sim.mesh`) -> the closed-form fabric
constants fitted to it (``fabric_sim_fit.yaml``, ``wseplan calibrate``) -> the analytic model. What the
simulator does not model - the software cost of launching and synchronising a kernel and the MAC rate the
kernels achieve - is fitted here to measurements, with the simulator-fitted constants (and the wafer's
routing-colour limit) held fixed. Each fitted constant has a mechanism and a prior
(``catalogs/calibration/wafer_priors.yaml``):

* ``per_kernel_overhead_cycles`` - fixed cost of each kernel [cycles];
* ``gemv_mac_efficiency_frac`` - achieved share of the PE MAC rate in GEMV (decode) [0-1]: held at 1.0
  (:data:`FIXED`, with the reason);
* ``gemm_mac_efficiency_frac`` - the same in MeshGEMM (prefill) [0-1];
* ``gemm_step_overhead_cycles`` - fixed cost of each MeshGEMM shift step [cycles].

Rows (:func:`fit_rows`): the ``wse-infer`` rows and the wafer GEMM kernel rows of quality strong or medium that the
model predicts (GEMV kernel rows check the held GEMV efficiency), each predicted exactly as ``wseplan validate``
does (inline architecture, ``wse_core_grid*`` hints). No row is weighted or treated specially. Penalised least squares: residuals
``log(predicted / measured) / NOISE`` plus one prior residual per constant (as the GPU calibration,
:mod:`wseplan.validate.fit`), ``scipy.optimize.least_squares`` (trf, linear loss, within the prior ranges) started
from the prior values, values rounded to 3 significant digits; deterministic, so :func:`fit_wse_overheads` rewrites
``fabric.yaml`` byte for byte from the same inputs. :func:`held_out_by_source` refits without each source: held out,
WaferLLM's rows are predicted from the SGEMM row and the priors.

References
----------
He, C. et al., "WaferLLM: Large Language Model Inference at Wafer Scale", USENIX OSDI 2025, Tables 2-4, 6.
Miyajima, T., Matsuzaki, R., Mukunoki, D., "Single-precision Matrix Multiplication Performance on Cerebras CS-2",
J. Inf. Process. 34 (2026) 132-139, abstract (349.0 TFLOP/s, 33,000 x 33,000 on 750 x 750 PEs).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict

from ..calibration_data import bound_side, prior_z, read_wafer_priors
from ..catalog.load import load_catalog, read_yaml
from ..catalog.schema import Quantity
from ..catalog.software import resolve_software
from ..errors import InputError
from ..timing import predict_time
from ..validate import NOT_TIMED, SkipRow, _target, case_model, default_cases_path, read_cases, source_key
from ..validate.common import kernel_shape
from ..validate.wafer import KERNEL_METRICS, predict_wafer_kernel, wafer_row_options
from . import fabric_constants as fab

#: the priors of the fitted constants (``catalogs/calibration/wafer_priors.yaml``: mechanism, value, range, sources)
PRIORS = read_wafer_priors()
#: fitted constants and their hard bounds (low, high): the physical ranges of their priors
FIT_BOUNDS = {k: (q.bound("low"), q.bound("high")) for k, q in PRIORS.items()}
#: expected log-error of one row: a row's log-ratio residual is divided by it, so that the rows and the priors weigh
#: as in the GPU calibration's committed choice (noise 0.2, ``wseplan.validate.cv``)
NOISE = 0.2
#: measurement-level constants held at a documented value, with the reason (written to fabric.yaml)
FIXED = {
    "gemv_mac_efficiency_frac": (1.0, "not fitted: GEMV tiles run at the PE's full MAC rate (max of FLOP and SRAM limits), as in "
                                      "the simulator; the isolated MeshGEMV rows R358/R362 agree (simulator alone -9% on the 32K "
                                      "row). Fitted freely on the decode rows it falls to 0.16, trading against "
                                      "per_kernel_overhead_cycles (the decode rows barely separate the two), and puts R362 at 2.2x"),
}
#: starting point of the fit: the prior values
DEFAULT_START = {k: q.si for k, q in PRIORS.items()}
FIT_NOTES = {
    "per_kernel_overhead_cycles": "fitted by wseplan.analytic.wse_fit on the rows in fitted_on (with the simulator-fitted "
                                  "fabric constants): task launch and synchronisation per kernel",
    "gemm_mac_efficiency_frac": "fitted by wseplan.analytic.wse_fit on the rows in fitted_on: achieved share of the PE MAC "
                                "rate on the small tiles of MeshGEMM (prefill)",
    "gemm_step_overhead_cycles": "fitted by wseplan.analytic.wse_fit on the rows in fitted_on: fixed cost of each of the "
                                 "max(P,Q) shift steps of MeshGEMM (synchronisation, tile hand-over)",
}
FIT_QUALITIES = ("strong", "medium")
FIT_CATEGORY = "wse-infer"
#: the sources of the rows the constants are fitted on (``catalogs/sources.yaml`` keys)
FIT_SOURCES = ["waferllm-osdi25", "matsuzaki-sgemm-cs2"]
#: the bundled validation files whose wafer rows the fit uses (``catalogs/validation/``)
FIT_FILES = ("validation-public.csv", "validation-extra.csv")
METHOD = ("penalised least squares, scipy.optimize.least_squares (trf, linear loss, within the prior ranges): "
          f"log(predicted/measured) / {NOISE:g} of the rows in fitted_on plus the prior residuals of wafer_priors.yaml, "
          "fabric_sim_fit.yaml constants and the colour limit held fixed, started from the prior values; values "
          "rounded to 3 significant digits; reproduce with "
          "`python -c 'from wseplan.analytic.wse_fit import fit_wse_overheads; fit_wse_overheads()'`")
HEADER = """\
# Calibrated constants of the on-wafer fabric closed forms (wseplan/analytic/fabric.py, wse_time.py).
# Loaded by wseplan.analytic.fabric.load_fabric_constants (the core catalog loader skips this folder).
# GENERATED by wseplan.analytic.wse_fit.fit_wse_overheads - refit, do not edit the fitted values by hand.
# Hardware numbers (clock, FLOP/cycle, SRAM bytes/cycle, hop latency, link width, routing colours) come from
# catalogs/hardware/wafers.yaml; the fabric constants the simulator resolves from fabric_sim_fit.yaml
# (`wseplan calibrate`). fabric_model: sim_fit says the kernel constants below were fitted on top of those
# (wafer_fabric_kwargs applies them together); `fit` records the rows, the start, the in-sample residuals
# (rel_error = predicted / measured - 1) and the leave-one-model-out residuals. The fit is penalised least squares
# with the priors of wafer_priors.yaml. The rows are WaferLLM's WSE-2 inference rows and one independent WSE-2 SGEMM
# measurement (R731, Miyajima et al. 2026), so treat the constants as research-software ones.
"""


class WseFitResult(BaseModel):
    """Outcome of :func:`fit_wse_overheads`: fitted values [SI], the fit record, and the file written."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    values: dict[str, float]
    record: fab.WseFitRecord
    written: str | None = None

    def to_row(self) -> dict:
        return dict(self.values, median_abs_rel_error=self.record.in_sample.median_abs_rel_error,
                    max_abs_rel_error=self.record.in_sample.max_abs_rel_error, rows=len(self.record.in_sample.rows),
                    written=self.written)


# ---------------------------------------------------------------------------------------------
# Rows and predictions
# ---------------------------------------------------------------------------------------------
#: the wafer kernels whose measured rows the fit uses: those whose MAC efficiency is fitted (GEMM). GEMV rows check the
#: held GEMV efficiency (:data:`FIXED`) instead: an isolated GEMV and the GEMVs of a decode layer disagree on the
#: per-kernel overhead (a mechanism the model lacks, see FIXED's reason), so fitting both would trade one against the
#: other (fitted too, the per-kernel overhead falls 476 -> 434 cycles, in-sample wse-infer 4.3% -> 4.7%, the same
#: held-out error)
FIT_KERNELS = ("GEMM",)


def fit_rows(cases, kernels: tuple[str, ...] = FIT_KERNELS) -> list:
    """The rows the fit may use, of quality strong/medium: ``wse-infer`` rows with a performance metric, and wafer
    kernel rows of ``kernels`` (default :data:`FIT_KERNELS`) with a latency or FLOP rate
    (:data:`~wseplan.validate.wafer.KERNEL_METRICS`)."""
    def kernel(c):
        shape = kernel_shape(c.model)
        return (c.phase == "kernel" and c.hardware.startswith("wse") and c.metric in KERNEL_METRICS
                and shape is not None and shape[0] in kernels)
    return [c for c in cases if c.quality in FIT_QUALITIES and c.metric not in NOT_TIMED and (c.category == FIT_CATEGORY or kernel(c))]


def bundled_cases() -> list:
    """The rows of the bundled validation files (:data:`FIT_FILES`), in file order."""
    base = default_cases_path().parent
    return [c for f in FIT_FILES for c in read_cases(base / f)]


def predict_row(case, catalog, constants: fab.FabricConstants) -> float:
    """Predict one wafer inference or kernel row with kernel ``constants``, by the rule of
    ``wseplan.validate._predict_wafer`` (inline architecture, ``wse_core_grid*`` hints, metric conversion)."""
    if case.phase == "kernel":
        return predict_wafer_kernel(case, catalog, constants)
    if case.phase not in ("prefill", "decode", "e2e-infer"):
        raise SkipRow(f"phase {case.phase} is not fitted")
    f = case.fields
    inp, out, conc = f.get("input_len"), f.get("output_len"), f.get("concurrency") or 1
    if not inp:
        raise SkipRow("input_len not given")
    opts = wafer_row_options(case, catalog)
    phase = "prefill" if case.phase == "prefill" else "decode"
    r = predict_time(case_model(case, catalog), _target(case, catalog, f.get("n_devices")), require_fit=False, phase=phase,
                     precision=f.get("precision") or "fp16", batch=conc, context=inp,
                     output_tokens=out if case.phase == "e2e-infer" else None, catalog=catalog,
                     software=wafer_profile(constants, catalog), **opts)
    m = case.metric
    if m == "prefill_tokens_per_s":
        return inp / (r.ttft_s or r.step_s)
    if m == "ttft_ms":
        return (r.ttft_s or r.step_s) * 1e3
    if m == "tokens_per_s_per_user":
        return 1.0 / (r.tpot_s or r.step_s) if case.phase == "decode" else out / r.request_s
    if m == "latency_ms" and case.phase == "decode":
        return (r.tpot_s or r.step_s) * 1e3
    raise SkipRow(f"metric {m} is not fitted")


def wafer_profile(constants: fab.FabricConstants, catalog):
    """The default wafer software profile with the kernel ``constants`` (a fit trial) in place of its own."""
    prof = resolve_software("wafer-research", "wafer", catalog)
    consts = {k: getattr(constants, k) for k in type(constants).model_fields
              if isinstance(getattr(constants, k), Quantity)}
    return prof.model_copy(update={"constants": consts})


def with_values(constants: fab.FabricConstants, values: dict[str, float]) -> fab.FabricConstants:
    """``constants`` with the fitted names replaced by ``values`` (each a Quantity with its fit note);
    ``fabric_model`` becomes ``sim_fit`` (the fit runs on top of the simulator-fitted constants)."""
    upd = {k: Quantity(value=float(v), source=FIT_SOURCES, basis="estimate",
                       note=FIT_NOTES[k] if k in FIT_NOTES else FIXED[k][1]) for k, v in values.items()}
    return constants.model_copy(update=upd).with_fabric_model("sim_fit")


def at_bound(values: dict[str, float], rel: float = 1e-3) -> list[str]:
    """The fitted constants of ``values`` within ``rel`` (in log) of a bound of their prior range, as ``name: low|high``
    (reported in ``fabric.yaml``: a constant at a bound says the rows push it beyond its physical range)."""
    sides = {k: bound_side(values[k], lo, hi, rel) for k, (lo, hi) in FIT_BOUNDS.items() if k in values}
    return [f"{k}: {side}" for k, side in sides.items() if side]


def _round_sig(x: float, digits: int = 3) -> float:
    return 0.0 if x == 0 else float(f"{x:.{digits}g}")


def _stats(ids, rel) -> fab.WseFitStats:
    a = np.abs(np.asarray(rel, dtype=float))
    return fab.WseFitStats(rows=list(ids), median_abs_rel_error=round(float(np.median(a)), 4),
                           max_abs_rel_error=round(float(a.max()), 4))


def _least_squares(rows, catalog, base, start, max_nfev) -> dict[str, float]:
    from scipy.optimize import least_squares

    names = list(FIT_BOUNDS)
    lo = np.array([FIT_BOUNDS[k][0] for k in names])
    hi = np.array([FIT_BOUNDS[k][1] for k in names])
    scale = np.array([max(abs(start[k]), 1e-3) for k in names])
    x0 = np.clip(np.array([start[k] for k in names]) / scale, lo / scale, hi / scale)

    def resid(x):
        v = x * scale
        c = with_values(base, dict(zip(names, v)))
        data = [math.log(max(predict_row(r, catalog, c), 1e-30) / r.value) / NOISE for r in rows]
        prior = [prior_z(PRIORS[k].si, lo[i], hi[i], v[i]) for i, k in enumerate(names)]
        return np.array(data + prior)

    res = least_squares(resid, x0, bounds=(lo / scale, hi / scale), method="trf", loss="linear",
                        diff_step=1e-3, max_nfev=max_nfev)
    return {k: _round_sig(float(v)) for k, v in zip(names, res.x * scale)}


def _rel_errors(rows, catalog, constants) -> np.ndarray:
    return np.array([predict_row(r, catalog, constants) / r.value - 1.0 for r in rows])


# ---------------------------------------------------------------------------------------------
def fit_wse_overheads(cases_path: str | Path | None = None, *, catalog=None, start: dict | None = None,
                      exclude_models: tuple[str, ...] = (), leave_one_model_out: bool = True, max_nfev: int = 60,
                      write: bool = True, path: str | Path | None = None) -> WseFitResult:
    """Fit the measurement-level constants of ``fabric.yaml`` (:data:`FIT_BOUNDS`; :data:`FIXED` held) to the
    strong and medium wafer rows of the bundled validation files (:func:`fit_rows`) and write it.

    Parameters
    ----------
    cases_path : path, optional
        Validation file (default: the bundled files, :data:`FIT_FILES`).
    catalog : Catalog, optional
    start : dict, optional
        Starting values (default :data:`DEFAULT_START`; the fit is deterministic from them).
    exclude_models : tuple of str
        Row ``model`` names left out of the fit (as in the leave-one-model-out check).
    leave_one_model_out : bool
        Also refit without each model's rows and record the held-out residuals.
    max_nfev : int
        Function evaluations per fit.
    write : bool
        Write ``path`` (default ``catalogs/calibration/fabric.yaml``); the constants not fitted here
        (``wavelet_bytes``, ``ramp_latency_cycles``, ``cross_system_latency_s``) are kept as they are.

    Returns
    -------
    WseFitResult
        Fitted values [cycles, fractions], the record written under ``fit`` and the path written.
    """
    cat = catalog or load_catalog()
    p = Path(path) if path is not None else fab.default_calibration_dir() / "fabric.yaml"
    base = fab.load_fabric_constants(p if p.is_file() else None)
    st = dict(DEFAULT_START, **(start or {}))
    unknown = set(st) - set(FIT_BOUNDS)
    if unknown:
        raise InputError(f"start: unknown constants {', '.join(sorted(unknown))}; use {', '.join(FIT_BOUNDS)}")
    cases = read_cases(cases_path) if cases_path is not None else bundled_cases()
    rows = [r for r in fit_rows(cases) if r.model not in exclude_models]
    if not rows:
        raise InputError("cases_path: no strong/medium wafer rows to fit; pass a validation file with wse-infer rows")
    values = dict(_least_squares(rows, cat, base, st, max_nfev), **{k: v for k, (v, _) in FIXED.items()})
    fitted = with_values(base, values)
    rel = _rel_errors(rows, cat, fitted)
    lomo = {}
    models = sorted({r.model for r in rows if r.phase != "kernel"})  # kernel rows stay in every training set
    if leave_one_model_out and len(models) > 1:
        for m in models:
            train = [r for r in rows if r.model != m]
            held = [r for r in rows if r.model == m]
            v = dict(_least_squares(train, cat, base, st, max_nfev), **{k: x for k, (x, _) in FIXED.items()})
            lomo[m] = _stats([r.id for r in held], _rel_errors(held, cat, with_values(base, v)))
    record = fab.WseFitRecord(method=METHOD, fitted=list(FIT_BOUNDS), start={k: float(v) for k, v in st.items()},
                              at_bound=at_bound(values),
                              in_sample=_stats([r.id for r in rows], rel),
                              residuals={r.id: round(float(e), 4) for r, e in zip(rows, rel)},
                              leave_one_model_out=lomo)
    written = None
    if write:
        raw = read_yaml(p)["fabric"] if p.is_file() else {}
        consts = {}
        for k in fab.FabricConstants.model_fields:
            if k == "fabric_model":
                continue
            if k in values:
                consts[k] = {"value": values[k], "source": list(FIT_SOURCES), "basis": "estimate",
                             "note": FIT_NOTES[k] if k in FIT_NOTES else FIXED[k][1]}
            elif k in raw:
                consts[k] = raw[k]
            else:
                raise InputError(f"{p}: fabric.{k} missing; restore it from git before refitting")
        doc = {"schema_version": 1, "fabric_model": "sim_fit", "fitted_on": [r.id for r in rows],
               "fit": record.model_dump(), "fabric": consts}
        text = HEADER + yaml.safe_dump(doc, sort_keys=False, width=120, default_flow_style=None)
        fab.FabricFile.model_validate(yaml.safe_load(text))  # never write a file the loader rejects
        p.write_text(text, encoding="utf-8")
        fab._load_fabric.cache_clear()
        written = str(p)
    return WseFitResult(values=values, record=record, written=written)


def held_out_by_source(cases, *, catalog=None, max_nfev: int = 20) -> dict[str, float]:
    """Leave-one-source-out predictions of the wafer rows of ``cases`` (id -> predicted value): each source's fit
    rows and wafer kernel check rows (:func:`fit_rows` with every kernel) predicted with the constants fitted on the
    other sources' fit rows of ``cases`` and of the bundled files (:func:`bundled_cases`, the rows the committed
    constants were fitted on), or, where no other source has wafer rows, with the prior values (:data:`DEFAULT_START`:
    nothing measured fitted)."""
    cat = catalog or load_catalog()
    base = fab.load_fabric_constants()
    fixed = {k: v for k, (v, _) in FIXED.items()}
    rows = fit_rows(cases, kernels=("GEMV", "GEMM"))
    ids = {r.id for r in rows}
    pool = fit_rows(cases) + [r for r in fit_rows(bundled_cases()) if r.id not in ids]
    out = {}
    for src in sorted({source_key(r) for r in rows}):
        train = [r for r in pool if source_key(r) != src]
        values = _least_squares(train, cat, base, DEFAULT_START, max_nfev) if train else dict(DEFAULT_START)
        consts = with_values(base, dict(values, **fixed))
        for r in rows:
            if source_key(r) == src:
                try:
                    out[r.id] = predict_row(r, cat, consts)
                except SkipRow:
                    continue
    return out


__all__ = ["FIT_BOUNDS", "FIXED", "DEFAULT_START", "WseFitResult", "fit_rows", "bundled_cases", "at_bound", "predict_row", "with_values",
           "fit_wse_overheads", "held_out_by_source"]
