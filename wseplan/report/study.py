"""Studies: a YAML file names a question, a model, targets, workloads, prices and sweeps; :func:`run_study`
answers it with tables and plots, and :func:`write_report` writes ``report.md``, the CSV behind every table and
the PNG plots, atomically.

Three kinds (chosen explicitly by ``kind``):

- ``serving``: a model served at a stated load (output tokens/s) and per-user speed. Each target is one replica
  (``cs3x4``, ``h200x8``); the batch sweep gives latency-throughput curves, the fleet is the replica count that
  meets the load at the cheapest batch that keeps the per-user speed.
- ``training``: a model trained on a token budget by a deadline. Each target's size is swept (systems or GPU
  nodes); the answer is the cheapest size that meets the deadline, with scaling efficiency and cost bands.
- ``claims``: a claims file checked by :func:`wseplan.claims.check`.

Everything is composed from :mod:`wseplan.compare`, :mod:`wseplan.timing`, :mod:`wseplan.analytic.stream`,
:mod:`wseplan.analytic.cost` and :mod:`wseplan.claims`; a study defines no model of its own. The output is
deterministic: same study and catalogs, same bytes.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from ..errors import CatalogError, InputError, validation_detail
from .atomic import LOCK_TIMEOUT_S, safe_filename, write_files_atomically
from .formats import fmt_field
from .markdown import Column, Document, Table, fmt_num, fmt_quantity
from .plots import VERDICT_COLORS, Marker, Plot, Series, render, roofline_plot
from .tables import basis_label, claims_table

HOURS_PER_YEAR = 8766.0  # 365.25 days


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ServingSpec(_Frozen):
    """Serving load: prompt and output tokens per request, service demand and per-user speed."""

    prompt_tokens: int = Field(gt=0, le=100_000_000)
    output_tokens: int = Field(gt=0, le=100_000_000)
    demand_tokens_per_s: float = Field(gt=0, le=1e15, description="output tokens/s the whole service must produce")
    min_tokens_per_s_per_user: float = Field(gt=0, description="slowest acceptable output speed per request")
    batches: list[int] = Field(min_length=1, description="concurrent requests per replica to sweep")

    @field_validator("batches")
    @classmethod
    def _positive(cls, v):
        if any(b <= 0 for b in v):
            raise ValueError("every batch must be a positive integer")
        return sorted(set(v))


class TrainingSpec(_Frozen):
    """Training run: token budget, deadline, sequence length, global batch and the cluster sizes to sweep."""

    tokens: float = Field(gt=0)
    deadline_days: float = Field(gt=0)
    seq_len: int = Field(gt=0)
    global_batch: int = Field(gt=0, description="sequences per optimizer step")
    sizes: list[int] = Field(min_length=1, description="systems (wafer targets) or nodes (GPU targets)")
    stream_batches: list[int] = Field(default=[1, 2, 4, 8, 16, 32, 64, 128, 256],
                                      description="per-system batches for the weight-streaming plot")

    @field_validator("sizes", "stream_batches")
    @classmethod
    def _positive(cls, v):
        if any(b <= 0 for b in v):
            raise ValueError("every size must be a positive integer")
        return sorted(set(v))


class CostSpec(_Frozen):
    """Cost settings: Monte Carlo samples and seed, utilisations to sweep, pinned inputs (as ``--set``)."""

    uncertainty: int = Field(default=400, ge=0, le=100000)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    utilizations: list[float] = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    set: dict[str, float] = {}

    @field_validator("utilizations")
    @classmethod
    def _fracs(cls, v):
        if not v or any(not (0 < u <= 1) for u in v):
            raise ValueError("utilizations must be fractions in (0, 1]")
        return sorted(set(v))


class Study(_Frozen):
    """A study file (frozen, ``extra="forbid"``: a misspelt key fails loudly)."""

    name: str = Field(min_length=1, max_length=100)
    title: str = Field(min_length=1)
    kind: Literal["serving", "training", "claims"]
    question: str = Field(min_length=1)
    model: str | None = None
    precision: str = "bf16"
    targets: list[str] = []
    serving: ServingSpec | None = None
    training: TrainingSpec | None = None
    cost: CostSpec = CostSpec()
    claims: str | None = None
    notes: list[str] = []
    date: str | None = Field(default=None, pattern=r"^\d{4}(-\d{2}(-\d{2})?)?$",
                             description="the report's date (YYYY, YYYY-MM or YYYY-MM-DD); see wseplan.report.provenance")

    @field_validator("date", mode="before")
    @classmethod
    def _date_text(cls, v):  # YAML reads an unquoted 2026-12-03 as a date
        import datetime as _dt

        return v.isoformat() if isinstance(v, _dt.date) else v

    @model_validator(mode="after")
    def _kind_fields(self):
        if self.kind in ("serving", "training"):
            if not self.model:
                raise ValueError(f"a {self.kind} study needs 'model'")
            if not self.targets:
                raise ValueError(f"a {self.kind} study needs 'targets'")
            if getattr(self, self.kind) is None:
                raise ValueError(f"a {self.kind} study needs a '{self.kind}:' section")
        if self.kind == "claims" and not self.claims:
            raise ValueError("a claims study needs 'claims' (a claims YAML path, relative to the study file)")
        return self

    @property
    def slug(self) -> str:
        return safe_filename(self.name, default="study")


class StudyResult(BaseModel):
    """Everything a report shows: the answer, tables (with their CSVs), plots and the Markdown."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    study: Study
    answer: str
    tables: list[Table]
    plots: dict[str, Plot]
    assumptions: Table
    sources: list[dict]
    markdown: str
    provenance: dict = {}
    _files: dict | None = PrivateAttr(default=None)

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    def frame(self, name: str):
        """A table as a pandas DataFrame (headers with units)."""
        return self.table(name).to_frame()

    def files(self) -> dict[str, bytes]:
        """Every output file: ``report.md``, ``report.xlsx``, ``<table>.csv`` and ``<plot>.png`` (rendered once,
        then reused)."""
        from .xlsx import workbook_bytes

        if self._files is not None:
            return dict(self._files)
        out: dict[str, bytes] = {"report.md": self.markdown.encode("utf-8")}
        pv = self.provenance
        about = [("title", self.study.title), ("question", self.study.question), ("answer", self.answer),
                 ("tool", f"wseplan {pv.get('version', '')}"), ("report date", _date_line(pv)),
                 ("catalog date", pv.get("catalog_date") or ""), ("prices date", pv.get("prices_date") or "not used"),
                 ("study", self.study.name)]
        out["report.xlsx"] = workbook_bytes(tables=self.tables, assumptions=self.assumptions, sources=self.sources,
                                            about=about, date=pv.get("report_date", ""))
        for t in [*self.tables, self.assumptions]:
            out[f"{safe_filename(t.name)}.csv"] = t.to_csv().encode("utf-8")
        for name, p in self.plots.items():
            out[f"{safe_filename(name)}.png"] = render(p)
        self._files = out
        return dict(out)


