"""A device family added from outside wseplan (issue 10): one module, its catalog YAML, its prices — no other edit.

The toy family below lives in the test's temporary folder: ``toyfam.py`` subclasses
:class:`wseplan.devices.base.Family` (with :class:`wseplan.devices.inference.InferenceMixin`, so prefill, decode and
serving come from its forward pass through the one serving engine), declares its catalog entry schema (kind
``toy``) and registers itself. A catalog folder adds a ``devices:`` entry, its source and a default software
profile; a prices file adds its capex. With ``WSEPLAN_PLUGINS`` naming the module, ``fit``, ``time`` and
``cost`` answer for it through the Python API and the command line, and the numbers equal a hand calculation.
Nothing outside the temporary folder is written, and nothing of the plug-in outlives the test.

The toy's physics (documented in its module): weights ``P x bytes`` split evenly over the devices of a replica,
the KV cache ``2 x layers x kv_heads x head_dim x bytes`` per token likewise; a forward pass is a roofline,
``max(2 P tokens / (D peak), (weights + KV read) / (D bandwidth))``; the fewest devices (powers of two) that hold
weights and KV are chosen when the target has no count.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import wseplan
from wseplan import devices, plugins
from wseplan.devices import registry
from wseplan.catalog import schema as catalog_schema
from wseplan.cli import main

ROOT = Path(wseplan.__file__).resolve().parents[1]

TOYFAM = '''
"""Toy accelerator family (a test plug-in): devices with one memory, one bandwidth and one FLOP rate."""
import numpy as np

from wseplan.catalog.schema import DeviceEntry, Quantity
from wseplan.devices import register
from wseplan.devices.base import Family, Hardware, binding_code
from wseplan.devices.inference import InferenceMixin
from wseplan.errors import InputError
from wseplan.workload import BYTES_PER_ELEMENT, total_params


class ToyEntry(DeviceEntry):
    memory_bytes: Quantity
    peak_flop_per_s: Quantity
    bandwidth_bytes_per_s: Quantity
    devices_per_system: Quantity
    system_power_w: Quantity
    rack_units: Quantity


class ToyContext:
    def __init__(self, q):
        self.q, self.dev, self.count = q, q.target.device, q.target.count
        m = q.model
        b = BYTES_PER_ELEMENT[q.precision]
        self.params = total_params(m)
        self.weights = self.params * b
        self.kv_per_token = 2.0 * m.num_layers * m.num_kv_heads * (m.head_dim or m.d_model // m.num_heads) * b
        self.engine = q.software.engine


class ToyFamily(InferenceMixin, Family):
    name = "toy"
    kinds = ("toy",)
    phases = ("prefill", "decode", "serve")
    layout_columns = ("devices",)
    options = ()

    def prepare(self, q):
        return ToyContext(q)

    def hardware(self, ctx):
        d = ctx.dev
        return Hardware(devices_per_system=d.devices_per_system.si, system_power_w=d.system_power_w.si,
                        system_rack_units=d.rack_units.si, price_key=ctx.q.target.key, system_name=f"{d.name} system")

    def candidates(self, ctx, cfg):
        n = len(cfg["batch"])
        if ctx.count is not None:
            sizes = np.array([float(ctx.count)])
        else:
            sizes = 2.0 ** np.arange(0, 7)
        given = np.asarray(cfg["devices"], dtype=float)
        rows, dev = [], []
        for i in range(n):
            s = sizes if np.isnan(given[i]) else given[i:i + 1]
            rows += [i] * len(s)
            dev += list(s)
        parent = np.asarray(rows)
        out = {k: np.asarray(v, dtype=float)[parent] for k, v in cfg.items()}
        out["devices"] = np.asarray(dev, dtype=float)
        return out, parent

    def _kv_tokens(self, ctx, cfg):
        B, C, O = cfg["batch"], cfg["context"], cfg["output_tokens"]
        return B * (C + O)

    def fit(self, ctx, cfg):
        D = cfg["devices"]
        kv = self._kv_tokens(ctx, cfg) * ctx.kv_per_token
        per = (ctx.weights + kv) / D
        cap = np.full_like(per, ctx.dev.memory_bytes.si)
        fits = per <= cap
        parts = {"weights": ctx.weights / D, "kv_cache": kv / D, "activations": 0.0 * D, "optimizer": 0.0 * D}
        return dict(num_devices=D, num_replicas=np.ones_like(D), per_device_bytes=per, capacity_bytes=cap, fits=fits,
                    weights_bytes=ctx.weights + 0.0 * D, kv_cache_bytes=kv, activation_bytes=0.0 * D,
                    optimizer_bytes=0.0 * D, total_bytes=per * D, binding=binding_code(parts, per, cap, fits),
                    max_tokens_in_flight=np.floor(np.maximum(cap * D - ctx.weights, 0.0) / ctx.kv_per_token))

    def time(self, ctx, cfg, fit=None):
        return self.infer_time(ctx, cfg)

    # -- the forward pass (InferenceMixin) --------------------------------------------------------------
    def pass_time(self, ctx, cfg, rows, *, decode_seqs, decode_kv, prefill_tokens, prefill_span, prefill_kv,
                  prefill_seqs, new_per_seq=1.0):
        D = cfg["devices"][rows]
        tokens = decode_seqs * new_per_seq + prefill_tokens
        kv_read = (decode_seqs * decode_kv + prefill_seqs * prefill_kv) * ctx.kv_per_token
        compute = 2.0 * ctx.params * tokens / (D * ctx.dev.peak_flop_per_s.si)
        memory = (ctx.weights + kv_read) / (D * ctx.dev.bandwidth_bytes_per_s.si)
        lat = np.maximum(compute, memory)
        return lat, lat, {"compute": compute, "hbm_bandwidth": memory}

    def pipeline_stages(self, ctx, cfg):
        return np.ones(len(cfg["batch"]))

    def replicas(self, ctx, cfg):
        return np.ones(len(cfg["batch"]))

    def devices_per_replica(self, ctx, cfg):
        return np.asarray(cfg["devices"], dtype=float)

    def flop_per_token(self, ctx, context):
        return 2.0 * ctx.params + 0.0 * np.asarray(context, dtype=float)

    def peak_flop_per_s(self, ctx):
        return ctx.dev.peak_flop_per_s.si

    def describe(self, ctx, r):
        return {"devices": int(r["devices"])}, {}, []


register(ToyFamily(), entry_schema=ToyEntry)
'''

SRC = "toy-datasheet"
CATALOG = f"""
sources:
  {SRC}:
    title: "Toy accelerator datasheet (a test fixture)"
    kind: datasheet
    date: "2026-01"
