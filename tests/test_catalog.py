"""Catalog provenance and schema strictness."""
from pathlib import Path

import pytest
import yaml

from wseplan.catalog import default_catalog_dir, load_catalog
from wseplan.errors import CatalogError

NUMERIC_SECTIONS = ("wafers", "systems", "memoryx", "swarmx", "gpus", "defaults")


def _numeric_leaves(node, path=()):
    """Yield (path, parent mapping) for every number in a YAML tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            if (isinstance(v, (int, float)) and not isinstance(v, bool)) or (k == "value" and isinstance(v, str)):
                yield path + (k,), node
            else:
                yield from _numeric_leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _numeric_leaves(v, path + (i,))


def test_every_number_has_source_and_basis():
    """Every number in the bundled catalogs sits in a mapping with a known source id and a basis."""
    base = default_catalog_dir()
    cat = load_catalog()
    known = set(cat.sources)
    checked = 0
    for p in sorted(base.rglob("*.yaml")):
        if p.parts[-2] in ("calibration", "prices", "validation"):
            continue
        data = yaml.safe_load(p.read_text())
        for sec, body in data.items():
            if sec == "sources":
                continue
            if sec in ("models", "generic_models"):
                for key, entry in body.items():  # model entries: one source/basis covers the architecture
                    ids = entry["source"] if isinstance(entry["source"], list) else [entry["source"]]
                    assert set(ids) <= known, (p, key)
                    assert entry["basis"]
                    checked += 1
                continue
            for path, parent in _numeric_leaves(body, (sec,)):
                if path[-1] in ("low", "high"):
                    continue
                assert path[-1] == "value", f"{p}: bare number at {'.'.join(map(str, path))}"
                ids = parent["source"] if isinstance(parent["source"], list) else [parent["source"]]
                assert ids and set(ids) <= known, f"{p}: {path} cites unknown source {ids}"
                assert parent.get("basis"), f"{p}: {path} has no basis"
                checked += 1
    assert checked > 200


def _write(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "cat"
    d.mkdir(exist_ok=True)
    (d / "extra.yaml").write_text(text)
    return d


GPU_OK = """
gpus:
  mygpu:
    name: My GPU
    vendor: acme
    hbm_bytes: {value: "96 GB", source: wseplan-estimate, basis: estimate, note: test}
    hbm_bandwidth_bytes_per_s: {value: "4 TB/s", source: wseplan-estimate, basis: estimate, note: test}
    dense_peak_flop_per_s: {bf16: {value: "1000 TFLOP/s", source: wseplan-estimate, basis: estimate, note: t}}
    scale_up_bandwidth_bytes_per_s: {value: "450 GB/s", source: wseplan-estimate, basis: estimate, note: t}
    scale_up_domain_gpus: {value: 8, source: wseplan-estimate, basis: estimate, note: t}
    scale_out_bandwidth_bytes_per_s: {value: "400 Gb/s", source: wseplan-estimate, basis: estimate, note: t}
    tdp_w: {value: "700 W", source: wseplan-estimate, basis: estimate, note: t}
    gpus_per_node: {value: 8, source: wseplan-estimate, basis: estimate, note: t}
    node_power_w: {value: "10 kW", source: wseplan-estimate, basis: estimate, note: t}
    node_price_usd: {value: "300000 USD", source: wseplan-estimate, basis: estimate, note: t}
    node_rack_units: {value: 8, source: wseplan-estimate, basis: estimate, note: t}
