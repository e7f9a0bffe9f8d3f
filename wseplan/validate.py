"""Validate the time models against published measurements (``wseplan validate CASES.csv``).

Reads the validation-case format documented in ``docs/validation.md``: one published measurement per row,
with the workload, the system, the parallel layout, one metric and its value. Every row is predicted with :func:`wseplan.timing.predict_time` and the
prediction converted to the row's own metric and unit; ``rel_error = predicted / measured - 1``.

A row is skipped only when its metric is not a performance quantity (power fractions, ratios to other
hardware, goodput percentages, maximum generation length) or when a named input is missing; every skip
carries its reason.

Status of a row (the tolerance rule): ``within tolerance`` when ``|rel_error|`` is at most its category's
band, ``outside tolerance`` when above, ``not predicted`` when skipped, ``no tolerance band`` when its category
has no band. A category's band is the 80th percentile of ``|rel_error|`` over the strong and medium rows of that
category in the bundled validation set (:data:`TOLERANCE_PERCENTILE`; the same validated error that
``wseplan check`` allows a claim): four in five published measurements fall inside it. :func:`fit_gpu_efficiency` refits the GPU efficiency constants
(``catalogs/calibration/gpu_efficiency.yaml``) with scipy.optimize, reproducibly.
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .catalog.schema import Model, check_name
from .errors import InputError

REQUIRED_COLUMNS = ("id", "category", "phase", "model", "metric", "value", "unit", "hardware", "quality")
ALL_COLUMNS = ("id", "category", "phase", "model", "n_params_b", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff",
               "vocab", "n_experts", "experts_per_token", "seq_len", "input_len", "output_len", "global_batch",
               "concurrency", "precision", "hardware", "n_devices", "tp", "pp", "dp", "cp", "ep", "vpp", "recompute",
               "zero_stage", "flops_convention", "metric", "value", "unit", "quality", "source", "notes")
INT_COLUMNS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab", "n_experts", "experts_per_token", "seq_len",
               "input_len", "output_len", "global_batch", "concurrency", "n_devices", "tp", "pp", "dp", "cp", "ep", "vpp",
               "zero_stage")
CATEGORIES = ("gpu-train", "gpu-infer", "wse-infer", "wse-train", "micro")
NON_PERFORMANCE = {
    "effective_training_time_pct": "goodput percentage, not a performance quantity",
    "max_decode_output_tokens": "maximum generation length (a memory bound), not a performance quantity",
    "latency_per_token_ratio_vs_h100": "ratio to other hardware, not a performance quantity of this row",
    "decode_power_frac_tdp": "power fraction, not a performance quantity",
    "idle_power_frac_tdp": "power fraction, not a performance quantity",
    "comm_energy_per_byte_ratio_h100_over_cs3": "energy ratio to other hardware, not a performance quantity",
}
OUTPUT_COLUMNS = ("id", "category", "metric", "unit", "measured", "predicted", "rel_error", "status", "reason",
                  "tolerance_frac")
TOLERANCE_PERCENTILE = 80
WITHIN, OUTSIDE, NOT_PREDICTED, NO_BAND = "within tolerance", "outside tolerance", "not predicted", "no tolerance band"
STATUSES = (WITHIN, OUTSIDE, NOT_PREDICTED, NO_BAND)


@dataclass(frozen=True)
class Case:
    """One validation row with typed fields (None where the cell is empty)."""

    id: str
    category: str
    phase: str
    model: str
    metric: str
    value: float
    unit: str
    hardware: str
    quality: str
    fields: dict
    source: str
    notes: str

    def get(self, key: str):
        return self.fields.get(key)


class SkipRow(Exception):
    """A row that cannot be predicted; the message is the reason."""


# ---------------------------------------------------------------------------------------------
MAX_CELL_CHARS = 128 * 1024
"""Longest cell of a validation CSV [characters]; a published measurement's note is a few hundred."""
MAX_INT_CELL = 10**9
"""Largest integer a validation cell may hold (layers, widths, tokens, devices, batch); real rows stay below 1e7."""
_NAME_COLUMNS = ("id", "category", "phase", "model", "metric", "unit", "hardware", "quality", "precision",
                 "recompute", "flops_convention")
_LINE_SEPARATORS = str.maketrans({"\u2028": "\n", "\u2029": "\n", "\x85": "\n"})


class _FieldSizeLimit:
    """Raise the csv module's (process-wide) field size limit while a file is parsed, then restore it."""

    def __init__(self, limit: int):
        self.limit = limit

    def __enter__(self):
        self.old = csv.field_size_limit(self.limit)

    def __exit__(self, *exc):
        csv.field_size_limit(self.old)


MAX_LINE_CHARS = 16 * 2**20
"""Longest physical line of a validation CSV read (a file with no line breaks, a sparse file of NUL bytes, is
refused after this much instead of being read whole)."""


def _bounded_lines(fh, p: Path):
    """The lines of ``fh``, each read with a bound (:data:`MAX_LINE_CHARS`)."""
    n = 0
    while True:
        line = fh.readline(MAX_LINE_CHARS)
        if not line:
            return
        n += 1
        if len(line) >= MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
            raise InputError(f"cases: {p} line {n}: longer than {MAX_LINE_CHARS:,} characters; give a validation "
                             "CSV (one row per line)")
        if "\x00" in line:
            raise InputError(f"cases: {p} line {n}: holds NUL bytes; give a validation CSV saved as UTF-8 text")
        yield line