devices:
  toy1:
    kind: toy
    name: Toy-1
    aliases: [toy]
    memory_bytes: {{value: 16 GB, source: {SRC}, basis: official}}
    peak_flop_per_s: {{value: 100e12, source: {SRC}, basis: official}}
    bandwidth_bytes_per_s: {{value: 1 TB/s, source: {SRC}, basis: official}}
    devices_per_system: {{value: 4, source: {SRC}, basis: official}}
    system_power_w: {{value: 2000 W, source: {SRC}, basis: official}}
    rack_units: {{value: 2, source: {SRC}, basis: official}}
"""
SOFTWARE = f"""
software:
  toy-static:
    family: toy
    default: true
    description: static batches, every prompt of the batch in one pass
    source: {SRC}
    basis: estimate
    note: test profile
    engine:
      scheduling: static
      prefill_pass: batch
      token_budget: {{value: 4096, source: {SRC}, basis: estimate, note: "test value"}}
      max_batch: {{value: 256, source: {SRC}, basis: estimate, note: "test value"}}
"""
PRICES = f"""
hardware:
  toy1:
    capex_usd: {{value: 100000, source: {SRC}, basis: estimate, note: "test value"}}
    network_frac: {{value: 0.1, source: {SRC}, basis: estimate, note: "test value"}}
