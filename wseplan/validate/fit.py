"""Calibration of the GPU efficiency constants on the validation rows: penalised least squares with priors.

Every fitted constant stands for one mechanism with a prior (``catalogs/calibration/gpu_priors.yaml`` for the
calibration file's constants, ``catalogs/software/profiles.yaml`` for the production engine's mechanism constants):
its likely value ``x0`` and physical range ``[low, high]``. The fit minimises

    sum_rows rho(log(predicted / measured) / noise)  +  sum_constants ((log x - log x0) / w)^2

within the hard bounds ``[low, high]``, with ``rho`` the soft-L1 loss (quadratic for small errors, linear for rows the
model cannot represent), ``noise`` the expected log-error of one row (a model choice, see :mod:`.cv`) and ``w`` half
the log-distance from ``x0`` to the bound on that side. Constants a model choice holds stay at ``x0``. The fit is
deterministic: same rows, same priors, same result.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..calibration_data import GpuCalibration, bound_side, prior_z, read_gpu_priors
from ..catalog.load import load_catalog
from ..catalog.software import resolve_software
from ..errors import InputError
from .cases import NOT_TIMED, Case, SkipRow, default_cases_path, read_cases, source_key
from .common import GPU_INFER_PROFILE, Trial
from .defaults import fill_defaults
from .run import inconsistency, predict_case

GPU_CATEGORIES = ("gpu-train", "gpu-infer", "micro")
#: the soft-L1 transition, in units of the row noise
ROBUST_SCALE = 1.0
#: forward-difference step of the Jacobian, in log units of a constant
FD_STEP = 0.02


@dataclass(frozen=True)
class Param:
    """One fitted constant with its prior. ``profile`` is None for a constant of the calibration file, else the
    software profile whose mechanism constant it is (``key`` is then ``profile.constant``)."""

    key: str
    constant: str
    profile: str | None
    value: float
    low: float
    high: float
    source: tuple[str, ...]
    mechanism: str

    def z(self, x: float) -> float:
        """The prior residual of value ``x``: log-distance from the prior value in half-widths to the bound."""
        return prior_z(self.value, self.low, self.high, x)

    def dz(self, x: float) -> float:
        b = self.high if x >= self.value else self.low
        w = abs(math.log(b / self.value)) / 2.0
        return 0.0 if w == 0 else 1.0 / w


@dataclass(frozen=True)
class CalibrationFit:
    """The result of :func:`fit_gpu_efficiency`."""

    trial: Trial
    values: dict
    fitted_on: list
    at_bound: list
    median_abs_rel_error: float
    held: tuple
    noise: float


def fit_params(catalog=None) -> list[Param]:
    """The fitted constants and their priors: those of ``gpu_priors.yaml``, then the mechanism constants of the
    production GPU profile that state a range (``low``/``high``). Constants without a range are not fitted (the
    production profile's legacy ``layer_overhead_s``/``step_overhead_s`` are 0 and stay so)."""
    out = [Param(k, k, None, q.si, q.bound("low"), q.bound("high"), tuple(q.source_ids), q.mechanism)
           for k, q in read_gpu_priors().items()]
    prof = resolve_software(GPU_INFER_PROFILE, "gpu", catalog or load_catalog())
    for k, q in prof.constants.items():
        if q.low is not None and q.high is not None and q.bound("low") < q.bound("high"):
            out.append(Param(f"{prof.name}.{k}", k, prof.name, q.si, q.bound("low"), q.bound("high"),
                             tuple(q.source_ids), q.note or ""))
    return out


def fit_cases(cases: list[Case]) -> list[Case]:
    """Rows a GPU calibration may use: strong or medium GPU rows (not wafers) of a performance metric."""
    return [c for c in cases if c.category in GPU_CATEGORIES and not c.hardware.startswith("wse")
            and c.quality in ("strong", "medium") and c.metric not in NOT_TIMED]


def read_fit_cases(paths, catalog=None) -> list[Case]:
    """The fit rows of one validation file or several (ids must not repeat across files): :func:`fit_cases` that
    need no documented default (a defaulted row's error is partly the default's)."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths or [default_cases_path()])
    cat = catalog or load_catalog()
    out, seen = [], {}
    named = {}
    for p in paths:
        real = Path(p).resolve()
        if real in named:  # review31 L7: one file given twice is not a copy of another
            raise InputError(f"cases: {p} is given twice (as {named[real]}); give each validation file once")
        named[real] = p
        for c in fit_cases(read_cases(p)):
            try:
                if fill_defaults(c, cat)[1] or inconsistency(c, cat):
                    continue  # defaulted, or beyond what its configuration allows (flagged, not fitted)
            except (SkipRow, InputError):
                continue
            if c.id in seen:  # audit31b M7: a copy of a bundled file named neither file nor the fix
                raise InputError(f"cases: {p} repeats row id {c.id} of {seen[c.id]} (the fit reads both); give the "
                                 "rows of your file new ids, or pass the bundled file itself")
            seen[c.id] = p
            out.append(c)
    return out


def trial_from(params: list[Param], x, base: GpuCalibration) -> Trial:
    """The trial calibration of constant values ``x`` (linear, one per param) over ``base``."""
    cal_kw, prof_kw = {}, {}
    for p, v in zip(params, x):
        if p.profile is None:
            cal_kw[p.constant] = float(v)
        else:
            prof_kw.setdefault(p.profile, []).append((p.constant, float(v)))
    return Trial(base.replace(**cal_kw), tuple((k, tuple(v)) for k, v in sorted(prof_kw.items())))


class Problem:
    """The penalised least-squares problem of a set of rows: prediction, residuals, a sparse Jacobian.

    A row's prediction depends on few constants (training rows not on the engine's launch gaps, fp16 rows not on the
    fp8 GEMM efficiency): which ones is probed once (each constant set to both bounds), and the Jacobian re-predicts
    only the rows a constant moves."""

    def __init__(self, cases: list[Case], catalog, params: list[Param], base: GpuCalibration, *, noise: float,
                 held: tuple[str, ...] = (), x0=None, probe: bool = True):
        self.catalog, self.params, self.base, self.noise = catalog, params, base, float(noise)
        self.prior_x = np.array([p.value for p in params])
        self.x0 = np.array(self.prior_x if x0 is None else x0, dtype=float)
        self.free = [i for i, p in enumerate(params) if p.key not in held]
        trial = trial_from(params, self.x0, base)
        self.cases, base_pred = [], []
        for c in cases:
            try:
                v = predict_case(c, catalog, trial)
            except (SkipRow, InputError):
                continue
            if math.isfinite(v) and v > 0:
                self.cases.append(c)
                base_pred.append(v)
        self.log_meas = np.log([c.value for c in self.cases])
        self.dep = np.zeros((len(self.cases), len(params)), dtype=bool)
        if probe:
            self._probe(np.log(base_pred))
        else:  # a single Jacobian is cheaper dense than probed
            self.dep[:] = True

    # -- prediction ------------------------------------------------------------------------------------------
    def full_x(self, u_free) -> np.ndarray:
        x = self.x0.copy()
        x[self.free] = np.exp(u_free)
        return x

    def log_pred(self, x, rows=None) -> np.ndarray:
        """log(predicted) of ``rows`` (indices; all by default) at constant values ``x``; a row that stops
        predicting counts as its measurement (residual 0)."""
        trial = trial_from(self.params, x, self.base)
        rows = range(len(self.cases)) if rows is None else rows
        out = np.empty(len(rows))
        for j, i in enumerate(rows):
            c = self.cases[i]
            try:
                v = predict_case(c, self.catalog, trial)
                out[j] = math.log(v) if math.isfinite(v) and v > 0 else self.log_meas[i]
            except (SkipRow, InputError):
                out[j] = self.log_meas[i]
        return out

    def _probe(self, base_log):
        for k, p in enumerate(self.params):
            if k not in self.free:
                continue
            for b in (p.low, p.high):
                x = self.x0.copy()
                x[k] = b
                self.dep[:, k] |= np.abs(self.log_pred(x) - base_log) > 1e-12

    # -- residuals -------------------------------------------------------------------------------------------
    def data_resid(self, log_pred, rows) -> np.ndarray:
        z = (log_pred - self.log_meas[rows]) / self.noise
        return np.sign(z) * np.sqrt(2.0 * ROBUST_SCALE ** 2 * (np.sqrt(1.0 + (z / ROBUST_SCALE) ** 2) - 1.0))

    def prior_resid(self, x) -> np.ndarray:
        return np.array([self.params[k].z(x[k]) for k in self.free])

    def resid(self, u_free, rows) -> np.ndarray:
        x = self.full_x(u_free)
        return np.concatenate([self.data_resid(self.log_pred(x, rows), rows), self.prior_resid(x)])

    def jacobian(self, u_free, rows) -> np.ndarray:
        """d resid / d log(constant), forward differences on the rows each constant moves (backward at a bound)."""
        x = self.full_x(u_free)
        rows = np.asarray(rows)
        base = self.data_resid(self.log_pred(x, rows), rows)
        J = np.zeros((len(rows) + len(self.free), len(self.free)))
        for j, k in enumerate(self.free):
            p = self.params[k]
            h = FD_STEP if math.log(x[k]) + FD_STEP <= math.log(p.high) else -FD_STEP
            sel = np.flatnonzero(self.dep[rows, k])
            if len(sel):
                xk = x.copy()
                xk[k] = x[k] * math.exp(h)
                J[sel, j] = (self.data_resid(self.log_pred(xk, rows[sel]), rows[sel]) - base[sel]) / h
            J[len(rows) + j, j] = p.dz(x[k])
        return J

    # -- solving ---------------------------------------------------------------------------------------------
    def solve(self, rows=None, *, u_start=None, max_nfev: int = 40, jac=None):
        """Minimise over ``rows`` (all by default) from ``u_start`` (the log of the start values of the free
        constants). ``jac``: a fixed Jacobian of all rows at the start (the chord method of the cross-validation)
        instead of re-differentiating each step. Returns the constant values (all params)."""
        from scipy.optimize import least_squares

        rows = np.arange(len(self.cases)) if rows is None else np.asarray(rows)
        lo = np.log([self.params[k].low for k in self.free])
        hi = np.log([self.params[k].high for k in self.free])
        u0 = np.clip(np.log(self.x0[self.free]) if u_start is None else u_start, lo, hi)
        if not self.free:
            return self.x0.copy()
        if jac is None:
            jfun = lambda u: self.jacobian(u, rows)  # noqa: E731
        else:
            fixed = np.vstack([jac[rows], jac[len(self.cases):]])

            def jfun(u):
                J = fixed.copy()
                x = self.full_x(u)
                for j, k in enumerate(self.free):
                    J[len(rows) + j, j] = self.params[k].dz(x[k])
                return J
        res = least_squares(lambda u: self.resid(u, rows), u0, jac=jfun, bounds=(lo, hi), method="trf",
                            max_nfev=max_nfev, x_scale=1.0)
        return self.full_x(res.x)

    def linear_step(self, u_free, J, rows, base_log) -> np.ndarray:
        """One bounded Gauss-Newton step from ``u_free`` over ``rows`` with the Jacobian ``J`` of all rows (the
        one-step approximation of a refit): the linearised penalised problem solved exactly
        (``scipy.optimize.lsq_linear``) within the prior ranges. ``base_log``: log predictions of all rows at
        ``u_free``. Returns the constant values (all params)."""
        from scipy.optimize import lsq_linear

        rows = np.asarray(rows)
        x = self.full_x(u_free)
        lo = np.log([self.params[k].low for k in self.free]) - u_free
        hi = np.log([self.params[k].high for k in self.free]) - u_free
        n = len(self.cases)
        A = np.vstack([J[rows], J[n:]])
        for j, k in enumerate(self.free):
            A[len(rows) + j, j] = self.params[k].dz(x[k])
        b = -np.concatenate([self.data_resid(base_log[rows], rows), self.prior_resid(x)])
        du = lsq_linear(A, b, bounds=(np.minimum(lo, 0.0), np.maximum(hi, 0.0)), method="bvls").x
        return self.full_x(u_free + du)

    def at_bound(self, x, rel: float = 1e-3) -> list[str]:
        """Free constants within ``rel`` (in log) of a bound of their prior range, as ``name: low|high``."""
        sides = {k: bound_side(x[k], self.params[k].low, self.params[k].high, rel) for k in self.free}
        return [f"{self.params[k].key}: {side}" for k, side in sides.items() if side]


def fit_gpu_efficiency(cases_path=None, *, exclude_sources: tuple[str, ...] = (), catalog=None, max_nfev: int = 40,
                       start=None, noise: float = 0.1, held: tuple[str, ...] = ()) -> CalibrationFit:
    """Fit the constants of :func:`fit_params` to the strong/medium GPU rows of ``cases_path`` (one file or a list;
    default the bundled public set) that predict, rows of ``exclude_sources`` left out, with the priors as
    regularisation (module docstring). Starts from the prior values (or from ``start``, a :class:`Trial` or
    :class:`GpuCalibration`); ``held`` constants stay at their prior. Returns a :class:`CalibrationFit`."""
    cat = catalog or load_catalog()
    params = fit_params(cat)
    cases = [c for c in read_fit_cases(cases_path, cat) if source_key(c) not in exclude_sources]
    base = GpuCalibration()
    x0 = None if start is None else start_values(params, start)
    prob = Problem(cases, cat, params, base, noise=noise, held=held, x0=x0)
    x = prob.solve(max_nfev=max_nfev)
    err = np.abs(np.exp(prob.log_pred(x) - prob.log_meas) - 1.0)
    return CalibrationFit(trial=trial_from(params, x, base), values={p.key: float(v) for p, v in zip(params, x)},
                          fitted_on=[c.id for c in prob.cases], at_bound=prob.at_bound(x),
                          median_abs_rel_error=float(np.median(err)) if len(err) else float("nan"),
                          held=tuple(held), noise=noise)


def start_values(params: list[Param], start) -> np.ndarray:
    """Values of ``params`` in a :class:`Trial` (or :class:`GpuCalibration`), clipped into their ranges."""
    trial = start if isinstance(start, Trial) else Trial(start)
    out = []
    for p in params:
        v = getattr(trial.cal, p.constant) if p.profile is None else trial.overrides(p.profile).get(p.constant, p.value)
        out.append(min(max(float(v), p.low), p.high))
    return np.array(out)