def iter_cases(path: str | Path):
    """Yield the rows of a validation CSV one at a time as :class:`Case` (constant memory for large files).

    The file is read as UTF-8 with an optional byte-order mark, by the csv module itself, so quoted cells may
    hold line breaks and U+2028/U+2029 (as Excel writes them; both become ``\\n`` in free-text cells). A FIFO or
    device is refused without blocking. Raises :class:`InputError` naming the line, row id and column on a
    malformed file: missing columns, a cell over :data:`MAX_CELL_CHARS` characters, control characters or
    terminal markup in a name cell, a value that is not a finite number, an integer outside
    [0, :data:`MAX_INT_CELL`], a duplicate id.
    """
    import os
    import stat as _stat

    from .catalog.load import file_kind
    from .catalog.schema import check_name, check_text

    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cases: cannot read {p} ({exc.strerror}); give a validation CSV") from None
    st = os.fstat(fd)
    if not _stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"cases: {p} is {file_kind(st.st_mode)}, not a file; give a validation CSV")
    fh = os.fdopen(fd, encoding="utf-8-sig", newline="")
    line = 1
    try:
        with fh, _FieldSizeLimit(16 * 2**20):
            reader = csv.reader(_bounded_lines(fh, p))
            try:
                header = next(reader, [])
            except csv.Error as exc:
                raise InputError(f"cases: {p} line 1: malformed CSV header ({exc}); see the validation format "
                                 "README") from None
            header = [h.strip() for h in header]
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise InputError(f"cases: {p} lacks column(s) {', '.join(missing)}; see the validation format "
                                 "README")
            seen: set[str] = set()
            memo = _CaseMemo(header)
            while True:
                line = reader.line_num + 1
                try:
                    cells = next(reader)
                except StopIteration:
                    break
                except csv.Error as exc:
                    raise InputError(f"cases: {p} line {line}: malformed CSV ({exc}); quote cells that hold "
                                     "commas, quotes or line breaks") from None
                if not cells or (len(cells) == 1 and not cells[0].strip()):
                    continue
                if len(cells) > len(header):
                    raise InputError(f"cases: {p} line {line} has more cells than the header; quote cells that "
                                     "hold commas")
                hit = memo.case(p, line, cells, seen)
                if hit is not None:
                    yield hit
                    continue
                row = {}
                for c, v in zip(header, cells):
                    if len(v) > MAX_CELL_CHARS:
                        rid = cells[0][:40] if cells and len(cells[0]) <= MAX_CELL_CHARS else "?"
                        raise InputError(f"cases: {p} line {line} (row {rid}) column {c}: a cell of {len(v):,} "
                                         f"characters; at most {MAX_CELL_CHARS:,}")
                    row[c] = v.strip()
                yield memo.keep(cells, _case(p, line, row, header, seen, check_name, check_text))
    except UnicodeDecodeError as exc:
        raise InputError(f"cases: {p} near line {line}: not UTF-8 text (byte {exc.start}); save the file as "
                         "UTF-8") from None
    except OSError as exc:
        raise InputError(f"cases: cannot read {p} ({exc.strerror}); give a validation CSV") from None


class _CaseMemo:
    """Rows that differ from an earlier row only in ``id`` and ``value`` (a large file of repeated measurements)
    reuse that row's parsed and checked fields: every other cell is checked once per distinct content, the id
    and the value of every row are still checked (:func:`_row_id`, :func:`_row_value`). At most
    :data:`MAX_ENTRIES` distinct rows are remembered (then the memo starts afresh), so memory stays bounded."""

    MAX_ENTRIES = 4096

    def __init__(self, header: list[str]):
        self.header = header
        self.i_id, self.i_value = header.index("id"), header.index("value")
        self.rows: dict[tuple, Case] = {}

    def _key(self, cells: list[str]) -> tuple:
        k = list(cells)
        if len(k) > max(self.i_id, self.i_value):
            k[self.i_id] = k[self.i_value] = ""
        return tuple(k)

    def case(self, p: Path, line: int, cells: list[str], seen: set) -> Case | None:
        t = self.rows.get(self._key(cells)) if len(cells) > max(self.i_id, self.i_value) else None
        if t is None:
            return None
        for i in (self.i_id, self.i_value):
            if len(cells[i]) > MAX_CELL_CHARS:
                return None  # the full path reports it
        rid, raw = cells[self.i_id].strip(), cells[self.i_value].strip()
        _row_id(p, line, rid, seen)
        return Case(rid, t.category, t.phase, t.model, t.metric, _row_value(p, rid, raw), t.unit, t.hardware, t.quality,
                    {**t.fields, "id": rid, "value": raw}, t.source, t.notes)

    def keep(self, cells: list[str], case: Case) -> Case:
        if len(self.rows) >= self.MAX_ENTRIES:
            self.rows.clear()
        self.rows[self._key(cells)] = case
        return case


def _row_id(p: Path, line: int, rid: str, seen: set) -> None:
    """The checks :func:`_case` makes of a row's id (same messages)."""
    if not rid:
        raise InputError(f"cases: {p} line {line}: empty id")
    try:
        check_name(rid)
    except ValueError as exc:
        shown = rid if len(rid) <= 40 else rid[:37] + "..."
        raise InputError(f"cases: {p} line {line} (row {shown!r}) column id: {exc}") from None
    if rid in seen:
        raise InputError(f"cases: {p} line {line}: duplicate id {rid}")
    seen.add(rid)


