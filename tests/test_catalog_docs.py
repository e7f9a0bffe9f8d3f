"""Every worked example of docs/catalogs.md validates against its schema and runs through wseplan."""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from wseplan.cli import main
from wseplan.report.schemas import json_schema

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "catalogs.md").read_text()
BLOCKS = {m.group(1): (m.group(2), m.group(0).split("\n", 2)[2].rsplit("```", 1)[0])
          for m in re.finditer(r"```yaml\n# (\w+): ([\w.-]+)\n.*?```", DOC, re.S)}


def test_every_kind_has_an_example():
    assert set(BLOCKS) == {"hardware", "model", "price", "study", "demand", "sweep", "claims"}


@pytest.mark.parametrize("kind", sorted(BLOCKS))
def test_example_validates_against_its_schema(kind):
    _, text = BLOCKS[kind]
    errors = list(jsonschema.Draft202012Validator(json_schema(kind)).iter_errors(yaml.safe_load(text)))
    assert not errors, errors[0].message


@pytest.fixture()
def files(tmp_path):
    out = {}
    for kind, (name, text) in BLOCKS.items():
        folder = tmp_path / ("catalog" if kind in ("hardware", "model") else "inputs")
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(text)
        out[kind] = folder / name
    return out


def test_hardware_and_model_examples_run(files, capsys):
    cat = str(files["hardware"].parent)
    assert main(["fit", "my-13b", "--target", "acme-g1x8", "--catalog", cat, "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["model"] == "My-13B" and rec["hardware"] == "acme-g1" and rec["fits"] is True
    assert main(["cost", "my-13b", "--target", "acme-g1x8", "--catalog", cat, "--format", "json"]) == 0
    params = {p["name"]: p for p in json.loads(capsys.readouterr().out)["params"]}
    assert params["capex_usd"]["value"] == 280000 and params["capex_usd"]["basis"] == "quote"


def test_price_example_runs(files, capsys):
    assert main(["cost", "llama-3.1-70b", "--target", "cs3x4", "--prices", str(files["price"]), "-f", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    params = {p["name"]: p for p in rec["params"]}
    assert params["capex_usd"]["value"] == 2100000 and params["capex_usd"]["source"] == ["vendor quote, 2026-11"]
    assert params["electricity_usd_per_kwh"]["value"] == 0.07 and rec["provenance"]["prices_date"] == "2026-12"


def test_study_demand_sweep_claims_examples_load(files):
    from wseplan.claims import load_claims
    from wseplan.optimize.fleet import read_demand
    from wseplan.report.study import load_study
    from wseplan.sweep import load_sweep

    study, _ = load_study(files["study"])
    assert study.date == "2026-12-01" and study.serving.demand_tokens_per_s == 20000
    assert read_demand(files["demand"]).constraints.power_cap_w == 500e3
    assert load_sweep(files["sweep"]).targets == ["cs3", "h100-sxmx8"]
    assert load_claims(files["claims"])[0].value == 5000


def test_claims_example_checks(files, capsys):
    assert main(["check", str(files["claims"]), "--format", "json"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)
    assert rec["verdict"] == "impossible"  # 5,000 tokens/s per user on one H100 beats the HBM bandwidth bound
