"""Cross-validated selection (issue 12, item 2): leave-one-source-out refits, the ``--cv source`` report, and the
model choice recorded with the calibration."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from wseplan.calibration_data import read_gpu_efficiency
from wseplan.cli import main
from wseplan.validate import (CHOICES, cross_validate, cross_validated_summary, default_cases_path, read_cases,
                              source_key)
from wseplan.validate.cv import choice_named

PUBLIC = default_cases_path()


def _subset(tmp_path, ids):
    """A validation file of the public rows ``ids`` (same header)."""
    with open(PUBLIC, newline="") as fh:
        rows = list(csv.DictReader(fh))
    p = tmp_path / "subset.csv"
    with open(p, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            if r["id"] in ids:
                w.writerow(r)
    return p


def test_leave_one_source_out_refits_without_the_source(tmp_path):
    """Three sources: each source's rows are predicted by constants fitted on the other two. The held-out prediction
    differs from the in-sample one (the refit moved), and an all-held choice (the priors alone) predicts held out
    exactly as in sample: nothing was fitted, so nothing can be left out."""
    ids = {"R013", "R014", "R120", "R121", "R126", "R127", "R267", "R268"}
    p = _subset(tmp_path, ids)
    srcs = {source_key(c) for c in read_cases(p)}
    assert len(srcs) >= 3
    res = cross_validate([p], choice=choice_named("noise-0.1"), max_nfev=2)
    assert {r["id"] for r in res["rows"]} <= ids and set(res["trials"]) == srcs
    assert any(abs(r["held_out"] / r["in_sample"] - 1) > 1e-4 for r in res["rows"])
    prior = cross_validate([p], choice=choice_named("priors-only"), max_nfev=2)
    assert all(r["held_out"] == pytest.approx(r["in_sample"]) for r in prior["rows"])


def test_cv_summary_counts_coverage_and_both_medians():
    recs = [{"category": "gpu-infer", "quality": "medium", "rel_error": 0.1, "held_out_rel_error": -0.3, "defaulted": []},
            {"category": "gpu-infer", "quality": "strong", "rel_error": -0.2, "held_out_rel_error": 0.2,
             "defaulted": ["tp"]},
            {"category": "gpu-infer", "quality": "strong", "rel_error": None, "held_out_rel_error": None, "defaulted": []},
            {"category": "gpu-infer", "quality": "weak", "rel_error": 5.0, "held_out_rel_error": 5.0, "defaulted": []}]
    (s,) = cross_validated_summary(recs)
    assert (s["rows"], s["predicted"], s["defaulted"]) == (3, 2, 1) and s["coverage_frac"] == pytest.approx(2 / 3)
    assert s["median_abs_rel_error_in_sample"] == pytest.approx(0.15)
    assert s["median_abs_rel_error_held_out"] == pytest.approx(0.25)


def test_cli_cv_source_prints_held_out_beside_in_sample(monkeypatch, capsys):
    """The command wires the held-out predictions into every row and the per-category table (the refits themselves
    are stubbed here: a held-out value 10% above the in-sample one)."""
    import wseplan.validate.intervals as V

    def fake(path, catalog=None, max_nfev=5):
        from wseplan.validate import validate_file

        return {"rows": {r["id"]: {"in_sample": r["predicted"], "held_out": r["predicted"] * 1.1}
                         for r in validate_file(path, catalog) if r["predicted"] is not None}, "seconds": 0.0}

    monkeypatch.setattr(V, "held_out", fake)
    assert main(["validate", str(PUBLIC), "--cv", "source", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cats = {c["category"]: c for c in out["cross_validation"]["categories"]}
    assert {"gpu-train", "gpu-infer", "wse-infer", "micro"} <= set(cats)
    for r in out["rows"]:
        if r["predicted"] is not None:
            assert r["held_out_predicted"] == pytest.approx(r["predicted"] * 1.1)
    assert cats["gpu-infer"]["coverage_frac"] >= 0.95
    assert main(["validate", str(PUBLIC), "--cv", "folds"]) == 2


def test_the_committed_model_choice_was_selected_by_held_out_error():
    """The calibration records the score of every choice; the committed one has the lowest (ties by name)."""
    sel = read_gpu_efficiency().selection
    scores = sel["scores"]
    assert set(scores) == {c.name for c in CHOICES}
    best = min(scores, key=lambda k: (scores[k], k))
    assert sel["choice"] == best
    assert sel["medians"][best]["held_out"]["gpu-train"] >= sel["medians"][best]["in_sample"]["gpu-train"] - 0.02
    assert np.isfinite(list(scores.values())).all()