def _row_value(p: Path, rid: str, raw: str) -> float:
    """The measured value of a row: a finite positive number of at most 1e30."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InputError(f"cases: {p} row {rid}: value {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"cases: {p} row {rid}: value {raw[:40]!r} is not a finite number; give the "
                         "measured value")
    if not 0 < value <= 1e30:
        raise InputError(f"cases: {p} row {rid}: value {raw[:40]!r} must be a positive measurement of at "
                         "most 1e30")
    return value


def _case(p: Path, line: int, row: dict, header: list[str], seen: set, check_name, check_text) -> Case:
    rid = row.get("id") or ""
    if not rid:
        raise InputError(f"cases: {p} line {line}: empty id")
    for c in _NAME_COLUMNS:
        v = row.get(c)
        if v:
            try:
                check_name(v)
            except ValueError as exc:
                shown = rid if len(rid) <= 40 else rid[:37] + "..."
                raise InputError(f"cases: {p} line {line} (row {shown!r}) column {c}: {exc}") from None
    if rid in seen:
        raise InputError(f"cases: {p} line {line}: duplicate id {rid}")
    seen.add(rid)
    for c in ("category", "phase", "metric", "unit", "hardware", "quality"):
        if not row.get(c):
            raise InputError(f"cases: {p} row {rid}: empty {c}")
    for c in ("notes", "source"):
        if row.get(c):
            row[c] = row[c].translate(_LINE_SEPARATORS)
            try:
                check_text(row[c], max_chars=MAX_CELL_CHARS)
            except ValueError as exc:
                raise InputError(f"cases: {p} row {rid} column {c}: {exc}") from None
    value = _row_value(p, rid, row.get("value"))
    fields = {}
    for c in header:
        v = row.get(c)
        if v in (None, ""):
            fields[c] = None
        elif c in INT_COLUMNS:
            digits = v.lstrip("+-")
            if not digits.isdigit() or not digits.isascii():
                raise InputError(f"cases: {p} row {rid}: {c} {v[:40]!r} is not an integer")
            if len(digits) > 10 or int(v) > MAX_INT_CELL or int(v) < 0:
                raise InputError(f"cases: {p} row {rid}: {c} {v[:40]!r} is outside 0..{MAX_INT_CELL:,}")
            fields[c] = int(v)
        elif c == "n_params_b":
            try:
                fields[c] = float(v)
            except ValueError:
                raise InputError(f"cases: {p} row {rid}: n_params_b {v[:40]!r} is not a number") from None
            if not (math.isfinite(fields[c]) and 0 <= fields[c] <= 1e6):
                raise InputError(f"cases: {p} row {rid}: n_params_b {v[:40]!r} must be a finite number of billions "
                                 "in [0, 1e6]")
        else:
            fields[c] = v
    return Case(id=rid, category=row["category"], phase=row["phase"], model=row.get("model") or "",
                metric=row["metric"], value=value, unit=row["unit"], hardware=row["hardware"].lower(),
                quality=row["quality"], fields=fields, source=row.get("source") or "", notes=row.get("notes") or "")


def read_cases(path: str | Path) -> list[Case]:
    """Parse a validation CSV (see :func:`iter_cases`); raise :class:`InputError` naming the row and column."""
    return list(iter_cases(path))


def note_hint(notes: str, key: str) -> str | None:
    """The value of a ``key=value`` hint in ``notes`` (regex ``\\b<key>=([0-9x.]+)``), or None."""
    m = re.search(rf"\b{re.escape(key)}=([0-9x.]+)", notes or "")
    return m.group(1).rstrip(".") if m else None


def source_key(case: Case) -> str:
    """A short source label for grouping: the citation up to its first comma or parenthesis (MLCommons
    results grouped by round, e.g. ``MLCommons training_results_v5.0``)."""
    s = (case.source.split(",")[0] or case.source).split(" (")[0].strip()
    if s.startswith("MLCommons"):
        s = " ".join(s.split()[:2])
    return s


# ---------------------------------------------------------------------------------------------
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "eight": 8}
#: (regex on the notes, Model field, how the match becomes the value); the key=value hints come first
_MOE_PHRASES = (
    (r"\bmoe (?:on )?every (\d+)(?:st|nd|rd|th)? layer", "moe_layer_step", int),
    (r"\bfirst (\d+) layers? (?:are |is )?dense", "first_dense_layers", int),
    (r"\bdense\b[^.;|]*?\b(?:ffn|mlp)\b(?: width)?\s*(\d+)", "dense_d_ff", int),
    (r"\b(\d+|one|two|three|four|eight) (?:always-on )?shared experts?\b", "num_shared_experts",
     lambda v: _NUMBER_WORDS.get(v, None) or int(v)),
    (r"\bshared experts? (?:of )?width (\d+)", "shared_expert_d_ff", int),
)
_MOE_HINTS = ("moe_layer_step", "moe_layer_offset", "first_dense_layers", "dense_d_ff", "num_shared_experts",
              "shared_expert_d_ff")


def moe_layout_from_notes(notes: str) -> dict:
    """MoE layout stated in a row's notes, as :class:`Model` fields.

    ``key=value`` hints (``moe_layer_step=2``, ``moe_layer_offset=1``, ``first_dense_layers=3``,
    ``dense_d_ff=16384``, ``num_shared_experts=1``, ``shared_expert_d_ff=2048``) take precedence over phrases:
    "MoE every 2nd layer" (step 2; the MoE layers are the 2nd, 4th, ... as Llama 4's
    ``interleave_moe_layer_step``, so offset 1), "first 3 layers dense", "dense ... FFN 16384" / "dense MLP
    width 16384" (the dense layers' width), "one shared expert" / "2 shared experts", "shared expert width
    2048".
    """
    out: dict = {}
    text = (notes or "").lower()
    for pattern, key, conv in _MOE_PHRASES:
        m = re.search(pattern, text)
        if m:
            out[key] = conv(m.group(1))
    if "moe_layer_step" in out:
        out["moe_layer_offset"] = out["moe_layer_step"] - 1
    for key in _MOE_HINTS:
        v = note_hint(notes, key)
        if v is not None and v.isdigit():
            out[key] = int(v)
    return out


def _catalog_moe_model(case: Case, catalog) -> Model | None:
    """The catalog transformer an MoE row names (its name, or the name without a parenthesised remark, with
    spaces as hyphens), when every architecture column the row gives agrees with it (``d_ff`` may be the
    expert or the dense width)."""
    f = case.fields
    base = re.sub(r"\s*\(.*?\)", "", case.model or "").strip()
    for name in dict.fromkeys([case.model, base, re.sub(r"[\s_]+", "-", base.lower())]):
        if not name:
            continue
        try:
            sec, key = catalog.resolve_model_name(name)
        except InputError:
            continue
        m = getattr(catalog, sec)[key]
        if not isinstance(m, Model):
            continue
        stated = {"n_layers": {m.num_layers}, "d_model": {m.d_model}, "n_heads": {m.num_heads},
                  "n_kv_heads": {m.num_kv_heads, m.num_heads} if m.attention == "mla" else {m.num_kv_heads},
                  "d_ff": {m.d_ff, m.dense_d_ff or m.d_ff}, "vocab": {m.vocab_size}, "n_experts": {m.num_experts},
                  "experts_per_token": {m.experts_per_token}}
        if all(f.get(k) is None or f.get(k) in v for k, v in stated.items()):
            return m
    return None


def case_model(case: Case, catalog) -> Model:
    """The architecture of a row: inline columns when given, else the catalog entry named by ``model``.

    An MoE row (``n_experts`` > 1) takes the catalog entry its model name matches when the row's columns
    agree with it (interleaved dense/MoE layers, shared experts, attention variants come with the entry);
    otherwise its columns are completed with the layout its notes state (:func:`moe_layout_from_notes`).
    """
    f = case.fields
    L, d, h = f.get("n_layers"), f.get("d_model"), f.get("n_heads")
    E = f.get("n_experts") or 1
    if E > 1:
        m = _catalog_moe_model(case, catalog)
        if m is not None:
            return m
    if L and d:
        h = h or max(d // 128, 1)
        kvh = f.get("n_kv_heads") or h
        d_ff = f.get("d_ff") or 4 * d
        gated = d_ff != 4 * d
        vocab = f.get("vocab")
        if vocab is None:
            try:
                sec, key = catalog.resolve_model_name(case.model)
                vocab = getattr(catalog, sec)[key].vocab_size
            except Exception:  # noqa: BLE001 - no catalog match; GPT-2 BPE padded vocabulary
                vocab = 51200
        k = f.get("experts_per_token") or 1
        layout = moe_layout_from_notes(case.notes) if E > 1 else {}
        try:
            return Model(name=case.model or case.id, source="wseplan-estimate", basis="estimate",
                         note=f"validation row {case.id}", num_layers=L, d_model=d, num_heads=h,
                         num_kv_heads=kvh if h % kvh == 0 else h, d_ff=d_ff, gated_mlp=gated, vocab_size=vocab,
                         tied_embeddings=False, num_experts=E, experts_per_token=min(k, E),
                         norm="rmsnorm" if gated else "layernorm", linear_bias=not gated, **layout)
        except Exception as exc:  # pydantic: inconsistent shape
            raise SkipRow(f"architecture columns are inconsistent ({str(exc).splitlines()[-1].strip()})") from None
    try:
        sec, key = catalog.resolve_model_name(case.model)
    except InputError:
        raise SkipRow("architecture not given (n_layers, d_model) and the model name is not in the catalog") from None
    m = getattr(catalog, sec)[key]
    if not isinstance(m, Model):
        raise SkipRow("the catalog model is not a transformer")
    return m


def _target(case: Case, catalog, count: int | None):
    from .targets import parse_target

    text = case.hardware if not count else f"{case.hardware}x{count}"
    return parse_target(text, catalog)


def _train_tokens(case: Case) -> float:
    tok = note_hint(case.notes, "train_tokens")
    if tok:
        return float(tok)
    samples = note_hint(case.notes, "train_samples")
    seq = case.get("seq_len")
    if samples and seq:
        return float(samples) * seq
    raise SkipRow("train_tokens (or train_samples) not given in notes")


def _flop_multiplier(case: Case, recompute: str) -> float:
    conv = case.get("flops_convention") or "model"
    return 4.0 if conv == "hardware" and recompute == "full" else 3.0


def _recompute(case: Case) -> str:
    r = case.get("recompute")
    if r:
        return r
    # not stated: a row that counts hardware FLOPs (an extra forward) ran with full recompute
    return "full" if case.get("flops_convention") == "hardware" else "selective"


def _is_lora(case: Case) -> bool:
    return "lora" in case.model.lower()


#: the GPU software profile the public rows were calibrated with (static batches; see catalogs/software/)
GPU_PROFILE = "gpu-fitted-2026-11"
#: the profile whose mechanism constants time GPU inference rows (scheduled per row, see gpu_scheduling_for)
GPU_INFER_PROFILE = "gpu-production"


def wafer_profile_for(case) -> str:
    """Research-code rows (WaferLLM) run the research profile; Cerebras service figures the production one."""
    return "wafer-research" if "waferllm" in (case.source or "").lower() else "wafer-production"


def _software(cal, base: str = GPU_PROFILE):
    """The GPU profile ``base`` (by default that of the training and kernel rows), with a trial calibration's
    constants when ``cal`` is given."""
    from .catalog.load import load_catalog
    from .catalog.software import resolve_software

    if cal is None:
        return resolve_software(base, "gpu", load_catalog())
    import dataclasses

    from .catalog.schema import Quantity

    prof = resolve_software(base, "gpu", load_catalog())
    consts = {f.name: Quantity(value=float(getattr(cal, f.name)), source="wseplan-estimate", basis="estimate",
                               note="calibration trial") for f in dataclasses.fields(cal)}
    return prof.model_copy(update={"constants": consts})


def _need_fit(r):
    """A measured run happened, so it fitted: rows the (conservative) memory model refuses are still timed
    (``require_fit=False``); only a prediction without a time is skipped."""
    if r.step_s is None:
        raise SkipRow(f"no time: {r.notes[0] if r.notes else 'the time model returned none'}")
    return r


def predict_case(case: Case, catalog, cal=None) -> float:
    """Predicted value of one row in its own unit; raises :class:`SkipRow` with the reason."""
    if case.metric in NON_PERFORMANCE:
        raise SkipRow(NON_PERFORMANCE[case.metric])
    if case.hardware.startswith("wse"):
        return _predict_wafer(case, catalog)
    if case.phase == "kernel":
        return _predict_gpu_kernel(case, catalog, cal)
    if case.phase == "train":
        return _predict_gpu_train(case, catalog, cal)
    return _predict_gpu_infer(case, catalog, cal)


def _predict_gpu_train(case, catalog, cal):
    from .analytic import gpu_time as G
    from .timing import predict_time

    model = case_model(case, catalog)
    f = case.fields
    precision = f.get("precision") or "bf16"
    seq = f.get("seq_len")
    if not seq:
        raise SkipRow("seq_len not given")
    n = f.get("n_devices")
    tp, pp, cp, vpp = f.get("tp") or 1, f.get("pp") or 1, f.get("cp") or 1, f.get("vpp")
    single = case.metric == "layer_fwd_bwd_ms"
    gb = f.get("global_batch")
    if not gb:
        raise SkipRow("global_batch not given")
    if single:
        dp, n = 1, tp
    else:
        if not n:
            raise SkipRow("n_devices not given")
        dp = f.get("dp") or max(n // (tp * pp * cp), 1)
    layout = {"tp": tp, "pp": pp, "dp": dp, "vpp": vpp, "recompute": f.get("recompute") or _recompute(case),
              "zero_stage": f.get("zero_stage"), "micro_batch": gb if single else None}
    if single:
        layout.update(vpp=1, zero_stage=layout["zero_stage"] or 1, dp=1)
    elif f.get("tp") is None and f.get("pp") is None and f.get("dp") is None and n > 1:
        # layout not stated: the fastest layout that fits, as the team that ran it would have tuned it
        layout = {"recompute": f.get("recompute"), "zero_stage": f.get("zero_stage")}
        if layout["recompute"] is None and f.get("flops_convention") == "hardware":
            layout["recompute"] = "full"
    elif f.get("zero_stage") is None:
        layout["zero_stage"] = 1
    trainable = "lora" if _is_lora(case) else "full"
    count = tp if single else n
    target = _target(case, catalog, count)
    res = predict_time(model, target, require_fit=False, phase="train", precision=precision, batch=gb, context=seq, catalog=catalog,
                       layout={k: v for k, v in layout.items() if v is not None}, context_parallel=cp,
                       trainable=trainable, single_layer=single or None, software=_software(cal))
    _need_fit(res)
    step = res.step_s
    if single:
        return step * 1e3
    lay = res.layout or {}
    rec = lay.get("recompute", _recompute(case))
    return _train_metric(case, model, step_s=step, tokens_per_step=gb * seq, num_devices=res.num_devices,
                         peak_flop_per_s=target.device.peak_flop_per_s(precision), recompute=rec,
                         cal=cal or G.gpu_calibration())


def _infer_layout(case):
    f = case.fields
    n = f.get("n_devices")
    tp, pp, dp = f.get("tp"), f.get("pp") or 1, f.get("dp")
    if tp is None:
        if n is None:
            raise SkipRow("n_devices and tp not given")
        tp = max(n // (pp * (dp or 1)), 1)
    if dp is None:
        dp = max((n or tp * pp) // (tp * pp), 1)
    return tp, pp, dp


#: words in a row's source or notes that name a serving engine under load (in-flight / continuous batching)
INFLIGHT_MARKERS = ("mlperf", "nim for llms", "trtllm-bench", "in-flight", "inflight", "continuous batching", "vllm",
                    "sglang", "aiperf")
_SLA = re.compile(r"TTFT p(\d+)\s*<=\s*([\d.]+)\s*s and TPOT p\d+\s*<=\s*([\d.]+)\s*ms", re.I)


def gpu_scheduling_for(case) -> str:
    """How the measured engine scheduled requests: ``inflight`` when the row's source is a serving engine or load
    generator (MLPerf, NIM/AIPerf, trtllm-bench, vLLM, SGLang), ``static`` for static-batch harnesses and by default
    (research scripts, fixed-batch benchmark tables), whatever else the notes mention (a note may contrast the
    in-flight measurement with a static batch). Documented in docs/validation.md."""
    text = f"{case.source} {case.notes}".lower()
    if any(m in text for m in INFLIGHT_MARKERS):
        return "inflight"
    return "static"  # static-batch harnesses (gptSessionBenchmark tables), research scripts, fixed-batch tables


def sla_of(case) -> tuple[float, float, float] | None:
    """(percentile, TTFT limit [s], TPOT limit [s]) a server-scenario row states as its constraints, else None."""
    m = _SLA.search(case.notes or "")
    return None if not m else (float(m.group(1)), float(m.group(2)), float(m.group(3)) / 1e3)


def _gpu_engine(case, cal):
    """The software profile a GPU inference row runs: the production mechanism constants (or a calibration trial's),
    scheduled as the row's engine was (:func:`gpu_scheduling_for`); the GPU baselines of the WaferLLM paper run the
    research profile (:data:`GPU_PROFILE`), as its wafer rows run ``wafer-research``."""
    if wafer_profile_for(case) == "wafer-research":
        return _software(cal)
    prof = _software(cal, base=GPU_INFER_PROFILE)
    if gpu_scheduling_for(case) == "static":
        eng = prof.engine.model_copy(update={"scheduling": "static", "prefill_pass": "batch", "speculative": None})
        prof = prof.model_copy(update={"name": f"{prof.name}/static", "engine": eng})
    return prof


def _predict_gpu_infer(case, catalog, cal):
    from .plan import evaluate, setup
    from .serving import serve

    model = case_model(case, catalog)
    f = case.fields
    precision = f.get("precision") or "bf16"
    tp, pp, dp = _infer_layout(case)
    target = _target(case, catalog, tp * pp * dp)
    inp, out, conc = f.get("input_len"), f.get("output_len"), f.get("concurrency")
    if not inp:
        raise SkipRow("input_len not given")
    sw = _gpu_engine(case, cal)
    layout = {"tp": tp, "pp": pp, "dp": dp}
    if conc is None and case.phase == "e2e-infer" and case.metric in ("tokens_per_s", "tokens_per_s_per_gpu"):
        if not out:
            raise SkipRow("output_len not given")
        return _max_throughput(case, model, target, sw, precision, inp, out, layout, catalog) / (
            1.0 if case.metric == "tokens_per_s" else tp * pp * dp)
    inflight = sw.engine.scheduling == "inflight"
    prefill_only = case.metric in ("ttft_ms", "prefill_tokens_per_s") or case.phase == "prefill"
    if inflight and out and out > 1 or not prefill_only and case.phase != "decode":
        phase = "serve"  # a request's life in the engine: TTFT, TPOT with the other requests' prompt chunks
        if not out:
            raise SkipRow("output_len not given")
    else:
        phase = "prefill" if prefill_only else "decode"
    s = setup(model, target, phase=phase, precision=precision, software=sw, catalog=catalog)
    n1 = np.ones(1)
    cfg = {"batch": n1 * (conc or 1), "context": n1 * inp, "output_tokens": n1 * (out or 1),
           **{k: n1 * v for k, v in layout.items()}}
    arr = evaluate(s, cfg, require_fit=False)
    if not np.isfinite(arr["step_s"][0]):
        raise SkipRow("no time: the layout does not run")
    g = {k: float(np.asarray(v)[0]) for k, v in arr.items() if k in ("step_s", "ttft_s", "tpot_s", "tokens_per_s",
                                                                      "request_s")}
    if case.metric == "ttft_ms":
        return g["ttft_s"] * 1e3
    if case.metric == "prefill_tokens_per_s":
        return inp / g["ttft_s"]
    if phase == "prefill":
        if case.metric in ("tokens_per_s", "tokens_per_s_per_gpu"):
            sys_tok = g["tokens_per_s"]  # prompt tokens/s of all replicas
            return sys_tok if case.metric == "tokens_per_s" else sys_tok / (tp * pp * dp)
        if case.metric == "latency_ms":
            return g["ttft_s"] * 1e3
        raise SkipRow(f"metric {case.metric} is not predicted for prefill rows")
    if case.metric == "tokens_per_s_per_user":
        # decode rows: 1/TPOT; end-to-end rows: output tokens over the request's prefill and decode
        return 1.0 / g["tpot_s"] if case.phase == "decode" else out / g["request_s"]
    if case.metric == "tokens_per_s_per_gpu":
        return g["tokens_per_s"] / (tp * pp * dp)
    if case.metric == "tokens_per_s":
        return g["tokens_per_s"]
    if case.metric == "latency_ms":  # decode: one output token; e2e: the whole request
        return (g["tpot_s"] if case.phase == "decode" else g["step_s"]) * 1e3
    raise SkipRow(f"metric {case.metric} is not predicted for inference rows")


#: loads (share of capacity) tried for a server-scenario row: the highest whose TTFT meets the limit is reported
_SERVER_LOADS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98)


def _max_throughput(case, model, target, sw, precision, inp, out, layout, catalog) -> float:
    """Output tokens/s of the whole target at the engine's best operating point: offline (no concurrency, no limits)
    the largest batch that fits at full load; a server scenario (limits in the notes) the highest load and batch
    whose TTFT and TPOT percentiles meet them."""
    from .serving import serve

    sla = sla_of(case)
    kw = dict(precision=precision, software=sw, input_tokens=int(inp), output_tokens=int(out), layout=layout,
              catalog=catalog, prices=False)
    if sla is None:
        res = serve(model, target, **kw)
        if not res.points:
            raise SkipRow("no time: the model does not fit the layout at any concurrency")
        return max(p.capacity_requests_per_s for p in res.points) * out
    pct, ttft, tpot = sla
    best = 0.0
    for u in _SERVER_LOADS:
        res = serve(model, target, utilization=u, ttft_limit_s=ttft, tpot_limit_s=tpot, percentile=pct, **kw)
        best = max([best] + [p.tokens_per_s for p in res.points if p.meets_sla])
    if best <= 0:
        raise SkipRow("no operating point meets the row's stated TTFT/TPOT limits")
    return best


_GEMV = re.compile(r"GEMV\s*\[\s*(\d+)\s*,\s*(\d+)([KkMm]?)\s*\]\s*x\s*\[\s*(\d+)([KkMm]?)\s*,\s*(\d+)([KkMm]?)\s*\]")


def _dim(num: str, suffix: str) -> int:
    return int(num) * {"": 1, "k": 1024, "m": 1024 ** 2}[suffix.lower()]


def gemv_shape(text: str) -> tuple[int, int, int] | None:
    """(M, K, N) of a ``GEMV [M,K]x[K,N]`` model string (16K = 16384), or None."""
    m = _GEMV.search(text or "")
    if not m:
        return None
    return int(m.group(1)), _dim(m.group(2), m.group(3)), _dim(m.group(6), m.group(7))


def _predict_gpu_kernel(case, catalog, cal):
    from .analytic import gpu_time as G

    shape = gemv_shape(case.model)
    if shape is None or case.metric != "latency_ms":
        raise SkipRow("kernel is not a GEMV latency; no model for it")
    tp = case.get("tp") or case.get("n_devices") or 1
    target = _target(case, catalog, tp)
    precision = case.get("precision") or "fp16"
    t = G.gemv_time_s(target.device, m=shape[0], k=shape[1], n=shape[2], tp=tp, precision=precision,
                      cal=cal or G.gpu_calibration())
    return float(t) * 1e3


def _predict_wafer(case, catalog):
    try:
        from .analytic import wse_time
    except ImportError:
        raise SkipRow("wafer model unavailable") from None
    if case.phase == "kernel":
        shape = gemv_shape(case.model)
        fn = getattr(wse_time, "gemv_latency_s", None)
        if shape is None or fn is None or case.metric != "latency_ms":
            raise SkipRow("wafer model unavailable" if fn is None else "kernel is not a GEMV latency; no model for it")
        target = _target(case, catalog, None)
        kw = dict(k=shape[1], n=shape[2], m=shape[0], wafer=target.device, precision=case.get("precision") or "fp16")
        grid = note_hint(case.notes, "wse_core_grid")
        if grid and "x" in grid:
            r_, _, c_ = grid.partition("x")
            kw.update(region_rows=int(float(r_)), region_cols=int(float(c_)))
        try:
            return float(fn(**kw)) * 1e3
        except (NotImplementedError, TypeError):
            raise SkipRow("wafer model unavailable") from None
    from .timing import predict_time

    model = case_model(case, catalog)
    f = case.fields
    if case.phase == "train":
        return _predict_wafer_train(case, catalog, model)
    precision = f.get("precision") or "fp16"
    inp, out, conc = f.get("input_len"), f.get("output_len"), f.get("concurrency") or 1
    if not inp:
        raise SkipRow("input_len not given")
    target = _target(case, catalog, f.get("n_devices"))
    opts = {}
    for key, opt in (("wse_core_grid", "core_grid"), ("wse_core_grid_prefill", "core_grid_prefill"),
                     ("wse_core_grid_decode", "core_grid_decode")):
        v = note_hint(case.notes, key)
        if v:
            rows, _, cols = v.partition("x")
            if rows and cols:
                opts[opt] = (int(float(rows)), int(float(cols)))
    phase = "prefill" if case.phase == "prefill" else "decode"
    try:
        r = predict_time(model, target, require_fit=False, phase=phase, precision=precision, batch=conc, context=inp,
                         output_tokens=out if case.phase == "e2e-infer" else None, catalog=catalog,
                         software=wafer_profile_for(case), **opts)
        _need_fit(r)
    except (NotImplementedError, ImportError, AttributeError):
        raise SkipRow("wafer model unavailable") from None
    m = case.metric
    if m == "prefill_tokens_per_s":
        return inp / (r.ttft_s or r.step_s)
    if m == "ttft_ms":
        return (r.ttft_s or r.step_s) * 1e3
    if m == "tokens_per_s_per_user":
        if case.phase == "decode":
            return 1.0 / (r.tpot_s or r.step_s)
        return out / r.request_s
    if m == "tokens_per_s":
        return r.tokens_per_s
    if m == "tokens_per_s_per_gpu":
        return r.tokens_per_s / max(r.num_devices, 1)
    if m == "latency_ms" and case.phase == "decode":
        return (r.tpot_s or r.step_s) * 1e3
    raise SkipRow(f"metric {m} is not predicted for wafer rows")


def _train_metric(case, model, *, step_s: float, tokens_per_step: float, num_devices: int, peak_flop_per_s: float,
                  recompute: str, cal) -> float:
    """Convert a training step time to the row's metric (shared by GPU and wafer rows)."""
    from .analytic import gpu_time as G

    tok_s = tokens_per_step / step_s
    seq = case.get("seq_len")
    flop_tok = G.model_flop_per_token(model, seq_len=seq) * _flop_multiplier(case, recompute) / 3.0
    metric = case.metric
    if metric in ("tflops_per_gpu", "mfu", "pct_of_peak", "pflops"):
        per_dev = flop_tok * tok_s / num_devices
        if metric == "tflops_per_gpu":
            return per_dev / 1e12
        if metric == "pflops":
            return per_dev * num_devices / 1e15
        frac = per_dev / peak_flop_per_s
        return frac if metric == "mfu" else 100.0 * frac
    if metric == "time_per_iter_s":
        return step_s
    if metric == "tokens_per_s":
        return tok_s
    if metric == "tokens_per_s_per_gpu":
        return tok_s / num_devices
    if metric == "time_to_train_min":
        return _train_tokens(case) / tok_s * (1.0 + cal.benchmark_eval_overhead_frac) / 60.0
    if metric == "gpu_hours":
        return _train_tokens(case) / tok_s * num_devices / 3600.0
    raise SkipRow(f"metric {metric} is not predicted for training rows")


def _predict_wafer_train(case, catalog, model):
    from .analytic import gpu_time as G
    from .timing import predict_time

    f = case.fields
    seq, gb, n = f.get("seq_len"), f.get("global_batch"), f.get("n_devices") or 1
    if not seq or not gb:
        raise SkipRow("seq_len and global_batch needed for a wafer training row")
    precision = f.get("precision") or "bf16"
    target = _target(case, catalog, n)
    try:
        r = predict_time(model, target, require_fit=False, phase="train", precision=precision, batch=gb, context=seq, catalog=catalog)
        _need_fit(r)
    except (NotImplementedError, ImportError, AttributeError):
        raise SkipRow("wafer model unavailable") from None
    return _train_metric(case, model, step_s=r.step_s, tokens_per_step=gb * seq, num_devices=r.num_devices or n,
                         peak_flop_per_s=target.device.peak_flop_per_s(precision), recompute=_recompute(case),
                         cal=G.gpu_calibration())


# ---------------------------------------------------------------------------------------------
def validate_cases(cases: list[Case], catalog, cal=None, bands: dict[str, float] | None = None) -> list[dict]:
    """One record per case: the OUTPUT_COLUMNS plus quality and source.

    ``bands`` (category -> tolerance fraction) judge each predicted row (see the module docstring); without
    them the bands come from these rows themselves (:func:`category_bands`), which for the bundled set is the
    reference.
    """
    out = []
    for c in cases:
        rec = {"id": c.id, "category": c.category, "metric": c.metric, "unit": c.unit, "measured": c.value,
               "predicted": None, "rel_error": None, "status": NOT_PREDICTED, "reason": "", "tolerance_frac": None,
               "quality": c.quality, "source": source_key(c)}
        try:
            v = float(predict_case(c, catalog, cal))
            if not math.isfinite(v) or v <= 0:
                raise SkipRow(f"prediction is not a positive number ({v})")
            rec.update(predicted=v, rel_error=v / c.value - 1.0 if c.value else None)
        except SkipRow as exc:
            rec["reason"] = str(exc)
        except InputError as exc:
            rec["reason"] = f"input: {exc}"
        out.append(rec)
    return judge(out, category_bands(out) if bands is None else bands)


def category_bands(records: list[dict]) -> dict[str, float]:
    """Per category, the :data:`TOLERANCE_PERCENTILE` th percentile of ``|rel_error|`` over its predicted strong
    and medium rows (categories without such rows have no band)."""
    out = {}
    for cat_name in sorted({r["category"] for r in records}):
        errs = [abs(r["rel_error"]) for r in records if r["category"] == cat_name and r.get("rel_error") is not None
                and math.isfinite(r["rel_error"]) and r.get("quality") in ("strong", "medium")]
        if errs:
            out[cat_name] = float(np.percentile(errs, TOLERANCE_PERCENTILE))
    return out


def judge(records: list[dict], bands: dict[str, float]) -> list[dict]:
    """Set each record's ``status`` and ``tolerance_frac`` from the category ``bands`` (in place; returned)."""
    for r in records:
        if r.get("predicted") is None or r.get("rel_error") is None or not math.isfinite(r["rel_error"]):
            r["status"] = NOT_PREDICTED
            continue
        band = bands.get(r["category"])
        r["tolerance_frac"] = band
        r["status"] = NO_BAND if band is None else (WITHIN if abs(r["rel_error"]) <= band * (1 + 1e-12) else OUTSIDE)
    return records


def reference_bands(catalog) -> dict[str, float]:
    """The tolerance bands of the bundled validation set (what ``wseplan validate`` judges any file by)."""
    return category_bands(validate_file(default_cases_path(), catalog))


def summarize(records: list[dict]) -> list[dict]:
    """Median |rel_error| per category: strong+medium rows counted, weak reported separately."""
    rows = []
    cats = sorted({r["category"] for r in records})
    for cat in cats:
        rs = [r for r in records if r["category"] == cat]
        for label, qual in (("strong+medium", ("strong", "medium")), ("weak", ("weak",))):
            sel = [r for r in rs if r.get("quality") in qual]
            if not sel:
                continue
            ok = [abs(r["rel_error"]) for r in sel if r.get("status") != NOT_PREDICTED and r.get("rel_error") is not None
                  and math.isfinite(r["rel_error"])]  # a NaN would turn the median into NaN
            within = sum(r.get("status") == WITHIN for r in sel)
            rows.append({"category": cat, "quality": label, "rows": len(sel), "predicted": len(ok),
                         "predicted_frac": len(ok) / len(sel), "within_tolerance": within,
                         "tolerance_frac": next((r["tolerance_frac"] for r in sel if r.get("tolerance_frac") is not None), None),
                         "median_abs_rel_error": float(np.median(ok)) if ok else None,
                         "max_abs_rel_error": float(np.max(ok)) if ok else None})
    return rows


def validate_file(path: str | Path, catalog=None, cal=None) -> list[dict]:
    from .catalog.load import load_catalog

    return validate_cases(read_cases(path), catalog or load_catalog(), cal)


def default_cases_path() -> Path:
    from .catalog.load import default_catalog_dir

    return default_catalog_dir() / "validation" / "validation-public.csv"


# ---------------------------------------------------------------------------------------------
# Calibration of the GPU efficiency constants
# ---------------------------------------------------------------------------------------------
#: constants fitted, with (low, high) bounds; the rest keep their documented values
FIT_BOUNDS = {
    "gemm_max_frac_16bit": (0.3, 0.98),
    "gemm_max_frac_8bit": (0.2, 0.98),
    "gemm_max_frac_4bit": (0.1, 0.98),
    "gemm_half_intensity": (1.0, 2000.0),
    "attention_frac": (0.1, 0.95),
    "hbm_frac": (0.4, 0.98),
    "elementwise_vectors_per_token": (1.0, 200.0),
    "network_frac": (0.05, 0.98),
    "nvlink_latency_s": (1e-6, 2e-4),
    "dp_overlap_frac": (0.01, 0.99),
    "tp_overlap_frac": (0.001, 0.9),
    "layer_overhead_s": (1e-7, 2e-4),
    "step_overhead_s": (1e-5, 2e-2),
    "train_step_overhead_s": (1e-3, 5.0),
    "benchmark_eval_overhead_frac": (0.001, 0.5),
}
GPU_CATEGORIES = ("gpu-train", "gpu-infer", "micro")
#: why each constant that is not fitted has the value it has
UNFITTED_NOTES = {
    "nvlink_frac": "not fitted: NCCL all-reduce bus bandwidth inside DGX A100/H100 nodes reaches about three quarters "
                   "of the per-direction NVLink bandwidth for large messages (nccl-tests); fitting it let a few "
                   "inconsistent tensor-parallel rows drag it to ~0.2, which broke the TTFT rows",
    "network_latency_s": "not fitted: typical InfiniBand/RoCE collective step latency (a few to tens of microseconds); "
                         "no public row constrains it",
    "engine_max_batch": "not fitted: a serving engine's default maximum batch (vLLM max_num_seqs 256); used only when a "
                        "row or the user gives no concurrency",
}


def fit_cases(cases: list[Case]) -> list[Case]:
    """Rows a GPU calibration may use: strong or medium GPU rows (not wafers)."""
    return [c for c in cases if c.category in GPU_CATEGORIES and not c.hardware.startswith("wse")
            and c.quality in ("strong", "medium") and c.metric not in NON_PERFORMANCE]


def fit_gpu_efficiency(cases_path: str | Path | None = None, *, exclude_sources: tuple[str, ...] = (), catalog=None,
                       max_nfev: int = 60, start=None):
    """Fit the GPU efficiency constants to the validation rows with ``scipy.optimize.least_squares``.

    Residuals are ``log(predicted / measured)`` of every strong/medium GPU row that predicts (rows from
    ``exclude_sources`` left out), with a soft-L1 loss (scale 0.1) so that a few rows the model cannot
    represent do not drag the rest. Parameters are fitted in log space within :data:`FIT_BOUNDS`, starting
    from ``start`` (default: the current catalog values). Deterministic: same inputs, same result.

    Returns
    -------
    (GpuCalibration, list[str], float)
        The fitted constants, the ids fitted on, and the median |rel_error| over those rows.
    """
    from scipy.optimize import least_squares

    from .calibration_data import gpu_calibration
    from .catalog.load import load_catalog

    cat = catalog or load_catalog()
    cases = fit_cases(read_cases(cases_path or default_cases_path()))
    cases = [c for c in cases if source_key(c) not in exclude_sources]
    base = start or gpu_calibration()
    keys = list(FIT_BOUNDS)
    lo = np.log([FIT_BOUNDS[k][0] for k in keys])
    hi = np.log([FIT_BOUNDS[k][1] for k in keys])
    x0 = np.clip(np.log([getattr(base, k) for k in keys]), lo + 1e-9, hi - 1e-9)
    usable = []
    for c in cases:
        try:
            predict_case(c, cat, base)
            usable.append(c)
        except (SkipRow, InputError):
            continue

    def cal_of(x):
        return base.replace(**{k: float(np.exp(v)) for k, v in zip(keys, x)})

    def resid(x):
        cal = cal_of(x)
        out = np.empty(len(usable))
        for i, c in enumerate(usable):
            try:
                v = predict_case(c, cat, cal)
                out[i] = math.log(max(v, 1e-30) / c.value)
            except (SkipRow, InputError):
                out[i] = 0.0
        return out

    res = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, max_nfev=max_nfev, diff_step=1e-3)
    cal = cal_of(res.x)
    err = np.abs(np.exp(resid(res.x)) - 1.0)
    return cal, [c.id for c in usable], float(np.median(err)) if len(err) else float("nan")


