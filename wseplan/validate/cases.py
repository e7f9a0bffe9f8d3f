"""The validation-case file: columns, parsing (:func:`iter_cases`) and the architecture of a row (:func:`case_model`).

The format is documented in ``docs/validation.md`` and ``catalogs/validation/README.md``: one published measurement
per row, with the workload, the system, the parallel layout, one metric and its value.
"""
from __future__ import annotations

import csv
import math
import os
import re
import stat as _stat
from dataclasses import dataclass
from pathlib import Path

from ..catalog.load import default_catalog_dir, file_kind
from ..catalog.schema import Model, check_name, check_text
from ..errors import InputError
from ..workload import total_params

REQUIRED_COLUMNS = ("id", "category", "phase", "model", "metric", "value", "unit", "hardware", "quality")
ALL_COLUMNS = ("id", "category", "phase", "model", "n_params_b", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff",
               "vocab", "n_experts", "experts_per_token", "seq_len", "input_len", "output_len", "global_batch",
               "concurrency", "precision", "hardware", "n_devices", "tp", "pp", "dp", "cp", "ep", "vpp", "recompute",
               "zero_stage", "flops_convention", "metric", "value", "unit", "quality", "source", "notes")
INT_COLUMNS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab", "n_experts", "experts_per_token", "seq_len",
               "input_len", "output_len", "global_batch", "concurrency", "n_devices", "tp", "pp", "dp", "cp", "ep", "vpp",
               "zero_stage")
CATEGORIES = ("gpu-train", "gpu-infer", "wse-infer", "wse-train", "micro")
#: what a row timed (the validation format's ``phase`` column)
PHASES = ("train", "prefill", "decode", "e2e-infer", "kernel")
QUALITIES = ("strong", "medium", "weak")
#: the unit each predicted metric's value is in (a row in another unit is refused, not compared as if it were this)
METRIC_UNITS = {"latency_ms": "ms", "ttft_ms": "ms", "layer_fwd_bwd_ms": "ms", "time_per_iter_s": "s",
                "time_to_train_min": "min", "gpu_hours": "GPU-h", "tokens_per_s": "tok/s", "prefill_tokens_per_s": "tok/s",
                "tokens_per_s_per_gpu": "tok/s/GPU", "tokens_per_s_per_user": "tok/s/user", "tflops": "TFLOP/s",
                "tflops_per_gpu": "TFLOP/s", "pflops": "PFLOP/s", "mfu": "fraction", "pct_of_peak": "%",
                "max_decode_output_tokens": "tokens"}
NON_PERFORMANCE = {
    "effective_training_time_pct": ("goodput percentage, not a performance quantity: the source of the interruption "
                                    "constants the run-time model uses (defaults.gpu_job_interruptions_per_gpu_hour, "
                                    "job_interruption_loss_s), so predicting it would check the row against itself"),
    "latency_per_token_ratio_vs_h100": "ratio to other hardware, not a performance quantity of this row",
    "decode_power_frac_tdp": "power fraction, not a performance quantity",
    "idle_power_frac_tdp": "power fraction, not a performance quantity",
    "comm_energy_per_byte_ratio_h100_over_cs3": "energy ratio to other hardware, not a performance quantity",
}
#: capacity metrics: what the memory model (the fit) bounds, predicted from the layout's room for KV cache rather than
#: from a time model, so no time-model constant is fitted to them and the time models' error bands leave them out
CAPACITY_METRICS = frozenset({"max_decode_output_tokens"})
#: metrics no time-model constant is fitted to: the non-performance ones and the capacity ones
NOT_TIMED = frozenset(NON_PERFORMANCE) | CAPACITY_METRICS
#: metrics that are times (lower is better); every other performance metric is a speed (throughput, FLOP rate, MFU)
TIME_METRICS = frozenset({"latency_ms", "ttft_ms", "time_per_iter_s", "time_to_train_min", "gpu_hours",
                          "layer_fwd_bwd_ms"})
OUTPUT_COLUMNS = ("id", "category", "metric", "unit", "measured", "predicted", "rel_error", "status", "reason",
                  "tolerance_frac")
