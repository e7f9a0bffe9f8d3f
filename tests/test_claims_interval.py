"""A claim is judged against the held-out prediction interval of its own estimate: the interval the plan record
carries (and ``wseplan time`` prints), from catalogs/calibration/model_error.yaml, widened outside the validated
envelope; one implementation of "how wrong can the estimate be" for planning and for claims."""
import pytest

from wseplan.claims import Claim, check_claim, validated_errors
from wseplan.model_error import load_model_error, speed_bounds
from wseplan.plan import plan


def _claim(value, **kw):
    base = dict(id="c", text="t", kind="tokens_per_s_per_user", model="llama-3-8b", target="h100-sxmx1", batch=1,
                context=1024, precision="bf16")
    return Claim(**{**base, **kw, "value": value})


def test_claim_band_is_the_plan_records_interval(catalog):
    # a training rate: far from every hard bound, so only the estimate and its interval decide
    kw = dict(kind="tokens_per_s", phase="train", target="h100-sxmx8", batch=64, context=2048)
    r = plan("llama-3-8b", "h100-sxmx8", phase="train", precision="bf16", batch=64, context=2048, catalog=catalog)
    assert r.interval_metric == "step_s"
    hi = r.step_s / r.interval_low  # true speed / predicted speed at the fast end of the 80% interval
    assert hi > 1.0
    est = 64 * 2048 / r.step_s
    inside = check_claim(_claim(est * hi * 0.99, **kw), catalog)
    beyond = check_claim(_claim(est * hi * 1.01, **kw), catalog)
    assert inside.verdict == "consistent" and beyond.verdict == "optimistic"
    assert inside.error_frac == pytest.approx(hi - 1.0, rel=1e-9) == beyond.error_frac
    assert r.interval_note in beyond.reason


def test_inside_the_envelope_the_band_is_the_categorys(catalog):
    # Llama 3 8B on one H100 lies inside the gpu-infer envelope: no widening, the category's own upper quantile
    f = load_model_error()
    q = f.categories["gpu-infer"].quantiles
    lo, hi, note = speed_bounds("gpu-infer", params_b=8.03, devices=1, hardware="h100-sxm")
    assert hi == pytest.approx(2.718281828459045 ** (-q["p10"]), rel=1e-12) and "widened" not in note
    assert validated_errors(catalog)["gpu-infer"][0] == pytest.approx(hi - 1.0, rel=1e-12)
    v = check_claim(_claim(1e-9), catalog)  # far below the estimate
    # the claim is judged with the interval of its plan record, run with the production profile: that profile's own
    # band where it has one (audit33d M1), else the category's
    sub = f.categories["gpu-infer"].by_software.get("gpu-production")
    hi_p = 2.718281828459045 ** (-(sub.quantiles if sub is not None else q)["p10"])
    assert v.verdict == "consistent" and v.error_frac == pytest.approx(hi_p - 1.0, rel=1e-9)


def test_outside_the_envelope_the_band_widens_and_says_why(catalog):
    # a 405B model on 22 CS-3: model size, device count and hardware all outside the wafer rows (8-13B, one WSE-2)
    kw = dict(model="llama-3.1-405b", target="cs3x22", context=8192)
    est = check_claim(_claim(1.0, **kw), catalog).estimate
    v = check_claim(_claim(est * 1.05, **kw), catalog)
    inside = speed_bounds("wse-infer")[1] - 1.0
    assert v.error_frac is not None and v.error_frac > inside
    assert "widened" in v.reason and "outside" in v.reason


def test_an_inference_profile_no_validated_row_ran_widens_the_interval(tmp_path):
    """The wafer rows were all predicted with the research profile: a production-profile prediction lies outside the
    validated envelope in one more dimension, and its log-interval grows by the log of one software release's spread
    (3.5 in catalogs/calibration/interval_widening.yaml: Cerebras' 70B service August -> October 2024), half on each
    side."""
    from wseplan import model_error as ME

    f = ME.load_model_error()
    env = f.categories["wse-infer"].envelope
    assert env.software == ["wafer-research"]
    assert f.categories["gpu-train"].envelope.software == []  # training: not checked
    kw = dict(params_b=float(env.params_b[0]), devices=int(env.devices[0]), hardware=env.hardware[0])
    lo0, hi0, note0 = ME.speed_bounds("wse-infer", software="wafer-research", **kw)
    lo1, hi1, note1 = ME.speed_bounds("wse-infer", software="wafer-production", **kw)
    assert "software wafer-production not validated" in note1 and "software" not in note0
    import math
    assert math.log(hi1 / lo1) == pytest.approx(math.log(hi0 / lo0) + math.log(3.5), rel=1e-9)
    assert math.log(hi1 / hi0) == pytest.approx(0.5 * math.log(3.5), rel=1e-9)
    assert "one software release (3.5x across the interval)" in note1
    assert ME.widening() == (1.5, 3.5)
    # with another dimension outside too, that dimension widens by 1.5 and the release spread is added
    lo2, hi2, _ = ME.speed_bounds("wse-infer", software="wafer-production", **dict(kw, hardware="wse3"))
    assert math.log(hi2 / lo2) == pytest.approx(1.5 * math.log(hi0 / lo0) + math.log(3.5), rel=1e-9)
    # a GPU training prediction does not care which serving profile it names
    a = ME.speed_bounds("gpu-train", software="gpu-production")
    b = ME.speed_bounds("gpu-train", software="anything")
    assert a == b


def test_interval_widening_file_errors(tmp_path, monkeypatch):
    """A bad widening file is a one-line CatalogError naming the file and field."""
    from wseplan import model_error as ME
    from wseplan.errors import CatalogError

    p = tmp_path / "w.yaml"
    p.write_text("interval_widening:\n  per_dimension_factor: {value: 0.5, source: x, basis: measured}\n"
                 "  software_release_spread: {value: 3.5, source: x, basis: measured}\n")
    with pytest.raises(CatalogError, match="per_dimension_factor: must be at least 1"):
        ME._widening(str(p))
    p.write_text("nothing: 1\n")
    with pytest.raises(CatalogError, match="must hold an 'interval_widening' mapping"):
        ME._widening(str(p))