"""


def test_user_catalog_adds_entry(tmp_path):
    cat = load_catalog([_write(tmp_path, GPU_OK)])
    assert cat.gpus["mygpu"].hbm_bytes.si == 96e9
    assert "h100-sxm" in cat.gpus  # bundled entries stay


@pytest.mark.parametrize("mutation,fragment", [
    (lambda t: t.replace('source: wseplan-estimate, basis: estimate, note: test}', 'basis: estimate, note: test}', 1), "hbm_bytes"),
    (lambda t: t.replace("hbm_bytes:", "hbm_byts:"), "unknown key"),
    (lambda t: t.replace('"96 GB"', '"96 GB/s"'), "field needs bytes"),
    (lambda t: t.replace('"96 GB"', '"-96 GB"'), "negative"),
    (lambda t: t.replace('"96 GB"', '"96 furlongs"'), "unknown unit"),
    (lambda t: t.replace("source: wseplan-estimate, basis: estimate, note: test}", "source: no-such-source, basis: estimate, note: test}", 1), "unknown source id"),
    (lambda t: t.replace("basis: estimate, note: test}", "basis: estimate}", 1), "needs a 'note'"),
    (lambda t: t.replace("gpus:", "gpuz:"), "unknown top-level key"),
    (lambda t: t + "\n  broken: [unclosed\n", "malformed YAML"),
])
def test_bad_catalog_is_one_clear_error(tmp_path, mutation, fragment):
    with pytest.raises(CatalogError) as ei:
        load_catalog([_write(tmp_path, mutation(GPU_OK))])
    msg = str(ei.value)
    assert fragment in msg
    assert "\n" not in msg


def test_sparse_marketing_peak_is_not_the_dense_peak(catalog):
    """125 PF (WSE-3, tomshw-wse3) includes sparsity; the dense FP16 peak is ~15.5 PF on usable PEs."""
    w = catalog.wafers["wse3"]
    dense = w.peak_flop_per_s("fp16")
    assert abs(dense - 883_350 * 16 * 1.1e9) / dense < 1e-12
    assert w.sparse_marketing_peak_flop_per_s.si / dense > 7.5


def test_validation_hardware_keys_are_in_catalog(catalog):
    import csv

    rows = list(csv.DictReader(open(Path(__file__).parents[1] / "tests" / "reference" / "validation_hardware_keys.csv")))
    keys = catalog.hardware_keys()
    for r in rows:
        assert r["key"] in keys, r


@pytest.mark.parametrize("entry_key,aliases", [("h100", []), ("acme-g1", ["h100"])])
def test_a_user_name_that_collides_with_a_bundled_one_is_refused(tmp_path, entry_key, aliases):
    """audit27c F2/F3: a user GPU keyed or aliased 'h100' (a bundled alias of h100-sxm) was listed as loaded while
    every command ran the bundled H100; the catalog refuses the name at load instead."""
    bundled = yaml.safe_load((Path(default_catalog_dir()) / "hardware" / "gpus.yaml").read_text())["gpus"]["h100-sxm"]
    entry = dict(bundled, name="ACME G1", aliases=aliases)
    (tmp_path / "acme.yaml").write_text(yaml.safe_dump({"gpus": {entry_key: entry}}))
    with pytest.raises(CatalogError, match="the name 'h100' is both gpus.h100-sxm and gpus."):
        load_catalog([tmp_path])


def test_pcie_cards_search_the_tensor_parallelism_a_given_layout_runs():
    """Every PCIe card's collectives cross the server's PCIe links (no NVLink bandwidth is counted), so its scale-up
    domain is the server's GPUs, as for L40S and RTX PRO 6000; the H100 PCIe's was its NVLink bridge pair (2), so the
    search never tried TP 4 or 8 while a given --tp 4 ran 21% faster (audit35a M1). The searched decode is now no
    slower than any given TP degree."""
    from wseplan.plan import plan

    cat = load_catalog()
    for key in ("h100-pcie", "l40s", "rtx-pro-6000"):
        g = cat.gpus[key]
        assert g.scale_up_domain_gpus.si == g.gpus_per_node.si == 8
    kw = dict(phase="decode", batch=1, context=2048, catalog=cat)
    searched = plan("llama-3.1-70b", "h100-pciex8", **kw)
    for tp in (2, 4, 8):
        given = plan("llama-3.1-70b", "h100-pciex8", layout={"tp": tp, "pp": 1, "dp": 8 // tp}, **kw)
        assert searched.tpot_s <= given.tpot_s * (1 + 1e-12)
