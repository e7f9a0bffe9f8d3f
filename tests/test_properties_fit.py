"""Properties of the fit and workload layer (issue 7, item 4), checked by hypothesis on generated models.

Transformers are generated with consistent shapes (heads a multiple of KV heads, d_model = heads x head_dim,
optional MoE, tied or untied embeddings) over sizes from a few MB to several hundred GB, so that fits span
one device to tens of devices. Every property runs >= 200 deterministic examples.

Independent references written here: the parameter count of a transformer (Q, K, V, O projections, gated or
plain MLP per expert, router, two norms per block, embedding, final norm, LM head) and the bytes per
element of each numeric format; small contiguous partitions are checked against brute force.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, HealthCheck, event, given, settings
from hypothesis import strategies as st

from wseplan.analytic.partition import fewest_stages, min_max_partition
from wseplan.catalog import load_catalog
from wseplan.catalog.precision import device_rates, training_refusal
from wseplan.catalog.schema import Model
from wseplan.devices.gpu import layout_memory
from wseplan.fit import build_workload, fit
from wseplan.workload import KIND_BLOCK, block_types, total_params, transformer_workload

def _has_rate(gpu: str, precision: str, phase: str = "decode") -> bool:
    """Whether the catalog GPU has a dense rate for ``precision`` (plan refuses a precision it cannot time) and, for
    training, the datapath the precision trains on (plan refuses fp8/fp4 training without it and int4 training)."""
    dev = CAT.gpus[CAT.hardware_keys()[gpu][1]]
    try:
        dev.peak_flop_per_s(precision)
    except ValueError:
        return False
    return phase != "train" or training_refusal(gpu, device_rates(dev), precision) is None


def _wafer_trains(precision: str, phase: str) -> bool:
    """Whether a wafer (16-bit SIMD) takes ``precision`` in ``phase``: no fp8/fp4/int4 training."""
    return phase != "train" or training_refusal("wse3", device_rates(CAT.wafers["wse3"]), precision) is None


PROPS = settings(max_examples=200, deadline=None, derandomize=True, database=None, print_blob=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
CAT = load_catalog()
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4")
#: bytes per element of each format: 32-bit (fp32, and tf32 stored in 32-bit words), 16, 8 and 4 bits
BYTES_PER_ELEMENT = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
                     "fp4": 0.5}
REL = 1e-9
#: optional architecture fields (issue 12) that the hand count below does not model
ARCH_VARIANT_FIELDS = frozenset(Model.model_fields) - {
    "name", "aliases", "source", "basis", "note", "num_layers", "d_model", "num_heads", "num_kv_heads", "head_dim",
    "d_ff", "gated_mlp", "vocab_size", "tied_embeddings", "num_experts", "experts_per_token", "norm", "qkv_bias",
    "linear_bias", "learned_pos_embeddings", "max_context"}


CATALOG_MODELS = sorted(CAT.models.values(), key=lambda m: -m.num_layers * m.d_model**2)


def within_positions(m, context: int) -> bool:
    """Whether ``context`` tokens fit ``m``'s learned position table (GPT-3: 2,048); longer sequences are refused."""
    return not m.learned_pos_embeddings or context <= m.learned_pos_embeddings


def models(max_layers: int = 128):
    """The catalog's transformers and generated ones (from ~1 MB to ~1 TB of weights)."""
    return st.one_of(st.sampled_from([m for m in CATALOG_MODELS if m.num_layers <= max_layers]),
                     generated_models(max_layers))


