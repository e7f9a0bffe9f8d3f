"""Catalog numbers cite original public sources (issue 13, item 8).

A source entry either points at a public web address (http/https) or, when it has none, is derived inside
this repository: every file it names must exist here. No entry, catalog note, product module, doc or test may
cite a file the repository does not contain (such as a shared fact sheet outside it).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = yaml.safe_load((ROOT / "catalogs" / "sources.yaml").read_text())["sources"]
# a path-like token: folders and a file with an extension, or a glob of them (catalogs/calibration/*_sim_fit.yaml)
PATH_TOKEN = re.compile(r"(?<![\w/.:-])((?:[\w.*-]+/)+[\w.*-]+\.(?:md|ya?ml|csv|json|py|txt|ipynb))\b")
OUTSIDE = re.compile(r"shared/reference|/work/|hardware\.md|validation-README", re.IGNORECASE)


def local_paths(text: str) -> list[str]:
    return PATH_TOKEN.findall(text or "")


def exists_in_repo(path: str) -> bool:
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).is_file()


def source_problems(sid: str, entry: dict) -> list[str]:
    """Why a source entry is not acceptable (empty when it is)."""
    text = " ".join(str(entry.get(k) or "") for k in ("title", "note", "url"))
    problems = [f"{sid}: names a file outside the repository ({m.group(0)})"
                for m in [OUTSIDE.search(text) or re.search(r"file://", text)] if m]
    url = entry.get("url")
    if url is not None and not re.match(r"https?://", str(url)):
        problems.append(f"{sid}: url {url!r} is not a public web address")
    if not url:  # derived inside the repository: what it names must be here
        for p in local_paths(text):
            if not exists_in_repo(p):
                problems.append(f"{sid}: names {p}, which the repository does not contain")
    return problems


@pytest.mark.parametrize("sid", sorted(SOURCES))
def test_source_entry_cites_no_local_file_outside_the_repository(sid):
    assert not source_problems(sid, SOURCES[sid])


def test_the_check_rejects_local_files_outside_the_repository():
    bad = {"title": "wseplan hardware fact sheet (shared/reference/hardware.md)", "kind": "derived"}
    assert source_problems("fact-sheet", bad)
    assert source_problems("readme", {"title": "notes in docs/not-here.md", "kind": "derived"})
    assert source_problems("file", {"title": "x", "url": "file:///tmp/x.pdf", "kind": "docs"})
    ok = {"title": "fitted on catalogs/calibration/gpu_efficiency.yaml", "kind": "derived"}
    assert not source_problems("cal", ok)
    assert not source_problems("web", {"title": "README/sweep.py of a repo", "url": "https://github.com/x/y"})


def _files(*globs):
    for g in globs:
        yield from sorted(ROOT.glob(g))


@pytest.mark.parametrize("path", list(_files("catalogs/**/*.yaml", "catalogs/**/*.csv", "wseplan/**/*.py", "docs/*.md",
                                              "README.md", "studies/*.yaml", "tests/**/*.py", "tests/**/*.csv")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_cites_a_file_outside_the_repository(path):
    if path.name == "test_sources.py":
        return
    hits = [line.strip()[:120] for line in path.read_text(errors="replace").splitlines() if OUTSIDE.search(line)]
    assert not hits, f"{path.relative_to(ROOT)}: {hits[:3]}"


def test_every_catalog_source_id_is_defined():
    """The ids used by catalog numbers all resolve (the fact-sheet id is gone, not dangling)."""
    from wseplan.catalog import load_catalog

    cat = load_catalog()
    assert "hardware-md" not in cat.sources
    from wseplan.analytic.cost import load_prices

    load_prices(catalog=cat)  # raises on an unknown source id
