"""What the GPU and wafer predictors of the validation rows share: the row's target, its training-metric conversion,
the software profiles rows run, and the GEMV shape of kernel rows."""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass

import yaml

from ..analytic import gpu_time as G
from ..calibration_data import GpuCalibration
from ..catalog.load import default_catalog_dir
from ..plan import GPU_TRAIN_PROFILE
from ..errors import CatalogError
from ..targets import parse_target
from ..errors import InputError
from .cases import Case, SkipRow, note_hint


def _target(case: Case, catalog, count: int | None):
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


@functools.lru_cache(maxsize=2)
def training_benchmarks(path: str | None = None) -> dict[str, dict]:
    """The evaluation schedules of ``catalogs/validation/training_benchmarks.yaml`` by name: ``match`` (benchmark
    names), ``source_match`` (round names the row's source must contain; empty: any round), ``eval_samples``,
    ``eval_every_samples``, ``skipped_evals``, ``skipped_evals_per_gbs`` (floats); :class:`CatalogError` on a bad
    file."""
    p = path or str(default_catalog_dir() / "validation" / "training_benchmarks.yaml")
    try:
        with open(p) as fh:
            data = yaml.safe_load(fh)["training_benchmarks"]
        return {name: {"match": [str(m).lower() for m in e["match"]],
                       "source_match": [str(m).lower() for m in e.get("source_match", [])],
                       **{k: float(e[k]["value"]) for k in ("eval_samples", "eval_every_samples", "skipped_evals")},
                       "skipped_evals_per_gbs": float(e.get("skipped_evals_per_gbs", {"value": 0.0})["value"])}
                for name, e in data.items()}
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"{p}: cannot read the training benchmarks ({exc.__class__.__name__}: {exc})") from None


def eval_schedule(case: Case) -> dict | None:
    """The evaluation schedule of the MLPerf training benchmark a row names (model, source or notes text) in the
    round its source names (a schedule with ``source_match`` applies to those rounds only), or None."""
    text = " ".join((case.model or "", case.source or "", case.notes or "")).lower()
    src = (case.source or "").lower()
    for e in training_benchmarks().values():
        if e["source_match"] and not any(m in src for m in e["source_match"]):
            continue
        if any(re.search(r"(?<![\w.])" + re.escape(m) + r"(?![\w.])", text) for m in e["match"]):
            return e
    return None


def eval_time_s(case: Case, *, tokens_per_s: float, recompute: str | float) -> float | None:
    """Seconds a benchmark run spends in its evaluations [s], from its schedule: one evaluation every
    ``eval_every_samples`` training samples (rounded up to whole global batches) after the first
    ``floor(skipped_evals + skipped_evals_per_gbs x global batch)``, each a forward pass over ``eval_samples``
    sequences of the row's length at the step's forward share of its training rate (a training step is a forward, a
    backward of 1x (LoRA: activation gradients only) or 2x the forward, and a recomputed forward with full
    recompute). The training samples are the notes' ``train_samples``, else ``train_tokens`` over the sequence
    length. None where the row names no scheduled benchmark or gives neither."""
    sched = eval_schedule(case)
    seq = case.get("seq_len")
    samples = note_hint(case.notes, "train_samples")
    if not samples and seq and note_hint(case.notes, "train_tokens"):
        samples = float(note_hint(case.notes, "train_tokens")) / seq
    if sched is None or not samples or not seq:
        return None
    gbs = case.get("global_batch") or 1
    every = math.ceil(sched["eval_every_samples"] / gbs) * gbs
    skipped = math.floor(sched["skipped_evals"] + sched["skipped_evals_per_gbs"] * gbs)
    evals = max(math.floor(float(samples) / every) - skipped, 0.0)
    passes = 1.0 + (1.0 if _is_lora(case) else 2.0) + recomputed_share(recompute)
    return evals * sched["eval_samples"] * seq / (tokens_per_s * passes)


