"""The operating point a buyer means when no batch is given to ``cost`` or ``compare``: the cheapest point of the one
replica search (:func:`wseplan.serving.serve`) that gives every user at least the catalog's documented per-user speed
(``defaults.default_min_tokens_per_s_per_user``) with its slots full."""
from __future__ import annotations

from .catalog.load import load_catalog
from .errors import InputError
from .plan import setup
from .serving import ServePoint, _Frozen, serve

#: where the operating point's layout goes in the chain's configuration columns (record name -> column)
_LAYOUT_COLUMNS = {"tensor_parallel": "tp", "pipeline_parallel": "pp", "data_parallel": "dp", "num_wafers": "num_wafers"}


class OperatingPoint(_Frozen):
    """The serving point ``cost`` and ``compare`` price when no batch is given (see :func:`operating_point`).

    ``target`` is the target to evaluate (with the device count the search chose, where the question gave none),
    ``layout`` the chain's layout columns of the point (``tp``/``pp``/``dp`` or ``num_wafers``), ``meets`` whether
    it reaches ``min_tokens_per_s_per_user`` (if no point does, the fastest point is taken), ``point`` the
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
        if self.meets:
            return f"cheapest meeting >= {x} tok/s/user, batch {self.batch} (searched)"
        return (f"no point reaches {x} tok/s/user; fastest point, batch {self.batch} "
                f"({self.point.tokens_per_s_per_user:.4g} tok/s/user, searched)")

    def to_record(self) -> dict:
        return {"label": self.label, "target": self.target, "batch": self.batch, "layout": dict(self.layout),
                "min_tokens_per_s_per_user": self.min_tokens_per_s_per_user, "min_source": self.min_source,
                "meets": self.meets, "tokens_per_s_per_user": self.point.tokens_per_s_per_user,
                "devices_per_replica": self.point.devices_per_replica, "num_devices": self.point.num_devices}


def layout_columns(s, layout: dict) -> dict[str, int]:
    """A point's record layout (``tensor_parallel``, ``num_wafers``, ...) as the chain's layout columns of setup
    ``s`` (``tp``, ``num_wafers``, ...), to evaluate exactly that point again (``cost(..., layout=...)``)."""
    cols = set(s.layout_columns)
    return {_LAYOUT_COLUMNS[k]: int(v) for k, v in layout.items() if _LAYOUT_COLUMNS.get(k) in cols}


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
    full_slots=True)``'s chosen point. Without any point that fast, the fastest point. None when
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
