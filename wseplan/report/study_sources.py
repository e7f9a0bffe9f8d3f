"""The assumptions table (every input with its value, range, basis and source) and the list of sources a study
report cites."""
from __future__ import annotations

from ..analytic import cost as C
from ..analytic.stream import load_stream_constants
from ..catalog.precision import datapath_format
from ..catalog.schema import Quantity
from ..targets import parse_target
from ..workload import resolve_model
from .formats import fmt_field
from .markdown import Column, Table, fmt_num, fmt_quantity
from .study_schema import Study
from .tables import basis_label


def prices_of(cat):
    """The prices catalog in force (the bundled one unless ``--prices`` replaced it)."""
    return C.load_prices(catalog=cat)


def _quantity_sources(entry) -> list[str]:
    ids = []
    for name in type(entry).model_fields:
        v = getattr(entry, name)
        items = [v] if isinstance(v, Quantity) else list(v.values()) if isinstance(v, dict) else []
        for q in items:
            if isinstance(q, Quantity):
                ids += q.source_ids
    return ids


def entry_sources(t, cat) -> list[str]:
    ids = _quantity_sources(t.device)
    if t.kind == "wafer":
        sysm = cat.systems[t.device.system]
        ids += _quantity_sources(sysm)
    return ids


def model_sources(name: str, cat) -> list[str]:
    m = resolve_model(name, cat)
    src = getattr(m, "source", [])
    return [src] if isinstance(src, str) else list(src)