"""

# ---------------------------------------------------------------------------------------------------------
# Hand calculation: Llama-3.1-8B (catalog entry: 32 layers, d_model 4096, 32 heads, 8 KV heads of 128, gated
# MLP 14336, vocabulary 128256, untied) in bf16 on toy1 (16 GB, 100 TFLOP/s, 1 TB/s), decode of 4 sequences at
# KV length 1000.
# ---------------------------------------------------------------------------------------------------------
D_MODEL, LAYERS, KV_HEADS, HEAD_DIM, D_FF, VOCAB = 4096, 32, 8, 128, 14336, 128256
BLOCK = (D_MODEL * D_MODEL * 2 + D_MODEL * KV_HEADS * HEAD_DIM * 2  # Q, O; K, V
         + 3 * D_MODEL * D_FF + 2 * D_MODEL)  # gate, up, down; two RMSNorms
PARAMS = LAYERS * BLOCK + 2 * VOCAB * D_MODEL + D_MODEL  # blocks, embedding + LM head, final norm
assert PARAMS == 8_030_261_248  # Hugging Face meta-llama/Llama-3.1-8B safetensors: 8.03B
WEIGHTS = 2.0 * PARAMS  # bf16
KV_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * 2.0  # K and V, bf16: 131,072 B
B, CTX = 4, 1000
KV = B * CTX * KV_PER_TOKEN  # 524,288,000 B
# one device holds 16.06e9 + 0.52e9 > 16e9 B: no; two hold 8.29e9 B each: the fewest devices are 2
DEVICES = 2
PER_DEVICE = (WEIGHTS + KV) / DEVICES
# decode pass of 4 tokens: compute 2 P 4 / (2 x 1e14) = 3.2e-4 s < memory (W + KV) / (2 x 1e12) = 8.29e-3 s
TPOT = max(2 * PARAMS * B / (DEVICES * 100e12), (WEIGHTS + KV) / (DEVICES * 1e12))
# prefill of the batch in one pass of 4000 tokens: compute 2 P 4000 / 2e14 = 0.321 s > memory 8.03e-3 s
TTFT = max(2 * PARAMS * B * CTX / (DEVICES * 100e12), WEIGHTS / (DEVICES * 1e12))


def _hand_usd_per_hour(site, systems: float) -> float:
    """Owning ``systems`` toy systems: capex (1 + network) (1 + installation) / years + maintenance on the
    hardware + electricity at the average draw x PUE + facility on peak kW, over 8766 h."""
    v = {k: getattr(site, k).si for k in type(site).model_fields}
    hardware = systems * 100_000 * 1.1
    peak_kw = systems * 2.0
    avg_kw = peak_kw * (v["utilization_frac"] * v["busy_power_frac"] + (1 - v["utilization_frac"]) * v["idle_power_frac"])
    per_year = (hardware * (1 + v["installation_frac"]) / v["amortization_years"]
                + hardware * v["maintenance_frac_per_year"]
                + avg_kw * v["pue"] * 8766 * v["electricity_usd_per_kwh"]
                + peak_kw * v["facility_usd_per_kw_month"] * 12)
    return per_year / 8766


def _tree_state() -> dict:
    """Size, modification time and SHA-256 of every file of the package, its catalogs and the repository's
    tracked files (bytecode caches aside), and git's view of the working tree when it is a checkout."""
    out = {}
    for top in (ROOT / "wseplan", ROOT / "catalogs", ROOT / "tests", ROOT / "docs", ROOT / "studies"):
        for p in sorted(top.rglob("*")) if top.is_dir() else []:
            if p.is_file() and "__pycache__" not in p.parts:
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    if (ROOT / ".git").exists():
        out["git status"] = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                                           capture_output=True, text=True).stdout
    return out


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy plug-in in ``tmp_path`` (module, catalog folder, prices file), loaded through WSEPLAN_PLUGINS; the
    registries are restored afterwards so no later test sees the toy kind."""
    mod = tmp_path / "toyfam.py"
    mod.write_text(textwrap.dedent(TOYFAM))
    cat_dir = tmp_path / "catalog"
    (cat_dir / "software").mkdir(parents=True)
    (cat_dir / "toy.yaml").write_text(CATALOG)
    (cat_dir / "software" / "toy.yaml").write_text(SOFTWARE)
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    saved = (dict(registry._FAMILIES), dict(catalog_schema.DEVICE_ENTRY_SCHEMAS), set(plugins._LOADED))
    monkeypatch.setenv("WSEPLAN_PLUGINS", str(mod))
    before = _tree_state()
    yield cat_dir, prices
    assert _tree_state() == before, "the plug-in run wrote outside its temporary folder"
    registry._FAMILIES.clear()
    registry._FAMILIES.update(saved[0])
    catalog_schema.DEVICE_ENTRY_SCHEMAS.clear()
    catalog_schema.DEVICE_ENTRY_SCHEMAS.update(saved[1])
    plugins._LOADED.clear()
    plugins._LOADED.update(saved[2])
    sys.modules.pop("wseplan_plugin_toyfam", None)


def _rel(a, b):
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def test_toy_family_through_the_python_api(toy):
    from wseplan.analytic.cost import load_prices
    from wseplan.catalog import load_catalog
    from wseplan.costing import cost
    from wseplan.fit import fit
    from wseplan.timing import predict_time

    cat_dir, prices = toy
    cat = load_catalog([cat_dir])
    assert type(cat.devices["toy1"]).__name__ == "ToyEntry" and cat.devices["toy1"].memory_bytes.si == 16e9
    f = fit("llama-3.1-8b", "toy", phase="decode", batch=B, context=CTX, catalog=cat)
    assert f.fits and f.num_devices == DEVICES and f.family == "toy" and f.software == "toy-static"
    assert _rel(f.capacity_bytes - f.headroom_bytes, PER_DEVICE) and f.layout == {"devices": DEVICES}
    one = fit("llama-3.1-8b", "toyx1", phase="decode", batch=B, context=CTX, catalog=cat)
    assert not one.fits and _rel(one.shortfall_bytes, WEIGHTS + KV - 16e9)
    t = predict_time("llama-3.1-8b", "toy", phase="decode", batch=B, context=CTX, catalog=cat)
    assert _rel(t.tpot_s, TPOT) and _rel(t.tokens_per_s, B / TPOT) and t.bottleneck == "hbm_bandwidth"
    p = predict_time("llama-3.1-8b", "toy", phase="prefill", batch=B, context=CTX, catalog=cat)
    assert _rel(p.ttft_s, TTFT) and p.bottleneck == "compute"
    c = cost("llama-3.1-8b", "toy", phase="decode", batch=B, context=CTX, catalog=cat, prices_files=[str(prices)])
    site = load_prices([str(prices)], catalog=cat).site
    # serving is charged the replica's share: 2 devices of a 4-device system (it occupies 1 whole system)
    per_hour = _hand_usd_per_hour(site, systems=0.5)
    assert c.num_systems == 1 and _rel(c.metric("usd_per_hour"), per_hour)
    busy = per_hour / site.utilization_frac.si
    assert _rel(c.headline_value, busy / 3600 * TPOT / B * 1e6) and c.headline_metric == "output_usd_per_mtok"
    with pytest.raises(wseplan.errors.InputError, match="does not fit"):
        cost("llama-3.1-8b", "toyx1", phase="decode", batch=B, context=CTX, catalog=cat, prices_files=[str(prices)])


def test_toy_family_through_the_cli(toy, capsys):
    cat_dir, prices = toy
    ask = ["llama-3.1-8b", "--target", "toy", "--phase", "decode", "--batch", str(B), "--context", str(CTX),
           "--catalog", str(cat_dir), "--format", "json"]
    assert main(["fit", *ask]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["fits"] and f["num_devices"] == DEVICES and _rel(f["capacity_bytes"] - f["headroom_bytes"], PER_DEVICE)
    assert main(["time", *ask]) == 0
    t = json.loads(capsys.readouterr().out)
    assert _rel(t["tpot_s"], TPOT) and t["bottleneck"] == "hbm_bandwidth"
    assert main(["cost", *ask, "--prices", str(prices)]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["num_systems"] == 1 and c["headline_metric"] == "output_usd_per_mtok"
    from wseplan.analytic.cost import load_prices
    from wseplan.catalog import load_catalog

    site = load_prices([str(prices)], catalog=load_catalog([cat_dir])).site
    busy = _hand_usd_per_hour(site, systems=0.5) / site.utilization_frac.si
    assert _rel(c["headline_value"], busy / 3600 * TPOT / B * 1e6)
    # without its prices the toy has no capex: one line naming the file to add
    assert main(["cost", *ask]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hardware.toy1" in err


def test_toy_family_in_a_fresh_process(toy, tmp_path):
    """A cold ``wseplan fit`` finds the plug-in through the environment alone."""
    cat_dir, _ = toy
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-m", "wseplan.cli", "fit", "llama-3.1-8b", "--target", "toy", "--batch", str(B),
                        "--context", str(CTX), "--catalog", str(cat_dir), "--format", "json"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["num_devices"] == DEVICES


def test_no_plugin_no_toy_kind(tmp_path, capsys, monkeypatch):
    """Without the plug-in the toy catalog is refused in one line, and the toy kind is unknown to later runs."""
    (tmp_path / "toy.yaml").write_text(CATALOG)
    monkeypatch.delenv("WSEPLAN_PLUGINS", raising=False)
    assert "toy" not in catalog_schema.DEVICE_ENTRY_SCHEMAS and "toy" not in devices.families()
    assert main(["fit", "llama-3.1-8b", "--target", "toy", "--catalog", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kind 'toy'" in err and "WSEPLAN_PLUGINS" in err
