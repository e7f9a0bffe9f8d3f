"""Adversarial audit of the ``wseplan`` command line (issue 15): the issue's classes, repeated.

Run from the repository root (minutes; not part of ``benchmarks/run.py``)::

    python benchmarks/adversarial.py                 # every class, 2 processes at a time
    python benchmarks/adversarial.py --only option-number --jobs 1
    python benchmarks/adversarial.py --quick         # a seeded sample of each class
    python benchmarks/adversarial.py --json audit.json   # every failing case, machine-readable

Every case runs the installed ``wseplan`` script in a fresh process (``python -m wseplan.cli`` where no script
sits beside the interpreter), in its own empty folder (``HOME`` and ``XDG_DATA_HOME`` inside it), with stdin
closed and a wall-clock timeout; the process group is killed on timeout. Classes:

``option-number``
    Every ``int``/``float`` option of every command (found by walking the Typer app, so a command added later
    is covered once it has a base command line in :data:`BASE`) given ``1e308``, ``inf``, ``-inf``, ``nan``,
    ``-1``, ``0`` and a 4,301-digit integer; plus the options that carry numbers inside text: target counts
    (``h100x<N>``), ``--set NAME=<N>``, ``--memoryx``, ``--region``.
``yaml-number`` / ``json-number`` / ``csv-number``
    Each numeric field of a study (serving and training), a sweep, a fleet demand, a claims file, a catalog
    override (a GPU entry, numbers inside unit strings too), a prices file, a Hugging Face ``config.json`` and
    a validation CSV row, set to the same values in that format's spelling.
``special-file``
    FIFO, socket, ``/dev/zero`` link, symlink loop, dangling link, folder, 3 GB sparse file, in a ``--catalog``
    folder and as every file argument.
``hostile-name``
    Terminal markup (``[/bold]``), escape sequences, bidi overrides, line breaks, 10,000 characters, path
    traversal, in model/target arguments, YAML names, CSV cells, catalog keys, ``--set`` names and file names;
    any escape byte that reaches stdout/stderr counts as a failure.
``output-path``
    ``report``/``sweep``/``calibrate`` outputs on a read-only file system, a full one (a 64-256 KiB tmpfs in a
    private mount namespace via ``unshare -rm``; skipped with the reason when unavailable), under ``ulimit -f``,
    as a symlink (kept), a dangling link, a link loop, a regular file, ``/dev/null``, a user's folder; each with
    a previous output that must survive byte for byte when the run fails.
``signal``
    ``report`` and ``sweep`` sent SIGINT, SIGTERM or SIGKILL at seeded random times over a previous output: the
    folder/file must hold the whole old or the whole new output, SIGINT must end with one line and 130, and the
    next run must succeed and leave no temporaries.

Verdicts per case (each counted per class): ``traceback`` ("Traceback" on stdout/stderr), ``hang`` (timeout),
``exit`` (a status other than 0 or 2, or the case's allowed ones), ``lines`` (exit 2 without exactly one
``error:`` line), ``nonsense`` (exit 0 where the input must be refused, or non-finite/invalid JSON on
stdout), ``data-loss`` (a user's file, or the previous output, changed or gone), ``litter`` (a refused run
left files behind), ``escape`` (an ESC byte on stdout/stderr). Exit status 1 when any case failed.

Commands are found by walking the Typer app: a command added later gets its numeric options audited as soon as
it has a base command line in :data:`BASE` (the audit stops with a message naming a command that has none), and
a base line whose command is not in the build (a branch not merged yet) is reported as skipped.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import copy
import csv
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

BIG = "9" * 4301
#: the numbers every numeric field is given, by class name: (CLI/CSV spelling, YAML spelling, JSON spelling)
NUMBERS = {
    "huge": ("1e308", "1.0e+308", "1e308"),
    "inf": ("inf", ".inf", "1e999"),
    "-inf": ("-inf", "-.inf", "-1e999"),
    "nan": ("nan", ".nan", "NaN"),
    "negative": ("-1", "-1", "-1"),
    "zero": ("0", "0", "0"),
    "digits": (BIG, BIG, BIG),
    "int64": ("9223372036854775807", "9223372036854775807", "9223372036854775807"),
}
#: number kinds that are never a valid input anywhere (exit 0 on them is "nonsense accepted")
ALWAYS_REFUSE = ("inf", "-inf", "nan", "negative", "digits")
HOSTILE = {
    "markup": "[/bold]x[red]",
    "escape": "\x1b[31mred\x1b[0m\x1b]0;title\x07",
    "bidi": "abc\u202eevil",
    "newline": "line\nbreak",
    "long": "a" * 10_000,
    "traversal": "../../escape",
}

# ------------------------------------------------------------------------------------------------ base lines
#: a valid command line per leaf command (the audit fails a command that has none, so new ones are noticed)
BASE: dict[str, list[str]] = {
    "fit": ["fit", "llama-3-8b", "-t", "h100x8"],
    "time": ["time", "llama-3-8b", "-t", "h100x8"],
    "stream": ["stream", "llama-3-8b", "-t", "cs3"],
    "scale": ["scale", "llama-3-8b", "-t", "wse3,h100", "-n", "4"],
    "cost": ["cost", "llama-3-8b", "-t", "h100x8"],
    "compare": ["compare", "llama-3-8b", "-t", "wse3,h100x8"],
    "place": ["place", "llama-3-8b", "-t", "wse3", "--time-limit", "5"],
    "fleet": ["fleet", "{demand}", "--time-limit", "5"],
    "report": ["report", "{study}", "--out", "rep"],
    "check": ["check", "{claims}"],
    "sweep": ["sweep", "{sweep}", "--out", "sw"],
    "validate": ["validate", "{cases}"],
    "calibrate": ["calibrate", "--check"],
    "simulate gemv": ["simulate", "gemv", "--k", "1024", "--n", "1024"],
    "simulate gemm": ["simulate", "gemm", "--m", "64", "--k", "1024", "--n", "1024"],
    "simulate reduce": ["simulate", "reduce", "--bytes", "65536"],
    "simulate broadcast": ["simulate", "broadcast", "--bytes", "65536"],
    "simulate allreduce": ["simulate", "allreduce", "--bytes", "65536"],
    "simulate layer": ["simulate", "layer", "llama-3-8b", "--context", "512"],
    "simulate stream": ["simulate", "stream", "llama-3-8b"],
    "catalog list": ["catalog", "list"],
    "catalog show": ["catalog", "show", "h100-sxm"],
    "catalog schema": ["catalog", "schema", "study"],
    # added since the last audit (issue 15 asks that new commands are covered)
    "serve": ["serve", "llama-3-8b", "-t", "h100x8"],
}
#: options that only matter in another mode of their command: the base line they are tried with
OPTION_BASE: dict[tuple[str, str], list[str]] = {
    **{("time", o): ["time", "llama-3-8b", "-t", "h100x8", "--phase", "train", "--batch", "64", "--context", "2048"]
       for o in ("--tp", "--pp", "--dp", "--cp", "--vpp", "--micro-batch", "--zero", "--train-tokens")},
    ("time", "--output-tokens"): ["time", "llama-3-8b", "-t", "h100x8", "--phase", "decode"],
    ("cost", "--train-tokens"): ["cost", "llama-3-8b", "-t", "h100x8", "--phase", "train"],
    ("compare", "--train-tokens"): ["compare", "llama-3-8b", "-t", "wse3,h100x8", "--phase", "train"],
    ("compare", "--uncertainty"): ["compare", "llama-3-8b", "-t", "h100x8"],
    ("fit", "--zero"): ["fit", "llama-3-8b", "-t", "h100x8", "--phase", "train"],
    ("sweep", "--workers"): ["sweep", "{sweep}", "--out", "sw", "--engine", "dask"],
    ("stream", "--micro-batch"): ["stream", "llama-3-8b", "-t", "cs3", "--batch", "8"],
}
#: (command, option, number kind) that exit 0 on purpose, with the reason (reviewed by hand)
ACCEPTED: dict[tuple[str, str, str], str] = {
    ("cost", "--uncertainty", "zero"): "0 samples: the documented 'off'",
    ("compare", "--uncertainty", "zero"): "0 samples: the documented 'off'",
    ("cost", "--seed", "zero"): "seed 0 is a seed",
    ("compare", "--seed", "zero"): "seed 0 is a seed",
    ("fit", "--reserve", "zero"): "no memory kept back is a valid choice",
    ("place", "--reserve", "zero"): "no memory kept back is a valid choice",
    ("fit", "--zero", "zero"): "ZeRO stage 0 (none)",
    ("time", "--zero", "zero"): "ZeRO stage 0 (none)",
    ("simulate stream", "--prefetch", "zero"): "no prefetch: the stream is exposed, a valid what-if",
}


#: commands with a --format option (their JSON output is parsed for non-finite numbers)
FORMAT_COMMANDS: set[str] = set()
#: file fields that wseplan does not read: (file, field, number kind) -> why accepting them is right
ACCEPTED_FIELDS: dict[tuple[str, str, str], str] = {
    ("config.json", "rms_norm_eps", "negative"): "not read by wseplan (no effect on memory, time or cost)",
    ("config.json", "rope_theta", "negative"): "not read by wseplan (no effect on memory, time or cost)",
}


def leaf_commands() -> dict[str, list[tuple[str, type]]]:
    """Every leaf command of the Typer app with its numeric options: ``{"simulate gemv": [("--k", int), ...]}``."""
    import typer.main

    from wseplan.cli import app

    out: dict[str, list[tuple[str, type]]] = {}

    def walk(group, prefix):
        for name, sub in group.commands.items():
            if hasattr(sub, "commands"):
                walk(sub, prefix + [name])
                continue
            opts = []
            if any(p.opts and p.opts[0] == "--format" for p in sub.params):
                FORMAT_COMMANDS.add(" ".join(prefix + [name]))
            for p in sub.params:
                ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
                if ann in (int, float) and p.opts and p.opts[0].startswith("--"):
                    opts.append((p.opts[0], ann))
            out[" ".join(prefix + [name])] = opts

    walk(typer.main.get_command(app), [])
    return out


# ------------------------------------------------------------------------------------------------ base files
def _small_serving_study() -> dict:
    return {"name": "s", "title": "t", "kind": "serving", "question": "q", "model": "llama-3-8b", "precision": "bf16",
            "targets": ["cs3", "h100x8"],
            "serving": {"prompt_tokens": 512, "output_tokens": 64, "demand_tokens_per_s": 20000,
                        "min_tokens_per_s_per_user": 10, "batches": [1, 8]},
            "cost": {"uncertainty": 20, "seed": 7, "utilizations": [0.5, 1.0]}}


def _small_training_study() -> dict:
    doc = yaml.safe_load((ROOT / "studies" / "train-175b.yaml").read_text())
    doc["name"] = "t"
    if isinstance(doc.get("cost"), dict) and "uncertainty" in doc["cost"]:
        doc["cost"]["uncertainty"] = 20
    return doc


def _small_sweep() -> dict:
    return {"name": "sw", "phase": "decode", "models": ["llama-3.1-8b"], "targets": ["cs3", "h100-sxmx8"],
            "precisions": ["bf16"], "batches": [1, 8], "contexts": [1024], "output_tokens": [256],
            "set": {"electricity_usd_per_kwh": 0.1}, "output": "sw.csv"}


def _small_demand() -> dict:
    doc = yaml.safe_load((ROOT / "studies" / "demand-example.yaml").read_text())
    for w in doc["workloads"]:
        if w.get("kind") == "serve":
            w["batches"] = [1, 16]
        if "device_counts" in w:
            w["device_counts"] = {k: v[:2] for k, v in w["device_counts"].items()}
    return doc


def _small_claims() -> dict:
    doc = yaml.safe_load((ROOT / "studies" / "claims-examples.yaml").read_text())
    doc["claims"] = doc["claims"][:4]
    return doc


def _gpu_override() -> dict:
    from wseplan.catalog import default_catalog_dir, read_yaml

    gpus = read_yaml(default_catalog_dir() / "hardware" / "gpus.yaml")["gpus"]
    return {"gpus": {"h100-sxm": copy.deepcopy(gpus["h100-sxm"])}}


def _prices() -> dict:
    from wseplan.catalog import default_catalog_dir

    return yaml.safe_load(next((default_catalog_dir() / "prices").glob("*.yaml")).read_text())


HF_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
             "intermediate_size": 2816, "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 8,
             "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _validation_rows(n: int = 3) -> tuple[list[str], list[list[str]]]:
    from wseplan.catalog import default_catalog_dir

    with open(default_catalog_dir() / "validation" / "validation-public.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:1 + n]


def _csv_text(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def default_files() -> dict[str, str]:
    """The valid input files every case folder starts with (names substituted into :data:`BASE`)."""
    h, rows = _validation_rows()
    return {"study.yaml": yaml.safe_dump(_small_serving_study(), sort_keys=False),
            "train.yaml": yaml.safe_dump(_small_training_study(), sort_keys=False),
            "sweep.yaml": yaml.safe_dump(_small_sweep(), sort_keys=False),
            "demand.yaml": yaml.safe_dump(_small_demand(), sort_keys=False),
            "claims.yaml": yaml.safe_dump(_small_claims(), sort_keys=False),
            "cases.csv": _csv_text(h, rows),
            "thesis.md": "my own notes: must never change\n"}


PLACEHOLDERS = {"{study}": "study.yaml", "{sweep}": "sweep.yaml", "{demand}": "demand.yaml", "{claims}": "claims.yaml",
                "{cases}": "cases.csv"}


def fill(argv: list[str]) -> list[str]:
    return [PLACEHOLDERS.get(a, a) for a in argv]


# ------------------------------------------------------------------------------------------------ cases
@dataclass
class Case:
    cls: str
    name: str
    argv: list[str]
    files: dict = field(default_factory=dict)     # relative path -> str | bytes | ("fifo"|"socket"|"symlink"|"dir"|"sparse", arg)
    expect: str = "refuse"                        # refuse | either | ok
    allowed_rc: tuple = (0, 2)
    outputs: tuple = ()                           # paths a successful run may create or replace
    protect: tuple = ()                           # paths that must be byte-identical afterwards, whatever happened
    mount: dict | None = None                     # {"dir": "out", "size": "64k", "ro": False}
    fsize_kb: int | None = None                   # ulimit -f
    timeout: float = 90.0
    check: Callable | None = None                 # extra check(result, folder) -> list[str] of failures


def _case_base(cmd: str) -> list[str] | None:
    b = BASE.get(cmd)
    return fill(list(b)) if b else None


def option_number_cases(commands) -> list[Case]:
    cases = []
    for cmd, opts in sorted(commands.items()):
        if cmd not in BASE:
            continue
        for opt, typ in opts:
            base = fill(list(OPTION_BASE.get((cmd, opt), BASE[cmd])))
            if cmd in FORMAT_COMMANDS:
                base = base + ["-f", "json"]  # the JSON output is checked for NaN/Infinity
            for kind, (text, _, _) in NUMBERS.items():
                argv = _set_option(base, opt, text)
                expect = "refuse" if kind in ALWAYS_REFUSE else "either"
                if (cmd, opt, kind) in ACCEPTED:
                    expect = "either"
                cases.append(Case("option-number", f"{cmd} {opt}={kind}", argv, expect=expect,
                                  outputs=_outputs_of(cmd), allowed_rc=(0, 1, 2) if cmd == "calibrate" else (0, 2)))
    # numbers inside text options
    for kind, (text, _, _) in NUMBERS.items():
        cases.append(Case("option-number", f"fit --target h100x<{kind}>", fill(["fit", "llama-3-8b", "-t", f"h100x{text}"])))
        cases.append(Case("option-number", f"compare --targets cs3x<{kind}>",
                          fill(["compare", "llama-3-8b", "-t", f"h100x8,cs3x{text}"])))
        cases.append(Case("option-number", f"cost --set electricity={kind}",
                          fill(["cost", "llama-3-8b", "-t", "h100x8", "--set", f"electricity_usd_per_kwh={text}"]),
                          expect="refuse" if kind in ALWAYS_REFUSE else "either"))
        cases.append(Case("option-number", f"cost --set h100-sxm.capex_usd={kind}",
                          fill(["cost", "llama-3-8b", "-t", "h100x8", "--set", f"h100-sxm.capex_usd={text}"]),
                          expect="refuse" if kind in ALWAYS_REFUSE else "either"))
        cases.append(Case("option-number", f"fit --memoryx {kind}tb",
                          fill(["fit", "llama-3-8b", "-t", "cs3", "--phase", "train", "--memoryx", f"{text}tb"])))
        cases.append(Case("option-number", f"simulate gemv --region {kind}x8",
                          ["simulate", "gemv", "--k", "64", "--n", "64", "--region", f"{text}x8"]))
    return cases


def _outputs_of(cmd: str) -> tuple:
    return {"report": ("rep",), "sweep": ("sw",), "calibrate": ("xdg",)}.get(cmd, ())


def _set_option(argv: list[str], opt: str, value: str) -> list[str]:
    out = list(argv)
    if opt in out:
        out[out.index(opt) + 1] = value
        return out
    return out + [f"{opt}={value}" if value.startswith("-") else opt, *([] if value.startswith("-") else [value])]


# -- numeric fields of files
def _leaves(doc, path=()):
    """Paths of the numeric leaves of ``doc`` (numbers, and strings that are a number followed by a unit)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, path + (i,))
    elif isinstance(doc, bool):
        return
    elif isinstance(doc, (int, float)):
        yield path, None
    elif isinstance(doc, str):
        m = re.fullmatch(r"\s*[-+]?[0-9][0-9_.eE+-]*\s*([A-Za-z/%$][A-Za-z0-9/%$ .^-]*)", doc)
        if m:
            yield path, m.group(1)