TOLERANCE_PERCENTILE = 80
WITHIN, OUTSIDE, NOT_PREDICTED, NO_BAND = "within tolerance", "outside tolerance", "not predicted", "no tolerance band"
#: a measurement faster than its configuration's ideal run (:mod:`.bounds`): flagged, never fitted or counted
INCONSISTENT = "physically inconsistent"
STATUSES = (WITHIN, OUTSIDE, NOT_PREDICTED, NO_BAND, INCONSISTENT)


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
    """A row's id: not empty, a valid name, not seen before (``seen`` gains it); the memo's rows and :func:`_case`
    both check it here."""
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
    _row_id(p, line, rid, seen)
    for c in _NAME_COLUMNS[1:]:  # the id is checked above
        v = row.get(c)
        if v:
            try:
                check_name(v)
            except ValueError as exc:
                shown = rid if len(rid) <= 40 else rid[:37] + "..."
                raise InputError(f"cases: {p} line {line} (row {shown!r}) column {c}: {exc}") from None
    for c in ("category", "phase", "metric", "unit", "hardware", "quality"):
        if not row.get(c):
            raise InputError(f"cases: {p} row {rid}: empty {c}")
    for c, allowed in (("category", CATEGORIES), ("phase", PHASES), ("quality", QUALITIES)):
        if row[c] not in allowed:
            raise InputError(f"cases: {p} row {rid}: {c} {row[c][:40]!r} is not one of {', '.join(allowed)}")
    unit = METRIC_UNITS.get(row["metric"])
    if unit is not None and row["unit"].strip() != unit:
        raise InputError(f"cases: {p} row {rid}: unit {row['unit'][:40]!r} is not the unit of {row['metric']} "
                         f"({unit}); give the value in {unit}")
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
    parts = [fields.get(c) for c in ("tp", "pp", "dp")]
    if fields.get("n_devices") and all(parts):
        used = parts[0] * parts[1] * parts[2] * (fields.get("cp") or 1)
        if used != fields["n_devices"]:
            raise InputError(f"cases: {p} row {rid}: n_devices {fields['n_devices']} is not tp x pp x dp x cp = {used}; "
                             "give a consistent layout or leave a cell empty")
    return Case(id=rid, category=row["category"], phase=row["phase"], model=row.get("model") or "",
                metric=row["metric"], value=value, unit=row["unit"], hardware=row["hardware"].lower(),
                quality=row["quality"], fields=fields, source=row.get("source") or "", notes=row.get("notes") or "")


def read_cases(path: str | Path) -> list[Case]:
    """Parse a validation CSV (see :func:`iter_cases`); raise :class:`InputError` naming the row and column, or the
    file where it holds no row (a header alone: audit30a L7)."""
    cases = list(iter_cases(path))
    if not cases:
        raise no_rows_error(path)
    return cases


def no_rows_error(path) -> InputError:
    """The one-line error of a validation file that holds no row after its header."""
    return InputError(f"validation file {path}: no rows after the header; add rows (docs/validation.md) or give "
                      "another file")


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


def _name_candidates(model: str | None) -> list[str]:
    """Catalog names a row's free-text model name may mean, most specific first: the name itself, without a
    parenthesised remark, lower case with spaces as hyphens, then that name cut back a word at a time to its first two
    words ("Llama 2 70B LoRA fine-tune (MLPerf ...)" -> "llama-2-70b-lora-fine-tune", ..., "llama-2-70b")."""
    base = re.sub(r"\s*\(.*?\)", "", model or "").strip()
    words = [w for w in re.split(r"[\s_]+", base.lower()) if w]
    cut = ["-".join(words[:k]) for k in range(len(words), 1, -1)]
    return [n for n in dict.fromkeys([model, base, *cut]) if n]


#: how far a row's ``n_params_b`` may be from a catalog model's total for the name to mean that model
NAME_PARAMS_TOLERANCE = 0.15


def _catalog_named(case: Case, catalog, *, columns: bool = True) -> Model | None:
    """The catalog transformer a row's model name means (:func:`_name_candidates`), when its ``n_params_b`` is within
    :data:`NAME_PARAMS_TOLERANCE` of the model's total parameters and (``columns``) every architecture column the row
    gives agrees with it (``d_ff`` may be the expert or the dense width)."""
    f = case.fields
    for name in _name_candidates(case.model):
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
        size = f.get("n_params_b")
        if size and abs(total_params(m) / 1e9 / float(size) - 1.0) > NAME_PARAMS_TOLERANCE:
            continue
        if not columns or all(f.get(k) is None or f.get(k) in v for k, v in stated.items()):
            return m
    return None