# --------------------------------------------------------------------------------------------- loading
def load_study(path: str | Path) -> tuple[Study, Path]:
    """Read and validate a study YAML; returns the study and its folder (for relative paths)."""
    from ..catalog.load import read_yaml

    from ..catalog.schema import check_name, check_text

    p = Path(path)
    if not os.path.lexists(p):
        raise InputError(f"study file {path}: not found; check the path")
    try:
        data = read_yaml(p)  # a FIFO, device or symlink loop is refused without blocking
    except CatalogError as exc:
        raise InputError(f"study file {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a study file is a mapping with name, title, kind, question, ...")
    try:
        st = Study.model_validate(data)
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        raise InputError(f"{path}: {loc + ': ' if loc else ''}{msg}") from None
    checks = [("name", st.name, check_name), ("title", st.title, lambda v: check_text(v, max_chars=300)),
              ("question", st.question, check_text),
              ("model", st.model, check_name)]
    checks += [(f"targets[{i}]", t, check_name) for i, t in enumerate(st.targets)]
    checks += [(f"notes[{i}]", n, check_text) for i, n in enumerate(st.notes)]
    for field, value, check in checks:  # names reach terminals and reports: no escapes, markup or huge text
        if value is None:
            continue
        try:
            check(value)
        except ValueError as exc:
            raise InputError(f"{path}: {field}: {exc}") from None
    return st, p.parent


def run_study(study: str | Path | Study, *, catalog=None, base_dir: str | Path | None = None) -> StudyResult:
    """Run a study (a YAML path or a :class:`Study`) and return its tables, plots, answer and Markdown."""
    from ..catalog.load import load_catalog

    if isinstance(study, Study):
        st, base = study, Path(base_dir or ".")
    else:
        st, base = load_study(study)
    cat = catalog or load_catalog()
    if st.kind == "serving":
        body = _serving(st, cat)
    elif st.kind == "training":
        body = _training(st, cat)
    else:
        body = _claims(st, cat, base)
    assumptions, sources = _assumptions_and_sources(st, cat, body.get("params", {}), body.get("extra_sources", []),
                                                    body.get("targets"), body.get("assumption_rows"))
    pv = _provenance(st, cat)
    md = _markdown(st, body, assumptions, sources, pv)
    return StudyResult(study=st, answer=body["answer"], tables=body["tables"], plots=body["plots"],
                       assumptions=assumptions, sources=sources, markdown=md, provenance=pv)


def _provenance(st: Study, cat) -> dict:
    """Tool version, catalog and prices dates, and the report date (see :mod:`wseplan.report.provenance`)."""
    from .provenance import provenance, report_date

    pv = provenance(cat, _prices(cat).date if st.kind != "claims" else None)
    pv["report_date"], pv["report_date_from"] = report_date(st.date, pv["catalog_date"], pv["prices_date"])
    return pv


def _date_line(pv: dict) -> str:
    d, src = pv.get("report_date", ""), pv.get("report_date_from", "")
    return {"study": d, "SOURCE_DATE_EPOCH": f"{d} (SOURCE_DATE_EPOCH)"}.get(src, f"inputs as of {d}")


def default_out_dir(result: StudyResult) -> Path:
    return Path("reports") / result.study.slug


def write_report(result: StudyResult, out: str | Path | None = None, *, force: bool = False,
                 lock_timeout_s: float = LOCK_TIMEOUT_S) -> Path:
    """Write the report folder atomically (default ``reports/<study name>/``); returns the folder.

    An existing folder is replaced only if wseplan wrote it (its ``.wseplan-report`` marker) or ``force`` is
    given; files in it that wseplan did not write are kept (see :mod:`wseplan.report.atomic`).
    """
    return write_files_atomically(Path(out) if out else default_out_dir(result), result.files(), force=force,
                                  lock_timeout_s=lock_timeout_s)


# --------------------------------------------------------------------------------------------- serving
def _prices(cat):
    from ..analytic import cost as C

    return C.load_prices(catalog=cat)


