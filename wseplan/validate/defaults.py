"""Documented defaults for the inputs a validation row leaves empty (coverage; ``docs/validation.md``).

A row is predicted with a default only where the default is the one the planner itself uses, and the record names the
fields it filled (``defaulted``). Defaulted rows are validated but never fitted (:mod:`.fit`): their error is partly
the default's.

* Rows of a public serving benchmark (an MLPerf/MLCommons row naming a benchmark of
  ``catalogs/validation/datasets.yaml``) without ``input_len`` or ``output_len``: the benchmark dataset's mean prompt
  and answer lengths (sourced there). The run measures the whole dataset, so its mean lengths define the work.
* End-to-end rows with a prompt length but no ``output_len`` (and no benchmark that defines it): the planner's default
  answer length, ``defaults.default_output_tokens`` (256 tokens; what ``wseplan serve`` assumes when given no ``--output-len``).
* Decode rows (one output token's time or speed) without ``input_len``: the planner's default context,
  ``defaults.default_context_tokens`` (what ``wseplan serve`` assumes when given no ``--context``); the context only
  sets the KV-cache read of a step, a second-order term.
* Prefill and end-to-end rows without ``input_len`` that name no benchmark: the prompt sets their work at first order,
  so they take the workload of the public per-user speed benchmark (``default_workload`` in ``datasets.yaml``:
  Artificial Analysis' default, about 1,000 prompt and 1,000 answer tokens, one prompt at a time), where published
  per-user speeds and times to first token of API services are measured; the output length and the concurrency (one
  request) too when the row gives none.
* Inference without ``tp`` (and without the parallel layout): ``tp = min(n_devices, node size)`` with the remaining
  devices as data-parallel replicas; without ``n_devices`` either, the smallest power of two up to the node size
  whose HBM (less the planner's reserve) holds the weights.
* Training without ``seq_len``: ``defaults.default_train_context_tokens``; without ``global_batch``: the planner's
  default step, ``default_train_batch x default_train_context_tokens`` tokens, in sequences of the row's length;
  without ``n_devices``: the product of the stated ``tp x pp x dp x cp`` when all three degrees are stated, else one
  GPU per sequence of the global batch (data parallelism at micro-batch 1) in whole groups of the stated degrees.
* Training with some of ``tp``, ``pp``, ``dp`` empty (``gpu.train_degrees``): the device count decides an empty degree
  where it leaves one choice (one empty: ``n / (cp x the others)``; the stated ones already use every GPU: 1); the
  rest are searched with the stated ones held (the planner's partial layout search) and listed as defaulted. An empty
  degree is never read as 1 otherwise (the file format's rule).

The batch of a serving row without ``concurrency`` is not a default of this module: the engine runs the largest batch
its profile allows (:func:`~.gpu._max_throughput`), or one request for a decode latency.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import yaml

from ..catalog.load import default_catalog_dir
from ..errors import CatalogError
from ..workload import build_workload
from .cases import Case, SkipRow, case_model
from .common import _target


def fill_defaults(case: Case, catalog) -> tuple[Case, tuple[str, ...]]:
    """``case`` with its empty inputs filled by the documented defaults, and the names of the fields filled."""
    if case.phase == "kernel":
        return case, ()
    d = catalog.defaults
    f = dict(case.fields)
    filled = []
    if case.phase == "train":
        if not f.get("seq_len") and case.metric != "layer_fwd_bwd_ms":
            f["seq_len"] = int(d.default_train_context_tokens.si)
            filled.append("seq_len")
        if not f.get("global_batch") and f.get("seq_len"):
            step_tokens = d.default_train_batch.si * d.default_train_context_tokens.si
            per_node = -(-int(f.get("n_devices") or 1) // int(d.gpu_max_tensor_parallel.si))
            f["global_batch"] = max(int(round(step_tokens / f["seq_len"])), per_node, 1)
            filled.append("global_batch")
        if not f.get("n_devices") and f.get("global_batch") and case.metric != "layer_fwd_bwd_ms" \
                and not case.hardware.startswith("wse"):
            stated = [int(f[k]) for k in ("tp", "pp", "dp") if f.get(k)]
            group = int(f.get("cp") or 1)
            for v in stated:
                group *= v
            if len(stated) == 3:  # the stated layout is the whole machine
                f["n_devices"] = group
            else:  # one GPU per sequence, in whole groups of the stated degrees
                f["n_devices"] = group * max(int(round(int(f["global_batch"]) / group)), 1)
            filled.append("n_devices")
        stated = [k for k in ("tp", "pp", "dp") if f.get(k)]
        n = f.get("n_devices")
        if 0 < len(stated) < 2 and n and case.metric != "layer_fwd_bwd_ms" and not case.hardware.startswith("wse"):
            group = int(f.get("cp") or 1)
            for k in stated:
                group *= int(f[k])
            if n != group:  # degrees the count does not decide: searched (gpu.train_degrees), so marked
                filled.extend(k for k in ("tp", "pp", "dp") if k not in stated)
    elif case.phase in ("prefill", "decode", "e2e-infer"):
        ds = benchmark_dataset(case) if not (f.get("input_len") and f.get("output_len")) else None
        if ds is not None:
            for col, key in (("input_len", "mean_input_tokens"), ("output_len", "mean_output_tokens")):
                if not f.get(col):
                    f[col] = int(round(ds[key]))
                    filled.append(col)
        if not f.get("input_len"):
            if case.phase != "decode":
                wl = default_workload()
                if wl is None:
                    raise SkipRow("input_len not given: a prefill or end-to-end figure depends on the prompt length at "
                                  "first order, and no documented default defines it")
                for col, key in (("input_len", "mean_input_tokens"), ("output_len", "mean_output_tokens")):
                    if not f.get(col):
                        f[col] = int(round(wl[key]))
                        filled.append(col)
                if not f.get("concurrency"):  # the benchmark sends one prompt at a time
                    f["concurrency"] = 1
                    filled.append("concurrency")
            else:
                f["input_len"] = int(d.default_context_tokens.si)
                filled.append("input_len")
        if not f.get("output_len") and case.phase == "e2e-infer":
            # a prompt given, the answer length not: the planner's default answer (what `wseplan serve` assumes)
            f["output_len"] = int(d.default_output_tokens.si)
            filled.append("output_len")
        if not case.hardware.startswith("wse") and f.get("tp") is None and f.get("pp") is None and f.get("dp") is None:
            node = _node_size(case, catalog)
            n = f.get("n_devices")
            if n:
                f["tp"] = min(int(n), node)
                f["dp"] = max(int(n) // f["tp"], 1)
            else:
                f["tp"] = _smallest_fitting_tp(case, catalog, node)
                f["n_devices"] = f["tp"]
                filled.append("n_devices")
            filled.append("tp")
    if not filled:
        return case, ()
    return dataclasses.replace(case, fields=f), tuple(filled)


def datasets_path() -> Path:
    """The bundled benchmark-dataset lengths, ``catalogs/validation/datasets.yaml``."""
    return default_catalog_dir() / "validation" / "datasets.yaml"


@functools.lru_cache(maxsize=4)
def read_datasets(path: str | None = None) -> dict[str, dict]:
    """The benchmark datasets of ``path`` (default :func:`datasets_path`) by name: ``match`` (benchmark names),
    ``mean_input_tokens`` and ``mean_output_tokens`` (tokens per sample, floats); :class:`CatalogError` on a bad
    file."""
    p = Path(path) if path else datasets_path()
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"{p}: cannot read the benchmark datasets ({exc.__class__.__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("datasets"), dict):
        raise CatalogError(f"{p}: must hold a 'datasets' mapping")
    out = {}
    for name, e in data["datasets"].items():
        try:
            match = [str(m).lower() for m in e["match"]]
            lens = {k: float(e[k]["value"]) for k in ("mean_input_tokens", "mean_output_tokens")}
            default = bool(e.get("default_workload", False))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CatalogError(f"{p}: dataset {name!r} needs match and mean_input_tokens/mean_output_tokens values")
        if (not match and not default) or any(not 0 < v < 1e7 for v in lens.values()):
            raise CatalogError(f"{p}: dataset {name!r}: match must be non-empty (or default_workload true) and lengths "
                               "in (0, 1e7) tokens")
        out[name] = {"match": match, "default_workload": default, **lens}
    if sum(d["default_workload"] for d in out.values()) > 1:
        raise CatalogError(f"{p}: at most one dataset may set default_workload")
    return out


def default_workload() -> dict | None:
    """The workload of ``datasets.yaml`` marked ``default_workload`` (the published per-user speed benchmark's default
    prompt and answer lengths), or None."""
    for name, ds in read_datasets().items():
        if ds["default_workload"]:
            return {"name": name, **ds}
    return None


_BENCHMARK_ROW = re.compile(r"mlperf|mlcommons", re.I)


def benchmark_dataset(case: Case) -> dict | None:
    """The dataset of ``datasets.yaml`` whose benchmark name an MLPerf/MLCommons row names (model, source or notes
    text), or None. A benchmark name matches as a whole token (``llama2-70b`` matches ``llama2-70b-99`` but not
    ``llama2-70b-lora``'s training rows, which are not serving rows)."""
    text = " ".join((case.model or "", case.source or "", case.notes or "")).lower()
    if not _BENCHMARK_ROW.search(text):
        return None
    for name, ds in read_datasets().items():
        for m in ds["match"]:
            if re.search(r"(?<![\w.])" + re.escape(m) + r"(?![\w.]|[-_]lora)", text):
                return {"name": name, **ds}
    return None


def _gpu(case: Case, catalog):
    dev = _target(case, catalog, None).device
    if not hasattr(dev, "gpus_per_node"):
        raise SkipRow(f"hardware {case.hardware!r} is not a GPU; a default layout needs its node size")
    return dev


def _node_size(case: Case, catalog) -> int:
    return int(_gpu(case, catalog).gpus_per_node.si)


def _smallest_fitting_tp(case: Case, catalog, node: int) -> int:
    """The smallest power of two up to ``node`` whose HBM, less the planner's reserve, holds the model's weights."""
    gpu = _gpu(case, catalog)
    model = case_model(case, catalog)
    precision = case.get("precision") or "bf16"
    weights = float(build_workload(model, catalog, precision=precision, phase="decode", batch=1,
                                   context=1).total_weight_bytes)  # the checkpoint's bytes (16-bit head, block scales)
    usable = gpu.hbm_bytes.si * (1.0 - catalog.defaults.gpu_hbm_reserve_frac.si)
    tp = 1
    while tp < node and weights > tp * usable:
        tp *= 2
    if weights > tp * usable:
        raise SkipRow(f"the weights do not fit one {case.hardware} node; give n_devices and tp")
    return tp
