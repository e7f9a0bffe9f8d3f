"""Speculative decoding of a query (draft-target, Leviathan et al., ICML 2023): whether it is on, with which draft
model, how many tokens it proposes and how many are accepted per step, and the draft model's own query. The engine
that times it is :meth:`wseplan.devices.inference.InferenceMixin._decode_tpot`."""
from __future__ import annotations

import dataclasses

from ..analytic import engine as E
from ..errors import InputError
from ..workload import resolve_model, total_params

SPEC_OPTIONS = ("speculative", "draft_tokens", "acceptance")
#: the draft name of a model's own multi-token-prediction module (``--speculative mtp``, :func:`mtp_draft`)
MTP_DRAFT = "mtp"


def speculation(q) -> dict | None:
    """Speculative decoding of a query: the software profile's default, overridden by the options ``speculative``
    (a draft model name, or ``none``), ``draft_tokens`` (k) and ``acceptance`` (per-token acceptance, 0-1).
    Returns None when off, else ``{draft_model, draft_tokens, acceptance_frac, accepted_per_step}`` (the last
    :func:`~wseplan.analytic.engine.accepted_tokens_per_step` of the two before it)."""
    if q.phase == "train":  # plan.setup refuses the options for training; nothing to decide
        return None
    sp = q.software.engine.speculative
    name = q.options.get("speculative", sp.draft_model if sp else None)
    if name is None or str(name).lower() in ("none", "off", "false", "0", ""):
        _refuse_draft_settings(q, "speculative none" if "speculative" in q.options
                               else f"software profile {q.software.name} has no draft model")
        return None
    d = q.catalog.defaults  # a profile without a draft of its own: the catalog's defaults (as the production profiles)
    k = q.options.get("draft_tokens", sp.draft_tokens.si if sp else d.default_draft_tokens.si)
    a = q.options.get("acceptance", sp.acceptance_frac.si if sp else d.default_draft_acceptance_frac.si)
    if isinstance(k, bool) or not float(k).is_integer() or not 1 <= k <= 16:
        raise InputError(f"draft_tokens: must be an integer from 1 to 16, got {k!r}")
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a < 1.0:
        raise InputError(f"acceptance: per-token acceptance must be in [0, 1), got {a!r}")
    if isinstance(name, str) and name.strip().lower() == MTP_DRAFT:
        draft = mtp_draft(q.model)
    elif isinstance(name, str):
        try:
            draft = resolve_model(name, q.catalog)
        except InputError as e:
            raise InputError(f"speculative: unknown draft model {name!r} ({e}); name a catalog model or a config.json") from None
    else:
        draft = name
    why = draft_mismatch(q.model, draft)
    if why is not None:
        if "speculative" not in q.options:  # the profile's default draft cannot serve this model: plain decoding
            _refuse_draft_settings(q, f"the {q.software.name} profile's draft cannot serve {q.model.name}: {why}")
            return None
        raise InputError(f"speculative: {why}; name a smaller draft of the target's family, or --speculative none")
    return {"draft_model": draft, "draft_tokens": float(k), "acceptance_frac": float(a),
            "accepted_per_step": float(E.accepted_tokens_per_step(draft_tokens=float(k), acceptance_frac=float(a)))}


def mtp_draft(target):
    """The draft of ``--speculative mtp``: the target's own multi-token-prediction module (``mtp_layers`` blocks,
    config.json ``num_nextn_predict_layers``; DeepSeek-AI, DeepSeek-V3 Technical Report, 2024, sec. 2.2: one
    transformer block that predicts the next token from the main model's last hidden state and the current token),
    run once per draft token as SGLang's EAGLE decoding with the MTP weights and TensorRT-LLM's autoregressive MTP do.
    Timed as a model of those blocks, built like the target's MoE blocks, with the target's embedding and LM head,
    which the module shares: its memory counts them a second time (1.9 B parameters for DeepSeek-V3, a margin) and
    leaves out its 2d x d input projection (0.1 B). InputError where the model has none."""
    k = int(getattr(target, "mtp_layers", 0) or 0)
    if k <= 0:
        raise InputError(f"speculative: {target.name} has no multi-token-prediction module (its mtp_layers, config.json "
                         "num_nextn_predict_layers, is 0); name a draft model of its family, or --speculative none")
    upd = dict(name=f"{target.name} MTP", aliases=[], num_layers=k, first_dense_layers=0, dense_layers=[],
               moe_layer_step=1, moe_layer_offset=0, mtp_layers=0, encoder_params=0)
    if target.layer_types:
        upd["layer_types"] = list(target.layer_types[-k:])
    return target.model_copy(update=upd)