def _serving(st: Study, cat) -> dict:
    from ..analytic import cost as C
    from ..compare import compare_case
    from ..workload import resolve_model

    sv = st.serving
    m = resolve_model(st.model, cat)
    prices = _prices(cat)
    sweep, cases, params_used = [], {}, {}
    for tgt in st.targets:
        for b in sv.batches:
            row, times, params = compare_case(m, tgt, phase="decode", precision=st.precision, batch=b,
                                              context=sv.prompt_tokens, output_tokens=sv.output_tokens, catalog=cat,
                                              prices=prices, uncertainty=st.cost.uncertainty, seed=st.cost.seed,
                                              overrides=st.cost.set)
            rec = row.to_row()
            rec["batch"] = b
            rec["meets_sla"] = bool(row.fits and row.tokens_per_s_per_user is not None
                                    and row.tokens_per_s_per_user >= sv.min_tokens_per_s_per_user)
            sweep.append(rec)
            if times is not None:
                cases[(tgt, b)] = (times, params)
                params_used.setdefault(tgt, params)
    # the fleet: per target, the cheapest batch that meets the per-user speed
    fleet = []
    for tgt in st.targets:
        ok = [r for r in sweep if r["target"] == tgt and r["meets_sla"] and r["usd_per_mtok"] is not None]
        if not ok:
            fits_any = [r for r in sweep if r["target"] == tgt and r["fits"]]
            best_speed = max((r["tokens_per_s_per_user"] or 0.0 for r in fits_any), default=None)
            fleet.append({"target": tgt, "meets_sla": False,
                          "note": "does not fit at any swept batch" if not fits_any else
                          f"fastest per-user speed {fmt_num(best_speed)} tokens/s is below the target"})
            continue
        best = min(ok, key=lambda r: (r["usd_per_mtok"], -r["batch"]))
        replicas = math.ceil(sv.demand_tokens_per_s / best["tokens_per_s"])
        fleet.append({"target": tgt, "meets_sla": True, "batch": best["batch"],
                      "devices_per_replica": best["num_devices"], "replicas": replicas,
                      "devices": replicas * best["num_devices"],
                      "tokens_per_s_per_user": best["tokens_per_s_per_user"],
                      "tokens_per_s_per_replica": best["tokens_per_s"],
                      "fleet_tokens_per_s": replicas * best["tokens_per_s"],
                      "power_w": replicas * best["power_w"], "usd_per_hour": replicas * best["usd_per_hour"],
                      "usd_per_year": replicas * best["usd_per_hour"] * HOURS_PER_YEAR,
                      "usd_per_mtok": best["usd_per_mtok"], "usd_per_mtok_p10": best["usd_per_mtok_p10"],
                      "usd_per_mtok_p90": best["usd_per_mtok_p90"], "energy_j_per_token": best["energy_j_per_token"],
                      "bottleneck": best["bottleneck"], "note": ""})
    fleet_t = Table(
        name="fleet", title=f"Fleet for {fmt_num(sv.demand_tokens_per_s)} output tokens/s at >= "
                            f"{fmt_num(sv.min_tokens_per_s_per_user)} tokens/s per user",
        columns=[Column("target", "replica"), Column("batch", "batch [requests]"),
                 Column("replicas", "replicas [count]"), Column("devices", "devices [count]"),
                 Column("tokens_per_s_per_user", "per user [tokens/s]"),
                 Column("fleet_tokens_per_s", "fleet [tokens/s]"), Column("power_w", "IT power [kW]", 1e3),
                 Column("usd_per_hour", "TCO [$/h]"), Column("usd_per_year", "TCO [$M/yr]", 1e6),
                 Column("usd_per_mtok", "output [$/M tokens]"), Column("usd_per_mtok_p10", "P10 [$/M tokens]"),
                 Column("usd_per_mtok_p90", "P90 [$/M tokens]"), Column("energy_j_per_token", "energy [J/token]"),
                 Column("bottleneck", "bottleneck"), Column("note", "note")],
        rows=fleet)
    sweep_t = Table(
        name="batch_sweep", title="Latency and throughput per replica versus batch",
        columns=[Column("target", "replica"), Column("batch", "batch [requests]"), Column("fits", "fits"),
                 Column("ttft_s", "time to first token [ms]", 1e-3),
                 Column("tpot_s", "time per output token [ms]", 1e-3),
                 Column("tokens_per_s_per_user", "per user [tokens/s]"),
                 Column("tokens_per_s", "per replica [tokens/s]"), Column("bottleneck", "bottleneck"),
                 Column("usd_per_mtok", "output [$/M tokens]"), Column("usd_per_mtok_p10", "P10 [$/M tokens]"),
                 Column("usd_per_mtok_p90", "P90 [$/M tokens]"), Column("energy_j_per_token", "energy [J/token]"),
                 Column("meets_sla", "meets per-user speed")],
        rows=sweep)
    plots = {}
    plots["latency_throughput"] = Plot(
        title=f"{m.name}: per-user speed vs replica throughput (batch sweep)",
        xlabel="replica throughput [output tokens/s]", ylabel="per-user speed [tokens/s]", logx=True, logy=True,
        series=[Series(label=t, x=[r["tokens_per_s"] for r in sweep if r["target"] == t and r["tokens_per_s"]],
                       y=[r["tokens_per_s_per_user"] for r in sweep if r["target"] == t and r["tokens_per_s"]])
                for t in st.targets if any(r["target"] == t and r["tokens_per_s"] for r in sweep)],
        markers=[Marker(sv.min_tokens_per_s_per_user, f"per-user target {fmt_num(sv.min_tokens_per_s_per_user)} "
                                                       "tokens/s", axis="y")])
    achieved = {(r["target"], r["batch"]): {"tokens_per_s": r["tokens_per_s"]} for r in sweep if r.get("tokens_per_s")}
    plots["roofline"] = _roofline(st, m, cat, phase="decode", batches=sv.batches, context=sv.prompt_tokens,
                                  achieved=achieved)
    chosen = {f["target"]: (f["batch"], f"{f['target']} at batch {f['batch']}") for f in fleet if f.get("batch")}
    plots["cost_vs_utilization"], util_rows = _cost_vs_util(st, cases, chosen, "output_usd_per_mtok",
                                                            "output [$/M tokens]")
    plots["cost_bands"] = Plot(
        title="Monte Carlo cost bands (P10-P90 shaded, median line) vs batch",
        xlabel="batch [concurrent requests]", ylabel="output cost [$/M tokens]", logx=True, logy=True,
        series=[Series(label=t, x=[r["batch"] for r in sweep if r["target"] == t and r["usd_per_mtok_p50"]],
                       y=[r["usd_per_mtok_p50"] for r in sweep if r["target"] == t and r["usd_per_mtok_p50"]],
                       low=[r["usd_per_mtok_p10"] for r in sweep if r["target"] == t and r["usd_per_mtok_p50"]],
                       high=[r["usd_per_mtok_p90"] for r in sweep if r["target"] == t and r["usd_per_mtok_p50"]])
                for t in st.targets if any(r["target"] == t and r["usd_per_mtok_p50"] for r in sweep)])
    util_t = Table(name="cost_vs_utilization", title="Output cost versus utilisation (at each fleet's batch)",
                   columns=[Column("target", "replica"), Column("utilization_frac", "utilisation [fraction]"),
                            Column("value", "output [$/M tokens]")], rows=util_rows)
    ok = sorted([f for f in fleet if f["meets_sla"]], key=lambda f: f["usd_per_hour"])
    answer = _serving_answer(st, m, ok, [f for f in fleet if not f["meets_sla"]])
    return {"answer": answer, "tables": [fleet_t, sweep_t, util_t], "plots": plots, "params": params_used,
            "plot_captions": _SERVING_CAPTIONS}


