"""Held-out error bands of `wseplan check` (wseplan.claims.bands): the arithmetic by hand, and the committed table
catalogs/calibration/heldout_bands.yaml against its inputs."""
from __future__ import annotations

import pytest

from wseplan.claims import validated_errors
from wseplan.claims.bands import (PERCENTILE, combine, file_fingerprint, fingerprint, heldout_bands, in_sample_bands,
                                  stored_loso)
from wseplan.validate import default_cases_path, validate_file

IN_SAMPLE = {"gpu-train": (0.2, 62), "gpu-infer": (0.5, 89), "wse-infer": (0.08, 20)}
#: leave-one-source-out rows as wseplan.validate.leave_one_source_out returns them (per source)
LOSO = [
    {"source": "A", "category": "gpu-train", "rows": 30, "median_abs_rel_error_in_sample": 0.1,
     "median_abs_rel_error_held_out": 0.2},
    {"source": "B", "category": "gpu-train", "rows": 10, "median_abs_rel_error_in_sample": 0.1,
     "median_abs_rel_error_held_out": 0.1},
    {"source": "C", "category": "gpu-infer,micro", "rows": 40, "median_abs_rel_error_in_sample": 0.2,
     "median_abs_rel_error_held_out": 0.3},
    {"source": "D", "category": "gpu-infer", "rows": 5, "median_abs_rel_error_in_sample": 0.1,
     "median_abs_rel_error_held_out": None},
]


def test_inflation_by_hand():
    b = combine(IN_SAMPLE, LOSO)
    # gpu-train: (30 x 0.2 + 10 x 0.1) / (30 x 0.1 + 10 x 0.1) = 7 / 4 = 1.75 -> 0.2 x 1.75 = 0.35
    assert b["gpu-train"].inflation == pytest.approx(1.75) and b["gpu-train"].heldout_frac == pytest.approx(0.35)
    # gpu-infer: source C only (D has no held-out median): 0.3 / 0.2 = 1.5 -> 0.75
    assert b["gpu-infer"].inflation == pytest.approx(1.5) and b["gpu-infer"].heldout_frac == pytest.approx(0.75)
    # wse-infer: no source of its own; pooled (6 + 1 + 12) / (3 + 1 + 8) = 19 / 12
    assert b["wse-infer"].inflation == pytest.approx(19 / 12)
    assert b["wse-infer"].heldout_frac == pytest.approx(0.08 * 19 / 12)
    assert "pooled" in b["wse-infer"].basis


def test_a_band_is_never_narrower_than_in_sample():
    rows = [dict(LOSO[0], median_abs_rel_error_held_out=0.05)]  # held out better than in sample (noise)
    b = combine({"gpu-train": (0.2, 62)}, rows)
    assert b["gpu-train"].inflation == pytest.approx(0.5) and b["gpu-train"].heldout_frac == pytest.approx(0.2)


def test_per_row_held_out_records_give_their_percentile():
    """If leave-one-source-out returns one record per held-out row, the band is its P80 directly."""
    rows = [{"category": "gpu-train", "quality": "strong", "rel_error": e} for e in (0.1, -0.2, 0.3, -0.4, 0.5)]
    b = combine({"gpu-train": (0.2, 5)}, rows)
    # P80 of |e| = 0.1, 0.2, 0.3, 0.4, 0.5 (linear interpolation): 0.42
    assert b["gpu-train"].heldout_frac == pytest.approx(0.42) and b["gpu-train"].inflation == pytest.approx(2.1)


def test_committed_bands_are_up_to_date(catalog):
    """The table was computed from the current validation set and calibration files (fingerprint), and its
    in-sample percentiles are what the current models give (so a change to the time models shows here too).
    Regenerate: python -c 'from wseplan.claims.bands import write_heldout_bands; write_heldout_bands()'."""
    assert file_fingerprint() == fingerprint(), "inputs changed: regenerate catalogs/calibration/heldout_bands.yaml"
    now = in_sample_bands(validate_file(default_cases_path(), catalog))
    committed = heldout_bands()
    assert set(committed) == set(now)
    again = combine(now, stored_loso())  # the stored leave-one-source-out rows give the committed bands
    for k, (band, n) in now.items():
        assert committed[k].in_sample_frac == pytest.approx(band, rel=1e-5), k
        assert committed[k].rows == n
        assert committed[k].heldout_frac >= committed[k].in_sample_frac
        assert committed[k].heldout_frac == pytest.approx(band * max(committed[k].inflation, 1.0), rel=1e-5)
        assert committed[k].heldout_frac == pytest.approx(again[k].heldout_frac, rel=1e-5)
        assert committed[k].basis == again[k].basis


def test_committed_bands_by_hand():
    """gpu-train from the six training sources of the stored leave-one-source-out table: sum(rows x held-out median)
    / sum(rows x in-sample median) is the inflation; the band is the in-sample P80 times it."""
    rows = [r for r in stored_loso() if r["category"] == "gpu-train"]
    assert len(rows) >= 5
    infl = (sum(r["rows"] * r["median_abs_rel_error_held_out"] for r in rows)
            / sum(r["rows"] * r["median_abs_rel_error_in_sample"] for r in rows))
    b = heldout_bands()["gpu-train"]
    assert b.inflation == pytest.approx(infl, rel=1e-5) and infl > 1
    assert b.heldout_frac == pytest.approx(b.in_sample_frac * infl, rel=1e-5)


def test_claims_use_the_held_out_band(catalog):
    errs = validated_errors(catalog)
    for k, b in heldout_bands().items():
        assert errs[k][0] == b.heldout_frac and f"P{PERCENTILE}" in errs[k][1] and k in errs[k][1]
        assert ("held out" in errs[k][1]) == (not b.basis.startswith("no held-out"))
