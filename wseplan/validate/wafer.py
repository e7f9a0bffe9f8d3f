"""Prediction of the wafer-scale (WSE) rows of a validation file: GEMV kernels, inference and training."""
from __future__ import annotations

from ..analytic import gpu_time as G
from ..analytic import fabric
from ..timing import predict_time
from .cases import SkipRow, case_model, note_hint
from .common import _need_fit, _recompute, _target, _train_metric, kernel_shape, speculation_of, wafer_profile_for


#: kernel-row metrics the wafer kernel model predicts: a latency [ms] or a FLOP rate [TFLOP/s] (2 m k n per product)
KERNEL_METRICS = ("latency_ms", "tflops")


def predict_wafer_kernel(case, catalog, constants=None) -> float:
    """One ``GEMV [M,K]x[K,N]`` or ``GEMM [M,K]x[K,N]`` kernel row on a wafer, in the row's metric
    (:data:`KERNEL_METRICS`), with kernel ``constants`` (default ``fabric.yaml``); the region from the row's
    ``wse_core_grid=RxC`` hint, else the kernel's default region."""
    shape = kernel_shape(case.model)
    if shape is None or case.metric not in KERNEL_METRICS:
        raise SkipRow("kernel is not a GEMV or GEMM latency or FLOP rate; no model for it")
    kind, m, k, n = shape
    target = _target(case, catalog, None)
    kw = dict(k=k, n=n, m=m, wafer=target.device, precision=case.get("precision") or "fp16", constants=constants)
    grid = note_hint(case.notes, "wse_core_grid")
    if grid and "x" in grid:
        r_, _, c_ = grid.partition("x")
        kw.update(region_rows=int(float(r_)), region_cols=int(float(c_)))
    try:
        lat = float((fabric.gemv_latency_s if kind == "GEMV" else fabric.gemm_latency_s)(**kw))
    except (NotImplementedError, TypeError):
        raise SkipRow("wafer model unavailable") from None
    return lat * 1e3 if case.metric == "latency_ms" else 2.0 * m * k * n / lat / 1e12


def _predict_wafer(case, catalog):
    if case.phase == "kernel":
        return predict_wafer_kernel(case, catalog)
    model = case_model(case, catalog)
    f = case.fields
    if case.phase == "train":
        return _predict_wafer_train(case, catalog, model)
    precision = f.get("precision") or "fp16"
    inp, out, conc = f.get("input_len"), f.get("output_len"), f.get("concurrency") or 1
    if not inp:
        raise SkipRow("input_len not given")
    target = _target(case, catalog, f.get("n_devices"))
    opts = wafer_row_options(case, catalog)
    phase = "prefill" if case.phase == "prefill" else "decode"
    try:
        r = predict_time(model, target, require_fit=False, phase=phase, precision=precision, batch=conc, context=inp,
                         output_tokens=out if case.phase == "e2e-infer" else None, catalog=catalog,
                         software=wafer_profile_for(case), **opts)
        _need_fit(r)
    except (NotImplementedError, ImportError, AttributeError):
        raise SkipRow("wafer model unavailable") from None
    m = case.metric
    if m == "prefill_tokens_per_s":
        return inp / (r.ttft_s or r.step_s)
    if m == "ttft_ms":
        return (r.ttft_s or r.step_s) * 1e3
    if m == "tokens_per_s_per_user":
        if case.phase == "decode":
            return 1.0 / (r.tpot_s or r.step_s)
        if case.phase == "e2e-infer" and out and r.request_s:
            return out / r.request_s
        raise SkipRow(f"metric {m} needs a decode or end-to-end row with output_len")
    if m == "tokens_per_s":
        return r.tokens_per_s
    if m == "tokens_per_s_per_gpu":
        return r.tokens_per_s / max(r.num_devices, 1)
    if m == "latency_ms" and case.phase == "decode":
        return (r.tpot_s or r.step_s) * 1e3
    raise SkipRow(f"metric {m} is not predicted for wafer rows")


def _predict_wafer_train(case, catalog, model):
    f = case.fields
    seq, gb, n = f.get("seq_len"), f.get("global_batch"), f.get("n_devices") or 1
    if not seq or not gb:
        raise SkipRow("seq_len and global_batch needed for a wafer training row")
    precision = f.get("precision") or "bf16"
    target = _target(case, catalog, n)
    try:
        r = predict_time(model, target, require_fit=False, phase="train", precision=precision, batch=gb, context=seq, catalog=catalog)
        _need_fit(r)
    except (NotImplementedError, ImportError, AttributeError):
        raise SkipRow("wafer model unavailable") from None
    return _train_metric(case, model, step_s=r.step_s, tokens_per_step=gb * seq, num_devices=r.num_devices or n,
                         peak_flop_per_s=target.device.peak_flop_per_s(precision), recompute=_recompute(case),
                         cal=G.gpu_calibration())


def wafer_row_options(case, catalog) -> dict:
    """The family options a wafer inference row states: core grids (``wse_core_grid=RxC`` and the prefill/decode
    variants in its notes) and speculative decoding (``speculative=no`` turns the profile's default off; a named
    draft replaces the profile's)."""
    opts = {}
    for key, opt in (("wse_core_grid", "core_grid"), ("wse_core_grid_prefill", "core_grid_prefill"),
                     ("wse_core_grid_decode", "core_grid_decode")):
        v = note_hint(case.notes, key)
        if v:
            rows, _, cols = v.partition("x")
            if rows and cols:
                opts[opt] = (int(float(rows)), int(float(cols)))
    spec, draft = speculation_of(case, catalog)
    if spec is False:
        opts["speculative"] = "none"
    elif spec and draft:
        opts["speculative"] = draft
    return opts