_SERVING_CAPTIONS = {
    "latency_throughput": "Each point is one batch size; up and to the right is better. The dotted line is the "
                          "per-user speed the study asks for.",
    "roofline": "Markers: the FLOP/s wseplan predicts for one replica at each swept batch (MFU x peak). Dashed: "
                "the roofs, an upper bound (dense peak, and the memory that holds the weights: SRAM on a wafer, HBM "
                "on a GPU); a point far below its roof is bound by something else (fabric latency, overheads). The "
                "vertical lines mark decode at the smallest and largest swept batch (FLOPs per byte of weights and "
                "KV cache read).",
    "cost_vs_utilization": "Amortised cost per output token falls as the share of busy hours rises.",
    "cost_bands": "P10-P90 of the Monte Carlo over the cost inputs' ranges (prices, power, PUE, utilisation, "
                  "amortisation).",
}


def _serving_answer(st: Study, m, ok: list[dict], failed: list[dict]) -> str:
    sv = st.serving
    head = (f"To serve {m.name} ({st.precision}) at {fmt_num(sv.demand_tokens_per_s)} output tokens/s with at least "
            f"{fmt_num(sv.min_tokens_per_s_per_user)} tokens/s per user ({sv.prompt_tokens}-token prompts, "
            f"{sv.output_tokens}-token answers), ")
    if not ok:
        return head + "none of the targets meets the per-user speed at any swept batch."
    b = ok[0]
    parts = [head + f"the cheapest fleet is {b['replicas']} x {b['target']} ({b['devices']} devices) at batch "
             f"{b['batch']}: ${fmt_num(b['usd_per_hour'])}/h (${fmt_num(b['usd_per_year'] / 1e6)}M/yr), "
             f"${fmt_num(b['usd_per_mtok'])} per million output tokens (P10-P90 ${fmt_num(b['usd_per_mtok_p10'])}-"
             f"{fmt_num(b['usd_per_mtok_p90'])}), {fmt_num(b['power_w'] / 1e3)} kW, "
             f"{fmt_num(b['tokens_per_s_per_user'])} tokens/s per user."]
    for f in ok[1:]:
        parts.append(f"{f['replicas']} x {f['target']} costs {fmt_num(f['usd_per_hour'] / b['usd_per_hour'])}x as "
                     f"much per hour (${fmt_num(f['usd_per_mtok'])} per million tokens, "
                     f"{fmt_num(f['tokens_per_s_per_user'])} tokens/s per user).")
    for f in failed:
        parts.append(f"{f['target']} cannot meet the per-user speed ({f['note']}).")
    return " ".join(parts)


# --------------------------------------------------------------------------------------------- training
def _size_target(tgt: str, n: int, cat) -> tuple[str, int]:
    """``cs3`` + 4 -> ``cs3x4`` (systems); ``h100`` + 4 -> ``h100x32`` (4 nodes of 8 GPUs)."""
    from ..targets import parse_target

    t = parse_target(tgt, cat)
    if t.count is not None:
        raise InputError(f"training study target {tgt!r}: give the hardware without a count; the study sweeps "
                         "'training.sizes'")
    per = 1 if t.kind == "wafer" else int(t.device.gpus_per_node.si)
    return f"{tgt}x{n * per}", n * per