@st.composite
def generated_models(draw, max_layers: int = 128) -> Model:
    """Consistent transformer shapes; sizes drawn largest-first from lists so that big models are common."""
    kv = draw(st.sampled_from([8, 16, 4, 2, 1]))
    heads = kv * draw(st.sampled_from([8, 4, 2, 1]))
    head_dim = draw(st.sampled_from([128, 64, 32]))
    d = heads * head_dim
    experts = draw(st.sampled_from([1, 8, 1, 4, 1]))
    layers = draw(st.one_of(st.sampled_from([96, 80, 64, 48, 40, 32, 24, 12, 2, 1]), st.integers(1, max_layers)))
    return Model(
        name="prop-model", source="wseplan-estimate", basis="estimate", note="hypothesis-generated",
        num_layers=min(layers, max_layers), d_model=d, num_heads=heads, num_kv_heads=kv,
        d_ff=draw(st.one_of(st.sampled_from([4 * d, 7 * d // 2, 8 * d // 3, 2 * d, d]), st.integers(1, 4 * d))),
        gated_mlp=draw(st.booleans()),
        vocab_size=draw(st.one_of(st.sampled_from([128_256, 256_000, 50_257, 32_000]), st.integers(1, 200_000))),
        tied_embeddings=draw(st.booleans()), num_experts=experts,
        experts_per_token=draw(st.integers(1, experts)),
        norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
    )


def hand_param_count(m: Model) -> float:
    """Parameters from first principles: embedding (+ learned positions), L blocks, final norm and LM head.

    Block: Q and O are d x (heads * head_dim), K and V are d x (kv_heads * head_dim); each expert's MLP has
    up (and gate) d x d_ff and down d_ff x d matrices; a d x E router for MoE; two norms with a scale (and a
    shift for LayerNorm). Biases: Q/K/V biases with ``qkv_bias`` or ``linear_bias``; with ``linear_bias``
    also the O bias (d) and the MLP biases (d_ff per up/gate matrix, d for down).
    """
    d = m.d_model
    hd = m.head_dim or d // m.num_heads
    q, kv = m.num_heads * hd, m.num_kv_heads * hd
    attention = 2 * d * q + 2 * d * kv
    if m.qkv_bias or m.linear_bias:
        attention += q + 2 * kv
    up_mats = 2 if m.gated_mlp else 1
    mlp = up_mats * d * m.d_ff + m.d_ff * d
    if m.linear_bias:
        attention += d
        mlp += up_mats * m.d_ff + d
    router = d * m.num_experts if m.num_experts > 1 else 0
    norm = 2 * d if m.norm == "layernorm" else d
    block = attention + m.num_experts * mlp + router + 2 * norm
    head = 0 if m.tied_embeddings else m.vocab_size * d
    return float((m.vocab_size + m.learned_pos_embeddings) * d + m.num_layers * block + norm + head)


phases = st.sampled_from(["train", "prefill", "decode"])
inference = st.sampled_from(["prefill", "decode"])
precisions = st.sampled_from(PRECISIONS)
batches = st.integers(1, 256)
contexts = st.integers(1, 65_536)


def _pair(s):
    return st.tuples(s, s).map(sorted)


def _check_stage_cover(res, num_blocks: int) -> None:
    """Stages hold every block exactly once, in order, contiguously; embedding first, LM head last, once each."""
    blocks = [b for s in res.stages if s.first_layer >= 0 for b in range(s.first_layer, s.last_layer + 1)]
    assert blocks == list(range(num_blocks))
    assert all((s.first_layer < 0) == (s.last_layer < 0) and s.first_layer <= s.last_layer for s in res.stages)
    assert [s.embedding for s in res.stages].count(True) == 1 and res.stages[0].embedding
    assert [s.lm_head for s in res.stages].count(True) == 1 and res.stages[-1].lm_head


# ---------------------------------------------------------------------------------------------
# 1. memory never falls with more batch or context
# ---------------------------------------------------------------------------------------------
@PROPS
@given(m=models(), phase=phases, precision=precisions, b=_pair(batches), c=_pair(contexts),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.integers(1, 16), dp=st.sampled_from([1, 2, 8, 64]),
       zero=st.integers(0, 3), recompute=st.sampled_from(["none", "selective", "full"]))
def test_gpu_layout_memory_monotone_in_batch_and_context(m, phase, precision, b, c, tp, pp, dp, zero, recompute):
    def mem(batch, context):
        w = build_workload(m, CAT, precision=precision, phase=phase, batch=batch, context=context)
        return w, layout_memory(w, CAT, tp=[tp], pp=[pp], dp=[dp], zero_stage=zero, recompute=recompute)

    w_lo, lo = mem(b[0], c[0])
    w_mid, mid = mem(b[1], c[0])
    w_hi, hi = mem(b[1], c[1])
    assert lo["total"][0] <= mid["total"][0] <= hi["total"][0]
    # the parts are those of the fullest stage: from pp = 3 on it may turn from an edge stage (fewer blocks and the
    # embedding) to a middle one (more blocks) as the batch or context grows, so its parts move apart; with one kind of
    # stage each part grows and the weights stay
    if pp <= 2:
        for key in ("weights", "optimizer", "kv_cache", "activations"):
            assert lo[key][0] <= mid[key][0] <= hi[key][0], key
        assert lo["weights"][0] == hi["weights"][0] and lo["optimizer"][0] == hi["optimizer"][0]
    assert w_lo.kv_cache_bytes <= w_mid.kv_cache_bytes <= w_hi.kv_cache_bytes
    assert w_lo.total_weight_bytes == w_hi.total_weight_bytes


@PROPS
@given(m=models(), phase=phases, precision=precisions, b=_pair(st.integers(1, 64)), c=_pair(st.integers(1, 32_768)),
       count=st.integers(1, 8))
def test_wafer_fullest_stage_monotone_in_batch_and_context(m, phase, precision, b, c, count):
    """On a fixed number of wafers the fullest wafer's bytes never fall as batch, then context, grow."""
    assume(within_positions(m, max(c)))
    assume(_wafer_trains(precision, phase))
    target = f"wse3x{count}"
    if phase == "train":  # streaming: a fixed activation policy (auto switches to a leaner one as tokens grow)
        from wseplan.plan import plan

        loads = [plan(m, target, phase="train", precision=precision, batch=bb, context=cc, catalog=CAT,
                      options={"policy": "checkpoint", "micro_batch": -(-bb // count)}).per_device_bytes  # one pass
                 for bb, cc in ((b[0], c[0]), (b[1], c[0]), (b[1], c[1]))]
    else:  # resident weights on a fixed number of wafers per replica
        loads = [max(s.bytes for s in fit(m, target, precision=precision, phase=phase, batch=bb, context=cc,
                                          catalog=CAT, layout={"num_wafers": count}).stages)
                 for bb, cc in ((b[0], c[0]), (b[1], c[0]), (b[1], c[1]))]
    assert loads[0] <= loads[1] * (1 + REL) and loads[1] <= loads[2] * (1 + REL), loads


# ---------------------------------------------------------------------------------------------
# 2. the number of devices never falls with more context
# ---------------------------------------------------------------------------------------------
@PROPS
@given(m=models(), phase=inference, precision=precisions, batch=st.integers(1, 64), c=_pair(contexts))
def test_wafer_count_monotone_in_context(m, phase, precision, batch, c):
    lo, hi = (fit(m, "wse3", precision=precision, phase=phase, batch=batch, context=cc, catalog=CAT) for cc in c)
    event(f"wafers: {'1' if hi.num_devices == 1 else '2-9' if hi.num_devices < 10 else '10+'}")
    assert lo.num_devices <= hi.num_devices


@PROPS
@given(m=models(max_layers=48), phase=phases, precision=precisions, batch=st.integers(1, 64), c=_pair(contexts),
       gpu=st.sampled_from(["h100", "a100-80gb", "b200"]))
def test_gpu_count_monotone_in_context(m, phase, precision, batch, c, gpu):
    """Without a count, fit picks the fewest GPUs that fit; more context cannot make fewer GPUs fit."""
    assume(_has_rate(gpu, precision, phase))
    lo, hi = (fit(m, gpu, precision=precision, phase=phase, batch=batch, context=cc, catalog=CAT) for cc in c)
    event(f"fits: {hi.fits}, GPUs > 1: {hi.num_devices > 1}")
    if hi.fits:
        assert lo.fits and lo.num_devices <= hi.num_devices


# ---------------------------------------------------------------------------------------------
# 3. conservation: per-layer sums equal totals; stages cover every block once
# ---------------------------------------------------------------------------------------------
@PROPS
@given(m=models(), phase=inference, precision=precisions, batch=batches, context=contexts,
       count=st.one_of(st.none(), st.integers(1, 12)), wafer=st.sampled_from(["wse3", "wse2"]))
def test_wafer_stage_bytes_sum_to_total(m, phase, precision, batch, context, count, wafer):
    target = wafer if count is None else f"{wafer}x{count}"
    res = fit(m, target, precision=precision, phase=phase, batch=batch, context=context, catalog=CAT)
    replicas = res.layout["num_replicas"]  # stages describe one replica; totals count every replica
    assert math.isclose(sum(s.bytes for s in res.stages) * replicas, res.total_bytes, rel_tol=REL)
    parts = res.weights_bytes + res.kv_cache_bytes + res.activation_bytes + res.optimizer_bytes
    assert math.isclose(parts, res.total_bytes, rel_tol=REL)
    w = build_workload(m, CAT, precision=precision, phase=phase, batch=batch, context=context)
    assert math.isclose(res.kv_cache_bytes, w.kv_cache_bytes * replicas, rel_tol=REL)
    assert math.isclose(res.headroom_bytes, res.capacity_bytes - max(s.bytes for s in res.stages), rel_tol=REL,
                        abs_tol=1.0)
    _check_stage_cover(res, m.num_layers)
    assert res.num_devices >= len(res.stages)


@PROPS
@given(m=models(max_layers=48), phase=phases, precision=precisions, batch=st.integers(1, 64),
       context=st.integers(1, 16_384), count=st.sampled_from([1, 2, 4, 8, 16, 24, 64]))
def test_gpu_parts_sum_to_total_and_stages_cover(m, phase, precision, batch, context, count):
    assume(_has_rate("h100", precision, phase))
    res = fit(m, f"h100x{count}", precision=precision, phase=phase, batch=batch, context=context, catalog=CAT)
    parts = res.weights_bytes + res.kv_cache_bytes + res.activation_bytes + res.optimizer_bytes
    assert math.isclose(parts, res.total_bytes, rel_tol=REL)
    _check_stage_cover(res, m.num_layers)
    lo = res.layout
    assert len(res.stages) == lo["pipeline_parallel"]


@PROPS
@given(m=models(), phase=phases, precision=precisions, batch=batches, context=contexts)
def test_workload_rows_sum_to_model_totals(m, phase, precision, batch, context):
    """Per-row arrays sum to the model's totals; parameter count matches an independent hand count."""
    w = transformer_workload(m, precision=precision, phase=phase, batch=batch, context=context)
    assert len(w.kind) == m.num_layers + 2 and w.num_blocks == m.num_layers
    assert math.isclose(w.kv_cache_bytes, 0.0 if phase == "train" else float(w.kv_bytes_per_token.sum()) * batch * context,
                        rel_tol=1e-12)
    assert np.all(w.active_params <= w.params) and np.all(w.params >= 0)
    if not m.model_fields_set & ARCH_VARIANT_FIELDS:
        assert math.isclose(w.total_params, hand_param_count(m), rel_tol=1e-12)
        assert np.all(w.weight_bytes[w.kind == KIND_BLOCK] == w.weight_bytes[1])  # identical blocks
    else:  # catalog models with MoE/attention variants (issue 12): each block row is its layer's block type
        assert math.isclose(w.total_params, total_params(m), rel_tol=1e-12)
        for b in block_types(m):
            assert np.all(w.params[[1 + i for i in b.layers]] == b.params)


# ---------------------------------------------------------------------------------------------
# 4. every fraction in [0, 1]
# ---------------------------------------------------------------------------------------------
def _fracs(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if str(k).endswith("_frac"):
                yield f"{path}{k}", v
            yield from _fracs(v, f"{path}{k}.")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _fracs(v, f"{path}{i}.")


def test_catalog_fractions_in_unit_interval():
    fr = {name: getattr(CAT.defaults, name).si for name in type(CAT.defaults).model_fields if name.endswith("_frac")}
    assert fr and all(0.0 <= v <= 1.0 for v in fr.values()), fr


@PROPS
@given(m=models(max_layers=48), phase=phases, precision=precisions, batch=st.integers(1, 64), context=contexts,
       target=st.sampled_from(["wse3", "cs3x4", "wse2", "h100", "h100x8", "b200x16"]),
       reserve=st.one_of(st.none(), st.floats(0.0, 0.99)))
def test_fit_fractions_in_unit_interval(m, phase, precision, batch, context, target, reserve):
    """Every *_frac in a fit record lies in [0, 1]; so do the used share of a device and the reserve."""
    key = target.split("x")[0] if target[0] in "hb" else None
    assume(key is None or _has_rate({"h100": "h100", "b200": "b200"}.get(key, key), precision, phase))
    assume(key is not None or _wafer_trains(precision, phase))
    res = fit(m, target, precision=precision, phase=phase, batch=batch, context=context, reserve=reserve, catalog=CAT)
    for name, v in _fracs(res.to_record()):
        assert 0.0 <= v <= 1.0, (name, v)
    device = CAT.wafers.get(res.hardware) or CAT.gpus[res.hardware]
    raw = device.usable_sram_bytes if res.device_kind == "wafer" else device.hbm_bytes.si
    kept_frac = res.capacity_bytes / raw  # 1 - reserve
    assert 0.0 < kept_frac <= 1.0
    if reserve is not None:
        assert math.isclose(kept_frac, 1.0 - reserve, rel_tol=1e-12)
    if res.fits:
        used_frac = 1.0 - res.headroom_bytes / res.capacity_bytes
        assert -REL <= used_frac <= 1.0 + REL


# ---------------------------------------------------------------------------------------------
# 5. parameter count independent of precision and phase; weight bytes scale with bytes per element
# ---------------------------------------------------------------------------------------------
@PROPS
@given(m=models(), batch=batches, context=contexts)
def test_params_independent_of_precision_and_phase(m, batch, context):
    ws = [transformer_workload(m, precision=p, phase=ph, batch=batch, context=context)
          for p in PRECISIONS for ph in ("train", "prefill", "decode")]
    for w in ws[1:]:
        assert np.array_equal(w.params, ws[0].params) and np.array_equal(w.active_params, ws[0].active_params)


@PROPS
@given(m=models(), phase=phases, precision=precisions, other=precisions, batch=batches, context=contexts)
def test_weight_bytes_scale_with_bytes_per_element(m, phase, precision, other, batch, context):
    """Inference stores each block weight in its format, block scales included (NVFP4 4.5 bits, int4 4 + 20/128), and
    the embedding and LM head of a sub-16-bit checkpoint in 16 bits; training keeps >= 16-bit working weights."""
    bits = {"fp4": 4.5, "int4": 4.0 + 20.0 / 128.0}

    def stored(p):
        b = BYTES_PER_ELEMENT[p]
        return max(b, 2.0) if phase == "train" else bits.get(p, 8.0 * b) / 8.0

    def edge(p):
        return stored(p) if phase == "train" or BYTES_PER_ELEMENT[p] >= 2 else 2.0

    # (a published checkpoint with its own layout, gpt-oss at fp4: tests/test_architectures.py checks it by hand)
    own = getattr(m, "native_bits_per_weight", None) or getattr(m, "native_quantized", "all") != "all"
    assume(not (own and phase != "train" and m.native_precision in (precision, other)))
    w1 = transformer_workload(m, precision=precision, phase=phase, batch=batch, context=context)
    w2 = transformer_workload(m, precision=other, phase=phase, batch=batch, context=context)
    for w, p in ((w1, precision), (w2, other)):
        assert np.array_equal(w.weight_bytes[1:-1], w.params[1:-1] * stored(p))
        assert np.array_equal(w.weight_bytes[[0, -1]], w.params[[0, -1]] * edge(p))


# ---------------------------------------------------------------------------------------------
# 6. a GPU fit never claims to fit beyond capacity
# ---------------------------------------------------------------------------------------------
@PROPS
@given(m=models(max_layers=48), phase=phases, precision=precisions, batch=st.integers(1, 64),
       context=st.integers(1, 32_768), count=st.integers(1, 64), gpu=st.sampled_from(["h100", "a100-40gb", "mi300x"]),
       zero=st.integers(0, 3), recompute=st.sampled_from(["none", "selective", "full"]))
def test_gpu_fit_never_exceeds_capacity(m, phase, precision, batch, context, count, gpu, zero, recompute):
    assume(_has_rate(gpu, precision, phase))
    train = dict(zero_stage=zero, recompute=recompute) if phase == "train" else {}  # refused elsewhere (audit30a M5)
    res = fit(m, f"{gpu}x{count}", precision=precision, phase=phase, batch=batch, context=context, catalog=CAT, **train)
    lo = res.layout
    used = lo["tensor_parallel"] * lo["pipeline_parallel"] * lo["data_parallel"] * lo.get("context_parallel", 1)
    # a layout may leave GPUs idle (training: fewer replicas train faster; inference: a replica size that does not
    # divide the count), and says so; the target is all of them
    assert used <= count and res.num_devices == count
    assert (used == count) or any(f"{count - used:,} of {count:,} GPUs left idle" in n for n in res.notes)
    w = build_workload(m, CAT, precision=precision, phase=phase, batch=batch, context=context)
    if phase == "train":
        # context parallelism shards a sequence's activations as tensor parallelism does (gpu.fit: tp x cp)
        per_gpu = layout_memory(w, CAT, tp=[lo["tensor_parallel"] * lo.get("context_parallel", 1)],
                                pp=[lo["pipeline_parallel"]], dp=[lo["data_parallel"]],
                                zero_stage=zero, recompute=recompute, micro_batch=lo["micro_batch"],
                                vpp=lo["virtual_pipeline"])["total"][0]
    else:  # the tokens in flight of the default engine: a decode step's batch, or a prompt chunk of its token budget
        from wseplan.catalog.software import resolve_software

        budget = resolve_software(None, "gpu", CAT).engine.token_budget.si
        work = batch if phase == "decode" else min(batch * context, budget)
        per_gpu = layout_memory(w, CAT, tp=[lo["tensor_parallel"]], pp=[lo["pipeline_parallel"]], dp=[1],
                                working_tokens=work)["total"][0]
    cap = CAT.gpus[res.hardware].hbm_bytes.si * (1.0 - CAT.defaults.gpu_hbm_reserve_frac.si)
    assert math.isclose(res.capacity_bytes, cap, rel_tol=1e-12)
    event(f"fits: {res.fits}")
    assert res.fits == (per_gpu <= cap)
    if res.fits:
        assert res.headroom_bytes >= 0 and res.shortfall_bytes == 0
    else:
        assert res.shortfall_bytes > 0


# ---------------------------------------------------------------------------------------------
# 7. greedy stage count is the min-max partition's feasibility boundary; the DP is exact
# ---------------------------------------------------------------------------------------------
_items = st.lists(st.integers(0, 10**6), min_size=1, max_size=40).map(lambda v: np.array(v, dtype=float))


@PROPS
@given(x=_items, const=st.integers(0, 10**5).map(float), data=st.data())
def test_greedy_count_is_min_max_boundary(x, const, data):
    # capacities from just below the largest item (infeasible) to the whole sum (one stage)
    cap = float(data.draw(st.integers(int(x.max() + const) - 10, int(x.sum() + const) + 10), label="cap"))
    stages = fewest_stages(x, cap, const)
    if stages is None:
        event("an item alone exceeds the capacity")
        assert x.max() + const > cap
        return
    k = len(stages)
    event(f"stages: {'1' if k == 1 else '2-4' if k < 5 else '5+'}")
    flat = [i for a, b in stages for i in range(a, b + 1)]
    assert flat == list(range(len(x)))  # contiguous, every item once
    assert all(x[a : b + 1].sum() + const <= cap for a, b in stages)
    assert min_max_partition(x, k, const)[0] <= cap
    if k > 1:
        assert min_max_partition(x, k - 1, const)[0] > cap


@PROPS
@given(x=st.lists(st.integers(0, 1000), min_size=1, max_size=9).map(lambda v: np.array(v, dtype=float)),
       const=st.integers(0, 100).map(float), data=st.data())
def test_min_max_partition_matches_brute_force(x, const, data):
    n = len(x)
    k = data.draw(st.integers(1, n))
    best, stages = min_max_partition(x, k, const)
    brute = min(max(x[a:b].sum() + const for a, b in zip((0, *cuts), (*cuts, n)))
                for cuts in itertools.combinations(range(1, n), k - 1))
    assert best == brute
    assert len(stages) == k and stages[0][0] == 0 and stages[-1][1] == n - 1
    assert all(stages[i + 1][0] == stages[i][1] + 1 for i in range(k - 1)) and all(a <= b for a, b in stages)
    assert max(x[a : b + 1].sum() + const for a, b in stages) == best


def test_bottleneck_search_equals_dp_on_random_cases():
    """The large-instance partition (bisection on the bottleneck) gives the DP's optimum exactly."""
    import numpy as np

    from wseplan.analytic import partition as P

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        x = rng.random(n) * rng.integers(1, 100, n)
        k = int(rng.integers(1, n + 1))
        c = float(rng.random() * 3)
        best_dp, _ = P.min_max_partition(x, k, c)
        best_bs, stages = P._bottleneck_partition(x, k, c)
        assert abs(best_dp - best_bs) <= 1e-9 * best_dp
        assert len(stages) == k and stages[0][0] == 0 and stages[-1][1] == n - 1
        assert all(stages[i][1] + 1 == stages[i + 1][0] for i in range(k - 1))
