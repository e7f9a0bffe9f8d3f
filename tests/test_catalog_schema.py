"""`wseplan catalog schema KIND` and user-written files (issue 13, item 7).

The JSON Schemas come from the pydantic models that read the files; every shipped catalog, prices, study,
demand, sweep and claims file must validate against the schema of its kind, and a misspelt key must not.
A user's prices file with a free-text source (basis quote or user) works end to end.
"""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from wseplan.cli import main
from wseplan.report.schemas import KINDS, json_schema

ROOT = Path(__file__).resolve().parents[1]
CATALOGS = ROOT / "catalogs"
STUDIES = ROOT / "studies"


def _kind_of_study_file(path: Path) -> str:
    data = yaml.safe_load(path.read_text())
    if "claims" in data and isinstance(data["claims"], list):
        return "claims"
    if "workloads" in data:
        return "demand"
    if "kind" in data:
        return "study"
    return "sweep"


SHIPPED = (
    [(p, "hardware") for p in sorted((CATALOGS / "hardware").glob("*.yaml"))]
    + [(p, "model") for p in sorted((CATALOGS / "models").glob("*.yaml"))]
    + [(CATALOGS / "sources.yaml", "sources"), (CATALOGS / "defaults.yaml", "defaults")]
    + [(p, "price") for p in sorted((CATALOGS / "prices").glob("*.yaml"))]
    + [(p, _kind_of_study_file(p)) for p in sorted(STUDIES.glob("*.yaml"))]
)