def _training(st: Study, cat) -> dict:
    from ..compare import compare_case
    from ..workload import resolve_model

    tr = st.training
    m = resolve_model(st.model, cat)
    prices = _prices(cat)
    sweep, cases, params_used = [], {}, {}
    for tgt in st.targets:
        for n in tr.sizes:
            label, ndev = _size_target(tgt, n, cat)
            row, times, params = compare_case(m, label, phase="train", precision=st.precision,
                                              batch=tr.global_batch, context=tr.seq_len, output_tokens=None,
                                              train_tokens=tr.tokens, catalog=cat, prices=prices,
                                              uncertainty=st.cost.uncertainty, seed=st.cost.seed,
                                              overrides=st.cost.set)
            rec = row.to_row()
            rec.update(family=tgt, size=n, target=label, notes=row.notes[-1] if row.run_s is None and row.notes else "")
            rec["meets_deadline"] = bool(rec["run_s"] is not None and rec["run_s"] <= tr.deadline_days * 86400)
            rec["energy_j_per_run"] = (rec["energy_j_per_token"] * tr.tokens
                                       if rec["energy_j_per_token"] is not None else None)
            if times is not None:
                cases[(tgt, n)] = (times, params)
                params_used.setdefault(tgt, params)
                band = _run_band(times, params, st)
                rec.update(band)
            sweep.append(rec)
    # scaling efficiency: per-device throughput relative to the smallest size that ran
    for tgt in st.targets:
        rs = [r for r in sweep if r["family"] == tgt and r["tokens_per_s"]]
        if rs:
            ref = rs[0]["tokens_per_s"] / rs[0]["num_devices"]
            for r in rs:
                r["scaling_efficiency_frac"] = (r["tokens_per_s"] / r["num_devices"]) / ref
    plan = []
    for tgt in st.targets:
        rs = [r for r in sweep if r["family"] == tgt and r["meets_deadline"]]
        if rs:
            best = min(rs, key=lambda r: (r["usd_per_run"], r["num_devices"]))
            plan.append(dict(best, note=""))
        else:
            ran = [r for r in sweep if r["family"] == tgt and r["run_s"]]
            fastest = min(ran, key=lambda r: r["run_s"]) if ran else None
            plan.append({"family": tgt, "target": tgt, "meets_deadline": False,
                         "note": (f"misses the deadline at every swept size (fastest: {fastest['target']}, "
                                  f"{fmt_num(fastest['run_s'] / 86400)} days)") if fastest
                         else "no swept size runs (fit or time model)"})
    cols_run = [Column("target", "cluster"), Column("num_devices", "devices [count]"),
                Column("run_s", "time to train [days]", 86400.0), Column("tokens_per_s", "throughput [tokens/s]"),
                Column("model_flop_utilization_frac", "MFU [fraction]"), Column("power_w", "IT power [kW]", 1e3),
                Column("usd_per_run", "run cost [$M]", 1e6), Column("usd_per_run_p10", "P10 [$M]", 1e6),
                Column("usd_per_run_p90", "P90 [$M]", 1e6), Column("energy_j_per_run", "energy [MWh]", 3.6e9),
                Column("bottleneck", "bottleneck")]
    plan_t = Table(name="plan", title=f"Cheapest cluster per hardware that trains {fmt_num(tr.tokens / 1e9)}B tokens "
                                      f"within {fmt_num(tr.deadline_days)} days",
                   columns=cols_run + [Column("note", "note")], rows=plan)
    sweep_t = Table(name="size_sweep", title="Time, cost and scaling versus cluster size",
                    columns=cols_run[:3] + [Column("scaling_efficiency_frac", "scaling efficiency [fraction]")]
                    + cols_run[3:] + [Column("meets_deadline", "meets deadline"), Column("notes", "notes")],
                    rows=sweep)
    plots = {}
    plots["scaling_efficiency"] = Plot(
        title=f"{m.name}: scaling efficiency vs cluster size (global batch {tr.global_batch} x {tr.seq_len} tokens)",
        xlabel="systems or 8-GPU nodes [count]", ylabel="per-device throughput vs smallest size [fraction]",
        logx=True, ylim_zero=True,
        series=[Series(label=t, x=[r["size"] for r in sweep if r["family"] == t and r.get("scaling_efficiency_frac")],
                       y=[r["scaling_efficiency_frac"] for r in sweep
                          if r["family"] == t and r.get("scaling_efficiency_frac")]) for t in st.targets])
    plots["time_to_train"] = Plot(
        title=f"Time to train {fmt_num(tr.tokens / 1e9)}B tokens vs cluster size", logx=True, logy=True,
        xlabel="systems or 8-GPU nodes [count]", ylabel="time to train [days]",
        series=[Series(label=t, x=[r["size"] for r in sweep if r["family"] == t and r["run_s"]],
                       y=[r["run_s"] / 86400 for r in sweep if r["family"] == t and r["run_s"]]) for t in st.targets],
        markers=[Marker(tr.deadline_days, f"deadline {fmt_num(tr.deadline_days)} days", axis="y")])
    plots["cost_bands"] = Plot(
        title="Monte Carlo run cost (P10-P90 shaded, median line) vs cluster size", logx=True, logy=True,
        xlabel="systems or 8-GPU nodes [count]", ylabel="cost of the run [$M]",
        series=[Series(label=t, x=[r["size"] for r in sweep if r["family"] == t and r.get("usd_per_run_p50")],
                       y=[r["usd_per_run_p50"] / 1e6 for r in sweep if r["family"] == t and r.get("usd_per_run_p50")],
                       low=[r["usd_per_run_p10"] / 1e6 for r in sweep if r["family"] == t and r.get("usd_per_run_p50")],
                       high=[r["usd_per_run_p90"] / 1e6 for r in sweep
                             if r["family"] == t and r.get("usd_per_run_p50")]) for t in st.targets])
    if not st.cost.uncertainty:  # no Monte Carlo (cost.uncertainty 0): the nominal run cost, no band
        plots["cost_bands"] = Plot(
            title="Run cost (nominal inputs; cost.uncertainty is 0) vs cluster size", logx=True, logy=True,
            xlabel="systems or 8-GPU nodes [count]", ylabel="cost of the run [$M]",
            series=[Series(label=t, x=[r["size"] for r in sweep if r["family"] == t and r.get("usd_per_run")],
                           y=[r["usd_per_run"] / 1e6 for r in sweep if r["family"] == t and r.get("usd_per_run")])
                    for t in st.targets])
    chosen = {p["family"]: (p.get("size"), p["target"]) for p in plan if p.get("size")}
    plots["cost_vs_utilization"], util_rows = _cost_vs_util(st, cases, chosen, "usd_per_run", "run cost [$M]",
                                                            scale=1e6)
    stream_rows = []
    wafer_targets = [t for t in st.targets if _is_wafer(t, cat)]
    if wafer_targets:
        plots["weight_streaming"], stream_rows = _stream_plot(st, m, cat, wafer_targets[0])
    achieved = {}
    for tgt in st.targets:  # the predicted MFU at the size the plan picks (else the smallest size that ran)
        pick = next((p for p in plan if p.get("family") == tgt and p.get("model_flop_utilization_frac")), None)
        pick = pick or next((r for r in sweep if r["family"] == tgt and r.get("model_flop_utilization_frac")), None)
        if pick:
            achieved[(tgt, tr.global_batch)] = {"mfu": pick["model_flop_utilization_frac"], "label": pick["target"]}
    plots["roofline"] = _roofline(st, m, cat, phase="train", batches=[1, tr.global_batch], context=tr.seq_len,
                                  achieved=achieved)
    util_t = Table(name="cost_vs_utilization", title="Run cost versus utilisation (at each plan's cluster size)",
                   columns=[Column("target", "cluster"), Column("utilization_frac", "utilisation [fraction]"),
                            Column("value", "run cost [$M]", 1e6)], rows=util_rows)
    tables = [plan_t, sweep_t, util_t]
    if stream_rows:
        tables.append(Table(name="weight_streaming", title=f"Weight streaming on one {wafer_targets[0]} versus batch",
                            columns=[Column("batch", "batch [sequences]"), Column("tokens", "tokens per step [tokens]"),
                                     Column("forward_compute_s", "forward compute [s]"),
                                     Column("weight_load_s", "weight load per pass [s]"),
                                     Column("compute_s", "compute incl. recompute [s]"),
                                     Column("exposed_load_s", "exposed load [s]"), Column("step_s", "step [s]"),
                                     Column("activation_policy", "activations"), Column("bottleneck", "bottleneck")],
                            rows=stream_rows))
    answer = _training_answer(st, m, plan)
    return {"answer": answer, "tables": tables, "plots": plots, "params": params_used,
            "plot_captions": _TRAINING_CAPTIONS}


_TRAINING_CAPTIONS = {
    "scaling_efficiency": "Per-device throughput at each size divided by that at the smallest size, with the "
                          "global batch held fixed (strong scaling).",
    "time_to_train": "Wall-clock time for the whole token budget; the dashed line is the deadline.",
    "cost_bands": "P10-P90 of the Monte Carlo over the cost inputs' ranges; the line is the median.",
    "cost_vs_utilization": "Amortised run cost when the cluster is busy for this share of its life.",
    "weight_streaming": "One system: a pass's compute grows with the batch while its weight stream from MemoryX "
                        "does not; above the dotted line each layer's compute hides its load. The step adds the "
                        "backward pass, recompute or activation spill, and the exposed optimizer update.",
    "roofline": "Markers: the FLOP/s per device wseplan predicts (MFU x peak) at the cluster size the plan picks. "
                "Dashed: the roofs of one device, an upper bound (FLOPs per weight byte read); the lines mark a "
                "training step at batch 1 and at the global batch on one device. A wafer's weights arrive over "
                "the MemoryX stream, whose roof sets the batch a system needs.",
}