def _with_leaf(doc, path, token: str):
    d = copy.deepcopy(doc)
    node = d
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = token
    return d


SENTINEL = "H16SENTINELVALUE"


def _yaml_with(doc, path, unit, token) -> str:
    text = yaml.safe_dump(_with_leaf(doc, path, SENTINEL), sort_keys=False, width=10_000)
    return text.replace(SENTINEL, f"{token} {unit}" if unit else token)


def _json_with(doc, path, token) -> str:
    return json.dumps(_with_leaf(doc, path, SENTINEL)).replace(f'"{SENTINEL}"', token)


def _sample(items: list, n: int | None, rng: random.Random) -> list:
    if n is None or len(items) <= n:
        return items
    return sorted(rng.sample(items, n), key=items.index)


def file_number_cases(per_doc: int | None, rng: random.Random) -> list[Case]:
    cases = []
    docs = [  # (what, doc, file name, argv, output)
        ("study-serving", _small_serving_study(), "study.yaml", ["report", "study.yaml", "--out", "rep"], ("rep",)),
        ("study-training", _small_training_study(), "train.yaml", ["report", "train.yaml", "--out", "rep"], ("rep",)),
        ("sweep", _small_sweep(), "sweep.yaml", ["sweep", "sweep.yaml", "--out", "sw"], ("sw",)),
        ("demand", _small_demand(), "demand.yaml", ["fleet", "demand.yaml", "--time-limit", "5"], ()),
        ("claims", _small_claims(), "claims.yaml", ["check", "claims.yaml"], ()),
        ("catalog-gpu", _gpu_override(), "cat/gpus.yaml", ["fit", "llama-3-8b", "-t", "h100x8", "--catalog", "cat"], ()),
        ("prices", _prices(), "prices.yaml", ["cost", "llama-3-8b", "-t", "h100x8", "--prices", "prices.yaml"], ()),
    ]
    for what, doc, fname, argv, outs in docs:
        argv = argv + ["-f", "json"]  # the JSON output is checked for NaN/Infinity
        leaves = _sample(list(_leaves(doc)), per_doc, rng)
        for path, unit in leaves:
            for kind, (_, ytoken, _) in NUMBERS.items():
                text = _yaml_with(doc, path, unit, ytoken)
                cases.append(Case("yaml-number", f"{what} {'.'.join(map(str, path))}={kind}", list(argv),
                                  files={fname: text}, outputs=outs,
                                  expect="refuse" if kind in ALWAYS_REFUSE else "either"))
    # config.json
    for path, _ in _sample(list(_leaves(HF_CONFIG)), per_doc, rng):
        for kind, (_, _, jtoken) in NUMBERS.items():
            ok = ("config.json", path[0], kind) in ACCEPTED_FIELDS
            cases.append(Case("json-number", f"config.json {path[0]}={kind}",
                              ["fit", "m/config.json", "-t", "h100x8", "-f", "json"],
                              files={"m/config.json": _json_with(HF_CONFIG, path, jtoken)},
                              expect="refuse" if kind in ALWAYS_REFUSE and not ok else "either"))
    # validation CSV: every numeric column of the first row
    header, rows = _validation_rows(1)
    numeric = [i for i, c in enumerate(header) if c in ("value", "n_params_b", "n_layers", "d_model", "n_heads",
                                                        "n_kv_heads", "d_ff", "vocab", "seq_len", "global_batch",
                                                        "n_devices", "tp", "pp", "dp", "zero_stage", "input_len",
                                                        "output_len", "concurrency", "n_experts", "cp", "ep", "vpp")]
    for i in _sample(numeric, per_doc, rng):
        for kind, (ctoken, _, _) in NUMBERS.items():
            r = list(rows[0])
            r[i] = ctoken
            cases.append(Case("csv-number", f"validation {header[i]}={kind}", ["validate", "v.csv"],
                              files={"v.csv": _csv_text(header, [r])},
                              expect="refuse" if kind in ALWAYS_REFUSE else "either"))
    return cases


