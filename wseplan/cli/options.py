"""Shared option definitions of the ``wseplan`` commands: one definition each, help texts parameterised.

Commands take their options from here so that a flag means the same thing (name, short form, default,
help) everywhere. Only typer, the error types and the text formatters are imported here; catalogs and
physics load inside the commands.
"""
from __future__ import annotations

import contextlib
import math
from typing import Optional

import typer

from ..errors import InputError, WseplanError
from ..report.formats import safe_text

PRECISIONS_HELP = "fp32 | tf32 | bf16 | fp16 | fp8 | int8 | int4 | fp4"
TARGET_HELP = "<hardware key>[x<N>]: wse3, cs3x4, h100x8, h200-sxmx16 …"


def format_opt(help: str = "Output: table | json | csv | md.") -> typer.models.OptionInfo:
    """``--format/-f``: table | json | csv | md."""
    return typer.Option("table", "--format", "-f", help=help)


def catalog_opt() -> typer.models.OptionInfo:
    """``--catalog DIR`` (repeatable): extra catalog folders."""
    return typer.Option(None, "--catalog", help="Folder of YAML files that override or add catalog entries (repeatable).")


def target_opt(help: str = TARGET_HELP, default=...) -> typer.models.OptionInfo:
    """``--target/-t``."""
    return typer.Option(default, "--target", "-t", help=help)


def targets_opt(default: str, help: str = "Comma-separated targets <hardware key>[x<N>].") -> typer.models.OptionInfo:
    """``--targets/-t``: a comma-separated list."""
    return typer.Option(default, "--targets", "-t", help=help)


def precision_opt(default: str = "bf16", help: str = PRECISIONS_HELP) -> typer.models.OptionInfo:
    """``--precision/-p``."""
    return typer.Option(default, "--precision", "-p", help=help)


def phase_opt(default: str = "decode", help: str = "train | prefill | decode") -> typer.models.OptionInfo:
    """``--phase``."""
    return typer.Option(default, "--phase", help=help)


def batch_opt(help: str = "Sequences (default: catalogs/defaults.yaml).", default: Optional[int] = None) -> typer.models.OptionInfo:
    """``--batch/-b``."""
    return typer.Option(default, "--batch", "-b", help=help)


def min_speed_opt(help: str = "Serving without --batch: the per-user speed the operating point must meet "
                                "[tokens/s per user] (default: catalogs/defaults.yaml default_min_tokens_per_s_per_user).",
                  ) -> typer.models.OptionInfo:
    """``--min-speed``."""
    return typer.Option(None, "--min-speed", help=help)


def context_opt(help: str = "Tokens per sequence / KV length (default: catalogs/defaults.yaml).",
                default: Optional[int] = None) -> typer.models.OptionInfo:
    """``--context/-c``."""
    return typer.Option(default, "--context", "-c", help=help)


def output_tokens_opt(help: str = "Serve: output tokens per request (default 256).", short: bool = True) -> typer.models.OptionInfo:
    """``--output-tokens[/-o]``."""
    names = ("--output-tokens", "-o") if short else ("--output-tokens",)
    return typer.Option(None, *names, help=help)


def train_tokens_opt(help: str = "Train: tokens in the run (default 20 x params).") -> typer.models.OptionInfo:
    """``--train-tokens``."""
    return typer.Option(None, "--train-tokens", help=help)


def reserve_opt() -> typer.models.OptionInfo:
    """``--reserve``: memory fraction kept back."""
    return typer.Option(None, "--reserve", help="Fraction of SRAM/HBM kept back (default: catalog).")


def memoryx_opt(help: str = "Wafer training: MemoryX capacity option (e.g. 12tb; default: the smallest that holds the "
                            "weights and optimizer state).") -> typer.models.OptionInfo:
    """``--memoryx``."""
    return typer.Option(None, "--memoryx", help=help)


def set_opt(help: str = "Pin a cost input: NAME=VALUE (e.g. electricity_usd_per_kwh=0.12, cs3.capex_usd=2e6). "
                        "Repeatable.") -> typer.models.OptionInfo:
    """``--set NAME=VALUE`` (repeatable)."""
    return typer.Option(None, "--set", help=help)


