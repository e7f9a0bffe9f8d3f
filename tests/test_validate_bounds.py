"""Rows measured faster than their configuration's ideal run are flagged as physically inconsistent, not fitted
(issue 12, item 1): :mod:`wseplan.validate.bounds`."""
from __future__ import annotations

import dataclasses

import pytest

from wseplan.catalog import load_catalog
from wseplan.validate.bounds import MARGIN, beyond_bound, checkable, ideal_trial
from wseplan.validate.cases import INCONSISTENT, NOT_PREDICTED, Case
from wseplan.validate.fit import read_fit_cases
from wseplan.validate.run import inconsistency, predict_case, summarize, validate_cases

CAT = load_catalog()


def _decode_row(value, rid="R900", metric="tokens_per_s_per_user", notes=""):
    """Llama 2 7B, one user, fp16 on one H100 SXM, 128 cached tokens: a batch-1 decode row."""
    return Case(id=rid, category="gpu-infer", phase="decode", model="Llama 2 7B", metric=metric, value=value,
                unit="tok/s/user", hardware="h100-sxm", quality="strong", source="test harness", notes=notes,
                fields={"n_devices": 1, "tp": 1, "input_len": 128, "concurrency": 1, "precision": "fp16"})


def test_the_ideal_calibration_has_every_efficiency_one_and_every_overhead_zero():
    t = ideal_trial()
    for f in dataclasses.fields(t.cal):
        v = getattr(t.cal, f.name)
        if f.name.endswith("_overhead_frac") or f.name.endswith("_s"):
            assert v == 0.0, f.name
        elif f.name.endswith("_frac") or f.name.startswith("gemm_max_frac"):
            assert v == 1.0, f.name
    assert t.cal.elementwise_vectors_per_token == 0.0 and t.cal.gemm_half_intensity == 0.0
    assert dict(t.profiles)["gpu-production"] == (("allreduce_latency_s", 0.0), ("hbm_frac", 1.0),
                                                   ("layer_launch_s", 0.0), ("step_host_s", 0.0))


def test_batch_one_decode_bound_is_the_weight_read_roofline_by_hand():
    """At batch 1 a decode step reads every weight once, but only one row of the input embedding: Llama 2 7B's
    6,738,415,616 parameters less its 32,000 x 4,096 embedding table, in fp16, over the H100 SXM's 3.35 TB/s is
    3.945 ms, 253.5 tok/s. The ideal run adds only its small KV read and attention, so its bound lies just under
    that roofline."""
    bound = predict_case(_decode_row(1.0), CAT, ideal_trial())
    roofline = 3.35e12 / (2 * (6_738_415_616 - 32_000 * 4_096))
    assert 0.98 * roofline < bound <= roofline


def test_a_row_above_the_bound_is_flagged_and_left_out_of_medians_bands_and_fits(tmp_path):
    bound = predict_case(_decode_row(1.0), CAT, ideal_trial())
    fast = _decode_row(bound * (1 + 3 * MARGIN), "R901")  # faster than any run of its configuration
    ok = _decode_row(bound * 0.7, "R902")                # a real run
    edge = _decode_row(bound * (1 + MARGIN / 2), "R903")  # within the rounding margin
    assert inconsistency(fast, CAT).startswith("physically inconsistent")
    assert inconsistency(ok, CAT) is None and inconsistency(edge, CAT) is None
    recs = {r["id"]: r for r in validate_cases([fast, ok, edge], CAT)}
    assert recs["R901"]["status"] == INCONSISTENT and f"{bound:.4g}" in recs["R901"]["reason"]
    assert recs["R901"]["predicted"] is not None  # predicted and shown, not counted
    assert recs["R902"]["status"] not in (INCONSISTENT, NOT_PREDICTED)
    (s,) = [r for r in summarize(list(recs.values())) if r["quality"] == "strong+medium"]
    assert s["rows"] == 2 and s["predicted"] == 2
    # the fit leaves it out: a CSV with both rows gives the fit only the real one
    import csv

    from wseplan.validate.cases import ALL_COLUMNS
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=ALL_COLUMNS)
        w.writeheader()
        for c in (fast, ok):
            w.writerow({"id": c.id, "category": c.category, "phase": c.phase, "model": c.model, "metric": c.metric,
                        "value": c.value, "unit": c.unit, "hardware": c.hardware, "quality": c.quality,
                        "source": c.source, "notes": c.notes, **c.fields})
    assert [c.id for c in read_fit_cases(path, CAT)] == ["R902"]


