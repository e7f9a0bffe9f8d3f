"""Validation times a measured training run only on a layout the memory model holds (audit23 F5): where the row does
not state its recompute policy and the default (selective) does not fit its stated layout, the run used what fits,
the planner's fastest recompute, never a layout `wseplan time` would refuse. Row R727 (Megatron-Bridge, Llama 3.1 405B
on 256 GB200, tp 4 pp 16 vpp 4, measured 60.46 s per iteration) was timed at 64.8 s on a layout needing more memory
than a GB200 has; it is now timed at the feasible layout (slower than measured: NVIDIA's run recomputes part of the
layers or offloads activations to Grace memory, which the model does not have yet)."""
from __future__ import annotations

import pytest

import wseplan.validate.gpu as vg
from wseplan.validate.cases import read_cases
from wseplan.validate.run import predict_case


def test_a_row_whose_default_recompute_does_not_fit_is_timed_where_it_fits(catalog, monkeypatch):
    case = next(c for c in read_cases("catalogs/validation/validation-extra.csv") if c.id == "R727")
    assert not case.fields.get("recompute")
    seen = []
    orig = vg.predict_time

    def spy(*a, **k):
        r = orig(*a, **k)
        seen.append(r)
        return r

    monkeypatch.setattr(vg, "predict_time", spy)
    got = predict_case(case, catalog)
    first, used = seen[0], seen[-1]
    assert not first.fits and first.layout["recompute"] == "selective"  # the default the row does not state
    assert used.fits and used.layout["recompute"] != "selective"
    lay = used.layout
    assert (lay["tensor_parallel"], lay["pipeline_parallel"], lay["virtual_pipeline"]) == (4, 16, 4)  # the stated ones
    assert got == pytest.approx(used.step_s, rel=1e-12)  # time_per_iter_s is the step
    assert got > first.step_s
