"""Numbers of any kind in every numeric field of the documents a user writes (issue 15, item 4).

Study files (serving and training), sweep files, fleet demand files, claims files and prices files: each numeric
field (numbers, and the number inside a quantity string such as ``"1.6 MW"``) set to NaN, +-infinity, a negative
number or a 4,301-digit integer must be refused with exit 2 and one ``error:`` line, nothing on stdout, no
traceback and nothing written (a hypothesis family with a fixed seed, in-process, each run under a SIGALRM
deadline). ``benchmarks/adversarial.py`` repeats the class (and zero and huge values, which may be accepted
when the answer stays finite) against the installed script.
"""
from __future__ import annotations

import copy
import os
import re
import signal
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wseplan.catalog import default_catalog_dir
from wseplan.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _load(rel: str) -> dict:
    return yaml.safe_load((ROOT / rel).read_text(encoding="utf-8"))


def _serving() -> dict:
    return {"name": "s", "title": "t", "kind": "serving", "question": "q", "model": "llama-3-8b", "precision": "bf16",
            "targets": ["cs3", "h100x8"],
            "serving": {"prompt_tokens": 512, "output_tokens": 64, "demand_tokens_per_s": 20000,
                        "min_tokens_per_s_per_user": 10, "batches": [1, 8]},
            "cost": {"uncertainty": 20, "seed": 7, "utilizations": [0.5, 1.0]}}


def _claims() -> dict:
    d = _load("studies/claims-examples.yaml")
    d["claims"] = d["claims"][:4]
    return d


DOCS = {  # kind -> (document, file name, command line)
    "study-serving": (_serving(), "study.yaml", ["report", "{f}", "--out", "rep"]),
    "study-training": (_load("studies/train-175b.yaml"), "study.yaml", ["report", "{f}", "--out", "rep"]),
    "sweep": (_load("studies/sweep-example.yaml"), "sweep.yaml", ["sweep", "{f}", "--out", "sw"]),
    "demand": (_load("studies/demand-example.yaml"), "demand.yaml", ["fleet", "{f}"]),
    "claims": (_claims(), "claims.yaml", ["check", "{f}"]),
    "prices": (yaml.safe_load(next((default_catalog_dir() / "prices").glob("*.yaml")).read_text()), "prices.yaml",
               ["cost", "llama-3-8b", "-t", "h100x8", "--prices", "{f}"]),
}
_QUANTITY = re.compile(r"\s*[-+]?[0-9][0-9_.eE+-]*\s*([A-Za-z/%$][A-Za-z0-9/%$ .^-]*)")


def _leaves(doc, path=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, path + (i,))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, None
    elif isinstance(doc, str):
        m = _QUANTITY.fullmatch(doc)
        if m:
            yield path, m.group(1)


LEAVES = {kind: list(_leaves(doc)) for kind, (doc, _, _) in DOCS.items()}
BAD = [".nan", ".inf", "-.inf", "-1", "-2.5e+3", "9" * 4301]
SENTINEL = "H16NUMBERSENTINEL"


@st.composite
def _case(draw):
    kind = draw(st.sampled_from(sorted(DOCS)))
    path, unit = draw(st.sampled_from(LEAVES[kind]))
    token = draw(st.sampled_from(BAD))
    doc = copy.deepcopy(DOCS[kind][0])
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = SENTINEL
    text = yaml.safe_dump(doc, sort_keys=False, width=10_000).replace(SENTINEL, f"{token} {unit}" if unit else token)
    return kind, ".".join(map(str, path)), token, text


class _Hang(Exception):
    pass


def test_every_document_has_numeric_fields():
    assert all(len(v) >= 3 for v in LEAVES.values()), {k: len(v) for k, v in LEAVES.items()}


@settings(max_examples=70, deadline=None, derandomize=True, database=None, print_blob=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=_case())
def test_fuzz_numbers_in_documents_refused_in_one_line(capsys, tmp_path_factory, case):
    kind, field, token, text = case
    inputs, work = tmp_path_factory.mktemp("in"), tmp_path_factory.mktemp("work")
    f = inputs / DOCS[kind][1]
    f.write_text(text, encoding="utf-8")
    argv = [a.replace("{f}", str(f)) for a in DOCS[kind][2]]
    old_cwd = os.getcwd()
    os.chdir(work)

    def alarm(signum, frame):
        raise _Hang(f"{kind} {field}={token[:20]} ran past 30 s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(30)
    try:
        capsys.readouterr()
        rc = main(argv)
        out, err = capsys.readouterr()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(old_cwd)
    assert rc == 2, (kind, field, token[:20], rc, err[-300:])
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("error: "), err[-300:]
    assert len(err) < 1500
    assert out == "" and os.listdir(work) == [], (out[:200], os.listdir(work))
