"""Every fitted GPU constant stands for a mechanism with a sourced prior; the fit is penalised least squares within the
prior ranges (issue 12, item 1).

The list below is the reference: a constant the fit starts to fit without appearing here (with its prior), or a prior
that loses its mechanism, range or source, fails.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from wseplan.calibration_data import read_gpu_efficiency, read_gpu_priors
from wseplan.catalog import load_catalog
from wseplan.validate import fit_params
from wseplan.validate.common import Trial
from wseplan.validate.fit import Param, Problem, trial_from

SOURCES = set(yaml.safe_load(open(__import__("wseplan.catalog.load", fromlist=["x"]).default_catalog_dir()
                                  / "sources.yaml"))["sources"])

#: every fitted constant: (prior value, low, high) in SI units, as catalogs/calibration/gpu_priors.yaml and the
#: gpu-production profile (catalogs/software/profiles.yaml) state them
EXPECTED = {
    "gemm_max_frac_16bit": (0.80, 0.50, 0.87),
    "gemm_max_frac_8bit": (0.72, 0.45, 0.78),
    "gemm_max_frac_4bit": (0.70, 0.40, 0.80),
    "gemm_half_intensity": (60, 15, 250),
    "gemm_ridge_exponent": (2, 1, 8),
    "attention_frac": (0.50, 0.30, 0.75),
    "hbm_frac": (0.80, 0.65, 0.92),
    "elementwise_vectors_per_token": (17, 4, 40),
    "nvlink_frac": (0.75, 0.60, 0.85),
    "network_frac": (0.70, 0.30, 0.85),
    "nvlink_latency_s": (8e-6, 2e-6, 30e-6),
    "network_latency_s": (20e-6, 5e-6, 60e-6),
    "tp_overlap_frac": (0.50, 0.10, 0.90),
    "dp_overlap_frac": (0.70, 0.30, 1.0),
    "zero3_overlap_frac": (0.50, 0.10, 1.0),
    "lowp_training_overhead_frac": (0.20, 0.02, 0.80),
    "vector_attention_frac": (0.25, 0.05, 0.8),
    "layer_overhead_s": (100e-6, 10e-6, 1.2e-3),
    "step_overhead_s": (1e-3, 0.1e-3, 10e-3),
    "train_step_overhead_s": (0.1, 0.01, 1.0),
    "benchmark_eval_overhead_frac": (0.03, 0.005, 0.15),
    "gpu-production.allreduce_latency_s": (6e-6, 3e-6, 13e-6),
    "gpu-production.layer_launch_s": (12e-6, 5e-6, 30e-6),
    "gpu-production.step_host_s": (0.5e-3, 0.1e-3, 2e-3),
    "gpu-production.hbm_frac": (0.80, 0.65, 0.92),
}


@pytest.fixture(scope="module")
def params():
    return fit_params(load_catalog())


def test_every_fitted_constant_is_listed_with_its_prior(params):
    got = {p.key: (p.value, p.low, p.high) for p in params}
    assert set(got) == set(EXPECTED), "a fitted constant was added or dropped: list it here with its prior"
    for k, (v, lo, hi) in EXPECTED.items():
        assert got[k] == pytest.approx((v, lo, hi), rel=1e-9), k


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_each_prior_has_a_mechanism_a_range_and_sources(params, key):
    p = next(p for p in params if p.key == key)
    assert len(p.mechanism) > 20, f"{key}: no mechanism"
    assert 0 < p.low < p.high and p.low <= p.value <= p.high, f"{key}: no prior range"
    assert p.source and all(s in SOURCES for s in p.source), f"{key}: sources {p.source} not in catalogs/sources.yaml"
    assert set(p.source) != {"wseplan-estimate"}, f"{key}: a prior needs a public source, not only an estimate"


def test_the_legacy_fixed_overheads_are_not_fitted_for_the_production_engine(params):
    keys = {p.key for p in params}
    assert "gpu-production.layer_overhead_s" not in keys and "gpu-production.step_overhead_s" not in keys
    # they are held at 0 in the production profile: only the research profile (WaferLLM's GPU baselines) uses them
    prof = {p.profile for p in params if p.constant in ("layer_overhead_s", "step_overhead_s")}
    assert prof == {None}


def test_prior_residual_is_log_distance_in_half_widths():
    """Hand calculation: prior 0.8 in [0.65, 0.92]: at the high bound z = 2, at the low bound z = -2; halfway in log
    z = +-1."""
    p = Param("x", "x", None, 0.8, 0.65, 0.92, ("s",), "m")
    assert p.z(0.92) == pytest.approx(2.0) and p.z(0.65) == pytest.approx(-2.0) and p.z(0.8) == 0.0
    assert p.z(math.sqrt(0.8 * 0.92)) == pytest.approx(1.0)
    assert p.dz(0.9) == pytest.approx(2.0 / math.log(0.92 / 0.8))


def test_committed_calibration_lies_within_the_priors_and_reports_its_bounds(params):
    f = read_gpu_efficiency()
    held = set(f.selection.get("held", []))
    at = set(f.at_bound)
    for p in params:
        v = f.constants[p.key].si if p.profile is None else f.profiles.get(p.profile, {}).get(p.constant)
        if v is None:
            assert p.key in held, f"{p.key}: neither fitted nor held"
            continue
        v = v if not hasattr(v, "si") else v.si
        assert p.low * (1 - 1e-6) <= v <= p.high * (1 + 1e-6), f"{p.key} = {v} outside its prior range"
        near = abs(math.log(v / p.low)) < 1e-3 or abs(math.log(p.high / v)) < 1e-3
        assert near == any(a.startswith(p.key + ":") for a in at), f"{p.key}: at_bound does not report it"
    assert f.selection.get("choice"), "the model choice is recorded"


def test_priors_file_names_only_calibration_constants():
    pri = read_gpu_priors()
    assert set(pri) == {k for k in EXPECTED if "." not in k}


def test_penalised_fit_without_data_weight_stays_at_the_prior():
    """With a huge row noise the rows carry no weight: the penalised fit returns the prior values; with the
    constants all held it is the prior by construction."""
    from wseplan.calibration_data import GpuCalibration
    from wseplan.validate import default_cases_path, read_cases
    from wseplan.validate.fit import fit_cases

    cat = load_catalog()
    ps = fit_params(cat)
    rows = [c for c in fit_cases(read_cases(default_cases_path())) if c.id in ("R013", "R120", "R126")]
    prob = Problem(rows, cat, ps, GpuCalibration(), noise=1e6, probe=False)
    x = prob.solve(max_nfev=3)
    assert np.allclose(x, prob.prior_x, rtol=1e-3)
    held = Problem(rows, cat, ps, GpuCalibration(), noise=0.1, held=tuple(p.key for p in ps), probe=False)
    assert np.array_equal(held.solve(), held.prior_x)
    t = trial_from(ps, prob.prior_x, GpuCalibration())
    assert isinstance(t, Trial) and t.overrides("gpu-production")["layer_launch_s"] == pytest.approx(12e-6)