def write_gpu_efficiency(cal, fitted_on: list[str], path: str | Path | None = None, residuals: dict | None = None) -> Path:
    """Write fitted constants to ``catalogs/calibration/gpu_efficiency.yaml`` (source: wseplan-gpu-calibration)."""
    import yaml

    from .calibration_data import CALIBRATION_KEYS, _cached, calibration_path

    p = Path(path) if path is not None else calibration_path()
    constants = {}
    for k in CALIBRATION_KEYS:
        v = float(getattr(cal, k))
        fitted = k in FIT_BOUNDS
        constants[k] = {"value": float(f"{v:.6g}"), "source": "wseplan-gpu-calibration", "basis": "estimate",
                        "note": ("fitted by wseplan.validate.fit_gpu_efficiency on the rows in fitted_on" if fitted
                                 else UNFITTED_NOTES.get(k, "planning default, not fitted"))}
    doc = {"gpu_efficiency": {
        "description": "Achievable-efficiency constants of the GPU time models (wseplan.analytic.gpu_time).",
        "method": "scipy.optimize.least_squares, log(predicted/measured) residuals, soft_l1 loss (f_scale 0.1), "
                  "log-space parameters within wseplan.validate.FIT_BOUNDS; reproduce with "
                  "`python -c 'from wseplan.validate import refit_and_write; refit_and_write()'`",
        "fitted_on": list(fitted_on),
        "residuals": residuals or {},
        "constants": constants}}
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("# Generated by wseplan.validate.write_gpu_efficiency; edit by refitting, not by hand.\n"
                 + yaml.safe_dump(doc, sort_keys=False, width=110), encoding="utf-8")
    _cached.cache_clear()
    return p


