"""The operating point a buyer means when no batch is given to ``cost`` or ``compare``: the cheapest point of the one
replica search (:func:`wseplan.serving.serve`) that gives every user at least the catalog's documented per-user speed
(``defaults.default_min_tokens_per_s_per_user``) with its slots full; and the other readings of that search: the
replica options ``fleet`` and the serving reports size fleets from (:func:`replica_options`) and the cheapest point
per SLA (:func:`sla_grid`)."""
from __future__ import annotations

from .catalog.load import load_catalog
from .errors import InputError
from .plan import layout_columns, setup
from .serving import DEFAULT_UTILIZATION, ServePoint, ServeResult, _Frozen, occupancy, serve, tpot_for_limit, with_limits

class OperatingPoint(_Frozen):
    """The serving point ``cost`` and ``compare`` price when no batch is given (see :func:`operating_point`).

    ``target`` is the target to evaluate (with the device count the search chose, where the question gave none),
    ``layout`` the chain's layout columns of the point (``tp``/``pp``/``dp`` or ``num_wafers``), ``meets`` whether
    it reaches ``min_tokens_per_s_per_user`` (if no point does, the cheapest within ``defaults.layout_near_tie_frac``
    of the fastest is taken), ``point`` the
    :class:`ServePoint` itself.
    """

    target: str
    batch: int
    layout: dict[str, int]
    min_tokens_per_s_per_user: float
    min_source: str  # "given" or "default" (catalog defaults.default_min_tokens_per_s_per_user)
    meets: bool
    point: ServePoint

    @property
    def label(self) -> str:
        """``cheapest meeting >= 20 tok/s/user, batch 64 (searched)`` (or why no point meets it)."""
        x = f"{self.min_tokens_per_s_per_user:g}"
        k = self.layout.get("num_wafers")
        # a wafer count split into replicas: how to ask the point again (audit31c M4: `--batch` alone laid the count
        # out as one replica)
        split = (f"; {self.point.num_replicas} replicas of {k} wafers, --wafers {k}"
                 if k and self.point.num_replicas > 1 else "")
        tp = self.layout.get("tp")
        if tp:  # a GPU layout: the options that price the same point again (audit37b F5: `--batch` alone chose
            # another layout, 67% dearer)
            tp, pp, dp, adp = (int(self.layout.get(c) or 1) for c in ("tp", "pp", "dp", "adp"))
            # (review37 M6: "per replica, TP2 x DP4" read DP4 as part of a replica; the flags are `cost`'s)
            split += (f"; {dp} replica{'s' if dp > 1 else ''} of TP{tp}" + (f" x PP{pp}" if pp > 1 else "")
                      + f", batch {self.batch} each: `wseplan cost` with --batch {self.batch} --tp {tp}"
                      + (f" --pp {pp}" if pp > 1 else "") + (f" --dp {dp}" if dp > 1 else "")
                      + (f" --adp {adp}" if "adp" in self.layout else "") + " prices it again")
        if self.meets:
            return f"cheapest meeting >= {x} tok/s/user, batch {self.batch} (searched{split})"
        return (f"no point reaches {x} tok/s/user; the cheapest within the near-tie share of the fastest, batch "
                f"{self.batch} ({self.point.tokens_per_s_per_user:.4g} tok/s/user, searched{split})")

    def to_record(self) -> dict:
        return {"label": self.label, "target": self.target, "batch": self.batch, "layout": dict(self.layout),
                "min_tokens_per_s_per_user": self.min_tokens_per_s_per_user, "min_source": self.min_source,
                "meets": self.meets, "tokens_per_s_per_user": self.point.tokens_per_s_per_user,
                "devices_per_replica": self.point.devices_per_replica, "num_devices": self.point.num_devices}


def default_min_tokens_per_s_per_user(catalog) -> float:
    """The catalog's documented default per-user speed [tokens/s] (``defaults.default_min_tokens_per_s_per_user``)."""
    return float(catalog.defaults.default_min_tokens_per_s_per_user.si)


def operating_point(model, target, *, precision: str = "bf16", software: str | None = None, input_tokens: int,
                    output_tokens: int, min_tokens_per_s_per_user: float | None = None, catalog=None, prices=None,
                    overrides: dict | None = None, options: dict | None = None,
                    layout: dict | None = None) -> OperatingPoint | None:
    """The operating point a buyer means: the cheapest point of :func:`serve` (the one replica search) that fits
    and gives every user at least ``min_tokens_per_s_per_user`` (default: the catalog's documented default) with
    its slots full, the load ``cost`` and ``compare`` price, i.e. ``serve(..., tpot_limit_s=1 / min,
    full_slots=True)``'s chosen point. Without any point that fast, the cheapest within the near-tie share of the
    fastest. None when
    nothing fits (the caller's own evaluation then says why)."""
    cat = catalog or load_catalog()
    src = "given"
    if min_tokens_per_s_per_user is None:
        min_tokens_per_s_per_user, src = default_min_tokens_per_s_per_user(cat), "default"
    x = min_tokens_per_s_per_user
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < 1e9:
        raise InputError(f"min_tokens_per_s_per_user (--min-speed): must be a positive number below 1e9 tokens/s per "
                         f"user, got {x!r}")
    res = serve(model, target, precision=precision, software=software, input_tokens=input_tokens,
                output_tokens=output_tokens, tpot_limit_s=1.0 / x, catalog=cat, prices=prices, overrides=overrides,
                options=options, layout=layout, full_slots=True)
    if not res.fits or res.chosen is None:
        return None
    c = res.chosen
    s = setup(model, target, phase="serve", precision=precision, software=software, options=options, catalog=cat)
    t = s.query.target
    text = target if isinstance(target, str) else t.key
    tgt = text if t.count is not None else f"{text}x{c.num_devices}"
    lay = layout_columns(s, c.layout)
    return OperatingPoint(target=tgt, batch=c.batch, layout=lay, min_tokens_per_s_per_user=float(x), min_source=src,
                          meets=c.meets_sla, point=c)