def _run_band(times, params, st: Study) -> dict:
    """P10/P50/P90 of the run cost from the Monte Carlo over cost inputs."""
    from ..analytic import cost as C

    if not st.cost.uncertainty:
        return {}
    pct = C.monte_carlo(params, lambda p: C.evaluate(p, times), n=st.cost.uncertainty, seed=st.cost.seed,
                        metrics=["usd_per_run"])[0]
    return {"usd_per_run_p10": pct.p10, "usd_per_run_p50": pct.p50, "usd_per_run_p90": pct.p90}


def _training_answer(st: Study, m, plan: list[dict]) -> str:
    tr = st.training
    head = (f"To train {m.name} on {fmt_num(tr.tokens / 1e9)}B tokens within {fmt_num(tr.deadline_days)} days "
            f"(global batch {tr.global_batch} x {tr.seq_len} tokens), ")
    ok = sorted([p for p in plan if p["meets_deadline"]], key=lambda p: p["usd_per_run"])
    if not ok:
        return head + "no swept cluster meets the deadline. " + " ".join(f"{p['family']}: {p['note']}." for p in plan)
    b = ok[0]
    band = (f" (P10-P90 ${fmt_num(b['usd_per_run_p10'] / 1e6)}M-${fmt_num(b['usd_per_run_p90'] / 1e6)}M)"
            if b.get("usd_per_run_p10") is not None else "")  # no band with cost.uncertainty 0
    parts = [head + f"the cheapest option is {b['target']} ({b['num_devices']} devices): "
             f"{fmt_num(b['run_s'] / 86400)} days, ${fmt_num(b['usd_per_run'] / 1e6)}M{band}, "
             f"{fmt_num(b['energy_j_per_run'] / 3.6e9)} MWh."]
    for p in ok[1:]:
        parts.append(f"{p['target']} takes {fmt_num(p['run_s'] / 86400)} days for ${fmt_num(p['usd_per_run'] / 1e6)}M "
                     f"({fmt_num(p['energy_j_per_run'] / 3.6e9)} MWh).")
    for p in plan:
        if not p["meets_deadline"]:
            parts.append(f"{p['family']} {p['note']}.")
    return " ".join(parts)


def _is_wafer(tgt: str, cat) -> bool:
    from ..targets import parse_target

    return parse_target(tgt, cat).kind == "wafer"


def _stream_plot(st: Study, m, cat, tgt: str):
    """Weight streaming on one system versus batch, from :func:`wseplan.timing.stream` (the plan chain)."""
    from ..targets import parse_target
    from ..timing import stream
    from ..workload import build_workload

    tr = st.training
    t = parse_target(f"{tgt}x1", cat)
    w = build_workload(m, cat, precision=st.precision, phase="train", batch=1, context=tr.seq_len)
    rows = []
    threshold = None
    for b in tr.stream_batches:
        r = stream(m, t, precision=st.precision, batch=b, context=tr.seq_len, catalog=cat)
        load = w.total_weight_bytes / r.stream_bandwidth_bytes_per_s  # one pass over every layer's weights
        fwd = (r.compute_s - r.recompute_s) / 3.0  # forward share of forward + backward (2x forward)
        rows.append({"batch": b, "tokens": r.tokens_per_step, "forward_compute_s": fwd, "weight_load_s": load,
                     "compute_s": r.compute_s, "exposed_load_s": r.exposed_load_s, "step_s": r.step_s,
                     "activation_policy": r.activation_policy, "bottleneck": r.bottleneck})
        threshold = r.min_tokens_compute_bound / tr.seq_len
    xs = [r["batch"] for r in rows]
    series = [Series(label="forward compute, one pass", x=xs, y=[r["forward_compute_s"] for r in rows]),
              Series(label="weight load, one pass (MemoryX stream)", x=xs, y=[r["weight_load_s"] for r in rows],
                     style="--"),
              Series(label="exposed load per step", x=xs, y=[max(r["exposed_load_s"], 1e-6) for r in rows], style=":"),
              Series(label="step (fwd + bwd + recompute/spill + optimizer)", x=xs, y=[r["step_s"] for r in rows])]
    markers = [Marker(threshold, f"load hidden above batch {fmt_num(threshold)}")] if threshold else []
    plot = Plot(title=f"{m.name} on one {tgt}: weight streaming vs batch ({tr.seq_len}-token sequences)",
                xlabel="batch per system [sequences]", ylabel="time per step [s]", logx=True, logy=True,
                series=series, markers=markers, legend_loc="upper left")
    return plot, rows


# --------------------------------------------------------------------------------------------- shared plots
def _cost_vs_util(st: Study, cases: dict, chosen: dict, metric: str, ylabel: str, scale: float = 1.0):
    """Re-evaluate ``metric`` of each target's chosen case over the study's utilisations (no time re-runs)."""
    import numpy as np

    from ..analytic import cost as C

    utils = np.asarray(st.cost.utilizations, dtype=float)
    series, rows = [], []
    for tgt in st.targets:
        if tgt not in chosen or (tgt, chosen[tgt][0]) not in cases:
            continue
        times, params = cases[(tgt, chosen[tgt][0])]
        p = C.nominal(params)
        p["utilization_frac"] = utils
        vals = np.broadcast_to(np.asarray(C.evaluate(p, times)[metric], dtype=float), utils.shape)
        label = chosen[tgt][1]
        series.append(Series(label=label, x=list(utils), y=[float(v) / scale for v in vals]))
        rows += [{"target": label, "utilization_frac": float(u), "value": float(v)} for u, v in zip(utils, vals)]
    plot = Plot(title="Cost versus utilisation (share of hours the fleet does paid work)",
                xlabel="utilisation [fraction of hours]", ylabel=ylabel, series=series, logy=True)
    return plot, rows


