"""The parse cache of the bundled catalog files (wseplan/catalog/parse_cache.py) gives what the parser gives.

Every bundled YAML file read through the cache equals its fresh parse; an edited file is parsed again; files outside
the bundled folder, data JSON cannot keep exactly, a damaged cache file and an unwritable cache folder all fall
back to parsing with the same result; ``WSEPLAN_CACHE_DIR=off`` writes nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

import wseplan.catalog.load as L
from wseplan.catalog import parse_cache as PC

BUNDLED = L.default_catalog_dir()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("WSEPLAN_CACHE_DIR", str(d))
    L._PARSE_CACHE.clear()
    yield d
    L._PARSE_CACHE.clear()


def _fresh(path: Path):
    return L._parse_yaml(L.read_regular_text(path, what="file"), path)


def _cache_file(d: Path) -> Path:
    (f,) = list(d.glob("catalog-parse-*.json"))
    return f


def test_every_bundled_file_reads_the_same_through_the_cache(cache):
    files = sorted(BUNDLED.rglob("*.yaml"))
    assert len(files) >= 10
    first = [L.read_yaml(p) for p in files]  # fills the cache
    stored = json.loads(_cache_file(cache).read_text())
    assert "models/transformers.yaml" in stored and "hardware/gpus.yaml" in stored
    L._PARSE_CACHE.clear()  # a new process: the cache file is read back
    calls = []
    orig = L._parse_yaml
    try:
        L._parse_yaml = lambda text, path: calls.append(path) or orig(text, path)
        second = [L.read_yaml(p) for p in files]
    finally:
        L._parse_yaml = orig
    assert not set(calls) & {p for p in files if str(p.relative_to(BUNDLED)).replace(os.sep, "/") in stored}
    for p, a, b in zip(files, first, second):
        assert a == b == _fresh(p), p


def test_cached_data_is_a_fresh_object_each_time(cache):
    p = BUNDLED / "defaults.yaml"
    L.read_yaml(p)
    a = L.read_yaml(p)
    a["defaults"] = "changed by a caller"
    assert L.read_yaml(p) == _fresh(p)


def test_an_edited_catalog_is_parsed_again(cache, tmp_path, monkeypatch):
    cats = tmp_path / "catalogs"
    shutil.copytree(BUNDLED, cats)
    monkeypatch.setenv("WSEPLAN_CATALOG_DIR", str(cats))
    f = cats / "defaults.yaml"
    before = L.read_yaml(f)
    text = f.read_text()
    f.write_text(text + "\n# edited\n" if text.endswith("\n") else text + "\n")
    assert L.read_yaml(f) == before  # a comment: same data, new text, parsed again
    f.write_text("defaults: {}\n")
    L._PARSE_CACHE.clear()
    assert L.read_yaml(f) == {"defaults": {}}


def test_files_outside_the_bundled_folder_are_not_cached(cache, tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("a: 1\n")
    assert L.read_yaml(f) == {"a": 1}
    assert not cache.exists()


def test_data_json_does_not_keep_is_not_cached(cache, tmp_path, monkeypatch):
    cats = tmp_path / "catalogs"
    cats.mkdir()
    (cats / "sources.yaml").write_text("")
    monkeypatch.setenv("WSEPLAN_CATALOG_DIR", str(cats))
    f = cats / "dated.yaml"
    f.write_text("when: 2024-03-15\nkeys: {1: one}\n")
    first = L.read_yaml(f)
    assert type(first["when"]).__name__ == "date" and 1 in first["keys"]
    assert L.read_yaml(f) == first
    assert not cache.exists() or "dated.yaml" not in json.loads(_cache_file(cache).read_text())
    assert not PC.faithful({"x": float("inf")}) and not PC.faithful((1, 2)) and PC.faithful({"a": [1, 2.5, None, True]})


def test_a_damaged_cache_file_is_replaced(cache):
    p = BUNDLED / "defaults.yaml"
    L.read_yaml(p)
    f = _cache_file(cache)
    f.write_text('{"defaults.yaml": {"sha256": 1, "json": ')
    L._PARSE_CACHE.clear()
    assert L.read_yaml(p) == _fresh(p)
    assert "defaults.yaml" in json.loads(f.read_text())
    f.write_text(json.dumps({"defaults.yaml": {"sha256": PC.digest(p.read_text()), "json": "{not json"}}))
    L._PARSE_CACHE.clear()
    assert L.read_yaml(p) == _fresh(p)


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_unwritable_cache_folder_leaves_the_cache_off(cache):
    cache.mkdir(mode=0o500)
    p = BUNDLED / "defaults.yaml"
    assert L.read_yaml(p) == _fresh(p)
    assert not list(cache.iterdir())


def test_a_cache_folder_that_is_a_file_leaves_the_cache_off(cache):
    cache.write_text("not a folder")
    p = BUNDLED / "defaults.yaml"
    assert L.read_yaml(p) == _fresh(p)
    assert L.read_yaml(p) == _fresh(p)


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("WSEPLAN_CACHE_DIR", "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    L._PARSE_CACHE.clear()
    assert PC.cache_dir() is None
    L.read_yaml(BUNDLED / "defaults.yaml")
    assert list(tmp_path.iterdir()) == []
    L._PARSE_CACHE.clear()


def test_default_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("WSEPLAN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert PC.cache_dir() == tmp_path / "wseplan"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert PC.cache_dir() == tmp_path / ".cache" / "wseplan"


def test_a_start_from_the_cache_does_not_import_yaml(tmp_path):
    """The first `wseplan fit` parses (and imports PyYAML); the next one takes every bundled file from the cache."""
    import subprocess

    code = ("import io, sys, contextlib\nfrom wseplan.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    rc = main(['fit', 'llama-70b', '--target', 'wse3'])\n"
            "print(rc, 'yaml' in sys.modules)")
    env = dict(os.environ, WSEPLAN_CACHE_DIR=str(tmp_path / "c"),
               PYTHONPATH=os.pathsep.join([str(Path(L.__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
    env.pop("WSEPLAN_CATALOG_DIR", None)
    out = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
           for _ in range(2)]
    assert out == [["0", "True"], ["0", "False"]]


def test_parser_id_does_not_import_yaml_and_is_stable():
    import subprocess

    code = "import sys; from wseplan.catalog.parse_cache import parser_id; print(parser_id(), 'yaml' in sys.modules)"
    a = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert a[1] == "False" and a[0] == PC.parser_id() and len(a[0]) == 16


def test_no_home_folder_means_no_cache(monkeypatch):
    monkeypatch.delenv("WSEPLAN_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert PC.cache_dir() is None
    L._PARSE_CACHE.clear()
    p = BUNDLED / "defaults.yaml"
    assert L.read_yaml(p) == _fresh(p)
    L._PARSE_CACHE.clear()
