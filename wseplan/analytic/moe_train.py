"""Mixture-of-experts training on GPUs: expert parallelism and the token dispatch of a routed-expert layer.

Mechanisms (per GPU, per routed-expert layer and pass; no fitted constant: the catalog's bandwidths and the model's
shapes decide them):

* **Expert parallelism** (``ep``): the routed experts of a layer are split over ``ep`` GPUs of the tensor x data x
  context-parallel ranks (Megatron-Core's ``--expert-model-parallel-size``), whole: expert tensor parallelism 1, as
  NVIDIA's Megatron-Bridge performance recipes set it (``expert_tensor_parallel_size = 1`` for DeepSeek-V3, gpt-oss,
  Qwen3, GLM-5; 2025-2026). A GPU holds ``E / ep`` experts and, with balanced routing, runs the routed rows of its
  ``1 / tp`` share of the tokens (sequence parallelism) on them: the same FLOPs as a tensor-parallel split, on ``ep``
  times fewer, ``ep`` times taller expert GEMMs (:func:`routed_rows`), and ``1 / ep`` of the experts' weights and
  gradients (their optimizer state is sharded over the ``tp dp cp / ep`` ranks holding the same experts, so under
  ZeRO it is the same per GPU as the other weights'). Their gradients are reduced over those ranks, which sit ``ep``
  GPUs apart (:func:`expert_grad_allreduce_s`).
* **Token permutation** (present with or without expert parallelism): the dispatcher copies each token's hidden state
  to its ``k`` experts' rows and back (Megatron-Core's ``permute``/``unpermute``, TransformerEngine's fused
  ``moe_permute``): a pass reads the ``d``-wide tokens and writes ``k`` copies, then reads the ``k`` expert outputs
  and writes their weighted sum, ``(2 + 2 k) d`` elements per token through HBM.
* **All-to-all** (``ep > 1``): the routed rows leave for the experts' GPUs and come back (dispatch and combine,
  GShard: Lepikhin et al. 2020, sec. 2.2); each GPU sends ``(ep - 1) / ep`` of its ``tokens x k`` rows of ``d``
  elements each way, all through NVLink inside one scale-up domain (the group's GPUs are consecutive). Beyond it
  (:data:`DISPATCHES`): ``flat`` (default: NCCL all-to-all, Megatron-Core's ``alltoall`` dispatcher, the one its
  documentation recommends and NVIDIA's recipes without DeepEP run) sends every remote row over the scale-out link;
  ``hierarchical`` (the deduplicating dispatchers: DeepEP's internode kernels and NVIDIA's HybridEP, Megatron-
  Core's ``flex`` dispatcher) sends a token once to each other domain holding one of its experts, over the GPU's
  scale-out link, and forwards it there over NVLink (DeepSeek-AI 2024, sec. 3.2.1: "first transmitted via IB to the
  GPUs with the same in-node index ... then forwarded via NVLink"). With tensor parallelism the received rows
  are not gathered over the TP group: whole experts need no tensor-parallel collective.
* Each pass (forward, backward, a recomputed forward) runs the permutation and the all-to-alls once, exposed by
  default (Megatron-Core runs them unoverlapped unless asked). With ``overlap`` (Megatron-Core's ``--overlap-moe-expert-parallel-comm``, which
  NVIDIA's DeepSeek-V3 and some Qwen3 performance recipes enable; after DeepSeek-V3's DualPipe, sec. 3.2.1) one
  micro-batch's all-to-alls run under another micro-batch's compute of the same layer, so a layer takes the longer of
  the two; the schedule needs a single pipeline stage or an interleaved pipeline (Megatron-Bridge refuses it
  otherwise), where the all-to-alls stay exposed.

Not modelled: load imbalance between experts (dropless routing with an auxiliary balancing loss; NVIDIA's published
MoE benchmarks force-balance the routing), the router's own GEMM and top-k (``d x E`` per token, under 1% of a
routed layer's FLOPs for the bundled models), the sort of received rows by local expert when a GPU holds several,
and node-limited routing (DeepSeek-V3 sends a token to at most 4 nodes: the hierarchical count is pessimistic there).
An expert group of at most a scale-up domain's GPUs is taken to sit inside one (a 64-GPU group in a 72-GPU NVL72
rack, as NVIDIA's GB200 runs of 64-GPU expert groups are fast enough to need it), while the data-parallel reduction
(:func:`~.gpu_time.train_step`) counts 64-GPU blocks as straddling 72-GPU racks: the two placements differ there.

References: Lepikhin et al., "GShard", arXiv:2006.16668 (2020); Megatron-Core MoE documentation
(NVIDIA/Megatron-LM, megatron/core/transformer/moe/README.md: expert parallelism, token dispatchers, EP x TP);
DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437 (2024), sec. 3.2.
"""
from __future__ import annotations

