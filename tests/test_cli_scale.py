"""`wseplan scale`: what its efficiency column means where it passes 100%."""
from __future__ import annotations

import json

from wseplan.cli import main


def test_scale_says_why_an_efficiency_passes_100_percent(capsys):
    """audit31a L3: `scale` printed B200 at 106.5% efficiency with nothing to say why; a buyer reads superlinear
    scaling. A note names the memory-starved baseline whenever a row passes 100% (and only then)."""
    assert main(["scale", "llama-70b", "--targets", "h100,b200", "--max-systems", "8", "--batch", "1024", "-c", "4096",
                 "-f", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows if isinstance(rows, list) else rows["rows"]
    above = {r["target"] for r in rows if (r["efficiency_frac"] or 0) > 1.0}
    assert above
    assert all(r["schema_version"] == 1 for r in rows)  # every record carries one (audit33c L7)
    assert main(["scale", "llama-70b", "--targets", "h100,b200", "--max-systems", "8", "--batch", "1024", "-c",
                 "4096"]) == 0
    notes = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note: efficiency above 100%")]
    assert len(notes) == 1 and all(t in notes[0] for t in above)


def test_scale_and_stream_carry_times_interval(capsys):
    """audit33d H2: `scale` rows and `stream` give the step's interval as `time --phase train` does for the same
    question (one interval per question)."""
    from wseplan.plan import plan
    from wseplan.timing import stream

    assert main(["scale", "llama-70b", "--targets", "cs3", "--max-systems", "2", "--batch", "1024", "-c", "4096",
                 "-f", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows if isinstance(rows, list) else rows["rows"]
    for r in rows:
        t = plan("llama-70b", f"cs3x{r['num_systems']}", phase="train", batch=1024, context=4096)
        assert r["step_s"] == t.step_s and (r["step_low_s"], r["step_high_s"]) == (t.interval_low, t.interval_high)
        assert r["step_low_s"] < r["step_s"] < r["step_high_s"]
    s = stream("gpt3-175b", "cs3x4")
    t = plan("gpt3-175b", "cs3x4", phase="train", batch=s.batch, context=s.context)
    assert s.step_s == t.step_s and (s.interval_low, s.interval_high) == (t.interval_low, t.interval_high)