def _roofline(st: Study, m, cat, *, phase: str, batches: list[int], context: int, achieved: dict) -> Plot:
    """Each target's roof (peak and the memory that feeds it; an upper bound, drawn apart) and the FLOP/s the
    model predicts there: predicted tokens/s x FLOPs per token at each swept batch (serving), or MFU x peak at
    the chosen size (training). ``achieved``: (target, batch) -> ``{tokens_per_s}`` or ``{mfu, label}``."""
    from ..workload import build_workload
    from ..targets import parse_target

    roofs, points, predicted = [], [], []
    lo_b, hi_b = min(batches), max(batches)

    def workload(b: int):
        return build_workload(m, cat, precision=st.precision, phase=phase, batch=b, context=context)

    def intensity(b: int) -> float:
        w = workload(b)
        if phase == "decode":
            return float(w.flop_per_token.sum()) * b / (w.total_weight_bytes + w.kv_cache_bytes)
        # a training step reads each weight for forward and backward: FLOPs per weight byte read
        return 3.0 * float(w.flop_per_token.sum()) * b * context / (2.0 * w.total_weight_bytes)

    for tgt in st.targets:
        t = parse_target(tgt, cat)
        n = 1 if st.kind == "training" else (t.count or 1)
        peak = t.device.peak_flop_per_s(st.precision) * n
        if t.kind == "wafer":
            bw, mem = t.device.sram_bandwidth_bytes_per_s.si * n, "SRAM"
        else:
            bw, mem = t.device.hbm_bandwidth_bytes_per_s.si * n, "HBM"
        label = tgt if st.kind != "training" else t.key
        roofs.append({"label": f"{label} roof (peak, {mem})", "peak_flop_per_s": peak, "bandwidth_bytes_per_s": bw})
        if t.kind == "wafer" and phase == "train":  # weights stream in from MemoryX over the system I/O
            sysm = cat.systems[t.device.system]
            mx = cat.memoryx[sysm.memoryx]
            roofs.append({"label": f"{t.key} roof (MemoryX weight stream)", "peak_flop_per_s": peak,
                          "bandwidth_bytes_per_s": mx.dram_stream_bandwidth_bytes_per_s.si * n})
        xs, ys, what = [], [], ""
        for b in sorted(batches):
            hit = achieved.get((tgt, b))
            if hit is None:
                continue
            what = hit.get("label", "")
            xs.append(intensity(b))
            ys.append(hit["mfu"] * peak if "mfu" in hit else hit["tokens_per_s"] * float(workload(b).flop_per_token.sum()))
        if xs:
            predicted.append({"label": f"{label} predicted" + (f" ({what}, per device)" if what else ""),
                              "intensity_flop_per_byte": xs, "flop_per_s": ys})
    for b in sorted({lo_b, hi_b}):
        points.append({"label": f"{phase}, batch {b}", "intensity_flop_per_byte": intensity(b)})
    title = f"Roofline: {m.name} {phase} ({st.precision})"
    return roofline_plot(targets=roofs, points=points, predicted=predicted, title=title)


# --------------------------------------------------------------------------------------------- claims
def claims_path_inside(base: Path, rel: Path) -> Path:
    """``base / rel`` after resolving symlinks, refused when it leaves the study's folder ``base``.

    A claims file that is (or sits behind) a symlink pointing outside the study folder is refused, so a study
    cannot make wseplan read files from elsewhere; a missing file is left to :func:`load_claims` to report.
    """
    try:
        root = base.resolve(strict=True)
        real = (base / rel).resolve(strict=False)
    except (OSError, RuntimeError):
        raise InputError(f"claims: {str(rel)!r} is a symlink loop; give a claims file inside the study's folder") \
            from None
    if root != real and root not in real.parents:
        raise InputError(f"claims: {str(rel)!r} resolves to {real}, outside the study's folder {root}; copy the "
                         "claims file next to the study")
    return base / rel


def _claims(st: Study, cat, base: Path) -> dict:
    from ..claims import check, load_claims

    path = Path(st.claims)
    if path.is_absolute() or ".." in path.parts:
        raise InputError(f"claims: {st.claims!r} must be a relative path inside the study's folder")
    claims = load_claims(claims_path_inside(base, path))
    verdicts = check(claims, catalog=cat)
    table = claims_table(verdicts, texts=[c.text for c in claims])
    counts = {k: sum(v.verdict == k for v in verdicts) for k in ("impossible", "optimistic", "consistent")}
    imp = [v for v in verdicts if v.verdict == "impossible"]
    answer = (f"Of {len(verdicts)} claims, {counts['impossible']} are impossible, {counts['optimistic']} optimistic "
              f"and {counts['consistent']} consistent with physics and wseplan's estimates. "
              + " ".join(f"{v.id} breaks {v.bound} by {fmt_num(v.margin)}x." for v in imp))
    plotted = [v for v in verdicts if v.margin]
    series = []
    for verdict in ("impossible", "optimistic", "consistent"):
        idx = [i for i, v in enumerate(plotted) if v.verdict == verdict]
        if idx:
            series.append(Series(label=verdict, x=[plotted[i].margin for i in idx], y=[i + 1 for i in idx], style="",
                                 marker=True, color=VERDICT_COLORS[verdict]))
    plot = Plot(title="Each claim against its bound or wseplan's estimate",
                xlabel="claim / (bound or estimate), better-is-larger [x]", ylabel="claim", series=series,
                logx=True, markers=[Marker(1.0, "bound or estimate")],
                yticks=[(i + 1, v.id) for i, v in enumerate(plotted)])
    return {"answer": answer, "tables": [table], "plots": {"claims_margin": plot}, "params": {},
            "plot_captions": {"claims_margin": "Margins above 1 mean the claim is better than the bound "
                                               "(impossible) or than wseplan's estimate (optimistic when beyond the "
                                               "validated error)."},
            "extra_sources": _claim_sources(claims, cat), "targets": _claim_targets(claims, cat),
            "assumption_rows": _error_rows(cat)}


def _claim_targets(claims, cat) -> list[str]:
    from ..targets import parse_target

    keys = []
    for c in claims:
        if c.target:
            k = parse_target(c.target, cat).key
            if k not in keys:
                keys.append(k)
    return keys