def _validator(kind: str):
    schema = json_schema(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_every_kind_has_a_file():
    kinds = {k for _, k in SHIPPED}
    assert kinds >= {"hardware", "model", "sources", "defaults", "price", "study", "demand", "sweep", "claims"}


@pytest.mark.parametrize("path, kind", SHIPPED, ids=[f"{p.name}:{k}" for p, k in SHIPPED])
def test_shipped_file_validates(path, kind):
    data = yaml.safe_load(path.read_text())
    errors = sorted(_validator(kind).iter_errors(data), key=str)
    assert not errors, f"{path.name}: {errors[0].message} at {list(errors[0].absolute_path)}"
    if kind in ("hardware", "model", "sources", "defaults"):
        assert not list(_validator("catalog").iter_errors(data))


@pytest.mark.parametrize("kind, path, mutate", [
    ("hardware", CATALOGS / "hardware" / "gpus.yaml", lambda d: d["gpus"]["h100-sxm"].update(hbm_byte={"value": 1})),
    ("model", CATALOGS / "models" / "transformers.yaml", lambda d: d.update(modelz={})),
    ("price", CATALOGS / "prices" / "prices-2026-11.yaml", lambda d: d["site"]["pue"].update(basis="guess")),
    ("study", STUDIES / "serve-llama3-70b.yaml", lambda d: d.update(kind="serve")),
    ("sweep", STUDIES / "sweep-example.yaml", lambda d: d.update(batch=[1])),
])
def test_a_misspelt_file_fails_its_schema(kind, path, mutate):
    data = yaml.safe_load(path.read_text())
    mutate(data)
    assert list(_validator(kind).iter_errors(data))


def test_cli_prints_the_schema(capsys):
    for kind in KINDS:
        assert main(["catalog", "schema", kind]) == 0
        schema = json.loads(capsys.readouterr().out)
        assert schema["title"] == f"wseplan {kind} file"
        jsonschema.Draft202012Validator.check_schema(schema)
    assert main(["catalog", "schema", "hardwares"]) == 2
    assert "did you mean" in capsys.readouterr().err.lower()


QUOTE = """\
date: "2026-12"
hardware:
  tpu-v5p:
    capex_usd: {value: 250000, source: "vendor quote, 2026-11", basis: quote}
    network_frac: {value: 0.1, source: "our network team", basis: user, low: 0.08, high: 0.12}
site:
  electricity_usd_per_kwh: {value: 0.07, source: "utility contract 2026", basis: user}
"""


def test_user_prices_with_a_free_text_source(tmp_path, capsys):
    """A TPU v5p has no price in the catalog (refused); a quote file prices it, its free-text source shows, and
    the record states the quote file's date."""
    assert main(["cost", "llama-3-8b", "--target", "tpu-v5p"]) == 2
    err = capsys.readouterr().err
    assert "gpus.tpu-v5p.node_price_usd" in err and "hardware.tpu-v5p.capex_usd" in err and err.count("\n") == 1
    p = tmp_path / "quotes.yaml"
    p.write_text(QUOTE)
    data = yaml.safe_load(QUOTE)
    assert not list(_validator("price").iter_errors(data))
    assert main(["cost", "llama-3-8b", "--target", "tpu-v5p", "--prices", str(p), "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    params = {q["name"]: q for q in rec["params"]}
    assert params["capex_usd"]["value"] == 250000 and params["capex_usd"]["source"] == ["vendor quote, 2026-11"]
    assert params["capex_usd"]["basis"] == "quote" and params["electricity_usd_per_kwh"]["value"] == 0.07
    assert rec["provenance"]["prices_date"] == "2026-12"
    assert main(["catalog", "list", "prices", "--prices", str(p), "--format", "json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["hardware.tpu-v5p.capex_usd"]["source"] == "vendor quote, 2026-11"
    assert rows["hardware.tpu-v5p.capex_usd"]["basis"] == "quote"
    # an unknown id without basis user/quote is still refused, with the way out named
    p.write_text(QUOTE.replace("basis: quote", "basis: third-party"))
    assert main(["cost", "llama-3-8b", "--target", "tpu-v5p", "--prices", str(p)]) == 2
    assert "basis user or quote" in capsys.readouterr().err


def test_catalog_list_prices_table(capsys):
    assert main(["catalog", "list", "prices"]) == 0
    out = capsys.readouterr().out
    assert "hardware.cs3.capex_usd" in out and "$" in out
    assert main(["catalog", "list", "hardware", "--prices", "x.yaml"]) == 2


def test_catalog_list_software_names_every_profile_and_one_default_per_family(capsys):
    """`wseplan catalog list software`: the names `--software` takes, with each family's default marked."""
    import json

    from wseplan.catalog import load_catalog
    from wseplan.catalog.software import load_software

    assert main(["catalog", "list", "software", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    profiles = load_software(load_catalog())
    assert sorted(r["key"] for r in rows) == sorted(profiles)
    defaults = [r["key"] for r in rows if "default" in r["aliases"].split(", ")]
    assert sorted(defaults) == ["gpu-production", "wafer-production"]
    trt = next(r for r in rows if r["key"] == "gpu-production-trtllm")
    assert "calibrated as gpu-production" in trt["aliases"] and "family gpu" in trt["aliases"]


@pytest.mark.parametrize("low,high,value,msg", [(6, 4, 5, "low 6 is above high 4"),
                                                (1, 4, 5, "value 5 lies outside its range"),
                                                (6, 9, 5, "value 5 lies outside its range")])
def test_a_quantity_range_must_hold_its_value(low, high, value, msg):
    """audit27 (open question): a user catalog quantity with low > high had its range dropped, and one with its value
    outside [low, high] had the range clipped, without a word; the Monte Carlo then sampled something else."""
    from pydantic import ValidationError

    from wseplan.catalog.schema import Quantity

    with pytest.raises(ValidationError, match=msg):
        Quantity(value=value, low=low, high=high, source="wseplan-estimate", basis="estimate", note="n")
    assert Quantity(value=5, low=4, high=6, source="wseplan-estimate", basis="estimate", note="n").bound("low") == 4


def test_a_zero_outside_its_range_is_refused_as_not_positive():
    """review27 #12: the range check skipped a value of 0, so a fraction ranged [0.1, 0.2] took 0."""
    from pydantic import ValidationError

    from wseplan.catalog.schema import Quantity

    with pytest.raises(ValidationError, match="value 0 must be positive"):
        Quantity(value=0, low=0.1, high=0.2, source="wseplan-estimate", basis="estimate", note="n")
