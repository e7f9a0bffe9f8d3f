"""Calibrated constants of the on-wafer fabric closed forms (:mod:`.fabric`): the schemas and loaders of
``catalogs/calibration/fabric.yaml`` (kernel overheads and MAC efficiencies fitted to measurements by
:mod:`wseplan.analytic.wse_fit`) and ``fabric_sim_fit.yaml`` (the constants the mesh simulator resolves, fitted by
``wseplan calibrate``). Every constant is a catalog :class:`~wseplan.catalog.schema.Quantity` with its source.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from ..catalog.load import default_catalog_dir, read_yaml
from ..catalog.schema import Quantity
from ..errors import CatalogError, InputError, validation_detail

#: how a reduction tree's time is counted: per level, or along the critical path of sends
TREE_MODELS = ("levels", "critical_path")


# ---------------------------------------------------------------------------------------------
# Calibration constants (catalogs/calibration/fabric.yaml)
# ---------------------------------------------------------------------------------------------
class FabricConstants(BaseModel):
    """Calibrated constants of the fabric closed forms (each a :class:`Quantity` with source and basis)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wavelet_bytes: Quantity
    ramp_latency_cycles: Quantity
    per_kernel_overhead_cycles: Quantity
    gemv_mac_efficiency_frac: Quantity
    gemm_mac_efficiency_frac: Quantity
    gemm_step_overhead_cycles: Quantity
    cross_system_latency_s: Quantity
    _fabric_model: str = PrivateAttr(default="closed_form")

    @property
    def fabric_model(self) -> str:
        """The fabric closed forms these kernel constants were fitted with (the file's ``fabric_model``):
        ``closed_form`` (as written) or ``sim_fit`` (with ``fabric_sim_fit.yaml`` and the colour limit)."""
        return self._fabric_model

    def with_fabric_model(self, fabric_model: str) -> "FabricConstants":
        """A copy declaring ``fabric_model`` (``closed_form`` | ``sim_fit``)."""
        if fabric_model not in ("closed_form", "sim_fit"):
            raise InputError(f"fabric_model: unknown {fabric_model!r}; use closed_form or sim_fit")
        c = self.model_copy()
        c._fabric_model = fabric_model
        return c

    def values(self) -> dict[str, float]:
        """Name -> SI value, for passing as keyword arguments."""
        return {k: getattr(self, k).si for k in type(self).model_fields}


class WseFitStats(BaseModel):
    """Residuals ``rel_error = predicted / measured - 1`` of the measurement fit over a set of rows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: list[str]
    median_abs_rel_error: float
    max_abs_rel_error: float


class WseFitRecord(BaseModel):
    """How the measurement-level constants of ``fabric.yaml`` were fitted (written by
    :func:`wseplan.analytic.wse_fit.fit_wse_overheads`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    fitted: list[str]
    start: dict[str, float]
    in_sample: WseFitStats
    residuals: dict[str, float]
    leave_one_model_out: dict[str, WseFitStats] = {}
    #: fitted constants that ended within 0.1% (in log) of a bound of their prior range, as ``name: low|high``
    at_bound: list[str] = []


class FabricFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int
    fabric_model: Literal["closed_form", "sim_fit"] = "closed_form"
    fitted_on: list[str] = []
    fit: WseFitRecord | None = None
    fabric: FabricConstants


def default_calibration_dir() -> Path:
    """``catalogs/calibration``: the fitted constants of the time models, next to the catalog."""
    return default_catalog_dir() / "calibration"


@lru_cache(maxsize=8)
def _load_fabric(path: str) -> FabricConstants:
    data = read_yaml(Path(path))
    try:
        f = FabricFile.model_validate(data)
        return f.fabric.with_fabric_model(f.fabric_model)
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        raise CatalogError(f"{path}: {loc}: {msg}; fix the calibration file") from None


def load_fabric_constants(path: str | Path | None = None) -> FabricConstants:
    """Read ``catalogs/calibration/fabric.yaml`` (or ``path``) into :class:`FabricConstants`."""
    p = Path(path) if path is not None else default_calibration_dir() / "fabric.yaml"
    if not p.is_file():
        raise CatalogError(f"{p}: fabric calibration file not found; restore catalogs/calibration/fabric.yaml")
    return _load_fabric(str(p))


# ---------------------------------------------------------------------------------------------
# Simulator-fitted constants (catalogs/calibration/fabric_sim_fit.yaml, written by `wseplan calibrate`)
# ---------------------------------------------------------------------------------------------
SIM_FIT_NAMES = ("reduce_stage_cycles", "tree_level_cycles", "tree_level_overlap_frac", "broadcast_overlap_frac")
SIM_FIT_IDENTITY = {name: 0.0 for name in SIM_FIT_NAMES}
SIM_FIT_IDENTITY["tree_model"] = "levels"


class FitStats(BaseModel):
    """Residuals of a fit over a grid: ``rel_error = closed_form / simulator - 1``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_points: int
    median_abs_rel_error: float
    max_abs_rel_error: float
    rms_rel_error: float


class GridInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str
    num_points: int


class FabricSimConstants(BaseModel):
    """Closed-form constants the mesh simulator resolves (contention, pipelining of tree levels, overlap of the
    input stream with the MACs), fitted by :mod:`wseplan.sim.calibrate`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reduce_stage_cycles: Quantity
    tree_level_cycles: Quantity
    tree_level_overlap_frac: Quantity
    broadcast_overlap_frac: Quantity

    def values(self) -> dict[str, float]:
        return {k: getattr(self, k).si for k in type(self).model_fields}


class FabricSimSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    wafer: str
    tree_model: str
    constants: FabricSimConstants
    fit: FitStats
    holdout: FitStats
    grid: GridInfo
    holdout_grid: GridInfo


class FabricSimFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int
    method: str
    targets: dict[str, FabricSimSection]


@lru_cache(maxsize=8)
def _load_fabric_sim(path: str) -> FabricSimFile:
    try:
        return FabricSimFile.model_validate(read_yaml(Path(path)))
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        raise CatalogError(f"{path}: {loc}: {msg}; rerun `wseplan calibrate`") from None


def load_fabric_sim_fit(path: str | Path | None = None) -> FabricSimFile | None:
    """Read ``catalogs/calibration/fabric_sim_fit.yaml`` (or ``path``); None when the default file is absent."""
    p = Path(path) if path is not None else default_calibration_dir() / "fabric_sim_fit.yaml"
    if not p.is_file():
        if path is not None:
            raise CatalogError(f"{p}: fabric simulator-fit file not found; run `wseplan calibrate --out DIR`")
        return None
    return _load_fabric_sim(str(p))


def sim_fit_values(wafer, sim_fit: FabricSimFile | None = None) -> dict[str, float]:
    """Simulator-fitted constants for a catalog wafer (matched by name) [cycles, fractions], with the
    ``tree_model`` they were fitted with; the identity (the closed forms as written, no fitted correction,
    ``tree_model='levels'``) for a wafer the file does not cover."""
    f = sim_fit if sim_fit is not None else load_fabric_sim_fit()
    if f is not None:
        for sec in f.targets.values():
            if sec.wafer == wafer.name:
                return dict(sec.constants.values(), tree_model=_check_tree_model(sec.tree_model))
    return dict(SIM_FIT_IDENTITY)


def _check_tree_model(tree_model: str) -> str:
    if tree_model not in TREE_MODELS:
        raise InputError(f"tree_model: unknown {tree_model!r}; use one of {', '.join(TREE_MODELS)}")
    return tree_model