def _is_catalog_name(catalog, name) -> bool:
    """Whether ``name`` is a catalog model's name or alias as written."""
    try:
        catalog.resolve_model_name(name)
    except InputError:
        return False
    return True


#: the architecture columns a dense row may leave empty, and the catalog model's attribute that fills each
_FILL_COLUMNS = {"n_layers": "num_layers", "d_model": "d_model", "n_heads": "num_heads", "n_kv_heads": "num_kv_heads",
                 "d_ff": "d_ff", "vocab": "vocab_size"}


def case_model(case: Case, catalog) -> Model:
    """The architecture of a row: inline columns when given, else the catalog entry named by ``model``.

    An MoE row (``n_experts`` > 1) takes the catalog entry its model name matches when the row's columns
    agree with it (interleaved dense/MoE layers, shared experts, attention variants come with the entry);
    otherwise its columns are completed with the layout its notes state (:func:`moe_layout_from_notes`).
    """
    f = case.fields
    L, d, h = f.get("n_layers"), f.get("d_model"), f.get("n_heads")
    E = f.get("n_experts") or 1
    exact = _is_catalog_name(catalog, case.model)
    if E > 1 or (L and d and f.get("n_params_b")) or not (L and d or exact):
        # the catalog model the name means, where every stated column agrees with it: it carries what no column
        # states (tied embeddings, head width, norms, windows, the MoE layer pattern)
        m = _catalog_named(case, catalog)
        if m is not None:
            return m
    if E == 1 and not (L and d) and not exact and any(f.get(k) for k in _FILL_COLUMNS):
        # some columns given, the shape incomplete and disagreeing: the model the name means (by name and size)
        # completes what the row leaves empty
        m = _catalog_named(case, catalog, columns=False)
        if m is not None and (m.num_experts or 1) == 1:
            f = dict(f, **{k: f.get(k) or getattr(m, a) for k, a in _FILL_COLUMNS.items()})
            L, d, h = f["n_layers"], f["d_model"], f["n_heads"]
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

        def build(g: bool) -> Model:
            return Model(name=case.model or case.id, source="wseplan-estimate", basis="estimate",
                         note=f"validation row {case.id}", num_layers=L, d_model=d, num_heads=h,
                         num_kv_heads=kvh if h % kvh == 0 else h, d_ff=d_ff, gated_mlp=g, vocab_size=vocab,
                         tied_embeddings=False, num_experts=E, experts_per_token=min(k, E),
                         norm="rmsnorm" if g else "layernorm", linear_bias=not g, **layout)
        try:
            m = build(gated)
            size = f.get("n_params_b")
            if size and E == 1 and d_ff == 4 * d:
                # a width of 4 x d_model does not tell a gated MLP from a plain one (PaLM's SwiGLU is as wide as a GPT
                # MLP): the stated parameter count decides (PaLM 540B: 416B plain, 540B gated). Other widths are
                # gated (Llama's 8/3-ish ratios), whatever the count says (tied embeddings are not a column)
                other = build(not gated)
                if abs(total_params(other) / 1e9 - size) < abs(total_params(m) / 1e9 - size):
                    m = other
            return m
        except Exception as exc:  # pydantic: inconsistent shape
            raise SkipRow(f"architecture columns are inconsistent ({str(exc).splitlines()[-1].strip()})") from None
    if not exact:  # (a name the catalog does not hold that means no catalog model either: tried above)
        raise SkipRow("architecture not given (n_layers, d_model) and the model name is not in the catalog")
    sec, key = catalog.resolve_model_name(case.model)
    m = getattr(catalog, sec)[key]
    if not isinstance(m, Model):
        raise SkipRow("the catalog model is not a transformer")
    return m




def default_cases_path() -> Path:
    """The bundled validation set, ``catalogs/validation/validation-public.csv``."""
    return default_catalog_dir() / "validation" / "validation-public.csv"
