"""The MemoryX optimizer update: a group of DDR5 server nodes, each updating its shard of the Adam state.

Before: one aggregate 600 GB/s with no mechanism behind it put a floor of ~12.9 days under GPT-3 at any cluster size
(the update, not the weight stream, bound every cluster of 128 CS-3 and more)."""
from pathlib import Path

import pytest
import yaml

from wseplan.catalog import load_catalog
from wseplan.timing import stream


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_update_rate_is_nodes_times_sustained_node_bandwidth(cat):
    """12 nodes (ALCF's MemoryX groups) x 230 GB/s (8 DDR5-4800 channels = 8 x 38.4 = 307.2 GB/s peak, at 75%)."""
    mx = cat.memoryx["memoryx-cs3"]
    peak_per_node = 8 * 4800e6 * 8  # channels x transfers/s x 8 B per transfer
    assert peak_per_node == pytest.approx(307.2e9)
    assert mx.node_update_bandwidth_bytes_per_s.si == pytest.approx(0.75 * peak_per_node, rel=0.01)
    assert mx.update_bytes_per_s() == pytest.approx(12 * 230e9)
    # the flash tier slows the update as it slows the stream (75 of 150 GB/s)
    assert mx.update_bytes_per_s(dram=False) == pytest.approx(12 * 230e9 * 75 / 150)


def test_gpt3_floor_is_the_weight_stream_not_the_update(cat):
    """GPT-3 on 1,024 CS-3 (2 sequences each): each system receives every weight twice per step (forward and
    backward) at 150 GB/s, 2 x 175e9 x 2 B / 150e9 = 4.67 s; the gradients leave at 75 Gparam/s while 12 nodes update
    2.76e12 / 32 B = 86 Gparam/s, so only the last gradient's update (the first layer) is exposed."""
    r = stream("gpt-3-175b", "cs3x1024", batch=2048, context=2048, catalog=cat)
    assert r.fits
    floor = 2 * 175e9 * 2 / 150e9
    assert r.step_s >= floor * 0.99
    assert r.step_s == pytest.approx(floor, rel=0.03)
    assert r.bottleneck == "weight_stream"
    assert r.optimizer_exposed_s < 0.05  # one layer's update: 1.8e9 params x 32 B / 2.76e12 B/s = 21 ms
    total_update = 175e9 * 32 / 2.76e12
    assert r.optimizer_exposed_s < total_update / 20


def test_a_slower_memoryx_exposes_the_update(cat, tmp_path):
    """A site with one MemoryX node (a `--catalog` override) updates 12x slower: 175e9 x 32 B / 230 GB/s = 24.3 s of
    update against a 2.3 s backward pass, so about 22 s is exposed on every step."""
    bundled = yaml.safe_load((Path(__file__).parents[1] / "catalogs/hardware/systems.yaml").read_text())
    entry = dict(bundled["memoryx"]["memoryx-cs3"])
    entry["update_nodes"] = {"value": 1, "source": "mine", "basis": "user"}
    (tmp_path / "mx.yaml").write_text(yaml.safe_dump({"memoryx": {"memoryx-cs3": entry}}))
    mine = load_catalog([tmp_path])
    assert mine.memoryx["memoryx-cs3"].update_bytes_per_s() == pytest.approx(230e9)
    base = stream("gpt-3-175b", "cs3x1024", batch=2048, context=2048, catalog=cat)
    slow = stream("gpt-3-175b", "cs3x1024", batch=2048, context=2048, catalog=mine)
    update = 175e9 * 32 / 230e9
    assert slow.optimizer_exposed_s == pytest.approx(update - 2 * 175e9 / 150e9, rel=0.05)
    assert slow.bottleneck == "optimizer"
    assert slow.step_s > base.step_s + 15


def test_scaling_goes_past_the_old_floor(cat):
    """Strong scaling of GPT-3 at 1,536 sequences: 256 CS-3 are faster than 64 (the old update floor made them equal
    at 11.7 s per step)."""
    s64 = stream("gpt-3-175b", "cs3x64", batch=1536, context=2048, catalog=cat)
    s256 = stream("gpt-3-175b", "cs3x256", batch=1536, context=2048, catalog=cat)
    assert s256.step_s < 0.6 * s64.step_s
