"""`wseplan catalog show` reaches every catalog entry a number comes from (audit20 F4): the CS-3 system (its own key
and alias show the system, not its wafer), MemoryX, SwarmX and the software profiles, each number with its source and
basis; a user's model entry with basis `user` may cite free text."""
from __future__ import annotations

import json

import pytest

from wseplan.catalog import load_catalog
from wseplan.cli import main


def show(capsys, name, *extra):
    capsys.readouterr()
    assert main(["catalog", "show", name, "-f", "json", *extra]) == 0
    return {r["field"]: r for r in json.loads(capsys.readouterr().out)}


@pytest.mark.parametrize("name", ["cs3", "cs-3"])
def test_system_names_show_the_system(capsys, name):
    rows = show(capsys, name)
    sysm = load_catalog().systems["cs3"]
    assert rows["name"]["value"] == sysm.name and rows["wafer"]["value"] == "wse3"
    assert rows["power_w"]["si"] == sysm.power_w.si and rows["power_w"]["source"] and rows["power_w"]["basis"]


def test_memoryx_swarmx_and_software_profiles_are_shown_with_sources(capsys):
    mx = show(capsys, "memoryx-cs3")
    cat = load_catalog()
    entry = cat.memoryx["memoryx-cs3"]
    assert mx["update_nodes"]["si"] == entry.update_nodes.si and mx["update_nodes"]["source"]
    assert any(k.startswith("capacity_options_bytes.") for k in mx)
    sw = show(capsys, "swarmx")
    assert all(r["source"] for r in sw.values() if r["si"] is not None)
    prof = show(capsys, "wafer-production")
    assert prof["engine.token_budget"]["si"] == 2048 and prof["engine.token_budget"]["source"]
    assert show(capsys, "wse3")["name"]["value"].startswith("Cerebras WSE-3")  # the wafer by its own key


def test_user_model_may_cite_free_text(tmp_path, capsys):
    (tmp_path / "m.yaml").write_text(
        "models:\n  tiny:\n    name: Tiny\n    source: my own measurement\n    basis: user\n    num_layers: 2\n"
        "    d_model: 128\n    num_heads: 4\n    num_kv_heads: 4\n    d_ff: 512\n    gated_mlp: true\n    vocab_size: 1000\n"
        "    tied_embeddings: true\n")
    cat = load_catalog(extra_dirs=[str(tmp_path)])
    assert cat.models["tiny"].source == "my own measurement"
    assert main(["fit", "tiny", "--target", "h100", "--catalog", str(tmp_path), "-f", "json"]) == 0
    # a catalog entry (basis official, estimate ...) still cites known source ids
    (tmp_path / "m.yaml").write_text((tmp_path / "m.yaml").read_text().replace("basis: user", "basis: estimate"))
    from wseplan.errors import CatalogError
    with pytest.raises(CatalogError, match="unknown source id"):
        load_catalog(extra_dirs=[str(tmp_path)])