def prices_opt() -> typer.models.OptionInfo:
    """``--prices FILE`` (repeatable)."""
    return typer.Option(None, "--prices", help="Prices YAML merged over catalogs/prices (repeatable).")


def uncertainty_opt(help: str = "Monte Carlo samples for P10/P50/P90 (0: off).", short: bool = True) -> typer.models.OptionInfo:
    """``--uncertainty[/-u]``."""
    names = ("--uncertainty", "-u") if short else ("--uncertainty",)
    return typer.Option(0, *names, help=help)


def seed_opt() -> typer.models.OptionInfo:
    """``--seed``."""
    return typer.Option(0, "--seed", help="Random seed of the Monte Carlo.")


def software_opt() -> typer.models.OptionInfo:
    """``--software NAME``: a named software profile of the catalog (``serve``, ``time``)."""
    return typer.Option(None, "--software", help="Software profile (engine overheads and efficiencies) from the "
                        "catalog; `wseplan catalog list software` names them (default: the family's production profile; GPU "
                        "training: gpu-fitted-2026-11, the calibration's own constants).")


#: words that turn speculative decoding off
SPEC_OFF = ("none", "off")


def speculative_opt() -> typer.models.OptionInfo:
    """``--speculative DRAFT|none`` (``serve``, ``time``)."""
    return typer.Option(None, "--speculative", help="Draft model for speculative decoding (catalog name or config.json), "
                        "'mtp' for the model's own multi-token-prediction module (DeepSeek-V3/R1), "
                        "or 'none' to turn off a profile's default (the wafer-production profile drafts with "
                        "Llama-3.2-1B). A prefill's time to first token includes the draft's prefill of the prompt, "
                        "as serve's does.")


def draft_tokens_opt() -> typer.models.OptionInfo:
    """``--draft-tokens K``."""
    return typer.Option(None, "--draft-tokens", help="Tokens the draft proposes per step (k, 1-16).")


def acceptance_opt() -> typer.models.OptionInfo:
    """``--acceptance A``."""
    return typer.Option(None, "--acceptance", help="Per-token acceptance probability of the draft's tokens, in [0, 1).")


def check_spec_flags(draft_tokens, acceptance) -> None:
    """--draft-tokens and --acceptance in range, else a one-line error naming the flag (no catalog needed)."""
    if draft_tokens is not None and not 1 <= draft_tokens <= 16:
        raise InputError(f"--draft-tokens: must be an integer from 1 to 16, got {draft_tokens!r}")
    if acceptance is not None and not (math.isfinite(acceptance) and 0 <= acceptance < 1):
        raise InputError(f"--acceptance: per-token acceptance must be in [0, 1), got {acceptance!r}")


def spec_options(speculative, draft_tokens, acceptance, cat) -> dict:
    """The family ``options`` for speculative decoding (wseplan.devices.speculation.SPEC_OPTIONS) from the three flags,
    each checked with a one-line error naming it (an unknown draft model names --speculative). Whether they apply
    (not in training; a draft to set) is decided with the answer; run it inside :func:`spec_flag_errors`."""
    from ..workload import resolve_model

    check_spec_flags(draft_tokens, acceptance)
    opts = {}
    if speculative is not None:
        if speculative.strip().lower() not in SPEC_OFF + ("mtp",):  # mtp: the target's own module (no catalog name)
            try:
                resolve_model(speculative, cat)
            except WseplanError as exc:
                msg = str(exc).removeprefix("model: ").replace("unknown model", "unknown draft model", 1)
                raise InputError(f"--speculative: {msg}") from None
        opts["speculative"] = "none" if speculative.strip().lower() in SPEC_OFF else speculative
    if draft_tokens is not None:
        opts["draft_tokens"] = draft_tokens
    if acceptance is not None:
        opts["acceptance"] = acceptance
    return opts


#: the family options of speculative decoding and the flags that set them
SPEC_FLAGS = {"speculative": "--speculative", "draft_tokens": "--draft-tokens", "acceptance": "--acceptance"}