def refit_and_write(max_nfev: int = 200) -> Path:
    """Refit on the public set from the documented defaults of :class:`GpuCalibration` and write the
    calibration file (the reproducible calibration step: same file in, same constants out)."""
    from .calibration_data import GpuCalibration

    cal, ids, med = fit_gpu_efficiency(max_nfev=max_nfev, start=GpuCalibration())
    return write_gpu_efficiency(cal, ids, residuals={"median_abs_rel_error": round(med, 4)})


def leave_one_source_out(cases_path: str | Path | None = None, *, catalog=None, max_nfev: int = 30) -> list[dict]:
    """For each source, fit without its rows and predict them: median |rel_error| in-sample vs held out."""
    from .calibration_data import gpu_calibration
    from .catalog.load import load_catalog

    cat = catalog or load_catalog()
    path = cases_path or default_cases_path()
    cases = fit_cases(read_cases(path))
    full = gpu_calibration()
    out = []
    for src in sorted({source_key(c) for c in cases}):
        rows = [c for c in cases if source_key(c) == src]
        ins = validate_cases(rows, cat, full)
        e_in = [abs(r["rel_error"]) for r in ins if r["predicted"] is not None]
        if not e_in:
            continue
        cal, _, _ = fit_gpu_efficiency(path, exclude_sources=(src,), catalog=cat, max_nfev=max_nfev, start=full)
        held = validate_cases(rows, cat, cal)
        e_out = [abs(r["rel_error"]) for r in held if r["predicted"] is not None]
        out.append({"source": src, "category": ",".join(sorted({c.category for c in rows})), "rows": len(e_in),
                    "median_abs_rel_error_in_sample": float(np.median(e_in)),
                    "median_abs_rel_error_held_out": float(np.median(e_out)) if e_out else None})
    return out