# -- special files
SPECIALS = ("fifo", "socket", "devzero", "loop", "dangling", "dir", "sparse")


def _special(kind: str):
    return {"fifo": ("fifo", None), "socket": ("socket", None), "devzero": ("symlink", "/dev/zero"),
            "loop": ("symlink", "LOOP"), "dangling": ("symlink", "does-not-exist"), "dir": ("dir", None),
            "sparse": ("sparse", 3 * 2**30)}[kind]


def special_file_cases() -> list[Case]:
    cases = []
    for kind in SPECIALS:
        cases.append(Case("special-file", f"--catalog folder holds {kind} gpus.yaml",
                          ["fit", "llama-3-8b", "-t", "h100x8", "--catalog", "cat"],
                          files={"cat/gpus.yaml": _special(kind)}, timeout=30,
                          expect="either" if kind == "dir" else "refuse"))  # a sub-folder is just a folder
        for what, argv, name in (("study", ["report", "x.yaml", "--out", "rep"], "x.yaml"),
                                 ("claims", ["check", "x.yaml"], "x.yaml"),
                                 ("demand", ["fleet", "x.yaml"], "x.yaml"),
                                 ("sweep", ["sweep", "x.yaml", "--out", "sw"], "x.yaml"),
                                 ("cases", ["validate", "x.csv"], "x.csv"),
                                 ("config.json", ["fit", "m/config.json", "-t", "h100x8"], "m/config.json"),
                                 ("layer list", ["fit", "x.yaml", "-t", "h100x8"], "x.yaml"),
                                 ("prices", ["cost", "llama-3-8b", "-t", "h100x8", "--prices", "x.yaml"], "x.yaml"),
                                 ("calibration dir", ["calibrate", "--check", "--out", "x.yaml"], "x.yaml")):
            if kind == "dir" and what == "calibration dir":
                continue  # a folder is what --check reads
            cases.append(Case("special-file", f"{what} is {kind}", list(argv), files={name: _special(kind)},
                              timeout=30, allowed_rc=(0, 1, 2) if what == "calibration dir" else (0, 2)))
    return cases


