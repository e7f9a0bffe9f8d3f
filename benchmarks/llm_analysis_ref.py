"""The same runs through llm-analysis, for the reference column of ``benchmarks/run.py`` (issue 14, item 6).

llm-analysis (PyPI ``llm-analysis``, https://github.com/cli99/llm-analysis) is optional and not a wseplan
dependency: ``pip install llm-analysis`` to get the references; without it every reference is skipped and the
figures print alone. Only its public entry points are called: ``llm_analysis.analysis.train`` and ``infer`` (one
configuration per call, the functions behind its command line) and ``python -m llm_analysis.analysis train ...``
(its command line, a fire app that prints the summary as JSON).

What maps to what (the work is the same; the numbers each tool predicts are not compared here):

* GPT-3 175B training: llm-analysis's ``megatron-lm-175b`` (96 layers, d_model 12,288, 96 heads), ``h100-sxm-80gb``,
  16-bit weights/activations/embeddings (``w16a16e16``), selective recomputation, ZeRO-1;
* Llama-2/3-70B decoding: ``upstage_Llama-2-70b-instruct-v2`` (80 layers, d_model 8,192, 64 heads, 8 KV heads),
  ``h100-sxm-80gb``.

llm-analysis has no layout search and no sweep; the reference for those is a loop of its one-configuration calls
over a sample of the same configurations, extrapolated to the whole run (printed as such).
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import random
import resource
import statistics
import subprocess
import sys
import time

NAME = "llm-analysis"
TRAIN_MODEL = "megatron-lm-175b"
TRAIN_GPU = "h100-sxm-80gb"
INFER_MODEL = "upstage_Llama-2-70b-instruct-v2"
INFER_GPU = "h100-sxm-80gb"
DTYPE = "w16a16e16"


def available() -> bool:
    """Whether llm-analysis is importable here."""
    return importlib.util.find_spec("llm_analysis") is not None


def version() -> str:
    from importlib.metadata import version as v

    return v("llm-analysis")


_API = {}


def api():
    """``llm_analysis.analysis`` with its logger quietened (it warns at import when transformers is missing)."""
    if not _API:
        with contextlib.redirect_stderr(io.StringIO()):
            from llm_analysis import analysis
            from llm_analysis.logger import logger
        logger.setLevel(logging.ERROR)
        _API["m"] = analysis
    return _API["m"]


def train_kwargs(*, tp: int = 8, pp: int = 8, num_gpus: int = 1024, micro_batch: int = 1, global_batch: int = 1536,
                 seq_len: int = 2048, recompute: int = 1, zero: int = 1) -> dict:
    """Keyword arguments of one llm-analysis training evaluation (recompute 1 = selective)."""
    return dict(model_name=TRAIN_MODEL, gpu_name=TRAIN_GPU, dtype_name=DTYPE, log_level="ERROR",
                batch_size_per_gpu=micro_batch, global_batch_size=global_batch, seq_len=seq_len,
                activation_recomputation=recompute, ds_zero=zero, tp_size=tp, pp_size=pp, total_num_gpus=num_gpus)


def infer_kwargs(*, tp: int = 8, batch: int = 1, seq_len: int = 2048, output_tokens: int = 256) -> dict:
    """Keyword arguments of one llm-analysis inference evaluation (prompt seq_len, output_tokens generated)."""
    return dict(model_name=INFER_MODEL, gpu_name=INFER_GPU, dtype_name=DTYPE, log_level="ERROR",
                batch_size_per_gpu=batch, seq_len=seq_len, num_tokens_to_generate=output_tokens, tp_size=tp)


def per_call_s(fn, kwargs: dict, *, repeats: int = 7, calls: int = 50) -> float:
    """Median over ``repeats`` of the mean time of ``calls`` calls of ``fn(**kwargs)`` [s]."""
    fn(**kwargs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(**kwargs)
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def train_call_s(**kw) -> float:
    """Seconds per llm-analysis training evaluation (one configuration, Python API)."""
    return per_call_s(api().train, train_kwargs(**kw))


def infer_call_s(**kw) -> float:
    """Seconds per llm-analysis inference evaluation (one configuration, Python API)."""
    return per_call_s(api().infer, infer_kwargs(**kw))


def loop_rate(kwargs_list: list[dict], fn_name: str = "train", *, sample: int = 300, seed: int = 0) -> tuple[float, int]:
    """Configurations per second of a plain loop of llm-analysis calls over a random sample of ``kwargs_list``
    (configurations llm-analysis refuses with an exception count as evaluated: the loop still pays for them);
    returns (rate, sample size)."""
    fn = getattr(api(), fn_name)
    rng = random.Random(seed)
    pick = rng.sample(kwargs_list, min(sample, len(kwargs_list)))
    with contextlib.suppress(Exception):
        fn(**pick[0])
    t0 = time.perf_counter()
    for kw in pick:
        try:
            fn(**kw)
        except Exception:  # noqa: BLE001 - an infeasible layout is an answer too
            pass
    return len(pick) / (time.perf_counter() - t0), len(pick)


def cli_train_argv(**kw) -> list[str]:
    """``python -m llm_analysis.analysis train ...`` for the same configuration as :func:`train_kwargs`."""
    args = [sys.executable, "-m", "llm_analysis.analysis", "train"]
    for k, v in train_kwargs(**kw).items():
        args += [f"--{k}", str(v)]
    return args


def cold_process_s(argv: list[str], runs: int, env: dict | None = None, cwd: str | None = None) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system of the child) of ``runs`` fresh processes of ``argv``,
    after one unmeasured run [s]."""
    subprocess.run(argv, capture_output=True, env=env, cwd=cwd, check=True)
    wall, cpu = [], []
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd, check=True)
        wall.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return statistics.median(wall), statistics.median(cpu)