def _refuse_draft_settings(q, why: str) -> None:
    """A draft's settings (``draft_tokens``, ``acceptance``) asked for while speculative decoding is off: a one-line
    error naming the option, instead of an answer that silently ignores them (the one place this is decided; the
    CLI names the flags, :func:`wseplan.cli.options.spec_flag_errors`)."""
    for key in ("draft_tokens", "acceptance"):
        if q.options.get(key) is not None:
            raise InputError(f"{key}: speculative decoding is off ({why}); name a draft model with speculative "
                             "(--speculative DRAFT)")


def draft_mismatch(target, draft) -> str | None:
    """Why ``draft`` cannot draft for ``target`` in draft-target speculative decoding, or None: the target verifies
    the draft's token ids, so both need one tokenizer (Leviathan et al., ICML 2023; vLLM and TensorRT-LLM require
    it): the catalog's ``tokenizer`` where both models state it (Mixtral and Llama 2 both have 32,000 tokens, not
    the same ones), else one vocabulary size; and a draft no smaller than the target saves nothing."""
    tv, dv = getattr(target, "vocab_size", None), getattr(draft, "vocab_size", None)
    if dv is None:  # audit31b H2: a layer-list draft reached the draft's layout and failed there with a traceback
        return (f"the draft {draft.name} is a layer-list model: a draft proposes tokens, so it must be a transformer "
                "(a catalog language model or a config.json)")
    if tv is None:  # a layer-list target: nothing to compare (it has no decode to speculate in)
        return None
    tt, dt = getattr(target, "tokenizer", None), getattr(draft, "tokenizer", None)
    if tt is not None and dt is not None:
        if tt != dt:
            return (f"the draft {draft.name} uses the {dt} tokenizer and the target {target.name} the {tt} one: "
                    "draft and target need one tokenizer")
    elif tv != dv:
        return (f"the draft {draft.name} has a {dv:,}-token vocabulary and the target {target.name} {tv:,}: "
                "draft and target need one tokenizer")
    if total_params(draft) >= total_params(target):
        return (f"the draft {draft.name} ({total_params(draft) / 1e9:.3g}B parameters) is no smaller than the target "
                f"{target.name} ({total_params(target) / 1e9:.3g}B)")
    return None


def default_draft_refused(q) -> str | None:
    """Why the software profile's default draft is not used for this query's model (None: it is, or there is none,
    or the query names its own draft)."""
    sp = q.software.engine.speculative
    if sp is None or "speculative" in q.options:
        return None
    try:
        draft = resolve_model(sp.draft_model, q.catalog)
    except InputError:
        return None
    return draft_mismatch(q.model, draft)


def draft_query(q, draft_model):
    """The query of the draft model: same target, precision and profile, decode, no speculation of its own; a wafer
    region given for the target (``core_grid*``: the user's, or the slots' of a running batch) is the target's, the
    draft's regions are its own (searched)."""
    eng = q.software.engine.model_copy(update={"speculative": None})
    sw = q.software.model_copy(update={"engine": eng})
    opts = {k: v for k, v in q.options.items() if k not in SPEC_OPTIONS and not k.startswith("core_grid")}
    return dataclasses.replace(q, model=draft_model, phase="decode", software=sw, options=opts)
