"""Output of a sweep: the frame, the encoding of parts and the summary (the file writer is
:mod:`wseplan.sweep.writer`).

Rows are written as they are evaluated: each task's columns (:func:`wseplan.sweep.evaluate.evaluate_task`)
become one Arrow table (:func:`columns_table`, fixed schema), encoded as a self-contained part
(:func:`encode_part`: a one-row-group Parquet file, or CSV rows without a header), and the parts are joined in
task order into the output file (:class:`wseplan.sweep.writer.StreamWriter`; Parquet parts through
:mod:`wseplan.sweep.parquet_concat`, CSV parts by concatenation). No whole-sweep table is ever built, so memory
stays that of one task; the summary is merged from per-task summaries (:func:`chunk_summary`,
:func:`merge_summaries`). The same tasks give the same bytes whichever engine evaluated them.

Parquet (the recommended format): Snappy compression, dictionary encoding for the name columns (model,
target, hardware, device kind, precision, phase, recompute, bottleneck), column statistics, one row group per
task, Arrow and pandas schema metadata (``pandas.read_parquet`` gives back the dtypes of :func:`to_frame`).
CSV: ``\\n`` line ends, strings quoted, empty cells for missing values, ``true``/``false``, shortest
round-trip floats.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..catalog.load import load_catalog
from ..errors import InputError
from .plan import Plan
from .schema import BOTTLENECKS, COLUMNS, INT_COLUMNS, NULLABLE_INT, RECOMPUTE, SCHEMA_VERSION

#: columns whose values are names (dictionary-encoded in Parquet, categoricals in a DataFrame)
GROUP_COLUMNS = ("model", "target", "hardware", "device_kind", "precision", "phase")
NAME_COLUMNS = GROUP_COLUMNS + ("recompute", "bottleneck")
#: Parquet options of every part (and so of the output file)
PARQUET_OPTIONS = dict(compression="snappy", use_dictionary=list(NAME_COLUMNS), write_statistics=True)
#: bytes written per configuration, measured on the benchmark sweeps (benchmarks/bench_sweep.py; the output of
#: a sweep varies with its data): used to refuse a sweep that cannot fit in the free disk space
OUTPUT_BYTES_PER_CONFIGURATION = {"parquet": 100, "csv": 320}


def output_format(name: str) -> str:
    """``parquet`` or ``csv`` from an output file name."""
    return "parquet" if str(name).lower().endswith(".parquet") else "csv"


def _require_pyarrow(fmt: str):
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # a core dependency since the streaming writers; an incomplete install
        raise InputError("output: wseplan sweep needs pyarrow to write its output; pip install pyarrow") from None


# =============================================================================================
# Frames (the Python API: run_sweep)
# =============================================================================================
def to_frame(plan: Plan, parts: list[dict]):
    """Concatenate task columns (in task order) into one DataFrame with fixed dtypes and categories."""
    import pandas as pd

    groups = {g.index: g for g in plan.groups}
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    gidx = np.concatenate([np.full(len(p["batch"]), p["_group"]) for p in parts])
    data = {}
    for k in COLUMNS:
        if k in ("model", "target", "hardware", "device_kind", "precision", "phase"):
            continue
        data[k] = np.concatenate([np.asarray(p[k]) for p in parts])
    cats = {
        "model": [g.model_name for g in plan.groups], "target": [g.target.label for g in plan.groups],
        "hardware": [g.target.key for g in plan.groups], "device_kind": [g.target.kind for g in plan.groups],
        "precision": [g.precision for g in plan.groups], "phase": [g.phase for g in plan.groups],
    }
    cols = {}
    order = sorted(groups)
    pos = np.searchsorted(order, gidx)
    for k, vals in cats.items():
        uniq = list(dict.fromkeys(vals))
        codes = np.asarray([uniq.index(v) for v in vals])[pos]
        cols[k] = pd.Categorical.from_codes(codes, categories=uniq)
    for k in COLUMNS:
        if k in cols:
            continue
        v = data[k]
        if k == "bottleneck":
            cols[k] = pd.Categorical.from_codes(v.astype(int), categories=list(BOTTLENECKS))
        elif k == "recompute":
            cols[k] = pd.Categorical.from_codes(v.astype(int), categories=list(RECOMPUTE))
        elif k == "fits":
            cols[k] = v.astype(bool)
        elif k in INT_COLUMNS:
            cols[k] = v.astype(np.int64)
        elif k in NULLABLE_INT:
            nan_ = np.isnan(v)
            cols[k] = pd.arrays.IntegerArray(np.where(nan_, 0, v).astype(np.int64), nan_)
        else:
            cols[k] = v.astype(float)
    df = pd.DataFrame({k: cols[k] for k in COLUMNS})
    df.attrs.update(schema_version=SCHEMA_VERSION, sweep=plan.sweep.name, skipped=list(plan.skipped))
    return df




# =============================================================================================
# Arrow schema and per-task encoding
# =============================================================================================
@dataclass(frozen=True)
class OutputSpec:
    """What a worker needs to encode a task's rows exactly as every other task's (small, picklable)."""

    fmt: str  # "parquet" | "csv"
    sweep: str
    categories: tuple  # ((column, (name, ...)), ...) for GROUP_COLUMNS, in group order
    codes: tuple  # ((group index, (code per GROUP_COLUMNS)), ...)
    csv_quoting: str = "none"  # "none" when no name needs quotes (the usual case), else "needed" (strings quoted)
    schema_ipc: bytes = b""  # the Arrow schema (arrow_schema), serialized, so workers need not import pandas

    def group_codes(self, gi: int) -> tuple:
        return dict(self.codes)[gi]


def output_spec(plan: Plan, name: str) -> OutputSpec:
    """The output spec of a plan: format from ``name``, the category lists of :func:`to_frame`."""
    vals = _group_values(plan)
    cats = {k: list(dict.fromkeys(v)) for k, v in vals.items()}
    codes = tuple((g.index, tuple(cats[k].index(vals[k][i]) for k in GROUP_COLUMNS)) for i, g in enumerate(plan.groups))
    plain = all(not _NEEDS_QUOTES.search(v) for vs in cats.values() for v in vs)
    spec = OutputSpec(fmt=output_format(name), sweep=plan.sweep.name,
                      categories=tuple((k, tuple(cats[k])) for k in GROUP_COLUMNS), codes=codes,
                      csv_quoting="none" if plain else "needed")
    _require_pyarrow(spec.fmt)
    return replace(spec, schema_ipc=arrow_schema(spec).serialize().to_pybytes())


_NEEDS_QUOTES = re.compile(r'[,"\r\n]|^\s|\s$|^$')


def _group_values(plan: Plan) -> dict:
    return {"model": [g.model_name for g in plan.groups], "target": [g.target.label for g in plan.groups],
            "hardware": [g.target.key for g in plan.groups], "device_kind": [g.target.kind for g in plan.groups],
            "precision": [g.precision for g in plan.groups], "phase": [g.phase for g in plan.groups]}


def _empty_frame(spec: OutputSpec):
    """A zero-row DataFrame with :func:`to_frame`'s dtypes (the source of the pandas schema metadata)."""
    import pandas as pd

    cats = dict(spec.categories)
    cats.update(bottleneck=BOTTLENECKS, recompute=RECOMPUTE)
    cols = {}
    for k in COLUMNS:
        if k in cats:
            cols[k] = pd.Categorical.from_codes(np.zeros(0, dtype=int), categories=list(cats[k]))
        elif k == "fits":
            cols[k] = np.zeros(0, dtype=bool)
        elif k in INT_COLUMNS:
            cols[k] = np.zeros(0, dtype=np.int64)
        elif k in NULLABLE_INT:
            cols[k] = pd.array(np.zeros(0, dtype=np.int64), dtype="Int64")
        else:
            cols[k] = np.zeros(0, dtype=float)
    return pd.DataFrame(cols)