@contextlib.contextmanager
def spec_flag_errors():
    """Inside: a one-line error about a speculative-decoding option (decided once, in
    :func:`wseplan.devices.speculation.speculation` and :func:`wseplan.plan.setup`) names the command's flag
    (``draft_tokens: ...`` -> ``--draft-tokens: ...``)."""
    try:
        yield
    except InputError as exc:
        msg = str(exc)
        key = msg.split(":", 1)[0]
        if key in SPEC_FLAGS:
            raise InputError(SPEC_FLAGS[key] + msg[len(key):]) from None
        raise


def policy_opt(default: str | None = "auto", where: str = "") -> typer.models.OptionInfo:
    """``--policy``: activations kept for the backward pass on wafers (``where``: the rows it applies to, for a
    command that also runs GPUs; its default None leaves the family's own)."""
    what = "activations for the backward pass: auto | store | checkpoint | recompute | spill"
    return typer.Option(default, "--policy", help=f"{where}{what}, as `stream --policy`." if where else
                        f"{what[0].upper()}{what[1:]}.")


def cp_opt() -> typer.models.OptionInfo:
    """``--cp``: the context-parallel degree of GPU training."""
    return typer.Option(None, "--cp", help="Context-parallel degree (GPU train).")


def pipeline_split_opt() -> typer.models.OptionInfo:
    """``--pipeline-split``: how GPU training spreads the layers over the pipeline stages."""
    return typer.Option(None, "--pipeline-split", help="GPU train: uneven (default: any layers per stage, current "
                        "frameworks) | even (layers divide pp x vpp, Megatron-LM 2021-2022).")


def trainable_opt() -> typer.models.OptionInfo:
    """``--trainable``: which weights GPU training updates (full training or LoRA adapters)."""
    return typer.Option(None, "--trainable", help="GPU train: full (default: every weight) | lora (frozen base "
                        "weights, low-rank adapters on the attention projections: no weight gradients or optimizer "
                        "state for the base, and the frozen MLP keeps no inputs of its linear layers) | lora-all "
                        "(adapters on every linear layer).")


#: the flag of each training option (:func:`training_options`)
TRAINING_FLAGS = {"context_parallel": "--cp", "pipeline_split": "--pipeline-split", "trainable": "--trainable",
                  "memoryx_option": "--memoryx", "policy": "--policy"}


def training_options(cp, pipeline_split, trainable, memoryx, policy, phase: str) -> dict:
    """The training options ``time``, ``cost`` and ``compare`` share, as family options (those given); refused with
    their flags outside ``--phase train`` (review37 M4: the family's refusal named its internal option names)."""
    out = {k: v for k, v in dict(context_parallel=cp, pipeline_split=pipeline_split, trainable=trainable,
                                 memoryx_option=memoryx, policy=policy).items() if v is not None}
    if out and phase in ("prefill", "decode", "serve"):  # (an unknown phase gets the phase's own error: review37b L5)
        raise InputError(f"{', '.join(TRAINING_FLAGS[k] for k in out)}: training options; give --phase train, or drop "
                         "them")
    return out


def solver_opt(default: str, help: str) -> typer.models.OptionInfo:
    """``--solver``."""
    return typer.Option(default, "--solver", help=help)


def cost_overrides(items: Optional[list[str]], cat) -> dict[str, float]:
    """The ``--set NAME=VALUE`` items as a dict (:func:`wseplan.analytic.cost.parse_overrides`), with each
    ``HW.NAME`` prefix checked against the catalog's hardware keys and each NAME a plain identifier, so a
    misspelt or hostile name is refused instead of silently applying to nothing."""
    from ..analytic.cost import parse_overrides

    out = parse_overrides(items)
    known = cat.hardware_keys()
    for key in out:
        hw, name = key.split(".", 1) if "." in key else ("", key)
        if not name.isidentifier() or not name.isascii() or (hw and hw.lower() not in known):
            shown = safe_text(key if len(key) <= 60 else key[:57] + "...")
            what = f"{hw!r} is not a hardware key" if hw and hw.lower() not in known else "not a cost input name"
            raise InputError(f"--set: {shown!r}: {safe_text(what)}; use NAME=VALUE or HW.NAME=VALUE "
                             "(hardware keys: `wseplan catalog list hardware`)")
    return out


