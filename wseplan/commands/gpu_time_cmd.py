"""`wseplan time MODEL --target T --phase train|prefill|decode` — step, prefill and decode time on any target.

Calls :func:`wseplan.timing.predict_time`, a view of the planning chain (:func:`wseplan.plan.plan`). Without a
layout option the layout is searched (the fastest that fits); a given layout that does not fit is reported
with ``fits: false`` and no time.
"""
from __future__ import annotations

from typing import Optional

import typer


def register(app) -> None:
    @app.command("time")
    def time_cmd(
        model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b) or a config.json path."),
        target: str = typer.Option(..., "--target", "-t", help="<hardware key>[x<N>]: wse3, cs3x4, h100x8, a100x1536 …"),
        phase: str = typer.Option("decode", "--phase", help="train | prefill | decode | serve (whole requests)"),
        precision: str = typer.Option("bf16", "--precision", "-p", help="fp32 | tf32 | bf16 | fp16 | fp8 | int8 | int4 | fp4"),
        batch: Optional[int] = typer.Option(None, "--batch", "-b", help="Train: global batch [sequences]; inference: concurrent requests."),
        context: Optional[int] = typer.Option(None, "--context", "-c", help="Train: sequence length; prefill: prompt; decode: KV length."),
        output_tokens: Optional[int] = typer.Option(None, "--output-tokens", "-o", help="Serve: generated tokens per request (decode with -o = serve)."),
        tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel degree (GPU)."),
        pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel degree (GPU)."),
        dp: Optional[int] = typer.Option(None, "--dp", help="Data-parallel degree (GPU train: default count/(tp*pp*cp))."),
        cp: Optional[int] = typer.Option(None, "--cp", help="Context-parallel degree (GPU train)."),
        vpp: Optional[int] = typer.Option(None, "--vpp", help="Virtual pipeline stages per rank (interleaved schedule)."),
        micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Sequences per micro-batch (GPU train)."),
        recompute: Optional[str] = typer.Option(None, "--recompute", help="GPU train: none | selective | full."),
        zero: Optional[int] = typer.Option(None, "--zero", help="GPU train: ZeRO stage 0-3."),
        search: bool = typer.Option(False, "--search", help="Search the layout (the default whenever no layout option is given)."),
        train_tokens: Optional[float] = typer.Option(None, "--train-tokens", help="Train: also report wall time and GPU-hours for N tokens."),
        fmt: str = typer.Option("table", "--format", "-f", help="Output: table | json | csv | md."),
        catalog: Optional[list[str]] = typer.Option(None, "--catalog", help="Extra catalog folder(s)."),
    ) -> None:
        """How long a training step, a prefill or a decoded token takes on TARGET, and what binds.

        Example: wseplan time gpt-3-175b --target a100x1536 --phase train --batch 1536 --context 2048 --tp 8 --pp 12 ;
        wseplan time llama-3-8b --target h100x1 --phase decode --batch 64 --context 2048 --output-tokens 512
        """
        from ..cli import _catalog, _check_format, _emit
        from ..errors import InputError
        from ..report import formats as F
        from ..timing import predict_time

        _check_format(fmt)
        cat = _catalog(catalog)
        lay = {k: v for k, v in dict(tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, virtual_pipeline=vpp,
                                      micro_batch=micro_batch).items() if v is not None}
        opts = {k: v for k, v in dict(context_parallel=cp, recompute=recompute, zero_stage=zero).items() if v is not None}
        if search and lay:
            raise InputError("--search: the layout is searched whenever none is given; drop --search or the layout options")
        searched = None
        if train_tokens is not None:
            if phase != "train":
                raise InputError("--train-tokens: applies to --phase train")
            if not train_tokens > 0:
                raise InputError(f"--train-tokens: must be > 0, got {train_tokens!r}")
        res = predict_time(model, target, phase=phase, precision=precision, batch=batch, context=context,
                           output_tokens=output_tokens, catalog=cat, **lay, **opts)
        extra = {}
        if train_tokens is not None and res.step_s and res.tokens_per_s:
            secs = train_tokens / res.tokens_per_s
            extra = {"train_tokens": train_tokens, "time_to_train_s": secs, "gpu_hours": secs * res.num_devices / 3600.0}
        if fmt == "json":
            rec = res.to_record()
            rec.update(extra)
            if searched:
                rec["search"] = {k: searched[k] for k in ("num_evaluated", "num_feasible", "num_infeasible")}
            _emit(F.to_json(rec))
            return
        row = res.to_row()
        row.update(extra)
        if searched:
            row.update({f"search_{k}": searched[k] for k in ("num_evaluated", "num_feasible", "num_infeasible")})
        if fmt == "csv":
            _emit(F.to_csv([row]))
        elif fmt == "md":
            _emit(f"## Time: {res.model} on {res.target} ({res.phase})\n\n" + F.to_markdown([{"quantity": k, "value": v} for k, v in row.items()]))
        else:
            F.print_table(F.rich_table([{"quantity": k, "value": v} for k, v in row.items()],
                                       title=f"{res.model} on {res.target}: {res.phase}"))
            for n in res.notes:
                _emit(f"note: {n}\n")