@pytest.mark.parametrize("metric, value, bound, flagged", [
    ("ttft_ms", 10.0, 20.0, True),     # a time below the shortest the configuration allows
    ("ttft_ms", 19.8, 20.0, False),    # within the margin
    ("ttft_ms", 30.0, 20.0, False),
    ("tokens_per_s", 30.0, 20.0, True),
    ("tokens_per_s", 20.2, 20.0, False),
    ("tokens_per_s", 10.0, None, False),  # no bound defined
])
def test_the_direction_follows_the_metric(metric, value, bound, flagged):
    assert beyond_bound(_decode_row(value, metric=metric), bound) is flagged


def test_rows_without_a_bound_are_not_checked():
    assert not checkable(_decode_row(1.0, notes="speculative=yes"), CAT)  # any acceptance up to one
    wafer = dataclasses.replace(_decode_row(1.0), hardware="wse3", category="wse-infer")
    assert not checkable(wafer, CAT)
    assert checkable(_decode_row(1.0), CAT)


def test_a_row_with_a_defaulted_input_is_not_checked():
    """The bound is that of the configuration the row states: without a tensor-parallel degree (read from the device
    count by a documented default) the source may have run another layout, so even a value far above is not flagged."""
    bound = predict_case(_decode_row(1.0), CAT, ideal_trial())
    row = _decode_row(bound * 3)
    row = dataclasses.replace(row, fields={k: v for k, v in row.fields.items() if k != "tp"})
    assert inconsistency(row, CAT) is None


def test_the_streamed_validation_flags_by_each_row_s_own_value(tmp_path):
    """`wseplan validate USER.csv` streams rows and memoises predictions by configuration: two rows of one
    configuration share the bound but each is judged by its own measured value."""
    import csv

    from wseplan.validate.cases import ALL_COLUMNS
    from wseplan.validate.run import reference_bands
    from wseplan.validate_stream import Summary, iter_records
    bound = predict_case(_decode_row(1.0), CAT, ideal_trial())
    rows = [_decode_row(bound * 0.7, "R910"), _decode_row(bound * 1.5, "R911"), _decode_row(bound * 0.6, "R912")]
    path = tmp_path / "user.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=ALL_COLUMNS)
        w.writeheader()
        for c in rows:
            w.writerow({"id": c.id, "category": c.category, "phase": c.phase, "model": c.model, "metric": c.metric,
                        "value": c.value, "unit": c.unit, "hardware": c.hardware, "quality": c.quality,
                        "source": c.source, "notes": c.notes, **c.fields})
    recs = list(iter_records(path, CAT, reference_bands(CAT)))
    assert [r["status"] == INCONSISTENT for r in recs] == [False, True, False]
    assert recs[2]["reason"] == "" and recs[1]["reason"].startswith("physically inconsistent")
    s = Summary()
    s.extend(recs)
    (row,) = [r for r in s.rows() if r["quality"] == "strong+medium"]
    assert row["rows"] == 2 and row["predicted"] == 2


def test_a_copied_validation_file_names_both_files_and_the_fix(tmp_path):
    """audit31b M7: a copy of the bundled file, refitted beside it, failed with "row id R001 appears in more than one
    file", naming neither file nor the fix."""
    import shutil

    from wseplan.errors import InputError
    from wseplan.validate.cases import default_cases_path

    mine = tmp_path / "my-validation.csv"
    shutil.copy(default_cases_path(), mine)
    with pytest.raises(InputError) as e:
        read_fit_cases([default_cases_path(), mine])
    msg = str(e.value)
    assert str(mine) in msg and "validation-public.csv" in msg and "new ids" in msg
    # review31 L7: the same file twice is said to be given twice, not to repeat its own ids
    with pytest.raises(InputError, match="given twice"):
        read_fit_cases([mine, tmp_path / "." / "my-validation.csv"])