def check_out(out: Optional[str]) -> None:
    """Refuse an ``--out`` given as an empty (or blank) string: it names no path, and silently falling back
    to the default folder or to the current one would write where the user did not ask."""
    if out is not None and not str(out).strip():
        raise InputError("--out: empty; give a path, or leave --out out for the default")


_LOADED: dict = {"catalog": None}


def load_catalog(dirs: Optional[list[str]]):
    """The catalog with the user's ``--catalog`` folders applied (remembered for the records' provenance)."""
    from ..catalog import load_catalog as _load

    cat = _load(list(dirs or []))
    _LOADED["catalog"] = cat
    return cat


def loaded_catalog():
    """The catalog this command loaded, or None."""
    return _LOADED["catalog"]


def kv_precision_opt() -> typer.models.OptionInfo:
    """``--kv-precision``."""
    return typer.Option(None, "--kv-precision", help="GPU inference: the KV cache's own format, as an engine is told "
                        "(vLLM --kv-cache-dtype): fp8 | int8 | bf16 | fp16 | fp32 (default: fp8 with fp8 weights, "
                        "else 16-bit).")


def with_kv(opts: dict, kv_precision) -> dict:
    """``opts`` with the ``kv_precision`` family option where ``--kv-precision`` was given."""
    return dict(opts, kv_precision=kv_precision) if kv_precision is not None else opts


def ep_opt(help: str = "GPU train, MoE models: expert-parallel degree (whole routed experts split over that many of "
           "the tp x dp x cp GPUs of a pipeline stage; searched when not given).") -> typer.models.OptionInfo:
    """``--ep``."""
    return typer.Option(None, "--ep", help=help)


def adp_opt() -> typer.models.OptionInfo:
    """``--adp``."""
    return typer.Option(None, "--adp", help="GPU inference, MoE models: data-parallel attention ranks of a replica, 1 "
                        "(attention split over --tp) or the tp degree (each GPU runs the attention of its own requests "
                        "with the whole attention weights: SGLang --enable-dp-attention, TensorRT-LLM "
                        "enable_attention_dp); searched when not given.")


def expert_dispatch_opt() -> typer.models.OptionInfo:
    """``--expert-dispatch``."""
    return typer.Option(None, "--expert-dispatch", help="GPU train, MoE models: how the expert all-to-all crosses "
                        "nodes: flat (default: NCCL all-to-all, every remote row over the network) | hierarchical "
                        "(once per other node, then NVLink: DeepEP, HybridEP).")


def expert_overlap_opt() -> typer.models.OptionInfo:
    """``--expert-overlap off|on|dualpipe``."""
    return typer.Option(None, "--expert-overlap", help="GPU train, MoE models: off (default: the all-to-alls exposed) "
                        "| on (one micro-batch's all-to-alls under another's compute, Megatron-Core's "
                        "--overlap-moe-expert-parallel-comm: one pipeline stage or an interleaved pipeline) | dualpipe "
                        "(the same on any pipeline, DeepSeek's DualPipe schedule).")


def with_moe(opts: dict, phase: str, ep, dispatch, overlap) -> dict:
    """``opts`` with the MoE training options given; ``--ep`` and these refused outside training with one line."""
    given = [f for f, v in (("--ep", ep), ("--expert-dispatch", dispatch), ("--expert-overlap", overlap)) if v is not None]
    if given and phase != "train":
        raise InputError(f"{given[0]}: applies to GPU training (--phase train); inference chooses for each point "
                         "between the experts split over the --tp GPUs and whole experts over them (the faster; reported "
                         "as layout expert_parallel) and cannot pin it")
    if overlap is not None and overlap not in ("off", "on", "dualpipe"):
        raise InputError(f"--expert-overlap: {overlap!r} is not an overlap; give off, on or dualpipe")
    overlap = {"off": False, "on": True}.get(overlap, overlap)
    return {**opts, **{k: v for k, v in (("expert_dispatch", dispatch), ("expert_comm_overlap", overlap)) if v is not None}}