def sla_grid(model, targets, *, ttft_limits_s, tpot_limits_s, **kw) -> list[dict]:
    """The cheapest point per target for every (TTFT limit, TPOT limit) pair: one replica search per target.

    ``kw`` go to :func:`serve` (precision, input/output tokens, rate, percentile, ...). Without a rate or a load every
    point is judged at the default load (``utilization=DEFAULT_UTILIZATION``, one search per target): ``serve`` with a
    TTFT limit also tries lower loads (:func:`with_limits`), up to eight more searches. Returns one dict per
    (target, ttft limit, tpot limit): ``target``, the limits, ``meets_sla``, and the chosen point's
    ``num_devices``, ``batch``, ``tokens_per_s_per_user``, ``ttft_at_percentile_s`` and ``output_usd_per_mtok``
    (None where no point meets the limits).
    """
    out = []
    if kw.get("rate") is None and kw.get("utilization") is None and kw.get("concurrency") is None:
        kw = dict(kw, utilization=DEFAULT_UTILIZATION)  # a fixed load: one replica search per target
    for t in targets:
        res = serve(model, t, **kw)
        for ttft in ttft_limits_s:
            for tpot in tpot_limits_s:
                r = with_limits(res, ttft_limit_s=ttft, tpot_limit_s=tpot)
                c = r.chosen if r.chosen is not None and r.chosen.meets_sla else None
                out.append(dict(target=res.target, ttft_limit_s=ttft, tpot_limit_s=tpot, meets_sla=c is not None,
                                num_devices=c.num_devices if c else None, batch=c.batch if c else None,
                                tokens_per_s_per_user=c.tokens_per_s_per_user if c else None,
                                ttft_at_percentile_s=c.ttft_at_percentile_s if c else None,
                                output_usd_per_mtok=c.output_usd_per_mtok if c else None))
    return out


def replica_options(model, hardware: str, *, precision: str, input_tokens: int, output_tokens: int, batches,
                    devices=None, software: str | None = None, catalog=None, ttft_limit_s: float | None = None,
                    tpot_limit_s: float | None = None, percentile: float = 95, sizes: str = "fewest",
                    result: ServeResult | None = None) -> list[dict]:
    """One dict per (replica size, concurrency) that fits ``hardware`` (a key without a count), at the default load:
    ``num_devices``, ``batch``, ``tokens_per_s`` (one replica's output tokens/s at that load), ``requests_per_s``,
    ``capacity_requests_per_s`` / ``capacity_tokens_per_s`` (at full load, the plan's throughput),
    ``utilization_frac``, ``ttft_own_s`` (prefill without queueing), ``ttft_s`` (the mean at the load), ``ttft_at_percentile_s`` (at ``percentile``), ``tpot_s`` (the
    running batch's, ``running_batch`` requests held at that load), ``tpot_at_percentile_s`` (what a TPOT limit
    applies to), ``tokens_per_s_per_user``, ``layout``, ``meets_sla``. ``fleet`` builds its configurations from these.

    ``sizes``: ``fewest`` (default) keeps the replica of the fewest devices that hold the model; ``search`` keeps
    every replica size of :func:`serve`'s replica search (GPUs: the fewest that fit and powers of two in the scale-up domain; wafers: the
    fewest to twice that). ``batches``: the concurrencies kept (None: every batch of the search, :func:`serve`'s grid
    and its refinement). ``result`` reuses a :func:`serve` result of the same question (priced or not).
    ``devices`` is accepted for compatibility."""
    if sizes not in ("fewest", "search"):
        raise InputError(f"replica sizes: use fewest or search, got {sizes!r}")
    res = result or serve(model, hardware, precision=precision, software=software, input_tokens=input_tokens,
                          output_tokens=output_tokens, catalog=catalog, ttft_limit_s=ttft_limit_s,
                          tpot_limit_s=tpot_limit_s, percentile=percentile,
                          batches=None if batches is None else list(batches), prices=False)
    out = []
    fewest = min((p.devices_per_replica for p in res.points if p.num_replicas == 1), default=None)
    asked = None if batches is None else set(batches)
    for p in res.points:
        if (asked is not None and p.batch not in asked) or p.num_replicas != 1 or (
                sizes == "fewest" and p.devices_per_replica != fewest):
            continue
        out.append(dict(num_devices=p.num_devices, batch=p.batch, tokens_per_s=p.tokens_per_s,
                        requests_per_s=p.requests_per_s, capacity_requests_per_s=p.capacity_requests_per_s,
                        capacity_tokens_per_s=p.capacity_requests_per_s * output_tokens,
                        utilization_frac=p.utilization_frac, ttft_own_s=p.ttft_own_s, ttft_s=p.ttft_s,
                        ttft_at_percentile_s=p.ttft_at_percentile_s, tpot_s=p.tpot_s,
                        tpot_at_percentile_s=tpot_for_limit(p), running_batch=p.running_batch,
                        tokens_per_s_per_user=p.tokens_per_s_per_user, layout=p.layout, meets_sla=p.meets_sla,
                        load_frac=occupancy(p)))
    return out
