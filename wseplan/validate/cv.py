"""Cross-validated calibration: leave-one-source-out errors, the model choice they select, the calibration file.

A source's rows are predicted with constants fitted without them (:func:`cross_validate`). The refit for each source
starts from the fit on all rows and keeps that fit's Jacobian: either one bounded Gauss-Newton step of the linearised
penalised problem (``one-step``, seconds) or a few trust-region steps that re-predict the other rows (``chord``, a
minute); the two agree to within half a point at the committed noise level but not at smaller ones, so every
held-out figure (the selection, ``validate --cv source``, the model-error file) uses ``chord`` (:data:`CV_METHOD`).
Model choices (:data:`CHOICES`: how much the priors weigh, which constants are held at their prior, which files are
fitted) are compared by their held-out error (:func:`select_choice`), not by their in-sample error; the chosen one is
recorded in ``catalogs/calibration/gpu_efficiency.yaml`` (``selection``) and reproduced by :func:`refit_and_write`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..calibration_data import GpuCalibration, calibration_path, read_gpu_efficiency
from ..catalog.load import default_catalog_dir, load_catalog
from ..errors import InputError
from .cases import source_key
from .common import Trial
from .fit import Problem, fit_params, read_fit_cases, start_values, trial_from

GPU_CATEGORIES = ("gpu-train", "gpu-infer", "micro")
#: how a source's refit is computed, everywhere a held-out error is reported or compared (the model-choice selection,
#: ``validate --cv source``, the model-error file): ``chord`` (a few trust-region steps that re-predict the other
#: rows). The ``one-step`` linearisation agrees with it for the committed noise level but not for smaller ones, where
#: the rows outweigh the priors and a refit moves the constants far (2026-12-02: noise-0.1 scored 11.1% by one step
#: against 9.2% by chord on the public criterion); one estimator keeps the selection and the reported numbers one
CV_METHOD = "chord"


@dataclass(frozen=True)
class FitChoice:
    """A model choice of the calibration: the expected log-error of one row (``noise``: small lets the rows outweigh
    the priors), the constants held at their prior (``held``: keys of :func:`~.fit.fit_params`) and the validation
    files fitted (names in ``catalogs/validation/``)."""

    name: str
    noise: float
    held: tuple[str, ...] = ()
    files: tuple[str, ...] = ("validation-public.csv", "validation-extra.csv")

    def paths(self) -> list[Path]:
        return [default_catalog_dir() / "validation" / f for f in self.files]


_PROFILE = ("gpu-production.allreduce_latency_s", "gpu-production.layer_launch_s", "gpu-production.step_host_s",
            "gpu-production.hbm_frac")
#: the fixed per-step and per-pass costs (research harness launches, training-step host time, benchmark evaluation)
_OVERHEADS = ("layer_overhead_s", "step_overhead_s", "train_step_overhead_s", "benchmark_eval_overhead_frac")
#: the model choices compared by held-out error
CHOICES = (
    FitChoice("priors-only", 0.1, held=("*",)),
    FitChoice("noise-0.05", 0.05),
    FitChoice("noise-0.1", 0.1),
    FitChoice("noise-0.2", 0.2),
    FitChoice("noise-0.05-profile-held", 0.05, held=_PROFILE),
    FitChoice("noise-0.1-profile-held", 0.1, held=_PROFILE),
    FitChoice("noise-0.2-profile-held", 0.2, held=_PROFILE),
    FitChoice("noise-0.1-overheads-held", 0.1, held=_PROFILE + _OVERHEADS),
    FitChoice("noise-0.1-public-only", 0.1, files=("validation-public.csv",)),
    # the GEMM efficiency curve's shape held at its prior, its levels fitted: for the GEMMs of most rows the half
    # intensity and the largest efficiencies trade against each other (a lower level or a later half-point slow a
    # mid-size GEMM alike), so fitting both lets the rows that pin the levels move the shape that thin GEMMs see
    FitChoice("noise-0.2-intensity-held", 0.2, held=("gemm_half_intensity",)),
)


def choice_named(name: str) -> FitChoice:
    """The model choice of :data:`CHOICES` called ``name``; :class:`InputError` for another name."""
    for c in CHOICES:
        if c.name == name:
            return c
    raise InputError(f"calibration: unknown model choice {name!r}; choose one of {', '.join(c.name for c in CHOICES)}")


def held_keys(choice: FitChoice, params=None) -> tuple[str, ...]:
    """The keys of the constants ``choice`` holds at their prior (``("*",)``: all of them)."""
    return tuple(p.key for p in params or fit_params()) if choice.held == ("*",) else choice.held


def committed_choice(path=None) -> FitChoice:
    """The model choice the committed calibration file records (``noise-0.1`` when it records none)."""
    sel = read_gpu_efficiency(path).selection if Path(path or calibration_path()).is_file() else {}
    return choice_named(sel.get("choice", "noise-0.1"))


def committed_trial(path=None) -> Trial:
    """The committed calibration as a :class:`~.common.Trial`: the file's constants and its fitted profile
    constants."""
    f = read_gpu_efficiency(path)
    cal = GpuCalibration(**{k: float(q.si) for k, q in f.constants.items()})
    prof = tuple((name, tuple((k, float(q.si)) for k, q in sorted(qs.items()))) for name, qs in sorted(f.profiles.items()))
    return Trial(cal, prof)


def cross_validate(cases_paths=None, *, catalog=None, choice: FitChoice | None = None, start=None, refit: bool = False,
                   max_nfev: int = 5, fit_nfev: int = 30, method: str = CV_METHOD) -> dict:
    """In-sample and leave-one-source-out predictions of every fit row of ``cases_paths`` (default: the choice's
    files).

    The full-data constants are ``start`` (default: the committed calibration) or, with ``refit``, a fit of the
    choice on all rows from the priors (``fit_nfev`` steps). Each source is then refitted without its rows and
    predicted: ``method="chord"`` runs ``max_nfev`` steps of the penalised fit over the other rows with the full-data
    Jacobian held fixed; ``"one-step"`` takes the single bounded Gauss-Newton step of the linearised problem (no
    re-prediction of the other rows: seconds instead of a minute). Returns ``{"rows": [per-row dicts: id, category, source,
    measured, in_sample, held_out], "values": full-data constants, "seconds": wall time}``.
    """
    t0 = time.perf_counter()
    cat = catalog or load_catalog()
    choice = choice or committed_choice()
    params = fit_params(cat)
    held = held_keys(choice, params)
    cases = read_fit_cases(cases_paths or choice.paths(), cat)
    base = GpuCalibration()
    x_start = None if refit else start_values(params, start or committed_trial())
    prob = Problem(cases, cat, params, base, noise=choice.noise, held=held, x0=x_start, probe=refit)
    x_full = prob.solve(max_nfev=fit_nfev) if refit else prob.x0
    in_log = prob.log_pred(x_full)
    held_log = np.full(len(prob.cases), np.nan)
    srcs = np.array([source_key(c) for c in prob.cases])
    trials = {}
    if prob.free:
        u = np.log(x_full[prob.free])
        J = prob.jacobian(u, np.arange(len(prob.cases)))
        for s in sorted(set(srcs)):
            test = np.flatnonzero(srcs == s)
            train = np.flatnonzero(srcs != s)
            x_s = prob.linear_step(u, J, train, in_log) if method == "one-step" else \
                prob.solve(train, u_start=u, jac=J, max_nfev=max_nfev)
            held_log[test] = prob.log_pred(x_s, test)
            trials[str(s)] = trial_from(params, x_s, base)
    else:
        held_log = in_log.copy()
    rows = [{"id": c.id, "category": c.category, "source": str(s), "measured": c.value,
             "in_sample": float(math.exp(a)), "held_out": float(math.exp(b))}
            for c, s, a, b in zip(prob.cases, srcs, in_log, held_log)]
    return {"rows": rows, "values": {p.key: float(v) for p, v in zip(params, x_full)},
            "at_bound": prob.at_bound(x_full), "fitted_on": [c.id for c in prob.cases], "trials": trials,
            "full": trial_from(params, x_full, base), "seconds": time.perf_counter() - t0}


def category_medians(rows: list[dict], key: str) -> dict[str, float]:
    """Median |predicted/measured - 1| per category of the per-row dicts of :func:`cross_validate`."""
    out = {}
    for cat in sorted({r["category"] for r in rows}):
        e = [abs(r[key] / r["measured"] - 1.0) for r in rows if r["category"] == cat]
        out[cat] = float(np.median(e))
    return out


def choice_score(rows: list[dict], public_ids: set[str]) -> float:
    """The selection criterion: the mean over GPU categories of the held-out median |error| on the public rows (the
    set every choice predicts)."""
    med = category_medians([r for r in rows if r["id"] in public_ids], "held_out")
    return float(np.mean([med[c] for c in GPU_CATEGORIES if c in med]))


def select_choice(*, catalog=None, choices=CHOICES, max_nfev: int = 5, fit_nfev: int = 30, log=print) -> dict:
    """Fit and cross-validate every choice; the one with the lowest :func:`choice_score` wins. Returns
    ``{"choice": name, "scores": {name: score}, "medians": {name: {"in_sample": .., "held_out": ..}}, "results":
    {name: cross_validate result}}``."""
    cat = catalog or load_catalog()
    public = {c.id for c in read_fit_cases(None, cat)}
    scores, medians, results = {}, {}, {}
    for ch in choices:
        res = cross_validate(catalog=cat, choice=ch, refit=True, max_nfev=max_nfev, fit_nfev=fit_nfev)
        pub = [r for r in res["rows"] if r["id"] in public]
        scores[ch.name] = round(choice_score(res["rows"], public), 4)
        medians[ch.name] = {"in_sample": {k: round(v, 4) for k, v in category_medians(pub, "in_sample").items()},
                            "held_out": {k: round(v, 4) for k, v in category_medians(pub, "held_out").items()}}
        results[ch.name] = res
        log(f"{ch.name}: score {scores[ch.name]} {medians[ch.name]} ({res['seconds']:.0f} s)")
    best = min(scores, key=lambda k: (scores[k], k))
    return {"choice": best, "scores": scores, "medians": medians, "results": results}
