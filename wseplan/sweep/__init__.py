"""Sweeps: the cartesian product of models x targets x precisions x batches x contexts x parallel layouts,
every configuration through fit, time and cost, evaluated as numpy arrays.

A sweep file (``SWEEP.yaml``, :class:`Sweep`) names the axes. :func:`plan_sweep` resolves them into *groups*
(one per model x target x precision) and cuts each group's configurations into *tasks* (contiguous chunks of
the group's batch x context x output-tokens x layout grid, C order). :func:`evaluate_task` evaluates one task
with array arithmetic only: Python loops over groups and tasks, over the values of a few small axes where an
underlying model takes a scalar (the training sequence length, GPU ZeRO stage x recompute for memory), over
the layers of a model (partitions) and over candidate region sides, never once per configuration.
:func:`run_sweep` runs the tasks locally or on a Dask distributed cluster and concatenates them in task order,
so both engines give the same rows.

Per configuration (columns documented in ``docs/cli-output.md``): fit, the layout, time and cost from one call of
the planning chain on the task's arrays (:func:`wseplan.plan.evaluate`, :func:`wseplan.costing.cost_columns`),
so a sweep row is the number ``fit``, ``time`` and ``cost`` give for the same configuration; rows that do not
fit keep ``fits=False`` and blank metrics. ``tests/test_sweep.py`` holds sampled rows to the scalar APIs within
a relative 1e-9.
"""
from __future__ import annotations

from ..errors import InputError
from . import evaluate
from .engine import (EVAL_BYTES_PER_CONFIGURATION, EVAL_TASK_BYTES, task_memory_bytes, FRAME_BYTES_PER_CONFIGURATION, SweepResult, available_memory_bytes,
                     check_limits, connect, evaluate_columns, local_cluster, parse_scheduler_address, probe_scheduler,
                     run_sweep, sweep_to_file)
from .evaluate import _config_arrays, evaluate_task, group_setup  # noqa: F401 (_config_arrays: benchmarks)
from .output import (OUTPUT_BYTES_PER_CONFIGURATION, StreamWriter, chunk_summary, encode_part, frame_bytes,
                     merge_summaries, output_spec, summary_rows, to_frame, write_output)
from .plan import Group, Plan, default_chunk, plan_sweep
from .schema import (BOTTLENECKS, COLUMNS, DEFAULT_CHUNK, FLOAT_COLUMNS, INT_COLUMNS, MAX_CONFIGURATIONS, NULLABLE_INT,
                     PHASES, PROGRESS_MIN_CONFIGURATIONS, RECOMPUTE, SCHEMA_VERSION, WAFER_CHUNK, Layouts, Sweep,
                     load_sweep, parse_sweep)

__all__ = ["BOTTLENECKS", "COLUMNS", "DEFAULT_CHUNK", "EVAL_BYTES_PER_CONFIGURATION", "EVAL_TASK_BYTES", "task_memory_bytes", "FLOAT_COLUMNS",
           "FRAME_BYTES_PER_CONFIGURATION", "Group", "INT_COLUMNS", "InputError", "Layouts", "MAX_CONFIGURATIONS",
           "NULLABLE_INT", "OUTPUT_BYTES_PER_CONFIGURATION", "PHASES", "PROGRESS_MIN_CONFIGURATIONS", "Plan",
           "RECOMPUTE", "SCHEMA_VERSION", "StreamWriter", "Sweep", "SweepResult", "WAFER_CHUNK",
           "available_memory_bytes", "check_limits", "chunk_summary", "connect", "default_chunk", "encode_part",
           "evaluate", "evaluate_columns", "evaluate_task", "frame_bytes", "load_sweep", "local_cluster",
           "merge_summaries", "output_spec", "parse_scheduler_address", "parse_sweep",
           "plan_sweep", "probe_scheduler", "run_sweep", "summary_rows", "sweep_to_file", "to_frame", "write_output"]
