"""Serving replicas: what one engine replica of a model on a hardware type delivers at each concurrency.

The one replica model that ``fleet``, ``report`` and ``serve`` share: every option is one row of the planning
chain (:func:`wseplan.plan.evaluate`, phase ``serve``: in-flight or static batching per the software profile)
on a target without a device count, so the replica is the fewest devices that hold the model, its KV cache at
that concurrency and its working set (or, with ``devices``, each replica size given).
"""
from __future__ import annotations

import numpy as np

from .errors import InputError


def replica_options(model, hardware: str, *, precision: str, input_tokens: int, output_tokens: int, batches,
                    devices=None, software: str | None = None, catalog=None) -> list[dict]:
    """One dict per (replica size, concurrency) that fits: ``num_devices``, ``batch``, ``tokens_per_s`` (output
    tokens/s of one replica), ``requests_per_s``, ``ttft_s``, ``tpot_s``, ``tokens_per_s_per_user``, ``layout``.

    ``hardware`` is a hardware key without a count; ``devices`` (optional) lists replica sizes to try in
    addition to the smallest that fits.
    """
    from .catalog.load import load_catalog
    from .plan import evaluate, record, setup
    from .targets import Target, parse_target

    cat = catalog or load_catalog()
    t0 = parse_target(hardware, cat) if isinstance(hardware, str) else hardware
    if t0.count is not None:
        raise InputError(f"hardware: give a hardware key without a count (got {t0.text!r}); replicas are sized here")
    b = np.asarray(list(batches), dtype=float)
    if b.size == 0 or (b < 1).any():
        raise InputError("batches: give at least one positive concurrency")
    targets = [t0] + [Target(text=f"{t0.key}x{int(n)}", kind=t0.kind, key=t0.key, device=t0.device, count=int(n))
                      for n in (devices or [])]
    out = []
    for t in targets:
        s = setup(model, t, phase="serve", precision=precision, software=software, catalog=cat)
        cfg = {"batch": b, "context": np.full(b.size, float(input_tokens)), "output_tokens": np.full(b.size, float(output_tokens))}
        arr = evaluate(s, cfg)
        for i in np.nonzero(arr["fits"])[0]:
            r = record(s, arr, int(i))
            if r.num_replicas != 1:  # a given size that holds several replicas is counted per replica elsewhere
                continue
            out.append(dict(num_devices=r.num_devices, batch=r.batch, tokens_per_s=r.tokens_per_s,
                            requests_per_s=r.requests_per_s, ttft_s=r.ttft_s, tpot_s=r.tpot_s,
                            tokens_per_s_per_user=r.tokens_per_s_per_user, layout=r.layout, software=r.software))
    return out