import functools
import statistics

import numpy as np

from ..workload import block_types, num_experts, routed_params
from . import elementwise as X
from .collectives import hierarchical_allreduce_time_s


def routed_rows(tokens, num_experts: float, experts_per_token: float, ep=1.0):
    """(experts a GPU runs, rows each) of a routed-expert GEMM over ``tokens`` tokens of this GPU (arrays broadcast).

    Without expert parallelism a pass runs the ``E (1 - (1 - k/E)^tokens)`` experts some token picked (all of them in
    training), each on its share of the ``tokens x k`` rows; with ``ep`` ranks a GPU holds ``E / ep`` experts and
    receives, in balance, the rows of ``ep`` GPUs' tokens routed to them: ``tokens x k`` rows in all, on ``ep`` times
    fewer experts."""
    E, k = float(num_experts), float(experts_per_token)
    ep = X.asfloat(ep)
    experts = X.maximum(E / ep * (1.0 - X.power(1.0 - k / E, X.asfloat(tokens) * ep)), 1e-30)
    return experts, X.asfloat(tokens) * k / experts


def normal_max_factor(n):
    """Expected largest of ``n`` independent standard normal draws, by Blom's approximation
    ``Phi^-1((n - 0.375) / (n + 0.25))`` (Blom, "Statistical Estimates and Transformed Beta-Variables", 1958; within
    0.03 of the exact 0.564, 1.029, 1.424 for 2, 4, 8 draws); 0 for one (arrays broadcast)."""
    table = _blom_table()
    n = X.asfloat(n)
    if isinstance(n, np.ndarray):
        return table[np.clip(np.rint(n), 1, len(table) - 1).astype(np.int64)]
    return float(table[int(min(max(round(n), 1), len(table) - 1))])


@functools.cache
def _blom_table(largest: int = 4096) -> np.ndarray:
    """:func:`normal_max_factor` of 0..``largest`` draws (whole GPU counts; index 0 unused)."""
    inv = statistics.NormalDist().inv_cdf
    return np.array([0.0, 0.0] + [inv((n - 0.375) / (n + 0.25)) for n in range(2, largest + 1)])


def routed_rows_slowest(tokens, num_experts: float, experts_per_token: float, gpus):
    """(experts, routed rows) of the slowest of ``gpus`` GPUs each holding ``E / gpus`` whole experts, when all of
    them see the same ``tokens`` tokens (an inference pass whose tokens the tensor-parallel group shares).

    A GPU's experts are each picked by some token with probability ``p = 1 - (1 - k/E)^tokens`` (as
    :func:`routed_rows`): ``E / g`` Bernoulli draws, mean ``E p / g``, variance ``E p (1 - p) / g``. A token's ``k``
    distinct experts put a hypergeometric number on a GPU: mean ``k / g``, variance ``k (1/g)(1 - 1/g)(E - k)/(E - 1)``
    per token, summed over the tokens. The slowest GPU is taken as each mean plus :func:`normal_max_factor` of the
    ``g`` GPUs times its standard deviation, capped at the GPU's experts and at all the rows (the two maxima are
    taken apart: a slight overestimate where different GPUs hold them); at least one row per expert run. One GPU:
    :func:`routed_rows`'s expectation."""
    E, k = float(num_experts), float(experts_per_token)
    T, g = X.asfloat(tokens), X.maximum(X.asfloat(gpus), 1.0)
    c = normal_max_factor(g)
    p = 1.0 - X.power(1.0 - k / E, T)
    e = E / g
    experts = X.minimum(e * p + c * X.power(e * p * (1.0 - p), 0.5), e)
    per_token = k / g * (1.0 - 1.0 / g) * (E - k) / max(E - 1.0, 1.0)
    rows = X.minimum(T * k / g + c * X.power(T * per_token, 0.5), T * k)
    experts = X.maximum(experts, 1e-30)
    return experts, X.maximum(rows, experts)


def is_routed(block) -> bool:
    """Whether a block type (:class:`~wseplan.architecture.BlockType`) has routed experts."""
    return any(g.num_experts > 1 for g in getattr(block, "gemms", ()))


def experts_per_token(block) -> float:
    """``k``: the routed experts each token of ``block`` uses (1 for a dense block)."""
    return float(max((g.active for g in block.gemms if g.num_experts > 1), default=1))


#: how the all-to-all crosses scale-up domains (:func:`expert_dispatch_s`)
DISPATCHES = ("hierarchical", "flat")