# -- hostile names
def _id_expect(kind: str) -> str:
    """An identifier that is only shown (claim id, workload name, row id): '../..' is harmless text there."""
    return "either" if kind == "traversal" else "refuse"


def _inside_reports(rc, folder: Path) -> list[str]:
    """A report written without --out must land in reports/<one plain folder>/ (no '..', no sub-folders)."""
    bad = [str(p.relative_to(folder)) for p in folder.rglob("report.md")
           if p.parent.parent != folder / "reports"]
    return [f"data-loss: a report was written outside reports/: {bad[:2]}"] if bad else []


def hostile_name_cases() -> list[Case]:
    cases = []
    h, rows = _validation_rows(1)
    for kind, name in HOSTILE.items():
        arg = name
        cases += [
            Case("hostile-name", f"model argument {kind}", ["fit", arg, "-t", "h100x8"]),
            Case("hostile-name", f"target {kind}", ["fit", "llama-3-8b", "-t", arg]),
            Case("hostile-name", f"catalog show {kind}", ["catalog", "show", arg]),
            Case("hostile-name", f"--set name {kind}", ["cost", "llama-3-8b", "-t", "h100x8", "--set", f"{arg}=1"]),
            Case("hostile-name", f"--format {kind}", ["fit", "llama-3-8b", "-t", "h100x8", "-f", arg]),
            Case("hostile-name", f"--precision {kind}", ["fit", "llama-3-8b", "-t", "h100x8", "-p", arg]),
        ]
        study = _small_serving_study()
        study["name"] = name
        cases.append(Case("hostile-name", f"study name {kind}", ["report", "study.yaml"],
                          files={"study.yaml": yaml.safe_dump(study)}, outputs=("reports",),
                          expect="either" if kind == "traversal" else "refuse",  # traversal: reduced to a safe name
                          check=_inside_reports))
        study = _small_serving_study()
        study["title"] = name
        cases.append(Case("hostile-name", f"study title {kind}", ["report", "study.yaml", "--out", "rep"],
                          files={"study.yaml": yaml.safe_dump(study)}, expect="either", outputs=("rep",)))
        sw = _small_sweep()
        sw["output"] = name + ".csv"
        cases.append(Case("hostile-name", f"sweep output {kind}", ["sweep", "sweep.yaml", "--out", "sw"],
                          files={"sweep.yaml": yaml.safe_dump(sw)}, outputs=("sw",),
                          expect="either"))  # reduced to a safe file name inside --out (checked by the litter rule)
        cl = _small_claims()
        cl["claims"][0]["id"] = name
        cases.append(Case("hostile-name", f"claim id {kind}", ["check", "claims.yaml"],
                          files={"claims.yaml": yaml.safe_dump(cl)}, expect=_id_expect(kind)))
        dm = _small_demand()
        dm["workloads"][0]["name"] = name
        cases.append(Case("hostile-name", f"demand workload name {kind}", ["fleet", "demand.yaml"],
                          files={"demand.yaml": yaml.safe_dump(dm)}, expect=_id_expect(kind)))
        r = list(rows[0])
        r[h.index("id")] = name
        cases.append(Case("hostile-name", f"validation id {kind}", ["validate", "v.csv"],
                          files={"v.csv": _csv_text(h, [r])}, expect=_id_expect(kind)))
        r = list(rows[0])
        r[h.index("notes")] = name
        cases.append(Case("hostile-name", f"validation notes {kind}", ["validate", "v.csv"],
                          files={"v.csv": _csv_text(h, [r])}, expect="either"))
        g = _gpu_override()
        g["gpus"] = {name: g["gpus"]["h100-sxm"]}
        cases.append(Case("hostile-name", f"catalog key {kind}", ["catalog", "list", "--catalog", "cat"],
                          files={"cat/gpus.yaml": yaml.safe_dump(g)}))
        if kind not in ("long", "traversal"):
            fname = re.sub(r"[/\x00]", "_", name) + ".yaml"
            cases.append(Case("hostile-name", f"file name {kind}", ["check", fname],
                              files={fname: "claims: [{id: x, kind: nonsense}]\n"}))
            cases.append(Case("hostile-name", f"missing file {kind}", ["report", fname]))
    cases.append(Case("hostile-name", "study name with a slash", ["report", "study.yaml"],
                      files={"study.yaml": yaml.safe_dump({**_small_serving_study(), "name": "a/b"})},
                      expect="either", outputs=("reports",), check=_inside_reports))
    return cases