def _error_rows(cat) -> list[dict]:
    from ..claims import validated_errors

    return [{"input": f"validated error of {name} predictions", "value": f"{fmt_num(err * 100)}%", "range": "",
             "basis": "measured", "source": text} for name, (err, text) in sorted(validated_errors(cat).items())]


def _claim_sources(claims, cat) -> list[str]:
    from ..targets import parse_target

    ids: list[str] = []
    for c in claims:
        if c.target:
            ids += _entry_sources(parse_target(c.target, cat), cat)
        if c.model:
            ids += _model_sources(c.model, cat)
    return ids


# --------------------------------------------------------------------------------------------- sources
def _quantity_sources(entry) -> list[str]:
    from ..catalog.schema import Quantity

    ids = []
    for name in type(entry).model_fields:
        v = getattr(entry, name)
        items = [v] if isinstance(v, Quantity) else list(v.values()) if isinstance(v, dict) else []
        for q in items:
            if isinstance(q, Quantity):
                ids += q.source_ids
    return ids


def _entry_sources(t, cat) -> list[str]:
    ids = _quantity_sources(t.device)
    if t.kind == "wafer":
        sysm = cat.systems[t.device.system]
        ids += _quantity_sources(sysm)
    return ids


def _model_sources(name: str, cat) -> list[str]:
    from ..workload import resolve_model

    m = resolve_model(name, cat)
    src = getattr(m, "source", [])
    return [src] if isinstance(src, str) else list(src)


def _assumptions_and_sources(st: Study, cat, params: dict, extra: list[str], targets: list[str] | None = None,
                             extra_rows: list[dict] | None = None) -> tuple[Table, list[dict]]:
    from ..targets import parse_target

    rows = list(extra_rows or [])
    ids: list[str] = []
    if st.model:
        ids += _model_sources(st.model, cat)
    for tgt in (targets if targets is not None else st.targets):
        t = parse_target(tgt, cat)
        ids += _entry_sources(t, cat)
        dev = t.device
        label = t.key
        q_peak = (dev.flop_per_cycle_per_pe.get(st.precision) or dev.flop_per_cycle_per_pe["fp16"]) \
            if t.kind == "wafer" else None
        if t.kind == "wafer":
            rows.append(_arow(f"{label} dense peak ({st.precision})", fmt_quantity(dev.peak_flop_per_s(st.precision),
                                                                                    "FLOP/s"),
                              q_peak, cat, extra_note="PEs x FLOP/cycle x clock"))
            rows.append(_arow(f"{label} usable SRAM", fmt_quantity(dev.usable_sram_bytes, "bytes"),
                              dev.sram_per_pe_bytes, cat, extra_note="PEs x SRAM per PE"))
            rows.append(_arow(f"{label} clock", fmt_num(dev.clock_hz.si / 1e9) + " GHz", dev.clock_hz, cat))
            sysm = cat.systems[dev.system]
            rows.append(_arow(f"{sysm.name} power", fmt_quantity(sysm.power_w.si, "W"), sysm.power_w, cat))
            rows.append(_arow(f"{sysm.name} I/O (MemoryX/SwarmX)", fmt_quantity(sysm.io_bandwidth_bytes_per_s.si,
                                                                                 "bytes/s"),
                              sysm.io_bandwidth_bytes_per_s, cat))
        else:
            pk = dev.dense_peak_flop_per_s.get(st.precision)
            rows.append(_arow(f"{label} dense peak ({st.precision})", fmt_quantity(dev.peak_flop_per_s(st.precision),
                                                                                    "FLOP/s"), pk, cat))
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
                         "range": f"{_param_value(name, p.low)} to {_param_value(name, p.high)}"
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


_SITE_PARAMS = {"electricity_usd_per_kwh", "pue", "amortization_years", "installation_frac",
                "maintenance_frac_per_year", "facility_usd_per_kw_month", "utilization_frac", "busy_power_frac",
                "idle_power_frac", "train_tokens_per_param", "rack_units_per_rack"}


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


# --------------------------------------------------------------------------------------------- markdown
def _markdown(st: Study, body: dict, assumptions: Table, sources: list[dict], pv: dict) -> str:
    doc = Document()
    doc.heading(st.title, 1)
    doc.para(f"**Answer.** {body['answer']}")
    doc.para(f"**Question.** {st.question}")
    doc.para(f"*wseplan {pv['version']} · {_date_line(pv)} · catalog {pv['catalog_date'] or 'undated'} · "
             + (f"prices {pv['prices_date']}" if pv["prices_date"] else "no prices used") + "*")
    doc.heading("Assumptions", 2)
    bullets = [f"Model: {st.model} at {st.precision}." if st.model else "",
               f"Cost: {st.cost.uncertainty} Monte Carlo samples (seed {st.cost.seed}) over each input's low-high "
               f"range (triangular)." if st.kind != "claims" else "",
               "Costs are amortised TCO (capex over the amortisation years, maintenance, facility and electricity "
               "at the site PUE) for the hours used, spread over busy hours at the stated utilisation; not a "
               "purchase price." if st.kind != "claims" else "",
               ("Pinned cost inputs: " + ", ".join(f"{k} = {fmt_num(v)}" for k, v in sorted(st.cost.set.items())) + ".")
               if st.cost.set else "",
               *st.notes]
    doc.bullets([b for b in bullets if b])
    doc.table(assumptions, "assumptions.csv")
    doc.heading("Results", 2)
    for t in body["tables"]:
        doc.table(t, f"{safe_filename(t.name)}.csv")
    doc.heading("Plots", 2)
    captions = body.get("plot_captions", {})
    for name, p in body["plots"].items():
        fname = f"{safe_filename(name)}.png"
        doc.image(fname, p.title, captions.get(name, ""))
    doc.heading("Sources used", 2)
    doc.bullets([f"`{s['id']}`: {s['title']}" + (f" <{s['url']}>" if s["url"] else "") +
                 (f" ({s['date']})" if s["date"] else "") for s in sources])
    doc.para(f"Generated by `wseplan report` (wseplan {pv['version']}); every number traces to the catalog entries "
             "listed above. The same tables are in `report.xlsx` (one sheet per table, with the assumptions and "
             "sources). Regenerate with the same study file, catalogs and wseplan version to get the same bytes.")
    return doc.render()