def remote_domains_per_token(domains, experts_per_token: float):
    """Expected other scale-up domains a token's ``k`` experts fall in, of an expert group spread over ``domains``
    of them (experts picked uniformly, as a balanced router does): ``(D - 1) (1 - (1 - 1/D)^k)``."""
    D = X.maximum(X.asfloat(domains), 1.0)
    return (D - 1.0) * (1.0 - X.power(1.0 - 1.0 / D, experts_per_token))


def expert_dispatch_s(block, d_model: float, *, tokens, tp, ep, ab: float, links, dispatch: str = "flat"):
    """Per-GPU time of one pass's token dispatch of a routed-expert ``block`` [s]: (permutation through HBM,
    all-to-all), arrays broadcast; zeros for a dense block.

    ``tokens``: the micro-batch's tokens on this GPU's sequence shard (all TP ranks hold them; each dispatches its
    ``1 / tp``); ``ab``: bytes per activation element; ``links``: :class:`~.gpu_links.Links`; ``dispatch``: one of
    :data:`DISPATCHES`."""
    if dispatch not in DISPATCHES:
        raise ValueError(f"dispatch must be one of {DISPATCHES}, not {dispatch!r}")
    if not is_routed(block):
        return 0.0, 0.0
    k = experts_per_token(block)
    tp, ep = X.asfloat(tp), X.asfloat(ep)
    row_bytes = ab * d_model
    local = X.asfloat(tokens) / tp  # sequence parallel: each TP rank permutes and sends its share
    permute = (2.0 + 2.0 * k) * local * row_bytes / links.hbm_bw
    sent = local * k * row_bytes * (ep - 1.0) / ep
    # the expert group's ranks are consecutive GPUs (expert tensor parallelism 1): those of one scale-up domain ride
    # NVLink
    in_domain = X.minimum(ep, X.maximum(links.domain, 1.0))
    if dispatch == "flat":
        nvl = sent * X.maximum(in_domain - 1.0, 0.0) / X.maximum(ep - 1.0, 1.0) / links.group_bw(in_domain)
        net = sent * (ep - in_domain) / X.maximum(ep - 1.0, 1.0) / links.net_bw
    else:  # once per remote domain over the network; every row but a GPU's own through NVLink (sent or forwarded)
        nvl = sent / links.group_bw(in_domain)
        net = local * row_bytes * remote_domains_per_token(ep / in_domain, k) / links.net_bw
    lat = X.where(ep > in_domain, links.net_lat, links.nvlink_lat)
    a2a = X.where(ep > 1.0, 2.0 * (X.maximum(nvl, net) + lat), 0.0)  # dispatch and combine
    return permute, a2a


def expert_grad_allreduce_s(message_bytes, *, tp, dp, cp, ep, links):
    """The all-reduce of one GPU's routed-expert gradients (``message_bytes``) over the ``tp dp cp / ep`` ranks holding
    the same experts [s] (0 with none): they sit ``ep`` GPUs apart, so a scale-up domain holds ``domain / ep`` of them
    (at least one: with ``ep`` at or above the domain every copy is in another domain and the whole shard crosses the
    network)."""
    tp, dp, cp, ep = (X.asfloat(v) for v in (tp, dp, cp, ep))
    ranks = tp * dp * cp / ep
    per_node = X.minimum(X.maximum(X.floor(links.domain / ep), 1.0), ranks)
    t = hierarchical_allreduce_time_s(message_bytes=message_bytes, num_ranks=ranks, ranks_per_node=per_node,
                                      intra_bandwidth_bytes_per_s=links.group_bw(per_node),
                                      intra_latency_s=links.nvlink_lat, inter_bandwidth_bytes_per_s=links.net_bw,
                                      inter_latency_s=links.net_lat)
    return X.where(X.asfloat(message_bytes) > 0.0, t, 0.0)


def stage_routed_params(m, pp):
    """Routed-expert weights of a pipeline stage of ``ceil(L / pp)`` layers [count]: the model's mean per layer times
    the layers (``pp`` broadcasts)."""
    if num_experts(m) <= 1:
        return X.zeros_like(X.asfloat(pp))
    total = sum(routed_params(b) * b.count for b in block_types(m))
    return X.ceil(m.num_layers / X.asfloat(pp)) * total / m.num_layers


def routed_param_rows(w) -> np.ndarray:
    """Routed-expert weights of each row of a :class:`~wseplan.workload.Workload` [count] (zeros for a dense model)."""
    out = np.zeros(len(w.params))
    m = w.arch
    if m is None or num_experts(m) <= 1:
        return out
    for b in block_types(m):
        out[np.asarray(b.layers, dtype=np.int64) + 1] = routed_params(b)
    return out
