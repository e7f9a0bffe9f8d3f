"""The vectorized wafer path gives the numbers the per-candidate code gave (issue 14 item 1).

``tests/data/wafer_vector_fixture.json`` was written by ``tests/data/make_wafer_vector_fixture.py`` from the code
before the wafer evaluation was vectorized: fabric kernels, :func:`wseplan.plan.evaluate` arrays and
:func:`wseplan.plan.plan` records for models x wafer targets x phases x batches x contexts (and software/option
variants), and two replica searches. This test recomputes the same dictionary with the current code and holds
every number to it within a relative 1e-12 (strings, booleans and integers exactly, NaN to NaN). See the
generator's docstring for how (and when) to regenerate the fixture.
"""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
RTOL = 1e-12
#: record fields that are not wafer physics: the prediction interval comes from the cross-validated model-error file
#: (``catalogs/calibration/model_error.yaml``), which changes with every GPU refit, and was added after the fixture
NOT_PHYSICS = ("interval_low", "interval_high", "interval_metric", "interval_note")


def _generator():
    spec = importlib.util.spec_from_file_location("make_wafer_vector_fixture", DATA / "make_wafer_vector_fixture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _diff(a, b, path: str, out: list, limit: int = 20) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        a, b = ({k: v for k, v in d.items() if k not in NOT_PHYSICS} for d in (a, b))
        if set(a) != set(b):
            out.append(f"{path}: keys differ: only expected {sorted(set(a) - set(b))[:5]}, only got {sorted(set(b) - set(a))[:5]}")
            return
        for k in a:
            _diff(a[k], b[k], f"{path}.{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} expected, {len(b)} got")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out, limit)
    elif isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        if a != b:
            out.append(f"{path}: expected {a!r}, got {b!r}")
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if a != b and not (math.isnan(a) and math.isnan(b)) and abs(a - b) > RTOL * max(abs(a), abs(b)):
            out.append(f"{path}: expected {a!r}, got {b!r} (relative {abs(a - b) / max(abs(a), abs(b)):.2e})")
    elif a != b:
        out.append(f"{path}: expected {a!r}, got {b!r}")


@pytest.fixture(scope="module")
def recorded_and_now(catalog):
    gen = _generator()
    expected = json.loads(gen.FIXTURE.read_text())
    return expected, json.loads(json.dumps(gen.compute(catalog)))


@pytest.mark.parametrize("section", ["kernels", "evaluate", "plan", "serve"])
def test_wafer_numbers_unchanged(recorded_and_now, section):
    expected, now = recorded_and_now
    diffs: list[str] = []
    _diff(expected[section], now[section], section, diffs)
    assert not diffs, "\n".join(diffs)


def test_comparison_catches_a_change():
    """The comparison itself fails on a relative change above 1e-12 and on a changed choice."""
    diffs: list[str] = []
    _diff({"x": [1.0, 2.0]}, {"x": [1.0, 2.0 * (1 + 1e-11)]}, "t", diffs)
    _diff({"grid": "377x377"}, {"grid": "390x390"}, "t", diffs)
    _diff({"y": 1.0}, {"y": 1.0 + 1e-13}, "t", diffs)
    assert len(diffs) == 2