def recomputed_share(recompute: str | float) -> float:
    """The share of a step's layers that run their forward again: ``full`` 1, ``none``/``selective`` 0, or the share
    itself (a partial recomputation's layers over the stage's)."""
    if isinstance(recompute, str):
        return 1.0 if recompute == "full" else 0.0
    return float(recompute)


def _flop_multiplier(case: Case, recompute: str | float) -> float:
    conv = case.get("flops_convention") or "model"
    return 3.0 + recomputed_share(recompute) if conv == "hardware" else 3.0


def _recompute(case: Case) -> str:
    r = case.get("recompute")
    if r:
        return r
    # not stated: a row that counts hardware FLOPs (an extra forward) ran with full recompute
    return "full" if case.get("flops_convention") == "hardware" else "selective"


def _is_lora(case: Case) -> bool:
    return "lora" in case.model.lower()


#: the GPU software profile the public rows were calibrated with (static batches; see catalogs/software/)
GPU_PROFILE = GPU_TRAIN_PROFILE  # the profile GPU training runs by default (wseplan.plan)
#: the profile whose mechanism constants time GPU inference rows (scheduled per row, see gpu_scheduling_for)
GPU_INFER_PROFILE = "gpu-production"


@dataclass(frozen=True)
class Trial:
    """A trial calibration of the GPU models: the calibration file's constants (``cal``) and, per software profile,
    values of the profile's own mechanism constants (``profiles``: (profile name, ((constant, value), ...)) pairs).
    A plain :class:`GpuCalibration` is the trial that keeps every profile's constants as the profile states them."""

    cal: GpuCalibration
    profiles: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    #: the fastest run a configuration allows (:func:`.bounds.ideal_trial`): mechanisms a run may or may not have used
    #: take their fastest form too (an MoE model's all-to-all deduplicated per domain and overlapped)
    ideal: bool = False

    def overrides(self, profile: str) -> dict[str, float]:
        return next((dict(kv) for name, kv in self.profiles if name == profile), {})

    def replace(self, **kw) -> "Trial":
        return dataclasses.replace(self, **kw)


def trial_of(cal) -> Trial | None:
    """``cal`` as a :class:`Trial` (None stays None: the committed calibration)."""
    return cal if cal is None or isinstance(cal, Trial) else Trial(cal)


def file_constants(cal) -> GpuCalibration:
    """The calibration-file constants of a trial (the committed file's when ``cal`` is None)."""
    return G.gpu_calibration() if cal is None else trial_of(cal).cal


def wafer_profile_for(case) -> str:
    """Research-code rows (WaferLLM) run the research profile; Cerebras service figures the production one."""
    return "wafer-research" if "waferllm" in (case.source or "").lower() else "wafer-production"


_SPECULATIVE = re.compile(r"\bspeculative=(yes|no)\b", re.I)
_DRAFT = re.compile(r"\bdraft=([A-Za-z0-9][\w.\-]*)")


def speculation_of(case, catalog) -> tuple[bool | None, str | None]:
    """Whether a serving row states speculative decoding (``speculative=yes|no`` in its notes; None: not stated),
    and its draft model when the notes name one the catalog knows (``draft=llama-3.2-1b``) or the model's own
    multi-token-prediction module (``draft=mtp``), else None (the software profile's default draft)."""
    m = _SPECULATIVE.search(case.notes or "")
    if not m:
        return None, None
    d = _DRAFT.search(case.notes or "")
    draft = None
    if d and m.group(1).lower() == "yes" and d.group(1).lower() == "mtp":  # the model's own MTP module
        draft = "mtp"
    elif d and m.group(1).lower() == "yes":
        try:
            catalog.resolve_model_name(d.group(1))
            draft = d.group(1)
        except InputError:  # a draft the catalog does not know: the profile's default draft
            draft = None
    return m.group(1).lower() == "yes", draft


_DP_ATTENTION = re.compile(r"\bdp_attention=(yes|no)\b", re.I)