@lru_cache(maxsize=8)
def arrow_schema(spec: OutputSpec):
    """The Arrow schema of the output (fixed for a plan), with pandas and wseplan metadata."""
    import pyarrow as pa

    if spec.schema_ipc:
        return pa.ipc.read_schema(pa.py_buffer(spec.schema_ipc))
    schema = pa.Schema.from_pandas(_empty_frame(spec), preserve_index=False)
    meta = dict(schema.metadata or {})
    meta[b"wseplan.schema_version"] = str(SCHEMA_VERSION).encode()
    meta[b"wseplan.sweep"] = spec.sweep.encode("utf-8")
    return schema.with_metadata(meta)


@lru_cache(maxsize=8)
def _dictionaries(spec: OutputSpec) -> dict:
    import pyarrow as pa

    schema = arrow_schema(spec)
    cats = dict(spec.categories)
    cats.update(bottleneck=BOTTLENECKS, recompute=RECOMPUTE)
    return {k: (pa.array(list(cats[k]), type=schema.field(k).type.value_type),
                schema.field(k).type.index_type.to_pandas_dtype()) for k in NAME_COLUMNS}


def columns_table(spec: OutputSpec, cols: dict):
    """One task's columns (``evaluate_task``) as an Arrow table of :func:`arrow_schema`; missing values are nulls."""
    import pyarrow as pa

    schema = arrow_schema(spec)
    dicts = _dictionaries(spec)
    n = len(cols["batch"])
    gcodes = dict(zip(GROUP_COLUMNS, spec.group_codes(int(cols["_group"]))))
    arrays = []
    for k in COLUMNS:
        if k in GROUP_COLUMNS:
            values, itype = dicts[k]
            arrays.append(pa.DictionaryArray.from_arrays(pa.array(np.full(n, gcodes[k], dtype=itype)), values))
        elif k in ("bottleneck", "recompute"):
            values, itype = dicts[k]
            c = np.asarray(cols[k])
            missing = c < 0
            idx = pa.array(np.where(missing, 0, c).astype(itype), mask=missing if missing.any() else None)
            arrays.append(pa.DictionaryArray.from_arrays(idx, values))
        elif k == "fits":
            arrays.append(pa.array(np.asarray(cols[k], dtype=bool)))
        elif k in INT_COLUMNS:
            arrays.append(pa.array(np.asarray(cols[k]).astype(np.int64)))
        elif k in NULLABLE_INT:
            v = np.asarray(cols[k], dtype=float)
            missing = np.isnan(v)
            arrays.append(pa.array(np.where(missing, 0.0, v).astype(np.int64), mask=missing if missing.any() else None))
        else:
            arrays.append(pa.array(np.ascontiguousarray(cols[k], dtype=float), from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)


CSV_HEADER = (",".join(COLUMNS) + "\n").encode()


def table_bytes(table, fmt: str, *, header: bool = False, quoting: str = "needed") -> bytes:
    """A table as one self-contained part: a Parquet file (one row group per 2**20 rows) or CSV rows
    (``quoting`` "none": no quotes, for tables whose strings need none; "needed": every string quoted)."""
    return table_buffer(table, fmt, header=header, quoting=quoting).to_pybytes()


#: rows of a task's table per CSV write in the local engine: pyarrow grows one output buffer per write, and a task's
#: CSV in one buffer (~40 MB) spends its time in fresh pages; rows are written one by one, so the bytes are the same
CSV_SLICE_ROWS = 16384


def csv_part_buffers(spec: OutputSpec, cols: dict) -> list:
    """One task's CSV part (:func:`encode_part`'s bytes) as consecutive buffers of :data:`CSV_SLICE_ROWS` rows."""
    table = columns_table(spec, cols)
    return [table_buffer(table.slice(i, CSV_SLICE_ROWS), "csv", quoting=spec.csv_quoting)
            for i in range(0, table.num_rows, CSV_SLICE_ROWS)]


def table_buffer(table, fmt: str, *, header: bool = False, quoting: str = "needed"):
    """:func:`table_bytes` as a pyarrow Buffer (no copy into a bytes object)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, sink, **PARQUET_OPTIONS)
    else:
        import pyarrow.csv as pacsv

        if header:
            sink.write(b",".join(n.encode() if n.isidentifier() else b'"' + n.replace('"', '""').encode() + b'"'
                                 for n in table.column_names) + b"\n")
        pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False, quoting_style=quoting, eol="\n"))
    return sink.getvalue()


def encode_part(spec: OutputSpec, cols: dict) -> bytes:
    """The bytes of one task's part (see :func:`table_bytes`)."""
    return table_bytes(columns_table(spec, cols), spec.fmt, quoting=spec.csv_quoting)


def csv_header(spec: OutputSpec) -> bytes:
    return CSV_HEADER


def frame_table(df):
    """A DataFrame of :func:`to_frame`'s columns as an Arrow table (NaN and missing values become nulls)."""
    import pyarrow as pa

    return pa.Table.from_pandas(df, preserve_index=False)


def frame_bytes(df, name: str) -> bytes:
    """A whole DataFrame's file bytes, in the format of ``name`` (``.parquet`` or else CSV), as the writers
    encode parts: a frame of a sweep gives the same CSV bytes as ``wseplan sweep`` writes for it."""
    fmt = output_format(name)
    _require_pyarrow(fmt)
    table = frame_table(df)
    quoting = "needed"
    if fmt == "csv":
        import pyarrow as pa

        names = [v for c in table.columns if pa.types.is_dictionary(c.type) or pa.types.is_string(c.type)
                 for v in (c.combine_chunks().dictionary.to_pylist() if pa.types.is_dictionary(c.type) else c.to_pylist())
                 if v is not None]
        quoting = "none" if all(not _NEEDS_QUOTES.search(v) for v in names) else "needed"
    return table_bytes(table, fmt, header=True, quoting=quoting)


# =============================================================================================
# Per-task summaries
# =============================================================================================
def _best_row(fits, usd, per_user, floor: float):
    """The index of the fitting row with the lowest $/M among those meeting the per-user speed ``floor`` (all fitting rows
    where none does, or without a floor), the first on a tie, and whether it meets the floor (None without one)."""
    ok = np.flatnonzero(fits & ~np.isnan(usd))
    if not len(ok):
        return None, None
    if floor is None or not math.isfinite(floor):
        return int(ok[np.argmin(usd[ok])]), None
    fast = ok[per_user[ok] >= floor * (1.0 - 1e-12)]
    pool = fast if len(fast) else ok
    return int(pool[np.argmin(usd[pool])]), bool(len(fast))


def _best_of(cols: dict, floor) -> dict | None:
    """The best row of a group's columns (:func:`_best_row`) as the few numbers a summary keeps; ``cols`` as the
    evaluation gives them (``bottleneck`` a code or a name)."""
    fits = np.asarray(cols["fits"], dtype=bool)
    usd = np.asarray(cols["usd_per_mtok"], dtype=float)
    i, meets = _best_row(fits, usd, np.asarray(cols["tokens_per_s_per_user"], dtype=float), floor)
    if i is None:
        return None
    num = {k: float(np.asarray(cols[c], dtype=float)[i]) for k, c in (
        ("tp", "tensor_parallel"), ("pp", "pipeline_parallel"), ("dp", "data_parallel"), ("vpp", "virtual_pipeline"),
        ("ep", "expert_parallel"), ("adp", "attention_data_parallel"), ("mb", "micro_batch"), ("tokens_per_s", "tokens_per_s"), ("output_tokens", "output_tokens"),
        ("tokens_per_s_per_user", "tokens_per_s_per_user"))}
    bn = cols["bottleneck"][i]
    return dict(num, usd_per_mtok=float(usd[i]), batch=int(cols["batch"][i]), context=int(cols["context"][i]),
                num_devices=int(cols["num_devices"][i]), meets_floor=meets,
                bottleneck=bn if isinstance(bn, str) else BOTTLENECKS[int(bn)])


def chunk_summary(cols: dict) -> dict:
    """Configurations, fitting ones and the fitting one with the lowest ``usd_per_mtok`` (the first on a tie) among
    those giving every user the catalog's per-user speed floor (decode and serve; ``_floor``), where any does, as
    ``cost`` and ``compare`` choose: what :func:`summary_rows` needs, a few hundred bytes."""
    fits = np.asarray(cols["fits"], dtype=bool)
    return {"group": int(cols["_group"]), "configurations": len(fits), "fitting": int(fits.sum()),
            "best": _best_of(cols, cols.get("_floor"))}


def _best_fields(b: dict | None) -> dict:
    """A summary row's ``best_*`` fields from :func:`_best_of`'s numbers (nulls where nothing fits)."""
    if b is None:
        return dict(best_usd_per_mtok=None, best_batch=None, best_context=None, best_layout="", best_tokens_per_s=None,
                    best_bottleneck="", best_output_tokens=None, best_num_devices=None, best_tokens_per_s_per_user=None,
                    best_meets_speed_floor=None)
    ot = _finite(b["output_tokens"])
    return dict(best_usd_per_mtok=b["usd_per_mtok"], best_batch=b["batch"], best_context=b["context"],
                best_layout=_layout_text(b["tp"], b["pp"], b["dp"], b["vpp"], b["mb"], b["ep"], b.get("adp")),
                best_tokens_per_s=b["tokens_per_s"], best_bottleneck=b["bottleneck"],
                best_output_tokens=None if ot is None else int(ot), best_num_devices=b["num_devices"],
                best_tokens_per_s_per_user=_finite(b["tokens_per_s_per_user"]), best_meets_speed_floor=b["meets_floor"])


def _finite(v):
    """``v``, or None where it is missing or NaN (a training row has no per-user speed)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _layout_text(tp, pp, dp, vpp=None, mb=None, ep=None, adp=None) -> str:
    """A best row's GPU layout, ``TP2 PP2 DP4`` with ``v2`` (virtual pipeline stages), ``mb4`` (micro-batch), ``EP8``
    (expert parallelism) and ``ADP8`` (data-parallel attention) where above 1 (review33 L2: the interleaving that made a
    training row best was left out); empty for wafers (NaN)."""
    if tp is None or math.isnan(tp):
        return ""
    out = f"TP{int(tp)} PP{int(pp)} DP{int(dp)}"
    for v, name in ((vpp, "v"), (mb, "mb"), (ep, "EP"), (adp, "ADP")):
        if v is not None and not math.isnan(v) and v > 1:
            out += f" {name}{int(v)}"
    return out


def merge_summaries(plan: Plan, summaries: list[dict]) -> list[dict]:
    """:func:`summary_rows` from per-task summaries given in task order (equal to it on the same rows)."""
    groups = {g.index: g for g in plan.groups}
    rows: dict[tuple, dict] = {}
    for s in summaries:
        g = groups[s["group"]]
        key = (g.model_name, g.target.label, g.precision)
        acc = rows.setdefault(key, {"model": key[0], "target": key[1], "precision": key[2], "configurations": 0,
                                    "fitting": 0, "_best": None})
        acc["configurations"] += s["configurations"]
        acc["fitting"] += s["fitting"]
        b, a = s["best"], acc["_best"]
        # a best meeting the speed floor beats one that does not; then the lower $/M (the first on a tie)
        if b is not None and (a is None or (b.get("meets_floor") is not False, -b["usd_per_mtok"])
                              > (a.get("meets_floor") is not False, -a["usd_per_mtok"])):
            acc["_best"] = b
    out = []
    for acc in rows.values():
        acc.update(_best_fields(acc.pop("_best")))
        out.append(acc)
    return out


def summary_rows(df, catalog=None) -> list[dict]:
    """One summary row per model x target x precision: configurations, how many fit, and the fitting configuration
    with the lowest ``usd_per_mtok`` among those giving every user the catalog's per-user speed floor (decode and
    serve, where any does; the first such row in sweep order on a tie): :func:`merge_summaries` of the same rows."""
    rows = []
    if len(df) == 0:
        return rows
    speed = float((catalog or load_catalog()).defaults.default_min_tokens_per_s_per_user.si)
    keys = ["model", "target", "precision"]
    for (mname, tname, prec), sub in df.groupby(keys, sort=False, observed=True):
        row = {"model": mname, "target": tname, "precision": prec, "configurations": int(len(sub)),
               "fitting": int(sub["fits"].sum())}
        cols = {c: (sub[c].to_numpy(dtype=float, na_value=np.nan) if c not in ("fits", "bottleneck")
                    else sub[c].to_numpy()) for c in _SUMMARY_COLUMNS}
        floor = speed if str(sub["phase"].iloc[0]) in ("decode", "serve") else None
        row.update(_best_fields(_best_of(cols, floor)))
        rows.append(row)
    return rows


#: the columns a summary's best row is read from
_SUMMARY_COLUMNS = ("fits", "usd_per_mtok", "tokens_per_s_per_user", "tensor_parallel", "pipeline_parallel",
                    "data_parallel", "virtual_pipeline", "expert_parallel", "attention_data_parallel", "micro_batch",
                    "tokens_per_s", "output_tokens", "batch",
                    "context", "num_devices", "bottleneck")
