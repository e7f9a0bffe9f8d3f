"""The Monte Carlo's model-error factor is sampled in its logarithm (a time 2x too long weighs as 2x too short), and the
training report's run-cost band is the cost record's (third audit: a linear triangle over a log-built range put the
P50 of a CS-3 serving cost 1.5x above its nominal value, and the report's P90 was 3.4x below `cost`'s for one run)."""
from types import SimpleNamespace

import numpy as np
import pytest

from wseplan.analytic.cost.params import Param
from wseplan.analytic.cost.uncertainty import sample_params
from wseplan.compare import compare_case
from wseplan.costing import cost


def _p(log):
    return Param(name="x", value=1.0, low=0.5, high=2.0, source=["t"], basis="estimate", log_scale=log)


def test_log_triangle_median_is_the_value_for_symmetric_factors():
    """Triangle on ln x over [ln 0.5, ln 2] with mode 0: symmetric, median exp(0) = 1. On x itself the median is
    2 - sqrt(1.5 x 1 / 2) = 1.134 (hand: c = 1/3 < 1/2, median = b - sqrt((b - a)(b - m) / 2))."""
    lg = sample_params({"x": _p(True)}, 20000, 1)["x"]
    ln = sample_params({"x": _p(False)}, 20000, 1)["x"]
    assert np.median(lg) == pytest.approx(1.0, abs=0.02)
    assert np.median(ln) == pytest.approx(2 - np.sqrt(0.75), abs=0.02)
    assert lg.min() >= 0.5 and lg.max() <= 2.0


def test_cost_p50_stays_near_the_nominal_value():
    c = cost("llama-3.1-70b", "cs3x4", phase="serve", batch=16, context=2048, output_tokens=256, uncertainty=2000)
    m = next(r for r in c.metrics if r.metric == c.headline_metric)
    assert m.p10 < m.value < m.p90
    assert m.p50 == pytest.approx(m.value, rel=0.15)


def test_training_report_band_is_the_cost_records():
    from wseplan.report.study_training import _run_band

    kw = dict(phase="train", batch=1536, context=2048, train_tokens=300e9, uncertainty=400, seed=11)
    c = cost("gpt-3-175b", "cs3x64", **kw)
    m = next(r for r in c.metrics if r.metric == "usd_per_run")
    from wseplan.analytic.cost import load_prices
    from wseplan.catalog import load_catalog

    cat = load_catalog()
    row, times, params = compare_case("gpt-3-175b", "cs3x64", precision="bf16", output_tokens=None, catalog=cat,
                                      prices=load_prices([], catalog=cat), **kw)
    assert "model_time_factor" in params
    band = _run_band(times, params, SimpleNamespace(cost=SimpleNamespace(uncertainty=400, seed=11)))
    assert band["usd_per_run_p10"] == pytest.approx(m.p10, rel=1e-12)
    assert band["usd_per_run_p90"] == pytest.approx(m.p90, rel=1e-12)


def test_a_triangle_through_two_quantiles():
    """The model error's triangle (mode 0 in the logarithm) through its P10 and P90: a symmetric pair by hand,
    F(q) = (q - a)^2 / ((b - a)(-a)) = 0.1 with a = -b gives b = q / (1 - sqrt(0.2)); a lopsided pair (wafer training's
    x0.738 to x5.96) solved and checked with scipy's own triangular quantiles."""
    import math

    from scipy import stats

    from wseplan.analytic.cost import triangle_through

    a, b = triangle_through(-0.3, 0.3)
    assert b == pytest.approx(0.3 / (1 - math.sqrt(0.2)), rel=1e-9) and a == pytest.approx(-b, rel=1e-9)
    lo, hi = math.log(0.738), math.log(5.96)
    a, b = triangle_through(lo, hi)
    assert stats.triang.ppf(0.1, -a / (b - a), loc=a, scale=b - a) == pytest.approx(lo, rel=1e-9)
    assert stats.triang.ppf(0.9, -a / (b - a), loc=a, scale=b - a) == pytest.approx(hi, rel=1e-9)
    with pytest.raises(ValueError):
        triangle_through(0.1, 0.5)  # both above the mode: no such triangle