def attention_dp_of(case) -> bool | None:
    """Whether a serving row states data-parallel attention (``dp_attention=yes|no`` in its notes: SGLang
    ``--enable-dp-attention``, TensorRT-LLM ``enable_attention_dp``); None where it does not say (the layout search
    decides, as for a user who gives no ``--adp``)."""
    m = _DP_ATTENTION.search(case.notes or "")
    return None if not m else m.group(1).lower() == "yes"


_YEAR = re.compile(r"\b(19[89]\d|20[0-3]\d)\b")
#: the last year whose published training runs predate the current training frameworks' fused (flash) attention,
#: tensor-parallel communication overlap and sequence parallelism (FlashAttention: Dao et al. 2022; sequence
#: parallelism: Korthikanti et al. 2022; NeMo's userbuffers TP overlap: 2023; Megatron-LM's own 2021-2022 runs and the
#: other frameworks of 2022 ran without them)
LAST_MATERIALIZED_YEAR = 2022


def _framework_choice(case, key: str, values: tuple[str, ...]) -> str | None:
    """``key=value`` stated in a training row's notes (one of ``values``), else None."""
    m = re.search(rf"\b{key}=({'|'.join(values)})\b", case.notes or "")
    return m.group(1) if m else None


def _before_current_frameworks(case) -> bool:
    """Whether the row's citation names a year up to :data:`LAST_MATERIALIZED_YEAR` (a run of that time)."""
    years = [int(y) for y in _YEAR.findall(case.source.split(" (")[0].split(",")[0])]
    return bool(years) and max(years) <= LAST_MATERIALIZED_YEAR


def attention_kernel_of(case) -> str:
    """The attention implementation of a training row's run: ``attention_kernel=flash|materialized`` in its notes;
    else ``materialized`` when its citation names a year up to :data:`LAST_MATERIALIZED_YEAR` (a run of that time),
    ``flash`` (current frameworks) otherwise."""
    stated = _framework_choice(case, "attention_kernel", ("flash", "materialized"))
    return stated or ("materialized" if _before_current_frameworks(case) else "flash")


def tp_comm_overlap_of(case) -> bool:
    """Whether a training row's framework overlaps its tensor-parallel collectives with GEMMs: ``tp_comm_overlap=yes|no``
    in its notes; else no when its citation names a year up to :data:`LAST_MATERIALIZED_YEAR` (NeMo/Megatron added the
    userbuffers overlap in 2023), yes otherwise."""
    stated = _framework_choice(case, "tp_comm_overlap", ("yes", "no"))
    return stated == "yes" if stated else not _before_current_frameworks(case)


def sequence_parallel_of(case) -> bool:
    """Whether a training row's run split its norms and dropouts over the tensor-parallel GPUs (sequence parallelism):
    ``sequence_parallel=yes|no`` in its notes; else no when its citation names a year up to
    :data:`LAST_MATERIALIZED_YEAR` (Korthikanti et al. 2022 introduced it in Megatron-LM; the other frameworks of that
    year ran without it), yes otherwise."""
    stated = _framework_choice(case, "sequence_parallel", ("yes", "no"))
    return stated == "yes" if stated else not _before_current_frameworks(case)


#: words in a training row's citation that name Megatron-LM (its papers' runs: PTD-P is its parallelism)
MEGATRON_MARKERS = ("megatron", "ptd-p")


def dp_comm_overlap_of(case) -> bool:
    """Whether a training row's framework overlaps its data-parallel gradient reduction with the backward pass:
    ``dp_comm_overlap=yes|no`` in its notes; else no for a Megatron-LM run (its citation names Megatron-LM or PTD-P)
    up to :data:`LAST_MATERIALIZED_YEAR`, whose default ``--DDP-impl local`` all-reduced the gradients at the end of
    the backward pass (Megatron-Core's ``--overlap-grad-reduce`` came in 2023); yes otherwise (PyTorch DDP, FSDP,
    DeepSpeed, current frameworks)."""
    stated = _framework_choice(case, "dp_comm_overlap", ("yes", "no"))
    if stated:
        return stated == "yes"
    return not (_before_current_frameworks(case) and any(m in case.source.lower() for m in MEGATRON_MARKERS))


