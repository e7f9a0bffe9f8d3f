"""Time: how long a training step, a prefill or a decoded token takes on a target, and why.

One entry point, :func:`predict_time`, dispatches to the wafer models (:mod:`wseplan.analytic.wse_time`) and
the GPU models (:mod:`wseplan.analytic.gpu_time`). Every result names its bottleneck.
"""
from __future__ import annotations

from .records import RecordHead


class TimeResult(RecordHead):
    """One time prediction. Fields that do not apply to a phase are None.

    Units: seconds, tokens/s, FLOP/s, watts; fractions end in ``_frac``.
    """

    num_devices: int
    output_tokens: int | None = None
    step_s: float | None = None  # train: one optimizer step; prefill: the prompt; decode: one token for the batch
    tokens_per_s: float | None = None  # whole system (train: training tokens; inference: output tokens)
    tokens_per_s_per_user: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    model_flop_per_s: float | None = None
    model_flop_utilization_frac: float | None = None
    bottleneck: str
    breakdown_s: dict[str, float] = {}
    layout: dict[str, int | str] | None = None
    notes: list[str] = []

    def to_record(self) -> dict:
        return self.model_dump(mode="json")

    def to_row(self) -> dict:
        rec = self.to_record()
        row = {k: v for k, v in rec.items() if not isinstance(v, (list, dict)) and v is not None}
        for k, v in (self.breakdown_s or {}).items():
            row[f"breakdown_{k}_s"] = v
        for k, v in (self.layout or {}).items():
            row[f"layout_{k}"] = v
        return row


def predict_time(model, target, *, phase: str = "decode", precision: str = "bf16", batch: int | None = None,
                 context: int | None = None, output_tokens: int | None = None, catalog=None, **options) -> TimeResult:
    """Predict time and throughput of ``model`` on ``target`` (the API behind ``wseplan time``).

    ``model``/``target`` as for :func:`wseplan.fit.fit`. ``options`` are passed to the device model
    (GPU: tensor_parallel, pipeline_parallel, data_parallel, micro_batch, recompute, zero_stage, ...).
    """
    from .catalog.load import load_catalog
    from .fit import resolve_model
    from .targets import parse_target

    cat = catalog or load_catalog()
    m = resolve_model(model, cat) if isinstance(model, str) else model
    t = parse_target(target, cat) if isinstance(target, str) else target
    if t.kind == "wafer":
        from .analytic import wse_time

        return wse_time.predict(m, t, cat, phase=phase, precision=precision, batch=batch, context=context,
                                output_tokens=output_tokens, **options)
    from .analytic import gpu_time

    return gpu_time.predict(m, t, cat, phase=phase, precision=precision, batch=batch, context=context,
                            output_tokens=output_tokens, **options)
