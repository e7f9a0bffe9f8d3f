"""The sizes a planning question runs at: the catalog's default batch, context and answer length where a question
leaves them out (and where each came from), and the sequence positions a model can hold (a learned position table
refuses longer sequences; a stated ``max_context`` is noted). Part of the chain (:mod:`wseplan.plan`)."""
from __future__ import annotations

import numpy as np

from .catalog.load import Catalog
from .errors import InputError
from .workload import check_positive_int


def positions_of(m) -> tuple[int | None, bool]:
    """(the longest sequence ``m`` can represent [tokens], whether a learned position table bounds it): the table's
    rows for learned positions (GPT-3's 2,048), else the stated ``max_context`` (None: not stated)."""
    learned = int(getattr(m, "learned_pos_embeddings", 0) or 0)
    return (learned, True) if learned else (getattr(m, "max_context", None), False)


def check_positions(m, context, output_tokens) -> None:
    """Refuse sequences longer than a learned position table (the model has no position for the extra tokens).

    Raises
    ------
    InputError
        Naming the context, the model's positions and the longest context that fits them.
    """
    limit, learned = positions_of(m)
    if not learned:
        return
    c_, o_ = np.broadcast_arrays(np.ravel(np.asarray(context, dtype=float)), np.ravel(np.asarray(output_tokens, dtype=float)))
    total = c_ + o_
    if total.size and float(total.max()) > limit:
        i = int(np.argmax(total))
        c, o = float(c_[i]), float(o_[i])
        what = f"{c:,.0f} + {o:,.0f} output tokens" if o else f"{c:,.0f} tokens"
        raise InputError(f"context: {what} exceed {getattr(m, 'name', 'the model')}'s {limit:,} learned positions "
                         f"(a position table of that many rows); give a context of at most {max(limit - o, 1):,.0f}")


def positions_note(m, context: int, output_tokens: int) -> list[str]:
    """A note when a sequence runs past the model's stated ``max_context`` (rotary positions: it can be extended)."""
    limit, learned = positions_of(m)
    total = context + (output_tokens or 0)
    if learned or not limit or total <= limit:
        return []
    return [f"{total:,} tokens per sequence is beyond {m.name}'s {limit:,} (max_position_embeddings): the model needs a "
            "context extension (e.g. RoPE scaling, as Llama 3.1 extends Llama 3) to attend that far; planned as if it could"]


def default_sizes(cat: Catalog, phase: str, batch, context, output_tokens, model=None) -> tuple[int, int, int, dict]:
    """Batch, context and output tokens with the catalog defaults where not given, and where each came from. A
    defaulted context is cut to what ``model``'s positions hold (with the output tokens of a request)."""
    d = cat.defaults
    src = {}
    train = phase == "train"

    def pick(value, name, q):
        if value is None:
            src[name] = "default"
            return int(q.si)
        src[name] = "given"
        return value

    batch = pick(batch, "batch", d.default_train_batch if train else d.default_batch)
    if model is not None and hasattr(model, "layers") and not hasattr(model, "num_layers"):
        # a layer-list model (a 3D U-Net, a GNN): a sequence is one sample, its 'tokens' are samples (audit28c H2:
        # the 4,096-token default multiplied a conv net's activations into 202 TB)
        if context is not None and context != 1:
            raise InputError(f"context: {model.name} is a layer-list model, whose sequence is one sample (its FLOPs "
                             f"and activations are per sample); drop --context or give 1, and set the samples with "
                             f"--batch")
        src["context"] = "one sample (a layer-list model)" if context is None else "given"
        context = 1
    else:
        context = pick(context, "context", d.default_train_context_tokens if train else
                       d.default_prompt_tokens if phase == "serve" else d.default_context_tokens)
    if phase == "serve":
        output_tokens = pick(output_tokens, "output_tokens", d.default_output_tokens)
    else:
        output_tokens = 0 if not output_tokens else output_tokens
    limit = positions_of(model)[0] if model is not None else None
    if src["context"] == "default" and limit and isinstance(output_tokens, (int, float)):
        room = int(limit - (output_tokens or 0))
        if 0 < room < context:
            context = room
            src["context"] = "default (the model's positions)"
    check_positive_int(batch, "batch")
    check_positive_int(context, "context")
    if phase == "serve":
        check_positive_int(output_tokens, "output_tokens")
    return batch, context, int(output_tokens or 0), src