def moe_dispatch_of(case) -> dict:
    """An MoE training row's dispatch, as its notes state it (``expert_dispatch=flat|hierarchical``,
    ``expert_comm_overlap=yes|no|dualpipe``): the GPU family options, empty where the notes say nothing (the planner's
    defaults: Megatron-Core's flat, exposed all-to-all)."""
    out = {}
    d = _framework_choice(case, "expert_dispatch", ("flat", "hierarchical"))
    if d:
        out["expert_dispatch"] = d
    o = _framework_choice(case, "expert_comm_overlap", ("yes", "no", "dualpipe"))
    if o:
        out["expert_comm_overlap"] = {"yes": True, "no": False}.get(o, o)
    return out


def pipeline_split_of(case) -> str:
    """How a training row's framework split the layers over pipeline stages (the ``pipeline_split`` option of the GPU
    family): ``pipeline_split=uneven|even`` in its notes; else ``even`` when its citation names a year up to
    :data:`LAST_MATERIALIZED_YEAR` (Megatron-LM then needed the layers to divide the interleaved stages), ``uneven``
    otherwise (current frameworks)."""
    stated = _framework_choice(case, "pipeline_split", ("uneven", "even"))
    return stated or ("even" if _before_current_frameworks(case) else "uneven")


def _need_fit(r):
    """A measured run happened, so it fitted: rows the (conservative) memory model refuses are still timed
    (``require_fit=False``); only a prediction without a time is skipped."""
    if r.step_s is None:
        raise SkipRow(f"no time: {r.notes[0] if r.notes else 'the time model returned none'}")
    return r


_KERNEL = re.compile(r"(GEMV|GEMM)\s*\[\s*(\d+)([KkMm]?)\s*,\s*(\d+)([KkMm]?)\s*\]\s*x\s*\[\s*(\d+)([KkMm]?)\s*,"
                     r"\s*(\d+)([KkMm]?)\s*\]")


def _dim(num: str, suffix: str) -> int:
    return int(num) * {"": 1, "k": 1024, "m": 1024 ** 2}[suffix.lower()]


def kernel_shape(text: str) -> tuple[str, int, int, int] | None:
    """(kind, M, K, N) of a ``GEMV [M,K]x[K,N]`` or ``GEMM [M,K]x[K,N]`` model string (16K = 16384), or None."""
    m = _KERNEL.search(text or "")
    if not m:
        return None
    return m.group(1), _dim(m.group(2), m.group(3)), _dim(m.group(4), m.group(5)), _dim(m.group(8), m.group(9))


def gemv_shape(text: str) -> tuple[int, int, int] | None:
    """(M, K, N) of a ``GEMV [M,K]x[K,N]`` model string (16K = 16384), or None."""
    s = kernel_shape(text)
    return s[1:] if s is not None and s[0] == "GEMV" else None


def _train_metric(case, model, *, step_s: float, tokens_per_step: float, num_devices: int, peak_flop_per_s: float,
                  recompute: str | float, cal, goodput: float = 1.0) -> float:
    """Convert a training step time to the row's metric (shared by GPU and wafer rows); ``recompute``: the layout's
    recomputation, or the share of layers recomputed (:func:`recomputed_share`). ``goodput``: the share of a production
    run's wall time spent training (:func:`wseplan.pricing.run_goodput`), for ``gpu_hours`` (a model card's GPU time of
    a whole run); benchmark times (``time_to_train_min``: MLPerf reports completed runs) and rates take none."""
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
        ev = eval_time_s(case, tokens_per_s=tok_s, recompute=recompute)
        if ev is not None:  # the benchmark's own evaluation schedule
            return (_train_tokens(case) / tok_s + ev) / 60.0
        return _train_tokens(case) / tok_s * (1.0 + cal.benchmark_eval_overhead_frac) / 60.0
    if metric == "gpu_hours":
        return _train_tokens(case) / tok_s / goodput * num_devices / 3600.0
    raise SkipRow(f"metric {metric} is not predicted for training rows")

