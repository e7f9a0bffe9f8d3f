"""docs/validation.md's table of fitted GPU constants states the values the calibration ships (audit27c F1: after a
refit the table still gave the earlier fit, e.g. dp_overlap_frac 0.714 where 0.905 shipped)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _shown(name: str, v: float) -> str:
    """The table's format: 3 significant digits; a time in us, ms or s."""
    if name.endswith("_s"):
        if v < 1e-3:
            return f"{v * 1e6:.3g} us"
        if v < 1e-2:
            return f"{v * 1e3:.3g} ms"
        return f"{v:.3g} s"
    return f"{v:.3g}"


def test_the_fitted_column_is_the_shipped_calibration():
    d = yaml.safe_load((ROOT / "catalogs" / "calibration" / "gpu_efficiency.yaml").read_text())["gpu_efficiency"]
    vals = {k: v["value"] for k, v in d["constants"].items()}
    vals.update({f"gpu-production.{k}": v["value"] for k, v in d["profiles"]["gpu-production"].items()})
    rows = 0
    for ln in (ROOT / "docs" / "validation.md").read_text().splitlines():
        m = re.match(r"^\| `([a-z0-9_.\-]+)`", ln)
        cells = ln.split("|")
        if m and m.group(1) in vals and len(cells) >= 8 and cells[5].strip().startswith("fitted"):
            rows += 1
            assert cells[4].strip().split(" (")[0] == _shown(m.group(1), vals[m.group(1)]), ln
    assert rows >= 20  # the table is still there