def assumptions_and_sources(st: Study, cat, params: dict, extra: list[str], targets: list[str] | None = None,
                             extra_rows: list[dict] | None = None) -> tuple[Table, list[dict]]:
    rows = list(extra_rows or [])
    ids: list[str] = []
    if st.model:
        ids += model_sources(st.model_ref, cat)
    for tgt in (targets if targets is not None else st.target_names):
        t = parse_target(tgt, cat)
        ids += entry_sources(t, cat)
        dev = t.device
        label = t.key
        prec = st.precision_for(tgt)
        q_peak = dev.flop_per_cycle_per_pe[datapath_format(dev.flop_per_cycle_per_pe, prec)] \
            if t.kind == "wafer" else None
        if t.kind == "wafer":
            wmath = datapath_format(dev.flop_per_cycle_per_pe, prec) or prec
            rows.append(_arow(f"{label} dense peak ({prec})", fmt_quantity(dev.peak_flop_per_s(prec),
                                                                                    "FLOP/s"),
                              q_peak, cat, extra_note="PEs x FLOP/cycle x clock" + (
                                  "" if wmath == prec else f" (no {prec} datapath: the {wmath} rate)")))
            rows.append(_arow(f"{label} SRAM of the usable PEs", fmt_quantity(dev.usable_sram_bytes, "bytes"),
                              dev.sram_per_pe_bytes, cat, extra_note="PEs x SRAM per PE"))
            res = cat.defaults.wafer_sram_reserve_frac  # audit29b L3: the capacity the fits use is after it
            rows.append(_arow(f"{label} SRAM reserve (runtime, routing)", f"{fmt_num(100 * res.si)}%", res, cat,
                              extra_note=f"leaves {fmt_quantity(dev.usable_sram_bytes * (1 - res.si), 'bytes')} for "
                                         "weights, KV cache and activations"))
            rows.append(_arow(f"{label} clock", fmt_num(dev.clock_hz.si / 1e9) + " GHz", dev.clock_hz, cat))
            sysm = cat.systems[dev.system]
            rows.append(_arow(f"{sysm.name} power", fmt_quantity(sysm.power_w.si, "W"), sysm.power_w, cat))
            rows.append(_arow(f"{sysm.name} I/O (MemoryX/SwarmX)", fmt_quantity(sysm.io_bandwidth_bytes_per_s.si,
                                                                                 "bytes/s"),
                              sysm.io_bandwidth_bytes_per_s, cat))
            if st.kind == "training":
                mx = cat.memoryx[sysm.memoryx]
                rows.append(_arow(f"{mx.name} optimizer update per node",
                                  fmt_quantity(mx.node_update_bandwidth_bytes_per_s.si, "bytes/s"),
                                  mx.node_update_bandwidth_bytes_per_s, cat,
                                  extra_note=f"x {mx.update_nodes.si:g} nodes = "
                                             f"{fmt_quantity(mx.update_bytes_per_s(), 'bytes/s')} (DRAM tier)"))
                ids += [*mx.update_nodes.source_ids, *mx.node_update_bandwidth_bytes_per_s.source_ids]
                eff = load_stream_constants().compute_efficiency_frac  # every wafer training time scales with it
                rows.append(_arow(f"{label} training compute efficiency", fmt_num(eff.si), eff, cat,
                                  extra_note="share of the dense peak a training pass reaches; no public wafer-training "
                                             "measurement validates it"))
                ids += list(eff.source_ids)
        else:
            # a format without a datapath runs at a wider one's rate (audit32b L4: "a100 dense peak (fp8) 312 TFLOP/s"
            # had no source nor a word that it is the fp16 rate, fp8 weights widened in the kernel)
            math = datapath_format(dev.dense_peak_flop_per_s, prec) or prec
            pk = dev.dense_peak_flop_per_s.get(math)
            rows.append(_arow(f"{label} dense peak ({prec})", fmt_quantity(dev.peak_flop_per_s(prec), "FLOP/s"), pk, cat,
                              extra_note="" if math == prec else f"no {prec} datapath: the {math} rate, {prec} weights "
                                                                  f"widened to {math} in the kernel"))
            rows.append(_arow(f"{label} HBM", fmt_quantity(dev.hbm_bytes.si, "bytes"), dev.hbm_bytes, cat))
            rows.append(_arow(f"{label} HBM bandwidth", fmt_quantity(dev.hbm_bandwidth_bytes_per_s.si, "bytes/s"),
                              dev.hbm_bandwidth_bytes_per_s, cat))
            rows.append(_arow(f"{label} node power", fmt_quantity(dev.node_power_w.si, "W"), dev.node_power_w, cat))
    shown_site = False
    for tgt, params_t in params.items():
        for name, p in params_t.items():
            site = name in _SITE_PARAMS
            if site and shown_site:
                continue
            if name in ("peak_power_w", "rack_units", "rack_units_per_rack"):
                continue
            ids += list(p.source)
            label = name if site else f"{tgt}: {name}"
            rows.append({"input": label, "value": _param_value(name, p.value),
                         "range": f"{_param_value(name, p.least)} to {_param_value(name, p.high)}"
                         if p.high > p.low else "", "basis": basis_label(p.basis, p.source, cat.sources),
                         "source": ", ".join(_source_title(s, cat) for s in p.source)})
        shown_site = True
    ids += list(extra)
    seen, sources = set(), []
    for s in ids:
        if s in seen:
            continue
        seen.add(s)
        src = cat.sources.get(s)
        sources.append({"id": s, "title": src.title if src else s, "url": (src.url or "") if src else "",
                        "date": (src.date or "") if src else ""})
    sources.sort(key=lambda d: d["id"])
    table = Table(name="assumptions", title="Inputs and their sources",
                  note="\"(weak)\" marks a number whose basis is an estimate or unverified, or that rests on a forum "
                       "post: weigh it with care, and replace it with your own quote (--prices) where you have one.",
                  columns=[Column("input", "input"), Column("value", "value"), Column("range", "range (low to high)"),
                           Column("basis", "basis"), Column("source", "source")], rows=rows)
    return table, sources


#: the site's inputs (one row each, not one per target): the prices schema's own list
_SITE_PARAMS = frozenset(C.SitePrices.model_fields)


def _param_value(name: str, v: float) -> str:
    """A cost input as a reader sees it (the one formatter: units from the name)."""
    return fmt_field(name, v)


def _source_title(sid: str, cat) -> str:
    s = cat.sources.get(sid)
    return s.title if s else sid


def _arow(label: str, value: str, q, cat, extra_note: str = "") -> dict:
    if q is None:
        return {"input": label, "value": value, "range": "", "basis": "", "source": extra_note}
    rng = ""
    if q.low is not None or q.high is not None:
        rng = f"{q.low if q.low is not None else q.value} to {q.high if q.high is not None else q.value}"
    src = ", ".join(_source_title(s, cat) for s in q.source_ids)
    return {"input": label, "value": value, "range": rng,
            "basis": basis_label(q.basis, q.source_ids if q.cites_ids else (), cat.sources),
            "source": (extra_note + "; " if extra_note else "") + src}