# -- output paths
def output_path_cases() -> list[Case]:
    cases = []
    cmds = {
        "report": (["report", "study.yaml", "--out", "{OUT}"], "report.md"),
        "sweep": (["sweep", "sweep.yaml", "--out", "{OUT}"], "sw.csv"),
        "calibrate": (["calibrate", "--target", "wse3", "--out", "{OUT}"], "fabric_sim_fit.yaml"),
    }
    from wseplan.report.atomic import MARKER, _marker_bytes

    old = {"report": {"report.md": "OLD REPORT\n", MARKER: _marker_bytes(["report.md"])},
           "sweep": {"sw.csv": "OLD SWEEP\n"}, "calibrate": {"fabric_sim_fit.yaml": "# OLD\n"}}
    big_sweep = {**_small_sweep(), "batches": [1, 2, 4, 8, 16, 32, 64, 128], "contexts": [1024, 4096, 16384]}
    # each output is larger than the room left: the full file system and the file size limit must bite
    room = {"report": ("64k", 16), "sweep": ("8k", 4), "calibrate": ("4k", 2)}
    for cmd, (argv, first) in cmds.items():
        prev = {f"vol/out/{k}": v for k, v in old[cmd].items()}
        if cmd == "sweep":
            prev["sweep.yaml"] = yaml.safe_dump(big_sweep, sort_keys=False)
        fill_out = lambda a, o: [x.replace("{OUT}", o) for x in a]  # noqa: E731
        size, fsize = room[cmd]
        # the tmpfs is mounted on vol/, the output folder vol/out/ is inside it (a mount point cannot be renamed)
        cases.append(Case("output-path", f"{cmd} on a read-only file system", fill_out(argv, "vol/out"),
                          files=dict(prev), mount={"dir": "vol", "size": "4m", "ro": True}, timeout=120))
        cases.append(Case("output-path", f"{cmd} on a full file system", fill_out(argv, "vol/out"), files=dict(prev),
                          mount={"dir": "vol", "size": size, "ro": False}, timeout=120))
        cases.append(Case("output-path", f"{cmd} under ulimit -f {fsize} KiB", fill_out(argv, "vol/out"),
                          files=dict(prev), fsize_kb=fsize, timeout=120))
        cases.append(Case("output-path", f"{cmd} --out a symlink to a folder", fill_out(argv, "link"),
                          files={**{f"real/{k}": v for k, v in old[cmd].items()}, "link": ("symlink", "real")},
                          expect="ok", outputs=("real",), timeout=120,
                          check=lambda res, d: [] if os.path.islink(d / "link") else ["--out symlink was replaced"]))
        cases.append(Case("output-path", f"{cmd} --out a dangling symlink", fill_out(argv, "link"),
                          files={"link": ("symlink", "nowhere/deeper")}, expect="either", outputs=("nowhere",),
                          timeout=120))
        cases.append(Case("output-path", f"{cmd} --out a symlink loop", fill_out(argv, "loop"),
                          files={"loop": ("symlink", "LOOP")}, timeout=60))
        cases.append(Case("output-path", f"{cmd} --out a regular file", fill_out(argv, "thesis.md"), timeout=60))
        cases.append(Case("output-path", f"{cmd} --out /dev/null", fill_out(argv, "/dev/null"), timeout=60))
        cases.append(Case("output-path", f"{cmd} --out ''", fill_out(argv, ""), timeout=60))
        cases.append(Case("output-path", f"{cmd} output name is a folder", fill_out(argv, "out"),
                          files={f"out/{first}/keep.txt": "keep\n"}, protect=(f"out/{first}/keep.txt",), timeout=120,
                          expect="refuse" if cmd != "report" else "either", outputs=("out",)))
    cases.append(Case("output-path", "report --out a user's folder", ["report", "study.yaml", "--out", "mine"],
                      files={"mine/report.md": "my draft\n", "mine/data.csv": "a,b\n1,2\n"},
                      protect=("mine/report.md", "mine/data.csv")))
    cases.append(Case("output-path", "report --out a user's folder with --force",
                      ["report", "study.yaml", "--out", "mine", "--force"],
                      files={"mine/thesis.md": "my thesis\n", "mine/data.csv": "a,b\n1,2\n"},
                      protect=("mine/thesis.md", "mine/data.csv"), expect="ok", outputs=("mine",), timeout=120))
    return cases


