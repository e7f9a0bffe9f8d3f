"""The plan of a sweep: :class:`Group` (one model x target x precision, picklable for remote workers), :class:`Plan`
and :func:`plan_sweep`, which resolves names and cost inputs and cuts groups into tasks."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..analytic.cost import hardware_price_key, load_prices, nominal, unscoped_hardware_inputs
from ..catalog.load import load_catalog
from ..catalog.precision import device_rates, training_refusal
from ..catalog.schema import Model
from ..pricing import params_for, unpriced, with_placeholder_price
from ..devices.gpu import tp_divides_heads
from ..errors import InputError
from ..plan import setup
from ..targets import parse_target
from ..workload import BYTES_PER_ELEMENT, beside, num_experts, resolve_model
from .schema import DEFAULT_CHUNK, MAX_CONFIGURATIONS, RECOMPUTE, WAFER_CHUNK, Sweep

# =============================================================================================
# Plan: groups and tasks
# =============================================================================================
@dataclass(frozen=True)
class Group:
    """One model x target x precision with everything its tasks need (picklable, for Dask workers)."""

    index: int
    model_name: str
    model: object
    target: object
    precision: str
    phase: str
    batches: np.ndarray
    contexts: np.ndarray
    outputs: np.ndarray  # 0 means "one decode step" (no output_tokens)
    layouts: dict  # name -> array (GPU); empty dict for wafers
    params: dict  # nominal cost inputs
    train_tokens: float | None
    catalog: object = field(repr=False, default=None)
    #: False for hardware without a price (a rental-only part): its dollar columns are blank, time and energy stand
    priced: bool = True

    @property
    def shape(self) -> tuple[int, ...]:
        nl = len(next(iter(self.layouts.values()))) if self.layouts else 1
        return (len(self.batches), len(self.contexts), len(self.outputs), nl)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class Plan:
    sweep: Sweep
    groups: list[Group]
    skipped: list[str]

    @property
    def size(self) -> int:
        return sum(g.size for g in self.groups)

    def tasks(self, chunk: int | None = None) -> list[tuple[int, int, int]]:
        """(group index, start, stop) of every task, in output order.

        Each group is cut into ``ceil(size / chunk)`` tasks of equal size (within one configuration), so no
        task is a small remainder; ``chunk`` defaults to :func:`default_chunk` of the group.
        """
        out = []
        for g in self.groups:
            c = chunk or default_chunk(g)
            n = -(-g.size // c)
            out.extend((g.index, g.size * i // n, g.size * (i + 1) // n) for i in range(n))
        return out

    def num_tasks(self, chunk: int | None = None) -> int:
        return sum(-(-g.size // (chunk or default_chunk(g))) for g in self.groups)

    def largest_task(self, chunk: int | None = None) -> int:
        """Configurations of the largest task."""
        return max(-(-g.size // -(-g.size // (chunk or default_chunk(g)))) for g in self.groups)


def default_chunk(g: Group) -> int:
    """Configurations per task: :data:`DEFAULT_CHUNK` for GPU groups, :data:`WAFER_CHUNK` for wafer groups."""
    return WAFER_CHUNK if g.target.kind == "wafer" else DEFAULT_CHUNK


def _gpu_layouts(sweep: Sweep, model, target, catalog) -> dict:
    """Flat arrays of the GPU layouts of one target: tp, pp, dp (x micro-batch, recompute, ZeRO for training)."""
    lo = sweep.layouts
    gpu = target.device
    n = target.count
    domain = int(gpu.scale_up_domain_gpus.si)
    limit = domain if domain > 8 else min(domain, int(catalog.defaults.gpu_max_tensor_parallel.si))
    heads = model.num_heads
    if lo.tensor_parallel is not None:
        # a degree that does not divide the heads is no layout of this model (as `plan` refuses it): not a row
        tps = [t for t in lo.tensor_parallel if tp_divides_heads(model, t)]
        if not tps:
            raise InputError(f"layouts.tensor_parallel: none of {lo.tensor_parallel} divides {model.name}'s {heads} "
                             "attention heads; give a divisor of it")
    else:
        tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= limit and heads % t == 0 and (n is None or n % t == 0)]
    if lo.pipeline_parallel is not None:
        pps = lo.pipeline_parallel
    elif n is None:
        pps = [1]
    else:
        pps = [p for p in range(1, model.num_layers + 1) if n % p == 0]
    if lo.data_parallel is not None:
        dps = lo.data_parallel
    elif n is None:
        dps = [1]
    else:
        dps = None  # n / (tp pp)
    T, P = (a.ravel() for a in np.meshgrid(np.asarray(tps, float), np.asarray(pps, float), indexing="ij"))
    if dps is None:
        D = n / (T * P)
        keep = np.abs(D - np.round(D)) < 1e-9
        T, P, D = T[keep], P[keep], np.round(D[keep])
    else:
        i, dv = (a.ravel() for a in np.meshgrid(np.arange(len(T)), np.asarray(dps, float), indexing="ij"))
        T, P, D = T[i], P[i], dv
        if n is not None:
            keep = T * P * D == n
            T, P, D = T[keep], P[keep], D[keep]
    if len(T) == 0:
        raise InputError(f"layouts: no tensor x pipeline x data layout of {target.text} uses exactly {n} GPUs; "
                         "change layouts or the target's count")
    out = {"tp": T, "pp": P, "dp": D}
    if sweep.phase != "train" and lo.attention_data_parallel is not None:
        out = _with_attention_dp(out, lo.attention_data_parallel, model)
    if sweep.phase == "train":
        mbs = np.asarray(lo.micro_batch or [1], float)
        rcs = np.asarray([RECOMPUTE.index(r) for r in (lo.recompute or ["selective"])], float)
        zss = np.asarray(lo.zero_stage if lo.zero_stage is not None else [1], float)
        vps = np.asarray(lo.virtual_pipeline or [1], float)
        i, m_, r_, z_, v_ = (a.ravel() for a in np.meshgrid(np.arange(len(T)), mbs, rcs, zss, vps, indexing="ij"))
        # interleaving needs a pipeline and a layer in every virtual stage (as `time` refuses a given vpp otherwise)
        keep = (v_ <= 1.0) | ((P[i] > 1.0) & (P[i] * v_ <= model.num_layers))
        if not keep.any():
            raise InputError(f"layouts.virtual_pipeline: no row of {target.text} can interleave {lo.virtual_pipeline} "
                             f"virtual stages (they need pp > 1 and pp x vpp at most {model.name}'s {model.num_layers} "
                             "layers); add 1 or a pipeline degree")
        lost = sorted(set(vps.tolist()) - set(v_[keep].tolist()))
        i, m_, r_, z_, v_ = i[keep], m_[keep], r_[keep], z_[keep], v_[keep]
        out = {"tp": T[i], "pp": P[i], "dp": D[i], "micro_batch": m_, "recompute": r_, "zero_stage": z_, "vpp": v_}
        if lost:  # a requested degree no layout of this model and target can interleave: said, not dropped silently
            out["_note"] = (f"layouts.virtual_pipeline {', '.join(str(int(v)) for v in lost)}: no layout of the sweep "
                            f"can interleave it ({model.name} has {model.num_layers} layers; interleaving needs pp > 1 "
                            "and pp x vpp at most the layers): no such rows")
        if lo.expert_parallel is not None:
            out = _with_expert_parallel(out, lo.expert_parallel, model, target)
    return out


def _with_attention_dp(out: dict, degrees: list[int], model) -> dict:
    """Inference rows once per degree of ``layouts.attention_data_parallel`` a row can take: 1 (attention split over
    its tensor_parallel) or its tensor_parallel (an MoE model's data-parallel attention, as `time --adp` takes it);
    the degrees no row of this model takes are said in the note (a sweep may list several models)."""
    moe = num_experts(model) > 1
    T = out["tp"]
    parts, lost = [], []
    for a in degrees:
        keep = np.ones(len(T), dtype=bool) if a == 1 else (T == a) & moe
        if keep.any():
            parts.append(dict({k: v[keep] for k, v in out.items()}, adp=np.full(int(keep.sum()), float(a))))
        else:
            lost.append(a)
    if not parts and not moe:  # a dense model in a sweep of several: its rows split their attention, said in the note
        parts, lost = [dict(out, adp=np.ones(len(T)))], [a for a in degrees if a != 1]
    if not parts:
        raise InputError(f"layouts.attention_data_parallel: none of {degrees} is a layout of {model.name} in this sweep "
                         "(1, or a row's tensor_parallel); add 1 or a tensor_parallel degree equal to one of them")
    res = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    if lost:
        why = ("it has no routed experts: its rows run 1" if not moe else "no row's tensor_parallel equals it: no such "
               "rows")
        res["_note"] = f"layouts.attention_data_parallel {', '.join(map(str, lost))}: not for {model.name} ({why})"
    return res


def _with_expert_parallel(out: dict, degrees: list[int], model, target) -> dict:
    """Training rows once per expert-parallel degree of ``layouts.expert_parallel`` that divides the model's routed
    experts (a dense model's rows take 1) and the row's tp x dp GPUs of a stage (a sweep row has no context
    parallelism); the degrees a model or a row cannot take are said in the note (a sweep may list several models)."""
    E = num_experts(model)
    usable = [e for e in degrees if E % e == 0] if E > 1 else [1]
    notes = [out["_note"]] if "_note" in out else []
    dropped = [e for e in degrees if e not in usable]
    if dropped:
        why = "a dense model's rows take 1" if E <= 1 else f"they do not divide its {E} routed experts"
        notes.append(f"layouts.expert_parallel {', '.join(map(str, dropped))}: not for {model.name} ({why})")
    if not usable:
        raise InputError(f"layouts.expert_parallel: none of {degrees} divides {model.name}'s {E} routed experts; add "
                         f"divisors of {E}")
    j, e_ = (a.ravel() for a in np.meshgrid(np.arange(len(out["tp"])), np.asarray(usable, float), indexing="ij"))
    keep = np.mod(out["tp"][j] * out["dp"][j], e_) == 0
    if not keep.any():
        raise InputError(f"layouts.expert_parallel: no row of {target.text} has tp x dp divisible by {usable}; "
                         "add 1 or degrees that divide the GPUs of a pipeline stage")
    lost = sorted(set(usable) - set(int(v) for v in e_[keep]))
    res = {k: v[j[keep]] for k, v in out.items() if k != "_note"}
    res["ep"] = e_[keep]
    if lost:
        notes.append(f"layouts.expert_parallel {', '.join(map(str, lost))}: no layout of the sweep has tp x dp divisible "
                     "by it: no such rows")
    if notes:
        res["_note"] = "; ".join(notes)
    return res


def plan_sweep(sweep: Sweep, catalog=None, *, prices=None) -> Plan:
    """Resolve models, targets and cost inputs into groups; raise a one-line InputError for a bad name."""
    cat = catalog or load_catalog()
    prices = prices or load_prices(catalog=cat)
    models = []
    for name in sweep.models:
        try:
            m = resolve_model(beside(name, sweep._base) if sweep._base else name, cat)  # (the name stays as written)
        except InputError as exc:
            raise InputError(f"models: {exc}") from None
        if not isinstance(m, Model):
            raise InputError(f"models: {name!r} is a layer list; sweeps need transformer architectures")
        models.append((name, m))
    targets, seen = [], {}
    for text in sweep.targets:
        try:
            targets.append(parse_target(text, cat))
        except InputError as exc:
            raise InputError(f"targets: {exc}") from None
        key = (targets[-1].key, targets[-1].count)  # one target under two spellings (cs3x4, wse3x4): rows twice
        if key in seen:  # (audit31b M6; compare refuses it the same way)
            raise InputError(f"targets: {text} is {seen[key]} again; name each target once")
        seen[key] = text
    for p in sweep.precisions:
        if p not in BYTES_PER_ELEMENT:
            raise InputError(f"precisions: unknown {p!r}; use one of {', '.join(BYTES_PER_ELEMENT)}")
    for t in targets:
        if t.kind == "gpu" and sweep.phase == "train" and t.count is None:
            raise InputError(f"targets: GPU training needs a GPU count, e.g. {t.key}x64 (got {t.text!r})")
    unscoped_hardware_inputs(sweep.set, [hardware_price_key(t) for t in targets], prices=prices, where="set")  # (F7)
    groups: list[Group] = []
    skipped: list[str] = []
    outputs = np.asarray(sweep.output_tokens or [0], dtype=float)
    batches = np.asarray(sweep.batches, dtype=float)
    contexts = np.asarray(sweep.contexts, dtype=float)
    phase = "serve" if sweep.output_tokens else sweep.phase
    if sweep.phase == "decode" and sweep.output_tokens:  # (audit33e L7: every row said serve, nothing said why)
        skipped.append("phase decode with output_tokens: each row is a whole request (phase serve: its prompt's prefill "
                       "and its answer's decode steps, TTFT and input $/M included), as `wseplan time --phase decode "
                       "--output-tokens` asks it")
    for mname, m in models:
        for t in targets:
            lay = _gpu_layouts(sweep, m, t, cat) if t.kind == "gpu" else {}
            if "_note" in lay:
                skipped.append(f"{mname} x {t.text}: {lay.pop('_note')}")
            params, priced = None, True
            for p in sweep.precisions:
                try:
                    t.device.peak_flop_per_s(p)
                except (ValueError, KeyError):
                    skipped.append(f"{t.key} has no {p} rate: {mname} x {t.text} x {p} skipped")
                    continue
                if phase == "train" and training_refusal(t.key, device_rates(t.device), p):
                    skipped.append(f"{t.key} cannot train in {p} (no {p} datapath): {mname} x {t.text} x {p} skipped")
                    continue
                if params is None:
                    s_ = setup(m, t, phase=phase, precision=p, catalog=cat)
                    priced = not unpriced(s_, prices)
                    if not priced:  # time, fit and energy without dollars, as compare does (the columns are blank)
                        skipped.append(f"{t.key} has no price: the dollar columns of {mname} x {t.text} are blank")
                    try:
                        params = params_for(s_, prices if priced else with_placeholder_price(s_, prices),
                                            overrides=sweep.set)
                    except InputError as exc:
                        msg = str(exc)
                        raise InputError(f"set: {msg.removeprefix('--set: ')}" if msg.startswith("--set") else msg) \
                            from None
                groups.append(Group(index=len(groups), model_name=mname, model=m, target=t, precision=p,
                                    phase=phase, batches=batches, contexts=contexts, outputs=outputs,
                                    layouts=lay, params=nominal(params), train_tokens=sweep.train_tokens, catalog=cat,
                                    priced=priced))
    plan = Plan(sweep=sweep, groups=groups, skipped=skipped)
    if not groups:
        raise InputError("precisions: no target supports any of the sweep's precisions; choose others")
    if plan.size > MAX_CONFIGURATIONS:
        raise InputError(f"sweep: {plan.size:,} configurations exceed the limit of {MAX_CONFIGURATIONS:,}; shrink an axis")
    return plan

