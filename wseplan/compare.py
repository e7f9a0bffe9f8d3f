"""Compare: one model on several targets side by side — fit, time, throughput, bottleneck, power and cost.

Composes :func:`wseplan.fit.fit` (devices needed), :func:`wseplan.timing.predict_time` (time, throughput,
bottleneck) and :func:`wseplan.analytic.cost.cost` (TCO $/hour, $/M tokens or $/run, energy per token).
Nothing here models physics of its own.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .errors import InputError, WseplanError

SCHEMA_VERSION = 1
PHASES = ("train", "prefill", "decode")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CompareRow(_Frozen):
    """One target. SI units: seconds, tokens/s, watts, USD, joules. None where it does not apply."""

    target: str
    hardware: str
    device_kind: str
    fits: bool
    num_devices: int
    num_systems: int | None = None
    binding: str
    step_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_user: float | None = None
    model_flop_utilization_frac: float | None = None
    bottleneck: str | None = None
    power_w: float | None = None
    usd_per_hour: float | None = None
    usd_per_mtok: float | None = None
    usd_per_run: float | None = None
    run_s: float | None = None
    energy_j_per_token: float | None = None
    usd_per_mtok_p10: float | None = None
    usd_per_mtok_p50: float | None = None
    usd_per_mtok_p90: float | None = None
    notes: list[str] = []

    def to_row(self) -> dict:
        row = self.model_dump(mode="json")
        row["notes"] = "; ".join(self.notes)
        return row


class CompareResult(_Frozen):
    """The compare record (``wseplan compare --format json``; see docs/cli-output.md)."""

    schema_version: int = SCHEMA_VERSION
    model: str
    phase: str
    precision: str
    batch: int
    context: int
    output_tokens: int | None = None
    train_tokens: float | None = None
    prices_date: str | None = None
    rows: list[CompareRow]
    notes: list[str] = []

    def to_record(self) -> dict:
        return self.model_dump(mode="json")

    def to_frame(self):
        """One row per target (pandas DataFrame), the case in ``df.attrs``."""
        import pandas as pd

        df = pd.DataFrame([r.to_row() for r in self.rows])
        df.attrs.update(model=self.model, phase=self.phase, precision=self.precision, batch=self.batch,
                        context=self.context, prices_date=self.prices_date)
        return df

    def table(self, name: str = "compare"):
        """A report table with display units in every header."""
        from .report.markdown import Column, Table

        train = self.phase == "train"
        cols = [Column("target", "target"), Column("fits", "fits"), Column("num_devices", "devices [count]"),
                Column("bottleneck", "bottleneck")]
        if train:
            cols += [Column("step_s", "step [s]"), Column("tokens_per_s", "throughput [tokens/s]"),
                     Column("model_flop_utilization_frac", "MFU [fraction]"),
                     Column("run_s", "run [days]", 86400.0)]
        elif self.phase == "prefill":
            cols += [Column("ttft_s", "time to first token [ms]", 1e-3),
                     Column("tokens_per_s", "prompt throughput [tokens/s]")]
        else:
            cols += [Column("ttft_s", "time to first token [ms]", 1e-3),
                     Column("tpot_s", "time per output token [ms]", 1e-3),
                     Column("tokens_per_s_per_user", "per user [tokens/s]"),
                     Column("tokens_per_s", "per system [tokens/s]")]
        cols += [Column("power_w", "power [kW]", 1e3), Column("usd_per_hour", "cost [$/h]")]
        cols += ([Column("usd_per_run", "run cost [$M]", 1e6), Column("usd_per_mtok", "[$/M tokens trained]")]
                 if train else [Column("usd_per_mtok", "output [$/M tokens]")])
        cols.append(Column("energy_j_per_token", "energy [J/token]"))
        title = f"{self.model}: {self.phase}, {self.precision}, batch {self.batch}, context {self.context}"
        rows = []
        for r in self.rows:
            row = r.to_row()
            if not r.fits and r.bottleneck is None:
                row["bottleneck"] = f"does not fit ({r.binding})"
            rows.append(row)
        return Table(name=name, title=title, columns=cols, rows=rows)


def _metric(res, name: str):
    try:
        return res.metric(name)
    except KeyError:
        return None


def _time(model, t, catalog, *, phase, precision, batch, context):
    from .timing import predict_time

    return predict_time(model, t, phase=phase, precision=precision, batch=batch, context=context, catalog=catalog)


def compare_one(model, target: str, *, phase: str, precision: str, batch: int, context: int,
                output_tokens: int | None = None, train_tokens: float | None = None, catalog=None, prices=None,
                uncertainty: int = 0,
                seed: int = 0, overrides: dict | None = None) -> CompareRow:
    """Fit, time and cost of ``model`` on one target (see :func:`compare_case`)."""
    return compare_case(model, target, phase=phase, precision=precision, batch=batch, context=context,
                        output_tokens=output_tokens, train_tokens=train_tokens, catalog=catalog, prices=prices,
                        uncertainty=uncertainty, seed=seed, overrides=overrides)[0]


def compare_case(model, target: str, *, phase: str, precision: str, batch: int, context: int,
                 output_tokens: int | None = None, train_tokens: float | None = None, catalog=None, prices=None,
                 uncertainty: int = 0,
                 seed: int = 0, overrides: dict | None = None):
    """Fit, time and cost of ``model`` on one target: ``(CompareRow, TimeInputs or None, cost params or None)``.

    The time inputs and cost parameters let a caller re-evaluate the cost for other inputs
    (:func:`wseplan.analytic.cost.evaluate`) without re-running the time models. Inference costs combine the prefill time of a ``context``-token prompt with the per-token decode step at
    KV length ``context`` (``output_tokens`` per request); training costs use the step time and ``train_tokens``.
    """
    import math

    from .analytic import cost as C
    from .fit import fit
    from .targets import Target, parse_target

    t = parse_target(target, catalog) if isinstance(target, str) else target
    label = target if isinstance(target, str) else t.label
    fit_phase = "train" if phase == "train" else "decode"
    fr = fit(model, t, precision=precision, phase=fit_phase, batch=batch, context=context, catalog=catalog)
    if t.count is None:
        t = Target(text=f"{t.key}x{fr.num_devices}", kind=t.kind, key=t.key, device=t.device, count=fr.num_devices)
        label = f"{label} (x{fr.num_devices})"
    notes: list[str] = list(fr.notes)
    n_dev = int(t.count)
    n_sys = n_dev if t.kind == "wafer" else int(math.ceil(n_dev / t.device.gpus_per_node.si))
    if t.kind == "gpu" and n_dev % int(t.device.gpus_per_node.si):
        notes.append(f"power and cost count {n_sys} whole {int(t.device.gpus_per_node.si)}-GPU node(s)")
    base = dict(target=label, hardware=t.key, device_kind=t.kind, fits=fr.fits, num_devices=n_dev,
                num_systems=n_sys, binding=fr.binding)
    weights_fit = fr.fits or (phase == "train" and t.kind == "wafer" and fr.memoryx is not None and fr.memoryx.fits)
    if not weights_fit:
        notes.append(f"does not fit ({fr.binding} binds); no time or cost")
        return CompareRow(**base, notes=notes), None, None
    if not fr.fits:
        notes.append("activation checkpoints exceed the wafer at this batch; the time model handles them "
                     "(recompute or spill)")
    try:
        tr = _time(model, t, catalog, phase=phase, precision=precision, batch=batch, context=context)
        pre = tr if phase != "decode" else None
        if phase != "train" and pre is None:
            pre = _time(model, t, catalog, phase="prefill", precision=precision, batch=batch, context=context)
        if phase == "prefill":
            dec = _time(model, t, catalog, phase="decode", precision=precision, batch=batch, context=context)
        else:
            dec = tr
    except WseplanError as exc:
        notes.append(f"time model: {exc}")
        return CompareRow(**base, notes=notes), None, None
    row = dict(base, step_s=tr.step_s, ttft_s=tr.ttft_s, tpot_s=tr.tpot_s, tokens_per_s=tr.tokens_per_s,
               tokens_per_s_per_user=tr.tokens_per_s_per_user,
               model_flop_utilization_frac=tr.model_flop_utilization_frac, bottleneck=tr.bottleneck)
    if phase == "decode" and row["tpot_s"] is None:
        row["tpot_s"] = tr.step_s
    if phase == "decode" and row["ttft_s"] is None:  # the prompt's prefill, timed for the cost model anyway
        row["ttft_s"] = pre.ttft_s if pre.ttft_s is not None else pre.step_s
    if phase == "prefill" and row["ttft_s"] is None:
        row["ttft_s"] = tr.step_s
    params = C.cost_params(prices, catalog, t, include_memoryx=(phase == "train"))
    params = C.apply_overrides(params, overrides or {}, hardware_key=C.hardware_price_key(t))  # bad input raises
    try:
        if phase == "train":
            if train_tokens is None:
                from .workload import total_params

                train_tokens = params["train_tokens_per_param"].value * total_params(model)
                notes.append(f"training run of {train_tokens:.3g} tokens (train_tokens_per_param x parameters)")
            times = C.TimeInputs(phase="train", num_devices=n_dev, num_systems=n_sys, step_s=float(tr.step_s),
                                 tokens_per_step=float(batch * context), train_tokens=float(train_tokens))
        else:
            prefill_s = pre.ttft_s if pre.ttft_s is not None else pre.step_s
            dec_s = dec.tpot_s if dec.tpot_s is not None else dec.step_s
            times = C.TimeInputs(phase="serve", num_devices=n_dev, num_systems=n_sys, prefill_s=float(prefill_s),
                                 prompt_tokens=float(batch * context), decode_step_s=float(dec_s),
                                 output_tokens_per_step=float(batch))
        cr = C.cost_from_times(params, times, model=model.name, target=t.label, hardware=t.key,
                               price_key=C.hardware_price_key(t), batch=batch, context=context,
                               output_tokens=output_tokens if phase != "train" else None, uncertainty=uncertainty,
                               seed=seed, prices_date=prices.date)
    except WseplanError as exc:
        notes.append(f"cost model: {exc}")
        return CompareRow(**row, notes=notes), None, None
    metric = {"train": "usd_per_mtok_trained", "prefill": "input_usd_per_mtok"}.get(phase, "output_usd_per_mtok")
    energy = {"train": "energy_j_per_train_token", "prefill": "energy_j_per_input_token"}.get(
        phase, "energy_j_per_output_token")
    row.update(power_w=_metric(cr, "busy_it_power_w"), usd_per_hour=_metric(cr, "usd_per_hour"),
               usd_per_mtok=_metric(cr, metric), energy_j_per_token=_metric(cr, energy))
    if phase == "train":
        row.update(usd_per_run=_metric(cr, "usd_per_run"), run_s=_metric(cr, "run_s"))
    band = next((m for m in cr.metrics if m.metric == metric and m.p10 is not None), None)
    if band is not None:
        row.update(usd_per_mtok_p10=band.p10, usd_per_mtok_p50=band.p50, usd_per_mtok_p90=band.p90)
    notes += [n for n in cr.notes if n not in notes]
    return CompareRow(**row, notes=notes), times, params


def compare(model, targets, *, phase: str = "decode", precision: str = "bf16", batch: int | None = None,
            context: int | None = None, output_tokens: int | None = None, train_tokens: float | None = None,
            catalog=None, prices=None, uncertainty: int = 0, seed: int = 0,
            overrides: dict | None = None) -> CompareResult:
    """Compare ``model`` across ``targets`` (the API behind ``wseplan compare``).

    Parameters
    ----------
    model : str
        Catalog model name or alias.
    targets : list of str
        ``<hardware key>[x<N>]``; without a count, the fewest devices that fit.
    phase : str
        ``train`` (cost per run and per M tokens trained), ``prefill`` (input tokens) or ``decode`` (output tokens).
    batch, context : int
        Sequences in flight and tokens per sequence (prompt/KV length in inference) [count, tokens].
    output_tokens : int
        Decode: tokens generated per request (default 256 for the cost model's serving mix).
    train_tokens : float
        Train: tokens of the whole run [tokens]; default from the price catalog's tokens-per-parameter.
    uncertainty, seed : int
        Monte Carlo samples of the cost inputs (0: none) and their seed; adds P10/P50/P90 of $/M tokens.
    overrides : dict
        Cost inputs pinned to a value, ``{name: value}`` or ``{"HW.name": value}`` (as ``wseplan cost --set``).
    """
    from .analytic import cost as C
    from .catalog.load import load_catalog
    from .fit import resolve_model

    if phase not in PHASES:
        raise InputError(f"--phase: unknown {phase!r}; use train, prefill or decode")
    if isinstance(targets, str):
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    if not targets:
        raise InputError("--targets: give at least one target, e.g. wse3,cs3x4,h100x8")
    cat = catalog or load_catalog()
    d = cat.defaults
    batch = int(d.default_batch.si) if batch is None else batch
    context = int(d.default_context_tokens.si) if context is None else context
    m = resolve_model(model, cat) if isinstance(model, str) else model
    prices = prices or C.load_prices(catalog=cat)
    rows = [compare_one(m, t, phase=phase, precision=precision, batch=batch, context=context,
                        output_tokens=output_tokens, train_tokens=train_tokens, catalog=cat, prices=prices,
                        uncertainty=uncertainty, seed=seed, overrides=overrides)
            for t in targets]
    notes = ["power is the busy IT power of the whole fleet; $/h is the amortised TCO per wall-clock hour; "
             "J/token includes the site PUE (see `wseplan cost`)"]
    if phase != "train":
        notes.append(f"inference cost: a {context}-token prompt (prefill) and output tokens at the decode step of "
                     f"KV length {context}, batch {batch}")
    return CompareResult(model=m.name, phase=phase, precision=precision, batch=batch, context=context,
                         output_tokens=output_tokens, train_tokens=train_tokens, prices_date=prices.date, rows=rows,
                         notes=notes)