# ------------------------------------------------------------------------------------------------ running
def wseplan_cmd() -> list[str]:
    script = Path(sys.executable).with_name("wseplan")
    return [str(script)] if script.exists() else [sys.executable, "-m", "wseplan.cli"]


def _env(folder: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("WSEPLAN_DEBUG",)}
    env.update(PYTHONPATH=str(ROOT), HOME=str(folder / "home"), XDG_DATA_HOME=str(folder / "xdg"),
               COLUMNS="120", TERM="dumb", PYTHONWARNINGS="ignore::DeprecationWarning")
    return env


def _make(folder: Path, rel: str, content) -> None:
    p = folder / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, tuple):
        kind, arg = content
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            try:
                s.bind(str(p))
            except OSError:  # path too long for a socket: a FIFO stands in
                os.mkfifo(p)
            finally:
                s.close()
        elif kind == "symlink":
            os.symlink(p.name if arg == "LOOP" else arg, p)
        elif kind == "dir":
            p.mkdir()
        elif kind == "sparse":
            with open(p, "wb") as fh:
                fh.truncate(arg)
    elif isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content, encoding="utf-8", newline="")


def snapshot(folder: Path) -> dict[str, str]:
    """relative path -> content digest (file), link target, or a kind, for everything under ``folder``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = str(p.relative_to(folder))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                if st.st_size > 2**28:
                    out[rel] = f"big:{st.st_size}"
                else:
                    out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            else:
                out[rel] = "special"
    return out


@dataclass
class Result:
    case: Case
    rc: int | None
    out: str
    err: str
    seconds: float
    failures: list[str]
    skipped: str = ""


def _inner_script(case: Case, folder: Path) -> list[str]:
    """The command line: the CLI, wrapped in a private mount namespace with a tmpfs when the case asks."""
    argv = wseplan_cmd() + case.argv
    if case.mount is None and case.fsize_kb is None:
        return argv
    if case.mount is None:
        return argv  # ulimit via preexec_fn
    m = case.mount
    # copy the prepared content onto the tmpfs, optionally remount it read-only, then run the CLI
    script = (f'set -e; d="{m["dir"]}"; mv "$d" .seed; mkdir "$d"; mount -t tmpfs -o size={m["size"]} none "$d"; '
              f'cp -a .seed/. "$d"/; rm -rf .seed; '
              + ('mount -o remount,ro "$d"; ' if m.get("ro") else "")
              + 'set +e; "$@"; rc=$?; '
              # report what the tmpfs holds afterwards, for the data-loss check (the mount vanishes with us)
              + f'{sys.executable} -c "import json,sys; sys.path.insert(0, {str(HERE)!r}); import adversarial as a; '
              + 'from pathlib import Path; print(json.dumps(a.snapshot(Path(sys.argv[1]))))" "$d" > .inner-snapshot.json; '
              + 'exit $rc')
    return ["unshare", "-rm", "sh", "-c", script, "sh", *argv]


_UNSHARE_OK: dict = {}


def unshare_available() -> str:
    """'' when a private mount namespace with a tmpfs works here, else the reason."""
    if "r" not in _UNSHARE_OK:
        try:
            d = tempfile.mkdtemp()
            r = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=8k none {d}"],
                               capture_output=True, text=True, timeout=20)
            _UNSHARE_OK["r"] = "" if r.returncode == 0 else f"unshare -rm + tmpfs refused: {r.stderr.strip()[:120]}"
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, subprocess.SubprocessError) as exc:
            _UNSHARE_OK["r"] = f"unshare unavailable: {exc}"
    return _UNSHARE_OK["r"]


def run_case(case: Case, keep: bool = False) -> Result:
    if case.mount is not None and unshare_available():
        return Result(case, None, "", "", 0.0, [], skipped=unshare_available())
    folder = Path(tempfile.mkdtemp(prefix="wseplan-adv-"))
    try:
        for rel, content in {**default_files(), **case.files}.items():
            _make(folder, rel, content)
        before = snapshot(folder)
        preexec = None
        if case.fsize_kb is not None:
            import resource

            def preexec():
                os.setsid()
                resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize_kb * 1024, case.fsize_kb * 1024))
        t0 = time.perf_counter()
        p = subprocess.Popen(_inner_script(case, folder), cwd=folder, env=_env(folder), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec,
                             start_new_session=preexec is None)
        try:
            out_b, err_b = p.communicate(timeout=case.timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out_b, err_b = p.communicate()
            rc = None
        secs = time.perf_counter() - t0
        out, err = out_b.decode("utf-8", "replace"), err_b.decode("utf-8", "replace")
        after = snapshot(folder)
        inner = folder / ".inner-snapshot.json"
        if case.mount is not None and inner.exists():
            mdir = case.mount["dir"]
            after = {k: v for k, v in after.items() if not (k == mdir or k.startswith(mdir + "/"))}
            after.pop(".inner-snapshot.json", None)
            after.update({f"{mdir}/{k}": v for k, v in json.loads(inner.read_text() or "{}").items()})
            after[mdir] = "dir"
        return Result(case, rc, out, err, secs, judge(case, rc, out, err, before, after, folder))
    finally:
        if not keep:
            _rmtree(folder)


def _rmtree(folder: Path) -> None:
    for dirpath, dirnames, _ in os.walk(folder):
        for n in dirnames:
            try:
                os.chmod(Path(dirpath) / n, 0o755)
            except OSError:
                pass
    shutil.rmtree(folder, ignore_errors=True)


def _under(rel: str, roots: tuple) -> bool:
    return any(rel == r or rel.startswith(r.rstrip("/") + "/") for r in roots)


def judge(case: Case, rc, out: str, err: str, before: dict, after: dict, folder: Path) -> list[str]:
    f = []
    if rc is None:
        return [f"hang: no exit within {case.timeout:.0f} s"]
    if "Traceback" in err or "Traceback" in out:
        f.append("traceback: " + _last_line(err))
    if "\x1b" in out or "\x1b" in err:
        f.append("escape: an ESC byte reached the terminal")
    if rc not in case.allowed_rc:
        f.append(f"exit: status {rc}: " + _last_line(err))
    if rc == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if len(lines) != 1 or not lines[0].startswith("error:"):
            f.append(f"lines: {len(lines)} stderr lines: " + _last_line(err))
        elif len(lines[0]) > 2000:
            f.append(f"lines: a {len(lines[0]):,}-character error line")
    if rc == 0:
        if case.expect == "refuse":
            f.append("nonsense: accepted (exit 0)")
        if "--format" not in case.argv and "-f" not in case.argv:
            pass
        if re.search(r"(?<![A-Za-z_])(NaN|-?Infinity|nan|inf)(?![A-Za-z_])", out) and "json" in _fmt(case.argv):
            f.append("nonsense: non-finite number in the JSON output")
    if rc is not None and rc != 0 and case.expect == "ok":
        f.append(f"exit: expected success, got {rc}: " + _last_line(err))
    # data: the user's files and protected outputs
    # every file that was there must be unchanged, except a declared output replaced by a successful run
    for k in sorted(before):
        if k.startswith(("home", "xdg")) or after.get(k) == before[k]:
            continue
        if rc == 0 and _under(k, case.outputs) and k not in case.protect:
            continue
        f.append(f"data-loss: {k} {'changed' if k in after else 'is gone'}")
        break
    new = [k for k in after if k not in before and not k.startswith(("home", "xdg"))]
    if rc != 0 and new:
        f.append(f"litter: a failed run left {new[:3]}")
    elif rc == 0 and [k for k in new if not _under(k, case.outputs)]:
        f.append(f"litter: wrote outside its output: {[k for k in new if not _under(k, case.outputs)][:3]}")
    if case.check is not None and rc == 0:
        f.extend(case.check(rc, folder))
    return f


def _fmt(argv: list[str]) -> str:
    for i, a in enumerate(argv):
        if a in ("-f", "--format") and i + 1 < len(argv):
            return argv[i + 1]
    return "table"


def _last_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:200]


# ------------------------------------------------------------------------------------------------ signals
def signal_runs(n: int, rng: random.Random, jobs: int) -> list[Result]:
    """Kill ``report``/``sweep`` at random points over a previous output; check old-or-new, then a clean rerun."""
    results = []
    for cmd in ("report", "sweep"):
        folder = Path(tempfile.mkdtemp(prefix="wseplan-adv-sig-"))
        try:
            for rel, content in default_files().items():
                _make(folder, rel, content)
            argv = wseplan_cmd() + (["report", "study.yaml", "--out", "out", "-f", "json"] if cmd == "report"
                                    else ["sweep", "sweep.yaml", "--out", "out", "-f", "json"])
            # the previous output: the same command with another input, so old and new differ
            alt = _small_serving_study() if cmd == "report" else _small_sweep()
            if cmd == "report":
                alt["serving"]["demand_tokens_per_s"] = 30000
                (folder / "old.yaml").write_text(yaml.safe_dump(alt))
                prev = wseplan_cmd() + ["report", "old.yaml", "--out", "out"]
            else:
                alt["batches"] = [1, 2]
                (folder / "old.yaml").write_text(yaml.safe_dump(alt))
                prev = wseplan_cmd() + ["sweep", "old.yaml", "--out", "out"]
            env = _env(folder)
            t0 = time.perf_counter()
            r = subprocess.run(argv, cwd=folder, env=env, capture_output=True, timeout=300)
            full_s = time.perf_counter() - t0
            new_state = _out_state(folder / "out")
            shutil.rmtree(folder / "out")
            subprocess.run(prev, cwd=folder, env=env, capture_output=True, timeout=300, check=True)
            old_state = _out_state(folder / "out")
            if r.returncode != 0 or old_state == new_state:
                raise RuntimeError(f"signal runs: reference {cmd} failed: {r.stderr[-300:]!r}")
            for i in range(n):
                sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
                at = rng.uniform(0.05, 1.1) * full_s
                case = Case("signal", f"{cmd} {signal.Signals(sig).name} at {at:.2f} s of {full_s:.2f} s", argv)
                p = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
                time.sleep(at)
                try:  # to the process group, as a terminal's Ctrl-C or a service manager's stop does
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    out_b, err_b = p.communicate(timeout=120)
                    rc = p.returncode
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    out_b, err_b = p.communicate()
                    rc = None
                out, err = out_b.decode("utf-8", "replace"), err_b.decode("utf-8", "replace")
                f = []
                if rc is None:
                    f.append("hang: no exit 120 s after the signal")
                if "Traceback" in err or "Traceback" in out:
                    f.append("traceback: " + _last_line(err))
                if sig == signal.SIGINT and rc not in (0, 130):
                    f.append(f"exit: SIGINT gave status {rc}")
                if sig == signal.SIGINT and rc == 130 and [ln for ln in err.splitlines() if ln.strip()] != ["error: interrupted"]:
                    f.append(f"lines: SIGINT printed {err[-200:]!r}")
                state = _out_state(folder / "out")
                if state not in (old_state, new_state):
                    f.append("data-loss: the output is neither the old nor the new one")
                # the next run finishes and leaves no temporaries; then restore the old output for the next kill
                r2 = subprocess.run(prev, cwd=folder, env=env, capture_output=True, timeout=300)
                if r2.returncode != 0:
                    f.append(f"exit: the next run failed: {_last_line(r2.stderr.decode('utf-8', 'replace'))}")
                left = [e for e in os.listdir(folder) if e.startswith(".out.") or ".tmp-" in e]
                left += [e for e in (os.listdir(folder / "out") if (folder / "out").is_dir() else [])
                         if ".tmp-" in e or ".parts-" in e]
                if left:
                    f.append(f"litter: temporaries after the next run: {left[:3]}")
                if _out_state(folder / "out") != old_state:
                    f.append("data-loss: the next run did not restore the old output")
                results.append(Result(case, rc, out, err, at, f))
        finally:
            _rmtree(folder)
    return results


def _out_state(out: Path) -> dict | None:
    if not out.exists():
        return None
    snap = snapshot(out)
    return {k: v for k, v in snap.items() if not (k.startswith(".") and (".tmp-" in k or ".parts-" in k or ".old-" in k))}


# ------------------------------------------------------------------------------------------------ main
CLASSES = ("option-number", "yaml-number", "json-number", "csv-number", "special-file", "hostile-name", "output-path",
           "signal")
VERDICTS = ("traceback", "hang", "exit", "lines", "nonsense", "data-loss", "litter", "escape")


def build_cases(only: set[str], quick: bool, rng: random.Random) -> tuple[list[Case], list[str]]:
    notes = []
    commands = leaf_commands()
    missing = [c for c in commands if c not in BASE]
    if missing:
        raise SystemExit(f"adversarial: no base command line for {missing}; add them to BASE")
    for c in BASE:
        if c not in commands:
            notes.append(f"{c}: not in this build (skipped; audited once it is registered)")
    cases = []
    if "option-number" in only:
        cases += option_number_cases(commands)
    if only & {"yaml-number", "json-number", "csv-number"}:
        cases += [c for c in file_number_cases(6 if quick else None, rng) if c.cls in only]
    if "special-file" in only:
        cases += special_file_cases()
    if "hostile-name" in only:
        cases += hostile_name_cases()
    if "output-path" in only:
        cases += output_path_cases()
    if quick:
        by = {}
        for c in cases:
            by.setdefault(c.cls, []).append(c)
        cases = [c for cl in by.values() for c in (_sample(cl, 60, rng) if cl[0].cls == "option-number" else cl)]
    return cases, notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="class to run (repeatable): " + ", ".join(CLASSES))
    ap.add_argument("--match", help="only cases whose name contains this text")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a seeded sample of each class")
    ap.add_argument("--signals", type=int, default=15, help="kills per command in the signal class")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--json", help="write every case's verdicts here")
    ap.add_argument("--verbose", "-v", action="store_true")
    a = ap.parse_args(argv)
    only = set(a.only or CLASSES)
    rng = random.Random(a.seed)
    cases, notes = build_cases(only, a.quick, rng)
    if a.match:
        cases = [c for c in cases if a.match in c.name]
    t0 = time.perf_counter()
    results: list[Result] = []
    with cf.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        for r in ex.map(run_case, cases):
            results.append(r)
            if a.verbose or r.failures:
                tag = "SKIP " + r.skipped if r.skipped else ("; ".join(r.failures) if r.failures else "ok")
                print(f"[{r.case.cls}] {r.case.name[:90]!r}: rc={r.rc} {r.seconds:.1f}s {tag}", flush=True)
    if "signal" in only and not a.match:
        for r in signal_runs(max(2, a.signals // (3 if a.quick else 1)), rng, a.jobs):
            results.append(r)
            if a.verbose or r.failures:
                print(f"[signal] {r.case.name}: rc={r.rc} {'; '.join(r.failures) or 'ok'}", flush=True)
    wall = time.perf_counter() - t0
    print()
    print(f"{'class':<15} {'cases':>6} {'skipped':>7} " + " ".join(f"{v:>9}" for v in VERDICTS))
    total = {v: 0 for v in VERDICTS}
    for cl in CLASSES:
        rs = [r for r in results if r.case.cls == cl]
        if not rs:
            continue
        counts = {v: sum(any(f.startswith(v + ":") for f in r.failures) for r in rs) for v in VERDICTS}
        for v in VERDICTS:
            total[v] += counts[v]
        print(f"{cl:<15} {len(rs):>6} {sum(bool(r.skipped) for r in rs):>7} "
              + " ".join(f"{counts[v]:>9}" for v in VERDICTS))
    print(f"{'total':<15} {len(results):>6} {sum(bool(r.skipped) for r in results):>7} "
          + " ".join(f"{total[v]:>9}" for v in VERDICTS))
    for r in results:
        if r.skipped:
            notes.append(f"skipped {r.case.name}: {r.skipped}")
    for n in dict.fromkeys(notes):
        print("note:", n)
    print(f"{len(results)} cases in {wall:.0f} s; {sum(bool(r.failures) for r in results)} failing")
    if a.json:
        Path(a.json).write_text(json.dumps([{"class": r.case.cls, "name": r.case.name, "argv": r.case.argv[:12],
                                             "rc": r.rc, "seconds": round(r.seconds, 2), "failures": r.failures,
                                             "stderr_tail": r.err[-400:], "skipped": r.skipped}
                                            for r in results], indent=1))
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
