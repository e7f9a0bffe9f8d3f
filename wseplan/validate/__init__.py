"""Validate the time models against published measurements (``wseplan validate CASES.csv``).

The package, one concern per module:

* :mod:`.cases` reads the validation-case format (``docs/validation.md``) and builds each row's architecture;
* :mod:`.gpu` and :mod:`.wafer` predict a row on GPUs and on wafers (:mod:`.common` holds what they share);
* :mod:`.run` predicts a whole file and judges each row against its category's tolerance band;
* :mod:`.fit` refits the GPU efficiency constants (``catalogs/calibration/gpu_efficiency.yaml``).

Every public name stays importable from ``wseplan.validate``.
"""
from __future__ import annotations

from .cases import (ALL_COLUMNS, CAPACITY_METRICS, CATEGORIES, INCONSISTENT, INT_COLUMNS, MAX_CELL_CHARS, MAX_INT_CELL, NO_BAND,
                    NON_PERFORMANCE, NOT_PREDICTED, NOT_TIMED, OUTPUT_COLUMNS, OUTSIDE, REQUIRED_COLUMNS, STATUSES, TOLERANCE_PERCENTILE, WITHIN,
                    Case, SkipRow, case_model, default_cases_path, iter_cases, moe_layout_from_notes, note_hint,
                    read_cases, source_key)
from .common import GPU_INFER_PROFILE, GPU_PROFILE, _target, gemv_shape, wafer_profile_for
from .calfile import UNFITTED_NOTES, leave_one_source_out, refit_and_write, write_gpu_efficiency
from .cv import CHOICES, FitChoice, category_medians, cross_validate, select_choice
from .fit import GPU_CATEGORIES, Param, fit_cases, fit_gpu_efficiency, fit_params
from .gpu import INFLIGHT_MARKERS, gpu_scheduling_for, sla_of
from .run import (category_bands, cross_validated_summary, inconsistency, judge, physical_bound, predict_case, reference_bands, summarize,
                  validate_cases, validate_file)

__all__ = ["ALL_COLUMNS", "CATEGORIES", "GPU_CATEGORIES", "GPU_INFER_PROFILE", "GPU_PROFILE",
           "CAPACITY_METRICS", "INCONSISTENT", "INFLIGHT_MARKERS", "INT_COLUMNS", "MAX_CELL_CHARS", "MAX_INT_CELL", "NON_PERFORMANCE", "NOT_PREDICTED", "NOT_TIMED",
           "NO_BAND", "OUTPUT_COLUMNS", "OUTSIDE", "REQUIRED_COLUMNS", "STATUSES",
           "TOLERANCE_PERCENTILE", "WITHIN", "Case", "SkipRow", "_target", "case_model",
           "category_bands", "default_cases_path", "fit_cases", "fit_gpu_efficiency", "gemv_shape",
           "gpu_scheduling_for", "iter_cases", "judge", "moe_layout_from_notes", "note_hint",
           "inconsistency", "physical_bound", "predict_case", "read_cases", "reference_bands", "sla_of", "source_key",
           "cross_validated_summary", "summarize", "validate_cases", "validate_file", "wafer_profile_for", "fit_params", "UNFITTED_NOTES", "leave_one_source_out", "refit_and_write",
           "write_gpu_efficiency", "CHOICES", "FitChoice", "category_medians", "cross_validate", "select_choice", "Param"]
